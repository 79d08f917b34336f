//! Every error a user can cause: an ERROR with the right SQLSTATE, a message naming the bad
//! value, and a hint; never a crash, a panic or a wrong id.

mod common;

use common::*;

/// (statement, SQLSTATE, text the message must contain)
const BAD_CALLS: &[(&str, &str, &str)] = &[
    ("SELECT snowflake_nextval(1024)", "22003", "worker id 1024"),
    ("SELECT snowflake_nextval(-1)", "22003", "worker id -1"),
    (
        "SELECT snowflake_nextval(NULL)",
        "22004",
        "worker id must not be NULL",
    ),
    (
        "SELECT * FROM snowflake_nextval_batch(2000, 5)",
        "22003",
        "worker id 2000",
    ),
    (
        "SELECT * FROM snowflake_nextval_batch(NULL, 5)",
        "22004",
        "worker id must not be NULL",
    ),
    (
        "SELECT * FROM snowflake_nextval_batch(1, 0)",
        "22003",
        "take 0 snowflake ids",
    ),
    (
        "SELECT * FROM snowflake_nextval_batch(1, -7)",
        "22003",
        "take -7 snowflake ids",
    ),
    (
        "SELECT * FROM snowflake_nextval_batch(1, 1000001)",
        "22003",
        "take 1000001 snowflake ids",
    ),
    (
        "SELECT * FROM snowflake_nextval_batch(1, NULL)",
        "22004",
        "n must not be NULL",
    ),
    (
        "SELECT * FROM snowflake_decode(-5)",
        "22023",
        "-5 is not a snowflake id",
    ),
    (
        "SELECT snowflake_timestamp(-1)",
        "22023",
        "-1 is not a snowflake id",
    ),
    (
        "SELECT snowflake_worker(-9223372036854775808)",
        "22023",
        "-9223372036854775808 is not",
    ),
    (
        "SELECT snowflake_sequence(-2)",
        "22023",
        "-2 is not a snowflake id",
    ),
    (
        "SELECT snowflake_compose('2024-12-31 23:59:59.999+00', 1, 0)",
        "22008",
        "2024-12-31 23:59:59.999+00 is before the snowflake epoch",
    ),
    (
        "SELECT snowflake_compose('2094-09-07 15:47:35.552+00', 1, 0)",
        "22008",
        "2094-09-07 15:47:35.552+00 is after the end",
    ),
    (
        "SELECT snowflake_compose('infinity', 1, 0)",
        "22008",
        "infinity is after the end",
    ),
    (
        "SELECT snowflake_compose('2026-01-01', 1024, 0)",
        "22003",
        "worker id 1024",
    ),
    (
        "SELECT snowflake_compose('2026-01-01', 1, 4096)",
        "22003",
        "sequence 4096",
    ),
    (
        "SELECT snowflake_compose('2026-01-01', 1, -1)",
        "22003",
        "sequence -1",
    ),
    (
        "SELECT snowflake_min_id('2020-06-01 00:00+00')",
        "22008",
        "2020-06-01 00:00:00+00 is before",
    ),
    (
        "SELECT snowflake_min_id('-infinity')",
        "22008",
        "-infinity is before",
    ),
    (
        "SELECT snowflake_max_id('2100-01-01 00:00+00')",
        "22008",
        "2100-01-01 00:00:00+00 is after",
    ),
    (
        "SET snowflake.worker_id = 5",
        "55P02",
        "snowflake.worker_id",
    ),
    (
        "SET LOCAL snowflake.max_ahead = 5",
        "55P02",
        "snowflake.max_ahead",
    ),
    ("RESET snowflake.layout", "55P02", "snowflake.layout"),
];

#[test]
fn bad_arguments_raise_clear_errors() {
    let cluster = started("errors", &["snowflake.worker_id=4"]);
    let mut c = cluster.connect();
    c.batch_execute("SET TimeZone = 'UTC'").unwrap();
    let mut locations = std::collections::HashSet::new();
    for &(sql, code, message) in BAD_CALLS {
        let e = error_of(&mut c, sql);
        assert_eq!(e.code, code, "{sql}: {e:?}");
        assert!(
            e.message.contains(message),
            "{sql}: message {:?} lacks {message:?}",
            e.message
        );
        assert!(
            e.hint.as_deref().is_some_and(|h| h.len() > 10),
            "{sql}: no hint: {e:?}"
        );
        locations.insert(e.file.clone());
        // A placeholder left unformatted ("{MAX_BATCH}") is a hint that says nothing.
        assert!(
            !format!("{e:?}").contains("{MAX"),
            "{sql}: a placeholder in the text: {e:?}"
        );
    }
    // Each LOCATION is where its error was raised, not the one function that reports them all.
    assert!(locations.len() >= 3, "the errors' locations: {locations:?}");
    // The session survived all of it and still makes ids of the configured worker.
    let worker: i32 = c.scalar("SELECT snowflake_worker(snowflake_nextval())");
    assert_eq!(worker, 4);
    let log = cluster.log();
    assert!(
        !log.contains("panicked")
            && !log.contains("server process")
            && !log.contains("RUST_BACKTRACE"),
        "the server log shows a panic or a crash:\n{log}"
    );
}

#[test]
fn an_unset_worker_id_is_an_error_not_a_default() {
    let cluster = started("unset", &[]);
    let mut c = cluster.connect();
    let e = error_of(&mut c, "SELECT snowflake_nextval()");
    assert_eq!(e.code, "55000", "{e:?}");
    assert!(
        e.message.contains("snowflake.worker_id is not set"),
        "{e:?}"
    );
    assert!(e
        .hint
        .unwrap()
        .contains("ALTER SYSTEM SET snowflake.worker_id"));
    // Setting it in the configuration and reloading makes it work; a session cannot.
    cluster.set_and_reload("snowflake.worker_id", "12");
    let mut c = cluster.connect();
    let worker: i32 = c.scalar("SELECT snowflake_worker(snowflake_nextval())");
    assert_eq!(worker, 12);
    let e = error_of(&mut c, "SET snowflake.worker_id = 13");
    assert_eq!(e.code, "55P02");
    let e = error_of(&mut c, "ALTER SYSTEM SET snowflake.worker_id = 1024");
    assert_eq!(e.code, "22023", "{e:?}");
}

#[test]
fn without_the_preload_every_generator_says_how_to_fix_it() {
    let cluster = Cluster::new("nopreload", &["shared_preload_libraries="]);
    cluster.start();
    let mut c = cluster.connect();
    c.batch_execute("CREATE EXTENSION snowflake_ext").unwrap();
    for sql in [
        "SELECT snowflake_nextval(1)",
        "SELECT * FROM snowflake_nextval_batch(1, 10)",
        "SELECT * FROM snowflake_stats",
    ] {
        let e = error_of(&mut c, sql);
        assert_eq!(e.code, "55000", "{sql}: {e:?}");
        assert!(
            e.message.contains("shared_preload_libraries"),
            "{sql}: {e:?}"
        );
        assert!(
            e.hint
                .as_deref()
                .unwrap_or("")
                .contains("shared_preload_libraries = 'snowflake_ext'"),
            "{e:?}"
        );
        assert!(!e.message.contains("PgLwLock"), "{e:?}");
    }
    // Decoding needs no shared memory and keeps working.
    let worker: i32 = c
        .query_one(
            "SELECT snowflake_worker(snowflake_compose(now(), 9, 1))",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(worker, 9);
}

/// A statement that waits inside the extension (for a mark the writer cannot write, or for the
/// clock) and is cancelled, by a statement timeout or by `pg_cancel_backend`, ends with
/// PostgreSQL's own 57014 and nothing else: no Rust backtrace in its detail, even with
/// RUST_BACKTRACE set in the server's environment.
#[test]
fn a_cancelled_wait_is_a_plain_57014() {
    let cluster = Cluster::new("cancel", &["snowflake.worker_id=6"]);
    cluster.start_with(&[("RUST_BACKTRACE", "1")]);
    let mut c = cluster.connect();
    c.batch_execute("CREATE EXTENSION snowflake_ext; SELECT snowflake_nextval()")
        .unwrap();
    let check = |e: ErrorParts, what: &str| {
        assert_eq!(e.code, "57014", "{what}: {e:?}");
        assert!(
            e.message.starts_with("canceling statement due to"),
            "{what}: {e:?}"
        );
        let detail = e.detail.unwrap_or_default();
        assert!(
            !detail.contains("pgrx") && !detail.contains("backtrace") && !detail.contains("  0: "),
            "{what}: a backtrace in the detail:\n{detail}"
        );
    };
    // The writer cannot write a mark while another session holds the marks table: a new
    // worker's first id waits for it, up to its limit, unless cancelled first.
    let mut locker = cluster.connect();
    locker
        .batch_execute("BEGIN; LOCK TABLE snowflake_ext_state.marks")
        .unwrap();
    check(
        error_of(
            &mut c,
            "SET statement_timeout = '500ms'; SELECT * FROM snowflake_nextval_batch(7, 10)",
        ),
        "a statement timeout while waiting for a mark",
    );
    c.batch_execute("RESET statement_timeout").unwrap();
    let pid: i32 = c.scalar("SELECT pg_backend_pid()");
    let canceller = {
        let conninfo = cluster.conninfo("postgres");
        std::thread::spawn(move || {
            let mut other = postgres::Client::connect(&conninfo, postgres::NoTls).unwrap();
            wait_until("the session to wait for a mark", PATIENCE, || {
                other
                    .query_one(
                        "SELECT EXISTS (SELECT FROM pg_stat_activity
                                        WHERE pid = $1 AND wait_event_type = 'Extension')",
                        &[&pid],
                    )
                    .unwrap()
                    .get(0)
            });
            other
                .batch_execute(&format!("SELECT pg_cancel_backend({pid})"))
                .unwrap();
        })
    };
    check(
        error_of(&mut c, "SELECT snowflake_nextval(8)"),
        "pg_cancel_backend while waiting for a mark",
    );
    canceller.join().unwrap();
    locker.batch_execute("ROLLBACK").unwrap();
    // Waiting for the clock: batches past snowflake.max_ahead.
    check(
        error_of(
            &mut c,
            "SET statement_timeout = '500ms';
             SELECT count(*) FROM generate_series(1, 100) g, LATERAL snowflake_nextval_batch(1000000) x",
        ),
        "a statement timeout while waiting for the clock",
    );
    let log = cluster.log();
    assert!(
        !log.contains("pgrx_pg_sys") && !log.contains("panicked"),
        "a backtrace in the server log:\n{log}"
    );
}

/// Guarding a table the first time says what it did and nothing else (no NOTICE of a trigger
/// that did not exist), and a refusal's hint names the caller's table.
#[test]
fn guarding_a_table_sends_no_notice_and_hints_name_the_table() {
    let cluster = started("guard-quiet", &["snowflake.worker_id=4"]);
    let notices = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let seen = notices.clone();
    let mut c = cluster
        .conninfo("postgres")
        .parse::<postgres::Config>()
        .unwrap()
        .notice_callback(move |n| seen.lock().unwrap().push(n.message().to_string()))
        .connect(postgres::NoTls)
        .unwrap();
    c.batch_execute(
        "CREATE TABLE arrivals (id bigint PRIMARY KEY DEFAULT snowflake_nextval(), v int);
         CREATE TABLE two_ids (a bigint DEFAULT snowflake_nextval(), b bigint DEFAULT snowflake_nextval(4))",
    )
    .unwrap();
    let said: String = c.scalar("SELECT snowflake_guard('arrivals')");
    assert!(said.contains("arrivals is guarded"), "{said}");
    let said: String = c.scalar("SELECT snowflake_guard('arrivals')");
    assert!(said.contains("arrivals is guarded"), "{said}");
    let said: String = c.scalar("SELECT snowflake_unguard('two_ids')");
    assert!(said.contains("was not guarded"), "{said}");
    assert_eq!(*notices.lock().unwrap(), Vec::<String>::new());
    let e = error_of(&mut c, "SELECT snowflake_guard('two_ids')");
    assert_eq!(e.code, "42702", "{e:?}");
    assert!(e.hint.unwrap_or_default().contains("two_ids"));
}

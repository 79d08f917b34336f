//! Ids for past times (`snowflake_nextval_at`, docs/past-ids.md): unique among committed
//! transactions by construction, across sessions, crashes and a promotion; a rollback gives
//! its ids back; the live worker untouched; every refusal's SQLSTATE; the grant; the batch form;
//! a worker-first layout; and the recipe of docs/past-ids.md run as written.

mod common;

use common::*;
use postgres::Client;

/// The worker ids of these servers: live, and reserved for past times.
const LIVE: &str = "snowflake.worker_id=1";
const PAST: &str = "snowflake.past_worker_id=1000";

/// A time in the past, as SQL.
const TS: &str = "timestamptz '2025-06-01 12:34:56.789+00'";

fn server(name: &str, extra: &[&str]) -> Cluster {
    let mut settings = vec![LIVE, PAST];
    settings.extend_from_slice(extra);
    started(name, &settings)
}

/// `(ts as text in UTC, worker, seq)` of an id, in the server's layout.
fn decoded(c: &mut Client, id: i64) -> (String, i32, i32) {
    let row = c
        .query_one(
            "SELECT to_char(ts AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.MS'), worker, seq \
             FROM snowflake_decode($1)",
            &[&id],
        )
        .unwrap();
    (row.get(0), row.get(1), row.get(2))
}

fn at(c: &mut Client, ts: &str) -> i64 {
    c.scalar(&format!("SELECT snowflake_nextval_at({ts})"))
}

#[test]
fn an_id_for_a_past_time_decodes_to_that_millisecond_with_the_past_worker_id() {
    let cluster = server("past-decodes", &[]);
    let mut c = cluster.connect();
    let first = at(&mut c, TS);
    // An untyped literal too: the batch form has a name of its own.
    let second = at(&mut c, "'2025-06-01 12:34:56.789+00'");
    assert_eq!(
        decoded(&mut c, first),
        ("2025-06-01 12:34:56.789".to_string(), 1000, 0)
    );
    assert_eq!(
        decoded(&mut c, second),
        ("2025-06-01 12:34:56.789".to_string(), 1000, 1)
    );
}

#[test]
fn many_sessions_minting_for_one_millisecond_never_repeat() {
    let cluster = server("past-sessions", &[]);
    let ids = ids_at_once(
        &cluster.conninfo("postgres"),
        8,
        &format!("SELECT snowflake_nextval_at({TS}) FROM generate_series(1, 50)"),
    );
    assert_eq!(ids.len(), 400);
    assert_no_duplicates(&ids);
    let mut c = cluster.connect();
    let mut seqs: Vec<i32> = ids.iter().map(|&id| decoded(&mut c, id).2).collect();
    seqs.sort();
    assert_eq!(seqs, (0..400).collect::<Vec<i32>>());
}

#[test]
fn committed_ids_are_never_minted_again_after_kill_9_of_the_postmaster() {
    let cluster = server("past-kill9", &[]);
    let before = ids(
        &mut cluster.connect(),
        &format!("SELECT snowflake_nextval_at({TS}) FROM generate_series(1, 10)"),
    );
    cluster.kill_postmaster();
    cluster.start();
    let mut c = cluster.connect();
    let after = ids(
        &mut c,
        &format!("SELECT snowflake_nextval_at({TS}) FROM generate_series(1, 10)"),
    );
    assert!(
        after.iter().min() > before.iter().max(),
        "{before:?} {after:?}"
    );
    assert_eq!(decoded(&mut c, after[0]).2, 10);
}

#[test]
fn a_rolled_back_transactions_ids_are_given_again() {
    let cluster = server("past-rollback", &[]);
    let mut c = cluster.connect();
    c.batch_execute("BEGIN").unwrap();
    let undone = ids(
        &mut c,
        &format!("SELECT snowflake_nextval_at({TS}) FROM generate_series(1, 3)"),
    );
    c.batch_execute("ROLLBACK").unwrap();
    let again = ids(
        &mut c,
        &format!("SELECT snowflake_nextval_at({TS}) FROM generate_series(1, 3)"),
    );
    assert_eq!(undone, again);
}

#[test]
fn the_live_worker_and_the_marks_are_untouched() {
    let cluster = server("past-live", &[]);
    let mut c = cluster.connect();
    let live_before: i64 = c.scalar("SELECT snowflake_nextval()");
    let marks_before: String = c.scalar(
        "SELECT string_agg(worker::text, ',' ORDER BY worker) FROM snowflake_ext_state.marks",
    );
    ids(
        &mut c,
        "SELECT snowflake_nextval_at(now() - interval '1 second') FROM generate_series(1, 100)",
    );
    let marks_after: String = c.scalar(
        "SELECT string_agg(worker::text, ',' ORDER BY worker) FROM snowflake_ext_state.marks",
    );
    assert_eq!(marks_before, "1");
    assert_eq!(marks_after, "1");
    let issued: i64 = c.scalar("SELECT issued FROM snowflake_stats WHERE worker = 1");
    assert_eq!(issued, 1);
    let past_issued: i64 = c
        .scalar("SELECT coalesce(sum(issued), 0)::bigint FROM snowflake_stats WHERE worker = 1000");
    assert_eq!(past_issued, 0);
    let live_after: i64 = c.scalar("SELECT snowflake_nextval()");
    assert!(live_after > live_before);
    assert_eq!(worker_of(live_after), 1);
}

#[test]
fn unset_past_worker_id_is_refused_with_55000() {
    let cluster = started("past-unset", &[LIVE]);
    let e = error_of(
        &mut cluster.connect(),
        &format!("SELECT snowflake_nextval_at({TS})"),
    );
    assert_eq!(e.code, "55000", "{e:?}");
    assert!(e.hint.is_some());
}

#[test]
fn the_live_worker_id_as_past_worker_id_is_refused_with_55000() {
    let cluster = started("past-is-live", &[LIVE, "snowflake.past_worker_id=1"]);
    let e = error_of(
        &mut cluster.connect(),
        &format!("SELECT snowflake_nextval_at({TS})"),
    );
    assert_eq!(e.code, "55000", "{e:?}");
    assert!(e.message.contains("= 1 "), "{e:?}");
}

#[test]
fn a_past_worker_id_inside_the_lease_range_is_refused_with_55000_and_outside_it_mints() {
    let registry = registry("past-registry");
    let cluster = leasing_server(
        "past-leasing",
        &registry,
        &[PAST, "snowflake.worker_range=1000-1001"],
    );
    let e = error_of(
        &mut cluster.connect(),
        &format!("SELECT snowflake_nextval_at({TS})"),
    );
    assert_eq!(e.code, "55000", "{e:?}");
    assert!(e.message.contains("worker_range"), "{e:?}");
    cluster.set_and_reload("snowflake.worker_range", "0-99");
    let mut c = cluster.connect();
    let id = at(&mut c, TS);
    assert_eq!(decoded(&mut c, id).1, 1000);
}

#[test]
fn a_past_worker_id_with_live_ids_is_refused_with_55000() {
    let cluster = server("past-had-live", &[]);
    let mut c = cluster.connect();
    c.scalar::<i64>("SELECT snowflake_nextval(900)");
    cluster.set_and_reload("snowflake.past_worker_id", "900");
    let e = error_of(
        &mut cluster.connect(),
        &format!("SELECT snowflake_nextval_at({TS})"),
    );
    assert_eq!(e.code, "55000", "{e:?}");
    assert!(e.message.contains("900"), "{e:?}");
}

#[test]
fn another_database_than_the_marks_one_is_refused_with_0a000() {
    let cluster = server("past-other-db", &[]);
    cluster
        .connect()
        .batch_execute("CREATE DATABASE other")
        .unwrap();
    let mut other = cluster.connect_to("other");
    other
        .batch_execute("CREATE EXTENSION snowflake_ext")
        .unwrap();
    let e = error_of(&mut other, &format!("SELECT snowflake_nextval_at({TS})"));
    assert_eq!(e.code, "0A000", "{e:?}");
    assert!(e.hint.unwrap().contains("\"postgres\""));
}

#[test]
fn a_millisecond_with_no_room_left_is_refused_with_54000_and_keeps_its_record() {
    let cluster = server("past-no-room", &[]);
    let mut c = cluster.connect();
    let e = error_of(
        &mut c,
        &format!("SELECT snowflake_nextval_at_batch(array_fill({TS}::timestamptz, ARRAY[4097]))"),
    );
    assert_eq!(e.code, "54000", "{e:?}");
    let all: Vec<Option<i64>> = c
        .query_one(
            &format!(
                "SELECT snowflake_nextval_at_batch(array_fill({TS}::timestamptz, ARRAY[4096]))"
            ),
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(all.len(), 4096);
    let e = error_of(&mut c, &format!("SELECT snowflake_nextval_at({TS})"));
    assert_eq!(e.code, "54000", "{e:?}");
    assert!(e.message.contains("4096 of 4096"), "{e:?}");
    // The next millisecond has its own room.
    at(&mut c, "timestamptz '2025-06-01 12:34:56.790+00'");
}

#[test]
fn a_time_outside_the_layout_is_refused_as_compose_refuses_it() {
    let cluster = server("past-outside", &[]);
    let mut c = cluster.connect();
    let ours = error_of(
        &mut c,
        "SELECT snowflake_nextval_at(timestamptz '2020-01-01+00')",
    );
    let compose = error_of(&mut c, "SELECT snowflake_compose('2020-01-01+00', 0, 0)");
    assert_eq!(ours.code, compose.code, "{ours:?}");
    assert_eq!(ours.code, "22008");
}

#[test]
fn a_time_later_than_now_is_refused_with_22023() {
    let cluster = server("past-future", &[]);
    let mut c = cluster.connect();
    for sql in [
        "SELECT snowflake_nextval_at(now() + interval '1 second')",
        "SELECT snowflake_nextval_at_batch(ARRAY[now() - interval '1 s', now() + interval '1 day'])",
    ] {
        assert_eq!(error_of(&mut c, sql).code, "22023", "{sql}");
    }
    let used: i64 = c.scalar("SELECT count(*) FROM snowflake_past_use");
    assert_eq!(used, 0);
}

#[test]
fn a_subtransaction_is_refused_with_25001_and_gives_back_no_id_its_transaction_keeps() {
    let cluster = server("past-subtransaction", &[]);
    let mut c = cluster.connect();
    let e = error_of(
        &mut c,
        &format!("BEGIN; SAVEPOINT s; SELECT snowflake_nextval_at({TS})"),
    );
    assert_eq!(e.code, "25001", "{e:?}");
    c.batch_execute("ROLLBACK").unwrap();
    // An exception block is a subtransaction too: the id it would have given back is never
    // taken, and the row its transaction commits carries the only one.
    c.batch_execute("CREATE TABLE t (id bigint)").unwrap();
    let e = error_of(
        &mut c,
        &format!(
            "DO $$ DECLARE x bigint; BEGIN
                 BEGIN x := snowflake_nextval_at({TS}); RAISE EXCEPTION 'oops';
                 EXCEPTION WHEN raise_exception THEN NULL; END;
                 INSERT INTO t VALUES (x);
             END $$"
        ),
    );
    assert_eq!(e.code, "25001", "{e:?}");
    let id = at(&mut c, TS);
    assert_eq!(decoded(&mut c, id).2, 0);
}

#[test]
fn a_batch_of_more_times_than_a_batch_takes_is_refused_with_54000() {
    let cluster = server("past-batch-limit", &[]);
    let e = error_of(
        &mut cluster.connect(),
        &format!("SELECT snowflake_nextval_at_batch(array_fill({TS}, ARRAY[1000001]))"),
    );
    assert_eq!(e.code, "54000", "{e:?}");
}

#[test]
fn a_worker_id_reloaded_to_the_past_one_mints_no_live_id() {
    let cluster = server("past-reloaded", &[]);
    cluster.set_and_reload("snowflake.worker_id", "1000");
    let mut c = cluster.connect();
    let e = error_of(&mut c, "SELECT snowflake_nextval()");
    assert_eq!(e.code, "55000", "{e:?}");
    let issued: i64 =
        c.scalar("SELECT coalesce(sum(issued), 0)::int8 FROM snowflake_stats WHERE worker = 1000");
    assert_eq!(issued, 0);
}

#[test]
fn a_read_only_transaction_is_refused_with_25006() {
    let cluster = server("past-read-only", &[]);
    let e = error_of(
        &mut cluster.connect(),
        &format!("BEGIN READ ONLY; SELECT snowflake_nextval_at({TS})"),
    );
    assert_eq!(e.code, "25006", "{e:?}");
}

#[test]
fn execute_is_refused_to_public_and_works_once_granted() {
    let cluster = server("past-grant", &[]);
    let mut admin = cluster.connect();
    admin.batch_execute("CREATE ROLE app LOGIN").unwrap();
    let mut app = connect_as(&cluster, "postgres", "app");
    let e = error_of(&mut app, &format!("SELECT snowflake_nextval_at({TS})"));
    assert_eq!(e.code, "42501", "{e:?}");
    // The record is readable by all (so that any role can dump the database), not writable.
    let e = error_of(
        &mut app,
        "UPDATE snowflake_past_use SET used = 1; INSERT INTO snowflake_past_use VALUES (1000, 1, 1)",
    );
    assert_eq!(e.code, "42501", "{e:?}");
    admin
        .batch_execute(
            "GRANT EXECUTE ON FUNCTION snowflake_nextval_at(timestamptz) TO app;
             GRANT EXECUTE ON FUNCTION snowflake_nextval_at_batch(timestamptz[]) TO app;",
        )
        .unwrap();
    let id = at(&mut app, TS);
    assert_eq!(decoded(&mut app, id).1, 1000);
    let batch: Vec<Option<i64>> = app
        .query_one(
            &format!("SELECT snowflake_nextval_at_batch(ARRAY[{TS}]::timestamptz[])"),
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(batch.len(), 1);
    // Still no way to write the record but through the functions.
    let e = error_of(&mut app, "DELETE FROM snowflake_past_use");
    assert_eq!(e.code, "42501", "{e:?}");
    let used: i64 = app.scalar("SELECT sum(used)::int8 FROM snowflake_past_use");
    assert_eq!(used, 2);
}

#[test]
fn a_dump_restored_into_a_new_server_continues_above_the_ids_for_past_times_it_carries() {
    let cluster = server("past-dump", &[]);
    let before = ids(
        &mut cluster.connect(),
        &format!("SELECT snowflake_nextval_at({TS}) FROM generate_series(1, 10)"),
    );
    let dump = cluster.pg_dump(&["-Fc", "postgres"]);
    // A new server, with the same settings, whose marks database is restored from the dump.
    let copy = Cluster::new("past-dump-copy", &[LIVE, PAST]);
    copy.start();
    copy.pg_restore("postgres", &dump);
    let mut c = copy.connect();
    let after = ids(
        &mut c,
        &format!("SELECT snowflake_nextval_at({TS}) FROM generate_series(1, 10)"),
    );
    assert!(
        after.iter().min() > before.iter().max(),
        "{before:?} {after:?}"
    );
    assert_eq!(decoded(&mut c, after[0]).2, 10);
}

#[test]
fn a_record_made_again_by_drop_and_create_extension_is_refused_with_55000_until_another_worker_id()
{
    let cluster = server("past-anchor", &[]);
    let mut c = cluster.connect();
    let first = at(&mut c, TS);
    // The data directory says which database and table hold worker 1000's record.
    let file = cluster.dir.join("snowflake_ext.past_record.1000");
    let then = std::fs::read_to_string(&file).unwrap();
    let record: String = c.scalar(
        "SELECT (SELECT oid FROM pg_database WHERE datname = current_database())::text || ' ' \
         || 'snowflake_past_use'::regclass::oid::text",
    );
    assert_eq!(then.trim(), record);
    // The extension dropped and created again: a fresh record, which does not know `first`.
    c.batch_execute("DROP EXTENSION snowflake_ext; CREATE EXTENSION snowflake_ext")
        .unwrap();
    let e = error_of(&mut c, &format!("SELECT snowflake_nextval_at({TS})"));
    assert_eq!(e.code, "55000", "{e:?}");
    let used: i64 = c.scalar("SELECT count(*) FROM snowflake_past_use");
    assert_eq!(used, 0);
    // The way out: another worker id reserved for past times.
    cluster.set_and_reload("snowflake.past_worker_id", "1001");
    let mut c = cluster.connect();
    let id = at(&mut c, TS);
    assert_ne!(id, first);
    assert_eq!(decoded(&mut c, id).1, 1001);
}

#[test]
fn the_past_worker_id_passed_to_snowflake_nextval_is_refused_with_55000() {
    let cluster = server("past-explicit", &[]);
    let mut c = cluster.connect();
    for sql in [
        "SELECT snowflake_nextval(1000)",
        "SELECT * FROM snowflake_nextval_batch(1000, 10)",
    ] {
        let e = error_of(&mut c, sql);
        assert_eq!(e.code, "55000", "{sql}: {e:?}");
    }
    let issued: i64 =
        c.scalar("SELECT coalesce(sum(issued), 0)::int8 FROM snowflake_stats WHERE worker = 1000");
    assert_eq!(issued, 0);
    // And the past worker id still mints ids for past times.
    let id = at(&mut c, TS);
    assert_eq!(decoded(&mut c, id).1, 1000);
}

#[test]
fn a_standby_refuses_with_25006_and_promoted_continues_without_repeating() {
    let primary = server("past-primary", &[]);
    let before = ids(
        &mut primary.connect(),
        &format!("SELECT snowflake_nextval_at({TS}) FROM generate_series(1, 5)"),
    );
    let standby = Cluster::standby_of(&primary, "past-standby", &[]);
    standby.start();
    standby.wait_caught_up(&primary);
    let e = error_of(
        &mut standby.connect(),
        &format!("SELECT snowflake_nextval_at({TS})"),
    );
    assert_eq!(e.code, "25006", "{e:?}");
    primary.stop();
    standby.promote();
    wait_until("the standby to be promoted", PATIENCE, || {
        !standby.in_recovery()
    });
    let after = ids(
        &mut standby.connect(),
        &format!("SELECT snowflake_nextval_at({TS}) FROM generate_series(1, 5)"),
    );
    assert!(
        after.iter().min() > before.iter().max(),
        "{before:?} {after:?}"
    );
}

#[test]
fn marks_in_doubt_refuse_with_55000_and_once_restored_ids_continue_above() {
    let cluster = server("past-in-doubt", &[]);
    let mut c = cluster.connect();
    let live: i64 = c.scalar("SELECT snowflake_nextval()");
    let before = ids(
        &mut c,
        &format!("SELECT snowflake_nextval_at({TS}) FROM generate_series(1, 5)"),
    );
    // The marks dropped, then a crash before the writer could write them again.
    c.batch_execute("DROP SCHEMA snowflake_ext_state CASCADE")
        .unwrap();
    cluster.kill_postmaster();
    cluster.start();
    let mut c = cluster.connect();
    wait_until("the marks to be in doubt", PATIENCE, || {
        c.scalar::<String>("SELECT state FROM snowflake_status()") == "in doubt"
    });
    let e = error_of(&mut c, &format!("SELECT snowflake_nextval_at({TS})"));
    assert_eq!(e.code, "55000", "{e:?}");
    // Restoring every worker's marks (the past worker's slot too) lets it mint again.
    c.query_one("SELECT snowflake_restore_mark($1::bigint)", &[&live])
        .unwrap();
    let after = at(&mut c, TS);
    assert!(after > *before.iter().max().unwrap());
    assert_eq!(decoded(&mut c, after).2, 5);
}

#[test]
fn the_batch_form_gives_ids_in_the_arrays_order_as_single_calls_would() {
    let cluster = server("past-batch", &[]);
    let mut c = cluster.connect();
    let (a, b) = (
        "timestamptz '2025-06-01 00:00:00.001+00'",
        "timestamptz '2025-06-01 00:00:00.002+00'",
    );
    let batch: Vec<Option<i64>> = c
        .query_one(
            &format!(
                "SELECT snowflake_nextval_at_batch(ARRAY[{b}, {a}, {b}, NULL, {a}, {b}]::timestamptz[])"
            ),
            &[],
        )
        .unwrap()
        .get(0);
    let expected = |c: &mut Client, ts: &str, seq: i32| -> i64 {
        c.scalar(&format!("SELECT snowflake_compose({ts}, 1000, {seq})"))
    };
    let want = vec![
        Some(expected(&mut c, b, 0)),
        Some(expected(&mut c, a, 0)),
        Some(expected(&mut c, b, 1)),
        None,
        Some(expected(&mut c, a, 1)),
        Some(expected(&mut c, b, 2)),
    ];
    assert_eq!(batch, want);
    // Single calls continue where the batch stopped.
    assert_eq!(at(&mut c, a), expected(&mut c, a, 2));
    assert_eq!(at(&mut c, b), expected(&mut c, b, 3));
}

#[test]
fn a_worker_first_layout_mints_ids_for_past_times() {
    let cluster = server("past-seata", &["snowflake.layout=seata"]);
    let mut c = cluster.connect();
    let first = at(&mut c, TS);
    let second = at(&mut c, TS);
    assert_eq!(
        decoded(&mut c, first),
        ("2025-06-01 12:34:56.789".to_string(), 1000, 0)
    );
    assert_eq!(second, first + 1);
    // Worker first: above every live id of worker 1.
    let live: i64 = c.scalar("SELECT snowflake_nextval()");
    assert!(first > live);
}

#[test]
fn sonyflake_ids_for_past_times_carry_the_time_to_its_10_ms_unit() {
    let cluster = server("past-sonyflake", &["snowflake.layout=sonyflake"]);
    let mut c = cluster.connect();
    let id = at(&mut c, TS);
    assert_eq!(
        decoded(&mut c, id),
        ("2025-06-01 12:34:56.780".to_string(), 1000, 0)
    );
    let e = error_of(
        &mut c,
        &format!("SELECT snowflake_nextval_at_batch(array_fill({TS}::timestamptz, ARRAY[256]))"),
    );
    assert_eq!(e.code, "54000", "{e:?}");
}

/// The SQL blocks of docs/past-ids.md that follow the line `<!-- tests/past_ids.rs runs this -->`,
/// in order.
fn recipe_blocks() -> Vec<String> {
    let page = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/past-ids.md"),
    )
    .unwrap();
    let mut blocks = Vec::new();
    let mut lines = page.lines();
    while let Some(line) = lines.next() {
        if line.trim() == "<!-- tests/past_ids.rs runs this -->" {
            assert_eq!(lines.next().map(str::trim), Some("```sql"));
            let block: Vec<&str> = lines.by_ref().take_while(|l| l.trim() != "```").collect();
            blocks.push(block.join("\n"));
        }
    }
    assert!(!blocks.is_empty());
    blocks
}

#[test]
fn the_recipe_gives_an_existing_tables_rows_ids_by_created_at_and_keeps_its_foreign_keys() {
    let cluster = server("past-recipe", &[]);
    let mut c = cluster.connect();
    for block in recipe_blocks() {
        c.batch_execute(&block)
            .unwrap_or_else(|e| panic!("{block}\n{e:?}"));
    }
    // Every order has an id of its created_at, with the past worker; none twice; every line
    // follows its order; new orders get live ids.
    let wrong: i64 = c.scalar(
        "SELECT count(*) FROM orders \
         WHERE snowflake_worker(id) <> 1000 \
            OR date_trunc('milliseconds', snowflake_timestamp(id)) <> date_trunc('milliseconds', created_at)",
    );
    assert_eq!(wrong, 0);
    let (orders, lines, joined): (i64, i64, i64) = {
        let row = c
            .query_one(
                "SELECT (SELECT count(*) FROM orders), (SELECT count(*) FROM order_lines), \
                        (SELECT count(*) FROM order_lines l JOIN orders o ON o.id = l.order_id \
                          WHERE o.note = l.note)",
                &[],
            )
            .unwrap();
        (row.get(0), row.get(1), row.get(2))
    };
    assert_eq!((orders, lines, joined), (1000, 3000, 3000));
    let e = error_of(
        &mut c,
        "INSERT INTO order_lines (order_id, note) VALUES (1, 'x')",
    );
    assert_eq!(e.code, "23503", "{e:?}");
    let new: i64 =
        c.scalar("INSERT INTO orders (created_at, note) VALUES (now(), 'new') RETURNING id");
    assert_eq!(worker_of(new), 1);
}

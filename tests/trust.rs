//! Nothing outside the mark writer's hands can weaken the marks: objects another role planted
//! in the marks schema are never loaded or written (and their trigger never runs as the
//! writer); a table changed by hand while the server runs is written again from memory, or,
//! when someone else could now change it, refused until that is undone; a table emptied,
//! edited or replaced by an older copy while the server was down is in doubt; database and
//! role defaults do not reach the writer's session; eight superusers asking the writer at once
//! each get their own answer. Real servers, the owner of the marks database an ordinary role.

mod common;

use common::*;
use postgres::{Client, NoTls};

/// The marks objects as the mark writer creates them, made here by someone else.
const MARKS_DDL: &str = "
CREATE SCHEMA snowflake_ext_state;
CREATE TABLE snowflake_ext_state.meta (
  one boolean PRIMARY KEY DEFAULT true CHECK (one), format integer NOT NULL, layout text NOT NULL,
  token bigint NOT NULL, generation bigint NOT NULL DEFAULT 0, digest bigint NOT NULL DEFAULT 0,
  created_at timestamptz NOT NULL DEFAULT now());
CREATE TABLE snowflake_ext_state.marks (
  worker integer PRIMARY KEY, mark bigint NOT NULL, jump_base bigint, jump_from bigint,
  reserved_from bigint, reserved_to bigint, updated_at timestamptz NOT NULL DEFAULT now());
";

/// The default layout, as the marks table's header records it.
const LAYOUT: &str =
    "epoch=1735689600000 unit=1ms time=41 worker=10 sequence=12 order=time-worker-sequence";

/// A session that ignores the defaults the tests give the marks database and the bootstrap
/// superuser: it runs as `user`, read-write, without timeouts.
fn session(cluster: &Cluster, db: &str, user: &str) -> Client {
    // transaction_timeout exists from PostgreSQL 17 on; naming it before would be refused.
    let version: i32 = cluster
        .connect()
        .scalar("SELECT current_setting('server_version_num')::int");
    let transaction_timeout = if version >= 170_000 {
        " -c transaction_timeout=0"
    } else {
        ""
    };
    let conninfo = format!(
        "host=127.0.0.1 port={} user={user} dbname={db} connect_timeout=10 \
         options='-c session_authorization={user} -c role=none -c default_transaction_read_only=off \
         -c statement_timeout=0 -c lock_timeout=0 -c idle_session_timeout=0 \
         -c idle_in_transaction_session_timeout=0 -c exit_on_error=off{transaction_timeout}'",
        cluster.port
    );
    wait_for("a connection", PATIENCE, || {
        Client::connect(&conninfo, NoTls).ok()
    })
}

fn state(c: &mut Client) -> String {
    c.scalar("SELECT state FROM snowflake_status()")
}

fn wait_for_state(c: &mut Client, wanted: &str) {
    wait_until(&format!("the marks to be {wanted}"), PATIENCE, || {
        state(c) == wanted
    });
}

/// A server whose marks database is `app`, owned by the ordinary role `app`; the extension is
/// created in `postgres`, where the tests mint. Returned stopped.
fn server_with_app_database(name: &str) -> Cluster {
    let mut cluster = Cluster::new(name, &["snowflake.worker_id=1", "snowflake.database=app"]);
    cluster.use_faketime();
    cluster.start();
    let mut c = cluster.connect();
    for sql in [
        "CREATE ROLE app LOGIN",
        "CREATE DATABASE app OWNER app",
        "CREATE EXTENSION snowflake_ext",
    ] {
        c.batch_execute(sql).unwrap();
    }
    // Stopped, so that the next start finds the database at once (the writer backs off after
    // failing to connect).
    cluster.stop();
    cluster
}

#[test]
fn marks_planted_by_the_owner_of_the_marks_database_are_never_loaded_or_written() {
    let cluster = server_with_app_database("trust-planted");
    cluster.start();
    // Before the first id, the owner of the marks database plants the marks schema: an old
    // mark for worker 1, and a trigger that would make it superuser if the writer (the
    // bootstrap superuser) ever wrote the table.
    let old_mark = ((unix_ms_now() - 3_600_000 - EPOCH_UNIX_MS) << 22) | (1 << 12);
    let mut app = session(&cluster, "app", "app");
    app.batch_execute(&format!(
        "{MARKS_DDL}
         INSERT INTO snowflake_ext_state.meta (format, layout, token) VALUES (2, '{LAYOUT}', 42);
         INSERT INTO snowflake_ext_state.marks (worker, mark) VALUES (1, {old_mark});
         CREATE FUNCTION snowflake_ext_state.promote() RETURNS trigger LANGUAGE plpgsql
           AS $$ BEGIN EXECUTE 'ALTER ROLE app SUPERUSER'; RETURN NEW; END $$;
         CREATE TRIGGER promote BEFORE INSERT OR UPDATE ON snowflake_ext_state.marks
           FOR EACH ROW EXECUTE FUNCTION snowflake_ext_state.promote();
         CREATE TRIGGER promote BEFORE INSERT OR UPDATE ON snowflake_ext_state.meta
           FOR EACH ROW EXECUTE FUNCTION snowflake_ext_state.promote();"
    ))
    .unwrap();
    cluster.stop();
    cluster.set_clock_offset(-3600);
    cluster.start();

    let mut c = cluster.connect();
    let mut app = session(&cluster, "app", "app");
    wait_for_state(&mut c, "in doubt");
    for sql in [
        "SELECT snowflake_nextval()",
        "SELECT snowflake_nextval(2)",
        "SELECT snowflake_restore_mark(1::bigint)",
    ] {
        let e = error_of(&mut c, sql);
        assert_eq!(e.code, "55000", "{sql}: {e:?}");
        for named in [
            "the schema snowflake_ext_state is owned by app",
            "snowflake_ext_state.marks is owned by app",
            "has the trigger promote, which runs snowflake_ext_state.promote() (owned by app)",
        ] {
            assert!(e.message.contains(named), "{sql}: {e:?}");
        }
        assert!(
            e.hint
                .as_deref()
                .unwrap_or("")
                .contains("DROP SCHEMA snowflake_ext_state CASCADE"),
            "{sql}: {e:?}"
        );
    }
    let detail: String = c.scalar("SELECT detail FROM snowflake_status()");
    assert!(detail.contains("owned by app"), "{detail}");
    // Never written: the role is no superuser and its rows are as it left them.
    let superuser: bool = c.scalar("SELECT rolsuper FROM pg_roles WHERE rolname = 'app'");
    assert!(!superuser, "the planted trigger ran as the mark writer");
    let (rows, mark, token): (i64, i64, i64) = {
        let r = app
            .query_one(
                "SELECT (SELECT count(*) FROM snowflake_ext_state.marks),
                        (SELECT max(mark) FROM snowflake_ext_state.marks),
                        (SELECT token FROM snowflake_ext_state.meta)",
                &[],
            )
            .unwrap();
        (r.get(0), r.get(1), r.get(2))
    };
    assert_eq!((rows, mark, token), (1, old_mark, 42));

    // The way out the hint gives: a superuser drops the schema. This server never minted, so
    // it starts afresh, in a schema of its own.
    session(&cluster, "app", "postgres")
        .batch_execute("DROP SCHEMA snowflake_ext_state CASCADE")
        .unwrap();
    wait_for_state(&mut c, "ready");
    let ids = ids(
        &mut c,
        "SELECT snowflake_nextval() FROM generate_series(1, 1000)",
    );
    assert_strictly_increasing(&ids);
    let owners: Vec<String> = session(&cluster, "app", "postgres")
        .query(
            "SELECT n.nspowner::regrole::text FROM pg_namespace n WHERE n.nspname = 'snowflake_ext_state'
             UNION ALL
             SELECT c.relowner::regrole::text FROM pg_class c
              WHERE c.relnamespace = 'snowflake_ext_state'::regnamespace AND c.relkind = 'r'",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(owners, vec!["postgres"; 3], "{owners:?}");
}

#[test]
fn database_and_role_defaults_do_not_reach_the_mark_writer() {
    let cluster = server_with_app_database("trust-defaults");
    cluster.start();
    // The owner of the marks database sets what it may; a careless superuser sets the rest on
    // the bootstrap superuser itself.
    let mut app = session(&cluster, "postgres", "app");
    for setting in [
        "role = app",
        "session_authorization = app",
        "exit_on_error = on",
        "default_transaction_read_only = on",
        "default_transaction_isolation = serializable",
        "default_transaction_deferrable = on",
        "statement_timeout = 1",
        "lock_timeout = 1",
        "idle_in_transaction_session_timeout = 1",
        "idle_session_timeout = 1",
        "synchronous_commit = off",
        "row_security = off",
        "search_path = public",
        "default_tablespace = pg_default",
        "check_function_bodies = off",
    ] {
        app.batch_execute(&format!("ALTER DATABASE app SET {setting}"))
            .unwrap_or_else(|e| panic!("{setting}: {e}"));
    }
    let version: i32 = app.scalar("SELECT current_setting('server_version_num')::int");
    if version >= 170_000 {
        app.batch_execute("ALTER DATABASE app SET transaction_timeout = 1")
            .unwrap();
    }
    app.batch_execute("ALTER DATABASE app ALLOW_CONNECTIONS false")
        .unwrap();
    session(&cluster, "postgres", "postgres")
        .batch_execute(
            "ALTER ROLE postgres IN DATABASE app SET session_replication_role = replica;
             ALTER ROLE postgres SET lock_timeout = 1;",
        )
        .unwrap();
    cluster.stop();
    cluster.start();

    // A serializable read-write transaction stays open while the writer starts again: under
    // the database's defaults (serializable, deferrable, read-only) its first transaction
    // would wait for a safe snapshot as long as this one stays open.
    let mut holder = session(&cluster, "postgres", "postgres");
    holder
        .batch_execute("BEGIN ISOLATION LEVEL SERIALIZABLE READ WRITE; SELECT 1")
        .unwrap();
    let mut c = session(&cluster, "postgres", "postgres");
    c.batch_execute(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE backend_type = 'snowflake_ext mark writer'",
    )
    .unwrap();
    // Minting needs the writer to create its schema and commit marks in that database.
    let ids = ids(
        &mut c,
        "SELECT snowflake_nextval() FROM generate_series(1, 20000)",
    );
    assert_strictly_increasing(&ids);
    assert_eq!(state(&mut c), "ready");
    holder.batch_execute("COMMIT").unwrap();
    let writer_runs: bool = c
        .scalar("SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'snowflake_ext mark writer'");
    assert!(writer_runs, "{}", cluster.log());
    c.batch_execute("ALTER DATABASE app ALLOW_CONNECTIONS true")
        .unwrap();
    let mut marks = session(&cluster, "app", "postgres");
    let (owners, triggers, rows): (Vec<String>, i64, i64) = {
        let owners = marks
            .query(
                "SELECT n.nspowner::regrole::text FROM pg_namespace n WHERE n.nspname = 'snowflake_ext_state'
                 UNION ALL
                 SELECT c.relowner::regrole::text FROM pg_class c
                  WHERE c.relnamespace = 'snowflake_ext_state'::regnamespace AND c.relkind = 'r'",
                &[],
            )
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
        let r = marks
            .query_one(
                "SELECT (SELECT count(*) FROM pg_trigger t
                          WHERE t.tgrelid = 'snowflake_ext_state.marks'::regclass),
                        (SELECT count(*) FROM snowflake_ext_state.marks WHERE worker = 1)",
                &[],
            )
            .unwrap();
        (owners, r.get(0), r.get(1))
    };
    assert_eq!(owners, vec!["postgres"; 3], "{owners:?}");
    assert_eq!((triggers, rows), (0, 1));
    // The session was set up at the first try, and every write went through.
    for trouble in [
        "mark writer could not",
        "could not write the high-water marks",
    ] {
        assert!(!cluster.log().contains(trouble), "{}", cluster.log());
    }
}

#[test]
fn a_marks_table_others_could_change_is_refused_until_that_is_undone() {
    let (cluster, mut largest) = minting_into_t("trust-running");
    let mut c = cluster.connect();
    c.batch_execute(
        "CREATE ROLE app;
         CREATE FUNCTION public.noop() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NEW; END $$;",
    )
    .unwrap();
    // What a careless superuser might do while the server runs, what the refusal names, and
    // how it is undone. Each is seen at the writer's next write: the first id of a new worker.
    let cases = [
        (
            "GRANT INSERT ON snowflake_ext_state.marks TO app",
            "app may change snowflake_ext_state.marks (INSERT granted by postgres)",
            "REVOKE INSERT ON snowflake_ext_state.marks FROM app",
        ),
        (
            "CREATE TRIGGER noop BEFORE UPDATE ON snowflake_ext_state.marks FOR EACH ROW EXECUTE FUNCTION public.noop()",
            "snowflake_ext_state.marks has the trigger noop, which runs public.noop() (owned by postgres)",
            "DROP TRIGGER noop ON snowflake_ext_state.marks",
        ),
        (
            "ALTER TABLE snowflake_ext_state.meta OWNER TO app",
            "snowflake_ext_state.meta is owned by app",
            "ALTER TABLE snowflake_ext_state.meta OWNER TO postgres",
        ),
        (
            "ALTER TABLE snowflake_ext_state.marks ENABLE ROW LEVEL SECURITY",
            "snowflake_ext_state.marks (owned by postgres) has row level security",
            "ALTER TABLE snowflake_ext_state.marks DISABLE ROW LEVEL SECURITY",
        ),
        (
            "GRANT USAGE ON SCHEMA snowflake_ext_state TO app; GRANT UPDATE (mark) ON snowflake_ext_state.marks TO app",
            "app may change the column mark of snowflake_ext_state.marks (UPDATE granted by postgres)",
            "REVOKE UPDATE (mark) ON snowflake_ext_state.marks FROM app; REVOKE USAGE ON SCHEMA snowflake_ext_state FROM app",
        ),
    ];
    let mut cases = cases.to_vec();
    let version: i32 = c.scalar("SELECT current_setting('server_version_num')::int");
    if version >= 170_000 {
        // MAINTAIN lets a role lock the table (and hold up every write).
        cases.push((
            "GRANT MAINTAIN ON snowflake_ext_state.marks TO app",
            "app may change snowflake_ext_state.marks (MAINTAIN granted by postgres)",
            "REVOKE MAINTAIN ON snowflake_ext_state.marks FROM app",
        ));
    }
    for (worker, (change, named, undo)) in (5..).zip(cases) {
        c.batch_execute(change).unwrap();
        let e = error_of(&mut c, &format!("SELECT snowflake_nextval({worker})"));
        assert_eq!(e.code, "55000", "{change}: {e:?}");
        assert!(e.message.contains(named), "{change}: {e:?}");
        assert!(
            e.hint
                .as_deref()
                .unwrap_or("")
                .contains("Only the mark writer may create, own or change"),
            "{e:?}"
        );
        // Nothing is minted meanwhile, not even below the marks already written.
        assert_eq!(state(&mut c), "in doubt");
        let e = error_of(&mut c, "INSERT INTO t (v) VALUES (0)");
        assert_eq!(e.code, "55000", "{change}: {e:?}");
        c.batch_execute(undo).unwrap();
        wait_for_state(&mut c, "ready");
        largest = assert_mints_above(&cluster, largest);
    }
}

#[test]
fn a_marks_table_emptied_while_running_is_written_again_from_memory() {
    let (cluster, largest) = minting_into_t("trust-emptied-live");
    let mut c = cluster.connect();
    c.batch_execute("TRUNCATE snowflake_ext_state.marks")
        .unwrap();
    // The writer's next write (the first id of worker 5) finds the table emptied.
    c.batch_execute("SELECT snowflake_nextval(5)").unwrap();
    cluster.wait_for_log("written again from memory");
    let workers: Vec<i32> = c
        .query(
            "SELECT worker FROM snowflake_ext_state.marks ORDER BY worker",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(workers, vec![4, 5]);
    // A crash right after, and a clock an hour back: nothing repeats.
    cluster.kill_postmaster();
    cluster.set_clock_offset(-3600);
    cluster.start();
    assert_mints_above(&cluster, largest);
}

/// Stops the server, starts it without the library (so no mark writer is there to notice),
/// runs `edit` as a superuser, and starts it again with the library, its clock an hour back.
fn edit_while_down(cluster: &Cluster, edit: &str) {
    cluster.stop();
    let conf = cluster.dir.join("postgresql.conf");
    let original = std::fs::read_to_string(&conf).unwrap();
    std::fs::write(
        &conf,
        format!("{original}\nshared_preload_libraries = ''\n"),
    )
    .unwrap();
    cluster.start();
    cluster.connect().batch_execute(edit).unwrap();
    cluster.stop();
    std::fs::write(&conf, original).unwrap();
    cluster.set_clock_offset(-3600);
    cluster.start();
}

#[test]
fn a_marks_table_emptied_edited_or_rolled_back_while_down_is_in_doubt() {
    let (cluster, mut largest) = minting_into_t("trust-emptied-down");
    let mut c = cluster.connect();
    // An older copy of the table, kept aside, then outdated: the first id of worker 5 makes
    // the writer write (and raise the header's generation) again.
    c.batch_execute(
        "CREATE TABLE public.old_meta AS SELECT * FROM snowflake_ext_state.meta;
         CREATE TABLE public.old_marks AS SELECT * FROM snowflake_ext_state.marks;
         SELECT snowflake_nextval(5);",
    )
    .unwrap();
    wait_until("a newer generation", PATIENCE, || {
        c.scalar("SELECT (SELECT generation FROM snowflake_ext_state.meta) > (SELECT generation FROM public.old_meta)")
    });
    // The older copy first: once the marks are restored, the table has another token.
    let cases = [
        (
            "BEGIN;
             DELETE FROM snowflake_ext_state.marks; INSERT INTO snowflake_ext_state.marks SELECT * FROM public.old_marks;
             DELETE FROM snowflake_ext_state.meta; INSERT INTO snowflake_ext_state.meta SELECT * FROM public.old_meta;
             COMMIT;",
            "behind generation",
        ),
        (
            "TRUNCATE snowflake_ext_state.marks",
            "are not the ones the mark writer last wrote",
        ),
        (
            "DELETE FROM snowflake_ext_state.marks WHERE worker = 4",
            "are not the ones the mark writer last wrote",
        ),
        (
            "UPDATE snowflake_ext_state.marks SET mark = mark - (3600000::bigint << 22) WHERE worker = 4",
            "are not the ones the mark writer last wrote",
        ),
    ];
    for (edit, why) in cases {
        edit_while_down(&cluster, edit);
        let mut c = cluster.connect();
        wait_for_state(&mut c, "in doubt");
        let e = error_of(&mut c, "INSERT INTO t (v) VALUES (0)");
        assert_eq!(e.code, "55000", "{edit}: {e:?}");
        assert!(e.message.contains(why), "{edit}: {e:?}");
        assert!(
            e.hint
                .as_deref()
                .unwrap_or("")
                .contains("snowflake_restore_mark"),
            "{e:?}"
        );
        // The way out: restore above every id there is.
        c.query_one("SELECT snowflake_restore_mark(ARRAY['t']::regclass[])", &[])
            .unwrap();
        largest = assert_mints_above(&cluster, largest);
    }
}

#[test]
fn eight_superusers_asking_the_writer_at_once_each_get_their_own_answer() {
    let (cluster, _) = minting_into_t("trust-mailbox");
    let base = (unix_ms_now() + 60_000 - EPOCH_UNIX_MS) << 22;
    let threads: Vec<_> = (0..8i64)
        .map(|i| {
            let conninfo = cluster.conninfo("postgres");
            std::thread::spawn(move || {
                let mut c = Client::connect(&conninfo, NoTls).unwrap();
                let worker = 20 + i as i32;
                if i % 4 == 3 {
                    // A rewind with nothing to rewind: its own refusal, not someone else's.
                    let e = error_of(&mut c, &format!("SELECT * FROM snowflake_rewind({worker})"));
                    (worker, Err(e))
                } else {
                    let above = base + (i << 30) + ((worker as i64) << 12);
                    let mark: i64 = c
                        .query_one("SELECT snowflake_restore_mark($1, $2)", &[&worker, &above])
                        .unwrap()
                        .get(0);
                    (worker, Ok((above, mark)))
                }
            })
        })
        .collect();
    let mut c = cluster.connect();
    for t in threads {
        match t.join().unwrap() {
            (worker, Ok((above, mark))) => {
                assert!(mark > above, "worker {worker}: {mark} <= {above}");
                let of: i32 = c
                    .query_one("SELECT snowflake_worker($1)", &[&mark])
                    .unwrap()
                    .get(0);
                assert_eq!(of, worker, "worker {worker} got another's answer: {mark}");
                let first: i64 = c
                    .query_one("SELECT snowflake_nextval($1)", &[&worker])
                    .unwrap()
                    .get(0);
                assert!(first > above, "worker {worker}: {first} <= {above}");
            }
            (worker, Err(e)) => {
                assert_eq!(e.code, "55000", "{e:?}");
                assert!(
                    e.message.contains(&format!(
                        "snowflake worker {worker} has followed no forward clock jump"
                    )),
                    "worker {worker}: {e:?}"
                );
            }
        }
    }
}

/// A member of pg_write_all_data can change the marks table through SQL. While the server
/// runs, its change is written over at the writer's next write; if the server goes down first,
/// the table's seal (under a key only the data directory holds) gives the change away, however
/// the header is forged, and the server refuses to mint instead of repeating ids.
#[test]
fn a_member_of_pg_write_all_data_cannot_lower_the_marks() {
    let (cluster, largest) = minting_into_t("trust-write-all");
    let mut c = cluster.connect();
    c.batch_execute("CREATE ROLE bob LOGIN; GRANT pg_write_all_data TO bob")
        .unwrap();
    // A server whose marks are all bob can reach stays ready: the grant is cluster-wide.
    assert_eq!(state(&mut c), "ready");
    // The forgeries: the rows deleted, with the header made to look like 0.2.0's (no seal) or
    // given the digest an empty table had under the old, keyless scheme.
    // (bob may write but not read: he sets worker 4's mark, the only row, ten minutes lower.)
    let lower: i64 = c.scalar(
        "SELECT mark - (600000::bigint << 22) FROM snowflake_ext_state.marks WHERE worker = 4",
    );
    // The lowered mark first: after a restore the table has a row for every worker.
    for forge in [
        format!("UPDATE snowflake_ext_state.marks SET mark = {lower}"),
        "UPDATE snowflake_ext_state.meta SET format = 1; DELETE FROM snowflake_ext_state.marks;".to_string(),
        "DELETE FROM snowflake_ext_state.marks; UPDATE snowflake_ext_state.meta SET digest = -3750763034362895579;".to_string(),
    ] {
        let mut bob = session(&cluster, "postgres", "bob");
        bob.batch_execute(&forge).unwrap();
        drop(bob);
        cluster.kill_postmaster();
        cluster.set_clock_offset(-600);
        cluster.start();
        let mut c = cluster.connect();
        wait_for_state(&mut c, "in doubt");
        let e = error_of(&mut c, "INSERT INTO t (v) VALUES (0)");
        assert_eq!(e.code, "55000", "{forge}: {e:?}");
        assert!(e.message.contains("seal does not match"), "{forge}: {e:?}");
        c.query_one("SELECT snowflake_restore_mark(ARRAY['t']::regclass[])", &[])
            .unwrap();
        assert_mints_above(&cluster, largest);
        cluster.set_clock_offset(0);
    }
}

/// A grant that default privileges in the marks database give every new table does not stop
/// a fresh server: the writer takes it back from the tables it creates.
#[test]
fn default_privileges_in_the_marks_database_are_taken_back() {
    let cluster = server_with_app_database("trust-default-privileges");
    cluster.start();
    let mut marks = session(&cluster, "app", "postgres");
    marks
        .batch_execute(
            "CREATE ROLE app_rw;
             ALTER DEFAULT PRIVILEGES GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO app_rw;
             ALTER DEFAULT PRIVILEGES GRANT USAGE ON SCHEMAS TO app_rw;",
        )
        .unwrap();
    let mut c = session(&cluster, "postgres", "postgres");
    let ids = ids(
        &mut c,
        "SELECT snowflake_nextval() FROM generate_series(1, 1000)",
    );
    assert_strictly_increasing(&ids);
    let grants: i64 = marks.scalar(
        "SELECT (SELECT count(*) FROM pg_class c, aclexplode(c.relacl) a
                      WHERE c.relnamespace = 'snowflake_ext_state'::regnamespace
                        AND a.grantee = 'app_rw'::regrole)
                  + (SELECT count(*) FROM pg_namespace n, aclexplode(n.nspacl) a
                      WHERE n.nspname = 'snowflake_ext_state' AND a.grantee = 'app_rw'::regrole)",
    );
    assert_eq!(grants, 0);
}

/// A superuser whose request to the writer was under way is terminated (a FATAL: it cannot
/// withdraw the request): the next superuser's request is served as soon as the writer is
/// free, not after the mailbox's 30 s expiry.
#[test]
fn a_terminated_askers_request_does_not_hold_the_mailbox() {
    let (cluster, _) = minting_into_t("trust-mailbox-fatal");
    let mut locker = cluster.connect();
    // The writer cannot write while the marks table is locked: the request stays with it.
    locker
        .batch_execute("BEGIN; LOCK TABLE snowflake_ext_state.marks IN ACCESS EXCLUSIVE MODE")
        .unwrap();
    let above = (unix_ms_now() + 3_600_000 - EPOCH_UNIX_MS) << 22 | (5 << 12);
    let asker = {
        let conninfo = cluster.conninfo("postgres");
        std::thread::spawn(move || {
            let mut a = Client::connect(&conninfo, NoTls).unwrap();
            a.query_one("SELECT snowflake_restore_mark(5, $1)", &[&above])
                .map(|_| ())
        })
    };
    let mut c = cluster.connect();
    let pid: i32 = wait_for("the asker to wait for the writer", PATIENCE, || {
        c.query_opt(
            "SELECT pid FROM pg_stat_activity WHERE query LIKE 'SELECT snowflake_restore_mark(5,%' AND wait_event_type = 'Extension'",
            &[],
        )
        .unwrap()
        .map(|r| r.get(0))
    });
    c.batch_execute(&format!("SELECT pg_terminate_backend({pid})"))
        .unwrap();
    assert!(
        asker.join().unwrap().is_err(),
        "the asker was not terminated"
    );
    locker.batch_execute("COMMIT").unwrap();
    // Served long before the 30 s after which an answer nobody collects expires.
    c.batch_execute("SET statement_timeout = '25s'").unwrap();
    let above6 = (unix_ms_now() + 60_000 - EPOCH_UNIX_MS) << 22 | (6 << 12);
    let mark: i64 = c
        .query_one("SELECT snowflake_restore_mark(6, $1)", &[&above6])
        .unwrap()
        .get(0);
    assert!(mark > above6);
    // The terminated asker's request was done (it was under way), not lost halfway.
    let five: i64 = c.scalar("SELECT snowflake_nextval(5)");
    assert!(five > above);
}

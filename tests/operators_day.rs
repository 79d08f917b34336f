//! The operator's ordinary day on a server with the library preloaded: the weekly
//! administration of PostgreSQL, each step with a deadline and an asserted outcome, and every id
//! minted across all of them unique, and increasing from each step to the next. Run on a
//! server whose worker id is set by hand and on one that leases it from a registry. What each
//! step proves: tests/README.md.

mod common;

use common::*;
use postgres::Client;
use std::time::{Duration, Instant};

/// How long any one administration step may take. Each of them finishes in well under a second
/// on an idle machine; a step that waits on something that never comes (a ProcSignalBarrier a
/// worker does not absorb, a worker that does not come back) is cut off by the deadline and
/// fails, instead of hanging the suite.
const DEADLINE: Duration = Duration::from_secs(30);

/// The mark writer, as `pg_stat_activity` names it.
const MARK_WRITER: &str = "snowflake_ext mark writer";
/// The lease keeper's process title. It has no database connection, so `pg_stat_activity`
/// does not show it, `pg_terminate_backend` cannot reach it (an operator uses `kill`), and it
/// takes no part in ProcSignalBarriers.
const LEASE_KEEPER: &str = "snowflake_ext lease keeper";

/// The pid of the lease keeper, from the server's processes' titles.
fn lease_keeper(cluster: &Cluster) -> i32 {
    wait_for("the lease keeper", PATIENCE, || {
        cluster.pids().into_iter().find(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/cmdline"))
                .unwrap_or_default()
                .contains(LEASE_KEEPER)
        })
    })
}

/// An administrator's session whose every statement is cut off at the deadline.
fn admin(cluster: &Cluster) -> Client {
    let mut c = cluster.connect();
    c.batch_execute(&format!(
        "SET statement_timeout = '{}s'",
        DEADLINE.as_secs()
    ))
    .unwrap();
    c
}

/// Runs `sql` as an administrator; it must succeed before the deadline.
fn step(cluster: &Cluster, what: &str, sql: &str) {
    let start = Instant::now();
    if let Err(e) = admin(cluster).batch_execute(sql) {
        let e = e.as_db_error().map_or(e.to_string(), |d| format!("{d:?}"));
        panic!(
            "{what}: {e} ({:?} in); the server's processes:\n{}",
            start.elapsed(),
            cluster.processes()
        );
    }
}

/// The pid of background worker `name`, once it runs and waits on its latch, idle: the state
/// in which a worker that did not absorb barriers held up `DROP DATABASE` for ever.
fn idle_worker(cluster: &Cluster, name: &str) -> i32 {
    let mut c = cluster.connect();
    wait_for(&format!("the {name} to wait, idle"), PATIENCE, || {
        c.query_opt(
            "SELECT pid FROM pg_stat_activity
              WHERE backend_type = $1 AND wait_event_type = 'Extension'",
            &[&name],
        )
        .unwrap()
        .map(|r| r.get(0))
    })
}

/// The ids minted so far across every step, in the order one observer saw them, and the
/// check that each step's are above everything before it.
struct Ledger {
    all: Vec<i64>,
    largest: i64,
}

impl Ledger {
    fn new() -> Ledger {
        Ledger {
            all: Vec::new(),
            largest: i64::MIN,
        }
    }

    /// Mints 200 ids into `t` after step `what`: all above every id minted before.
    fn mint_after(&mut self, cluster: &Cluster, what: &str) {
        let fresh = ids(
            &mut cluster.connect(),
            "INSERT INTO t (v) SELECT g FROM generate_series(1, 200) g RETURNING id",
        );
        assert_strictly_increasing(&fresh);
        assert!(
            fresh[0] > self.largest,
            "after {what}: {} is not above {}, minted before",
            fresh[0],
            self.largest
        );
        self.add(&fresh);
    }

    /// After a restart: waits until the server mints again (a leasing one takes its lease
    /// back first; meanwhile it refuses, never minting a wrong id), then as `mint_after`.
    fn mint_after_restart(&mut self, cluster: &Cluster, what: &str) {
        let first = wait_for(&format!("minting after {what}"), PATIENCE, || {
            cluster
                .connect()
                .query("INSERT INTO t (v) VALUES (0) RETURNING id", &[])
                .ok()
                .map(|rows| rows[0].get::<_, i64>(0))
        });
        assert!(
            first > self.largest,
            "after {what}: {first} is not above {}",
            self.largest
        );
        self.add(&[first]);
        self.mint_after(cluster, what);
    }

    /// Adds ids minted concurrently (by a `Minter`), which only have to be unique.
    fn add(&mut self, ids: &[i64]) {
        self.all.extend_from_slice(ids);
        self.largest = self
            .largest
            .max(ids.iter().copied().max().unwrap_or(i64::MIN));
    }

    fn add_minted(&mut self, minted: Minted) {
        let ids: Vec<i64> = minted.ids.iter().map(|(_, id)| *id).collect();
        self.add(&ids);
    }
}

/// Runs `work` while three sessions mint; returns what they minted, each having minted both
/// before `work` began and after it ended (minting never stopped for good).
fn while_minting(cluster: &Cluster, work: impl FnOnce()) -> Vec<Minted> {
    let minters: Vec<Minter> = (0..3)
        .map(|_| Minter::start(cluster.conninfo("postgres"), 20))
        .collect();
    for m in &minters {
        wait_until("a minter's first ids", PATIENCE, || m.got() > 0);
    }
    work();
    let after: Vec<usize> = minters.iter().map(Minter::got).collect();
    for (m, got) in minters.iter().zip(after) {
        wait_until("a minter's ids after the step", PATIENCE, || m.got() > got);
    }
    minters.into_iter().map(Minter::finish).collect()
}

/// The step that hung on every idle server: everything that waits for a ProcSignalBarrier
/// (`DROP DATABASE`, `ALTER DATABASE … SET TABLESPACE`, `CREATE DATABASE … STRATEGY
/// wal_log`), with every background worker idle on its latch, then while sessions mint.
fn databases_and_tablespaces(cluster: &Cluster, ledger: &mut Ledger) {
    let space = Scratch::dir_for_postgres(&format!("{}-space", tag(cluster)));
    let location = space.to_str().unwrap().to_string();
    let round = |tag: &str| {
        step(
            cluster,
            "CREATE DATABASE",
            &format!("CREATE DATABASE day_{tag}"),
        );
        step(
            cluster,
            "ALTER DATABASE RENAME",
            &format!("ALTER DATABASE day_{tag} RENAME TO day_{tag}_renamed"),
        );
        step(
            cluster,
            "ALTER DATABASE SET TABLESPACE",
            &format!("ALTER DATABASE day_{tag}_renamed SET TABLESPACE day_space"),
        );
        step(
            cluster,
            "DROP DATABASE",
            &format!("DROP DATABASE day_{tag}_renamed"),
        );
        if server_major() >= 15 {
            step(
                cluster,
                "CREATE DATABASE STRATEGY wal_log",
                &format!("CREATE DATABASE day_{tag}_wal STRATEGY wal_log"),
            );
            step(
                cluster,
                "DROP DATABASE (wal_log)",
                &format!("DROP DATABASE day_{tag}_wal"),
            );
        }
    };
    step(
        cluster,
        "CREATE TABLESPACE",
        &format!("CREATE TABLESPACE day_space LOCATION '{location}'"),
    );
    // Idle: the mark writer asleep on its latch, nothing minting anywhere.
    idle_worker(cluster, MARK_WRITER);
    round("idle");
    ledger.mint_after(
        cluster,
        "databases created, moved and dropped, workers idle",
    );
    // Busy: sessions minting throughout.
    for minted in while_minting(cluster, || round("busy")) {
        ledger.add_minted(minted);
    }
    step(
        cluster,
        "ALTER TABLESPACE RENAME",
        "ALTER TABLESPACE day_space RENAME TO day_space_renamed",
    );
    step(
        cluster,
        "DROP TABLESPACE",
        "DROP TABLESPACE day_space_renamed",
    );
    ledger.mint_after(
        cluster,
        "databases created, moved and dropped while minting",
    );
}

/// A name for what a day's step makes beside `cluster` (a scratch file, another server): the
/// two days run at once, in one process, and must not share one.
fn tag(cluster: &Cluster) -> String {
    cluster
        .dir
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned()
}

/// The major of the server under test.
fn server_major() -> u32 {
    std::env::var("PG_MAJOR")
        .ok()
        .and_then(|m| m.parse().ok())
        .unwrap_or(15)
}

/// `pg_cancel_backend` and then `pg_terminate_backend` of the mark writer, and a SIGTERM to
/// the lease keeper if the server leases: a cancel leaves the writer running; a stopped worker
/// comes back, and minting resumes above every id before.
fn signal_each_worker(cluster: &Cluster, leasing: bool, ledger: &mut Ledger) {
    if leasing {
        let held = leased(cluster);
        let pid = lease_keeper(cluster);
        // SAFETY: a signal to a process of the test's own server.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
        wait_until("the lease keeper to come back", PATIENCE, || {
            lease_keeper(cluster) != pid
        });
        // Until the new keeper has the lease again, minting is refused (never a wrong id);
        // its own lease, still running, it takes back at once.
        assert_eq!(
            leased(cluster),
            held,
            "the worker id after the keeper came back"
        );
        ledger.mint_after(cluster, "a SIGTERM to the lease keeper");
    }
    {
        let worker = MARK_WRITER;
        let pid = idle_worker(cluster, worker);
        step(
            cluster,
            "pg_cancel_backend",
            &format!("SELECT pg_cancel_backend({pid})"),
        );
        ledger.mint_after(cluster, &format!("pg_cancel_backend of the {worker}"));
        assert_eq!(
            idle_worker(cluster, worker),
            pid,
            "a cancel stopped the {worker}"
        );
        step(
            cluster,
            "pg_terminate_backend",
            &format!("SELECT pg_terminate_backend({pid})"),
        );
        let mut c = cluster.connect();
        wait_until(&format!("the {worker} to come back"), PATIENCE, || {
            c.query_opt(
                "SELECT pid FROM pg_stat_activity WHERE backend_type = $1 AND pid <> $2",
                &[&worker, &pid],
            )
            .unwrap()
            .is_some()
        });
        ledger.mint_after_restart(cluster, &format!("pg_terminate_backend of the {worker}"));
    }
}

/// The weekly routine that touches no database's existence: reload, log rotation,
/// checkpoint, rewriting the tables keyed by ids and the marks.
fn maintenance(cluster: &Cluster, ledger: &mut Ledger) {
    cluster.set_and_reload("snowflake.max_ahead", "3s");
    ledger.mint_after(cluster, "a reload with a changed setting");
    cluster.set_and_reload("log_min_messages", "info");
    step(cluster, "log rotation", "SELECT pg_rotate_logfile()");
    step(cluster, "CHECKPOINT", "CHECKPOINT");
    ledger.mint_after(cluster, "CHECKPOINT");
    for (what, sql) in [
        ("VACUUM FULL of t", "VACUUM FULL t"),
        ("CLUSTER of t", "CLUSTER t USING t_pkey"),
        ("REINDEX of t", "REINDEX TABLE t"),
        (
            "VACUUM FULL of the marks",
            "VACUUM FULL snowflake_ext_state.marks",
        ),
        (
            "REINDEX of the marks",
            "REINDEX TABLE snowflake_ext_state.marks",
        ),
        ("VACUUM ANALYZE", "VACUUM ANALYZE"),
    ] {
        let minted = while_minting(cluster, || step(cluster, what, sql));
        for m in minted {
            ledger.add_minted(m);
        }
        ledger.mint_after(cluster, what);
    }
}

/// `ALTER EXTENSION … UPDATE` (already current) and `DROP EXTENSION`/`CREATE EXTENSION`
/// while sessions mint: minting after the new `CREATE EXTENSION` resumes above every id
/// before, since the marks outlive the extension's objects.
fn extension_lifecycle(cluster: &Cluster, ledger: &mut Ledger) {
    let minted = while_minting(cluster, || {
        step(
            cluster,
            "ALTER EXTENSION UPDATE",
            "ALTER EXTENSION snowflake_ext UPDATE",
        );
        step(
            cluster,
            "DROP EXTENSION and CREATE EXTENSION",
            "DROP EXTENSION snowflake_ext CASCADE; CREATE EXTENSION snowflake_ext;
             ALTER TABLE t ALTER id SET DEFAULT snowflake_nextval();",
        );
    });
    for m in minted {
        ledger.add_minted(m);
    }
    ledger.mint_after(cluster, "DROP EXTENSION and CREATE EXTENSION");
}

/// Smart, fast and immediate shutdowns, idle and with sessions minting; after each restart,
/// minting resumes above every id before.
fn shutdowns(cluster: &Cluster, ledger: &mut Ledger) {
    for mode in ["smart", "fast", "immediate"] {
        // Idle.
        let start = Instant::now();
        cluster.stop_mode(mode);
        assert!(start.elapsed() < DEADLINE, "an idle {mode} shutdown");
        cluster.start();
        ledger.mint_after_restart(cluster, &format!("an idle {mode} shutdown"));
        // Minting. A smart shutdown waits for the sessions to end: they end after it began.
        let minters: Vec<Minter> = (0..3)
            .map(|_| Minter::start(cluster.conninfo("postgres"), 20))
            .collect();
        for m in &minters {
            wait_until("a minter's first ids", PATIENCE, || m.got() > 0);
        }
        let start = Instant::now();
        let mut stopping = cluster.begin_stop(mode);
        if mode == "smart" {
            // Still minting while the shutdown waits for them.
            wait_until("a smart shutdown to begin", PATIENCE, || {
                cluster.log().contains("received smart shutdown request")
            });
            let got: Vec<usize> = minters.iter().map(Minter::got).collect();
            for (m, got) in minters.iter().zip(got) {
                wait_until("ids during a smart shutdown", PATIENCE, || m.got() > got);
            }
        }
        for m in minters {
            ledger.add_minted(m.finish());
        }
        assert!(
            stopping.wait().unwrap().success(),
            "a {mode} shutdown failed"
        );
        assert!(
            start.elapsed() < DEADLINE,
            "a {mode} shutdown with sessions minting took {:?}",
            start.elapsed()
        );
        cluster.start();
        ledger.mint_after_restart(cluster, &format!("a {mode} shutdown while minting"));
    }
}

/// `pg_dumpall` of the whole server restored into a new server, which then mints as its own
/// worker id (the restored marks are not its own: they hold no id it could repeat).
fn dumpall_and_restore(cluster: &Cluster, fresh_settings: &[&str], ledger: &Ledger) {
    let dump = Scratch::path(&format!("{}-dumpall.sql", tag(cluster)));
    let out = std::process::Command::new(cluster.bin("pg_dumpall"))
        .args([
            "-h",
            "127.0.0.1",
            "-p",
            &cluster.port.to_string(),
            "-U",
            "postgres",
        ])
        .args(["-f", dump.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "pg_dumpall: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let copy = Cluster::new(&format!("{}-restored", tag(cluster)), fresh_settings);
    copy.start();
    let out = std::process::Command::new(copy.bin("psql"))
        .args([
            "-h",
            "127.0.0.1",
            "-p",
            &copy.port.to_string(),
            "-U",
            "postgres",
        ])
        .args(["-X", "-q", "-d", "postgres", "-f", dump.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "restoring the pg_dumpall output: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut c = copy.connect();
    let rows: i64 = c.scalar("SELECT count(*) FROM t");
    let originals: i64 = cluster.connect().scalar("SELECT count(*) FROM t");
    assert_eq!(rows, originals, "rows of t restored");
    let fresh = ids(
        &mut c,
        "INSERT INTO t (v) SELECT g FROM generate_series(1, 200) g RETURNING id",
    );
    let mut all = ledger.all.clone();
    all.extend_from_slice(&fresh);
    assert_no_duplicates(&all);
}

/// A `pg_basebackup` taken while sessions mint, started as a streaming standby: it catches up
/// and holds every row.
fn basebackup_under_load(cluster: &Cluster, ledger: &mut Ledger) {
    let mut standby = None;
    let minted = while_minting(cluster, || {
        standby = Some(Cluster::standby_of(
            cluster,
            &format!("{}-standby", tag(cluster)),
            &[],
        ));
    });
    for m in minted {
        ledger.add_minted(m);
    }
    let standby = standby.unwrap();
    standby.start();
    ledger.mint_after(cluster, "a pg_basebackup under load");
    standby.wait_caught_up(cluster);
    let on_standby: i64 = standby.connect().scalar("SELECT max(id) FROM t");
    assert_eq!(on_standby, ledger.largest, "the standby's newest row");
}

/// A logical replication slot read while minting, and a subscriber (a plain server) that
/// receives every row with its id.
fn logical_replication(cluster: &Cluster, ledger: &mut Ledger) {
    step(
        cluster,
        "a publication",
        "CREATE PUBLICATION day_pub FOR TABLE t",
    );
    step(
        cluster,
        "a logical slot",
        "SELECT pg_create_logical_replication_slot('day_slot', 'test_decoding')",
    );
    let subscriber = Cluster::new(
        &format!("{}-subscriber", tag(cluster)),
        &["shared_preload_libraries="],
    );
    subscriber.start();
    let mut sub = subscriber.connect();
    sub.batch_execute("CREATE TABLE t (id bigint PRIMARY KEY, v int)")
        .unwrap();
    sub.batch_execute(&format!(
        "CREATE SUBSCRIPTION day_sub CONNECTION '{}' PUBLICATION day_pub",
        cluster.conninfo("postgres")
    ))
    .unwrap();
    let minted = while_minting(cluster, || {
        // (the sessions' first ids may all lie below a mark written before the slot: the next
        // mark, as the clock passes it, is the change to wait for; CI once read the slot first)
        wait_until("the logical slot to decode a change", PATIENCE, || {
            admin(cluster).scalar::<i64>(
                "SELECT count(*) FROM pg_logical_slot_get_changes('day_slot', NULL, NULL)",
            ) > 0
        });
    });
    for m in minted {
        ledger.add_minted(m);
    }
    ledger.mint_after(cluster, "a logical slot and a subscription");
    let (count, largest): (i64, i64) = {
        let r = cluster
            .connect()
            .query_one("SELECT count(*), max(id) FROM t", &[])
            .unwrap();
        (r.get(0), r.get(1))
    };
    wait_until("the subscriber to hold every row of t", PATIENCE, || {
        let r = sub
            .query_one("SELECT count(*), coalesce(max(id), 0) FROM t", &[])
            .unwrap();
        r.get::<_, i64>(0) == count && r.get::<_, i64>(1) == largest
    });
    sub.batch_execute("DROP SUBSCRIPTION day_sub").unwrap();
    step(
        cluster,
        "dropping the slot and publication",
        "SELECT pg_drop_replication_slot('day_slot'); DROP PUBLICATION day_pub",
    );
}

/// The whole day on `cluster` (started, minting into nothing yet), whose background workers
/// are `workers`; `fresh` are the settings of a new server for the restore.
fn operators_day(cluster: &Cluster, leasing: bool, fresh: &[&str]) {
    cluster
        .connect()
        .batch_execute(
            "CREATE EXTENSION IF NOT EXISTS snowflake_ext;
             CREATE TABLE t (id bigint PRIMARY KEY DEFAULT snowflake_nextval(), v int)",
        )
        .unwrap();
    let mut ledger = Ledger::new();
    ledger.mint_after(cluster, "the start");
    databases_and_tablespaces(cluster, &mut ledger);
    signal_each_worker(cluster, leasing, &mut ledger);
    maintenance(cluster, &mut ledger);
    extension_lifecycle(cluster, &mut ledger);
    shutdowns(cluster, &mut ledger);
    basebackup_under_load(cluster, &mut ledger);
    logical_replication(cluster, &mut ledger);
    assert_no_duplicates(&ledger.all);
    let stored: i64 = cluster.connect().scalar("SELECT count(DISTINCT id) FROM t");
    assert_eq!(
        stored,
        cluster.connect().scalar::<i64>("SELECT count(*) FROM t")
    );
    dumpall_and_restore(cluster, fresh, &ledger);
}

#[test]
fn an_operators_day_with_a_worker_id_set_by_hand() {
    let cluster = Cluster::new(
        "operators-day-by-hand",
        &["snowflake.worker_id=7", "wal_level=logical"],
    );
    cluster.start();
    operators_day(&cluster, false, &["snowflake.worker_id=8"]);
}

#[test]
fn an_operators_day_with_a_leased_worker_id() {
    let registry = registry("operators-day-registry");
    let cluster = leasing_cluster("operators-day-leased", &registry, &["wal_level=logical"]);
    cluster.start();
    cluster
        .connect()
        .batch_execute("CREATE EXTENSION snowflake_ext")
        .unwrap();
    leased(&cluster);
    operators_day(&cluster, true, &["snowflake.worker_id=9"]);
}

/// What waits for a ProcSignalBarrier, with the mark writer asleep on its latch and nothing
/// minting: before the workers absorbed barriers on every wake, `DROP DATABASE` waited here
/// until some backend minted.
#[test]
fn drop_database_finishes_with_the_mark_writer_idle() {
    let cluster = started("barrier-idle", &["snowflake.worker_id=3"]);
    cluster
        .connect()
        .batch_execute("SELECT snowflake_nextval()")
        .unwrap();
    for (create, drop) in [
        ("CREATE DATABASE scratch", "DROP DATABASE scratch"),
        ("SELECT 1", "CREATE DATABASE scratch_wal STRATEGY wal_log"),
        ("SELECT 1", "DROP DATABASE scratch_wal"),
    ] {
        if server_major() < 15 && drop.contains("wal") {
            continue;
        }
        step(&cluster, create, create);
        idle_worker(&cluster, MARK_WRITER);
        let start = Instant::now();
        step(&cluster, drop, drop);
        assert!(start.elapsed() < DEADLINE, "{drop}");
    }
}

//! Ids never repeat where PostgreSQL users run more than one server: a hot standby refuses to
//! mint, a standby promoted after the primary was killed (its clock behind) mints above every
//! id the primary handed out, a base backup restored with archived WAL (PITR) continues above
//! what it replayed, and so does a cluster upgraded with pg_upgrade. Real servers, real
//! `kill -9`, real `pg_basebackup`, `pg_upgrade` and WAL archiving; clocks from `faketime`.

mod common;

use common::*;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;

/// The ids `sql` hands out to `sessions` concurrent clients, all of them.
fn mint(cluster: &Cluster, sessions: usize, sql: &'static str) -> Vec<i64> {
    let threads: Vec<_> = (0..sessions)
        .map(|_| {
            let conninfo = cluster.conninfo("postgres");
            std::thread::spawn(move || {
                let mut c = postgres::Client::connect(&conninfo, postgres::NoTls).unwrap();
                ids(&mut c, sql)
            })
        })
        .collect();
    threads
        .into_iter()
        .flat_map(|t| t.join().unwrap())
        .collect()
}

/// How far ahead of the clock `run_ahead` takes the primary's ids, in ms: well past what a
/// busy machine's slowness could explain, well within `snowflake.max_ahead` (2 s).
const AHEAD_MS: i64 = 1000;
/// How many rounds `run_ahead` takes at most: each takes 732 ms of ids, so a second ahead
/// takes two on a machine that answers a query in well under 244 ms.
const ROUNDS: u32 = 1000;

/// Rounds of three clients at once, each taking a batch of a million ids of the configured
/// worker (244 ms of ids, taken in one step whatever the machine's speed; the batch is
/// taken in the select list, so the server does not produce the million rows), until the
/// worker's ids run over `AHEAD_MS` ahead of the clock, as `ahead_ms` in snowflake_stats shows
/// after a round. Returns the largest id handed out (a batch's last id, as
/// `snowflake_lastval()` reports it).
fn run_ahead(primary: &Cluster) -> i64 {
    let mut c = primary.connect();
    let (mut largest, mut ahead, mut rounds) = (0, 0, 0);
    while ahead <= AHEAD_MS {
        assert!(
            rounds < ROUNDS,
            "after {ROUNDS} rounds of batches the primary runs {ahead} ms ahead of the clock, not over {AHEAD_MS} ms"
        );
        rounds += 1;
        let got = mint(
            primary,
            3,
            "SELECT snowflake_lastval() FROM (SELECT snowflake_nextval_batch(1000000) LIMIT 1) one",
        );
        largest = largest.max(*got.iter().max().unwrap());
        ahead = c.scalar("SELECT max(ahead_ms) FROM snowflake_stats");
    }
    largest
}

fn wait_until_primary(cluster: &Cluster) {
    wait_until("the end of recovery", PATIENCE, || !cluster.in_recovery());
}

/// After the primary is gone, the promoted standby (its clock `behind_s` behind) mints above
/// every id the primary handed out, from several sessions at once.
fn assert_promoted_standby_mints_above(standby: &Cluster, handed_out: i64, worker: i32) {
    standby.promote();
    wait_until_primary(standby);
    let after = mint(
        standby,
        4,
        "SELECT snowflake_nextval() FROM generate_series(1, 5000)",
    );
    let lowest = *after.iter().min().unwrap();
    assert!(
        lowest > handed_out,
        "the promoted standby minted {lowest}, not above {handed_out} handed out by the old primary:\n{}",
        standby.log()
    );
    let mut c = standby.connect();
    let workers: i64 = c
        .query_one(
            &format!("SELECT count(*) FROM unnest($1::bigint[]) id WHERE snowflake_worker(id) <> {worker}"),
            &[&after],
        )
        .unwrap()
        .get(0);
    assert_eq!(workers, 0);
}

/// Every generating function, and every administrator's change of the marks, raises 25006 on
/// the standby `c` is connected to, saying that the primary mints.
fn assert_refuses_to_mint(c: &mut postgres::Client) {
    for sql in [
        "SELECT snowflake_nextval()",
        "SELECT snowflake_nextval(5)",
        "SELECT snowflake_nextval(900)",
        "SELECT * FROM snowflake_nextval_batch(10)",
        "SELECT * FROM snowflake_nextval_batch(5, 10)",
        "BEGIN READ ONLY; SELECT snowflake_nextval(); COMMIT",
    ] {
        let e = error_of(c, sql);
        assert_eq!(e.code, "25006", "{sql}: {e:?}");
        assert!(e.message.contains("during recovery"), "{sql}: {e:?}");
        assert!(
            e.detail
                .as_deref()
                .unwrap_or("")
                .contains("the primary owns this worker id"),
            "{e:?}"
        );
        assert!(
            e.hint
                .as_deref()
                .unwrap_or("")
                .contains("Mint ids on the primary"),
            "{e:?}"
        );
        let _ = c.batch_execute("ROLLBACK");
    }
    for sql in [
        "SELECT snowflake_restore_mark(1)",
        "SELECT * FROM snowflake_rewind(5)",
    ] {
        assert_eq!(error_of(c, sql).code, "25006", "{sql}");
    }
}

#[test]
fn a_hot_standby_refuses_every_generating_function_and_still_decodes() {
    let primary = started("standby-primary", &["snowflake.worker_id=5"]);
    let id: i64 = primary.connect().scalar("SELECT snowflake_nextval()");
    let standby = Cluster::standby_of(&primary, "standby-hot", &[]);
    standby.start();
    standby.wait_caught_up(&primary);
    let mut c = standby.connect();
    assert_refuses_to_mint(&mut c);
    // Decoding and the other pure functions work.
    let row = c
        .query_one(
            "SELECT worker, snowflake_compose(ts, worker, seq), snowflake_min_id(ts) <= $1
             FROM snowflake_decode($1)",
            &[&id],
        )
        .unwrap();
    assert_eq!(
        (row.get::<_, i32>(0), row.get::<_, i64>(1), row.get(2)),
        (5, id, true)
    );
    let state: String = c.scalar("SELECT state FROM snowflake_status()");
    assert_eq!(state, "standby");
    assert!(
        !standby.log().contains("mark writer"),
        "a standby must not run the mark writer"
    );
}

#[test]
fn a_synchronous_standby_promoted_with_its_clock_behind_mints_above_every_id_handed_out() {
    let primary = started("sync-primary", &["snowflake.worker_id=5"]);
    let mut standby = Cluster::standby_of(&primary, "sync-standby", &[]);
    standby.use_faketime();
    standby.start();
    let mut c = primary.connect();
    c.batch_execute("ALTER SYSTEM SET synchronous_standby_names = '*'")
        .unwrap();
    c.batch_execute("SELECT pg_reload_conf()").unwrap();
    wait_for_synchronous_standby(&mut c);
    let handed_out = run_ahead(&primary);
    // No waiting for the standby: with synchronous replication every mark is on it already.
    primary.kill_postmaster();
    standby.set_clock_offset(-5);
    assert_promoted_standby_mints_above(&standby, handed_out, 5);
}

#[test]
fn an_asynchronous_standby_that_caught_up_promoted_with_its_clock_behind_mints_above() {
    let primary = started("async-primary", &["snowflake.worker_id=5"]);
    let mut standby = Cluster::standby_of(&primary, "async-standby", &[]);
    standby.use_faketime();
    standby.start();
    let handed_out = run_ahead(&primary);
    // What an HA manager checks before it promotes: the standby has replayed what the primary
    // flushed (Patroni's maximum_lag_on_failover).
    standby.wait_caught_up(&primary);
    primary.kill_postmaster();
    standby.set_clock_offset(-5);
    assert_promoted_standby_mints_above(&standby, handed_out, 5);
}

/// Seata's layout (`worker | time | sequence`): a standby promoted with its clock behind
/// continues its worker's ids above every id the primary handed out, as in the default layout.
#[test]
fn a_seata_standby_that_caught_up_promoted_with_its_clock_behind_mints_above() {
    let primary = started(
        "seata-primary",
        &["snowflake.worker_id=5", "snowflake.layout=seata"],
    );
    let mut standby = Cluster::standby_of(&primary, "seata-standby", &[]);
    standby.use_faketime();
    standby.start();
    let layout: String = standby
        .connect()
        .scalar("SELECT layout FROM snowflake_status()");
    assert_eq!(layout, "seata");
    let handed_out = run_ahead(&primary);
    assert_eq!(
        handed_out >> 53,
        5,
        "{handed_out} is not worker 5's in Seata's layout"
    );
    standby.wait_caught_up(&primary);
    primary.kill_postmaster();
    standby.set_clock_offset(-5);
    assert_promoted_standby_mints_above(&standby, handed_out, 5);
}

#[test]
fn a_cascading_standby_refuses_to_mint_and_promoted_directly_with_its_clock_behind_mints_above() {
    let primary = started("cascade-primary", &["snowflake.worker_id=5"]);
    primary
        .connect()
        .query_one("SELECT snowflake_nextval()", &[])
        .unwrap();
    let a = Cluster::standby_of(&primary, "cascade-a", &[]);
    a.start();
    a.wait_caught_up(&primary);
    // B's base backup is taken from standby A, and B streams from A (pg_basebackup -R names
    // the server it copied).
    let mut b = Cluster::standby_of(&a, "cascade-b", &[]);
    b.use_faketime();
    b.start();
    let mut cb = b.connect();
    wait_until("B to stream from A", PATIENCE, || {
        cb.query_opt(
            "SELECT 1 FROM pg_stat_wal_receiver WHERE status = 'streaming' AND sender_port = $1",
            &[&i32::from(a.port)],
        )
        .unwrap()
        .is_some()
    });
    let senders: i64 = primary
        .connect()
        .scalar("SELECT count(*) FROM pg_stat_replication");
    assert_eq!(senders, 1, "the primary streams to A only");
    b.wait_caught_up(&primary);
    for standby in [&a, &b] {
        let mut c = standby.connect();
        assert_refuses_to_mint(&mut c);
        let state: String = c.scalar("SELECT state FROM snowflake_status()");
        assert_eq!(state, "standby");
    }
    let handed_out = run_ahead(&primary);
    // What an HA manager checks before it promotes: B has replayed what the primary flushed,
    // through A.
    b.wait_caught_up(&primary);
    primary.kill_postmaster();
    b.set_clock_offset(-5);
    assert_promoted_standby_mints_above(&b, handed_out, 5);
    // A, a standby of the dead primary, still mints nothing.
    assert_refuses_to_mint(&mut a.connect());
}

#[test]
fn an_old_primary_rewound_and_started_again_as_a_primary_an_hour_back_mints_above_the_new_one() {
    let (mut old, new) = an_old_primary_of_worker_5_and_its_standby_on_faketime();
    let before = the_old_primary_mints_ahead_of_the_clock_and_its_standby_catches_up(&old, &new);
    let mut c = new.connect();
    the_standby_cut_off_the_old_primary_writes_wal_it_never_gets_and_stops(&old, &mut c);
    let on_new =
        the_standby_promoted_with_its_clock_behind_mints_above_the_old_primary(&new, &before);
    pg_rewind_takes_the_old_primary_to_the_new_ones_state(&old, &new);
    let after = the_old_primary_started_as_a_primary_an_hour_back_mints_above_the_new_one(
        &mut old, &on_new,
    );
    let all: Vec<i64> = [before, on_new, after].concat();
    assert_no_duplicates(&all);
}

/// A primary of worker 5 and a standby of it on `faketime`, started. The test clusters have no
/// data checksums: pg_rewind needs wal_log_hints. wal_keep_size keeps the old primary's WAL
/// back to the last checkpoint both servers share, which pg_rewind reads.
fn an_old_primary_of_worker_5_and_its_standby_on_faketime() -> (Cluster, Cluster) {
    let old = started(
        "rewind-old",
        &[
            "snowflake.worker_id=5",
            "wal_log_hints=on",
            "wal_keep_size=1GB",
        ],
    );
    let mut new = Cluster::standby_of(&old, "rewind-new", &[]);
    new.use_faketime();
    new.start();
    (old, new)
}

/// The old primary mints, then runs its ids ahead of the clock, and its standby (`new`)
/// catches up. Returns the ids it handed out (for a run ahead, the largest).
fn the_old_primary_mints_ahead_of_the_clock_and_its_standby_catches_up(
    old: &Cluster,
    new: &Cluster,
) -> Vec<i64> {
    let mut before = mint(old, 3, "SELECT snowflake_nextval_batch(50000)");
    before.push(run_ahead(old));
    new.wait_caught_up(old);
    before
}

/// The standby (`c` is connected to it) is cut off; the old primary writes WAL that the
/// standby never gets (a table, no ids: ids minted on both sides of a split would be two
/// servers with one worker id), and is stopped cleanly.
fn the_standby_cut_off_the_old_primary_writes_wal_it_never_gets_and_stops(
    old: &Cluster,
    c: &mut postgres::Client,
) {
    c.batch_execute("ALTER SYSTEM SET primary_conninfo = ''")
        .unwrap();
    c.batch_execute("SELECT pg_reload_conf()").unwrap();
    let mut o = old.connect();
    wait_until("the old primary to lose its standby", PATIENCE, || {
        o.scalar("SELECT count(*) = 0 FROM pg_stat_replication")
    });
    o.batch_execute(
        "CREATE TABLE written_after_the_split AS SELECT g FROM generate_series(1, 1000) g",
    )
    .unwrap();
    drop(o);
    old.stop();
}

/// Failover: the standby (`new`) is promoted with its clock behind, mints above every id the
/// old primary handed out (`before`), and is stopped cleanly. Returns what it minted.
fn the_standby_promoted_with_its_clock_behind_mints_above_the_old_primary(
    new: &Cluster,
    before: &[i64],
) -> Vec<i64> {
    let largest_before = *before.iter().max().unwrap();
    new.set_clock_offset(-5);
    new.promote();
    wait_until_primary(new);
    let on_new = mint(
        new,
        4,
        "SELECT snowflake_nextval() FROM generate_series(1, 5000)",
    );
    let lowest = *on_new.iter().min().unwrap();
    assert!(
        lowest > largest_before,
        "the new primary minted {lowest}, not above {largest_before}:\n{}",
        new.log()
    );
    new.stop();
    on_new
}

/// The old primary is rewound to the new one's state, to be started again as a primary (no
/// standby.signal). pg_rewind copies the new primary's configuration too: the old one gets its
/// own port and socket directory back.
fn pg_rewind_takes_the_old_primary_to_the_new_ones_state(old: &Cluster, new: &Cluster) {
    let out = run_as_postgres(
        Path::new("/"),
        &pg_bin("pg_rewind"),
        &[
            "--target-pgdata",
            old.dir.to_str().unwrap(),
            "--source-pgdata",
            new.dir.to_str().unwrap(),
        ],
    );
    assert!(out.contains("servers diverged at WAL location"), "{out}");
    assert!(!out.contains("no rewind required"), "{out}");
    assert!(!old.dir.join("standby.signal").exists());
    // The test clusters keep their sockets in the data directory: pg_basebackup copied the
    // old primary's socket lock file to the new one, and pg_rewind copied it back. No server
    // holds it.
    for entry in std::fs::read_dir(&old.dir).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        if name.starts_with(".s.PGSQL.") && name.ends_with(".lock") {
            std::fs::remove_file(old.dir.join(name)).unwrap();
        }
    }
    {
        use std::io::Write;
        let mut conf = std::fs::OpenOptions::new()
            .append(true)
            .open(old.dir.join("postgresql.conf"))
            .unwrap();
        writeln!(
            conf,
            "port = {}\nunix_socket_directories = '{}'",
            old.port,
            old.dir.display()
        )
        .unwrap();
    }
}

/// The rewound old primary, started again as a primary with its clock an hour back, has none
/// of its diverged WAL and mints above every id the new one minted (`on_new`), saying it is
/// behind its mark. Returns what it minted.
fn the_old_primary_started_as_a_primary_an_hour_back_mints_above_the_new_one(
    old: &mut Cluster,
    on_new: &[i64],
) -> Vec<i64> {
    let largest_new = *on_new.iter().max().unwrap();
    // pg_rewind copied the new primary's server log too.
    let log_from = old.log().len();
    old.use_faketime();
    old.set_clock_offset(-3600);
    old.start();
    wait_until_primary(old);
    let mut o = old.connect();
    let diverged: bool = o.scalar("SELECT to_regclass('written_after_the_split') IS NOT NULL");
    assert!(!diverged, "the old primary was not rewound");
    let after = mint(
        old,
        4,
        "SELECT snowflake_nextval() FROM generate_series(1, 5000)",
    );
    let lowest = *after.iter().min().unwrap();
    assert!(
        lowest > largest_new,
        "the rewound old primary minted {lowest}, not above {largest_new} minted by the new one:\n{}",
        old.log()
    );
    assert!(
        old.log()[log_from..].contains("behind the high-water mark of worker 5"),
        "{}",
        old.log()
    );
    after
}

/// Whether a backend of the server `c` is connected to matches `condition` in pg_stat_activity.
fn activity(c: &mut postgres::Client, condition: &str) -> bool {
    c.scalar(&format!(
        "SELECT EXISTS (SELECT FROM pg_stat_activity WHERE {condition})"
    ))
}

/// A session that calls `snowflake_nextval()` again and again, on a thread of its own, until
/// `stop` is set or its connection is lost; the thread returns the ids it got and how many
/// calls were refused with 55000 (a mark not written in time). Any other error of the server
/// fails the test.
fn probe(conninfo: String, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<(Vec<i64>, usize)> {
    std::thread::spawn(move || {
        let mut c = postgres::Client::connect(&conninfo, postgres::NoTls).unwrap();
        let (mut got, mut refused) = (Vec::new(), 0);
        while !stop.load(SeqCst) {
            match c.query_one("SELECT snowflake_nextval()", &[]) {
                Ok(row) => got.push(row.get(0)),
                Err(e) => match e.as_db_error() {
                    Some(db) if db.code().code() == "55000" => refused += 1,
                    Some(db) => panic!("minting failed: {db:?}"),
                    None => break,
                },
            }
        }
        (got, refused)
    })
}

/// The condition on pg_stat_activity that matches a probe waiting inside the extension (for a
/// mark).
const PROBE_WAITS: &str = "pid <> pg_backend_pid() AND query = 'SELECT snowflake_nextval()' \
                           AND wait_event_type = 'Extension'";

/// The persisted mark of worker 5.
fn persisted_mark(c: &mut postgres::Client) -> i64 {
    c.query_opt(
        "SELECT persisted_mark FROM snowflake_stats WHERE worker = 5",
        &[],
    )
    .unwrap()
    .map_or(0, |r| r.get(0))
}

#[test]
fn a_synchronous_standby_stopped_during_an_insert_load_holds_commits_and_marks_until_it_returns() {
    let (primary, mut c, standby) = a_primary_of_worker_5_with_a_synchronous_standby_on_faketime();
    let writer_waits = mark_writer_waits_for_the_standby(&mut c);
    let load = an_insert_load_and_a_probe_on(&primary);
    every_session_commits_and_the_marks_are_raised_with_the_standby_up(&load, &mut c);
    let held = the_standby_stopped_holds_every_commit_the_mark_writer_and_the_probe(
        &standby,
        &mut c,
        &writer_waits,
        &load,
    );
    the_standby_back_the_load_goes_on(&standby, &mut c, &load, &held);
    let all = every_committed_row_is_in_t_and_no_id_repeats(load, &mut c);
    the_standby_promoted_an_hour_back_after_the_primary_died_waiting_for_it_mints_above_all(
        &primary,
        &standby,
        &mut c,
        &writer_waits,
        all,
    );
}

/// The sessions of the insert load of the synchronous-standby test.
const SESSIONS: usize = 4;
/// How many rows each session commits before a wait for the load to go on is over.
const ROWS: usize = 100;

/// A primary with worker 5 and a table `t` whose ids the column's default mints, and a
/// synchronous standby on `faketime`; with a session to the primary.
fn a_primary_of_worker_5_with_a_synchronous_standby_on_faketime(
) -> (Cluster, postgres::Client, Cluster) {
    let primary = started("syncstop-primary", &["snowflake.worker_id=5"]);
    let mut c = primary.connect();
    c.batch_execute(
        "CREATE TABLE t (id bigint PRIMARY KEY DEFAULT snowflake_nextval(), session int NOT NULL)",
    )
    .unwrap();
    let mut standby = Cluster::standby_of(&primary, "syncstop-standby", &[]);
    standby.use_faketime();
    standby.start();
    c.batch_execute("ALTER SYSTEM SET synchronous_standby_names = '*'")
        .unwrap();
    c.batch_execute("SELECT pg_reload_conf()").unwrap();
    wait_for_synchronous_standby(&mut c);
    (primary, c, standby)
}

/// The condition on pg_stat_activity that matches the mark writer of the server `c` is
/// connected to waiting for the synchronous standby.
fn mark_writer_waits_for_the_standby(c: &mut postgres::Client) -> String {
    let writer: i32 = c.scalar(
        "SELECT pid FROM pg_stat_activity WHERE backend_type = 'snowflake_ext mark writer'",
    );
    format!("pid = {writer} AND wait_event = 'SyncRep'")
}

/// Sessions inserting rows into `t` and a probe minting ids alone, all without pause.
struct Load {
    stop: Arc<AtomicBool>,
    /// The rows each session has committed so far.
    committed: Arc<Vec<AtomicUsize>>,
    /// Each session's thread; it returns the ids of the rows it committed.
    loaders: Vec<std::thread::JoinHandle<Vec<i64>>>,
    prober: std::thread::JoinHandle<(Vec<i64>, usize)>,
}

impl Load {
    /// Whether every session has committed `ROWS` rows past `n` (its count at some moment).
    fn all_past(&self, n: &[usize]) -> bool {
        self.committed
            .iter()
            .zip(n)
            .all(|(done, &n)| done.load(SeqCst) >= n + ROWS)
    }
}

/// Sessions insert rows whose ids the column's default mints, each row in a transaction of its
/// own, and one more session mints ids alone, all without pause. (Threads of their own, not
/// scoped: a failed wait later must not wait for a session stuck in a commit.)
fn an_insert_load_and_a_probe_on(primary: &Cluster) -> Load {
    let stop = Arc::new(AtomicBool::new(false));
    let committed: Arc<Vec<AtomicUsize>> =
        Arc::new((0..SESSIONS).map(|_| AtomicUsize::new(0)).collect());
    let loaders: Vec<_> = (0..SESSIONS)
        .map(|session| {
            let (stop, committed) = (stop.clone(), committed.clone());
            let conninfo = primary.conninfo("postgres");
            std::thread::spawn(move || {
                let mut c = postgres::Client::connect(&conninfo, postgres::NoTls).unwrap();
                let mut got: Vec<i64> = Vec::new();
                while !stop.load(SeqCst) {
                    let row = c
                        .query_one(
                            "INSERT INTO t (session) VALUES ($1) RETURNING id",
                            &[&(session as i32)],
                        )
                        .unwrap();
                    got.push(row.get(0));
                    committed[session].fetch_add(1, SeqCst);
                }
                got
            })
        })
        .collect();
    let prober = probe(primary.conninfo("postgres"), stop.clone());
    Load {
        stop,
        committed,
        loaders,
        prober,
    }
}

/// Every session commits rows, and while the standby answers, the mark writer raises the
/// marks again and again: the persisted mark moves two seconds past the first one seen.
fn every_session_commits_and_the_marks_are_raised_with_the_standby_up(
    load: &Load,
    c: &mut postgres::Client,
) {
    wait_until("every session to commit rows", PATIENCE, || {
        load.all_past(&[0; SESSIONS])
    });
    let first_mark = persisted_mark(c);
    wait_until(
        "the marks to be raised with the synchronous standby up",
        PATIENCE,
        || persisted_mark(c) > first_mark + (2000 << 22),
    );
}

/// The standby stops in the middle of the load: every insert's commit waits for it, the mark
/// writer's next commit too, and so does the minting that needs a new mark. Returns the rows
/// each session had committed by then.
fn the_standby_stopped_holds_every_commit_the_mark_writer_and_the_probe(
    standby: &Cluster,
    c: &mut postgres::Client,
    writer_waits: &str,
    load: &Load,
) -> Vec<usize> {
    standby.stop();
    wait_until(
        "every inserting session to wait for the standby",
        PATIENCE,
        || {
            c.scalar::<i64>(
                "SELECT count(*) FROM pg_stat_activity
                 WHERE query LIKE 'INSERT INTO t %' AND wait_event = 'SyncRep'",
            ) == SESSIONS as i64
        },
    );
    wait_until("the mark writer to wait for the standby", PATIENCE, || {
        activity(c, writer_waits)
    });
    wait_until("the probe to wait for a mark", PATIENCE, || {
        activity(c, PROBE_WAITS)
    });
    load.committed.iter().map(|n| n.load(SeqCst)).collect()
}

/// The standby returns; the load goes on: every session commits more rows than it had `held`.
fn the_standby_back_the_load_goes_on(
    standby: &Cluster,
    c: &mut postgres::Client,
    load: &Load,
    held: &[usize],
) {
    standby.start();
    wait_for_synchronous_standby(c);
    wait_until("every session to commit more rows", PATIENCE, || {
        load.all_past(held)
    });
}

/// The load stopped: every row a session committed is in `t`, each session's and the probe's
/// ids are strictly increasing, and no id was handed out twice. Returns them all.
fn every_committed_row_is_in_t_and_no_id_repeats(load: Load, c: &mut postgres::Client) -> Vec<i64> {
    load.stop.store(true, SeqCst);
    let inserted: Vec<Vec<i64>> = load
        .loaders
        .into_iter()
        .map(|t| t.join().unwrap())
        .collect();
    let (probed, refused) = load.prober.join().unwrap();
    // A wait of more than 10 s for a mark ends in 55000 (the standby may take that long to come
    // back); nothing else is refused.
    eprintln!(
        "the probe got {} ids; {refused} calls refused",
        probed.len()
    );
    assert_strictly_increasing(&probed);
    for (session, got) in inserted.iter().enumerate() {
        assert_strictly_increasing(got);
        let stored = ids(
            c,
            &format!("SELECT id FROM t WHERE session = {session} ORDER BY id"),
        );
        assert_eq!(
            &stored, got,
            "session {session}: the rows committed are not in t"
        );
    }
    let mut all: Vec<i64> = inserted.concat();
    all.extend(&probed);
    assert_no_duplicates(&all);
    all
}

/// Once more without the standby; the primary is killed while the mark writer waits for it,
/// and the standby, its clock an hour back, is promoted: it mints above every id handed out
/// (`all` and what a new probe got).
fn the_standby_promoted_an_hour_back_after_the_primary_died_waiting_for_it_mints_above_all(
    primary: &Cluster,
    standby: &Cluster,
    c: &mut postgres::Client,
    writer_waits: &str,
    mut all: Vec<i64>,
) {
    standby.stop();
    let stop = Arc::new(AtomicBool::new(false));
    let prober = probe(primary.conninfo("postgres"), stop);
    wait_until("the mark writer to wait for the standby", PATIENCE, || {
        activity(c, writer_waits)
    });
    wait_until("the probe to wait for a mark", PATIENCE, || {
        activity(c, PROBE_WAITS)
    });
    primary.kill_postmaster();
    let (last_probed, _) = prober.join().unwrap();
    all.extend(&last_probed);
    let handed_out = *all.iter().max().unwrap();
    standby.set_clock_offset(-3600);
    standby.start();
    assert_promoted_standby_mints_above(standby, handed_out, 5);
}

/// `cp -a` a data directory as root, keeping it postgres's.
fn copy_dir(from: &Path, to: &Path) {
    let out = std::process::Command::new("cp")
        .args(["-a", from.to_str().unwrap(), to.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_base_backup_restored_with_archived_wal_an_hour_back_mints_above_what_it_replayed() {
    let archive = a_wal_archive();
    let primary = a_primary_of_worker_6_archiving_its_wal_into(&archive);
    let backup = a_base_backup_of(&primary);
    // The base backup comes first; the ids after it exist only in the archived WAL.
    let issued = mint(&primary, 3, "SELECT snowflake_nextval_batch(50000)");
    let largest = *issued.iter().max().unwrap();
    let mut c = primary.connect();
    the_primarys_last_wal_is_archived_and_it_stops(&primary, &mut c, &archive);
    let restored_dir = the_backup_set_to_recover_from_the_archive(&backup, &archive);
    the_restored_server_an_hour_back_mints_above_what_it_replayed(restored_dir, largest);
}

/// A directory for archived WAL, `postgres`'s.
fn a_wal_archive() -> Scratch {
    Scratch::dir_for_postgres("pitr-archive")
}

/// A primary of worker 6 that archives its WAL into `archive`, started.
fn a_primary_of_worker_6_archiving_its_wal_into(archive: &Path) -> Cluster {
    let archive_command = format!("archive_command=cp %p {}/%f", archive.display());
    started(
        "pitr-primary",
        &["snowflake.worker_id=6", "archive_mode=on", &archive_command],
    )
}

/// A base backup of `primary` (with pg_basebackup); returns its directory.
fn a_base_backup_of(primary: &Cluster) -> Scratch {
    let backup = Scratch::dir_for_postgres("pitr-backup");
    let port = primary.port.to_string();
    run_as_postgres(
        Path::new("/"),
        &pg_bin("pg_basebackup"),
        &[
            "-h",
            "127.0.0.1",
            "-p",
            &port,
            "-U",
            "postgres",
            "-D",
            backup.to_str().unwrap(),
            "-c",
            "fast",
        ],
    );
    backup
}

/// The primary (`c` is connected to it) switches to a new WAL file, the last one is in
/// `archive`, and the primary is stopped.
fn the_primarys_last_wal_is_archived_and_it_stops(
    primary: &Cluster,
    c: &mut postgres::Client,
    archive: &Path,
) {
    let segment: String = c.scalar("SELECT pg_walfile_name(pg_switch_wal())");
    wait_until(&format!("{segment} to be archived"), PATIENCE, || {
        archive.join(&segment).exists()
    });
    primary.stop();
}

/// A copy of `backup` set to recover from `archive` (recovery.signal, a restore_command);
/// returns its directory.
fn the_backup_set_to_recover_from_the_archive(backup: &Path, archive: &Path) -> std::path::PathBuf {
    let restored_dir = test_dir("pitr-restored");
    let _ = std::fs::remove_dir_all(&restored_dir);
    copy_dir(backup, &restored_dir);
    std::fs::write(restored_dir.join("recovery.signal"), "").unwrap();
    let _ = std::fs::remove_file(restored_dir.join("server.log"));
    {
        use std::io::Write;
        let mut conf = std::fs::OpenOptions::new()
            .append(true)
            .open(restored_dir.join("postgresql.conf"))
            .unwrap();
        writeln!(
            conf,
            "archive_mode = off\nrestore_command = 'cp {}/%f %p'",
            archive.display()
        )
        .unwrap();
    }
    std::process::Command::new("chown")
        .args(["-R", "postgres:postgres", restored_dir.to_str().unwrap()])
        .status()
        .unwrap();
    std::process::Command::new("chmod")
        .args(["700", restored_dir.to_str().unwrap()])
        .status()
        .unwrap();
    restored_dir
}

/// The server restored in `restored_dir`, started with its clock an hour back, replays the
/// archived WAL and mints above every id in it (up to `largest`), saying it is behind its mark.
fn the_restored_server_an_hour_back_mints_above_what_it_replayed(
    restored_dir: std::path::PathBuf,
    largest: i64,
) {
    let mut restored = Cluster::existing(restored_dir);
    restored.use_faketime();
    restored.set_clock_offset(-3600);
    restored.start();
    wait_until_primary(&restored);
    let after = mint(
        &restored,
        3,
        "SELECT snowflake_nextval(6) FROM generate_series(1, 3000)",
    );
    let lowest = *after.iter().min().unwrap();
    assert!(
        lowest > largest,
        "the restored server minted {lowest}, not above {largest} from the replayed WAL:\n{}",
        restored.log()
    );
    assert!(
        restored
            .log()
            .contains("behind the high-water mark of worker 6"),
        "{}",
        restored.log()
    );
}

/// pg_upgrade of a cluster that issued ids into a new cluster (same major), then a start with
/// the clock an hour back: ids continue above. `pg_upgrade --check` passes first, with the
/// library preloaded in both clusters.
fn upgrade(mode: &str) {
    let old = started(&format!("upgrade-old{mode}"), &["snowflake.worker_id=7"]);
    let issued = mint(&old, 3, "SELECT snowflake_nextval_batch(50000)");
    let largest = *issued.iter().max().unwrap();
    old.stop();
    let mut new = Cluster::new(&format!("upgrade-new{mode}"), &["snowflake.worker_id=7"]);
    let work = Scratch::dir_for_postgres(&format!("upgrade-work{mode}"));
    let bin = pg_bin("");
    let (p1, p2) = (free_port().to_string(), free_port().to_string());
    let args = |extra: &str| {
        vec![
            "-b".to_string(),
            bin.display().to_string(),
            "-B".into(),
            bin.display().to_string(),
            "-d".into(),
            old.dir.display().to_string(),
            "-D".into(),
            new.dir.display().to_string(),
            "-p".into(),
            p1.clone(),
            "-P".into(),
            p2.clone(),
            extra.into(),
        ]
    };
    let check: Vec<String> = args("--check");
    let check: Vec<&str> = check.iter().map(String::as_str).collect();
    let out = run_as_postgres(&work, &pg_bin("pg_upgrade"), &check);
    assert!(out.contains("Clusters are compatible"), "{out}");
    // Copying is the default mode (PostgreSQL 15's pg_upgrade has no --copy option).
    let real: Vec<String> = args(if mode == "--link" {
        "--link"
    } else {
        "--verbose"
    });
    let real: Vec<&str> = real.iter().map(String::as_str).collect();
    run_as_postgres(&work, &pg_bin("pg_upgrade"), &real);
    new.use_faketime();
    new.set_clock_offset(-3600);
    new.start();
    let after = mint(
        &new,
        3,
        "SELECT snowflake_nextval() FROM generate_series(1, 3000)",
    );
    let lowest = *after.iter().min().unwrap();
    assert!(
        lowest > largest,
        "after pg_upgrade {mode} the new cluster minted {lowest}, not above {largest}:\n{}",
        new.log()
    );
}

#[test]
fn pg_upgrade_copy_carries_the_marks() {
    upgrade("--copy");
}

#[test]
fn pg_upgrade_link_carries_the_marks() {
    upgrade("--link");
}

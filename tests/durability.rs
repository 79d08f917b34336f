//! Ids never go backwards: across a crash of the postmaster or of one backend, a clean stop, a
//! clock set back an hour while the server was down, and clock steps while it runs. Faults are
//! real: `kill -9`, and `faketime` giving the server the clock each test chooses.

mod common;

use common::*;
use std::process::Command;
use std::time::{Duration, Instant};

/// Issues ids of worker 3 from several concurrent sessions, as singles and as batches, and
/// returns them all (as read back by the clients).
fn issue_from_sessions(cluster: &Cluster) -> Vec<i64> {
    let threads: Vec<_> = (0..4)
        .map(|i| {
            let conninfo = cluster.conninfo("postgres");
            std::thread::spawn(move || {
                let mut c = postgres::Client::connect(&conninfo, postgres::NoTls).unwrap();
                let sql = if i % 2 == 0 {
                    "SELECT snowflake_nextval(3) FROM generate_series(1, 2000)"
                } else {
                    "SELECT snowflake_nextval_batch(3, 5000)"
                };
                let got = ids(&mut c, sql);
                assert_strictly_increasing(&got);
                got
            })
        })
        .collect();
    threads
        .into_iter()
        .flat_map(|t| t.join().unwrap())
        .collect()
}

/// After `fault`, which stops or crashes the server (with `settings`) and has it running again
/// with its clock an hour behind, every new id is above every id issued before.
fn survives(name: &str, settings: &[&str], fault: impl FnOnce(&Cluster)) -> Cluster {
    let mut cluster = Cluster::new(name, settings);
    cluster.use_faketime();
    cluster.start();
    cluster
        .connect()
        .batch_execute("CREATE EXTENSION snowflake_ext")
        .unwrap();
    let before = issue_from_sessions(&cluster);
    let max_before = *before.iter().max().unwrap();

    fault(&cluster);

    let mut c = cluster.connect();
    let now: f64 = c.scalar("SELECT extract(epoch FROM clock_timestamp())::float8");
    assert!(
        (now * 1000.0) as i64 <= unix_ms_now() - 3_590_000,
        "the server's clock is not an hour back"
    );
    let after = issue_from_sessions(&cluster);
    let min_after = *after.iter().min().unwrap();
    assert!(
        min_after > max_before,
        "{name}: id {min_after} after the restart is not above {max_before}"
    );

    // The stats show the high-water mark above every id issued.
    let row = c
        .query_one(
            "SELECT last_id, persisted_mark FROM snowflake_stats WHERE worker = 3",
            &[],
        )
        .unwrap();
    let (last, mark): (i64, i64) = (row.get(0), row.get(1));
    assert_eq!(last, *after.iter().max().unwrap());
    assert!(
        mark > last,
        "high-water mark {mark} does not cover the last id {last}"
    );
    let log = cluster.log();
    assert!(
        log.contains("WARNING:  snowflake: the system clock is")
            && log.contains("behind the high-water mark of worker 3"),
        "{name}: no start-up warning about the clock:\n{log}"
    );
    cluster
}

/// Stops the server with `stop`, sets its clock an hour back, and starts it again.
fn restart_an_hour_back(cluster: &Cluster, stop: fn(&Cluster)) {
    stop(cluster);
    cluster.set_clock_offset(-3600);
    cluster.start();
}

#[test]
fn a_postmaster_killed_and_restarted_an_hour_back_never_repeats_ids() {
    survives("kill-postmaster", &[], |cluster| {
        restart_an_hour_back(cluster, Cluster::kill_postmaster)
    });
}

/// Seata's layout puts the worker id first (`worker | time | sequence`): each worker's ids
/// still only go up, across a crash and a clock an hour back, as in the default layout.
#[test]
fn a_seata_server_killed_and_restarted_an_hour_back_never_repeats_ids() {
    let cluster = survives(
        "kill-postmaster-seata",
        &["snowflake.layout=seata"],
        |cluster| restart_an_hour_back(cluster, Cluster::kill_postmaster),
    );
    let r = cluster
        .connect()
        .query_one(
            "SELECT (SELECT layout FROM snowflake_status()), last_id FROM snowflake_stats WHERE worker = 3",
            &[],
        )
        .unwrap();
    let (layout, last): (String, i64) = (r.get(0), r.get(1));
    assert_eq!((layout.as_str(), last >> 53), ("seata", 3));
}

#[test]
fn a_clean_stop_and_a_restart_an_hour_back_never_repeats_ids() {
    survives("clean-stop", &[], |cluster| {
        restart_an_hour_back(cluster, Cluster::stop)
    });
}

/// The tick of an id of the default layout (time and sequence, as its worker counts them).
fn tick_of(id: i64) -> i64 {
    ((id >> 22) << 12) | (id & 4095)
}

#[test]
fn a_clean_stop_resumes_one_past_the_last_id_every_time() {
    let mut cluster = Cluster::new("clean-stop-exact", &["snowflake.worker_id=3"]);
    cluster.use_faketime();
    cluster.start();
    cluster
        .connect()
        .batch_execute("CREATE EXTENSION snowflake_ext")
        .unwrap();
    // Each start is an hour back, so the clock is behind the ids and a restarted worker
    // continues from its mark, which a clean stop leaves one past its last id. Several stops:
    // the postmaster signals the mark writer twice at each, and the second must not cancel the
    // final marks.
    for round in 0..8 {
        let mut c = cluster.connect();
        let issued = ids(
            &mut c,
            "SELECT snowflake_nextval() FROM generate_series(1, 5000)",
        );
        let last = *issued.last().unwrap();
        drop(c);
        restart_an_hour_back(&cluster, Cluster::stop);
        let first: i64 = cluster.connect().scalar("SELECT snowflake_nextval()");
        assert_eq!(
            tick_of(first),
            tick_of(last) + 1,
            "round {round}: the first id after a clean stop, {first}, is not the one after the last, {last}"
        );
    }
    assert!(
        !cluster
            .log()
            .contains("could not write the final high-water marks"),
        "{}",
        cluster.log()
    );
}

#[test]
fn a_backend_killed_mid_stream_never_repeats_ids() {
    survives("kill-backend", &[], |cluster| {
        // A backend busy issuing ids is killed; the postmaster resets shared memory and restarts
        // every process, without stopping. The clock goes back an hour just before.
        let mut busy = cluster.connect();
        let pid: i32 = busy.scalar("SELECT pg_backend_pid()");
        let mut c = cluster.connect();
        let issued = |c: &mut postgres::Client| -> i64 {
            c.scalar("SELECT issued FROM snowflake_stats WHERE worker = 3")
        };
        let before = issued(&mut c);
        let stream = std::thread::spawn(move || {
            // Runs until the crash ends it. The series is a set function in a select list,
            // which hands on its rows one at a time: in FROM it is written out whole first, a
            // temporary file of 1.2 GB before the first id (three majors at once filled a CI
            // machine's disk).
            let _ = busy.batch_execute(
                "SELECT count(snowflake_nextval(3)) FROM (SELECT generate_series(1, 100000000)) AS g",
            );
        });
        wait_until("the busy backend to issue ids", PATIENCE, || {
            issued(&mut c) > before
        });
        let postmaster = cluster.postmaster_pid();
        cluster.set_clock_offset(-3600);
        let status = Command::new("kill")
            .args(["-9", &pid.to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        stream.join().unwrap();
        wait_until("a crash restart", PATIENCE, || {
            cluster
                .log()
                .split_once("all server processes terminated; reinitializing")
                .is_some_and(|(_, after)| {
                    after.contains("database system is ready to accept connections")
                })
        });
        assert_eq!(
            cluster.postmaster_pid(),
            postmaster,
            "the postmaster itself restarted"
        );
    });
}

#[test]
fn clock_steps_back_while_running_neither_stall_nor_repeat() {
    let mut cluster = Cluster::new("clock-steps", &[]);
    cluster.use_faketime();
    cluster.start();
    let mut c = cluster.connect();
    c.batch_execute("CREATE EXTENSION snowflake_ext").unwrap();

    // 10,000 ids a second, as 100 ids every 10 ms, for 3 s; the clock steps back 10 s after 1 s
    // and a further hour after 2 s. After the first call (which waits for worker 2's first
    // mark), no call is ever seen waiting, for the clock or anything else.
    let pid: i32 = c.scalar("SELECT pg_backend_pid()");
    let sql = "SELECT snowflake_nextval(2) FROM generate_series(1, 100)";
    let mut all = ids(&mut c, sql);
    let start = Instant::now();
    let waits;
    (all, waits) = extension_waits(&cluster, pid, || {
        for tick in 1..300u32 {
            if tick == 100 {
                cluster.set_clock_offset(-10);
            }
            if tick == 200 {
                cluster.set_clock_offset(-3610);
            }
            all.extend(ids(&mut c, sql));
            let next = start + Duration::from_millis(10 * tick as u64);
            if let Some(wait) = next.checked_duration_since(Instant::now()) {
                std::thread::sleep(wait);
            }
        }
        all
    });
    assert_eq!(all.len(), 30_000);
    assert_strictly_increasing(&all);
    assert_eq!(
        waits, 0,
        "calls were seen waiting while the clock stepped back"
    );

    let row = c
        .query_one(
            "SELECT clock_steps_back, ahead_ms FROM snowflake_stats WHERE worker = 2",
            &[],
        )
        .unwrap();
    let (steps, ahead): (i64, i64) = (row.get(0), row.get(1));
    assert_eq!(steps, 2);
    assert!(
        ahead > 3_500_000,
        "the time field should run about an hour ahead, not {ahead} ms"
    );
    let log = cluster.log();
    let warnings: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("WARNING:  snowflake: the system clock stepped back by"))
        .collect();
    assert_eq!(warnings.len(), 2, "{log}");
    assert!(
        warnings[0].contains("by 10") || warnings[0].contains("by 9"),
        "{}",
        warnings[0]
    );
    assert!(
        warnings[1].contains("by 3600") || warnings[1].contains("by 3599"),
        "{}",
        warnings[1]
    );
}

/// The boot clock, which a correct kernel never steps, stepping back a minute with the wall
/// clock (a faked monotonic clock): the worker re-anchors it, says so once, and ids ahead of
/// the clock do not wait the minute out.
#[test]
fn a_boot_clock_stepping_back_is_re_anchored_and_ids_do_not_wait() {
    let mut cluster = Cluster::new("boot-clock", &["snowflake.worker_id=2"]);
    cluster.use_faketime();
    cluster.start_with(&[("FAKETIME_MONOTONIC", "1")]);
    let mut c = cluster.connect();
    c.batch_execute("CREATE EXTENSION snowflake_ext").unwrap();
    // Batches of a million ids (244 ms of them, taken in one step) until the worker runs a
    // second ahead of the clock, within snowflake.max_ahead (2 s).
    let batch =
        "SELECT snowflake_lastval() FROM (SELECT snowflake_nextval_batch(1000000) LIMIT 1) one";
    let mut before = Vec::new();
    wait_until("the worker a second ahead", PATIENCE, || {
        before.extend(ids(&mut c, batch));
        let ahead: i64 = c.scalar("SELECT ahead_ms FROM snowflake_stats WHERE worker = 2");
        ahead > 1000
    });
    cluster.set_clock_offset(-60);
    // Ids are now a minute ahead of the wall clock; with the boot clock re-anchored they are
    // still only about a second ahead of the worker's own timeline, under the bound.
    let pid: i32 = c.scalar("SELECT pg_backend_pid()");
    let (after, waits) = extension_waits(&cluster, pid, || {
        ids(
            &mut c,
            "SELECT snowflake_nextval() FROM generate_series(1, 20000)",
        )
    });
    assert_eq!(
        waits,
        0,
        "ids waited for the boot clock:\n{}",
        cluster.log()
    );
    assert!(after[0] > *before.iter().max().unwrap());
    assert_strictly_increasing(&after);
    let log = cluster.log();
    let reported = log
        .lines()
        .filter(|l| {
            l.contains("WARNING:  snowflake: the boot clock (CLOCK_BOOTTIME) stepped back by")
        })
        .count();
    assert_eq!(reported, 1, "{log}");
}

#[test]
fn a_dump_restored_into_a_new_database_keeps_issuing_new_ids() {
    let cluster = started("dump", &[]);
    let mut c = cluster.connect();
    c.batch_execute("CREATE DATABASE shop").unwrap();
    c.batch_execute("CREATE DATABASE shop_copy").unwrap();
    let mut shop = cluster.connect_to("shop");
    shop.batch_execute(
        "CREATE EXTENSION snowflake_ext;
         CREATE TABLE orders (id bigint PRIMARY KEY DEFAULT snowflake_nextval(3), item text);
         CREATE TABLE lines (id bigint PRIMARY KEY DEFAULT snowflake_nextval(3),
                             order_id bigint REFERENCES orders);
         INSERT INTO orders (item) SELECT 'item ' || g FROM generate_series(1, 5000) g;
         INSERT INTO lines (order_id) SELECT id FROM orders;",
    )
    .unwrap();

    let dump = cluster.pg_dump(&["-Fc", "shop"]);
    cluster.pg_restore("shop_copy", &dump);

    let mut copy = cluster.connect_to("shop_copy");
    let restored: i64 = copy.scalar("SELECT count(*) FROM lines");
    assert_eq!(restored, 5000);
    let max_restored: i64 = copy.scalar("SELECT max(id) FROM lines");
    // New rows in the restored copy (and in the original) take new ids: no key collides.
    copy.batch_execute(
        "INSERT INTO orders (item) SELECT 'new ' || g FROM generate_series(1, 5000) g;
         INSERT INTO lines (order_id) SELECT id FROM orders WHERE item LIKE 'new %';",
    )
    .unwrap();
    let min_new: i64 = copy.scalar("SELECT min(id) FROM orders WHERE item LIKE 'new %'");
    assert!(min_new > max_restored);
    shop.batch_execute(
        "INSERT INTO orders (item) SELECT 'more ' || g FROM generate_series(1, 100) g",
    )
    .unwrap();
    let default: String = copy.scalar(
        "SELECT pg_get_expr(adbin, adrelid) FROM pg_attrdef WHERE adrelid = 'orders'::regclass",
    );
    assert_eq!(default, "snowflake_nextval(3)");
}

/// `snowflake_restore_mark(above)` gives all 1,024 workers the same floor: the statistics show
/// the workers that minted or hold a mark of their own, not a row per worker id; and after a
/// restart every worker still starts above the floor.
#[test]
fn a_restore_of_every_worker_adds_no_rows_to_the_statistics() {
    let cluster = started("restore-stats", &["snowflake.worker_id=3"]);
    let mut c = cluster.connect();
    let before: i64 = c.scalar("SELECT snowflake_nextval()");
    let above = before + (1_i64 << 32);
    let floor: i64 = c.scalar(&format!("SELECT snowflake_restore_mark({above})"));
    assert!(floor > above);
    let workers: Vec<i32> = c
        .query("SELECT worker FROM snowflake_stats ORDER BY worker", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(workers, vec![3]);
    cluster.stop();
    cluster.start();
    let mut c = cluster.connect();
    // At most the configured worker, whose mark the writer moves on at start; not the floor.
    let shown: Vec<i32> = c
        .query("SELECT worker FROM snowflake_stats", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert!(shown.iter().all(|&w| w == 3), "{shown:?}");
    let after: i64 = c.scalar("SELECT snowflake_nextval()");
    assert!(after > above);
    let other: i64 = c.scalar("SELECT snowflake_nextval(700)");
    assert!(other > above, "worker 700 too starts above the floor");
}

//! Node-wide generation against a real server: many concurrent sessions, bursts past 4096 ids
//! per millisecond, and time-range queries through the primary-key index.

mod common;

use common::*;
use std::collections::HashSet;
use std::sync::{Arc, Barrier};

const SESSIONS: i32 = 8;
const ROWS_PER_SESSION: i32 = 50_000;
const ROWS_PER_STATEMENT: i32 = 50;

#[test]
fn concurrent_sessions_insert_unique_increasing_ids_of_their_worker() {
    let cluster = started("concurrent", &[]);
    let mut admin = cluster.connect();
    admin
        .batch_execute(
            "CREATE TABLE orders (id bigint PRIMARY KEY DEFAULT snowflake_nextval(3),
                                  session int NOT NULL, n int NOT NULL)",
        )
        .unwrap();

    let start_ms = unix_ms_now();
    let barrier = Arc::new(Barrier::new(SESSIONS as usize));
    let threads: Vec<_> = (0..SESSIONS)
        .map(|session| {
            let conninfo = cluster.conninfo("postgres");
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                let mut c = postgres::Client::connect(&conninfo, postgres::NoTls).unwrap();
                c.batch_execute("SET synchronous_commit = off").unwrap();
                let insert = c
                    .prepare(
                        "INSERT INTO orders (session, n)
                         SELECT $1, g FROM generate_series($2::int, $3::int) g",
                    )
                    .unwrap();
                barrier.wait();
                let mut n = 0;
                while n < ROWS_PER_SESSION {
                    let last = n + ROWS_PER_STATEMENT - 1;
                    c.execute(&insert, &[&session, &n, &last]).unwrap();
                    n += ROWS_PER_STATEMENT;
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let end_ms = unix_ms_now();

    let row = admin
        .query_one(
            "SELECT count(*), count(DISTINCT id), min(id), max(id),
                    count(*) FILTER (WHERE snowflake_worker(id) <> 3)
             FROM orders",
            &[],
        )
        .unwrap();
    let (count, distinct, min_id, max_id, other_workers): (i64, i64, i64, i64, i64) =
        (row.get(0), row.get(1), row.get(2), row.get(3), row.get(4));
    assert_eq!(count, (SESSIONS * ROWS_PER_SESSION) as i64);
    assert_eq!(distinct, count, "duplicate ids");
    assert_eq!(other_workers, 0, "ids of a worker other than 3");
    // Ids run ahead of the clock only by the milliseconds they borrow when a millisecond's
    // 4096 sequence numbers run out, which a fast enough machine does.
    let borrowed: i64 = admin.scalar("SELECT borrowed_ms FROM snowflake_stats WHERE worker = 3");
    assert!(
        unix_ms_of(min_id) >= start_ms && unix_ms_of(max_id) <= end_ms + borrowed,
        "ids' times {}..{} outside the test's window {start_ms}..{end_ms} (+{borrowed} ms borrowed)",
        unix_ms_of(min_id),
        unix_ms_of(max_id)
    );

    // In each session, later rows have larger ids.
    let out_of_order: i64 = admin.scalar(
        "SELECT count(*) FROM (
               SELECT id, lag(id) OVER (PARTITION BY session ORDER BY n) AS prev FROM orders
             ) s WHERE id <= prev",
    );
    assert_eq!(out_of_order, 0);

    // The sessions really did interleave: their id ranges overlap.
    let overlapping: i64 = admin.scalar(
        "WITH r AS (SELECT session, min(id) lo, max(id) hi FROM orders GROUP BY session)
             SELECT count(*) FROM r a JOIN r b ON a.session < b.session
             WHERE a.lo < b.hi AND b.lo < a.hi",
    );
    assert!(overlapping > 0, "the sessions ran one after another");

    // snowflake_decode agrees with the single-field functions, in both call styles.
    let mismatches: i64 = admin.scalar(
        "SELECT count(*) FROM orders o, snowflake_decode(o.id) d
             WHERE d.worker <> 3 OR d.ts <> snowflake_timestamp(o.id)
                OR d.seq <> snowflake_sequence(o.id)
                OR snowflake_compose(d.ts, d.worker, d.seq) <> o.id",
    );
    assert_eq!(mismatches, 0);
    let decoded = admin
        .query(
            "SELECT (snowflake_decode(id)).* FROM orders ORDER BY id LIMIT 3",
            &[],
        )
        .unwrap();
    assert_eq!(decoded.len(), 3);
    assert_eq!(decoded[0].get::<_, i32>("worker"), 3);

    let stats = admin
        .query_one(
            "SELECT issued, last_id FROM snowflake_stats WHERE worker = 3",
            &[],
        )
        .unwrap();
    assert_eq!(stats.get::<_, i64>(0), count);
    assert_eq!(stats.get::<_, i64>(1), max_id);
}

#[test]
fn bursts_past_4096_ids_a_millisecond_stay_unique_and_ordered() {
    let cluster = started("burst", &[]);
    let mut c = cluster.connect();

    // One call takes 100,000 consecutive ids: 24 milliseconds' worth of sequence numbers,
    // issued in well under a millisecond of wall time.
    let ids: Vec<i64> = c
        .query("SELECT snowflake_nextval_batch(5, 100000)", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(ids.len(), 100_000);
    assert!(
        ids.windows(2).all(|w| w[0] < w[1]),
        "batch not strictly increasing"
    );
    let per_ms = ids
        .iter()
        .filter(|&&id| (id >> 22) == (ids[0] >> 22))
        .count();
    assert_eq!(
        per_ms, 4096,
        "the first millisecond is not filled to 4096 ids"
    );
    let seqs: HashSet<i64> = ids.iter().map(|id| id & 4095).collect();
    assert_eq!(seqs.len(), 4096);

    let borrowed: i64 = c.scalar("SELECT borrowed_ms FROM snowflake_stats WHERE worker = 5");
    assert!(
        borrowed >= 20,
        "only {borrowed} ms borrowed for 100,000 ids"
    );

    // Single calls in a tight loop continue above the batch, and several sessions bursting on
    // the same worker at once never collide.
    let more: Vec<i64> = c
        .query(
            "SELECT snowflake_nextval(5) FROM generate_series(1, 20000)",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert!(more[0] > *ids.last().unwrap());
    assert!(more.windows(2).all(|w| w[0] < w[1]));

    let threads: Vec<_> = (0..6)
        .map(|i| {
            let conninfo = cluster.conninfo("postgres");
            std::thread::spawn(move || {
                let mut c = postgres::Client::connect(&conninfo, postgres::NoTls).unwrap();
                let mut got = Vec::new();
                for _ in 0..10 {
                    let sql = if i % 2 == 0 {
                        "SELECT snowflake_nextval_batch(5, 20000)"
                    } else {
                        "SELECT snowflake_nextval(5) FROM generate_series(1, 5000)"
                    };
                    let batch: Vec<i64> = c
                        .query(sql, &[])
                        .unwrap()
                        .iter()
                        .map(|r| r.get(0))
                        .collect();
                    assert!(batch.windows(2).all(|w| w[0] < w[1]));
                    got.extend(batch);
                }
                got
            })
        })
        .collect();
    let mut all: HashSet<i64> = ids.into_iter().chain(more).collect();
    let mut total = all.len();
    for t in threads {
        let got = t.join().unwrap();
        total += got.len();
        all.extend(got);
    }
    assert_eq!(all.len(), total, "duplicate ids across bursting sessions");
}

#[test]
fn time_range_queries_use_the_primary_key_index() {
    let cluster = started("range", &[]);
    let mut c = cluster.connect();
    c.batch_execute(
        "CREATE TABLE events (id bigint PRIMARY KEY DEFAULT snowflake_nextval(1), v int);
         -- Rows made at known times, one a minute through November 2026 and beyond.
         INSERT INTO events (id, v)
           SELECT snowflake_compose(t, 1, 0), 0
           FROM generate_series('2026-10-25'::timestamptz, '2026-12-05', '1 minute') t;
         INSERT INTO events (v) SELECT 1 FROM generate_series(1, 1000);
         ANALYZE events;",
    )
    .unwrap();
    // One day out of six weeks: selective enough that the index is the plan to use.
    let day = "SELECT count(*) FROM events
               WHERE id >= snowflake_min_id('2026-11-15 00:00+00')
                 AND id < snowflake_min_id('2026-11-16 00:00+00')";
    let plan = explain(&mut c, "COSTS OFF", day);
    assert!(
        plan.contains("Index Only Scan using events_pkey")
            || plan.contains("Index Scan using events_pkey"),
        "no index scan on the primary key:\n{plan}"
    );
    assert!(
        !plan.contains("snowflake_min_id"),
        "min_id not folded to a constant:\n{plan}"
    );
    let n: i64 = c.scalar(day);
    assert_eq!(n, 24 * 60);

    let month = "SELECT count(*) FROM events
                 WHERE id >= snowflake_min_id('2026-11-01 00:00+00')
                   AND id < snowflake_min_id('2026-12-01 00:00+00')";
    let n: i64 = c.scalar(month);
    // November 2026 has 43,200 minutes; the 1,000 rows made now are in the range too when the
    // test runs in November 2026, and outside it otherwise.
    let made_now_in_november: i64 = c.scalar(
        "SELECT count(*) FROM events WHERE v = 1
                    AND snowflake_timestamp(id) >= '2026-11-01 00:00+00'
                    AND snowflake_timestamp(id) < '2026-12-01 00:00+00'",
    );
    assert_eq!(n, 30 * 24 * 60 + made_now_in_november);

    // max_id closes a range inclusively at the end of a millisecond.
    let n: i64 = c.scalar(
        "SELECT count(*) FROM events WHERE id BETWEEN snowflake_min_id('2026-11-01 00:00+00')
                                               AND snowflake_max_id('2026-11-01 00:59:00+00')",
    );
    assert_eq!(n, 60);
}

#[test]
fn parallel_workers_draw_from_the_same_counter() {
    let cluster = started(
        "parallel",
        &[
            "max_parallel_workers_per_gather=2",
            "max_worker_processes=8",
        ],
    );
    let mut c = cluster.connect();
    c.batch_execute(
        "CREATE TABLE big AS SELECT g FROM generate_series(1, 200000) g;
         ANALYZE big;
         SET parallel_setup_cost = 0; SET parallel_tuple_cost = 0;
         SET min_parallel_table_scan_size = 0; SET parallel_leader_participation = off;",
    )
    .unwrap();
    let query = "SELECT snowflake_nextval(8) AS id FROM big";
    let plan = explain(
        &mut c,
        "ANALYZE, VERBOSE, COSTS OFF, TIMING OFF, SUMMARY OFF",
        query,
    );
    assert!(
        plan.contains("Gather") && plan.contains("Workers Launched: 2"),
        "no parallel plan:\n{plan}"
    );
    // The ids are computed below the Gather, in the parallel workers.
    let scan = plan
        .find("Parallel Seq Scan")
        .unwrap_or_else(|| panic!("{plan}"));
    assert!(
        plan[scan..].contains("Output: snowflake_nextval(8)"),
        "not computed in the workers:\n{plan}"
    );
    // Ids made by the two workers (the leader does not participate) never collide.
    let row = c
        .query_one(
            &format!("SELECT count(*), count(DISTINCT id) FROM ({query}) s"),
            &[],
        )
        .unwrap();
    assert_eq!(
        (row.get::<_, i64>(0), row.get::<_, i64>(1)),
        (200_000, 200_000)
    );
    let issued: i64 = c.scalar("SELECT issued FROM snowflake_stats WHERE worker = 8");
    assert_eq!(
        issued, 400_000,
        "the EXPLAIN ANALYZE run and the counted run"
    );
}

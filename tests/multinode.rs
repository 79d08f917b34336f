//! Many nodes, one keyspace: servers that mint ids without talking to each other, whose rows
//! then meet through the replication engines PostgreSQL users run: pglogical multi-master, and
//! native logical replication fanning in to one subscriber.

mod common;

use common::*;
use std::sync::{Arc, Barrier};

const ROWS_PER_SESSION: i32 = 3000;
const SESSIONS_PER_NODE: i32 = 2;

/// `minting` and `created` bracket the moment each row's id is made: PostgreSQL evaluates a
/// row's defaults in column order.
const EVENTS: &str = "CREATE TABLE events (
    minting timestamptz NOT NULL DEFAULT clock_timestamp(),
    id      bigint PRIMARY KEY DEFAULT snowflake_nextval(),
    origin  int NOT NULL,
    session int NOT NULL,
    n       int NOT NULL,
    created timestamptz NOT NULL DEFAULT clock_timestamp())";

fn node(name: &str, worker: i32, preload: &str) -> Cluster {
    let worker = format!("snowflake.worker_id={worker}");
    let preload = format!("shared_preload_libraries={preload}");
    let mut settings = vec![
        worker.as_str(),
        preload.as_str(),
        "wal_level=logical",
        "max_worker_processes=16",
        "max_replication_slots=16",
        "max_wal_senders=16",
        "track_commit_timestamp=on",
    ];
    // Minor releases from 15.19 on load only the output plugins this setting lists; older ones
    // do not know the setting.
    if has_output_plugin_allowlist() {
        settings.push("output_plugin_libraries=pgoutput, test_decoding, pglogical_output");
    }
    let cluster = Cluster::new(name, &settings);
    cluster.start();
    cluster
}

/// A node whose `events` table is published for native logical replication.
fn publisher(name: &str, worker: i32) -> Cluster {
    let cluster = node(name, worker, "snowflake_ext");
    let mut c = cluster.connect();
    c.batch_execute("CREATE EXTENSION snowflake_ext").unwrap();
    c.batch_execute(EVENTS).unwrap();
    c.batch_execute("CREATE PUBLICATION events_pub FOR TABLE events")
        .unwrap();
    cluster
}

fn has_output_plugin_allowlist() -> bool {
    let out = std::process::Command::new(pg_bin("postgres"))
        .arg("--describe-config")
        .output()
        .expect("postgres --describe-config");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .any(|l| l.starts_with("output_plugin_libraries\t"))
}

/// Every node's sessions insert at the same time, in small statements so they interleave.
fn insert_everywhere(nodes: &[&Cluster], origins: &[i32]) {
    let barrier = Arc::new(Barrier::new(nodes.len() * SESSIONS_PER_NODE as usize));
    let mut threads = vec![];
    for (cluster, &origin) in nodes.iter().zip(origins) {
        for session in 0..SESSIONS_PER_NODE {
            let conninfo = cluster.conninfo("postgres");
            let barrier = barrier.clone();
            threads.push(std::thread::spawn(move || {
                let mut c = postgres::Client::connect(&conninfo, postgres::NoTls).unwrap();
                let insert = c
                    .prepare("INSERT INTO events (origin, session, n) SELECT $1, $2, g FROM generate_series($3::int, $4::int) g")
                    .unwrap();
                barrier.wait();
                for start in (0..ROWS_PER_SESSION).step_by(20) {
                    c.execute(&insert, &[&origin, &session, &start, &(start + 19)]).unwrap();
                }
            }));
        }
    }
    for t in threads {
        t.join().unwrap();
    }
}

fn wait_for_rows(cluster: &Cluster, rows: i64, what: &str) {
    wait_for_rows_where(cluster, "true", rows, what);
}

/// count, distinct ids, a digest of all ids in order, and rows whose worker is not their origin.
fn fingerprint(cluster: &Cluster) -> (i64, i64, String, i64) {
    let row = cluster
        .connect()
        .query_one(
            "SELECT count(*), count(DISTINCT id), md5(string_agg(id::text, ',' ORDER BY id)),
                    count(*) FILTER (WHERE snowflake_worker(id) <> origin)
             FROM events",
            &[],
        )
        .unwrap();
    (row.get(0), row.get(1), row.get(2), row.get(3))
}

fn assert_clean_log(cluster: &Cluster, what: &str) {
    let log = cluster.log();
    for bad in ["CONFLICT", "ERROR", "duplicate key"] {
        assert!(!log.contains(bad), "{what}: the log has {bad}:\n{log}");
    }
}

/// Sorting by id sorts by creation time (all servers here share one clock), whatever the
/// machine's speed: every id carries the millisecond it was made in, between its row's
/// `minting` and `created`; so no row sorted before another began to be made after that one
/// was created.
fn assert_ids_follow_creation_time(cluster: &Cluster) {
    let row = cluster
        .connect()
        .query_one(
            "SELECT count(*) FILTER (WHERE ts < date_trunc('milliseconds', minting) OR ts > created),
                    count(*) FILTER (WHERE earlier_minting > created)
             FROM (SELECT minting, created, snowflake_timestamp(id) AS ts,
                          max(date_trunc('milliseconds', minting))
                            OVER (ORDER BY id ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)
                            AS earlier_minting
                   FROM events) s",
            &[],
        )
        .unwrap();
    let (outside, inverted): (i64, i64) = (row.get(0), row.get(1));
    assert_eq!(outside, 0, "ids carrying a time outside their row's making");
    assert_eq!(
        inverted, 0,
        "rows sorted by id before a row created earlier than they began"
    );
}

/// pglogical multi-master between nodes of these worker ids, every `events` table guarded.
fn pglogical_mesh(name: &str, workers: &[i32]) -> Vec<Cluster> {
    let nodes: Vec<Cluster> = workers
        .iter()
        .enumerate()
        .map(|(i, &w)| node(&format!("{name}{}", i + 1), w, "pglogical,snowflake_ext"))
        .collect();
    for (i, n) in nodes.iter().enumerate() {
        let mut c = n.connect();
        c.batch_execute("CREATE EXTENSION snowflake_ext; CREATE EXTENSION pglogical;")
            .unwrap();
        c.batch_execute(EVENTS).unwrap();
        c.batch_execute("SELECT snowflake_guard('events')").unwrap();
        c.execute(
            "SELECT pglogical.create_node(node_name := $1, dsn := $2)",
            &[&format!("node{}", i + 1), &n.conninfo("postgres")],
        )
        .unwrap();
        c.batch_execute("SELECT pglogical.replication_set_add_table('default', 'events')")
            .unwrap();
    }
    // Each node subscribes to the other two; forward_origins := '{}' sends on only the rows a
    // node made itself, so nothing loops.
    for (i, n) in nodes.iter().enumerate() {
        let mut c = n.connect();
        for (j, provider) in nodes.iter().enumerate() {
            if i != j {
                c.execute(
                    "SELECT pglogical.create_subscription(subscription_name := $1, provider_dsn := $2,
                        replication_sets := ARRAY['default'], synchronize_structure := false,
                        synchronize_data := false, forward_origins := '{}')",
                    &[&format!("node{}_from_node{}", i + 1, j + 1), &provider.conninfo("postgres")],
                )
                .unwrap();
            }
        }
    }
    for n in &nodes {
        let mut c = n.connect();
        wait_until("every subscription to replicate", PATIENCE, || {
            c.scalar::<i64>("SELECT count(*) FROM pglogical.show_subscription_status() WHERE status = 'replicating'")
                >= nodes.len() as i64 - 1
        });
    }
    nodes
}

#[test]
fn pglogical_multi_master_three_nodes_converge_without_conflicts() {
    // Correctly configured nodes: the guards on every table let every row through.
    let nodes = pglogical_mesh("mm", &[1, 2, 3]);
    let refs: Vec<&Cluster> = nodes.iter().collect();
    insert_everywhere(&refs, &[1, 2, 3]);
    let total = (3 * SESSIONS_PER_NODE * ROWS_PER_SESSION) as i64;
    for (i, n) in nodes.iter().enumerate() {
        wait_for_rows(n, total, &format!("node{}", i + 1));
    }
    let first = fingerprint(&nodes[0]);
    assert_eq!((first.0, first.1, first.3), (total, total, 0));
    for n in &nodes[1..] {
        assert_eq!(fingerprint(n), first, "the nodes hold different rows");
    }
    for (i, n) in nodes.iter().enumerate() {
        assert_clean_log(n, &format!("node{}", i + 1));
    }
    assert_ids_follow_creation_time(&nodes[0]);
}

#[test]
fn native_logical_replication_fans_three_nodes_into_one() {
    let sources: Vec<Cluster> = (1..=3)
        .map(|i| publisher(&format!("fan{i}"), 10 + i))
        .collect();
    let sink = node("fan-sink", 99, "snowflake_ext");
    let mut c = sink.connect();
    c.batch_execute("CREATE EXTENSION snowflake_ext").unwrap();
    c.batch_execute(EVENTS).unwrap();
    for (i, s) in sources.iter().enumerate() {
        c.batch_execute(&format!(
            "CREATE SUBSCRIPTION from_fan{} CONNECTION '{}' PUBLICATION events_pub",
            i + 1,
            s.conninfo("postgres")
        ))
        .unwrap();
        // Guarded: rows of other workers pass untouched.
        c.batch_execute(&format!(
            "SELECT snowflake_guard_subscription('from_fan{}')",
            i + 1
        ))
        .unwrap();
    }

    let refs: Vec<&Cluster> = sources.iter().collect();
    insert_everywhere(&refs, &[11, 12, 13]);
    let total = (3 * SESSIONS_PER_NODE * ROWS_PER_SESSION) as i64;
    wait_for_rows(&sink, total, "sink");
    let (count, distinct, _, wrong_worker) = fingerprint(&sink);
    assert_eq!((count, distinct, wrong_worker), (total, total, 0));
    let per_origin: Vec<i64> = c
        .query(
            "SELECT count(*) FROM events GROUP BY origin ORDER BY origin",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(per_origin, vec![total / 3; 3]);
    assert_clean_log(&sink, "sink");
    assert_ids_follow_creation_time(&sink);
}

#[test]
fn two_servers_with_the_same_worker_id_collide_loudly_at_the_subscriber() {
    // A misconfiguration: both sources have worker id 20.
    let a = publisher("same-a", 20);
    let b = publisher("same-b", 20);
    let sink = node("same-sink", 99, "snowflake_ext");
    let mut c = sink.connect();
    c.batch_execute(EVENTS.replace(" DEFAULT snowflake_nextval()", "").as_str())
        .unwrap();
    for (name, s) in [("from_a", &a), ("from_b", &b)] {
        c.batch_execute(&format!(
            "CREATE SUBSCRIPTION {name} CONNECTION '{}' PUBLICATION events_pub",
            s.conninfo("postgres")
        ))
        .unwrap();
    }

    // Both mint ids at the same moments: the same (millisecond, worker, sequence) triples.
    insert_everywhere(&[&a, &b], &[1, 2]);
    let ids_of = |s: &Cluster| -> std::collections::HashSet<i64> {
        ids(&mut s.connect(), "SELECT id FROM events")
            .into_iter()
            .collect()
    };
    let shared = ids_of(&a).intersection(&ids_of(&b)).count();
    assert!(
        shared > 0,
        "the two servers happened to mint no common id; the scenario did not happen"
    );

    // The subscriber refuses the second copy of an id: a primary-key violation in its log, and
    // the rows are not silently merged. PostgreSQL 18 reports it as a replication conflict,
    // earlier majors as the unique violation itself.
    let refused = |log: &str| {
        log.contains("duplicate key value violates unique constraint \"events_pkey\"")
            || (log.contains("conflict=insert_exists")
                && log.contains("Key already exists in unique index \"events_pkey\""))
    };
    wait_until(
        "a primary-key violation at the subscriber",
        PATIENCE,
        || refused(&sink.log()),
    );
    let total = (2 * SESSIONS_PER_NODE * ROWS_PER_SESSION) as i64;
    let n: i64 = c.scalar("SELECT count(*) FROM events");
    assert!(
        n < total,
        "all {total} rows arrived although {shared} ids collide"
    );
}

fn count(cluster: &Cluster, sql: &str) -> i64 {
    cluster.connect().scalar(sql)
}

/// What the guard says of a row it stops.
const REFUSED: &str = "row arriving by replication into public.events carries snowflake id";

/// The id the guard named in its first message.
fn guarded_id(cluster: &Cluster) -> i64 {
    let log = cluster.log();
    let after = log
        .split("carries snowflake id ")
        .nth(1)
        .expect("the guard's message");
    after.split(' ').next().unwrap().parse().unwrap()
}

#[test]
fn the_guard_stops_rows_of_the_subscribers_own_worker_id_from_native_replication() {
    // A misconfiguration: the subscriber mints with worker id 20, as source a does. Their ids
    // are all distinct (the subscriber has minted none yet), so no key would ever collide: only
    // the guard notices.
    let a = publisher("guard-a", 20);
    let b = publisher("guard-b", 21);
    let sink = node("guard-sink", 20, "snowflake_ext");
    let mut c = sink.connect();
    c.batch_execute("CREATE EXTENSION snowflake_ext").unwrap();
    c.batch_execute(EVENTS).unwrap();
    let guarded: String = c.scalar("SELECT snowflake_guard('events')");
    assert!(guarded.contains("public.events is guarded"), "{guarded}");
    for (name, s) in [("from_a", &a), ("from_b", &b)] {
        c.batch_execute(&format!(
            "CREATE SUBSCRIPTION {name} CONNECTION '{}' PUBLICATION events_pub",
            s.conninfo("postgres")
        ))
        .unwrap();
    }
    insert_everywhere(&[&a, &b], &[1, 2]);
    let per_source = (SESSIONS_PER_NODE * ROWS_PER_SESSION) as i64;

    // b's rows arrive; a's first row stops a's apply with an error naming table, id and worker.
    wait_for_rows_where(&sink, "origin = 2", per_source, "sink");
    sink.wait_for_log(&format!("ERROR:  {REFUSED}"));
    let id = guarded_id(&sink);
    assert_eq!(
        count(&a, &format!("SELECT count(*) FROM events WHERE id = {id}")),
        1,
        "the id named is one of a's"
    );
    assert!(sink.log().contains(&format!(
        "id {id} of worker 20, this server's own worker id"
    )));
    // Nothing of a's gets through, even once its apply worker has started again and been
    // refused a second time.
    wait_until("a's apply to be refused again", PATIENCE, || {
        sink.log().matches(REFUSED).count() >= 2
    });
    assert_eq!(
        count(&sink, "SELECT count(*) FROM events WHERE origin = 1"),
        0
    );
    // The subscriber's own inserts never meet the guard.
    c.batch_execute(
        "INSERT INTO events (origin, session, n) SELECT 0, 0, g FROM generate_series(1, 10) g",
    )
    .unwrap();
    // The guard is a trigger pg_dump keeps, enabled for replication only.
    let dump = sink.pg_dump(&["--schema-only", "postgres"]);
    let dump = String::from_utf8_lossy(&dump);
    assert!(
        dump.contains("CREATE TRIGGER snowflake_guard BEFORE INSERT ON public.events"),
        "{dump}"
    );
    assert!(
        dump.contains("ENABLE REPLICA TRIGGER snowflake_guard"),
        "{dump}"
    );

    // The warning mode lets such rows through, each logged and counted.
    c.batch_execute("SELECT snowflake_guard('events', on_local_worker => 'warning')")
        .unwrap();
    wait_for_rows_where(&sink, "origin = 1", per_source, "sink");
    let foreign = count(
        &sink,
        "SELECT foreign_rows FROM snowflake_stats WHERE worker = 20",
    );
    assert_eq!(foreign, per_source);
    assert!(sink
        .log()
        .contains("WARNING:  row arriving by replication into public.events carries snowflake id"));

    // Unguarded: nothing is looked at any more.
    c.batch_execute("SELECT snowflake_unguard('events')")
        .unwrap();
    a.connect()
        .batch_execute(
            "INSERT INTO events (origin, session, n) SELECT 1, 9, g FROM generate_series(1, 100) g",
        )
        .unwrap();
    wait_for_rows_where(&sink, "origin = 1", per_source + 100, "sink");
    assert_eq!(
        count(
            &sink,
            "SELECT foreign_rows FROM snowflake_stats WHERE worker = 20"
        ),
        per_source
    );
    let e = error_of(
        &mut c,
        "SELECT snowflake_guard('events', on_local_worker => 'ignore')",
    );
    assert_eq!(e.code, "22023", "{e:?}");
    let e = error_of(&mut c, "SELECT snowflake_guard_subscription('nosuch')");
    assert_eq!(e.code, "42704", "{e:?}");
}

#[test]
fn the_guard_stops_rows_of_a_pglogical_peer_sharing_the_worker_id() {
    // Two multi-master nodes misconfigured with the same worker id.
    let nodes = pglogical_mesh("guard-mm", &[30, 30]);
    nodes[0]
        .connect()
        .batch_execute(
            "INSERT INTO events (origin, session, n) SELECT 1, 0, g FROM generate_series(1, 50) g",
        )
        .unwrap();
    nodes[1].wait_for_log(REFUSED);
    let id = guarded_id(&nodes[1]);
    assert_eq!(
        count(
            &nodes[0],
            &format!("SELECT count(*) FROM events WHERE id = {id}")
        ),
        1
    );
    // Nothing gets through, even once the apply worker has started again and been refused a
    // second time.
    wait_until("the apply to be refused again", PATIENCE, || {
        nodes[1].log().matches(REFUSED).count() >= 2
    });
    assert_eq!(count(&nodes[1], "SELECT count(*) FROM events"), 0);
}

/// Waits until `cluster` holds exactly `rows` events where `condition` holds.
fn wait_for_rows_where(cluster: &Cluster, condition: &str, rows: i64, what: &str) {
    let sql = format!("SELECT count(*) FROM events WHERE {condition}");
    let mut c = cluster.connect();
    wait_until(
        &format!("{what}: {rows} rows where {condition}"),
        PATIENCE,
        || c.scalar::<i64>(&sql) == rows,
    );
}

//! Outgrowing one machine on Citus: a coordinator and two workers with metadata synced, so that
//! every node takes queries, each minting with its own worker id (set by hand, or leased from
//! a registry). Citus 14.0.1, built by `scripts/pg-major citus` (PostgreSQL 16 to 18).

mod common;

use common::*;
use postgres::Client;
use std::collections::HashMap;
use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};

/// Node 0 is the coordinator (it holds no shards), 1 and 2 the workers.
struct Citus {
    nodes: Vec<Cluster>,
}

/// A Citus cluster of three nodes; `own(i)` gives node `i` its own settings (a worker id).
fn citus(name: &str, own: impl Fn(usize) -> Vec<String>) -> Citus {
    let nodes: Vec<Cluster> = (0..3)
        .map(|i| {
            let own = own(i);
            let mut settings = vec![
                "shared_preload_libraries=citus,snowflake_ext",
                // Citus commits a write to several shards in two phases, and moves shards
                // with logical replication.
                "max_prepared_transactions=100",
                "wal_level=logical",
                "max_worker_processes=24",
                "max_replication_slots=16",
                "max_wal_senders=16",
                "max_connections=100",
            ];
            settings.extend(own.iter().map(String::as_str));
            let node = Cluster::new(&format!("{name}-{i}"), &settings);
            node.start();
            node.connect()
                .batch_execute("CREATE EXTENSION citus")
                .unwrap();
            node
        })
        .collect();
    let mut coordinator = nodes[0].connect();
    coordinator
        .batch_execute(&format!(
            "SELECT citus_set_coordinator_host('127.0.0.1', {})",
            nodes[0].port
        ))
        .unwrap();
    for worker in &nodes[1..] {
        coordinator
            .batch_execute(&format!(
                "SELECT citus_add_node('127.0.0.1', {})",
                worker.port
            ))
            .unwrap();
    }
    // Citus creates it on the workers too.
    coordinator
        .batch_execute("CREATE EXTENSION snowflake_ext")
        .unwrap();
    Citus { nodes }
}

/// The worker id each node mints with, and that nothing of its marks is known to Citus.
fn minting_workers(cluster: &Citus) -> Vec<i32> {
    cluster
        .nodes
        .iter()
        .map(|node| {
            let mut c = node.connect();
            let minted = ids(
                &mut c,
                "SELECT snowflake_nextval() FROM generate_series(1, 100)",
            );
            let worker = worker_of(minted[0]);
            assert!(minted.iter().all(|&id| worker_of(id) == worker));
            let citus_objects: i64 = c
                .scalar("SELECT (SELECT count(*) FROM pg_dist_partition
                              WHERE logicalrelid::regclass::text LIKE 'snowflake_ext_state.%')
                          + (SELECT count(*) FROM pg_dist_object
                              WHERE pg_describe_object(classid, objid, objsubid) LIKE '%snowflake_ext_state%')");
            assert_eq!(citus_objects, 0, "the marks are this node's own");
            worker
        })
        .collect()
}

const TABLES: &[&str] = &[
    // Hash-distributed on the id.
    "CREATE TABLE events (id bigint PRIMARY KEY DEFAULT snowflake_nextval(),
                          client int NOT NULL, how text NOT NULL);
     SELECT create_distributed_table('events', 'id')",
    // Distributed on a tenant, the id a default beside it.
    "CREATE TABLE orders (tenant int NOT NULL, id bigint NOT NULL DEFAULT snowflake_nextval(),
                          client int NOT NULL, how text NOT NULL, PRIMARY KEY (tenant, id));
     SELECT create_distributed_table('orders', 'tenant')",
    "CREATE TABLE kinds (id bigint PRIMARY KEY DEFAULT snowflake_nextval(),
                         client int NOT NULL, how text NOT NULL);
     SELECT create_reference_table('kinds')",
    // Distributed on a snowflake-typed column.
    "CREATE TABLE typed (id snowflake PRIMARY KEY DEFAULT snowflake_nextval(),
                         client int NOT NULL, how text NOT NULL);
     SELECT create_distributed_table('typed', 'id')",
    // Schema-based sharding.
    "SET citus.enable_schema_based_sharding = on",
    "CREATE SCHEMA tenant_a",
    "CREATE TABLE tenant_a.items (id bigint PRIMARY KEY DEFAULT snowflake_nextval(),
                                  client int NOT NULL, how text NOT NULL)",
    "RESET citus.enable_schema_based_sharding",
];
const TABLE_NAMES: &[&str] = &["events", "orders", "kinds", "typed", "tenant_a.items"];

const CLIENTS: usize = 8;
const ROUNDS: i32 = 15;

/// One client's work through `conninfo`: inserts with the id's default into every table,
/// `COPY`, and `INSERT ... SELECT` pushed down to the shards.
fn client_work(conninfo: &str, client: i32, barrier: &Barrier) {
    let mut c = Client::connect(conninfo, postgres::NoTls).unwrap();
    barrier.wait();
    for round in 0..ROUNDS {
        let tenant = (client * ROUNDS + round) % 16;
        c.execute(
            "INSERT INTO events (client, how) SELECT $1, 'values' FROM generate_series(1, 10)",
            &[&client],
        )
        .unwrap();
        c.execute(
            "INSERT INTO orders (tenant, client, how) SELECT $2, $1, 'values' FROM generate_series(1, 10)",
            &[&client, &tenant],
        )
        .unwrap();
        c.execute(
            "INSERT INTO kinds (client, how) VALUES ($1, 'values')",
            &[&client],
        )
        .unwrap();
        c.execute(
            "INSERT INTO typed (client, how) SELECT $1, 'values' FROM generate_series(1, 5)",
            &[&client],
        )
        .unwrap();
        c.execute(
            "INSERT INTO tenant_a.items (client, how) SELECT $1, 'values' FROM generate_series(1, 5)",
            &[&client],
        )
        .unwrap();
        let mut copy = c.copy_in("COPY events (client, how) FROM STDIN").unwrap();
        for _ in 0..10 {
            writeln!(copy, "{client}\tcopy").unwrap();
        }
        copy.finish().unwrap();
        // From a table to itself, on the same distribution column: Citus runs it on the
        // workers, shard by shard.
        if round % 5 == 4 {
            c.execute(
                "INSERT INTO orders (tenant, client, how)
                 SELECT tenant, client, 'insert-select' FROM orders
                  WHERE tenant = $2 AND client = $1 AND how = 'values'",
                &[&client, &tenant],
            )
            .unwrap();
        }
    }
}

#[test]
fn every_node_of_a_citus_cluster_mints_with_its_own_hand_set_worker_id_into_distributed_tables() {
    let cluster = citus("citus-set", |i| {
        vec![format!("snowflake.worker_id={}", 10 + i)]
    });
    assert_eq!(minting_workers(&cluster), vec![10, 11, 12]);
    every_node_mints_with_its_own_worker_id(&cluster, &[10, 11, 12]);
}

#[test]
fn every_node_of_a_citus_cluster_mints_with_its_own_leased_worker_id_into_distributed_tables() {
    let registry = registry("citus-registry-all");
    let setting = registry_setting(&registry, "fleet");
    let cluster = citus("citus-auto", |_| {
        vec!["snowflake.worker_id=auto".to_string(), setting.clone()]
    });
    let workers: Vec<i32> = cluster.nodes.iter().map(leased).collect();
    assert_eq!(minting_workers(&cluster), workers);
    every_node_mints_with_its_own_worker_id(&cluster, &workers);
}

/// Eight clients on the three nodes insert with VALUES, COPY, INSERT ... SELECT into
/// distributed tables: no id twice, each id carries the worker id of the node that minted it
/// (`workers[node]`), and time filters and partition pruning work across the shards.
fn every_node_mints_with_its_own_worker_id(cluster: &Citus, workers: &[i32]) {
    let mut coordinator = cluster.nodes[0].connect();
    for sql in TABLES {
        coordinator.batch_execute(sql).unwrap();
    }

    // Eight clients at once: three on the coordinator, three and two on the workers.
    let node_of_client: Vec<usize> = vec![0, 0, 0, 1, 1, 1, 2, 2];
    let barrier = Arc::new(Barrier::new(CLIENTS));
    let threads: Vec<_> = (0..CLIENTS)
        .map(|client| {
            let conninfo = cluster.nodes[node_of_client[client]].conninfo("postgres");
            let barrier = barrier.clone();
            std::thread::spawn(move || client_work(&conninfo, client as i32, &barrier))
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }

    // No id twice, in any table or across them.
    let mut all = Vec::new();
    let mut rows: Vec<(String, i64, i32, String)> = Vec::new();
    for table in TABLE_NAMES {
        for r in coordinator
            .query(&format!("SELECT id::bigint, client, how FROM {table}"), &[])
            .unwrap()
        {
            all.push(r.get::<_, i64>(0));
            rows.push((table.to_string(), r.get(0), r.get(1), r.get(2)));
        }
    }
    let per_client = ROUNDS as usize * (10 + 10 + 1 + 5 + 5 + 10);
    assert!(all.len() > CLIENTS * per_client, "{} rows", all.len());
    assert_no_duplicates(&all);

    // A row inserted with VALUES or COPY has its id from the node the client is connected to;
    // one of INSERT ... SELECT from the worker that holds its shard.
    for (table, id, client, how) in rows.iter().filter(|r| r.3 != "insert-select") {
        let node = node_of_client[*client as usize];
        assert_eq!(worker_of(*id), workers[node], "{table} {how} {id}");
    }
    let mut shard_worker: HashMap<i32, i32> = HashMap::new();
    let pushed_down = coordinator
        .query(
            "SELECT id, tenant FROM orders WHERE how = 'insert-select'",
            &[],
        )
        .unwrap();
    assert!(!pushed_down.is_empty());
    for r in pushed_down {
        let (id, tenant): (i64, i32) = (r.get(0), r.get(1));
        let worker = *shard_worker.entry(tenant).or_insert_with(|| {
            let port: i32 = coordinator_query_port(cluster, tenant);
            let node = cluster
                .nodes
                .iter()
                .position(|n| i32::from(n.port) == port)
                .expect("a node of the cluster");
            assert_ne!(node, 0, "the coordinator holds no shard");
            workers[node]
        });
        assert_eq!(worker_of(id), worker, "orders {id} of tenant {tenant}");
    }

    // A snowflake-typed distribution column keeps its JSON string form.
    let json: String = coordinator.scalar("SELECT row_to_json(t)::text FROM typed t LIMIT 1");
    assert!(json.starts_with("{\"id\":\""), "{json}");

    time_filters_reach_every_shard_once(cluster);
    a_time_partitioned_distributed_table_is_pruned(&mut coordinator);
}

/// The port of the node holding the shard of `orders` for `tenant`.
fn coordinator_query_port(cluster: &Citus, tenant: i32) -> i32 {
    cluster.nodes[0]
        .connect()
        .query_one(
            "SELECT nodeport FROM citus_shards
              WHERE shardid = get_shard_id_for_distribution_column('orders', $1::int)",
            &[&tenant],
        )
        .unwrap()
        .get(0)
}

/// Through the coordinator and through a worker, a time filter on the distributed `events`
/// sends every shard its bound once, and no plan line has a bound twice.
fn time_filters_reach_every_shard_once(cluster: &Citus) {
    for node in &cluster.nodes[..2] {
        let mut c = node.connect();
        c.batch_execute("SET citus.explain_all_tasks = on").unwrap();
        let shards: i64 =
            c.scalar("SELECT count(*) FROM citus_shards WHERE table_name = 'events'::regclass");
        let bound: i64 = c.scalar("SELECT snowflake_lower_bound('2026-01-01 00:00+00')");
        // A constant: the coordinator computes the bound, the shard gets it as a number.
        let constant = explain(
            &mut c,
            "VERBOSE, COSTS OFF",
            "SELECT count(*) FROM events WHERE snowflake_timestamp(id) >= '2026-01-01 00:00+00'",
        );
        // A time of the query: the bounds are sent as calls.
        let stable = explain(
            &mut c,
            "VERBOSE, COSTS OFF",
            "SELECT * FROM events
              WHERE snowflake_timestamp(id) BETWEEN now() - interval '1 hour' AND now()",
        );
        for (plan, bounds) in [
            (&constant, vec![bound.to_string()]),
            (
                &stable,
                vec![
                    "snowflake_lower_bound".to_string(),
                    "snowflake_upper_bound".to_string(),
                ],
            ),
        ] {
            let queries: Vec<&str> = plan.lines().filter(|l| l.contains("Query:")).collect();
            assert_eq!(queries.len() as i64, shards, "{plan}");
            for b in &bounds {
                assert!(
                    queries.iter().all(|q| q.matches(b.as_str()).count() == 1),
                    "a shard query without its bound {b}, or with it twice:\n{plan}"
                );
                assert!(
                    plan.lines().all(|l| l.matches(b.as_str()).count() <= 1),
                    "a bound {b} added twice:\n{plan}"
                );
            }
        }
    }
}

/// A distributed table partitioned by day (bounds from `snowflake_partition_bounds`): a filter
/// on `snowflake_timestamp(id)` within one day scans that day's partition only.
fn a_time_partitioned_distributed_table_is_pruned(c: &mut Client) {
    c.batch_execute(
        "CREATE TABLE history (id bigint NOT NULL DEFAULT snowflake_nextval(), how text,
                               PRIMARY KEY (id)) PARTITION BY RANGE (id);
         DO $$
         DECLARE b record;
         BEGIN
           FOR k IN 0..2 LOOP
             SELECT * INTO b FROM snowflake_partition_bounds(
                 (current_date - 1 + k)::timestamptz, (current_date + k)::timestamptz);
             EXECUTE format('CREATE TABLE history_day%s PARTITION OF history FOR VALUES FROM (%s) TO (%s)',
                            k, b.from_id, b.to_id);
           END LOOP;
         END $$;
         SELECT create_distributed_table('history', 'id');
         INSERT INTO history (how) SELECT 'x' FROM generate_series(1, 100);",
    )
    .unwrap();
    let (from, to): (String, String) = {
        let r = c
            .query_one(
                "SELECT (current_date + interval '1 hour')::timestamptz::text,
                        (current_date + interval '2 hours')::timestamptz::text",
                &[],
            )
            .unwrap();
        (r.get(0), r.get(1))
    };
    c.batch_execute("SET citus.explain_all_tasks = on").unwrap();
    let plan = explain(
        c,
        "COSTS OFF",
        &format!(
            "SELECT count(*) FROM history
              WHERE snowflake_timestamp(id) >= '{from}' AND snowflake_timestamp(id) < '{to}'"
        ),
    );
    assert!(plan.contains("history_day1_"), "{plan}");
    assert!(
        !plan.contains("history_day0_") && !plan.contains("history_day2_"),
        "{plan}"
    );
}

/// A cluster whose nodes have the worker ids `ids` set by hand, with `events` distributed on
/// its id.
fn citus_by_hand(name: &str, ids: [i32; 3]) -> Citus {
    let cluster = citus(name, |i| vec![format!("snowflake.worker_id={}", ids[i])]);
    cluster.nodes[0]
        .connect()
        .batch_execute(
            "SET citus.shard_count = 8;
             CREATE TABLE events (id bigint PRIMARY KEY DEFAULT snowflake_nextval(),
                                  client int NOT NULL, how text NOT NULL);
             SELECT create_distributed_table('events', 'id');",
        )
        .unwrap();
    cluster
}

/// `host:port` of a node, as the Citus check names it.
fn address(node: &Cluster) -> String {
    format!("127.0.0.1:{}", node.port)
}

/// Runs `sql` on `node`, which must refuse because another node, `other`, has its worker id:
/// 55000, both nodes named, a hint that says how to change one.
fn assert_refused_for_sharing(node: &Cluster, other: &Cluster, sql: &str) {
    let e = error_of(&mut node.connect(), sql);
    assert_eq!(e.code, "55000", "{e:?}");
    assert!(
        e.message
            .contains(&format!("Citus node {} (node", address(other)))
            && e.message
                .contains(&format!("this node, {} (node", address(node))),
        "{e:?}"
    );
    assert!(
        e.hint
            .as_deref()
            .unwrap_or("")
            .contains("snowflake.worker_id"),
        "{e:?}"
    );
}

#[test]
fn a_shard_is_refused_by_the_guard_and_by_snowflake_adopt_naming_its_distributed_table() {
    let cluster = citus_by_hand("citus-shards", [10, 11, 12]);
    cluster.nodes[0]
        .connect()
        .batch_execute(
            "CREATE TABLE legacy (id bigserial PRIMARY KEY, payload text);
             SELECT create_distributed_table('legacy', 'id');",
        )
        .unwrap();
    let worker = &cluster.nodes[1];
    let mut c = worker.connect();
    let shard_of = |c: &mut Client, table: &str| -> String {
        c.query_one(
            "SELECT shard_name::text FROM citus_shards
              WHERE table_name = $1::text::regclass AND nodeport = $2 ORDER BY shardid LIMIT 1",
            &[&table, &i32::from(worker.port)],
        )
        .unwrap()
        .get(0)
    };
    let (events_shard, legacy_shard) = (shard_of(&mut c, "events"), shard_of(&mut c, "legacy"));
    // As an application sees the node (Citus hides shards from its catalog queries), and with
    // the shards shown, where the guard used to put its trigger on the shard.
    for show in ["", "*"] {
        c.batch_execute(&format!(
            "SET citus.show_shards_for_app_name_prefixes = '{show}'"
        ))
        .unwrap();
        let e = error_of(&mut c, &format!("SELECT snowflake_guard('{events_shard}')"));
        assert_eq!(e.code, "0A000", "{e:?}");
        assert!(
            e.message.contains(&format!(
                "relation public.{events_shard} is a shard of the Citus table public.events"
            )),
            "{e:?}"
        );
        assert!(e.detail.as_deref().unwrap_or("").contains("moves"), "{e:?}");
        assert!(
            e.hint.as_deref().unwrap_or("").contains("public.events"),
            "{e:?}"
        );
        let e = error_of(
            &mut c,
            &format!("SELECT snowflake_adopt('{legacy_shard}', 'id')"),
        );
        assert_eq!(e.code, "0A000", "{e:?}");
        assert!(
            e.message.contains(&format!(
                "relation public.{legacy_shard} is a shard of the Citus table public.legacy"
            )),
            "{e:?}"
        );
        assert!(
            e.hint.as_deref().unwrap_or("").contains("public.legacy"),
            "{e:?}"
        );
    }
    let triggers: i64 =
        c.scalar("SELECT count(*) FROM pg_trigger WHERE tgname = 'snowflake_guard'");
    assert_eq!(triggers, 0, "a guard was put on a shard");
}

#[test]
fn two_nodes_given_one_worker_id_by_hand_both_refuse_before_any_row_until_one_changes() {
    let cluster = citus_by_hand("citus-shared-id", [10, 11, 11]);
    let [coordinator, one, two] = [&cluster.nodes[0], &cluster.nodes[1], &cluster.nodes[2]];
    // At once, before any row: neither node mints with worker 11, each naming both.
    let insert = "INSERT INTO events (client, how) VALUES (0, 'shared') RETURNING id";
    assert_refused_for_sharing(one, two, insert);
    assert_refused_for_sharing(two, one, insert);
    assert_refused_for_sharing(two, one, "SELECT snowflake_nextval()");
    let status: Option<String> = one
        .connect()
        .scalar("SELECT detail FROM snowflake_status()");
    assert!(
        status.is_some_and(|d| d.contains(&address(two))),
        "snowflake_status() does not say why"
    );
    let id: i64 = coordinator.connect().scalar(insert);
    assert_eq!(worker_of(id), 10);
    let shared: i64 = coordinator
        .connect()
        .scalar("SELECT count(*) FROM events WHERE id >> 12 & 1023 = 11");
    assert_eq!(shared, 0, "a row of worker 11 was stored");

    // One of them gets another worker id: both mint again, each with its own.
    two.set_and_reload("snowflake.worker_id", "12");
    let minted = |node: &Cluster| {
        let mut c = node.connect();
        wait_for("the node to mint again", PATIENCE, || {
            c.query_one(insert, &[]).ok().map(|r| worker_of(r.get(0)))
        })
    };
    assert_eq!(minted(two), 12);
    assert_eq!(minted(one), 11);
}

/// Clients that insert through `node` until `stop`; each returns the ids it got and how many
/// inserts failed: refused (55000), or not done by a node being restarted (the connection
/// errors of class 08, and 57P01-57P03, which Citus passes on when the node's backend is
/// terminated by the shutdown or the node is still starting; or, when the connection closed
/// before libpq read the code, the same message under Citus's XX000). Any other error fails
/// the test.
fn inserting(
    node: &Cluster,
    clients: i32,
    stop: &Arc<AtomicBool>,
) -> Vec<std::thread::JoinHandle<(Vec<i64>, usize)>> {
    (0..clients)
        .map(|client| {
            let conninfo = node.conninfo("postgres");
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut c = Client::connect(&conninfo, postgres::NoTls).unwrap();
                let (mut got, mut refused) = (Vec::new(), 0);
                while !stop.load(Ordering::SeqCst) {
                    match c.query(
                        "INSERT INTO events (client, how)
                         SELECT $1, 'load' FROM generate_series(1, 20) RETURNING id",
                        &[&client],
                    ) {
                        Ok(rows) => got.extend(rows.iter().map(|r| r.get::<_, i64>(0))),
                        Err(e) => {
                            let db = e.as_db_error();
                            let code = db.map(|d| d.code().code().to_string());
                            let message = db.map(|d| d.message().to_string()).unwrap_or_default();
                            let restarting = [
                                "terminating connection due to administrator command",
                                "the database system is shutting down",
                                "the database system is starting up",
                                // Citus, when the restarted node's connection fails mid-statement
                                "failure on connection marked as essential",
                            ]
                            .iter()
                            .any(|m| message.contains(m));
                            assert!(
                                code.as_deref() == Some("55000")
                                    || code.as_deref().is_some_and(|c| {
                                        c.starts_with("08")
                                            || ["57P01", "57P02", "57P03"].contains(&c)
                                            || (c == "XX000" && restarting)
                                    }),
                                "{e}: {code:?} {message}"
                            );
                            refused += 1;
                        }
                    }
                }
                (got, refused)
            })
        })
        .collect()
}

#[test]
fn a_node_started_with_another_nodes_worker_id_refuses_before_its_first_row() {
    let cluster = citus_by_hand("citus-restart-shared", [10, 11, 12]);
    let [_, one, two] = [&cluster.nodes[0], &cluster.nodes[1], &cluster.nodes[2]];
    // Clients insert through the coordinator and node one all along.
    let stop = Arc::new(AtomicBool::new(false));
    let mut clients = inserting(&cluster.nodes[0], 2, &stop);
    clients.extend(inserting(one, 2, &stop));
    // Node two is given node one's worker id by hand, and restarted.
    two.connect()
        .batch_execute("ALTER SYSTEM SET snowflake.worker_id = '11'")
        .unwrap();
    two.stop();
    two.start();
    // Its first insert is refused, naming both; node one stops minting with 11 too, at its
    // next comparison.
    let insert = "INSERT INTO events (client, how) VALUES (9, 'node two') RETURNING id";
    assert_refused_for_sharing(two, one, insert);
    let mut c = one.connect();
    wait_until("node one to refuse worker 11 too", PATIENCE, || {
        c.query_one("SELECT snowflake_nextval()", &[]).is_err()
    });
    assert_refused_for_sharing(one, two, "SELECT snowflake_nextval()");
    stop.store(true, Ordering::SeqCst);
    let mut all = Vec::new();
    for t in clients {
        all.extend(t.join().unwrap().0);
    }
    // Every row is one of the clients', none twice, and none came from node two.
    assert_no_duplicates(&all);
    let (rows, from_two): (i64, i64) = {
        let r = cluster.nodes[0]
            .connect()
            .query_one(
                "SELECT count(*), count(*) FILTER (WHERE how = 'node two') FROM events",
                &[],
            )
            .unwrap();
        (r.get(0), r.get(1))
    };
    assert_eq!(rows, all.len() as i64);
    assert_eq!(from_two, 0);
}

#[test]
fn a_worker_id_reloaded_to_another_nodes_is_refused_at_the_first_call() {
    let cluster = citus_by_hand("citus-reload-shared", [10, 11, 12]);
    let [_, one, two] = [&cluster.nodes[0], &cluster.nodes[1], &cluster.nodes[2]];
    let mut session = two.connect();
    let before: i64 = session.scalar("SELECT snowflake_nextval()");
    assert_eq!(worker_of(before), 12);
    two.set_and_reload("snowflake.worker_id", "11");
    // A session that was open, and a new one: the first call with 11 is refused.
    assert_refused_for_sharing(two, one, "SELECT snowflake_nextval()");
    let e = error_of(&mut session, "SELECT snowflake_nextval()");
    assert_eq!(e.code, "55000", "{e:?}");
}

#[test]
fn a_node_that_does_not_answer_keeps_a_restarted_node_from_minting_until_it_does() {
    let cluster = citus_by_hand("citus-silent", [10, 11, 12]);
    let [_, one, two] = [&cluster.nodes[0], &cluster.nodes[1], &cluster.nodes[2]];
    two.stop();
    one.stop();
    one.start();
    // Node two may be minting with any worker id: node one cannot know that it has not 11.
    let e = error_of(&mut one.connect(), "SELECT snowflake_nextval()");
    assert_eq!(e.code, "55000", "{e:?}");
    assert!(
        e.message
            .contains(&format!("Citus node {} (node", address(two)))
            && e.message.contains("did not answer"),
        "{e:?}"
    );
    assert!(
        e.hint
            .as_deref()
            .unwrap_or("")
            .contains("citus_remove_node"),
        "{e:?}"
    );
    two.start();
    let mut c = one.connect();
    let id = wait_for("node one to mint once node two answers", PATIENCE, || {
        c.query_one("SELECT snowflake_nextval()", &[])
            .ok()
            .map(|r| r.get::<_, i64>(0))
    });
    assert_eq!(worker_of(id), 11);
}

#[test]
fn citus_nodes_with_leased_worker_ids_keep_every_id_through_shard_moves_and_a_rebalance() {
    let registry = registry("citus-registry");
    let setting = registry_setting(&registry, "fleet");
    let cluster = citus("citus-leased", |_| {
        vec![
            "snowflake.worker_id=auto".to_string(),
            setting.clone(),
            "snowflake.worker_range=100-199".to_string(),
        ]
    });
    let workers: Vec<i32> = cluster.nodes.iter().map(leased).collect();
    assert_eq!(minting_workers(&cluster), workers);
    assert!(workers.iter().all(|w| (100..=199).contains(w)));
    assert!(workers[0] != workers[1] && workers[1] != workers[2] && workers[0] != workers[2]);
    let mut coordinator = cluster.nodes[0].connect();
    coordinator
        .batch_execute(
            "SET citus.shard_count = 8;
             CREATE TABLE events (id bigint PRIMARY KEY DEFAULT snowflake_nextval(),
                                  client int NOT NULL, how text NOT NULL);
             SELECT create_distributed_table('events', 'id');",
        )
        .unwrap();

    // Two clients on each node insert until told to stop.
    let stop = Arc::new(AtomicBool::new(false));
    let inserted = Arc::new(AtomicUsize::new(0));
    let threads: Vec<_> = (0..6)
        .map(|client| {
            let node = client / 2;
            let conninfo = cluster.nodes[node].conninfo("postgres");
            let (stop, inserted) = (stop.clone(), inserted.clone());
            std::thread::spawn(move || {
                let mut c = Client::connect(&conninfo, postgres::NoTls).unwrap();
                let mut mine = Vec::new();
                while !stop.load(Ordering::SeqCst) {
                    let got = ids(
                        &mut c,
                        &format!(
                            "INSERT INTO events (client, how)
                             SELECT {client}, 'during' FROM generate_series(1, 20) RETURNING id"
                        ),
                    );
                    inserted.fetch_add(got.len(), Ordering::SeqCst);
                    mine.extend(got);
                }
                (node, mine)
            })
        })
        .collect();
    let progressed = |from: usize| {
        wait_until("the clients to insert", PATIENCE, || {
            inserted.load(Ordering::SeqCst) > from + 200
        })
    };
    progressed(0);

    // Two shards moved from the first worker to the second (logical replication, as Citus
    // chooses for a table with a primary key), then the rebalancer moves shards back.
    let ports = (cluster.nodes[1].port, cluster.nodes[2].port);
    for _ in 0..2 {
        coordinator
            .batch_execute(&format!(
                "SELECT citus_move_shard_placement(
                     (SELECT min(shardid) FROM citus_shards
                       WHERE table_name = 'events'::regclass AND nodeport = {0}),
                     '127.0.0.1', {0}, '127.0.0.1', {1})",
                ports.0, ports.1
            ))
            .unwrap();
        progressed(inserted.load(Ordering::SeqCst));
    }
    let placements = |c: &mut Client| -> Vec<i64> {
        c.query(
            "SELECT count(*) FROM citus_shards WHERE table_name = 'events'::regclass
              GROUP BY nodeport ORDER BY nodeport = $1 DESC",
            &[&i32::from(ports.0)],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
    };
    assert_eq!(placements(&mut coordinator), vec![2, 6]);
    // Apart: the job must be committed before its wait can see it run.
    coordinator
        .batch_execute("SELECT citus_rebalance_start()")
        .unwrap();
    coordinator
        .batch_execute("SELECT citus_rebalance_wait()")
        .unwrap();
    assert_eq!(placements(&mut coordinator), vec![4, 4]);
    progressed(inserted.load(Ordering::SeqCst));
    stop.store(true, Ordering::SeqCst);

    let mut all = Vec::new();
    for t in threads {
        let (node, mine) = t.join().unwrap();
        assert!(mine.iter().all(|&id| worker_of(id) == workers[node]));
        all.extend(mine);
    }
    assert_no_duplicates(&all);
    let (rows, present): (i64, i64) = {
        let r = coordinator
            .query_one(
                "SELECT (SELECT count(*) FROM events),
                        (SELECT count(*) FROM events WHERE id = ANY($1))",
                &[&all],
            )
            .unwrap();
        (r.get(0), r.get(1))
    };
    assert_eq!(rows, all.len() as i64);
    assert_eq!(present, all.len() as i64);

    // The replication guard and snowflake_adopt refuse a Citus table, naming it.
    let e = error_of(&mut coordinator, "SELECT snowflake_guard('events')");
    assert_eq!(e.code, "0A000");
    assert!(
        e.message.contains("public.events") && e.message.contains("Citus"),
        "{}",
        e.message
    );
    assert!(e.hint.is_some());
    coordinator
        .batch_execute(
            "CREATE TABLE legacy (id bigserial PRIMARY KEY, payload text);
             SELECT create_distributed_table('legacy', 'id');",
        )
        .unwrap();
    let e = error_of(&mut coordinator, "SELECT snowflake_adopt('legacy', 'id')");
    assert_eq!(e.code, "0A000");
    assert!(e.message.contains("public.legacy"), "{}", e.message);
    assert!(e.hint.is_some());
}

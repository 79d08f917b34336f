//! A real HA manager: a two-node Patroni cluster (with etcd) started by `scripts/patroni-pair`,
//! both servers preloading snowflake_ext with one worker id. An insert load with
//! `DEFAULT snowflake_nextval()` runs through whichever server is the primary; the primary's
//! node is killed with `kill -9` (Patroni and the postmaster), Patroni promotes the replica, and
//! the load carries on there. No id repeats, and every id after the failover is above every id
//! before it.

mod common;

use common::*;
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/patroni-pair")
}

struct Pair {
    dir: PathBuf,
    pg: [u16; 2],
    /// One pair at a time: two Patroni clusters bootstrapping at once on a small machine only
    /// slow each other down.
    _one_at_a_time: std::sync::MutexGuard<'static, ()>,
}

static ONE_PAIR: Mutex<()> = Mutex::new(());

impl Pair {
    fn up(worker: i32) -> Pair {
        Pair::up_with("patroni", &worker.to_string(), &[])
    }

    /// A pair named `name` (tests run at once need their own), with `worker` (a number, or
    /// auto) and `env` for scripts/patroni-pair.
    fn up_with(name: &str, worker: &str, env: &[(&str, String)]) -> Pair {
        let one_at_a_time = ONE_PAIR.lock().unwrap_or_else(|e| e.into_inner());
        let dir = test_dir(name);
        // Ports are chosen free but may be taken before etcd or Patroni binds them (the other
        // tests' clients open connections all the while); the script says so with exit code 4,
        // and the pair is started again on other ports.
        for attempt in 1.. {
            let _ = Command::new(script())
                .args(["down", dir.to_str().unwrap()])
                .output();
            let pg = [free_port(), free_port()];
            let (api, etcd) = ([free_port(), free_port()], [free_port(), free_port()]);
            let ports: Vec<String> = [pg[0], pg[1], api[0], api[1], etcd[0], etcd[1]]
                .iter()
                .map(u16::to_string)
                .collect();
            let out = Command::new(script())
                .arg("up")
                .arg(&dir)
                .args(&ports)
                .arg(worker)
                .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
                .output()
                .unwrap();
            let report = format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            if out.status.code() == Some(4) && attempt < 3 {
                eprintln!("patroni-pair up, attempt {attempt}, again on other ports: {report}");
                continue;
            }
            if !out.status.success() {
                let _ = Command::new(script())
                    .args(["down", dir.to_str().unwrap()])
                    .output();
                panic!("patroni-pair up failed: {report}");
            }
            return Pair {
                dir,
                pg,
                _one_at_a_time: one_at_a_time,
            };
        }
        unreachable!()
    }

    fn conninfo(&self, node: usize) -> String {
        format!(
            "host=127.0.0.1 port={} user=postgres dbname=postgres connect_timeout=2",
            self.pg[node]
        )
    }

    /// The node whose server accepts writes, if one does.
    fn primary(&self) -> Option<usize> {
        (0..2).find(|&node| {
            postgres::Client::connect(&self.conninfo(node), postgres::NoTls)
                .and_then(|mut c| c.query_one("SELECT NOT pg_is_in_recovery()", &[]))
                .is_ok_and(|r| r.get::<_, bool>(0))
        })
    }

    /// Starts a node's server by hand, without Patroni (as an operator would in a split brain).
    fn start_without_patroni(&self, node: usize) {
        let data = self.dir.join(format!("node{}", node + 1));
        run_as_postgres(
            Path::new("/"),
            &pg_bin("pg_ctl"),
            &[
                "-D",
                data.to_str().unwrap(),
                "-l",
                data.join("by-hand.log").to_str().unwrap(),
                "-w",
                "-t",
                "60",
                "start",
            ],
        );
    }

    /// `kill -9` of a node's Patroni and its postmaster: the node is gone.
    fn kill(&self, node: usize) {
        let yml = self.dir.join(format!("node{}.yml", node + 1));
        let _ = Command::new("pkill")
            .args(["-9", "-f", &format!("patroni {}", yml.display())])
            .status();
        let pid =
            std::fs::read_to_string(self.dir.join(format!("node{}/postmaster.pid", node + 1)))
                .unwrap();
        let pid = pid.lines().next().unwrap().trim().to_string();
        Command::new("kill").args(["-9", &pid]).status().unwrap();
    }

    fn logs(&self) -> String {
        ["node1.log", "node2.log"]
            .iter()
            .map(|f| std::fs::read_to_string(self.dir.join(f)).unwrap_or_default())
            .collect::<Vec<_>>()
            .join("\n----\n")
    }
}

impl Drop for Pair {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("--- patroni logs ---\n{}", self.logs());
        }
        let _ = Command::new(script())
            .args(["down", self.dir.to_str().unwrap()])
            .output();
    }
}

#[test]
fn patroni_fails_over_under_an_insert_load_and_no_id_repeats() {
    let pair = Pair::up(21);
    let first = pair.primary().expect("a primary");
    let mut c = postgres::Client::connect(&pair.conninfo(first), postgres::NoTls).unwrap();
    the_primary_has_a_table_events_and_a_synchronous_standby(&mut c);
    let inserts = two_clients_insert_through_whichever_server_is_the_primary(&pair);
    let other = patroni_promotes_the_replica_when_the_primarys_node_is_killed_and_the_load_goes_on(
        &pair,
        first,
        &inserts.acked,
    );
    let acked = inserts.stop();
    no_id_repeats_and_every_id_after_the_failover_is_above_those_before(&acked, first, other);
    every_acknowledged_row_is_on_the_new_primary_all_of_worker_21(&pair, other, &acked);
}

/// Creates the extension and a table `events` keyed by `snowflake_nextval()` on the primary
/// `c` is connected to, and waits for its synchronous standby.
fn the_primary_has_a_table_events_and_a_synchronous_standby(c: &mut postgres::Client) {
    c.batch_execute(
        "CREATE EXTENSION snowflake_ext;
         CREATE TABLE events (id bigint PRIMARY KEY DEFAULT snowflake_nextval(), n int NOT NULL)",
    )
    .unwrap();
    wait_for_synchronous_standby(c);
}

/// Clients inserting into `events` on threads of their own until stopped.
struct Inserts {
    stop: Arc<AtomicBool>,
    /// Each insert acknowledged: the node that acknowledged it and the row's id.
    acked: Arc<Mutex<Vec<(usize, i64)>>>,
    clients: Vec<std::thread::JoinHandle<()>>,
}

impl Inserts {
    /// Stops the clients and returns every insert acknowledged.
    fn stop(self) -> Vec<(usize, i64)> {
        self.stop.store(true, Ordering::Relaxed);
        for client in self.clients {
            client.join().unwrap();
        }
        std::mem::take(&mut *self.acked.lock().unwrap())
    }
}

/// Two clients insert through whichever server is the primary, reconnecting when it goes.
fn two_clients_insert_through_whichever_server_is_the_primary(pair: &Pair) -> Inserts {
    let stop = Arc::new(AtomicBool::new(false));
    let acked: Arc<Mutex<Vec<(usize, i64)>>> = Arc::default();
    let conninfos = [pair.conninfo(0), pair.conninfo(1)];
    let clients: Vec<_> = (0..2)
        .map(|_| {
            let (stop, acked, conninfos) = (stop.clone(), acked.clone(), conninfos.clone());
            std::thread::spawn(move || {
                let mut n = 0;
                while !stop.load(Ordering::Relaxed) {
                    for (node, conninfo) in conninfos.iter().enumerate() {
                        let Ok(mut c) = postgres::Client::connect(conninfo, postgres::NoTls) else {
                            continue;
                        };
                        while !stop.load(Ordering::Relaxed) {
                            n += 1;
                            match c
                                .query_one("INSERT INTO events (n) VALUES ($1) RETURNING id", &[&n])
                            {
                                Ok(row) => acked.lock().unwrap().push((node, row.get(0))),
                                Err(_) => break,
                            }
                        }
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
            })
        })
        .collect();
    Inserts {
        stop,
        acked,
        clients,
    }
}

/// After 100 inserts, the node of the primary (`first`) is killed; Patroni promotes the
/// replica and the load carries on on it, the new primary, which is returned.
fn patroni_promotes_the_replica_when_the_primarys_node_is_killed_and_the_load_goes_on(
    pair: &Pair,
    first: usize,
    acked: &Mutex<Vec<(usize, i64)>>,
) -> usize {
    wait_until("100 inserts before the failover", PATIENCE, || {
        acked.lock().unwrap().len() > 100
    });
    pair.kill(first);
    let other = 1 - first;
    wait_until("Patroni to promote the replica", PATIENCE, || {
        pair.primary() == Some(other)
    });
    wait_until("200 inserts on the new primary", PATIENCE, || {
        acked
            .lock()
            .unwrap()
            .iter()
            .filter(|(node, _)| *node == other)
            .count()
            >= 200
    });
    other
}

/// No id was acknowledged twice, and every id the new primary (`other`) acknowledged is above
/// every id the old one (`first`) did.
fn no_id_repeats_and_every_id_after_the_failover_is_above_those_before(
    acked: &[(usize, i64)],
    first: usize,
    other: usize,
) {
    let distinct: HashSet<i64> = acked.iter().map(|(_, id)| *id).collect();
    assert_eq!(distinct.len(), acked.len(), "an id was handed out twice");
    let max_before = acked
        .iter()
        .filter(|(n, _)| *n == first)
        .map(|(_, id)| *id)
        .max()
        .unwrap();
    let min_after = acked
        .iter()
        .filter(|(n, _)| *n == other)
        .map(|(_, id)| *id)
        .min()
        .unwrap();
    assert!(
        min_after > max_before,
        "after the failover {min_after} is not above {max_before} from before it"
    );
}

/// Synchronous mode: every insert the old primary acknowledged is on the new one (`other`),
/// and every row's id is of worker 21.
fn every_acknowledged_row_is_on_the_new_primary_all_of_worker_21(
    pair: &Pair,
    other: usize,
    acked: &[(usize, i64)],
) {
    let mut c = postgres::Client::connect(&pair.conninfo(other), postgres::NoTls).unwrap();
    let ids: Vec<i64> = acked.iter().map(|(_, id)| *id).collect();
    let found: i64 = c
        .query_one("SELECT count(*) FROM events WHERE id = ANY($1)", &[&ids])
        .unwrap()
        .get(0);
    assert_eq!(found, ids.len() as i64, "acknowledged rows are missing");
    let workers: Vec<i32> = c
        .query("SELECT DISTINCT snowflake_worker(id) FROM events", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(workers, vec![21]);
}

/// Worker ids leased from a registry, under Patroni, synchronous and asynchronous: after the
/// primary's node is killed the new primary mints, under a worker id of its own; no id repeats;
/// and the old primary, brought back as a primary by hand beside its successor (a split
/// brain), mints nothing once the registry has recorded its successor.
#[test]
fn patroni_with_leased_worker_ids_fails_over_and_the_old_primary_brought_back_mints_with_its_own() {
    let registry = Cluster::new("ha-registry", &["shared_preload_libraries="]);
    registry.start();
    for synchronous in ["on", "off"] {
        // `_c`, a session to the first primary, stays open to the end of the round.
        let (pair, first, _c) = a_leasing_pair_with_a_table_events_on_both(&registry, synchronous);
        let (before, mut all) = the_primary_mints(&pair, first);
        let other = patroni_promotes_the_replica_which_mints_with_a_worker_id_of_its_own(
            &pair,
            first,
            before,
            synchronous,
            &mut all,
        );
        let mut reg = registry.connect();
        the_registry_records_the_old_primary_superseded(&mut reg, &pair, first);
        let old = the_old_primary_started_by_hand_as_a_primary_mints_with_its_own(
            &pair,
            first,
            synchronous,
            &mut all,
        );
        no_id_was_handed_out_twice(&pair, other, all, synchronous);
        drop(old);
        drop(pair);
        // The next pair starts from a clean registry.
        registry
            .connect()
            .batch_execute("DROP SCHEMA IF EXISTS snowflake_registry CASCADE")
            .unwrap();
    }
}

/// The registry installed, a pair leasing its worker ids from it (`synchronous` on or off)
/// with a table `events` keyed by `snowflake_nextval()`, which the replica has too. Returns the
/// pair, the primary's node and a session to it.
fn a_leasing_pair_with_a_table_events_on_both(
    registry: &Cluster,
    synchronous: &str,
) -> (Pair, usize, postgres::Client) {
    install_registry(registry, "postgres");
    let conninfo = format!(
        "host=127.0.0.1 port={} dbname=postgres user=fleet connect_timeout=5",
        registry.port
    );
    let pair = Pair::up_with(
        &format!("patroni-leased-{synchronous}"),
        "auto",
        &[
            ("SNOWFLAKE_REGISTRY", conninfo),
            ("SNOWFLAKE_LEASE_TTL", "5s".into()),
            ("PAIR_SYNCHRONOUS", synchronous.into()),
        ],
    );
    let first = pair.primary().expect("a primary");
    let mut c = postgres::Client::connect(&pair.conninfo(first), postgres::NoTls).unwrap();
    c.batch_execute(
        "CREATE EXTENSION IF NOT EXISTS snowflake_ext;
         CREATE TABLE events (id bigint PRIMARY KEY DEFAULT snowflake_nextval(), n int NOT NULL)",
    )
    .unwrap();
    if synchronous == "on" {
        wait_for_synchronous_standby(&mut c);
    }
    // The replica has the table (and the extension) before the primary goes.
    let replica = 1 - first;
    wait_until("the replica to have the table", PATIENCE, || {
        postgres::Client::connect(&pair.conninfo(replica), postgres::NoTls)
            .and_then(|mut r| r.query_one("SELECT to_regclass('events') IS NOT NULL", &[]))
            .is_ok_and(|r| r.get::<_, bool>(0))
    });
    (pair, first, c)
}

/// The ids of `n` rows inserted into `events` on `node`.
fn ids_on(pair: &Pair, node: usize, n: i32) -> Vec<i64> {
    let mut c = postgres::Client::connect(&pair.conninfo(node), postgres::NoTls).unwrap();
    ids(
        &mut c,
        &format!("INSERT INTO events (n) SELECT g FROM generate_series(1, {n}) g RETURNING id"),
    )
}

/// The primary (`first`) mints, once it has leased a worker id: one id alone, then 5000 rows.
/// Returns that first id and all of them.
fn the_primary_mints(pair: &Pair, first: usize) -> (i64, Vec<i64>) {
    let before = wait_for("the primary to mint", PATIENCE, || {
        let mut c = postgres::Client::connect(&pair.conninfo(first), postgres::NoTls).ok()?;
        c.query_one("SELECT snowflake_nextval()", &[])
            .ok()
            .map(|r| r.get::<_, i64>(0))
    });
    let mut all = ids_on(pair, first, 5000);
    all.push(before);
    (before, all)
}

/// The primary's node (`first`) killed, Patroni promotes the replica, and the new primary
/// mints, with a worker id the old one (which minted `before`) never had; what it mints is
/// added to `all`. Returns the new primary's node.
fn patroni_promotes_the_replica_which_mints_with_a_worker_id_of_its_own(
    pair: &Pair,
    first: usize,
    before: i64,
    synchronous: &str,
    all: &mut Vec<i64>,
) -> usize {
    pair.kill(first);
    let other = 1 - first;
    wait_until("Patroni to promote the replica", PATIENCE, || {
        pair.primary() == Some(other)
    });
    let after = wait_for("the new primary to mint", PATIENCE, || {
        let mut c = postgres::Client::connect(&pair.conninfo(other), postgres::NoTls).ok()?;
        c.query_one("SELECT snowflake_nextval()", &[])
            .ok()
            .map(|r| r.get::<_, i64>(0))
    });
    assert_ne!(
        (after >> 12) & 1023,
        (before >> 12) & 1023,
        "synchronous = {synchronous}"
    );
    all.push(after);
    all.extend(ids_on(pair, other, 5000));
    other
}

/// The registry (through `reg`) releases the old primary's lease (`first`) as superseded by a
/// promoted standby.
fn the_registry_records_the_old_primary_superseded(
    reg: &mut postgres::Client,
    pair: &Pair,
    first: usize,
) {
    wait_until("the old primary superseded", PATIENCE, || {
        reg.query_one(
            "SELECT count(*) > 0 FROM snowflake_registry.leases
              WHERE port = $1 AND released_by = 'superseded'",
            &[&(pair.pg[first] as i32)],
        )
        .unwrap()
        .get(0)
    });
}

/// Split brain: the old primary (`first`) started by hand as a primary, once the registry has
/// released its lease as superseded. Keeping it from writing is Patroni's work; it is never
/// refused a lease for good (until 0.5.0 it was, and so was a healthy primary whose lease ran
/// out in a registry outage): its lease ran out, so it waits out the lock-delay and mints with a
/// worker id nobody else holds. Its ids go into `all`; returns a session to it.
/// With synchronous replication it cannot mint: its marks wait for a synchronous standby that
/// is not there.
fn the_old_primary_started_by_hand_as_a_primary_mints_with_its_own(
    pair: &Pair,
    first: usize,
    synchronous: &str,
    all: &mut Vec<i64>,
) -> postgres::Client {
    pair.start_without_patroni(first);
    let mut old = postgres::Client::connect(&pair.conninfo(first), postgres::NoTls).unwrap();
    assert!(!old.scalar::<bool>("SELECT pg_is_in_recovery()"));
    if synchronous == "on" {
        // Nothing to wait for: it never mints (no_id_was_handed_out_twice checks the rest).
        return old;
    }
    wait_for_standing_of(&mut old, "held");
    all.extend(ids(
        &mut old,
        "SELECT snowflake_nextval() FROM generate_series(1, 2000)",
    ));
    old
}

/// 2000 more rows on the new primary (`other`), and no id among them and `all` twice.
fn no_id_was_handed_out_twice(pair: &Pair, other: usize, mut all: Vec<i64>, synchronous: &str) {
    all.extend(ids_on(pair, other, 2000));
    let distinct: HashSet<i64> = all.iter().copied().collect();
    assert_eq!(
        distinct.len(),
        all.len(),
        "an id was handed out twice (synchronous = {synchronous})"
    );
}

//! The documentation's runnable SQL, run as written: `scripts/check-snippets` against servers set
//! up the way the pages say, each group's blocks in order under `ON_ERROR_STOP` (see the
//! script's docstring for the marks). A snippet that errors fails its test, naming its page and
//! line. Besides the script's exit, the pgEdge recipe of docs/migrating.md is checked from SQL:
//! the results its comments promise are not compared by the script.

mod common;

use common::*;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

/// How long one run of `scripts/check-snippets` may take: each group takes a few seconds; a
/// snippet that hangs (a wait that never ends) is cut off and fails the test.
const DEADLINE: Duration = Duration::from_secs(300);

/// The database the pgEdge groups share (`database=` of their marks in docs/migrating.md).
const PGEDGE_DB: &str = "check_snippets_pgedge";

/// Runs `scripts/check-snippets ARGS` against `cluster` as `postgres`, with that server's psql;
/// returns whether it exited 0, and what it printed.
fn check_snippets(cluster: &Cluster, args: &[&str]) -> (bool, String) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = std::env::temp_dir().join(format!(
        "snowflake_ext-check-snippets-{}-{}.out",
        std::process::id(),
        cluster.port
    ));
    let file = std::fs::File::create(&out).unwrap();
    let mut child = Command::new(root.join("scripts/check-snippets"))
        .args(args)
        .env("PGHOST", "127.0.0.1")
        .env("PGPORT", cluster.port.to_string())
        .env("PGUSER", "postgres")
        .env("PSQL", cluster.bin("psql"))
        .stdin(Stdio::null())
        .stdout(file.try_clone().unwrap())
        .stderr(file)
        .spawn()
        .expect("run scripts/check-snippets");
    let status = wait_for_or_kill(&mut child, &format!("scripts/check-snippets {args:?}"));
    let printed = std::fs::read_to_string(&out).unwrap_or_default();
    let _ = std::fs::remove_file(&out);
    (status.success(), printed)
}

/// Waits for `child` up to the deadline; past it, kills it and panics.
fn wait_for_or_kill(child: &mut std::process::Child, what: &str) -> std::process::ExitStatus {
    let start = std::time::Instant::now();
    let mut status = None;
    let done = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        wait_until(what, DEADLINE, || {
            status = child.try_wait().unwrap();
            status.is_some()
        })
    }));
    if done.is_err() {
        let _ = child.kill();
        let _ = child.wait();
        panic!("{what} did not finish in {:?}", start.elapsed());
    }
    status.unwrap()
}

/// Asserts that `scripts/check-snippets ARGS` exits 0, showing what it printed if not.
fn assert_snippets_pass(cluster: &Cluster, args: &[&str]) {
    let (ok, printed) = check_snippets(cluster, args);
    assert!(ok, "scripts/check-snippets {args:?} failed:\n{printed}");
    eprintln!("{}", printed.trim_end());
}

#[test]
fn every_snippet_for_the_quick_starts_server_runs_clean() {
    // What the quick start sets up: the library preloaded, a worker id, the default layout.
    let cluster = Cluster::new("snippets-default", &["snowflake.worker_id=1"]);
    cluster.start();
    assert_snippets_pass(&cluster, &[]);
}

/// A server as docs/migrating.md's steps leave it: pgEdge's extension in use (`snowflake.node =
/// 7`), a table keyed by its ids (group pgedge-before), then the settings of step 1 and a
/// restart, and steps 2 and 3 (group pgedge-after). The database is kept for the caller.
fn moved_from_pgedge(name: &str) -> Cluster {
    // Before step 1: pgEdge's extension alone, this library not loaded.
    let cluster = Cluster::new(name, &["shared_preload_libraries=", "snowflake.node=7"]);
    cluster.start();
    let installed: i64 = cluster
        .connect()
        .scalar("SELECT count(*) FROM pg_available_extensions WHERE name = 'snowflake'");
    assert_eq!(
        installed,
        1,
        "pgEdge's snowflake extension is not installed in PostgreSQL {}: scripts/install-deps.sh \
         builds and installs it from ../shared/peers/pgedge-snowflake (or $PGEDGE_SRC); by hand, \
         `make USE_PGXS=1 PG_CONFIG=$(scripts/pg-major pg-config {0}) install` in a copy of its source",
        std::env::var("PG_MAJOR").unwrap_or_else(|_| "15".into())
    );
    assert_snippets_pass(&cluster, &["--keep", "pgedge-before"]);
    cluster.stop();
    // Step 1's settings (later lines of postgresql.conf win).
    use std::io::Write;
    let mut conf = std::fs::OpenOptions::new()
        .append(true)
        .open(cluster.dir.join("postgresql.conf"))
        .unwrap();
    writeln!(
        conf,
        "shared_preload_libraries = 'snowflake_ext'\nsnowflake.layout = 'pgedge'\nsnowflake.worker_id = 7"
    )
    .unwrap();
    cluster.start();
    assert_snippets_pass(&cluster, &["--keep", "pgedge-after"]);
    cluster
}

#[test]
fn the_pgedge_recipe_keeps_old_ids_readable_and_mints_above_them() {
    let cluster = moved_from_pgedge("snippets-pgedge");
    let mut c = cluster.connect_to(PGEDGE_DB);
    // Step 2 adopted the column: its default is this extension's now.
    let default: String = c.scalar(
        "SELECT pg_get_expr(d.adbin, d.adrelid) FROM pg_attrdef d
          JOIN pg_attribute a ON a.attrelid = d.adrelid AND a.attnum = d.adnum
         WHERE d.adrelid = 'orders'::regclass AND a.attname = 'id'",
    );
    assert_eq!(default, "snowflake_nextval()");
    c.batch_execute(
        "INSERT INTO orders (customer) SELECT 'new ' || g FROM generate_series(1, 1000) g",
    )
    .unwrap();
    // pgEdge's 10,000 ids read as pgEdge reads them: time (to the millisecond), node, count.
    let (old, alike): (i64, i64) = {
        let row = c
            .query_one(
                "SELECT count(*), count(*) FILTER (
                          WHERE snowflake_timestamp(id) = timestamptz 'epoch'
                                + (snowflake.get_epoch(id) * 1000)::bigint * interval '1 ms'
                            AND snowflake_worker(id) = snowflake.get_node(id)
                            AND snowflake_worker(id) = 7
                            AND snowflake_sequence(id) = snowflake.get_count(id))
                   FROM orders WHERE customer LIKE 'customer %'",
                &[],
            )
            .unwrap();
        (row.get(0), row.get(1))
    };
    assert_eq!((old, alike), (10_000, 10_000));
    // New ids: above every old one, of worker 7, and pgEdge reads them alike too.
    let (above, new_alike): (bool, i64) = {
        let row = c
            .query_one(
                "SELECT min(id) FILTER (WHERE customer NOT LIKE 'customer %')
                          > max(id) FILTER (WHERE customer LIKE 'customer %'),
                        count(*) FILTER (WHERE customer LIKE 'new %'
                          AND snowflake.get_node(id) = 7 AND snowflake_worker(id) = 7
                          AND snowflake_sequence(id) = snowflake.get_count(id))
                   FROM orders",
                &[],
            )
            .unwrap();
        (row.get(0), row.get(1))
    };
    assert!(above, "a new id is not above pgEdge's ids");
    assert_eq!(new_alike, 1000);
}

/// Minor releases from 15.19 on load only the output plugins `output_plugin_libraries` lists;
/// older ones do not know the setting (as in tests/multinode.rs).
fn has_output_plugin_allowlist() -> bool {
    let out = Command::new(pg_bin("postgres"))
        .arg("--describe-config")
        .output()
        .expect("postgres --describe-config");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .any(|l| l.starts_with("output_plugin_libraries\t"))
}

#[test]
fn the_pglogical_node_setup_runs_on_a_node_configured_as_docs_deployment_says() {
    // docs/deployment.md, "Multi-master with pglogical": the settings of one node.
    let mut settings = vec![
        "shared_preload_libraries=pglogical,snowflake_ext",
        "snowflake.worker_id=1",
        "wal_level=logical",
        "track_commit_timestamp=on",
        "max_worker_processes=16",
        "max_replication_slots=16",
        "max_wal_senders=16",
    ];
    if has_output_plugin_allowlist() {
        settings.push("output_plugin_libraries=pgoutput, test_decoding, pglogical_output");
    }
    let cluster = Cluster::new("snippets-pglogical", &settings);
    cluster.start();
    assert_snippets_pass(&cluster, &["pglogical-node"]);
}

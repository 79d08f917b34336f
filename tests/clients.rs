//! Real clients against both editions: node-postgres, psycopg 3, SQLAlchemy 2 and Django 5, as
//! pinned in `tests/clients/` and installed by `scripts/install-deps.sh`, run against one server
//! that has the library preloaded: database `native` with the extension, database `portable`
//! with `sql/portable/snowflake_portable.sql` installed by its owner, an ordinary role.

mod common;

use common::*;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The server's worker id (the native edition's), and the one the portable edition is given:
/// different, so that a suite pointed at the wrong database fails on the worker of its ids.
const NATIVE_WORKER: i32 = 3;
const PORTABLE_WORKER: i32 = 7;
/// The role that owns both databases and runs every client: no superuser.
const APP_ROLE: &str = "app";

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// A program that install-deps.sh puts in the work tree; a clear failure when it has not run.
fn installed(path: PathBuf) -> PathBuf {
    assert!(
        path.exists(),
        "{} is missing: run scripts/install-deps.sh",
        path.display()
    );
    path
}

/// Runs `command` with the suites' settings for `db`, and fails with everything it printed
/// unless it exits 0.
fn run_suite(label: &str, mut command: Command, cluster: &Cluster, db: &str, worker: i32) {
    let dsn = format!(
        "postgresql://{APP_ROLE}@127.0.0.1:{}/{db}?connect_timeout=10",
        cluster.port
    );
    let out = command
        .current_dir(repo())
        .env("SNOWFLAKE_TEST_DSN", &dsn)
        .env("SNOWFLAKE_EDITION", db)
        .env("SNOWFLAKE_WORKER_ID", worker.to_string())
        // No __pycache__ left in the work tree.
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .output()
        .unwrap_or_else(|e| panic!("run the {label} suite: {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "the {label} suite failed against the {db} edition ({}):\n{text}",
        out.status
    );
    println!("--- {label} against the {db} edition ---\n{text}");
}

fn node_suite() -> Command {
    installed(repo().join("tests/clients/node/node_modules/pg/package.json"));
    let mut c = Command::new("node");
    c.args(["--test", "tests/clients/node/test.mjs"]);
    c
}

fn python_suite() -> Command {
    let mut c = Command::new(installed(
        repo().join("tests/clients/python/.venv/bin/python"),
    ));
    c.args(["-m", "pytest", "-q", "tests/clients/python"]);
    c
}

#[test]
fn clients_against_native_and_portable() {
    let cluster = Cluster::new(
        "clients",
        &[&format!("snowflake.worker_id={NATIVE_WORKER}")],
    );
    cluster.start();
    let mut admin = cluster.connect();
    // One statement each: CREATE DATABASE cannot run in the implicit transaction of a batch.
    for sql in [
        format!("CREATE ROLE {APP_ROLE} LOGIN"),
        format!("CREATE DATABASE native OWNER {APP_ROLE}"),
        format!("CREATE DATABASE portable OWNER {APP_ROLE}"),
    ] {
        admin.batch_execute(&sql).unwrap();
    }
    cluster
        .connect_to("native")
        .batch_execute("CREATE EXTENSION snowflake_ext")
        .unwrap();

    // The portable edition as its users install it: the database's owner, not a superuser, runs
    // the file with psql, then gives the database its worker id.
    let portable_sql = repo().join("sql/portable/snowflake_portable.sql");
    assert!(
        portable_sql.exists(),
        "{} is missing",
        portable_sql.display()
    );
    let port = cluster.port.to_string();
    let psql = |args: &[&str]| {
        let out = Command::new(cluster.bin("psql"))
            .args(["-X", "-q", "-v", "ON_ERROR_STOP=1", "-h", "127.0.0.1", "-p"])
            .args([port.as_str(), "-U", APP_ROLE, "-d", "portable"])
            .args(args)
            .output()
            .expect("run psql");
        assert!(
            out.status.success(),
            "psql {args:?} failed:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    };
    // In one transaction (-1), as the file requires.
    psql(&["-1", "-f", portable_sql.to_str().unwrap()]);
    psql(&[
        "-c",
        &format!("SELECT snowflake_set_worker_id({PORTABLE_WORKER})"),
    ]);
    // The portable database is the portable edition's alone: no extension, no snowflake type.
    let mut portable = cluster.connect_to("portable");
    let row = portable
        .query_one(
            "SELECT (SELECT count(*) FROM pg_extension WHERE extname = 'snowflake_ext'),
                    to_regtype('snowflake') IS NULL",
            &[],
        )
        .unwrap();
    assert_eq!((row.get::<_, i64>(0), row.get::<_, bool>(1)), (0, true));

    for (db, worker) in [("native", NATIVE_WORKER), ("portable", PORTABLE_WORKER)] {
        run_suite("node-postgres", node_suite(), &cluster, db, worker);
        run_suite(
            "psycopg, SQLAlchemy and Django",
            python_suite(),
            &cluster,
            db,
            worker,
        );
    }
}

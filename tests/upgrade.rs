//! Upgrades: the extension from each older version (0.1.0, 0.2.0, 0.3.0, 0.4.0, 0.5.0) to this one in place
//! (`ALTER EXTENSION ... UPDATE`) while a session keeps inserting, and a cluster from PostgreSQL 15 to 18 with `pg_upgrade` (copy and
//! link), its clock an hour back; and the portable edition's counter from 14 to 18. Needs the
//! extension installed for 15 and 18 (scripts/test.sh runs it after both).

mod common;

use common::*;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The extension directory of a major, from its pg_config.
fn extension_dir(bin: &Path) -> PathBuf {
    let out = Command::new(bin.join("pg_config"))
        .arg("--sharedir")
        .output()
        .unwrap();
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()).join("extension")
}

/// Every upgrade script in sql/.
fn upgrade_scripts() -> Vec<String> {
    let mut scripts: Vec<String> =
        std::fs::read_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("sql"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| {
                n.starts_with("snowflake_ext--")
                    && n.matches("--").count() == 2
                    && n.ends_with(".sql")
            })
            .collect();
    scripts.sort();
    scripts
}

#[test]
fn every_upgrade_script_is_installed() {
    let scripts = upgrade_scripts();
    for script in [
        "snowflake_ext--0.1.0--0.2.0.sql",
        "snowflake_ext--0.2.0--0.3.0.sql",
        "snowflake_ext--0.3.0--0.4.0.sql",
        "snowflake_ext--0.4.0--0.5.0.sql",
        "snowflake_ext--0.5.0--0.6.0.sql",
    ] {
        assert!(scripts.contains(&script.to_string()), "{scripts:?}");
    }
    let dir = extension_dir(&pg_bin(""));
    for script in scripts {
        assert!(
            dir.join(&script).exists(),
            "{script} is not installed in {}",
            dir.display()
        );
    }
}

/// An older version's install script, from the fixtures, where CREATE EXTENSION ... VERSION
/// finds it; removed again when dropped.
struct OldVersion(PathBuf);

impl OldVersion {
    fn install(version: &str) -> OldVersion {
        let script = format!("snowflake_ext--{version}.sql");
        let path = extension_dir(&pg_bin("")).join(&script);
        std::fs::copy(
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/fixtures")
                .join(&script),
            &path,
        )
        .unwrap();
        OldVersion(path)
    }
}

impl Drop for OldVersion {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// `pg_dump --schema-only --binary-upgrade` (which lists an extension's objects one by one) of
/// a database, without the lines that differ between any two dumps. The entries of the schema
/// `tests` are left out: it holds the `#[pg_test]` functions of the build that `cargo pgrx test`
/// installed (scripts/test.sh runs it before this test), and is no part of a release. (An
/// --exclude-schema would not do: a binary-upgrade dump lists every member of an extension.)
fn schema_of(cluster: &Cluster, db: &str) -> String {
    let dump = cluster.pg_dump(&["--schema-only", "--binary-upgrade", db]);
    let mut in_tests = false;
    String::from_utf8_lossy(&dump)
        .lines()
        .filter(|l| {
            // Each entry of the dump opens with "-- Name: <name>; Type: <type>; Schema: <schema>;".
            if let Some(entry) = l.strip_prefix("-- Name: ") {
                in_tests = entry.contains("; Schema: tests;") || entry.starts_with("tests; ");
            }
            !(in_tests
                || l.is_empty()
                || l.starts_with("--")
                || l.contains("binary_upgrade_set_next")
                // A table's frozen xid, and the session settings pg_dump repeats wherever the
                // dump's order of objects (their OIDs: an update makes them later) switches
                // between tables and other objects.
                || l.contains("relfrozenxid")
                || l.starts_with("SET default_table_access_method")
                || l.starts_with("SET default_tablespace")
                || l.starts_with("\\restrict")
                || l.starts_with("\\unrestrict"))
        })
        .map(|l| {
            // The OIDs of the extension's configuration tables (snowflake_past_use): later in
            // an updated database than in a fresh install.
            if l.contains("binary_upgrade_create_empty_extension") {
                let mut out = String::new();
                let mut rest = l;
                while let Some(i) = rest.find("'{") {
                    out.push_str(&rest[..i]);
                    let end = rest[i..].find("}'").map_or(rest.len(), |e| i + e + 2);
                    let inner = &rest[i + 2..end.saturating_sub(2)];
                    if inner.chars().all(|ch| ch.is_ascii_digit() || ch == ',') {
                        out.push_str("'{<oids>}'");
                    } else {
                        out.push_str(&rest[i..end]);
                    }
                    rest = &rest[end..];
                }
                out.push_str(rest);
                out
            } else {
                l.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn alter_extension_update_from_0_1_0_gives_a_fresh_install_and_inserts_go_on() {
    update_gives_a_fresh_install_and_inserts_go_on("0.1.0");
}

#[test]
fn alter_extension_update_from_0_2_0_gives_a_fresh_install_and_inserts_go_on() {
    update_gives_a_fresh_install_and_inserts_go_on("0.2.0");
}

#[test]
fn alter_extension_update_from_0_3_0_gives_a_fresh_install_and_inserts_go_on() {
    update_gives_a_fresh_install_and_inserts_go_on("0.3.0");
}

#[test]
fn alter_extension_update_from_0_4_0_gives_a_fresh_install_and_inserts_go_on() {
    update_gives_a_fresh_install_and_inserts_go_on("0.4.0");
}

#[test]
fn alter_extension_update_from_0_5_0_gives_a_fresh_install_and_inserts_go_on() {
    update_gives_a_fresh_install_and_inserts_go_on("0.5.0");
}

fn update_gives_a_fresh_install_and_inserts_go_on(from: &str) {
    let _old = OldVersion::install(from);
    let cluster = Cluster::new(&format!("ext-update-{from}"), &["snowflake.worker_id=8"]);
    cluster.start();
    let mut admin = cluster.connect();
    admin.batch_execute("CREATE DATABASE old").unwrap();
    admin.batch_execute("CREATE DATABASE fresh").unwrap();
    let mut old = cluster.connect_to("old");
    old.batch_execute(&format!(
        "CREATE EXTENSION snowflake_ext VERSION '{from}';
         CREATE TABLE t (id bigint PRIMARY KEY DEFAULT snowflake_nextval(), v int);"
    ))
    .unwrap();
    // The new library serves the database still at the old version: generation, decoding,
    // statistics.
    let id: i64 = old.scalar("SELECT snowflake_nextval()");
    let worker: i32 = old
        .query_one("SELECT snowflake_worker($1)", &[&id])
        .unwrap()
        .get(0);
    assert_eq!(worker, 8);
    let issued: i64 = old.scalar("SELECT issued FROM snowflake_stats WHERE worker = 8");
    assert!(issued >= 1);

    // A session inserts all along; the update happens under it, after 30 inserts and
    // followed by 30 more.
    let stop = Arc::new(AtomicBool::new(false));
    let inserted = Arc::new(AtomicUsize::new(0));
    let inserter = {
        let (stop, inserted) = (stop.clone(), inserted.clone());
        let conninfo = cluster.conninfo("old");
        std::thread::spawn(move || {
            let mut c = postgres::Client::connect(&conninfo, postgres::NoTls).unwrap();
            let mut ids = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let id: i64 = c.scalar("INSERT INTO t (v) VALUES (1) RETURNING id");
                ids.push(id);
                inserted.fetch_add(1, Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(2));
            }
            ids
        })
    };
    let inserts_past = |n: usize| {
        wait_until(&format!("{n} inserts"), PATIENCE, || {
            inserted.load(Ordering::Relaxed) >= n
        })
    };
    inserts_past(30);
    old.batch_execute("ALTER EXTENSION snowflake_ext UPDATE")
        .unwrap();
    inserts_past(inserted.load(Ordering::Relaxed) + 30);
    stop.store(true, Ordering::Relaxed);
    let ids = inserter.join().unwrap();
    assert!(ids.len() > 50, "only {} inserts", ids.len());
    assert_strictly_increasing(&ids);
    let version: String =
        old.scalar("SELECT extversion FROM pg_extension WHERE extname = 'snowflake_ext'");
    assert_eq!(version, env!("CARGO_PKG_VERSION"));

    old.batch_execute("DROP TABLE t").unwrap();
    cluster
        .connect_to("fresh")
        .batch_execute("CREATE EXTENSION snowflake_ext")
        .unwrap();
    let (updated, fresh) = (schema_of(&cluster, "old"), schema_of(&cluster, "fresh"));
    assert!(fresh.contains("snowflake_restore_mark"), "{fresh}");
    assert!(
        updated == fresh,
        "the updated schema differs from a fresh install:\n{}",
        line_diff(&updated, &fresh)
    );
}

/// The lines of `a` that `b` lacks ("- ") and those of `b` that `a` lacks ("+ "), counted as
/// multisets: enough to see what differs without printing both dumps whole.
fn line_diff(a: &str, b: &str) -> String {
    type Counts<'t> = std::collections::BTreeMap<&'t str, i64>;
    fn count(text: &str) -> Counts<'_> {
        let mut lines = Counts::new();
        for line in text.lines() {
            *lines.entry(line).or_default() += 1;
        }
        lines
    }
    fn only_in(x: &Counts, y: &Counts, mark: &str) -> String {
        let mut out = String::new();
        for (line, n) in x {
            for _ in 0..(n - y.get(line).copied().unwrap_or(0)).max(0) {
                out += &format!("{mark} {line}\n");
            }
        }
        out
    }
    let (a, b) = (count(a), count(b));
    let mut out = only_in(&a, &b, "-") + &only_in(&b, &a, "+");
    if out.is_empty() {
        out = "the same lines in another order".into();
    }
    out
}

/// The extension's files, as installed for PostgreSQL 15, copied into the 15.19 build that
/// the pg_upgrade test starts from (the same major: the same library serves both).
fn install_into_15_19() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(copy_into_15_19);
}

fn copy_into_15_19() {
    let config = |bin: PathBuf, what: &str| -> PathBuf {
        let out = Command::new(bin.join("pg_config"))
            .arg(what)
            .output()
            .unwrap();
        PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
    };
    let (from, to) = (bindir_of("15"), bindir_of("15.19"));
    std::fs::copy(
        config(from.clone(), "--pkglibdir").join("snowflake_ext.so"),
        config(to.clone(), "--pkglibdir").join("snowflake_ext.so"),
    )
    .unwrap();
    for entry in std::fs::read_dir(config(from, "--sharedir").join("extension")).unwrap() {
        let entry = entry.unwrap();
        if entry
            .file_name()
            .to_string_lossy()
            .starts_with("snowflake_ext")
        {
            std::fs::copy(
                entry.path(),
                config(to.clone(), "--sharedir")
                    .join("extension")
                    .join(entry.file_name()),
            )
            .unwrap();
        }
    }
}

/// pg_upgrade from 15 to 18 of a cluster that issued ids; the new cluster starts with its
/// clock an hour back and mints above them. The old cluster is 15.19: Debian's 15.20 gives
/// every column an attribute option that 18.6, the newest 18 available here, cannot restore
/// (see scripts/pg-major), which breaks pg_upgrade for any table.
/// Runs `pg_upgrade` from the stopped cluster `old` into the new, stopped cluster `new`, with
/// `mode` (`--check`, `--copy`, `--link`), as postgres in a work directory named for `name`;
/// returns its output.
fn pg_upgrade(old: &Cluster, new: &Cluster, name: &str, mode: &str) -> String {
    let work = Scratch::dir_for_postgres(name);
    let (p1, p2) = (free_port().to_string(), free_port().to_string());
    let (old_bin, new_bin) = (old.bin(""), new.bin(""));
    run_as_postgres(
        &work,
        &new.bin("pg_upgrade"),
        &[
            "-b",
            old_bin.to_str().unwrap(),
            "-B",
            new_bin.to_str().unwrap(),
            "-d",
            old.dir.to_str().unwrap(),
            "-D",
            new.dir.to_str().unwrap(),
            "-p",
            &p1,
            "-P",
            &p2,
            mode,
        ],
    )
}

fn upgrade_15_to_18(mode: &str) {
    install_into_15_19();
    let old = Cluster::new_on(
        Some("15.19"),
        &format!("major-old{mode}"),
        &["snowflake.worker_id=7"],
    );
    old.start();
    // A table of the snowflake type, guarded for replication: the type, its casts and the
    // trigger come through too.
    old.connect()
        .batch_execute(
            "CREATE EXTENSION snowflake_ext;
             CREATE TABLE orders (id snowflake PRIMARY KEY DEFAULT snowflake_nextval(), n int);
             INSERT INTO orders (n) SELECT g FROM generate_series(1, 1000) g;
             SELECT snowflake_guard('orders');",
        )
        .unwrap();
    let mut largest = 0;
    for _ in 0..3 {
        let last: i64 = old
            .connect()
            .scalar("SELECT snowflake_lastval() FROM (SELECT x FROM snowflake_nextval_batch(1000000) x LIMIT 1) one");
        largest = largest.max(last);
    }
    old.stop();
    let mut new = Cluster::new_on(
        Some("18"),
        &format!("major-new{mode}"),
        &["snowflake.worker_id=7"],
    );
    let out = pg_upgrade(&old, &new, &format!("major-work{mode}"), "--check");
    assert!(out.contains("Clusters are compatible"), "{out}");
    pg_upgrade(&old, &new, &format!("major-work{mode}"), mode);
    new.use_faketime();
    new.set_clock_offset(-3600);
    new.start();
    let mut c = new.connect();
    let version: String = c.scalar("SHOW server_version_num");
    assert!(version.starts_with("18"), "{version}");
    let lowest: i64 = wait_for("ids from the upgraded cluster", PATIENCE, || {
        c.query_one(
            "SELECT min(x) FROM (SELECT snowflake_nextval() x FROM generate_series(1, 1000)) s",
            &[],
        )
        .map_err(|e| eprintln!("waiting: {e}"))
        .ok()
        .map(|row| row.get(0))
    });
    assert!(
        lowest > largest,
        "after pg_upgrade {mode} 15 to 18: {lowest} is not above {largest}"
    );
    c.batch_execute("INSERT INTO orders (n) VALUES (1001)")
        .unwrap();
    let (rows, json, guarded): (i64, String, bool) = {
        let r = c
            .query_one(
                "SELECT count(*), (SELECT to_json(id)::text FROM orders ORDER BY id DESC LIMIT 1),
                        EXISTS (SELECT FROM pg_trigger WHERE tgname = 'snowflake_guard' AND tgenabled = 'R')
                   FROM orders",
                &[],
            )
            .unwrap();
        (r.get(0), r.get(1), r.get(2))
    };
    assert_eq!((rows, guarded), (1001, true));
    assert!(json.starts_with('"'), "{json}");
}

#[test]
fn pg_upgrade_from_15_to_18_copy_carries_the_marks() {
    upgrade_15_to_18("--copy");
}

#[test]
fn pg_upgrade_from_15_to_18_link_carries_the_marks() {
    upgrade_15_to_18("--link");
}

/// The portable edition through pg_upgrade from 14 to 18: servers without the library, the
/// counter in an ordinary sequence, carried like any other; the new cluster's clock an hour
/// back.
#[test]
fn pg_upgrade_from_14_to_18_carries_the_portable_counter() {
    let old = Cluster::new_on(Some("14"), "portable-old", &["shared_preload_libraries="]);
    old.start();
    portable_database(&old, "app");
    let mut app = connect_as(&old, "app", "app");
    app.batch_execute(
        "SELECT snowflake_set_worker_id(7);
         CREATE TABLE orders (id bigint PRIMARY KEY DEFAULT snowflake_nextval(), n int);
         INSERT INTO orders (n) SELECT g FROM generate_series(1, 1000) g;",
    )
    .unwrap();
    let largest: i64 = app.scalar("SELECT max(x) FROM snowflake_nextval_batch(1000000) x");
    drop(app);
    old.stop();
    let mut new = Cluster::new_on(Some("18"), "portable-new", &["shared_preload_libraries="]);
    pg_upgrade(&old, &new, "portable-upgrade-work", "--copy");
    new.use_faketime();
    new.set_clock_offset(-3600);
    new.start();
    let mut app = connect_as(&new, "app", "app");
    let version: String = app.scalar("SHOW server_version_num");
    assert!(version.starts_with("18"), "{version}");
    let next: i64 = app.scalar("SELECT snowflake_nextval()");
    assert!(
        next > largest,
        "after pg_upgrade: {next} is not above {largest}"
    );
    app.batch_execute("INSERT INTO orders (n) VALUES (1001)")
        .unwrap();
    let rows: i64 = app.scalar("SELECT count(DISTINCT id) FROM orders");
    assert_eq!(rows, 1001);
}

//! The packages `scripts/package` builds: for every supported major, a Debian package with its
//! files where Debian's server packages look for them, every upgrade script included, and the
//! right control fields; the one for PostgreSQL 15 installed for real with `apt-get install`,
//! used on a fresh cluster, and removed cleanly. And the PGXN distribution with its META.json.
//! Run after `scripts/package`.

mod common;

use common::*;
use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn version() -> String {
    let cargo = std::fs::read_to_string(root().join("Cargo.toml")).unwrap();
    cargo
        .lines()
        .find_map(|l| l.strip_prefix("version = \""))
        .map(|v| v.trim_end_matches('"').to_string())
        .unwrap()
}

fn majors() -> Vec<String> {
    let out = Command::new(root().join("scripts/pg-major"))
        .arg("list")
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

fn deb(major: &str) -> PathBuf {
    root().join(format!(
        "target/packages/postgresql-{major}-snowflake-ext_{}-1_amd64.deb",
        version()
    ))
}

fn dpkg_deb(args: &[&str]) -> String {
    let out = Command::new("dpkg-deb").args(args).output().unwrap();
    assert!(
        out.status.success(),
        "dpkg-deb {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn upgrade_scripts() -> Vec<String> {
    std::fs::read_dir(root().join("sql"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("snowflake_ext--") && n.matches("--").count() == 2)
        .collect()
}

#[test]
fn every_major_has_a_debian_package_with_its_files_and_fields() {
    let version = version();
    for major in majors() {
        let deb = deb(&major);
        assert!(
            deb.exists(),
            "{} is missing: run scripts/package",
            deb.display()
        );
        let field = |name: &str| {
            dpkg_deb(&["-f", deb.to_str().unwrap(), name])
                .trim()
                .to_string()
        };
        assert_eq!(
            field("Package"),
            format!("postgresql-{major}-snowflake-ext")
        );
        assert_eq!(field("Version"), format!("{version}-1"));
        assert_eq!(field("Architecture"), "amd64");
        assert!(
            field("Depends").starts_with(&format!("postgresql-{major},")),
            "{}",
            field("Depends")
        );
        // The lease keeper talks to the registry through libpq.
        assert!(field("Depends").contains("libpq5"), "{}", field("Depends"));
        assert!(field("Description").contains(&format!("PostgreSQL {major}")));
        let files = dpkg_deb(&["-c", deb.to_str().unwrap()]);
        let mut expected = vec![
            format!("./usr/lib/postgresql/{major}/lib/snowflake_ext.so"),
            format!("./usr/share/postgresql/{major}/extension/snowflake_ext.control"),
            format!("./usr/share/postgresql/{major}/extension/snowflake_ext--{version}.sql"),
            format!("./usr/share/doc/postgresql-{major}-snowflake-ext/copyright"),
            format!("./usr/share/doc/postgresql-{major}-snowflake-ext/README.md"),
            format!("./usr/share/doc/postgresql-{major}-snowflake-ext/docs/reference.md"),
        ];
        for script in upgrade_scripts() {
            expected.push(format!("./usr/share/postgresql/{major}/extension/{script}"));
        }
        for path in expected {
            assert!(
                files.lines().any(|l| l.ends_with(&path)),
                "{major}: {path} is not in the package:\n{files}"
            );
        }
        // Nothing outside those three places (and the directories above them).
        let places = [
            format!("./usr/lib/postgresql/{major}/lib/"),
            format!("./usr/share/postgresql/{major}/extension/"),
            format!("./usr/share/doc/postgresql-{major}-snowflake-ext/"),
        ];
        for line in files.lines() {
            let path = line.split_whitespace().last().unwrap();
            assert!(
                places
                    .iter()
                    .any(|p| p.starts_with(path) || path.starts_with(p.as_str())),
                "{major}: unexpected {path}"
            );
        }
    }
}

#[test]
fn the_postgresql_15_package_installs_works_and_removes_cleanly() {
    let deb = deb("15");
    let apt = |args: &[&str]| {
        let out = Command::new("apt-get")
            .args(args)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "apt-get {args:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    };
    apt(&["install", "-y", "-q", deb.to_str().unwrap()]);
    let so = Path::new("/usr/lib/postgresql/15/lib/snowflake_ext.so");
    let control = Path::new("/usr/share/postgresql/15/extension/snowflake_ext.control");
    assert!(so.exists() && control.exists());
    let status = Command::new("dpkg-query")
        .args(["-W", "-f", "${Status}", "postgresql-15-snowflake-ext"])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&status.stdout),
        "install ok installed"
    );
    {
        let cluster = Cluster::new_on(Some("15"), "package-15", &["snowflake.worker_id=2"]);
        cluster.start();
        let mut c = cluster.connect();
        c.batch_execute("CREATE EXTENSION snowflake_ext").unwrap();
        let id: i64 = c.scalar("SELECT snowflake_nextval()");
        let row = c
            .query_one(
                "SELECT worker, ts > now() - interval '1 minute' FROM snowflake_decode($1)",
                &[&id],
            )
            .unwrap();
        assert_eq!((row.get::<_, i32>(0), row.get::<_, bool>(1)), (2, true));
        let version: String =
            c.scalar("SELECT extversion FROM pg_extension WHERE extname = 'snowflake_ext'");
        assert_eq!(version, self::version());
    }
    apt(&["remove", "-y", "-q", "postgresql-15-snowflake-ext"]);
    assert!(
        !so.exists() && !control.exists(),
        "files left behind after apt-get remove"
    );
    let left: Vec<_> = std::fs::read_dir("/usr/share/postgresql/15/extension")
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("snowflake_ext"))
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}

#[test]
fn the_pgxn_distribution_has_a_valid_meta_json_and_the_sources() {
    let version = version();
    let zip = root().join(format!("target/packages/snowflake_ext-{version}.zip"));
    assert!(
        zip.exists(),
        "{} is missing: run scripts/package",
        zip.display()
    );
    let list = Command::new("python3")
        .args([
            "-c",
            "import sys, zipfile; print('\\n'.join(zipfile.ZipFile(sys.argv[1]).namelist()))",
        ])
        .arg(&zip)
        .output()
        .unwrap();
    let names = String::from_utf8_lossy(&list.stdout);
    let prefix = format!("snowflake_ext-{version}/");
    for file in [
        "META.json",
        "README.md",
        "LICENSE",
        "Cargo.toml",
        "Cargo.lock",
        "snowflake_ext.control",
        "src/lib.rs",
        "core/src/generator.rs",
    ] {
        assert!(
            names.lines().any(|l| l == format!("{prefix}{file}")),
            "{file} is not in the distribution"
        );
    }
    for script in upgrade_scripts() {
        assert!(
            names.lines().any(|l| l == format!("{prefix}sql/{script}")),
            "{script} is not in the distribution"
        );
    }
    // META.json: the fields PGXN requires, and the version everywhere the same.
    let check = Command::new("python3")
        .args([
            "-c",
            "import json, sys
m = json.load(open(sys.argv[1]))
for k in ('name', 'abstract', 'version', 'maintainer', 'license', 'provides', 'meta-spec'):
    assert k in m, k
assert m['name'] == 'snowflake_ext'
assert m['version'] == sys.argv[2], m['version']
assert m['provides']['snowflake_ext']['version'] == sys.argv[2]
assert m['meta-spec']['version'] == '1.0.0'
assert m['license'] == 'postgresql'",
        ])
        .arg(root().join("META.json"))
        .arg(&version)
        .output()
        .unwrap();
    assert!(
        check.status.success(),
        "META.json: {}",
        String::from_utf8_lossy(&check.stderr)
    );
}

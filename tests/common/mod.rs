//! Test harness: real PostgreSQL 15 clusters, started by the project's own `scripts/pg-cluster`,
//! with the installed snowflake_ext library preloaded.
#![allow(dead_code)]

use postgres::{Client, NoTls};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The one value of a query without parameters: `c.scalar::<i64>("SELECT ...")`. A failing
/// query panics with its text and the server's error.
pub trait Scalar {
    fn scalar<T: for<'a> postgres::types::FromSql<'a>>(&mut self, sql: &str) -> T;
}

impl<C: postgres::GenericClient> Scalar for C {
    fn scalar<T: for<'a> postgres::types::FromSql<'a>>(&mut self, sql: &str) -> T {
        match self.query_one(sql, &[]) {
            Ok(row) => row.get(0),
            Err(e) => panic!("{sql}: {e}"),
        }
    }
}

pub const EPOCH_UNIX_MS: i64 = 1_735_689_600_000;

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/pg-cluster")
}

/// Where the programs of the PostgreSQL major under test are: `PGBIN`, or the bin directory
/// `scripts/pg-major` gives for `PG_MAJOR` (default 15), as for `scripts/pg-cluster`.
pub fn pg_bin(program: &str) -> PathBuf {
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| match std::env::var("PGBIN") {
        Ok(dir) => dir.into(),
        Err(_) => bindir_of(&std::env::var("PG_MAJOR").unwrap_or_else(|_| "15".into())),
    })
    .join(program)
}

/// The bin directory of a PostgreSQL major, from `scripts/pg-major`.
pub fn bindir_of(major: &str) -> PathBuf {
    let out = Command::new(Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/pg-major"))
        .args(["bindir", major])
        .output()
        .expect("run scripts/pg-major");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

/// Runs `program` as the `postgres` OS user with `dir` as its working directory; returns its
/// output, or panics with it if it fails.
pub fn run_as_postgres(dir: &Path, program: &Path, args: &[&str]) -> String {
    let out = Command::new("runuser")
        .args(["-u", "postgres", "--"])
        .arg(program)
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run a program as postgres");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{program:?} {args:?} failed:\n{text}");
    text
}

fn run(args: &[&str], env: &[(&str, &str)]) {
    let out = Command::new(script())
        .args(args)
        .envs(env.iter().copied())
        .output()
        .expect("run scripts/pg-cluster");
    assert!(
        out.status.success(),
        "pg-cluster {args:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn major_env(major: Option<&str>) -> Vec<(&'static str, &str)> {
    major.map(|m| vec![("PG_MAJOR", m)]).unwrap_or_default()
}

/// A directory of this test run, named for `name`; the tests' data directories live here.
pub fn test_dir(name: &str) -> PathBuf {
    let root = Path::new("/tmp/snowflake_ext-tests");
    std::fs::create_dir_all(root).unwrap();
    root.join(format!("{name}-{}", std::process::id()))
}

/// A path of this test run (a [`test_dir`]) that is removed, with whatever it holds, when
/// dropped: a test's own directory or file that belongs to no cluster (a WAL archive, a base
/// backup, a passfile, pg_upgrade's work directory). Left behind, they added up, run after run,
/// on the disk that the suite's clusters and builds share.
pub struct Scratch(PathBuf);

impl Scratch {
    /// The path, with nothing there yet (the test writes a file or a directory there).
    pub fn path(name: &str) -> Scratch {
        Scratch(test_dir(name))
    }

    /// An empty directory there that `postgres` owns (the server and its tools write into it).
    pub fn dir_for_postgres(name: &str) -> Scratch {
        let scratch = Scratch::path(name);
        let _ = std::fs::remove_dir_all(&scratch.0);
        std::fs::create_dir_all(&scratch.0).unwrap();
        let owned = Command::new("chown")
            .args(["postgres:postgres", scratch.0.to_str().unwrap()])
            .status()
            .unwrap();
        assert!(owned.success(), "chown of {}", scratch.0.display());
        scratch
    }
}

impl std::ops::Deref for Scratch {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<Path> for Scratch {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if self.0.is_dir() {
            let _ = std::fs::remove_dir_all(&self.0);
        } else {
            let _ = std::fs::remove_file(&self.0);
        }
    }
}

/// A port for a test's server, this process's until it exits.
///
/// Not one from `bind(0)`: that comes from the kernel's ephemeral range (32768 to 60999), from
/// which it also picks the local end of every client connection, so a server stopped and started
/// again on its port found it taken by some other test's connection ("could not bind IPv4
/// address: Address already in use"). These come from 10000 to 19999, which the kernel never
/// hands out by itself, each claimed by a lock on a file in /tmp/snowflake_ext-ports (the
/// benchmark claims its ports the same way), so that no two test processes take the same one.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
    use std::sync::Mutex;
    // The claims, held (locked) until the process exits.
    static HELD: Mutex<Vec<std::fs::File>> = Mutex::new(Vec::new());
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let dir = Path::new("/tmp/snowflake_ext-ports");
    std::fs::create_dir_all(dir).unwrap();
    // Where each process starts looking, spread so that processes rarely try the same file.
    let first = u64::from(std::process::id()) * 7919 + NEXT.fetch_add(1, Relaxed);
    for i in 0..10_000 {
        let port = 10_000 + ((first + i) % 10_000) as u16;
        let claim = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(dir.join(port.to_string()))
            .unwrap();
        if claim.try_lock().is_ok() && TcpListener::bind(("127.0.0.1", port)).is_ok() {
            HELD.lock().unwrap().push(claim);
            NEXT.fetch_add(i, Relaxed);
            return port;
        }
    }
    panic!("no free port between 10000 and 19999 (each claimed in /tmp/snowflake_ext-ports)");
}

/// Every test cluster runs without fsync (and `scripts/pg-cluster` then skips initdb's and
/// pg_basebackup's syncs): the crashes the tests make are of processes (`kill -9`), which lose
/// nothing that was written to the kernel, and PostgreSQL still writes its WAL at every commit
/// that waits for it; fsync guards only against a crash of the machine itself, which no test
/// makes. Syncing each of the suite's hundreds of clusters, beside compiles writing gigabytes,
/// only made the tests wait. (A test that sets `fsync` itself overrides it: later lines win.)
const NO_FSYNC: &str = "fsync=off";

/// A cluster in its own data directory on its own port; destroyed when dropped.
pub struct Cluster {
    pub dir: PathBuf,
    pub port: u16,
    faketime_file: Option<PathBuf>,
    /// The PostgreSQL major it runs, when not the one under test (`PG_MAJOR`).
    major: Option<String>,
}

impl Cluster {
    /// A new, stopped cluster. `settings` are `name=value` lines for postgresql.conf.
    pub fn new(name: &str, settings: &[&str]) -> Cluster {
        Cluster::new_on(None, name, settings)
    }

    /// A new, stopped cluster of PostgreSQL `major` (the one under test when `None`).
    pub fn new_on(major: Option<&str>, name: &str, settings: &[&str]) -> Cluster {
        let dir = test_dir(name);
        let env = major_env(major);
        run(&["destroy", dir.to_str().unwrap()], &env);
        let port = free_port();
        let mut args = vec!["init", dir.to_str().unwrap()];
        let port_s = port.to_string();
        args.push(&port_s);
        args.push(NO_FSYNC);
        args.extend_from_slice(settings);
        run(&args, &env);
        Cluster {
            dir,
            port,
            faketime_file: None,
            major: major.map(str::to_string),
        }
    }

    /// The bin directory of this cluster's major.
    pub fn bin(&self, program: &str) -> PathBuf {
        match &self.major {
            Some(major) => bindir_of(major).join(program),
            None => pg_bin(program),
        }
    }

    fn env(&self) -> Vec<(&'static str, &str)> {
        major_env(self.major.as_deref())
    }

    /// A streaming standby of `primary` (a `pg_basebackup`, with `settings` added), not started.
    pub fn standby_of(primary: &Cluster, name: &str, settings: &[&str]) -> Cluster {
        let dir = test_dir(name);
        run(&["destroy", dir.to_str().unwrap()], &[]);
        let port = free_port().to_string();
        let primary_port = primary.port.to_string();
        let mut args = vec![
            "standby",
            dir.to_str().unwrap(),
            &port,
            &primary_port,
            NO_FSYNC,
        ];
        args.extend_from_slice(settings);
        run(&args, &[]);
        Cluster {
            dir,
            port: port.parse().unwrap(),
            faketime_file: None,
            major: None,
        }
    }

    /// A cluster in a data directory that already exists (a restored backup, an upgraded
    /// cluster), listening on a port of its own.
    pub fn existing(dir: PathBuf) -> Cluster {
        let port = free_port();
        let mut conf = std::fs::OpenOptions::new()
            .append(true)
            .open(dir.join("postgresql.conf"))
            .unwrap();
        use std::io::Write;
        writeln!(
            conf,
            "port = {port}\nunix_socket_directories = '{}'",
            dir.display()
        )
        .unwrap();
        Cluster {
            dir,
            port,
            faketime_file: None,
            major: None,
        }
    }

    pub fn promote(&self) {
        run(&["promote", self.dir.to_str().unwrap()], &self.env());
    }

    pub fn in_recovery(&self) -> bool {
        self.connect().scalar("SELECT pg_is_in_recovery()")
    }

    /// Waits until this standby has replayed everything `primary` has flushed so far.
    pub fn wait_caught_up(&self, primary: &Cluster) {
        let target: String = primary
            .connect()
            .scalar("SELECT pg_current_wal_flush_lsn()::text");
        let mut c = self.connect();
        let sql = format!("SELECT pg_last_wal_replay_lsn() >= '{target}'::pg_lsn");
        wait_until(
            &format!("the standby to replay the primary's WAL up to {target}"),
            PATIENCE,
            || c.scalar(&sql),
        );
    }

    /// Makes the server's clock come from `faketime` from its next start on; the offset is
    /// set with `set_clock_offset` and can be changed while it runs.
    pub fn use_faketime(&mut self) {
        let file = self.dir.with_extension("faketime");
        std::fs::write(&file, "+0s\n").unwrap();
        self.faketime_file = Some(file);
    }

    /// Sets the server's clock to the real time plus `offset_s` seconds (negative: behind).
    pub fn set_clock_offset(&self, offset_s: i64) {
        let file = self.faketime_file.as_ref().expect("use_faketime first");
        let spec = if offset_s >= 0 {
            format!("+{offset_s}s\n")
        } else {
            format!("{offset_s}s\n")
        };
        std::fs::write(file, spec).unwrap();
    }

    /// Sets the server's clock to `spec`, as libfaketime reads it (`use_faketime` first):
    /// `+5s`, the real time plus an offset, ticking; or `2026-01-01 00:00:05`, that instant,
    /// frozen until the file changes (a test then decides every instant the server sees).
    pub fn set_faketime(&self, spec: &str) {
        let file = self.faketime_file.as_ref().expect("use_faketime first");
        std::fs::write(file, format!("{spec}\n")).unwrap();
    }

    pub fn start(&self) {
        self.start_with(&[]);
    }

    /// Starts the server with `extra` in its environment (as `scripts/pg-cluster start` reads
    /// it, e.g. FAKETIME_MONOTONIC, or what the server itself reads, e.g. RUST_BACKTRACE).
    pub fn start_with(&self, extra: &[(&str, &str)]) {
        let file = self
            .faketime_file
            .as_ref()
            .map(|f| f.to_str().unwrap().to_string());
        let mut env = self.env();
        if let Some(file) = &file {
            env.push(("FAKETIME_FILE", file.as_str()));
        }
        env.extend_from_slice(extra);
        run(&["start", self.dir.to_str().unwrap()], &env);
    }

    pub fn stop(&self) {
        self.stop_mode("fast");
    }

    /// Stops the server with pg_ctl's shutdown `mode` (smart, fast or immediate), waiting for
    /// it up to 60 s.
    pub fn stop_mode(&self, mode: &str) {
        run(&["stop", self.dir.to_str().unwrap(), mode], &self.env());
    }

    /// Begins a shutdown in `mode` without waiting for it: the running `pg_ctl stop`, which
    /// exits once the server is down (or after 60 s, failing).
    pub fn begin_stop(&self, mode: &str) -> std::process::Child {
        Command::new(script())
            .args(["stop", self.dir.to_str().unwrap(), mode])
            .envs(self.env())
            .spawn()
            .expect("run scripts/pg-cluster stop")
    }

    /// `kill -9` of the postmaster: a crash.
    pub fn kill_postmaster(&self) {
        run(&["kill", self.dir.to_str().unwrap()], &self.env());
    }

    pub fn postmaster_pid(&self) -> i32 {
        let pid = std::fs::read_to_string(self.dir.join("postmaster.pid")).unwrap();
        pid.lines().next().unwrap().trim().parse().unwrap()
    }

    /// The pids of this server's processes: the postmaster's, then its children's.
    pub fn pids(&self) -> Vec<i32> {
        let postmaster = self.postmaster_pid();
        let children = Command::new("pgrep")
            .args(["-P", &postmaster.to_string()])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default();
        std::iter::once(postmaster)
            .chain(children.split_whitespace().filter_map(|p| p.parse().ok()))
            .collect()
    }

    /// What each process of this server is doing, for a test that waited in vain: its
    /// pg_stat_activity row (by pid) and, from /proc, its state (R, S, D, T: stopped) and the
    /// kernel function it sleeps in. A wait on a server that never came tells which process
    /// held it up, and whether on a lock, a wait event, the disk or a signal.
    pub fn processes(&self) -> String {
        let activity: Vec<(i32, String)> = match self.try_connect() {
            Some(mut c) => c
                .query(
                    "SELECT pid, concat_ws(' ', backend_type, state, wait_event_type, wait_event,
                                           left(query, 60))
                       FROM pg_stat_activity WHERE pid <> pg_backend_pid()",
                    &[],
                )
                .map(|rows| rows.iter().map(|r| (r.get(0), r.get(1))).collect())
                .unwrap_or_default(),
            None => Vec::new(),
        };
        self.pids()
            .into_iter()
            .map(|pid| {
                let proc = |f: &str| {
                    std::fs::read_to_string(format!("/proc/{pid}/{f}")).unwrap_or_default()
                };
                let stat = proc("stat");
                // The state follows the command's closing parenthesis.
                let state = stat
                    .rsplit_once(") ")
                    .and_then(|(_, rest)| rest.split_whitespace().next())
                    .unwrap_or("?")
                    .to_string();
                let seen = activity
                    .iter()
                    .find(|(p, _)| *p == pid)
                    .map(|(_, a)| a.as_str())
                    .unwrap_or("");
                format!(
                    "{pid} [{state} in {}] {} | {seen}",
                    proc("wchan"),
                    proc("cmdline").replace('\0', " ").trim()
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// A connection, or `None` if the server does not accept one within its connect_timeout.
    pub fn try_connect(&self) -> Option<Client> {
        Client::connect(&self.conninfo("postgres"), NoTls).ok()
    }

    pub fn conninfo(&self, db: &str) -> String {
        format!(
            "host=127.0.0.1 port={} user=postgres dbname={db} connect_timeout=10",
            self.port
        )
    }

    pub fn connect_to(&self, db: &str) -> Client {
        wait_for(
            &format!("a connection to database {db} on port {}", self.port),
            PATIENCE,
            || {
                Client::connect(&self.conninfo(db), NoTls)
                    .map_err(|e| eprintln!("connecting to port {}: {e}", self.port))
                    .ok()
            },
        )
    }

    pub fn connect(&self) -> Client {
        self.connect_to("postgres")
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default()
    }

    /// Waits until the server log contains `text`.
    pub fn wait_for_log(&self, text: &str) {
        wait_until(&format!("{text:?} in the server log"), PATIENCE, || {
            self.log().contains(text)
        });
    }

    /// `ALTER SYSTEM SET name = 'value'` and a reload, then waits until a new session sees
    /// `value` (as `current_setting` shows it): the postmaster has read the file, so every
    /// session started from then on has it, and every older one gets it at its next command.
    pub fn set_and_reload(&self, name: &str, value: &str) {
        let mut c = self.connect();
        c.batch_execute(&format!("ALTER SYSTEM SET {name} = '{value}'"))
            .unwrap();
        c.batch_execute("SELECT pg_reload_conf()").unwrap();
        wait_until(
            &format!("new sessions to see {name} = {value:?} after a reload"),
            PATIENCE,
            || {
                let shown: String = self
                    .connect()
                    .query_one("SELECT current_setting($1)", &[&name])
                    .unwrap()
                    .get(0);
                shown == value
            },
        );
    }

    /// Runs this cluster's `pg_dump` against it with `args` (options and the database) and
    /// returns what it wrote to its standard output; panics with its messages if it fails.
    /// Restores `dump` (custom format, from `pg_dump`) into database `db` with `pg_restore`,
    /// stopping at the first error.
    pub fn pg_restore(&self, db: &str, dump: &[u8]) {
        use std::io::Write;
        let mut restore = Command::new(self.bin("pg_restore"))
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string()])
            .args(["-U", "postgres", "--exit-on-error", "-d", db])
            .stdin(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("run pg_restore");
        restore.stdin.take().unwrap().write_all(dump).unwrap();
        let out = restore.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "pg_restore failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    pub fn pg_dump(&self, args: &[&str]) -> Vec<u8> {
        let out = Command::new(self.bin("pg_dump"))
            .args([
                "-h",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-U",
                "postgres",
            ])
            .args(args)
            .output()
            .expect("run pg_dump");
        assert!(
            out.status.success(),
            "pg_dump {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        out.stdout
    }
}

/// How long a test waits for something it expects before it gives up: long enough for any
/// machine, however busy. Waits end as soon as what they wait for is seen, so this costs
/// nothing when all is well.
pub const PATIENCE: Duration = Duration::from_secs(120);

/// How often `wait_for` looks again.
const POLL: Duration = Duration::from_millis(25);

/// Waits until `done` returns true, asking it every 25 ms; panics, naming `what`, once `limit`
/// has passed without it. Tests wait with this on something they can observe (a row, a log
/// line, a state, a file), never with a sleep of a guessed length.
pub fn wait_until(what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
    wait_for(what, limit, || done().then_some(()))
}

/// `wait_until` for a value: waits until `ready` returns `Some`, and returns what it holds.
pub fn wait_for<T>(what: &str, limit: Duration, ready: impl FnMut() -> Option<T>) -> T {
    wait_for_or(what, limit, ready, String::new)
}

/// `wait_until`, and if it waits in vain, the panic also says what `report` finds then
/// (e.g. [`Cluster::processes`]).
pub fn wait_until_or(
    what: &str,
    limit: Duration,
    mut done: impl FnMut() -> bool,
    report: impl FnOnce() -> String,
) {
    wait_for_or(what, limit, || done().then_some(()), report)
}

fn wait_for_or<T>(
    what: &str,
    limit: Duration,
    mut ready: impl FnMut() -> Option<T>,
    report: impl FnOnce() -> String,
) -> T {
    let start = Instant::now();
    loop {
        if let Some(value) = ready() {
            return value;
        }
        if start.elapsed() >= limit {
            panic!("waited {limit:?} in vain for {what}\n{}", report());
        }
        std::thread::sleep(POLL);
    }
}

/// Waits until the server `primary` is connected to has a synchronous standby: one that
/// streams and that `pg_stat_replication` reports as `sync`.
pub fn wait_for_synchronous_standby(primary: &mut Client) {
    wait_until("a synchronous standby", PATIENCE, || {
        primary
            .query_opt(
                "SELECT 1 FROM pg_stat_replication WHERE state = 'streaming' AND sync_state = 'sync'",
                &[],
            )
            .unwrap()
            .is_some()
    });
}

/// Runs `work` while another session of `cluster` watches backend `pid` in pg_stat_activity,
/// and returns what `work` returned with the number of times the watcher saw that backend
/// waiting inside the extension (`wait_event_type` `Extension`: for the clock to catch up, or
/// for the mark writer). A backend that never waits there is never seen waiting, however slow
/// the machine; one that does is seen with certainty as soon as its waits add up to more than
/// a few looks of the watcher.
pub fn extension_waits<T>(cluster: &Cluster, pid: i32, work: impl FnOnce() -> T) -> (T, u64) {
    let stop = std::sync::atomic::AtomicBool::new(false);
    let mut c = cluster.connect();
    std::thread::scope(|s| {
        let watcher = s.spawn(|| {
            let mut seen = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let waiting: bool = c
                    .query_one(
                        "SELECT EXISTS (SELECT FROM pg_stat_activity
                                        WHERE pid = $1 AND wait_event_type = 'Extension')",
                        &[&pid],
                    )
                    .unwrap()
                    .get(0);
                seen += waiting as u64;
                std::thread::sleep(Duration::from_millis(1));
            }
            seen
        });
        let out = work();
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        (out, watcher.join().unwrap())
    })
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "--- server log of {} ---\n{}",
                self.dir.display(),
                self.log()
            );
        }
        let _ = Command::new(script())
            .args(["destroy", self.dir.to_str().unwrap()])
            .envs(self.env())
            .output();
        if let Some(f) = &self.faketime_file {
            let _ = std::fs::remove_file(f);
        }
    }
}

/// A started cluster with the extension created in database `postgres`.
pub fn started(name: &str, settings: &[&str]) -> Cluster {
    let cluster = Cluster::new(name, settings);
    cluster.start();
    cluster
        .connect()
        .batch_execute("CREATE EXTENSION snowflake_ext")
        .unwrap();
    cluster
}

/// A started server minting with worker id 4 (its clock settable: faketime), whose table `t`
/// has 20,000 rows keyed by `snowflake_nextval()`; and the largest id there.
pub fn minting_into_t(name: &str) -> (Cluster, i64) {
    let mut cluster = Cluster::new(name, &["snowflake.worker_id=4"]);
    cluster.use_faketime();
    cluster.start();
    let largest = twenty_thousand_ids_into_t(&mut cluster.connect());
    (cluster, largest)
}

/// Creates the extension and a table `t` whose 20,000 rows are keyed by `snowflake_nextval()`;
/// returns the largest id there.
pub fn twenty_thousand_ids_into_t(c: &mut Client) -> i64 {
    c.batch_execute(
        "CREATE EXTENSION snowflake_ext;
         CREATE TABLE t (id bigint PRIMARY KEY DEFAULT snowflake_nextval(), v int);
         INSERT INTO t (v) SELECT g FROM generate_series(1, 20000) g;",
    )
    .unwrap();
    c.scalar("SELECT max(id) FROM t")
}

/// The ids `sql` returns in each of `sessions` sessions on `conninfo`, run at once (each waits
/// until all are connected), all together.
pub fn ids_at_once(conninfo: &str, sessions: usize, sql: &str) -> Vec<i64> {
    let barrier = std::sync::Arc::new(std::sync::Barrier::new(sessions));
    let threads: Vec<_> = (0..sessions)
        .map(|_| {
            let (conninfo, sql, barrier) = (conninfo.to_string(), sql.to_string(), barrier.clone());
            std::thread::spawn(move || {
                let mut c = Client::connect(&conninfo, NoTls).unwrap();
                barrier.wait();
                ids(&mut c, &sql)
            })
        })
        .collect();
    threads
        .into_iter()
        .flat_map(|t| t.join().unwrap())
        .collect()
}

/// New rows of `t`, from three sessions at once, all have ids above `largest`; returns the
/// highest.
pub fn assert_mints_above(cluster: &Cluster, largest: i64) -> i64 {
    let after = ids_at_once(
        &cluster.conninfo("postgres"),
        3,
        "INSERT INTO t (v) SELECT g FROM generate_series(1, 2000) g RETURNING id",
    );
    let lowest = *after.iter().min().unwrap();
    assert!(
        lowest > largest,
        "{lowest} is not above {largest}:\n{}",
        cluster.log()
    );
    *after.iter().max().unwrap()
}

pub fn unix_ms_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// The millisecond (since the Unix epoch) in the time field of a snowflake id.
pub fn unix_ms_of(id: i64) -> i64 {
    (id >> 22) + EPOCH_UNIX_MS
}

/// What an `ERROR` carried: SQLSTATE, message, detail and hint.
#[derive(Debug)]
pub struct ErrorParts {
    pub code: String,
    pub message: String,
    pub detail: Option<String>,
    pub hint: Option<String>,
    /// The source file the server named as the error's LOCATION.
    pub file: Option<String>,
}

/// Runs `sql`, which must fail, and returns the error's parts.
pub fn error_of(client: &mut Client, sql: &str) -> ErrorParts {
    match client.batch_execute(sql) {
        Ok(()) => panic!("expected an error from: {sql}"),
        Err(e) => {
            let db = e
                .as_db_error()
                .unwrap_or_else(|| panic!("not a server error: {e}"));
            ErrorParts {
                code: db.code().code().to_string(),
                message: db.message().to_string(),
                detail: db.detail().map(str::to_string),
                hint: db.hint().map(str::to_string),
                file: db.file().map(str::to_string),
            }
        }
    }
}

/// The ids a query returns in its first column, in order.
pub fn ids(client: &mut Client, sql: &str) -> Vec<i64> {
    client
        .query(sql, &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

pub fn assert_strictly_increasing(ids: &[i64]) {
    for (i, pair) in ids.windows(2).enumerate() {
        assert!(
            pair[0] < pair[1],
            "id #{} ({}) is not below the next ({})",
            i,
            pair[0],
            pair[1]
        );
    }
}

/// The plan of `sql`, one line per plan line, from `EXPLAIN (options)`.
pub fn explain(client: &mut Client, options: &str, sql: &str) -> String {
    let lines: Vec<String> = client
        .query(&format!("EXPLAIN ({options}) {sql}"), &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    lines.join("\n")
}

/// Panics, naming them, if any id of `ids` is there twice.
pub fn assert_no_duplicates(ids: &[i64]) {
    let mut sorted = ids.to_vec();
    sorted.sort_unstable();
    let twice: Vec<i64> = sorted
        .windows(2)
        .filter(|pair| pair[0] == pair[1])
        .map(|pair| pair[0])
        .collect();
    assert!(
        twice.is_empty(),
        "{} of {} ids were handed out twice, among them {:?}",
        twice.len(),
        ids.len(),
        &twice[..twice.len().min(10)]
    );
}

/// The worker id of a snowflake id of the default layout.
pub fn worker_of(id: i64) -> i32 {
    ((id >> 12) & 1023) as i32
}

/// The registry's schema and functions (`sql/registry/registry.sql`).
pub const REGISTRY_SQL: &str = include_str!("../../sql/registry/registry.sql");

/// The lock-delay of the tests' registries: the shortest the registry allows, so that a
/// takeover that must wait costs a test as little as it can.
pub const TEST_LOCK_DELAY_S: u64 = 5;

/// A registry of worker ids: a plain PostgreSQL server, without the extension, with the
/// registry installed by its owner (`postgres`) and the role `fleet` (LOGIN, trust) given what
/// a fleet needs and nothing more; its lock-delay `TEST_LOCK_DELAY_S`.
pub fn registry(name: &str) -> Cluster {
    let registry = Cluster::new(name, &["shared_preload_libraries=", "max_connections=100"]);
    registry.start();
    install_registry(&registry, "postgres");
    registry
}

/// Installs the registry in database `db` of `cluster`, as its documentation says (as the
/// owner, then `grant_fleet`), with the role `fleet` and the tests' lock-delay.
pub fn install_registry(cluster: &Cluster, db: &str) {
    let mut c = cluster.connect_to(db);
    c.batch_execute(REGISTRY_SQL).unwrap();
    c.batch_execute(&format!(
        "DO $$ BEGIN
             IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'fleet') THEN CREATE ROLE fleet LOGIN; END IF;
         END $$;
         SELECT snowflake_registry.grant_fleet('fleet');
         SELECT snowflake_registry.set_limits(interval '{TEST_LOCK_DELAY_S} s');"
    ))
    .unwrap();
}

/// The `snowflake.registry=...` setting that points a server at `registry` as `user`.
pub fn registry_setting(registry: &Cluster, user: &str) -> String {
    format!(
        "snowflake.registry=host=127.0.0.1 port={} dbname=postgres user={user} connect_timeout=5",
        registry.port
    )
}

/// The worker id the server leased, once it has one.
pub fn leased(cluster: &Cluster) -> i32 {
    let mut c = cluster.connect();
    wait_for("a leased worker id", PATIENCE, || {
        c.scalar::<Option<i32>>("SELECT worker_id FROM snowflake_status()")
    })
}

/// The portable edition's single SQL file.
pub const PORTABLE_FILE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/sql/portable/snowflake_portable.sql"
);

/// Runs `sql/portable/snowflake_portable.sql` with psql, as `role`, in `db`, in one
/// transaction and stopping at the first error, the way README tells a database owner to;
/// returns psql's output and whether it succeeded.
pub fn install_portable(cluster: &Cluster, db: &str, role: &str) -> (bool, String) {
    let out = Command::new(cluster.bin("psql"))
        .args(["-h", "127.0.0.1", "-p", &cluster.port.to_string()])
        .args([
            "-U",
            role,
            "-d",
            db,
            "-X",
            "-q",
            "-v",
            "ON_ERROR_STOP=1",
            "-1",
        ])
        .args(["-f", PORTABLE_FILE])
        .output()
        .expect("run psql");
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// A database `db` owned by the ordinary role `app` (created if missing: LOGIN, no other
/// right), with a schema `ids` of its own first on its search_path, into which `app` installs
/// the portable edition. The worker id is left unset.
pub fn portable_database(cluster: &Cluster, db: &str) {
    app_database(cluster, db);
    let (ok, out) = install_portable(cluster, db, "app");
    assert!(ok, "installing the portable edition failed:\n{out}");
}

/// A database `db` owned by the ordinary role `app`, with a schema `ids` of its own first on
/// its search_path.
pub fn app_database(cluster: &Cluster, db: &str) {
    let mut c = cluster.connect();
    c.batch_execute(
        "DO $$ BEGIN
             IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'app') THEN CREATE ROLE app LOGIN; END IF;
         END $$",
    )
    .unwrap();
    c.batch_execute(&format!("CREATE DATABASE {db} OWNER app"))
        .unwrap();
    let mut app = connect_as(cluster, db, "app");
    app.batch_execute(&format!(
        "CREATE SCHEMA ids; ALTER ROLE app IN DATABASE {db} SET search_path = ids, public"
    ))
    .unwrap();
}

/// A session as `role` (trust authentication) in `db`.
pub fn connect_as(cluster: &Cluster, db: &str, role: &str) -> Client {
    let conninfo = cluster
        .conninfo(db)
        .replace("user=postgres", &format!("user={role}"));
    wait_for(
        &format!("a connection as {role} to database {db}"),
        PATIENCE,
        || Client::connect(&conninfo, NoTls).ok(),
    )
}

/// A server that leases its worker id from `registry` (as the role `fleet`), with the
/// extension created; `extra` settings added (a TTL, a range, a worker id set by hand).
pub fn leasing_server(name: &str, registry: &Cluster, extra: &[&str]) -> Cluster {
    let cluster = leasing_cluster(name, registry, extra);
    cluster.start();
    cluster
        .connect()
        .batch_execute("CREATE EXTENSION snowflake_ext")
        .unwrap();
    cluster
}

/// As `leasing_server`, not started (no extension yet).
pub fn leasing_cluster(name: &str, registry: &Cluster, extra: &[&str]) -> Cluster {
    let reg = registry_setting(registry, "fleet");
    let mut settings = vec![reg.as_str(), "max_connections=20"];
    if !extra.iter().any(|s| s.starts_with("snowflake.worker_id=")) {
        settings.push("snowflake.worker_id=auto");
    }
    settings.extend_from_slice(extra);
    Cluster::new(name, &settings)
}

/// `n` ids from the server's configured (leased) worker, in one statement.
pub fn mint(cluster: &Cluster, n: i32) -> Vec<i64> {
    let mut c = cluster.connect();
    ids(
        &mut c,
        &format!("SELECT snowflake_nextval() FROM generate_series(1, {n})"),
    )
}

/// What `snowflake_status()` says of the registry (its standing, server and reason).
pub fn registry_status(c: &mut Client) -> String {
    c.scalar::<Option<String>>("SELECT registry FROM snowflake_status()")
        .unwrap_or_default()
}

/// Waits until the server's lease standing starts with `standing`; returns the whole status.
pub fn wait_for_standing(cluster: &Cluster, standing: &str) -> String {
    wait_for_standing_of(&mut cluster.connect(), standing)
}

/// Waits until the lease standing of the server `c` is connected to starts with `standing`;
/// returns the whole status. On a timeout, says the last one seen.
pub fn wait_for_standing_of(c: &mut Client, standing: &str) -> String {
    let start = Instant::now();
    loop {
        let status = registry_status(c);
        if status.starts_with(standing) {
            return status;
        }
        assert!(
            start.elapsed() < PATIENCE,
            "waited {PATIENCE:?} in vain for the lease standing {standing:?}; the last seen: {status:?}"
        );
        std::thread::sleep(POLL);
    }
}

/// One session minting from a server, batch after batch, until stopped: every id with the
/// moment its batch came back, and how many batches were refused (and the last refusal).
pub struct Minter {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// How many ids it got so far, to wait on.
    got: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    thread: Option<std::thread::JoinHandle<Minted>>,
}

/// What a `Minter` got: every id with the moment its batch came back, and (`sent`, in the
/// same order) the moment that batch was asked for; the ids were minted in between.
#[derive(Default)]
pub struct Minted {
    pub ids: Vec<(Instant, i64)>,
    pub sent: Vec<Instant>,
    pub refused: u64,
    pub last_refusal: Option<String>,
}

impl Minter {
    /// Starts minting `batch` ids per statement from `cluster` (through `conninfo`).
    pub fn start(conninfo: String, batch: i32) -> Minter {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = stop.clone();
        let got = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = got.clone();
        let thread = std::thread::spawn(move || {
            let mut out = Minted::default();
            let mut client: Option<Client> = None;
            let sql = format!("SELECT snowflake_nextval() FROM generate_series(1, {batch})");
            while !flag.load(std::sync::atomic::Ordering::Relaxed) {
                if client.is_none() {
                    client = Client::connect(&conninfo, NoTls).ok();
                    if client.is_none() {
                        std::thread::sleep(POLL);
                        continue;
                    }
                }
                match client.as_mut().unwrap().query(sql.as_str(), &[]) {
                    Ok(rows) => {
                        let at = Instant::now();
                        out.ids
                            .extend(rows.iter().map(|r| (at, r.get::<_, i64>(0))));
                        counted.store(out.ids.len(), std::sync::atomic::Ordering::Relaxed);
                    }
                    Err(e) => {
                        out.refused += 1;
                        out.last_refusal = Some(
                            e.as_db_error()
                                .map(|d| d.message().to_string())
                                .unwrap_or_else(|| e.to_string()),
                        );
                        if e.as_db_error().is_none() {
                            client = None;
                        }
                        // Refused: look again soon, without spinning.
                        std::thread::sleep(POLL);
                    }
                }
            }
            out
        });
        Minter {
            stop,
            got,
            thread: Some(thread),
        }
    }

    /// How many ids it has got so far.
    pub fn got(&self) -> usize {
        self.got.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Stops minting and returns what it got.
    pub fn finish(mut self) -> Minted {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.thread.take().unwrap().join().unwrap()
    }
}

/// Checks what several servers minted with the default layout: no id twice, and per worker id
/// never two servers minting at once. Sorted by id, each worker's ids fall into runs of one
/// server each (a tenure); the last batch of a run must have been asked for before the first
/// batch of the next run, of another server, came back (give or take `slack`): a batch asked
/// for later was minted while the next holder was already minting. (A batch asked for before
/// a server was stopped and finished after it went on counts from when it was asked for.)
/// Returns how many times each worker id changed hands.
pub fn assert_one_holder_at_a_time(
    minted: &[(&str, &Minted)],
    slack: Duration,
) -> std::collections::BTreeMap<i32, usize> {
    let mut all: Vec<i64> = Vec::new();
    // Per worker: (id, asked for, came back, server).
    type Event = (i64, Instant, Instant, usize);
    let mut by_worker: std::collections::BTreeMap<i32, Vec<Event>> = Default::default();
    for (server, (_, m)) in minted.iter().enumerate() {
        for (i, &(received, id)) in m.ids.iter().enumerate() {
            all.push(id);
            let sent = m.sent.get(i).copied().unwrap_or(received);
            by_worker
                .entry(worker_of(id))
                .or_default()
                .push((id, sent, received, server));
        }
    }
    assert_no_duplicates(&all);
    let mut handovers = std::collections::BTreeMap::new();
    for (worker, mut events) in by_worker {
        events.sort_by_key(|e| e.0);
        // Runs of one server, in id order: the first batch back, the last batch asked for.
        let mut runs: Vec<(usize, Instant, Instant)> = Vec::new();
        for &(_, sent, received, server) in &events {
            match runs.last_mut() {
                Some((s, first_back, last_asked)) if *s == server => {
                    *first_back = (*first_back).min(received);
                    *last_asked = (*last_asked).max(sent);
                }
                _ => runs.push((server, received, sent)),
            }
        }
        for pair in runs.windows(2) {
            let (a, _, a_last_asked) = pair[0];
            let (b, b_first_back, _) = pair[1];
            assert!(
                a_last_asked <= b_first_back + slack,
                "worker id {worker}: {} asked for a batch {:?} after {} had its first batch (with \
                 higher ids) back: two servers minted one worker id at once",
                minted[a].0,
                a_last_asked - b_first_back,
                minted[b].0
            );
        }
        handovers.insert(worker, runs.len() - 1);
    }
    handovers
}

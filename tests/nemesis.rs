//! The nemesis test, in the manner of Jepsen: a registry and four servers that lease their
//! worker ids from it, each with a session minting without a pause, for a while under random
//! faults, one at a time (and one of two at once: a lease keeper stopped while the registry
//! is restored on the same timeline and the fleet's role calls with made-up arguments): a server or its
//! lease keeper stopped (SIGSTOP) and let go on, the
//! registry black-holed through a proxy, a server killed with `kill -9` and started again, the
//! registry restored from an older copy of itself, the clock of a server or of the registry
//! stepped, reloads of `snowflake.registry`, `snowflake.worker_range`, `snowflake.lease_ttl`
//! and `snowflake.worker_id`, and the fleet's role doing what it can (writing the registry's
//! tables, claiming a worker id in a holder's name, reporting a made-up epoch). Nobody acts on
//! the registry after a fault (since registry format 3 it never freezes). One checker:
//! no id twice, and never two servers minting one worker id at once; and how long minting
//! stopped after each fault, reported.
//!
//! `NEMESIS_SECS` (default 90) sets how long faults are made, `NEMESIS_SEED` the random seed
//! (printed, to run a failure again). The report is printed and written to
//! `/tmp/snowflake_ext-nemesis-report.md`. It runs on PostgreSQL 16 and later: before 16 the
//! postmaster starts background workers from a signal handler, and libfaketime leaves those
//! processes on the real clock, so a server's lease keeper would not see its clock stepped.

mod common;

use common::*;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A TCP proxy in front of the registry that can black-hole it: while it does, nothing passes
/// either way (connections stay open, as behind a dead link), and new connections get nowhere.
struct Proxy {
    port: u16,
    blackhole: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
}

impl Proxy {
    fn to(upstream: u16) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let blackhole = Arc::new(AtomicBool::new(false));
        let stop = Arc::new(AtomicBool::new(false));
        let (hole, halt) = (blackhole.clone(), stop.clone());
        std::thread::spawn(move || {
            while !halt.load(Relaxed) {
                match listener.accept() {
                    Ok((client, _)) => {
                        let (hole, halt) = (hole.clone(), halt.clone());
                        std::thread::spawn(move || serve(client, upstream, hole, halt));
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        Proxy {
            port,
            blackhole,
            stop,
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop.store(true, Relaxed);
    }
}

fn serve(client: TcpStream, upstream: u16, hole: Arc<AtomicBool>, halt: Arc<AtomicBool>) {
    while hole.load(Relaxed) && !halt.load(Relaxed) {
        std::thread::sleep(Duration::from_millis(5));
    }
    let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)) else {
        return;
    };
    let pump =
        |mut from: TcpStream, mut to: TcpStream, hole: Arc<AtomicBool>, halt: Arc<AtomicBool>| {
            from.set_read_timeout(Some(Duration::from_millis(20)))
                .unwrap();
            let mut buf = [0u8; 16384];
            while !halt.load(Relaxed) {
                if hole.load(Relaxed) {
                    std::thread::sleep(Duration::from_millis(5));
                    continue;
                }
                match from.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => {
                        while hole.load(Relaxed) && !halt.load(Relaxed) {
                            std::thread::sleep(Duration::from_millis(5));
                        }
                        if to.write_all(&buf[..n]).is_err() {
                            break;
                        }
                    }
                    Err(e)
                        if matches!(
                            e.kind(),
                            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                        ) => {}
                    Err(_) => break,
                }
            }
            let _ = to.shutdown(std::net::Shutdown::Both);
        };
    let (c2, s2) = (client.try_clone().unwrap(), server.try_clone().unwrap());
    let (h2, x2) = (hole.clone(), halt.clone());
    let up = std::thread::spawn(move || pump(c2, s2, h2, x2));
    pump(server, client, hole, halt);
    let _ = up.join();
}

/// A small random number generator (xorshift), seeded: a failure can be run again.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn secs(&mut self, from: u64, to: u64) -> Duration {
        Duration::from_millis(from * 1000 + self.below((to - from) * 1000 + 1))
    }
}

const SERVERS: usize = 4;
const RANGE: &str = "10-13";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    PauseServer,
    PauseKeeper,
    Blackhole,
    Crash,
    RestoreRegistry,
    StepServerClock,
    StepRegistryClock,
    ReloadTtl,
    ReloadRange,
    ReloadWorkerId,
    ReloadRegistry,
    FleetWrites,
    FleetClaim,
    /// The fleet's role reports an epoch above every one (registry format 2 froze on it).
    FleetForgedEpoch,
    /// Two at once: a server's lease keeper paused (cut off, minting on within its lease) while
    /// the registry is restored on the same timeline and the fleet's role calls with made-up
    /// arguments (issue 41's 900 duplicates, where those calls raised the epoch).
    PausedKeeperAndForgedRestore,
}

const FAULTS: [Fault; 15] = [
    Fault::PauseServer,
    Fault::PauseKeeper,
    Fault::Blackhole,
    Fault::Crash,
    Fault::RestoreRegistry,
    Fault::StepServerClock,
    Fault::StepRegistryClock,
    Fault::ReloadTtl,
    Fault::ReloadRange,
    Fault::ReloadWorkerId,
    Fault::ReloadRegistry,
    Fault::FleetWrites,
    Fault::FleetClaim,
    Fault::FleetForgedEpoch,
    Fault::PausedKeeperAndForgedRestore,
];

/// What one fault did, for the report.
struct Done {
    fault: Fault,
    server: Option<usize>,
    started: Instant,
    healed: Instant,
    note: String,
}

/// The server's children, then its postmaster.
fn pids_of(cluster: &Cluster) -> Vec<String> {
    let mut pids = cluster.pids();
    pids.rotate_left(1);
    pids.iter().map(i32::to_string).collect()
}

fn keeper_of(cluster: &Cluster) -> Option<String> {
    let out = std::process::Command::new("pgrep")
        .args([
            "-P",
            &cluster.postmaster_pid().to_string(),
            "-f",
            "snowflake_ext lease keeper",
        ])
        .output()
        .unwrap();
    Some(String::from_utf8_lossy(&out.stdout).trim().to_string()).filter(|p| !p.is_empty())
}

fn kill(signal: &str, pids: &[String]) {
    if !pids.is_empty() {
        let _ = std::process::Command::new("kill")
            .arg(signal)
            .args(pids)
            .status();
    }
}

/// Sets `name` on `cluster` by ALTER SYSTEM and reloads (without waiting for sessions).
fn reload(cluster: &Cluster, name: &str, value: &str) {
    if let Ok(mut c) = postgres::Client::connect(&cluster.conninfo("postgres"), postgres::NoTls) {
        let _ = c.batch_execute(&format!(
            "ALTER SYSTEM SET {name} = '{value}'; SELECT pg_reload_conf()"
        ));
    }
}

/// Takes a copy of the registry now (a base backup), for a later restore.
fn copy_registry(registry: &Cluster, n: usize) -> Cluster {
    Cluster::standby_of(registry, &format!("nemesis-registry-copy-{n}"), &[])
}

/// Stops `registry` and starts `copy` in its place; the copy is the registry from then on.
fn restore(registry: &mut Cluster, mut copy: Cluster) {
    registry.stop();
    std::fs::remove_file(copy.dir.join("standby.signal")).unwrap();
    for entry in std::fs::read_dir(&copy.dir).unwrap() {
        let path = entry.unwrap().path();
        if path
            .file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with(".s.PGSQL.")
        {
            std::fs::remove_file(path).unwrap();
        }
    }
    let conf = copy.dir.join("postgresql.conf");
    let text = std::fs::read_to_string(&conf).unwrap();
    std::fs::write(&conf, format!("{text}\nport = {}\n", registry.port)).unwrap();
    copy.port = registry.port;
    copy.use_faketime();
    copy.start();
    std::mem::swap(registry, &mut copy);
}

#[test]
fn under_random_faults_no_id_repeats_and_no_worker_id_is_minted_by_two_servers_at_once() {
    let secs: u64 = std::env::var("NEMESIS_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(90);
    let seed: u64 = std::env::var("NEMESIS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| unix_ms_now() as u64 | 1);
    eprintln!("nemesis: {secs} s of faults, NEMESIS_SEED={seed}");
    let mut rng = Rng(seed);

    let mut registry = Cluster::new(
        "nemesis-registry",
        &["shared_preload_libraries=", "max_connections=100"],
    );
    registry.use_faketime();
    registry.start();
    install_registry(&registry, "postgres");
    registry
        .connect()
        .batch_execute("SELECT snowflake_registry.set_limits(interval '6 s')")
        .unwrap();
    let proxy = Proxy::to(registry.port);
    let through_proxy = format!(
        "host=127.0.0.1 port={} dbname=postgres user=fleet connect_timeout=3",
        proxy.port
    );
    let direct = format!(
        "host=127.0.0.1 port={} dbname=postgres user=fleet connect_timeout=3",
        registry.port
    );
    let setting = format!("snowflake.registry={through_proxy}");
    let servers: Vec<Cluster> = (0..SERVERS)
        .map(|i| {
            let mut s = Cluster::new(
                &format!("nemesis-{i}"),
                &[
                    "snowflake.worker_id=auto",
                    setting.as_str(),
                    &format!("snowflake.worker_range={RANGE}"),
                    "snowflake.lease_ttl=5s",
                    "max_connections=30",
                ],
            );
            s.use_faketime();
            s.start();
            s.connect()
                .batch_execute("CREATE EXTENSION snowflake_ext")
                .unwrap();
            s
        })
        .collect();
    for s in &servers {
        leased(s);
    }
    let minters: Vec<Minter> = servers
        .iter()
        .map(|s| Minter::start(s.conninfo("postgres"), 20))
        .collect();

    let mut copies = 0;
    let mut copy = Some(copy_registry(&registry, copies));
    let mut done: Vec<Done> = Vec::new();
    let end = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < end {
        let fault = FAULTS[rng.below(FAULTS.len() as u64) as usize];
        let victim = rng.below(SERVERS as u64) as usize;
        let s = &servers[victim];
        let started = Instant::now();
        let mut server = Some(victim);
        let mut note = String::new();
        match fault {
            Fault::PauseServer => {
                let pids = pids_of(s);
                kill("-STOP", &pids);
                let d = rng.secs(2, 12);
                std::thread::sleep(d);
                kill("-CONT", &pids);
                note = format!("{d:.1?}");
            }
            Fault::PauseKeeper => {
                if let Some(pid) = keeper_of(s) {
                    kill("-STOP", std::slice::from_ref(&pid));
                    let d = rng.secs(2, 12);
                    std::thread::sleep(d);
                    kill("-CONT", &[pid]);
                    note = format!("{d:.1?}");
                }
            }
            Fault::Blackhole => {
                server = None;
                proxy.blackhole.store(true, Relaxed);
                let d = rng.secs(2, 12);
                std::thread::sleep(d);
                proxy.blackhole.store(false, Relaxed);
                note = format!("{d:.1?}");
            }
            Fault::Crash => {
                s.kill_postmaster();
                std::thread::sleep(rng.secs(0, 3));
                s.start();
            }
            Fault::RestoreRegistry => {
                server = None;
                // Put back the copy taken a while ago; nobody does anything on the registry.
                restore(&mut registry, copy.take().unwrap());
                note = "restored, nothing done on it".into();
                copies += 1;
                copy = Some(copy_registry(&registry, copies));
            }
            Fault::StepServerClock => {
                let by = rng.below(60) as i64 - 30;
                s.set_clock_offset(by);
                std::thread::sleep(rng.secs(3, 10));
                s.set_clock_offset(0);
                note = format!("{by:+} s");
            }
            Fault::StepRegistryClock => {
                server = None;
                let by = rng.below(60) as i64 - 30;
                registry.set_clock_offset(by);
                std::thread::sleep(rng.secs(3, 10));
                registry.set_clock_offset(0);
                note = format!("{by:+} s");
            }
            Fault::ReloadTtl => {
                let ttl = ["5s", "6s"][rng.below(2) as usize];
                reload(s, "snowflake.lease_ttl", ttl);
                note = ttl.into();
            }
            Fault::ReloadRange => {
                let range = ["10-12", "11-13", RANGE][rng.below(3) as usize];
                reload(s, "snowflake.worker_range", range);
                std::thread::sleep(rng.secs(3, 10));
                reload(s, "snowflake.worker_range", RANGE);
                note = range.into();
            }
            Fault::ReloadWorkerId => {
                let w = (10 + rng.below(4)).to_string();
                reload(s, "snowflake.worker_id", &w);
                std::thread::sleep(rng.secs(3, 10));
                reload(s, "snowflake.worker_id", "auto");
                note = format!("{w}, then auto");
            }
            Fault::ReloadRegistry => {
                // The same registry, through another string.
                let (to, back) = if rng.below(2) == 0 {
                    (&direct, &through_proxy)
                } else {
                    (&through_proxy, &direct)
                };
                reload(s, "snowflake.registry", to);
                std::thread::sleep(rng.secs(3, 10));
                reload(s, "snowflake.registry", back);
                reload(s, "snowflake.registry", &through_proxy);
                note = "direct and back".into();
            }
            Fault::FleetWrites => {
                server = None;
                let mut fleet = connect_as(&registry, "postgres", "fleet");
                for sql in [
                    "UPDATE snowflake_registry.leases SET host = 'elsewhere', last_mark = NULL",
                    "DELETE FROM snowflake_registry.leases",
                    "SELECT snowflake_registry.release_worker(10)",
                ] {
                    assert!(
                        fleet.batch_execute(sql).is_err(),
                        "the fleet's role could: {sql}"
                    );
                }
            }
            Fault::FleetClaim => {
                // A claim in a holder's name: the holder renews meanwhile and keeps its id.
                let mut fleet = connect_as(&registry, "postgres", "fleet");
                let row = fleet
                    .query_opt(
                        "SELECT system_identifier, host, port, data_directory, worker
                           FROM snowflake_registry.lease_list WHERE state = 'held' AND port = $1",
                        &[&(s.port as i32)],
                    )
                    .unwrap();
                if let Some(row) = row {
                    let (sysid, host, port, dir, w): (String, String, i32, String, i32) =
                        (row.get(0), row.get(1), row.get(2), row.get(3), row.get(4));
                    let claim = fleet.query_one(
                        "SELECT outcome, token FROM snowflake_registry.claim($1, $2, $3, $4, 'forged', 'elsewhere', 'f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0', 1,
                                 $5, $5, true, 5000, (extract(epoch FROM clock_timestamp()) * 1000)::bigint, NULL, NULL, NULL, NULL)",
                        &[&sysid, &host, &port, &dir, &w],
                    );
                    let claimed = claim
                        .ok()
                        .map(|r| (r.get::<_, String>(0), r.get::<_, Option<i64>>(1)));
                    // Confirms once the holder has renewed over the forged claim (which clears
                    // it), as a claimer would after its lock-delay: the confirmation fails. A
                    // holder cut off by another fault may not renew: then it confirms after
                    // the lock-delay anyway.
                    let mut r = registry.connect();
                    let cleared = Instant::now() + Duration::from_secs(12);
                    while Instant::now() < cleared
                        && !r.scalar::<bool>(&format!(
                            "SELECT pending_key IS NULL FROM snowflake_registry.leases WHERE worker = {w}"
                        ))
                    {
                        std::thread::sleep(Duration::from_millis(50));
                    }
                    let confirmed = claimed.as_ref().and_then(|(_, token)| *token).and_then(|token| {
                        fleet
                            .query_one(
                                "SELECT outcome FROM snowflake_registry.confirm($1, $2, $3, $4, 'forged', 'elsewhere', 'f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0', 1, $5,
                                         $6, 5000, (extract(epoch FROM clock_timestamp()) * 1000)::bigint, NULL, NULL)",
                                &[&sysid, &host, &port, &dir, &w, &token],
                            )
                            .ok()
                            .map(|r| r.get::<_, String>(0))
                    });
                    note = format!("claim {:?}, confirm {confirmed:?}", claimed.map(|c| c.0));
                }
            }
            Fault::PausedKeeperAndForgedRestore => {
                let keeper = keeper_of(s);
                if let Some(pid) = &keeper {
                    kill("-STOP", std::slice::from_ref(pid));
                }
                restore(&mut registry, copy.take().unwrap());
                let mut fleet = connect_as(&registry, "postgres", "fleet");
                let mut calls = 0;
                // (as in issue 41: 62 calls raised the epoch past every server's then)
                while calls < 62
                    && fleet
                        .query_one(
                            "SELECT (snowflake_registry.renew('x', 'x', 1, 'x', 'x', repeat('0', 32), 1, 10, 0, 0, 0,
                                                              5000, 0, NULL, 9000000000000)).outcome",
                            &[],
                        )
                        .is_ok()
                {
                    calls += 1;
                }
                let d = rng.secs(2, 8);
                std::thread::sleep(d);
                if let Some(pid) = keeper {
                    kill("-CONT", &[pid]);
                }
                copies += 1;
                copy = Some(copy_registry(&registry, copies));
                note = format!("keeper paused {d:.1?}; restored; {calls} forged calls");
            }
            Fault::FleetForgedEpoch => {
                server = None;
                let mut fleet = connect_as(&registry, "postgres", "fleet");
                let outcome: Option<String> = fleet
                    .query_one(
                        "SELECT outcome FROM snowflake_registry.renew('x', 'x', 0, 'x', 'x', 'x', 1, 10, 0, 0, 0, 5000, 0,
                                 (SELECT registry_id FROM snowflake_registry.identity()), 9000000000000)",
                        &[],
                    )
                    .ok()
                    .map(|r| r.get(0));
                note = format!("{outcome:?}");
            }
        }
        done.push(Done {
            fault,
            server,
            started,
            healed: Instant::now(),
            note,
        });
        // A moment between faults.
        std::thread::sleep(rng.secs(1, 4));
    }

    // Everything healed: every server mints again.
    proxy.blackhole.store(false, Relaxed);
    registry.set_clock_offset(0);
    for s in &servers {
        s.set_clock_offset(0);
        reload(s, "snowflake.worker_id", "auto");
        reload(s, "snowflake.worker_range", RANGE);
        reload(s, "snowflake.registry", &through_proxy);
        // No fault here copies a server: one that took itself for a copy (and stopped for
        // good) would be a false alarm, which costs its operator a restart.
        let status = registry_status(&mut s.connect());
        assert!(
            !status.starts_with("duplicate"),
            "server {} took itself for a copy: {status}",
            s.port
        );
    }
    let healed = Instant::now();
    for s in &servers {
        let mut c = s.connect();
        wait_until(
            "every server to mint again",
            Duration::from_secs(180),
            || c.query_one("SELECT snowflake_nextval()", &[]).is_ok(),
        );
    }
    let back_after = healed.elapsed();
    let minted: Vec<Minted> = minters.into_iter().map(Minter::finish).collect();
    let named: Vec<(String, &Minted)> = minted
        .iter()
        .enumerate()
        .map(|(i, m)| (format!("server {i}"), m))
        .collect();
    let refs: Vec<(&str, &Minted)> = named.iter().map(|(n, m)| (n.as_str(), *m)).collect();
    let handovers = assert_one_holder_at_a_time(&refs, Duration::from_millis(50));

    // The report: per fault, the longest pause in minting on the server it hit (or on any
    // server, for faults of the registry) from the fault to the next one.
    let total: usize = minted.iter().map(|m| m.ids.len()).sum();
    let mut report = format!(
        "# Nemesis run\n\n{secs} s of faults, seed {seed}: {} faults, {total} ids minted by {SERVERS} servers, \
         0 duplicates, no worker id minted by two servers at once; worker ids changed hands {} times; \
         every server minted again {:.1?} after the last fault was healed.\n\n\
         | fault | on | what | longest pause in minting (after it began) |\n|---|---|---|---|\n",
        done.len(),
        handovers.values().sum::<usize>(),
        back_after
    );
    for (i, d) in done.iter().enumerate() {
        let until = done
            .get(i + 1)
            .map_or(d.healed + Duration::from_secs(5), |n| n.started);
        let window_pause = |m: &Minted| -> Duration {
            let mut last = d.started;
            let mut longest = Duration::ZERO;
            for &(at, _) in m
                .ids
                .iter()
                .filter(|(at, _)| *at >= d.started && *at <= until)
            {
                longest = longest.max(at.saturating_duration_since(last));
                last = at;
            }
            longest.max(until.saturating_duration_since(last))
        };
        let pause = match d.server {
            Some(v) => window_pause(&minted[v]),
            None => minted.iter().map(window_pause).max().unwrap_or_default(),
        };
        report.push_str(&format!(
            "| {:?} | {} | {} | {:.1?} |\n",
            d.fault,
            d.server
                .map_or("registry".to_string(), |v| format!("server {v}")),
            d.note,
            pause
        ));
    }
    eprintln!("{report}");
    let _ = std::fs::write("/tmp/snowflake_ext-nemesis-report.md", &report);
    for (i, m) in minted.iter().enumerate() {
        assert!(!m.ids.is_empty(), "server {i} never minted");
    }
    drop(copy);
}

//! The registry's SQL against the lease model (issue 41: "the registry's SQL and the lease
//! keeper transcribe the model, and nothing else"). A differential test: random sequences of
//! calls, crashes, time steps, copies and restores drive the real registry
//! (`sql/registry/registry.sql`, on a plain PostgreSQL without the extension) and the model's
//! registry (`snowflake_core::lease_model::Registry`) alike, and every answer is compared.
//!
//! # How the two are driven
//!
//! * **Servers** (2 or 3, plus the fleet's role) are the model's own [`Keeper`]s: each step lets
//!   one send one of the requests its rules allow (`Keeper::choices`: claims, with the fence of
//!   its live lease or its durable record as a continuation; confirmations once its wait is
//!   over; renewals; releases), as the real keeper sends them: its identity (system identifier,
//!   host, port, data directory), its secret, its boot (a crash is a new boot; the durable
//!   record stays), its request number (a request whose answer was lost is asked again under
//!   it: a *replay*). The answer reaches the keeper, or is lost. The fleet's role calls with
//!   made-up arguments: posing as a holder or claimer without its secret, or as itself, with
//!   any fence or token.
//! * **Time**: the registry's clock is libfaketime's, *frozen* at the instant the test sets
//!   (never a sleep): model time `t` is the registry's `t` seconds after the sequence's start,
//!   and every caller's clock reads the same (no skew), in every incarnation: the registry's
//!   clock does not step at a restore, as the lease model's checker has it do. (Faketime could
//!   set it anywhere; not done: the one real server's clock would then be off for every
//!   caller at once, and the sequences' claims and renewals mostly answered `skew` by both.)
//!   A keeper's renewal says whether its lease had run out on its clock (`p_ran_out`), as the
//!   model's `Request::Renew` has it. The model's `Config` matches the
//!   registry's limits: `ttl` 5 (the lease asked for, 5000 ms), `lock_delay` 5
//!   (`set_limits('5 s', '1 s')`), `max_skew` 1, `reach` 4 (the keeper's 4 s): `W` = 11, which
//!   is the registry's `wait_ms` plus what the keeper adds (`takeover_wait_ms`).
//! * **Copies and restores**: a copy of the registry is a `pg_basebackup` of it, running (the
//!   model keeps a clone of its registry); a restore stops the registry, puts the copy in its
//!   data directory and starts it (a new postmaster start: a new incarnation), and the model
//!   does `Registry::restore(copy, fresh incarnation)`. Each sequence starts with the registry
//!   installed anew (`registry.sql` into an empty schema, every worker id's row made, as the
//!   first claim of a range makes them): the model's `Registry::new`.
//! * **Fences and tokens**: the model's holder picks each new fence and token (fresh numbers);
//!   the real registry counts fences per row and draws tokens at random, and knows a request by
//!   its number (the model's token or new fence). The test keeps the map from each model fence
//!   and token to the real one, sends the real one, and checks that the map stays a function
//!   (a replay answered with the same fence). A fence the registry never gave (the fleet's
//!   made-up ones) is sent as a number it never gives.
//! * **Caps**: a claim or a confirmation records no cap in the SQL (the keeper records its
//!   first cap with a renewal before it uses a lease), so the model's claims carry cap 0; a
//!   renewal's and a release's cap are sent as they are, and a grant's predecessor cap is
//!   compared with the answer's `last_mark` (none: 0).
//!
//! # What the SQL does that the model leaves out, and how the test treats it
//!
//! The model's module doc lists the SQL's further refusals; each only refuses more. The test
//! keeps sequences out of some, and accepts the others only as named here, each counted and
//! printed; any other difference fails with the seed and both traces.
//!
//! * Never triggered: `ttl` (every lease asks for the lock-delay), `skew` (every caller sends
//!   the registry's own time; the model has the SQL's skew checks, and would answer it alike),
//!   `moved` (no export), `superseded` (every caller on timeline 1).
//! * Nothing freezes (registry format 3, `Rules::NEW`): neither side has an epoch to go by or
//!   a `recover()`. A holder bringing a fence the registry never gave (a restore lost the
//!   renewal that gave it) is answered `lost` by both, and compared as any answer. The SQL
//!   still takes the epoch a server saw, and reads it no more: in a quarter of the sequences
//!   the servers send one above the registry's (as servers that saw a later history of a
//!   registry of format 2 would), and now and then the fleet's role calls with a made-up one,
//!   which the SQL must answer as any other call of someone posing as nobody (`lost`, writing
//!   nothing), where format 2 froze.
//! * A row is a server's only with its secret: someone posing as a server without it, who
//!   claims the server's row (held, or waited on by it), or the server itself claiming a row
//!   waited on by such an impostor, is answered `held` by the SQL, where the model (which
//!   tells a server's own row by its identity alone) records the claim and answers `wait`.
//!   Accepted only in exactly that case, as the request lost on its way (the model's state
//!   unchanged: the SQL wrote nothing).
//! * A release is the registry's word that nobody holds the worker id (D) in the SQL only if
//!   the holder's last grant or renewal was the row's last write (`held_proof`); a claim that
//!   waited on the row since (its lease had run out here) is such a write, and makes D wait
//!   out the lock-delay where the model hands the worker id over at once. Accepted only when
//!   such a claim was recorded after the holder's last grant or renewal: the model then
//!   answers the claim as if the release had been recorded in another incarnation.
//! * Where the model answers a confirmation `lost` and the claimer is to claim again, the SQL
//!   claims again for it at once (a confirmation asked again after its grant's lease ran out
//!   unused; a claim recorded in another incarnation): `wait` under a new token. Accepted as
//!   the model's `lost` followed by the claimer's claim of the same worker id, which the model
//!   must answer `wait`. Where a claim of this very start waits on the row under another
//!   token (the answer that named it lost), the SQL names that token and writes nothing:
//!   accepted where the model's row has that claim, the keeper told to wait under it.
//! * The fleet's role confirming, under the fence of a grant a claim made it at once, with no
//!   claim of its waiting: the model takes it for that grant asked again (`granted`), the SQL,
//!   which knows a confirmation asked again by its own request number, answers `lost` and
//!   writes nothing. Accepted only for the fleet's role's calls (a keeper confirms only a
//!   claim that waited), the model's state left as it was.
//! * A release names, in the model, the incarnation that answered its caller last, and the
//!   fleet's role may name any; the SQL reads it from the row (`held_proof`: the incarnation
//!   of the holder's last grant or renewal, if nothing wrote the row since). The model is the
//!   more permissive (a release it counts for D may be none in the SQL; the model's checker
//!   finds that safe, the fleet's role never minting); the fleet's made-up releases here name
//!   what the SQL reads, so that the two answer alike.
//! * A replayed claim or confirmation is answered with the row's current `last_mark`, the
//!   model with the cap the row had at the grant: a higher floor, accepted.
//! * `duplicate` (a copy of a server: two starts of one identity, one secret) ends the
//!   sequence, as it stops both starts for good in the real thing; accepted only where the
//!   model refuses too.
//!
//! `REGISTRY_MODEL_SEED` replays one sequence (the seed a failure prints);
//! `REGISTRY_MODEL_RUNS` and `REGISTRY_MODEL_STEPS` size the run (30 × 40 by default).

mod common;

use common::*;
use postgres::types::ToSql;
use postgres::Client;
use snowflake_core::lease_model::{
    Answer, Caller, Config, Fence, Keeper, Phase, Principal, Registry, Request, Rules, ServerId,
    Time, WorkerId, NO_INCARNATION,
};
use std::collections::HashMap;
use std::fmt::Write as _;
use std::process::Command;

const WORKERS: u8 = 2;
/// One model time unit, in the registry's milliseconds.
const UNIT_MS: i64 = 1000;
/// The fleet's role as itself, and the secret it makes up when it poses as a server.
const FLEET: ServerId = 200;
const FLEET_SECRET: u16 = 999;
const FORGED_SECRET: u16 = 0;
/// A fence or token the registry never gave: this plus the model's number.
const MADE_UP: i64 = 1 << 40;
/// What servers add to the epoch they saw, in sequences with epochs (see the module doc).
const LATER_EPOCH: i64 = 1_000_000;
/// Request numbers of confirmations: this plus the model's token (claims and renewals are
/// known by the model's token or new fence itself).
const CONFIRM_REQUEST: i64 = 1 << 20;
/// Seeds of sequences that once showed a difference (each fixed), replayed first in every run.
/// (Found with registry format 2's freeze and recover() among the steps: where a sequence
/// froze, its seed no longer replays the same steps.)
const FINDINGS: &[u64] = &[
    // After a recovery (as after a restore), a claim of a worker id given back in a history the
    // registry may have lost waits; its reply lost, the same claim asked again was granted at
    // once: the waiting claim had written the row's proof anew, which the SQL then took for
    // the release's (D). Fixed in registry.sql: D needs no claim pending on the row.
    1_795_943_243_293_001,
    // A claim granted at once, its reply lost, asked again under the same token once that
    // lease had run out: it waits, under that token, which is also the row's fence. The model
    // took its confirmation for the grant's asked again, and answered `lost` (the lease ran
    // out); the SQL, which knows a confirmation by its own request number, granted it. Fixed
    // in the model: a confirmation is a replay only if no claim waits under its token.
    1_795_943_300_115_014,
    // A confirmation granted, its answer lost, asked again once that lease had run out unused
    // and another server's claim waited on the worker id: the SQL claimed it again for the
    // confirming server at once, overtaking the waiting claim, where the model (one claim at a
    // time, as claim() has it) answers `lost` and the server's claim `held`. Only liveness was
    // at stake. Fixed in registry.sql: that confirmation is lost while the other claim waits.
    1_795_955_481_778_015,
    // The fleet's role confirming under the fence of a grant a claim made it at once: the model
    // took it for that grant asked again (granted), the SQL answered lost. Accepted as a
    // difference of the fleet's role's calls only (see the module doc); found in CI.
    1_795_958_228_853_006,
    // A holder whose lease ran out on its own clock renewing after a restore: `lost` in the
    // SQL, renewed by a model without that rule (found in CI, accepted until the model had it:
    // `Rules::ran_out_needs_own_write`); both answer `lost` now.
    1_795_958_940_912_000,
];

fn config() -> Config {
    Config {
        ttl: 5,
        margin: 1,
        lock_delay: 5,
        max_skew: 1,
        reach: 4,
        rules: Rules::NEW,
    }
}

/// The keeper's wait: the registry's `wait_ms`, twice the skew and the reach (model units).
fn keeper_wait(wait_ms: i64) -> i64 {
    let cfg = config();
    wait_ms / UNIT_MS + 2 * cfg.max_skew as i64 + cfg.reach as i64
}

/// xorshift64*.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
}

fn name(server: ServerId) -> String {
    match server {
        FLEET => "fleet".into(),
        s => format!("server {}", (b'a' + s) as char),
    }
}

fn secret_text(secret: u16) -> String {
    format!("secret-{secret:0>40}")
}

/// The identity a caller sends: system identifier, host, port, data directory.
fn identity(server: ServerId) -> (String, String, String, String) {
    (
        format!("7{:018}", server as u64 + 1),
        format!("host-{server}"),
        (5432 + server as i32).to_string(),
        format!("/srv/{server}"),
    )
}

/// Whether `caller` is `p` (its identity and its secret).
fn is(p: Principal, caller: &Caller) -> bool {
    p.server == caller.server && p.secret == caller.secret
}

/// A caller as the model knows it and as it describes itself.
fn who(c: &Caller) -> String {
    if c.server == FLEET {
        "the fleet's role".to_string()
    } else if c.secret == FORGED_SECRET {
        format!("the fleet's role posing as {}", name(c.server))
    } else {
        format!("{} (boot {})", name(c.server), c.boot)
    }
}

fn show_req(r: &Request) -> String {
    match *r {
        Request::Claim {
            worker,
            token,
            continuation,
            ..
        } => format!(
            "claim(worker {worker}, token {token}{})",
            continuation.map_or(String::new(), |f| format!(", fence {f}"))
        ),
        Request::Confirm { worker, token, .. } => {
            format!("confirm(worker {worker}, token {token})")
        }
        Request::Renew {
            worker,
            prev,
            new,
            cap,
            ran_out,
            ..
        } => format!(
            "renew(worker {worker}, fence {prev} -> {new}, cap {cap}{})",
            if ran_out { ", ran out" } else { "" }
        ),
        Request::Release {
            worker,
            fence,
            cap,
            incarnation,
        } => format!(
            "release(worker {worker}, fence {fence}, final cap {cap}, incarnation {})",
            if incarnation == NO_INCARNATION {
                "none".to_string()
            } else {
                incarnation.to_string()
            }
        ),
    }
}

fn show_answer(a: &Answer) -> String {
    match *a {
        Answer::Granted {
            fence,
            predecessor_cap,
        } => format!("granted, fence {fence}, above {predecessor_cap}"),
        Answer::Wait { token, wait } => format!("wait {wait} under token {token}"),
        Answer::Renewed { fence } => format!("renewed, fence {fence}"),
        Answer::Released => "released".into(),
        Answer::Held => "held".into(),
        Answer::Lost => "lost".into(),
        Answer::Frozen => "frozen".into(),
        Answer::Skew => "skew".into(),
    }
}

/// One answer of the real registry (the fields the keeper reads).
#[derive(Debug, Clone)]
struct RealAnswer {
    outcome: String,
    fence: Option<i64>,
    token: Option<i64>,
    wait_ms: Option<i64>,
    last_mark: Option<i64>,
    epoch: Option<i64>,
    reason: String,
}

impl RealAnswer {
    fn show(&self) -> String {
        let mut s = self.outcome.clone();
        if let Some(f) = self.fence {
            let _ = write!(s, ", fence {f}");
        }
        if let Some(t) = self.token {
            let _ = write!(s, ", token {t}");
        }
        if let Some(w) = self.wait_ms {
            let _ = write!(s, ", wait_ms {w}");
        }
        if let Some(m) = self.last_mark {
            let _ = write!(s, ", last_mark {m}");
        }
        if !self.reason.is_empty() {
            let _ = write!(s, " ({})", self.reason);
        }
        s
    }
}

/// Unix seconds as libfaketime's absolute (frozen) time, UTC.
fn faketime_spec(unix_s: i64) -> String {
    let days = unix_s.div_euclid(86_400);
    let secs = unix_s.rem_euclid(86_400);
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}",
        secs / 3600,
        secs / 60 % 60,
        secs % 60
    )
}

/// The real registry: a plain PostgreSQL (no extension), its clock frozen where the test says.
struct Real {
    cluster: Cluster,
    fleet: Client,
    id: String,
    /// The faketime instant (Unix s) and the registry's clock (Unix ms) at model time 0.
    zero_s: i64,
    zero_ms: i64,
    copy: Option<Scratch>,
    copies: usize,
}

impl Real {
    fn start() -> Real {
        let mut cluster = Cluster::new(
            "registry-model",
            &[
                "shared_preload_libraries=",
                "max_connections=20",
                // Its clock stands still between steps: nothing is to run on a timer.
                "autovacuum=off",
            ],
        );
        cluster.use_faketime();
        cluster.start();
        install_registry(&cluster, "postgres");
        let fleet = connect_as(&cluster, "postgres", "fleet");
        let mut real = Real {
            cluster,
            fleet,
            id: String::new(),
            zero_s: 0,
            zero_ms: 0,
            copy: None,
            copies: 0,
        };
        real.reset();
        real
    }

    /// The registry installed anew, its clock at model time 0 (after every earlier instant).
    fn reset(&mut self) {
        self.copy = None;
        let now_s = unix_ms_now() / 1000;
        self.zero_s = now_s.max(self.zero_s + 1000);
        self.cluster.set_faketime(&faketime_spec(self.zero_s));
        let mut admin = self.cluster.connect();
        admin
            .batch_execute("DROP SCHEMA IF EXISTS snowflake_registry CASCADE")
            .unwrap();
        install_registry(&self.cluster, "postgres");
        // Every worker id's row from the start, as a claim of the whole range makes them (the
        // model's `Registry::new`).
        admin
            .batch_execute(&format!(
                "SELECT snowflake_registry.set_limits(interval '5 s', interval '1 s');
                 INSERT INTO snowflake_registry.leases (worker, proof)
                 SELECT g, snowflake_registry.proof() FROM generate_series(0, {}) g",
                WORKERS - 1
            ))
            .unwrap();
        self.zero_ms = admin.scalar("SELECT (extract(epoch FROM clock_timestamp()) * 1000)::int8");
        self.id = admin.scalar("SELECT registry_id::text FROM snowflake_registry.config");
        self.fleet = connect_as(&self.cluster, "postgres", "fleet");
    }

    fn set_time(&self, t: Time) {
        self.cluster
            .set_faketime(&faketime_spec(self.zero_s + t as i64 * UNIT_MS / 1000));
    }

    fn clock_ms(&self, t: Time) -> i64 {
        self.zero_ms + t as i64 * UNIT_MS
    }

    /// A base backup of the running registry (no restart: the same incarnation goes on).
    fn take_copy(&mut self) {
        self.copies += 1;
        let copy = Scratch::dir_for_postgres(&format!("registry-model-copy-{}", self.copies));
        let port = self.cluster.port.to_string();
        let dir = copy.to_str().unwrap().to_string();
        run_as_postgres(
            std::path::Path::new("/"),
            &pg_bin("pg_basebackup"),
            &[
                "-h",
                "127.0.0.1",
                "-p",
                &port,
                "-U",
                "postgres",
                "-D",
                &dir,
                "-X",
                "stream",
                "-c",
                "fast",
                "--no-sync",
            ],
        );
        self.copy = Some(copy);
    }

    /// The registry stopped, its data directory replaced by the copy, started again (its
    /// postmaster's start time, real, makes it a new incarnation), its clock back at `t`.
    fn restore(&mut self, t: Time) {
        let copy = self.copy.as_ref().expect("a copy first");
        self.cluster.stop();
        std::fs::remove_dir_all(&self.cluster.dir).unwrap();
        let out = Command::new("cp")
            .args([
                "-a",
                copy.to_str().unwrap(),
                self.cluster.dir.to_str().unwrap(),
            ])
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&self.cluster.dir, std::fs::Permissions::from_mode(0o700))
            .unwrap();
        // The copy has the socket's lock file of the registry's run (its socket directory is
        // its data directory): the start would take it for a running server's.
        for entry in std::fs::read_dir(&self.cluster.dir).unwrap() {
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
        // Started on the real clock, so that each start's time differs; then frozen again.
        self.cluster.set_faketime("+0s");
        self.cluster.start();
        self.set_time(t);
        self.fleet = connect_as(&self.cluster, "postgres", "fleet");
    }

    fn call(&mut self, function: &str, casts: &[&str], params: &[Option<String>]) -> RealAnswer {
        let args: Vec<String> = casts
            .iter()
            .enumerate()
            .map(|(i, t)| format!("${}::text::{t}", i + 1))
            .collect();
        let sql = format!(
            "SELECT a.outcome, a.fence, a.token, a.wait_ms, a.last_mark, a.epoch, a.reason
               FROM snowflake_registry.{function}({}) a",
            args.join(", ")
        );
        let refs: Vec<&(dyn ToSql + Sync)> =
            params.iter().map(|p| p as &(dyn ToSql + Sync)).collect();
        let row = match self.fleet.query_one(&sql, &refs) {
            Ok(row) => row,
            Err(e) => panic!("{function}({params:?}): {e}"),
        };
        RealAnswer {
            outcome: row.get(0),
            fence: row.get(1),
            token: row.get(2),
            wait_ms: row.get(3),
            last_mark: row.get(4),
            epoch: row.get(5),
            reason: row.get::<_, Option<String>>(6).unwrap_or_default(),
        }
    }
}

/// What a difference the test accepts is (see the module doc), for the summary.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Allowed {
    SecretOwnsRow,
    NarrowerRelease,
    ClaimedAgain,
    ReplayMark,
    Duplicate,
    ConfirmOfAGrant,
}

/// How one request's two answers compared.
struct Judged {
    /// What the keeper is told (the model's answer, or its equivalent).
    answer: Answer,
    /// The request the keeper is told it answered (the claim, when the SQL claimed again).
    request: Request,
    allowed: Option<Allowed>,
    /// The sequence ends (a copy of a server found: both stop in the real thing).
    end: bool,
}

#[derive(Default)]
struct Totals {
    sequences: usize,
    steps: usize,
    compared: usize,
    copies: usize,
    restores: usize,
    made_up_epochs: usize,
    /// Renewals by the holder with a fence the registry lost (above the row's).
    fences_lost: usize,
    /// Keepers' renewals of a lease run out on their clock, and of those the ones the model's
    /// rule for them answered `lost` (`Rules::ran_out_needs_own_write`).
    ran_out_renewals: usize,
    ran_out_refused: usize,
    crashes: usize,
    lost_replies: usize,
    fleet_calls: usize,
    ended_by_duplicate: usize,
    allowed: HashMap<Allowed, usize>,
    answers: HashMap<&'static str, usize>,
}

struct Sequence<'a> {
    seed: u64,
    rng: Rng,
    cfg: Config,
    real: &'a mut Real,
    model: Registry,
    copy: Option<Registry>,
    keepers: Vec<Keeper>,
    /// Each server's highest epoch seen (sent, raised, only in sequences with epochs).
    seen_epoch: Vec<i64>,
    epochs: bool,
    t: Time,
    fresh: Fence,
    incarnations: u16,
    /// Model fence or token (per worker id) to the real one.
    fences: HashMap<(WorkerId, Fence), i64>,
    tokens: HashMap<(WorkerId, Fence), i64>,
    /// A claim was recorded on the row since its holder's last grant or renewal.
    claimed_since_held: Vec<bool>,
    /// The incarnation of the row holder's last grant or renewal (what the SQL reads from the
    /// row's `held_proof` at a release).
    held_in: Vec<u16>,
    trace: String,
    totals: &'a mut Totals,
}

impl Sequence<'_> {
    fn log(&mut self, line: String) {
        let _ = writeln!(self.trace, "t={:<3} {line}", self.t);
    }

    fn fail(&self, why: String) -> ! {
        panic!(
            "the registry's SQL and the lease model differ (REGISTRY_MODEL_SEED={} replays it): {why}\n\
             --- trace (model answer | SQL answer) ---\n{}",
            self.seed, self.trace
        );
    }

    fn fresh(&mut self) -> Fence {
        self.fresh += 1;
        self.fresh
    }

    fn caller(&self, s: usize) -> Caller {
        Caller {
            server: s as ServerId,
            secret: 100 + s as u16,
            boot: self.keepers[s].boot,
            seen_epoch: 0,
        }
    }

    fn real_fence(&self, worker: WorkerId, f: Fence) -> i64 {
        *self
            .fences
            .get(&(worker, f))
            .unwrap_or(&(MADE_UP + f as i64))
    }

    fn real_token(&self, worker: WorkerId, f: Fence) -> i64 {
        *self
            .tokens
            .get(&(worker, f))
            .unwrap_or(&(MADE_UP + f as i64))
    }

    /// Sends `req` as `caller` to the real registry, as the keeper does.
    fn send_real(&mut self, caller: &Caller, req: &Request) -> RealAnswer {
        let (sysid, host, port, dir) = identity(caller.server);
        let boot = Some(format!("boot-{}", caller.boot));
        let host_run = Some(format!("run-{}", caller.server));
        let secret = Some(secret_text(caller.secret));
        let ttl = Some((self.cfg.ttl as i64 * UNIT_MS).to_string());
        // The caller's clock as it sent the request (the registry's: see the module doc).
        let clock = match *req {
            Request::Claim { clock, .. }
            | Request::Confirm { clock, .. }
            | Request::Renew { clock, .. } => clock,
            Request::Release { .. } => self.t,
        };
        let clock = Some(self.real.clock_ms(clock).to_string());
        let registry = Some(self.real.id.clone());
        let seen = if self.epochs && (caller.server as usize) < self.keepers.len() {
            // Above any epoch the registry answers: read by no call since registry format 3.
            Some((self.seen_epoch[caller.server as usize] + LATER_EPOCH).to_string())
        } else {
            None
        };
        let key = [Some(sysid), Some(host), Some(port), Some(dir)];
        let s = |v: i64| Some(v.to_string());
        match *req {
            Request::Claim {
                worker,
                token,
                continuation,
                ..
            } => {
                let fence = continuation.map(|f| self.real_fence(worker, f));
                let mut p = key.to_vec();
                p.extend([
                    boot,
                    host_run,
                    secret,
                    s(1),
                    s(worker as i64),
                    s(worker as i64),
                    Some("true".into()),
                    ttl,
                    clock,
                    fence.map(|f| f.to_string()),
                    s(token as i64),
                    registry,
                    seen,
                ]);
                self.real.call(
                    "claim",
                    &[
                        "text", "text", "int4", "text", "text", "text", "text", "int4", "int4",
                        "int4", "bool", "int4", "int8", "int8", "int8", "uuid", "int8",
                    ],
                    &p,
                )
            }
            Request::Confirm { worker, token, .. } => {
                let real_token = self.real_token(worker, token);
                let mut p = key.to_vec();
                p.extend([
                    boot,
                    host_run,
                    secret,
                    s(1),
                    s(worker as i64),
                    s(real_token),
                    ttl,
                    clock,
                    registry,
                    seen,
                    s(CONFIRM_REQUEST + token as i64),
                ]);
                self.real.call(
                    "confirm",
                    &[
                        "text", "text", "int4", "text", "text", "text", "text", "int4", "int4",
                        "int8", "int4", "int8", "uuid", "int8", "int8",
                    ],
                    &p,
                )
            }
            Request::Renew {
                worker,
                prev,
                new,
                cap,
                ran_out,
                ..
            } => {
                let fence = self.real_fence(worker, prev);
                let mut p = key.to_vec();
                p.extend([
                    boot,
                    secret,
                    s(1),
                    s(worker as i64),
                    s(fence),
                    s(new as i64),
                    s(cap as i64),
                    ttl,
                    clock,
                    registry,
                    seen,
                    Some(ran_out.to_string()),
                ]);
                self.real.call(
                    "renew",
                    &[
                        "text", "text", "int4", "text", "text", "text", "int4", "int4", "int8",
                        "int8", "int8", "int4", "int8", "uuid", "int8", "bool",
                    ],
                    &p,
                )
            }
            Request::Release {
                worker, fence, cap, ..
            } => {
                let fence = self.real_fence(worker, fence);
                let mut p = key.to_vec();
                p.extend([
                    boot,
                    secret,
                    s(worker as i64),
                    s(fence),
                    s(cap as i64),
                    registry,
                    seen,
                ]);
                self.real.call(
                    "release",
                    &[
                        "text", "text", "int4", "text", "text", "text", "int4", "int8", "int8",
                        "uuid", "int8",
                    ],
                    &p,
                )
            }
        }
    }

    /// The model's answer `m` (from `pre`, the model's registry before the request) and the
    /// SQL's `r`, compared; the model's registry left as the comparison says.
    fn judge(
        &mut self,
        pre: &Registry,
        caller: &Caller,
        req: &Request,
        m: Answer,
        r: &RealAnswer,
    ) -> Result<Judged, String> {
        let worker = req.worker();
        let w = worker as usize;
        let plain = |answer: Answer| Judged {
            answer,
            request: *req,
            allowed: None,
            end: false,
        };
        let last_mark = r.last_mark.unwrap_or(0);
        match (r.outcome.as_str(), m) {
            (
                "granted",
                Answer::Granted {
                    fence,
                    predecessor_cap,
                },
            ) => {
                let real = r.fence.ok_or("granted without a fence")?;
                // The same grant answered again (a replay): the same fence. A new grant may
                // reuse a model fence (a claim asked again under its token once the lease its
                // lost answer granted ran out): the real registry counts on.
                let row = pre.rows[w];
                let replay = row.fence == fence
                    && row.released.is_none()
                    && row
                        .holder
                        .is_some_and(|h| is(h, caller) && h.boot == caller.boot)
                    && !row
                        .pending
                        .is_some_and(|p| p.token == fence && is(p.claimer, caller));
                if replay {
                    if let Some(&known) = self.fences.get(&(worker, fence)) {
                        if known != real {
                            return Err(format!(
                                "a replay: model fence {fence} is real fence {known}, and now {real}"
                            ));
                        }
                    }
                }
                self.fences.insert((worker, fence), real);
                self.claimed_since_held[w] = false;
                self.held_in[w] = self.model.incarnation;
                if last_mark == predecessor_cap as i64 {
                    Ok(plain(m))
                } else if replay && last_mark > predecessor_cap as i64 {
                    Ok(Judged {
                        allowed: Some(Allowed::ReplayMark),
                        ..plain(m)
                    })
                } else {
                    Err(format!(
                        "the predecessor's cap: model {predecessor_cap}, SQL {last_mark}"
                    ))
                }
            }
            ("wait", Answer::Wait { token, wait }) => {
                let real = r.token.ok_or("wait without a token")?;
                let wait_ms = r.wait_ms.ok_or("wait without wait_ms")?;
                let same_token = matches!(*req, Request::Confirm { token: t, .. }
                    if self.real_token(worker, t) == real);
                let real_wait = if same_token {
                    wait_ms / UNIT_MS
                } else {
                    keeper_wait(wait_ms)
                };
                if real_wait != wait as i64 || wait_ms % UNIT_MS != 0 {
                    return Err(format!("the wait: model {wait}, SQL {wait_ms} ms"));
                }
                self.tokens.insert((worker, token), real);
                self.claimed_since_held[w] = true;
                Ok(plain(m))
            }
            ("wait", Answer::Lost)
                if matches!(*req, Request::Confirm { .. })
                    && pre.rows[w].pending.is_some_and(|p| {
                        is(p.claimer, caller)
                            && p.claimer.boot == caller.boot
                            && self.tokens.get(&(worker, p.token)) == r.token.as_ref()
                    }) =>
            {
                // The SQL names this start's claim that waits under another token (its answer
                // lost, or the claim asked again), writing nothing: the keeper waits under it.
                let token = pre.rows[w].pending.unwrap().token;
                let wait_ms = r.wait_ms.ok_or("wait without wait_ms")?;
                if keeper_wait(wait_ms) != self.cfg.wait() as i64 {
                    return Err(format!(
                        "the wait: model {}, SQL {wait_ms} ms",
                        self.cfg.wait()
                    ));
                }
                Ok(Judged {
                    allowed: Some(Allowed::ClaimedAgain),
                    ..plain(Answer::Wait {
                        token,
                        wait: self.cfg.wait(),
                    })
                })
            }
            ("wait", Answer::Lost) if matches!(*req, Request::Confirm { .. }) => {
                // The SQL claims again for the claimer: the model's claimer does.
                let token = self.fresh();
                let claim = Request::Claim {
                    worker,
                    token,
                    continuation: None,
                    cap: 0,
                    clock: self.t,
                };
                let again = self.model.handle(&self.cfg, self.t, caller, &claim);
                let Answer::Wait { wait, .. } = again else {
                    return Err(format!(
                        "the SQL claimed again at a lost confirmation; the model's claim: {}",
                        show_answer(&again)
                    ));
                };
                let wait_ms = r.wait_ms.ok_or("wait without wait_ms")?;
                if keeper_wait(wait_ms) != wait as i64 {
                    return Err(format!("the wait: model {wait}, SQL {wait_ms} ms"));
                }
                self.tokens
                    .insert((worker, token), r.token.ok_or("wait without a token")?);
                self.claimed_since_held[w] = true;
                Ok(Judged {
                    answer: again,
                    request: claim,
                    allowed: Some(Allowed::ClaimedAgain),
                    end: false,
                })
            }
            ("wait", Answer::Granted { .. })
                if matches!(*req, Request::Claim { .. })
                    && pre.rows[w].released == Some(pre.incarnation)
                    && self.claimed_since_held[w] =>
            {
                // The SQL's D: the release followed a claim recorded since the holder's last
                // grant or renewal. The model, with that release not counting for D:
                let mut narrower = pre.clone();
                narrower.rows[w].released = Some(NO_INCARNATION);
                let again = narrower.handle(&self.cfg, self.t, caller, req);
                let Answer::Wait { token, wait } = again else {
                    return Err(format!(
                        "the SQL's narrower D; the model without D: {}",
                        show_answer(&again)
                    ));
                };
                let wait_ms = r.wait_ms.ok_or("wait without wait_ms")?;
                if keeper_wait(wait_ms) != wait as i64 {
                    return Err(format!("the wait: model {wait}, SQL {wait_ms} ms"));
                }
                self.model = narrower;
                self.tokens
                    .insert((worker, token), r.token.ok_or("wait without a token")?);
                Ok(Judged {
                    allowed: Some(Allowed::NarrowerRelease),
                    ..plain(again)
                })
            }
            ("held", Answer::Wait { .. }) if matches!(*req, Request::Claim { .. }) => {
                let row = pre.rows[w];
                let impostor = |server: ServerId, secret: u16| {
                    server == caller.server && secret != caller.secret
                };
                let live_other =
                    row.is_live(self.t) && row.holder.is_some_and(|h| impostor(h.server, h.secret));
                let pending_other = row.pending.is_some_and(|p| {
                    impostor(p.claimer.server, p.claimer.secret)
                        && self.t <= p.since + self.cfg.wait() + self.cfg.lock_wait()
                });
                if !(live_other || pending_other) {
                    return Err("SQL held, model wait".into());
                }
                self.model = pre.clone();
                Ok(Judged {
                    allowed: Some(Allowed::SecretOwnsRow),
                    ..plain(Answer::Held)
                })
            }
            ("lost", Answer::Granted { .. })
                if (caller.secret == FORGED_SECRET || caller.secret == FLEET_SECRET)
                    && matches!(*req, Request::Confirm { token, .. }
                        if pre.rows[w].pending.is_none()
                            && pre.rows[w].fence == token
                            && pre.rows[w].holder.is_some_and(|h| is(h, caller))) =>
            {
                // The fleet's role confirming, under the fence of a grant a claim made it at
                // once, what no claim of its waits for (a keeper confirms only a claim that
                // waited): the model takes it for that grant asked again, the SQL knows a
                // confirmation asked again by its own request number, which this one is not,
                // and answers `lost`, writing nothing.
                self.model = pre.clone();
                Ok(Judged {
                    allowed: Some(Allowed::ConfirmOfAGrant),
                    ..plain(Answer::Lost)
                })
            }
            ("duplicate", Answer::Lost | Answer::Held | Answer::Wait { .. }) => {
                self.model = pre.clone();
                Ok(Judged {
                    allowed: Some(Allowed::Duplicate),
                    end: true,
                    ..plain(Answer::Lost)
                })
            }
            ("renewed", Answer::Renewed { fence }) => {
                let real = r.fence.ok_or("renewed without a fence")?;
                if let Some(&known) = self.fences.get(&(worker, fence)) {
                    if known != real {
                        return Err(format!(
                            "model fence {fence} is real fence {known}, and now {real}"
                        ));
                    }
                }
                self.fences.insert((worker, fence), real);
                self.claimed_since_held[w] = false;
                self.held_in[w] = self.model.incarnation;
                Ok(plain(m))
            }
            ("released", Answer::Released)
            | ("held", Answer::Held)
            | ("lost", Answer::Lost)
            | ("skew", Answer::Skew) => Ok(plain(m)),
            _ => Err(format!("model {}, SQL {}", show_answer(&m), r.outcome)),
        }
    }

    /// One request, to both; `keeper`: the server whose keeper sent it (told the answer unless
    /// `lost`). Returns whether the sequence goes on.
    fn exchange(
        &mut self,
        caller: Caller,
        req: Request,
        keeper: Option<usize>,
        lost: bool,
    ) -> bool {
        let pre = self.model.clone();
        // A holder's renewal with a fence above the row's: the registry lost the renewal that
        // gave it (restored from a copy taken before it).
        if let Request::Renew { worker, prev, .. } = req {
            let row = pre.rows[worker as usize];
            if keeper.is_some()
                && row.holder.is_some_and(|h| is(h, &caller))
                && self.real_fence(worker, prev) > self.real_fence(worker, row.fence)
            {
                self.totals.fences_lost += 1;
            }
        }
        if let Request::Renew {
            worker,
            ran_out: true,
            ..
        } = req
        {
            if keeper.is_some() {
                self.totals.ran_out_renewals += 1;
                let row = pre.rows[worker as usize];
                if row
                    .holder
                    .is_some_and(|h| is(h, &caller) && h.boot == caller.boot)
                    && row.released.is_none()
                    && row.held_in != Some(pre.incarnation)
                {
                    self.totals.ran_out_refused += 1;
                }
            }
        }
        let m = self.model.handle(&self.cfg, self.t, &caller, &req);
        let r = self.send_real(&caller, &req);
        self.totals.compared += 1;
        *self
            .totals
            .answers
            .entry(match m {
                Answer::Granted { .. } => "granted",
                Answer::Wait { .. } => "wait",
                Answer::Renewed { .. } => "renewed",
                Answer::Released => "released",
                Answer::Held => "held",
                Answer::Lost => "lost",
                Answer::Frozen => "frozen",
                Answer::Skew => "skew",
            })
            .or_default() += 1;
        let line = format!(
            "{} {} -> {} | {}{}",
            who(&caller),
            show_req(&req),
            show_answer(&m),
            r.show(),
            if lost { "; the reply is lost" } else { "" }
        );
        self.log(line);
        let judged = match self.judge(&pre, &caller, &req, m, &r) {
            Ok(j) => j,
            Err(why) => self.fail(why),
        };
        if let Some(a) = judged.allowed {
            *self.totals.allowed.entry(a).or_default() += 1;
            let line = format!(
                "      (accepted: {a:?}; the model goes on with {} to {})",
                show_answer(&judged.answer),
                show_req(&judged.request)
            );
            self.log(line);
        }
        if let Some(s) = keeper {
            if !lost {
                if let Some(e) = r.epoch {
                    self.seen_epoch[s] = self.seen_epoch[s].max(e);
                }
                let t = self.t;
                let cfg = self.cfg;
                self.keepers[s].answered(&cfg, &judged.request, t, t, &judged.answer);
                self.keepers[s].incarnation = self.model.incarnation;
            }
        }
        if judged.end {
            self.totals.ended_by_duplicate += 1;
            self.log("a copy of a server found: both stop; the sequence ends".into());
        }
        !judged.end
    }

    /// Server `s`'s keeper sends one of the requests its rules allow.
    fn act(&mut self, s: usize, lost: bool) -> bool {
        let fresh = self.fresh + 1;
        let choices = self.keepers[s].choices(&self.cfg, WORKERS, self.t, fresh);
        if choices.is_empty() {
            return true;
        }
        // A live holder mostly renews (its keeper does, every third of its lease), sometimes
        // claims its worker id again or gives it back.
        let pick = match self.keepers[s].phase {
            Phase::Holding { .. } if choices.len() == 3 => match self.rng.below(100) {
                0..=64 => 0,
                65..=84 => 2,
                _ => 1,
            },
            _ => self.rng.below(choices.len()),
        };
        let (mut req, used) = choices[pick];
        if used {
            self.fresh = fresh;
        }
        // The real keeper records no cap with a grant (its first renewal does, before it
        // uses the lease), and neither does the SQL: the model's grant records none either.
        match &mut req {
            Request::Claim { cap, .. } | Request::Confirm { cap, .. } => *cap = 0,
            _ => {}
        }
        let cfg = self.cfg;
        self.keepers[s].sent(&cfg, &req);
        if lost {
            self.totals.lost_replies += 1;
        }
        let caller = self.caller(s);
        self.exchange(caller, req, Some(s), lost)
    }

    /// The fleet's role: made-up arguments, posing as a holder or claimer, or as itself.
    fn fleet_call(&mut self) -> bool {
        self.totals.fleet_calls += 1;
        let worker = self.rng.below(WORKERS as usize) as WorkerId;
        let row = self.model.rows[worker as usize];
        let posing = match (row.holder, row.pending) {
            (_, Some(p)) if self.rng.chance(50) => p.claimer.server,
            (Some(h), _) => h.server,
            _ => self.rng.below(self.keepers.len()) as ServerId,
        };
        let caller = if self.rng.chance(70) {
            Caller {
                server: posing,
                secret: FORGED_SECRET,
                boot: 0,
                seen_epoch: 0,
            }
        } else {
            Caller {
                server: FLEET,
                secret: FLEET_SECRET,
                boot: 0,
                seen_epoch: 0,
            }
        };
        let fence = if self.rng.chance(70) {
            row.fence
        } else {
            self.rng.below(self.fresh as usize + 2) as Fence
        };
        let req = match self.rng.below(5) {
            0 => Request::Renew {
                worker,
                prev: fence,
                new: self.fresh(),
                cap: 0,
                clock: self.t,
                ran_out: self.rng.chance(50),
            },
            // (It names the incarnation the SQL reads from the row, see the module doc.)
            1 => Request::Release {
                worker,
                fence,
                cap: 0,
                incarnation: if self.claimed_since_held[worker as usize] {
                    NO_INCARNATION
                } else {
                    self.held_in[worker as usize]
                },
            },
            2 => Request::Confirm {
                worker,
                token: row.pending.map_or(fence, |p| p.token),
                cap: 0,
                clock: self.t,
            },
            _ => {
                let token = self.fresh();
                Request::Claim {
                    worker,
                    token,
                    continuation: self.rng.chance(50).then_some(fence),
                    cap: 0,
                    clock: self.t,
                }
            }
        };
        self.exchange(caller, req, None, false)
    }

    /// The fleet's role reports an epoch above the registry's, as nobody's renewal: `lost`, and
    /// nothing written (registry format 2 froze); the model's registry is left as it is.
    fn made_up_epoch(&mut self) {
        self.totals.made_up_epochs += 1;
        let r = self.real.call(
            "renew",
            &[
                "text", "text", "int4", "text", "text", "text", "int4", "int4", "int8", "int8",
                "int8", "int4", "int8", "uuid", "int8", "bool",
            ],
            &[
                Some("x".into()),
                Some("x".into()),
                Some("1".into()),
                Some("x".into()),
                Some("x".into()),
                Some(secret_text(FORGED_SECRET)),
                Some("1".into()),
                Some("0".into()),
                Some("0".into()),
                Some("0".into()),
                Some("0".into()),
                Some("5000".into()),
                Some(self.real.clock_ms(self.t).to_string()),
                Some(self.real.id.clone()),
                Some(i64::MAX.to_string()),
                None,
            ],
        );
        self.log(format!(
            "the fleet's role calls with a made-up epoch above the registry's -> lost | {}",
            r.show()
        ));
        if r.outcome != "lost" {
            self.fail(format!("a made-up epoch: SQL {}, not lost", r.outcome));
        }
    }

    fn advance(&mut self, by: Time) {
        self.t += by;
        self.real.set_time(self.t);
        self.log(format!("time passes: {by}"));
    }

    fn run(&mut self, steps: usize) {
        let servers = self.keepers.len();
        for _ in 0..steps {
            self.totals.steps += 1;
            let roll = self.rng.below(100);
            let goes_on = match roll {
                0..=49 => {
                    let s = self.rng.below(servers);
                    self.act(s, false)
                }
                50..=56 => {
                    let s = self.rng.below(servers);
                    self.act(s, true)
                }
                57..=60 => {
                    let s = self.rng.below(servers);
                    self.totals.crashes += 1;
                    self.keepers[s].restart();
                    let line = format!(
                        "{} crashes and starts again (boot {})",
                        name(s as ServerId),
                        self.keepers[s].boot
                    );
                    self.log(line);
                    true
                }
                61..=67 => self.fleet_call(),
                68..=69 => {
                    self.made_up_epoch();
                    true
                }
                70..=75 if self.copy.is_none() || self.rng.chance(25) => {
                    self.totals.copies += 1;
                    self.real.take_copy();
                    self.copy = Some(self.model.clone());
                    self.log("a copy of the registry is taken (pg_basebackup)".into());
                    true
                }
                76..=81 if self.copy.is_some() => {
                    self.totals.restores += 1;
                    self.real.restore(self.t);
                    let fresh = self.next_incarnation();
                    let copy = self.copy.clone().unwrap();
                    self.model.restore(&self.cfg, &copy, fresh);
                    self.log(format!(
                        "the registry is restored from the copy: incarnation {fresh}"
                    ));
                    true
                }
                82..=97 => {
                    let by = [1, 1, 2, 2, 3, 4, 6, 11][self.rng.below(8)];
                    self.advance(by);
                    true
                }
                _ => {
                    let s = self.rng.below(servers);
                    self.act(s, false)
                }
            };
            if !goes_on {
                return;
            }
        }
    }

    fn next_incarnation(&mut self) -> u16 {
        self.incarnations += 1;
        self.incarnations
    }
}

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[test]
fn the_registrys_sql_answers_as_the_lease_model() {
    let started = std::time::Instant::now();
    let runs = env_number("REGISTRY_MODEL_RUNS", 30);
    let steps = env_number("REGISTRY_MODEL_STEPS", 40) as usize;
    let seeds: Vec<u64> = match std::env::var("REGISTRY_MODEL_SEED") {
        Ok(seed) => vec![seed.parse().expect("REGISTRY_MODEL_SEED: a number")],
        Err(_) => {
            let base = unix_ms_now() as u64;
            FINDINGS
                .iter()
                .copied()
                .chain((0..runs).map(|i| base.wrapping_mul(1000).wrapping_add(i)))
                .collect()
        }
    };
    let mut real = Real::start();
    let mut totals = Totals::default();
    for (i, &seed) in seeds.iter().enumerate() {
        if i > 0 {
            real.reset();
        }
        real.set_time(0);
        let mut rng = Rng::new(seed);
        let servers = 2 + rng.below(2);
        let epochs = rng.chance(25);
        totals.sequences += 1;
        let mut seq = Sequence {
            seed,
            rng,
            cfg: config(),
            real: &mut real,
            model: Registry::new(WORKERS as usize),
            copy: None,
            keepers: vec![Keeper::new(); servers],
            seen_epoch: vec![0; servers],
            epochs,
            t: 0,
            fresh: 0,
            incarnations: 0,
            fences: HashMap::new(),
            tokens: HashMap::new(),
            claimed_since_held: vec![false; WORKERS as usize],
            held_in: vec![NO_INCARNATION; WORKERS as usize],
            trace: format!(
                "seed {seed}: {servers} servers, {WORKERS} worker ids, {}\n",
                if epochs {
                    "the servers send epochs above the registry's"
                } else {
                    "the servers send no epoch"
                }
            ),
            totals: &mut totals,
        };
        seq.run(steps);
    }
    let mut allowed: Vec<_> = totals.allowed.iter().collect();
    allowed.sort();
    let mut answers: Vec<_> = totals.answers.iter().collect();
    answers.sort();
    // Written past the test harness's capture, so that the suite's log shows it.
    use std::io::Write as _;
    let _ = writeln!(
        std::io::stderr(),
        "registry_model: {} sequences (seeds {}), {} steps, {} answers compared ({answers:?}), {} copies, \
         {} restores, {} renewals with a fence the registry lost, {} renewals of a lease run out ({} of them \
         where the row's last write was not the holder's own in this incarnation), {} crashes, {} lost replies, {} calls of the fleet's role ({} with a \
         made-up epoch), {} sequences ended by a copy found; accepted differences: {allowed:?}; \
         {:.0} s",
        totals.sequences,
        match (seeds.as_slice(), seeds.get(FINDINGS.len())) {
            ([one], _) => one.to_string(),
            (all, Some(first)) => format!("the findings', then {first}..={}", all[all.len() - 1]),
            (_, None) => "the findings'".to_string(),
        },
        totals.steps,
        totals.compared,
        totals.copies,
        totals.restores,
        totals.fences_lost,
        totals.ran_out_renewals,
        totals.ran_out_refused,
        totals.crashes,
        totals.lost_replies,
        totals.fleet_calls + totals.made_up_epochs,
        totals.made_up_epochs,
        totals.ended_by_duplicate,
        started.elapsed().as_secs_f64()
    );
}

//! The lease model checker: an exhaustive breadth-first search over every state the lease
//! protocol of `snowflake_core::lease_model` can reach, within bounds, under every fault it
//! names, checking its invariant in every state:
//!
//! 1. at no real instant are two servers live on one worker id (each judged by its own lease
//!    end on its own clock);
//! 2. a new holder's first id is above every id an earlier holder of that worker id could
//!    have issued (its acknowledged caps).
//!
//! What the search explores, from a start where server i holds worker id i (just granted):
//! every interleaving of the servers' claims, confirmations, renewals and releases as their
//! keepers' rules allow; a request applied at the registry at any later time (delayed), its
//! reply lost or the request given up on and sent again (a retry), and a request given up on
//! that still arrives later (duplicated); a server paused (it does nothing while time passes,
//! and its clock has moved on when it acts again); a crash and restart (memory lost, durable
//! record kept); a copy of the registry taken at any moment, and the registry restored from
//! any copy at any later moment; and the fleet's role (knowing everything but the servers'
//! secrets) calling claim, confirm, renew and release with any worker id, posing as any server
//! or as itself, with the fences and tokens it can read in `lease_list`. Under rules that
//! freeze (`Rules::freeze`: registry format 2 and the first transcription; the old rules'
//! epochs), the fleet's role may also freeze the registry, and an administrator recover it;
//! the rules that ship (`Rules::NEW`, registry format 3) have no freeze, and neither happens.
//!
//! Time is a global real time that advances one unit at a step; each server's clock is real
//! time plus a fixed offset within the skew bound. The registry's clock is real time plus an
//! offset per incarnation: the first between the servers', and a restore may bring it up on
//! the same clock or on one a step behind (`W` and a `ttl`: more than a takeover through the
//! lock-delay takes; `LEASE_MODEL_CLOCK_STEP`, 0 for none), as a failover to another machine
//! may. The bounds of each run are in its
//! [`Bounds`] (see [`lease_model_keeps_one_holder_per_worker_id`] for the default run's, its
//! state count and time): 2 servers, 1 worker id, ttl 2, margin 1, lock-delay 2, skew 0 and
//! reach 0 (`W` = 2; `LEASE_MODEL_SKEW`, `LEASE_MODEL_REACH` raise them), up to 1 registry
//! copy, 1 restore, 1 crash, 1 network fault, 1 call of the fleet's role, 1 clean stop and 1
//! `recover()` (where the rules freeze). The three rules for a registry's clock
//! (`Rules::claim_checks_skew`, `Rules::renew_checks_skew`, `Rules::ran_out_needs_own_write`)
//! each have a test that takes it out and finds two live holders under a registry clock that
//! steps at a failover; with all three in, the same bounds find none. Ids are times in whole units: a holder's ids run from its first id with its
//! clock, at most the reach ahead of it (one more where its first id is the next one above a
//! predecessor's: the real one is the next sequence number of the same millisecond).
//!
//! On a violation it prints the trace: one line per step, who did what, with what answer, and
//! the clocks. Not covered: a copy of a server's or the registry's memory resumed (see the
//! module's documentation).

use snowflake_core::lease_model::*;
use std::collections::{HashMap, VecDeque};
use std::fmt::Write as _;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::time::Instant;

/// The fleet's role's own identity, and its own secret.
const FLEET: ServerId = 200;
const FLEET_SECRET: u16 = 999;
/// A secret the fleet's role makes up when it poses as a server.
const FORGED_SECRET: u16 = 0;
/// The token the fleet's role claims under.
const FLEET_TOKEN: Fence = 900;

fn secret(server: ServerId) -> u16 {
    100 + server as u16
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Flight {
    req: Request,
    caller: Caller,
    /// Own clock at the send.
    sent: Time,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Server {
    keeper: Keeper,
    flight: Option<Flight>,
    /// A request given up on that may still reach the registry.
    stray: Option<(Request, Caller)>,
    /// Ghost: its lease was granted at once to a claim as another start of the holder, on the
    /// registry's word alone (not its own live record).
    at_once_as_earlier_start: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
struct Used {
    copies: u8,
    restores: u8,
    crashes: u8,
    drops: u8,
    attacks: u8,
    recovers: u8,
    releases: u8,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct World {
    t: Time,
    registry: Registry,
    copies: Vec<Registry>,
    servers: Vec<Server>,
    /// The next fresh value (tokens, fences, incarnations): a random number in the real thing.
    fresh: u16,
    /// Per worker id, the highest cap any holder was acknowledged: the true max of the ids
    /// its holders could have issued.
    issuable: Vec<Cap>,
    used: Used,
    /// The registry's clock: real time plus this, in its current incarnation (a restore may
    /// bring it up on a machine whose clock differs).
    registry_clock: Time,
}

#[derive(Debug, Clone)]
struct Bounds {
    cfg: Config,
    names: Vec<&'static str>,
    workers: u8,
    /// The worker id each server holds at the start (just granted), if any.
    held: Vec<Option<WorkerId>>,
    /// Each server's clock: real time plus this (`BASE` plus 0..=2·max_skew).
    offsets: Vec<Time>,
    /// The registry's clock in its first incarnation, real time plus one of these (each a start
    /// of the search).
    registry_starts: Vec<Time>,
    /// How far back a restore may bring the registry's clock from the one it ran on (each a
    /// choice; 0: the same): a restored or failed-over registry runs on another machine, whose
    /// clock may differ.
    registry_steps_back: Vec<Time>,
    t_max: Time,
    copies: u8,
    restores: u8,
    crashes: u8,
    drops: u8,
    attacks: u8,
    /// Administrator's `recover()` of a frozen registry (rules that freeze only).
    recovers: u8,
    /// Clean stops (a release sent; its retries not counted).
    releases: u8,
    /// Check invariant 2 (off: only invariant 1, to find a case of two live holders).
    check_first: bool,
}

/// What the network does with a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Handled at once, its reply arriving at once. (A reply that arrives later is no other
    /// case: the holder counts from its send time, and one that waited long for its reply is a
    /// holder paused, or one whose reply was lost.)
    Answered,
    /// Handled at once, its reply lost (the server will ask again).
    ReplyLost,
    /// In flight: handled at any later time, or given up on and still handled later.
    Delayed,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Action {
    Tick,
    /// A server sends one of the requests its rules allow.
    Send(usize, usize, Mode),
    /// A delayed request arrives, and its reply with it.
    Apply(usize),
    /// The server gives up waiting for a delayed request (which may still arrive).
    GiveUp(usize),
    ApplyStray(usize),
    Crash(usize),
    Copy,
    /// The registry restored from copy `.0`, its clock `registry_steps_back[.1]` behind the
    /// one it ran on.
    Restore(usize, usize),
    Attack(usize),
    /// The fleet's role reports an epoch above the registry's: frozen (liveness only). Only
    /// under rules with the freeze (`Rules::freeze`; not `Rules::NEW`).
    Freeze,
    /// An administrator's `recover()` of a frozen registry (only rules that freeze have one).
    Recover,
}

/// Writes to the trace's line only when one is asked for (the search asks for none: formatting
/// every step would cost more than the step).
macro_rules! say {
    ($log:expr, $($arg:tt)*) => {
        if let Some(log) = $log.as_mut() {
            let _ = write!(log, $($arg)*);
        }
    };
}

fn hash_of(w: &World) -> u64 {
    let mut h = DefaultHasher::new();
    w.hash(&mut h);
    h.finish()
}

impl Bounds {
    fn name(&self, s: ServerId) -> String {
        if s == FLEET {
            "the fleet's role".into()
        } else {
            self.names[s as usize].into()
        }
    }

    fn clock(&self, w: &World, s: usize) -> Time {
        w.t + self.offsets[s]
    }

    /// The registry's clock: what it reads as `now`.
    fn registry_now(&self, w: &World) -> Time {
        w.t + w.registry_clock
    }

    fn caller(&self, w: &World, s: usize) -> Caller {
        Caller {
            server: s as ServerId,
            secret: secret(s as ServerId),
            boot: w.servers[s].keeper.boot,
            seen_epoch: w.servers[s].keeper.seen_epoch,
        }
    }

    /// The starts of the search: one per clock of the registry's first incarnation.
    fn initials(&self) -> Vec<World> {
        self.registry_starts
            .iter()
            .map(|&clock| self.initial(clock))
            .collect()
    }

    #[allow(clippy::needless_range_loop)]
    fn initial(&self, registry_clock: Time) -> World {
        let cfg = &self.cfg;
        let mut registry = Registry::new(self.workers as usize);
        let mut servers = Vec::new();
        let mut issuable = vec![0; self.workers as usize];
        let mut fresh = 1;
        for s in 0..self.names.len() {
            let mut keeper = Keeper::new();
            if let Some(worker) = self.held[s] {
                let own = self.offsets[s];
                let (fence, lease_end, cap) = (fresh, cfg.lease_end(own), cfg.cap(own));
                fresh += 1;
                registry.rows[worker as usize] = Row {
                    holder: Some(Principal {
                        server: s as ServerId,
                        secret: secret(s as ServerId),
                        boot: 0,
                    }),
                    fence,
                    expires_at: registry_clock + cfg.ttl,
                    cap,
                    granted_above: 0,
                    released: None,
                    pending: None,
                    held_in: Some(registry.incarnation),
                };
                keeper.record = Some(Record {
                    worker,
                    fence,
                    lease_end,
                    boot: 0,
                });
                keeper.mark = Some((worker, cap.min(own + cfg.reach)));
                keeper.phase = Phase::Holding {
                    worker,
                    fence,
                    lease_end,
                    first: 0,
                    cap,
                };
                issuable[worker as usize] = cap.min(own + cfg.reach);
            }
            servers.push(Server {
                keeper,
                flight: None,
                stray: None,
                at_once_as_earlier_start: false,
            });
        }
        World {
            t: 0,
            registry,
            copies: vec![],
            servers,
            fresh,
            issuable,
            used: Used::default(),
            registry_clock,
        }
    }

    /// The fleet's role's calls in state `w`: with any worker id, posing as the holder or the
    /// claimer without their secret, or as itself, with the fences and tokens of the rows.
    fn attacks(&self, w: &World) -> Vec<(Caller, Request)> {
        let forged = |server| Caller {
            server,
            secret: FORGED_SECRET,
            boot: 0,
            seen_epoch: 0,
        };
        let itself = Caller {
            server: FLEET,
            secret: FLEET_SECRET,
            boot: 0,
            seen_epoch: 0,
        };
        let mut out = vec![];
        for (worker, row) in w.registry.rows.iter().enumerate() {
            let worker = worker as WorkerId;
            let holder = row.holder.map_or(FLEET, |h| h.server);
            let fence = row.fence;
            // (on the registry's own clock, its lease not run out: what the SQL refuses least)
            let renew = Request::Renew {
                worker,
                prev: fence,
                new: fence,
                cap: 0,
                clock: self.registry_now(w),
                ran_out: false,
            };
            let release = Request::Release {
                worker,
                fence,
                cap: 0,
                incarnation: w.registry.incarnation,
            };
            out.push((forged(holder), renew));
            out.push((forged(holder), release));
            out.push((itself, renew));
            out.push((itself, release));
            let claim = Request::Claim {
                worker,
                token: FLEET_TOKEN,
                continuation: Some(fence),
                cap: 0,
                clock: self.registry_now(w),
            };
            out.push((itself, claim));
            out.push((forged(holder), claim));
            if let Some(p) = row.pending {
                let confirm = Request::Confirm {
                    worker,
                    token: p.token,
                    cap: 0,
                    clock: self.registry_now(w),
                };
                out.push((itself, confirm));
                out.push((forged(p.claimer.server), confirm));
            }
        }
        out
    }

    fn actions(&self, w: &World) -> Vec<Action> {
        let mut out = vec![];
        if w.t < self.t_max {
            out.push(Action::Tick);
        }
        for (s, server) in w.servers.iter().enumerate() {
            match server.flight {
                None => {
                    let choices =
                        server
                            .keeper
                            .choices(&self.cfg, self.workers, self.clock(w, s), w.fresh);
                    for (i, (req, _)) in choices.iter().enumerate() {
                        if self.new_release(server, req) && w.used.releases >= self.releases {
                            continue;
                        }
                        out.push(Action::Send(s, i, Mode::Answered));
                        if w.used.drops < self.drops {
                            out.push(Action::Send(s, i, Mode::ReplyLost));
                            out.push(Action::Send(s, i, Mode::Delayed));
                        }
                    }
                }
                Some(_) => {
                    out.push(Action::Apply(s));
                    out.push(Action::GiveUp(s));
                }
            }
            if server.stray.is_some() {
                out.push(Action::ApplyStray(s));
            }
            if w.used.crashes < self.crashes {
                out.push(Action::Crash(s));
            }
        }
        if w.used.copies < self.copies && !w.copies.contains(&w.registry) {
            out.push(Action::Copy);
        }
        if w.used.restores < self.restores {
            for i in 0..w.copies.len() {
                out.extend((0..self.registry_steps_back.len()).map(|k| Action::Restore(i, k)));
            }
        }
        if w.used.attacks < self.attacks {
            out.extend((0..self.attacks(w).len()).map(Action::Attack));
            if self.cfg.rules.freeze && !w.registry.frozen {
                out.push(Action::Freeze);
            }
        }
        if w.registry.frozen && w.used.recovers < self.recovers {
            out.push(Action::Recover);
        }
        out
    }

    /// One step. `log` gets a line saying what happened. Err: invariant 2 broken.
    fn step(&self, w: &World, a: Action, mut log: Option<&mut String>) -> Result<World, String> {
        let cfg = &self.cfg;
        let mut n = w.clone();
        let t = w.t;
        say!(log, "t={t:<3} ");
        match a {
            Action::Tick => {
                n.t += 1;
                say!(log, "time passes");
            }
            Action::Send(s, i, mode) => {
                let own = self.clock(w, s);
                let (req, used) = w.servers[s].keeper.choices(cfg, self.workers, own, w.fresh)[i];
                if used {
                    n.fresh += 1;
                }
                let caller = self.caller(w, s);
                if self.new_release(&w.servers[s], &req) {
                    n.used.releases += 1;
                }
                n.servers[s].keeper.sent(cfg, &req);
                n.servers[s].flight = Some(Flight {
                    req,
                    caller,
                    sent: own,
                });
                say!(
                    log,
                    "{} (clock {own}) sends {}",
                    self.names[s],
                    show_req(&req)
                );
                match mode {
                    Mode::Answered => self.apply(&mut n, s, false, &mut log)?,
                    Mode::ReplyLost => {
                        n.used.drops += 1;
                        self.apply(&mut n, s, true, &mut log)?
                    }
                    Mode::Delayed => {
                        n.used.drops += 1;
                        say!(log, "; the request is delayed");
                    }
                }
            }
            Action::Apply(s) => {
                say!(log, "{}'s delayed request arrives", self.names[s]);
                self.apply(&mut n, s, false, &mut log)?
            }
            Action::GiveUp(s) => {
                let f = w.servers[s].flight.unwrap();
                n.servers[s].flight = None;
                n.servers[s].stray = Some((f.req, f.caller));
                say!(
                    log,
                    "{} gives up waiting for its {} (not arrived yet: it may still arrive)",
                    self.names[s],
                    show_req(&f.req)
                );
            }
            Action::ApplyStray(s) => {
                let (req, caller) = w.servers[s].stray.unwrap();
                n.servers[s].stray = None;
                let answer = n.registry.handle(cfg, self.registry_now(w), &caller, &req);
                say!(
                    log,
                    "registry handles {}'s late {} -> {} (nobody waits for it){}",
                    self.names[s],
                    show_req(&req),
                    show_answer(&answer),
                    self.epoch(&n)
                );
            }
            Action::Crash(s) => {
                n.used.crashes += 1;
                let server = &mut n.servers[s];
                if let Some(f) = server.flight.take() {
                    server.stray = Some((f.req, f.caller));
                }
                server.keeper.restart();
                say!(
                    log,
                    "{} crashes and restarts (boot {}, its durable record: {})",
                    self.names[s],
                    server.keeper.boot,
                    show_record(&server.keeper.record)
                );
            }
            Action::Copy => {
                n.used.copies += 1;
                n.copies.push(w.registry.clone());
                n.copies.sort();
                say!(log, "a copy of the registry is taken");
            }
            Action::Restore(i, k) => {
                n.used.restores += 1;
                let copy = w.copies[i].clone();
                n.registry.restore(cfg, &copy, n.used.restores as u16);
                n.registry_clock = w.registry_clock - self.registry_steps_back[k];
                say!(
                    log,
                    "the registry is restored from a copy: incarnation {}, its clock {} (real + {}){}",
                    n.registry.incarnation,
                    self.registry_now(&n),
                    n.registry_clock,
                    self.epoch(&n)
                );
            }
            Action::Freeze => {
                n.used.attacks += 1;
                n.registry.frozen = true;
                say!(
                    log,
                    "the fleet's role calls with a made-up epoch above the registry's: frozen"
                );
            }
            Action::Recover => {
                n.used.recovers += 1;
                n.registry.frozen = false;
                say!(log, "an administrator calls recover()");
            }
            Action::Attack(i) => {
                n.used.attacks += 1;
                let (caller, req) = self.attacks(w)[i];
                let answer = n.registry.handle(cfg, self.registry_now(w), &caller, &req);
                let posing = if caller.server == FLEET {
                    String::new()
                } else {
                    format!(" posing as {} (no secret)", self.name(caller.server))
                };
                say!(
                    log,
                    "the fleet's role{posing} calls {} -> {}{}",
                    show_req(&req),
                    show_answer(&answer),
                    self.epoch(&n)
                );
            }
        }
        self.issue(&mut n);
        Ok(n)
    }

    fn new_release(&self, server: &Server, req: &Request) -> bool {
        matches!(req, Request::Release { .. })
            && !matches!(server.keeper.phase, Phase::Releasing { .. })
    }

    /// The worker id server `s` mints with now: it holds a lease it has not reached the end of,
    /// and its first id is within the reach of its clock, one more (ids are times in whole
    /// units here: one id above another is the next unit, where the real one is the next
    /// sequence number of the same millisecond). A holder whose first id is further ahead
    /// waits for its clock.
    fn minting(&self, w: &World, s: usize) -> Option<WorkerId> {
        let now = self.clock(w, s);
        match w.servers[s].keeper.phase {
            Phase::Holding {
                worker,
                lease_end,
                first,
                ..
            } if now < lease_end && first <= now + self.cfg.reach + 1 => Some(worker),
            _ => None,
        }
    }

    /// Every live holder issues ids up to its clock plus the reach (from its first id, within
    /// its cap): `issuable` keeps the highest per worker id.
    fn issue(&self, n: &mut World) {
        for s in 0..n.servers.len() {
            let now = self.clock(n, s);
            if let Phase::Holding {
                worker, first, cap, ..
            } = n.servers[s].keeper.phase
            {
                if self.minting(n, s).is_some() {
                    let id = cap.min((now + self.cfg.reach).max(first));
                    let w = worker as usize;
                    n.issuable[w] = n.issuable[w].max(id);
                    // The durable mark follows the ids issued.
                    let keeper = &mut n.servers[s].keeper;
                    let mark = keeper.mark.filter(|m| m.0 == worker).map_or(0, |m| m.1);
                    keeper.mark = Some((worker, mark.max(id)));
                }
            }
        }
    }

    /// The registry handles server `s`'s request in flight at real time `n.t`; its reply
    /// arrives at once, or is lost. Err: invariant 2 broken.
    fn apply(
        &self,
        n: &mut World,
        s: usize,
        lost: bool,
        log: &mut Option<&mut String>,
    ) -> Result<(), String> {
        let cfg = &self.cfg;
        let now = self.registry_now(n);
        let f = n.servers[s].flight.unwrap();
        let row = n.registry.rows[f.req.worker() as usize];
        let earlier_start = match f.req {
            // On the row's word alone: not the claimer's own live record.
            Request::Claim { continuation, .. } => {
                continuation != Some(row.fence)
                    && row.released.is_none()
                    && row
                        .holder
                        .is_some_and(|h| h.server == s as ServerId && h.boot != f.caller.boot)
            }
            _ => false,
        };
        let answer = n.registry.handle(cfg, now, &f.caller, &f.req);
        n.servers[s].flight = None;
        say!(
            log,
            "; registry (clock {now}) handles {}'s {} -> {}{}",
            self.names[s],
            show_req(&f.req),
            show_answer(&answer),
            self.epoch(n)
        );
        if lost {
            say!(log, "; the reply is lost");
            return Ok(());
        }
        let own = self.clock(n, s);
        n.servers[s].at_once_as_earlier_start =
            earlier_start && matches!(answer, Answer::Granted { .. });
        let server = &mut n.servers[s];
        if cfg.rules.epochs {
            server.keeper.seen_epoch = server.keeper.seen_epoch.max(n.registry.epoch);
        }
        let first = server.keeper.answered(cfg, &f.req, f.sent, own, &answer);
        server.keeper.incarnation = n.registry.incarnation;
        say!(log, "; {} (clock {own}) gets it", self.names[s]);
        let worker = f.req.worker() as usize;
        if let Some(first) = first {
            say!(log, ", first id {first}");
            if self.check_first && first <= n.issuable[worker] {
                say!(log, "  <-- VIOLATION");
                return Err(format!(
                        "invariant 2: {}'s first id of worker id {} is {first}, not above {}, an id an earlier holder could issue",
                        self.names[s],
                        worker + 1,
                        n.issuable[worker]
                    ));
            }
        }
        if let Phase::Holding { lease_end, cap, .. } = server.keeper.phase {
            say!(
                log,
                ", live until clock {lease_end} (real {}), cap {cap}",
                lease_end.saturating_sub(self.offsets[s])
            );
        }
        Ok(())
    }

    fn epoch(&self, w: &World) -> String {
        if w.registry.frozen && !self.cfg.rules.epochs {
            " [registry frozen]".into()
        } else if self.cfg.rules.epochs {
            format!(
                " [registry epoch {}{}]",
                w.registry.epoch,
                if w.registry.frozen { ", frozen" } else { "" }
            )
        } else {
            String::new()
        }
    }

    /// Invariant 1 in state `w`.
    fn two_live(&self, w: &World) -> Option<String> {
        for worker in 0..self.workers {
            let live: Vec<String> = (0..w.servers.len())
                .filter(|&s| self.minting(w, s) == Some(worker))
                .map(|s| {
                    let Phase::Holding { lease_end, .. } = w.servers[s].keeper.phase else {
                        unreachable!()
                    };
                    format!(
                        "{} (clock {}, live until {lease_end})",
                        self.names[s],
                        self.clock(w, s)
                    )
                })
                .collect();
            if live.len() > 1 {
                return Some(format!(
                    "invariant 1: at real time {} worker id {} has two live holders: {}",
                    w.t,
                    worker + 1,
                    live.join(" and ")
                ));
            }
        }
        None
    }
}

fn show_req(r: &Request) -> String {
    match *r {
        Request::Claim {
            worker,
            token,
            continuation,
            cap,
            clock,
        } => format!(
            "claim(worker {}, token {token}, {}cap {cap}, clock {clock})",
            worker + 1,
            continuation.map_or(String::new(), |f| format!("own lease fence {f}, "))
        ),
        Request::Confirm {
            worker,
            token,
            cap,
            clock,
        } => {
            format!(
                "confirm(worker {}, token {token}, cap {cap}, clock {clock})",
                worker + 1
            )
        }
        Request::Renew {
            worker,
            prev,
            new,
            cap,
            clock,
            ran_out,
        } => format!(
            "renew(worker {}, fence {prev}->{new}, cap {cap}, clock {clock}{})",
            worker + 1,
            if ran_out { ", ran out" } else { "" }
        ),
        Request::Release {
            worker,
            fence,
            cap,
            incarnation,
        } => {
            format!(
                "release(worker {}, fence {fence}, final cap {cap}, incarnation {incarnation})",
                worker + 1
            )
        }
    }
}

fn show_record(r: &Option<Record>) -> String {
    match r {
        None => "none".into(),
        Some(r) => format!(
            "worker {}, fence {}, lease end {}, written by boot {}",
            r.worker + 1,
            r.fence,
            r.lease_end,
            r.boot
        ),
    }
}

fn show_answer(a: &Answer) -> String {
    match *a {
        Answer::Granted {
            fence,
            predecessor_cap,
        } => format!("granted(fence {fence}, predecessor's cap {predecessor_cap})"),
        Answer::Wait { token, wait } => format!("wait(token {token}, {wait} units)"),
        Answer::Renewed { fence } => format!("renewed(fence {fence})"),
        Answer::Released => "released".into(),
        Answer::Held => "held".into(),
        Answer::Lost => "lost".into(),
        Answer::Frozen => "frozen".into(),
        Answer::Skew => "skew".into(),
    }
}

struct Outcome {
    states: usize,
    violation: Option<(String, Vec<String>)>,
}

fn req_fences(r: &mut Request, f: &mut impl FnMut(&mut Fence)) {
    match r {
        Request::Claim {
            token,
            continuation,
            ..
        } => {
            f(token);
            if let Some(c) = continuation {
                f(c);
            }
        }
        Request::Confirm { token, .. } => f(token),
        Request::Renew { prev, new, .. } => {
            f(prev);
            f(new);
        }
        Request::Release { fence, .. } => f(fence),
    }
}

fn registry_fences(r: &mut Registry, f: &mut impl FnMut(&mut Fence)) {
    for row in &mut r.rows {
        f(&mut row.fence);
        if let Some(p) = row.pending.as_mut() {
            f(&mut p.token);
        }
    }
}

/// Every fence and token in `w`.
fn fences(w: &mut World, f: &mut impl FnMut(&mut Fence)) {
    registry_fences(&mut w.registry, f);
    for copy in &mut w.copies {
        registry_fences(copy, f);
    }
    for s in &mut w.servers {
        match &mut s.keeper.phase {
            Phase::Idle => {}
            Phase::Claiming { token, .. }
            | Phase::Waiting { token, .. }
            | Phase::Confirming { token, .. } => f(token),
            Phase::Holding { fence, .. } => f(fence),
            Phase::Releasing { fence, .. } => f(fence),
        }
        if let Some(r) = s.keeper.record.as_mut() {
            f(&mut r.fence);
        }
        if let Some(r) = s.keeper.request.as_mut() {
            f(r);
        }
        if let Some(fl) = s.flight.as_mut() {
            req_fences(&mut fl.req, f);
        }
        if let Some((req, _)) = s.stray.as_mut() {
            req_fences(req, f);
        }
    }
}

/// Fences and tokens are random numbers in the real thing: only which are equal (and, for the
/// old rules' freeze, which is older) matters. So the values still referenced are numbered
/// anew, in order, from 1, and `fresh` is the next: states that differ only in the numbers
/// drawn are one state. (The fleet's role's own token, and 0, are kept.)
fn canonical(w: &mut World) {
    let mut used = vec![];
    fences(w, &mut |f| {
        if *f != 0 && *f < FLEET_TOKEN {
            used.push(*f)
        }
    });
    used.sort_unstable();
    used.dedup();
    fences(w, &mut |f| {
        if *f != 0 && *f < FLEET_TOKEN {
            *f = used.binary_search(f).unwrap() as Fence + 1;
        }
    });
    w.fresh = used.len() as Fence + 1;
}

/// The search: breadth first, so that a trace found is a shortest one.
fn check(b: &Bounds, label: &str, want: Option<&dyn Fn(&World) -> bool>) -> Outcome {
    let start = Instant::now();
    let inits: HashMap<u64, World> = b.initials().into_iter().map(|w| (hash_of(&w), w)).collect();
    // Each state's hash -> its parent's and the action that led to it (a start: itself).
    let mut seen: HashMap<u64, (u64, Action)> = HashMap::new();
    let mut queue = VecDeque::new();
    for (&h, w) in &inits {
        seen.insert(h, (h, Action::Tick));
        queue.push_back((w.clone(), h));
    }
    let mut found = None;
    let mut others = 0;
    let progress = std::env::var_os("LEASE_MODEL_PROGRESS").is_some();
    'search: while let Some((w, h)) = queue.pop_front() {
        for a in b.actions(&w) {
            let next = b.step(&w, a, None);
            let mut next = match next {
                Ok(n) => n,
                Err(why) => {
                    if want.is_none() {
                        found = Some((why, h, Some(a)));
                        break 'search;
                    }
                    others += 1;
                    continue;
                }
            };
            // A call that changed nothing but the fault budget is not a new state.
            if matches!(a, Action::Attack(_) | Action::ApplyStray(_)) && next.registry == w.registry
            {
                continue;
            }
            canonical(&mut next);
            let hn = hash_of(&next);
            if seen.contains_key(&hn) {
                continue;
            }
            seen.insert(hn, (h, a));
            if let Some(why) = b.two_live(&next) {
                if want.is_none_or(|want| want(&next)) {
                    found = Some((why, hn, None));
                    break 'search;
                }
                // Another violation than the one sought: not explored further.
                others += 1;
                continue;
            }
            queue.push_back((next, hn));
            if progress && seen.len().is_multiple_of(500_000) {
                println!(
                    "  ... {} states, queue {}, t={} , {:.1}s",
                    seen.len(),
                    queue.len(),
                    w.t,
                    start.elapsed().as_secs_f64()
                );
            }
        }
    }
    let states = seen.len();
    let violation = found.map(|(why, mut h, last)| {
        let mut actions: Vec<Action> = last.into_iter().collect();
        while seen[&h].0 != h {
            let (parent, a) = seen[&h];
            actions.push(a);
            h = parent;
        }
        actions.reverse();
        let mut w = inits[&h].clone();
        let mut lines = vec![format!("start: {}", start_line(b, w.registry_clock))];
        for a in actions {
            let mut line = String::new();
            if let Ok(mut n) = b.step(&w, a, Some(&mut line)) {
                canonical(&mut n);
                w = n;
            }
            lines.push(line);
        }
        (why, lines)
    });
    println!(
        "lease model, {label}: {states} states explored in {:.2} s{}{}",
        start.elapsed().as_secs_f64(),
        if others > 0 {
            format!(" ({others} states breaking the invariant otherwise, not explored further)")
        } else {
            String::new()
        },
        if violation.is_some() {
            ", violation found"
        } else {
            ", no violation"
        }
    );
    if let Some((why, lines)) = &violation {
        for l in lines {
            println!("  {l}");
        }
        println!("  => {why}");
    }
    Outcome { states, violation }
}

fn start_line(b: &Bounds, registry_clock: Time) -> String {
    let held: Vec<String> = (0..b.names.len())
        .map(|s| match b.held[s] {
            Some(w) => format!("{} holds worker id {}", b.names[s], w + 1),
            None => format!("{} holds none", b.names[s]),
        })
        .collect();
    format!(
        "{}; clocks = real + {:?}, the registry's real + {registry_clock} (a restore brings it up \
         on a clock this much behind: any of {:?}); ttl {}, margin {}, lock-delay {}, max skew {}, \
         reach {}, W {}",
        held.join(", "),
        b.offsets,
        b.registry_steps_back,
        b.cfg.ttl,
        b.cfg.margin,
        b.cfg.lock_delay,
        b.cfg.max_skew,
        b.cfg.reach,
        b.cfg.wait()
    )
}

fn env(name: &str, default: u16) -> u16 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The protocol's constants in the model's units: the registry's lease 2 units, the holder's
/// lease end 1 unit after its send, a lock-delay of 2; `max_skew` and `reach` as given (the
/// default run: 0 and 0, so `W` = 2).
fn config(rules: Rules) -> Config {
    Config {
        ttl: 2,
        margin: 1,
        lock_delay: 2,
        max_skew: env("LEASE_MODEL_SKEW", 0),
        reach: env("LEASE_MODEL_REACH", 0),
        rules,
    }
}

/// How far back a restore may bring the registry's clock (`LEASE_MODEL_CLOCK_STEP`; 0: never).
/// The default, `W` and a `ttl`, is more than a takeover through the lock-delay takes (a claim
/// once the lease ran out, `W`, a confirmation): a lease that ran out and changed hands in the
/// history a failover lost runs again by a clock that far behind.
fn clock_step(cfg: &Config) -> Time {
    env("LEASE_MODEL_CLOCK_STEP", cfg.wait() + cfg.ttl)
}

/// d holds worker id 1, c none; one fault of each kind; `t_max` time units. Every clock is
/// real time plus a `base` (a clock step per restore) and its offset, so that a registry's clock
/// behind real time is a time too. The registry's first incarnation runs on a clock between
/// d's and c's; a restore brings it up on the clock it ran on, or on one a step behind (behind
/// both servers').
fn default_bounds(rules: Rules) -> Bounds {
    let cfg = config(rules);
    let step = clock_step(&cfg);
    let restores = env("LEASE_MODEL_RESTORES", 1);
    let base = step * restores;
    let between = base + cfg.max_skew;
    let registry_steps_back = if step == 0 { vec![0] } else { vec![0, step] };
    // (by hand: `LEASE_MODEL_SERVERS` 3 adds e, `LEASE_MODEL_WORKERS` 2 a worker id 2 it holds)
    let servers = env("LEASE_MODEL_SERVERS", 2).clamp(2, 3) as usize;
    let workers = env("LEASE_MODEL_WORKERS", 1).clamp(1, 2) as u8;
    Bounds {
        cfg,
        names: ["d", "c", "e"][..servers].to_vec(),
        workers,
        held: [Some(0), None, (workers > 1).then_some(1)][..servers].to_vec(),
        // d's clock ahead of c's by the whole skew bound, e's between
        offsets: [base + 2 * cfg.max_skew, base, base + cfg.max_skew][..servers].to_vec(),
        registry_starts: vec![between],
        registry_steps_back,
        t_max: env("LEASE_MODEL_T", 6),
        copies: env("LEASE_MODEL_COPIES", 1) as u8,
        restores: restores as u8,
        crashes: env("LEASE_MODEL_CRASHES", 1) as u8,
        drops: env("LEASE_MODEL_DROPS", 1) as u8,
        attacks: env("LEASE_MODEL_ATTACKS", 1) as u8,
        recovers: env("LEASE_MODEL_RECOVERS", 1) as u8,
        releases: env("LEASE_MODEL_RELEASES", 1) as u8,
        check_first: true,
    }
}

/// The new rules (registry format 3: no freeze) keep the invariant. Debug (`cargo test`): 2
/// time units, one copy, restore (onto the registry's clock or one a step behind), crash, call
/// of the fleet's role and clean stop, no network fault (155 thousand states, 5 s). Release
/// (`--release`): 6 time units, which reach a handover through the lock-delay (d's lease runs
/// out at the registry at 2, c claims at 3 and confirms at 5) and a restore after it, with a
/// call of the fleet's role (7.4 million states, 42 s on the 2-core machine; 5 units: 3.1
/// million, 19 s; with the registry's clock never stepped, `LEASE_MODEL_CLOCK_STEP=0`, 4.0
/// million, 21 s, as before the model had the registry's clocks). Before those clocks: with
/// one network fault (a reply lost, or a request delayed) 1 time unit took 0.67 million states
/// (5 s in release), 2 units 3.2 million (22 s), 3 units 12.2 million (102 s, 2.3 GB); with
/// registry format 2's freeze and `recover()`, the default release run was 5.6 million states.
/// The `LEASE_MODEL_*` variables override either (`LEASE_MODEL_SERVERS=3
/// LEASE_MODEL_WORKERS=2`, 1 time unit: 25.3 million states, 305 s in release, 6.1 GB).
#[test]
fn lease_model_keeps_one_holder_per_worker_id() {
    let mut b = default_bounds(Rules::NEW);
    let (t, drops) = if cfg!(debug_assertions) {
        (2, 0)
    } else {
        (6, 0)
    };
    b.t_max = env("LEASE_MODEL_T", t);
    b.drops = env("LEASE_MODEL_DROPS", drops) as u8;
    let out = check(&b, "new rules", None);
    assert!(out.violation.is_none(), "the new rules broke the invariant");
    assert!(out.states > 1000);
}

/// The registry's first transcription of the model broke the invariant (fixed in what ships,
/// `Rules::NEW`): a holder's release applied, its answer
/// lost, the holder restarted, its worker id handed over at once (D), and the registry
/// restored from a copy from before the release: the holder's durable record, removed only
/// once the release is answered, still runs, and B hands it the worker id at once again.
#[test]
fn lease_model_finds_a_violation_in_the_first_transcription() {
    let mut b = default_bounds(Rules::SHIPPED);
    b.t_max = 0;
    let out = check(&b, "first transcription, shortest violation", None);
    assert!(
        out.violation.is_some(),
        "no violation found in the first transcription"
    );
}

/// C needs its incarnation check: a worker id never held, granted at once after a restore,
/// goes to a second server (a copy, a grant, a restore, a grant).
#[test]
fn lease_model_finds_a_violation_without_the_never_held_incarnation() {
    let mut b = default_bounds(Rules {
        never_held: AtOnce::Always,
        ..Rules::NEW
    });
    b.held = vec![None, None];
    b.t_max = 0;
    b.drops = 0;
    let out = check(&b, "never held at once in any incarnation", None);
    let (why, trace) = out.violation.expect("no violation found");
    assert!(why.contains("invariant"), "{why}");
    assert!(trace.join("\n").contains("restored"));
}

/// D needs its incarnation check: a worker id given back, granted at once after a restore
/// that kept the release, goes to a second server.
#[test]
fn lease_model_finds_a_violation_without_the_released_incarnation() {
    let mut b = default_bounds(Rules {
        released: AtOnce::Always,
        ..Rules::NEW
    });
    b.t_max = 0;
    b.drops = 0;
    let out = check(&b, "given back at once in any incarnation", None);
    let (why, trace) = out.violation.expect("no violation found");
    assert!(why.contains("invariant"), "{why}");
    assert!(trace.join("\n").contains("restored"));
}

/// Today's rules break the invariant: the shortest case the search finds.
#[test]
fn lease_model_finds_a_violation_in_the_old_rules() {
    let mut b = default_bounds(Rules::OLD);
    b.t_max = 0;
    let out = check(&b, "old rules, shortest violation", None);
    assert!(
        out.violation.is_some(),
        "no violation found in the old rules"
    );
}

/// Issue 41's "900 duplicates", in today's rules: d holds worker id 1 (the issue's 2), c
/// waits; a copy of the registry is taken; d gives its worker id back and c takes it at once;
/// the registry is restored from the copy on the same timeline; the fleet's role raises the
/// epoch past every epoch a server saw; d starts again and is granted the worker id at once on
/// the registry's word (its own expired lease, same machine run), while c is still live. The
/// search looks for a violation where one of the two live holders got its lease so.
#[test]
fn lease_model_finds_the_900_duplicates_in_the_old_rules() {
    let mut b = default_bounds(Rules::OLD);
    b.t_max = 0;
    b.drops = 0;
    b.check_first = false;
    let issue_41 = |w: &World| w.servers.iter().any(|s| s.at_once_as_earlier_start);
    let out = check(&b, "old rules, issue 41's case", Some(&issue_41));
    let (why, trace) = out
        .violation
        .expect("the old rules' duplicate was not found");
    assert!(why.contains("invariant 1"), "{why}");
    let text = trace.join("\n");
    for step in ["restored", "fleet's role", "crashes", "release"] {
        assert!(text.contains(step), "the trace has no {step}:\n{text}");
    }
}

/// Issue 41's case, sought in the rules that ship (registry format 3, no freeze) within the
/// same bounds: the search finds no violation at all (let alone one where a holder got its
/// lease at once on the registry's word as another start of itself).
#[test]
fn lease_model_finds_no_900_duplicates_in_the_new_rules() {
    let mut b = default_bounds(Rules::NEW);
    b.t_max = 0;
    b.drops = 0;
    b.check_first = false;
    let out = check(&b, "new rules, issue 41's case", None);
    assert!(
        out.violation.is_none(),
        "the new rules broke the invariant in issue 41's bounds"
    );
}

/// Bounds where a restore brings the registry up on a clock a step behind, with no other fault
/// than the one each case needs: a copy, a restore, `drops` network faults, `t_max` 5 (d's
/// lease runs out at the registry at 2, c claims at 3 and confirms `W` later), no crash, call
/// of the fleet's role or clean stop; only invariant 1 (two live holders) sought.
fn clock_bounds(rules: Rules, drops: u8) -> Bounds {
    let mut b = default_bounds(rules);
    b.registry_steps_back = vec![clock_step(&b.cfg)];
    b.t_max = env("LEASE_MODEL_T", 5);
    b.drops = drops;
    b.crashes = 0;
    b.attacks = 0;
    b.releases = 0;
    b.check_first = false;
    b
}

/// `renew` needs its skew check (`Rules::renew_checks_skew`): d's renewal, sent while its lease
/// ran, is delayed; its lease runs out, c takes the worker id over through the lock-delay; the
/// registry fails over to a copy from before (a new incarnation) on a machine whose clock is
/// behind, where d's lease still runs; the delayed renewal arrives and is renewed (its answer
/// comes too late for d to use it, but it makes d's own renewal the row's last write in this
/// incarnation); d, its lease run out, renews again, saying so, and the registry, by its clock
/// behind, renews it: d is live beside c. With the check, the same bounds find nothing (in
/// release only).
#[test]
fn lease_model_finds_a_violation_without_the_renewal_skew_check() {
    let b = clock_bounds(
        Rules {
            renew_checks_skew: false,
            ..Rules::NEW
        },
        1,
    );
    let out = check(&b, "renewals on a registry's clock behind", None);
    let (why, trace) = out.violation.expect("no violation found");
    assert!(why.contains("invariant 1"), "{why}");
    let text = trace.join("\n");
    for step in ["restored", "delayed", "ran out"] {
        assert!(text.contains(step), "the trace has no {step}:\n{text}");
    }
    if cfg!(debug_assertions) {
        // (0.44 million states: 2 s in release, 13 in debug)
        return;
    }
    let b = clock_bounds(Rules::NEW, 1);
    let out = check(&b, "new rules, a registry's clock behind", None);
    assert!(out.violation.is_none(), "the new rules broke the invariant");
}

/// Claims and confirmations need their skew check (`Rules::claim_checks_skew`): d renews, its
/// answer lost; its lease runs out, c takes the worker id over through the lock-delay; the
/// registry fails over to a copy from before, on a machine whose clock is behind, where d's
/// lease still runs; d, its lease run out, claims under the request in flight (the renewal's),
/// and the registry takes it for that renewal asked again and grants it at once (A): d is live
/// beside c. With the check, the same bounds find nothing.
#[test]
fn lease_model_finds_a_violation_without_the_claim_skew_check() {
    let b = clock_bounds(
        Rules {
            claim_checks_skew: false,
            ..Rules::NEW
        },
        1,
    );
    let out = check(&b, "claims on a registry's clock behind", None);
    let (why, trace) = out.violation.expect("no violation found");
    assert!(why.contains("invariant 1"), "{why}");
    let text = trace.join("\n");
    for step in ["restored", "lost", "claim"] {
        assert!(text.contains(step), "the trace has no {step}:\n{text}");
    }
}

/// `renew` needs its rule for a holder whose lease ran out (`Rules::ran_out_needs_own_write`),
/// where the skew allowed is large next to the lock-delay (here 2 units, the lock-delay 2: `W`
/// is 6). c's clock is ahead of d's by twice the skew, the registry's ahead of c's by the skew
/// (claims and confirmations accept it), so d's lease runs out there early and c takes the
/// worker id over; the registry fails over to a copy from before, on a machine whose clock is
/// behind d's by the skew (renewals accept it): 4 skews behind the lost history's, more than
/// the takeover took, so d's lease still runs there; d, its lease run out, renews, saying so,
/// and is renewed on the copy's word: d is live beside c. With the rule, the same bounds find
/// nothing.
#[test]
fn lease_model_finds_a_violation_without_the_ran_out_rule() {
    let bounds = |rules| {
        let mut b = clock_bounds(rules, 0);
        let skew = 2;
        b.cfg.max_skew = skew;
        b.offsets = vec![skew, 3 * skew];
        b.registry_starts = vec![4 * skew];
        b.registry_steps_back = vec![4 * skew];
        b.t_max = env("LEASE_MODEL_T", 9);
        b
    };
    let b = bounds(Rules {
        ran_out_needs_own_write: false,
        ..Rules::NEW
    });
    let out = check(
        &b,
        "a ran-out renewal, the lost history's registry clock ahead",
        None,
    );
    let (why, trace) = out.violation.expect("no violation found");
    assert!(why.contains("invariant 1"), "{why}");
    let text = trace.join("\n");
    for step in ["restored", "ran out"] {
        assert!(text.contains(step), "the trace has no {step}:\n{text}");
    }
    let out = check(
        &bounds(Rules::NEW),
        "new rules, the lost history's registry clock ahead",
        None,
    );
    assert!(out.violation.is_none(), "the new rules broke the invariant");
}

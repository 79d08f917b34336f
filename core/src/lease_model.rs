//! The lease protocol as one pure state machine: the registry's decisions ([`Registry`]) and the
//! holder's rules ([`Keeper`]), with no SQL, no I/O and no clock of its own (every time is a
//! value the caller passes in). `core/tests/lease_model.rs` checks it exhaustively against
//! every fault it can name; the registry's SQL and the lease keeper are meant to transcribe it.
//!
//! # The invariant
//!
//! 1. **At no real instant are two servers live on one worker id.** A holder is *live* until
//!    its own lease end, counted on its own clock; while live it considers itself able to mint.
//! 2. **A new holder's first id is above every id an earlier holder could have issued.** Ids are
//!    times (a holder's ids run with its clock), so a holder's *cap*, the highest id it may
//!    issue, is its lease end plus the reach of its ids ahead of its clock.
//!
//! # The words, once
//!
//! * **fence**: the value that names one grant or renewal of a lease; the registry's row holds
//!   the current one. The holder picks the next one (a random number in the real thing), so
//!   that a renewal whose reply was lost can be asked again and recognized.
//! * **token**: the value a claimer picks for its claim; the fence of the lease it is granted.
//! * **cap**: see above. Recorded in the registry with every grant and renewal, before the
//!   holder may use it; a new holder is told its predecessor's.
//! * **lease end**: `send time + ttl - margin` on the holder's own clock, for the last request
//!   that granted or renewed its lease. The registry counts `ttl` from when it handled that
//!   request, later, so the holder always stops first.
//! * **lock-delay**: how long the registry keeps a worker id from a new holder after its last
//!   holder's lease ran out in the registry: at least the longest lease a holder counts.
//! * **wait** (`W`): what a claimer waits on its own clock before it confirms: the lock-delay,
//!   twice the clock skew, and the reach ([`Config::wait`]).
//! * **incarnation**: which life of the registry's data answers. Every restore starts a new
//!   one (system identifier, postmaster start time and table OID in the real thing); within
//!   one, the registry's history is linear.
//!
//! # The rules, and what each stops
//!
//! See the methods of [`Registry`] and [`Keeper`]. In short: a worker id changes hands only
//! after a claimer recorded its claim, waited `W` on its own clock, and confirmed within the
//! same incarnation with nothing written to the row meanwhile; at once only to the claimer
//! itself, on the strength of its own durable record, never on the registry's word (a registry
//! can be restored without a trace). No epochs, no freeze: the fleet's role can only hurt
//! liveness.
//!
//! [`Rules::OLD`] also models the relevant parts of the rules before this model (the epoch
//! anyone can raise, the freeze, continuation and handover at once on the registry's word), so
//! that the checker can show the case they let through (issue 41, "900 duplicates").
//!
//! # Not covered
//!
//! A copy of a server's or the registry's *memory* resumed (a VM snapshot resumed, not booted):
//! the model's servers crash and restart from their durable record only, and a registry is only
//! ever restored from a copy of its data. Every restart of a server is on the same machine run
//! (its boot clock goes on). Clock rates do not drift; offsets are fixed within `max_skew`.

/// Time, in the model's units (the real thing: milliseconds).
pub type Time = u16;
/// Fences and tokens share one space: a confirmed claim's token becomes the lease's fence.
pub type Fence = u16;
/// An id, abstractly: a time on a holder's clock (see the invariant).
pub type Cap = u16;
pub type ServerId = u8;
pub type WorkerId = u8;

/// The rules a registry follows: [`Rules::NEW`], [`Rules::OLD`], or the new ones with one check
/// taken out, to show that it is needed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Rules {
    /// Every restore starts a new incarnation, and a pending claim of another incarnation is
    /// void. Stops: a claim recorded before a restore (or in a history a restore threw away)
    /// being confirmed in a history where the holder renewed meanwhile. (Old rules: a restore
    /// on the same timeline keeps the registry's identity.)
    pub restore_changes_incarnation: bool,
    /// A renewal counts only before the row's `expires_at` on the registry's clock. Stops: a
    /// delayed renewal, applied to a registry restored to a copy where its lease was still the
    /// holder's, bringing a holder back to life after its worker id changed hands in the
    /// history the restore threw away.
    pub renew_checks_expiry: bool,
    /// Old: every call bumps the registry's epoch and answers it; a caller that has seen a
    /// higher one freezes the registry. Anyone with the fleet's password can raise it.
    pub epochs: bool,
    /// Old: a claim by another start of the holder (its secret, another boot, on the same
    /// machine run) is granted at once on the row's word, whatever the claimer's own record.
    pub continuation_on_registry_word: bool,
    /// Old: a worker id never held, or given back, is granted at once to any claimer.
    pub handover_at_once: bool,
}

impl Rules {
    pub const NEW: Rules = Rules {
        restore_changes_incarnation: true,
        renew_checks_expiry: true,
        epochs: false,
        continuation_on_registry_word: false,
        handover_at_once: false,
    };
    /// The rules of `sql/registry/registry.sql` before this model, in the parts that matter here.
    pub const OLD: Rules = Rules {
        restore_changes_incarnation: false,
        renew_checks_expiry: false,
        epochs: true,
        continuation_on_registry_word: true,
        handover_at_once: true,
    };
}

/// The protocol's constants, in time units, and its rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Config {
    /// A lease's length, as the registry counts it from when it handled the request.
    pub ttl: Time,
    /// How long before `ttl` (counted from the send time) a holder stops.
    pub margin: Time,
    /// The registry's lock-delay setting; the wait is at least `ttl` in any case.
    pub lock_delay: Time,
    /// How far any server's clock may be from any other's, halved (each is within
    /// `max_skew` of the registry's).
    pub max_skew: Time,
    /// How far a holder's ids may run ahead of its clock.
    pub reach: Time,
    pub rules: Rules,
}

impl Config {
    /// The lease end of a lease granted or renewed by a request sent at `sent` (own clock).
    pub fn lease_end(&self, sent: Time) -> Time {
        sent + self.ttl - self.margin
    }

    /// The cap of that lease: every id the holder can issue before its lease ends.
    pub fn cap(&self, sent: Time) -> Cap {
        self.lease_end(sent) + self.reach
    }

    /// How long the registry keeps a worker id whose lease ran out from a new holder: longer
    /// than any lease a holder counts.
    pub fn lock_wait(&self) -> Time {
        self.ttl.max(self.lock_delay)
    }

    /// `W`, what a claimer waits on its own clock from the registry's *wait* before it confirms:
    /// the lock-delay (any earlier holder's lease has ended by its own clock), plus twice the
    /// skew and the reach, so that the new holder's clock, where its ids start, is above every
    /// id an earlier holder issued from its clock, even if the registry lost their caps.
    pub fn wait(&self) -> Time {
        self.lock_wait() + 2 * self.max_skew + self.reach
    }
}

/// Who calls: a server (or the fleet's role, posing as anyone, without their secrets).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Caller {
    pub server: ServerId,
    /// The server's own secret (kept in its data directory). The fleet's role does not know it.
    pub secret: u16,
    /// Which start of the server's postmaster (only the old rules look at it).
    pub boot: u16,
    /// The highest registry epoch this server has seen (old rules only; 0 in the new ones).
    pub seen_epoch: u16,
}

/// The holder, or a claimer, as the registry records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Principal {
    pub server: ServerId,
    pub secret: u16,
    pub boot: u16,
}

impl Principal {
    /// Whether `caller` is this principal: its identity *and* its secret (anyone can read the
    /// identity in `lease_list`).
    fn is(&self, caller: &Caller) -> bool {
        self.server == caller.server && self.secret == caller.secret
    }
}

/// A claim waiting out the lock-delay.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Pending {
    pub claimer: Principal,
    pub token: Fence,
    /// The registry's time when it recorded the claim.
    pub since: Time,
    /// The incarnation that recorded it: void in any other.
    pub incarnation: u16,
}

/// One worker id's row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Row {
    pub holder: Option<Principal>,
    pub fence: Fence,
    pub expires_at: Time,
    /// The highest cap any holder recorded.
    pub cap: Cap,
    /// The cap the row had when the current holder was granted it (a repeated confirmation is
    /// answered it again).
    pub granted_above: Cap,
    /// Given back by its holder.
    pub released: bool,
    pub pending: Option<Pending>,
}

impl Row {
    /// Held, and not run out on the registry's clock.
    pub fn is_live(&self, now: Time) -> bool {
        self.holder.is_some() && !self.released && now < self.expires_at
    }

    fn is_held_by(&self, caller: &Caller) -> bool {
        self.holder.is_some_and(|h| h.is(caller))
    }

    /// Every grant: the caller holds the row under `fence`, its lease counted from now; any
    /// pending claim is void (the row was written).
    fn grant(
        &mut self,
        cfg: &Config,
        now: Time,
        caller: &Caller,
        fence: Fence,
        cap: Cap,
    ) -> Answer {
        let predecessor_cap = self.cap;
        *self = Row {
            holder: Some(Principal {
                server: caller.server,
                secret: caller.secret,
                boot: caller.boot,
            }),
            fence,
            expires_at: now + cfg.ttl,
            cap: self.cap.max(cap),
            granted_above: predecessor_cap,
            released: false,
            pending: None,
        };
        Answer::Granted {
            fence,
            predecessor_cap,
        }
    }

    /// A renewal: the holder's lease again from now, its cap recorded.
    fn renew(&mut self, cfg: &Config, now: Time, fence: Fence, cap: Cap) {
        self.fence = fence;
        self.expires_at = now + cfg.ttl;
        self.cap = self.cap.max(cap);
        self.pending = None;
    }
}

/// What the registry answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Answer {
    /// `claim` (a continuation) or `confirm`: the worker id is the caller's under `fence`; its
    /// first id must be above `predecessor_cap`.
    Granted { fence: Fence, predecessor_cap: Cap },
    /// `claim` (or an early `confirm`): wait `wait` on your own clock, then confirm `token`.
    Wait { token: Fence, wait: Time },
    /// `renew`: renewed under the new fence.
    Renewed { fence: Fence },
    /// `release`: given back.
    Released,
    /// `claim`: another server holds it, or another claim waits on it.
    Held,
    /// The lease (or the claim) is not the caller's: claim anew.
    Lost,
    /// Old rules: the registry refuses everything (it saw a caller with a higher epoch).
    Frozen,
}

/// A request a server sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Request {
    /// Claim `worker` under `token`. `continuation`: the fence of the claimer's own lease of it,
    /// from its durable record, sent only while that lease is live by its own clock.
    Claim {
        worker: WorkerId,
        token: Fence,
        continuation: Option<Fence>,
        cap: Cap,
    },
    Confirm {
        worker: WorkerId,
        token: Fence,
        cap: Cap,
    },
    /// Renew from fence `prev` to fence `new`.
    Renew {
        worker: WorkerId,
        prev: Fence,
        new: Fence,
        cap: Cap,
    },
    /// Give the worker id back: the holder stopped, and issued nothing above `cap`.
    Release {
        worker: WorkerId,
        fence: Fence,
        cap: Cap,
    },
}

impl Request {
    pub fn worker(&self) -> WorkerId {
        match *self {
            Request::Claim { worker, .. }
            | Request::Confirm { worker, .. }
            | Request::Renew { worker, .. }
            | Request::Release { worker, .. } => worker,
        }
    }
}

/// The registry: one row per worker id.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Registry {
    pub rows: Vec<Row>,
    pub incarnation: u16,
    /// Old rules only.
    pub epoch: u16,
    /// Old rules only.
    pub frozen: bool,
}

impl Registry {
    pub fn new(workers: usize) -> Registry {
        Registry {
            rows: vec![Row::default(); workers],
            incarnation: 0,
            epoch: 0,
            frozen: false,
        }
    }

    /// Handles one request at the registry's time `now`.
    pub fn handle(&mut self, cfg: &Config, now: Time, caller: &Caller, req: &Request) -> Answer {
        if let Err(refusal) = self.open(cfg, caller) {
            return refusal;
        }
        match *req {
            Request::Claim {
                worker,
                token,
                continuation,
                cap,
            } => self.claim(cfg, now, caller, worker, token, continuation, cap),
            Request::Confirm { worker, token, cap } => {
                self.confirm(cfg, now, caller, worker, token, cap)
            }
            Request::Renew {
                worker,
                prev,
                new,
                cap,
            } => self.renew(cfg, now, caller, worker, prev, new, cap),
            Request::Release { worker, fence, cap } => self.release(caller, worker, fence, cap),
        }
    }

    /// Old rules: every call is refused by a frozen registry, freezes one behind the caller's
    /// epoch, and bumps the epoch. (The reason it fails: the fleet's role raises the epoch
    /// at will, so a registry restored on the same timeline is pushed past every epoch a
    /// server saw, and never freezes.)
    fn open(&mut self, cfg: &Config, caller: &Caller) -> Result<(), Answer> {
        if !cfg.rules.epochs {
            return Ok(());
        }
        if self.frozen {
            return Err(Answer::Frozen);
        }
        if caller.seen_epoch > self.epoch {
            self.frozen = true;
            return Err(Answer::Frozen);
        }
        self.epoch += 1;
        Ok(())
    }

    /// A claim of `worker`.
    #[allow(clippy::too_many_arguments)]
    pub fn claim(
        &mut self,
        cfg: &Config,
        now: Time,
        caller: &Caller,
        worker: WorkerId,
        token: Fence,
        continuation: Option<Fence>,
        cap: Cap,
    ) -> Answer {
        let incarnation = self.incarnation;
        let row = &mut self.rows[worker as usize];
        let proven = row.is_held_by(caller) && !row.released;
        // At once to the claimer itself, only when its own durable record says its lease runs
        // (it sends the fence only then) and the row agrees: it is the same holder going on
        // after a restart, so nobody else can have taken the worker id in between, whatever
        // history the registry lost. The registry's word alone (the row names the caller) is
        // not enough: a registry restored from a copy names holders whose worker id changed
        // hands since.
        let mut at_once = proven && continuation == Some(row.fence);
        if cfg.rules.continuation_on_registry_word {
            // Old: another start of the holder on the same machine run, on the row's word.
            at_once |= proven && row.holder.is_some_and(|h| h.boot != caller.boot);
        }
        if cfg.rules.handover_at_once {
            // Old: never held, or given back by its holder.
            at_once |= row.holder.is_none() || row.released;
        }
        if at_once {
            return row.grant(cfg, now, caller, token, cap);
        }
        if row.is_live(now) {
            return Answer::Held;
        }
        if let Some(p) = row.pending {
            if p.incarnation == incarnation && p.claimer.is(caller) && p.token == token {
                // The same claim again (its answer was lost): the same wait.
                return Answer::Wait {
                    token,
                    wait: cfg.wait(),
                };
            }
            // One claim at a time: another's waits until its claimant gave up (it would have
            // confirmed within the wait and a lock-delay more). Only liveness is at stake.
            if p.incarnation == incarnation && now < p.since + cfg.wait() + cfg.lock_wait() {
                return Answer::Held;
            }
        }
        row.pending = Some(Pending {
            claimer: Principal {
                server: caller.server,
                secret: caller.secret,
                boot: caller.boot,
            },
            token,
            since: now,
            incarnation,
        });
        Answer::Wait {
            token,
            wait: cfg.wait(),
        }
    }

    /// The confirmation of a claim, once its claimer waited `W` on its own clock.
    pub fn confirm(
        &mut self,
        cfg: &Config,
        now: Time,
        caller: &Caller,
        worker: WorkerId,
        token: Fence,
        cap: Cap,
    ) -> Answer {
        let incarnation = self.incarnation;
        let row = &mut self.rows[worker as usize];
        if row.is_held_by(caller) && !row.released && row.fence == token {
            // This confirmation again, granted and its answer lost: a renewal, under the same
            // rules (the lease must still run here), answered as the first time.
            if cfg.rules.renew_checks_expiry && now >= row.expires_at {
                return Answer::Lost;
            }
            row.renew(cfg, now, token, cap);
            return Answer::Granted {
                fence: token,
                predecessor_cap: row.granted_above,
            };
        }
        let Some(p) = row.pending else {
            // Overtaken: the holder renewed, or the row was written otherwise.
            return Answer::Lost;
        };
        // Only the claimer (its secret) confirms its own claim, and only in the incarnation
        // that recorded it: a restore may have thrown away the holder's renewals since the
        // claim, which would have voided it.
        if !(p.claimer.is(caller) && p.token == token && p.incarnation == incarnation) {
            return Answer::Lost;
        }
        // The claimer's own clock is what proves the wait; the registry's must agree (it holds
        // back a caller that did not wait, such as the fleet's role).
        let waited = now - p.since;
        if waited < cfg.lock_wait() {
            return Answer::Wait {
                token,
                wait: cfg.lock_wait() - waited,
            };
        }
        row.grant(cfg, now, caller, token, cap)
    }

    /// A renewal by the holder, from fence `prev` to `new`.
    #[allow(clippy::too_many_arguments)]
    pub fn renew(
        &mut self,
        cfg: &Config,
        now: Time,
        caller: &Caller,
        worker: WorkerId,
        prev: Fence,
        new: Fence,
        cap: Cap,
    ) -> Answer {
        let row = &mut self.rows[worker as usize];
        // Only the holder, by its secret: the fleet's role posing as it is told `lost`.
        // A given-back lease stays given back.
        if !row.is_held_by(caller) || row.released {
            return Answer::Lost;
        }
        if cfg.rules.epochs && prev > row.fence && new != row.fence {
            // Old: the holder brings a fence the registry never gave: it went back in time.
            self.frozen = true;
            return Answer::Frozen;
        }
        // `prev`: the lease as the holder last knew it. `new`: the same renewal asked again,
        // its answer lost. Any other fence: the row changed hands, or the registry was restored
        // to a copy from before the holder's last renewal.
        if row.fence != prev && row.fence != new {
            return Answer::Lost;
        }
        // A lease that ran out here stays out: its worker id may have changed hands in a
        // history a restore threw away (see `Rules::renew_checks_expiry`).
        if cfg.rules.renew_checks_expiry && now >= row.expires_at {
            return Answer::Lost;
        }
        row.renew(cfg, now, new, cap);
        Answer::Renewed { fence: new }
    }

    /// The holder gives its worker id back, having issued nothing above `cap`. The next holder
    /// still waits `W` (the registry's word that it was given back may be a restored copy's).
    pub fn release(&mut self, caller: &Caller, worker: WorkerId, fence: Fence, cap: Cap) -> Answer {
        let row = &mut self.rows[worker as usize];
        if !(row.is_held_by(caller) && row.fence == fence) {
            return Answer::Lost;
        }
        row.released = true;
        row.cap = row.cap.max(cap);
        row.pending = None;
        Answer::Released
    }

    /// The registry's data replaced by an earlier copy of itself. Under the new rules the copy
    /// serves as a new incarnation (`fresh`); under the old ones, a restore on the same
    /// timeline keeps the registry's identity.
    pub fn restore(&mut self, cfg: &Config, copy: &Registry, fresh: u16) {
        *self = copy.clone();
        if cfg.rules.restore_changes_incarnation {
            self.incarnation = fresh;
        }
    }
}

/// A server's durable record of its last lease (kept with its marks): what lets it go on at
/// once after a restart, and start above its own earlier ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Record {
    pub worker: WorkerId,
    pub fence: Fence,
    /// Lease end on the server's own (boot) clock.
    pub lease_end: Time,
    /// The highest cap it had recorded for this worker id.
    pub cap: Cap,
    /// It gave the lease back (written before the release is sent: a restart after it must
    /// not go on at once).
    pub released: bool,
}

/// Where a server's lease keeper stands (in memory: a crash forgets it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Phase {
    Idle,
    /// A claim sent (asked again, under the same token, when its answer is lost).
    Claiming {
        worker: WorkerId,
        token: Fence,
    },
    /// Told to wait: confirms once its own clock reaches `until`.
    Waiting {
        worker: WorkerId,
        token: Fence,
        until: Time,
    },
    Confirming {
        worker: WorkerId,
        token: Fence,
    },
    /// Holds the worker id; live until `lease_end` on its own clock. `renewing`: the new fence
    /// of a renewal sent and not answered (asked again with the same fences).
    Holding {
        worker: WorkerId,
        fence: Fence,
        lease_end: Time,
        cap: Cap,
        renewing: Option<Fence>,
    },
    /// Stopped, giving the worker id back.
    Releasing {
        worker: WorkerId,
        fence: Fence,
        cap: Cap,
    },
}

/// A server's lease keeper: the holder's rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Keeper {
    pub phase: Phase,
    /// Durable.
    pub record: Option<Record>,
    /// Durable, old rules only.
    pub seen_epoch: u16,
}

impl Keeper {
    pub fn new() -> Keeper {
        Keeper {
            phase: Phase::Idle,
            record: None,
            seen_epoch: 0,
        }
    }

    /// Whether it may mint at `now` on its own clock: it holds a lease whose end it has not
    /// reached. Rule 1: a holder is live only until the send time of its last successful
    /// renewal or grant, plus `ttl - margin`; the registry counts `ttl` from later, so the
    /// holder always stops before the registry lets the lease go.
    pub fn is_live(&self, now: Time) -> bool {
        matches!(self.phase, Phase::Holding { lease_end, .. } if now < lease_end)
    }

    /// The worker id it is live on at `now`.
    pub fn live_worker(&self, now: Time) -> Option<WorkerId> {
        match self.phase {
            Phase::Holding {
                worker, lease_end, ..
            } if now < lease_end => Some(worker),
            _ => None,
        }
    }

    /// A crash and restart: memory lost, the durable record kept.
    pub fn restart(&mut self) {
        self.phase = Phase::Idle;
    }

    /// What it may send at `now` (own clock), given a `fresh` value for a new token or fence.
    /// Each choice says whether it used `fresh`.
    pub fn choices(
        &self,
        cfg: &Config,
        workers: u8,
        now: Time,
        fresh: Fence,
    ) -> Vec<(Request, bool)> {
        let cap = cfg.cap(now);
        match self.phase {
            Phase::Claiming { worker, token } => vec![(self.claim(worker, token, now, cap), false)],
            Phase::Waiting {
                worker,
                token,
                until,
            } if now >= until => vec![(Request::Confirm { worker, token, cap }, false)],
            Phase::Waiting { .. } => vec![],
            Phase::Confirming { worker, token } => {
                vec![(Request::Confirm { worker, token, cap }, false)]
            }
            // Renews only while live (after its lease end it must claim anew), and gives the
            // worker id back at a clean stop.
            Phase::Holding {
                worker,
                fence,
                renewing,
                cap: old_cap,
                ..
            } if self.is_live(now) => vec![
                (
                    Request::Renew {
                        worker,
                        prev: fence,
                        new: renewing.unwrap_or(fresh),
                        cap,
                    },
                    renewing.is_none(),
                ),
                (
                    Request::Release {
                        worker,
                        fence,
                        cap: old_cap,
                    },
                    false,
                ),
            ],
            Phase::Releasing { worker, fence, cap } => {
                vec![(Request::Release { worker, fence, cap }, false)]
            }
            Phase::Idle | Phase::Holding { .. } => (0..workers)
                .map(|w| (self.claim(w, fresh, now, cap), true))
                .collect(),
        }
    }

    /// A claim: with its own lease's fence when its durable record says that lease runs on
    /// its own clock and was not given back (the only ground for going on at once).
    fn claim(&self, worker: WorkerId, token: Fence, now: Time, cap: Cap) -> Request {
        let continuation = self
            .record
            .filter(|r| r.worker == worker && !r.released && now < r.lease_end)
            .map(|r| r.fence);
        Request::Claim {
            worker,
            token,
            continuation,
            cap,
        }
    }

    /// It sends `req`.
    pub fn sent(&mut self, req: &Request) {
        self.phase = match *req {
            Request::Claim { worker, token, .. } => Phase::Claiming { worker, token },
            Request::Confirm { worker, token, .. } => Phase::Confirming { worker, token },
            Request::Renew { new, .. } => match self.phase {
                Phase::Holding {
                    worker,
                    fence,
                    lease_end,
                    cap,
                    ..
                } => Phase::Holding {
                    worker,
                    fence,
                    lease_end,
                    cap,
                    renewing: Some(new),
                },
                other => other,
            },
            Request::Release { worker, fence, cap } => {
                // It stops minting before it says so, and remembers that it did.
                if let Some(r) = self.record.as_mut() {
                    r.released = true;
                }
                Phase::Releasing { worker, fence, cap }
            }
        };
    }

    /// The answer to `req`, sent at `sent`, received at `now` (both own clock). Returns the
    /// first id of a lease it now holds anew, if any: above its predecessor's cap, its own
    /// earlier cap of that worker id, and its clock.
    pub fn answered(
        &mut self,
        cfg: &Config,
        req: &Request,
        sent: Time,
        now: Time,
        answer: &Answer,
    ) -> Option<Cap> {
        let worker = req.worker();
        match (*req, *answer) {
            (
                Request::Claim { cap, .. } | Request::Confirm { cap, .. },
                Answer::Granted {
                    fence,
                    predecessor_cap,
                },
            ) => {
                let own = self
                    .record
                    .filter(|r| r.worker == worker)
                    .map_or(0, |r| r.cap + 1);
                let first = (predecessor_cap + 1).max(own).max(now);
                self.hold(cfg, worker, fence, sent, cap);
                Some(first)
            }
            (Request::Renew { cap, .. }, Answer::Renewed { fence }) => {
                self.hold(cfg, worker, fence, sent, cap);
                None
            }
            (Request::Claim { .. } | Request::Confirm { .. }, Answer::Wait { token, wait }) => {
                self.phase = Phase::Waiting {
                    worker,
                    token,
                    until: now + wait,
                };
                None
            }
            (Request::Renew { .. }, Answer::Lost | Answer::Frozen) => {
                // Not ours any more: stop at once, and never go on from this record.
                if let Some(r) = self.record.as_mut() {
                    r.lease_end = r.lease_end.min(now);
                }
                self.phase = Phase::Idle;
                None
            }
            _ => {
                self.phase = Phase::Idle;
                None
            }
        }
    }

    /// Holds `worker` under `fence` from a request sent at `sent` with `cap`; durably first.
    fn hold(&mut self, cfg: &Config, worker: WorkerId, fence: Fence, sent: Time, cap: Cap) {
        let lease_end = cfg.lease_end(sent);
        let earlier = self
            .record
            .filter(|r| r.worker == worker)
            .map_or(0, |r| r.cap);
        let cap = cap.max(earlier);
        self.record = Some(Record {
            worker,
            fence,
            lease_end,
            cap,
            released: false,
        });
        self.phase = Phase::Holding {
            worker,
            fence,
            lease_end,
            cap,
            renewing: None,
        };
    }
}

impl Default for Keeper {
    fn default() -> Self {
        Keeper::new()
    }
}

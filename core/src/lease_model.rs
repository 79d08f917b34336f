//! The lease protocol as one pure state machine: the registry's decisions ([`Registry`]) and the
//! holder's rules ([`Keeper`]), with no SQL, no I/O and no clock of its own (every time is a
//! value the caller passes in). `core/tests/lease_model.rs` checks it exhaustively against
//! every fault it can name; the registry's SQL (`sql/registry/registry.sql`: `claim`,
//! `confirm`, `renew`, `release`) and the lease keeper transcribe it.
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
//!   the current one. In the model the holder picks the next one (the real registry draws it and
//!   knows the request by its request id: the same thing), so that a request whose reply was
//!   lost can be asked again and recognized (a *replay*).
//! * **token**: the value a claimer picks for its claim; the fence of the lease it is granted.
//! * **cap**: see above. Recorded in the registry with every grant and renewal, before the
//!   holder may use it; a new holder is told its predecessor's (`last_mark` in the SQL).
//! * **lease end**: `send time + ttl - margin` on the holder's own clock, for the last request
//!   that granted or renewed its lease. The registry counts `ttl` from when it handled that
//!   request, later, so the holder always stops first. A row's lease *runs* at the registry
//!   while the registry's time is at most its `expires_at`.
//! * **lock-delay**: how long the registry keeps a worker id from a new holder after its last
//!   holder's lease ran out in the registry: at least the longest lease a holder counts.
//! * **wait** (`W`): what a claimer waits on its own clock before it confirms: the lock-delay,
//!   twice the clock skew, and the reach ([`Config::wait`]).
//! * **boot**: one start of a server's postmaster; **machine run**: one boot of its host (the
//!   model's servers never reboot: every restart is on the same machine run).
//! * **incarnation**: which life of the registry's data answers. Every restore, failover and
//!   restart of the registry's server starts a new one (system identifier, postmaster start
//!   time and table OID in the real thing); within one, the registry's history is linear.
//! * **the registry's clock**: the `now` it handles a request at. Within an incarnation it runs
//!   with real time; a new incarnation may run on another machine, whose clock may be anywhere
//!   (the checker steps it at a restore). Every request but a release carries the caller's
//!   clock as it sent it (`p_clock_ms`), so that the registry can tell.
//!
//! # The rules, and what each stops
//!
//! A worker id changes hands through the lock-delay: a claimer records its claim, waits `W` on
//! its own clock, and confirms within the same incarnation with nothing written to the row
//! meanwhile. A claim or a confirmation from a claimer whose clock is more than `max_skew` from
//! the registry's, either way, is refused (`skew`, [`Rules::claim_checks_skew`]): a registry
//! failed over to a machine whose clock is behind would otherwise find a lease running that
//! ran out, and changed hands, in the history it lost, and grant it at once (A). A claim is
//! granted at once only in four cases ([`Registry::claim`]):
//!
//! * **A**: the same start of the holder (its boot, its secret) going on with the fence it
//!   holds in memory, sent only while its lease is live by its own clock, or asking the same
//!   request again; the row not given back, and its lease still running at the registry
//!   (unless a replay, as the SQL has it: see [`Rules::replay_skips_expiry`]).
//! * **B**: an earlier start of the holder on the same machine run, bringing the fence from its
//!   own durable record, sent only while that record says the lease is live by its boot clock;
//!   the row not given back, its lease still running at the registry.
//! * **C**: a worker id never held, only while the registry runs in the incarnation it was
//!   installed in.
//! * **D**: a worker id its holder gave back (with its final cap), only if the release was
//!   recorded in the registry's current incarnation.
//!
//! A renewal counts only from the holder (secret, same start), under the row's fence (or as a
//! replay), the row not given back and its lease still running at the registry. Any other
//! fence is answered `lost`, and the holder claims again through the lock-delay: above all one
//! the registry never gave, above the row's (a restore lost the renewal that gave it), on which
//! the worker id may have changed hands in the lost history ([`Registry::renew`]). Whether the
//! lease still runs is read on the registry's clock, which may differ from the lost history's,
//! so two more rules:
//!
//! * a renewal whose sender's clock is *ahead* of the registry's by more than `max_skew` is
//!   refused (`skew`, [`Rules::renew_checks_skew`]): the registry's clock is behind, and a lease
//!   that ran out in the lost history may run by it. One-sided: a renewal delayed on its way
//!   only makes the holder's clock look behind, and is not refused for it;
//! * a holder whose lease ran out on its own clock when it sent the renewal says so, and is
//!   renewed only if the row's last write is its own last grant or renewal, made in the
//!   current incarnation ([`Row::held_in`], `held_proof` in the SQL; else `lost`:
//!   [`Rules::ran_out_needs_own_write`]): the history a failover lost may have run on a clock
//!   ahead, in which the lease ran out early and changed hands, while the new registry's clock
//!   is right. (The skew checks put the lost history's clock at most a skew ahead of the
//!   claimer that took over there, and the new one at most a skew behind the holder, so the
//!   two are at most four skews apart; the case needs more than a takeover takes, `W` and a
//!   unit: a `max_skew` large next to the lock-delay. The checker finds it with a skew of 2 and
//!   a lock-delay of 2.) A renewal sent while the lease ran needs neither: nobody can have
//!   taken the worker id over while the holder was live, and one that arrives late (delayed)
//!   does the holder no good, its lease end counting from the send.
//!
//! Nothing freezes the registry. Registry format 2 kept an epoch that anyone could raise, and
//! froze when a caller reported a higher one or a holder brought a fence above the row's, until
//! an administrator's `recover()`; they bought no safety: [`Rules::freeze`] has the fleet's
//! role freeze the registry at will and the administrator recover it, a frozen registry only
//! refuses, and the rules without it ([`Rules::NEW`], registry format 3) keep the invariant.
//!
//! [`Rules::OLD`] models the relevant parts of the rules before this model (the epoch anyone
//! can raise as the only guard against a restore, continuation and handover at once on the
//! registry's word), so that the checker can show the case they let through (issue 41, "900
//! duplicates").
//!
//! # Not covered
//!
//! A copy of a server's or the registry's *memory* resumed (a VM snapshot resumed, not booted):
//! the model's servers crash and restart from their durable record only, and a registry is only
//! ever restored from a copy of its data. Every restart of a server is on the same machine run
//! (its boot clock goes on). Clock rates do not drift. The servers' clocks are fixed offsets
//! within `max_skew` of each other's, halved; the registry's is a fixed offset within an
//! incarnation, and may step by any amount at a restore or failover (the checker tries a step
//! behind by more than a takeover takes, and, with a larger skew, a first incarnation ahead of
//! the servers'); a registry's clock that steps *within* an incarnation (set back on a running
//! server) is not modelled. The SQL's `skew` refusals are ([`Rules::claim_checks_skew`],
//! [`Rules::renew_checks_skew`]). Of its further refusals (`displaced`, `duplicate`,
//! `superseded`, `moved`, `ttl`), none is: each only refuses more, so leaving it out only lets
//! the checker explore more.

/// Time, in the model's units (the real thing: milliseconds).
pub type Time = u16;
/// Fences and tokens share one space: a confirmed claim's token becomes the lease's fence.
pub type Fence = u16;
/// An id, abstractly: a time on a holder's clock (see the invariant).
pub type Cap = u16;
pub type ServerId = u8;
pub type WorkerId = u8;
/// Which life of the registry's data answers (see the module's words).
pub type Incarnation = u16;

/// No incarnation: a release recorded so counts for no at-once handover.
pub const NO_INCARNATION: Incarnation = Incarnation::MAX;

/// When the registry's own word that nobody holds a worker id (never held; given back) hands it
/// over at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AtOnce {
    /// Only if that word was written in the incarnation that reads it (C, D).
    InItsIncarnation,
    /// On the word alone, whatever restore came since (the old rules; unsafe).
    Always,
}

/// The rules a registry follows: [`Rules::NEW`], [`Rules::OLD`], or the new ones with one check
/// taken out, to show that it is needed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Rules {
    /// Every restore starts a new incarnation, and a pending claim of another incarnation is
    /// void. Stops: a claim recorded before a restore (or in a history a restore threw away)
    /// being confirmed in a history where the holder renewed meanwhile; and C and D on the word
    /// of a copy. (Old rules: a restore on the same timeline keeps the registry's identity.)
    pub restore_changes_incarnation: bool,
    /// A renewal, and a continuation (A, B), count only while the row's lease runs at the
    /// registry. Stops: a delayed renewal, applied to a registry restored to a copy where its
    /// lease was still the holder's, bringing a holder back to life after its worker id changed
    /// hands in the history the restore threw away.
    pub renew_checks_expiry: bool,
    /// A replay (the same request asked again, its answer lost) is granted or renewed even
    /// after the row's lease ran out at the registry, as `registry.sql` has it
    /// (`expires_at >= now() OR replay` in `claim`, `AND NOT replay` in `renew`).
    pub replay_skips_expiry: bool,
    /// C: a worker id never held.
    pub never_held: AtOnce,
    /// D: a worker id given back by its holder.
    pub released: AtOnce,
    /// The epoch that anyone can raise and the freeze it triggers, as registry format 2 had
    /// them (dropped in format 3): the fleet's role may freeze the registry at any moment (it
    /// can report any epoch), an administrator may recover it; a frozen registry refuses every
    /// call (the keeper asks again, as after a lost reply). Only liveness is at stake.
    pub freeze: bool,
    /// The keeper's: a holder removes its durable record (durably) *before* it sends its
    /// release, not once the release is answered. Stops: a release applied, its answer lost,
    /// the holder restarted; the worker id handed over at once (D) and the registry restored to
    /// a copy from before the release; the restarted holder going on at once (B) from its
    /// record, beside the new holder.
    pub record_removed_before_release: bool,
    /// A release names the incarnation that answered the holder last (its answers carry it),
    /// and counts for D only if that is the registry's current one; else the worker id is
    /// given back, to be claimed through the lock-delay. Stops: a release applied, its answer
    /// lost, the worker id handed over at once (D), the registry restored to a copy from
    /// before the release, and the release asked again there: recorded in the new
    /// incarnation, it would hand the worker id over at once a second time.
    pub release_names_incarnation: bool,
    /// Old: every call bumps the registry's epoch and answers it; a caller that has seen a
    /// higher one freezes the registry. Anyone with the fleet's password can raise it.
    pub epochs: bool,
    /// Old: a claim by another start of the holder (its secret, another boot, on the same
    /// machine run) is granted at once on the row's word, whatever the claimer's own record.
    pub continuation_on_registry_word: bool,
    /// A renewal is refused (`skew`) when the holder's clock, as it sent it, is ahead of the
    /// registry's by more than `max_skew`: the registry's clock, by which it tells whether a
    /// lease still runs, counts only while it is not behind. One-sided, so that a renewal
    /// delayed on its way (which only makes the holder's clock look behind) is not refused.
    /// Stops: a registry failed over to a machine whose clock is behind renewing a lease that
    /// ran out, and changed hands, in the history it lost (its row still runs by the clock
    /// behind). (With [`Rules::ran_out_needs_own_write`], the holder, its lease run out,
    /// gets there only after a renewal of its sent earlier, delayed into the new incarnation,
    /// made its own renewal the row's last write there.)
    pub renew_checks_skew: bool,
    /// A holder whose lease ran out on its own clock when it sent its renewal (it says so) is
    /// renewed only where the row's last write is its own last grant or renewal, made in the
    /// registry's current incarnation ([`Row::held_in`], `held_proof` in the SQL); else `lost`,
    /// and it claims again through the lock-delay. Stops: a registry whose clock ran ahead in
    /// a history a failover lost (the lease ran out early there, and changed hands), failed
    /// over to a machine whose clock is right, renewing the lease on the copy's word that it
    /// still runs: the new registry's clock is not behind the holder's, the skew check sees
    /// nothing.
    pub ran_out_needs_own_write: bool,
    /// A claim or a confirmation is refused (`skew`) when the claimer's clock, as it sent it,
    /// is more than `max_skew` from the registry's, either way. Stops: a claim asked again
    /// (the same request, its answer lost: a *replay*), or a continuation (A, B), granted at
    /// once by a registry failed over to a machine whose clock is behind, on a lease that runs
    /// by that clock but ran out, and changed hands, in the history it lost. (It is also what
    /// lets a new holder start from its own clock, above the ids its predecessors issued by
    /// theirs: `W` counts twice the skew.)
    pub claim_checks_skew: bool,
}

impl Rules {
    /// The registry's first transcription of this model (A, B, C and D above, renewals and
    /// continuations only while the lease runs at the registry, but a replay even after, see
    /// [`Rules::replay_skips_expiry`]), in which the checker found a worker id handed over at
    /// once twice.
    pub const SHIPPED: Rules = Rules {
        restore_changes_incarnation: true,
        renew_checks_expiry: true,
        replay_skips_expiry: true,
        never_held: AtOnce::InItsIncarnation,
        released: AtOnce::InItsIncarnation,
        freeze: true,
        record_removed_before_release: false,
        release_names_incarnation: false,
        epochs: false,
        continuation_on_registry_word: false,
        renew_checks_skew: false,
        ran_out_needs_own_write: false,
        claim_checks_skew: false,
    };
    /// What `sql/registry/registry.sql` (registry format 3) and the lease keeper ship: the
    /// first transcription, a replay held to the lease running at the registry like any other
    /// continuation or renewal, the keeper's record removed before its release, a release that
    /// counts as the registry's word only when the holder's own last grant or renewal is the
    /// row's last write in this incarnation (`held_proof`), and no freeze; a claimer's clock more
    /// than `max_skew` from the registry's refused ([`Rules::claim_checks_skew`]); and in
    /// `renew`, a holder's clock ahead of the registry's by more refused
    /// ([`Rules::renew_checks_skew`]), and a holder whose lease ran out on its own clock renewed
    /// only on its own last grant or renewal in this incarnation
    /// ([`Rules::ran_out_needs_own_write`]). (Registry format 2 shipped the same, without these
    /// last two, with [`Rules::freeze`].)
    pub const NEW: Rules = Rules {
        replay_skips_expiry: false,
        freeze: false,
        record_removed_before_release: true,
        release_names_incarnation: true,
        renew_checks_skew: true,
        ran_out_needs_own_write: true,
        claim_checks_skew: true,
        ..Rules::SHIPPED
    };
    /// The rules of `sql/registry/registry.sql` before this model, in the parts that matter here.
    pub const OLD: Rules = Rules {
        restore_changes_incarnation: false,
        renew_checks_expiry: false,
        replay_skips_expiry: true,
        never_held: AtOnce::Always,
        released: AtOnce::Always,
        freeze: false,
        record_removed_before_release: true,
        release_names_incarnation: false,
        epochs: true,
        continuation_on_registry_word: true,
        renew_checks_skew: false,
        ran_out_needs_own_write: false,
        claim_checks_skew: false,
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

    /// The cap of that lease: the highest id the holder can issue before its lease ends (live
    /// while its clock is below the lease end; its ids at most the reach ahead of its clock).
    pub fn cap(&self, sent: Time) -> Cap {
        self.lease_end(sent) - 1 + self.reach
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
    /// Which start of the server's postmaster.
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

    fn of(caller: &Caller) -> Principal {
        Principal {
            server: caller.server,
            secret: caller.secret,
            boot: caller.boot,
        }
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
    pub incarnation: Incarnation,
}

/// One worker id's row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Row {
    /// `None`: never held.
    pub holder: Option<Principal>,
    pub fence: Fence,
    pub expires_at: Time,
    /// The highest cap any holder recorded (a release sets its final one).
    pub cap: Cap,
    /// The cap the row had when the current holder was granted it (a repeated confirmation is
    /// answered it again).
    pub granted_above: Cap,
    /// Given back by its holder: in which incarnation (`released_in` in the SQL).
    pub released: Option<Incarnation>,
    pub pending: Option<Pending>,
    /// The incarnation that made the holder's last grant or renewal, while that is still the
    /// row's last write: any other write (a claim waiting on it, a release) clears it, and a
    /// restore brings the copy's, of another incarnation. `held_proof` in the SQL, where
    /// `untouched()` tells the same by the row's transaction id.
    pub held_in: Option<Incarnation>,
}

impl Row {
    /// Held, not given back, and its lease still running on the registry's clock.
    pub fn is_live(&self, now: Time) -> bool {
        self.holder.is_some() && self.released.is_none() && now <= self.expires_at
    }

    fn is_held_by(&self, caller: &Caller) -> bool {
        self.holder.is_some_and(|h| h.is(caller))
    }

    /// Held by this very start of the caller (its secret and its boot), not given back.
    fn is_held_by_start(&self, caller: &Caller) -> bool {
        self.is_held_by(caller)
            && self.released.is_none()
            && self.holder.is_some_and(|h| h.boot == caller.boot)
    }

    /// Every grant: the caller holds the row under `fence`, its lease counted from now; any
    /// pending claim is void (the row was written). `incarnation`: the registry's, which made it.
    #[allow(clippy::too_many_arguments)]
    fn grant(
        &mut self,
        cfg: &Config,
        now: Time,
        caller: &Caller,
        fence: Fence,
        cap: Cap,
        incarnation: Incarnation,
    ) -> Answer {
        let predecessor_cap = self.cap;
        *self = Row {
            holder: Some(Principal::of(caller)),
            fence,
            expires_at: now + cfg.ttl,
            cap: self.cap.max(cap),
            granted_above: predecessor_cap,
            released: None,
            pending: None,
            held_in: Some(incarnation),
        };
        Answer::Granted {
            fence,
            predecessor_cap,
        }
    }

    /// A renewal (or a grant answered again): the holder's lease again from now, its cap
    /// recorded, made in `incarnation`.
    fn renew(&mut self, cfg: &Config, now: Time, fence: Fence, cap: Cap, incarnation: Incarnation) {
        self.fence = fence;
        self.expires_at = self.expires_at.max(now + cfg.ttl);
        self.cap = self.cap.max(cap);
        self.pending = None;
        self.held_in = Some(incarnation);
    }
}

/// What the registry answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Answer {
    /// `claim` (at once) or `confirm`: the worker id is the caller's under `fence`; its first
    /// id must be above `predecessor_cap`.
    Granted { fence: Fence, predecessor_cap: Cap },
    /// `claim` (or an early `confirm`): wait `wait` on your own clock, then confirm `token`.
    Wait { token: Fence, wait: Time },
    /// `renew`: renewed under the new fence.
    Renewed { fence: Fence },
    /// `claim`, `confirm`: the caller's clock is more than `max_skew` from the registry's (see
    /// [`Rules::claim_checks_skew`]); `renew`: ahead of it by more (see
    /// [`Rules::renew_checks_skew`]). Refused before the lease is read: the keeper asks again
    /// as itself, as after a lost reply.
    Skew,
    /// `release`: given back.
    Released,
    /// `claim`: another server holds it, or another claim waits on it.
    Held,
    /// The lease (or the claim) is not the caller's: claim anew.
    Lost,
    /// The registry refuses everything (frozen: it saw a caller with a higher epoch). Only
    /// under [`Rules::freeze`] or [`Rules::epochs`].
    Frozen,
}

/// A request a server sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Request {
    /// Claim `worker` under `token`. `continuation`: the fence of the claimer's own lease of it
    /// (this start's in memory, or an earlier start's from its durable record), sent only while
    /// that lease is live by its own clock. `clock`: the claimer's clock as it sent it
    /// (`p_clock_ms`), as in every request but a release.
    Claim {
        worker: WorkerId,
        token: Fence,
        continuation: Option<Fence>,
        cap: Cap,
        clock: Time,
    },
    Confirm {
        worker: WorkerId,
        token: Fence,
        cap: Cap,
        clock: Time,
    },
    /// Renew from fence `prev` to fence `new`. `clock`: the holder's clock as it sent it
    /// (`p_clock_ms`); `ran_out`: its lease end had passed on that clock (`p_ran_out`).
    Renew {
        worker: WorkerId,
        prev: Fence,
        new: Fence,
        cap: Cap,
        clock: Time,
        ran_out: bool,
    },
    /// Give the worker id back: the holder stopped, and issued nothing above `cap`.
    /// `incarnation`: the one that answered it last.
    Release {
        worker: WorkerId,
        fence: Fence,
        cap: Cap,
        incarnation: Incarnation,
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
    pub incarnation: Incarnation,
    /// The incarnation it was installed in (`installed_in`): only while it still runs in it is
    /// a worker id never held proof that nobody holds it.
    pub installed_in: Incarnation,
    /// Old rules only.
    pub epoch: u16,
    /// Rules with the freeze ([`Rules::freeze`]) or the epochs only.
    pub frozen: bool,
}

impl Registry {
    pub fn new(workers: usize) -> Registry {
        Registry {
            rows: vec![Row::default(); workers],
            incarnation: 0,
            installed_in: 0,
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
            Request::Claim { clock, .. } | Request::Confirm { clock, .. }
                if cfg.rules.claim_checks_skew && clock.abs_diff(now) > cfg.max_skew =>
            {
                // (see `Rules::claim_checks_skew`)
                Answer::Skew
            }
            Request::Claim {
                worker,
                token,
                continuation,
                cap,
                ..
            } => self.claim(cfg, now, caller, worker, token, continuation, cap),
            Request::Confirm {
                worker, token, cap, ..
            } => self.confirm(cfg, now, caller, worker, token, cap),
            Request::Renew {
                worker,
                prev,
                new,
                cap,
                clock,
                ran_out,
            } => self.renew(cfg, now, caller, worker, prev, new, cap, clock, ran_out),
            Request::Release {
                worker,
                fence,
                cap,
                incarnation,
            } => self.release(cfg, caller, worker, fence, cap, incarnation),
        }
    }

    /// Every call is refused by a frozen registry. Old rules: a call freezes one behind the
    /// caller's epoch, and bumps the epoch. (The reason it fails: the fleet's role raises the
    /// epoch at will, so a registry restored on the same timeline is pushed past every epoch a
    /// server saw, and never freezes.)
    fn open(&mut self, cfg: &Config, caller: &Caller) -> Result<(), Answer> {
        if self.frozen {
            return Err(Answer::Frozen);
        }
        if !cfg.rules.epochs {
            return Ok(());
        }
        if caller.seen_epoch > self.epoch {
            self.frozen = true;
            return Err(Answer::Frozen);
        }
        self.epoch += 1;
        Ok(())
    }

    /// Whether the registry's word `written_in` still counts under `rule`.
    fn word_counts(&self, rule: AtOnce, written_in: Incarnation) -> bool {
        match rule {
            AtOnce::InItsIncarnation => written_in == self.incarnation,
            AtOnce::Always => true,
        }
    }

    /// A claim of `worker`: granted at once in cases A to D (see the module), else recorded as
    /// a pending claim, to be confirmed after `W`.
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
        let rules = cfg.rules;
        let row = self.rows[worker as usize];
        let proven = row.is_held_by(caller) && row.released.is_none();
        let same_start = row.is_held_by_start(caller);
        // The last grant or renewal of this lease was this very request of this start, whose
        // answer was lost.
        let replay = same_start && row.fence == token;
        let runs = !rules.renew_checks_expiry || now <= row.expires_at;
        let continues = continuation == Some(row.fence);
        // A: this start going on with the fence it holds (it sends one only while its lease is
        // live by its own clock), while the lease still runs here (a request delayed past the
        // lease's end, met by a copy restored without a trace, would otherwise extend a lease
        // another server may have waited out and taken since).
        let a =
            same_start && (continues || replay) && (runs || (replay && rules.replay_skips_expiry));
        // B: an earlier start on the same machine run, with the fence its own durable record
        // says still runs by its boot clock. PostgreSQL refuses to start while any process of
        // the earlier start lives, and nobody else can have been granted it within its lease.
        // The registry's word alone (the row names the caller) is not enough: a copy restored
        // without a trace names holders whose worker id changed hands since.
        let b = proven && !same_start && continues && runs;
        // Old: another start of the holder, on the row's word.
        let old = rules.continuation_on_registry_word && proven && !same_start;
        // C, D: the registry's word that nobody holds it, only where it cannot have been lost.
        let c = row.holder.is_none() && self.word_counts(rules.never_held, self.installed_in);
        let d = row
            .released
            .is_some_and(|inc| self.word_counts(rules.released, inc));
        let incarnation = self.incarnation;
        let row = &mut self.rows[worker as usize];
        if a || b || old || c || d {
            if replay {
                // Answered as the first time: the fence unchanged, the lease from now.
                row.renew(cfg, now, token, cap, incarnation);
                return Answer::Granted {
                    fence: token,
                    predecessor_cap: row.granted_above,
                };
            }
            return row.grant(cfg, now, caller, token, cap, incarnation);
        }
        // The caller's own server (its identity, not its secret) may claim it even while it
        // runs (its claim is voided by the holder's next renewal); anyone else only once it ran
        // out here, or was given back.
        let mine = row.holder.is_some_and(|h| h.server == caller.server);
        if row.is_live(now) && !mine {
            return Answer::Held;
        }
        if let Some(p) = row.pending {
            // One claim at a time: another's waits until its claimant gave up (it would have
            // confirmed within the wait and a lock-delay more). Only liveness is at stake.
            if p.claimer.server != caller.server && now <= p.since + cfg.wait() + cfg.lock_wait() {
                return Answer::Held;
            }
        }
        row.pending = Some(Pending {
            claimer: Principal::of(caller),
            token,
            since: now,
            incarnation,
        });
        // A write of its own: the holder's last grant or renewal is no longer the row's last.
        row.held_in = None;
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
        // (A claim still waiting under this token is no confirmation granted: a holder whose
        // grant's answer was lost claims again under the same token once that lease ran out,
        // and its confirmation is then a confirmation, as the SQL tells by its request number.)
        let waiting = row
            .pending
            .is_some_and(|p| p.token == token && p.claimer.is(caller));
        if row.is_held_by_start(caller) && row.fence == token && !waiting {
            // This confirmation again, granted and its answer lost: answered as the first
            // time, its lease from now, only while the grant's lease still runs here (else the
            // SQL claims it again for the caller; here: claim anew).
            if now > row.expires_at {
                return Answer::Lost;
            }
            row.renew(cfg, now, token, cap, incarnation);
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
        let same_incarnation =
            p.incarnation == incarnation || !cfg.rules.restore_changes_incarnation;
        if !(p.claimer.is(caller) && p.token == token && same_incarnation) {
            return Answer::Lost;
        }
        // The claimer's own clock is what proves the wait; the registry's must agree (it holds
        // back a caller that did not wait, such as the fleet's role).
        // (Under the old rules a claim outlives a restore, whose clock may be behind.)
        let waited = now.saturating_sub(p.since);
        if waited < cfg.lock_wait() {
            return Answer::Wait {
                token,
                wait: cfg.lock_wait() - waited,
            };
        }
        row.grant(cfg, now, caller, token, cap, incarnation)
    }

    /// A renewal by the holder, from fence `prev` to `new`, sent at `clock` on its own clock,
    /// its lease run out there if `ran_out`.
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
        clock: Time,
        ran_out: bool,
    ) -> Answer {
        let rules = cfg.rules;
        let incarnation = self.incarnation;
        // Whether the lease runs is read on the registry's clock, which counts only while it
        // is not behind the holder's by more than the skew (see `Rules::renew_checks_skew`).
        if rules.renew_checks_skew && clock > now + cfg.max_skew {
            return Answer::Skew;
        }
        let row = &mut self.rows[worker as usize];
        // Only this start of the holder, by its secret: the fleet's role posing as it is told
        // `lost`. A given-back lease stays given back.
        if !row.is_held_by_start(caller) {
            return Answer::Lost;
        }
        // A lease that ran out on the holder's clock is renewed on the registry's word that
        // nobody took it meanwhile only where this incarnation made the holder's last grant or
        // renewal and nothing wrote the row since (see `Rules::ran_out_needs_own_write`).
        if rules.ran_out_needs_own_write && ran_out && row.held_in != Some(incarnation) {
            return Answer::Lost;
        }
        if rules.epochs && prev > row.fence && new != row.fence {
            // Old: the holder brings a fence the registry never gave: it went back in time.
            self.frozen = true;
            return Answer::Frozen;
        }
        // `prev`: the lease as the holder last knew it. `new`: the same renewal asked again,
        // its answer lost. Any other fence: the row changed hands, or the registry was restored
        // to a copy from before the holder's last renewal (a fence above the row's, that this
        // history never gave: the worker id may have changed hands in the one the restore threw
        // away). `lost`, as the SQL's `renew` answers both since registry format 3 (format 2
        // froze on the second): the holder stops, and claims again through the lock-delay.
        let replay = row.fence == new;
        if row.fence != prev && !replay {
            return Answer::Lost;
        }
        // A lease that ran out here stays out: its worker id may have changed hands in a
        // history a restore threw away (see `Rules::renew_checks_expiry`).
        if rules.renew_checks_expiry
            && now > row.expires_at
            && !(replay && rules.replay_skips_expiry)
        {
            return Answer::Lost;
        }
        row.renew(cfg, now, new, cap, incarnation);
        Answer::Renewed { fence: new }
    }

    /// The holder gives its worker id back, having issued nothing above `cap`: recorded, with
    /// the incarnation that recorded it (D: only that one hands it over at once).
    pub fn release(
        &mut self,
        cfg: &Config,
        caller: &Caller,
        worker: WorkerId,
        fence: Fence,
        cap: Cap,
        seen: Incarnation,
    ) -> Answer {
        let incarnation = self.incarnation;
        let row = &mut self.rows[worker as usize];
        if !(row.is_held_by_start(caller) && row.fence == fence) {
            return Answer::Lost;
        }
        row.released = Some(
            if cfg.rules.release_names_incarnation && seen != incarnation {
                // A release first sent to another incarnation (asked again after a restore):
                // given back, but not for D.
                NO_INCARNATION
            } else {
                incarnation
            },
        );
        row.cap = cap;
        row.pending = None;
        row.held_in = None;
        Answer::Released
    }

    /// The registry's data replaced by an earlier copy of itself. Under the new rules the copy
    /// serves as a new incarnation (`fresh`); under the old ones, a restore on the same
    /// timeline keeps the registry's identity.
    pub fn restore(&mut self, cfg: &Config, copy: &Registry, fresh: Incarnation) {
        *self = copy.clone();
        if cfg.rules.restore_changes_incarnation {
            self.incarnation = fresh;
        }
    }
}

/// A server's durable record of its running lease (`snowflake_ext.lease` in its data
/// directory): written at every grant and renewal, removed when the lease is given back or
/// lost. What lets a later start go on at once (B).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Record {
    pub worker: WorkerId,
    pub fence: Fence,
    /// Lease end on the server's own (boot) clock.
    pub lease_end: Time,
    /// The start that wrote it (a start never reads its own: its memory is newer).
    pub boot: u16,
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
    /// Holds the worker id; live until `lease_end` on its own clock. Its ids run from `first`,
    /// with its clock, up to `cap`.
    Holding {
        worker: WorkerId,
        fence: Fence,
        lease_end: Time,
        first: Cap,
        cap: Cap,
    },
    /// Stopped, giving the worker id back.
    Releasing {
        worker: WorkerId,
        fence: Fence,
        cap: Cap,
        incarnation: Incarnation,
    },
}

/// A server's lease keeper: the holder's rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Keeper {
    /// Which start of the server this is.
    pub boot: u16,
    pub phase: Phase,
    /// The request in flight, not answered yet (its answer lost, or refused by a frozen
    /// registry): whatever the keeper asks next, it asks under it, so that the registry knows
    /// a request it already handled (`lease.request` in shared memory: a crash forgets it).
    pub request: Option<Fence>,
    /// Durable.
    pub record: Option<Record>,
    /// Durable: the highest id it issued of a worker id (the generator's durable mark; the
    /// checker moves it on as the holder issues).
    pub mark: Option<(WorkerId, Cap)>,
    /// The registry's incarnation in its last answer (in memory).
    pub incarnation: Incarnation,
    /// Durable, old rules only.
    pub seen_epoch: u16,
}

impl Keeper {
    pub fn new() -> Keeper {
        Keeper {
            boot: 0,
            phase: Phase::Idle,
            request: None,
            record: None,
            mark: None,
            incarnation: 0,
            seen_epoch: 0,
        }
    }

    /// Whether it may mint at `now` on its own clock: it holds a lease whose end it has not
    /// reached. A holder is live only until the send time of its last successful renewal or
    /// grant, plus `ttl - margin`; the registry counts `ttl` from later, so the holder always
    /// stops before the registry lets the lease go.
    pub fn is_live(&self, now: Time) -> bool {
        self.live_worker(now).is_some()
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

    /// A crash and restart: memory lost (the request in flight with it), the durable record
    /// kept; a new start.
    pub fn restart(&mut self) {
        self.phase = Phase::Idle;
        self.request = None;
        self.boot += 1;
    }

    /// What it may send at `now` (own clock), given a `fresh` value for a new token or fence
    /// (unless a request is in flight: then under it). Each choice says whether it used `fresh`.
    pub fn choices(
        &self,
        cfg: &Config,
        workers: u8,
        now: Time,
        fresh: Fence,
    ) -> Vec<(Request, bool)> {
        let cap = cfg.cap(now);
        let (next, used) = match self.request {
            Some(r) => (r, false),
            None => (fresh, true),
        };
        match self.phase {
            Phase::Claiming { worker, token } => vec![(self.claim(worker, token, now, cap), false)],
            Phase::Waiting { until, .. } if now < until => vec![],
            Phase::Waiting { worker, token, .. } | Phase::Confirming { worker, token } => {
                vec![(
                    Request::Confirm {
                        worker,
                        token,
                        cap,
                        clock: now,
                    },
                    false,
                )]
            }
            // While live: renews, gives the worker id back at a clean stop, or claims it again
            // with the fence it holds (A).
            Phase::Holding {
                worker,
                fence,
                first,
                cap: old_cap,
                ..
            } if self.is_live(now) => vec![
                (
                    Request::Renew {
                        worker,
                        prev: fence,
                        new: next,
                        cap,
                        clock: now,
                        ran_out: false,
                    },
                    used,
                ),
                (
                    // Its final cap: the highest id it issued, by now.
                    Request::Release {
                        worker,
                        fence,
                        cap: old_cap.min((now + cfg.reach).max(first)),
                        incarnation: self.incarnation,
                    },
                    false,
                ),
                (self.claim(worker, next, now, cap), used),
            ],
            // Ran out (stuck, or cut off): stopped; renews once more, saying so (the registry
            // decides), or claims any worker id (with no fence: its lease no longer runs).
            Phase::Holding { worker, fence, .. } => {
                let mut out = vec![(
                    Request::Renew {
                        worker,
                        prev: fence,
                        new: next,
                        cap,
                        clock: now,
                        ran_out: true,
                    },
                    used,
                )];
                out.extend((0..workers).map(|w| (self.claim(w, next, now, cap), used)));
                out
            }
            Phase::Releasing {
                worker,
                fence,
                cap,
                incarnation,
            } => vec![(
                Request::Release {
                    worker,
                    fence,
                    cap,
                    incarnation,
                },
                false,
            )],
            Phase::Idle => (0..workers)
                .map(|w| (self.claim(w, next, now, cap), used))
                .collect(),
        }
    }

    /// A claim, with the fence of its own lease of `worker` if that lease is live by its own
    /// clock: this start's (in memory), or an earlier start's (its durable record). The only
    /// ground for going on at once (A, B).
    fn claim(&self, worker: WorkerId, token: Fence, now: Time, cap: Cap) -> Request {
        let in_memory = match self.phase {
            Phase::Holding {
                worker: w,
                fence,
                lease_end,
                ..
            } if w == worker && now < lease_end => Some(fence),
            _ => None,
        };
        let recorded = self
            .record
            .filter(|r| r.worker == worker && r.boot != self.boot && now < r.lease_end)
            .map(|r| r.fence);
        Request::Claim {
            worker,
            token,
            continuation: in_memory.or(recorded),
            cap,
            clock: now,
        }
    }

    /// It sends `req`.
    pub fn sent(&mut self, cfg: &Config, req: &Request) {
        match *req {
            Request::Claim { token, .. } | Request::Renew { new: token, .. } => {
                self.request = Some(token)
            }
            _ => {}
        }
        self.phase = match (*req, self.phase) {
            // A holder still live keeps minting while it renews or claims it again.
            (Request::Renew { .. }, p @ Phase::Holding { .. }) => p,
            // (A) its claim of the worker id it holds, with that lease's fence.
            (
                Request::Claim {
                    worker,
                    continuation: Some(f),
                    ..
                },
                p @ Phase::Holding {
                    worker: w, fence, ..
                },
            ) if w == worker && f == fence => p,
            (Request::Claim { worker, token, .. }, _) => Phase::Claiming { worker, token },
            (Request::Confirm { worker, token, .. }, _) => Phase::Confirming { worker, token },
            (
                Request::Release {
                    worker,
                    fence,
                    cap,
                    incarnation,
                },
                _,
            ) => {
                // It stops minting before it says so, and (new rules) forgets its lease first.
                if cfg.rules.record_removed_before_release {
                    self.record = None;
                }
                Phase::Releasing {
                    worker,
                    fence,
                    cap,
                    incarnation,
                }
            }
            (Request::Renew { .. }, p) => p,
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
        if matches!(answer, Answer::Frozen | Answer::Skew) {
            // Refused before the lease was read: asked again as itself, as after a lost reply.
            // (A holder whose lease ran out is stopped already; the real keeper forgets that
            // lease and claims, which the model's keeper may do as well.)
            return None;
        }
        self.request = None;
        match (*req, *answer) {
            (
                Request::Claim { cap, .. } | Request::Confirm { cap, .. },
                Answer::Granted {
                    fence,
                    predecessor_cap,
                },
            ) => {
                if let Phase::Holding {
                    worker: w, first, ..
                } = self.phase
                {
                    if w == worker {
                        // A: this start going on with its lease; its ids go on as they were.
                        self.hold(cfg, worker, fence, sent, first, cap);
                        return None;
                    }
                }
                let own = self.mark.filter(|m| m.0 == worker).map_or(0, |m| m.1 + 1);
                let first = (predecessor_cap + 1).max(own).max(now);
                self.hold(cfg, worker, fence, sent, first, cap.max(first));
                Some(first)
            }
            (Request::Renew { cap, .. }, Answer::Renewed { fence }) => {
                let first = match self.phase {
                    Phase::Holding { first, .. } => first,
                    _ => cap,
                };
                self.hold(cfg, worker, fence, sent, first, cap);
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
            (Request::Renew { .. }, Answer::Lost) | (Request::Release { .. }, Answer::Released) => {
                // Lost, or given back: stop at once, and forget the lease (a later start claims
                // like any other server).
                self.record = None;
                self.phase = Phase::Idle;
                None
            }
            (Request::Claim { .. }, _) if self.is_live(now) => {
                // Its claim of the worker id it holds refused: it goes on until its lease end.
                None
            }
            _ => {
                self.phase = Phase::Idle;
                None
            }
        }
    }

    /// Holds `worker` under `fence` from a request sent at `sent` with `cap`; durably first.
    fn hold(
        &mut self,
        cfg: &Config,
        worker: WorkerId,
        fence: Fence,
        sent: Time,
        first: Cap,
        cap: Cap,
    ) {
        let lease_end = cfg.lease_end(sent);
        let earlier = self.mark.filter(|m| m.0 == worker).map_or(0, |m| m.1);
        let cap = cap.max(earlier);
        self.record = Some(Record {
            worker,
            fence,
            lease_end,
            boot: self.boot,
        });
        self.mark = Some((worker, earlier.max(first)));
        self.phase = Phase::Holding {
            worker,
            fence,
            lease_end,
            first,
            cap,
        };
    }
}

impl Default for Keeper {
    fn default() -> Self {
        Keeper::new()
    }
}

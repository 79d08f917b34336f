//! Worker ids leased from a registry (`snowflake.worker_id = 'auto'`), and the background
//! worker that leases them, the *lease keeper*. The rules are `snowflake_core::lease`; the
//! registry's SQL is `registry.rs`; the connection is `libpq.rs`.
//!
//! The keeper claims a worker id for this server before its first id, and renews it every
//! third of `snowflake.lease_ttl`, recording with each renewal the cap below which this server
//! will issue (the mark writer never raises a mark above it). A new lease is used only once
//! its worker has been raised above the last holder's cap (`snowflake_restore_mark` of that
//! worker, through the mailbox) and the new cap is in the registry. Until then, and from the
//! moment a lease cannot be renewed in time (counted on the boot clock from when the request
//! was sent), `snowflake_nextval()` refuses with 55000 and the reason. The hot path reads the
//! leased worker from shared memory, one load like the setting it replaces; the slow path,
//! which every worker takes at least once a second, stops a lease that ran out even if the
//! keeper is stuck.
//!
//! A server is told apart from a copy of itself by its system identifier, host name, port
//! and data directory together: a restart, or a crash, gets its worker id back at once (above
//! the cap it recorded); a base backup or a copied data directory started elsewhere gets
//! another; a standby promoted after its primary (a later timeline) gets another too, and
//! releases the lease of its predecessor if that no longer renews it, which then leases
//! nothing again (`registry.rs`). Every network wait is bounded and answers SIGTERM.

pub mod libpq;
mod registry;

use crate::control::{State, Text};
use crate::mailbox::{self, Answer, Ask};
use crate::shmem::{self, ControlGuard, Shared};
use crate::{clock, errors, settings};
use libpq::{Connection, Failure};
use pgrx::bgworkers::{BackgroundWorkerBuilder, BgWorkerStartTime};
use pgrx::prelude::*;
use pgrx::PgSqlErrorCode;
use registry::{Claimed, Holder, Registry};
use snowflake_core::generator::{CLOSED, MARK_AHEAD_MS};
use snowflake_core::lease::{self as rules, Timing};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::*};
use std::time::{Duration, Instant};

const NAME: &str = "snowflake_ext lease keeper";
/// `leased_worker` while no worker id is leased.
pub const NONE: u32 = u32::MAX;
/// How long one exchange with the registry may take.
const EXCHANGE: Duration = Duration::from_secs(5);
/// How long a connection may take.
const CONNECT: Duration = Duration::from_secs(10);
/// How long a clean stop waits to give the lease back. SIGTERM has already arrived, so this
/// exchange alone does not answer it; the postmaster waits for us that long at most.
const RELEASE_AT_STOP: Duration = Duration::from_secs(2);
/// How soon a claim is tried again when the mark writer has not loaded the marks yet (a
/// claim needs them: the worker is raised above its last holder's ids).
const MARKS_POLL_MS: u64 = 500;

/// The lease in shared memory: what the hot path and the slow path read.
pub struct LeaseShared {
    /// The leased worker id (`NONE`: none usable now).
    pub worker: AtomicU32,
    /// Until when (boot clock, ms) it may be used.
    pub usable_until: AtomicU64,
}

impl Default for LeaseShared {
    fn default() -> LeaseShared {
        LeaseShared::new()
    }
}

impl LeaseShared {
    pub const fn new() -> LeaseShared {
        LeaseShared {
            worker: AtomicU32::new(NONE),
            usable_until: AtomicU64::new(0),
        }
    }
}

/// Where the lease stands, for `snowflake_status()` and for errors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Standing {
    /// `snowflake.worker_id` is not `auto`.
    #[default]
    NotUsed,
    Claiming,
    Held,
    /// The registry cannot be reached (or refuses); retrying.
    Unreachable,
    /// No worker id of the range is free.
    Exhausted,
    /// A standby promoted after this server took over: it leases nothing.
    Superseded,
}

/// The lease as `snowflake_status()` shows it, in the control block.
#[derive(Clone, Copy, Default)]
pub struct Status {
    pub standing: Standing,
    pub worker: Option<u32>,
    /// Unix ms at which the registry lets the lease go, as estimated here.
    pub expires_unix_ms: i64,
    pub holder: Text,
    pub registry: Text,
    pub why: Text,
}

/// The worker id `snowflake_nextval()` uses under `auto`, or an error that says why there is
/// none. One load on the hot path.
#[inline]
pub fn worker(shared: &Shared) -> u32 {
    let w = shared.lease.worker.load(Acquire);
    if w == NONE {
        refuse(shared);
    }
    w
}

/// The leased worker id, if one is usable now.
pub fn leased() -> Option<i32> {
    if !settings::is_preloaded() {
        return None;
    }
    let w = shmem::shared().lease.worker.load(Acquire);
    (w != NONE).then_some(w as i32)
}

/// On the slow path: a lease that ran out (the keeper could not renew in time) is stopped
/// here, whatever the keeper is doing, and the call refused.
pub fn check(shared: &Shared, worker: u32) {
    if settings::worker() != settings::AUTO {
        return;
    }
    if shared.lease.worker.load(Acquire) != worker {
        refuse(shared);
    }
    if clock::boot_ms() >= shared.lease.usable_until.load(Acquire) {
        stop_if_ran_out(shared, worker);
        if shared.lease.worker.load(Acquire) != worker {
            refuse(shared);
        }
    }
}

/// Stops using the lease of `worker`: nothing more is issued under it.
fn stop_using(shared: &Shared, worker: u32, why: &str) {
    stop_locked(shared, &mut shared.control(), worker, why);
}

/// Stops using the lease of `worker` if its usable time is over. Under the control lock, as
/// `Keeper::use_lease`: a renewal that the keeper completes while a session stops the lease
/// (it ran out while the renewal was on its way) either comes first and is kept, or finds the
/// worker closed and opens it again.
fn stop_if_ran_out(shared: &Shared, worker: u32) {
    let mut control = shared.control();
    if clock::boot_ms() >= shared.lease.usable_until.load(Acquire) {
        stop_locked(shared, &mut control, worker, RAN_OUT);
    }
}

fn stop_locked(shared: &Shared, control: &mut ControlGuard<'_>, worker: u32, why: &str) {
    if shared
        .lease
        .worker
        .compare_exchange(worker, NONE, AcqRel, Acquire)
        .is_ok()
    {
        shared.slot(worker).word.fetch_or(CLOSED, AcqRel);
        control.lease.why.set(why);
        control.lease.worker = None;
    }
}

/// Why a lease is stopped when its usable time is over.
const RAN_OUT: &str = "its lease ran out before it could be renewed";

#[cold]
fn refuse(shared: &Shared) -> ! {
    let (standing, why, registry) = {
        let control = shared.control();
        (
            control.lease.standing,
            control.lease.why.get(),
            control.lease.registry.get(),
        )
    };
    let (reason, hint) = match standing {
        Standing::Exhausted => (
            format!(
                "every worker id of snowflake.worker_range ({}) is leased by another server",
                settings::worker_range()
            ),
            "Widen snowflake.worker_range, or release a worker id no server uses any more (see \
             snowflake_registry.lease_list in the registry).",
        ),
        Standing::Superseded => (
            format!("a standby promoted after this server replaced it: {why}"),
            "This server was replaced; rebuild it as a standby of its successor, or, if it must \
             mint again, delete its row from snowflake_registry.superseded in the registry.",
        ),
        Standing::Unreachable => (
            format!("the registry ({registry}) cannot be reached: {why}"),
            "The lease keeper retries on its own; check snowflake.registry, the registry server, \
             and the registry role's rights (see the server log).",
        ),
        _ => (
            if why.is_empty() {
                "no worker id is leased yet".to_string()
            } else {
                why
            },
            "The lease keeper background worker leases one from snowflake.registry before the \
             first id; see snowflake_status() and the server log.",
        ),
    };
    errors::raise(
        PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        format!("snowflake.worker_id is auto, and this server holds no worker id: {reason}"),
        Some("Ids are minted only under a lease of a worker id that no other server holds.".into()),
        hint,
    )
}

/// The worker id and the lease, as `snowflake_status()` shows them.
pub struct Shown {
    pub worker: Option<i32>,
    pub source: &'static str,
    pub holder: Option<String>,
    pub expires: Option<TimestampWithTimeZone>,
    pub registry: Option<String>,
}

pub fn status(shared: &Shared) -> Shown {
    match settings::worker() {
        settings::AUTO => {
            let control = shared.control();
            let l = &control.lease;
            let standing = match l.standing {
                Standing::NotUsed => "not used",
                Standing::Claiming => "claiming",
                Standing::Held => "held",
                Standing::Unreachable => "unreachable",
                Standing::Exhausted => "exhausted",
                Standing::Superseded => "superseded",
            };
            let why = l.why.get();
            let server = l.registry.get();
            let registry = format!(
                "{standing}{}{}",
                if server.is_empty() {
                    String::new()
                } else {
                    format!(" ({server})")
                },
                if why.is_empty() {
                    String::new()
                } else {
                    format!(": {why}")
                }
            );
            let worker = shared.lease.worker.load(Acquire);
            Shown {
                worker: (worker != NONE).then_some(worker as i32),
                source: "registry",
                holder: Some(l.holder.get()).filter(|h| !h.is_empty()),
                expires: (worker != NONE)
                    .then(|| {
                        TimestampWithTimeZone::try_from(
                            snowflake_core::layout::pg_micros_from_unix_ms(l.expires_unix_ms),
                        )
                        .ok()
                    })
                    .flatten(),
                registry: Some(registry),
            }
        }
        settings::UNSET => Shown {
            worker: None,
            source: "unset",
            holder: None,
            expires: None,
            registry: None,
        },
        w => Shown {
            worker: Some(w),
            source: "setting",
            holder: None,
            expires: None,
            registry: None,
        },
    }
}

/// Registers the keeper; called from `_PG_init` while preloading.
pub fn register() {
    // SAFETY: a plain read of a flag the postmaster set before loading libraries.
    if unsafe { pg_sys::IsBinaryUpgrade } {
        return;
    }
    BackgroundWorkerBuilder::new(NAME)
        .set_type(NAME)
        .set_library("snowflake_ext")
        .set_function("snowflake_lease_keeper_main")
        .set_start_time(BgWorkerStartTime::RecoveryFinished)
        .set_restart_time(Some(Duration::from_secs(1)))
        .load();
}

/// Set by SIGTERM.
static TERMINATE: AtomicBool = AtomicBool::new(false);

// SAFETY: installed as a signal handler only; it does nothing a handler may not.
unsafe extern "C-unwind" fn on_signal(signal: i32) {
    // SAFETY: async-signal-safe work only: flags, and SetLatch; errno is preserved.
    unsafe {
        let saved = *libc::__errno_location();
        if signal == libc::SIGHUP {
            pg_sys::ConfigReloadPending = 1;
        } else {
            TERMINATE.store(true, SeqCst);
        }
        pg_sys::SetLatch(pg_sys::MyLatch);
        *libc::__errno_location() = saved;
    }
}

fn terminating() -> bool {
    TERMINATE.load(SeqCst)
}

#[pg_guard]
// SAFETY: the name is unique to this library; the postmaster finds the entry point by it.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn snowflake_lease_keeper_main(_arg: pg_sys::Datum) {
    // SAFETY: installing handlers in our own process before unblocking signals.
    unsafe {
        for signal in [libc::SIGTERM, libc::SIGHUP] {
            #[cfg(not(feature = "pg18"))]
            pg_sys::pqsignal(signal, Some(on_signal));
            #[cfg(feature = "pg18")]
            pg_sys::pqsignal_be(signal, Some(on_signal));
        }
        pg_sys::BackgroundWorkerUnblockSignals();
    }
    Keeper::new(shmem::shared()).run();
}

/// A lease held.
#[derive(Clone, Copy)]
struct Held {
    worker: u32,
    fence: i64,
    /// When the request that got or last renewed it was sent (boot clock, ms).
    sent_at: u64,
}

struct Keeper {
    shared: &'static Shared,
    me: Holder,
    conn: Option<Connection>,
    /// The `snowflake.registry` the last connection was opened with.
    connected_with: String,
    /// Renew at the next step, not when due (the registry setting changed).
    renew_now: bool,
    held: Option<Held>,
    /// Attempts that failed in a row, and when to try again.
    failures: u32,
    next_attempt: u64,
}

impl Keeper {
    fn new(shared: &'static Shared) -> Keeper {
        Keeper {
            shared,
            me: identity(shared),
            conn: None,
            connected_with: String::new(),
            renew_now: false,
            held: None,
            failures: 0,
            next_attempt: 0,
        }
    }

    fn timing(&self) -> Timing {
        Timing {
            ttl_ms: settings::LEASE_TTL_MS.get().max(rules::MIN_TTL_MS as i32) as u64,
        }
    }

    fn run(&mut self) -> ! {
        // A lease this server's previous keeper held goes on (it is in shared memory).
        let w = self.shared.lease.worker.load(Acquire);
        if w != NONE {
            stop_using(self.shared, w, "the lease keeper restarted");
        }
        loop {
            if terminating() {
                self.release();
                errors::log(
                    format!("snowflake: {NAME} stopping on SIGTERM"),
                    "It is restarted within a second unless the server is shutting down.",
                );
                // SAFETY: the documented way for a background worker to exit; with code 1 the
                // postmaster starts it again (0 would end it for good: a stray SIGTERM would
                // stop minting until the server restarts).
                unsafe { pg_sys::proc_exit(1) };
            }
            // SAFETY: ConfigReloadPending is set by the SIGHUP handler in this process.
            unsafe {
                if pg_sys::ConfigReloadPending != 0 {
                    pg_sys::ConfigReloadPending = 0;
                    pg_sys::ProcessConfigFile(pg_sys::GucContext::PGC_SIGHUP);
                    self.reloaded();
                }
            }
            let wake_at = if settings::worker() != settings::AUTO {
                self.release();
                self.set_status(Standing::NotUsed, "");
                None
            } else if settings::registry().trim().is_empty() {
                self.set_status(Standing::Unreachable, "snowflake.registry is not set");
                None
            } else {
                Some(self.step())
            };
            self.sleep_until(wake_at);
        }
    }

    /// After a reload. A worker id the new `snowflake.worker_range` leaves out is given back
    /// (a new one is claimed at the next step), while the connection it was leased over is
    /// still open. A new `snowflake.registry` is used at once: the connection is closed and
    /// the lease renewed through the new string, so an operator sees at once whether it works
    /// (a registry that does not know the lease takes it away, and a new one is claimed).
    fn reloaded(&mut self) {
        if settings::worker() != settings::AUTO {
            return;
        }
        if let Some(held) = self.held {
            let range = settings::worker_range();
            if !range.contains(held.worker) {
                errors::log(
                    format!(
                        "snowflake: {NAME}: worker id {} is outside snowflake.worker_range ({range}): it is given back",
                        held.worker
                    ),
                    "A worker id inside the range is claimed next.",
                );
                self.release();
                self.set_status(Standing::Claiming, "");
                self.next_attempt = 0;
            }
        }
        if self.connected_with != settings::registry() {
            self.conn = None;
            self.renew_now = self.held.is_some();
            self.failures = 0;
            self.next_attempt = 0;
        }
    }

    /// One step: claims, or renews, as due; returns when the next step is due (boot ms).
    fn step(&mut self) -> u64 {
        let now = clock::boot_ms();
        let timing = self.timing();
        if let Some(held) = self.held {
            if now >= timing.usable_until(held.sent_at) {
                self.lose(held.worker, RAN_OUT);
            } else if self.renew_now || now >= timing.renew_at(held.sent_at).max(self.next_attempt)
            {
                self.renew_now = false;
                self.renew(held, timing);
            }
        } else if now >= self.next_attempt {
            self.claim(timing);
        }
        let now = clock::boot_ms();
        match self.held {
            Some(h) => timing
                .renew_at(h.sent_at)
                .max(self.next_attempt)
                .min(timing.usable_until(h.sent_at))
                .max(now + 1),
            None => self.next_attempt.max(now + 1),
        }
    }

    fn failed(&mut self, standing: Standing, why: &str) {
        self.failures += 1;
        self.next_attempt = clock::boot_ms() + self.timing().back_off_ms(self.failures - 1);
        if self.failures == 1 || self.failures.is_multiple_of(10) {
            errors::warn(
                format!("snowflake: {NAME}: {why}"),
                &format!(
                    "{} attempt(s) failed so far; the next in {} ms. snowflake.worker_id is auto: no ids are minted without a lease.",
                    self.failures,
                    self.timing().back_off_ms(self.failures - 1)
                ),
            );
        }
        self.set_status(standing, why);
        if matches!(standing, Standing::Unreachable) {
            self.conn = None;
        }
    }

    fn succeeded(&mut self) {
        if self.failures > 0 {
            errors::log(
                format!(
                    "snowflake: {NAME}: the registry answers again, after {} failed attempt(s)",
                    self.failures
                ),
                "",
            );
        }
        self.failures = 0;
        self.next_attempt = 0;
    }

    /// A registry to talk to, connected by `deadline`.
    fn registry(&mut self, deadline: Instant) -> Result<Registry<'_>, Failure> {
        self.registry_stopping_on(deadline, &terminating)
    }

    /// As `registry`, with what ends its waits early besides the deadline.
    fn registry_stopping_on(
        &mut self,
        deadline: Instant,
        should_stop: &'static dyn Fn() -> bool,
    ) -> Result<Registry<'_>, Failure> {
        if self.conn.is_none() {
            let conninfo = settings::registry();
            let mut conn = Connection::open(&conninfo, deadline, should_stop)?;
            conn.query(
                "SET search_path = pg_catalog, pg_temp",
                &[],
                deadline,
                should_stop,
            )?;
            self.shared.control().lease.registry.set(&conn.server());
            self.conn = Some(conn);
            self.connected_with = conninfo;
        }
        Ok(Registry {
            conn: self.conn.as_mut().expect("connected"),
            deadline,
            should_stop,
        })
    }

    fn claim(&mut self, timing: Timing) {
        self.set_status(Standing::Claiming, "");
        self.me.timeline = timeline();
        let me = self.me.clone();
        let range = settings::worker_range();
        let sent_at = clock::boot_ms();
        let claimed = self
            .registry(Instant::now() + CONNECT)
            .and_then(|mut r| r.claim(&me, range, timing.ttl_ms));
        let granted = match claimed {
            Ok(Claimed::Granted(g)) => g,
            Ok(Claimed::Exhausted) => {
                return self.failed(
                    Standing::Exhausted,
                    &format!("every worker id of {range} is leased by another server"),
                )
            }
            Ok(Claimed::Superseded { worker, successor }) => {
                return self.failed(
                    Standing::Superseded,
                    &format!("it held worker id {worker}; its successor is {successor}"),
                )
            }
            Err(Failure::Interrupted) => return,
            Err(e) => return self.failed(Standing::Unreachable, &e.to_string()),
        };
        let p = self.shared.params;
        let worker = granted.worker;
        if p.layout.check_worker(worker as i64).is_err() || !range.contains(worker) {
            return self.failed(
                Standing::Unreachable,
                &format!("the registry granted worker id {worker}, outside {range}"),
            );
        }
        // The new holder starts above the last one's cap.
        let floor = match granted.last_mark.map(|id| p.layout.decompose(id)) {
            Some(Ok(parts)) => p.layout.tick_of(parts) + 1,
            Some(Err(_)) => {
                return self.failed(
                    Standing::Unreachable,
                    &format!("the registry holds a last mark for worker id {worker} that is not an id of this layout"),
                )
            }
            None => 0,
        };
        let held = Held {
            worker,
            fence: granted.fence,
            sent_at,
        };
        // Record the cap first, then raise the worker above the floor, then use it.
        let Some(held) = self.record_cap(held, floor, timing) else {
            return;
        };
        if floor > 0 && self.shared.control().state == State::Starting {
            // Not a failure: the marks are loaded a moment after start-up (or never, while a
            // synchronous standby is missing). The lease stays this server's; claimed again
            // then, it is raised above its last holder's ids.
            self.set_status(
                Standing::Claiming,
                "waiting for the mark writer to load the marks",
            );
            self.next_attempt = clock::boot_ms() + MARKS_POLL_MS;
            return;
        }
        if floor > 0 {
            let from = (floor >> p.seq_bits).saturating_add(1) << p.seq_bits;
            let reply = mailbox::ask(
                self.shared,
                Ask::Restore {
                    worker: Some(worker),
                    from,
                },
            );
            if !matches!(reply.answer, Answer::Restored { .. }) {
                return self.failed(
                    Standing::Claiming,
                    &format!(
                        "worker id {worker} could not be raised above its last holder's ids: {}",
                        reply.text
                    ),
                );
            }
        }
        self.use_lease(held, timing);
        errors::log(
            format!("snowflake: {NAME}: this server holds worker id {worker}"),
            &format!(
                "Leased from the registry for {} ms at a time; its ids continue above every id of its previous holders.",
                timing.ttl_ms
            ),
        );
    }

    fn renew(&mut self, held: Held, timing: Timing) {
        let sent_at = clock::boot_ms();
        if let Some(renewed) = self.record_cap(Held { sent_at, ..held }, 0, timing) {
            self.use_lease(renewed, timing);
        }
    }

    /// Records in the registry the cap for `held` (from now, above `floor` if the worker is
    /// new), renewing it; the lease renewed, or `None` (and the lease stopped if it is gone).
    fn record_cap(&mut self, held: Held, floor: u64, timing: Timing) -> Option<Held> {
        let p = self.shared.params;
        let slot = self.shared.slot(held.worker);
        let clock = clock::wall(&p.layout);
        let ttl_units = p.layout.units_in_ms(timing.ttl_ms);
        let reach = p.layout.units_in_ms(MARK_AHEAD_MS);
        let last = slot.last().max(floor).max(slot.mark.load(Acquire));
        let cap = rules::cap(&p.layout, p.tick_limit, clock, last, ttl_units, reach);
        let cap_id = p.layout.id_from_tick(cap, held.worker);
        let me = self.me.clone();
        let deadline = Instant::now() + EXCHANGE;
        let renewed = self.registry(deadline).and_then(|mut r| {
            let renewed = r.renew(&me, held.worker, held.fence, cap_id, timing.ttl_ms)?;
            // A predecessor that stopped renewing after this server's promotion is released
            // as soon as it has stopped long enough.
            if renewed.is_some() && me.timeline > 1 {
                r.supersede_predecessors(&me, timing.ttl_ms)?;
            }
            Ok(renewed)
        });
        match renewed {
            Ok(Some(fence)) => {
                slot.cap.store(cap, Release);
                self.succeeded();
                Some(Held { fence, ..held })
            }
            Ok(None) => {
                self.lose(
                    held.worker,
                    "the registry says the lease is no longer this server's (released by hand, expired, or taken)",
                );
                None
            }
            Err(Failure::Interrupted) => None,
            Err(e) => {
                self.failed(Standing::Unreachable, &e.to_string());
                // Keep the lease until it runs out: renewals are retried meanwhile.
                if self.held.is_some() {
                    self.set_status(Standing::Held, &format!("renewal failed, retrying: {e}"));
                }
                None
            }
        }
    }

    /// Uses a lease just claimed or renewed. A worker closed meanwhile (never used yet, or
    /// stopped by a session while the renewal was on its way: `stop_using`) is opened again,
    /// under the control lock: the registry kept it this server's all along.
    fn use_lease(&mut self, held: Held, timing: Timing) {
        self.held = Some(held);
        let lease = &self.shared.lease;
        let expires = clock::unix_ms() + timing.ttl_ms as i64;
        {
            let mut control = self.shared.control();
            lease
                .usable_until
                .store(timing.usable_until(held.sent_at), Release);
            if lease.worker.load(Acquire) != held.worker {
                snowflake_core::marks::reopen(self.shared.slot(held.worker));
                lease.worker.store(held.worker, Release);
            }
            control.lease.worker = Some(held.worker);
            control.lease.expires_unix_ms = expires;
        }
        self.set_status(Standing::Held, "");
    }

    fn lose(&mut self, worker: u32, why: &str) {
        stop_using(self.shared, worker, why);
        self.held = None;
        errors::warn(
            format!("snowflake: {NAME}: this server no longer holds worker id {worker}: {why}"),
            "No ids are minted until a worker id is leased again.",
        );
        self.set_status(Standing::Claiming, why);
    }

    /// At a clean stop (or when the setting is no longer auto): the lease is given back, with
    /// one past the last id issued under it (its worker is closed first, so that is final),
    /// so that this server's worker id is free at once and its next holder, most often this
    /// server again, continues right above its ids.
    fn release(&mut self) {
        let Some(held) = self.held.take() else {
            return;
        };
        stop_using(self.shared, held.worker, "the lease was released");
        let p = self.shared.params;
        let slot = self.shared.slot(held.worker);
        let end = (slot.last() + 1)
            .min(slot.cap.load(Acquire))
            .min(p.tick_limit);
        let end_id = p.layout.id_from_tick(end, held.worker);
        let me = self.me.clone();
        // At a clean stop SIGTERM is already set, and would end the exchange before it began:
        // the release gets its own short deadline instead.
        let released = if terminating() {
            self.registry_stopping_on(Instant::now() + RELEASE_AT_STOP, &|| false)
        } else {
            self.registry(Instant::now() + EXCHANGE)
        }
        .and_then(|mut r| r.release(&me, held.worker, held.fence, end_id));
        if let Err(e) = released {
            errors::warn(
                format!(
                    "snowflake: {NAME}: could not release worker id {}: {e}",
                    held.worker
                ),
                "It is free again once its lease expires.",
            );
        }
    }

    fn set_status(&self, standing: Standing, why: &str) {
        let mut control = self.shared.control();
        control.lease.standing = standing;
        control.lease.why.set(why);
        control.lease.holder.set(&self.me.describe());
    }

    /// Waits on the latch until `until` (boot ms; forever: `None`).
    fn sleep_until(&self, until: Option<u64>) {
        let mut events = pg_sys::WL_LATCH_SET | pg_sys::WL_EXIT_ON_PM_DEATH;
        let timeout = match until {
            Some(t) => {
                events |= pg_sys::WL_TIMEOUT;
                t.saturating_sub(clock::boot_ms()).max(1) as i64
            }
            None => -1,
        };
        // SAFETY: the standard latch wait of a background worker.
        unsafe {
            pg_sys::WaitLatch(
                pg_sys::MyLatch,
                events as i32,
                timeout,
                pg_sys::PG_WAIT_EXTENSION,
            );
            pg_sys::ResetLatch(pg_sys::MyLatch);
        }
    }
}

/// This server, as the registry tells it apart.
fn identity(shared: &Shared) -> Holder {
    let mut host = [0u8; 256];
    // SAFETY: gethostname writes at most the length given into the buffer.
    unsafe { libc::gethostname(host.as_mut_ptr().cast(), host.len() - 1) };
    let host = std::ffi::CStr::from_bytes_until_nul(&host)
        .map(|h| h.to_string_lossy().into_owned())
        .unwrap_or_default();
    // SAFETY: plain reads of the server's identity, set before any background worker starts.
    let (system_identifier, port, data_directory) = unsafe {
        (
            pg_sys::GetSystemIdentifier(),
            pg_sys::PostPortNumber,
            std::ffi::CStr::from_ptr(pg_sys::DataDir)
                .to_string_lossy()
                .into_owned(),
        )
    };
    Holder {
        system_identifier: system_identifier.to_string(),
        host,
        port,
        data_directory,
        timeline: timeline(),
        boot: format!("{:016x}", shared.boot.load(Relaxed)),
    }
}

/// This server's timeline (the keeper starts once recovery has ended).
fn timeline() -> i32 {
    // SAFETY: reads of the timeline WAL is written on; before 15, RecoveryInProgress() sets
    // this process's copy of it once recovery has ended.
    unsafe {
        #[cfg(feature = "pg14")]
        {
            pg_sys::RecoveryInProgress();
            pg_sys::ThisTimeLineID as i32
        }
        #[cfg(not(feature = "pg14"))]
        {
            pg_sys::GetWALInsertionTimeLine() as i32
        }
    }
}

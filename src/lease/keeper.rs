//! The lease keeper: the background worker that leases this server's worker id from the
//! registry. It claims one before the first id; when the registry answers *wait* it waits out
//! the lock-delay on the boot clock and confirms; it renews the lease every third of
//! `snowflake.lease_ttl`, recording with each renewal the cap below which this server will
//! issue (the mark writer never raises a mark above it); and it gives the lease back, with
//! the exact end of its ids, at a clean stop, before it moves to another registry, and when a
//! reload leaves the worker id out. A new lease is used only once its worker has been raised
//! above its predecessors' ids (`snowflake_restore_mark` of that worker, through the mailbox)
//! and the new cap is in the registry. From the moment a lease cannot be renewed in time
//! (counted on the boot clock from when the request was sent), `snowflake_nextval()` refuses
//! with 55000 and the reason; the slow path, which every worker takes at least once a second,
//! stops a lease that ran out even if the keeper is stuck.
//!
//! The keeper remembers, through the mark writer and with the marks, the registry it leased
//! from and the highest epoch it saw there, and sends both with every call: the registry
//! refuses a server that comes from another registry whose leases it does not carry, and
//! freezes when a server proves it went back in time. Every network wait is bounded and
//! answers SIGTERM.

use super::libpq::{Connection, Failure};
use super::registry::{Answer, Holder, Registry};
use super::{stop_using, Standing, NONE, RAN_OUT};
use crate::marks::mailbox::{self, Answer as Reply, Ask};
use crate::shared::control::State;
use crate::shared::shmem::{self, Shared};
use crate::{errors, mint::clock, settings};
use pgrx::bgworkers::{BackgroundWorkerBuilder, BgWorkerStartTime};
use pgrx::prelude::*;
use snowflake_core::generator::MARK_AHEAD_MS;
use snowflake_core::lease::{self as rules, Outcome, Seen, Timing, WorkerRange};
use std::sync::atomic::{AtomicBool, Ordering::*};
use std::time::{Duration, Instant};

const NAME: &str = "snowflake_ext lease keeper";
/// How long one exchange with the registry may take.
const EXCHANGE: Duration = Duration::from_secs(5);
/// How long a connection may take.
const CONNECT: Duration = Duration::from_secs(10);
/// How long a clean stop waits to give the lease back. SIGTERM has already arrived, so this
/// exchange alone does not answer it; the postmaster waits for us that long at most.
const RELEASE_AT_STOP: Duration = Duration::from_secs(2);
/// How soon a claim is tried again while the mark writer has not loaded the marks (a claim
/// needs them: they hold the registry this server leased from, and the new worker is raised
/// above its predecessors' ids through the writer).
const MARKS_POLL_MS: u64 = 500;

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
    /// The TTL that request asked for.
    ttl_ms: u64,
}

/// A claim waiting out the lock-delay.
#[derive(Clone, Copy)]
struct Waiting {
    worker: u32,
    token: i64,
    /// When to confirm (boot clock, ms).
    until: u64,
}

#[derive(Clone, Copy)]
enum Phase {
    Idle,
    Waiting(Waiting),
    Holding(Held),
    /// A copy of this server holds the worker id: nothing more until the server restarts.
    Stopped,
}

struct Keeper {
    shared: &'static Shared,
    me: Holder,
    conn: Option<Connection>,
    /// The `snowflake.registry` the connection was opened with.
    connected_with: String,
    /// `snowflake.registry` changed: move to it at the next step (the old connection string
    /// stays in `connected_with` until then, to give the lease back there).
    switching: bool,
    phase: Phase,
    /// Renew at the next step, not when due (the TTL changed, or the registry string).
    renew_now: bool,
    /// The registry's limits, from its last answer.
    lock_delay_ms: u64,
    max_skew_ms: u64,
    /// The TTL setting last applied, to renew at once when it changes.
    ttl_setting: i32,
    ttl_clamped_warned: bool,
    /// Attempts that failed in a row, and when to try again.
    failures: u32,
    next_attempt: u64,
    /// What the last failure said: a new reason is logged at once.
    last_failure: String,
}

impl Keeper {
    fn new(shared: &'static Shared) -> Keeper {
        Keeper {
            shared,
            me: identity(shared),
            conn: None,
            connected_with: String::new(),
            switching: false,
            phase: Phase::Idle,
            renew_now: false,
            lock_delay_ms: 0,
            max_skew_ms: 1000,
            ttl_setting: settings::LEASE_TTL_MS.get(),
            ttl_clamped_warned: false,
            failures: 0,
            next_attempt: 0,
            last_failure: String::new(),
        }
    }

    /// The lease this server asks for: `snowflake.lease_ttl`, at most the registry's
    /// lock-delay (which is also the longest lease the registry grants).
    fn timing(&mut self) -> Timing {
        let setting = settings::LEASE_TTL_MS.get().max(rules::MIN_TTL_MS as i32) as u64;
        let ttl_ms = if self.lock_delay_ms > 0 && setting > self.lock_delay_ms {
            if !self.ttl_clamped_warned {
                self.ttl_clamped_warned = true;
                errors::warn(
                    format!(
                        "snowflake: {NAME}: snowflake.lease_ttl ({setting} ms) is longer than the registry's lock_delay ({} ms): leases of {} ms are taken",
                        self.lock_delay_ms, self.lock_delay_ms
                    ),
                    "Lower snowflake.lease_ttl, or raise the registry's lock_delay with snowflake_registry.set_limits() (a takeover then waits that long).",
                );
            }
            self.lock_delay_ms
        } else {
            setting
        };
        Timing { ttl_ms }
    }

    fn run(&mut self) -> ! {
        // A lease this server's previous keeper held is claimed again at once (the registry
        // knows this start of the server by its fence); meanwhile nothing is issued under it.
        let w = self.shared.lease.worker.load(Acquire);
        if w != NONE {
            stop_using(self.shared, w, "the lease keeper restarted");
        }
        loop {
            if terminating() {
                self.release("the server is stopping");
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
            let wake_at = if !settings::leasing() {
                self.release("snowflake.registry is no longer used");
                self.set_status(Standing::NotUsed, "");
                None
            } else if settings::registry().trim().is_empty() {
                self.release("snowflake.registry was emptied");
                self.set_status(Standing::Unreachable, "snowflake.registry is not set");
                None
            } else {
                self.step()
            };
            self.sleep_until(wake_at);
        }
    }

    /// After a reload. A worker id the new `snowflake.worker_range` or `snowflake.worker_id`
    /// leaves out is given back (another is claimed at the next step). A new
    /// `snowflake.registry` is moved to at the next step: the same registry through another
    /// string is just used; another registry only once the lease is given back in the old one.
    /// A new `snowflake.lease_ttl` reaches the registry at once, with a renewal.
    fn reloaded(&mut self) {
        if !settings::leasing() {
            return;
        }
        let wanted = |worker: u32| match settings::pinned() {
            Some(pinned) => pinned == worker,
            None => settings::worker_range().contains(worker),
        };
        match self.phase {
            Phase::Holding(held) if !wanted(held.worker) => {
                errors::log(
                    format!(
                        "snowflake: {NAME}: worker id {} is no longer one this server may lease (snowflake.worker_id, snowflake.worker_range): it is given back",
                        held.worker
                    ),
                    "Another worker id is claimed next.",
                );
                self.release("a reload left it out");
                self.next_attempt = 0;
            }
            Phase::Waiting(w) if !wanted(w.worker) => {
                self.phase = Phase::Idle;
                self.next_attempt = 0;
            }
            _ => {}
        }
        if !self.connected_with.is_empty() && self.connected_with != settings::registry() {
            self.switching = true;
            self.failures = 0;
            self.next_attempt = 0;
        }
        let ttl = settings::LEASE_TTL_MS.get();
        if ttl != self.ttl_setting {
            self.ttl_setting = ttl;
            self.ttl_clamped_warned = false;
            self.renew_now = matches!(self.phase, Phase::Holding(_));
        }
    }

    /// One step: moves to a new registry, claims, confirms or renews, as due; returns when the
    /// next step is due (boot ms), or `None` to wait for a signal.
    fn step(&mut self) -> Option<u64> {
        let now = clock::boot_ms();
        if self.switching && now >= self.next_attempt {
            self.switch_registry();
        }
        let timing = self.timing();
        match self.phase {
            Phase::Holding(held) => {
                let usable_until = Timing {
                    ttl_ms: held.ttl_ms,
                }
                .usable_until(held.sent_at);
                // A lease that ran out (this keeper was stuck, or cut off) is stopped, and
                // asked for once more: still this start's in the registry (nobody took it),
                // it is used again; taken by another start of this very server meanwhile (a
                // copy), the registry says so and both stop, rather than take turns.
                let ran_out = now >= usable_until;
                if ran_out {
                    stop_using(self.shared, held.worker, RAN_OUT);
                }
                if ran_out
                    || self.renew_now
                    || now >= timing.renew_at(held.sent_at).max(self.next_attempt)
                {
                    self.renew_now = false;
                    let renewed = self.renew(held);
                    if !renewed && ran_out && matches!(self.phase, Phase::Holding(_)) {
                        self.lose(held.worker, RAN_OUT);
                    }
                }
            }
            Phase::Waiting(w) if now >= w.until => self.confirm(w),
            Phase::Idle if now >= self.next_attempt && !self.switching => self.claim(),
            _ => {}
        }
        let now = clock::boot_ms();
        let timing = self.timing();
        let at = match self.phase {
            Phase::Holding(h) => timing
                .renew_at(h.sent_at)
                .max(self.next_attempt)
                .min(Timing { ttl_ms: h.ttl_ms }.usable_until(h.sent_at)),
            Phase::Waiting(w) => w.until,
            Phase::Idle => self.next_attempt,
            Phase::Stopped => return None,
        };
        let at = if self.switching {
            at.min(self.next_attempt)
        } else {
            at
        };
        Some(at.max(now + 1))
    }

    fn failed(&mut self, standing: Standing, why: &str) {
        self.failures += 1;
        let wait = self.timing().back_off_ms(self.failures - 1);
        self.next_attempt = clock::boot_ms() + wait;
        if self.failures == 1 || self.failures.is_multiple_of(10) || why != self.last_failure {
            self.last_failure = why.to_string();
            errors::warn(
                format!("snowflake: {NAME}: {why}"),
                &format!(
                    "{} attempt(s) failed so far; the next in {wait} ms. No ids are minted without a lease.",
                    self.failures,
                ),
            );
        }
        if matches!(standing, Standing::Unreachable) {
            self.conn = None;
        }
        match self.phase {
            // Keep the lease until it runs out: renewals are retried meanwhile.
            Phase::Holding(_) => {
                self.set_status(Standing::Held, &format!("renewal failed, retrying: {why}"))
            }
            _ => self.set_status(standing, why),
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
        self.last_failure.clear();
    }

    /// The connection string to use now: the old one while a move to a new one is pending.
    fn conninfo(&self) -> String {
        if self.switching {
            self.connected_with.clone()
        } else {
            settings::registry()
        }
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
            let conninfo = self.conninfo();
            let mut conn = open(&conninfo, deadline, should_stop)?;
            // Its limits first: the lease asked for must fit its lock-delay.
            let limits = Registry {
                conn: &mut conn,
                deadline,
                should_stop,
            }
            .identity()?;
            self.note(&limits);
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

    /// The registry this server leased from and the highest epoch it saw there.
    fn seen(&self) -> Seen {
        self.shared.control().registry_seen
    }

    /// Takes note of an answer: the registry's limits, and its epoch (kept with the marks). The
    /// registry this server leases from changes only with a lease granted by another one.
    fn note(&mut self, a: &Answer) {
        if a.lock_delay_ms > 0 {
            self.lock_delay_ms = a.lock_delay_ms;
        }
        if a.max_skew_ms > 0 {
            self.max_skew_ms = a.max_skew_ms;
        }
        if matches!(a.outcome, Outcome::Foreign | Outcome::Identity)
            || a.registry == 0
            || !self.registry_seen_known()
        {
            return;
        }
        let changed = {
            let mut control = self.shared.control();
            let seen = control.registry_seen;
            let granted = a.outcome == Outcome::Granted;
            let next = if seen.registry == a.registry || seen.registry == 0 || granted {
                seen.after(a.registry, a.epoch)
            } else {
                seen
            };
            control.registry_seen = next;
            next != seen
        };
        if changed {
            // The mark writer keeps it with the marks at its next write.
            self.shared.wake_writer();
        }
    }

    /// Whether the mark writer has read which registry this server leased from (every call
    /// sends it; a lease is used only once it is known).
    fn registry_seen_known(&self) -> bool {
        self.shared.control().registry_seen_known
    }

    /// Whether the marks are loaded and usable (a new worker is raised above its
    /// predecessors' ids through them).
    fn marks_ready(&self) -> bool {
        let control = self.shared.control();
        control.loaded && control.state == State::Ready
    }

    fn claim(&mut self) {
        self.set_status(Standing::Claiming, "");
        self.me.timeline = timeline();
        let me = self.me.clone();
        let (range, pinned) = match settings::pinned() {
            Some(w) => (WorkerRange { first: w, last: w }, true),
            None => (settings::worker_range(), false),
        };
        // Connected first: a new connection learns the registry's limits, which the lease
        // asked for must fit.
        if let Err(e) = self.registry(Instant::now() + CONNECT) {
            if e != Failure::Interrupted {
                self.failed(Standing::Unreachable, &e.to_string());
            }
            return;
        }
        let timing = self.timing();
        let fence = self.shared.control().lease.fence;
        let seen = self.seen();
        let sent_at = clock::boot_ms();
        let answer = self.registry(Instant::now() + EXCHANGE).and_then(|mut r| {
            r.claim(
                &me,
                range,
                pinned,
                timing.ttl_ms,
                clock::unix_ms(),
                fence,
                seen,
            )
        });
        let a = match answer {
            Ok(a) => a,
            Err(Failure::Interrupted) => return,
            Err(e) => return self.failed(Standing::Unreachable, &e.to_string()),
        };
        self.note(&a);
        let worker = a.worker.unwrap_or(NONE);
        let in_range = range.contains(worker)
            && self
                .shared
                .params
                .layout
                .check_worker(worker as i64)
                .is_ok();
        match a.outcome {
            Outcome::Granted | Outcome::Wait if !in_range => self.failed(
                Standing::Unreachable,
                &format!("the registry granted worker id {worker}, outside {range}"),
            ),
            Outcome::Granted => {
                let held = Held {
                    worker,
                    fence: a.fence.unwrap_or(0),
                    sent_at,
                    ttl_ms: timing.ttl_ms,
                };
                self.take(held, &a);
            }
            Outcome::Wait => {
                let wait = rules::takeover_wait_ms(a.wait_ms.unwrap_or(0), self.max_skew_ms);
                let until = clock::boot_ms() + wait;
                self.phase = Phase::Waiting(Waiting {
                    worker,
                    token: a.token.unwrap_or(0),
                    until,
                });
                self.succeeded();
                self.shared.control().lease.waiting_until_unix_ms = clock::unix_ms() + wait as i64;
                let why = format!("claimed worker id {worker}; {}", a.reason);
                self.set_status(Standing::Waiting, &why);
                errors::log(
                    format!(
                        "snowflake: {NAME}: claimed worker id {worker}, waiting {wait} ms before minting with it: {}",
                        a.reason
                    ),
                    "A worker id whose last holder did not give it back changes hands only once that holder cannot still be minting with it.",
                );
            }
            outcome => self.refused(outcome, &a.reason),
        }
    }

    /// A refusal of the registry, as the lease's standing.
    fn refused(&mut self, outcome: Outcome, reason: &str) {
        let standing = match outcome {
            Outcome::Exhausted => Standing::Exhausted,
            Outcome::Held => Standing::Taken,
            Outcome::Superseded => Standing::Superseded,
            Outcome::Duplicate => return self.stop_for_good(reason),
            Outcome::Frozen | Outcome::Behind => Standing::Frozen,
            Outcome::Foreign => Standing::Foreign,
            Outcome::Moved => Standing::Moved,
            Outcome::Skew => Standing::Skew,
            Outcome::Ttl | Outcome::UnsafeRole => Standing::Refused,
            _ => Standing::Unreachable,
        };
        let why = if reason.is_empty() {
            format!("the registry answered {}", outcome.name())
        } else {
            reason.to_string()
        };
        self.failed(standing, &why);
    }

    /// After the lock-delay: confirms the claim.
    fn confirm(&mut self, w: Waiting) {
        let timing = self.timing();
        let me = self.me.clone();
        let seen = self.seen();
        let sent_at = clock::boot_ms();
        let answer = self.registry(Instant::now() + CONNECT).and_then(|mut r| {
            r.confirm(
                &me,
                w.worker,
                w.token,
                timing.ttl_ms,
                clock::unix_ms(),
                seen,
            )
        });
        let a = match answer {
            Ok(a) => a,
            Err(Failure::Interrupted) => return,
            Err(e) => {
                // The claim stays the registry's to keep; confirmed at the next attempt.
                self.failed(Standing::Unreachable, &e.to_string());
                self.phase = Phase::Waiting(Waiting {
                    until: self.next_attempt,
                    ..w
                });
                return;
            }
        };
        self.note(&a);
        match a.outcome {
            Outcome::Granted => {
                let held = Held {
                    worker: w.worker,
                    fence: a.fence.unwrap_or(0),
                    sent_at,
                    ttl_ms: timing.ttl_ms,
                };
                self.take(held, &a);
            }
            Outcome::Wait => {
                self.phase = Phase::Waiting(Waiting {
                    until: clock::boot_ms() + a.wait_ms.unwrap_or(0).max(1),
                    ..w
                });
            }
            Outcome::Lost => {
                self.phase = Phase::Idle;
                self.next_attempt = 0;
                errors::log(
                    format!(
                        "snowflake: {NAME}: the claim of worker id {} failed: {}",
                        w.worker, a.reason
                    ),
                    "Another worker id is claimed next.",
                );
                self.set_status(Standing::Claiming, &a.reason);
            }
            outcome => {
                self.phase = Phase::Idle;
                self.refused(outcome, &a.reason);
            }
        }
    }

    /// Takes a worker id just granted: records a cap for it (a renewal), raises the worker
    /// above its predecessors' ids, then uses it.
    fn take(&mut self, held: Held, a: &Answer) {
        let p = self.shared.params;
        let worker = held.worker;
        // The new holder starts above the last one's cap, and above the time the registry
        // says no predecessor's ids can reach.
        let mut floor = match a.last_mark.map(|id| p.layout.decompose(id)) {
            Some(Ok(parts)) if parts.worker == worker => p.layout.tick_of(parts) + 1,
            Some(_) => {
                return self.failed(
                    Standing::Refused,
                    &format!("the registry holds a last mark for worker id {worker} that is not an id of it in this layout"),
                )
            }
            None => 0,
        };
        if let Some(ms) = a.min_start_ms {
            floor = floor.max(p.layout.time_from_unix_ms(ms) << p.seq_bits);
        }
        let floor = floor.min(p.tick_limit);
        self.phase = Phase::Idle;
        let Some(held) = self.record_cap(held, floor) else {
            return;
        };
        // This start's, from now on, in the registry: claimed again at once.
        self.shared.control().lease.fence = Some(held.fence);
        if !self.registry_seen_known() {
            // Claimed without the registry this server last leased from (the mark writer has
            // not read it yet: it may be waiting for a synchronous standby): not used until a
            // claim that says which, so that the registry can refuse a server that comes from
            // another one.
            self.set_status(
                Standing::Claiming,
                "waiting for the mark writer to read the marks",
            );
            self.next_attempt = clock::boot_ms() + MARKS_POLL_MS;
            return;
        }
        if floor > 0 && !self.marks_ready() {
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
            if !matches!(reply.answer, Reply::Restored { .. }) {
                // Still this server's in the registry; claimed again (at once) next time.
                return self.failed(
                    Standing::Claiming,
                    &format!(
                        "worker id {worker} could not be raised above its last holder's ids: {}",
                        reply.text
                    ),
                );
            }
        }
        self.use_lease(held);
        errors::log(
            format!("snowflake: {NAME}: this server holds worker id {worker}"),
            &format!(
                "Leased from the registry for {} ms at a time; its ids continue above every id of its previous holders.",
                held.ttl_ms
            ),
        );
    }

    /// Renews the lease; whether it was.
    fn renew(&mut self, held: Held) -> bool {
        let timing = self.timing();
        let sent_at = clock::boot_ms();
        match self.record_cap(
            Held {
                sent_at,
                ttl_ms: timing.ttl_ms,
                ..held
            },
            0,
        ) {
            Some(renewed) => {
                self.use_lease(renewed);
                true
            }
            None => false,
        }
    }

    /// Records in the registry the cap for `held` (from now, above `floor` if the worker is
    /// new), renewing it; the lease renewed, or `None` (and the lease stopped if it is gone).
    fn record_cap(&mut self, held: Held, floor: u64) -> Option<Held> {
        let p = self.shared.params;
        let slot = self.shared.slot(held.worker);
        let clock = clock::wall(&p.layout);
        let ttl_units = p.layout.units_in_ms(held.ttl_ms);
        let reach = p.layout.units_in_ms(MARK_AHEAD_MS);
        let last = slot.last().max(floor).max(slot.mark.load(Acquire));
        let cap = rules::cap(&p.layout, p.tick_limit, clock, last, ttl_units, reach);
        let cap_id = p.layout.id_from_tick(cap, held.worker);
        let me = self.me.clone();
        let seen = self.seen();
        let answer = self.registry(Instant::now() + EXCHANGE).and_then(|mut r| {
            r.renew(
                &me,
                held.worker,
                held.fence,
                cap_id,
                held.ttl_ms,
                clock::unix_ms(),
                seen,
            )
        });
        let a = match answer {
            Ok(a) => a,
            Err(Failure::Interrupted) => return None,
            Err(e) => {
                self.failed(Standing::Unreachable, &e.to_string());
                return None;
            }
        };
        self.note(&a);
        match a.outcome {
            Outcome::Renewed => {
                slot.cap.store(cap, Release);
                self.succeeded();
                if !a.reason.is_empty() {
                    errors::warn(
                        format!("snowflake: {NAME}: {}", a.reason),
                        "Two servers with this one's system identifier, host name, port and data directory run (a VM snapshot started beside its original, a copied data directory on a host of the same name): stop the copy. The copy stops on its own; this server keeps its worker id.",
                    );
                }
                Some(Held {
                    fence: a.fence.unwrap_or(held.fence),
                    ..held
                })
            }
            Outcome::Lost => {
                self.lose(
                    held.worker,
                    &format!(
                        "the registry says the lease is no longer this server's: {}",
                        a.reason
                    ),
                );
                None
            }
            Outcome::Duplicate => {
                self.stop_for_good(&a.reason);
                None
            }
            outcome => {
                self.refused(outcome, &a.reason);
                None
            }
        }
    }

    /// Uses a lease just claimed or renewed. A worker closed meanwhile (never used yet, or
    /// stopped by a session while the renewal was on its way: `stop_using`) is opened again,
    /// under the control lock: the registry kept it this server's all along.
    fn use_lease(&mut self, held: Held) {
        self.phase = Phase::Holding(held);
        let lease = &self.shared.lease;
        let timing = Timing {
            ttl_ms: held.ttl_ms,
        };
        let expires = clock::unix_ms() + held.ttl_ms as i64;
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
            control.lease.fence = Some(held.fence);
            control.lease.expires_unix_ms = expires;
        }
        self.set_status(Standing::Held, "");
    }

    fn lose(&mut self, worker: u32, why: &str) {
        stop_using(self.shared, worker, why);
        self.phase = Phase::Idle;
        self.shared.control().lease.fence = None;
        errors::warn(
            format!("snowflake: {NAME}: this server no longer holds worker id {worker}: {why}"),
            "No ids are minted until a worker id is leased again.",
        );
        self.set_status(Standing::Claiming, why);
    }

    /// A copy of this server holds its worker id: stop, and claim nothing until the server
    /// restarts, so that the two never take turns with one worker id.
    fn stop_for_good(&mut self, why: &str) {
        if let Phase::Holding(held) = self.phase {
            stop_using(self.shared, held.worker, why);
        }
        self.phase = Phase::Stopped;
        self.shared.control().lease.fence = None;
        errors::warn(
            format!("snowflake: {NAME}: this server stops minting: {why}"),
            "Stop the copy of this server, then restart this one. Until then it claims no worker id.",
        );
        self.set_status(Standing::Duplicate, why);
    }

    /// Gives the lease back (at a clean stop, before a move to another registry, or when the
    /// worker id is no longer wanted), with one past the last id issued under it (its worker is
    /// closed first, so that is final), so that the next holder, most often this server
    /// again, continues right above its ids, at once. A claim waiting out its lock-delay is
    /// dropped (the registry lets it lapse).
    fn release(&mut self, why: &str) {
        let held = match self.phase {
            Phase::Holding(held) => held,
            Phase::Waiting(_) => {
                self.phase = Phase::Idle;
                return;
            }
            _ => return,
        };
        self.phase = Phase::Idle;
        stop_using(
            self.shared,
            held.worker,
            &format!("the lease was released: {why}"),
        );
        self.shared.control().lease.fence = None;
        let p = self.shared.params;
        let slot = self.shared.slot(held.worker);
        let end = (slot.last() + 1)
            .min(slot.cap.load(Acquire))
            .min(p.tick_limit);
        let end_id = p.layout.id_from_tick(end, held.worker);
        let me = self.me.clone();
        let seen = self.seen();
        // At a clean stop SIGTERM is already set, and would end the exchange before it began:
        // the release gets its own short deadline instead.
        let released = if terminating() {
            self.registry_stopping_on(Instant::now() + RELEASE_AT_STOP, &|| false)
        } else {
            self.registry(Instant::now() + EXCHANGE)
        }
        .and_then(|mut r| r.release(&me, held.worker, held.fence, end_id, seen));
        match released {
            Ok(a) => {
                self.note(&a);
                if a.outcome != Outcome::Released {
                    errors::warn(
                        format!(
                            "snowflake: {NAME}: worker id {} was not given back: {} {}",
                            held.worker,
                            a.outcome.name(),
                            a.reason
                        ),
                        "It is free again once its lease expires and the next holder has waited out the lock-delay.",
                    );
                }
            }
            Err(e) => errors::warn(
                format!(
                    "snowflake: {NAME}: could not give worker id {} back: {e}",
                    held.worker
                ),
                "It is free again once its lease expires and the next holder has waited out the lock-delay.",
            ),
        }
    }

    /// Moves to the registry `snowflake.registry` now names. The same registry reached through
    /// another string is simply used from now on; another registry only once the lease is
    /// given back in the old one (whose connection is still open), with its final mark. A new
    /// registry that cannot be reached leaves the lease where it is, renewed as before.
    fn switch_registry(&mut self) {
        let target = settings::registry();
        let current = self.seen().registry;
        let opened = open(&target, Instant::now() + CONNECT, &terminating).and_then(|mut conn| {
            let a = Registry {
                conn: &mut conn,
                deadline: Instant::now() + EXCHANGE,
                should_stop: &terminating,
            }
            .identity()?;
            Ok((conn, a))
        });
        let (conn, a) = match opened {
            Ok(opened) => opened,
            Err(Failure::Interrupted) => return,
            Err(e) => {
                self.failures += 1;
                self.next_attempt = clock::boot_ms() + self.timing().back_off_ms(self.failures - 1);
                if self.failures == 1 || self.failures.is_multiple_of(10) {
                    errors::warn(
                        format!("snowflake: {NAME}: the new snowflake.registry cannot be reached: {e}"),
                        "This server keeps its lease in the registry it used until now, and tries again.",
                    );
                }
                return;
            }
        };
        if a.registry != current && current != 0 {
            errors::log(
                format!(
                    "snowflake: {NAME}: moving from registry {} to registry {}",
                    rules::format_uuid(current),
                    rules::format_uuid(a.registry)
                ),
                "The lease is given back in the old registry, with its final mark, before one is claimed in the new one.",
            );
            self.release("moving to another registry");
            self.next_attempt = 0;
        } else {
            self.renew_now = matches!(self.phase, Phase::Holding(_));
        }
        self.shared.control().lease.registry.set(&conn.server());
        self.conn = Some(conn);
        self.connected_with = target;
        self.switching = false;
        self.failures = 0;
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

/// A connection to the registry at `conninfo`, its session's search_path pinned.
fn open(
    conninfo: &str,
    deadline: Instant,
    should_stop: &'static dyn Fn() -> bool,
) -> Result<Connection, Failure> {
    let mut conn = Connection::open(conninfo, deadline, should_stop)?;
    conn.query(
        "SET search_path = pg_catalog, pg_temp",
        &[],
        deadline,
        should_stop,
    )?;
    Ok(conn)
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
        host_run: host_run(),
    }
}

/// The machine run this server started on: the kernel's boot id, and the mount, network and
/// IPC namespaces the postmaster runs in (this process inherited them). What cannot be read
/// is replaced by a random value, which never matches: an earlier start of this server then
/// waits out the lock-delay like any other holder.
fn host_run() -> String {
    let boot_id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| format!("unknown-{:016x}", clock::random_u64()));
    let ns = |name: &str| {
        std::fs::read_link(format!("/proc/self/ns/{name}"))
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_else(|_| format!("unknown-{:016x}", clock::random_u64()))
    };
    format!("{boot_id} {} {} {}", ns("mnt"), ns("net"), ns("ipc"))
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

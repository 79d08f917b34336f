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
//! refuses a server that comes from another registry whose leases it does not carry (a
//! registry of format 2 also froze on an epoch later than its own). Every network wait is bounded and
//! answers SIGTERM.

pub(crate) mod claim;
pub(crate) mod connection;
pub(crate) mod hold;
pub(crate) mod record;

use super::libpq::{Connection, Failure};
use super::registry::{Answer, Holder, Registry};
use super::{stop_using, Standing, NONE, RAN_OUT};
use crate::bgworker::latch::{self, Until};
use crate::bgworker::{self, signals, signals::terminating};
use crate::marks::mailbox::{self, Answer as Reply, Ask};
use crate::shared::control::State;
use crate::shared::shmem::{self, Shared};
use crate::{errors, mint::clock, settings};
use connection::{identity, open, timeline};
use pgrx::prelude::*;
use snowflake_core::generator::MARK_AHEAD_MS;
use snowflake_core::lease::{self as rules, Outcome, Seen, Timing, WorkerRange};
use std::sync::atomic::Ordering::*;
use std::time::{Duration, Instant};

const NAME: &str = "snowflake_ext lease keeper";
/// How long one exchange with the registry may take: no longer than the least lock-delay a
/// registry accepts (see `LEAST_LOCK_DELAY_MS`: an answer later than that could come from a
/// registry whose clock is behind, unnoticed).
const EXCHANGE: Duration = Duration::from_secs(5);
const _: () = assert!(EXCHANGE.as_millis() <= snowflake_core::lease::LEAST_LOCK_DELAY_MS as u128);
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
    bgworker::register(NAME, "snowflake_lease_keeper_main", false);
}

#[pg_guard]
// SAFETY: the name is unique to this library; the postmaster finds the entry point by it.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn snowflake_lease_keeper_main(_arg: pg_sys::Datum) {
    signals::install(&[libc::SIGTERM, libc::SIGHUP]);
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

impl Held {
    /// The boot time (ms) until which it may be used.
    fn usable_until(&self) -> u64 {
        Timing {
            ttl_ms: self.ttl_ms,
        }
        .usable_until(self.sent_at)
    }
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
    /// The worker ids last allowed (`claimable()`): when they change, the next claim is at
    /// once and shows `claiming`, not a refusal worded for the old ones.
    workers_setting: (WorkerRange, bool),
    ttl_clamped_warned: bool,
    /// Attempts that failed in a row, and when to try again.
    failures: u32,
    next_attempt: u64,
    /// What the last failure said: a new reason is logged at once.
    last_failure: String,
}

/// The worker ids this server may claim, and whether that is one set by hand: the worker id
/// of `snowflake.worker_id` when set (`snowflake.worker_range` does not apply then), else
/// `snowflake.worker_range`.
fn claimable() -> (WorkerRange, bool) {
    match settings::pinned() {
        Some(w) => (WorkerRange { first: w, last: w }, true),
        None => (settings::worker_range(), false),
    }
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
            workers_setting: claimable(),
            ttl_clamped_warned: false,
            failures: 0,
            next_attempt: 0,
            last_failure: String::new(),
        }
    }

    /// The request in flight, drawn if none is (see `lease::Status::request`; only the keeper
    /// writes it). Drawn outside the control lock.
    fn in_flight(&mut self) -> i64 {
        if let Some(request) = self.shared.control().lease.request {
            return request;
        }
        let drawn = (clock::random_u64() >> 1) as i64;
        self.shared.control().lease.request = Some(drawn);
        drawn
    }

    /// The registry answered the request in flight: settled, unless refused before the lease
    /// was read (then asked again as itself).
    fn answered(&mut self, outcome: Outcome) {
        if outcome.settles_the_request() {
            self.shared.control().lease.request = None;
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
            if bgworker::reload_if_pending() {
                self.reloaded();
            }
            let wake_at = if !settings::leasing() {
                self.leave_registry();
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

    /// `snowflake.registry` emptied, or `snowflake.worker_id` set to a number without it: the
    /// lease is given back, unless the server now names the same worker id by hand. Then it is
    /// kept in the registry (until it runs out there, and the lock-delay after it) and not
    /// minted in this start: given back, another server could take it at once while this one
    /// went on by hand.
    fn leave_registry(&mut self) {
        match self.phase {
            Phase::Holding(held) if settings::worker() == held.worker as i32 => {
                self.phase = Phase::Idle;
                stop_using(
                    self.shared,
                    held.worker,
                    "snowflake.registry was emptied while the worker id stays set by hand",
                );
                self.shared.control().lease.fence = None;
                errors::warn(
                    format!(
                        "snowflake: {NAME}: worker id {} was leased from the registry, and is now set by hand with no registry: this server mints no more ids with it until it restarts, and it stays leased in the registry until its lease runs out",
                        held.worker
                    ),
                    "A worker id set by hand must lie outside every leasing server's snowflake.worker_range. Set snowflake.registry back to lease it again; or stop this server, take the worker id out of the registry's use (snowflake_registry.release_worker, and a worker_range that leaves it out), and start it with the worker id set by hand.",
                );
            }
            _ => self.release("snowflake.registry is no longer used"),
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
        let wanted = |worker: u32| claimable().0.contains(worker);
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
        let workers = claimable();
        if workers != self.workers_setting {
            self.workers_setting = workers;
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
                let usable_until = held.usable_until();
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
                .min(h.usable_until()),
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

    fn set_status(&self, standing: Standing, why: &str) {
        let mut control = self.shared.control();
        control.lease.standing = standing;
        control.lease.why.set(why);
        control.lease.holder.set(&self.me.describe());
    }

    /// Waits on the latch until `until` (boot ms; forever: `None`), or a SIGTERM.
    fn sleep_until(&self, until: Option<u64>) {
        let deadline = until.map(|t| {
            Instant::now() + Duration::from_millis(t.saturating_sub(clock::boot_ms()).max(1))
        });
        latch::wait(deadline, Until::Latch);
    }
}

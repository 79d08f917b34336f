//! How a backend waits when its worker cannot issue at once, always without holding the
//! control lock and checking for interrupts: on the condition variable the mark writer
//! broadcasts whenever it raises marks or changes state, or on its latch for the clock.

use crate::errors;
use crate::shared::control::State;
use crate::shared::shmem::Shared;
use pgrx::prelude::*;
use std::time::{Duration, Instant};

/// How long a backend waits for a mark before it gives up with an error.
pub const MARK_WAIT_LIMIT: Duration = Duration::from_secs(10);
/// How often a waiting backend looks at the writer's state even without a broadcast.
pub const RECHECK_MS: i64 = 200;
/// How long a backend waits for a mark before it nudges the postmaster, and how often the
/// server as a whole nudges it after that (see `nudge_postmaster`).
const NUDGE_AFTER: Duration = Duration::from_secs(1);

/// Waits for the mark writer after a refusal for lack of a mark (or while the worker is
/// closed), then returns so the caller tries again; or raises the error that says why no
/// mark is coming. `since` is when this call started waiting. The first call only prepares
/// the condition variable and returns at once, so that the caller checks again before
/// sleeping and no broadcast is missed.
pub fn for_marks(shared: &Shared, worker: u32, since: Instant) {
    let (state, why, hint, failure) = {
        let control = shared.control();
        let failure = control.failing.then(|| control.failure.get());
        (
            control.state,
            control.why.get(),
            control.hint.get(),
            failure,
        )
    };
    if state == State::InDoubt {
        let hint = if hint.is_empty() {
            "Find the largest id this server may have issued (for example SELECT max(id) FROM each table), \
             then run SELECT snowflake_restore_mark(<that id>); or SELECT snowflake_restore_mark(ARRAY['t1', 't2']::regclass[]); \
             as a superuser. See the server log for details."
        } else {
            &hint
        };
        errors::no_marks(worker, why, hint);
    }
    if since.elapsed() > MARK_WAIT_LIMIT {
        let why = match (state, failure) {
            (State::Starting, failure) => format!(
                "the mark writer has not loaded the marks after {} s{}",
                MARK_WAIT_LIMIT.as_secs(),
                failure.map(|f| format!(": {f}")).unwrap_or_default()
            ),
            (_, Some(failure)) => format!(
                "its high-water mark could not be written for {} s: {failure}",
                MARK_WAIT_LIMIT.as_secs()
            ),
            _ => format!(
                "no high-water mark was written in {} s",
                MARK_WAIT_LIMIT.as_secs()
            ),
        };
        errors::no_marks(
            worker,
            why,
            &format!(
                "The \"snowflake_ext mark writer\" background worker keeps the marks in database \"{}\" \
                 (snowflake.database): check that it exists, that the server log shows no errors from the \
                 mark writer (a full disk, a lock held on snowflake_ext_state.marks, a synchronous standby \
                 that does not answer), and that max_worker_processes leaves room for it.",
                crate::settings::database()
            ),
        );
    }
    if since.elapsed() > NUDGE_AFTER {
        nudge_postmaster(shared);
    }
    // SAFETY: the condition variable lives in the shared segment; sleeping on it is what it is
    // for. It checks for interrupts, so a cancel or a terminate ends the wait.
    unsafe {
        pg_sys::ConditionVariableTimedSleep(shared.cv(), RECHECK_MS, pg_sys::PG_WAIT_EXTENSION);
    }
}

/// Asks the postmaster to look at its background workers, at most once per `NUDGE_AFTER`
/// across the server, so that a mark writer that exited is restarted when its restart time
/// is up rather than whenever the postmaster next wakes.
///
/// Why: before PostgreSQL 16 the postmaster computes its `select()` timeout (up to 60 s)
/// while signals are blocked; the SIGCHLD of a writer that exits just then (while the
/// postmaster is busy forking connections, say) is handled when signals are unblocked, but
/// does not shorten the sleep that follows, and the restart waits for the next connection
/// or the timeout. Every id of the server waits with it. `PMSIGNAL_BACKGROUND_WORKER_CHANGE`
/// runs `maybe_start_bgworkers` in the postmaster's signal handler, which restarts a crashed
/// worker whose restart time has passed and does nothing otherwise. From 16 on the
/// postmaster waits on a latch, the race is gone, and this does nothing.
fn nudge_postmaster(shared: &Shared) {
    #[cfg(any(feature = "pg14", feature = "pg15"))]
    {
        use std::sync::atomic::Ordering::Relaxed;
        let now = crate::mint::clock::boot_ms();
        let last = shared.postmaster_nudged_at.load(Relaxed);
        if now.saturating_sub(last) < NUDGE_AFTER.as_millis() as u64
            || shared
                .postmaster_nudged_at
                .compare_exchange(last, now, Relaxed, Relaxed)
                .is_err()
        {
            return;
        }
        // SAFETY: the declaration matches `void SendPostmasterSignal(PMSignalReason)` of 14
        // and 15, whose enum is passed as an int.
        unsafe extern "C-unwind" {
            /// storage/pmsignal.h; not in pgrx's bindings. `PMSignalReason` is a C enum,
            /// passed as an int.
            fn SendPostmasterSignal(reason: std::ffi::c_int);
        }
        /// `PMSIGNAL_BACKGROUND_WORKER_CHANGE` in PostgreSQL 14 and 15 (the sixth value).
        const PMSIGNAL_BACKGROUND_WORKER_CHANGE: std::ffi::c_int = 5;
        // SAFETY: a backend may signal the postmaster at any time; this reason only makes it
        // look at the background worker list.
        unsafe { SendPostmasterSignal(PMSIGNAL_BACKGROUND_WORKER_CHANGE) };
    }
    #[cfg(not(any(feature = "pg14", feature = "pg15")))]
    let _ = shared;
}

/// Ends a wait that `for_marks` may have prepared (a no-op otherwise).
pub fn done() {
    // SAFETY: cancels this backend's own condition-variable sleep, if any.
    unsafe { pg_sys::ConditionVariableCancelSleep() };
}

/// Sleeps `ms` milliseconds (at least 1) on the latch, for the clock to catch up, checking
/// for interrupts.
pub fn for_clock(ms: u64) {
    crate::bgworker::latch::wait_once(Some(ms.clamp(1, 1000) as i64), None);
    pg_sys::check_for_interrupts!();
}

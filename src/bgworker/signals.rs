//! The workers' signals: SIGTERM (stop), SIGINT (cancel, as `pg_cancel_backend` sends) and
//! SIGHUP (reload), all handled by one handler that only sets flags and the latch. The mark
//! writer installs it for all three; the lease keeper, which has no database connection and
//! never enters a transaction, for SIGTERM and SIGHUP only (SIGINT stays ignored, as the
//! postmaster leaves it for such a worker). The Citus check uses PostgreSQL's own handlers
//! instead ([`install_postgres_handlers`]).

use pgrx::pg_sys;
use std::ffi::c_int;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};

/// Set by SIGTERM.
static TERMINATE: AtomicBool = AtomicBool::new(false);
/// Whether the writer is inside a transaction (see `session::transaction`).
static IN_TRANSACTION: AtomicBool = AtomicBool::new(false);
/// Set once the writer writes its final marks (`Writer::stop`): no signal cancels that write.
static FINAL_WRITE: AtomicBool = AtomicBool::new(false);
/// Counts SIGTERMs and SIGINTs. Either one cuts short a wait for a synchronous standby, after
/// which the commit returns as if it were complete: a write during which one arrived is not
/// trusted (`Writer::write`).
static INTERRUPTS: AtomicU64 = AtomicU64::new(0);

/// Installs the handler for `signals` (of SIGTERM, SIGINT and SIGHUP) and unblocks signals, as
/// every background worker does first.
pub fn install(signals: &[i32]) {
    // SAFETY: installing handlers in our own process before unblocking signals; the handler
    // only does what a signal handler may.
    unsafe {
        for &signal in signals {
            #[cfg(not(feature = "pg18"))]
            pg_sys::pqsignal(signal, Some(on_signal));
            #[cfg(feature = "pg18")]
            pg_sys::pqsignal_be(signal, Some(on_signal));
        }
        pg_sys::BackgroundWorkerUnblockSignals();
    }
}

/// Whether a SIGTERM asked the worker to stop.
pub fn terminating() -> bool {
    TERMINATE.load(SeqCst)
}

/// How many SIGTERMs and SIGINTs arrived so far.
pub fn interrupts() -> u64 {
    INTERRUPTS.load(SeqCst)
}

/// Notes whether the writer is inside a transaction, where a SIGTERM or SIGINT must cancel
/// what it waits for.
pub fn set_in_transaction(inside: bool) {
    IN_TRANSACTION.store(inside, SeqCst);
}

/// From here on the writer writes its final marks, and no signal cancels that. The postmaster
/// signals each child twice on a shutdown (the process, then its process group), so a second
/// SIGTERM often lands while the final marks are being written; cancelled, they were not
/// written, and ids resumed after the restart from the last running mark, up to 2 s ahead,
/// instead of exactly where they stopped. The final write waits for nothing unbounded: its
/// commit does not wait for a standby (`synchronous_commit = local`), and a lock for at most
/// `lock_timeout`.
pub fn final_write() {
    FINAL_WRITE.store(true, SeqCst);
}

/// * SIGTERM: stop at the next safe point;
/// * SIGINT (`pg_cancel_backend`): noted, since it too ends a wait for a standby;
/// * SIGHUP: reload the configuration at the next safe point.
///
/// Inside a transaction SIGTERM and SIGINT also cancel what the writer waits for (a lock, a
/// synchronous standby), the way a query cancel would, so that a shutdown is never held up by
/// a standby that does not answer; outside one there is nothing to cancel, and a pending
/// cancel would only turn the next log message into an error; during the final write, which
/// waits for no standby, nothing is cancelled (`final_write`).
// SAFETY: installed as a signal handler only; it does nothing a handler may not.
unsafe extern "C-unwind" fn on_signal(signal: i32) {
    // SAFETY: only async-signal-safe work: atomics, the flags PostgreSQL's own handlers set,
    // and SetLatch, which PostgreSQL documents as safe in a signal handler. errno is preserved.
    unsafe {
        let saved = *libc::__errno_location();
        if signal == libc::SIGHUP {
            pg_sys::ConfigReloadPending = 1;
        } else {
            if signal == libc::SIGTERM {
                TERMINATE.store(true, SeqCst);
            }
            INTERRUPTS.fetch_add(1, SeqCst);
            if IN_TRANSACTION.load(SeqCst) && !FINAL_WRITE.load(SeqCst) {
                pg_sys::QueryCancelPending = 1;
                pg_sys::InterruptPending = 1;
            }
        }
        pg_sys::SetLatch(pg_sys::MyLatch);
        *libc::__errno_location() = saved;
    }
}

// SAFETY: the declarations match PostgreSQL's `void die(SIGNAL_ARGS)` and
// `void SignalHandlerForConfigReload(SIGNAL_ARGS)` of every supported major.
unsafe extern "C-unwind" {
    /// PostgreSQL's own signal handlers, as C symbols: pgrx wraps its bindings of them in Rust
    /// functions, which cannot be handlers.
    #[link_name = "die"]
    fn die_handler(signal: c_int);
    #[link_name = "SignalHandlerForConfigReload"]
    fn reload_handler(signal: c_int);
}

/// Installs PostgreSQL's own handlers, `die` for SIGTERM and `SignalHandlerForConfigReload`
/// for SIGHUP, and unblocks signals: SIGTERM then ends the process at the next
/// `CHECK_FOR_INTERRUPTS`, inside waits of code that is not ours too; SIGINT keeps the
/// statement-cancel handler the postmaster gave a worker with a database connection, which
/// the statement timeout uses.
pub fn install_postgres_handlers() {
    // SAFETY: a background worker installs its handlers before it unblocks signals; both
    // handlers are PostgreSQL's.
    unsafe {
        #[cfg(not(feature = "pg18"))]
        {
            pg_sys::pqsignal(libc::SIGTERM, Some(die_handler));
            pg_sys::pqsignal(libc::SIGHUP, Some(reload_handler));
        }
        #[cfg(feature = "pg18")]
        {
            pg_sys::pqsignal_be(libc::SIGTERM, Some(die_handler));
            pg_sys::pqsignal_be(libc::SIGHUP, Some(reload_handler));
        }
        pg_sys::BackgroundWorkerUnblockSignals();
    }
}

//! The one way a process of this extension waits on its latch: [`wait_once`], always with
//! `WL_EXIT_ON_PM_DEATH`, optionally bounded and optionally on a socket too (the lease keeper's
//! connection to the registry); and, for the workers, [`wait`], which waits until a deadline
//! and either until the latch is set or, after a failure, whatever sets it. Every wake absorbs
//! what PostgreSQL asks of every process whatever it waits for ([`absorb_requests`]): a
//! ProcSignalBarrier (`DROP DATABASE`, `ALTER DATABASE … SET TABLESPACE`, `CREATE DATABASE …
//! STRATEGY wal_log` wait until every process has absorbed theirs) and a request to log the
//! memory contexts. Callers check for their own interrupts and conditions after each wait.

use super::signals;
use pgrx::pg_sys;
use std::time::Instant;

/// What ends a wait besides its deadline and a SIGTERM.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Until {
    /// The latch: a backend asks for a mark, an administrator for a change.
    Latch,
    /// Nothing: the writer backs off for the whole time, however often it is asked.
    Deadline,
}

/// Waits until `deadline` (forever: `None`) or, with `Until::Latch`, the latch is set; a
/// SIGTERM always ends the wait.
pub fn wait(deadline: Option<Instant>, until: Until) {
    loop {
        if signals::terminating() {
            return;
        }
        let timeout_ms = match deadline {
            Some(deadline) => {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return;
                }
                Some(left.as_millis() as i64 + 1)
            }
            None => None,
        };
        let woke = wait_once(timeout_ms, None);
        if until == Until::Latch && woke & pg_sys::WL_LATCH_SET as i32 != 0 {
            return;
        }
    }
}

/// One wait on this process's latch (`WL_LATCH_SET | WL_EXIT_ON_PM_DEATH`), for at most
/// `timeout_ms` (unbounded: `None`) and, with `socket`, until that socket has the given
/// `WL_SOCKET_*` events; returns the events that ended it. The latch is reset when it was set.
pub fn wait_once(timeout_ms: Option<i64>, socket: Option<(pg_sys::pgsocket, u32)>) -> i32 {
    let mut events = pg_sys::WL_LATCH_SET | pg_sys::WL_EXIT_ON_PM_DEATH;
    if timeout_ms.is_some() {
        events |= pg_sys::WL_TIMEOUT;
    }
    let timeout_ms = timeout_ms.unwrap_or(-1);
    // SAFETY: the standard wait on this process's own latch and, if any, on a socket the
    // caller keeps open for the length of the wait. Without a socket, WaitLatch: it reuses
    // the process's wait set where WaitLatchOrSocket makes one per call.
    unsafe {
        let woke = match socket {
            None => pg_sys::WaitLatch(
                pg_sys::MyLatch,
                events as i32,
                timeout_ms,
                pg_sys::PG_WAIT_EXTENSION,
            ),
            Some((sock, socket_events)) => pg_sys::WaitLatchOrSocket(
                pg_sys::MyLatch,
                (events | socket_events) as i32,
                sock,
                timeout_ms,
                pg_sys::PG_WAIT_EXTENSION,
            ),
        };
        if woke & pg_sys::WL_LATCH_SET as i32 != 0 {
            pg_sys::ResetLatch(pg_sys::MyLatch);
        }
        absorb_requests();
        woke
    }
}

/// Does what PostgreSQL's own auxiliary processes do on every wake (`HandleMainLoopInterrupts`):
/// absorbs a pending ProcSignalBarrier and logs the memory contexts if asked. The signal that
/// asks for either only sets a flag and the latch; a process that woke and went back to sleep
/// without looking held up every barrier's sender: `DROP DATABASE` waited, the log repeating
/// "still waiting for backend … to accept ProcSignalBarrier", until the worker happened to
/// enter a transaction (for the mark writer, until some backend minted). Skipped where
/// `CHECK_FOR_INTERRUPTS` would skip it too (interrupts held off, a critical section): no
/// caller waits there, and the next wake absorbs it.
pub fn absorb_requests() {
    // SAFETY: reads of flags that signal handlers set (volatile, as PostgreSQL reads them) and
    // the two functions PostgreSQL itself calls at this point of a main loop, outside any
    // critical section and with interrupts not held off.
    unsafe {
        if std::ptr::read_volatile(&raw const pg_sys::InterruptHoldoffCount) != 0
            || std::ptr::read_volatile(&raw const pg_sys::CritSectionCount) != 0
        {
            return;
        }
        if std::ptr::read_volatile(&raw const pg_sys::ProcSignalBarrierPending) != 0 {
            pg_sys::ProcessProcSignalBarrier();
        }
        if std::ptr::read_volatile(&raw const pg_sys::LogMemoryContextPending) != 0 {
            pg_sys::ProcessLogMemoryContextInterrupt();
        }
    }
}

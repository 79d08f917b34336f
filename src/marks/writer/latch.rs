//! The mark writer's one way to wait: on its latch, with `WL_EXIT_ON_PM_DEATH`, until a
//! deadline, and either until the latch is set or, after a failure, whatever sets it.

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
        let mut events = pg_sys::WL_LATCH_SET | pg_sys::WL_EXIT_ON_PM_DEATH;
        let timeout_ms = match deadline {
            Some(deadline) => {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return;
                }
                events |= pg_sys::WL_TIMEOUT;
                left.as_millis() as i64 + 1
            }
            None => -1,
        };
        // SAFETY: the standard latch wait of a background worker, on its own latch.
        let woke = unsafe {
            let woke = pg_sys::WaitLatch(
                pg_sys::MyLatch,
                events as i32,
                timeout_ms,
                pg_sys::PG_WAIT_EXTENSION,
            );
            pg_sys::ResetLatch(pg_sys::MyLatch);
            woke
        };
        if until == Until::Latch && woke & pg_sys::WL_LATCH_SET as i32 != 0 {
            return;
        }
    }
}

//! The Citus check's state in shared memory: [`CitusShared`] in the segment's header (read by
//! every `snowflake_nextval()`), and [`Status`] in the control block. Data, with the atomic
//! operations that keep its word consistent; the check itself is [`crate::tables::citus`].

use crate::shared::text::Text;
use pgrx::pg_sys;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicU64, AtomicUsize, Ordering::*};

/// No worker id may be used now (not compared yet, revoked, or in conflict).
pub const NONE: u32 = u32::MAX;
/// Every worker id may be used (no Citus in the marks database).
pub const ANY: u32 = u32::MAX - 1;
/// Room for prepared transactions that change the membership, pending at once.
pub const PREPARED_SLOTS: usize = 16;
/// Whether Citus is preloaded in this server (set in `_PG_init`, in the postmaster).
pub static PRELOADED: AtomicBool = AtomicBool::new(false);

/// What backends read, in shared memory, on a cache line of its own: `state` is read by every
/// `snowflake_nextval()`, and nothing here is written often.
#[repr(align(128))]
pub struct CitusShared {
    /// `epoch << 32 | verified`: the worker id this node has compared with every other and may
    /// mint with (or `NONE`, `ANY`). Every revocation raises the epoch, and the check publishes
    /// a comparison only over the epoch it started from.
    pub state: AtomicU64,
    /// The hand-set worker id the Citus check compares (-1: none), for messages.
    pub configured: AtomicI32,
    /// The Citus check's latch (0 while it is not running): a backend that waits sets it.
    pub latch: AtomicUsize,
    /// Failed attempts of the check to connect to the marks database, for its back-off.
    pub connect_attempts: AtomicU32,
    /// The OIDs of the marks database and of its `pg_dist_node` (0: not known, or no Citus),
    /// published by the check for the relation cache callback.
    pub marks_database: AtomicU32,
    pub dist_node: AtomicU32,
    /// Full transaction ids of prepared transactions that changed the membership (0: free),
    /// and whether one did not fit.
    pub prepared: [AtomicU64; PREPARED_SLOTS],
    pub prepared_overflow: AtomicBool,
}

impl CitusShared {
    pub fn new() -> CitusShared {
        let verified = if PRELOADED.load(Relaxed) { NONE } else { ANY };
        CitusShared {
            state: AtomicU64::new(u64::from(verified)),
            configured: AtomicI32::new(-1),
            latch: AtomicUsize::new(0),
            connect_attempts: AtomicU32::new(0),
            marks_database: AtomicU32::new(0),
            dist_node: AtomicU32::new(0),
            prepared: [const { AtomicU64::new(0) }; PREPARED_SLOTS],
            prepared_overflow: AtomicBool::new(false),
        }
    }

    /// The worker id that may be used now.
    #[inline(always)]
    pub fn verified(&self) -> u32 {
        self.state.load(Acquire) as u32
    }

    /// Nothing may be minted under the comparison made so far: a new one is needed. Wakes the
    /// check. Safe anywhere (a signal-free atomic and a latch), even in a cache callback.
    pub fn revoke(&self) {
        self.revoke_quietly();
        self.wake();
    }

    /// As `revoke`, without waking the check: for the postmaster, which must not touch a
    /// latch in shared memory (the check wakes on the same reload's SIGHUP).
    pub fn revoke_quietly(&self) {
        let _ = self.state.fetch_update(AcqRel, Acquire, |s| {
            Some((((s >> 32) + 1) << 32) | u64::from(NONE))
        });
    }

    /// Publishes `verified` if nothing revoked the comparison since `from` was read.
    pub fn publish(&self, from: u64, verified: u32) -> bool {
        let to = (from & !u64::from(u32::MAX)) | u64::from(verified);
        self.state
            .compare_exchange(from, to, AcqRel, Acquire)
            .is_ok()
    }

    pub fn wake(&self) {
        let latch = self.latch.load(Acquire);
        if latch != 0 {
            // SAFETY: the check's latch lives in its PGPROC, in shared memory, for as long as it
            // runs; it clears `latch` before it exits. SetLatch is safe in any context.
            unsafe { pg_sys::SetLatch(latch as *mut pg_sys::Latch) };
        }
    }
}

impl Default for CitusShared {
    fn default() -> CitusShared {
        CitusShared::new()
    }
}

/// What the last comparison found, in the control block (under the control lock).
#[derive(Clone, Copy)]
pub struct Status {
    /// A worker id another node has too (`NONE`: no conflict), and the two nodes.
    pub conflict: u32,
    pub this_node: Text,
    pub other_node: Text,
    /// Why the worker id could not be compared (empty: it could, or nothing was tried).
    pub failure: Text,
}

impl Default for Status {
    fn default() -> Status {
        Status {
            conflict: NONE,
            this_node: Text::default(),
            other_node: Text::default(),
            failure: Text::default(),
        }
    }
}

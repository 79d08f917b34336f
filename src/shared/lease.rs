//! The lease of a worker id as it lives in shared memory: [`LeaseShared`] in the segment's
//! header, read on the hot path, and [`Status`] in the control block, for `snowflake_status()`
//! and errors. Data only; the lease keeper and the backends' checks are in [`crate::lease`].

use crate::shared::text::Text;
use std::sync::atomic::{AtomicU32, AtomicU64};

/// `LeaseShared::worker` while no worker id is leased.
pub const NONE: u32 = u32::MAX;

/// The lease in shared memory: what the hot path and the slow path read. Written by the keeper
/// under the control lock; `worker` is also cleared (compare-and-swap) by a backend that finds
/// the lease ran out.
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
    /// No registry is used.
    #[default]
    NotUsed,
    Claiming,
    /// Claimed, waiting out the lock-delay before confirming.
    Waiting,
    Held,
    /// The registry cannot be reached (or refuses); retrying.
    Unreachable,
    /// No worker id of the range is free.
    Exhausted,
    /// The worker id `snowflake.worker_id` names is held by another server.
    Taken,
    /// A standby promoted after this server took over: it leases nothing.
    Superseded,
    /// A copy of this server holds the worker id: this one stopped for good.
    Duplicate,
    /// A registry of format 2 froze (it went back in time): it must be upgraded or recovered.
    Frozen,
    /// The registry is not the one this server leased from, and does not carry its leases.
    Foreign,
    /// The registry's leases moved to another registry.
    Moved,
    /// This server's clock is too far from the registry's.
    Skew,
    /// The registry refuses this server's role or settings.
    Refused,
}

impl Standing {
    pub fn name(self) -> &'static str {
        match self {
            Standing::NotUsed => "not used",
            Standing::Claiming => "claiming",
            Standing::Waiting => "waiting",
            Standing::Held => "held",
            Standing::Unreachable => "unreachable",
            Standing::Exhausted => "exhausted",
            Standing::Taken => "taken",
            Standing::Superseded => "superseded",
            Standing::Duplicate => "duplicate",
            Standing::Frozen => "frozen",
            Standing::Foreign => "foreign",
            Standing::Moved => "moved",
            Standing::Skew => "skew",
            Standing::Refused => "refused",
        }
    }
}

/// The lease as `snowflake_status()` shows it, in the control block (under the control lock;
/// written by the keeper, and by a backend that stops a lease that ran out).
#[derive(Clone, Copy, Default)]
pub struct Status {
    pub standing: Standing,
    pub worker: Option<u32>,
    /// The fence of the lease this start of the server holds (a restarted keeper continues it).
    pub fence: Option<i64>,
    /// The boot time (ms) until which that lease may be used, by this server's count: a claim
    /// brings the fence only until then (the registry hands a worker id over at once on that
    /// ground alone).
    pub fence_until: u64,
    /// The keeper's request in flight (a renewal, a claim, a confirmation): drawn at its first
    /// attempt, kept until the registry answers, so that an attempt whose answer was lost is
    /// asked again as itself (the registry would otherwise take this server's own grant for a
    /// copy's), by a restarted keeper too.
    pub request: Option<i64>,
    /// Unix ms at which the registry lets the lease go, as estimated here.
    pub expires_unix_ms: i64,
    /// While waiting out the lock-delay: Unix ms at which the claim is confirmed.
    pub waiting_until_unix_ms: i64,
    pub holder: Text,
    pub registry: Text,
    pub why: Text,
}

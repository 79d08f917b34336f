//! Worker ids leased from a registry: `snowflake.worker_id = 'auto'`, or a number with
//! `snowflake.registry` set (the server then leases exactly that worker id, and refuses to mint
//! while another server holds it). This file is the backends' side: the leased worker id in
//! shared memory (one load on the hot path), the check on the slow path that stops a lease that
//! ran out even when the keeper is stuck, and the errors and status that say why there is none.
//! The *lease keeper* ([`keeper`]) is the background worker that claims, waits out the
//! lock-delay, confirms, renews and gives back leases; [`registry`] is what it asks the
//! registry, whose functions run the protocol (`sql/registry/registry.sql`); [`libpq`] is the
//! connection. The rules are `snowflake_core::lease`.

pub(crate) mod keeper;
pub mod libpq;
pub(crate) mod registry;

pub use crate::shared::lease::{LeaseShared, Standing, Status, NONE};
pub use keeper::register;

use crate::shared::shmem::{ControlGuard, Shared};
use crate::{errors, mint::clock, settings};
use pgrx::prelude::*;
use snowflake_core::generator::CLOSED;
use std::sync::atomic::Ordering::*;

/// The worker id `snowflake_nextval()` uses when leasing, or an error that says why there is
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
    let w = crate::shared::shmem::shared().lease.worker.load(Acquire);
    (w != NONE).then_some(w as i32)
}

/// On the slow path: a lease that ran out (the keeper could not renew in time) is stopped
/// here, whatever the keeper is doing, and the call refused.
pub fn check(shared: &Shared, worker: u32) {
    if !settings::leasing() {
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
    let (standing, why, registry, waiting_until) = {
        let control = shared.control();
        (
            control.lease.standing,
            control.lease.why.get(),
            control.lease.registry.get(),
            control.lease.waiting_until_unix_ms,
        )
    };
    let registry = if registry.is_empty() {
        settings::registry_shown()
    } else {
        registry
    };
    let (reason, hint): (String, &str) = match standing {
        Standing::Exhausted => (
            format!(
                "every worker id of snowflake.worker_range ({}) is leased by another server",
                settings::worker_range()
            ),
            "Widen snowflake.worker_range, or release a worker id no server uses any more \
             (SELECT snowflake_registry.release_worker(N) in the registry, as its owner).",
        ),
        Standing::Taken => (
            why,
            "Another server holds the worker id this server's snowflake.worker_id names: give \
             this server another one, or snowflake.worker_id = 'auto' to lease a free one.",
        ),
        Standing::Waiting => (
            format!(
                "{why}; this server claimed it and mints from {} on, once no earlier holder can \
                 still be minting with it (the registry's lock-delay)",
                timestamp_text(waiting_until)
            ),
            "Wait for the claim to be confirmed (see snowflake_status()); a server that gives its \
             worker id back at a clean stop lets the next holder take it at once.",
        ),
        Standing::Superseded => (
            format!("a standby promoted after this server replaced it: {why}"),
            "This server was replaced (only a registry older than snowflake_ext 0.5.0 says so \
             for good); rebuild it as a standby of its successor, or run the current \
             registry.sql on the registry, after which it claims like any other server.",
        ),
        Standing::Duplicate => (
            format!("a copy of this server holds its worker id: {why}"),
            "Two servers with this one's system identifier, host name, port and data directory \
             run (a VM snapshot started beside its original, a copied data directory on a host \
             of the same name). Stop the copy, then restart this server; it stays stopped until \
             then, so that the two never take turns with one worker id.",
        ),
        Standing::Frozen => (
            format!("the registry ({registry}) refuses every lease: {why}"),
            "The registry runs format 2, which froze: its owner runs sql/registry/registry.sql \
             of this version there (format 3 never freezes: docs/leases.md, \"Running \
             registry.sql again\").",
        ),
        Standing::Foreign => (
            format!("the registry ({registry}) is not the one it leased from: {why}"),
            "To move a fleet to a new registry, export the old one's leases into it \
             (snowflake_registry.export and import); or, if no server of the old registry holds \
             a worker id the new one could grant, run SELECT snowflake_registry.accept('<old \
             registry id>') in the new one.",
        ),
        Standing::Moved => (
            format!("the registry ({registry}) grants no new lease: {why}"),
            "Point snowflake.registry at the registry its leases moved to, and reload.",
        ),
        Standing::Skew => (
            format!("the registry refused its claim: {why}"),
            "Synchronise this server's clock (and the registry's) with NTP; the lease keeper \
             claims again on its own.",
        ),
        Standing::Refused => (
            format!("the registry ({registry}) refused it: {why}"),
            "See the server log; the lease keeper retries on its own.",
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
    errors::no_lease(&reason, hint)
}

/// A Unix time in ms as PostgreSQL would show a timestamptz, for messages.
fn timestamp_text(unix_ms: i64) -> String {
    TimestampWithTimeZone::try_from(snowflake_core::layout::pg_micros_from_unix_ms(unix_ms))
        .map(|t| t.to_string())
        .unwrap_or_else(|_| format!("{unix_ms} ms after 1970"))
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
    if settings::leasing() {
        let control = shared.control();
        let l = &control.lease;
        let why = l.why.get();
        let server = l.registry.get();
        let registry = format!(
            "{}{}{}",
            l.standing.name(),
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
        return Shown {
            worker: (worker != NONE).then_some(worker as i32),
            source: "registry",
            holder: Some(l.holder.get()).filter(|h| !h.is_empty()),
            expires: (worker != NONE)
                .then(|| {
                    TimestampWithTimeZone::try_from(snowflake_core::layout::pg_micros_from_unix_ms(
                        l.expires_unix_ms,
                    ))
                    .ok()
                })
                .flatten(),
            registry: Some(registry),
        };
    }
    match settings::worker() {
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

/// What this server is configured with: the worker id `snowflake_nextval()` uses (NULL when
/// unset, or with `auto` while no worker id is leased), whether it is set, and whether the
/// library is preloaded (without which nothing can be generated). STABLE: it changes only with
/// a configuration reload or a lease.
#[pg_extern(stable, parallel_safe)]
fn snowflake_worker_id() -> TableIterator<
    'static,
    (
        name!(worker_id, Option<i32>),
        name!(is_set, bool),
        name!(preloaded, bool),
    ),
> {
    let (worker, is_set) = match settings::worker() {
        settings::AUTO => (leased(), true),
        settings::UNSET => (None, false),
        w => (Some(w), true),
    };
    TableIterator::once((worker, is_set, settings::is_preloaded()))
}

//! Citus: the nodes of one cluster must not share a worker id set by hand. Their rows meet in
//! the cluster's distributed tables, so two nodes minting with one worker id store the same
//! ids (a duplicate key, or worse, the same id under two tenants). Each node therefore compares
//! its `snowflake.worker_id` with every other node's before it mints with it, and keeps
//! comparing while it runs.
//!
//! Who compares: a background worker of each node, the *Citus check*, registered only when
//! Citus is in `shared_preload_libraries`. It connects to the marks database
//! (`snowflake.database`, which must be the database Citus runs in) with the mark writer's
//! hardened session, and asks Citus itself, through `run_command_on_all_nodes`, for the setting
//! of every active primary node in `pg_dist_node`: Citus's own metadata, connections and
//! authentication, nothing of ours on the other nodes but the setting. A new connection reads a
//! node's setting as its postmaster has it now, so of two nodes that take one worker id at
//! about the same time, at least one sees the other's (each compares after taking it).
//!
//! When: before the first id with a worker id (after a start, after a reload changed it);
//! before the first id after the cluster's membership changed (`citus_add_node`, a node
//! removed, disabled or activated); every 10 s while all is well; every 2 s while a conflict
//! lasts. A membership change *revokes* the comparison at once, so no id is minted under a
//! comparison made with another membership: every backend has a relation cache callback that
//! revokes when `pg_dist_node` is invalidated (so the backend that changes it revokes as it
//! changes it, and again when it commits, and any other backend of the marks database when it
//! next starts a transaction), a transaction that prepares such a change (Citus syncs metadata
//! to workers in two phases) is waited for until it is committed or rolled back, and the check
//! looks at the membership every second besides. A comparison is published only if nothing
//! revoked it while it ran (an epoch in the same word as the result).
//!
//! What follows: a worker id is *verified* once every node answered and none has it; then the
//! node mints with it, even if a node stops answering later (that node, to take the id, would
//! first have to reach this one, or it refuses too). A node that does not answer before the
//! first id: refused, naming it (fail closed: a node unreachable from here may still mint). A
//! node with the same worker id: both nodes refuse, each naming both, until one gets another.
//!
//! Cost: the hot path reads one atomic (`CitusShared::state`) and compares it; every network
//! wait is in the Citus check, bounded (`COMPARE_TIMEOUT_MS`, Citus's own connection timeout
//! below it) and answering SIGTERM; a backend that must wait sleeps on the condition variable,
//! never under the control lock, and gives up after `WAIT_LIMIT` with the reason.
//!
//! Worker ids leased from a registry (`auto`) are the registry's to keep apart; nodes set to
//! `auto` are not compared, and `snowflake_nextval(worker)` with an explicit worker is not
//! either (a loader's own range).

pub(crate) mod check;

use crate::marks::writer::session;
use crate::shared::citus::PRELOADED;

pub use crate::shared::citus::{CitusShared, Status, ANY, NONE};
use crate::shared::shmem::{self, Shared};
use crate::{errors, settings};
use pgrx::prelude::*;
use std::ffi::{c_int, c_void, CStr};
use std::sync::atomic::{AtomicBool, Ordering::*};
use std::time::{Duration, Instant};

const NAME: &str = "snowflake_ext Citus check";
/// How long a backend waits for the comparison before it gives up with the reason.
const WAIT_LIMIT: Duration = Duration::from_secs(10);
/// How long one comparison may take, connections included (Citus's own connection timeout is
/// set below it).
const COMPARE_TIMEOUT_MS: c_int = 8_000;
const CONNECT_TIMEOUT_MS: &str = "5000";
/// How often the check looks at the cluster's membership (a read of the local catalog).
const LOOK_EVERY: Duration = Duration::from_secs(1);
/// How soon it looks again while a prepared membership change is pending.
const PENDING_POLL: Duration = Duration::from_millis(100);
/// How often a verified worker id is compared again, and one in conflict or not yet verified.
const RECHECK_VERIFIED: Duration = Duration::from_secs(10);
const RECHECK_TROUBLED: Duration = Duration::from_secs(2);
/// The longest pause between two attempts to connect to the marks database.
const MAX_CONNECT_BACK_OFF: Duration = Duration::from_secs(60);

/// Whether the current transaction of this backend changed (or may have changed) the
/// membership: it revokes again when it commits, and records itself when it prepares.
static CHANGED_IN_TRANSACTION: AtomicBool = AtomicBool::new(false);

/// From `_PG_init` while preloading (before shared memory is made): notes whether Citus is
/// preloaded and, if it is, registers the Citus check and the callbacks that revoke a
/// comparison when the membership changes (in the postmaster, so that every process has them).
pub fn register() {
    // SAFETY: GetConfigOption returns NULL or a NUL-terminated string valid until the next
    // configuration change; it is copied at once. IsBinaryUpgrade is a plain flag.
    let (libraries, binary_upgrade) = unsafe {
        let value = pg_sys::GetConfigOption(c"shared_preload_libraries".as_ptr(), true, false);
        let libraries = if value.is_null() {
            String::new()
        } else {
            CStr::from_ptr(value).to_string_lossy().into_owned()
        };
        (libraries, pg_sys::IsBinaryUpgrade)
    };
    let citus = libraries
        .split(',')
        .any(|l| l.trim().trim_matches('"') == "citus");
    PRELOADED.store(citus, Relaxed);
    if !citus || binary_upgrade {
        return;
    }
    // SAFETY: both lists are static arrays of the process, inherited by every child; the
    // callbacks only touch atomics and a latch.
    unsafe {
        pg_sys::CacheRegisterRelcacheCallback(Some(on_relcache), pg_sys::Datum::from(0));
        pg_sys::RegisterXactCallback(Some(on_transaction), std::ptr::null_mut());
    }
    // A hand-set worker id changed by reload is compared again before any session mints with
    // either value: revoked in the postmaster before it signals the reload to anyone, so a
    // session still in a statement under the old worker id stops too.
    let _ = crate::settings::WORKER_ID_CHANGED.set(|| {
        if let Some(shared) = shmem::try_shared() {
            shared.citus.revoke_quietly();
        }
    });
    crate::bgworker::register(NAME, "snowflake_citus_check_main", true);
}

/// A relation cache invalidation in this backend: of `pg_dist_node` (a membership change, made
/// here or committed by another backend), of everything (a cache reset), or, until the check
/// has seen the marks database's `pg_dist_node`, of any relation of that database
/// (`CREATE EXTENSION citus` makes it, and a node being added fills it).
/// Runs in the middle of cache processing: no error, no allocation, no catalog access.
// SAFETY: registered with CacheRegisterRelcacheCallback and called only by PostgreSQL with a
// relation OID; it reads atomics and this backend's database id, nothing it could invalidate.
unsafe extern "C-unwind" fn on_relcache(_arg: pg_sys::Datum, relid: pg_sys::Oid) {
    let Some(shared) = shmem::try_shared() else {
        return;
    };
    let c = &shared.citus;
    let marks_database = c.marks_database.load(Acquire);
    // SAFETY: a plain read of this backend's database.
    if marks_database == 0 || unsafe { pg_sys::MyDatabaseId }.to_u32() != marks_database {
        return;
    }
    let dist_node = c.dist_node.load(Acquire);
    let relid = relid.to_u32();
    // Until the check has seen pg_dist_node, any relation may be it.
    if relid == 0 || dist_node == 0 || relid == dist_node {
        CHANGED_IN_TRANSACTION.store(true, Relaxed);
        c.revoke();
    }
}

/// The end of a transaction that changed the membership: revoked again once its change is
/// visible (a commit), or recorded until it is resolved (a prepare).
// SAFETY: registered with RegisterXactCallback and called only by PostgreSQL with an event;
// it touches atomics in shared memory and this backend's own transaction state.
unsafe extern "C-unwind" fn on_transaction(event: pg_sys::XactEvent::Type, _arg: *mut c_void) {
    use pg_sys::XactEvent::*;
    let Some(shared) = shmem::try_shared() else {
        return;
    };
    let ends = matches!(
        event,
        XACT_EVENT_COMMIT
            | XACT_EVENT_PARALLEL_COMMIT
            | XACT_EVENT_PRE_PREPARE
            | XACT_EVENT_ABORT
            | XACT_EVENT_PARALLEL_ABORT
            | XACT_EVENT_PREPARE
    );
    if !ends || !CHANGED_IN_TRANSACTION.swap(false, Relaxed) {
        return;
    }
    if event == XACT_EVENT_PRE_PREPARE {
        // SAFETY: a plain read of the transaction's id, which a transaction that changed a
        // table has.
        let xid = unsafe { pg_sys::GetTopFullTransactionIdIfAny() }.value;
        let slots = &shared.citus.prepared;
        if xid != 0
            && !slots
                .iter()
                .any(|s| s.compare_exchange(0, xid, AcqRel, Acquire).is_ok())
        {
            shared.citus.prepared_overflow.store(true, Release);
        }
    }
    if matches!(
        event,
        XACT_EVENT_COMMIT | XACT_EVENT_PARALLEL_COMMIT | XACT_EVENT_PRE_PREPARE
    ) {
        shared.citus.revoke();
    }
}

/// On the hot path, for a worker id set by hand: returns at once if this node may mint with it
/// (one load), else waits for the Citus check or raises the error that says why not.
#[inline(always)]
pub fn ensure(shared: &Shared, worker: u32) {
    let verified = shared.citus.verified();
    if verified != worker && verified != ANY {
        confirm(shared, worker);
    }
}

/// The slow path of `ensure`: asks the Citus check and sleeps on the condition variable until
/// it has compared `worker` with every node, found it taken, or `WAIT_LIMIT` passed. Never
/// waits under the control lock; the sleep checks for interrupts.
#[cold]
#[inline(never)]
fn confirm(shared: &Shared, worker: u32) {
    let since = Instant::now();
    loop {
        let verified = shared.citus.verified();
        if verified == worker || verified == ANY {
            crate::mint::wait::done();
            return;
        }
        let (conflict, failure) = {
            let control = shared.control();
            let conflict = (control.citus.conflict == worker).then(|| {
                (
                    control.citus.this_node.get(),
                    control.citus.other_node.get(),
                )
            });
            (conflict, control.citus.failure.get())
        };
        if let Some((this_node, other_node)) = conflict {
            crate::mint::wait::done();
            errors::citus_shared_worker(worker, &this_node, &other_node);
        }
        if since.elapsed() > WAIT_LIMIT {
            crate::mint::wait::done();
            let configured = shared.citus.configured.load(Acquire);
            let why = if configured >= 0 && configured as u32 != worker {
                format!(
                    "snowflake.worker_id changed to {configured} by a reload while this statement ran, \
                     and {worker} is no longer this server's to compare"
                )
            } else if !failure.is_empty() {
                format!(
                    "its worker id could not be compared with every node of the Citus cluster in {} s: {failure}",
                    WAIT_LIMIT.as_secs()
                )
            } else {
                format!(
                    "the {NAME} background worker has not compared its worker id with the other \
                     Citus nodes' in {} s",
                    WAIT_LIMIT.as_secs()
                )
            };
            errors::citus_unverified(worker, why, &settings::database());
        }
        shared.citus.wake();
        // SAFETY: the condition variable lives in the shared segment; the Citus check
        // broadcasts on it after every round. The sleep checks for interrupts.
        unsafe {
            pg_sys::ConditionVariableTimedSleep(
                shared.cv(),
                crate::mint::wait::RECHECK_MS,
                pg_sys::PG_WAIT_EXTENSION,
            );
        }
    }
}

/// A conflict, for `snowflake_status()`: the sentence, if there is one.
pub fn conflict_detail(shared: &Shared) -> Option<String> {
    let control = shared.control();
    (control.citus.conflict != NONE).then(|| {
        format!(
            "worker id {} is also Citus node {}'s, and this node ({}) mints nothing with it until one of them gets another",
            control.citus.conflict,
            control.citus.other_node.get(),
            control.citus.this_node.get()
        )
    })
}

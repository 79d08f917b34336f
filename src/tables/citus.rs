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

use crate::marks::writer::session;
use crate::shared::control::Text;
use crate::shared::shmem::{self, Shared};
use crate::{errors, settings};
use pgrx::bgworkers::{BackgroundWorkerBuilder, BgWorkerStartTime};
use pgrx::prelude::*;
use std::ffi::{c_int, c_void, CStr};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicU64, AtomicUsize, Ordering::*};
use std::time::{Duration, Instant};

const NAME: &str = "snowflake_ext Citus check";
/// No worker id may be used now (not compared yet, revoked, or in conflict).
pub const NONE: u32 = u32::MAX;
/// Every worker id may be used (no Citus in the marks database).
pub const ANY: u32 = u32::MAX - 1;
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
/// Room for prepared transactions that change the membership, pending at once.
const PREPARED_SLOTS: usize = 16;

/// Whether Citus is preloaded in this server (set in `_PG_init`, in the postmaster).
static PRELOADED: AtomicBool = AtomicBool::new(false);
/// Whether the current transaction of this backend changed (or may have changed) the
/// membership: it revokes again when it commits, and records itself when it prepares.
static CHANGED_IN_TRANSACTION: AtomicBool = AtomicBool::new(false);

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
    fn verified(&self) -> u32 {
        self.state.load(Acquire) as u32
    }

    /// Nothing may be minted under the comparison made so far: a new one is needed. Wakes the
    /// check. Safe anywhere (a signal-free atomic and a latch), even in a cache callback.
    pub fn revoke(&self) {
        let _ = self.state.fetch_update(AcqRel, Acquire, |s| {
            Some((((s >> 32) + 1) << 32) | u64::from(NONE))
        });
        self.wake();
    }

    /// Publishes `verified` if nothing revoked the comparison since `from` was read.
    fn publish(&self, from: u64, verified: u32) -> bool {
        let to = (from & !u64::from(u32::MAX)) | u64::from(verified);
        self.state
            .compare_exchange(from, to, AcqRel, Acquire)
            .is_ok()
    }

    fn wake(&self) {
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
    BackgroundWorkerBuilder::new(NAME)
        .set_type(NAME)
        .set_library("snowflake_ext")
        .set_function("snowflake_citus_check_main")
        .enable_spi_access()
        .set_start_time(BgWorkerStartTime::RecoveryFinished)
        .set_restart_time(Some(Duration::from_secs(1)))
        .load();
}

/// A relation cache invalidation in this backend: of `pg_dist_node` (a membership change, made
/// here or committed by another backend), of everything (a cache reset), or, until the check
/// has seen the marks database's `pg_dist_node`, of any relation of that database
/// (`CREATE EXTENSION citus` makes it, and a node being added fills it).
/// Runs in the middle of cache processing: no error, no allocation, no catalog access.
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
            errors::citus_unverified(worker, why);
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

// ---------------------------------------------------------------------------------------------
// The Citus check, a background worker.

/// `TimeoutId` `STATEMENT_TIMEOUT` (utils/timeout.h, the same in 14 to 18), and the calls that
/// arm it: not in pgrx's bindings. A background worker's SPI calls are not bounded by the
/// `statement_timeout` setting (only a client's statements arm it), so the check arms it itself.
const STATEMENT_TIMEOUT: c_int = 3;
unsafe extern "C-unwind" {
    fn enable_timeout_after(id: c_int, delay_ms: c_int);
    fn disable_timeout(id: c_int, keep_indicator: bool);
    /// PostgreSQL's own signal handlers, as C symbols: pgrx wraps its bindings of them in Rust
    /// functions, which cannot be handlers.
    #[link_name = "die"]
    fn die_handler(signal: c_int);
    #[link_name = "SignalHandlerForConfigReload"]
    fn reload_handler(signal: c_int);
}

#[pg_guard]
// SAFETY: the name is unique to this library; the postmaster finds the entry point by it.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn snowflake_citus_check_main(_arg: pg_sys::Datum) {
    // SAFETY: a background worker installs its handlers before it unblocks signals. die() and
    // SignalHandlerForConfigReload are PostgreSQL's own: SIGTERM then ends the process at the
    // next CHECK_FOR_INTERRUPTS, inside Citus's connection waits too; SIGINT keeps the
    // statement-cancel handler the postmaster gave a worker with a database connection, which
    // the statement timeout uses.
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
    let shared = shmem::shared();
    connect(shared);
    session::set_up(NAME);
    // SAFETY: a plain read of the database this process connected to.
    let database = unsafe { pg_sys::MyDatabaseId }.to_u32();
    shared.citus.marks_database.store(database, Release);
    // SAFETY: MyLatch is this process's latch, in its PGPROC in shared memory.
    let latch = unsafe { pg_sys::MyLatch } as usize;
    shared.citus.latch.store(latch, Release);
    // SAFETY: registered once, before the loop; clears the latch others would set when this
    // process exits for any reason.
    unsafe { pg_sys::on_shmem_exit(Some(forget_latch), pg_sys::Datum::from(0)) };
    Check::new(shared).run()
}

#[pg_guard]
unsafe extern "C-unwind" fn forget_latch(_code: c_int, _arg: pg_sys::Datum) {
    if let Some(shared) = shmem::try_shared() {
        shared.citus.latch.store(0, Release);
    }
}

/// Connects to the marks database, backing off as the mark writer does: a database that does
/// not exist ends the process with a FATAL, and the postmaster starts it again a second later.
fn connect(shared: &Shared) {
    let attempts = shared.citus.connect_attempts.fetch_add(1, AcqRel) + 1;
    if attempts > 1 {
        let seconds = 1u64.checked_shl(attempts - 1).unwrap_or(u64::MAX);
        let back_off = Duration::from_secs(seconds).min(MAX_CONNECT_BACK_OFF);
        sleep(back_off);
    }
    let database = std::ffi::CString::new(settings::database()).unwrap_or_default();
    // SAFETY: called once, by a registered background worker with database access, before any
    // transaction; the marks database's owner may forbid connections, as for the mark writer.
    unsafe {
        pg_sys::BackgroundWorkerInitializeConnection(
            database.as_ptr(),
            std::ptr::null(),
            pg_sys::BGWORKER_BYPASS_ALLOWCONN,
        )
    };
    shared.citus.connect_attempts.store(0, Release);
    session::override_settings();
}

/// Waits on the latch for at most `timeout`, answering SIGTERM and reloads.
fn sleep(timeout: Duration) {
    // SAFETY: the standard interruptible wait of a background worker, on its own latch.
    unsafe {
        pg_sys::WaitLatch(
            pg_sys::MyLatch,
            (pg_sys::WL_LATCH_SET | pg_sys::WL_TIMEOUT | pg_sys::WL_EXIT_ON_PM_DEATH) as i32,
            timeout.as_millis().max(1) as i64,
            pg_sys::PG_WAIT_EXTENSION,
        );
        pg_sys::ResetLatch(pg_sys::MyLatch);
    }
    pg_sys::check_for_interrupts!();
}

/// The members of the cluster as this node's metadata lists them, to notice a change, and the
/// OID of `pg_dist_node`.
struct Membership {
    nodes: String,
    dist_node: u32,
}

/// What one comparison found.
struct Compared {
    /// This node, as `host:port (node N)`.
    this_node: String,
    /// Another node with the same worker id.
    taken_by: Option<String>,
    /// The nodes that did not answer, each with why.
    silent: Vec<String>,
    /// How many other nodes answered.
    answered: usize,
}

struct Check {
    shared: &'static Shared,
    /// The membership compared with last.
    nodes: Option<String>,
    /// When the worker id was last compared.
    compared_at: Option<Instant>,
    /// Whether the absence of Citus in the marks database was logged.
    told_no_citus: bool,
    /// The last conflict logged, so that each is logged once.
    logged_conflict: Option<String>,
    /// The last failure logged, and when.
    logged_failure: Option<(String, Instant)>,
}

impl Check {
    fn new(shared: &'static Shared) -> Check {
        Check {
            shared,
            nodes: None,
            compared_at: None,
            told_no_citus: false,
            logged_conflict: None,
            logged_failure: None,
        }
    }

    fn run(&mut self) -> ! {
        loop {
            // SAFETY: ConfigReloadPending is set by the SIGHUP handler in this process.
            unsafe {
                if pg_sys::ConfigReloadPending != 0 {
                    pg_sys::ConfigReloadPending = 0;
                    pg_sys::ProcessConfigFile(pg_sys::GucContext::PGC_SIGHUP);
                }
            }
            let pause = self.round();
            self.shared.broadcast();
            sleep(pause);
        }
    }

    /// One look at the cluster, and a comparison if one is due; returns how long to pause.
    fn round(&mut self) -> Duration {
        let c = &self.shared.citus;
        let configured = settings::worker();
        c.configured.store(configured, Release);
        // Read before anything else: a revocation from here on makes the result stale.
        let from = c.state.load(Acquire);
        let membership = match session::transaction(membership) {
            Ok(Ok(m)) => m,
            Ok(Err(e)) | Err(e) => {
                // Whether the cluster changed is not known: nothing is minted until it is.
                c.revoke();
                self.nodes = None;
                self.failed(format!("this node's Citus metadata could not be read: {e}"));
                return LOOK_EVERY;
            }
        };
        let Some(membership) = membership else {
            // No Citus in this database: nothing to compare with.
            c.dist_node.store(0, Release);
            if !self.told_no_citus {
                errors::log(
                    format!(
                        "snowflake: Citus is preloaded, but database \"{}\" (snowflake.database) has no Citus \
                         extension: this node's worker id is not compared with other Citus nodes'",
                        settings::database()
                    ),
                    "The comparison runs in the marks database: make snowflake.database the database \
                     Citus runs in (a restart), or create the citus extension there.",
                );
                self.told_no_citus = true;
            }
            self.nodes = None;
            self.clear("");
            if !c.publish(from, ANY) {
                // Revoked meanwhile (CREATE EXTENSION citus, say): looked at again at once.
                return Duration::ZERO;
            }
            return LOOK_EVERY;
        };
        self.told_no_citus = false;
        c.dist_node.store(membership.dist_node, Release);
        if self.nodes.as_ref() != Some(&membership.nodes) {
            // Another membership than the one compared with: compared again before any id.
            c.revoke();
            self.nodes = Some(membership.nodes);
            self.compared_at = None;
            return Duration::ZERO;
        }
        if configured < 0 {
            // auto (the registry keeps leased ids apart) or unset: nothing to compare.
            c.revoke();
            self.compared_at = None;
            return LOOK_EVERY;
        }
        let worker = configured as u32;
        let verified = from as u32;
        let troubled = {
            let control = self.shared.control();
            control.citus.conflict != NONE || !control.citus.failure.get().is_empty()
        };
        let since = self.compared_at.map(|t| t.elapsed());
        let due = match since {
            None => true,
            Some(since) if verified != worker => !troubled || since >= RECHECK_TROUBLED,
            Some(since) => since >= RECHECK_VERIFIED,
        };
        if !due {
            return LOOK_EVERY;
        }
        if verified != worker {
            // A membership change prepared in two phases and not resolved yet: comparing now
            // could miss it.
            match session::transaction(|| pending_change(&self.shared.citus)) {
                Ok(Ok(false)) => {}
                Ok(Ok(true)) => return PENDING_POLL,
                Ok(Err(e)) | Err(e) => {
                    self.failed(format!("the prepared transactions could not be read: {e}"));
                    return LOOK_EVERY;
                }
            }
        }
        self.compared_at = Some(Instant::now());
        match session::transaction(|| compare(worker)) {
            Ok(Ok(found)) => self.found(worker, from, found),
            Ok(Err(e)) | Err(e) => {
                self.failed(format!(
                    "the comparison with the other nodes through Citus failed: {e}"
                ));
                LOOK_EVERY
            }
        }
    }

    fn found(&mut self, worker: u32, from: u64, found: Compared) -> Duration {
        let c = &self.shared.citus;
        if let Some(other) = found.taken_by {
            let text = format!("{worker} {} {other}", found.this_node);
            if self.logged_conflict.as_deref() != Some(text.as_str()) {
                errors::warn(
                    format!(
                        "snowflake: Citus node {other} has the same snowflake.worker_id ({worker}) as this node, {}: \
                         this node mints nothing with it",
                        found.this_node
                    ),
                    "Give one of the two nodes another worker id (ALTER SYSTEM SET snowflake.worker_id = ...; \
                     SELECT pg_reload_conf();), or let every node lease one (snowflake.worker_id = 'auto').",
                );
                self.logged_conflict = Some(text);
            }
            {
                let mut control = self.shared.control();
                control.citus.conflict = worker;
                control.citus.this_node.set(&found.this_node);
                control.citus.other_node.set(&other);
                control.citus.failure.set("");
            }
            c.revoke();
            return LOOK_EVERY;
        }
        if self.logged_conflict.take().is_some() {
            errors::log(
                format!("snowflake: no other Citus node has worker id {worker} any more"),
                "This node mints with it again.",
            );
        }
        if from as u32 == worker || found.silent.is_empty() {
            // Verified now, or it was already and the nodes that answered agree: a node that
            // does not answer cannot take this worker id without reaching this one first.
            self.clear("");
            if !c.publish(from, worker) {
                // Revoked while it ran (the membership changed): compared again at once.
                self.compared_at = None;
                return Duration::ZERO;
            }
            return LOOK_EVERY;
        }
        let failure = format!(
            "{} did not answer ({} other node(s) did)",
            found.silent.join("; "),
            found.answered
        );
        self.clear(&failure);
        self.log_failure(&failure);
        LOOK_EVERY
    }

    fn failed(&mut self, failure: String) {
        // A worker id verified before stays so (see `found`); one not verified yet waits.
        self.shared.control().citus.failure.set(&failure);
        self.log_failure(&failure);
    }

    /// Logs why the comparison fails: when the reason changes, else at most once a minute.
    fn log_failure(&mut self, failure: &str) {
        let due = match &self.logged_failure {
            Some((said, at)) => said != failure || at.elapsed() >= Duration::from_secs(60),
            None => true,
        };
        if due {
            errors::warn(
                format!("snowflake: this node's worker id cannot be compared with the other Citus nodes': {failure}"),
                "Until it is, this node mints nothing with a worker id it has not compared yet; the \
                 comparison is tried again every 2 s.",
            );
            self.logged_failure = Some((failure.to_string(), Instant::now()));
        }
    }

    /// No conflict; `failure` says why the worker id could not be compared, if so.
    fn clear(&mut self, failure: &str) {
        if failure.is_empty() && self.logged_failure.take().is_some() {
            errors::log(
                "snowflake: this node's worker id is compared with every other Citus node's again"
                    .into(),
                "",
            );
        }
        let mut control = self.shared.control();
        control.citus.conflict = NONE;
        control.citus.failure.set(failure);
    }
}

/// The active primary nodes of this node's Citus cluster, as its metadata lists them; `None`
/// when the marks database has no Citus.
fn membership() -> Result<Option<Membership>, String> {
    let dist_node = Spi::get_one::<pg_sys::Oid>(
        "SELECT c.oid FROM pg_catalog.pg_class c
          WHERE c.oid OPERATOR(pg_catalog.=) pg_catalog.to_regclass('pg_catalog.pg_dist_node')
            AND EXISTS (SELECT FROM pg_catalog.pg_extension e
                         WHERE e.extname OPERATOR(pg_catalog.=) 'citus')",
    );
    let dist_node = match dist_node {
        Ok(Some(oid)) => oid.to_u32(),
        Ok(None) | Err(pgrx::spi::SpiError::InvalidPosition) => return Ok(None),
        Err(e) => return Err(e.to_string()),
    };
    let nodes = Spi::get_one::<String>(
        "SELECT COALESCE(pg_catalog.string_agg(
                    n.nodeid::pg_catalog.text OPERATOR(pg_catalog.||) '@'
                    OPERATOR(pg_catalog.||) n.nodename OPERATOR(pg_catalog.||) ':'
                    OPERATOR(pg_catalog.||) n.nodeport::pg_catalog.text, ',' ORDER BY n.nodeid), '')
           FROM pg_catalog.pg_dist_node n
          WHERE n.isactive AND n.noderole OPERATOR(pg_catalog.=) 'primary'
            AND n.nodecluster OPERATOR(pg_catalog.=) pg_catalog.current_setting('citus.cluster_name')",
    )
    .map_err(|e| e.to_string())?
    .unwrap_or_default();
    Ok(Some(Membership { nodes, dist_node }))
}

/// Whether a prepared transaction that changed the membership is still unresolved; forgets
/// those that were committed or rolled back.
fn pending_change(c: &CitusShared) -> Result<bool, String> {
    let mut pending = false;
    for slot in &c.prepared {
        let xid = slot.load(Acquire);
        if xid == 0 {
            continue;
        }
        let status = Spi::get_one_with_args::<String>(
            "SELECT pg_catalog.pg_xact_status($1::pg_catalog.text::pg_catalog.xid8)",
            &[xid.to_string().into()],
        )
        .map_err(|e| e.to_string())?;
        match status.as_deref() {
            Some("committed") | Some("aborted") | None => {
                let _ = slot.compare_exchange(xid, 0, AcqRel, Acquire);
            }
            _ => pending = true,
        }
    }
    if c.prepared_overflow.load(Acquire) {
        // One did not fit: every prepared transaction may be it.
        let any = Spi::get_one::<bool>("SELECT EXISTS (SELECT FROM pg_catalog.pg_prepared_xacts)")
            .map_err(|e| e.to_string())?
            .unwrap_or(false);
        if any {
            pending = true;
        } else {
            c.prepared_overflow.store(false, Release);
        }
    }
    Ok(pending)
}

/// This node as its metadata lists it (`None` when it is not in `pg_dist_node`), and how it is
/// named in messages.
fn this_node() -> Result<(Option<i32>, String), String> {
    let (id, name) = Spi::get_two::<i32, String>(
        "WITH me AS (
             SELECT n.nodeid, n.nodename OPERATOR(pg_catalog.||) ':'
                              OPERATOR(pg_catalog.||) n.nodeport::pg_catalog.text AS name
               FROM pg_catalog.pg_dist_node n
              WHERE n.groupid OPERATOR(pg_catalog.=) (SELECT groupid FROM pg_catalog.pg_dist_local_group)
                AND n.noderole OPERATOR(pg_catalog.=) 'primary'
                AND n.nodecluster OPERATOR(pg_catalog.=) pg_catalog.current_setting('citus.cluster_name')
              ORDER BY n.nodeid LIMIT 1)
         SELECT (SELECT nodeid FROM me),
                COALESCE((SELECT name FROM me),
                         pg_catalog.current_setting('citus.local_hostname')
                         OPERATOR(pg_catalog.||) ':'
                         OPERATOR(pg_catalog.||) pg_catalog.current_setting('port'))",
    )
    .map_err(|e| e.to_string())?;
    let name = name.unwrap_or_default();
    Ok(match id {
        Some(id) => (Some(id), format!("{name} (node {id})")),
        None => (None, name),
    })
}

/// Reads every node's `snowflake.worker_id` through Citus and compares it with `worker`, this
/// node's, in the check's transaction, within `COMPARE_TIMEOUT_MS`.
fn compare(worker: u32) -> Result<Compared, String> {
    let (me, this_node) = this_node()?;
    Spi::run(&format!(
        "SELECT pg_catalog.set_config('citus.node_connection_timeout', '{CONNECT_TIMEOUT_MS}', true)"
    ))
    .map_err(|e| e.to_string())?;
    // SAFETY: the statement timeout is registered for every process with a database connection
    // (InitPostgres); it raises an ERROR through the cancel handler at the next
    // CHECK_FOR_INTERRUPTS, which this transaction catches. Disarmed by `finally` below, on
    // every path.
    unsafe { enable_timeout_after(STATEMENT_TIMEOUT, COMPARE_TIMEOUT_MS) };
    let rows = pgrx::PgTryBuilder::new(|| Spi::connect(|client| {
        let rows = client
            .select(
                "SELECT r.nodeid, r.success, r.result,
                        n.nodename OPERATOR(pg_catalog.||) ':' OPERATOR(pg_catalog.||) n.nodeport::pg_catalog.text
                   FROM pg_catalog.run_command_on_all_nodes(
                            'SELECT pg_catalog.current_setting(''snowflake.worker_id'', true)') r
                   LEFT JOIN pg_catalog.pg_dist_node n ON n.nodeid OPERATOR(pg_catalog.=) r.nodeid",
                None,
                &[],
            )
            .map_err(|e| e.to_string())?;
        let mut out = Vec::new();
        for row in rows {
            let get_err = |e: pgrx::spi::SpiError| e.to_string();
            out.push((
                row.get::<i32>(1).map_err(get_err)?.unwrap_or(0),
                row.get::<bool>(2).map_err(get_err)?.unwrap_or(false),
                row.get::<String>(3).map_err(get_err)?.unwrap_or_default(),
                row.get::<String>(4).map_err(get_err)?,
            ));
        }
        Ok::<_, String>(out)
    }))
    // SAFETY: disarms the timeout armed above (a no-op if it fired), whether the query
    // returned or raised an error.
    .finally(|| unsafe { disable_timeout(STATEMENT_TIMEOUT, false) })
    .execute()?;
    let mut found = Compared {
        this_node,
        taken_by: None,
        silent: Vec::new(),
        answered: 0,
    };
    for (nodeid, success, result, name) in rows {
        // This node answers too (as node 0 when it is not in the metadata).
        if nodeid == me.unwrap_or(0) {
            continue;
        }
        let name = match name {
            Some(name) => format!("{name} (node {nodeid})"),
            None => format!("node {nodeid}"),
        };
        if !success {
            found
                .silent
                .push(format!("Citus node {name}: {}", result.trim()));
            continue;
        }
        found.answered += 1;
        if result.trim().parse::<i64>().ok() == Some(i64::from(worker)) {
            found.taken_by.get_or_insert(name);
        }
    }
    Ok(found)
}

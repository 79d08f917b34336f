//! The Citus check itself: the background worker that connects to the marks database, asks
//! Citus for every node's `snowflake.worker_id`, publishes what it found, and watches the
//! cluster's membership and the prepared transactions that change it.

use super::*;

/// `TimeoutId` `STATEMENT_TIMEOUT` (utils/timeout.h, the same in 14 to 18), and the calls that
/// arm it: not in pgrx's bindings. A background worker's SPI calls are not bounded by the
/// `statement_timeout` setting (only a client's statements arm it), so the check arms it itself.
const STATEMENT_TIMEOUT: c_int = 3;
// SAFETY: the signatures of timeout.c's functions, unchanged from 14 to 18; the check calls them
// only in its own process, after InitializeTimeouts (background worker start-up).
unsafe extern "C-unwind" {
    fn enable_timeout_after(id: c_int, delay_ms: c_int);
    fn disable_timeout(id: c_int, keep_indicator: bool);
}

#[pg_guard]
// SAFETY: the name is unique to this library; the postmaster finds the entry point by it.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn snowflake_citus_check_main(_arg: pg_sys::Datum) {
    // die() and SignalHandlerForConfigReload: SIGTERM then ends the process at the next
    // CHECK_FOR_INTERRUPTS, inside Citus's connection waits too.
    crate::bgworker::signals::install_postgres_handlers();
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
// SAFETY: an on_shmem_exit callback, called once by PostgreSQL as the process exits, while
// shared memory is still attached; it stores into one atomic.
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
    crate::bgworker::latch::wait_once(Some(timeout.as_millis().max(1) as i64), None);
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
            crate::bgworker::reload_if_pending();
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

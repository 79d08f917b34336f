//! The mark writer's database session: connecting to the marks database, and running each
//! step in a transaction of its own.

use crate::bgworker::latch::{self, Until};
use crate::bgworker::signals;
use crate::settings;
use crate::shared::shmem::Shared;
use pgrx::prelude::*;
use pgrx::PgTryBuilder;
use std::time::{Duration, Instant};

/// The longest wait between two attempts to connect.
const MAX_CONNECT_BACK_OFF: Duration = Duration::from_secs(60);

/// Connects to the marks database. A database that does not exist ends the process with a
/// FATAL; the postmaster restarts it a second later, so each attempt after a failed one first
/// waits twice as long as the one before, up to a minute: the log gets one line a minute, not
/// one a second.
pub fn connect(shared: &Shared) {
    let attempts = {
        let mut control = shared.control();
        control.connect_attempts += 1;
        control.connect_attempts
    };
    if attempts > 1 {
        let seconds = 1u64.checked_shl(attempts - 1).unwrap_or(u64::MAX);
        let back_off = Duration::from_secs(seconds).min(MAX_CONNECT_BACK_OFF);
        latch::wait(Some(Instant::now() + back_off), Until::Deadline);
        if signals::terminating() {
            exit();
        }
    }
    if attempts > 1 {
        // The attempt before failed (with a FATAL, so it could say nothing): a backend that
        // waits for a mark meanwhile says why none comes.
        let mut control = shared.control();
        control.failing = true;
        control.failures = u64::from(attempts - 1);
        control.failure.set(&format!(
            "the mark writer cannot connect to database \"{}\" (snowflake.database); it keeps \
             trying, up to a minute apart",
            settings::database()
        ));
    }
    let database = std::ffi::CString::new(settings::database()).unwrap_or_default();
    // SAFETY: called once, by a registered background worker with database access, before any
    // transaction. BGWORKER_BYPASS_ALLOWCONN: the owner of the marks database may forbid
    // connections to it, but not stop the marks of the whole server.
    unsafe {
        pg_sys::BackgroundWorkerInitializeConnection(
            database.as_ptr(),
            std::ptr::null(),
            pg_sys::BGWORKER_BYPASS_ALLOWCONN,
        )
    };
    {
        let mut control = shared.control();
        if control.connect_attempts > 1 {
            control.failing = false;
            control.failures = 0;
            control.failure.set("");
        }
        control.connect_attempts = 0;
    }
    override_settings();
}

/// Applies `SETTINGS` before the first transaction, as autovacuum does its own: the database's
/// and role's defaults are in effect from the connection on, and a transaction started under
/// them could already be stopped (a `transaction_timeout`) or held up (a serializable,
/// deferrable, read-only default waits for a safe snapshot).
pub(crate) fn override_settings() {
    for (name, value) in SETTINGS {
        let name = std::ffi::CString::new(*name).expect("a setting's name");
        let value = std::ffi::CString::new(*value).expect("a setting's value");
        // SAFETY: plain calls with NUL-terminated strings that outlive them; a setting this
        // major does not have (transaction_timeout before 17) is skipped, and every value
        // here is valid, so SetConfigOption raises no error.
        unsafe {
            if !pg_sys::GetConfigOption(name.as_ptr(), true, false).is_null() {
                pg_sys::SetConfigOption(
                    name.as_ptr(),
                    value.as_ptr(),
                    pg_sys::GucContext::PGC_SUSET,
                    pg_sys::GucSource::PGC_S_OVERRIDE,
                );
            }
        }
    }
}

/// What the writer's session runs with, whatever the marks database, the bootstrap superuser
/// or the server's configuration say: each of these could otherwise change or stop its writes
/// (a read-only or serializable default, a timeout, replication-role triggers, another
/// tablespace or access method for the tables it creates, an ERROR promoted to FATAL), or
/// make a name lookup run code planted on a search path. A setting the server does not have
/// (a major without it, a library not loaded) is skipped.
const SETTINGS: &[(&str, &str)] = &[
    ("exit_on_error", "off"),
    ("search_path", "pg_catalog, pg_temp"),
    ("synchronous_commit", "on"),
    ("lock_timeout", "5s"),
    ("statement_timeout", "0"),
    ("idle_in_transaction_session_timeout", "0"),
    ("idle_session_timeout", "0"),
    ("transaction_timeout", "0"),
    ("default_transaction_read_only", "off"),
    ("default_transaction_isolation", "read committed"),
    ("default_transaction_deferrable", "off"),
    ("session_replication_role", "origin"),
    ("row_security", "on"),
    ("default_tablespace", ""),
    ("temp_tablespaces", ""),
    ("default_table_access_method", "heap"),
    ("check_function_bodies", "on"),
    ("standard_conforming_strings", "on"),
    ("transform_null_equals", "off"),
    ("jit", "off"),
    // Citus, when it is loaded: the marks are this node's own. Its DDL propagation would
    // refuse the writer's CREATE SCHEMA on a worker ("operation is not allowed on this node")
    // and copy the schema from a coordinator to every worker; schema-based sharding would make
    // the schema a distributed one, and Citus-managed tables would put the marks in its metadata.
    ("citus.enable_ddl_propagation", "off"),
    ("citus.enable_schema_based_sharding", "off"),
    ("citus.use_citus_managed_tables", "off"),
];

/// Sets the session up, once per start of the writer; no session, no writer (it exits and is
/// restarted). `ALTER DATABASE ... SET` and `ALTER ROLE ... SET` reach a background worker's
/// session like any other, and the owner of the marks database may be an ordinary role, so:
///
/// * `SETTINGS` are in force from before its first transaction (`override_settings`);
/// * the writer runs as the bootstrap superuser, even if a default says `role` or
///   `session_authorization`;
/// * every other setting a database or role default changed goes back to its built-in
///   default;
/// * then `SETTINGS` are applied again, in the session.
pub fn set_up(who: &str) {
    let steps: [(&str, fn()); 3] = [
        ("run as the bootstrap superuser", as_bootstrap_superuser),
        ("undo database and role defaults", undo_defaults),
        ("apply its settings", apply_settings),
    ];
    for (what, step) in steps {
        if let Err(e) = transaction(step) {
            crate::errors::warn(
                format!("snowflake: the {who} could not {what}: {e}"),
                "It exits and is restarted; until it runs, no ids beyond the current marks are issued.",
            );
            exit();
        }
    }
}

const BOOTSTRAP_SUPERUSER: pg_sys::Oid = pg_sys::Oid::from_u32(pg_sys::BOOTSTRAP_SUPERUSERID);

/// Sets a setting for the session, as `SET` would.
fn set(name: &std::ffi::CStr, value: &std::ffi::CStr) {
    // SAFETY: both are NUL-terminated strings that outlive the call; PostgreSQL copies them.
    // An invalid value raises an ERROR, which the caller's transaction catches.
    unsafe {
        pg_sys::SetConfigOption(
            name.as_ptr(),
            value.as_ptr(),
            pg_sys::GucContext::PGC_SUSET,
            pg_sys::GucSource::PGC_S_SESSION,
        )
    };
}

/// Without SQL, which would run as whatever role a default made the session: first no ERROR
/// promoted to FATAL, then the bootstrap superuser as session and current user.
fn as_bootstrap_superuser() {
    set(c"exit_on_error", c"off");
    // SAFETY: plain reads of the session's user ids; GetUserNameFromId reads the role's name
    // from the catalog cache (no privilege check) into memory of the transaction.
    unsafe {
        if pg_sys::GetSessionUserId() != BOOTSTRAP_SUPERUSER {
            let name = pg_sys::GetUserNameFromId(BOOTSTRAP_SUPERUSER, false);
            set(c"session_authorization", std::ffi::CStr::from_ptr(name));
        }
    }
    set(c"role", c"none");
    // SAFETY: as above.
    let (session, current) = unsafe { (pg_sys::GetSessionUserId(), pg_sys::GetUserId()) };
    assert!(
        session == BOOTSTRAP_SUPERUSER && current == BOOTSTRAP_SUPERUSER,
        "still running as role {} (session {})",
        current.to_u32(),
        session.to_u32()
    );
}

fn undo_defaults() {
    Spi::run(
        "SELECT pg_catalog.set_config(name, boot_val, false) FROM pg_catalog.pg_settings
         WHERE source OPERATOR(pg_catalog.=) ANY (ARRAY['database', 'user', 'database user'])
           AND context OPERATOR(pg_catalog.=) ANY (ARRAY['user', 'superuser'])
           AND name OPERATOR(pg_catalog.<>) ALL (ARRAY['role', 'session_authorization'])
           AND boot_val IS NOT NULL",
    )
    .expect("undo database and role defaults");
}

fn apply_settings() {
    let (names, values): (Vec<&str>, Vec<&str>) = SETTINGS.iter().copied().unzip();
    // set_config raises an ERROR for a value it cannot take; a setting a major does not have
    // (transaction_timeout before 17) is skipped.
    Spi::run_with_args(
        "SELECT pg_catalog.set_config(f.name, f.value, false)
         FROM ROWS FROM (pg_catalog.unnest($1::pg_catalog.text[]),
                         pg_catalog.unnest($2::pg_catalog.text[])) AS f(name, value)
         WHERE f.name OPERATOR(pg_catalog.=) ANY (SELECT name FROM pg_catalog.pg_settings)",
        &[names.into(), values.into()],
    )
    .expect("apply the settings");
}

/// Exits with code 1, which asks the postmaster to restart the writer (unless the server is
/// shutting down).
#[allow(unreachable_code)] // proc_exit is declared noreturn for some majors only
pub fn exit() -> ! {
    // SAFETY: the documented way for a background worker to exit.
    unsafe { pg_sys::proc_exit(1) };
    unreachable!("proc_exit does not return")
}

/// Runs `body` in a transaction of its own. A PostgreSQL error in it (a missing table, a lock
/// timeout, a full disk) rolls the transaction back and comes back as `Err`, so the writer
/// keeps running and retries.
pub fn transaction<R>(body: impl FnOnce() -> R) -> Result<R, String> {
    let result = transaction_inner(body);
    signals::set_in_transaction(false);
    // SAFETY: a plain flag of this process: a cancel meant for the transaction ends with it.
    unsafe { pg_sys::QueryCancelPending = 0 };
    result
}

fn transaction_inner<R>(body: impl FnOnce() -> R) -> Result<R, String> {
    signals::set_in_transaction(true);
    // SAFETY: the standard way a background worker runs a transaction; an error inside is
    // caught below and the transaction aborted, as PostgreSQL's own workers do.
    unsafe {
        pg_sys::SetCurrentStatementStartTimestamp();
        pg_sys::StartTransactionCommand();
        pg_sys::PushActiveSnapshot(pg_sys::GetTransactionSnapshot());
    }
    let body = std::panic::AssertUnwindSafe(body);
    PgTryBuilder::new(move || {
        let body = body;
        let result = (body.0)();
        // SAFETY: pairs with the calls above.
        unsafe {
            pg_sys::PopActiveSnapshot();
            pg_sys::CommitTransactionCommand();
        }
        Ok(result)
    })
    .catch_others(|error| {
        // SAFETY: the error has been caught and flushed by pgrx; aborting the transaction
        // releases its locks, snapshots and memory.
        unsafe { pg_sys::AbortCurrentTransaction() };
        Err(describe(&error))
    })
    .execute()
}

pub fn describe(error: &pg_sys::panic::CaughtError) -> String {
    use pg_sys::panic::CaughtError::*;
    match error {
        PostgresError(report)
        | ErrorReport(report)
        | RustPanic {
            ereport: report, ..
        } => report.message().to_string(),
    }
}

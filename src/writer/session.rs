//! The mark writer's database session: connecting to the marks database, and running each
//! step in a transaction of its own.

use super::latch::{self, Until};
use super::signals;
use crate::settings;
use crate::shmem::Shared;
use pgrx::bgworkers::BackgroundWorker;
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
    BackgroundWorker::connect_worker_to_spi(Some(&settings::database()), None);
    shared.control().connect_attempts = 0;
}

/// Sets the session up. Without these settings marks could be committed asynchronously, or
/// name lookups could run code planted on a search path: no session, no writer (it exits and
/// is restarted).
pub fn set_up() {
    if let Err(e) = transaction(|| {
        Spi::run(
            "SET search_path = pg_catalog, pg_temp; SET synchronous_commit = on;
             SET lock_timeout = '5s'; SET idle_in_transaction_session_timeout = 0",
        )
        .expect("set up the session")
    }) {
        crate::errors::warn(
            format!("snowflake: {} could not set up its session: {e}", super::NAME),
            "",
        );
        exit();
    }
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

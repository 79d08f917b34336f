//! The background-worker toolkit the extension's workers share (the mark writer,
//! [`crate::marks::writer`]; the lease keeper, [`crate::lease::keeper`]; the Citus check,
//! [`crate::tables::citus`]): their registration ([`register`]), a configuration reload at a
//! safe point ([`reload_if_pending`]), one signal handler ([`signals`]) and one latch wait
//! ([`latch`]). pgrx's `BackgroundWorkerBuilder` does the registration; its
//! `BackgroundWorker::attach_signal_handlers` and `wait_latch` do not serve: its handlers
//! neither count the interrupts nor cancel a wait for a synchronous standby inside a
//! transaction (which the mark writer needs), and its wait asks for `WL_POSTMASTER_DEATH`
//! where ours exit with `WL_EXIT_ON_PM_DEATH`.

pub mod latch;
pub mod signals;

use pgrx::bgworkers::{BackgroundWorkerBuilder, BgWorkerStartTime};
use pgrx::pg_sys;
use std::time::Duration;

/// Registers the background worker `name` (also its type, as `pg_stat_activity` shows it),
/// whose entry point is the C symbol `function` of this library: started once recovery has
/// finished, and again a second after it exits with a code other than 0. `database`: it
/// connects to a database (SPI). Called from `_PG_init` while preloading; does nothing under
/// `pg_upgrade`, whose servers restore databases that nothing may hold a connection to.
pub fn register(name: &str, function: &str, database: bool) {
    // SAFETY: a plain read of a flag the postmaster set before loading libraries.
    if unsafe { pg_sys::IsBinaryUpgrade } {
        return;
    }
    let builder = BackgroundWorkerBuilder::new(name)
        .set_type(name)
        .set_library("snowflake_ext")
        .set_function(function);
    let builder = if database {
        builder.enable_spi_access()
    } else {
        builder
    };
    builder
        .set_start_time(BgWorkerStartTime::RecoveryFinished)
        .set_restart_time(Some(Duration::from_secs(1)))
        .load();
}

/// Reloads the configuration files if a SIGHUP asked for it since the last call; whether it
/// did. Called by a worker at a safe point of its loop, never from a signal handler.
pub fn reload_if_pending() -> bool {
    // SAFETY: ConfigReloadPending is set by the SIGHUP handler in this process; ProcessConfigFile
    // is what PostgreSQL's own background workers call at this point.
    unsafe {
        if pg_sys::ConfigReloadPending != 0 {
            pg_sys::ConfigReloadPending = 0;
            pg_sys::ProcessConfigFile(pg_sys::GucContext::PGC_SIGHUP);
            true
        } else {
            false
        }
    }
}

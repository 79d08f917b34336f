//! snowflake_ext: 64-bit, time-ordered, unique ids generated inside PostgreSQL.
//!
//! Design
//! ------
//! An id is `0 | 41-bit milliseconds since 2025-01-01 | 10-bit worker | 12-bit sequence`
//! (`layout.rs`). Each worker id has one counter of "ticks" (`time << 12 | sequence`) that only
//! goes up: the next id takes `max(last + 1, now << 12)`. Overflowing a millisecond borrows the
//! next one, and a clock stepping back leaves the counter running ahead of it, so a worker's ids
//! are strictly increasing whatever the clock does, and nothing waits (`generator.rs`).
//!
//! The counters of all 1024 workers live in shared memory (`shmem.rs`), so every backend of the
//! server shares them: state per backend would let two sessions mint the same id in the same
//! millisecond. That needs the library in `shared_preload_libraries`; without it every function
//! that generates ids raises a clear error instead.
//!
//! Shared memory does not survive a restart, so each worker may only issue ids below a lease, a
//! high-water mark that a background worker, the lease writer, has already fsynced to a file in
//! the data directory; after any restart, clean or a crash, each worker continues above its mark
//! whatever the clock says (`lease.rs`, `lease_writer.rs`).
//!
//! Locking protocol
//! ----------------
//! One LWLock protects the array. A backend takes it exclusively, reads the clock, updates one
//! worker's state and releases it: the clock is read under the lock so that the readings of all
//! backends are ordered, and a clock stepping back is told apart from a slow backend. Nothing
//! that can sleep, wait or raise an `ERROR` runs under the lock; warnings are written and errors
//! raised after it is released. `snowflake_stats` takes it in shared mode to copy the counters.
//! The lease writer takes it to read what needs persisting and again to raise the leases once
//! the file is on disk, never across the write; a backend that must wait for a lease releases it
//! and waits on its latch, checking for interrupts (`lease_writer.rs`).
//!
//! Files
//! -----
//! Pure Rust, unit-tested without a server: `layout.rs` (bit arithmetic), `generator.rs` (the
//! state machine, driven by a clock value passed in), `lease.rs` (persistence rules and the
//! file format). PostgreSQL glue: `shmem.rs`, `lease_writer.rs` (the background worker),
//! `settings.rs` (GUCs), `clock.rs`, `errors.rs` (every user-facing error), and the SQL
//! functions in `nextval.rs`, `decode.rs` and `stats.rs`.

use pgrx::prelude::*;

pub mod adopt;
pub mod clock;
pub mod decode;
pub mod errors;
pub mod generator;
pub mod layout;
pub mod lease;
pub mod lease_writer;
pub mod nextval;
pub mod settings;
pub mod shmem;
pub mod stats;
#[cfg(any(test, feature = "pg_test"))]
mod tests;

::pgrx::pg_module_magic!(name, version);

#[pg_guard]
pub extern "C-unwind" fn _PG_init() {
    settings::define();
    shmem::init();
}

/// This module is required by `cargo pgrx test` invocations.
/// It must be visible at the root of your extension crate.
#[cfg(test)]
pub mod pg_test {
    pub fn setup(_options: Vec<&str>) {}

    pub fn postgresql_conf_options() -> Vec<&'static str> {
        vec![
            "shared_preload_libraries = 'snowflake_ext'",
            "snowflake.worker_id = 7",
        ]
    }
}

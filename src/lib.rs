//! snowflake_ext: 64-bit, time-ordered, unique ids generated inside PostgreSQL.
//!
//! Design
//! ------
//! An id is `0 | time | worker | sequence` in a bit layout (`snowflake_core::layout`; by
//! default 41 bits of milliseconds since 2025-01-01, a 10-bit worker id, a 12-bit sequence).
//! Each worker id has one counter of *ticks* (`time << 12 | sequence`) that only goes up: the
//! next id takes `max(last + 1, clock << 12)`. Overflowing a millisecond borrows the next one,
//! and a clock stepping back leaves the counter running ahead of it, so a worker's ids are
//! strictly increasing whatever the clock does (`snowflake_core::generator`).
//!
//! The counters of all workers live in shared memory ([`shared::shmem`]), one 128-byte slot each, so
//! every backend of the server shares them: state per backend would let two sessions mint the
//! same id in the same millisecond. That needs the library in `shared_preload_libraries`;
//! without it every generating function raises a clear error instead, and loading it without
//! preloading (as `pg_upgrade --check` does) is harmless.
//!
//! Durability: the high-water mark
//! -------------------------------
//! Shared memory is lost when the server stops, and the server that continues the ids (this
//! one after a restart, a promoted standby, a restored backup, a pg_upgrade'd cluster) may
//! have a clock behind the last id issued. So every worker may only issue ids below its
//! *mark*, a high-water mark that is durable before any id below it is handed out; after any
//! of those events the worker continues above its mark, whatever the clock says.
//!
//! The marks are rows of a table ([`marks::marks_table`]), written by a background worker, the mark
//! writer ([`marks::writer`], rules in [`snowflake_core::marks`]), in its own transactions. A relation
//! is what PostgreSQL already carries everywhere a sequence goes: its changes travel in WAL, so
//! a streaming standby replays them, a promoted standby and a base backup restored with WAL
//! (PITR) continue above what they replayed, and pg_upgrade copies the table like any other.
//! The alternatives were weighed: a file in the data directory (0.1.0) is carried by none of
//! those; a custom WAL resource manager needs PostgreSQL 15 or later, one of 128 ids that must
//! be registered, a checkpoint-time file it cannot hook, and is still not carried by
//! pg_upgrade; sequence-style logging per id would put WAL on the hot path. The mark writer
//! commits with `synchronous_commit = on`: with synchronous replication a mark is on the
//! standby before any id below it is issued, which is stronger than a sequence, whose values
//! can be handed out before their WAL is flushed.
//!
//! Marks reach two seconds ahead of each worker and are raised in the background once half of
//! that is used, so backends never touch the disk while ids flow at any ordinary rate. A
//! server in recovery has no mark writer and mints nothing: every generating function raises
//! SQLSTATE 25006 there. When the marks are missing or doubtful (the table dropped,
//! replaced, emptied or made by another role, the wrong `snowflake.database`, a damaged token
//! file, another layout), the mark writer refuses to mint until a superuser restores them
//! ([`snowflake_core::startup`], [`marks::admin`]); only a first start, with no marks ever written,
//! starts from the clock.
//!
//! Protocol between backends and the mark writer
//! ----------------------------------------------
//! The fast path (`Slot::try_issue`) takes no lock: it reads the slot's word (the last tick),
//! its mark and its clock limits, and moves the word with one compare-and-swap. Each slot is
//! 128-byte aligned with what the fast path reads on its first cache line, so backends of two
//! workers never touch the same line, and nothing on the fast path can raise an error or
//! wait: a call costs the function call, a clock read and a few loads besides the
//! compare-and-swap (`bench/`, against a function doing only the call and the clock read). The
//! slow path ([`mint::nextval`]) takes the control LWLock only to run the clock check and the same
//! issue with every limit told apart; it never waits or raises an error while holding
//! it. A backend that needs a mark records what it needs in the slot, wakes the writer, and
//! sleeps on a condition variable the writer broadcasts once the new marks are durable; one
//! that would run more than `snowflake.max_ahead` past the clock sleeps on its latch. Both
//! waits check for interrupts. The writer raises a mark in shared memory only after its
//! transaction committed. To stop issuing (a clean stop, an administrator's change) the
//! writer sets the word's closed bit, which makes every compare-and-swap from an open word
//! fail, so nothing is issued past the value it read.
//!
//! Trust
//! -----
//! The mark writer runs as the bootstrap superuser, and the marks database may belong to an
//! ordinary role. So its session ignores database and role defaults ([`marks::writer::session`]),
//! and it trusts the marks schema only when it is its own: owned by the bootstrap superuser,
//! with nothing another role could use to change it or to run code as the writer
//! ([`marks::marks_table`]); a table emptied, edited or rolled back is seen through a digest and a
//! generation in its header, the generation also in the token file. Anything else is doubt.
//!
//! Code map
//! --------
//! The one map of the code (README.md and `core/src/lib.rs` point here); `cargo doc` checks
//! every link in it (`scripts/test.sh`). Folders follow the path of the data.
//!
//! * [`lib.rs`](crate) (this file): `_PG_init`, which defines the settings and, when
//!   preloading, asks for shared memory and registers the background workers.
//! * [`settings`]: the GUCs (`snowflake.*`). [`errors`]: every user-facing error, with its
//!   SQLSTATE, message and hint (and [`errors::marks`], [`errors::ids`], [`errors::tables`]). [`stats`]: `snowflake_stats()` and `snowflake_status()`, and
//!   [`stats::compat`], the C symbols that databases still at 0.1.0 call.
//! * [`shared`]: shared memory as data, with the paragraph on which lock or atomic ordering
//!   guards each field: [`shared::shmem`] (the segment, its lock and condition variable, the
//!   slots), [`shared::control`] (the control block), [`shared::mailbox`],
//!   [`shared::lease`], [`shared::citus`], [`shared::text`].
//! * [`mint`]: handing out ids: [`mint::nextval`] (the generating functions and their fast
//!   and slow paths), [`mint::wait`] (waiting for a mark or the clock), [`mint::clock`],
//!   [`mint::lastval`], [`mint::bench_floor`] (the benchmark's reference).
//! * [`marks`]: the durable high-water marks: [`marks::writer`] (the mark writer:
//!   [`marks::writer::session`], [`marks::writer::load`], [`marks::writer::write`],
//!   [`marks::writer::requests`]), [`marks::marks_table`], [`marks::token_file`],
//!   [`marks::mailbox`] (an administrator's requests to the writer) and [`marks::admin`]
//!   (`snowflake_restore_mark`, `snowflake_rewind`).
//! * [`lease`]: worker ids leased from a registry: the backends' side in [`lease`] itself,
//!   the lease keeper in [`lease::keeper`] ([`lease::keeper::claim`],
//!   [`lease::keeper::hold`], [`lease::keeper::connection`], [`lease::keeper::record`]: its
//!   own record of the lease it holds), what it asks the registry in
//!   [`lease::registry`] (whose SQL is `sql/registry/registry.sql`), and the connection in
//!   [`lease::libpq`].
//! * [`past`]: ids for past times (`snowflake_nextval_at`), from the worker id reserved for
//!   them (`snowflake.past_worker_id`) and the record of what each past time unit has used
//!   (`snowflake_past_use`, whose SQL is `sql/install/past.sql`).
//! * [`ids`]: ids as values: [`ids::decode`], [`ids::text`] (text forms and the `snowflake`
//!   type, whose SQL is `sql/install/type.sql`), [`ids::time_filter`] (the planner hook for time
//!   filters).
//! * [`tables`]: ids in users' tables: [`tables::adopt`], [`tables::guard`] (the
//!   replication guard), [`tables::id_columns`], [`tables::owner_scan`],
//!   [`tables::privileges`], and [`tables::citus`] (the Citus check, and
//!   [`tables::citus::check`], its background worker).
//! * [`bgworker`]: the toolkit the three background workers share: registration, one signal
//!   handler ([`bgworker::signals`]) and one latch wait ([`bgworker::latch`]).
//! * `src/tests.rs`: the `#[pg_test]`s, run inside a server by `cargo pgrx test`.
//! * The pure core, unit-tested without a server, is the [`snowflake_core`] crate:
//!   [`snowflake_core::layout`], [`snowflake_core::timekeeper`] (clock steps and jumps),
//!   [`snowflake_core::generator`] (a worker's slot and the issuing protocol),
//!   [`snowflake_core::marks`] (the writer's rules), [`snowflake_core::startup`] (load, start
//!   afresh or refuse), [`snowflake_core::lease`] (a leased worker id's rules),
//!   [`snowflake_core::conninfo`] (the registry's connection string), [`snowflake_core::siphash`]
//!   (the marks' seal), [`snowflake_core::token`] and [`snowflake_core::legacy`] (file
//!   formats), [`snowflake_core::text`] (base32 and base62); `core/tests/model.rs` runs the
//!   issuing protocol and the writer's rules in racing threads against a fake clock.
//! * Outside `src/`: `sql/` (`sql/install/`: the install script's hand-written SQL, each file
//!   included by `extension_sql_file!` from the module it belongs with; upgrade scripts, the
//!   registry's schema, the portable edition), `tests/` (integration tests against real
//!   servers, `tests/common`), `bench/`, `scripts/` (`scripts/test.sh` runs everything).

use pgrx::prelude::*;

pub mod bgworker;
pub mod errors;
pub mod ids;
pub mod lease;
pub mod marks;
pub mod mint;
pub mod past;
pub mod settings;
pub mod shared;
pub mod stats;
pub mod tables;
#[cfg(any(test, feature = "pg_test"))]
mod tests;

::pgrx::pg_module_magic!(name, version);

/// Defines the settings; when preloading, also asks for shared memory and registers the mark
/// writer. Nothing here raises an error when the library is loaded without preloading.
#[pg_guard]
pub extern "C-unwind" fn _PG_init() {
    quiet_backtraces();
    // SAFETY: a plain read of a flag PostgreSQL sets while it loads shared_preload_libraries.
    let preloading = unsafe { pg_sys::process_shared_preload_libraries_in_progress };
    if preloading {
        settings::mark_preloaded();
    }
    settings::define(preloading);
    ids::time_filter::install();
    settings::install_set_hook();
    if preloading {
        shared::shmem::request();
        marks::writer::register();
        lease::register();
        tables::citus::register();
    }
}

/// No Rust backtrace in any error a user sees. pgrx records a backtrace with every panic,
/// including the one that carries a PostgreSQL error (a cancel, a statement timeout) through
/// Rust frames, and prints it into the error's DETAIL whenever `std::backtrace` captures one:
/// when `RUST_BACKTRACE` is set in the server's environment. `RUST_LIB_BACKTRACE=0` turns
/// that capture off in this process and the ones it starts, and nothing else (a panic's own
/// message follows `RUST_BACKTRACE`); an operator who sets `RUST_LIB_BACKTRACE` keeps it.
fn quiet_backtraces() {
    if std::env::var_os("RUST_LIB_BACKTRACE").is_none() {
        // Called from _PG_init, in the postmaster before it starts any process, or in a
        // backend: single-threaded processes, where changing the environment is sound.
        std::env::set_var("RUST_LIB_BACKTRACE", "0");
    }
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
            "snowflake.database = 'postgres'",
        ]
    }
}

//! Shared memory: the state of every worker id, in one array under one LWLock.
//!
//! The array is allocated when the postmaster starts (which is why the library must be in
//! `shared_preload_libraries`) and inherited by every backend, so all sessions of a server draw
//! from the same counters. One lock for all 1024 workers is enough: it is held for a clock read
//! and a few integer operations, tens of nanoseconds, far less than anything else a statement does.

use crate::errors;
use crate::generator::Worker;
use crate::layout::WORKERS;
use pgrx::prelude::*;
use pgrx::{pg_shmem_init, PGRXSharedMemory, PgLwLock, PgSqlErrorCode};
use std::ffi::CStr;
use std::sync::atomic::{AtomicBool, Ordering};

#[derive(Clone, Copy)]
#[repr(C)]
pub struct Generators {
    pub workers: [Worker; WORKERS],
    /// Set by a backend that wants a lease renewed, cleared by the lease writer when it takes
    /// the request (see `lease_writer.rs`).
    pub renewal_requested: bool,
    /// The lease writer's latch, 0 while it is not running.
    pub writer_latch: usize,
    /// The generation of the newest lease file.
    pub generation: u64,
}

impl Generators {
    /// Notes that a lease needs renewing. Returns the writer's latch to set once the lock is
    /// released, unless an earlier request is still pending (then the writer is already awake).
    #[inline]
    pub fn request_renewal(&mut self) -> usize {
        if std::mem::replace(&mut self.renewal_requested, true) {
            0
        } else {
            self.writer_latch
        }
    }
}

unsafe impl PGRXSharedMemory for Generators {}

static GENERATORS: PgLwLock<Generators> = unsafe { PgLwLock::new(c"snowflake_ext") };

/// Whether this process inherited the shared memory, i.e. the library was preloaded. Set once in
/// the postmaster's `_PG_init` and copied into every backend by `fork`.
static PRELOADED: AtomicBool = AtomicBool::new(false);

/// Requests the shared memory and the LWLock, and registers the lease writer. Called from
/// `_PG_init`; does nothing unless the library is being loaded through
/// `shared_preload_libraries`.
pub fn init() {
    if unsafe { !pg_sys::process_shared_preload_libraries_in_progress } {
        return;
    }
    // The expression is evaluated in the postmaster each time shared memory is (re)created:
    // at start-up and after a crash of any backend.
    pg_shmem_init!(GENERATORS = crate::lease_writer::startup_state());
    crate::lease_writer::register();
    PRELOADED.store(true, Ordering::Relaxed);
}

pub fn is_preloaded() -> bool {
    PRELOADED.load(Ordering::Relaxed)
}

/// The generator states, or a clear `ERROR` when the library was not preloaded.
#[inline]
pub fn generators() -> &'static PgLwLock<Generators> {
    if !is_preloaded() {
        not_preloaded();
    }
    &GENERATORS
}

#[cold]
fn not_preloaded() -> ! {
    let current = unsafe {
        let value = pg_sys::GetConfigOption(c"shared_preload_libraries".as_ptr(), true, false);
        if value.is_null() {
            String::new()
        } else {
            CStr::from_ptr(value).to_string_lossy().into_owned()
        }
    };
    errors::raise(
        PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        format!(
            "snowflake_ext must be loaded through shared_preload_libraries (it is currently '{current}')"
        ),
        Some(
            "The generator keeps its state in shared memory, which only a preloaded library can allocate."
                .into(),
        ),
        "Add snowflake_ext to shared_preload_libraries in postgresql.conf, or run \
         ALTER SYSTEM SET shared_preload_libraries = 'snowflake_ext' (keeping any libraries already listed), \
         then restart the server.",
    )
}

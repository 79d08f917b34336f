//! Shared memory: one segment with the generator's parameters, the mark writer's control
//! block under one LWLock, a condition variable the writer broadcasts on, and one slot per
//! worker id (`snowflake_core::generator::Slot`, 128-byte aligned, so two workers never share
//! a cache line).
//!
//! The segment is allocated when the postmaster starts (which is why the library must be in
//! `shared_preload_libraries`), and again after a crash of any backend; every backend inherits
//! it, so all sessions of a server draw from the same slots.

use crate::errors;
use crate::shared::control::Control;
use pgrx::prelude::*;
use snowflake_core::generator::{Params, Slot};
use std::cell::UnsafeCell;
use std::ffi::CStr;
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering::*};

const NAME: &CStr = c"snowflake_ext";

/// `AddinShmemInitLock`, PostgreSQL's lock for initialising an add-in's shared memory, is the
/// C macro `&MainLWLockArray[21].lock` (entry 21 of `lwlocknames.txt` in every supported
/// major), so it is not in pgrx's bindings; pgrx's own shared memory uses the same entry.
const ADDIN_SHMEM_INIT_LOCK: usize = 21;

#[repr(C)]
pub struct Shared {
    pub params: Params,
    lock: *mut pg_sys::LWLock,
    cv: UnsafeCell<pg_sys::ConditionVariable>,
    /// Set by a backend that wants the mark writer to look at the slots, cleared by the
    /// writer when it does (see [`crate::marks::writer`]).
    pub mark_requested: AtomicBool,
    /// The mark writer's latch, 0 while it is not running.
    pub writer_latch: AtomicUsize,
    /// When a waiting backend last asked the postmaster to look at its background workers
    /// (PostgreSQL 14 and 15 only, see [`crate::mint::wait`]), in milliseconds of the boot clock
    /// (`clock::boot_ms`), which every process reads alike and nobody steps.
    pub postmaster_nudged_at: AtomicU64,
    /// The leased worker id and until when it may be used ([`crate::lease`]).
    pub lease: crate::shared::lease::LeaseShared,
    /// Drawn when the segment is made, at each start of the postmaster (and after a crash):
    /// tells the registry this run of the server from an earlier one.
    pub boot: AtomicU64,
    /// Whether this node may mint with its hand-set worker id on Citus ([`crate::tables::citus`]): read by
    /// every `snowflake_nextval()`, on a cache line of its own.
    pub citus: crate::shared::citus::CitusShared,
    control: UnsafeCell<Control>,
    workers: usize,
}

/// Where the slots start, from the start of the segment.
const SLOTS_OFFSET: usize = std::mem::size_of::<Shared>().next_multiple_of(128);

fn segment_size(workers: usize) -> usize {
    SLOTS_OFFSET + workers * std::mem::size_of::<Slot>()
}

/// Set in the postmaster when the segment is created, inherited by every backend.
static SHARED: AtomicPtr<Shared> = AtomicPtr::new(ptr::null_mut());

static mut PREV_SHMEM_STARTUP_HOOK: pg_sys::shmem_startup_hook_type = None;
#[cfg(not(feature = "pg14"))]
static mut PREV_SHMEM_REQUEST_HOOK: pg_sys::shmem_request_hook_type = None;

/// Asks for the segment and its lock. Called from `_PG_init` while preloading only.
pub fn request() {
    // SAFETY: _PG_init runs once, in the postmaster, before any other process exists; the
    // hooks are PostgreSQL's documented extension points, and we chain to the previous ones.
    unsafe {
        #[cfg(not(feature = "pg14"))]
        {
            PREV_SHMEM_REQUEST_HOOK = pg_sys::shmem_request_hook;
            pg_sys::shmem_request_hook = Some(on_shmem_request);
        }
        #[cfg(feature = "pg14")]
        request_space();
        PREV_SHMEM_STARTUP_HOOK = pg_sys::shmem_startup_hook;
        pg_sys::shmem_startup_hook = Some(on_shmem_startup);
    }
}

/// SAFETY: only during shared memory sizing (the request hook, or _PG_init before 15).
unsafe fn request_space() {
    let layout = crate::settings::layout();
    if let Err(e) = layout.check_generation() {
        errors::layout_not_generable(layout, &e);
    }
    let workers = layout.workers();
    // SAFETY: called at the one time PostgreSQL accepts these requests.
    unsafe {
        pg_sys::RequestAddinShmemSpace(segment_size(workers));
        pg_sys::RequestNamedLWLockTranche(NAME.as_ptr(), 1);
    }
}

#[cfg(not(feature = "pg14"))]
// SAFETY: PostgreSQL calls it once, in the postmaster, while shared memory is being sized.
#[pg_guard]
unsafe extern "C-unwind" fn on_shmem_request() {
    // SAFETY: chaining to the hook that was installed before ours, as PostgreSQL requires.
    unsafe {
        if let Some(prev) = PREV_SHMEM_REQUEST_HOOK {
            prev();
        }
        request_space();
    }
}

// SAFETY: PostgreSQL calls it in the postmaster each time shared memory is created.
#[pg_guard]
unsafe extern "C-unwind" fn on_shmem_startup() {
    // SAFETY: the startup hook runs in the postmaster (and after a crash, again) while no
    // other process touches the segment; AddinShmemInitLock is PostgreSQL's lock for exactly
    // this, and ShmemInitStruct returns memory of the size we requested, 128-byte aligned.
    unsafe {
        if let Some(prev) = PREV_SHMEM_STARTUP_HOOK {
            prev();
        }
        let params = Params::new(*crate::settings::layout());
        let workers = params.layout.workers();
        let init_lock = &raw mut (*pg_sys::MainLWLockArray.add(ADDIN_SHMEM_INIT_LOCK)).lock;
        pg_sys::LWLockAcquire(init_lock, pg_sys::LWLockMode::LW_EXCLUSIVE);
        let mut found = false;
        let base = pg_sys::ShmemInitStruct(NAME.as_ptr(), segment_size(workers), &mut found);
        let shared = base.cast::<Shared>();
        if !found {
            shared.write(Shared {
                params,
                lock: &raw mut (*pg_sys::GetNamedLWLockTranche(NAME.as_ptr())).lock,
                cv: UnsafeCell::new(std::mem::zeroed()),
                mark_requested: AtomicBool::new(false),
                writer_latch: AtomicUsize::new(0),
                postmaster_nudged_at: AtomicU64::new(0),
                lease: crate::shared::lease::LeaseShared::new(),
                boot: AtomicU64::new(crate::mint::clock::random_u64()),
                citus: crate::shared::citus::CitusShared::new(),
                control: UnsafeCell::new(Control::default()),
                workers,
            });
            pg_sys::ConditionVariableInit((*shared).cv.get());
            let slots = base.cast::<u8>().add(SLOTS_OFFSET).cast::<Slot>();
            for i in 0..workers {
                slots.add(i).write(Slot::default());
            }
        }
        SHARED.store(shared, Release);
        pg_sys::LWLockRelease(init_lock);
    }
}

/// The shared state, or a clear `ERROR` when the library was not preloaded.
#[inline]
pub fn shared() -> &'static Shared {
    let shared = SHARED.load(Acquire);
    if shared.is_null() {
        not_preloaded();
    }
    // SAFETY: set once the segment is initialised, and the segment lives as long as the
    // process.
    unsafe { &*shared }
}

/// The shared state, if this process has it: for callbacks that must not raise an error.
pub fn try_shared() -> Option<&'static Shared> {
    let shared = SHARED.load(Acquire);
    // SAFETY: as in `shared`.
    (!shared.is_null()).then(|| unsafe { &*shared })
}

impl Shared {
    #[inline]
    pub fn slots(&self) -> &[Slot] {
        // SAFETY: the segment was allocated with `workers` slots right after the header, at
        // a 128-byte aligned offset, and initialised before SHARED was set.
        unsafe {
            let base = (self as *const Shared).cast::<u8>().add(SLOTS_OFFSET);
            std::slice::from_raw_parts(base.cast::<Slot>(), self.workers)
        }
    }

    #[inline]
    pub fn slot(&self, worker: u32) -> &Slot {
        &self.slots()[worker as usize]
    }

    /// Takes the control lock. Nothing may wait, do I/O or raise an ERROR while it is held.
    pub fn control(&self) -> ControlGuard<'_> {
        // SAFETY: the lock was allocated from our named tranche for this segment.
        unsafe { pg_sys::LWLockAcquire(self.lock, pg_sys::LWLockMode::LW_EXCLUSIVE) };
        ControlGuard { shared: self }
    }

    pub fn cv(&self) -> *mut pg_sys::ConditionVariable {
        self.cv.get()
    }

    /// Wakes every backend waiting on the condition variable.
    pub fn broadcast(&self) {
        // SAFETY: the condition variable was initialised with the segment.
        unsafe { pg_sys::ConditionVariableBroadcast(self.cv.get()) };
    }

    /// Asks the mark writer to look at the slots, waking it unless a request is pending.
    /// SeqCst, like the writer's clearing of the flag before it scans and `Slot::want`: either
    /// the writer's scan sees what this caller stored, or this caller sees the flag cleared and
    /// sets the latch.
    #[inline]
    pub fn request_mark(&self) {
        if !self.mark_requested.load(SeqCst) && !self.mark_requested.swap(true, SeqCst) {
            let latch = self.writer_latch.load(Acquire);
            if latch != 0 {
                // SAFETY: the writer's latch lives in its PGPROC, in shared memory, for as long
                // as the writer runs; it clears `writer_latch` before it exits.
                unsafe { pg_sys::SetLatch(latch as *mut pg_sys::Latch) };
            }
        }
    }
}

impl Shared {
    /// Wakes the mark writer whether or not a request is pending.
    pub fn wake_writer(&self) {
        self.mark_requested.store(true, Release);
        let latch = self.writer_latch.load(Acquire);
        if latch != 0 {
            // SAFETY: as in `request_mark`.
            unsafe { pg_sys::SetLatch(latch as *mut pg_sys::Latch) };
        }
    }
}

/// The control block, held under the control lock.
pub struct ControlGuard<'a> {
    shared: &'a Shared,
}

impl std::ops::Deref for ControlGuard<'_> {
    type Target = Control;
    fn deref(&self) -> &Control {
        // SAFETY: the lock is held exclusively for the guard's life.
        unsafe { &*self.shared.control.get() }
    }
}

impl std::ops::DerefMut for ControlGuard<'_> {
    fn deref_mut(&mut self) -> &mut Control {
        // SAFETY: the lock is held exclusively for the guard's life.
        unsafe { &mut *self.shared.control.get() }
    }
}

impl Drop for ControlGuard<'_> {
    fn drop(&mut self) {
        // SAFETY: we hold the lock. Nothing under it raises an ERROR; if one ever did, PostgreSQL
        // would release every LWLock at the abort, and it resets the holdoff count first, so
        // release only while that count says we still hold one, as pgrx's own guards do.
        unsafe {
            if pg_sys::InterruptHoldoffCount > 0 {
                pg_sys::LWLockRelease(self.shared.lock);
            }
        }
    }
}

#[cold]
fn not_preloaded() -> ! {
    // SAFETY: GetConfigOption returns NULL or a NUL-terminated string valid until the next
    // configuration change; we copy it at once.
    let current = unsafe {
        let value = pg_sys::GetConfigOption(c"shared_preload_libraries".as_ptr(), true, false);
        if value.is_null() {
            String::new()
        } else {
            CStr::from_ptr(value).to_string_lossy().into_owned()
        }
    };
    errors::not_preloaded(&current)
}

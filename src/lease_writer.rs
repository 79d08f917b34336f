//! The lease writer: a background worker that persists leases (see `lease.rs` for why and
//! how), the start-up code that reads them back, and the wait of a backend that needs one.
//!
//! Protocol between backends and the writer, all under the generators' LWLock:
//! * a backend whose worker's lease is low, or who was refused for lack of one, sets
//!   `renewal_requested` (if it was not set) and, after releasing the lock, sets the writer's
//!   latch;
//! * the writer clears `renewal_requested`, computes the new bounds, releases the lock, writes
//!   and fsyncs the file, then takes the lock again to raise the leases. A request made while it
//!   writes sets its latch again, so it is never lost;
//! * a refused backend waits on its own latch for a millisecond at a time, without the lock,
//!   checking for interrupts, and tries again.

use crate::layout::WORKERS;
use crate::lease::{self, Snapshot};
use crate::shmem::{self, Generators};
use crate::{clock, errors};
use pgrx::bgworkers::{
    BackgroundWorker, BackgroundWorkerBuilder, BgWorkerStartTime, SignalWakeFlags,
};
use pgrx::prelude::*;
use pgrx::PgSqlErrorCode;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::{Duration, Instant};

/// Relative to the data directory, which is every server process's working directory.
const DIR: &str = "snowflake_ext";
const FILES: [&str; 2] = ["snowflake_ext/lease.0", "snowflake_ext/lease.1"];

/// How long a backend waits for a lease before it gives up with an error.
const WAIT_LIMIT: Duration = Duration::from_secs(10);

/// Registers the writer; called from `_PG_init` while preloading.
pub fn register() {
    BackgroundWorkerBuilder::new("snowflake_ext lease writer")
        .set_type("snowflake_ext lease writer")
        .set_library("snowflake_ext")
        .set_function("snowflake_lease_writer_main")
        .enable_shmem_access(None)
        // From postmaster start, so that a hot standby can issue ids too.
        .set_start_time(BgWorkerStartTime::PostmasterStart)
        .set_restart_time(Some(Duration::from_secs(1)))
        .load();
}

/// The generators' state when shared memory is created: at start-up and after a crash. Runs
/// in the postmaster, before any backend exists.
pub fn startup_state() -> Generators {
    let snapshot = read_newest();
    let marks = snapshot.as_ref().map_or([0; WORKERS], |s| *s.marks);
    if let Some(behind) = lease::clock_behind(&marks, clock::now_ms()) {
        errors::warn(
            format!(
                "snowflake: the system clock is {} ms behind the persisted high-water mark of worker {}",
                behind.gap_ms, behind.worker
            ),
            &format!(
                "{} worker(s) have persisted ids ahead of the clock. They continue from their marks, so \
                 their ids keep increasing, with time fields ahead of the clock until it catches up.",
                behind.workers
            ),
        );
    }
    Generators {
        workers: lease::restart(&marks),
        renewal_requested: false,
        writer_latch: 0,
        generation: snapshot.map_or(0, |s| s.generation),
    }
}

/// Called by a backend refused for lack of a lease, after it released the lock: waits a little
/// for the writer, or raises an error once `WAIT_LIMIT` has passed since `since`.
pub fn wait(worker: u16, since: Instant) {
    if since.elapsed() > WAIT_LIMIT {
        errors::raise(
            PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            format!(
                "snowflake worker {worker} waited {} s for its high-water mark to be persisted",
                WAIT_LIMIT.as_secs()
            ),
            Some(format!(
                "No id is issued before a mark ahead of it is on disk, in {DIR}/ in the data directory, \
                 written by the \"snowflake_ext lease writer\" background worker."
            )),
            "Check the server log for that worker's errors (a full or read-only disk), and that \
             max_worker_processes leaves room for it.",
        );
    }
    unsafe {
        pg_sys::WaitLatch(
            pg_sys::MyLatch,
            (pg_sys::WL_LATCH_SET | pg_sys::WL_TIMEOUT | pg_sys::WL_EXIT_ON_PM_DEATH) as i32,
            1,
            pg_sys::PG_WAIT_EXTENSION,
        );
        pg_sys::ResetLatch(pg_sys::MyLatch);
    }
    pg_sys::check_for_interrupts!();
}

/// Wakes the writer (a latch pointer taken from shared memory under the lock).
pub fn wake(latch: usize) {
    if latch != 0 {
        unsafe { pg_sys::SetLatch(latch as *mut pg_sys::Latch) };
    }
}

#[pg_guard]
#[unsafe(no_mangle)]
pub extern "C-unwind" fn snowflake_lease_writer_main(_arg: pg_sys::Datum) {
    BackgroundWorker::attach_signal_handlers(SignalWakeFlags::SIGHUP | SignalWakeFlags::SIGTERM);
    let generators = shmem::generators();
    let mut generation = {
        let mut shared = generators.exclusive();
        shared.writer_latch = unsafe { pg_sys::MyLatch } as usize;
        shared.generation
    };
    let mut marks = Box::new([0u64; WORKERS]);
    loop {
        // Take the requests: the new bound of every worker whose lease is low.
        let renewing = {
            let mut shared = generators.exclusive();
            shared.renewal_requested = false;
            let now = clock::now_ms();
            let mut renewing = false;
            for (mark, w) in marks.iter_mut().zip(shared.workers.iter()) {
                if lease::low(w, now) {
                    *mark = lease::target(w, now);
                    renewing = true;
                } else {
                    *mark = w.lease;
                }
            }
            renewing
        };
        if renewing {
            match write(generation + 1, &marks) {
                Ok(()) => {
                    generation += 1;
                    let mut shared = generators.exclusive();
                    shared.generation = generation;
                    for (w, &mark) in shared.workers.iter_mut().zip(marks.iter()) {
                        lease::grant(w, mark);
                    }
                }
                Err(e) => {
                    errors::warn(
                        format!("snowflake: could not persist the high-water mark in {DIR}/: {e}"),
                        "Ids are not issued beyond the last mark on disk until this succeeds; retrying in 1 s.",
                    );
                    if !BackgroundWorker::wait_latch(Some(Duration::from_secs(1))) {
                        break;
                    }
                    continue;
                }
            }
        }
        // Sleep until a backend asks: an idle server writes nothing.
        if !BackgroundWorker::wait_latch(None) {
            break;
        }
    }
    shut_down(generation, &mut marks);
}

/// A clean stop: shrink every lease to one past its last id, so no more ids can be issued, and
/// persist that, so the next start resumes exactly where this one stopped.
fn shut_down(generation: u64, marks: &mut [u64; WORKERS]) {
    let generators = shmem::generators();
    {
        let mut shared = generators.exclusive();
        shared.writer_latch = 0;
        for (mark, w) in marks.iter_mut().zip(shared.workers.iter_mut()) {
            *mark = lease::close(w);
        }
    }
    if let Err(e) = write(generation + 1, marks) {
        // The previous file still bounds every id issued: nothing is lost but precision.
        errors::warn(
            format!("snowflake: could not persist the final high-water mark in {DIR}/: {e}"),
            "The previous mark still covers every id issued; after a restart ids resume from it.",
        );
    }
}

fn write(generation: u64, marks: &[u64; WORKERS]) -> io::Result<()> {
    let bytes = lease::encode(&Snapshot {
        generation,
        marks: Box::new(*marks),
    });
    let path = FILES[lease::slot(generation)];
    let file = open_for_write(path)?;
    file.write_all_at(&bytes, 0)?;
    file.sync_data()
}

/// Opens a lease file, creating it (and its directory) durably on first use.
fn open_for_write(path: &str) -> io::Result<File> {
    if let Ok(file) = OpenOptions::new().write(true).open(path) {
        return Ok(file);
    }
    if !Path::new(DIR).is_dir() {
        std::fs::create_dir(DIR)?;
        File::open(".")?.sync_all()?;
    }
    let file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)?;
    File::open(DIR)?.sync_all()?;
    Ok(file)
}

fn read_newest() -> Option<Snapshot> {
    let mut found = [None, None];
    for (slot, path) in FILES.iter().enumerate() {
        match std::fs::read(path) {
            Ok(bytes) => {
                found[slot] = lease::decode(&bytes);
                if found[slot].is_none() {
                    errors::warn(
                        format!("snowflake: ignoring {path}, which is torn or not a lease file"),
                        "A crash while it was written leaves it so; the other lease file is used.",
                    );
                }
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => errors::warn(
                format!("snowflake: could not read {path}: {e}"),
                "Without it, ids restart from the other lease file or from the clock.",
            ),
        }
    }
    let [a, b] = found;
    lease::newest(a, b)
}

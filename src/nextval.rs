//! The generating functions: `snowflake_nextval(worker)`, `snowflake_nextval()` and
//! `snowflake_nextval_batch(worker, n)`.
//!
//! Volatility and parallel safety, chosen deliberately:
//! * VOLATILE, because every call returns a new value: the planner must neither fold a call into a
//!   constant nor evaluate it once for many rows.
//! * PARALLEL SAFE, because the state is in shared memory under an LWLock, not in the backend:
//!   a parallel worker draws from the same per-worker counter as its leader, so ids stay unique
//!   and increasing in the order they are issued. (`nextval()` is PARALLEL UNSAFE because it
//!   writes to a sequence relation, which a parallel worker may not do; this writes only shared
//!   memory, and waits for a lease on its own latch.) The worker id setting is copied to
//!   parallel workers like every other setting.

use crate::generator::Refusal;
use crate::layout;
use crate::shmem::Generators;
use crate::{clock, errors, lease, lease_writer, settings, shmem};
use pgrx::prelude::*;
use pgrx::{PgLwLock, PgSqlErrorCode};
use std::time::Instant;

/// The largest `n` of one `snowflake_nextval_batch` call: a million ids span 245 milliseconds
/// of time field, which is as far as one call should push its worker ahead of the clock.
pub const MAX_BATCH: i32 = 1_000_000;

#[pg_extern(volatile, parallel_safe, name = "snowflake_nextval")]
pub fn snowflake_nextval_worker(worker: Option<i32>) -> i64 {
    let generators = shmem::generators();
    let worker = worker_arg(worker);
    layout::id_from_tick(reserve(generators, worker, 1), worker)
}

#[pg_extern(volatile, parallel_safe, name = "snowflake_nextval")]
pub fn snowflake_nextval_configured() -> i64 {
    let generators = shmem::generators();
    let worker = configured_worker();
    layout::id_from_tick(reserve(generators, worker, 1), worker)
}

#[pg_extern(volatile, parallel_safe)]
fn snowflake_nextval_batch(worker: Option<i32>, n: Option<i32>) -> SetOfIterator<'static, i64> {
    let generators = shmem::generators();
    let worker = worker_arg(worker);
    let n = match n {
        None => errors::null_argument("n", "Pass how many ids to reserve, between 1 and 1000000."),
        Some(n) if !(1..=MAX_BATCH).contains(&n) => errors::raise(
            PgSqlErrorCode::ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE,
            format!("cannot reserve {n} snowflake ids in one call"),
            Some(format!("n must be between 1 and {MAX_BATCH}.")),
            "Reserve at most 1000000 ids per call; call it again for more.",
        ),
        Some(n) => n as u64,
    };
    let first = reserve(generators, worker, n);
    SetOfIterator::new((first..first + n).map(move |tick| layout::id_from_tick(tick, worker)))
}

fn worker_arg(worker: Option<i32>) -> u16 {
    match worker {
        None => errors::null_argument(
            "snowflake worker id",
            "Pass a worker id between 0 and 1023, or call snowflake_nextval() without arguments to use snowflake.worker_id.",
        ),
        Some(w) => layout::check_worker(w as i64).unwrap_or_else(|e| errors::layout_error(e)),
    }
}

fn configured_worker() -> u16 {
    let worker = settings::WORKER_ID.get();
    if worker == settings::UNSET {
        errors::raise(
            PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            "snowflake.worker_id is not set".into(),
            Some("snowflake_nextval() without arguments takes its worker id from snowflake.worker_id, which is -1 (unset).".into()),
            "Give this server a worker id no other server uses: ALTER SYSTEM SET snowflake.worker_id = 1; \
             SELECT pg_reload_conf(); (or set it in postgresql.conf and reload).",
        );
    }
    // The setting's own bounds keep it within 0..1023.
    worker as u16
}

/// Reserves `n` consecutive ticks of `worker` and returns the first.
///
/// Locking protocol: the LWLock is held only to read the clock and update the worker's state:
/// no I/O, no waiting and no `ERROR` happen while it is held. Warnings and errors are raised,
/// and the lease writer woken, after it is released; when the worker has no lease for these
/// ticks, the backend waits for the writer without the lock (see `lease_writer.rs`).
#[inline]
fn reserve(generators: &PgLwLock<Generators>, worker: u16, n: u64) -> u64 {
    match attempt(generators, worker, n) {
        // The common case: granted, nothing to report, no writer to wake.
        Attempt {
            outcome: Ok(first),
            stepped_back: None,
            writer_latch: 0,
        } => first,
        first_try => reserve_slowly(generators, worker, n, first_try),
    }
}

/// The outcome of one lock round trip: the reservation, the clock step it saw, and the lease
/// writer's latch to set once the lock is released (0: nobody to wake).
struct Attempt {
    outcome: Result<u64, Refusal>,
    stepped_back: Option<u64>,
    writer_latch: usize,
}

/// The whole critical section: read the clock, update the worker, and note whether its lease
/// needs renewing.
#[inline]
fn attempt(generators: &PgLwLock<Generators>, worker: u16, n: u64) -> Attempt {
    let mut shared = generators.exclusive();
    let now = clock::now_ms();
    let state = &mut shared.workers[worker as usize];
    let stepped_back = state.observe_clock(now);
    let outcome = state.reserve(now, n);
    let renew = match outcome {
        Ok(_) => lease::low_after_issue(state),
        Err(Refusal::NeedLease { .. }) => true,
        Err(Refusal::Exhausted) => false,
    };
    let writer_latch = if renew { shared.request_renewal() } else { 0 };
    Attempt {
        outcome,
        stepped_back,
        writer_latch,
    }
}

/// Everything but the common case: waking the lease writer, warning of a clock step, waiting
/// for a lease, or the end of the layout.
#[cold]
#[inline(never)]
fn reserve_slowly(
    generators: &PgLwLock<Generators>,
    worker: u16,
    n: u64,
    mut attempt_made: Attempt,
) -> u64 {
    let mut waiting_since = None;
    loop {
        lease_writer::wake(attempt_made.writer_latch);
        if let Some(ms) = attempt_made.stepped_back {
            warn_clock_step(worker, ms);
        }
        match attempt_made.outcome {
            Ok(first) => return first,
            Err(Refusal::NeedLease { .. }) => {
                lease_writer::wait(worker, *waiting_since.get_or_insert_with(Instant::now))
            }
            Err(Refusal::Exhausted) => exhausted(worker),
        }
        attempt_made = attempt(generators, worker, n);
    }
}

#[cold]
fn warn_clock_step(worker: u16, ms: u64) {
    errors::warn(
        format!("snowflake: the system clock stepped back by {ms} ms (seen by worker {worker})"),
        "Ids keep increasing: the worker continues from its last id, ahead of the clock, until the \
         clock catches up. snowflake_stats counts the steps.",
    );
}

#[cold]
fn exhausted(worker: u16) -> ! {
    errors::raise(
        PgSqlErrorCode::ERRCODE_SEQUENCE_GENERATOR_LIMIT_EXCEEDED,
        format!("snowflake worker {worker} has reached the end of the id layout (2094-09-07 15:47:35.551+00)"),
        Some(format!("The system clock reads {} ms after 2025-01-01 00:00:00+00; the 41-bit time field ends at {} ms.", clock::now_ms(), layout::MAX_TIME_MS)),
        "Check the server's clock; if it is right, this layout's time range is used up.",
    )
}

//! The generating functions: `snowflake_nextval()`, `snowflake_nextval(worker)`,
//! `snowflake_nextval_batch(n)` and `snowflake_nextval_batch(worker, n)`, and the path every
//! one of them takes to issue ids.
//!
//! Volatility and parallel safety, chosen deliberately:
//! * VOLATILE, because every call returns a new value: the planner must neither fold a call into a
//!   constant nor evaluate it once for many rows.
//! * PARALLEL SAFE, because the state is in shared memory, not in the backend: a parallel
//!   worker draws from the same per-worker slot as its leader, so ids stay unique and
//!   increasing in the order they are issued. (`nextval()` is PARALLEL UNSAFE because it
//!   writes to a sequence relation, which a parallel worker may not do; this writes only shared
//!   memory.) The worker id setting is copied to parallel workers like every other setting.

use crate::shared::shmem::{self, Shared};
use crate::{errors, mint::clock, mint::wait, settings};
use pgrx::prelude::*;
use snowflake_core::generator::{Miss, Outcome, Params};
use snowflake_core::layout::Layout;
use std::time::Instant;

/// The largest `n` of one `snowflake_nextval_batch` call.
pub const MAX_BATCH: i32 = 1_000_000;

#[pg_extern(volatile, parallel_safe, name = "snowflake_nextval")]
pub fn snowflake_nextval_worker(worker: Option<i32>) -> i64 {
    let shared = shmem::shared();
    let worker = worker_arg(worker, &shared.params.layout);
    next(shared, worker)
}

#[pg_extern(volatile, parallel_safe, name = "snowflake_nextval")]
pub fn snowflake_nextval_configured() -> i64 {
    let shared = shmem::shared();
    next(shared, configured_worker(shared))
}

#[pg_extern(volatile, parallel_safe)]
fn snowflake_nextval_batch(worker: Option<i32>, n: Option<i32>) -> SetOfIterator<'static, i64> {
    let shared = shmem::shared();
    let worker = worker_arg(worker, &shared.params.layout);
    batch(shared, worker, n)
}

#[pg_extern(volatile, parallel_safe, name = "snowflake_nextval_batch")]
pub fn snowflake_nextval_batch_configured(n: Option<i32>) -> SetOfIterator<'static, i64> {
    let shared = shmem::shared();
    let worker = configured_worker(shared);
    batch(shared, worker, n)
}

/// One id of `worker`.
#[inline]
fn next(shared: &Shared, worker: u32) -> i64 {
    let tick = issue(shared, worker, 1);
    let id = shared.params.layout.id_from_tick(tick, worker);
    crate::mint::lastval::remember(id);
    id
}

fn batch(shared: &'static Shared, worker: u32, n: Option<i32>) -> SetOfIterator<'static, i64> {
    let n = match n {
        None => errors::null_argument(
            "n",
            &format!("Pass how many ids to take, between 1 and {MAX_BATCH}."),
        ),
        Some(n) if !(1..=MAX_BATCH).contains(&n) => errors::batch_out_of_range(n, MAX_BATCH),
        Some(n) => n as u64,
    };
    // Before the fast path, whose bound is refreshed once a second: a batch the current
    // snowflake.max_ahead can never hold is an error at once, not only once the bound caught
    // up with a reload.
    max_ahead_for(&shared.params, worker, n);
    let first = issue(shared, worker, n);
    let layout = &shared.params.layout;
    crate::mint::lastval::remember(layout.id_from_tick(first + n - 1, worker));
    SetOfIterator::new((first..first + n).map(move |tick| layout.id_from_tick(tick, worker)))
}

/// `snowflake.max_ahead` in time units; an error if `n` ids can never fit in it.
fn max_ahead_for(p: &Params, worker: u32, n: u64) -> u64 {
    let max_ahead_ms = settings::MAX_AHEAD_MS.get();
    let max_ahead = p.layout.units_in_ms(max_ahead_ms as u64);
    if n > p.capacity(max_ahead) {
        errors::batch_too_large(n, worker, p.capacity(max_ahead), max_ahead_ms);
    }
    max_ahead
}

/// An explicit worker: one of the layout; under `auto`, only the one this server leased (any
/// other may be another server's).
fn worker_arg(worker: Option<i32>, layout: &Layout) -> u32 {
    let worker = match worker {
        None => errors::null_argument(
            "snowflake worker id",
            "Pass a worker id, or call snowflake_nextval() without arguments to use snowflake.worker_id.",
        ),
        Some(w) => layout
            .check_worker(w as i64)
            .unwrap_or_else(|e| errors::layout_error(e, layout)),
    };
    if settings::worker() == settings::AUTO && crate::lease::leased() != Some(worker as i32) {
        errors::not_leased(worker);
    }
    worker
}

/// The worker of `snowflake_nextval()` without arguments: `snowflake.worker_id`, or under
/// `auto` the worker id leased from the registry. One load either way; a worker id set by hand
/// one more, on Citus, to know that no other node of the cluster has it ([`crate::tables::citus`]).
#[inline]
fn configured_worker(shared: &Shared) -> u32 {
    match settings::worker() {
        settings::AUTO => crate::lease::worker(shared),
        settings::UNSET => errors::worker_id_unset(),
        worker => {
            let worker = worker as u32;
            crate::tables::citus::ensure(shared, worker);
            worker
        }
    }
}

/// Issues `n` consecutive ticks of `worker` and returns the first: the fast path of
/// `Slot::try_issue`, one compare-and-swap with no lock, and the slow path below when a limit
/// is near or a clock check is due.
#[inline]
fn issue(shared: &Shared, worker: u32, n: u64) -> u64 {
    let p = &shared.params;
    let slot = shared.slot(worker);
    let clock = clock::wall(&p.layout);
    loop {
        match slot.try_issue(p, clock, n) {
            Ok(issued) => {
                if issued.low {
                    shared.request_mark();
                }
                return issued.first;
            }
            Err(Miss::Contended) => continue,
            Err(Miss::Slow) => return issue_slowly(shared, worker, n),
        }
    }
}

/// Everything but the common case, one full check at a time under the control lock: the
/// clock checked against the boot clock (and each step or jump reported once), the mark
/// writer asked for a mark and waited for, the clock waited for when ids would run more than
/// `snowflake.max_ahead` ahead, and every refusal turned into an error with its reason.
#[cold]
#[inline(never)]
fn issue_slowly(shared: &Shared, worker: u32, n: u64) -> u64 {
    let p = &shared.params;
    let slot = shared.slot(worker);
    let max_ahead = max_ahead_for(p, worker, n);
    let since = Instant::now();
    // The worker id reserved for past times mints no live ids, by either form. Checked here,
    // where every worker's first id and at least one id a second go, and not on the fast path:
    // a worker id reserved while it mints could issue from a mark already raised for at most
    // the second until its next full check (and `snowflake_nextval_at` refuses a worker id that
    // issued live ids since the server started).
    if settings::PAST_WORKER_ID.get() == worker as i32 {
        errors::worker_reserved_for_past(worker);
    }
    loop {
        // SAFETY: a plain query of the server's recovery state.
        if unsafe { pg_sys::RecoveryInProgress() } {
            errors::in_recovery(worker);
        }
        crate::lease::check(shared, worker);
        let (outcome, events) = {
            let _control = shared.control();
            slot.try_issue_checked(p, clock::readings(&p.layout), n, max_ahead)
        };
        for event in events.into_iter().flatten() {
            errors::clock_event(worker, event, &p.layout);
        }
        if slot.dirty.load(std::sync::atomic::Ordering::Acquire) {
            shared.request_mark();
        }
        match outcome {
            Outcome::Issued(issued) => {
                wait::done();
                if issued.low {
                    shared.request_mark();
                }
                return issued.first;
            }
            Outcome::Contended => {}
            Outcome::NeedMark { through } => {
                slot.wait_for(through);
                shared.request_mark();
                wait::for_marks(shared, worker, since);
            }
            Outcome::Closed => wait::for_marks(shared, worker, since),
            Outcome::Ahead { by } => wait::for_clock(p.layout.ms_in_units(by)),
            Outcome::Exhausted => errors::exhausted(worker, &p.layout),
        }
    }
}

//! `snowflake_stats`: what each worker has done since the server started, and its persisted
//! mark.

pub mod compat;

use crate::shared::shmem;
use pgrx::prelude::*;
use snowflake_core::generator::Slot;
use std::sync::atomic::Ordering::*;

/// One worker's figures, as both the current and the 0.1.0 form of `snowflake_stats` show them.
pub struct Figures {
    pub worker: i32,
    pub issued: i64,
    pub last_id: i64,
    pub ahead_ms: i64,
    pub clock_steps_back: i64,
    pub clock_jumps: i64,
    pub borrowed_ms: i64,
    pub persisted_mark: Option<i64>,
    pub rewindable: bool,
    pub foreign_rows: i64,
}

/// The figures of every worker that issued ids since the server started or has a mark of its
/// own (not only the floor every worker was given by `snowflake_restore_mark(above)`).
pub fn figures() -> Vec<Figures> {
    let shared = shmem::shared();
    let p = &shared.params;
    let layout = &p.layout;
    let now = crate::mint::clock::wall(layout);
    let ms = |units: u64| layout.ms_in_units(units) as i64;
    let idle = |s: &Slot| {
        s.issued.load(Relaxed) == 0
            && s.foreign_rows.load(Relaxed) == 0
            && s.jump_from.load(Relaxed) == 0
    };
    // `snowflake_restore_mark(above)` raises every worker's mark to one floor: 1,024 rows that
    // say the same thing. A worker whose only state is the floor that most idle workers share
    // is left out; one that issued ids, or whose mark is its own, is shown.
    let mut counts = std::collections::HashMap::new();
    for s in shared.slots().iter().filter(|s| idle(s)) {
        *counts.entry(s.mark.load(Relaxed)).or_insert(0usize) += 1;
    }
    let floor = counts
        .into_iter()
        .filter(|&(mark, n)| mark > 0 && n > 1)
        .max_by_key(|&(_, n)| n)
        .map(|(mark, _)| mark);
    shared
        .slots()
        .iter()
        .enumerate()
        .filter(|(_, s)| {
            let mark = s.mark.load(Relaxed);
            !idle(s) || (mark > 0 && Some(mark) != floor)
        })
        .map(|(w, s): (usize, &Slot)| {
            let worker = w as u32;
            let last = s.last();
            let mark = s.mark.load(Acquire);
            Figures {
                worker: w as i32,
                issued: s.issued.load(Relaxed) as i64,
                last_id: layout.id_from_tick(last.min(p.tick_limit - 1), worker),
                ahead_ms: ms((last >> p.seq_bits).saturating_sub(now)),
                clock_steps_back: s.steps_back.load(Relaxed) as i64,
                clock_jumps: s.jumps.load(Relaxed) as i64,
                borrowed_ms: ms(s.borrowed.load(Relaxed)),
                // Every id issued is below this one, which is durable.
                persisted_mark: (mark > 0)
                    .then(|| layout.id_from_tick(mark.min(p.tick_limit), worker)),
                rewindable: s.jump_from.load(Relaxed) != 0,
                foreign_rows: s.foreign_rows.load(Relaxed) as i64,
            }
        })
        .collect()
}

/// VOLATILE: it reads counters that other sessions move. Readable by superusers and members
/// of pg_monitor (see the extension's grants).
#[allow(clippy::type_complexity)]
#[pg_extern(volatile, parallel_safe, name = "snowflake_stats")]
fn snowflake_worker_stats() -> TableIterator<
    'static,
    (
        name!(worker, i32),
        name!(issued, i64),
        name!(last_id, i64),
        name!(ahead_ms, i64),
        name!(clock_steps_back, i64),
        name!(clock_jumps, i64),
        name!(borrowed_ms, i64),
        name!(persisted_mark, Option<i64>),
        name!(rewindable, bool),
        name!(foreign_rows, i64),
    ),
> {
    TableIterator::new(figures().into_iter().map(|f| {
        (
            f.worker,
            f.issued,
            f.last_id,
            f.ahead_ms,
            f.clock_steps_back,
            f.clock_jumps,
            f.borrowed_ms,
            f.persisted_mark,
            f.rewindable,
            f.foreign_rows,
        )
    }))
}

/// The mark writer's state: `ready`, `starting`, or `in doubt` (nothing is minted until a
/// superuser restores the marks), with the marks database, the reason, and the layout of the ids
/// this server mints and decodes; then the worker id `snowflake_nextval()` uses, where it came
/// from (`setting`, `registry`, or `unset`), and with a registry the lease: its holder (this
/// server as the registry knows it), when it expires, and the registry's state.
#[allow(clippy::type_complexity)]
#[pg_extern(volatile, parallel_safe)]
fn snowflake_status() -> TableIterator<
    'static,
    (
        name!(state, String),
        name!(marks_database, String),
        name!(detail, Option<String>),
        name!(layout, String),
        name!(worker_id, Option<i32>),
        name!(worker_source, String),
        name!(lease_holder, Option<String>),
        name!(lease_expires, Option<TimestampWithTimeZone>),
        name!(registry, Option<String>),
    ),
> {
    use crate::shared::control::State;
    let shared = shmem::shared();
    let (state, why, hint, failure) = {
        let control = shared.control();
        let failure = control.failing.then(|| {
            format!(
                "writing marks failed {} time(s) in a row: {}",
                control.failures,
                control.failure.get()
            )
        });
        (
            control.state,
            control.why.get(),
            control.hint.get(),
            failure,
        )
    };
    // SAFETY: a plain query of the server's recovery state.
    let in_recovery = unsafe { pg_sys::RecoveryInProgress() };
    let (state, detail) = match state {
        _ if in_recovery => (
            "standby",
            Some("in recovery: the primary mints; this server replays its marks".to_string()),
        ),
        State::Ready => (
            "ready",
            failure.or_else(|| crate::tables::citus::conflict_detail(shared)),
        ),
        State::Starting => ("starting", failure.or((!why.is_empty()).then_some(why))),
        State::InDoubt if hint.is_empty() => ("in doubt", Some(why)),
        State::InDoubt => ("in doubt", Some(format!("{why}. {hint}"))),
    };
    let lease = crate::lease::status(shared);
    TableIterator::once((
        state.to_string(),
        crate::settings::database(),
        detail,
        crate::settings::layout().label(),
        lease.worker,
        lease.source.to_string(),
        lease.holder,
        lease.expires,
        lease.registry,
    ))
}

// The snowflake_stats view over snowflake_stats(): sql/install/stats_view.sql.
pgrx::extension_sql_file!(
    "../../sql/install/stats_view.sql",
    name = "snowflake_stats_view",
    requires = [snowflake_worker_stats]
);

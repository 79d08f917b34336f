//! What a superuser does when the marks need a hand: `snowflake_restore_mark` (lost or
//! doubtful marks, a logical restore into a new cluster) and `snowflake_rewind` (a forward
//! clock jump that was followed by mistake). Each asks the mark writer through the control
//! block's mailbox and waits for the change to be durable before it returns.

use crate::marks::mailbox::{self, Answer, Ask, Reply};
use crate::shared::shmem::{self, Shared};
use crate::{errors, settings};
use pgrx::prelude::*;
use snowflake_core::layout::Layout;
use snowflake_core::marks::RewindRefusal;

/// Every worker's ids from now on are above `above`; also accepts the marks table as it is
/// when the marks are in doubt. Returns the smallest id any worker may issue next.
///
/// In a worker-first layout only an id of worker 0 can be below every worker's new ids: each
/// worker's then start after its time. Any other `above` is refused.
#[pg_extern(volatile, parallel_unsafe, name = "snowflake_restore_mark")]
fn snowflake_restore_mark_all(above: Option<i64>) -> i64 {
    let (shared, layout) = prepare();
    let from = first_tick_above(above, None, layout);
    restore(shared, None, from);
    layout.id_from_tick(from, 0)
}

/// Worker `worker`'s ids from now on are above `above`. Returns its new mark.
#[pg_extern(volatile, parallel_unsafe, name = "snowflake_restore_mark")]
fn snowflake_restore_mark_worker(worker: Option<i32>, above: Option<i64>) -> i64 {
    let (shared, layout) = prepare();
    let worker = match worker {
        None => errors::null_argument("worker", "Pass the worker id whose mark to restore."),
        Some(w) => layout
            .check_worker(w as i64)
            .unwrap_or_else(|e| errors::layout_error(e, layout)),
    };
    let from = first_tick_above(above, Some(worker), layout);
    let mark = restore(shared, Some(worker), from);
    layout.id_from_tick(mark.max(from), worker)
}

/// Every worker's ids from now on are above the largest id in `tables` (their columns whose
/// default calls snowflake_nextval, or their bigint primary key). Returns the smallest id any
/// worker may issue next.
///
/// In a worker-first layout the largest id is of the highest worker only, and says nothing of
/// the others' times: every worker's ids then start after the latest time of any id in the
/// tables (each worker's largest id found by one index probe per worker present).
#[pg_extern(sql = false)]
fn snowflake_restore_mark_from(tables: Option<Vec<Option<pg_sys::Oid>>>) -> i64 {
    let (shared, layout) = prepare();
    let tables: Vec<pg_sys::Oid> = match tables {
        Some(t) if !t.is_empty() && t.iter().all(Option::is_some) => t.into_iter().flatten().collect(),
        _ => errors::null_argument(
            "the list of tables",
            "Pass the tables that hold this server's ids, e.g. snowflake_restore_mark(ARRAY['orders', 'lines']::regclass[]).",
        ),
    };
    let mut above = 0i64;
    for table in tables {
        above = above.max(largest_id(table, layout));
    }
    let from = first_tick_above(Some(above), None, layout);
    restore(shared, None, from);
    layout.id_from_tick(from, 0)
}

/// Brings `worker`'s ids back to the right time after a forward clock jump it followed; the
/// ids issued since the jump stay reserved (the worker skips them when it reaches them).
#[pg_extern(volatile, parallel_unsafe)]
fn snowflake_rewind(
    worker: Option<i32>,
) -> TableIterator<
    'static,
    (
        name!(next_id, i64),
        name!(reserved_from, i64),
        name!(reserved_to, i64),
    ),
> {
    let (shared, layout) = prepare();
    let worker = match worker {
        None => errors::null_argument("worker", "Pass the worker id to rewind."),
        Some(w) => layout
            .check_worker(w as i64)
            .unwrap_or_else(|e| errors::layout_error(e, layout)),
    };
    if crate::settings::leasing() {
        errors::marks::rewind_leased(worker);
    }
    let clock = crate::mint::clock::wall(layout);
    let reply = mailbox::ask(shared, Ask::Rewind { worker, clock });
    match reply.answer {
        Answer::Rewound(r) => TableIterator::once((
            layout.id_from_tick(r.resume, worker),
            layout.id_from_tick(r.reserved_from, worker),
            layout.id_from_tick(r.reserved_to, worker),
        )),
        Answer::RewindRefused(RewindRefusal::NoJump) => errors::rewind_no_jump(worker),
        Answer::RewindRefused(RewindRefusal::StillReserved { from, to }) => {
            errors::rewind_still_reserved(
                worker,
                layout.id_from_tick(from, worker),
                layout.id_from_tick(to, worker),
            )
        }
        Answer::RewindRefused(RewindRefusal::NothingIssued) => {
            errors::rewind_nothing_issued(worker)
        }
        Answer::RewindRefused(RewindRefusal::ClockStillAhead { jump_from }) => {
            errors::rewind_clock_still_ahead(
                worker,
                layout.unix_ms_from_time(jump_from >> layout.seq_bits),
            )
        }
        _ => failed(reply),
    }
}

/// Checks the caller and the server; returns the shared state and the layout.
fn prepare() -> (&'static Shared, &'static Layout) {
    // SAFETY: plain queries of the session's and the server's state.
    if unsafe { !pg_sys::superuser() } {
        errors::marks_not_superuser();
    }
    let shared = shmem::shared();
    // SAFETY: as above.
    if unsafe { pg_sys::RecoveryInProgress() } {
        errors::marks_in_recovery();
    }
    (shared, settings::layout())
}

/// The first tick whose ids, of every worker (or of `worker`), are all above `above`: the start
/// of the next time unit.
///
/// In a worker-first layout the ids of a worker below `above`'s are all below it, whatever
/// their time: a restore that would need them above it is refused rather than done in part.
/// The ids of a worker above `above`'s are all above it already; the tick still starts after
/// `above`'s time.
fn first_tick_above(above: Option<i64>, worker: Option<u32>, layout: &Layout) -> u64 {
    let above = match above {
        None => errors::null_argument(
            "the id to restore above",
            "Pass the largest id this server may have issued.",
        ),
        Some(id) => id,
    };
    let parts = layout
        .decompose(above)
        .unwrap_or_else(|e| errors::layout_error(e, layout));
    if !layout.is_time_first() && parts.worker > worker.unwrap_or(0) {
        errors::restore_below_worker(above, parts.worker, worker, layout);
    }
    if parts.time >= layout.max_time() {
        errors::exhausted(0, layout);
    }
    (parts.time + 1) << layout.seq_bits
}

fn restore(shared: &Shared, worker: Option<u32>, from: u64) -> u64 {
    let reply = mailbox::ask(shared, Ask::Restore { worker, from });
    match reply.answer {
        Answer::Restored { mark } => mark,
        _ => failed(reply),
    }
}

fn failed(reply: Reply) -> ! {
    errors::writer_failed(&reply.text, &reply.hint)
}

/// The largest id in one table: in its id columns ([`crate::tables::id_columns`]), each read with the
/// owner's rights ([`crate::tables::owner_scan`]). A column that makes ids but cannot be read as ids is an
/// error: the largest id is never guessed.
///
/// In a worker-first layout, an id of worker 0 whose time is the latest of any id there: each
/// column's largest id of each worker present, found from the top down (the largest id, then
/// the largest below that one's worker, and so on).
fn largest_id(table: pg_sys::Oid, layout: &Layout) -> i64 {
    let columns = crate::tables::id_columns::of(table);
    let name = || crate::tables::owner_scan::name_of(table);
    if columns.is_empty() {
        errors::no_id_column(&name());
    }
    if let Some(c) = columns.iter().find(|c| !c.readable) {
        errors::id_column_unreadable(&pgrx::spi::quote_identifier(&c.name), &name(), &c.type_name);
    }
    if layout.is_time_first() {
        return columns
            .iter()
            .filter_map(|column| crate::tables::owner_scan::largest(table, &column.name, None))
            .max()
            .unwrap_or(0);
    }
    let mut latest = None;
    for column in &columns {
        let mut below = None;
        while let Some(id) = crate::tables::owner_scan::largest(table, &column.name, below) {
            let parts = layout
                .decompose(id)
                .unwrap_or_else(|e| errors::layout_error(e, layout));
            latest = latest.max(Some(parts.time));
            if parts.worker == 0 {
                break;
            }
            below = Some(layout.compose(0, parts.worker, 0));
        }
    }
    latest.map_or(0, |time| layout.compose(time, 0, layout.max_seq()))
}

// Declared in sql/install/restore_mark_tables.sql: pgrx would make the argument an oid[].
pgrx::extension_sql_file!(
    "../../sql/install/restore_mark_tables.sql",
    name = "snowflake_restore_mark_from_tables"
);

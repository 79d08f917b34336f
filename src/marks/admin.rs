//! What a superuser does when the marks need a hand: `snowflake_restore_mark` (lost or
//! doubtful marks, a logical restore into a new cluster) and `snowflake_rewind` (a forward
//! clock jump that was followed by mistake). Each asks the mark writer through the control
//! block's mailbox and waits for the change to be durable before it returns.

use crate::marks::mailbox::{self, Answer, Ask, Reply};
use crate::shared::shmem::{self, Shared};
use crate::{errors, settings};
use pgrx::prelude::*;
use pgrx::PgSqlErrorCode;
use snowflake_core::layout::Layout;
use snowflake_core::marks::RewindRefusal;

use PgSqlErrorCode::*;

/// Every worker's ids from now on are above `above`; also accepts the marks table as it is
/// when the marks are in doubt. Returns the smallest id any worker may issue next.
#[pg_extern(volatile, parallel_unsafe, name = "snowflake_restore_mark")]
fn snowflake_restore_mark_all(above: Option<i64>) -> i64 {
    let (shared, layout) = prepare();
    let from = first_tick_above(above, layout);
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
    let from = first_tick_above(above, layout);
    let mark = restore(shared, Some(worker), from);
    layout.id_from_tick(mark.max(from), worker)
}

/// Every worker's ids from now on are above the largest id in `tables` (their columns whose
/// default calls snowflake_nextval, or their bigint primary key). Returns the smallest id any
/// worker may issue next.
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
        above = above.max(largest_id(table));
    }
    let from = first_tick_above(Some(above), layout);
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
    let clock = crate::mint::clock::wall(layout);
    let reply = mailbox::ask(shared, Ask::Rewind { worker, clock });
    match reply.answer {
        Answer::Rewound(r) => TableIterator::once((
            layout.id_from_tick(r.resume, worker),
            layout.id_from_tick(r.reserved_from, worker),
            layout.id_from_tick(r.reserved_to, worker),
        )),
        Answer::RewindRefused(RewindRefusal::NoJump) => errors::raise(
            ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            format!("snowflake worker {worker} has followed no forward clock jump since it was last rewound"),
            None,
            "snowflake_rewind undoes a forward jump of the system clock that the worker followed (the server log \
             says \"follows the system clock, which jumped forward\"); snowflake_stats shows clock_jumps.",
        ),
        Answer::RewindRefused(RewindRefusal::StillReserved { from, to }) => errors::raise(
            ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            format!(
                "snowflake worker {worker} still skips the ids {} to {} of an earlier rewind",
                layout.id_from_tick(from, worker),
                layout.id_from_tick(to, worker)
            ),
            Some("A worker keeps one reserved range at a time, until its time passes it.".into()),
            "Give the worker another worker id to go on with (snowflake.worker_id), or restore its mark above \
             the jump with snowflake_restore_mark(worker, id).",
        ),
        Answer::RewindRefused(RewindRefusal::NothingIssued) => errors::raise(
            ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            format!("snowflake worker {worker} issued no id after the clock jump it followed: nothing to undo"),
            None,
            "The server restarted below the jump, so the worker already follows the clock; the jump is forgotten.",
        ),
        Answer::RewindRefused(RewindRefusal::ClockStillAhead { jump_from }) => errors::raise(
            ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            format!(
                "the system clock still reads at or after {}, where the jump took snowflake worker {worker}",
                errors::show_unix_ms(layout.unix_ms_from_time(jump_from >> layout.seq_bits))
            ),
            None,
            "Set the system clock right first, then run snowflake_rewind again.",
        ),
        _ => failed(reply),
    }
}

/// Checks the caller and the server; returns the shared state and the layout.
fn prepare() -> (&'static Shared, &'static Layout) {
    // SAFETY: plain queries of the session's and the server's state.
    if unsafe { !pg_sys::superuser() } {
        errors::raise(
            ERRCODE_INSUFFICIENT_PRIVILEGE,
            "only a superuser may change snowflake high-water marks".into(),
            None,
            "Ask a superuser: a wrong mark lets ids repeat.",
        );
    }
    let shared = shmem::shared();
    // SAFETY: as above.
    if unsafe { pg_sys::RecoveryInProgress() } {
        errors::raise(
            ERRCODE_READ_ONLY_SQL_TRANSACTION,
            "cannot change snowflake high-water marks during recovery".into(),
            None,
            "Run it on the primary; standbys replay the primary's marks.",
        );
    }
    (shared, settings::layout())
}

/// The first tick whose ids, of every worker, are all above `above`: the start of the next
/// time unit.
fn first_tick_above(above: Option<i64>, layout: &Layout) -> u64 {
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
    let hint = if reply.hint.is_empty() {
        "See the server log for the mark writer's messages."
    } else {
        &reply.hint
    };
    errors::raise(
        ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        format!("the snowflake mark writer could not do it: {}", reply.text),
        None,
        hint,
    )
}

/// The largest id in one table: in its id columns ([`crate::tables::id_columns`]), each read with the
/// owner's rights ([`crate::tables::owner_scan`]). A column that makes ids but cannot be read as ids is an
/// error: the largest id is never guessed.
fn largest_id(table: pg_sys::Oid) -> i64 {
    let columns = crate::tables::id_columns::of(table);
    let name = || crate::tables::owner_scan::name_of(table);
    if columns.is_empty() {
        errors::raise(
            ERRCODE_UNDEFINED_COLUMN,
            format!("table {} has no snowflake id column", name()),
            Some(
                "A snowflake id column is one whose default calls snowflake_nextval, or else a bigint or \
                 snowflake primary key without a default (snowflake_id_columns(table) lists them)."
                    .into(),
            ),
            "Pass the tables whose keys are snowflake ids, or pass the largest id itself: snowflake_restore_mark(<id>).",
        );
    }
    if let Some(c) = columns.iter().find(|c| !c.readable) {
        errors::raise(
            ERRCODE_DATATYPE_MISMATCH,
            format!(
                "column {} of table {} makes snowflake ids (its default calls snowflake_nextval), but its type {} cannot be read as ids",
                pgrx::spi::quote_identifier(&c.name),
                name(),
                c.type_name
            ),
            Some("Only bigint and snowflake columns hold ids whose largest can be found.".into()),
            "Pass the largest id itself: snowflake_restore_mark(<id>), or change the column to bigint.",
        );
    }
    columns
        .iter()
        .filter_map(|column| crate::tables::owner_scan::largest(table, &column.name))
        .max()
        .unwrap_or(0)
}

// pgrx would declare the argument as oid[]; a regclass[] reads better and is stored the same.
pgrx::extension_sql!(
    r#"
CREATE FUNCTION snowflake_restore_mark(tables regclass[]) RETURNS bigint
VOLATILE PARALLEL UNSAFE
LANGUAGE c AS 'MODULE_PATHNAME', 'snowflake_restore_mark_from_wrapper';
"#,
    name = "snowflake_restore_mark_from_tables"
);

//! The errors of the marks' administration ([`crate::marks::admin`],
//! [`crate::marks::mailbox`]).

use super::{raise, show_unix_ms};
use pgrx::PgSqlErrorCode::*;

/// `snowflake_rewind` of a worker that followed no forward jump.
#[cold]
#[track_caller]
pub fn rewind_no_jump(worker: u32) -> ! {
    raise(
        ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        format!("snowflake worker {worker} has followed no forward clock jump since it was last rewound"),
        None,
        "snowflake_rewind undoes a forward jump of the system clock that the worker followed (the server log \
         says \"follows the system clock, which jumped forward\"); snowflake_stats shows clock_jumps.",
    )
}

/// `snowflake_rewind` of a worker id leased from a registry: its next holder starts above what
/// its holder gives back, one past its last id, so the reserved ids would be issued again.
#[cold]
#[track_caller]
pub fn rewind_leased(worker: u32) -> ! {
    raise(
        ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        format!("snowflake worker {worker} is leased from the registry, and a leased worker is not rewound"),
        None,
        "Its ids run ahead of the clock until the clock catches up (snowflake_stats shows ahead_ms). To bring them back \
         at once, stop this server, start it with another worker id, and let the registry hand this one on.",
    )
}

/// `snowflake_rewind` of a worker that still skips the ids `from_id ..= to_id` of an earlier
/// rewind.
#[cold]
#[track_caller]
pub fn rewind_still_reserved(worker: u32, from_id: i64, to_id: i64) -> ! {
    raise(
        ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        format!("snowflake worker {worker} still skips the ids {from_id} to {to_id} of an earlier rewind"),
        Some("A worker keeps one reserved range at a time, until its time passes it.".into()),
        "Give the worker another worker id to go on with (snowflake.worker_id), or restore its mark above \
         the jump with snowflake_restore_mark(worker, id).",
    )
}

/// `snowflake_rewind` of a worker that issued nothing after the jump.
#[cold]
#[track_caller]
pub fn rewind_nothing_issued(worker: u32) -> ! {
    raise(
        ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        format!("snowflake worker {worker} issued no id after the clock jump it followed: nothing to undo"),
        None,
        "The server restarted below the jump, so the worker already follows the clock; the jump is forgotten.",
    )
}

/// `snowflake_rewind` while the clock still reads at or after where the jump took the worker
/// (`jump_unix_ms`).
#[cold]
#[track_caller]
pub fn rewind_clock_still_ahead(worker: u32, jump_unix_ms: i64) -> ! {
    raise(
        ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        format!(
            "the system clock still reads at or after {}, where the jump took snowflake worker {worker}",
            show_unix_ms(jump_unix_ms)
        ),
        None,
        "Set the system clock right first, then run snowflake_rewind again.",
    )
}

/// A change of the marks by a role that is not a superuser.
#[cold]
#[track_caller]
pub fn marks_not_superuser() -> ! {
    raise(
        ERRCODE_INSUFFICIENT_PRIVILEGE,
        "only a superuser may change snowflake high-water marks".into(),
        None,
        "Ask a superuser: a wrong mark lets ids repeat.",
    )
}

/// A change of the marks on a server in recovery.
#[cold]
#[track_caller]
pub fn marks_in_recovery() -> ! {
    raise(
        ERRCODE_READ_ONLY_SQL_TRANSACTION,
        "cannot change snowflake high-water marks during recovery".into(),
        None,
        "Run it on the primary; standbys replay the primary's marks.",
    )
}

/// The mark writer answered a request as failed, with its reason and, if any, its hint.
#[cold]
#[track_caller]
pub fn writer_failed(text: &str, hint: &str) -> ! {
    let hint = if hint.is_empty() {
        "See the server log for the mark writer's messages."
    } else {
        hint
    };
    raise(
        ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        format!("the snowflake mark writer could not do it: {text}"),
        None,
        hint,
    )
}

/// `snowflake_restore_mark(tables)` with a table (named `table`) that has no id column.
#[cold]
#[track_caller]
pub fn no_id_column(table: &str) -> ! {
    raise(
        ERRCODE_UNDEFINED_COLUMN,
        format!("table {table} has no snowflake id column"),
        Some(
            "A snowflake id column is one whose default calls snowflake_nextval, or else a bigint or \
             snowflake primary key without a default (snowflake_id_columns(table) lists them)."
                .into(),
        ),
        "Pass the tables whose keys are snowflake ids, or pass the largest id itself: snowflake_restore_mark(<id>).",
    )
}

/// A column (`column`, quoted) of `table` that makes ids but whose type cannot be read as ids.
#[cold]
#[track_caller]
pub fn id_column_unreadable(column: &str, table: &str, type_name: &str) -> ! {
    raise(
        ERRCODE_DATATYPE_MISMATCH,
        format!(
            "column {column} of table {table} makes snowflake ids (its default calls snowflake_nextval), but its type {type_name} cannot be read as ids"
        ),
        Some("Only bigint and snowflake columns hold ids whose largest can be found.".into()),
        "Pass the largest id itself: snowflake_restore_mark(<id>), or change the column to bigint.",
    )
}

/// An administrator's request the mark writer did not answer within `seconds`.
#[cold]
#[track_caller]
pub fn writer_did_not_answer(seconds: u64) -> ! {
    raise(
        ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        format!("the snowflake mark writer did not answer within {seconds} s"),
        None,
        "Check that the \"snowflake_ext mark writer\" background worker runs (pg_stat_activity) and see the server log.",
    )
}

/// A restore above `above`, an id of worker `above_worker`, of `worker` (every worker if
/// `None`) in a worker-first layout, where the ids of a lower worker are all below it.
#[cold]
#[track_caller]
pub fn restore_below_worker(
    above: i64,
    above_worker: u32,
    worker: Option<u32>,
    layout: &snowflake_core::layout::Layout,
) -> ! {
    let whose = match worker {
        Some(w) => format!("worker {w}'s ids"),
        None => "every worker's ids".into(),
    };
    raise(
        ERRCODE_INVALID_PARAMETER_VALUE,
        format!(
            "{whose} cannot be above {above}, an id of worker {above_worker}, in the snowflake layout {}",
            layout.label()
        ),
        Some(
            "In a worker-first layout (order=worker-time-sequence) the ids of a worker are all below those \
             of every higher worker, whatever their time."
                .into(),
        ),
        &match worker {
            Some(w) => format!(
                "Pass the largest id worker {w} may have issued (SELECT max(id) FROM t WHERE snowflake_worker(id) = {w}), \
                 or restore every worker from the tables: snowflake_restore_mark(ARRAY['t']::regclass[])."
            ),
            None => "Restore every worker from the tables (snowflake_restore_mark(ARRAY['t']::regclass[])), or pass \
                     an id of worker 0 made at the latest time any id was: snowflake_restore_mark(snowflake_compose(ts, 0, 0))."
                .into(),
        },
    )
}

//! The errors about users' tables ([`crate::tables::owner_scan`], [`crate::tables::guard`]) and
//! the Citus check ([`crate::tables::citus`]).

use super::raise;
use pgrx::PgSqlErrorCode::*;

/// A relation (by OID) that is not a table.
#[cold]
#[track_caller]
pub fn not_a_table(oid: u32) -> ! {
    raise(
        ERRCODE_WRONG_OBJECT_TYPE,
        format!("relation with OID {oid} is not a table"),
        None,
        "Pass a table (or a materialized view) by name, e.g. 'orders'::regclass.",
    )
}

/// Reading the largest id of `table` without being its owner (or a superuser).
#[cold]
#[track_caller]
pub fn not_table_owner(table: &str) -> ! {
    raise(
        ERRCODE_INSUFFICIENT_PRIVILEGE,
        format!("must be the owner of table {table} to read its largest id"),
        None,
        "Run it as the table's owner, or as a superuser.",
    )
}

/// The largest value of `column` (quoted) of `table` is not a bigint.
#[cold]
#[track_caller]
pub fn largest_not_bigint(column: &str, table: &str, error: &dyn std::fmt::Display) -> ! {
    raise(
        ERRCODE_DATATYPE_MISMATCH,
        format!("the largest value of column {column} of table {table} cannot be read as a bigint: {error}"),
        None,
        "Only bigint and snowflake columns hold ids whose largest can be found.",
    )
}

/// The replication guard fired on `table` without a new row.
#[cold]
#[track_caller]
pub fn guard_not_row_trigger(table: &str) -> ! {
    raise(
        ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED,
        format!("snowflake_guard_row fired on {table} without a new row: it is not a row trigger on INSERT"),
        None,
        "Install the guard with snowflake_guard(table), which creates it as a BEFORE INSERT row trigger.",
    )
}

/// The replication guard on `table` was installed without its column argument.
#[cold]
#[track_caller]
pub fn guard_no_column(table: &str) -> ! {
    raise(
        ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED,
        format!("snowflake_guard_row on {table} has no column argument"),
        None,
        "Install the guard with snowflake_guard(table), which names the id column.",
    )
}

/// The replication guard on `schema.table` cannot read its id column `column`.
#[cold]
#[track_caller]
pub fn guard_column_unreadable(
    schema: &str,
    table: &str,
    column: &str,
    error: &dyn std::fmt::Display,
) -> ! {
    raise(
        ERRCODE_UNDEFINED_COLUMN,
        format!("snowflake_guard_row on {schema}.{table} cannot read bigint column \"{column}\": {error}"),
        None,
        "Install the guard again with snowflake_guard(table), which names the id column as it is now.",
    )
}

/// A replicated row carries this server's own worker id: `message` names the table, the id and
/// the worker, `detail` says more.
#[cold]
#[track_caller]
pub fn guard_local_worker(message: String, detail: String) -> ! {
    raise(
        ERRCODE_INTEGRITY_CONSTRAINT_VIOLATION,
        message,
        Some(detail),
        "Give one of the two servers another worker id (snowflake.worker_id), then let the subscription \
         go on; or guard the table with snowflake_guard(table, on_local_worker => 'warning') to let such \
         rows through, logged and counted in snowflake_stats.foreign_rows.",
    )
}

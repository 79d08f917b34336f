//! The replication guard: a row trigger for tables that receive rows by logical replication
//! (native or pglogical). A row whose id carries this server's own worker id was minted by
//! another server configured with the same worker id, the most common way snowflake ids
//! collide; the guard stops the apply with an error naming the table, the id and the worker
//! (the default), or lets the row through with a WARNING and counts it (`foreign_rows` in
//! `snowflake_stats`). It is installed with `snowflake_guard(table)` or
//! `snowflake_guard_subscription(name)` (PL/pgSQL in `sql/install/guard.sql`) as an `ENABLE REPLICA`
//! trigger, which fires only in the replication apply, so local inserts never run it; it is an
//! ordinary trigger, so pg_dump keeps it.

use crate::{errors, settings, shared::shmem};
use pgrx::prelude::*;
use pgrx::PgTrigger;
use std::sync::atomic::Ordering::Relaxed;

#[pg_trigger]
fn snowflake_guard_row<'a>(
    trigger: &'a PgTrigger<'a>,
) -> Result<Option<PgHeapTuple<'a, AllocatedByPostgres>>, pgrx::PgTriggerError> {
    let Some(row) = trigger.new() else {
        errors::guard_not_row_trigger(&trigger.table_name()?)
    };
    let local = match settings::worker() {
        settings::AUTO => crate::lease::leased().unwrap_or(settings::UNSET),
        w => w,
    };
    if local == settings::UNSET {
        // No worker id here, so no id of this server's to collide with.
        return Ok(Some(row));
    }
    let args = trigger.extra_args()?;
    let Some(column) = args.first() else {
        errors::guard_no_column(&trigger.table_name()?)
    };
    let warn_only = args.get(1).is_some_and(|m| m == "warning");
    // A NULL id cannot collide; a column renamed or retyped since the guard was installed is
    // an error, never a row let through unchecked.
    let id = match row.get_by_name::<i64>(column) {
        Ok(Some(id)) => id,
        Ok(None) => return Ok(Some(row)),
        Err(e) => errors::guard_column_unreadable(
            &trigger.table_schema()?,
            &trigger.table_name()?,
            column,
            &e,
        ),
    };
    let layout = settings::layout();
    let Ok(parts) = layout.decompose(id) else {
        return Ok(Some(row));
    };
    if parts.worker as i32 != local {
        return Ok(Some(row));
    }
    let table = format!("{}.{}", trigger.table_schema()?, trigger.table_name()?);
    let message = format!(
        "row arriving by replication into {table} carries snowflake id {id} of worker {local}, this server's own worker id"
    );
    let detail = format!(
        "Another server mints with worker id {local} too: its ids and this server's can be equal, and equal \
         ids overwrite or reject each other."
    );
    if warn_only {
        if settings::is_preloaded() {
            shmem::shared()
                .slot(local as u32)
                .foreign_rows
                .fetch_add(1, Relaxed);
        }
        errors::warn(message, &detail);
        return Ok(Some(row));
    }
    errors::guard_local_worker(message, detail)
}

pgrx::extension_sql_file!(
    "../../sql/install/guard.sql",
    name = "snowflake_guard",
    requires = [snowflake_guard_row]
);

//! C symbols that only databases still at extension version 0.1.0 call: the new library
//! serves them until `ALTER EXTENSION snowflake_ext UPDATE` moves them to the new
//! declarations. No SQL is generated for them.

use pgrx::prelude::*;

/// 0.1.0's `snowflake_stats()`, with the seven columns it declared.
#[allow(clippy::type_complexity)]
#[pg_extern(sql = false)]
fn snowflake_stats() -> TableIterator<
    'static,
    (
        name!(worker, i32),
        name!(issued, i64),
        name!(last_id, i64),
        name!(ahead_ms, i64),
        name!(clock_steps_back, i64),
        name!(borrowed_ms, i64),
        name!(persisted_mark, Option<i64>),
    ),
> {
    TableIterator::new(crate::stats::figures().into_iter().map(|f| {
        (
            f.worker,
            f.issued,
            f.last_id,
            f.ahead_ms,
            f.clock_steps_back,
            f.borrowed_ms,
            f.persisted_mark,
        )
    }))
}

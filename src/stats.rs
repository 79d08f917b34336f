//! `snowflake_stats`: what each worker has done since the server started.

use crate::generator::Worker;
use crate::layout::{self, TICK_LIMIT};
use crate::{clock, shmem};
use pgrx::prelude::*;

/// One row per worker that issued ids since the server started. VOLATILE: it reads counters
/// that other sessions move.
#[allow(clippy::type_complexity)]
#[pg_extern(volatile, parallel_safe)]
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
    let mut active: Vec<(u16, Worker)> = Vec::new();
    {
        let shared = shmem::generators().share();
        for (worker, state) in shared.workers.iter().enumerate() {
            if state.issued > 0 {
                active.push((worker as u16, *state));
            }
        }
    }
    let now = clock::now_ms();
    TableIterator::new(active.into_iter().map(move |(worker, w)| {
        (
            worker as i32,
            w.issued as i64,
            layout::id_from_tick(w.last, worker),
            w.ahead_ms(now) as i64,
            w.clock_steps_back as i64,
            w.borrowed_ms as i64,
            // Ids below this one are covered by the high-water mark on disk.
            (w.lease < TICK_LIMIT).then(|| layout::id_from_tick(w.lease, worker)),
        )
    }))
}

pgrx::extension_sql!(
    r#"
CREATE VIEW snowflake_stats AS SELECT * FROM snowflake_stats();
COMMENT ON VIEW snowflake_stats IS 'Per worker id: ids issued since the server started, the last id, how far the time field runs ahead of the clock, clock steps back seen, milliseconds borrowed on overflow, and the persisted high-water mark.';
"#,
    name = "snowflake_stats_view",
    requires = [snowflake_stats]
);

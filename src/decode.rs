//! Taking ids apart and putting them together: `snowflake_decode`, `snowflake_timestamp`,
//! `snowflake_worker`, `snowflake_sequence`, `snowflake_compose`, `snowflake_min_id`,
//! `snowflake_max_id`.
//!
//! All are IMMUTABLE, STRICT and PARALLEL SAFE: their result depends on their arguments alone.
//! IMMUTABLE is what lets `WHERE id >= snowflake_min_id('2026-11-01')` be folded to a constant
//! at planning time and answered by an index scan on the primary key.

use crate::errors;
use crate::layout::{self, Parts};
use pgrx::prelude::*;

fn parts(id: i64) -> Parts {
    layout::decompose(id).unwrap_or_else(|e| errors::layout_error(e))
}

fn ms_of(ts: TimestampWithTimeZone) -> u64 {
    layout::ms_from_pg_micros(ts.into()).unwrap_or_else(|e| errors::layout_error(e))
}

fn timestamp(ms: u64) -> TimestampWithTimeZone {
    // Every millisecond of the layout (2025..2094) is a valid PostgreSQL timestamp.
    TimestampWithTimeZone::try_from(layout::pg_micros_from_ms(ms))
        .unwrap_or_else(|_| unreachable!("layout times are within PostgreSQL's range"))
}

#[pg_extern(immutable, strict, parallel_safe)]
fn snowflake_decode(
    id: i64,
) -> TableIterator<
    'static,
    (
        name!(ts, TimestampWithTimeZone),
        name!(worker, i32),
        name!(seq, i32),
    ),
> {
    let p = parts(id);
    TableIterator::once((timestamp(p.ms), p.worker as i32, p.seq as i32))
}

#[pg_extern(immutable, strict, parallel_safe)]
fn snowflake_timestamp(id: i64) -> TimestampWithTimeZone {
    timestamp(parts(id).ms)
}

#[pg_extern(immutable, strict, parallel_safe)]
fn snowflake_worker(id: i64) -> i32 {
    parts(id).worker as i32
}

#[pg_extern(immutable, strict, parallel_safe)]
fn snowflake_sequence(id: i64) -> i32 {
    parts(id).seq as i32
}

#[pg_extern(immutable, strict, parallel_safe)]
fn snowflake_compose(ts: TimestampWithTimeZone, worker: i32, seq: i32) -> i64 {
    let worker = layout::check_worker(worker as i64).unwrap_or_else(|e| errors::layout_error(e));
    let seq = layout::check_seq(seq as i64).unwrap_or_else(|e| errors::layout_error(e));
    layout::compose(ms_of(ts), worker, seq)
}

#[pg_extern(immutable, strict, parallel_safe)]
pub fn snowflake_min_id(ts: TimestampWithTimeZone) -> i64 {
    layout::min_id(ms_of(ts))
}

#[pg_extern(immutable, strict, parallel_safe)]
fn snowflake_max_id(ts: TimestampWithTimeZone) -> i64 {
    layout::max_id(ms_of(ts))
}

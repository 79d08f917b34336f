//! Taking ids apart and putting them together, in this server's layout (`snowflake.layout`):
//! `snowflake_decode`, `snowflake_timestamp`, `snowflake_worker`, `snowflake_sequence`,
//! `snowflake_compose`, `snowflake_min_id`, `snowflake_max_id`.
//!
//! All are IMMUTABLE, STRICT and PARALLEL SAFE: their result depends on their arguments and on
//! the layout, which is fixed when the server starts and cannot change under existing ids (it
//! is persisted with the marks). IMMUTABLE is what lets `WHERE id >= snowflake_min_id('2026-11-01')`
//! be folded to a constant at planning time and answered by an index scan on the primary key.

use crate::{errors, settings};
use pgrx::prelude::*;
use snowflake_core::layout::{Layout, Parts};

pub fn parts(id: i64, layout: &Layout) -> Parts {
    layout
        .decompose(id)
        .unwrap_or_else(|e| errors::layout_error(e, layout))
}

pub fn time_of(ts: TimestampWithTimeZone, layout: &Layout) -> u64 {
    layout
        .time_from_pg_micros(ts.into())
        .unwrap_or_else(|e| errors::layout_error(e, layout))
}

pub fn timestamp(time: u64, layout: &Layout) -> TimestampWithTimeZone {
    // Every time of a layout (1970..2100 plus its span) that PostgreSQL can hold converts.
    TimestampWithTimeZone::try_from(layout.pg_micros_from_time(time))
        .unwrap_or_else(|_| unreachable!("layout times are within PostgreSQL's range"))
}

pub fn compose(ts: TimestampWithTimeZone, worker: i32, seq: i32, layout: &Layout) -> i64 {
    let worker = layout
        .check_worker(worker as i64)
        .unwrap_or_else(|e| errors::layout_error(e, layout));
    let seq = layout
        .check_seq(seq as i64)
        .unwrap_or_else(|e| errors::layout_error(e, layout));
    layout.compose(time_of(ts, layout), worker, seq)
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
    let layout = settings::layout();
    let p = parts(id, layout);
    TableIterator::once((timestamp(p.time, layout), p.worker as i32, p.seq as i32))
}

#[pg_extern(immutable, strict, parallel_safe)]
fn snowflake_timestamp(id: i64) -> TimestampWithTimeZone {
    let layout = settings::layout();
    timestamp(parts(id, layout).time, layout)
}

#[pg_extern(immutable, strict, parallel_safe)]
fn snowflake_worker(id: i64) -> i32 {
    parts(id, settings::layout()).worker as i32
}

#[pg_extern(immutable, strict, parallel_safe)]
fn snowflake_sequence(id: i64) -> i32 {
    parts(id, settings::layout()).seq as i32
}

#[pg_extern(immutable, strict, parallel_safe)]
fn snowflake_compose(ts: TimestampWithTimeZone, worker: i32, seq: i32) -> i64 {
    compose(ts, worker, seq, settings::layout())
}

/// The smallest id any worker can have in the millisecond of `ts`. Refused in a worker-first
/// layout: there `id >= min_id(a) AND id < min_id(b)` holds ids of every other time too.
#[pg_extern(immutable, strict, parallel_safe)]
pub fn snowflake_min_id(ts: TimestampWithTimeZone) -> i64 {
    let layout = time_first("snowflake_min_id");
    layout.min_id(time_of(ts, layout))
}

/// The largest id any worker can have in the millisecond of `ts`; refused like
/// `snowflake_min_id` in a worker-first layout.
#[pg_extern(immutable, strict, parallel_safe)]
fn snowflake_max_id(ts: TimestampWithTimeZone) -> i64 {
    let layout = time_first("snowflake_max_id");
    layout.max_id(time_of(ts, layout))
}

/// The server's layout, if its ids are ordered by time first; else `function` is refused.
fn time_first(function: &str) -> &'static Layout {
    let layout = settings::layout();
    if !layout.is_time_first() {
        errors::not_time_first(function, layout);
    }
    layout
}

/// A layout given by name (`twitter`, `discord`, `instagram`, `sonyflake`, `pgedge`, `seata`,
/// `snowflake`) or as a custom text (`epoch=2020-01-01 unit=10ms time=39 worker=16 sequence=8
/// order=time-sequence-worker`).
fn layout_named(name: &str) -> Layout {
    Layout::parse(name)
        .unwrap_or_else(|e| errors::invalid_layout_name(name, &e, &Layout::preset_names()))
}

/// An id of another system's layout taken apart: Twitter's, Discord's, Instagram's,
/// Sonyflake's, pgEdge's, Seata's, or a custom one.
#[pg_extern(immutable, strict, parallel_safe, name = "snowflake_decode")]
fn snowflake_decode_in(
    id: i64,
    layout: &str,
) -> TableIterator<
    'static,
    (
        name!(ts, TimestampWithTimeZone),
        name!(worker, i32),
        name!(seq, i32),
    ),
> {
    let layout = layout_named(layout);
    let p = parts(id, &layout);
    TableIterator::once((timestamp(p.time, &layout), p.worker as i32, p.seq as i32))
}

/// An id of another system's layout put together.
#[pg_extern(immutable, strict, parallel_safe, name = "snowflake_compose")]
fn snowflake_compose_in(ts: TimestampWithTimeZone, worker: i32, seq: i32, layout: &str) -> i64 {
    compose(ts, worker, seq, &layout_named(layout))
}

//! The bit layout of a snowflake id, and nothing else: pure arithmetic, no I/O, no PostgreSQL.
//!
//! ```text
//!  63 62                                      22 21          12 11            0
//! +--+------------------------------------------+--------------+--------------+
//! | 0|  time: milliseconds since 2025-01-01 UTC  |  worker id   |   sequence   |
//! |  |                41 bits                   |   10 bits    |   12 bits    |
//! +--+------------------------------------------+--------------+--------------+
//! ```
//!
//! Ids are positive `bigint`s. Ordered by value they are ordered by time first, then by worker,
//! then by sequence, so a B-tree on them is filled at its right edge.
//!
//! The generator does not count time and sequence separately: it counts *ticks*, the 53-bit
//! number `time << 12 | sequence` (see `generator.rs`). Counting ticks is what lets a worker issue
//! more than 4096 ids in a millisecond (the tick carries into the time field, "borrowing" the next
//! millisecond) and keep going when the clock steps back. A tick and a worker id make an id.

/// The epoch, 2025-01-01T00:00:00Z, in milliseconds since the Unix epoch.
pub const EPOCH_UNIX_MS: i64 = 1_735_689_600_000;
/// The same instant in PostgreSQL's `TimestampTz` unit: microseconds since 2000-01-01T00:00:00Z.
pub const EPOCH_PG_MICROS: i64 = (EPOCH_UNIX_MS - 946_684_800_000) * 1000;

pub const TIME_BITS: u32 = 41;
pub const WORKER_BITS: u32 = 10;
pub const SEQ_BITS: u32 = 12;

pub const MAX_TIME_MS: u64 = (1 << TIME_BITS) - 1;
pub const MAX_WORKER: u16 = (1 << WORKER_BITS) - 1;
pub const MAX_SEQ: u16 = (1 << SEQ_BITS) - 1;
/// Number of worker ids: the size of the generator's state array.
pub const WORKERS: usize = 1 << WORKER_BITS;
/// One past the largest tick: ticks are `time << 12 | seq` with `time <= MAX_TIME_MS`.
pub const TICK_LIMIT: u64 = 1 << (TIME_BITS + SEQ_BITS);
/// The last millisecond the layout can represent, 2094-09-07T15:47:35.551Z, as Unix milliseconds.
pub const LAST_UNIX_MS: i64 = EPOCH_UNIX_MS + MAX_TIME_MS as i64;

/// What a value outside the layout is. The SQL layer turns each into an ERROR with its SQLSTATE.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LayoutError {
    WorkerOutOfRange(i64),
    SequenceOutOfRange(i64),
    /// A time before the epoch, in PostgreSQL microseconds.
    BeforeEpoch(i64),
    /// A time after the layout's last millisecond, in PostgreSQL microseconds.
    AfterEnd(i64),
    NegativeId(i64),
}

/// The three fields of an id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Parts {
    /// Milliseconds since the epoch.
    pub ms: u64,
    pub worker: u16,
    pub seq: u16,
}

pub fn check_worker(worker: i64) -> Result<u16, LayoutError> {
    if (0..=MAX_WORKER as i64).contains(&worker) {
        Ok(worker as u16)
    } else {
        Err(LayoutError::WorkerOutOfRange(worker))
    }
}

pub fn check_seq(seq: i64) -> Result<u16, LayoutError> {
    if (0..=MAX_SEQ as i64).contains(&seq) {
        Ok(seq as u16)
    } else {
        Err(LayoutError::SequenceOutOfRange(seq))
    }
}

/// The id for `tick` of `worker`. The caller guarantees `tick < TICK_LIMIT` and a valid worker,
/// which the generator does by construction.
#[inline]
pub fn id_from_tick(tick: u64, worker: u16) -> i64 {
    debug_assert!(tick < TICK_LIMIT && worker <= MAX_WORKER);
    let ms = tick >> SEQ_BITS;
    let seq = tick & MAX_SEQ as u64;
    ((ms << (WORKER_BITS + SEQ_BITS)) | ((worker as u64) << SEQ_BITS) | seq) as i64
}

/// The tick (`time << 12 | seq`) an id was made from.
#[inline]
pub fn tick_of(parts: Parts) -> u64 {
    (parts.ms << SEQ_BITS) | parts.seq as u64
}

/// Puts the three fields together. Each field is range-checked, so no field can spill into
/// its neighbour (the seeds' "worker id overflowing into the timestamp" outage).
pub fn compose(ms: u64, worker: u16, seq: u16) -> i64 {
    debug_assert!(ms <= MAX_TIME_MS && worker <= MAX_WORKER && seq <= MAX_SEQ);
    id_from_tick((ms << SEQ_BITS) | seq as u64, worker)
}

pub fn decompose(id: i64) -> Result<Parts, LayoutError> {
    if id < 0 {
        return Err(LayoutError::NegativeId(id));
    }
    let id = id as u64;
    Ok(Parts {
        ms: id >> (WORKER_BITS + SEQ_BITS),
        worker: ((id >> SEQ_BITS) & MAX_WORKER as u64) as u16,
        seq: (id & MAX_SEQ as u64) as u16,
    })
}

/// The smallest id any worker can have in millisecond `ms`.
pub fn min_id(ms: u64) -> i64 {
    compose(ms, 0, 0)
}

/// The largest id any worker can have in millisecond `ms`.
pub fn max_id(ms: u64) -> i64 {
    compose(ms, MAX_WORKER, MAX_SEQ)
}

/// Milliseconds since the epoch of a PostgreSQL timestamp (microseconds since 2000-01-01),
/// rounded down to its millisecond. `infinity` and `-infinity` are out of range like any other
/// time outside the layout.
pub fn ms_from_pg_micros(micros: i64) -> Result<u64, LayoutError> {
    let since_epoch = micros as i128 - EPOCH_PG_MICROS as i128;
    if since_epoch < 0 {
        return Err(LayoutError::BeforeEpoch(micros));
    }
    let ms = (since_epoch / 1000) as u64;
    if ms > MAX_TIME_MS {
        return Err(LayoutError::AfterEnd(micros));
    }
    Ok(ms)
}

/// The PostgreSQL timestamp (microseconds since 2000-01-01) of millisecond `ms` since the epoch.
pub fn pg_micros_from_ms(ms: u64) -> i64 {
    debug_assert!(ms <= MAX_TIME_MS);
    EPOCH_PG_MICROS + ms as i64 * 1000
}

/// The clock reading `unix_ms` as milliseconds since the epoch, for the generator. A clock set
/// before the epoch reads as the epoch itself: the generator then keeps counting from its last
/// tick exactly as it does when the clock steps back, so it never goes negative or repeats.
pub fn ms_from_unix_ms(unix_ms: i64) -> u64 {
    unix_ms.saturating_sub(EPOCH_UNIX_MS).max(0) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_round_trip_at_their_limits() {
        for &(ms, worker, seq) in &[
            (0, 0, 0),
            (1, 1, 1),
            (MAX_TIME_MS, MAX_WORKER, MAX_SEQ),
            (MAX_TIME_MS, 0, 0),
            (0, MAX_WORKER, 0),
            (0, 0, MAX_SEQ),
            (60_000_000_000, 3, 4000),
        ] {
            let id = compose(ms, worker, seq);
            assert!(id >= 0, "id for {ms}/{worker}/{seq} is negative");
            assert_eq!(decompose(id).unwrap(), Parts { ms, worker, seq });
        }
        assert_eq!(compose(MAX_TIME_MS, MAX_WORKER, MAX_SEQ), i64::MAX);
    }

    #[test]
    fn bit_positions_match_the_documented_diagram() {
        assert_eq!(compose(1, 0, 0), 1 << 22);
        assert_eq!(compose(0, 1, 0), 1 << 12);
        assert_eq!(compose(0, 0, 1), 1);
    }

    #[test]
    fn ids_order_by_time_then_worker_then_sequence() {
        assert!(compose(5, MAX_WORKER, MAX_SEQ) < compose(6, 0, 0));
        assert!(compose(5, 3, MAX_SEQ) < compose(5, 4, 0));
        assert!(compose(5, 3, 7) < compose(5, 3, 8));
    }

    #[test]
    fn consecutive_ticks_make_increasing_ids_across_a_millisecond_boundary() {
        let tick = (77 << SEQ_BITS) | MAX_SEQ as u64;
        let a = id_from_tick(tick, 9);
        let b = id_from_tick(tick + 1, 9);
        assert!(b > a);
        assert_eq!(
            decompose(b).unwrap(),
            Parts {
                ms: 78,
                worker: 9,
                seq: 0
            }
        );
        assert_eq!(tick_of(decompose(a).unwrap()), tick);
    }

    #[test]
    fn range_checks_name_the_bad_value() {
        assert_eq!(check_worker(1024), Err(LayoutError::WorkerOutOfRange(1024)));
        assert_eq!(check_worker(-1), Err(LayoutError::WorkerOutOfRange(-1)));
        assert_eq!(check_worker(1023), Ok(1023));
        assert_eq!(check_seq(4096), Err(LayoutError::SequenceOutOfRange(4096)));
        assert_eq!(check_seq(-5), Err(LayoutError::SequenceOutOfRange(-5)));
        assert_eq!(decompose(-1), Err(LayoutError::NegativeId(-1)));
    }

    #[test]
    fn min_and_max_id_bracket_every_id_of_the_millisecond() {
        let ms = 123_456_789;
        for worker in [0, 1, 512, MAX_WORKER] {
            for seq in [0, 1, 2048, MAX_SEQ] {
                let id = compose(ms, worker, seq);
                assert!(min_id(ms) <= id && id <= max_id(ms));
            }
        }
        assert_eq!(max_id(ms) + 1, min_id(ms + 1));
    }

    #[test]
    fn timestamps_convert_and_round_down_to_the_millisecond() {
        assert_eq!(ms_from_pg_micros(EPOCH_PG_MICROS), Ok(0));
        assert_eq!(ms_from_pg_micros(EPOCH_PG_MICROS + 1999), Ok(1));
        assert_eq!(
            ms_from_pg_micros(EPOCH_PG_MICROS - 1),
            Err(LayoutError::BeforeEpoch(EPOCH_PG_MICROS - 1))
        );
        let last = pg_micros_from_ms(MAX_TIME_MS);
        assert_eq!(ms_from_pg_micros(last + 999), Ok(MAX_TIME_MS));
        assert_eq!(
            ms_from_pg_micros(last + 1000),
            Err(LayoutError::AfterEnd(last + 1000))
        );
        assert_eq!(
            ms_from_pg_micros(i64::MAX),
            Err(LayoutError::AfterEnd(i64::MAX))
        );
        assert_eq!(
            ms_from_pg_micros(i64::MIN),
            Err(LayoutError::BeforeEpoch(i64::MIN))
        );
        // 2026-11-22T00:00:00Z is 690 days after the epoch.
        let unix_ms = 1_795_305_600_000;
        assert_eq!(ms_from_unix_ms(unix_ms), 690 * 86_400_000);
        assert_eq!(
            pg_micros_from_ms(690 * 86_400_000),
            (unix_ms - 946_684_800_000) * 1000
        );
    }

    #[test]
    fn a_clock_before_the_epoch_reads_as_the_epoch() {
        assert_eq!(ms_from_unix_ms(0), 0);
        assert_eq!(ms_from_unix_ms(i64::MIN), 0);
        assert_eq!(ms_from_unix_ms(EPOCH_UNIX_MS + 5), 5);
    }

    #[test]
    fn the_layout_ends_in_september_2094() {
        // 2094-09-07T15:47:35.551Z
        assert_eq!(LAST_UNIX_MS, 3_934_712_855_551);
    }
}

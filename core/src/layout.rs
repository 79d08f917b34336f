//! The bit layout of an id, and nothing else: pure arithmetic, no I/O, no PostgreSQL.
//!
//! The default layout, the one this server generates unless `snowflake.layout` says otherwise:
//!
//! ```text
//!  63 62                                      22 21          12 11            0
//! +--+------------------------------------------+--------------+--------------+
//! | 0|  time: milliseconds since 2025-01-01 UTC  |  worker id   |   sequence   |
//! |  |                41 bits                   |   10 bits    |   12 bits    |
//! +--+------------------------------------------+--------------+--------------+
//! ```
//!
//! A [`Layout`] is a value: an epoch, a time unit, three bit widths and the order of the
//! fields. The other systems' layouts (`twitter`, `discord`, `instagram`, `sonyflake`,
//! `pgedge`, `seata`) are presets of it, and a custom one is parsed from a short text
//! ([`Layout::parse`]). Every number that describes a layout lives in this file.
//!
//! Ids are positive `bigint`s. In every order but one, ordered by value they are ordered by
//! time first, so a B-tree on them is filled at its right edge. The exception is Seata's
//! `worker | time | sequence` ([`Order::WorkerTimeSequence`]): its ids are ordered by worker
//! first and by time only within a worker, so a time range is one key range per worker
//! ([`Layout::is_time_first`], [`Layout::key_ranges`]) and a B-tree fed by several workers is
//! filled at one point per worker.
//!
//! The generator does not count time and sequence separately: it counts *ticks*, the number
//! `time << sequence_bits | sequence` (see `generator.rs`). Counting ticks is what lets a worker
//! issue more ids in one time unit than the sequence holds (the tick carries into the time
//! field, "borrowing" the next unit) and keep going when the clock steps back. A tick and a
//! worker id make an id, whatever the order of the two low fields, and for one worker a larger
//! tick always makes a larger id.

use std::fmt;

/// The order of the three fields, from the high bits down. Time and sequence are always
/// adjacent in that order, so `time << sequence_bits | sequence` (a tick) is one counter in
/// every order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Order {
    /// `time | worker | sequence` (`order=time-worker-sequence`, the default): Twitter,
    /// Discord, Instagram, pgEdge and this extension.
    WorkerSequence,
    /// `time | sequence | worker` (`order=time-sequence-worker`): Sonyflake.
    SequenceWorker,
    /// `worker | time | sequence` (`order=worker-time-sequence`): Seata's improved Snowflake,
    /// whose ids are ordered per worker, not by time across workers.
    WorkerTimeSequence,
}

impl Order {
    /// The name `order=` takes and the layout's text prints.
    pub fn name(self) -> &'static str {
        match self {
            Order::WorkerSequence => "time-worker-sequence",
            Order::SequenceWorker => "time-sequence-worker",
            Order::WorkerTimeSequence => "worker-time-sequence",
        }
    }

    pub const ALL: [Order; 3] = [
        Order::WorkerSequence,
        Order::SequenceWorker,
        Order::WorkerTimeSequence,
    ];
}

/// A bit layout. Construct it with [`Layout::new`] (checked), a preset, or [`Layout::parse`];
/// its fields are read, never written (`low_bits` is derived from them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// The instant time 0 stands for, in milliseconds since the Unix epoch.
    pub epoch_unix_ms: i64,
    /// Milliseconds per time unit (1 for most layouts, 10 for Sonyflake).
    pub unit_ms: u32,
    pub time_bits: u32,
    pub worker_bits: u32,
    pub seq_bits: u32,
    pub order: Order,
    /// The bits below the worker field: the sequence's (`time-worker-sequence`), none
    /// (`time-sequence-worker`), or the time's and the sequence's (`worker-time-sequence`).
    /// Derived from the others, so that [`Layout::id_from_tick`] puts the worker id in place
    /// in either worker-above-sequence order with the same instructions, no branch added.
    low_bits: u32,
}

/// The three fields of an id. `time` is in the layout's units since its epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Parts {
    pub time: u64,
    pub worker: u32,
    pub seq: u32,
}

/// What a value outside a layout is. The SQL layer turns each into an ERROR with its SQLSTATE.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LayoutError {
    WorkerOutOfRange(i64),
    SequenceOutOfRange(i64),
    /// A time before the epoch, in PostgreSQL microseconds.
    BeforeEpoch(i64),
    /// A time after the layout's last unit, in PostgreSQL microseconds.
    AfterEnd(i64),
    NegativeId(i64),
    /// An id whose time field is past the layout's last unit (a layout of fewer than 63 bits).
    IdAfterEnd(i64),
}

/// Milliseconds from the Unix epoch to PostgreSQL's (2000-01-01).
const PG_EPOCH_UNIX_MS: i64 = 946_684_800_000;

/// A Unix millisecond as a PostgreSQL timestamp (microseconds since 2000-01-01).
pub fn pg_micros_from_unix_ms(unix_ms: i64) -> i64 {
    (unix_ms - PG_EPOCH_UNIX_MS) * 1000
}

/// 9999-12-31 23:59:59.999 UTC: no layout may count time beyond it.
const LAST_SUPPORTED_UNIX_MS: i64 = 253_402_300_799_999;

/// Generation keeps one slot of shared memory per worker id; 16 bits (Sonyflake's 65,536
/// machines) is the most it allocates.
pub const MAX_GENERATION_WORKER_BITS: u32 = 16;

impl Layout {
    /// This extension's layout: 41 bits of milliseconds since 2025-01-01 UTC, 10-bit worker,
    /// 12-bit sequence. It lasts until 2094-09-07 15:47:35.551 UTC.
    pub const SNOWFLAKE: Layout =
        Layout::of(1_735_689_600_000, 1, 41, 10, 12, Order::WorkerSequence);
    /// Twitter's original: 41 bits of ms since 2010-11-04 01:42:54.657 UTC, 10-bit machine
    /// (datacenter and worker), 12-bit sequence.
    pub const TWITTER: Layout = Layout::of(1_288_834_974_657, 1, 41, 10, 12, Order::WorkerSequence);
    /// Discord: 42 bits of ms since 2015-01-01 UTC, 10 bits of worker and process, 12-bit
    /// increment. The 64th bit is time, so ids from 2084-09 on do not fit a `bigint`.
    pub const DISCORD: Layout = Layout::of(1_420_070_400_000, 1, 42, 10, 12, Order::WorkerSequence);
    /// Instagram's PL/pgSQL `next_id()`: 41 bits of ms since 2011-08-24 21:07:01.721 UTC,
    /// 13-bit shard, 10-bit sequence (all 64 bits).
    pub const INSTAGRAM: Layout =
        Layout::of(1_314_220_021_721, 1, 41, 13, 10, Order::WorkerSequence);
    /// Sonyflake: 39 bits of 10 ms units since 2014-09-01 UTC, 8-bit sequence, then a 16-bit
    /// machine id in the low bits.
    pub const SONYFLAKE: Layout =
        Layout::of(1_409_529_600_000, 10, 39, 16, 8, Order::SequenceWorker);
    /// pgEdge's snowflake: our bits, epoch 2023-01-01 UTC.
    pub const PGEDGE: Layout = Layout::of(1_672_531_200_000, 1, 41, 10, 12, Order::WorkerSequence);
    /// Seata's improved `IdWorker` (io.seata.common.util.IdWorker): a 10-bit worker id,
    /// then 41 bits of ms since 1588435200000 (2020-05-03 00:00 UTC+8, 2020-05-02 16:00 UTC),
    /// then a 12-bit sequence: `workerId << (41 + 12) | timestampAndSequence`. It lasts until
    /// 2090-01-07 07:47:35.551 UTC.
    pub const SEATA: Layout =
        Layout::of(1_588_435_200_000, 1, 41, 10, 12, Order::WorkerTimeSequence);

    /// The presets, by the names SQL functions and `snowflake.layout` accept.
    pub const PRESETS: [(&'static str, Layout); 7] = [
        ("snowflake", Layout::SNOWFLAKE),
        ("twitter", Layout::TWITTER),
        ("discord", Layout::DISCORD),
        ("instagram", Layout::INSTAGRAM),
        ("sonyflake", Layout::SONYFLAKE),
        ("pgedge", Layout::PGEDGE),
        ("seata", Layout::SEATA),
    ];

    /// A layout as given, unchecked, with its derived field.
    const fn of(
        epoch_unix_ms: i64,
        unit_ms: u32,
        time_bits: u32,
        worker_bits: u32,
        seq_bits: u32,
        order: Order,
    ) -> Layout {
        Layout {
            epoch_unix_ms,
            unit_ms,
            time_bits,
            worker_bits,
            seq_bits,
            order,
            low_bits: match order {
                Order::WorkerSequence => seq_bits,
                Order::SequenceWorker => 0,
                Order::WorkerTimeSequence => time_bits + seq_bits,
            },
        }
    }

    /// A checked layout: the three fields fit 64 bits, none is empty where it must not be,
    /// and the epoch and unit make sense.
    pub fn new(
        epoch_unix_ms: i64,
        unit_ms: u32,
        time_bits: u32,
        worker_bits: u32,
        seq_bits: u32,
        order: Order,
    ) -> Result<Layout, String> {
        let bits = u64::from(time_bits) + u64::from(worker_bits) + u64::from(seq_bits);
        if bits > 64 {
            return Err(format!("the fields take {bits} bits; an id has 64"));
        }
        if time_bits < 20 {
            return Err(format!(
                "a {time_bits}-bit time field is too short (at least 20 bits)"
            ));
        }
        if seq_bits == 0 || seq_bits > 22 {
            return Err(format!(
                "the sequence field must have 1 to 22 bits, not {seq_bits}"
            ));
        }
        if worker_bits > 22 {
            return Err(format!(
                "the worker field must have 0 to 22 bits, not {worker_bits}"
            ));
        }
        if order == Order::WorkerTimeSequence && bits > 63 {
            return Err(format!(
                "the fields take {bits} bits; with the worker field first they may take at most 63, \
                 or the sign bit would be part of the worker id"
            ));
        }
        if !(1..=86_400_000).contains(&unit_ms) {
            return Err(format!(
                "the time unit must be 1 ms to 1 day, not {unit_ms} ms"
            ));
        }
        if !(0..=4_102_444_800_000).contains(&epoch_unix_ms) {
            return Err("the epoch must be between 1970 and 2100".into());
        }
        let layout = Layout::of(
            epoch_unix_ms,
            unit_ms,
            time_bits,
            worker_bits,
            seq_bits,
            order,
        );
        if layout.last_unix_ms() > LAST_SUPPORTED_UNIX_MS {
            return Err(format!(
                "a {time_bits}-bit time field of {unit_ms} ms units reaches past the year 9999"
            ));
        }
        Ok(layout)
    }

    /// A preset by name, or a custom layout:
    /// `epoch=2020-01-01 unit=10ms time=39 worker=16 sequence=8 order=time-sequence-worker`
    /// (any order of keys; `order` is `time-worker-sequence` (the default),
    /// `time-sequence-worker` or `worker-time-sequence`; `unit` defaults to `1ms`).
    pub fn parse(spec: &str) -> Result<Layout, String> {
        let spec = spec.trim();
        if let Some((_, layout)) = Layout::PRESETS
            .iter()
            .find(|(name, _)| name.eq_ignore_ascii_case(spec))
        {
            return Ok(*layout);
        }
        if !spec.contains('=') {
            return Err(format!(
                "unknown layout \"{spec}\" (presets: {})",
                Layout::preset_names()
            ));
        }
        let (mut epoch, mut unit, mut time, mut worker, mut seq, mut order) =
            (None, 1u32, None, None, None, Order::WorkerSequence);
        for item in spec.split([' ', ',']).filter(|s| !s.is_empty()) {
            let (key, value) = item
                .split_once('=')
                .ok_or_else(|| format!("\"{item}\" is not key=value"))?;
            let bits = || {
                value
                    .parse::<u32>()
                    .map_err(|_| format!("{key}={value}: not a number of bits"))
            };
            match key.to_ascii_lowercase().as_str() {
                "epoch" => epoch = Some(parse_epoch(value)?),
                "unit" => {
                    let ms = value.strip_suffix("ms").unwrap_or(value);
                    unit = ms
                        .parse()
                        .map_err(|_| format!("unit={value}: give milliseconds, e.g. 10ms"))?;
                }
                "time" => time = Some(bits()?),
                "worker" => worker = Some(bits()?),
                "sequence" | "seq" => seq = Some(bits()?),
                "order" => {
                    order = Order::ALL
                        .into_iter()
                        .find(|o| o.name().eq_ignore_ascii_case(value))
                        .ok_or_else(|| {
                            format!(
                                "order={value}: use time-worker-sequence, time-sequence-worker \
                                 or worker-time-sequence"
                            )
                        })?
                }
                _ => return Err(format!("unknown key \"{key}\"")),
            }
        }
        let need = |v: Option<u32>, k: &str| v.ok_or_else(|| format!("{k}= is missing"));
        Layout::new(
            epoch.ok_or("epoch= is missing")?,
            unit,
            need(time, "time")?,
            need(worker, "worker")?,
            need(seq, "sequence")?,
            order,
        )
    }

    pub fn preset_names() -> String {
        Layout::PRESETS
            .iter()
            .map(|(n, _)| *n)
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// How people read the layout: its preset's name (`sonyflake`), or else its fields as
    /// `snowflake.layout` takes them. Errors and `snowflake_status()` show this; the marks
    /// table's header keeps the full form (`Display`).
    pub fn label(&self) -> String {
        self.preset_name()
            .map_or_else(|| self.to_string(), str::to_string)
    }

    /// [`Layout::label`] of a layout as text (a marks table's header); the text itself if it
    /// is not a layout.
    pub fn label_of(spec: &str) -> String {
        Layout::parse(spec).map_or_else(|_| spec.to_string(), |l| l.label())
    }

    /// The preset's name, if this layout is one.
    pub fn preset_name(&self) -> Option<&'static str> {
        Layout::PRESETS
            .iter()
            .find(|(_, l)| l == self)
            .map(|(n, _)| *n)
    }

    /// Whether a server can generate ids in it: every id positive, and one slot of shared
    /// memory per worker id at most 2^16 of them.
    pub fn check_generation(&self) -> Result<(), String> {
        if self.time_bits + self.worker_bits + self.seq_bits > 63 {
            return Err(
                "generated ids must leave the sign bit clear: the fields may take at most 63 bits"
                    .into(),
            );
        }
        if self.worker_bits > MAX_GENERATION_WORKER_BITS {
            return Err(format!(
                "a server generates with at most {MAX_GENERATION_WORKER_BITS} worker bits"
            ));
        }
        Ok(())
    }

    pub fn max_worker(&self) -> u32 {
        ((1u64 << self.worker_bits) - 1) as u32
    }

    pub fn max_seq(&self) -> u32 {
        ((1u64 << self.seq_bits) - 1) as u32
    }

    /// How many worker ids there are.
    pub fn workers(&self) -> usize {
        1 << self.worker_bits
    }

    /// The largest time field of a positive id.
    pub fn max_time(&self) -> u64 {
        let field = (1u64 << self.time_bits) - 1;
        let positive = (i64::MAX as u64) >> (self.worker_bits + self.seq_bits);
        field.min(positive)
    }

    /// One past the largest tick.
    pub fn tick_limit(&self) -> u64 {
        (self.max_time() + 1) << self.seq_bits
    }

    /// Ticks in one time unit.
    pub fn ticks_per_unit(&self) -> u64 {
        1 << self.seq_bits
    }

    pub fn check_worker(&self, worker: i64) -> Result<u32, LayoutError> {
        if (0..=self.max_worker() as i64).contains(&worker) {
            Ok(worker as u32)
        } else {
            Err(LayoutError::WorkerOutOfRange(worker))
        }
    }

    pub fn check_seq(&self, seq: i64) -> Result<u32, LayoutError> {
        if (0..=self.max_seq() as i64).contains(&seq) {
            Ok(seq as u32)
        } else {
            Err(LayoutError::SequenceOutOfRange(seq))
        }
    }

    /// The id for `tick` of `worker`. The caller guarantees `tick < tick_limit()` and a valid
    /// worker, which the generator does by construction.
    #[inline]
    pub fn id_from_tick(&self, tick: u64, worker: u32) -> i64 {
        debug_assert!(tick < self.tick_limit() && worker <= self.max_worker());
        // The worker field goes above the tick's `low_bits` low bits and below the rest: above
        // the sequence in `time-worker-sequence`, above the whole tick in
        // `worker-time-sequence` (where the rest is 0). Two arms, as with two orders: the
        // default layout's ids cost no more instructions than before Seata's order.
        let id = match self.order {
            Order::SequenceWorker => (tick << self.worker_bits) | worker as u64,
            _ => {
                let low_mask = (1u64 << self.low_bits) - 1;
                ((tick & !low_mask) << self.worker_bits)
                    | ((worker as u64) << self.low_bits)
                    | (tick & low_mask)
            }
        };
        id as i64
    }

    /// The bits of a tick: time and sequence.
    fn tick_bits(&self) -> u32 {
        self.time_bits + self.seq_bits
    }

    /// Whether ids ordered by value are ordered by time first, across workers: every order
    /// but `worker-time-sequence`. In a time-first layout the ids of a time range are one key
    /// range (from [`Layout::min_id`] of its first unit to [`Layout::max_id`] of its last); in
    /// a worker-first one they are one range per worker ([`Layout::key_ranges`]), and
    /// `min_id`..`max_id` of a time range holds ids of every other time too.
    pub fn is_time_first(&self) -> bool {
        self.order != Order::WorkerTimeSequence
    }

    /// The tick (`time << sequence_bits | sequence`) of an id's fields.
    #[inline]
    pub fn tick_of(&self, parts: Parts) -> u64 {
        (parts.time << self.seq_bits) | parts.seq as u64
    }

    /// The tick an id was made from (the id must be positive and valid in this layout).
    pub fn tick_of_id(&self, id: i64) -> Result<u64, LayoutError> {
        Ok(self.tick_of(self.decompose(id)?))
    }

    /// Puts the three fields together. Each field is range-checked by the caller, so no field
    /// can spill into its neighbour (the seeds' "worker id overflowing into the timestamp"
    /// outage).
    pub fn compose(&self, time: u64, worker: u32, seq: u32) -> i64 {
        debug_assert!(time <= self.max_time() && worker <= self.max_worker());
        self.id_from_tick(self.tick_of(Parts { time, worker, seq }), worker)
    }

    pub fn decompose(&self, id: i64) -> Result<Parts, LayoutError> {
        if id < 0 {
            return Err(LayoutError::NegativeId(id));
        }
        let id = id as u64;
        let worker_mask = self.max_worker() as u64;
        let seq_mask = self.max_seq() as u64;
        let (worker, seq, time) = match self.order {
            Order::WorkerSequence => (
                (id >> self.seq_bits) & worker_mask,
                id & seq_mask,
                id >> (self.worker_bits + self.seq_bits),
            ),
            Order::SequenceWorker => (
                id & worker_mask,
                (id >> self.worker_bits) & seq_mask,
                id >> (self.worker_bits + self.seq_bits),
            ),
            Order::WorkerTimeSequence => {
                // Bits above the worker field (a layout of fewer than 63 bits) make an id
                // above the layout's largest, as a time past the end does in the others.
                let worker = id >> self.tick_bits();
                if worker > worker_mask {
                    return Err(LayoutError::IdAfterEnd(id as i64));
                }
                (
                    worker,
                    id & seq_mask,
                    (id >> self.seq_bits) & ((1u64 << self.time_bits) - 1),
                )
            }
        };
        if time > self.max_time() {
            return Err(LayoutError::IdAfterEnd(id as i64));
        }
        Ok(Parts {
            time,
            worker: worker as u32,
            seq: seq as u32,
        })
    }

    /// The smallest id any worker can have in time unit `time`. Every id of that unit or a
    /// later one is at least this, in every order; in a time-first layout every id of an
    /// earlier unit is below it, in a worker-first one not (see [`Layout::is_time_first`]).
    pub fn min_id(&self, time: u64) -> i64 {
        self.compose(time, 0, 0)
    }

    /// The largest id any worker can have in time unit `time`. Every id of that unit or an
    /// earlier one is at most this, in every order; in a time-first layout every id of a
    /// later unit is above it, in a worker-first one not.
    pub fn max_id(&self, time: u64) -> i64 {
        self.compose(time, self.max_worker(), self.max_seq())
    }

    /// The key ranges of the ids made from time unit `times.start()` to `times.end()` (both
    /// included; clamped to the layout's last unit) by the workers in `workers` (any order,
    /// repeats and ids past [`Layout::max_worker`] ignored): inclusive `(from, to)` pairs of
    /// ids, ascending, disjoint and not adjacent.
    ///
    /// Every such id lies in one of them. In a worker-first layout the ranges are exact, one
    /// per worker (adjacent ones merged): an id in them has a time in `times` and a worker in
    /// `workers`. In a time-first layout they are one range, from the smallest id the workers
    /// can have in the first unit to the largest in the last, which holds the other workers'
    /// ids of those units too (and, with fewer than every worker, some of theirs in between);
    /// with every worker it is exact. A planner bound made of them (`id BETWEEN from AND to`
    /// for each, or'ed) is implied by the time filter, which stays beside it. No workers or
    /// an empty time range: no ranges.
    pub fn key_ranges(
        &self,
        times: std::ops::RangeInclusive<u64>,
        workers: impl IntoIterator<Item = u32>,
    ) -> Vec<(i64, i64)> {
        let (first, last) = (*times.start(), (*times.end()).min(self.max_time()));
        let mut workers: Vec<u32> = workers
            .into_iter()
            .filter(|&w| w <= self.max_worker())
            .collect();
        workers.sort_unstable();
        workers.dedup();
        let (Some(&low), Some(&high)) = (workers.first(), workers.last()) else {
            return Vec::new();
        };
        if first > last {
            return Vec::new();
        }
        if self.is_time_first() {
            let from = self.compose(first, low, 0);
            let to = self.compose(last, high, self.max_seq());
            return vec![(from.min(to), from.max(to))];
        }
        let mut ranges: Vec<(i64, i64)> = Vec::with_capacity(workers.len());
        for w in workers {
            let (from, to) = (
                self.compose(first, w, 0),
                self.compose(last, w, self.max_seq()),
            );
            match ranges.last_mut() {
                Some(prev) if prev.1.checked_add(1) == Some(from) => prev.1 = to,
                _ => ranges.push((from, to)),
            }
        }
        ranges
    }

    /// The time units whose timestamp (the one `snowflake_timestamp` gives their ids) lies
    /// from `lower` to `upper`, both PostgreSQL timestamps (microseconds since 2000-01-01)
    /// included, either open (`None`); clamped to the layout's units, `None` when no unit
    /// does. With [`Layout::key_ranges`]: the ids a time filter can match, as key ranges.
    pub fn units_between_pg(
        &self,
        lower: Option<i64>,
        upper: Option<i64>,
    ) -> Option<std::ops::RangeInclusive<u64>> {
        let epoch = (self.epoch_unix_ms - PG_EPOCH_UNIX_MS) as i128 * 1000;
        let unit = self.unit_ms as i128 * 1000;
        let max = self.max_time() as i128;
        // The first unit at or after `lower`, the last at or before `upper`.
        let first = lower
            .map_or(0, |t| -(epoch - t as i128).div_euclid(unit))
            .max(0);
        let last = upper.map_or(max, |t| (t as i128 - epoch).div_euclid(unit).min(max));
        (first <= last).then_some(first as u64..=last as u64)
    }

    /// The time unit (since the epoch) of a PostgreSQL timestamp (microseconds since
    /// 2000-01-01), rounded down. `infinity` and `-infinity` are out of range like any other
    /// time outside the layout.
    pub fn time_from_pg_micros(&self, micros: i64) -> Result<u64, LayoutError> {
        let epoch_pg_micros = (self.epoch_unix_ms - PG_EPOCH_UNIX_MS) as i128 * 1000;
        let since_epoch = micros as i128 - epoch_pg_micros;
        if since_epoch < 0 {
            return Err(LayoutError::BeforeEpoch(micros));
        }
        let time = since_epoch / (self.unit_ms as i128 * 1000);
        if time > self.max_time() as i128 {
            return Err(LayoutError::AfterEnd(micros));
        }
        Ok(time as u64)
    }

    /// The PostgreSQL timestamp (microseconds since 2000-01-01) of time unit `time`.
    pub fn pg_micros_from_time(&self, time: u64) -> i64 {
        (self.unix_ms_from_time(time) - PG_EPOCH_UNIX_MS) * 1000
    }

    /// The Unix milliseconds of time unit `time`.
    pub fn unix_ms_from_time(&self, time: u64) -> i64 {
        debug_assert!(time <= self.max_time());
        self.epoch_unix_ms
            .saturating_add((time as i64).saturating_mul(self.unit_ms as i64))
    }

    /// A clock reading `unix_ms` in time units since the epoch, for the generator. A clock set
    /// before the epoch reads as the epoch itself: the generator then keeps counting from its
    /// last tick exactly as it does when the clock steps back, so it never goes negative or
    /// repeats. A clock past the layout's end reads as one unit past it, which the generator
    /// refuses.
    #[inline]
    pub fn time_from_unix_ms(&self, unix_ms: i64) -> u64 {
        let since = unix_ms.saturating_sub(self.epoch_unix_ms).max(0) as u64;
        let time = if self.unit_ms == 1 {
            since
        } else {
            since / self.unit_ms as u64
        };
        time.min(self.max_time() + 1)
    }

    /// Time units in `ms` milliseconds, rounded up (at least 1 when `ms > 0`).
    pub fn units_in_ms(&self, ms: u64) -> u64 {
        ms.div_ceil(self.unit_ms as u64)
    }

    /// Milliseconds in `units` time units.
    pub fn ms_in_units(&self, units: u64) -> u64 {
        units.saturating_mul(self.unit_ms as u64)
    }

    /// The last instant the layout can represent, in Unix milliseconds.
    pub fn last_unix_ms(&self) -> i64 {
        self.unix_ms_from_time(self.max_time())
            .saturating_add(self.unit_ms as i64 - 1)
    }
}

/// `YYYY-MM-DD`, `YYYY-MM-DD HH:MM:SS[.fff]` (UTC, `T` or space), or Unix milliseconds.
fn parse_epoch(value: &str) -> Result<i64, String> {
    if let Ok(ms) = value.parse::<i64>() {
        return Ok(ms);
    }
    let bad =
        || format!("epoch={value}: give YYYY-MM-DD[THH:MM:SS[.fff]] (UTC) or Unix milliseconds");
    let value = value.trim_end_matches('Z');
    let (date, time) = value.split_once(['T', ' ']).unwrap_or((value, "00:00:00"));
    let d: Vec<i64> = date
        .split('-')
        .map(|p| p.parse().map_err(|_| bad()))
        .collect::<Result<_, _>>()?;
    let (hms, frac) = time.split_once('.').unwrap_or((time, "0"));
    let t: Vec<i64> = hms
        .split(':')
        .map(|p| p.parse().map_err(|_| bad()))
        .collect::<Result<_, _>>()?;
    if d.len() != 3
        || t.len() != 3
        || !(1..=9999).contains(&d[0])
        || !(1..=12).contains(&d[1])
        || !(1..=31).contains(&d[2])
        || !(0..=23).contains(&t[0])
        || !(0..=59).contains(&t[1])
        || !(0..=59).contains(&t[2])
        || frac.is_empty()
        || !frac.bytes().all(|b| b.is_ascii_digit())
    {
        return Err(bad());
    }
    let ms_frac: i64 = format!("{frac:0<3}")[..3].parse().map_err(|_| bad())?;
    let days = days_from_civil(d[0], d[1], d[2]);
    Ok(((days * 24 + t[0]) * 60 + t[1]) * 60_000 + t[2] * 1000 + ms_frac)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The layout as one line of text: what is persisted beside the marks, what errors print, and
/// what `snowflake.layout` and `Layout::parse` accept back.
impl fmt::Display for Layout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "epoch={} unit={}ms time={} worker={} sequence={} order={}",
            self.epoch_unix_ms,
            self.unit_ms,
            self.time_bits,
            self.worker_bits,
            self.seq_bits,
            self.order.name()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const L: Layout = Layout::SNOWFLAKE;

    #[test]
    fn fields_round_trip_at_their_limits() {
        for layout in Layout::PRESETS.iter().map(|(_, l)| *l) {
            let (t, w, s) = (layout.max_time(), layout.max_worker(), layout.max_seq());
            for &(time, worker, seq) in &[(0, 0, 0), (1, 1, 1), (t, w, s), (t, 0, 0), (0, w, 0)] {
                let id = layout.compose(time, worker, seq);
                assert!(
                    id >= 0,
                    "{layout}: id for {time}/{worker}/{seq} is negative"
                );
                assert_eq!(layout.decompose(id).unwrap(), Parts { time, worker, seq });
            }
        }
        assert_eq!(
            L.compose(L.max_time(), L.max_worker(), L.max_seq()),
            i64::MAX
        );
    }

    #[test]
    fn bit_positions_match_the_documented_diagram() {
        assert_eq!(L.compose(1, 0, 0), 1 << 22);
        assert_eq!(L.compose(0, 1, 0), 1 << 12);
        assert_eq!(L.compose(0, 0, 1), 1);
        // Sonyflake: time << 24 | sequence << 16 | machine.
        let s = Layout::SONYFLAKE;
        assert_eq!(s.compose(1, 0, 0), 1 << 24);
        assert_eq!(s.compose(0, 0, 1), 1 << 16);
        assert_eq!(s.compose(0, 1, 0), 1);
    }

    #[test]
    fn published_ids_decode_to_their_published_times() {
        // Discord's documentation example: 175928847299117063 is 2016-04-30 11:18:25.796 UTC,
        // worker 1, process 0, increment 7.
        let p = Layout::DISCORD.decompose(175_928_847_299_117_063).unwrap();
        assert_eq!(Layout::DISCORD.unix_ms_from_time(p.time), 1_462_015_105_796);
        assert_eq!((p.worker, p.seq), (1 << 5, 7));
    }

    #[test]
    fn ids_order_by_time_then_by_the_low_fields() {
        for layout in [L, Layout::SONYFLAKE] {
            assert!(
                layout.compose(5, layout.max_worker(), layout.max_seq()) < layout.compose(6, 0, 0)
            );
            assert!(layout.compose(5, 3, 7) < layout.compose(5, 3, 8));
        }
    }

    #[test]
    fn consecutive_ticks_make_increasing_ids_of_one_worker() {
        for layout in Layout::PRESETS.iter().map(|(_, l)| *l) {
            let tick = (77 << layout.seq_bits) | layout.max_seq() as u64;
            let a = layout.id_from_tick(tick, 9);
            let b = layout.id_from_tick(tick + 1, 9);
            assert!(b > a, "{layout}");
            assert_eq!(
                layout.decompose(b).unwrap(),
                Parts {
                    time: 78,
                    worker: 9,
                    seq: 0
                }
            );
            assert_eq!(layout.tick_of_id(a).unwrap(), tick);
        }
    }

    #[test]
    fn range_checks_name_the_bad_value() {
        assert_eq!(
            L.check_worker(1024),
            Err(LayoutError::WorkerOutOfRange(1024))
        );
        assert_eq!(L.check_worker(-1), Err(LayoutError::WorkerOutOfRange(-1)));
        assert_eq!(L.check_worker(1023), Ok(1023));
        assert_eq!(Layout::SONYFLAKE.check_worker(65535), Ok(65535));
        assert_eq!(
            L.check_seq(4096),
            Err(LayoutError::SequenceOutOfRange(4096))
        );
        assert_eq!(L.check_seq(-5), Err(LayoutError::SequenceOutOfRange(-5)));
        assert_eq!(L.decompose(-1), Err(LayoutError::NegativeId(-1)));
    }

    #[test]
    fn min_and_max_id_bracket_every_id_of_the_unit() {
        for layout in [L, Layout::SONYFLAKE, Layout::INSTAGRAM] {
            let t = 123_456_789;
            for worker in [0, 1, layout.max_worker()] {
                for seq in [0, 1, layout.max_seq()] {
                    let id = layout.compose(t, worker, seq);
                    assert!(layout.min_id(t) <= id && id <= layout.max_id(t));
                }
            }
            assert_eq!(layout.max_id(t) + 1, layout.min_id(t + 1));
        }
    }

    #[test]
    fn timestamps_convert_and_round_down_to_the_unit() {
        let epoch_pg = L.pg_micros_from_time(0);
        assert_eq!(L.time_from_pg_micros(epoch_pg), Ok(0));
        assert_eq!(L.time_from_pg_micros(epoch_pg + 1999), Ok(1));
        assert_eq!(
            L.time_from_pg_micros(epoch_pg - 1),
            Err(LayoutError::BeforeEpoch(epoch_pg - 1))
        );
        let last = L.pg_micros_from_time(L.max_time());
        assert_eq!(L.time_from_pg_micros(last + 999), Ok(L.max_time()));
        assert_eq!(
            L.time_from_pg_micros(last + 1000),
            Err(LayoutError::AfterEnd(last + 1000))
        );
        assert_eq!(
            L.time_from_pg_micros(i64::MAX),
            Err(LayoutError::AfterEnd(i64::MAX))
        );
        assert_eq!(
            L.time_from_pg_micros(i64::MIN),
            Err(LayoutError::BeforeEpoch(i64::MIN))
        );
        // 2026-11-22T00:00:00Z is 690 days after the epoch.
        let unix_ms = 1_795_305_600_000;
        assert_eq!(L.time_from_unix_ms(unix_ms), 690 * 86_400_000);
        assert_eq!(
            L.pg_micros_from_time(690 * 86_400_000),
            (unix_ms - PG_EPOCH_UNIX_MS) * 1000
        );
        // Sonyflake counts 10 ms units.
        let s = Layout::SONYFLAKE;
        assert_eq!(s.time_from_unix_ms(s.epoch_unix_ms + 25), 2);
        assert_eq!(
            s.time_from_pg_micros(s.pg_micros_from_time(7) + 9_999),
            Ok(7)
        );
    }

    #[test]
    fn a_clock_before_the_epoch_reads_as_the_epoch_and_past_the_end_as_one_past_it() {
        assert_eq!(L.time_from_unix_ms(0), 0);
        assert_eq!(L.time_from_unix_ms(i64::MIN), 0);
        assert_eq!(L.time_from_unix_ms(L.epoch_unix_ms + 5), 5);
        assert_eq!(L.time_from_unix_ms(i64::MAX), L.max_time() + 1);
    }

    #[test]
    fn the_default_layout_ends_in_september_2094() {
        // 2094-09-07T15:47:35.551Z
        assert_eq!(L.last_unix_ms(), 3_934_712_855_551);
        assert_eq!(L.tick_limit(), 1 << 53);
    }

    #[test]
    fn layouts_parse_from_names_and_specs_and_print_back() {
        assert_eq!(Layout::parse("Sonyflake"), Ok(Layout::SONYFLAKE));
        for (_, layout) in Layout::PRESETS {
            assert_eq!(Layout::parse(&layout.to_string()), Ok(layout));
        }
        let custom = Layout::parse(
            "epoch=2020-01-01 unit=10ms time=39 worker=16 sequence=8 order=time-sequence-worker",
        )
        .unwrap();
        assert_eq!(custom.epoch_unix_ms, 1_577_836_800_000);
        assert_eq!((custom.unit_ms, custom.order), (10, Order::SequenceWorker));
        assert_eq!(
            Layout::parse("epoch=2025-01-01T00:00:00.000Z,time=41,worker=10,seq=12"),
            Ok(Layout::SNOWFLAKE)
        );
        assert_eq!(
            parse_epoch("2010-11-04 01:42:54.657"),
            Ok(1_288_834_974_657)
        );
        assert!(
            Layout::parse("epoch=2020-01-01 time=50 worker=10 sequence=12")
                .unwrap_err()
                .contains("72 bits")
        );
        assert!(Layout::parse("nope")
            .unwrap_err()
            .contains("presets: snowflake"));
        assert!(Layout::parse("time=41 worker=10 sequence=12")
            .unwrap_err()
            .contains("epoch"));
        assert!(
            Layout::parse("epoch=2020-01-01 unit=1000ms time=44 worker=8 sequence=8")
                .unwrap_err()
                .contains("9999")
        );
        // Malformed specs are errors, never a panic or a wrapped sum.
        for bad in [
            "epoch=2020-01-01T00:00:00.\u{e9}\u{e9} time=41 worker=10 sequence=12",
            "epoch=2020-01-01T25:00:00 time=41 worker=10 sequence=12",
            "epoch=2020-01-01 time=4294967273 worker=10 sequence=13",
        ] {
            assert!(Layout::parse(bad).is_err(), "{bad}");
        }
        // An id past the end of a layout narrower than 63 bits is not decoded as a time.
        let narrow =
            Layout::parse("epoch=2020-01-01 unit=86400000ms time=20 worker=0 sequence=1").unwrap();
        assert_eq!(
            narrow.decompose(i64::MAX),
            Err(LayoutError::IdAfterEnd(i64::MAX))
        );
        assert!(narrow.decompose(narrow.max_id(narrow.max_time())).is_ok());
        assert!(Layout::DISCORD.check_generation().is_err());
        assert!(Layout::SONYFLAKE.check_generation().is_ok());
        assert_eq!(Layout::PGEDGE.preset_name(), Some("pgedge"));
    }

    /// Seata's `io.seata.common.util.IdWorker`, as Seata writes it: the worker id shifted
    /// once to the top, and one counter of timestamp and sequence, set from the clock when the
    /// worker starts and then only incremented (a burst past 4,096 in a millisecond borrows
    /// the next one).
    struct SeataIdWorker {
        worker_id: i64,
        timestamp_and_sequence: i64,
    }

    impl SeataIdWorker {
        const TWEPOCH: i64 = 1_588_435_200_000;
        const WORKER_ID_BITS: i64 = 10;
        const TIMESTAMP_BITS: i64 = 41;
        const SEQUENCE_BITS: i64 = 12;
        const MAX_WORKER_ID: i64 = !(-1 << Self::WORKER_ID_BITS);
        const TIMESTAMP_AND_SEQUENCE_MASK: i64 =
            !(-1 << (Self::TIMESTAMP_BITS + Self::SEQUENCE_BITS));

        fn new(worker_id: i64, current_time_millis: i64) -> SeataIdWorker {
            assert!((0..=Self::MAX_WORKER_ID).contains(&worker_id));
            let timestamp = current_time_millis - Self::TWEPOCH;
            SeataIdWorker {
                worker_id: worker_id << (Self::TIMESTAMP_BITS + Self::SEQUENCE_BITS),
                timestamp_and_sequence: timestamp << Self::SEQUENCE_BITS,
            }
        }

        fn next_id(&mut self) -> i64 {
            self.timestamp_and_sequence += 1; // incrementAndGet()
            let timestamp_with_sequence =
                self.timestamp_and_sequence & Self::TIMESTAMP_AND_SEQUENCE_MASK;
            self.worker_id | timestamp_with_sequence
        }
    }

    const S: Layout = Layout::SEATA;

    #[test]
    fn ids_from_ticks_are_the_fields_in_their_order() {
        let customs = [
            "epoch=2020-01-01 time=40 worker=8 sequence=14 order=worker-time-sequence",
            "epoch=2020-01-01 time=39 worker=5 sequence=3 order=time-sequence-worker",
            "epoch=2020-01-01 time=30 worker=0 sequence=5",
            "epoch=2020-01-01 time=30 worker=0 sequence=5 order=worker-time-sequence",
        ];
        let layouts = Layout::PRESETS
            .iter()
            .map(|(_, l)| *l)
            .chain(customs.iter().map(|c| Layout::parse(c).unwrap()));
        for layout in layouts {
            let (t, w, s) = (layout.max_time(), layout.max_worker(), layout.max_seq());
            for (time, worker, seq) in [(0, 0, 0), (t, w, s), (t / 3, w / 2, s / 5), (77, w, 0)] {
                let (time_u, worker_u, seq_u) = (time, worker as u64, seq as u64);
                let (wb, sb, tb) = (layout.worker_bits, layout.seq_bits, layout.time_bits);
                let expected = match layout.order {
                    Order::WorkerSequence => (time_u << (wb + sb)) | (worker_u << sb) | seq_u,
                    Order::SequenceWorker => (time_u << (sb + wb)) | (seq_u << wb) | worker_u,
                    Order::WorkerTimeSequence => (worker_u << (tb + sb)) | (time_u << sb) | seq_u,
                };
                let tick = (time << sb) | seq_u;
                assert_eq!(
                    layout.id_from_tick(tick, worker) as u64,
                    expected,
                    "{layout}"
                );
            }
        }
    }

    #[test]
    fn seata_ids_computed_by_seatas_formula_decode() {
        // 2026-11-22T10:00:00.250Z
        let started = 1_795_341_600_250;
        for worker in [0, 1, 77, 1023] {
            let mut seata = SeataIdWorker::new(worker, started);
            // Its first id is sequence 1 (incrementAndGet), and 5,000 ids borrow a millisecond.
            let ids: Vec<i64> = (0..5000).map(|_| seata.next_id()).collect();
            for (n, &id) in ids.iter().enumerate() {
                let count = n as u64 + 1;
                let parts = S.decompose(id).unwrap();
                assert_eq!(parts.worker, worker as u32);
                assert_eq!(parts.seq as u64, count % 4096);
                assert_eq!(
                    S.unix_ms_from_time(parts.time),
                    started + (count / 4096) as i64
                );
                assert_eq!(S.compose(parts.time, parts.worker, parts.seq), id);
                // A Seata id is this layout's id of the same tick and worker.
                let tick = (((started - SeataIdWorker::TWEPOCH) as u64) << 12) + count;
                assert_eq!(S.id_from_tick(tick, worker as u32), id);
                assert_eq!(S.tick_of_id(id), Ok(tick));
            }
            assert!(ids.windows(2).all(|w| w[0] < w[1]));
        }
        // Worker 5 at Seata's epoch: 5 << 53, then sequence 1.
        assert_eq!(
            SeataIdWorker::new(5, SeataIdWorker::TWEPOCH).next_id(),
            (5 << 53) | 1
        );
        assert_eq!(S.compose(0, 5, 1), (5 << 53) | 1);
        // Seata's largest id is i64::MAX: worker 1023, the last millisecond, sequence 4095.
        assert_eq!(S.compose(S.max_time(), 1023, 4095), i64::MAX);
        assert_eq!(S.last_unix_ms(), 3_787_458_455_551); // 2090-01-07T07:47:35.551Z
    }

    #[test]
    fn seata_ids_of_one_worker_strictly_increase_and_workers_do_not_interleave() {
        // Ticks as the generator makes them: the clock, then sequence and borrowed units.
        let mut tick = 1_000_000u64 << 12;
        let mut last = [i64::MIN; 4];
        for step in 0..20_000u64 {
            tick += 1 + (step * 7919) % 5000; // gaps of up to a millisecond or two
            for w in 0..4u32 {
                let id = S.id_from_tick(tick, w);
                assert!(id > last[w as usize], "worker {w}, tick {tick}");
                last[w as usize] = id;
            }
        }
        // Worker-first: every id of worker w is below every id of worker w + 1, whatever
        // their times.
        for w in 0..3u32 {
            assert!(last[w as usize] < S.compose(0, w + 1, 0));
        }
        assert!(S.compose(S.max_time(), 3, S.max_seq()) < S.compose(0, 4, 0));
        // So ids are not ordered by time across workers.
        assert!(S.compose(1000, 2, 0) > S.compose(2000, 1, 0));
    }

    #[test]
    fn the_seata_preset_parses_and_prints_by_its_name_and_its_custom_form_round_trips() {
        assert_eq!(Layout::parse("seata"), Ok(S));
        assert_eq!(Layout::parse(" Seata "), Ok(S));
        assert_eq!(S.preset_name(), Some("seata"));
        let text = S.to_string();
        assert_eq!(
            text,
            "epoch=1588435200000 unit=1ms time=41 worker=10 sequence=12 order=worker-time-sequence"
        );
        assert_eq!(Layout::parse(&text), Ok(S));
        assert_eq!(
            Layout::parse("epoch=2020-05-02T16:00:00Z time=41 worker=10 sequence=12 order=worker-time-sequence"),
            Ok(S)
        );
        // A custom worker-first layout prints in the same form and parses back.
        let custom =
            Layout::parse("order=Worker-Time-Sequence epoch=2024-01-01 time=40 worker=8 seq=14")
                .unwrap();
        assert_eq!(custom.order, Order::WorkerTimeSequence);
        assert_eq!(custom.preset_name(), None);
        assert_eq!(Layout::parse(&custom.to_string()), Ok(custom));
        assert!(custom.check_generation().is_ok());
        // Every order's name parses back to it.
        for order in Order::ALL {
            let l = Layout::new(1_735_689_600_000, 1, 41, 10, 12, order).unwrap();
            assert_eq!(Layout::parse(&l.to_string()), Ok(l));
        }
        // The existing layouts print as before: their text is persisted with the marks.
        assert_eq!(
            Layout::SNOWFLAKE.to_string(),
            "epoch=1735689600000 unit=1ms time=41 worker=10 sequence=12 order=time-worker-sequence"
        );
        assert_eq!(
            Layout::SONYFLAKE.to_string(),
            "epoch=1409529600000 unit=10ms time=39 worker=16 sequence=8 order=time-sequence-worker"
        );
        let bad = Layout::parse(
            "epoch=2020-01-01 time=41 worker=10 sequence=12 order=worker-sequence-time",
        )
        .unwrap_err();
        assert!(bad.contains("worker-time-sequence"), "{bad}");
        // With the worker first, the sign bit may not be part of the worker id.
        let bad = Layout::parse(
            "epoch=2020-01-01 time=42 worker=10 sequence=12 order=worker-time-sequence",
        )
        .unwrap_err();
        assert!(bad.contains("at most 63"), "{bad}");
        assert!(Layout::parse("epoch=2020-01-01 time=42 worker=10 sequence=12").is_ok());
    }

    #[test]
    fn worker_first_decoding_refuses_what_is_no_id_of_the_layout() {
        assert_eq!(S.decompose(-1), Err(LayoutError::NegativeId(-1)));
        assert_eq!(
            S.decompose(i64::MAX).unwrap(),
            Parts {
                time: S.max_time(),
                worker: 1023,
                seq: 4095
            }
        );
        // Narrower than 63 bits: a bit above the worker field is past the layout's largest id.
        let narrow = Layout::parse(
            "epoch=2020-01-01 time=40 worker=8 sequence=12 order=worker-time-sequence",
        )
        .unwrap();
        let largest = narrow.max_id(narrow.max_time());
        assert_eq!(largest, (1 << 60) - 1);
        assert!(narrow.decompose(largest).is_ok());
        assert_eq!(
            narrow.decompose(largest + 1),
            Err(LayoutError::IdAfterEnd(largest + 1))
        );
    }

    #[test]
    fn only_worker_first_layouts_are_not_time_first() {
        for (name, layout) in Layout::PRESETS {
            assert_eq!(layout.is_time_first(), name != "seata", "{name}");
        }
        // In Seata's layout min_id and max_id still bound every id of a later / earlier unit,
        // but hold other units' ids between them.
        let t = 123_456_789;
        assert!(S.min_id(t) <= S.compose(t + 5, 0, 0) && S.compose(t, 9, 0) <= S.max_id(t));
        assert!(S.compose(t - 1, 9, 0) > S.min_id(t) && S.compose(t + 1, 0, 0) < S.max_id(t));
    }

    /// Every id of `layout` in `times` of `workers`, checked against `key_ranges` by sampling:
    /// each is in a range, and (when `exact`) each id in a range is of those times and workers.
    fn check_ranges(
        layout: Layout,
        times: std::ops::RangeInclusive<u64>,
        workers: &[u32],
        exact: bool,
    ) {
        let ranges = layout.key_ranges(times.clone(), workers.iter().copied());
        assert!(ranges.windows(2).all(|w| w[0].1 + 1 < w[1].0), "{ranges:?}");
        assert!(ranges.iter().all(|r| r.0 <= r.1));
        let inside = |id: i64| ranges.iter().any(|&(a, b)| a <= id && id <= b);
        let t0 = *times.start();
        let t1 = (*times.end()).min(layout.max_time());
        for w in 0..=layout.max_worker().min(40) {
            for t in [
                t0.saturating_sub(1),
                t0,
                t0 + 1,
                (t0 + t1) / 2,
                t1.saturating_sub(1),
                t1,
                t1 + 1,
            ] {
                if t > layout.max_time() {
                    continue;
                }
                for seq in [0, 1, layout.max_seq()] {
                    let id = layout.compose(t, w, seq);
                    let wanted = times.contains(&t) && workers.contains(&w);
                    if wanted {
                        assert!(
                            inside(id),
                            "{layout}: t {t} w {w} s {seq} not in {ranges:?}"
                        );
                    } else if exact {
                        assert!(!inside(id), "{layout}: t {t} w {w} s {seq} in {ranges:?}");
                    }
                }
            }
        }
        if exact {
            for &(a, b) in &ranges {
                for id in [a, a + 1, (a / 2 + b / 2), b - 1, b] {
                    let p = layout.decompose(id).unwrap();
                    assert!(
                        times.contains(&p.time) && workers.contains(&p.worker),
                        "{id} {p:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn key_ranges_are_one_per_worker_when_the_worker_comes_first() {
        let hour = 3_600_000;
        let t = S.time_from_unix_ms(1_795_341_600_000);
        let ranges = S.key_ranges(t..=t + 3 * hour, [7, 3, 9, 3]);
        assert_eq!(
            ranges,
            vec![
                (S.compose(t, 3, 0), S.compose(t + 3 * hour, 3, 4095)),
                (S.compose(t, 7, 0), S.compose(t + 3 * hour, 7, 4095)),
                (S.compose(t, 9, 0), S.compose(t + 3 * hour, 9, 4095)),
            ]
        );
        check_ranges(S, t..=t + 3 * hour, &[3, 7, 9], true);
        check_ranges(S, t..=t, &[0, 1, 2, 1023], true);
        check_ranges(S, 0..=5, &[0, 1, 2, 1023], true);
        // Up to the end: the end of worker w's range meets worker w+1's from time 0.
        check_ranges(S, 0..=S.max_time(), &[0, 1, 2, 5], true);
        assert_eq!(
            S.key_ranges(0..=u64::MAX, [2, 0, 1, 5]),
            vec![
                (0, S.compose(S.max_time(), 2, 4095)),
                (5 << 53, (6 << 53) - 1)
            ]
        );
        assert_eq!(
            S.key_ranges(0..=u64::MAX, 0..=S.max_worker()),
            vec![(0, i64::MAX)]
        );
        // Every worker, an hour: 1,024 ranges.
        assert_eq!(S.key_ranges(t..=t + hour, 0..=S.max_worker()).len(), 1024);
        // Nothing asked, nothing returned; workers past the layout are no workers of it.
        assert!(S.key_ranges(t..=t + hour, []).is_empty());
        assert!(S.key_ranges(t + 1..=t, [1]).is_empty());
        assert!(S.key_ranges(t..=t, [1024, 5000]).is_empty());
    }

    #[test]
    fn time_filters_become_units_then_key_ranges() {
        for layout in [L, S, Layout::SONYFLAKE] {
            let unit = layout.unit_ms as i64 * 1000;
            let t = layout.pg_micros_from_time(1_000_000);
            // At a unit's start it is included from both sides; a microsecond past, only below.
            assert_eq!(
                layout.units_between_pg(Some(t), Some(t)),
                Some(1_000_000..=1_000_000)
            );
            assert_eq!(layout.units_between_pg(Some(t + 1), Some(t + 1)), None);
            assert_eq!(
                layout.units_between_pg(Some(t + 1), Some(t + unit)),
                Some(1_000_001..=1_000_001)
            );
            assert_eq!(
                layout.units_between_pg(Some(t - 1), Some(t + unit - 1)),
                Some(1_000_000..=1_000_000)
            );
            // Open ends and ends outside the layout are clamped; nothing in range is None.
            assert_eq!(
                layout.units_between_pg(None, None),
                Some(0..=layout.max_time())
            );
            assert_eq!(
                layout.units_between_pg(Some(i64::MIN), Some(i64::MAX)),
                Some(0..=layout.max_time())
            );
            let epoch = layout.pg_micros_from_time(0);
            assert_eq!(layout.units_between_pg(None, Some(epoch - 1)), None);
            assert_eq!(layout.units_between_pg(None, Some(epoch)), Some(0..=0));
            let end = layout.pg_micros_from_time(layout.max_time());
            assert_eq!(layout.units_between_pg(Some(end + 1), None), None);
            assert_eq!(
                layout.units_between_pg(Some(end), None),
                Some(layout.max_time()..=layout.max_time())
            );
            assert_eq!(layout.units_between_pg(Some(t + unit), Some(t)), None);
        }
        // Rows of three workers over three hours, filtered to one hour: the ranges hold exactly
        // that hour's ids of those workers in Seata's layout.
        let hour_us = 3_600_000_000i64;
        let from = S.pg_micros_from_time(S.time_from_unix_ms(1_795_341_600_000));
        let units = S
            .units_between_pg(Some(from + hour_us), Some(from + 2 * hour_us - 1))
            .unwrap();
        let ranges = S.key_ranges(units.clone(), [2, 5, 9]);
        assert_eq!(ranges.len(), 3);
        let inside = |id: i64| ranges.iter().any(|&(a, b)| a <= id && id <= b);
        for worker in [2, 5, 9] {
            for minute in 0..180 {
                let us = from + minute * 60_000_000 + 17_000;
                let time = S.time_from_pg_micros(us).unwrap();
                let id = S.compose(time, worker, 4095);
                let ts = S.pg_micros_from_time(S.decompose(id).unwrap().time);
                let in_filter = (from + hour_us..from + 2 * hour_us).contains(&ts);
                assert_eq!(inside(id), in_filter, "worker {worker} minute {minute}");
            }
        }
    }

    #[test]
    fn key_ranges_are_one_range_when_time_comes_first() {
        let hour = 3_600_000;
        for layout in [L, Layout::SONYFLAKE, Layout::INSTAGRAM] {
            let t = layout.time_from_unix_ms(1_795_341_600_000);
            let every = layout.key_ranges(t..=t + hour, 0..=layout.max_worker());
            assert_eq!(every, vec![(layout.min_id(t), layout.max_id(t + hour))]);
            check_ranges(
                layout,
                t..=t + hour,
                &(0..=layout.max_worker()).collect::<Vec<_>>(),
                true,
            );
            // A few workers: one range that holds theirs (and others' ids besides).
            check_ranges(layout, t..=t + hour, &[3, 7, 9], false);
            check_ranges(layout, t..=t, &[5], false);
            assert_eq!(layout.key_ranges(t..=t + hour, [3, 9]).len(), 1);
        }
        // Time-first with a subset of workers: tighter than every worker's.
        let r = L.key_ranges(100..=200, [3, 9]);
        assert_eq!(r, vec![(L.compose(100, 3, 0), L.compose(200, 9, 4095))]);
    }
}

//! One worker's id stream: its state in shared memory (a [`Slot`] of atomics) and the protocol
//! by which backends issue ids from it. Pure Rust over `std` atomics: the same code runs in
//! every backend against shared memory and, in the model test, in threads.
//!
//! The state is a counter of *ticks* (`time << sequence_bits | sequence`, see `layout.rs`), the
//! `word`. Issuing `n` ids takes the ticks `first .. first + n` with
//! `first = max(last + 1, clock << sequence_bits)` and moves `word` to the last of them with one
//! compare-and-swap:
//!
//! * normally `clock << sequence_bits` wins: the id carries the current time unit;
//! * after a full sequence in one unit, `last + 1` carries into the time field: the worker
//!   *borrows* the next unit instead of waiting for it;
//! * when the wall clock steps back, `last + 1` keeps winning: ids go on increasing, the time
//!   field runs ahead of the clock until it catches up, and nothing stalls.
//!
//! So the ticks of a worker are handed out in disjoint, increasing ranges, in the order of the
//! successful compare-and-swaps, whatever the clock does and however many backends race.
//!
//! Three limits apply, each checked before the compare-and-swap; a call that meets one leaves
//! the fast path (and the slow path of the extension's `src/mint/nextval.rs` decides what to do):
//!
//! * **the mark** (`mark`): ticks at or above it may not be issued. It is the durable
//!   high-water mark: the mark writer raises it only once the new value is durable (see
//!   `marks.rs`), so every issued id is below a durable mark and a restarted server continues
//!   above it;
//! * **the bound**: an id's time may run at most `max_ahead` past the reference clock
//!   (`timekeeper.rs`); the fast path checks `time <= clock + slack`, where `slack` is the
//!   reference's lead on the clock plus `max_ahead`, refreshed by the slow path;
//! * **the refresh**: every `Rules::refresh` (a second) of clock, or when the clock reads
//!   behind the last refresh, the slow path checks the clock against the boot clock, which is
//!   how steps and jumps are seen.
//!
//! The word's top bit, [`CLOSED`], stops all issuing: before the marks are loaded, during a
//! clean stop (which then persists the exact last tick), and while the mark writer applies an
//! administrator's change. Setting it makes every compare-and-swap from an open word fail, so
//! nothing is issued past a value the writer has read.

use crate::layout::Layout;
use crate::timekeeper::{ClockEvent, Readings, Rules, Timekeeper};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering::*};

/// Set in `Slot::word` while nothing may be issued.
pub const CLOSED: u64 = 1 << 63;
/// `Slot::held_since` when no jump is held.
const NOT_HELD: u64 = u64::MAX;
/// `Slot::refresh_at` while a jump is held: far from any clock reading.
const HELD: u64 = u64::MAX / 2;

/// One worker's state in shared memory. The first cache line holds what the fast path reads;
/// each slot is 128-byte aligned, so two workers never share a cache line.
#[repr(C, align(128))]
pub struct Slot {
    /// The last tick issued, or [`CLOSED`] with it.
    pub word: AtomicU64,
    /// Ticks below this may be issued: the high-water mark, durable.
    pub mark: AtomicU64,
    /// The clock (time units) at the last full check.
    pub refresh_at: AtomicU64,
    /// How far past the clock an id's time may run: the reference's lead plus `max_ahead`.
    pub slack: AtomicU64,
    /// Ids issued since the server started.
    pub issued: AtomicU64,
    /// Time units carried past the clock by sequence overflow.
    pub borrowed: AtomicU64,
    /// The highest tick a caller waits for (0: none): what the next mark must cover.
    pub waiting_for: AtomicU64,
    /// Set when the part of the state kept in the marks table changed and the mark writer should write it.
    pub dirty: AtomicBool,
    /// No mark is raised past this tick: the cap a leased worker id's registry recorded
    /// (the extension's `src/lease/`); `u64::MAX` for a worker id set by hand.
    pub cap: AtomicU64,

    // Changed only by the slow path and the mark writer, under the control lock.
    pub steps_back: AtomicU64,
    pub jumps: AtomicU64,
    pub tk_started: AtomicBool,
    pub tk_wall_offset: AtomicI64,
    pub tk_reference_offset: AtomicI64,
    pub tk_held_since: AtomicU64,
    pub tk_held_offset: AtomicI64,
    pub tk_last_boot: AtomicU64,
    pub tk_boot_shift: AtomicU64,
    /// The first tick after the oldest forward jump followed and not yet rewound (0: none).
    pub jump_from: AtomicU64,
    /// One past the last tick issued before that jump.
    pub jump_base: AtomicU64,
    /// Ticks `reserved_from ..= reserved_to` were issued during a rewound jump: the worker
    /// skips them when it reaches them (0: none).
    pub reserved_from: AtomicU64,
    pub reserved_to: AtomicU64,
    /// Rows that arrived by replication carrying this worker id (counted by the replication
    /// guard when it lets them through with a warning).
    pub foreign_rows: AtomicU64,
}

impl Default for Slot {
    /// Closed and empty: the state before the marks are loaded.
    fn default() -> Slot {
        Slot {
            word: AtomicU64::new(CLOSED),
            mark: AtomicU64::new(0),
            refresh_at: AtomicU64::new(0),
            slack: AtomicU64::new(0),
            issued: AtomicU64::new(0),
            borrowed: AtomicU64::new(0),
            waiting_for: AtomicU64::new(0),
            dirty: AtomicBool::new(false),
            cap: AtomicU64::new(u64::MAX),
            steps_back: AtomicU64::new(0),
            jumps: AtomicU64::new(0),
            tk_started: AtomicBool::new(false),
            tk_wall_offset: AtomicI64::new(0),
            tk_reference_offset: AtomicI64::new(0),
            tk_held_since: AtomicU64::new(NOT_HELD),
            tk_held_offset: AtomicI64::new(0),
            tk_last_boot: AtomicU64::new(0),
            tk_boot_shift: AtomicU64::new(0),
            jump_from: AtomicU64::new(0),
            jump_base: AtomicU64::new(0),
            reserved_from: AtomicU64::new(0),
            reserved_to: AtomicU64::new(0),
            foreign_rows: AtomicU64::new(0),
        }
    }
}

/// What a server generates with, fixed when it starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Params {
    pub layout: Layout,
    pub seq_bits: u32,
    /// One past the last tick the generator issues: the layout's last tick is kept unused, so
    /// that every mark, an exclusive bound, is itself a valid id (that is how it is stored).
    pub tick_limit: u64,
    /// How far ahead of a worker a raised mark reaches.
    pub mark_ticks: u64,
    /// A mark is raised once less than this is left.
    pub low_ticks: u64,
    pub rules: Rules,
}

/// How far ahead of a worker its mark is kept, in milliseconds.
pub const MARK_AHEAD_MS: u64 = 2000;

impl Params {
    pub fn new(layout: Layout) -> Params {
        let mark_ticks = layout.units_in_ms(MARK_AHEAD_MS) << layout.seq_bits;
        Params {
            layout,
            seq_bits: layout.seq_bits,
            tick_limit: layout.tick_limit() - 1,
            mark_ticks,
            low_ticks: mark_ticks / 2,
            rules: Rules::for_layout(&layout),
        }
    }

    /// The largest number of ids one call can ever take when ids may run `max_ahead` time
    /// units past the clock.
    pub fn capacity(&self, max_ahead: u64) -> u64 {
        (max_ahead + 1) << self.seq_bits
    }
}

/// Ids issued: ticks `first .. first + n`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Issued {
    pub first: u64,
    /// The mark is getting low: the caller should wake the mark writer.
    pub low: bool,
}

/// Why the fast path gave up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Miss {
    /// Another backend moved the word first: just try again.
    Contended,
    /// A limit was met or a clock check is due: take the slow path.
    Slow,
}

/// What the slow path found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Issued(Issued),
    Contended,
    /// Nothing may be issued now: wait for the mark writer.
    Closed,
    /// The mark must reach past `through` first: ask the mark writer, then wait.
    NeedMark {
        through: u64,
    },
    /// The ids would run this many time units past the bound: wait for the clock.
    Ahead {
        by: u64,
    },
    /// The time field would pass the layout's end.
    Exhausted,
}

impl Slot {
    /// The fast path: issues `n` ticks if no limit is near and no clock check is due. `clock`
    /// is the wall clock in time units.
    #[inline(always)]
    pub fn try_issue(&self, p: &Params, clock: u64, n: u64) -> Result<Issued, Miss> {
        let word = self.word.load(Acquire);
        let since_refresh = (clock + p.rules.tolerance).wrapping_sub(self.refresh_at.load(Relaxed));
        if word & CLOSED != 0 || since_refresh >= p.rules.refresh + p.rules.tolerance {
            return Err(Miss::Slow);
        }
        let first = (word + 1).max(clock << p.seq_bits);
        let end = first + n;
        let mark = self.mark.load(Acquire);
        if end > mark || (end - 1) >> p.seq_bits > clock + self.slack.load(Relaxed) {
            return Err(Miss::Slow);
        }
        if self
            .word
            .compare_exchange_weak(word, end - 1, AcqRel, Relaxed)
            .is_err()
        {
            return Err(Miss::Contended);
        }
        // The ticks are claimed; they are issued only if the mark, read again after the claim,
        // still covers them. A mark read before the claim may be one the writer has lowered
        // since (a clean stop, then a restarted writer that reopened the worker at the same
        // word): such ticks are skipped, never handed out.
        let mark = self.mark.load(Acquire);
        if end > mark {
            return Err(Miss::Slow);
        }
        self.count(p, word, clock, end, n);
        Ok(Issued {
            first,
            low: mark - end < p.low_ticks && mark < p.tick_limit,
        })
    }

    /// The slow path, under the control lock: a full clock check with fresh readings, then
    /// the same issue with every limit told apart. Returns what the check noticed too: a step
    /// back of the boot clock, and what it saw of the wall clock.
    pub fn try_issue_checked(
        &self,
        p: &Params,
        r: Readings,
        n: u64,
        max_ahead: u64,
    ) -> (Outcome, [Option<ClockEvent>; 2]) {
        let word = self.word.load(Acquire);
        if word & CLOSED != 0 {
            return (Outcome::Closed, [None, None]);
        }
        let verdict = self.check_clock(p, r, word, max_ahead);
        let events = [verdict.boot_event, verdict.event];
        let first = (word + 1).max(verdict.clock << p.seq_bits);
        let end = first.saturating_add(n);
        if end > p.tick_limit {
            return (Outcome::Exhausted, events);
        }
        let last_time = (end - 1) >> p.seq_bits;
        if last_time > verdict.bound {
            return (
                Outcome::Ahead {
                    by: last_time - verdict.bound,
                },
                events,
            );
        }
        let mark = self.mark.load(Acquire);
        if end > mark {
            return (Outcome::NeedMark { through: end - 1 }, events);
        }
        if self
            .word
            .compare_exchange(word, end - 1, AcqRel, Relaxed)
            .is_err()
        {
            return (Outcome::Contended, events);
        }
        // As in `try_issue`: issued only if the mark still covers the claimed ticks.
        let mark = self.mark.load(Acquire);
        if end > mark {
            return (Outcome::NeedMark { through: end - 1 }, events);
        }
        self.count(p, word, verdict.clock, end, n);
        let issued = Issued {
            first,
            low: mark - end < p.low_ticks && mark < p.tick_limit,
        };
        (Outcome::Issued(issued), events)
    }

    /// Runs the timekeeper on fresh readings and publishes what the fast path needs.
    fn check_clock(
        &self,
        p: &Params,
        r: Readings,
        word: u64,
        max_ahead: u64,
    ) -> crate::timekeeper::Verdict {
        let mut tk = self.timekeeper();
        let verdict = tk.check(r, word >> p.seq_bits, max_ahead, &p.rules);
        self.set_timekeeper(&tk);
        // While a jump is held, no clock reading passes the fast path's window.
        let refresh_at = if verdict.held { HELD } else { verdict.clock };
        self.refresh_at.store(refresh_at, Relaxed);
        self.slack.store(verdict.bound - verdict.clock, Relaxed);
        match verdict.event {
            Some(ClockEvent::SteppedBack { .. }) => {
                self.steps_back.fetch_add(1, Relaxed);
            }
            Some(ClockEvent::JumpFollowed { .. }) => {
                self.jumps.fetch_add(1, Relaxed);
                self.record_jump(p, verdict.clock << p.seq_bits);
            }
            _ => {}
        }
        verdict
    }

    /// A forward jump is followed from `from` on: moves the word there, so that every tick
    /// issued before the jump is below `jump_base` and every tick after it at or above
    /// `jump_from`, and remembers both for `rewind`. The oldest jump not rewound is kept.
    pub(crate) fn record_jump(&self, p: &Params, from: u64) {
        let from = self.past_reserved(from);
        let before = self.word.fetch_max(from - 1, AcqRel) & !CLOSED;
        if self.jump_from.load(Relaxed) == 0 && from > before + 1 && from < p.tick_limit {
            self.jump_base.store(before + 1, Relaxed);
            self.jump_from.store(from, Relaxed);
            self.dirty.store(true, Release);
        }
    }

    fn count(&self, p: &Params, word: u64, clock: u64, end: u64, n: u64) {
        self.issued.fetch_add(n, Relaxed);
        let before = (word >> p.seq_bits).max(clock);
        let after = (end - 1) >> p.seq_bits;
        if after > before {
            self.borrowed.fetch_add(after - before, Relaxed);
        }
    }

    /// Records that a caller needs ticks through `through`. SeqCst, with the flag of `Shared::request_mark`:
    /// either the writer's scan sees this, or the caller sees the flag cleared and wakes it.
    pub fn wait_for(&self, through: u64) {
        self.waiting_for.fetch_max(through, SeqCst);
    }

    /// The first tick at or after `tick` outside the reserved range: every move of the word
    /// goes through here, so that no reserved tick is ever issued again.
    pub fn past_reserved(&self, tick: u64) -> u64 {
        let from = self.reserved_from.load(Relaxed);
        let to = self.reserved_to.load(Relaxed);
        if from != 0 && (from..=to).contains(&tick) {
            to + 1
        } else {
            tick
        }
    }

    pub fn timekeeper(&self) -> Timekeeper {
        let held = self.tk_held_since.load(Relaxed);
        Timekeeper {
            started: self.tk_started.load(Relaxed),
            wall_offset: self.tk_wall_offset.load(Relaxed),
            reference_offset: self.tk_reference_offset.load(Relaxed),
            held_since: (held != NOT_HELD).then_some(held),
            held_offset: self.tk_held_offset.load(Relaxed),
            last_boot: self.tk_last_boot.load(Relaxed),
            boot_shift: self.tk_boot_shift.load(Relaxed),
        }
    }

    pub fn set_timekeeper(&self, tk: &Timekeeper) {
        self.tk_started.store(tk.started, Relaxed);
        self.tk_wall_offset.store(tk.wall_offset, Relaxed);
        self.tk_reference_offset.store(tk.reference_offset, Relaxed);
        self.tk_held_since
            .store(tk.held_since.unwrap_or(NOT_HELD), Relaxed);
        self.tk_held_offset.store(tk.held_offset, Relaxed);
        self.tk_last_boot.store(tk.last_boot, Relaxed);
        self.tk_boot_shift.store(tk.boot_shift, Relaxed);
    }

    /// The last tick issued (with the [`CLOSED`] bit cleared).
    pub fn last(&self) -> u64 {
        self.word.load(Acquire) & !CLOSED
    }

    pub fn is_closed(&self) -> bool {
        self.word.load(Acquire) & CLOSED != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::Layout;

    const L: Layout = Layout::SNOWFLAKE;
    const T0: u64 = 60_000_000_000;
    const BOOT: u64 = 1_000_000;

    fn params() -> Params {
        Params::new(L)
    }

    fn open(p: &Params, mark: u64) -> Slot {
        let s = Slot::default();
        s.word.store(0, Relaxed);
        s.mark.store(mark.min(p.tick_limit), Relaxed);
        s
    }

    fn at(wall: u64) -> Readings {
        Readings {
            wall,
            boot: BOOT + (wall - (T0 - 10_000_000)),
        }
    }

    /// Issues one id, taking the slow path whenever the fast one says so.
    fn one(s: &Slot, p: &Params, wall: u64) -> Result<u64, Outcome> {
        loop {
            match s.try_issue(p, wall, 1) {
                Ok(i) => return Ok(i.first),
                Err(Miss::Contended) => continue,
                Err(Miss::Slow) => match s.try_issue_checked(p, at(wall), 1, 2000).0 {
                    Outcome::Issued(i) => return Ok(i.first),
                    Outcome::Contended => continue,
                    other => return Err(other),
                },
            }
        }
    }

    #[test]
    fn the_first_id_carries_the_clock_and_sequence_zero() {
        let p = params();
        let s = open(&p, u64::MAX);
        let tick = one(&s, &p, T0).unwrap();
        assert_eq!(tick, T0 << 12);
        assert_eq!(s.issued.load(Relaxed), 1);
    }

    #[test]
    fn ids_in_one_unit_count_up_the_sequence_and_overflow_borrows() {
        let p = params();
        let s = open(&p, u64::MAX);
        let ticks: Vec<u64> = (0..4096 * 3 + 10)
            .map(|_| one(&s, &p, T0).unwrap())
            .collect();
        assert!(ticks.windows(2).all(|w| w[1] == w[0] + 1));
        assert_eq!(*ticks.last().unwrap(), ((T0 + 3) << 12) + 9);
        assert_eq!(s.borrowed.load(Relaxed), 3);
        // When the clock passes the borrowed units, ids follow the clock again.
        assert_eq!(one(&s, &p, T0 + 10).unwrap(), (T0 + 10) << 12);
    }

    #[test]
    fn the_fast_path_stops_at_the_mark_and_the_slow_path_asks_for_more() {
        let p = params();
        let s = open(&p, (T0 << 12) + 100);
        one(&s, &p, T0).unwrap(); // first call: the slow path's first clock check
        for _ in 0..99 {
            assert!(s.try_issue(&p, T0, 1).is_ok());
        }
        assert_eq!(s.try_issue(&p, T0, 1), Err(Miss::Slow));
        assert_eq!(
            s.try_issue_checked(&p, at(T0), 1, 2000).0,
            Outcome::NeedMark {
                through: (T0 << 12) + 100
            }
        );
        assert_eq!(s.last(), (T0 << 12) + 99, "a refusal issues nothing");
    }

    #[test]
    fn a_closed_worker_issues_nothing() {
        let p = params();
        let s = open(&p, u64::MAX);
        one(&s, &p, T0).unwrap();
        s.word.fetch_or(CLOSED, AcqRel);
        assert_eq!(s.try_issue(&p, T0, 1), Err(Miss::Slow));
        assert_eq!(s.try_issue_checked(&p, at(T0), 1, 2000).0, Outcome::Closed);
    }

    #[test]
    fn ids_may_run_at_most_max_ahead_past_the_clock() {
        let p = params();
        let s = open(&p, u64::MAX);
        one(&s, &p, T0).unwrap();
        // 2000 ms of borrowing at 4096 per ms, then the bound.
        let mut n = 0u64;
        while one(&s, &p, T0).is_ok() {
            n += 1;
        }
        assert_eq!(n, 2001 * 4096 - 1);
        assert_eq!(
            s.try_issue_checked(&p, at(T0), 1, 2000).0,
            Outcome::Ahead { by: 1 }
        );
        // A batch larger than the bound could ever hold is told by `capacity`.
        assert_eq!(p.capacity(2000), 2001 * 4096);
    }

    #[test]
    fn a_step_back_neither_stalls_nor_repeats_and_is_counted_once() {
        let p = params();
        let s = open(&p, u64::MAX);
        let mut last = one(&s, &p, T0).unwrap();
        // An hour back, at 10,000 ids a second for 10 s of real time.
        for i in 0..100_000u64 {
            let wall = T0 - 3_600_000 + i / 10;
            let r = Readings {
                wall,
                boot: at(T0).boot + i / 10,
            };
            let tick = loop {
                match s.try_issue(&p, wall, 1) {
                    Ok(i) => break i.first,
                    Err(Miss::Contended) => continue,
                    Err(Miss::Slow) => match s.try_issue_checked(&p, r, 1, 2000).0 {
                        Outcome::Issued(i) => break i.first,
                        other => panic!("{other:?} at {i}"),
                    },
                }
            };
            assert!(tick > last);
            last = tick;
        }
        assert_eq!(s.steps_back.load(Relaxed), 1);
    }

    #[test]
    fn seata_ids_of_each_worker_strictly_increase_through_bursts_and_a_step_back() {
        // The generator counts ticks whatever the order of the fields; in Seata's layout a
        // worker's ids are its ticks under its worker id, so they increase as the ticks do,
        // and every id of a worker is below every id of the next one.
        let s_layout = Layout::SEATA;
        let p = Params::new(s_layout);
        let workers: Vec<(u32, Slot)> = [0, 1, 511, 1023]
            .into_iter()
            .map(|w| (w, open(&p, u64::MAX)))
            .collect();
        let mut last = vec![i64::MIN; workers.len()];
        let mut walls: Vec<u64> = (0..3000).map(|i| T0 + i).collect();
        walls.extend((0..3000).map(|i| T0 + 2000 + i / 4)); // a burst: 4 ms of calls per ms
        walls.extend((0..3000).map(|i| T0 - 3_600_000 + i)); // the clock an hour back
        for (n, &wall) in walls.iter().enumerate() {
            for (k, (worker, slot)) in workers.iter().enumerate() {
                let tick = one(slot, &p, wall).unwrap_or_else(|e| panic!("{e:?} at {n}"));
                let id = s_layout.id_from_tick(tick, *worker);
                assert!(id > last[k], "worker {worker} at {n}");
                assert_eq!(s_layout.decompose(id).unwrap().worker, *worker);
                assert_eq!(s_layout.tick_of_id(id), Ok(tick));
                last[k] = id;
            }
        }
        for k in 1..workers.len() {
            assert!(last[k - 1] < s_layout.compose(0, workers[k].0, 0));
        }
    }

    #[test]
    fn the_end_of_the_layout_is_refused_not_wrapped() {
        let p = params();
        let s = open(&p, u64::MAX);
        let end = L.max_time();
        let r = Readings {
            wall: end,
            boot: BOOT,
        };
        // The last unit's ticks but the very last, which is kept unused.
        assert!(matches!(
            s.try_issue_checked(&p, r, 4095, 2000).0,
            Outcome::Issued(_)
        ));
        assert_eq!(s.try_issue_checked(&p, r, 1, 2000).0, Outcome::Exhausted);
        let past = Readings {
            wall: end + 1,
            boot: BOOT,
        };
        assert_eq!(
            open(&p, u64::MAX).try_issue_checked(&p, past, 1, 2000).0,
            Outcome::Exhausted
        );
    }

    #[test]
    fn a_followed_jump_records_where_it_began() {
        let p = params();
        let s = open(&p, u64::MAX);
        let mut boot = BOOT;
        s.try_issue_checked(&p, Readings { wall: T0, boot }, 5, 2000);
        let glitch = T0 + 1_000_000_000;
        let mut before_jump = 0;
        while s.jumps.load(Relaxed) == 0 {
            // Held: ids follow the reference clock, one a second, until the jump is followed.
            before_jump = s.last();
            boot += 1000;
            let r = Readings {
                wall: glitch + (boot - BOOT),
                boot,
            };
            s.try_issue_checked(&p, r, 1, 2000);
            assert!(boot < BOOT + 20_000, "the jump was never followed");
        }
        assert_eq!(s.jump_base.load(Relaxed), before_jump + 1);
        assert_eq!(s.jump_from.load(Relaxed), (glitch + (boot - BOOT)) << 12);
        // The call that followed it lost its compare-and-swap to the move; the next id is at it.
        let r = Readings {
            wall: glitch + (boot - BOOT),
            boot,
        };
        match s.try_issue_checked(&p, r, 1, 2000).0 {
            Outcome::Issued(i) => assert_eq!(i.first, s.jump_from.load(Relaxed)),
            other => panic!("{other:?}"),
        }
        assert!(s.dirty.load(Relaxed));
    }
}

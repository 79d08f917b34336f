//! The mark writer's rules: when a worker's high-water mark is raised and to what, what a clean
//! stop persists, and how an administrator restores or rewinds a worker. Pure Rust over the
//! same [`Slot`]s the backends use; the process that persists the result is the mark writer (`src/marks/writer/`) in the
//! extension, the storage `src/marks/marks_table.rs`.
//!
//! **The mark** of a worker is a tick: every tick the worker has issued is below it (or in its
//! reserved range, see [`rewind`]), and it is durable before a backend may issue below it. The
//! writer keeps it [`MARK_AHEAD_MS`](crate::generator::MARK_AHEAD_MS) ahead of where the worker
//! is and raises it once less than half of that is left, so while ids flow at any ordinary
//! rate the raise lands long before the old mark is reached; a backend waits only for its
//! worker's first id after a start or a long idle spell, or in a burst that outruns the writer.
//! A worker idle for longer than that lets its mark lapse, so an idle server writes nothing.
//!
//! A clean stop closes every worker and persists one past its last tick, so a normal restart
//! resumes exactly where it stopped; after a crash ids resume at most a mark's reach ahead.

use crate::generator::{Params, Slot, CLOSED};
use std::sync::atomic::Ordering::*;

/// One worker's row in the marks table, all in ticks (0: none).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Row {
    pub mark: u64,
    pub jump_from: u64,
    pub jump_base: u64,
    pub reserved_from: u64,
    pub reserved_to: u64,
}

/// The header fields of a marks table that its seal covers, besides its rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header<'a> {
    pub format: i32,
    pub layout: &'a str,
    pub token: u64,
    pub generation: u64,
    /// The registry the server last leased from and the highest epoch it saw there (sealed
    /// from format 3 on).
    pub seen: crate::lease::Seen,
}

/// The seal of a marks table: SipHash-2-4, under the key only the data directory holds, of
/// its header and its rows in worker order (rows equal to `Row::default()` are not in the
/// table and not counted). The mark writer stores it in the header with every write, so a
/// table whose rows or header were changed since, through SQL, is told apart from the one it
/// wrote (`startup::decide`).
pub fn seal<'a>(
    key: &[u8; 16],
    header: &Header,
    rows: impl IntoIterator<Item = (u32, &'a Row)>,
) -> u64 {
    let mut bytes = Vec::new();
    bytes.extend_from_slice(&header.format.to_le_bytes());
    bytes.extend_from_slice(&(header.layout.len() as u64).to_le_bytes());
    bytes.extend_from_slice(header.layout.as_bytes());
    bytes.extend_from_slice(&header.token.to_le_bytes());
    bytes.extend_from_slice(&header.generation.to_le_bytes());
    if header.format >= 3 {
        bytes.extend_from_slice(&header.seen.registry.to_le_bytes());
        bytes.extend_from_slice(&header.seen.epoch.to_le_bytes());
    }
    for (worker, row) in rows {
        if *row == Row::default() {
            continue;
        }
        bytes.extend_from_slice(&worker.to_le_bytes());
        for tick in [
            row.mark,
            row.jump_base,
            row.jump_from,
            row.reserved_from,
            row.reserved_to,
        ] {
            bytes.extend_from_slice(&tick.to_le_bytes());
        }
    }
    crate::siphash::siphash24(key, &bytes)
}

/// Sets up a worker from its row, when the marks are loaded after a start, and
/// opens it. Nothing can be issued until the writer raises the mark past `mark`.
pub fn load(slot: &Slot, row: &Row) {
    slot.mark.store(row.mark, Release);
    slot.jump_from.store(row.jump_from, Relaxed);
    slot.jump_base.store(row.jump_base, Relaxed);
    slot.reserved_from.store(row.reserved_from, Relaxed);
    slot.reserved_to.store(row.reserved_to, Relaxed);
    slot.word.store(row.mark.saturating_sub(1), Release);
}

/// The row of a worker as it stands, with `mark` as its mark. A reserved
/// range below the mark is behind the worker for good and is not kept any more.
pub fn row(slot: &Slot, mark: u64) -> Row {
    let (reserved_from, reserved_to) = match slot.reserved_to.load(Relaxed) {
        to if mark > to => (0, 0),
        to => (slot.reserved_from.load(Relaxed), to),
    };
    Row {
        mark,
        jump_from: slot.jump_from.load(Relaxed),
        jump_base: slot.jump_base.load(Relaxed),
        reserved_from,
        reserved_to,
    }
}

/// The mark to persist for a worker now, if it needs raising: a caller waits for it, or the
/// worker is in use and less than half a mark's reach is left. `clock` is the time now.
pub fn next_mark(slot: &Slot, p: &Params, clock: u64) -> Option<u64> {
    let word = slot.word.load(Acquire);
    if word & CLOSED != 0 {
        return None;
    }
    skip_reserved(slot);
    let last = slot.last();
    let mark = slot.mark.load(Acquire);
    let waiting_for = slot.waiting_for.load(SeqCst);
    let clock_tick = clock.min(p.tick_limit >> p.seq_bits) << p.seq_bits;
    let horizon = last.max(clock_tick).max(waiting_for);
    let waited_for = waiting_for != 0 && waiting_for >= mark;
    let in_use = slot.issued.load(Relaxed) > 0 && mark > horizon && mark - horizon < p.low_ticks;
    let cap = slot.cap.load(Acquire).min(p.tick_limit);
    if !(waited_for || in_use) || mark >= cap {
        return None;
    }
    let mut target = (horizon + p.mark_ticks).min(cap);
    let reserved_from = slot.reserved_from.load(Relaxed);
    if reserved_from != 0 && last < reserved_from {
        // Never across the reserved range: the worker jumps it when it gets there.
        target = target.min(reserved_from);
    }
    (target > mark).then_some(target)
}

/// What the writer should persist for a worker now, given what the table holds: a raised mark, or
/// a change a clock jump or an administrator made. `None`: nothing.
pub fn row_to_write(slot: &Slot, p: &Params, clock: u64, on_disk: &Row) -> Option<Row> {
    let target = next_mark(slot, p, clock);
    let dirty = slot.dirty.swap(false, AcqRel);
    let now = row(slot, target.unwrap_or_else(|| slot.mark.load(Acquire)));
    (target.is_some() || (dirty && now != *on_disk)).then_some(now)
}

/// When a caller needs ticks in the reserved range, moves the worker past it. The range is
/// forgotten only once a mark above it is durable (`grant`); until then a clean stop or a
/// crash keeps it persisted.
fn skip_reserved(slot: &Slot) {
    let from = slot.reserved_from.load(Relaxed);
    if from == 0 || slot.waiting_for.load(SeqCst) < from || slot.last() >= from {
        return;
    }
    slot.word.fetch_max(slot.reserved_to.load(Relaxed), AcqRel);
}

/// Records that `mark` is durable: raises the worker's mark to it and clears the request it
/// met.
pub fn mark_written(slot: &Slot, mark: u64) {
    slot.mark.fetch_max(mark, AcqRel);
    if slot.reserved_from.load(Relaxed) != 0 && mark > slot.reserved_to.load(Relaxed) {
        // The worker is past the range, durably.
        slot.reserved_from.store(0, Relaxed);
        slot.reserved_to.store(0, Relaxed);
    }
    let waiting_for = slot.waiting_for.load(Acquire);
    if waiting_for != 0 && waiting_for < mark {
        let _ = slot
            .waiting_for
            .compare_exchange(waiting_for, 0, AcqRel, Relaxed);
    }
}

/// At a clean stop: closes the worker, so nothing more is issued, and returns the mark to
/// persist: one past its last tick if it issued ids since the start, else its mark as loaded.
pub fn close(slot: &Slot) -> u64 {
    let word = slot.word.fetch_or(CLOSED, AcqRel);
    let mark = slot.mark.load(Acquire);
    if slot.issued.load(Relaxed) > 0 {
        let exact = ((word & !CLOSED) + 1).min(mark);
        slot.mark.store(exact, Release);
        exact
    } else {
        mark
    }
}

/// Opens a worker closed by [`close`] again (the writer restarted without a server restart).
pub fn reopen(slot: &Slot) {
    slot.word.fetch_and(!CLOSED, AcqRel);
}

/// Raises a worker's floor: from now on it issues only ticks at or above `floor`. Returns the
/// mark the writer must persist before the worker issues again.
pub fn restore(slot: &Slot, p: &Params, floor: u64) -> u64 {
    let floor = slot.past_reserved(floor.min(p.tick_limit));
    let mut word = slot.word.load(Acquire);
    loop {
        let raised = (word & CLOSED) | (word & !CLOSED).max(floor.saturating_sub(1));
        match slot.word.compare_exchange(word, raised, AcqRel, Acquire) {
            Ok(_) => break,
            Err(now) => word = now,
        }
    }
    // The worker's clock check starts over from its new floor.
    slot.tk_started.store(false, Relaxed);
    let mark = slot.mark.load(Acquire).max(floor);
    slot.wait_for(floor.saturating_sub(1));
    mark
}

/// Why a worker cannot be rewound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RewindRefusal {
    /// No forward jump was followed since the last rewind.
    NoJump,
    /// The clock still reads at or past where the jump took the worker.
    ClockStillAhead { jump_from: u64 },
    /// The worker still skips the ids of an earlier rewind, which it has not reached yet.
    StillReserved { from: u64, to: u64 },
    /// No id was issued after the jump (the server restarted below it since): nothing to
    /// undo; the jump is forgotten.
    NothingIssued,
}

/// What a rewind did, in ticks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rewound {
    /// The worker continues from here.
    pub resume: u64,
    /// The ticks issued after the jump, now skipped when the worker reaches them.
    pub reserved_from: u64,
    pub reserved_to: u64,
}

/// Undoes a followed forward jump of the clock: the worker goes back to just past its last
/// tick before the jump (or the clock, if later), and the ticks it issued after the jump are
/// *reserved*: it skips them when it reaches them, in however many years. So no id repeats,
/// and new ids carry the right time again. `clock` is the (corrected) time now.
///
/// The worker is closed while this runs; its mark drops to `resume`, so nothing is issued
/// until the writer has persisted the new mark together with the reserved range.
pub fn rewind(slot: &Slot, p: &Params, clock: u64) -> Result<Rewound, RewindRefusal> {
    let jump_from = slot.jump_from.load(Relaxed);
    if jump_from == 0 {
        return Err(RewindRefusal::NoJump);
    }
    let (old_from, old_to) = (
        slot.reserved_from.load(Relaxed),
        slot.reserved_to.load(Relaxed),
    );
    if old_from != 0 {
        // One range at a time: two could not be told apart from one with free ticks inside.
        return Err(RewindRefusal::StillReserved {
            from: old_from,
            to: old_to,
        });
    }
    let resume = slot
        .jump_base
        .load(Relaxed)
        .max(clock.min(p.tick_limit >> p.seq_bits) << p.seq_bits);
    if resume >= jump_from {
        return Err(RewindRefusal::ClockStillAhead { jump_from });
    }
    let word = slot.word.fetch_or(CLOSED, AcqRel);
    let last = word & !CLOSED;
    if last < jump_from {
        // Nothing was issued after the jump (the worker restarted below it since).
        slot.jump_from.store(0, Relaxed);
        slot.jump_base.store(0, Relaxed);
        slot.dirty.store(true, Release);
        reopen(slot);
        return Err(RewindRefusal::NothingIssued);
    }
    let (reserved_from, reserved_to) = (jump_from, last);
    slot.reserved_from.store(reserved_from, Relaxed);
    slot.reserved_to.store(reserved_to, Relaxed);
    slot.jump_from.store(0, Relaxed);
    slot.jump_base.store(0, Relaxed);
    slot.mark.store(resume, Release);
    slot.waiting_for.store(0, SeqCst);
    slot.tk_started.store(false, Relaxed);
    slot.dirty.store(true, Release);
    slot.word.store(resume - 1, Release);
    Ok(Rewound {
        resume,
        reserved_from,
        reserved_to,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::generator::{Miss, Outcome};
    use crate::layout::Layout;
    use crate::timekeeper::Readings;

    const T0: u64 = 60_000_000_000;

    /// A worker with its mark writer, run by hand: `stored` is what is durable.
    struct Node {
        p: Params,
        slot: Slot,
        stored: Row,
        boot: u64,
    }

    impl Node {
        fn started(stored: Row) -> Node {
            let n = Node {
                p: Params::new(Layout::SNOWFLAKE),
                slot: Slot::default(),
                stored,
                boot: 5_000_000,
            };
            load(&n.slot, &stored);
            n
        }
        fn write(&mut self, clock: u64) {
            if let Some(now) = row_to_write(&self.slot, &self.p, clock, &self.stored) {
                self.stored = now;
                mark_written(&self.slot, now.mark);
            }
        }
        /// One id at wall clock `clock`, writing marks as the writer would when asked.
        fn id(&mut self, clock: u64) -> u64 {
            self.boot += 1;
            let r = Readings {
                wall: clock,
                boot: self.boot,
            };
            for _ in 0..10 {
                let outcome = match self.slot.try_issue(&self.p, clock, 1) {
                    Ok(i) => Outcome::Issued(i),
                    Err(Miss::Contended) => continue,
                    Err(Miss::Slow) => self.slot.try_issue_checked(&self.p, r, 1, 2000).0,
                };
                match outcome {
                    Outcome::Issued(i) => {
                        assert!(
                            i.first < self.stored.mark,
                            "tick {} issued at or past the durable mark {}",
                            i.first,
                            self.stored.mark
                        );
                        if i.low {
                            self.write(clock);
                        }
                        return i.first;
                    }
                    Outcome::NeedMark { through } => {
                        self.slot.wait_for(through);
                        self.write(clock);
                    }
                    other => panic!("{other:?}"),
                }
            }
            panic!("no id after 10 tries");
        }
        fn crash(&self) -> Node {
            Node::started(self.stored)
        }
        fn clean_stop(&mut self) -> Node {
            self.stored.mark = close(&self.slot);
            Node::started(self.stored)
        }
    }

    #[test]
    fn a_fresh_worker_needs_a_mark_before_its_first_id() {
        let mut n = Node::started(Row::default());
        assert_eq!(
            next_mark(&n.slot, &n.p, T0),
            None,
            "an unused worker writes nothing"
        );
        assert_eq!(n.id(T0), T0 << 12);
        assert_eq!(n.stored.mark, (T0 << 12) + n.p.mark_ticks);
        assert_eq!(
            n.slot.waiting_for.load(Relaxed),
            0,
            "the grant cleared the request"
        );
    }

    #[test]
    fn a_mark_is_raised_when_half_is_left_and_not_before() {
        let mut n = Node::started(Row::default());
        n.id(T0);
        let first = n.stored.mark;
        n.id(T0 + 999);
        assert_eq!(n.stored.mark, first, "raised too early");
        n.id(T0 + 1001);
        assert!(n.stored.mark > first, "not raised with less than half left");
    }

    #[test]
    fn an_idle_worker_lets_its_mark_lapse() {
        let mut n = Node::started(Row::default());
        n.id(T0);
        assert_eq!(next_mark(&n.slot, &n.p, T0 + 60_000), None);
    }

    #[test]
    fn ids_never_go_back_across_crashes_clean_stops_and_clock_steps() {
        let mut n = Node::started(Row::default());
        let mut last = 0;
        let mut check = |tick: u64| {
            assert!(tick > last, "{tick} after {last}");
            last = tick;
        };
        for i in 0..10_000 {
            check(n.id(T0 + i / 10));
        }
        let mut n = n.crash();
        let early = T0 - 3_600_000;
        for i in 0..10_000 {
            check(n.id(early + i / 10));
        }
        let mut n = n.crash();
        check(n.id(early + 2000));
        let mut n = n.clean_stop();
        check(n.id(T0 + 50_000));
        let mut n = n.crash();
        check(n.id(T0));
    }

    #[test]
    fn a_clean_stop_persists_exactly_the_last_tick() {
        let mut n = Node::started(Row::default());
        let last = n.id(T0);
        let mut n = n.clean_stop();
        assert_eq!(n.stored.mark, last + 1);
        assert_eq!(n.id(T0 + 1), (T0 + 1) << 12);
        // An unused worker keeps the mark it was loaded with.
        let idle = Node::started(Row {
            mark: 12345,
            ..Row::default()
        });
        assert_eq!(close(&idle.slot), 12345);
    }

    #[test]
    fn after_a_crash_ids_resume_at_most_a_marks_reach_ahead() {
        let mut n = Node::started(Row::default());
        for i in 0..1000 {
            n.id(T0 + i);
        }
        let mut n = n.crash();
        let tick = n.id(T0 + 1000);
        assert!(tick > (T0 + 999) << 12 && tick <= (T0 + 1000) << 12 | n.p.mark_ticks);
    }

    #[test]
    fn a_raised_floor_holds_across_a_crash() {
        let mut n = Node::started(Row::default());
        n.id(T0);
        let floor = (T0 + 3_600_000) << 12;
        let need = restore(&n.slot, &n.p, floor);
        assert_eq!(need, floor.max(n.slot.mark.load(Relaxed)));
        n.write(T0);
        assert!(n.stored.mark > floor);
        let tick = n.id(T0 + 1);
        assert_eq!(tick, floor);
        let mut n = n.crash();
        assert!(n.id(T0 + 2) > tick);
    }

    #[test]
    fn a_rewind_returns_to_the_clock_and_skips_the_reserved_ticks_when_it_reaches_them() {
        let mut n = Node::started(Row::default());
        let before = n.id(T0);
        // The worker follows a jump to 2093 and issues there.
        let glitch = T0 + 2_100_000_000_000 / 1000;
        let (from, base) = (glitch << 12, before + 1);
        n.slot.jump_from.store(from, Relaxed);
        n.slot.jump_base.store(base, Relaxed);
        n.slot.word.store(from - 1, Relaxed);
        n.slot.mark.store(from, Relaxed);
        n.slot.tk_started.store(false, Relaxed);
        n.stored.mark = from;
        let in_glitch: Vec<u64> = (0..5).map(|_| n.id(glitch)).collect();
        assert_eq!(in_glitch[0], from);
        // Rewinding while the clock still reads 2093 is refused.
        assert_eq!(
            rewind(&n.slot, &n.p, glitch + 1),
            Err(RewindRefusal::ClockStillAhead { jump_from: from })
        );
        let r = rewind(&n.slot, &n.p, T0 + 10).unwrap();
        assert_eq!(
            r,
            Rewound {
                resume: (T0 + 10) << 12,
                reserved_from: from,
                reserved_to: in_glitch[4]
            }
        );
        assert_eq!(rewind(&n.slot, &n.p, T0 + 10), Err(RewindRefusal::NoJump));
        n.write(T0 + 10);
        assert_eq!(n.stored.reserved_from, from);
        assert!(n.stored.mark <= from, "no mark across the reserved range");
        let back = n.id(T0 + 10);
        assert_eq!(back, (T0 + 10) << 12, "new ids carry the right time again");
        // Years later the worker reaches the reserved range and jumps over it.
        let mut n = n.crash();
        let tick = n.id(glitch - 1);
        assert!(tick < from);
        let mut last = tick;
        for _ in 0..3 {
            let t = n.id(glitch);
            assert!(t > in_glitch[4] && t > last, "{t} repeats a reserved tick");
            last = t;
        }
        assert_eq!(
            n.stored.reserved_from, 0,
            "the range is forgotten once passed"
        );
    }

    /// A node whose worker followed a jump to `glitch`, issued five ids there, and was rewound
    /// to `T0 + 10`; returns it and the reserved range.
    fn rewound() -> (Node, u64, u64) {
        let mut n = Node::started(Row::default());
        let before = n.id(T0);
        let glitch = T0 + 2_100_000_000_000 / 1000;
        let from = glitch << 12;
        n.slot.jump_from.store(from, Relaxed);
        n.slot.jump_base.store(before + 1, Relaxed);
        n.slot.word.store(from - 1, Relaxed);
        n.slot.mark.store(from, Relaxed);
        n.slot.tk_started.store(false, Relaxed);
        n.stored.mark = from;
        let last = (0..5).map(|_| n.id(glitch)).last().unwrap();
        rewind(&n.slot, &n.p, T0 + 10).unwrap();
        n.write(T0 + 10);
        (n, from, last)
    }

    #[test]
    fn a_reserved_range_stays_persisted_until_a_mark_above_it_is() {
        let (n, from, to) = rewound();
        // The worker reaches the range: it moves past it, but the write of the new mark fails.
        n.slot.word.store(from - 1, Relaxed);
        n.slot.wait_for(from);
        let target = next_mark(&n.slot, &n.p, T0 + 11).unwrap();
        assert!(target > to);
        assert_eq!(
            n.slot.reserved_from.load(Relaxed),
            from,
            "forgotten before it was durable"
        );
        // A clean stop now persists the range with the lower mark.
        let mark = close(&n.slot);
        let stopped = row(&n.slot, mark);
        assert!(mark <= from);
        assert_eq!((stopped.reserved_from, stopped.reserved_to), (from, to));
        // Once a mark above the range is durable, it is forgotten.
        mark_written(&n.slot, target);
        assert_eq!(n.slot.reserved_from.load(Relaxed), 0);
        assert_eq!(row(&n.slot, target).reserved_from, 0);
    }

    #[test]
    fn no_move_of_the_word_lands_in_a_reserved_range() {
        let (n, from, to) = rewound();
        assert_eq!(n.slot.past_reserved(from + 3), to + 1);
        assert_eq!(n.slot.past_reserved(from - 1), from - 1);
        // A restore into the range, and another followed jump into it, both land past it.
        let need = restore(&n.slot, &n.p, from + 2);
        assert!(need > to && n.slot.last() >= to);
        let (n, from, to) = rewound();
        n.slot.word.store(n.slot.last(), Relaxed);
        n.slot.record_jump(&n.p, from + 1);
        assert!(
            n.slot.last() >= to,
            "a jump landed inside the reserved ticks"
        );
        // And a second rewind while the first range is pending is refused.
        n.slot.jump_from.store(to + 100, Relaxed);
        n.slot.word.store(to + 200, Relaxed);
        assert_eq!(
            rewind(&n.slot, &n.p, T0 + 20),
            Err(RewindRefusal::StillReserved { from, to })
        );
    }

    #[test]
    fn a_rewind_of_a_jump_nothing_was_issued_after_forgets_it() {
        let mut n = Node::started(Row::default());
        let last = n.id(T0);
        n.slot.jump_from.store(last + 1_000_000, Relaxed);
        n.slot.jump_base.store(last, Relaxed);
        assert_eq!(rewind(&n.slot, &n.p, T0), Err(RewindRefusal::NothingIssued));
        assert_eq!(n.slot.jump_from.load(Relaxed), 0);
        assert!(!n.slot.is_closed());
        assert!(n.id(T0 + 1) > last);
    }

    #[test]
    fn a_rewind_drops_a_pending_request_that_would_undo_it() {
        let mut n = Node::started(Row::default());
        let before = n.id(T0);
        let glitch = T0 + 2_100_000_000_000 / 1000;
        let from = glitch << 12;
        n.slot.jump_from.store(from, Relaxed);
        n.slot.jump_base.store(before + 1, Relaxed);
        n.slot.word.store(from + 10, Relaxed);
        n.slot.wait_for(from + 4000);
        rewind(&n.slot, &n.p, T0 + 10).unwrap();
        assert_eq!(n.slot.waiting_for.load(Relaxed), 0);
        n.write(T0 + 10);
        assert!(n.slot.last() < from, "the rewind was undone at once");
    }

    #[test]
    fn the_seal_sees_a_row_or_the_header_changed_and_needs_the_key() {
        let row = |mark| Row {
            mark,
            ..Row::default()
        };
        let key = [9u8; 16];
        let header = Header {
            format: 3,
            layout: "snowflake",
            token: 42,
            generation: 7,
            seen: crate::lease::Seen {
                registry: 5,
                epoch: 9,
            },
        };
        let table = [(1, row(100)), (2, row(200))];
        let sealed =
            |h: &Header, rows: &[(u32, Row)]| seal(&key, h, rows.iter().map(|(w, r)| (*w, r)));
        let s = sealed(&header, &table);
        assert_eq!(
            s,
            sealed(
                &header,
                &[(1, row(100)), (2, row(200)), (3, Row::default())]
            )
        );
        assert_ne!(s, sealed(&header, &[(1, row(100))]));
        assert_ne!(s, sealed(&header, &[(1, row(100)), (2, row(201))]));
        assert_ne!(
            s,
            sealed(&header, &[(1, row(100)), (2, row(200)), (3, row(1))])
        );
        assert_ne!(s, sealed(&header, &[(2, row(100)), (1, row(200))]));
        assert_ne!(s, sealed(&header, &[]));
        assert_ne!(
            s,
            sealed(
                &Header {
                    format: 1,
                    ..header
                },
                &table
            )
        );
        assert_ne!(
            s,
            sealed(
                &Header {
                    generation: 8,
                    ..header
                },
                &table
            )
        );
        assert_ne!(
            s,
            sealed(
                &Header {
                    token: 43,
                    ..header
                },
                &table
            )
        );
        assert_ne!(
            s,
            sealed(
                &Header {
                    layout: "sonyflake",
                    ..header
                },
                &table
            )
        );
        assert_ne!(
            s,
            seal(&[8u8; 16], &header, table.iter().map(|(w, r)| (*w, r)))
        );
        // The registry seen is sealed too (a lowered epoch would hide a registry that went
        // back in time), from format 3 on; format 2 tables are sealed as before.
        for seen in [
            crate::lease::Seen {
                registry: 5,
                epoch: 8,
            },
            crate::lease::Seen {
                registry: 6,
                epoch: 9,
            },
        ] {
            assert_ne!(s, sealed(&Header { seen, ..header }, &table));
        }
        let two = Header {
            format: 2,
            ..header
        };
        assert_eq!(
            sealed(&two, &table),
            sealed(
                &Header {
                    seen: Default::default(),
                    ..two
                },
                &table
            )
        );
    }
}

//! One worker's id stream as a state machine: pure Rust, driven by a clock reading passed in, so
//! that every rule below is unit-tested against a fake clock without a server.
//!
//! The state is a single counter of *ticks* (`time << 12 | sequence`, see `layout.rs`). The next
//! id takes the tick `max(last + 1, now << 12)`:
//!
//! * normally `now << 12` wins and the id carries the current millisecond with sequence 0, or the
//!   next sequence number when several ids fall in one millisecond;
//! * after 4096 ids in one millisecond `last + 1` carries into the time field: the worker
//!   *borrows* the next millisecond instead of waiting for it (Seata, pgEdge), so nothing ever
//!   sleeps, least of all while holding the lock;
//! * when the wall clock steps back, `last + 1` keeps winning: ids go on increasing, the time
//!   field runs ahead of the clock until the clock catches up, and nothing stalls. Each step is
//!   counted and reported once.
//!
//! Ids are therefore strictly increasing for a worker in the order they are issued, whatever the
//! clock does. Across a restart the same holds only if `last` survives it: the *lease* is the
//! durable part. A worker may hand out a tick only below `lease`, a bound that the persistence
//! layer has written to disk before raising it (see `lease.rs`); after a restart the worker starts
//! from the persisted bound.

use crate::layout::{SEQ_BITS, TICK_LIMIT};

/// The state of one worker id. It lives in shared memory, one per worker, under the LWLock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C)]
pub struct Worker {
    /// The tick of the last id issued (or, after a restart, one below the persisted bound).
    pub last: u64,
    /// Ticks below this may be issued; raising it is the persistence layer's job.
    pub lease: u64,
    /// The highest tick a refused reservation needed (0: none pending): what the next lease
    /// must cover.
    pub wanted: u64,
    /// The last clock reading seen, in milliseconds since the epoch, to notice steps back.
    pub last_clock_ms: u64,
    /// Ids issued since the server started.
    pub issued: u64,
    /// How many times the clock was seen stepping back.
    pub clock_steps_back: u64,
    /// Milliseconds the time field was carried past the wall clock by sequence overflow.
    pub borrowed_ms: u64,
}

/// Why a reservation cannot be granted now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The time field would pass the layout's last millisecond (September 2094).
    Exhausted,
    /// Ticks up to and including `through` need a lease that reaches beyond them.
    NeedLease { through: u64 },
}

impl Worker {
    /// A worker that has issued nothing and may issue anything: the state before any persisted
    /// bound is known.
    pub const FRESH: Worker = Worker {
        last: 0,
        lease: TICK_LIMIT,
        wanted: 0,
        last_clock_ms: 0,
        issued: 0,
        clock_steps_back: 0,
        borrowed_ms: 0,
    };

    /// A worker restarting after a server restart: every tick it issues must be at or above
    /// `floor`, the bound persisted before the restart, and it has no lease yet.
    pub fn restarted(floor: u64) -> Worker {
        Worker {
            last: floor.saturating_sub(1),
            lease: floor,
            ..Worker::FRESH
        }
    }

    /// Notes a clock reading. Returns how far the clock stepped back since the previous reading,
    /// if it did. The caller reads the clock while holding the lock, so the readings of all
    /// backends are seen in order and a slow backend is never mistaken for a clock step.
    pub fn observe_clock(&mut self, now_ms: u64) -> Option<u64> {
        let previous = self.last_clock_ms;
        self.last_clock_ms = now_ms;
        if now_ms < previous {
            self.clock_steps_back += 1;
            Some(previous - now_ms)
        } else {
            None
        }
    }

    /// Reserves `n >= 1` consecutive ticks and returns the first. Consecutive ticks make
    /// consecutive, increasing ids. A refusal changes nothing but `wanted`.
    pub fn reserve(&mut self, now_ms: u64, n: u64) -> Result<u64, Refusal> {
        debug_assert!(n >= 1);
        let clock_tick = now_ms.min(TICK_LIMIT >> SEQ_BITS) << SEQ_BITS;
        let first = (self.last + 1).max(clock_tick);
        let end = first.checked_add(n).ok_or(Refusal::Exhausted)?;
        if end > TICK_LIMIT {
            return Err(Refusal::Exhausted);
        }
        if end > self.lease {
            self.wanted = self.wanted.max(end - 1);
            return Err(Refusal::NeedLease { through: end - 1 });
        }
        let already = (self.last >> SEQ_BITS).max(now_ms);
        self.borrowed_ms += ((end - 1) >> SEQ_BITS).saturating_sub(already);
        self.last = end - 1;
        self.issued += n;
        Ok(first)
    }

    /// Milliseconds the time field of the last id runs ahead of the wall clock (0 if behind).
    pub fn ahead_ms(&self, now_ms: u64) -> u64 {
        (self.last >> SEQ_BITS).saturating_sub(now_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::{decompose, id_from_tick, MAX_SEQ, MAX_TIME_MS};

    const T0: u64 = 60_000_000_000; // some time in 2026, in ms since the epoch

    fn ids(w: &mut Worker, now_ms: u64, n: u64) -> Vec<i64> {
        (0..n)
            .map(|_| id_from_tick(w.reserve(now_ms, 1).unwrap(), 7))
            .collect()
    }

    fn assert_strictly_increasing(ids: &[i64]) {
        for pair in ids.windows(2) {
            assert!(pair[0] < pair[1], "{} is not below {}", pair[0], pair[1]);
        }
    }

    #[test]
    fn first_id_carries_the_clock_and_sequence_zero() {
        let mut w = Worker::FRESH;
        let id = id_from_tick(w.reserve(T0, 1).unwrap(), 7);
        let p = decompose(id).unwrap();
        assert_eq!((p.ms, p.worker, p.seq), (T0, 7, 0));
        assert_eq!(w.issued, 1);
    }

    #[test]
    fn ids_in_one_millisecond_count_up_the_sequence() {
        let mut w = Worker::FRESH;
        let got = ids(&mut w, T0, 10);
        assert_strictly_increasing(&got);
        let seqs: Vec<u16> = got.iter().map(|&id| decompose(id).unwrap().seq).collect();
        assert_eq!(seqs, (0..10).collect::<Vec<u16>>());
    }

    #[test]
    fn a_new_millisecond_restarts_the_sequence() {
        let mut w = Worker::FRESH;
        ids(&mut w, T0, 5);
        let p = decompose(ids(&mut w, T0 + 1, 1)[0]).unwrap();
        assert_eq!((p.ms, p.seq), (T0 + 1, 0));
        assert_eq!(w.borrowed_ms, 0);
    }

    #[test]
    fn overflow_borrows_the_next_millisecond_without_waiting() {
        let mut w = Worker::FRESH;
        let got = ids(&mut w, T0, 4096 * 3 + 10);
        assert_strictly_increasing(&got);
        let last = decompose(*got.last().unwrap()).unwrap();
        assert_eq!((last.ms, last.seq), (T0 + 3, 9));
        assert_eq!(decompose(got[4095]).unwrap().seq, MAX_SEQ);
        assert_eq!(decompose(got[4096]).unwrap().ms, T0 + 1);
        assert_eq!(w.borrowed_ms, 3);
        assert_eq!(w.ahead_ms(T0), 3);
        // When the clock passes the borrowed milliseconds, ids follow the clock again.
        let p = decompose(ids(&mut w, T0 + 10, 1)[0]).unwrap();
        assert_eq!((p.ms, p.seq), (T0 + 10, 0));
        assert_eq!(w.borrowed_ms, 3);
    }

    #[test]
    fn a_batch_is_consecutive_and_counts_what_it_borrows() {
        let mut w = Worker::FRESH;
        let first = w.reserve(T0, 10_000).unwrap();
        assert_eq!(first, T0 << SEQ_BITS);
        assert_eq!(w.last, first + 9_999);
        assert_eq!(w.borrowed_ms, 2); // 10,000 ids span T0, T0+1 and T0+2
        assert_eq!(w.issued, 10_000);
        let next = w.reserve(T0, 1).unwrap();
        assert_eq!(next, first + 10_000);
    }

    #[test]
    fn clock_step_back_keeps_ids_increasing_and_is_reported_once() {
        let mut w = Worker::FRESH;
        assert_eq!(w.observe_clock(T0), None);
        let before = ids(&mut w, T0, 3);
        // The clock steps back an hour.
        let back = T0 - 3_600_000;
        assert_eq!(w.observe_clock(back), Some(3_600_000));
        assert_eq!(w.observe_clock(back + 1), None, "a step is reported once");
        let after = ids(&mut w, back + 1, 3);
        let mut all = before.clone();
        all.extend(&after);
        assert_strictly_increasing(&all);
        assert_eq!(w.clock_steps_back, 1);
        // No stall: ids come immediately, still in the last millisecond issued.
        assert_eq!(decompose(after[0]).unwrap().ms, T0);
        assert_eq!(w.borrowed_ms, 0);
        assert_eq!(w.ahead_ms(back + 1), 3_600_000 - 1);
    }

    #[test]
    fn ordinary_rates_after_a_step_back_do_not_stall_and_the_clock_catches_up() {
        // 10,000 ids a second for 5 seconds, clock 10 s behind: one id every 100 µs of clock.
        let mut w = Worker::FRESH;
        w.observe_clock(T0);
        ids(&mut w, T0, 1);
        let back = T0 - 10_000;
        let mut prev = id_from_tick(w.last, 7);
        for i in 0..50_000u64 {
            let now = back + i / 10;
            w.observe_clock(now);
            let id = id_from_tick(w.reserve(now, 1).unwrap(), 7);
            assert!(id > prev);
            prev = id;
        }
        // The time field crept ahead by 50,000 / 4096 = 12 ms while the clock moved 5 s.
        assert_eq!(decompose(prev).unwrap().ms, T0 + 12);
        assert_eq!(w.clock_steps_back, 1);
        // Once the clock is past the time field, ids are on the clock again.
        let p = decompose(ids(&mut w, T0 + 100, 1)[0]).unwrap();
        assert_eq!((p.ms, p.seq), (T0 + 100, 0));
    }

    #[test]
    fn borrowing_while_the_clock_is_behind_counts_only_new_milliseconds() {
        let mut w = Worker::FRESH;
        ids(&mut w, T0, 1);
        // Clock one second behind; 4096 more ids carry one millisecond past T0.
        ids(&mut w, T0 - 1000, 4096);
        assert_eq!(w.borrowed_ms, 1);
    }

    #[test]
    fn a_restarted_worker_never_issues_below_its_floor() {
        let floor = (T0 << SEQ_BITS) + 1234;
        let mut w = Worker::restarted(floor);
        assert_eq!(w.issued, 0);
        // No lease yet: the first reservation asks for one covering it.
        assert_eq!(
            w.reserve(T0 - 3_600_000, 1),
            Err(Refusal::NeedLease { through: floor })
        );
        assert_eq!(w.last, floor - 1, "a refusal issues nothing");
        assert_eq!(
            w.wanted, floor,
            "but records what the next lease must cover"
        );
        w.lease = floor + 100;
        assert_eq!(w.reserve(T0 - 3_600_000, 1), Ok(floor));
        // The clock moving past the floor takes over again, within the lease.
        w.lease = TICK_LIMIT;
        assert_eq!(w.reserve(T0 + 5, 1), Ok((T0 + 5) << SEQ_BITS));
    }

    #[test]
    fn a_reservation_past_the_lease_is_refused_whole() {
        let mut w = Worker::FRESH;
        w.lease = (T0 << SEQ_BITS) + 100;
        assert_eq!(w.reserve(T0, 100), Ok(T0 << SEQ_BITS));
        assert_eq!(
            w.reserve(T0, 1),
            Err(Refusal::NeedLease {
                through: (T0 << SEQ_BITS) + 100
            })
        );
        assert_eq!(w.issued, 100);
    }

    #[test]
    fn the_end_of_the_layout_is_refused_not_wrapped() {
        let mut w = Worker::FRESH;
        let last_ms = MAX_TIME_MS;
        let tick = w.reserve(last_ms, 4096).unwrap();
        assert!(id_from_tick(tick + 4095, 7) > 0);
        assert_eq!(w.reserve(last_ms, 1), Err(Refusal::Exhausted));
        // A clock far past 2094 is refused too, rather than overflowing into the sign bit.
        assert_eq!(
            { Worker::FRESH }.reserve(u64::MAX / 2, 1),
            Err(Refusal::Exhausted)
        );
        assert_eq!(
            { Worker::FRESH }.reserve(T0, u64::MAX),
            Err(Refusal::Exhausted)
        );
    }
}

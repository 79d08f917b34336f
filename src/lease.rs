//! Leases: a high-water mark kept on disk ahead of every id handed out, so that ids never go
//! backwards across a restart, a crash, or a clock set back while the server was down. Pure
//! rules and the file format; the process that writes the file is `lease_writer.rs`.
//!
//! Design
//! ------
//! Shared memory is lost when the server stops, and a server that comes back with its clock
//! behind the last id it issued would issue those ids again (snowid-postgres, Sonyflake and
//! Twitter all have this hole). So each worker may only hand out ticks below its *lease*, a
//! bound that is on disk, fsynced, before it is raised in shared memory. After any restart,
//! clean or not, each worker starts from its persisted bound, whatever the clock says.
//!
//! Leases reach `LEASE_MS` ahead of where a worker is, and are renewed once less than half of
//! that remains, by a background worker (the lease writer) that a backend wakes with a latch.
//! Backends never touch the disk: while ids flow at any ordinary rate the renewal lands long
//! before the old lease runs out. A backend waits (without the lock, checking for interrupts)
//! only when a worker has no lease at all: its first id after a restart, after more than a
//! lease of idleness, or in a burst that outruns the writer.
//!
//! A clean shutdown shrinks every lease to one past the last id issued and writes that, so a
//! normal restart resumes exactly on the clock; after a crash, ids resume at most `LEASE_MS`
//! ahead of it.
//!
//! Why a file and not WAL: a file needs no custom WAL resource manager and costs one 8 kB
//! write and one `fdatasync` per renewal. Its limit is physical replication: a standby's copy
//! of the file is the one `pg_basebackup` took, so a promoted standby is safe only once its
//! clock is past the primary's last id (README.md, "Guarantees and limits").
//!
//! The file: `snowflake_ext/lease.0` and `lease.1` in the data directory, written in turn, each
//! holding a generation number, the bound of every worker and a checksum. A write torn by a
//! crash fails its checksum, and the other file, one generation older, still bounds every id
//! issued, because no lease is granted until its write has been fsynced.

use crate::generator::Worker;
use crate::layout::{SEQ_BITS, TICK_LIMIT, WORKERS};

/// How far ahead of a worker a lease reaches.
pub const LEASE_MS: u64 = 2000;
const LEASE_TICKS: u64 = LEASE_MS << SEQ_BITS;

/// Where a worker is: the highest tick it has issued, is about to issue by the clock, or
/// waits for.
fn horizon(w: &Worker, now_ms: u64) -> u64 {
    let clock_tick = now_ms.min(TICK_LIMIT >> SEQ_BITS) << SEQ_BITS;
    w.last.max(clock_tick).max(w.wanted)
}

/// Whether the worker's lease should be extended now: a backend waits for it, or the worker is
/// in use and less than half a lease remains. A lease that lapsed while its worker was idle is
/// left alone until the worker is used again, so an idle server writes nothing.
#[inline]
pub fn low(w: &Worker, now_ms: u64) -> bool {
    if w.wanted > 0 {
        return true;
    }
    let at = horizon(w, now_ms);
    w.issued > 0 && w.lease > at && w.lease - at < LEASE_TICKS / 2 && w.lease < TICK_LIMIT
}

/// `low` right after a successful reservation, in the few instructions the hot path can afford:
/// the worker has then just issued `last`, which is at or past the clock.
#[inline]
pub fn low_after_issue(w: &Worker) -> bool {
    w.wanted > 0 || (w.lease - w.last < LEASE_TICKS / 2 && w.lease < TICK_LIMIT)
}

/// The bound a renewal persists for this worker.
pub fn target(w: &Worker, now_ms: u64) -> u64 {
    (horizon(w, now_ms) + LEASE_TICKS)
        .min(TICK_LIMIT)
        .max(w.lease)
}

/// Records that `persisted` is on disk: raises the lease to it, and clears the request it met.
pub fn grant(w: &mut Worker, persisted: u64) {
    w.lease = w.lease.max(persisted);
    if w.wanted < w.lease {
        w.wanted = 0;
    }
}

/// At a clean shutdown: shrinks the lease to one past the last tick issued, so that no further
/// id can be issued, and returns the bound to persist.
pub fn close(w: &mut Worker) -> u64 {
    if w.issued > 0 {
        w.lease = w.lease.min(w.last + 1);
    }
    w.lease
}

/// The state of every worker after a restart, from the persisted bounds.
pub fn restart(marks: &[u64; WORKERS]) -> [Worker; WORKERS] {
    std::array::from_fn(|i| Worker::restarted(marks[i]))
}

/// How far the clock is behind the persisted bounds at start-up, if it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClockBehind {
    /// The worker with the largest gap.
    pub worker: u16,
    pub gap_ms: u64,
    /// How many workers have their bound ahead of the clock.
    pub workers: usize,
}

pub fn clock_behind(marks: &[u64; WORKERS], now_ms: u64) -> Option<ClockBehind> {
    let mut found: Option<ClockBehind> = None;
    for (worker, &mark) in marks.iter().enumerate() {
        // The bound is exclusive: the last tick it covers is `mark - 1`.
        let gap = (mark.saturating_sub(1) >> SEQ_BITS).saturating_sub(now_ms);
        if mark == 0 || gap == 0 {
            continue;
        }
        let workers = found.map_or(0, |f| f.workers) + 1;
        found = Some(match found {
            Some(f) if f.gap_ms >= gap => ClockBehind { workers, ..f },
            _ => ClockBehind {
                worker: worker as u16,
                gap_ms: gap,
                workers,
            },
        });
    }
    found
}

/// One lease file's content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    pub generation: u64,
    pub marks: Box<[u64; WORKERS]>,
}

const MAGIC: &[u8; 8] = b"SFLEASE1";
pub const FILE_LEN: usize = 8 + 8 + WORKERS * 8 + 8;

/// FNV-1a: enough to tell a torn or foreign file from a whole one.
fn checksum(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    })
}

pub fn encode(s: &Snapshot) -> Vec<u8> {
    let mut out = Vec::with_capacity(FILE_LEN);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&s.generation.to_le_bytes());
    for mark in s.marks.iter() {
        out.extend_from_slice(&mark.to_le_bytes());
    }
    out.extend_from_slice(&checksum(&out).to_le_bytes());
    out
}

/// The snapshot in `bytes`, or `None` if they are not a whole, intact lease file.
pub fn decode(bytes: &[u8]) -> Option<Snapshot> {
    if bytes.len() != FILE_LEN || &bytes[..8] != MAGIC {
        return None;
    }
    let (body, sum) = bytes.split_at(FILE_LEN - 8);
    if checksum(body).to_le_bytes() != sum {
        return None;
    }
    let word = |i: usize| u64::from_le_bytes(body[i..i + 8].try_into().unwrap());
    let mut marks = Box::new([0u64; WORKERS]);
    for (i, mark) in marks.iter_mut().enumerate() {
        *mark = word(16 + i * 8);
    }
    Some(Snapshot {
        generation: word(8),
        marks,
    })
}

/// Of the two files, the newest intact one.
pub fn newest(a: Option<Snapshot>, b: Option<Snapshot>) -> Option<Snapshot> {
    match (a, b) {
        (Some(a), Some(b)) => Some(if a.generation >= b.generation { a } else { b }),
        (a, b) => a.or(b),
    }
}

/// Which of the two files generation `g` is written to.
pub fn slot(generation: u64) -> usize {
    (generation % 2) as usize
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::generator::Refusal;
    use crate::layout::{decompose, id_from_tick};

    const T0: u64 = 60_000_000_000;

    /// A node with its lease writer, run by hand: `renew` is one pass of the writer, and
    /// `disk` is what the file holds.
    struct Node {
        w: Worker,
        disk: u64,
    }

    impl Node {
        fn restarted(disk: u64) -> Node {
            Node {
                w: Worker::restarted(disk),
                disk,
            }
        }
        fn renew(&mut self, now: u64) {
            if low(&self.w, now) {
                self.disk = target(&self.w, now);
                grant(&mut self.w, self.disk);
            }
        }
        /// One id, renewing as the writer would when the backend asks.
        fn id(&mut self, now: u64) -> i64 {
            loop {
                match self.w.reserve(now, 1) {
                    Ok(tick) => {
                        assert!(
                            tick < self.disk,
                            "tick {tick} issued beyond the persisted {}",
                            self.disk
                        );
                        if low(&self.w, now) {
                            self.renew(now);
                        }
                        return id_from_tick(tick, 3);
                    }
                    Err(Refusal::NeedLease { .. }) => self.renew(now),
                    Err(Refusal::Exhausted) => panic!("exhausted"),
                }
            }
        }
        fn crash(&self) -> Node {
            Node::restarted(self.disk)
        }
        fn clean_stop(&mut self) -> Node {
            self.disk = close(&mut self.w);
            Node::restarted(self.disk)
        }
    }

    #[test]
    fn a_fresh_worker_needs_a_lease_before_its_first_id() {
        let mut w = Worker::restarted(0);
        assert!(!low(&w, T0));
        assert!(matches!(w.reserve(T0, 1), Err(Refusal::NeedLease { .. })));
        assert!(low(&w, T0), "a waiting backend makes the lease low");
        let t = target(&w, T0);
        assert_eq!(t, (T0 << SEQ_BITS) + LEASE_TICKS);
        grant(&mut w, t);
        assert_eq!(w.wanted, 0);
        assert_eq!(w.reserve(T0, 1), Ok(T0 << SEQ_BITS));
        assert!(!low(&w, T0), "a new lease is not low");
    }

    #[test]
    fn the_hot_path_check_agrees_with_the_full_one() {
        // Every state a successful reservation can leave, against clocks behind and at it.
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for _ in 0..100_000 {
            let mut w = Worker::restarted(0);
            let now = T0 + next() % 10_000;
            w.lease = ((T0 + next() % 20_000) << SEQ_BITS).min(TICK_LIMIT);
            if next() % 8 == 0 {
                w.wanted = w.lease + next() % 5000;
            }
            if next() % 16 == 0 {
                w.lease = TICK_LIMIT;
            }
            w.last = (now << SEQ_BITS) + next() % (LEASE_TICKS * 2);
            if w.reserve(now, 1 + next() % 100).is_ok() {
                let earlier = now - next() % 5000;
                assert_eq!(low_after_issue(&w), low(&w, now), "{w:?} at {now}");
                assert_eq!(low_after_issue(&w), low(&w, earlier), "{w:?} at {earlier}");
            }
        }
    }

    #[test]
    fn a_lease_is_renewed_when_half_is_left_and_not_before() {
        let mut n = Node::restarted(0);
        n.id(T0);
        let first = n.disk;
        n.id(T0 + LEASE_MS / 2 - 1);
        assert_eq!(n.disk, first, "renewed too early");
        n.id(T0 + LEASE_MS / 2 + 1);
        assert!(
            n.disk > first,
            "not renewed with less than half a lease left"
        );
    }

    #[test]
    fn an_idle_worker_lets_its_lease_lapse() {
        let mut w = Worker::restarted(0);
        let _ = w.reserve(T0, 1);
        let t = target(&w, T0);
        grant(&mut w, t);
        w.reserve(T0, 1).unwrap();
        assert!(
            !low(&w, T0 + 10 * LEASE_MS),
            "an idle worker must not keep the disk busy"
        );
    }

    #[test]
    fn ids_never_go_back_across_crashes_and_clock_steps() {
        let mut n = Node::restarted(0);
        let mut last = 0;
        let mut check = |id: i64| {
            assert!(id > last, "{id} after {last}");
            last = id;
        };
        for i in 0..10_000 {
            check(n.id(T0 + i / 10));
        }
        // Crash, and come back an hour earlier.
        let mut n = n.crash();
        let early = T0 - 3_600_000;
        for i in 0..10_000 {
            check(n.id(early + i / 10));
        }
        // Crash again right away: the clock is still far behind.
        let mut n = n.crash();
        check(n.id(early + 2000));
        // A clean stop, and a clock that jumps ahead then back.
        let mut n = n.clean_stop();
        check(n.id(T0 + 50_000));
        let mut n = n.crash();
        check(n.id(T0));
    }

    #[test]
    fn after_a_crash_ids_resume_at_most_a_lease_ahead() {
        let mut n = Node::restarted(0);
        for i in 0..1000 {
            n.id(T0 + i);
        }
        let mut n = n.crash();
        let p = decompose(n.id(T0 + 1000)).unwrap();
        assert!(p.ms > T0 + 999 && p.ms <= T0 + 1000 + LEASE_MS, "{p:?}");
    }

    #[test]
    fn a_clean_stop_resumes_exactly_on_the_clock() {
        let mut n = Node::restarted(0);
        let last = n.id(T0);
        let mut n = n.clean_stop();
        assert_eq!(n.disk, (T0 << SEQ_BITS) + 1);
        assert!(clock_behind(&[n.disk; WORKERS], T0 + 1).is_none());
        let id = n.id(T0 + 1);
        assert!(id > last);
        let p = decompose(id).unwrap();
        assert_eq!((p.ms, p.seq), (T0 + 1, 0));
    }

    #[test]
    fn close_stops_further_ids() {
        let mut w = Worker::restarted(0);
        let _ = w.reserve(T0, 1);
        let t = target(&w, T0);
        grant(&mut w, t);
        w.reserve(T0, 5).unwrap();
        assert_eq!(close(&mut w), (T0 << SEQ_BITS) + 5);
        assert!(matches!(
            w.reserve(T0 + 1, 1),
            Err(Refusal::NeedLease { .. })
        ));
        // An unused worker keeps its bound from before.
        let mut idle = Worker::restarted(12345);
        assert_eq!(close(&mut idle), 12345);
    }

    #[test]
    fn the_clock_behind_the_marks_is_measured() {
        let mut marks = [0u64; WORKERS];
        assert_eq!(clock_behind(&marks, T0), None);
        marks[3] = ((T0 + 3_600_000) << SEQ_BITS) + 1;
        marks[9] = ((T0 + 10) << SEQ_BITS) + 1;
        marks[10] = (T0 - 5) << SEQ_BITS;
        assert_eq!(
            clock_behind(&marks, T0),
            Some(ClockBehind {
                worker: 3,
                gap_ms: 3_600_000,
                workers: 2
            })
        );
        let workers = restart(&marks);
        assert_eq!(workers[3].last, marks[3] - 1);
        assert_eq!(workers[0].last, 0);
    }

    #[test]
    fn files_round_trip_and_torn_ones_are_rejected() {
        let mut marks = Box::new([0u64; WORKERS]);
        marks[0] = 1;
        marks[1023] = TICK_LIMIT - 1;
        let s = Snapshot {
            generation: 42,
            marks,
        };
        let bytes = encode(&s);
        assert_eq!(bytes.len(), FILE_LEN);
        assert_eq!(decode(&bytes), Some(s.clone()));
        // A write torn anywhere is refused.
        for cut in [0, 7, 8, 100, FILE_LEN / 2, FILE_LEN - 1] {
            let mut torn = bytes.clone();
            torn[cut..].fill(0);
            assert_eq!(decode(&torn), None, "torn at {cut}");
            assert_eq!(decode(&bytes[..cut]), None, "truncated at {cut}");
        }
        let mut flipped = bytes.clone();
        flipped[5000] ^= 1;
        assert_eq!(decode(&flipped), None);
    }

    #[test]
    fn the_newest_intact_file_wins() {
        let a = Snapshot {
            generation: 7,
            marks: Box::new([1; WORKERS]),
        };
        let b = Snapshot {
            generation: 8,
            marks: Box::new([2; WORKERS]),
        };
        assert_eq!(newest(Some(a.clone()), Some(b.clone())), Some(b.clone()));
        assert_eq!(newest(Some(b.clone()), Some(a.clone())), Some(b.clone()));
        assert_eq!(newest(None, Some(a.clone())), Some(a.clone()));
        assert_eq!(newest(None, None), None);
        assert_ne!(slot(7), slot(8));
    }
}

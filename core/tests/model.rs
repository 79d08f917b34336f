//! A model of the generator protocol with real threads: backends issuing ids from two workers'
//! slots (the fast path's compare-and-swap, and the slow path under a lock standing in for the
//! control LWLock), a mark writer raising the marks after "persisting" them, and a fake clock
//! that steps back, jumps forward and holds still, all driving the same pure code the extension
//! runs in shared memory. Then a crash: the slots are rebuilt from what was durable, the clock
//! an hour behind, and the same load runs again.
//!
//! What must hold, checked over millions of ids: every id is unique; each backend's ids
//! increase; every tick issued is below a mark that was durable before it was issued; after the
//! crash every id is above every id issued before it. Runs under the debug and the release
//! profile (scripts/test.sh runs both).

use parking_lot::{Condvar, Mutex};
use snowflake_core::generator::{Miss, Outcome, Params, Slot};
use snowflake_core::layout::{Layout, Order};
use snowflake_core::marks::{self, Row};
use snowflake_core::timekeeper::Readings;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::*};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

const WORKERS: usize = 2;
/// Backends per worker: worker 0 is contended by three, worker 1 by two.
const BACKENDS: [usize; WORKERS] = [3, 2];
/// Ids each backend takes at least, in calls of 1 to 8 ids.
const IDS_PER_BACKEND: u64 = 300_000;
/// How long each run lasts at least, in ms of the fake clock: long enough for a held jump to
/// be confirmed and followed.
const RUN_MS: u64 = 17_000;
/// How far ids may run ahead of the clock, in ms: small, so that the backends outrun the
/// clock and meet the bound.
const MAX_AHEAD: u64 = 50;

/// Our layout with an 8-bit sequence (256 ids a millisecond), so that millions of ids span
/// many seconds of the fake clock.
fn layout() -> Layout {
    Layout::new(1_735_689_600_000, 1, 45, 10, 8, Order::WorkerSequence).unwrap()
}

/// The clocks, in ms: the wall clock ids carry and the boot clock that only moves forward.
struct FakeClock {
    boot: AtomicU64,
    /// wall = boot + offset (as i64 arithmetic on u64 bits).
    offset: AtomicU64,
}

impl FakeClock {
    fn readings(&self) -> Readings {
        let boot = self.boot.load(SeqCst);
        Readings {
            wall: boot.wrapping_add(self.offset.load(SeqCst)),
            boot,
        }
    }
    fn wall(&self) -> u64 {
        self.readings().wall
    }
    fn shift(&self, by: i64) {
        self.offset.fetch_add(by as u64, SeqCst);
    }
}

/// A server: the slots, the lock, and what the writer made durable.
struct Server {
    p: Params,
    slots: Vec<Slot>,
    control: Mutex<()>,
    /// Per worker, the highest mark persisted: set before the slot may issue below it.
    durable: Vec<AtomicU64>,
    /// The writer's wake-up (the latch): backends that need a mark notify it; it notifies
    /// waiting backends when it granted one.
    wake: Mutex<bool>,
    woken: Condvar,
    granted: Condvar,
    stop: AtomicBool,
}

impl Server {
    fn start(p: Params, stored: &[Row]) -> Arc<Server> {
        let slots: Vec<Slot> = (0..WORKERS).map(|_| Slot::default()).collect();
        for (slot, persisted) in slots.iter().zip(stored) {
            marks::load(slot, persisted);
        }
        Arc::new(Server {
            p,
            slots,
            control: Mutex::new(()),
            durable: stored.iter().map(|d| AtomicU64::new(d.mark)).collect(),
            wake: Mutex::new(false),
            woken: Condvar::new(),
            granted: Condvar::new(),
            stop: AtomicBool::new(false),
        })
    }

    fn request_mark(&self) {
        *self.wake.lock() = true;
        self.woken.notify_one();
    }

    /// The mark writer: waits to be woken (or 1 ms), persists what is due, then grants it.
    fn writer(&self, clock: &FakeClock) -> Vec<Row> {
        let mut stored: Vec<Row> = self
            .durable
            .iter()
            .map(|d| Row {
                mark: d.load(SeqCst),
                ..Row::default()
            })
            .collect();
        let mut pass = 0u64;
        while !self.stop.load(SeqCst) {
            {
                let mut woken = self.wake.lock();
                if !*woken {
                    self.woken.wait_for(&mut woken, Duration::from_millis(1));
                }
                *woken = false;
            }
            let now = clock.wall();
            let due: Vec<(usize, Row)> = self
                .slots
                .iter()
                .enumerate()
                .filter_map(|(w, s)| {
                    marks::row_to_write(s, &self.p, now, &stored[w]).map(|d| (w, d))
                })
                .collect();
            // The write: durable first (a synchronous commit), and it takes a while.
            for &(w, d) in &due {
                self.durable[w].fetch_max(d.mark, SeqCst);
            }
            pass += 1;
            if pass.is_multiple_of(3) {
                thread::sleep(Duration::from_micros(200));
            }
            for &(w, d) in &due {
                stored[w] = d;
                marks::mark_written(&self.slots[w], d.mark);
            }
            let _guard = self.wake.lock();
            self.granted.notify_all();
        }
        stored
    }

    /// One backend's call: `n` ids of `worker`, as `nextval.rs` takes them. Returns the first
    /// tick.
    fn issue(&self, clock: &FakeClock, worker: usize, n: u64) -> u64 {
        let (p, slot) = (&self.p, &self.slots[worker]);
        loop {
            match slot.try_issue(p, clock.wall(), n) {
                Ok(issued) => {
                    if issued.low {
                        self.request_mark();
                    }
                    return issued.first;
                }
                Err(Miss::Contended) => continue,
                Err(Miss::Slow) => {}
            }
            let (outcome, _event) = {
                let _control = self.control.lock();
                slot.try_issue_checked(p, clock.readings(), n, MAX_AHEAD)
            };
            if slot.dirty.load(Acquire) {
                self.request_mark();
            }
            match outcome {
                Outcome::Issued(issued) => {
                    if issued.low {
                        self.request_mark();
                    }
                    return issued.first;
                }
                Outcome::Contended => {}
                Outcome::NeedMark { through } => {
                    slot.wait_for(through);
                    self.request_mark();
                    let mut guard = self.wake.lock();
                    self.granted
                        .wait_for(&mut guard, Duration::from_micros(500));
                }
                Outcome::Closed => panic!("worker {worker} closed while running"),
                // The wait for the clock, without holding anything.
                Outcome::Ahead { .. } => thread::sleep(Duration::from_micros(50)),
                Outcome::Exhausted => panic!("the layout ran out"),
            }
        }
    }
}

/// What one backend issued: ranges of ticks (first, n), in the order it got them.
type Taken = Vec<(u64, u64)>;

/// Runs the backends, the writer and the clock until every backend has its ids. Returns each
/// backend's worker and ranges, and what the writer left on stored.
fn run(server: &Arc<Server>, clock: &Arc<FakeClock>, seed: u64) -> (Vec<(usize, Taken)>, Vec<Row>) {
    let writer = {
        let (server, clock) = (server.clone(), clock.clone());
        thread::spawn(move || server.writer(&clock))
    };
    let done = Arc::new(AtomicBool::new(false));
    let end = clock.boot.load(SeqCst) + RUN_MS;
    // The clock: a ms every 20 µs of real time or so, now and then standing still; every
    // 700 ms a step back of up to 300 ms; at 3 s a forward jump of 2 s, stepped back 400 ms
    // later (held, never followed); at 5 s a jump of 30 s that stays (held, then followed 10 s
    // later).
    let ticker = {
        let (clock, done) = (clock.clone(), done.clone());
        thread::spawn(move || {
            let mut rng = seed | 1;
            let mut ms = 0u64;
            while !done.load(SeqCst) {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                if !rng.is_multiple_of(50) {
                    clock.boot.fetch_add(1, SeqCst);
                    ms += 1;
                    match ms {
                        3000 => clock.shift(2000),
                        3400 => clock.shift(-2000),
                        5000 => clock.shift(30_000),
                        _ if ms.is_multiple_of(700) => clock.shift(-((rng % 300) as i64)),
                        _ => {}
                    }
                }
                thread::sleep(Duration::from_micros(20));
            }
        })
    };
    let mut backends = vec![];
    for (worker, &count) in BACKENDS.iter().enumerate() {
        for b in 0..count {
            let (server, clock) = (server.clone(), clock.clone());
            let mut rng = seed.wrapping_mul(31).wrapping_add((worker * 8 + b) as u64) | 1;
            backends.push(thread::spawn(move || {
                let mut taken = Vec::new();
                let mut total = 0;
                while total < IDS_PER_BACKEND || clock.boot.load(SeqCst) < end {
                    rng ^= rng << 13;
                    rng ^= rng >> 7;
                    rng ^= rng << 17;
                    let n = 1 + rng % 8;
                    let first = server.issue(&clock, worker, n);
                    // Below a mark that was durable before the ticks were issued.
                    let durable = server.durable[worker].load(SeqCst);
                    assert!(
                        first + n <= durable,
                        "worker {worker} issued ticks {first}..{} above the durable mark {durable}",
                        first + n
                    );
                    taken.push((first, n));
                    total += n;
                }
                (worker, taken)
            }));
        }
    }
    let results: Vec<(usize, Taken)> = backends.into_iter().map(|b| b.join().unwrap()).collect();
    done.store(true, SeqCst);
    ticker.join().unwrap();
    server.stop.store(true, SeqCst);
    server.request_mark();
    let stored = writer.join().unwrap();
    (results, stored)
}

/// Checks the ranges: each backend's increase, and no tick of a worker is issued twice.
/// Returns each worker's highest tick.
fn check(results: &[(usize, Taken)]) -> Vec<u64> {
    let mut per_worker: Vec<Vec<(u64, u64)>> = vec![vec![]; WORKERS];
    for (worker, taken) in results {
        for pair in taken.windows(2) {
            assert!(
                pair[1].0 >= pair[0].0 + pair[0].1,
                "a backend of worker {worker} went back: {:?} then {:?}",
                pair[0],
                pair[1]
            );
        }
        per_worker[*worker].extend(taken);
    }
    per_worker
        .iter_mut()
        .enumerate()
        .map(|(w, ranges)| {
            ranges.sort_unstable();
            for pair in ranges.windows(2) {
                assert!(
                    pair[1].0 >= pair[0].0 + pair[0].1,
                    "worker {w} issued a tick twice: {:?} and {:?}",
                    pair[0],
                    pair[1]
                );
            }
            let ids: u64 = ranges.iter().map(|r| r.1).sum();
            let expected = BACKENDS[w] as u64 * IDS_PER_BACKEND;
            assert!(
                ids >= expected,
                "worker {w}: {ids} ids, expected {expected}"
            );
            ranges.last().map(|(f, n)| f + n - 1).unwrap()
        })
        .collect()
}

#[test]
fn millions_of_ids_from_racing_threads_are_unique_increasing_and_under_a_durable_mark() {
    let layout = layout();
    let p = Params::new(layout);
    // The clock starts a year into the layout.
    let clock = Arc::new(FakeClock {
        boot: AtomicU64::new(10_000),
        offset: AtomicU64::new(365 * 86_400_000 - 10_000),
    });
    let started = Instant::now();
    let server = Server::start(p, &[Row::default(); WORKERS]);
    let (results, _disk) = run(&server, &clock, 0x5eed);
    let before = check(&results);
    // The scenario happened: steps back were seen, and the lasting jump was followed.
    let steps: u64 = server.slots.iter().map(|s| s.steps_back.load(SeqCst)).sum();
    let jumps: u64 = server.slots.iter().map(|s| s.jumps.load(SeqCst)).sum();
    assert!(
        steps > 0 && jumps > 0,
        "steps back {steps}, jumps followed {jumps}"
    );
    let durable: Vec<u64> = server.durable.iter().map(|d| d.load(SeqCst)).collect();
    // Distinct workers' ids never meet: the worker field differs.
    let id = |tick: u64, w: usize| layout.id_from_tick(tick, w as u32);
    assert_ne!(id(before[0], 0), id(before[0], 1));

    // A crash: nothing but what was durable survives; the clock is an hour behind.
    drop(server);
    clock.shift(-3_600_000);
    let stored: Vec<Row> = durable
        .iter()
        .map(|&mark| Row {
            mark,
            ..Row::default()
        })
        .collect();
    let server = Server::start(p, &stored);
    let (results, _) = run(&server, &clock, 0xfeed);
    check(&results);
    for (worker, taken) in &results {
        let lowest = taken.iter().map(|r| r.0).min().unwrap();
        assert!(
            lowest > before[*worker],
            "after the crash worker {worker} issued tick {lowest}, not above {}",
            before[*worker]
        );
    }
    eprintln!("two runs in {:?}", started.elapsed());
}

//! How one worker judges the wall clock: steps back, forward jumps, and the reference clock
//! that bounds how far ahead of time its ids may run. Pure: readings are passed in, so every
//! rule is unit-tested with a fake clock.
//!
//! Two clocks are read together: the wall clock (`CLOCK_REALTIME`, what ids carry, what an
//! operator or NTP can step) and the boot clock (`CLOCK_BOOTTIME`, which only moves forward at
//! the real pace, suspend included). Their difference, the *offset*, is constant while nobody
//! touches the wall clock, so a change of offset is a step of the wall clock, told apart from a
//! backend that was merely descheduled between reading the clock and using it.
//!
//! * **Step back** (the offset drops by more than `tolerance`): counted and reported once. Ids
//!   are unaffected (the generator continues from its last tick whatever the clock says).
//! * **Reference clock** `boot + reference_offset`: the newest wall clock reading carried
//!   forward at the real pace. After a step back it keeps the old timeline, so that ids, which
//!   continue from before the step, may keep flowing at full speed; once the wall clock has
//!   caught up with the ids it is the wall clock again. After a restart it starts at the
//!   high-water mark, whatever the wall clock says. The generator lets ids run at most
//!   `max_ahead` past it (`snowflake.max_ahead`).
//! * **Forward jump** (the wall clock reads more than `jump` past the reference): a glitch of
//!   a few seconds must not carry a worker's ids years ahead for good, and a real correction
//!   must be followed. So a jump is *held*: ids keep following the reference clock until the
//!   jump has lasted `confirm` of real time; then it is followed. A jump that goes away sooner
//!   is ignored. Each is reported. At start-up there is no reference but the high-water mark,
//!   so a clock that is wrong when the server starts is followed (the start-up log shows it).
//! * **The boot clock stepping back**, which a correct kernel never does (it happens under a
//!   faked monotonic clock): the reference would drop with it and ids ahead of the clock would
//!   wait as long as the step. So the boot clock is *re-anchored*: a reading more than
//!   `tolerance` behind the newest one seen is shifted forward by the difference, from then on,
//!   and the step reported once. The boot clock then never runs backwards, and a wait is never
//!   longer than `max_ahead`.

use crate::layout::Layout;

/// The thresholds, in the layout's time units.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rules {
    /// A step back smaller than this is not counted.
    pub tolerance: u64,
    /// A forward jump past the reference clock by more than this is held.
    pub jump: u64,
    /// How long a held jump must last before it is followed.
    pub confirm: u64,
    /// How often the generator's fast path hands over to a full check of the clock.
    pub refresh: u64,
}

/// In milliseconds: see [`Rules`].
pub const STEP_TOLERANCE_MS: u64 = 5;
pub const JUMP_MS: u64 = 1000;
pub const CONFIRM_MS: u64 = 10_000;
pub const REFRESH_MS: u64 = 1000;

impl Rules {
    pub fn for_layout(layout: &Layout) -> Rules {
        let rules = Rules {
            tolerance: layout.units_in_ms(STEP_TOLERANCE_MS),
            jump: layout.units_in_ms(JUMP_MS),
            confirm: layout.units_in_ms(CONFIRM_MS),
            refresh: layout.units_in_ms(REFRESH_MS),
        };
        // A held jump must always send the fast path to a full check (see `Verdict::clock`).
        debug_assert!(rules.jump >= rules.refresh);
        rules
    }
}

/// One reading of both clocks, in time units: the wall clock since the layout's epoch, the
/// boot clock since boot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Readings {
    pub wall: u64,
    pub boot: u64,
}

/// What a check noticed, for the log and the statistics. Sizes and durations in time units.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClockEvent {
    /// At the first check after a start (or a restore), the clock reads behind the worker's
    /// high-water mark: it was set back while the server was down, or the mark came from a
    /// server whose clock ran ahead.
    BehindMark {
        by: u64,
    },
    SteppedBack {
        by: u64,
    },
    JumpHeld {
        by: u64,
    },
    JumpFollowed {
        by: u64,
        after: u64,
    },
    JumpIgnored {
        by: u64,
        after: u64,
    },
    /// The boot clock read this much behind its newest reading (and was re-anchored).
    BootSteppedBack {
        by: u64,
    },
}

/// The outcome of a check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Verdict {
    /// The time the generator uses now: the wall clock, or the reference clock while a jump
    /// is held.
    pub clock: u64,
    /// The latest time unit an id may carry now: the reference clock plus `max_ahead`.
    pub bound: u64,
    /// Whether a forward jump is being held: every call must then come back for a check, so
    /// that the clock's return is seen at once.
    pub held: bool,
    pub event: Option<ClockEvent>,
    /// `BootSteppedBack`, when the boot clock was re-anchored in this check.
    pub boot_event: Option<ClockEvent>,
}

/// The clock state of one worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Timekeeper {
    /// Whether the worker has been checked since the server started (or was rewound).
    pub started: bool,
    /// `wall - boot` at the last reading that was followed.
    pub wall_offset: i64,
    /// The reference clock is `boot + reference_offset`.
    pub reference_offset: i64,
    /// The boot time a held jump was first seen at.
    pub held_since: Option<u64>,
    /// The offset the held jump put the wall clock at.
    pub held_offset: i64,
    /// The newest boot clock reading, re-anchored.
    pub last_boot: u64,
    /// What is added to boot clock readings since it stepped back.
    pub boot_shift: u64,
}

impl Timekeeper {
    /// Checks a fresh reading. `last_time` is the time field of the worker's last tick (after a
    /// restart, of its high-water mark).
    pub fn check(&mut self, r: Readings, last_time: u64, max_ahead: u64, rules: &Rules) -> Verdict {
        let mut boot_event = None;
        let mut boot = r.boot.saturating_add(self.boot_shift);
        if boot + rules.tolerance < self.last_boot {
            let by = self.last_boot - boot;
            self.boot_shift += by;
            boot = self.last_boot;
            boot_event = Some(ClockEvent::BootSteppedBack { by });
        }
        self.last_boot = self.last_boot.max(boot);
        let r = Readings { wall: r.wall, boot };
        let offset = r.wall as i64 - r.boot as i64;
        let mut event = None;
        if !self.started {
            self.started = true;
            self.wall_offset = offset;
            // The high-water mark stands in for the readings before the restart.
            self.reference_offset = offset.max(last_time as i64 - r.boot as i64);
            if last_time > r.wall + rules.tolerance {
                event = Some(ClockEvent::BehindMark {
                    by: last_time - r.wall,
                });
            }
        } else {
            let ahead = offset - self.reference_offset;
            match self.held_since {
                Some(since) if ahead > rules.jump as i64 => {
                    if r.boot.saturating_sub(since) >= rules.confirm {
                        event = Some(ClockEvent::JumpFollowed {
                            by: (offset - self.wall_offset).max(0) as u64,
                            after: r.boot - since,
                        });
                        self.held_since = None;
                        self.wall_offset = offset;
                    }
                }
                Some(since) => {
                    event = Some(ClockEvent::JumpIgnored {
                        by: (self.held_offset - self.wall_offset).max(0) as u64,
                        after: r.boot.saturating_sub(since),
                    });
                    self.held_since = None;
                    self.wall_offset = offset;
                }
                None if offset < self.wall_offset - rules.tolerance as i64 => {
                    event = Some(ClockEvent::SteppedBack {
                        by: (self.wall_offset - offset) as u64,
                    });
                    self.wall_offset = offset;
                }
                None if ahead > rules.jump as i64 => {
                    event = Some(ClockEvent::JumpHeld {
                        by: (offset - self.wall_offset).max(0) as u64,
                    });
                    self.held_since = Some(r.boot);
                    self.held_offset = offset;
                }
                None => self.wall_offset = offset,
            }
        }
        if self.held_since.is_none() {
            self.reference_offset = if last_time <= r.wall {
                // The ids follow the wall clock: it is the reference.
                offset
            } else {
                self.reference_offset.max(offset)
            };
        }
        let reference = (r.boot as i64 + self.reference_offset).max(0) as u64;
        let clock = if self.held_since.is_some() {
            reference
        } else {
            r.wall
        };
        Verdict {
            clock,
            bound: reference.saturating_add(max_ahead),
            held: self.held_since.is_some(),
            event,
            boot_event,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RULES: Rules = Rules {
        tolerance: 5,
        jump: 1000,
        confirm: 10_000,
        refresh: 1000,
    };
    const T0: u64 = 60_000_000_000; // some time in 2026, in ms since the epoch
    const AHEAD: u64 = 2000;

    /// A worker whose wall clock is `boot + offset`, checked every `step` ms of boot time.
    struct Clocks {
        tk: Timekeeper,
        boot: u64,
        offset: i64,
    }

    impl Clocks {
        fn new() -> Clocks {
            Clocks {
                tk: Timekeeper::default(),
                boot: 1_000_000,
                offset: T0 as i64 - 1_000_000,
            }
        }
        fn wall(&self) -> u64 {
            (self.boot as i64 + self.offset) as u64
        }
        fn check(&mut self, last_time: u64) -> Verdict {
            let r = Readings {
                wall: self.wall(),
                boot: self.boot,
            };
            self.tk.check(r, last_time, AHEAD, &RULES)
        }
        fn pass(&mut self, ms: u64) {
            self.boot += ms;
        }
    }

    #[test]
    fn a_steady_clock_is_followed_and_bounds_ids_max_ahead_past_it() {
        let mut c = Clocks::new();
        for _ in 0..100 {
            let v = c.check(c.wall());
            assert_eq!(v.clock, c.wall());
            assert_eq!(v.bound, c.wall() + AHEAD);
            assert_eq!(v.event, None);
            c.pass(700);
        }
    }

    #[test]
    fn a_step_back_is_reported_once_and_the_reference_keeps_the_old_timeline() {
        let mut c = Clocks::new();
        c.check(T0);
        c.pass(100);
        let last = c.wall(); // the worker's ids are at the clock
        c.offset -= 3_600_000;
        let v = c.check(last);
        assert_eq!(v.event, Some(ClockEvent::SteppedBack { by: 3_600_000 }));
        assert_eq!(v.clock, c.wall(), "ids still see the wall clock");
        assert_eq!(
            v.bound,
            last + AHEAD,
            "but may run max_ahead past the old timeline"
        );
        // An hour of ids at the old pace: the bound moves with real time, never stalls them.
        for _ in 0..3600 {
            c.pass(1000);
            let v = c.check(last + 10);
            assert_eq!(v.event, None, "the step is reported once");
            assert!(v.bound >= c.boot_time_on_old_timeline(last) + AHEAD - 1);
        }
        // The wall clock is past the ids again: it is the reference again.
        c.pass(10_000);
        let v = c.check(last + 10);
        assert_eq!(v.bound, c.wall() + AHEAD);
    }

    impl Clocks {
        fn boot_time_on_old_timeline(&self, last: u64) -> u64 {
            // `last` was read at boot 1_000_100; the old timeline moves with the boot clock.
            last + (self.boot - 1_000_100)
        }
    }

    #[test]
    fn a_descheduled_backend_is_not_a_step() {
        // Readings are taken together, so a pause between them and their use changes nothing;
        // only the offset matters. A slow drift (NTP slewing) stays under the tolerance.
        let mut c = Clocks::new();
        c.check(T0);
        for _ in 0..1000 {
            c.pass(1000);
            c.offset -= 1; // 1 ms per second: far more than NTP slews
            assert_eq!(c.check(c.wall()).event, None);
        }
    }

    #[test]
    fn a_short_forward_glitch_is_held_and_ignored() {
        let mut c = Clocks::new();
        c.check(T0);
        c.pass(1000);
        let before = c.wall();
        c.offset += 67 * 365 * 86_400_000; // +67 years
        let v = c.check(before);
        assert!(
            matches!(v.event, Some(ClockEvent::JumpHeld { by }) if by == 67 * 365 * 86_400_000)
        );
        assert_eq!(v.clock, before, "ids keep the reference clock");
        assert_eq!(v.bound, before + AHEAD);
        c.pass(2000);
        let v = c.check(before);
        assert_eq!(v.event, None);
        assert_eq!(v.clock, before + 2000);
        // The clock comes back: the jump is ignored, nothing else happens.
        c.offset -= 67 * 365 * 86_400_000;
        c.pass(10);
        let v = c.check(before + 2000);
        assert_eq!(
            v.event,
            Some(ClockEvent::JumpIgnored {
                by: 67 * 365 * 86_400_000,
                after: 2010
            })
        );
        assert_eq!(v.clock, c.wall());
        assert_eq!(c.check(c.wall()).event, None);
    }

    #[test]
    fn a_lasting_forward_jump_is_followed_after_the_confirmation_time() {
        let mut c = Clocks::new();
        c.check(T0);
        c.offset += 300_000; // NTP corrects a clock that was 5 minutes slow
        assert!(matches!(
            c.check(T0).event,
            Some(ClockEvent::JumpHeld { .. })
        ));
        let mut followed = None;
        for i in 1..=20 {
            c.pass(1000);
            let v = c.check(T0 + i * 1000);
            if let Some(ClockEvent::JumpFollowed { by, after }) = v.event {
                followed = Some((by, after, v.clock == c.wall()));
                break;
            }
            assert_eq!(v.clock, T0 + i * 1000, "still on the reference clock");
        }
        assert_eq!(followed, Some((300_000, 10_000, true)));
        assert_eq!(c.check(c.wall()).bound, c.wall() + AHEAD);
    }

    #[test]
    fn returning_to_the_reference_after_a_step_back_is_not_a_jump() {
        let mut c = Clocks::new();
        c.check(T0);
        let last = c.wall();
        c.offset -= 60_000;
        assert!(matches!(
            c.check(last).event,
            Some(ClockEvent::SteppedBack { .. })
        ));
        c.pass(1000);
        c.offset += 60_000; // the operator puts it back
        let v = c.check(last);
        assert_eq!(v.event, None);
        assert_eq!(v.clock, c.wall());
    }

    #[test]
    fn after_a_restart_the_mark_is_the_reference() {
        let mut c = Clocks::new();
        // The mark is an hour ahead of the wall clock (the clock was set back while down).
        let mark_time = c.wall() + 3_600_000;
        let v = c.check(mark_time);
        assert_eq!(v.event, Some(ClockEvent::BehindMark { by: 3_600_000 }));
        assert_eq!(v.bound, mark_time + AHEAD);
        c.pass(5000);
        assert_eq!(c.check(mark_time).bound, mark_time + 5000 + AHEAD);
    }

    #[test]
    fn a_boot_clock_stepping_back_is_re_anchored_and_reported_once() {
        let mut c = Clocks::new();
        c.check(T0);
        c.pass(1000);
        // Ids run 1.5 s ahead of the clock (a burst), then both clocks step back a minute, as
        // under a faked monotonic clock.
        let last = c.wall() + 1500;
        assert_eq!(c.check(last).boot_event, None);
        c.boot -= 60_000;
        let v = c.check(last);
        assert_eq!(
            v.boot_event,
            Some(ClockEvent::BootSteppedBack { by: 60_000 })
        );
        assert_eq!(v.event, Some(ClockEvent::SteppedBack { by: 60_000 }));
        // The bound did not fall with the boot clock: the ids need not wait for it.
        assert!(v.bound >= last, "bound {} below the ids {last}", v.bound);
        c.pass(10);
        let v = c.check(last);
        assert_eq!((v.boot_event, v.event), (None, None), "reported once");
        assert!(v.bound >= last + 10);
        // A backend read the boot clock a little late: not a step.
        c.boot -= 3;
        assert_eq!(c.check(last).boot_event, None);
    }
}

//! Worker ids leased from a registry (`snowflake.worker_id = 'auto'`): the rules a holder
//! follows, pure. The registry (a table in a PostgreSQL database the fleet shares, see the
//! glue's `registry.rs`) hands each server a worker id of its range for a time, the TTL; the
//! server renews it every third of that, and the registry keeps, with each lease, the highest
//! id its holder may have issued (its *cap*). Three rules make a shared worker id impossible:
//!
//! * **A holder stops before the registry could let the lease go.** The registry counts the
//!   TTL from when it handled a request; the holder counts it from when it *sent* the request,
//!   on its boot clock, which nobody steps, and stops `margin` before the end, in case the two
//!   clocks do not run at quite the same rate. So whenever the registry gives the id to
//!   another server, the previous holder has stopped (`Timing`).
//! * **A holder never issues past its cap**, which the registry records before the holder may
//!   use it: the mark writer raises no mark above it. The cap reaches past anything the holder
//!   can issue before its lease ends (`cap`), and is raised at each renewal.
//! * **A new holder starts above the last holder's cap**, whatever its clock says: its worker
//!   restarts from there, as after `snowflake_restore_mark`.
//!
//! So two servers that held the same worker id one after the other never issue the same id,
//! and even two that held it at once (a server whose identity was copied with its data
//! directory, on a machine of the same name) issue ids in disjoint ranges.

use crate::layout::Layout;

/// The worker ids a server may lease (`snowflake.worker_range`): `first..=last`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkerRange {
    pub first: u32,
    pub last: u32,
}

impl WorkerRange {
    /// Every worker id of the layout.
    pub fn whole(layout: &Layout) -> WorkerRange {
        WorkerRange {
            first: 0,
            last: layout.max_worker(),
        }
    }

    /// `first-last`, a single id, or empty (the whole layout). The message says what is wrong.
    pub fn parse(text: &str, layout: &Layout) -> Result<WorkerRange, String> {
        let text = text.trim();
        if text.is_empty() {
            return Ok(WorkerRange::whole(layout));
        }
        let id = |part: &str| -> Result<u32, String> {
            let part = part.trim();
            let n: u64 = part
                .parse()
                .map_err(|_| format!("\"{part}\" is not a worker id"))?;
            if n > layout.max_worker() as u64 {
                return Err(format!(
                    "worker id {n} is past the layout's last, {}",
                    layout.max_worker()
                ));
            }
            Ok(n as u32)
        };
        let (first, last) = match text.split_once('-') {
            Some((a, b)) => (id(a)?, id(b)?),
            None => {
                let n = id(text)?;
                (n, n)
            }
        };
        if first > last {
            return Err(format!("the range {first}-{last} is empty"));
        }
        Ok(WorkerRange { first, last })
    }

    pub fn contains(&self, worker: u32) -> bool {
        (self.first..=self.last).contains(&worker)
    }
}

impl std::fmt::Display for WorkerRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.first, self.last)
    }
}

/// The shortest TTL: a lease must outlive a renewal's round trip, a little clock drift and a
/// session's clock check (see [`Timing::margin_ms`]).
pub const MIN_TTL_MS: u64 = 5_000;

/// How a lease is timed, in milliseconds of the holder's boot clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    pub ttl_ms: u64,
}

impl Timing {
    /// How often the holder renews: a third of the TTL, so that a renewal can fail and the
    /// next still come before the lease runs out.
    pub fn renew_every_ms(&self) -> u64 {
        self.ttl_ms / 3
    }

    /// How long before the end of the TTL the holder stops: a tenth of it, at least a second,
    /// and the longest a minting session goes without looking at the lease. Two clocks kept by
    /// NTP differ in rate by well under a tenth of a percent; the rest is room for the holder
    /// to see the end coming. Sessions mint on the fast path between two clock checks
    /// ([`crate::timekeeper::REFRESH_MS`] apart, within the step tolerance), and a session
    /// looks at the lease at its check: a holder whose keeper is stuck stops that much later.
    pub fn margin_ms(&self) -> u64 {
        (self.ttl_ms / 10).max(1_000)
            + crate::timekeeper::REFRESH_MS
            + crate::timekeeper::STEP_TOLERANCE_MS
    }

    /// The boot time until which a lease obtained by a request sent at `sent_at` may be used.
    pub fn usable_until(&self, sent_at: u64) -> u64 {
        sent_at + self.ttl_ms.saturating_sub(self.margin_ms())
    }

    /// When to renew a lease obtained by a request sent at `sent_at`.
    pub fn renew_at(&self, sent_at: u64) -> u64 {
        sent_at + self.renew_every_ms()
    }

    /// How long to wait before attempt `failures + 1` after `failures` failed ones: doubling
    /// from half a second, never longer than a renewal period (so a registry that comes back
    /// is used again soon).
    pub fn back_off_ms(&self, failures: u32) -> u64 {
        let doubled = 500u64.saturating_mul(1u64 << failures.min(20));
        doubled.min(self.renew_every_ms().max(500))
    }
}

/// The cap to record with a lease granted or renewed now: the tick below which the holder may
/// issue until its next renewal. Every id a holder issues is below its mark, and its mark's
/// time runs at most the mark's reach ahead of the later of the clock and the worker's last
/// id; the lease ends within `ttl_units`. So `cap` leaves room for all of that, and a little
/// more for a backend descheduled in between. In ticks; never past `tick_limit`.
pub fn cap(
    layout: &Layout,
    tick_limit: u64,
    clock: u64,
    last_tick: u64,
    ttl_units: u64,
    reach_units: u64,
) -> u64 {
    let time = clock
        .max(last_tick >> layout.seq_bits)
        .saturating_add(ttl_units)
        .saturating_add(reach_units.saturating_mul(2));
    time.checked_shl(layout.seq_bits)
        .filter(|t| t >> layout.seq_bits == time)
        .unwrap_or(u64::MAX)
        .min(tick_limit)
}

#[cfg(test)]
mod tests {
    use super::*;

    const L: Layout = Layout::SNOWFLAKE;

    #[test]
    fn ranges_parse_and_name_what_is_wrong() {
        assert_eq!(
            WorkerRange::parse("", &L),
            Ok(WorkerRange {
                first: 0,
                last: 1023
            })
        );
        assert_eq!(
            WorkerRange::parse(" 100-199 ", &L),
            Ok(WorkerRange {
                first: 100,
                last: 199
            })
        );
        assert_eq!(
            WorkerRange::parse("7", &L),
            Ok(WorkerRange { first: 7, last: 7 })
        );
        assert!(WorkerRange::parse("100-1024", &L)
            .unwrap_err()
            .contains("1024"));
        assert!(WorkerRange::parse("200-100", &L)
            .unwrap_err()
            .contains("empty"));
        assert!(WorkerRange::parse("a-b", &L).unwrap_err().contains("\"a\""));
        assert!(WorkerRange::parse("-5", &L).is_err());
        let sony = Layout::SONYFLAKE;
        assert_eq!(WorkerRange::whole(&sony).last, 65_535);
        assert_eq!(
            WorkerRange::parse("100-199", &L).unwrap().to_string(),
            "100-199"
        );
    }

    #[test]
    fn a_holder_stops_before_the_registry_could_let_go() {
        let t = Timing { ttl_ms: 30_000 };
        assert_eq!(t.renew_every_ms(), 10_000);
        assert_eq!(t.usable_until(1_000), 26_995);
        // A renewal and the one after it are both due before the end: one may fail.
        assert!(t.renew_at(1_000) + t.renew_every_ms() < t.usable_until(1_000));
        let short = Timing { ttl_ms: MIN_TTL_MS };
        assert!(short.usable_until(0) > short.renew_at(0));
        assert!(short.usable_until(0) < MIN_TTL_MS);
    }

    #[test]
    fn back_off_doubles_up_to_a_renewal_period() {
        let t = Timing { ttl_ms: 30_000 };
        let waits: Vec<u64> = (0..8).map(|f| t.back_off_ms(f)).collect();
        assert_eq!(waits, [500, 1000, 2000, 4000, 8000, 10_000, 10_000, 10_000]);
        assert_eq!(t.back_off_ms(u32::MAX), 10_000);
    }

    #[test]
    fn the_cap_covers_what_a_holder_can_issue_before_its_lease_ends() {
        let tick_limit = L.tick_limit() - 1;
        let clock = 1_000_000;
        // A worker at the clock: ids until the end of the lease, plus the mark's reach twice.
        let c = cap(&L, tick_limit, clock, clock << 12, 30_000, 2_000);
        assert_eq!(c, (clock + 34_000) << 12);
        // A worker running an hour ahead (a clock stepped back): counted from its last id.
        let ahead = (clock + 3_600_000) << 12;
        assert_eq!(
            cap(&L, tick_limit, clock, ahead, 30_000, 2_000),
            (clock + 3_634_000) << 12
        );
        // Never past the end of the layout.
        assert_eq!(
            cap(&L, tick_limit, u64::MAX >> 20, 0, 30_000, 2_000),
            tick_limit
        );
    }
}

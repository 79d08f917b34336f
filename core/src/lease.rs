//! Worker ids leased from a registry (`snowflake.worker_id = 'auto'`, or a number with
//! `snowflake.registry` set): the rules a holder follows, pure. The registry (a schema in a
//! PostgreSQL database the fleet shares, `sql/registry/registry.sql`) runs the protocol in functions of
//! its own; this is the holder's half. The literature is the guide: a lease is only as safe as
//! the wait before the next holder acts (Chubby's lock-delay) and what stops the old one
//! (Kleppmann's fencing tokens; here, the cap).
//!
//! * **A holder stops before the registry could let the lease go.** The registry counts the
//!   TTL from when it handled a request; the holder counts it from when it *sent* the request,
//!   on its boot clock, which nobody steps, and stops `margin` before the end ([`Timing`]).
//! * **A holder never issues past its cap**, which the registry records before the holder may
//!   use it: the mark writer raises no mark above it. The cap reaches past anything the holder
//!   can issue before its lease ends ([`cap`]), and is raised at each renewal.
//! * **A worker id changes hands only when its last holder has provably stopped.** At once
//!   only when it gave the id back itself with its final mark, never held it, or was an
//!   earlier start of the claimer on the same machine run. Otherwise the registry answers
//!   *wait*: the claimer waits, on its own boot clock, from the moment the registry answered
//!   (after the old holder's last renewal was handled), at least the longest lease the old
//!   holder could still be counting, plus the room its ids may have run ahead of the
//!   registry's clock ([`takeover_wait_ms`]); then it confirms, which fails if the old holder
//!   renewed meanwhile. The registry's word alone (expired, released by hand, superseded,
//!   restored) never lets a server mint at once.
//! * **A new holder starts above its predecessors' ids**: above the last cap the registry
//!   recorded (and, from a registry of format 2, above the time it said no predecessor's ids
//!   can reach after a recovery), and above its own clock, which the registry checked at the
//!   claim.
//! * **A registry that went back in time needs nothing done**: its word counts only where it
//!   was written in its current incarnation (`lease_model`). Every answer still carries an
//!   epoch, which each server keeps with its marks and sends back; only a registry of format 2
//!   reads it (and froze on a later one until an administrator recovered it).

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

/// The least `lock_delay` a registry accepts (its CHECK in `sql/registry/registry.sql`). The
/// keeper gives up on an answer sooner than that (`EXCHANGE` in `src/lease/keeper`, checked at
/// compile time): a renewal delayed on its way by less hides a registry clock behind the
/// holder's by no more than the lock-delay, which the registry's one-sided skew check and its
/// wait leave room for.
pub const LEAST_LOCK_DELAY_MS: u64 = 5_000;

/// How far a holder's ids may run ahead of the clock beyond its lease: its marks reach
/// [`MARK_AHEAD_MS`](crate::generator::MARK_AHEAD_MS) ahead, and [`cap`] leaves room for twice
/// that.
pub const REACH_MS: u64 = 2 * crate::generator::MARK_AHEAD_MS;

/// How long a claimer waits, on its boot clock from when the registry answered *wait*, before
/// it confirms: `wait_ms` (the registry's lock-delay for that worker id: the longer of the old
/// holder's TTL and the registry's `lock_delay`), during which any old holder stopped on its own
/// clock; then twice the clock skew the registry accepts and the reach of the old holder's
/// marks, so that the claimer's first ids, taken from its clock, are above every id the old
/// holder may have issued from its clock even if the registry lost the cap it had recorded.
pub fn takeover_wait_ms(wait_ms: u64, max_skew_ms: u64) -> u64 {
    wait_ms
        .saturating_add(max_skew_ms.saturating_mul(2))
        .saturating_add(REACH_MS)
}

/// What a registry answered (its `answer.outcome`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The worker id is the caller's: record a cap (a renewal), then use it.
    Granted,
    /// Wait out the lock-delay, then confirm.
    Wait,
    Renewed,
    Released,
    /// The lease is no longer the caller's (released by hand, taken, superseded).
    Lost,
    /// Another start of the caller's own identity holds it: a copy of the server runs. Stop,
    /// and do not claim again: a copy must never take turns with its original.
    Duplicate,
    /// No worker id of the range is free.
    Exhausted,
    /// The pinned worker id (`snowflake.worker_id` set by hand) is held by another server
    /// (`Standing::Taken` on this server; the registry's word, `held`, is kept for servers of
    /// every version).
    Taken,
    /// A standby promoted after the caller replaced it.
    Superseded,
    /// A registry of format 2 refuses everything until an administrator recovers it (format 3
    /// never answers it).
    Frozen,
    /// A registry of format 2 went back in time (the caller had seen a later epoch): it froze.
    Behind,
    /// The caller last leased from another registry, whose leases this one does not carry.
    Foreign,
    /// The registry's leases were exported to a successor: it grants no new lease.
    Moved,
    /// The caller's clock is too far from the registry's.
    Skew,
    /// The caller's TTL is longer than the registry's lock-delay.
    Ttl,
    /// The caller's registry role may write the registry's tables directly.
    UnsafeRole,
    /// The registry's identity (its id, epoch and limits).
    Identity,
}

impl Outcome {
    /// Whether the registry read the lease to give this answer, so that the request it
    /// answers is settled (a request whose answer was lost is asked again until it is). The
    /// refusals that come first (a frozen or moved registry, a clock skew, a TTL too long, ...)
    /// leave it in flight: a grant or renewal it made before may be asked for again.
    pub fn settles_the_request(self) -> bool {
        matches!(
            self,
            Outcome::Granted
                | Outcome::Wait
                | Outcome::Renewed
                | Outcome::Released
                | Outcome::Lost
                | Outcome::Duplicate
                | Outcome::Exhausted
                | Outcome::Taken
                | Outcome::Superseded
        )
    }

    /// The registry's word for it.
    pub fn name(self) -> &'static str {
        match self {
            Outcome::Granted => "granted",
            Outcome::Wait => "wait",
            Outcome::Renewed => "renewed",
            Outcome::Released => "released",
            Outcome::Lost => "lost",
            Outcome::Duplicate => "duplicate",
            Outcome::Exhausted => "exhausted",
            Outcome::Taken => "held",
            Outcome::Superseded => "superseded",
            Outcome::Frozen => "frozen",
            Outcome::Behind => "behind",
            Outcome::Foreign => "foreign",
            Outcome::Moved => "moved",
            Outcome::Skew => "skew",
            Outcome::Ttl => "ttl",
            Outcome::UnsafeRole => "unsafe_role",
            Outcome::Identity => "identity",
        }
    }

    pub fn parse(text: &str) -> Option<Outcome> {
        Some(match text {
            "granted" => Outcome::Granted,
            "wait" => Outcome::Wait,
            "renewed" => Outcome::Renewed,
            "released" => Outcome::Released,
            "lost" => Outcome::Lost,
            "duplicate" => Outcome::Duplicate,
            "exhausted" => Outcome::Exhausted,
            "held" => Outcome::Taken,
            "superseded" => Outcome::Superseded,
            "frozen" => Outcome::Frozen,
            "behind" => Outcome::Behind,
            "foreign" => Outcome::Foreign,
            "moved" => Outcome::Moved,
            "skew" => Outcome::Skew,
            "ttl" => Outcome::Ttl,
            "unsafe_role" => Outcome::UnsafeRole,
            "identity" => Outcome::Identity,
            _ => return None,
        })
    }
}

/// The registry a server last leased from, and the highest epoch it has seen there: kept with
/// the marks, so that a restart (or a promoted standby, or a restored backup) still tells a
/// registry that is not the one it leased from (and, to a registry of format 2, one that went
/// back in time).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Seen {
    /// The registry's id (a UUID, as 128 bits), 0 while none.
    pub registry: u128,
    pub epoch: u64,
}

impl Seen {
    /// After an answer of `registry` at `epoch`: the epoch only ever goes up for one registry;
    /// another registry (one that accepted this server) starts its own count.
    pub fn after(self, registry: u128, epoch: u64) -> Seen {
        if registry == self.registry {
            Seen {
                registry,
                epoch: self.epoch.max(epoch),
            }
        } else {
            Seen { registry, epoch }
        }
    }
}

/// A UUID's text form as 128 bits.
pub fn parse_uuid(text: &str) -> Option<u128> {
    let hex: String = text.chars().filter(|c| *c != '-').collect();
    (hex.len() == 32).then(|| u128::from_str_radix(&hex, 16).ok())?
}

/// 128 bits in a UUID's text form.
pub fn format_uuid(id: u128) -> String {
    let h = format!("{id:032x}");
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

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

    #[test]
    fn a_refusal_before_the_lease_is_read_leaves_the_request_in_flight() {
        for refusal in [
            Outcome::Frozen,
            Outcome::Behind,
            Outcome::Foreign,
            Outcome::Moved,
            Outcome::Skew,
            Outcome::Ttl,
            Outcome::UnsafeRole,
        ] {
            assert!(!refusal.settles_the_request(), "{}", refusal.name());
        }
        for decided in [
            Outcome::Granted,
            Outcome::Wait,
            Outcome::Renewed,
            Outcome::Lost,
        ] {
            assert!(decided.settles_the_request(), "{}", decided.name());
        }
    }

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
    fn a_takeover_waits_the_lock_delay_the_skew_twice_and_the_reach() {
        assert_eq!(takeover_wait_ms(30_000, 1_000), 30_000 + 2_000 + 4_000);
        assert_eq!(takeover_wait_ms(u64::MAX, 1), u64::MAX);
    }

    #[test]
    fn every_outcome_the_registry_answers_is_known() {
        for text in [
            "granted",
            "wait",
            "renewed",
            "released",
            "lost",
            "duplicate",
            "exhausted",
            "held",
            "superseded",
            "foreign",
            "moved",
            "skew",
            "ttl",
            "unsafe_role",
            "identity",
        ] {
            assert_eq!(Outcome::parse(text).map(Outcome::name), Some(text));
            assert!(
                include_str!("../../sql/registry/registry.sql").contains(&format!("'{text}'")),
                "the registry never answers {text}"
            );
        }
        assert!(
            include_str!("../../sql/registry/registry.sql").contains(&format!(
                "CHECK (lock_delay_ms BETWEEN {LEAST_LOCK_DELAY_MS} AND"
            )),
            "the registry's least lock_delay is not LEAST_LOCK_DELAY_MS"
        );
        // Answered by registries of format 2 only (format 3 freezes on nothing): still known,
        // for a fleet whose registry is not upgraded yet.
        for text in ["frozen", "behind"] {
            assert_eq!(Outcome::parse(text).map(Outcome::name), Some(text));
        }
        assert_eq!(Outcome::parse("maybe"), None);
    }

    #[test]
    fn the_epoch_seen_only_goes_up_for_one_registry() {
        let seen = Seen {
            registry: 7,
            epoch: 10,
        };
        assert_eq!(seen.after(7, 12).epoch, 12);
        assert_eq!(seen.after(7, 3).epoch, 10);
        assert_eq!(
            seen.after(8, 3),
            Seen {
                registry: 8,
                epoch: 3
            }
        );
    }

    #[test]
    fn uuids_round_trip() {
        let text = "f8909ee7-7676-49fb-9067-2e47e8710522";
        let id = parse_uuid(text).unwrap();
        assert_eq!(format_uuid(id), text);
        assert_eq!(parse_uuid("nope"), None);
        assert_eq!(parse_uuid("f8909ee7-7676-49fb-9067-2e47e871052z"), None);
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

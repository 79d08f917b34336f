//! Getting a lease: claiming a worker id, waiting out the lock-delay and confirming the claim,
//! and taking the worker id granted (raising it above its predecessors' ids first).

use super::*;

impl Keeper {
    /// Whether the marks are loaded and usable (a new worker is raised above its
    /// predecessors' ids through them).
    pub(super) fn marks_ready(&self) -> bool {
        let control = self.shared.control();
        control.loaded && control.state == State::Ready
    }

    pub(super) fn claim(&mut self) {
        // A retry leaves the last refusal shown until the registry answers again: an id asked
        // for meanwhile is refused for the registry's reason and with its way out, not as
        // "no worker id is leased yet". Only a refusal is kept: a lease given back, one whose
        // renewals were failing, or a worker id waited on and then left out by a reload no
        // longer stands as held or waited on.
        let shown = self.shared.control().lease.standing;
        if self.failures == 0
            || matches!(
                shown,
                Standing::Held | Standing::Waiting | Standing::NotUsed
            )
        {
            self.set_status(Standing::Claiming, "");
        }
        self.me.timeline = timeline();
        let me = self.me.clone();
        let (range, pinned) = claimable();
        // Connected first: a new connection learns the registry's limits, which the lease
        // asked for must fit.
        if let Err(e) = self.registry(Instant::now() + CONNECT) {
            if e != Failure::Interrupted {
                self.failed(Standing::Unreachable, &e.to_string());
            }
            return;
        }
        let timing = self.timing();
        // The fence of a lease this server holds and that still runs by its own boot clock,
        // this start's (shared memory) or, after a restart, an earlier start's (its record):
        // the only ground on which the registry hands a worker id over at once to an earlier
        // holder. A lease that ran out brings none, and waits out the lock-delay.
        let held = {
            let control = self.shared.control();
            control
                .lease
                .fence
                .filter(|_| clock::boot_ms() < control.lease.fence_until)
        };
        let fence = held.or_else(|| {
            record::running(&me.boot)
                .filter(|r| range.contains(r.worker))
                .map(|r| r.fence)
        });
        let seen = self.seen();
        let sent_at = clock::boot_ms();
        // A renewal, or a claim granted at once, whose answer was lost raised the fence: the
        // registry knows this server by the request, asked again with the same one.
        let request = Some(self.in_flight());
        let answer = self.registry(Instant::now() + EXCHANGE).and_then(|mut r| {
            r.claim(
                &me,
                range,
                pinned,
                timing.ttl_ms,
                clock::unix_ms(),
                fence,
                request,
                seen,
            )
        });
        let a = match answer {
            Ok(a) => {
                self.answered(a.outcome);
                a
            }
            Err(Failure::Interrupted) => return,
            Err(e) => return self.failed(Standing::Unreachable, &e.to_string()),
        };
        self.note(&a);
        let worker = a.worker.unwrap_or(NONE);
        let in_range = range.contains(worker)
            && self
                .shared
                .params
                .layout
                .check_worker(worker as i64)
                .is_ok();
        match a.outcome {
            Outcome::Granted | Outcome::Wait if !in_range => self.failed(
                Standing::Unreachable,
                &format!("the registry granted worker id {worker}, outside {range}"),
            ),
            Outcome::Granted => {
                let held = Held {
                    worker,
                    fence: a.fence.unwrap_or(0),
                    sent_at,
                    ttl_ms: timing.ttl_ms,
                };
                self.take(held, &a);
            }
            Outcome::Wait => {
                let wait = rules::takeover_wait_ms(a.wait_ms.unwrap_or(0), self.max_skew_ms);
                let until = clock::boot_ms() + wait;
                self.phase = Phase::Waiting(Waiting {
                    worker,
                    token: a.token.unwrap_or(0),
                    until,
                });
                self.succeeded();
                self.shared.control().lease.waiting_until_unix_ms = clock::unix_ms() + wait as i64;
                let why = format!("claimed worker id {worker}; {}", a.reason);
                self.set_status(Standing::Waiting, &why);
                errors::log(
                    format!(
                        "snowflake: {NAME}: claimed worker id {worker}, waiting {wait} ms before minting with it: {}",
                        a.reason
                    ),
                    "A worker id whose last holder did not give it back changes hands only once that holder cannot still be minting with it.",
                );
            }
            outcome => self.refused(outcome, &a.reason),
        }
    }

    /// A refusal of the registry, as the lease's standing.
    pub(super) fn refused(&mut self, outcome: Outcome, reason: &str) {
        let standing = match outcome {
            Outcome::Exhausted => Standing::Exhausted,
            Outcome::Taken => Standing::Taken,
            Outcome::Superseded => Standing::Superseded,
            Outcome::Duplicate => return self.stop_for_good(reason),
            Outcome::Frozen | Outcome::Behind => Standing::Frozen,
            Outcome::Foreign => Standing::Foreign,
            Outcome::Moved => Standing::Moved,
            Outcome::Skew => Standing::Skew,
            Outcome::Ttl | Outcome::UnsafeRole => Standing::Refused,
            _ => Standing::Unreachable,
        };
        let why = if reason.is_empty() {
            format!("the registry answered {}", outcome.name())
        } else {
            reason.to_string()
        };
        self.failed(standing, &why);
    }

    /// After the lock-delay: confirms the claim.
    pub(super) fn confirm(&mut self, w: Waiting) {
        let timing = self.timing();
        let me = self.me.clone();
        let seen = self.seen();
        let sent_at = clock::boot_ms();
        // A confirmation whose answer was lost is asked again as itself: the registry answers
        // it as it did (else it would find its own grant in the claim's place).
        let request = self.in_flight();
        let answer = self.registry(Instant::now() + CONNECT).and_then(|mut r| {
            r.confirm(
                &me,
                w.worker,
                w.token,
                request,
                timing.ttl_ms,
                clock::unix_ms(),
                seen,
            )
        });
        let a = match answer {
            Ok(a) => {
                self.answered(a.outcome);
                a
            }
            Err(Failure::Interrupted) => return,
            Err(e) => {
                // The claim stays the registry's to keep; confirmed at the next attempt.
                self.failed(Standing::Unreachable, &e.to_string());
                self.phase = Phase::Waiting(Waiting {
                    until: self.next_attempt,
                    ..w
                });
                return;
            }
        };
        self.note(&a);
        match a.outcome {
            Outcome::Granted => {
                let held = Held {
                    worker: w.worker,
                    fence: a.fence.unwrap_or(0),
                    sent_at,
                    ttl_ms: timing.ttl_ms,
                };
                self.take(held, &a);
            }
            Outcome::Wait => {
                // The registry's clock has not seen the lock-delay pass (the same claim), or it
                // claimed again for this server (a new token: a lock-delay from now).
                let (token, wait) = match a.token {
                    Some(token) if token != w.token => (
                        token,
                        rules::takeover_wait_ms(a.wait_ms.unwrap_or(0), self.max_skew_ms),
                    ),
                    _ => (w.token, a.wait_ms.unwrap_or(0).max(1)),
                };
                self.phase = Phase::Waiting(Waiting {
                    token,
                    until: clock::boot_ms() + wait,
                    ..w
                });
                if token != w.token {
                    self.shared.control().lease.waiting_until_unix_ms =
                        clock::unix_ms() + wait as i64;
                    self.set_status(Standing::Waiting, &a.reason);
                }
            }
            Outcome::Lost => {
                self.phase = Phase::Idle;
                self.next_attempt = 0;
                errors::log(
                    format!(
                        "snowflake: {NAME}: the claim of worker id {} failed: {}",
                        w.worker, a.reason
                    ),
                    "Another worker id is claimed next.",
                );
                self.set_status(Standing::Claiming, &a.reason);
            }
            outcome => {
                self.phase = Phase::Idle;
                self.refused(outcome, &a.reason);
            }
        }
    }

    /// Takes a worker id just granted: once the mark writer has read the marks, raises the
    /// worker above its predecessors' ids, records a cap for it (a renewal), then uses it.
    /// Nothing is recorded before that: the registry would hand a cap recorded for a lease
    /// not yet used back as its last mark at the next claim, and the worker would start above
    /// it, the TTL and the marks' reach ahead of the clock.
    pub(super) fn take(&mut self, held: Held, a: &Answer) {
        // This start's, from now on, in the registry (the grant raised the fence): claimed
        // again at once with it, whatever happens below.
        {
            let mut control = self.shared.control();
            control.lease.fence = Some(held.fence);
            control.lease.fence_until = held.usable_until();
        }
        // Recorded at once: an earlier start's record, still on disk, names an older fence.
        record::write(&held, held.usable_until(), &self.me.boot);
        let p = self.shared.params;
        let worker = held.worker;
        // The new holder starts above the last one's cap, and above the time the registry
        // says no predecessor's ids can reach.
        let mut floor = match a.last_mark.map(|id| p.layout.decompose(id)) {
            Some(Ok(parts)) if parts.worker == worker => p.layout.tick_of(parts) + 1,
            Some(_) => {
                return self.failed(
                    Standing::Refused,
                    &format!("the registry holds a last mark for worker id {worker} that is not an id of it in this layout"),
                )
            }
            None => 0,
        };
        if let Some(ms) = a.min_start_ms {
            floor = floor.max(p.layout.time_from_unix_ms(ms) << p.seq_bits);
        }
        let floor = floor.min(p.tick_limit);
        self.phase = Phase::Idle;
        self.succeeded();
        if !self.registry_seen_known() {
            // Claimed without the registry this server last leased from (the mark writer has
            // not read it yet: it may be waiting for a synchronous standby): not used until a
            // claim that says which, so that the registry can refuse a server that comes from
            // another one.
            self.set_status(
                Standing::Claiming,
                "waiting for the mark writer to read the marks",
            );
            self.next_attempt = clock::boot_ms() + MARKS_POLL_MS;
            return;
        }
        if floor > 0 && !self.marks_ready() {
            // Not a failure: the marks are loaded a moment after start-up (or never, while a
            // synchronous standby is missing). The lease stays this server's; claimed again
            // then, it is raised above its last holder's ids.
            self.set_status(
                Standing::Claiming,
                "waiting for the mark writer to load the marks",
            );
            self.next_attempt = clock::boot_ms() + MARKS_POLL_MS;
            return;
        }
        if floor > 0 {
            let from = (floor >> p.seq_bits).saturating_add(1) << p.seq_bits;
            let reply = mailbox::ask(
                self.shared,
                Ask::Restore {
                    worker: Some(worker),
                    from,
                },
            );
            if !matches!(reply.answer, Reply::Restored { .. }) {
                // Still this server's in the registry; claimed again (at once) next time.
                return self.failed(
                    Standing::Claiming,
                    &format!(
                        "worker id {worker} could not be raised above its last holder's ids: {}",
                        reply.text
                    ),
                );
            }
        }
        let until = held.usable_until();
        let Some(held) = self.record_cap(held, floor, until) else {
            return;
        };
        self.use_lease(held);
        errors::log(
            format!("snowflake: {NAME}: this server holds worker id {worker}"),
            &format!(
                "Leased from the registry for {} ms at a time; its ids continue above every id of its previous holders.",
                held.ttl_ms
            ),
        );
    }
}

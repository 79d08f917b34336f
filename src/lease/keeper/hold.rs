//! Keeping and giving back a lease: renewing it with the cap below which this server issues,
//! using it, losing it, stopping for good when a copy of this server holds it, giving it back,
//! and moving to another registry.

use super::*;

impl Keeper {
    /// Renews the lease; whether it was.
    pub(super) fn renew(&mut self, held: Held) -> bool {
        let timing = self.timing();
        let sent_at = clock::boot_ms();
        let until = held.usable_until();
        match self.record_cap(
            Held {
                sent_at,
                ttl_ms: timing.ttl_ms,
                ..held
            },
            0,
            until,
        ) {
            Some(renewed) => {
                self.use_lease(renewed);
                true
            }
            None => false,
        }
    }

    /// Records in the registry the cap for `held` (from now, above `floor` if the worker is
    /// new), renewing it; the lease renewed, or `None` (and the lease stopped if it is gone).
    /// `until`: the boot time until which the lease this renews could be used. Past it, the
    /// registry is told that the lease ran out here (a registry of format 2, recovered after it
    /// went back in time, made such a server claim again; format 3 judges by its own lease).
    pub(super) fn record_cap(&mut self, held: Held, floor: u64, until: u64) -> Option<Held> {
        let p = self.shared.params;
        let slot = self.shared.slot(held.worker);
        let clock = clock::wall(&p.layout);
        let ttl_units = p.layout.units_in_ms(held.ttl_ms);
        let reach = p.layout.units_in_ms(MARK_AHEAD_MS);
        let last = slot.last().max(floor).max(slot.mark.load(Acquire));
        let cap = rules::cap(&p.layout, p.tick_limit, clock, last, ttl_units, reach);
        let cap_id = p.layout.id_from_tick(cap, held.worker);
        let me = self.me.clone();
        let seen = self.seen();
        let request = self.in_flight();
        let answer = self.registry(Instant::now() + EXCHANGE).and_then(|mut r| {
            // Read as the request goes out (connecting may have taken a while).
            let ran_out = clock::boot_ms() >= until;
            r.renew(
                &me,
                held.worker,
                held.fence,
                request,
                cap_id,
                held.ttl_ms,
                clock::unix_ms(),
                seen,
                ran_out,
            )
        });
        let a = match answer {
            Ok(a) => a,
            Err(Failure::Interrupted) => return None,
            Err(e) => {
                self.failed(Standing::Unreachable, &e.to_string());
                return None;
            }
        };
        self.answered(a.outcome);
        self.note(&a);
        match a.outcome {
            Outcome::Renewed => {
                slot.cap.store(cap, Release);
                self.succeeded();
                if !a.reason.is_empty() {
                    errors::warn(
                        format!("snowflake: {NAME}: {}", a.reason),
                        "Two servers with this one's system identifier, host name, port and data directory run (a VM snapshot started beside its original, a copied data directory on a host of the same name): stop the copy. The copy stops on its own; this server keeps its worker id.",
                    );
                }
                Some(Held {
                    fence: a.fence.unwrap_or(held.fence),
                    ..held
                })
            }
            Outcome::Lost => {
                self.lose(
                    held.worker,
                    &format!(
                        "the registry says the lease is no longer this server's: {}",
                        a.reason
                    ),
                );
                None
            }
            Outcome::Duplicate => {
                self.stop_for_good(&a.reason);
                None
            }
            outcome => {
                self.refused(outcome, &a.reason);
                None
            }
        }
    }

    /// Uses a lease just claimed or renewed. A worker closed meanwhile (never used yet, or
    /// stopped by a session while the renewal was on its way: `stop_using`) is opened again,
    /// under the control lock: the registry kept it this server's all along.
    pub(super) fn use_lease(&mut self, held: Held) {
        record::write(&held, held.usable_until(), &self.me.boot);
        self.phase = Phase::Holding(held);
        let lease = &self.shared.lease;
        let expires = clock::unix_ms() + held.ttl_ms as i64;
        {
            let mut control = self.shared.control();
            lease.usable_until.store(held.usable_until(), Release);
            if lease.worker.load(Acquire) != held.worker {
                snowflake_core::marks::reopen(self.shared.slot(held.worker));
                lease.worker.store(held.worker, Release);
            }
            control.lease.worker = Some(held.worker);
            control.lease.fence = Some(held.fence);
            control.lease.fence_until = held.usable_until();
            control.lease.expires_unix_ms = expires;
        }
        self.set_status(Standing::Held, "");
    }

    pub(super) fn lose(&mut self, worker: u32, why: &str) {
        record::remove();
        stop_using(self.shared, worker, why);
        self.phase = Phase::Idle;
        self.shared.control().lease.fence = None;
        errors::warn(
            format!("snowflake: {NAME}: this server no longer holds worker id {worker}: {why}"),
            "No ids are minted until a worker id is leased again.",
        );
        self.set_status(Standing::Claiming, why);
    }

    /// A copy of this server holds its worker id: stop, and claim nothing until the server
    /// restarts, so that the two never take turns with one worker id.
    pub(super) fn stop_for_good(&mut self, why: &str) {
        if let Phase::Holding(held) = self.phase {
            stop_using(self.shared, held.worker, why);
        }
        self.phase = Phase::Stopped;
        self.shared.control().lease.fence = None;
        record::remove();
        errors::warn(
            format!("snowflake: {NAME}: this server stops minting: {why}"),
            "Stop the copy of this server, then restart this one. Until then it claims no worker id.",
        );
        self.set_status(Standing::Duplicate, why);
    }

    /// Gives the lease back (at a clean stop, before a move to another registry, or when the
    /// worker id is no longer wanted), with one past the last id issued under it (its worker is
    /// closed first, so that is final), so that the next holder, most often this server
    /// again, continues right above its ids, at once. A claim waiting out its lock-delay is
    /// dropped (the registry lets it lapse).
    pub(super) fn release(&mut self, why: &str) {
        let held = match self.phase {
            Phase::Holding(held) => held,
            Phase::Waiting(_) => {
                self.phase = Phase::Idle;
                return;
            }
            _ => return,
        };
        self.phase = Phase::Idle;
        stop_using(
            self.shared,
            held.worker,
            &format!("the lease was released: {why}"),
        );
        self.shared.control().lease.fence = None;
        // The record goes first: a release applied but unanswered, then a registry restored to
        // before it, must not find this server still claiming a running lease of its own (the
        // lease model's case: it would continue at once beside the server the release let in).
        record::remove();
        let p = self.shared.params;
        let slot = self.shared.slot(held.worker);
        let end = (slot.last() + 1)
            .min(slot.cap.load(Acquire))
            .min(p.tick_limit);
        let end_id = p.layout.id_from_tick(end, held.worker);
        let me = self.me.clone();
        let seen = self.seen();
        // At a clean stop SIGTERM is already set, and would end the exchange before it began:
        // the release gets its own short deadline instead.
        let released = if terminating() {
            self.registry_stopping_on(Instant::now() + RELEASE_AT_STOP, &|| false)
        } else {
            self.registry(Instant::now() + EXCHANGE)
        }
        .and_then(|mut r| r.release(&me, held.worker, held.fence, end_id, seen));
        match released {
            Ok(a) => {
                self.note(&a);
                if a.outcome != Outcome::Released {
                    errors::warn(
                        format!(
                            "snowflake: {NAME}: worker id {} was not given back: {} {}",
                            held.worker,
                            a.outcome.name(),
                            a.reason
                        ),
                        "It is free again once its lease expires and the next holder has waited out the lock-delay.",
                    );
                }
            }
            Err(e) => errors::warn(
                format!(
                    "snowflake: {NAME}: could not give worker id {} back: {e}",
                    held.worker
                ),
                "It is free again once its lease expires and the next holder has waited out the lock-delay.",
            ),
        }
    }

    /// Moves to the registry `snowflake.registry` now names. The same registry reached through
    /// another string is simply used from now on; another registry only once the lease is
    /// given back in the old one (whose connection is still open), with its final mark. A new
    /// registry that cannot be reached leaves the lease where it is, renewed as before.
    pub(super) fn switch_registry(&mut self) {
        let target = settings::registry();
        let current = self.seen().registry;
        let opened = open(&target, Instant::now() + CONNECT, &terminating).and_then(|mut conn| {
            let a = Registry {
                conn: &mut conn,
                deadline: Instant::now() + EXCHANGE,
                should_stop: &terminating,
            }
            .identity()?;
            Ok((conn, a))
        });
        let (conn, a) = match opened {
            Ok(opened) => opened,
            Err(Failure::Interrupted) => return,
            Err(e) => {
                self.failures += 1;
                self.next_attempt = clock::boot_ms() + self.timing().back_off_ms(self.failures - 1);
                if self.failures == 1 || self.failures.is_multiple_of(10) {
                    errors::warn(
                        format!("snowflake: {NAME}: the new snowflake.registry cannot be reached: {e}"),
                        "This server keeps its lease in the registry it used until now, and tries again.",
                    );
                }
                return;
            }
        };
        if a.registry != current && current != 0 {
            errors::log(
                format!(
                    "snowflake: {NAME}: moving from registry {} to registry {}",
                    rules::format_uuid(current),
                    rules::format_uuid(a.registry)
                ),
                "The lease is given back in the old registry, with its final mark, before one is claimed in the new one.",
            );
            self.release("moving to another registry");
            // A fence or a request of the old registry means nothing in the new one (an
            // imported lease starts its fence again): never sent there.
            {
                let mut control = self.shared.control();
                control.lease.fence = None;
                control.lease.request = None;
            }
            self.next_attempt = 0;
        } else {
            self.renew_now = matches!(self.phase, Phase::Holding(_));
        }
        self.shared.control().lease.registry.set(&conn.server());
        self.conn = Some(conn);
        self.connected_with = target;
        self.switching = false;
        self.failures = 0;
    }
}

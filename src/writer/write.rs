//! Writing the marks: one pass over the workers, what is due written in one transaction,
//! then raised in shared memory; and the clean stop.

use super::{session, signals, Writer, NAME, RETRY};
use crate::control::State;
use crate::{clock, errors, marks_table, token_file};
use pgrx::prelude::*;
use snowflake_core::marks::{self, Row};
use std::sync::atomic::Ordering::*;

impl Writer {
    /// One pass: writes what is due for every worker, then raises the marks.
    pub(super) fn pass(&mut self) -> Result<(), String> {
        let now = clock::wall(self.layout());
        let mut due = Vec::new();
        for (w, slot) in self.shared.slots().iter().enumerate() {
            if let Some(want) = marks::row_to_write(slot, &self.p, now, &self.stored[w]) {
                due.push((w as u32, want));
            }
        }
        if due.is_empty() && (self.table.token_file_ok || self.table.identity.is_none()) {
            return Ok(());
        }
        match self.write(&due) {
            Ok(()) => {
                for &(w, want) in &due {
                    self.stored[w as usize] = want;
                    marks::mark_written(self.shared.slot(w), want.mark);
                }
                self.set_failing(None);
                self.shared.broadcast();
                Ok(())
            }
            Err(e) => {
                for &(w, _) in &due {
                    // Try again next time; the marks in shared memory stay as they were.
                    self.shared.slot(w).dirty.store(true, Release);
                }
                self.set_failing(Some(&e));
                self.shared.broadcast();
                Err(e)
            }
        }
    }

    /// Writes `rows` durably: the table (claiming it first if it is not the one this writer
    /// wrote before), then the token file. A write during which a cancel or a terminate
    /// arrived is not trusted, because that ends a wait for a synchronous standby early.
    pub(super) fn write(&mut self, rows: &[(u32, Row)]) -> Result<(), String> {
        let layout = *self.layout();
        let table = self.table;
        let stored = self.stored.clone();
        let signals = signals::interrupts();
        let identity = session::transaction(move || {
            let identity = match marks_table::lock_identity() {
                Some(current) if Some(current) == table.identity => current,
                _ => {
                    let identity = marks_table::claim(&layout, table.token);
                    if table.identity.is_some() {
                        errors::warn(
                            format!(
                                "snowflake: the marks table {}.marks was dropped or replaced while the server ran; \
                                 rewriting it from memory",
                                marks_table::SCHEMA
                            ),
                            "This server's own state in shared memory covers every id it issued.",
                        );
                        let known: Vec<(u32, Row)> = stored
                            .iter()
                            .enumerate()
                            .filter(|(_, p)| **p != Row::default())
                            .map(|(w, p)| (w as u32, *p))
                            .collect();
                        marks_table::write(&layout, &known);
                    }
                    identity
                }
            };
            marks_table::write(&layout, rows);
            identity
        })?;
        if signals::interrupts() != signals {
            return Err(
                "the write was interrupted by a cancel or a shutdown; its commit may not have \
                        reached a synchronous standby"
                    .into(),
            );
        }
        let mut table = self.table;
        if table.identity != Some(identity) {
            table.identity = Some(identity);
            table.token_file_ok = false;
        }
        self.set_table(table);
        if !table.token_file_ok {
            token_file::write(&identity).map_err(|e| {
                format!("the marks were committed, but the token file could not be written: {e}")
            })?;
            table.token_file_ok = true;
            self.set_table(table);
        }
        Ok(())
    }

    pub(super) fn set_failing(&mut self, failure: Option<&str>) {
        if failure.is_some() {
            self.trouble.failed();
        }
        {
            let mut control = self.shared.control();
            control.failing = failure.is_some();
            control.failure.set(failure.unwrap_or(""));
            control.failures = if failure.is_some() {
                self.trouble.failures
            } else {
                0
            };
        }
        match failure {
            Some(e) => {
                if self.trouble.due() {
                    errors::warn(
                        format!("snowflake: could not write the high-water marks: {e}"),
                        &format!(
                            "{} attempt(s) failed so far; retrying every {} s. Ids are not issued beyond the \
                             last mark written until this succeeds.",
                            self.trouble.failures,
                            RETRY.as_secs()
                        ),
                    );
                    self.trouble.logged();
                }
            }
            None => {
                if let Some(since) = self.trouble.recovered() {
                    errors::log(
                        format!(
                            "snowflake: the high-water marks are written again, after failing for {} s",
                            since.as_secs()
                        ),
                        "",
                    );
                }
            }
        }
    }

    /// A clean stop: closes every worker, persists exactly one past its last id, and exits
    /// with code 1 so that the postmaster restarts the writer unless the server is stopping.
    pub(super) fn stop(&mut self) -> ! {
        self.shared.writer_latch.store(0, Release);
        if self.shared.control().state == State::Ready {
            let rows: Vec<(u32, Row)> = self
                .shared
                .slots()
                .iter()
                .enumerate()
                .filter_map(|(w, slot)| {
                    let mark = marks::close(slot);
                    let now = marks::row(slot, mark);
                    (now != self.stored[w]).then_some((w as u32, now))
                })
                .collect();
            // A lowered mark need not wait for a standby: the higher one it replaces is safe.
            let written =
                session::transaction(|| Spi::run("SET synchronous_commit = local").expect("set"))
                    .and_then(|_| self.write(&rows));
            if let Err(e) = written {
                errors::warn(
                    format!("snowflake: could not write the final high-water marks: {e}"),
                    "The previous marks still cover every id issued; after a restart ids resume from them.",
                );
            }
        }
        errors::log(
            format!("snowflake: {NAME} stopping on SIGTERM"),
            "It is restarted within a second unless the server is shutting down.",
        );
        session::exit()
    }
}

//! Writing the marks: one pass over the workers, what is due written in one transaction,
//! then raised in shared memory; and the clean stop.

use super::{session, Writer, NAME, RETRY};
use crate::bgworker::signals;
use crate::marks::marks_table::{self, Refusal};
use crate::shared::control::{State, TableState};
use crate::{errors, marks::token_file, mint::clock};
use pgrx::prelude::*;
use snowflake_core::marks::{self, Row};
use snowflake_core::token::Recorded;
use std::sync::atomic::Ordering::*;

/// Whether a write's commit waited for a synchronous standby. A cancel or a terminate ends that
/// wait early, so such a write is not trusted if one arrived; a commit that did not wait (the
/// final marks of a clean stop, which only lower them) is durable here whatever arrived.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Standby {
    Waited,
    NotWaited,
}

/// The rows a marks table holds for `rows`, one per worker: those that are not empty.
fn known_rows(rows: &[Row]) -> Vec<(u32, Row)> {
    rows.iter()
        .enumerate()
        .filter(|(_, r)| **r != Row::default())
        .map(|(w, r)| (w as u32, *r))
        .collect()
}

impl Writer {
    /// One pass: writes what is due for every worker, then raises the marks.
    pub(super) fn pass(&mut self) -> Result<(), String> {
        let now = clock::wall(self.layout());
        let mut due = Vec::new();
        for (w, slot) in self.shared.slots().iter().enumerate() {
            if let Some(row) = marks::row_to_write(slot, &self.p, now, &self.stored[w]) {
                due.push((w as u32, row));
            }
        }
        let registry_current = self.shared.control().registry_seen == self.table.seen;
        if due.is_empty()
            && (self.table.token_file_ok || self.table.identity.is_none())
            && registry_current
        {
            return Ok(());
        }
        let written = self.write(&due);
        if written.is_err() {
            for &(w, _) in &due {
                // Try again next time; the marks in shared memory stay as they were.
                self.shared.slot(w).dirty.store(true, Release);
            }
        }
        match written {
            Ok(()) => {
                for &(w, row) in &due {
                    marks::mark_written(self.shared.slot(w), row.mark);
                }
                self.set_failing(None);
                self.shared.broadcast();
                Ok(())
            }
            Err(Refusal::Untrusted(why)) => {
                self.set_state(State::InDoubt, &why, marks_table::UNTRUSTED_HINT);
                Err(why)
            }
            Err(Refusal::Failed(e)) => {
                self.set_failing(Some(&e));
                self.shared.broadcast();
                Err(e)
            }
        }
    }

    /// Writes `rows` durably: the table, then the token file. The table must be as this writer
    /// left it (the same table, generation and rows); one that was dropped, replaced, emptied
    /// or edited while the server ran is written again whole from what the writer knows, which
    /// covers every id issued. A write during which a cancel or a terminate arrived is not
    /// trusted, because that ends a wait for a synchronous standby early.
    pub(super) fn write(&mut self, rows: &[(u32, Row)]) -> Result<(), Refusal> {
        self.write_with(rows, Standby::Waited)
    }

    pub(super) fn write_with(
        &mut self,
        rows: &[(u32, Row)],
        standby: Standby,
    ) -> Result<(), Refusal> {
        let layout = *self.layout();
        let table = self.table;
        let seen = self.shared.control().registry_seen;
        let mut after = self.stored.clone();
        for &(w, row) in rows {
            after[w as usize] = row;
        }
        let before: Vec<(u32, Row)> = known_rows(&self.stored);
        let interrupts = signals::interrupts();
        let (identity, generation, rewritten) = session::transaction(|| {
            let current = marks_table::lock_for_write(&layout)?;
            let as_left = current.as_ref().is_some_and(|c| {
                Some(c.identity) == table.identity
                    && c.generation == table.generation
                    && c.rows == before
            });
            let identity = if as_left {
                marks_table::write(&layout, rows)?;
                table.identity.expect("the table as left")
            } else {
                marks_table::claim(&layout, table.token, &known_rows(&after))?
            };
            let generation = current.map_or(0, |c| c.generation).max(table.generation) + 1;
            marks_table::stamp(&table.key, &layout, table.token, generation, &after, seen)?;
            Ok::<_, Refusal>((identity, generation, !as_left && table.identity.is_some()))
        })
        .map_err(Refusal::Failed)??;
        if rewritten {
            let database_replaced = table
                .identity
                .is_some_and(|before| before.database != identity.database);
            let what = if database_replaced {
                format!(
                    "the marks database \"{}\" (snowflake.database) was dropped and created again \
                     while the server ran; the marks were written into it again from memory",
                    crate::settings::database()
                )
            } else {
                format!(
                    "the marks table {}.marks was dropped, replaced, emptied or changed while \
                     the server ran; it was written again from memory",
                    marks_table::SCHEMA
                )
            };
            errors::warn(
                format!("snowflake: {what}"),
                "This server's own state in shared memory, kept since it started, covers every \
                 id it issued; nothing was read from what was found there.",
            );
        }
        if standby == Standby::Waited && signals::interrupts() != interrupts {
            return Err(Refusal::Failed(
                "the write was interrupted by a cancel or a shutdown; its commit may not have \
                 reached a synchronous standby"
                    .into(),
            ));
        }
        self.stored = after;
        self.set_table(TableState {
            token: table.token,
            identity: Some(identity),
            generation,
            key: table.key,
            token_file_ok: false,
            seen,
        });
        // Before any id below these marks is issued: a table found behind this generation later
        // was rolled back or replaced.
        token_file::write(&Recorded {
            identity,
            generation,
            key: Some(table.key),
        })
        .map_err(|e| {
            Refusal::Failed(format!(
                "the marks were committed, but the token file could not be written: {e}"
            ))
        })?;
        self.set_table(TableState {
            token_file_ok: true,
            ..self.table
        });
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
        signals::final_write();
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
            // A server that never wrote a mark never issued an id (every id is below a durable
            // mark): it leaves no marks and no token file behind, so that it stays a first start
            // wherever snowflake.database points next.
            let never_minted = rows.is_empty() && self.table.identity.is_none();
            // A lowered mark need not wait for a standby: the higher one it replaces is safe.
            let written = if never_minted {
                Ok(())
            } else {
                session::transaction(|| Spi::run("SET synchronous_commit = local").expect("set"))
                    .map_err(Refusal::Failed)
                    .and_then(|_| self.write_with(&rows, Standby::NotWaited))
            };
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

//! An administrator's requests (`admin.rs`), as the mark writer serves them: a restore or a
//! rewind while the marks are loaded, and only a restore of every worker while they are in
//! doubt, which accepts the marks table as it is.

use super::load::random_token;
use super::{session, Writer};
use crate::clock;
use crate::control::{Answer, Ask, State, TableState, ASK_EXPIRES_MS};
use crate::marks_table::{self, Refusal};
use snowflake_core::marks::{self, Row};
use std::sync::atomic::Ordering::*;

impl Writer {
    /// Takes the administrator's request, if one is pending, and applies what must happen in
    /// shared memory; `pass` then persists it.
    pub(super) fn take_ask(&mut self) -> Option<Ask> {
        let ask = self.pending_ask()?;
        let mut control = self.shared.control();
        match ask {
            Ask::Nothing => {}
            Ask::Restore { worker, from } => {
                let mut top = 0;
                for (w, slot) in self.shared.slots().iter().enumerate() {
                    if worker.is_none_or(|x| x as usize == w) {
                        top = top.max(marks::restore(slot, &self.p, from));
                    }
                }
                control.answer = Answer::Restored { mark: top };
            }
            Ask::Rewind { worker, clock } => {
                control.answer = match marks::rewind(self.shared.slot(worker), &self.p, clock) {
                    Ok(r) => Answer::Rewound(r),
                    Err(refusal) => Answer::RewindRefused(refusal),
                };
            }
        }
        Some(ask)
    }

    /// The request in the mailbox, if there is one the asking session still waits for; an
    /// older one is dropped, answered as expired, so that nothing is done behind its back.
    fn pending_ask(&mut self) -> Option<Ask> {
        let mut control = self.shared.control();
        if control.asked == control.answered {
            return None;
        }
        if clock::boot_ms().saturating_sub(control.asked_at_ms) > ASK_EXPIRES_MS {
            control.answer = Answer::Failed;
            control
                .answer_text
                .set("the request expired before the mark writer could take it");
            control.answered = control.asked;
            drop(control);
            self.shared.broadcast();
            return None;
        }
        Some(control.ask)
    }

    /// Answers the pending request once `pass` has written what it changed.
    pub(super) fn answer(&mut self, ask: Ask, written: Result<(), String>) {
        let mut control = self.shared.control();
        if let Err(e) = written {
            if !matches!(control.answer, Answer::RewindRefused(_)) {
                control.answer = Answer::Failed;
                control.answer_text.set(&format!(
                    "the change is in effect, but persisting it failed ({e}); the mark writer keeps \
                     trying, and until it succeeds no id beyond the current marks is issued"
                ));
            }
        }
        if let (Ask::Restore { worker, .. }, Answer::Restored { .. }) = (ask, control.answer) {
            let mark = match worker {
                Some(w) => self.stored[w as usize].mark,
                None => self.stored.iter().map(|p| p.mark).max().unwrap_or(0),
            };
            control.answer = Answer::Restored { mark };
        }
        control.answered = control.asked;
        drop(control);
        self.shared.broadcast();
    }

    /// While the marks are in doubt, only an administrator's restore of every worker helps:
    /// it accepts the marks table as it is (creating it if it is gone) under a new token, with
    /// every worker raised to at least `from`. Marks that were loaded before the doubt (the
    /// objects stopped being trustworthy while the server ran) stay what they are in shared
    /// memory, which covers every id issued. Objects that cannot be trusted are never
    /// accepted: they must be dropped first.
    fn accept_in_doubt(&mut self, from: u64) -> Result<u64, String> {
        let layout = *self.layout();
        let rows = session::transaction(move || match marks_table::read_meta() {
            Err(Refusal::Untrusted(why)) => Err(why),
            Ok(Some(m)) if m.layout == layout.to_string() => {
                Ok(marks_table::read_marks(&layout).unwrap_or_default())
            }
            _ => Ok(Vec::new()),
        })??;
        let loaded = self.shared.control().loaded;
        self.set_table(TableState {
            token: random_token(),
            generation: self.table.generation,
            ..TableState::default()
        });
        let mut found = vec![Row::default(); self.stored.len()];
        for (w, p) in rows {
            found[w as usize] = p;
        }
        self.stored.fill(Row::default());
        for (slot, p) in self.shared.slots().iter().zip(&found) {
            if !loaded {
                marks::load(slot, p);
            }
            marks::restore(slot, &self.p, from);
            slot.dirty.store(true, Release);
        }
        let now = clock::wall(self.layout());
        let all: Vec<(u32, Row)> = self
            .shared
            .slots()
            .iter()
            .enumerate()
            .map(|(w, slot)| {
                let mark = marks::next_mark(slot, &self.p, now).unwrap_or(slot.mark.load(Acquire));
                (w as u32, marks::row(slot, mark))
            })
            .collect();
        self.write(&all).map_err(|e| e.to_string())?;
        for &(w, p) in &all {
            marks::mark_written(self.shared.slot(w), p.mark);
            marks::reopen(self.shared.slot(w));
        }
        Ok(all.iter().map(|(_, p)| p.mark).max().unwrap_or(0))
    }

    /// While the marks are in doubt, the only request served is a restore of every worker.
    pub(super) fn serve_in_doubt(&mut self) {
        let Some(ask) = self.pending_ask() else {
            return;
        };
        let answer = match ask {
            Ask::Restore { worker: None, from } => self.accept_in_doubt(from),
            _ => Err("the marks are in doubt for every worker: restore them all with snowflake_restore_mark(<id>) first".into()),
        };
        let mut control = self.shared.control();
        match answer {
            Ok(mark) => {
                control.answer = Answer::Restored { mark };
                control.state = State::Ready;
                control.loaded = true;
                control.why.set("");
                control.hint.set("");
            }
            Err(e) => {
                control.answer = Answer::Failed;
                control.answer_text.set(&e);
            }
        }
        control.answered = control.asked;
        drop(control);
        self.shared.broadcast();
    }
}

//! An administrator's requests ([`crate::marks::admin`]), as the mark writer serves them: a restore or a
//! rewind while the marks are loaded, and only a restore of every worker while they are in
//! doubt, which accepts the marks table as it is.

use super::load::{new_key, random_token};
use super::{session, Writer};
use crate::marks::mailbox::{self, Answer, Ask};
use crate::marks::marks_table::{self, Refusal};
use crate::mint::clock;
use crate::shared::control::{State, TableState};
use snowflake_core::marks::{self, Row};
use std::sync::atomic::Ordering::*;

impl Writer {
    /// Takes the administrator's request, if one is posted, and applies what must happen in
    /// shared memory; `pass` then writes it, and `answer` answers it.
    pub(super) fn take_ask(&mut self) -> Option<(u64, Ask, Answer)> {
        let (number, ask) = mailbox::take(self.shared)?;
        let _control = self.shared.control();
        let answer = match ask {
            Ask::Nothing => Answer::Pending,
            Ask::Restore { worker, from } => {
                let mut top = 0;
                for (w, slot) in self.shared.slots().iter().enumerate() {
                    if worker.is_none_or(|x| x as usize == w) {
                        top = top.max(marks::restore(slot, &self.p, from));
                    }
                }
                Answer::Restored { mark: top }
            }
            Ask::Rewind { worker, clock } => {
                match marks::rewind(self.shared.slot(worker), &self.p, clock) {
                    Ok(r) => Answer::Rewound(r),
                    Err(refusal) => Answer::RewindRefused(refusal),
                }
            }
        };
        Some((number, ask, answer))
    }

    /// Answers request `number` once `pass` has written what it changed: a restore with the
    /// mark now durable.
    pub(super) fn answer(
        &mut self,
        (number, ask, answer): (u64, Ask, Answer),
        written: Result<(), String>,
    ) {
        let answer = match (ask, answer, written) {
            (_, Answer::RewindRefused(r), _) => Answer::RewindRefused(r),
            (_, _, Err(e)) => {
                let text = format!(
                    "the change is in effect, but writing it failed ({e}); the mark writer keeps \
                     trying, and until it succeeds no id beyond the current marks is issued"
                );
                return mailbox::answer(self.shared, number, Answer::Failed, &text, "");
            }
            (Ask::Restore { worker, .. }, Answer::Restored { .. }, Ok(())) => {
                let mark = match worker {
                    Some(w) => self.stored[w as usize].mark,
                    None => self.stored.iter().map(|p| p.mark).max().unwrap_or(0),
                };
                Answer::Restored { mark }
            }
            (_, answer, Ok(())) => answer,
        };
        mailbox::answer(self.shared, number, answer, "", "");
    }

    /// While the marks are in doubt, only an administrator's restore of every worker helps:
    /// it accepts the marks table as it is (creating it if it is gone) under a new token, with
    /// every worker raised to at least `from`. Marks that were loaded before the doubt (the
    /// objects stopped being trustworthy while the server ran) stay what they are in shared
    /// memory, which covers every id issued. Objects that cannot be trusted are never
    /// accepted: they must be dropped first.
    fn accept_in_doubt(&mut self, from: u64) -> Result<u64, Refusal> {
        let layout = *self.layout();
        let rows = session::transaction(move || match marks_table::read_meta() {
            Err(Refusal::Untrusted(why)) => Err(Refusal::Untrusted(why)),
            Ok(Some(m)) if m.layout == layout.to_string() => {
                Ok(marks_table::read_marks(&layout).unwrap_or_default())
            }
            _ => Ok(Vec::new()),
        })
        .map_err(Refusal::Failed)??;
        let loaded = self.shared.control().loaded;
        self.set_table(TableState {
            token: random_token(),
            generation: self.table.generation,
            key: new_key(),
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
        self.write(&all)?;
        for &(w, p) in &all {
            marks::mark_written(self.shared.slot(w), p.mark);
            marks::reopen(self.shared.slot(w));
        }
        Ok(all.iter().map(|(_, p)| p.mark).max().unwrap_or(0))
    }

    /// While the marks are in doubt (or not loaded yet), the only request served is a restore
    /// of every worker.
    pub(super) fn serve_in_doubt(&mut self) {
        let Some((number, ask)) = mailbox::take(self.shared) else {
            return;
        };
        let starting = self.shared.control().state == State::Starting;
        let accepted = match ask {
            Ask::Restore { worker: None, from } => self.accept_in_doubt(from),
            _ if starting => Err(Refusal::Failed(
                "the marks are not loaded yet (the server is starting, or the mark writer is connecting)".into(),
            )),
            _ => Err(Refusal::Failed(
                "the marks are in doubt for every worker: restore them all with snowflake_restore_mark(<id>) first".into(),
            )),
        };
        match accepted {
            Ok(mark) => {
                self.set_state(State::Ready, "", "");
                mailbox::answer(self.shared, number, Answer::Restored { mark }, "", "");
            }
            Err(Refusal::Untrusted(why)) => mailbox::answer(
                self.shared,
                number,
                Answer::Failed,
                &why,
                marks_table::UNTRUSTED_HINT,
            ),
            Err(Refusal::Failed(e)) => mailbox::answer(self.shared, number, Answer::Failed, &e, ""),
        }
    }
}

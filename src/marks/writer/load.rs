//! What the mark writer does with the marks it finds: at start-up, load them, start afresh or
//! refuse (`snowflake_core::startup` decides); after a restart of the writer alone, keep the
//! workers' state in shared memory and read back what is durable.

use super::{session, Writer, NAME};
use crate::marks::marks_table::{self, Refusal};
use crate::shared::control::{State, TableState};
use crate::{errors, marks::token_file};
use snowflake_core::layout::Layout;
use snowflake_core::legacy;
use snowflake_core::marks::{self, Row};
use snowflake_core::startup::{self, Decision, Found, Legacy, TokenFile};
use snowflake_core::token::Recorded;
use std::sync::atomic::Ordering::*;

impl Writer {
    /// After a restart of the writer alone: the slots are as the last writer left them. What
    /// is durable is read again from the table; every worker whose state differs from it (a
    /// write that failed before the restart) is written again.
    pub(super) fn resume(&mut self) {
        let (table, state) = {
            let control = self.shared.control();
            (control.table, control.state)
        };
        self.table = table;
        if state == State::Ready {
            let layout = *self.layout();
            let found = session::transaction(move || -> Result<_, Refusal> {
                let meta = marks_table::read_meta()?;
                Ok((meta, marks_table::read_marks(&layout)?))
            });
            self.stored.fill(Row::default());
            match found {
                Ok(Ok((Some(meta), rows))) if Some(meta.identity) == table.identity => {
                    self.table.generation = meta.generation;
                    for (w, row) in rows {
                        self.stored[w as usize] = row;
                    }
                }
                Ok(Err(Refusal::Untrusted(why))) => {
                    return self.set_state(State::InDoubt, &why, marks_table::UNTRUSTED_HINT)
                }
                // Anything else is written again from memory at the next write.
                _ => {}
            }
            for slot in self.shared.slots() {
                slot.dirty.store(true, Release);
                marks::reopen(slot);
            }
        }
        self.shared.broadcast();
        errors::log(
            format!("snowflake: {NAME} restarted; the workers' state was kept"),
            "The marks are read again from snowflake_ext_state.marks; any that lag behind the workers' state in shared memory are written again.",
        );
    }

    /// Loads the marks at start, or finds out why they cannot be.
    pub(super) fn load(&mut self) {
        let layout = *self.layout();
        let found = session::transaction(|| {
            let found = match marks_table::read_meta() {
                Ok(None) => Found::Nothing,
                Err(refusal) => return (Found::Doubtful(refusal.to_string()), Some(refusal)),
                // Marks of another layout are not decoded at all: read in this one, they name
                // other workers' ids, and the refusal would blame the rows, not the setting.
                Ok(Some(meta)) if startup::other_layout(&meta.layout, &layout).is_some() => {
                    Found::Table {
                        meta,
                        rows: Vec::new(),
                    }
                }
                Ok(Some(meta)) => match marks_table::read_marks(&layout) {
                    Ok(rows) => Found::Table { meta, rows },
                    Err(e) => Found::Doubtful(format!("the marks table cannot be read: {e}")),
                },
            };
            (found, None)
        });
        let (found, refusal) = match found {
            Ok(found) => {
                // What the lease keeper needs before it claims, known as soon as it is read
                // (the load itself may wait, for a synchronous standby for instance).
                let seen = match &found.0 {
                    Found::Table { meta, .. } => Some(meta.seen),
                    Found::Nothing => Some(Default::default()),
                    Found::Doubtful(_) => None,
                };
                if let Some(seen) = seen {
                    let mut control = self.shared.control();
                    if !control.registry_seen_known {
                        control.registry_seen = seen;
                        control.registry_seen_known = true;
                    }
                }
                found
            }
            Err(e) => {
                return self.set_state(
                    State::Starting,
                    &format!("reading the marks failed: {e}"),
                    "",
                )
            }
        };
        let legacy = match found {
            Found::Nothing => read_legacy(),
            _ => Legacy::Absent,
        };
        let file = token_file::read();
        let decision = startup::decide(&found, &file, &legacy, &layout);
        // The key the table is sealed with: the token file's, or (0.2.0's file, or none) a new
        // one, with which the next write seals it.
        let key = match file {
            TokenFile::Token(Recorded { key: Some(key), .. }) => key,
            _ => new_key(),
        };
        let layout_hint = match &found {
            Found::Table { meta, .. } if startup::other_layout(&meta.layout, &layout).is_some() => {
                format!(
                    "Set snowflake.layout back to '{}', the layout of the ids this server minted, and restart the server; the layout of existing ids cannot change.",
                    Layout::label_of(&meta.layout)
                )
            }
            _ => String::new(),
        };
        let hint = match (refusal, &file) {
            _ if !layout_hint.is_empty() => layout_hint.as_str(),
            (Some(Refusal::Untrusted(_)), _) => marks_table::UNTRUSTED_HINT,
            (_, TokenFile::Invalid(_)) => DAMAGED_TOKEN_FILE_HINT,
            (_, TokenFile::Unreadable(_)) => UNREADABLE_TOKEN_FILE_HINT,
            _ => "",
        };
        match decision {
            Decision::Doubt(why) => return self.set_state(State::InDoubt, &why, hint),
            Decision::Fresh { legacy } => {
                if legacy.is_some() && layout != Layout::SNOWFLAKE {
                    return self.set_state(
                        State::InDoubt,
                        "snowflake_ext 0.1.0 left state files (snowflake_ext/lease.0, lease.1) in the default layout, but snowflake.layout is another",
                        "Start this server with snowflake.layout = 'snowflake', the layout 0.1.0 minted in.",
                    );
                }
                self.set_table(TableState {
                    token: random_token(),
                    key,
                    ..TableState::default()
                });
                let legacy = legacy.unwrap_or_default();
                for (w, slot) in self.shared.slots().iter().enumerate() {
                    let mark = legacy.get(w).copied().unwrap_or(0).min(self.p.tick_limit);
                    self.stored[w] = Row::default();
                    marks::load(
                        slot,
                        &Row {
                            mark,
                            ..Row::default()
                        },
                    );
                    if mark > 0 {
                        // Carried over from 0.1.0: written with the first marks.
                        slot.dirty.store(true, Release);
                    }
                }
                if !legacy.is_empty() {
                    errors::log(
                        format!("snowflake: carrying the marks of snowflake_ext 0.1.0's state files into {}.marks", marks_table::SCHEMA),
                        "The files (snowflake_ext/lease.0 and lease.1) are no longer used after this.",
                    );
                }
            }
            Decision::Load { write_token } => {
                let Found::Table { meta, rows } = found else {
                    unreachable!("a table to load")
                };
                self.set_table(TableState {
                    token: meta.identity.token,
                    identity: Some(meta.identity),
                    generation: meta.generation,
                    key,
                    token_file_ok: !write_token,
                    seen: meta.seen,
                });
                {
                    // The lease keeper may have seen a later epoch since the marks were read:
                    // never set back what it raised.
                    let mut control = self.shared.control();
                    let current = control.registry_seen;
                    control.registry_seen =
                        if control.registry_seen_known && current.registry == meta.seen.registry {
                            current.after(meta.seen.registry, meta.seen.epoch)
                        } else if control.registry_seen_known && current.registry != 0 {
                            current
                        } else {
                            meta.seen
                        };
                    control.registry_seen_known = true;
                }
                self.stored.fill(Row::default());
                for (w, row) in rows {
                    self.stored[w as usize] = row;
                }
                for (slot, row) in self.shared.slots().iter().zip(&self.stored) {
                    marks::load(slot, row);
                }
            }
        }
        self.shared.control().loaded = true;
        self.set_state(State::Ready, "", "");
    }

    /// While the marks are in doubt after they were loaded (the objects stopped being
    /// trustworthy while the server ran): once they are trustworthy again, the workers go on
    /// from shared memory, which covers every id issued, and everything is written again.
    pub(super) fn recheck(&mut self) {
        match session::transaction(marks_table::distrust) {
            Ok(Ok(None)) => {
                for slot in self.shared.slots() {
                    slot.dirty.store(true, Release);
                    marks::reopen(slot);
                }
                self.set_state(State::Ready, "", "");
            }
            Ok(Ok(Some(why))) => self.set_state(State::InDoubt, &why, marks_table::UNTRUSTED_HINT),
            Ok(Err(_)) | Err(_) => {}
        }
    }
}

/// The ways out when the token file is damaged or cannot be read (`decide` refuses for that
/// before anything else). The writer tries to load the marks again every second meanwhile.
const DAMAGED_TOKEN_FILE_HINT: &str = "Only the mark writer writes snowflake_ext/marks.token, so \
    a damaged one means the data directory was damaged or changed by hand: check the disk. Then \
    find the largest id this server may have issued (for example SELECT max(id) FROM each table) \
    and run SELECT snowflake_restore_mark(<that id>); as a superuser, which writes the file anew.";
const UNREADABLE_TOKEN_FILE_HINT: &str = "The server's operating system user must be able to read \
    and write snowflake_ext/ and snowflake_ext/marks.token in the data directory: fix their owner \
    or permissions, and the mark writer loads the marks within a second. If the file is lost for \
    good, run SELECT snowflake_restore_mark(<an id above every id this server issued>); as a \
    superuser.";

/// The marks in snowflake_ext 0.1.0's state files, if there are any.
fn read_legacy() -> Legacy {
    let mut found = [None, None];
    let mut any = false;
    for (slot, path) in legacy::FILES.iter().enumerate() {
        match std::fs::read(path) {
            Ok(bytes) => {
                any = true;
                found[slot] = legacy::decode(&bytes);
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Legacy::Unreadable(format!("{path}: {e}")),
        }
    }
    let [a, b] = found;
    match legacy::newest(a, b) {
        Some(snapshot) => Legacy::Marks(snapshot.marks),
        None if any => Legacy::Unreadable("neither state file is intact".into()),
        None => Legacy::Absent,
    }
}

/// A random token for a new marks table (never 0, which means none).
pub(super) fn random_token() -> u64 {
    crate::mint::clock::random_u64()
}

/// A random key to seal a new marks table with.
pub(super) fn new_key() -> [u8; 16] {
    let mut key = [0u8; 16];
    key[..8].copy_from_slice(&crate::mint::clock::random_u64().to_le_bytes());
    key[8..].copy_from_slice(&crate::mint::clock::random_u64().to_le_bytes());
    key
}

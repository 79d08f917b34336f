//! The mark writer: the background worker that persists every worker's high-water mark in the
//! marks table ([`crate::marks::marks_table`]) and raises the marks in shared memory once they are durable.
//! The rules it follows are `snowflake_core::marks` (what to write) and
//! `snowflake_core::startup` (what to do with what it finds when it starts).
//!
//! It starts once recovery has finished, so a standby has none and mints nothing; after a
//! promotion it starts and continues above the marks the standby replayed. It runs as the
//! bootstrap superuser, connected to `snowflake.database`, with `search_path` limited to
//! `pg_catalog` and every name it uses schema-qualified.
//!
//! Protocol with the backends:
//! * a backend whose worker's mark is low, or who was refused for lack of one, notes what it
//!   needs in the worker's slot, sets `mark_requested` and, if that was not already set,
//!   the writer's latch (`Shared::request_mark`);
//! * the writer clears `mark_requested`, takes from every slot what is due, writes it in
//!   one transaction (committed with `synchronous_commit = on`), raises the marks in shared
//!   memory, and broadcasts on the condition variable the waiting backends sleep on;
//! * when a write fails it logs a warning (at most one a minute, then one when it works
//!   again), keeps the marks where they are, and tries again a second later: latches set
//!   meanwhile do not cut that short.
//!
//! It stops on SIGTERM: it closes every worker, persists exactly one past each worker's last
//! id (so a clean restart resumes on the clock), and exits with code 1, so that the postmaster
//! restarts it a second later unless the server is shutting down. An error or a crash of the
//! writer is restarted the same way; shared memory keeps the workers' state meanwhile.
//! (Before PostgreSQL 16 the postmaster can miss that moment and sleep on; backends waiting
//! for a mark nudge it, see [`crate::mint::wait`].)
//!
//! Files: [`session`] (connecting, and the transaction each step runs in), [`load`] (what it
//! does with the marks it finds at start-up, or after a restart of the writer alone),
//! [`mod@write`] (writing marks, and the clean stop), [`requests`] (an administrator's requests);
//! its signals and its one way to wait are the toolkit's ([`crate::bgworker`]).

pub(crate) mod load;
pub(crate) mod requests;
pub(crate) mod session;
pub(crate) mod write;

use crate::bgworker::latch::{self, Until};
use crate::bgworker::{self, signals};
use crate::shared::control::{State, TableState};
use crate::shared::shmem::{self, Shared};
use crate::{errors, marks::mailbox, marks::marks_table, settings};
use pgrx::prelude::*;
use snowflake_core::generator::{Params, CLOSED};
use snowflake_core::layout::Layout;
use snowflake_core::marks::Row;
use std::sync::atomic::Ordering::*;
use std::time::{Duration, Instant};

const NAME: &str = "snowflake_ext mark writer";
/// How long the writer waits after a failed write, and between attempts to load doubtful
/// marks.
const RETRY: Duration = Duration::from_secs(1);
/// At most one warning per this, while writes keep failing.
const WARN_EVERY: Duration = Duration::from_secs(60);

/// Registers the writer; called from `_PG_init` while preloading.
pub fn register() {
    bgworker::register(NAME, "snowflake_mark_writer_main", true);
}

#[pg_guard]
// SAFETY: the name is unique to this library; the postmaster finds the entry point by it.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn snowflake_mark_writer_main(_arg: pg_sys::Datum) {
    signals::install(&[libc::SIGTERM, libc::SIGINT, libc::SIGHUP]);
    let shared = shmem::shared();
    session::connect(shared);
    let mut writer = Writer::new(shared);
    writer.run();
}

/// The writer's own state: what it knows to be durable, and its trouble log.
struct Writer {
    shared: &'static Shared,
    p: Params,
    /// Per worker, what is in the marks table.
    stored: Vec<Row>,
    /// The marks table it writes (also in the control block).
    table: TableState,
    /// Write failures, and doubt about the marks: each logged at most once a minute.
    trouble: Trouble,
    doubt: Trouble,
}

impl Writer {
    fn new(shared: &'static Shared) -> Writer {
        let p = shared.params;
        Writer {
            shared,
            p,
            stored: vec![Row::default(); p.layout.workers()],
            table: TableState::default(),
            trouble: Trouble::default(),
            doubt: Trouble::default(),
        }
    }

    fn layout(&self) -> &Layout {
        &self.p.layout
    }

    fn run(&mut self) -> ! {
        // SAFETY: MyLatch is this process's latch, in its PGPROC in shared memory.
        let latch = unsafe { pg_sys::MyLatch } as usize;
        self.shared.writer_latch.store(latch, Release);
        session::set_up(NAME);
        mailbox::writer_started(self.shared);
        let restarted = self.shared.control().loaded;
        if restarted {
            self.resume();
        }
        loop {
            if signals::terminating() {
                self.stop();
            }
            self.reload_config();
            if self.shared.control().state != State::Ready {
                self.serve_in_doubt();
                let (state, loaded) = {
                    let control = self.shared.control();
                    (control.state, control.loaded)
                };
                if state != State::Ready {
                    if loaded {
                        self.recheck();
                    } else {
                        self.load();
                    }
                }
                if self.shared.control().state != State::Ready {
                    latch::wait(Some(Instant::now() + RETRY), Until::Latch);
                    continue;
                }
            }
            self.shared.mark_requested.store(false, SeqCst);
            let asked = self.take_ask();
            let written = self.pass();
            if let Some(ask) = asked {
                self.answer(ask, written.clone());
            }
            if written.is_err() {
                latch::wait(Some(Instant::now() + RETRY), Until::Deadline);
            } else if !self.shared.mark_requested.load(SeqCst) {
                // Sleep until a backend asks: an idle server writes nothing. A request made
                // during the pass is not slept on: its wake-up may be gone, since PostgreSQL's
                // own waits in the transaction (for a lock, for a synchronous standby) wait on
                // this process's latch too, and reset it.
                latch::wait(None, Until::Latch);
            }
        }
    }

    fn set_table(&mut self, table: TableState) {
        self.table = table;
        self.shared.control().table = table;
    }

    /// Moves to `state`, saying why and the way out (`hint`, empty: restore the marks).
    /// Doubt about marks already loaded closes every worker: nothing is issued, not even below
    /// the marks in shared memory, until the doubt is gone (`recheck`) or the marks restored.
    fn set_state(&mut self, state: State, why: &str, hint: &str) {
        let changed = {
            let mut control = self.shared.control();
            let changed = control.state != state || control.why.get() != why;
            control.state = state;
            control.why.set(why);
            control.hint.set(hint);
            if state == State::InDoubt && control.loaded {
                for slot in self.shared.slots() {
                    slot.word.fetch_or(CLOSED, AcqRel);
                }
            }
            changed
        };
        if state != State::Ready && (changed || self.doubt.due()) {
            let hint = if hint.is_empty() {
                "If the marks were lost, run SELECT snowflake_restore_mark(<an id above every id this \
                 server issued>) as a superuser."
            } else {
                hint
            };
            errors::warn(
                format!("snowflake: no ids can be minted: {why}"),
                &format!(
                    "The {NAME} keeps the high-water marks in database \"{}\" (snowflake.database), schema {}. {hint}",
                    settings::database(),
                    marks_table::SCHEMA
                ),
            );
            self.doubt.logged();
        }
        self.shared.broadcast();
    }

    fn reload_config(&self) {
        bgworker::reload_if_pending();
    }
}

/// Warnings at most once a minute while something keeps failing.
#[derive(Default)]
struct Trouble {
    since: Option<Instant>,
    last_logged: Option<Instant>,
    failures: u64,
}

impl Trouble {
    fn failed(&mut self) {
        self.since.get_or_insert_with(Instant::now);
        self.failures += 1;
    }
    fn due(&self) -> bool {
        self.last_logged.is_none_or(|t| t.elapsed() >= WARN_EVERY)
    }
    fn logged(&mut self) {
        self.last_logged = Some(Instant::now());
    }
    /// Clears the trouble; returns how long it lasted, if there was any.
    fn recovered(&mut self) -> Option<Duration> {
        let since = self.since.take()?;
        *self = Trouble::default();
        Some(since.elapsed())
    }
}

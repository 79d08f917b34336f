//! The mark writer: the background worker that persists every worker's high-water mark in the
//! marks table (`marks_table.rs`) and raises the marks in shared memory once they are durable.
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
//! for a mark nudge it, see `wait.rs`.)

use crate::control::{Answer, Ask, State, TableState, ASK_EXPIRES_MS};
use crate::shmem::{self, Shared};
use crate::{clock, errors, marks_table, settings, token_file};
use pgrx::bgworkers::{BackgroundWorker, BackgroundWorkerBuilder, BgWorkerStartTime};
use pgrx::prelude::*;
use pgrx::PgTryBuilder;
use snowflake_core::generator::Params;
use snowflake_core::layout::Layout;
use snowflake_core::legacy;
use snowflake_core::marks::{self, Row};
use snowflake_core::startup::{self, Decision, Legacy};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::*};
use std::time::{Duration, Instant};

const NAME: &str = "snowflake_ext mark writer";
/// How long the writer waits after a failed write, and between attempts to load doubtful
/// marks.
const RETRY: Duration = Duration::from_secs(1);
/// At most one warning per this, while writes keep failing.
const WARN_EVERY: Duration = Duration::from_secs(60);

/// Registers the writer; called from `_PG_init` while preloading.
pub fn register() {
    // SAFETY: a plain read of a flag the postmaster set before loading libraries.
    if unsafe { pg_sys::IsBinaryUpgrade } {
        // pg_upgrade's servers restore databases: nothing may hold a connection to them.
        return;
    }
    BackgroundWorkerBuilder::new(NAME)
        .set_type(NAME)
        .set_library("snowflake_ext")
        .set_function("snowflake_mark_writer_main")
        .enable_spi_access()
        .set_start_time(BgWorkerStartTime::RecoveryFinished)
        .set_restart_time(Some(Duration::from_secs(1)))
        .load();
}

/// Set by SIGTERM.
static TERMINATE: AtomicBool = AtomicBool::new(false);
/// Whether the writer is inside a transaction (see `transaction`).
static IN_TRANSACTION: AtomicBool = AtomicBool::new(false);
/// Counts SIGTERMs and SIGINTs. Either one cuts short a wait for a synchronous standby, after
/// which the commit returns as if it were complete: a write during which one arrived is not
/// trusted (`Writer::write`).
static SIGNALS: AtomicU64 = AtomicU64::new(0);

/// SIGTERM: stop at the next safe point. Inside a transaction it also cancels what the writer
/// waits for (a lock, a synchronous standby), the way a query cancel would, so that a shutdown
/// is never held up by a standby that does not answer; outside one there is nothing to cancel,
/// and a pending cancel would only turn the next log message into an error.
// SAFETY: installed as a signal handler only; it does nothing a handler may not.
unsafe extern "C-unwind" fn on_sigterm(_signal: i32) {
    // SAFETY: only async-signal-safe work: flags PostgreSQL's own handlers set, and SetLatch,
    // which PostgreSQL documents as safe in a signal handler. errno is preserved.
    unsafe {
        let saved = *libc::__errno_location();
        TERMINATE.store(true, SeqCst);
        SIGNALS.fetch_add(1, SeqCst);
        if IN_TRANSACTION.load(SeqCst) {
            pg_sys::QueryCancelPending = 1;
            pg_sys::InterruptPending = 1;
        }
        pg_sys::SetLatch(pg_sys::MyLatch);
        *libc::__errno_location() = saved;
    }
}

/// SIGINT (`pg_cancel_backend`): cancels what the writer waits for in a transaction, like
/// PostgreSQL's own handler, and is noted, since it too ends a wait for a standby.
// SAFETY: installed as a signal handler only; it does nothing a handler may not.
unsafe extern "C-unwind" fn on_sigint(_signal: i32) {
    // SAFETY: as in `on_sigterm`.
    unsafe {
        let saved = *libc::__errno_location();
        SIGNALS.fetch_add(1, SeqCst);
        if IN_TRANSACTION.load(SeqCst) {
            pg_sys::QueryCancelPending = 1;
            pg_sys::InterruptPending = 1;
        }
        pg_sys::SetLatch(pg_sys::MyLatch);
        *libc::__errno_location() = saved;
    }
}

/// SIGHUP: reload the configuration at the next safe point.
// SAFETY: installed as a signal handler only; it does nothing a handler may not.
unsafe extern "C-unwind" fn on_sighup(_signal: i32) {
    // SAFETY: as in `on_sigterm`.
    unsafe {
        let saved = *libc::__errno_location();
        pg_sys::ConfigReloadPending = 1;
        pg_sys::SetLatch(pg_sys::MyLatch);
        *libc::__errno_location() = saved;
    }
}

#[pg_guard]
// SAFETY: the name is unique to this library; the postmaster finds the entry point by it.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn snowflake_mark_writer_main(_arg: pg_sys::Datum) {
    // SAFETY: installing signal handlers in our own process before unblocking signals, as
    // every background worker does.
    unsafe {
        install_handler(libc::SIGTERM, on_sigterm);
        install_handler(libc::SIGINT, on_sigint);
        install_handler(libc::SIGHUP, on_sighup);
        pg_sys::BackgroundWorkerUnblockSignals();
    }
    let shared = shmem::shared();
    connect(shared);
    let mut writer = Writer::new(shared);
    writer.run();
}

/// Connects to the marks database. A database that does not exist ends the process with a
/// FATAL; the postmaster restarts it a second later, so each attempt after a failed one first
/// waits longer (up to a minute): the log gets one line a minute, not one a second.
fn connect(shared: &Shared) {
    let attempts = {
        let mut control = shared.control();
        control.connect_attempts += 1;
        control.connect_attempts
    };
    if attempts > 1 {
        let wait = Duration::from_secs((1u64 << (attempts - 1).min(6)).min(60));
        let until = Instant::now() + wait;
        while !TERMINATE.load(SeqCst) && Instant::now() < until {
            // SAFETY: the standard latch wait of a background worker.
            unsafe {
                pg_sys::WaitLatch(
                    pg_sys::MyLatch,
                    (pg_sys::WL_LATCH_SET | pg_sys::WL_TIMEOUT | pg_sys::WL_EXIT_ON_PM_DEATH)
                        as i32,
                    until.saturating_duration_since(Instant::now()).as_millis() as i64 + 1,
                    pg_sys::PG_WAIT_EXTENSION,
                );
                pg_sys::ResetLatch(pg_sys::MyLatch);
            }
        }
        if TERMINATE.load(SeqCst) {
            exit();
        }
    }
    BackgroundWorker::connect_worker_to_spi(Some(&settings::database()), None);
    shared.control().connect_attempts = 0;
}

/// Exits with code 1, which asks the postmaster to restart the writer (unless the server is
/// shutting down).
#[allow(unreachable_code)] // proc_exit is declared noreturn for some majors only
fn exit() -> ! {
    // SAFETY: the documented way for a background worker to exit.
    unsafe { pg_sys::proc_exit(1) };
    unreachable!("proc_exit does not return")
}

/// SAFETY: call before signals are unblocked, with a handler that is async-signal-safe.
unsafe fn install_handler(signal: i32, handler: unsafe extern "C-unwind" fn(i32)) {
    // SAFETY: as the caller guarantees.
    unsafe {
        #[cfg(not(feature = "pg18"))]
        pg_sys::pqsignal(signal, Some(handler));
        #[cfg(feature = "pg18")]
        pg_sys::pqsignal_be(signal, Some(handler));
    }
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
        // Without these settings marks could be committed asynchronously, or name lookups
        // could run code planted on a search path: no session, no writer (it is restarted).
        if let Err(e) = transaction(|| {
            Spi::run(
                "SET search_path = pg_catalog, pg_temp; SET synchronous_commit = on;
                 SET lock_timeout = '5s'; SET idle_in_transaction_session_timeout = 0",
            )
            .expect("set up the session")
        }) {
            errors::warn(
                format!("snowflake: {NAME} could not set up its session: {e}"),
                "",
            );
            exit();
        }
        let restarted = self.shared.control().loaded;
        if restarted {
            self.resume();
        }
        loop {
            if TERMINATE.load(SeqCst) {
                self.stop();
            }
            self.reload_config();
            if self.shared.control().state != State::Ready {
                self.serve_in_doubt();
                if self.shared.control().state != State::Ready {
                    self.load();
                }
                if self.shared.control().state != State::Ready {
                    self.sleep(Some(RETRY));
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
                self.back_off();
            } else {
                // Sleep until a backend asks: an idle server writes nothing.
                self.sleep(None);
            }
        }
    }

    /// After a restart of the writer alone: the slots are as the last writer left them. What
    /// is durable is read again from the table; every worker whose state differs from it (a
    /// write that failed before the restart) is written again.
    fn resume(&mut self) {
        let (table, state) = {
            let control = self.shared.control();
            (control.table, control.state)
        };
        if state != State::Ready {
            return;
        }
        self.table = table;
        let layout = *self.layout();
        self.stored.fill(Row::default());
        if let Ok(Ok(rows)) = transaction(move || marks_table::read_marks(&layout)) {
            for (w, row) in rows {
                self.stored[w as usize] = row;
            }
        }
        for slot in self.shared.slots() {
            slot.dirty.store(true, Release);
            marks::reopen(slot);
        }
        self.shared.broadcast();
        errors::log(
            format!("snowflake: {NAME} restarted; the workers' state was kept"),
            "The marks are read again from snowflake_ext_state.marks; any that lag behind the workers' state in shared memory are written again.",
        );
    }

    fn set_table(&mut self, table: TableState) {
        self.table = table;
        self.shared.control().table = table;
    }

    /// Loads the marks at start, or finds out why they cannot be.
    fn load(&mut self) {
        let layout = *self.layout();
        let found = transaction(|| -> Result<_, String> {
            let meta = marks_table::read_meta()?;
            let legacy = if meta.is_none() {
                read_legacy()
            } else {
                Legacy::Absent
            };
            let decision = startup::decide(meta.as_ref(), &token_file::read(), &legacy, &layout);
            let rows = match &decision {
                Decision::Load { .. } => marks_table::read_marks(&layout)?,
                _ => Vec::new(),
            };
            Ok((meta, decision, rows))
        });
        let (meta, decision, rows) = match found {
            Ok(Ok(found)) => found,
            Ok(Err(e)) => {
                return self.set_state(
                    State::InDoubt,
                    &format!("the marks table cannot be read: {e}"),
                )
            }
            Err(e) => {
                return self.set_state(State::Starting, &format!("reading the marks failed: {e}"))
            }
        };
        match decision {
            Decision::Doubt(why) => return self.set_state(State::InDoubt, &why),
            Decision::Fresh { legacy } => {
                if legacy.is_some() && layout != Layout::SNOWFLAKE {
                    return self.set_state(
                        State::InDoubt,
                        "snowflake_ext 0.1.0 left state files (snowflake_ext/lease.0, lease.1) in the default layout, but snowflake.layout is another",
                    );
                }
                self.set_table(TableState {
                    token: random_token(),
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
                let meta = meta.expect("a table to load");
                self.set_table(TableState {
                    token: meta.identity.token,
                    identity: Some(meta.identity),
                    token_file_ok: !write_token,
                });
                self.stored.fill(Row::default());
                let mut loaded = vec![Row::default(); self.stored.len()];
                for (w, row) in rows {
                    loaded[w as usize] = row;
                    self.stored[w as usize] = row;
                }
                for (slot, row) in self.shared.slots().iter().zip(&loaded) {
                    marks::load(slot, row);
                }
            }
        }
        {
            let mut control = self.shared.control();
            control.loaded = true;
            control.state = State::Ready;
            control.why.set("");
        }
        self.shared.broadcast();
    }

    fn set_state(&mut self, state: State, why: &str) {
        let changed = {
            let mut control = self.shared.control();
            let changed = control.state != state || control.why.get() != why;
            control.state = state;
            control.why.set(why);
            changed
        };
        if changed || self.doubt.due() {
            errors::warn(
                format!("snowflake: no ids can be minted: {why}"),
                &format!(
                    "The {NAME} keeps the high-water marks in database \"{}\" (snowflake.database), schema {}. \
                     If the marks were lost, run SELECT snowflake_restore_mark(<an id above every id this \
                     server issued>) as a superuser.",
                    settings::database(),
                    marks_table::SCHEMA
                ),
            );
            self.doubt.logged();
        }
        self.shared.broadcast();
    }

    /// One pass: writes what is due for every worker, then raises the marks.
    fn pass(&mut self) -> Result<(), String> {
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
    fn write(&mut self, rows: &[(u32, Row)]) -> Result<(), String> {
        let layout = *self.layout();
        let table = self.table;
        let stored = self.stored.clone();
        let signals = SIGNALS.load(SeqCst);
        let identity = transaction(move || {
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
        if SIGNALS.load(SeqCst) != signals {
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

    fn set_failing(&mut self, failure: Option<&str>) {
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
                        format!("snowflake: could not persist the high-water marks: {e}"),
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

    /// Takes the administrator's request, if one is pending, and applies what must happen in
    /// shared memory; `pass` then persists it.
    fn take_ask(&mut self) -> Option<Ask> {
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

    /// Answers the pending request once `pass` has persisted what it changed.
    fn answer(&mut self, ask: Ask, written: Result<(), String>) {
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
    /// every worker raised to at least `from`.
    fn accept_in_doubt(&mut self, from: u64) -> Result<u64, String> {
        let layout = *self.layout();
        let rows = transaction(move || match marks_table::read_meta() {
            Ok(Some(m)) if m.layout == layout.to_string() => {
                marks_table::read_marks(&layout).unwrap_or_default()
            }
            _ => Vec::new(),
        })?;
        self.set_table(TableState {
            token: random_token(),
            ..TableState::default()
        });
        let mut loaded = vec![Row::default(); self.stored.len()];
        for (w, p) in rows {
            loaded[w as usize] = p;
        }
        self.stored.fill(Row::default());
        for (slot, p) in self.shared.slots().iter().zip(&loaded) {
            marks::load(slot, p);
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
            self.stored[w as usize] = p;
            marks::mark_written(self.shared.slot(w), p.mark);
        }
        Ok(all.iter().map(|(_, p)| p.mark).max().unwrap_or(0))
    }

    /// A clean stop: closes every worker, persists exactly one past its last id, and exits
    /// with code 1 so that the postmaster restarts the writer unless the server is stopping.
    fn stop(&mut self) -> ! {
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
            let written = transaction(|| Spi::run("SET synchronous_commit = local").expect("set"))
                .and_then(|_| self.write(&rows));
            if let Err(e) = written {
                errors::warn(
                    format!("snowflake: could not persist the final high-water marks: {e}"),
                    "The previous marks still cover every id issued; after a restart ids resume from them.",
                );
            }
        }
        errors::log(
            format!("snowflake: {NAME} stopping on SIGTERM"),
            "It is restarted within a second unless the server is shutting down.",
        );
        exit()
    }

    fn reload_config(&self) {
        // SAFETY: ConfigReloadPending is set by PostgreSQL's SIGHUP handler in this process.
        unsafe {
            if pg_sys::ConfigReloadPending != 0 {
                pg_sys::ConfigReloadPending = 0;
                pg_sys::ProcessConfigFile(pg_sys::GucContext::PGC_SIGHUP);
            }
        }
    }

    /// Sleeps until the latch is set (or `timeout` passes).
    fn sleep(&self, timeout: Option<Duration>) {
        let mut events = pg_sys::WL_LATCH_SET | pg_sys::WL_EXIT_ON_PM_DEATH;
        if timeout.is_some() {
            events |= pg_sys::WL_TIMEOUT;
        }
        // SAFETY: the standard latch wait of a background worker.
        unsafe {
            pg_sys::WaitLatch(
                pg_sys::MyLatch,
                events as i32,
                timeout.map_or(-1, |t| t.as_millis() as i64),
                pg_sys::PG_WAIT_EXTENSION,
            );
            pg_sys::ResetLatch(pg_sys::MyLatch);
        }
    }

    /// Waits `RETRY` after a failure, whatever sets the latch meanwhile, unless told to stop.
    fn back_off(&self) {
        let until = Instant::now() + RETRY;
        while !TERMINATE.load(SeqCst) {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            self.sleep(Some(left));
        }
    }
}

/// A request the writer serves while the marks are in doubt: only a restore of every worker.
impl Writer {
    fn serve_in_doubt(&mut self) {
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

/// Runs `body` in a transaction of its own. A PostgreSQL error in it (a missing table, a lock
/// timeout, a full stored) rolls the transaction back and comes back as `Err`, so the writer
/// keeps running and retries.
fn transaction<R>(body: impl FnOnce() -> R) -> Result<R, String> {
    let result = transaction_inner(body);
    IN_TRANSACTION.store(false, SeqCst);
    // SAFETY: a plain flag of this process: a cancel meant for the transaction ends with it.
    unsafe { pg_sys::QueryCancelPending = 0 };
    result
}

fn transaction_inner<R>(body: impl FnOnce() -> R) -> Result<R, String> {
    IN_TRANSACTION.store(true, SeqCst);
    // SAFETY: the standard way a background worker runs a transaction; an error inside is
    // caught below and the transaction aborted, as PostgreSQL's own workers do.
    unsafe {
        pg_sys::SetCurrentStatementStartTimestamp();
        pg_sys::StartTransactionCommand();
        pg_sys::PushActiveSnapshot(pg_sys::GetTransactionSnapshot());
    }
    let body = std::panic::AssertUnwindSafe(body);
    PgTryBuilder::new(move || {
        let body = body;
        let result = (body.0)();
        // SAFETY: pairs with the calls above.
        unsafe {
            pg_sys::PopActiveSnapshot();
            pg_sys::CommitTransactionCommand();
        }
        Ok(result)
    })
    .catch_others(|error| {
        // SAFETY: the error has been caught and flushed by pgrx; aborting the transaction
        // releases its locks, snapshots and memory.
        unsafe { pg_sys::AbortCurrentTransaction() };
        Err(describe(&error))
    })
    .execute()
}

fn describe(error: &pg_sys::panic::CaughtError) -> String {
    use pg_sys::panic::CaughtError::*;
    match error {
        PostgresError(report)
        | ErrorReport(report)
        | RustPanic {
            ereport: report, ..
        } => report.message().to_string(),
    }
}

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

/// A random token for a new marks table.
fn random_token() -> u64 {
    let mut bytes = [0u8; 8];
    // SAFETY: pg_strong_random fills the buffer we pass, of the length we pass.
    let ok = unsafe { pg_sys::pg_strong_random(bytes.as_mut_ptr().cast(), bytes.len()) };
    let token = u64::from_le_bytes(bytes);
    if ok && token != 0 {
        token
    } else {
        // Never 0 (which means "none"); the clock is unique enough as a fallback.
        (clock::unix_ms() as u64) | 1
    }
}

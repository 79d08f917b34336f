//! The mailbox through which an administrator's function ([`crate::marks::admin`]) asks the mark writer to
//! change a worker, in the control block under the control lock. One request at a time, each
//! with its number; the box stays with a request until its asker has collected the answer:
//!
//! ```text
//!   Empty --post--> Posted --take (writer)--> Taken --answer (writer)--> Answered --collect--> Empty
//! ```
//!
//! * an asker posts only into an empty box (others wait their turn on the condition variable),
//!   then waits for the answer to *its* number, and empties the box when it has it: a second
//!   asker can never overwrite an answer the first has not read;
//! * an asker that gives up (a cancel, a timeout) withdraws its request: a request not yet
//!   taken is never done behind its back; one already taken is finished by the writer and the
//!   box emptied, since nobody waits for the answer;
//! * an asker that died without withdrawing (a FATAL, `pg_terminate_backend`) leaves a
//!   request or an answer that nobody collects: the next asker, or the writer, empties the box
//!   as soon as it sees the asker's process gone (a request already taken is finished and
//!   dropped), and anyway after `EXPIRES_MS`;
//! * a writer that exits while it works on a request answers it as failed when it starts
//!   again.

use crate::shared::mailbox::Post;
pub use crate::shared::mailbox::{Answer, Ask, Mailbox};
use crate::shared::shmem::Shared;
use crate::{errors, mint::clock};
use pgrx::prelude::*;
use pgrx::PgTryBuilder;
use std::time::{Duration, Instant};

/// How long a request waits to be taken, or an answer to be collected, before the box is
/// emptied; and how long an asker waits for the writer.
pub const EXPIRES_MS: u64 = 30_000;

/// An answer with its texts, as the asker receives it.
pub struct Reply {
    pub answer: Answer,
    pub text: String,
    pub hint: String,
}

impl Mailbox {
    /// Empties the box of a request nobody took, or an answer nobody collected, in time or
    /// because the asker is gone; a request being worked on for an asker that is gone is
    /// dropped once done.
    fn expire(&mut self, now_ms: u64) {
        if self.post == Post::Empty {
            return;
        }
        let gone = !alive(self.asker);
        let old = now_ms.saturating_sub(self.since_ms) > EXPIRES_MS;
        match self.post {
            Post::Posted | Post::Answered if old || gone => self.post = Post::Empty,
            Post::Taken if gone => self.abandoned = true,
            _ => {}
        }
    }
}

/// Whether the process `pid` still exists (every backend runs as the same OS user).
fn alive(pid: i32) -> bool {
    // SAFETY: signal 0 only checks that the process exists and may be signalled.
    pid > 0 && unsafe { libc::kill(pid, 0) == 0 || *libc::__errno_location() == libc::EPERM }
}

/// Posts `ask`, waits for the writer's answer to it, and returns it; raises an error if the
/// writer does not answer within `EXPIRES_MS`. Interrupts are answered while waiting; a
/// request given up is withdrawn.
pub fn ask(shared: &Shared, ask: Ask) -> Reply {
    let since = Instant::now();
    // SAFETY: a plain read of this backend's process id.
    let asker = unsafe { pg_sys::MyProcPid };
    let mine = loop {
        {
            let mut control = shared.control();
            let mailbox = &mut control.mailbox;
            mailbox.expire(clock::boot_ms());
            if mailbox.post == Post::Empty {
                *mailbox = Mailbox {
                    number: mailbox.number + 1,
                    post: Post::Posted,
                    since_ms: clock::boot_ms(),
                    asker,
                    ask,
                    ..Mailbox::default()
                };
                break mailbox.number;
            }
        }
        wait(shared, since);
    };
    // The writer's time to answer counts from here, not from the wait for the box.
    let since = Instant::now();
    shared.wake_writer();
    // The shared state is only reached under the control lock, which an error releases.
    let for_body = std::panic::AssertUnwindSafe(shared);
    let for_catch = std::panic::AssertUnwindSafe(shared);
    PgTryBuilder::new(move || loop {
        let shared = *for_body;
        {
            let mut control = shared.control();
            let mailbox = &mut control.mailbox;
            if mailbox.number != mine || mailbox.post == Post::Empty {
                drop(control);
                done(shared);
                return Reply {
                    answer: Answer::Failed,
                    text: "the request expired before the mark writer could take it".into(),
                    hint: String::new(),
                };
            }
            if mailbox.post == Post::Answered {
                let reply = Reply {
                    answer: mailbox.answer,
                    text: mailbox.text.get(),
                    hint: mailbox.hint.get(),
                };
                mailbox.post = Post::Empty;
                drop(control);
                done(shared);
                return reply;
            }
        }
        wait(shared, since);
    })
    .catch_others(move |error| {
        withdraw(*for_catch, mine);
        error.rethrow()
    })
    .execute()
}

/// Gives up request `number`: not done if the writer has not taken it yet.
fn withdraw(shared: &Shared, number: u64) {
    {
        let mut control = shared.control();
        let mailbox = &mut control.mailbox;
        if mailbox.number == number {
            match mailbox.post {
                Post::Taken => mailbox.abandoned = true,
                _ => mailbox.post = Post::Empty,
            }
        }
    }
    done(shared);
}

/// Ends this backend's wait and lets the next asker in.
fn done(shared: &Shared) {
    crate::mint::wait::done();
    shared.broadcast();
}

/// Sleeps on the condition variable (which checks for interrupts) until the writer or another
/// asker broadcasts, or `RECHECK_MS`; raises an error once the asker has waited too long.
fn wait(shared: &Shared, since: Instant) {
    if since.elapsed() > Duration::from_millis(EXPIRES_MS) {
        crate::mint::wait::done();
        errors::writer_did_not_answer(EXPIRES_MS / 1000);
    }
    // SAFETY: sleeping on the segment's condition variable, which checks for interrupts.
    unsafe {
        pg_sys::ConditionVariableTimedSleep(
            shared.cv(),
            crate::mint::wait::RECHECK_MS,
            pg_sys::PG_WAIT_EXTENSION,
        );
    }
}

/// The writer's side: takes the posted request, if there is one, with its number.
pub fn take(shared: &Shared) -> Option<(u64, Ask)> {
    let mut control = shared.control();
    let mailbox = &mut control.mailbox;
    mailbox.expire(clock::boot_ms());
    (mailbox.post == Post::Posted).then(|| {
        mailbox.post = Post::Taken;
        (mailbox.number, mailbox.ask)
    })
}

/// The writer's side: answers request `number`, which it took.
pub fn answer(shared: &Shared, number: u64, answer: Answer, text: &str, hint: &str) {
    {
        let mut control = shared.control();
        let mailbox = &mut control.mailbox;
        if mailbox.number == number && mailbox.post == Post::Taken {
            if mailbox.abandoned {
                mailbox.post = Post::Empty;
            } else {
                mailbox.post = Post::Answered;
                mailbox.since_ms = clock::boot_ms();
                mailbox.answer = answer;
                mailbox.text.set(text);
                mailbox.hint.set(hint);
            }
        }
    }
    shared.broadcast();
}

/// The writer's side, when it starts: a request a previous writer took and never answered is
/// answered as failed.
pub fn writer_started(shared: &Shared) {
    let taken = {
        let control = shared.control();
        (control.mailbox.post == Post::Taken).then_some(control.mailbox.number)
    };
    if let Some(number) = taken {
        answer(
            shared,
            number,
            Answer::Failed,
            "the mark writer exited while it worked on the request; it may or may not be in effect",
            "Run it again: each request is safe to repeat.",
        );
    }
}

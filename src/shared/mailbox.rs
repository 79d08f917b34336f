//! An administrator's request to the mark writer and its answer, as they live in the control
//! block (under the control lock): data only. The protocol that posts, takes, answers and
//! collects them is [`crate::marks::mailbox`].

use crate::shared::text::Text;

/// What an administrator asks the writer to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Ask {
    #[default]
    Nothing,
    /// Every id of `worker` (or of every worker) from now on is at or above tick `from`;
    /// for all workers, this also accepts the current marks table when it is in doubt.
    Restore { worker: Option<u32>, from: u64 },
    /// Undo a forward clock jump `worker` followed (`snowflake_core::marks::rewind`), with the
    /// asking session's clock (time units): the clock the ids will follow.
    Rewind { worker: u32, clock: u64 },
}

/// What the writer answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Answer {
    #[default]
    Pending,
    /// Done; the worker's (or the highest) mark is now this tick.
    Restored {
        mark: u64,
    },
    Rewound(snowflake_core::marks::Rewound),
    RewindRefused(snowflake_core::marks::RewindRefusal),
    /// Not done, for the reason in the answer's text, with the way out in its hint (if any).
    Failed,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Post {
    #[default]
    Empty,
    Posted,
    Taken,
    Answered,
}

#[derive(Clone, Copy, Default)]
pub struct Mailbox {
    /// The number of the request in the box, or of the last one (0: none yet).
    pub number: u64,
    pub post: Post,
    /// When the request was posted, or answered (boot clock, milliseconds).
    pub since_ms: u64,
    /// The asker gave up while the writer worked on its request.
    pub abandoned: bool,
    /// The asking backend's process id.
    pub asker: i32,
    pub ask: Ask,
    pub answer: Answer,
    pub text: Text,
    pub hint: Text,
}

//! The mark writer's control block, in shared memory under the control lock: the writer's
//! state as backends see it (so that a backend refused ids can say why), and the mailbox
//! through which an administrator's function asks the writer to change a worker
//! ([`crate::marks::mailbox`]).

use crate::shared::text::Text;

/// Where the mark writer stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[repr(u8)]
pub enum State {
    /// The marks are not loaded yet: the server is starting or in recovery, or the writer is
    /// connecting.
    #[default]
    Starting,
    /// The marks are loaded; ids are issued below them.
    Ready,
    /// The marks are missing, from another layout, or doubtful: nothing is issued
    /// until an administrator restores them.
    InDoubt,
}

/// The marks table the writer writes, kept here so that a restarted writer knows it too.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TableState {
    /// The token for its header row (0: not chosen yet).
    pub token: u64,
    /// Where the table holding that token is, once it has been written (`None`: not yet).
    pub identity: Option<snowflake_core::token::Identity>,
    /// The generation the writer last wrote to its header.
    pub generation: u64,
    /// The key it seals the table with (`snowflake_core::marks::seal`), kept in the token
    /// file.
    pub key: [u8; 16],
    /// Whether the token file records that table at that generation.
    pub token_file_ok: bool,
    /// The registry record the table's header holds.
    pub seen: snowflake_core::lease::Seen,
}

#[derive(Clone, Copy, Default)]
pub struct Control {
    pub state: State,
    /// Whether the marks were loaded since shared memory was created (a restarted writer
    /// then keeps the slots as they are).
    pub loaded: bool,
    /// The marks table the writer writes.
    pub table: TableState,
    /// Why the state is `InDoubt`, and the way out (empty: restore the marks).
    pub why: Text,
    pub hint: Text,
    /// Whether writing marks fails at the moment, with what, and how many attempts failed in a
    /// row.
    pub failing: bool,
    pub failure: Text,
    pub failures: u64,
    /// Attempts of the writer to connect to the marks database that did not succeed (a failed
    /// connection ends the process; the next one waits longer before it tries).
    pub connect_attempts: u32,
    /// An administrator's request and its answer ([`crate::marks::mailbox`]).
    pub mailbox: crate::shared::mailbox::Mailbox,
    /// The lease of a worker id from the registry ([`crate::lease`]).
    pub lease: crate::shared::lease::Status,
    /// The registry this server last leased from and the highest epoch it saw there: set by
    /// the lease keeper from every answer, and by the writer from the marks table when it
    /// loads it; the writer keeps it in the table's header (`TableState::seen`).
    pub registry_seen: snowflake_core::lease::Seen,
    /// Whether `registry_seen` was read from the marks table (or there is none): the keeper
    /// claims nothing before, so that a server never passes for one that never leased.
    pub registry_seen_known: bool,
    /// What the Citus check last found ([`crate::tables::citus`]).
    pub citus: crate::shared::citus::Status,
}

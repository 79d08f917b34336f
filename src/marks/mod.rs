//! The high-water marks that make ids survive a restart, a failover or a restore: the mark
//! [`writer`] (the background worker that persists them and raises them in shared memory), the
//! [`marks_table`] it writes, the [`token_file`] that tells that table from a replaced one,
//! and the [`mailbox`] protocol through which an administrator's function ([`admin`]:
//! `snowflake_restore_mark`, `snowflake_rewind`) asks the writer for a change.

pub mod admin;
pub mod mailbox;
pub mod marks_table;
pub mod token_file;
pub mod writer;

//! Who may call what. PostgreSQL grants EXECUTE on every new function to PUBLIC; this takes it
//! back where a caller could otherwise mint another server's ids, read server-wide state, or
//! change the marks. The full table is in README.md ("Privileges").
//!
//! * Minting with an explicit worker id (`snowflake_nextval(worker)`,
//!   `snowflake_nextval_batch(worker, n)`) is for roles an administrator grants it to:
//!   ordinary roles mint with the server's configured worker (`snowflake_nextval()`,
//!   `snowflake_nextval_batch(n)`), which no session can change.
//! * `snowflake_stats` and `snowflake_status()` show every worker's state: superusers and
//!   `pg_monitor`, like `pg_stat_activity`'s details.
//! * `snowflake_restore_mark` and `snowflake_rewind` change the marks: superusers only (and
//!   each checks it too, so a grant cannot hand them out by mistake).
//! * Everything else (decoding, composing, `snowflake_lastval`, `snowflake_worker_id`,
//!   `snowflake_adopt`, which checks table ownership itself) stays with PUBLIC.

// The revokes and grants, run last (finalize): sql/install/privileges.sql.
pgrx::extension_sql_file!(
    "../../sql/install/privileges.sql",
    name = "privileges",
    finalize
);

//! The errors of ids for past times ([`crate::past`]: `snowflake_nextval_at`).

use super::raise;
use pgrx::PgSqlErrorCode::*;

/// `snowflake_nextval_at` with `snowflake.past_worker_id` unset.
#[cold]
#[track_caller]
pub fn past_worker_unset() -> ! {
    raise(
        ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        "snowflake.past_worker_id is not set".into(),
        Some(
            "snowflake_nextval_at(ts) puts the worker id reserved for past times into its ids, \
             and snowflake.past_worker_id is -1 (unset)."
                .into(),
        ),
        "Reserve a worker id that no server of the fleet mints with, then: ALTER SYSTEM SET \
         snowflake.past_worker_id = <it>; SELECT pg_reload_conf(); (see docs/past-ids.md).",
    )
}

/// The past worker id is (or may be) the one this server mints live ids with: `live` says how.
#[cold]
#[track_caller]
pub fn past_worker_is_live(past: u32, live: &str) -> ! {
    raise(
        ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        format!("snowflake.past_worker_id = {past} is a worker id this server mints live ids with ({live})"),
        Some(
            "Ids for past times and live ids must never share a worker id, or an id of a past \
             millisecond could equal a live one of the same millisecond."
                .into(),
        ),
        "Reserve another worker id for past times, outside snowflake.worker_id and \
         snowflake.worker_range: ALTER SYSTEM SET snowflake.past_worker_id = <it>; SELECT pg_reload_conf();",
    )
}

/// The past worker id has minted `issued` live ids since this server started.
#[cold]
#[track_caller]
pub fn past_worker_has_live_ids(past: u32, issued: u64) -> ! {
    raise(
        ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        format!(
            "snowflake.past_worker_id = {past} is a worker id this server has minted live ids with"
        ),
        Some(format!(
            "Worker {past} has minted {issued} live id(s) since the server started \
             (snowflake_nextval({past})): ids for past times with it could equal them."
        )),
        "Reserve a worker id that no server has ever minted with: ALTER SYSTEM SET \
         snowflake.past_worker_id = <it>; SELECT pg_reload_conf();",
    )
}

/// `snowflake_nextval_at` in another database than the marks'.
#[cold]
#[track_caller]
pub fn past_wrong_database(current: &str, marks: &str) -> ! {
    raise(
        ERRCODE_FEATURE_NOT_SUPPORTED,
        format!("cannot mint snowflake ids for past times in database \"{current}\""),
        Some(format!(
            "What each past time unit has used is recorded in the table snowflake_past_use of \
             one database per server, the marks database \"{marks}\" (snowflake.database), \
             because snowflake.past_worker_id is the server's."
        )),
        &format!(
            "Connect to database \"{marks}\" and call snowflake_nextval_at there (with \
             CREATE EXTENSION snowflake_ext run in it), then copy the ids where they are needed."
        ),
    )
}

/// `snowflake_nextval_at` on a standby or in recovery.
#[cold]
#[track_caller]
pub fn past_in_recovery() -> ! {
    raise(
        ERRCODE_READ_ONLY_SQL_TRANSACTION,
        "cannot mint snowflake ids for past times during recovery".into(),
        Some(
            "Ids for past times are recorded in the table snowflake_past_use, which only the \
             primary can write."
                .into(),
        ),
        "Call snowflake_nextval_at on the primary; after a promotion this server continues \
         above every use it replayed.",
    )
}

/// A time unit of the past worker id has no room left for `n` more ids.
#[cold]
#[track_caller]
pub fn past_no_room(ts: &str, worker: u32, unit_label: &str, used: i64, n: i64, room: i64) -> ! {
    raise(
        ERRCODE_PROGRAM_LIMIT_EXCEEDED,
        format!(
            "no room left for {n} more snowflake id(s) of worker {worker} at {ts}: {used} of {room} used"
        ),
        Some(format!(
            "A time unit ({unit_label}) of one worker holds {room} ids, one per sequence number; \
             the committed ids for past times of that unit have used {used}."
        )),
        "Spread the rows over other milliseconds (a few ms apart), or reserve another worker id \
         for the rest: ALTER SYSTEM SET snowflake.past_worker_id = <it>; SELECT pg_reload_conf();",
    )
}

/// `snowflake_nextval(worker)` (or the batch form) with the worker id reserved for past times.
#[cold]
#[track_caller]
pub fn worker_reserved_for_past(worker: u32) -> ! {
    raise(
        ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        format!("worker id {worker} is reserved for ids for past times (snowflake.past_worker_id)"),
        Some(
            "Live ids with it could equal ids that snowflake_nextval_at has minted or will mint \
             for the same milliseconds."
                .into(),
        ),
        "Mint live ids with another worker id, or reserve another one for past times: ALTER \
         SYSTEM SET snowflake.past_worker_id = <it>; SELECT pg_reload_conf();",
    )
}

/// `snowflake_nextval_at` with a time later than now.
#[cold]
#[track_caller]
pub fn past_time_in_future(ts: &str) -> ! {
    raise(
        ERRCODE_INVALID_PARAMETER_VALUE,
        format!("{ts} is later than now: snowflake_nextval_at mints ids for past times only"),
        Some(
            "An id for a time to come could meet a live id, and would move the largest id of \
             its table, above which snowflake_restore_mark restores the marks, into the future."
                .into(),
        ),
        "Use snowflake_nextval() for rows made now, or pass the time the row was made.",
    )
}

/// `snowflake_nextval_at` inside a subtransaction.
#[cold]
#[track_caller]
pub fn past_in_subtransaction() -> ! {
    raise(
        ERRCODE_ACTIVE_SQL_TRANSACTION,
        "cannot mint snowflake ids for past times inside a subtransaction".into(),
        Some(
            "A subtransaction rolled back (ROLLBACK TO a savepoint, a PL/pgSQL block with an \
             EXCEPTION clause) would give its ids back while its transaction, which may have \
             kept them, commits."
                .into(),
        ),
        "Call snowflake_nextval_at outside savepoints and exception blocks: at the top of the \
         transaction, or in a PL/pgSQL block without an EXCEPTION clause.",
    )
}

/// `snowflake_nextval_at_batch(ts[])` with more times than one batch takes.
#[cold]
#[track_caller]
pub fn past_batch_too_large(n: usize, max: usize) -> ! {
    raise(
        ERRCODE_PROGRAM_LIMIT_EXCEEDED,
        format!("{n} times are more than one snowflake_nextval_at_batch call takes ({max})"),
        None,
        &format!("Pass at most {max} times per call, in several calls."),
    )
}

/// The record here is not the one the past worker id first used on this server.
#[cold]
#[track_caller]
pub fn past_record_elsewhere(past: u32, path: &str, then: &str, database: u32, record: u32) -> ! {
    raise(
        ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        format!(
            "the record of worker {past}'s ids for past times is not this database's snowflake_past_use"
        ),
        Some(format!(
            "{path} in the data directory ties worker {past} to the record in database OID and \
             table OID {then}; here they are {database} {record} (snowflake.database changed, or \
             the database or the extension was dropped and made again): this record may not \
             hold every id minted for past times with it."
        )),
        &format!(
            "Reserve another worker id for past times: ALTER SYSTEM SET snowflake.past_worker_id \
             = <it>; SELECT pg_reload_conf(); or, if this record was restored whole from that \
             one (a dump of it), remove {path} from the data directory."
        ),
    )
}

/// The anchor of a past worker id's record could not be read or written.
#[cold]
#[track_caller]
pub fn past_anchor_unwritable(path: &str, why: &str) -> ! {
    raise(
        ERRCODE_IO_ERROR,
        format!("could not read or write {path} in the data directory: {why}"),
        Some("It ties the worker id reserved for past times to its record, on this server.".into()),
        "Make the data directory writable by the server's user (as PostgreSQL needs it), then call again.",
    )
}

//! Every error and warning a user can meet, in one place: each error has a SQLSTATE, a message
//! that names the bad value, and a hint. They are raised as PostgreSQL `ERROR`s, which abort
//! the statement cleanly (no panic message, no backtrace, no crashed backend). Minting's,
//! the settings' and shared memory's are here; those of the marks' administration in
//! [`marks`], of ids for past times in [`past`], of ids as values in [`ids`], of users' tables in [`tables`] (all callable as
//! `errors::name`). Other files only choose which one to raise, and compose the reasons that
//! depend on state (the writer's, the lease's).

pub(crate) mod ids;
pub(crate) mod marks;
pub(crate) mod past;
pub(crate) mod tables;

pub use ids::*;
pub use marks::*;
pub use past::*;
pub use tables::*;

use pgrx::pg_sys::panic::ErrorReport;
use pgrx::prelude::*;
use pgrx::{PgLogLevel, PgSqlErrorCode};
use snowflake_core::layout::{Layout, LayoutError};
use snowflake_core::timekeeper::ClockEvent;

use PgSqlErrorCode::*;

/// Raises an `ERROR`. Never returns.
#[track_caller]
pub fn raise(code: PgSqlErrorCode, message: String, detail: Option<String>, hint: &str) -> ! {
    let mut report = ErrorReport::new(code, message, "snowflake_ext");
    if let Some(detail) = detail {
        report = report.set_detail(detail);
    }
    report.set_hint(hint).report(PgLogLevel::ERROR);
    unreachable!("an ERROR report returns control to PostgreSQL")
}

/// Writes a `WARNING` (to the server log, and to the client if there is one).
pub fn warn(message: String, detail: &str) {
    report(PgLogLevel::WARNING, message, detail);
}

/// Writes a `LOG` line to the server log.
pub fn log(message: String, detail: &str) {
    report(PgLogLevel::LOG, message, detail);
}

fn report(level: PgLogLevel, message: String, detail: &str) {
    let code = if level == PgLogLevel::WARNING {
        ERRCODE_WARNING
    } else {
        ERRCODE_SUCCESSFUL_COMPLETION
    };
    ErrorReport::new(code, message, "snowflake_ext")
        .set_detail(detail)
        .report(level);
}

/// Formats a PostgreSQL timestamp the way the session would print it, or as raw microseconds
/// when it is outside what PostgreSQL can print.
fn show_timestamp(micros: i64) -> String {
    match TimestampWithTimeZone::try_from(micros) {
        Ok(ts) if ts.is_infinity() => "infinity".into(),
        Ok(ts) if ts.is_neg_infinity() => "-infinity".into(),
        Ok(ts) => ts.to_string(),
        Err(_) => format!("{micros} µs after 2000-01-01"),
    }
}

/// A Unix millisecond as UTC text, for messages about a layout's range.
pub fn show_unix_ms(unix_ms: i64) -> String {
    show_timestamp(snowflake_core::layout::pg_micros_from_unix_ms(unix_ms))
}

/// The range of a layout, for messages.
fn range_of(layout: &Layout) -> String {
    format!(
        "Ids of this layout ({}) count time from {} to {}.",
        layout.label(),
        show_unix_ms(layout.epoch_unix_ms),
        show_unix_ms(layout.last_unix_ms())
    )
}

#[track_caller]
pub fn layout_error(err: LayoutError, layout: &Layout) -> ! {
    match err {
        LayoutError::WorkerOutOfRange(w) => raise(
            ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE,
            format!("snowflake worker id {w} is out of range"),
            Some(format!(
                "Worker ids are {} bits: 0 to {}.",
                layout.worker_bits,
                layout.max_worker()
            )),
            &format!(
                "Give each server, or each writer that must not collide, its own worker id between 0 and {}.",
                layout.max_worker()
            ),
        ),
        LayoutError::SequenceOutOfRange(s) => raise(
            ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE,
            format!("snowflake sequence {s} is out of range"),
            Some(format!(
                "Sequence numbers are {} bits: 0 to {}.",
                layout.seq_bits,
                layout.max_seq()
            )),
            &format!("Pass a sequence between 0 and {}.", layout.max_seq()),
        ),
        LayoutError::BeforeEpoch(micros) => raise(
            ERRCODE_DATETIME_FIELD_OVERFLOW,
            format!(
                "timestamp {} is before the snowflake epoch {}",
                show_timestamp(micros),
                show_unix_ms(layout.epoch_unix_ms)
            ),
            Some(range_of(layout)),
            "Use a timestamp within the id layout's range; for an open-ended range query, compare with 0 instead.",
        ),
        LayoutError::AfterEnd(micros) => raise(
            ERRCODE_DATETIME_FIELD_OVERFLOW,
            format!(
                "timestamp {} is after the end of the snowflake id layout, {}",
                show_timestamp(micros),
                show_unix_ms(layout.last_unix_ms())
            ),
            Some(range_of(layout)),
            "Use a timestamp within the id layout's range; for an open-ended range query, compare with 9223372036854775807 instead.",
        ),
        LayoutError::NegativeId(id) => raise(
            ERRCODE_INVALID_PARAMETER_VALUE,
            format!("{id} is not a snowflake id: snowflake ids are never negative"),
            Some(format!(
                "The largest snowflake id is {}.",
                layout.max_id(layout.max_time())
            )),
            "Pass an id made by snowflake_nextval() or snowflake_compose().",
        ),
        LayoutError::IdAfterEnd(id) => raise(
            ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE,
            if layout.is_time_first() {
                format!("{id} is not an id of this layout: its time field is past the layout's end")
            } else {
                // Worker-first: the bits above the worker field are set (a layout of fewer
                // than 63 bits), so the id is above that of the last worker's last unit.
                format!("{id} is not an id of this layout: it has bits set above its worker field")
            },
            Some(format!(
                "{} The largest id is {}.",
                range_of(layout),
                layout.max_id(layout.max_time())
            )),
            "Decode the id with the layout that made it (snowflake_decode(id, layout)).",
        ),
    }
}

#[track_caller]
pub fn null_argument(what: &str, hint: &str) -> ! {
    raise(
        ERRCODE_NULL_VALUE_NOT_ALLOWED,
        format!("{what} must not be NULL"),
        None,
        hint,
    )
}

/// A generating function on a server in recovery.
#[cold]
#[track_caller]
pub fn in_recovery(worker: u32) -> ! {
    raise(
        ERRCODE_READ_ONLY_SQL_TRANSACTION,
        format!("cannot mint snowflake ids of worker {worker} during recovery"),
        Some(
            "This server is a standby (or is recovering): the primary owns this worker id and \
             is the only server that may mint its ids; a standby only replays the primary's \
             high-water marks."
                .into(),
        ),
        "Mint ids on the primary. Decoding functions work on a standby; after a promotion this \
         server mints above every id the old primary issued.",
    )
}

/// `snowflake_nextval()` with `snowflake.worker_id` unset.
#[cold]
#[track_caller]
pub fn worker_id_unset() -> ! {
    raise(
        ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        "snowflake.worker_id is not set".into(),
        Some("snowflake_nextval() without a worker takes its worker id from snowflake.worker_id, which is -1 (unset).".into()),
        "Give this server a worker id no other server uses: ALTER SYSTEM SET snowflake.worker_id = 1; \
         SELECT pg_reload_conf(); (or set it in postgresql.conf and reload).",
    )
}

/// An explicit worker id under `snowflake.worker_id = auto` that is not the one leased here.
#[cold]
#[track_caller]
pub fn not_leased(worker: u32) -> ! {
    raise(
        ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        format!("snowflake worker {worker} is not leased by this server"),
        Some(
            "This server leases its worker id from the registry (snowflake.registry), and any \
             other may be another server's."
                .into(),
        ),
        "Call snowflake_nextval() without a worker, or SELECT worker_id FROM snowflake_worker_id() for the one leased here.",
    )
}

/// A batch larger than the max-ahead bound can ever hold.
#[cold]
#[track_caller]
pub fn batch_too_large(n: u64, worker: u32, capacity: u64, max_ahead_ms: i32) -> ! {
    raise(
        ERRCODE_PROGRAM_LIMIT_EXCEEDED,
        format!("cannot take {n} snowflake ids of worker {worker} at once"),
        Some(format!(
            "snowflake.max_ahead = {max_ahead_ms} ms lets a worker's ids run at most that far ahead of the clock, which holds {capacity} ids."
        )),
        "Take fewer ids per call, or raise snowflake.max_ahead.",
    )
}

#[cold]
#[track_caller]
pub fn exhausted(worker: u32, layout: &Layout) -> ! {
    raise(
        ERRCODE_SEQUENCE_GENERATOR_LIMIT_EXCEEDED,
        format!(
            "snowflake worker {worker} has reached the end of the id layout ({})",
            show_unix_ms(layout.last_unix_ms())
        ),
        Some(format!(
            "The system clock reads {}; {}",
            show_unix_ms(crate::mint::clock::unix_ms()),
            range_of(layout)
        )),
        "Check the server's clock; if it is right, this layout's time range is used up.",
    )
}

/// Another node of this Citus cluster has the same worker id ([`crate::tables::citus`]).
#[cold]
#[track_caller]
pub fn citus_shared_worker(worker: u32, this_node: &str, other_node: &str) -> ! {
    raise(
        ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        format!(
            "snowflake worker {worker} cannot mint ids: Citus node {other_node} has the same \
             snowflake.worker_id as this node, {this_node}"
        ),
        Some(
            "The rows of every node meet in the cluster's tables, so two nodes with one worker id \
             would store the same ids. Both refuse to mint with it until one of them has another."
                .into(),
        ),
        &format!(
            "On one of the two nodes, ALTER SYSTEM SET snowflake.worker_id = <an id no node of the \
             cluster has>; SELECT pg_reload_conf(); (SELECT * FROM run_command_on_all_nodes('SHOW \
             snowflake.worker_id') lists them), or let every node lease one from a registry with \
             snowflake.worker_id = 'auto'. This node mints with {worker} again within seconds of the \
             change."
        ),
    )
}

/// This node's worker id could not be compared with every Citus node's ([`crate::tables::citus`]).
#[cold]
#[track_caller]
pub fn citus_unverified(worker: u32, why: String, database: &str) -> ! {
    raise(
        ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        format!("snowflake worker {worker} cannot mint ids: {why}"),
        Some(
            "On Citus, a node mints with a worker id set by hand only once every node of the \
             cluster has answered that it has another: a node that does not answer could be minting \
             with the same one."
                .into(),
        ),
        &format!(
            "Bring the node back, or take it out of the cluster (citus_disable_node, \
             citus_remove_node); the \"snowflake_ext Citus check\" background worker compares from \
             database \"{}\" (snowflake.database, which must have the citus extension) through \
             Citus's own connections, and needs a slot in max_worker_processes. Or let every node \
             lease its worker id with snowflake.worker_id = 'auto'.",
            database
        ),
    )
}

/// The marks are not there to issue below: the writer's state says why.
#[cold]
#[track_caller]
pub fn no_marks(worker: u32, why: String, hint: &str) -> ! {
    raise(
        ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        format!("snowflake worker {worker} cannot mint ids: {why}"),
        Some("No id is issued unless a high-water mark above it is durable in snowflake_ext_state.marks; otherwise ids could repeat.".into()),
        hint,
    )
}

/// The warning for what a worker's clock check noticed, once per event.
pub fn clock_event(worker: u32, event: ClockEvent, layout: &Layout) {
    let ms = |units: u64| layout.ms_in_units(units);
    match event {
        ClockEvent::BehindMark { by } => warn(
            format!(
                "snowflake: the system clock is {} ms behind the high-water mark of worker {worker}",
                ms(by)
            ),
            "The worker continues from its mark, so its ids keep increasing, with time fields ahead of the \
             clock until it catches up. The clock was set back while the server was down, or the marks came \
             from a server whose clock ran ahead.",
        ),
        ClockEvent::SteppedBack { by } => warn(
            format!("snowflake: the system clock stepped back by {} ms (seen by worker {worker})", ms(by)),
            "Ids keep increasing: the worker continues from its last id, ahead of the clock, until the \
             clock catches up. snowflake_stats counts the steps.",
        ),
        ClockEvent::JumpHeld { by } => warn(
            format!("snowflake: the system clock jumped forward by {} ms (seen by worker {worker}); not followed yet", ms(by)),
            &format!(
                "A jump that lasts less than {} s is a glitch: until then ids keep the time the clock should \
                 read, so a glitch never carries them into the future.",
                snowflake_core::timekeeper::CONFIRM_MS / 1000
            ),
        ),
        ClockEvent::JumpFollowed { by, after } => warn(
            format!(
                "snowflake: worker {worker} follows the system clock, which jumped forward by {} ms {} ms ago",
                ms(by),
                ms(after)
            ),
            &format!(
                "If the jump was a mistake, fix the clock, then run SELECT snowflake_rewind({worker}); to bring \
                 the worker's ids back to the right time (the ids issued since the jump stay unique). A worker id \
                 leased from a registry is not rewound: its ids run ahead until the clock catches up."
            ),
        ),
        ClockEvent::JumpIgnored { by, after } => warn(
            format!(
                "snowflake: the system clock came back after jumping forward by {} ms for {} ms (seen by worker {worker}); ids did not follow it",
                ms(by),
                ms(after)
            ),
            "Nothing to do: the worker's ids kept the right time.",
        ),
        ClockEvent::BootSteppedBack { by } => warn(
            format!(
                "snowflake: the boot clock (CLOCK_BOOTTIME) stepped back by {} ms (seen by worker {worker}); re-anchored",
                ms(by)
            ),
            "A correct kernel never steps it back (a faked monotonic clock does): the worker counts on from \
             where it was, so ids keep increasing and never wait longer than snowflake.max_ahead.",
        ),
    }
}

/// `snowflake.layout` names a layout this server cannot generate with (`error` says why).
#[cold]
#[track_caller]
pub fn layout_not_generable(layout: &Layout, error: &dyn std::fmt::Display) -> ! {
    raise(
        ERRCODE_INVALID_PARAMETER_VALUE,
        format!(
            "snowflake.layout = '{}' cannot be generated with: {error}",
            layout.label()
        ),
        None,
        "Choose a layout of at most 63 bits with at most 16 worker bits for snowflake.layout; \
         other layouts can still be decoded with the functions that take a layout name.",
    )
}

/// `snowflake.layout` does not parse: `message` names the setting's value and why.
#[cold]
#[track_caller]
pub fn invalid_layout_setting(message: String) -> ! {
    raise(
        ERRCODE_INVALID_PARAMETER_VALUE,
        message,
        None,
        "Set snowflake.layout to a preset name or a custom layout (see the README) and restart the server.",
    )
}

/// Shared memory is used while the library was not preloaded; `current` is the value of
/// `shared_preload_libraries`.
#[cold]
#[track_caller]
pub fn not_preloaded(current: &str) -> ! {
    raise(
        ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        format!(
            "snowflake_ext must be loaded through shared_preload_libraries (it is currently '{current}')"
        ),
        Some(
            "The generator keeps its state in shared memory, which only a preloaded library can allocate."
                .into(),
        ),
        "Add snowflake_ext to shared_preload_libraries in postgresql.conf, or run \
         ALTER SYSTEM SET shared_preload_libraries = 'snowflake_ext' (keeping any libraries already listed), \
         then restart the server.",
    )
}

/// `snowflake_nextval_batch` with `n` outside `1..=max`.
#[cold]
#[track_caller]
pub fn batch_out_of_range(n: i32, max: i32) -> ! {
    raise(
        ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE,
        format!("cannot take {n} snowflake ids in one call"),
        Some(format!("n must be between 1 and {max}.")),
        &format!("Take at most {max} ids per call; call it again for more."),
    )
}

/// `snowflake_lastval()` before any id in this session.
#[cold]
#[track_caller]
pub fn lastval_undefined() -> ! {
    raise(
        ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        "snowflake_lastval is not yet defined in this session".into(),
        None,
        "Call snowflake_nextval() (or insert a row whose default calls it) in this session first.",
    )
}

/// No leased worker id to mint with: `reason` says why (the lease's standing), `hint` the way
/// out (see [`crate::lease`]).
#[cold]
#[track_caller]
pub fn no_lease(reason: &str, hint: &str) -> ! {
    raise(
        ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        format!("this server holds no worker id from the registry: {reason}"),
        Some("Ids are minted only under a lease of a worker id that no other server holds.".into()),
        hint,
    )
}

/// `SET setting` in a session: every setting of this extension is the server's.
#[cold]
#[track_caller]
pub fn setting_not_in_session(setting: &str, restart: bool) -> ! {
    let then = if restart {
        "then restart the server"
    } else {
        "SELECT pg_reload_conf();"
    };
    raise(
        PgSqlErrorCode::ERRCODE_CANT_CHANGE_RUNTIME_PARAM,
        format!("{setting} cannot be changed in a session"),
        Some(format!(
            "{setting} is the server's: every session mints under the same one."
        )),
        &format!(
            "As a superuser: ALTER SYSTEM SET {setting} = '...'; {then} (or set it in postgresql.conf)."
        ),
    )
}

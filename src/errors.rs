//! Every error a user can cause, in one place: each has a SQLSTATE, a message that names the bad
//! value and the allowed range, and a hint. They are raised as PostgreSQL `ERROR`s, which abort
//! the statement cleanly (no panic message, no backtrace, no crashed backend).

use crate::layout::{self, LayoutError, MAX_SEQ, MAX_WORKER};
use pgrx::pg_sys::panic::ErrorReport;
use pgrx::prelude::*;
use pgrx::{PgLogLevel, PgSqlErrorCode};

/// Raises an `ERROR`. Never returns.
pub fn raise(code: PgSqlErrorCode, message: String, detail: Option<String>, hint: &str) -> ! {
    let mut report = ErrorReport::new(code, message, "snowflake_ext");
    if let Some(detail) = detail {
        report = report.set_detail(detail);
    }
    report.set_hint(hint).report(PgLogLevel::ERROR);
    unreachable!("an ERROR report returns control to PostgreSQL")
}

/// Writes a `WARNING` (to the server log, and to the client).
pub fn warn(message: String, detail: &str) {
    ErrorReport::new(PgSqlErrorCode::ERRCODE_WARNING, message, "snowflake_ext")
        .set_detail(detail)
        .report(PgLogLevel::WARNING);
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

pub fn layout_error(err: LayoutError) -> ! {
    use PgSqlErrorCode::*;
    match err {
        LayoutError::WorkerOutOfRange(w) => raise(
            ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE,
            format!("snowflake worker id {w} is out of range"),
            Some(format!("Worker ids are 10 bits: 0 to {MAX_WORKER}.")),
            "Give each server, or each writer that must not collide, its own worker id between 0 and 1023.",
        ),
        LayoutError::SequenceOutOfRange(s) => raise(
            ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE,
            format!("snowflake sequence {s} is out of range"),
            Some(format!("Sequence numbers are 12 bits: 0 to {MAX_SEQ}.")),
            "Pass a sequence between 0 and 4095.",
        ),
        LayoutError::BeforeEpoch(micros) => raise(
            ERRCODE_DATETIME_FIELD_OVERFLOW,
            format!(
                "timestamp {} is before the snowflake epoch 2025-01-01 00:00:00+00",
                show_timestamp(micros)
            ),
            Some("Snowflake ids count milliseconds from 2025-01-01 00:00:00 UTC to 2094-09-07 15:47:35.551 UTC.".into()),
            "Use a timestamp within the id layout's range; for an open-ended range query, compare with 0 instead.",
        ),
        LayoutError::AfterEnd(micros) => raise(
            ERRCODE_DATETIME_FIELD_OVERFLOW,
            format!(
                "timestamp {} is after the end of the snowflake id layout, 2094-09-07 15:47:35.551+00",
                show_timestamp(micros)
            ),
            Some("Snowflake ids count milliseconds from 2025-01-01 00:00:00 UTC to 2094-09-07 15:47:35.551 UTC.".into()),
            "Use a timestamp within the id layout's range; for an open-ended range query, compare with 9223372036854775807 instead.",
        ),
        LayoutError::NegativeId(id) => raise(
            ERRCODE_INVALID_PARAMETER_VALUE,
            format!("{id} is not a snowflake id: snowflake ids are never negative"),
            Some(format!("The largest snowflake id is {}.", layout::max_id(layout::MAX_TIME_MS))),
            "Pass an id made by snowflake_nextval() or snowflake_compose().",
        ),
    }
}

pub fn null_argument(what: &str, hint: &str) -> ! {
    raise(
        PgSqlErrorCode::ERRCODE_NULL_VALUE_NOT_ALLOWED,
        format!("{what} must not be NULL"),
        None,
        hint,
    )
}

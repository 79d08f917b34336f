//! The errors about ids as values ([`crate::ids::text`], [`crate::ids::decode`],
//! [`crate::ids::time_filter`]).

use super::raise;
use pgrx::PgSqlErrorCode::*;

/// A text form that is not one of `forms`.
#[cold]
#[track_caller]
pub fn unknown_text_form(name: &str, forms: &str) -> ! {
    raise(
        ERRCODE_INVALID_PARAMETER_VALUE,
        format!("unknown snowflake text form \"{name}\""),
        None,
        &format!("Use one of: {forms}."),
    )
}

/// Text (`shown`, shortened) that is not an id in the form `form`, because `why`; an id in that
/// form is `width`, like `example`.
#[cold]
#[track_caller]
pub fn invalid_id_text(
    form: &str,
    shown: &str,
    why: &dyn std::fmt::Display,
    width: &str,
    example: &str,
) -> ! {
    raise(
        ERRCODE_INVALID_TEXT_REPRESENTATION,
        format!("invalid snowflake id in {form} form: \"{shown}\""),
        Some(format!("It is not an id because {why}.")),
        &format!("A snowflake id in this form is {width}, like {example}."),
    )
}

/// Input of the `snowflake` type that is not a decimal id, because `why`.
#[cold]
#[track_caller]
pub fn invalid_snowflake_input(input: &str, why: &dyn std::fmt::Display) -> ! {
    raise(
        ERRCODE_INVALID_TEXT_REPRESENTATION,
        format!("invalid input syntax for type snowflake: \"{input}\""),
        Some(format!("It is not an id because {why}.")),
        "A snowflake is a decimal id, like 250163766832934912; for base32 or base62 text use \
         snowflake_from_text(text, 'base32').",
    )
}

/// A layout name or description that does not parse; `presets` names the presets.
#[cold]
#[track_caller]
pub fn invalid_layout_name(name: &str, error: &dyn std::fmt::Display, presets: &str) -> ! {
    raise(
        ERRCODE_INVALID_PARAMETER_VALUE,
        format!("invalid snowflake layout \"{name}\": {error}"),
        None,
        &format!(
            "Name a layout ({presets}) or describe one, e.g. 'epoch=2020-01-01 unit=1ms time=41 worker=10 sequence=12'."
        ),
    )
}

/// The bounds of a time partition whose end (`to`) is not after its start (`from`).
#[cold]
#[track_caller]
pub fn empty_partition(from: &dyn std::fmt::Display, to: &dyn std::fmt::Display) -> ! {
    raise(
        ERRCODE_INVALID_PARAMETER_VALUE,
        format!("the partition would be empty: {to} is not after {from}"),
        None,
        "Pass the start of the partition's time range, then its end (exclusive).",
    )
}

/// `function`, which bounds ids by time across workers, in a worker-first layout: there a time
/// range is one key range per worker, and the function's answer would hold ids of every time.
#[cold]
#[track_caller]
pub fn not_time_first(function: &str, layout: &snowflake_core::layout::Layout) -> ! {
    raise(
        ERRCODE_FEATURE_NOT_SUPPORTED,
        format!(
            "{function} is not available in the snowflake layout {}: its ids are ordered by worker first",
            layout.label()
        ),
        Some(
            "In a worker-first layout (order=worker-time-sequence) the ids of a time range are one key \
             range per worker, not one range of ids, so no id bounds a time range for every worker."
                .into(),
        ),
        if function == "snowflake_partition_bounds" {
            "Partition by the worker instead (PARTITION BY LIST (snowflake_worker(id))) or by a time column, \
             or use a time-first layout."
        } else {
            "Filter on the time itself: WHERE snowflake_timestamp(id) >= '2026-11-01' AND snowflake_timestamp(id) < \
             '2026-12-01'; for one worker's ids, compare id with snowflake_compose(ts, worker, 0)."
        },
    )
}

//! Ids as values: taking them apart and putting them together ([`decode`]), their text forms
//! and the `snowflake` type ([`text`]), and the planner hook that answers time filters with a
//! range scan of the id's index ([`time_filter`]). Nothing here mints or touches shared memory
//! beyond reading the layout.

pub mod decode;
pub mod text;
pub mod time_filter;

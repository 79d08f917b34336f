//! The wall clock, read the way the generator needs it.

use crate::layout;
use std::time::{SystemTime, UNIX_EPOCH};

/// Milliseconds since the snowflake epoch by the wall clock (`CLOCK_REALTIME`, which is what
/// `faketime` moves in the tests). A clock before 1970 or before the epoch reads as the epoch.
#[inline]
pub fn now_ms() -> u64 {
    let unix_ms = match SystemTime::now().duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_millis().min(i64::MAX as u128) as i64,
        Err(_) => 0,
    };
    layout::ms_from_unix_ms(unix_ms)
}

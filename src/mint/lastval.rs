//! `snowflake_lastval()`: the last id this session minted, whatever the worker, like
//! `lastval()` for sequences.

use crate::errors;
use pgrx::prelude::*;
use std::sync::atomic::{AtomicI64, Ordering::Relaxed};

/// The last id minted in this backend; negative until the first. Backend-local: a process is
/// one session.
static LAST: AtomicI64 = AtomicI64::new(-1);

#[inline]
pub fn remember(id: i64) {
    LAST.store(id, Relaxed);
}

/// VOLATILE (it changes with every id minted) and PARALLEL RESTRICTED: it reads the session's
/// own state, which a parallel worker does not have.
#[pg_extern(volatile, parallel_restricted)]
fn snowflake_lastval() -> i64 {
    let last = LAST.load(Relaxed);
    if last < 0 {
        errors::lastval_undefined();
    }
    last
}

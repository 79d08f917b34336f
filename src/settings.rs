//! The extension's configuration settings (GUCs).

use pgrx::{GucContext, GucFlags, GucRegistry, GucSetting};

/// `-1` means unset; see the description below.
pub const UNSET: i32 = -1;

pub static WORKER_ID: GucSetting<i32> = GucSetting::<i32>::new(UNSET);

pub fn define() {
    GucRegistry::define_int_guc(
        c"snowflake.worker_id",
        c"Worker id (0..1023) that snowflake_nextval() without arguments puts into the ids it makes.",
        c"Every server whose ids can meet (replicas that take writes, shards, nodes of a \
          multi-master cluster) needs its own worker id. The default, -1, means unset: \
          snowflake_nextval() then raises an error instead of guessing, because a silent \
          default shared by several servers makes them issue the same ids. It can be set only \
          in postgresql.conf or with ALTER SYSTEM followed by a configuration reload, never by \
          SET in a session, so that one session cannot mint another server's ids.",
        &WORKER_ID,
        UNSET,
        crate::layout::MAX_WORKER as i32,
        GucContext::Sighup,
        GucFlags::default(),
    );
    // Typos such as `snowflake.workerid` in postgresql.conf then get a warning instead of
    // silently leaving the worker id unset.
    #[cfg(not(any(feature = "pg13", feature = "pg14")))]
    unsafe {
        pgrx::pg_sys::MarkGUCPrefixReserved(c"snowflake".as_ptr())
    };
    #[cfg(any(feature = "pg13", feature = "pg14"))]
    unsafe {
        pgrx::pg_sys::EmitWarningsOnPlaceholders(c"snowflake".as_ptr())
    };
}

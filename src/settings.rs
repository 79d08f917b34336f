//! The extension's configuration settings (GUCs).

use pgrx::prelude::*;
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
    // The "snowflake." prefix is deliberately not reserved (MarkGUCPrefixReserved): pgEdge's
    // snowflake extension keeps `snowflake.node` there, and reserving the prefix would make the
    // server drop that setting when both are installed.
}

/// What this server is configured with: the worker id `snowflake_nextval()` uses (NULL when
/// unset), whether it is set, and whether the library is preloaded (without which nothing can
/// be generated). STABLE: it changes only with a configuration reload.
#[pg_extern(stable, parallel_safe)]
fn snowflake_worker_id() -> TableIterator<
    'static,
    (
        name!(worker_id, Option<i32>),
        name!(is_set, bool),
        name!(preloaded, bool),
    ),
> {
    let worker = WORKER_ID.get();
    let is_set = worker != UNSET;
    TableIterator::once((
        is_set.then_some(worker),
        is_set,
        crate::shmem::is_preloaded(),
    ))
}

//! The extension's configuration settings (GUCs), and the layout they select.

use crate::errors;
use pgrx::prelude::*;
use pgrx::{GucContext, GucFlags, GucRegistry, GucSetting, PgSqlErrorCode};
use snowflake_core::layout::Layout;
use std::ffi::{CStr, CString};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::OnceLock;

/// Whether this process runs with the library preloaded.
static PRELOADED: AtomicBool = AtomicBool::new(false);

/// Notes that the library is being preloaded; called first thing in `_PG_init`.
pub fn mark_preloaded() {
    PRELOADED.store(true, Relaxed);
}

pub fn is_preloaded() -> bool {
    PRELOADED.load(Relaxed)
}

/// `-1` means unset; see the description below.
pub const UNSET: i32 = -1;

pub static WORKER_ID: GucSetting<i32> = GucSetting::<i32>::new(UNSET);
pub static DATABASE: GucSetting<Option<CString>> =
    GucSetting::<Option<CString>>::new(Some(c"postgres"));
pub static MAX_AHEAD_MS: GucSetting<i32> = GucSetting::<i32>::new(2000);
pub static LAYOUT: GucSetting<Option<CString>> =
    GucSetting::<Option<CString>>::new(Some(c"snowflake"));

/// Defines the settings. The two that only a restart can change (`snowflake.database`,
/// `snowflake.layout`) can be defined only while preloading: PostgreSQL refuses, with a FATAL,
/// to create such a setting later, which is what a plain `LOAD` (or `pg_upgrade --check`)
/// would do. Without preloading their values are read as PostgreSQL keeps them for unknown
/// settings (see `text_of`).
pub fn define(preloading: bool) {
    if preloading {
        define_restart_only();
    }
    define_reloadable();
}

fn define_restart_only() {
    GucRegistry::define_string_guc(
        c"snowflake.database",
        c"Database whose snowflake_ext_state.marks table holds this server's high-water marks.",
        c"The mark writer background worker connects to this database and keeps every \
          worker's high-water mark in the table snowflake_ext_state.marks there, so \
          that the marks travel in WAL: standbys replay them, a promoted standby, a restored \
          backup and pg_upgrade all continue above them. CREATE EXTENSION snowflake_ext must \
          have been run in it; until it is, no ids are issued.",
        &DATABASE,
        GucContext::Postmaster,
        GucFlags::default(),
    );
    GucRegistry::define_string_guc(
        c"snowflake.layout",
        c"Bit layout of the ids this server generates and decodes.",
        c"A preset (snowflake, the default: 41 bits of milliseconds since 2025-01-01, 10-bit \
          worker, 12-bit sequence; twitter; instagram; sonyflake; pgedge) or a custom layout \
          such as 'epoch=2020-01-01 unit=10ms time=39 worker=16 sequence=8 \
          order=time-sequence-worker'. It is persisted with the marks at the first id and \
          cannot change under existing ids: a server whose marks were made in another layout \
          refuses to generate.",
        &LAYOUT,
        GucContext::Postmaster,
        GucFlags::default(),
    );
}

fn define_reloadable() {
    GucRegistry::define_int_guc(
        c"snowflake.max_ahead",
        c"How far, at most, ids may run ahead of the clock.",
        c"Ids carry a time. More than one sequence's worth of ids in one time unit borrows \
          the next unit, and a clock stepping back leaves ids ahead of it; this bounds how far \
          a worker's ids may run past the newest clock reading it has seen, carried forward at \
          the real pace (or its high-water mark after a restart). A call that would pass it \
          waits, without holding any lock, until the clock catches up; a batch larger than the \
          bound can ever hold is an error. It applies to every caller, superusers included.",
        &MAX_AHEAD_MS,
        1,
        3_600_000,
        GucContext::Sighup,
        GucFlags::UNIT_MS,
    );
    // The worker id's range is the layout's; a bad layout is reported where it is used.
    let max_worker = Layout::parse(&text_of(c"snowflake.layout", &LAYOUT, "snowflake"))
        .ok()
        .map_or(
            (1 << snowflake_core::layout::MAX_GENERATION_WORKER_BITS) - 1,
            |l| l.max_worker() as i32,
        );
    GucRegistry::define_int_guc(
        c"snowflake.worker_id",
        c"Worker id that snowflake_nextval() without arguments puts into the ids it makes.",
        c"Every server whose ids can meet (replicas that take writes, shards, nodes of a \
          multi-master cluster) needs its own worker id; a primary and the standbys that may \
          replace it share one, because only the primary mints. The default, -1, means unset: \
          snowflake_nextval() then raises an error instead of guessing, because a silent \
          default shared by several servers makes them issue the same ids. It can be set only \
          in postgresql.conf or with ALTER SYSTEM followed by a configuration reload, never by \
          SET in a session, so that one session cannot mint another server's ids.",
        &WORKER_ID,
        UNSET,
        max_worker,
        GucContext::Sighup,
        GucFlags::default(),
    );
    // The "snowflake." prefix is deliberately not reserved (MarkGUCPrefixReserved): pgEdge's
    // snowflake extension keeps `snowflake.node` there, and reserving the prefix would make the
    // server drop that setting when both are installed.
}

/// The layout this server uses, parsed once per process (the setting cannot change while
/// the server runs). A bad value is an error here, at use, never at load time.
pub fn layout() -> &'static Layout {
    static PARSED: OnceLock<Result<Layout, String>> = OnceLock::new();
    let parsed = PARSED.get_or_init(|| {
        let text = text_of(c"snowflake.layout", &LAYOUT, "snowflake");
        Layout::parse(&text).map_err(|e| format!("snowflake.layout = '{text}' is invalid: {e}"))
    });
    match parsed {
        Ok(layout) => layout,
        Err(e) => errors::raise(
            PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
            e.clone(),
            None,
            "Set snowflake.layout to a preset name or a custom layout (see the README) and restart the server.",
        ),
    }
}

/// The marks database's name.
pub fn database() -> String {
    text_of(c"snowflake.database", &DATABASE, "postgres")
}

/// A restart-only string setting: its variable when the library was preloaded (and defined
/// it), else the value PostgreSQL holds for it as an unknown setting, else `default`.
fn text_of(name: &CStr, setting: &GucSetting<Option<CString>>, default: &str) -> String {
    if is_preloaded() {
        return setting
            .get()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
    }
    // SAFETY: GetConfigOption returns NULL (missing_ok) or a string valid until the next
    // configuration change; it is copied at once.
    unsafe {
        let value = pg_sys::GetConfigOption(name.as_ptr(), true, false);
        if value.is_null() {
            default.to_string()
        } else {
            CStr::from_ptr(value).to_string_lossy().into_owned()
        }
    }
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
    TableIterator::once((is_set.then_some(worker), is_set, is_preloaded()))
}

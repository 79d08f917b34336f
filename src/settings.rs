//! The extension's configuration settings (GUCs), and the layout they select.

use crate::errors;
use pgrx::prelude::*;
use pgrx::{GucContext, GucFlags, GucRegistry, GucSetting};
use snowflake_core::layout::Layout;
use std::ffi::{CStr, CString};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering::Relaxed};
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

/// The worker id `snowflake_nextval()` uses, as the hot path reads it (`worker()`): a worker
/// id, or one of these. `AUTO`: the one leased from the registry, whether
/// `snowflake.worker_id` is `auto` or a number while `snowflake.registry` is set (the server
/// then leases that very worker id, and refuses while another server holds it).
pub const UNSET: i32 = -1;
pub const AUTO: i32 = -2;
static WORKER: AtomicI32 = AtomicI32::new(UNSET);
/// What `snowflake.worker_id` says (a worker id, `UNSET` or `AUTO`), and whether
/// `snowflake.registry` is set: `WORKER` is made of both by the assign hooks.
static WORKER_SETTING: AtomicI32 = AtomicI32::new(UNSET);
static REGISTRY_SET: AtomicBool = AtomicBool::new(false);

fn combine() {
    let setting = WORKER_SETTING.load(Relaxed);
    let effective = if setting >= 0 && REGISTRY_SET.load(Relaxed) {
        AUTO
    } else {
        setting
    };
    WORKER.store(effective, Relaxed);
}

pub static WORKER_ID: GucSetting<Option<CString>> = GucSetting::<Option<CString>>::new(Some(c"-1"));
pub static REGISTRY: GucSetting<Option<CString>> = GucSetting::<Option<CString>>::new(None);
pub static WORKER_RANGE: GucSetting<Option<CString>> = GucSetting::<Option<CString>>::new(None);
pub static LEASE_TTL_MS: GucSetting<i32> = GucSetting::<i32>::new(30_000);
pub static DATABASE: GucSetting<Option<CString>> =
    GucSetting::<Option<CString>>::new(Some(c"postgres"));
pub static MAX_AHEAD_MS: GucSetting<i32> = GucSetting::<i32>::new(2000);
pub static LAYOUT: GucSetting<Option<CString>> =
    GucSetting::<Option<CString>>::new(Some(c"snowflake"));
/// `snowflake.past_worker_id`: the worker id reserved for ids of past times
/// (`snowflake_nextval_at`, [`crate::past`]); -1: unset.
pub static PAST_WORKER_ID: GucSetting<i32> = GucSetting::<i32>::new(UNSET);

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
          worker, 12-bit sequence; twitter; instagram; sonyflake; pgedge; seata, worker first) or \
          a custom layout such as 'epoch=2020-01-01 unit=10ms time=39 worker=16 sequence=8 \
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
    // SAFETY: the hooks are pg_guard'ed and only parse the value (check) or store what the
    // check parsed into a static (assign), as PostgreSQL's GUC hooks may.
    unsafe {
        GucRegistry::define_string_guc_with_hooks(
            c"snowflake.worker_id",
            c"Worker id that snowflake_nextval() without arguments puts into the ids it makes, or auto.",
            c"Every server whose ids can meet (replicas that take writes, shards, nodes of a \
              multi-master cluster) needs its own worker id; a primary and the standbys that may \
              replace it share one, because only the primary mints. A number sets it by hand; \
              'auto' leases one from the registry in snowflake.registry, so that no two servers \
              ever share one. The default, -1, means unset: snowflake_nextval() then raises an \
              error instead of guessing, because a silent default shared by several servers makes \
              them issue the same ids. It can be set only in postgresql.conf or with ALTER SYSTEM \
              followed by a configuration reload, never by SET in a session, so that one session \
              cannot mint another server's ids.",
            &WORKER_ID,
            GucContext::Sighup,
            GucFlags::default(),
            Some(check_worker_id),
            Some(assign_worker_id),
            None,
        );
        GucRegistry::define_string_guc_with_hooks(
            c"snowflake.registry",
            c"Connection string of the database that leases worker ids (with snowflake.worker_id = auto).",
            c"A libpq connection string, e.g. 'host=reg1,reg2 dbname=registry user=fleet \
              target_session_attrs=read-write'. The password comes from the passfile or a service \
              file: a password or any other secret written here is refused, since PostgreSQL logs \
              the setting's value. The registry's schema is installed by sql/registry/registry.sql. With a \
              worker id set by hand in snowflake.worker_id, the server leases exactly that one.",
            &REGISTRY,
            GucContext::Sighup,
            GucFlags::SUPERUSER_ONLY,
            Some(check_registry),
            Some(assign_registry),
            None,
        );
        GucRegistry::define_string_guc_with_hooks(
            c"snowflake.worker_range",
            c"Worker ids this server may lease from the registry, e.g. 100-199 (default: all).",
            c"With several registries, or regions that share the id space, give each its own \
              range of the layout's worker ids.",
            &WORKER_RANGE,
            GucContext::Sighup,
            GucFlags::default(),
            Some(check_worker_range),
            None,
            None,
        );
    }
    GucRegistry::define_int_guc(
        c"snowflake.lease_ttl",
        c"How long a lease of a worker id lasts without renewal.",
        c"The lease keeper renews every third of it; a server that cannot renew stops minting \
          before its lease can end (by its boot clock, which nobody steps), and an expired \
          worker id goes to another server only above the last ids its holder could issue.",
        &LEASE_TTL_MS,
        snowflake_core::lease::MIN_TTL_MS as i32,
        3_600_000,
        GucContext::Sighup,
        GucFlags::UNIT_MS,
    );
    GucRegistry::define_int_guc(
        c"snowflake.past_worker_id",
        c"Worker id reserved for ids of past times (snowflake_nextval_at), or -1 (unset).",
        c"snowflake_nextval_at(ts) puts it into the ids it makes for the time ts, and records \
          in the table snowflake_past_use of snowflake.database which sequence numbers of each \
          time unit it has used. Like a worker id set by hand it must be this server's alone in \
          the fleet, and never a live one: not snowflake.worker_id, not inside \
          snowflake.worker_range when leasing, and never minted with snowflake_nextval(worker).",
        &PAST_WORKER_ID,
        UNSET,
        (1 << snowflake_core::layout::MAX_GENERATION_WORKER_BITS) - 1,
        GucContext::Sighup,
        GucFlags::SUPERUSER_ONLY,
    );
    // The "snowflake." prefix is deliberately not reserved (MarkGUCPrefixReserved): pgEdge's
    // snowflake extension keeps `snowflake.node` there, and reserving the prefix would make the
    // server drop that setting when both are installed.
}

/// The worker id `snowflake_nextval()` uses: a worker id, `UNSET` or `AUTO` (leased). One
/// load, for the hot path.
#[inline]
pub fn worker() -> i32 {
    WORKER.load(Relaxed)
}

/// Whether the worker id comes from a lease of the registry.
pub fn leasing() -> bool {
    worker() == AUTO
}

/// The worker id `snowflake.worker_id` names by hand while `snowflake.registry` is set: the one
/// worker id the server leases.
pub fn pinned() -> Option<u32> {
    let setting = WORKER_SETTING.load(Relaxed);
    (setting >= 0 && REGISTRY_SET.load(Relaxed)).then_some(setting as u32)
}

/// Tells PostgreSQL why a value is refused (as `GUC_check_errdetail` does).
fn check_detail(detail: String) {
    let detail = CString::new(detail).unwrap_or_default();
    // SAFETY: GUC_check_errdetail_string takes a palloc'd string, as the C macro sets it.
    unsafe { pg_sys::GUC_check_errdetail_string = pg_sys::pstrdup(detail.as_ptr()) };
}

/// Tells PostgreSQL the message of a refusal, in place of its own (as `GUC_check_errmsg`).
fn check_message(message: &str) {
    let message = CString::new(message).unwrap_or_default();
    // SAFETY: GUC_check_errmsg_string takes a palloc'd string, as the C macro sets it.
    unsafe { pg_sys::GUC_check_errmsg_string = pg_sys::pstrdup(message.as_ptr()) };
}

/// Tells PostgreSQL the hint of a refusal (as `GUC_check_errhint`).
fn check_hint(hint: String) {
    let hint = CString::new(hint).unwrap_or_default();
    // SAFETY: GUC_check_errhint_string takes a palloc'd string, as the C macro sets it.
    unsafe { pg_sys::GUC_check_errhint_string = pg_sys::pstrdup(hint.as_ptr()) };
}

/// The text a check hook is given.
///
/// SAFETY: `newval` points at the hook's (possibly NULL) new value.
unsafe fn hook_text(newval: *mut *mut std::ffi::c_char) -> String {
    // SAFETY: as the caller guarantees.
    unsafe {
        if newval.is_null() || (*newval).is_null() {
            String::new()
        } else {
            CStr::from_ptr(*newval).to_string_lossy().into_owned()
        }
    }
}

/// `snowflake.worker_id`: a worker id of the layout, `-1` or empty (unset), or `auto`.
pub fn parse_worker_id(text: &str, max_worker: u32) -> Result<i32, String> {
    let text = text.trim();
    if text.is_empty() || text == "-1" {
        return Ok(UNSET);
    }
    if text.eq_ignore_ascii_case("auto") {
        return Ok(AUTO);
    }
    match text.parse::<i64>() {
        Ok(n) if (0..=max_worker as i64).contains(&n) => Ok(n as i32),
        _ => Err(format!(
            "snowflake.worker_id must be a worker id from 0 to {max_worker}, -1 (unset) or auto, not \"{text}\"."
        )),
    }
}

/// The largest worker id of the configured layout (of the default one if that is invalid,
/// which is reported where it is used).
fn max_worker() -> u32 {
    Layout::parse(&text_of(c"snowflake.layout", &LAYOUT, "snowflake")).map_or(
        (1 << snowflake_core::layout::MAX_GENERATION_WORKER_BITS) - 1,
        |l| l.max_worker(),
    )
}

// SAFETY: called only by PostgreSQL's GUC machinery as a check hook, with `newval` pointing at the candidate value; it
// dereferences nothing else.
#[pg_guard]
unsafe extern "C-unwind" fn check_worker_id(
    newval: *mut *mut std::ffi::c_char,
    _extra: *mut *mut std::ffi::c_void,
    _source: pg_sys::GucSource::Type,
) -> bool {
    // SAFETY: PostgreSQL passes the new value.
    let text = unsafe { hook_text(newval) };
    parse_worker_id(&text, max_worker())
        .map_err(|detail| {
            check_detail(detail);
            check_hint(format!(
                "Give each server a worker id of its own from 0 to {}, or auto to lease one \
                 from snowflake.registry.",
                max_worker()
            ));
        })
        .is_ok()
}

// SAFETY: called only by PostgreSQL's GUC machinery as an assign hook, with the value it checked; it
// dereferences nothing else.
#[pg_guard]
unsafe extern "C-unwind" fn assign_worker_id(
    newval: *const std::ffi::c_char,
    _extra: *mut std::ffi::c_void,
) {
    let text = if newval.is_null() {
        String::new()
    } else {
        // SAFETY: the value PostgreSQL checked, NUL-terminated.
        unsafe { CStr::from_ptr(newval) }
            .to_string_lossy()
            .into_owned()
    };
    let worker = parse_worker_id(&text, max_worker()).unwrap_or(UNSET);
    let before = WORKER_SETTING.swap(worker, Relaxed);
    combine();
    // The postmaster hears of a reload first: what must happen before anyone else does
    // (WORKER_ID_CHANGED) happens here.
    // SAFETY: reads of a flag PostgreSQL sets once per process.
    let postmaster = unsafe { !pg_sys::IsUnderPostmaster };
    if postmaster && before != worker {
        if let Some(changed) = WORKER_ID_CHANGED.get() {
            changed();
        }
    }
}

/// Called in the postmaster when a reload changes `snowflake.worker_id` (set at load time by the
/// Citus check, which revokes its comparison): settings know nothing of shared memory.
pub static WORKER_ID_CHANGED: std::sync::OnceLock<fn()> = std::sync::OnceLock::new();

// SAFETY: called only by PostgreSQL's GUC machinery as an assign hook, with the value it checked; it
// dereferences nothing else.
#[pg_guard]
unsafe extern "C-unwind" fn assign_registry(
    newval: *const std::ffi::c_char,
    _extra: *mut std::ffi::c_void,
) {
    // SAFETY: the value PostgreSQL checked, NUL-terminated, or NULL.
    let set = !newval.is_null() && !unsafe { CStr::from_ptr(newval) }.to_bytes().is_empty();
    REGISTRY_SET.store(set, Relaxed);
    combine();
}

/// `snowflake.registry` must not hold a password or any other secret
/// (`snowflake_core::conninfo::SECRETS`): the postmaster logs a setting's new value, as
/// written, at every reload that changes it, and any superuser can read it. Refused, the value
/// is not repeated in the message (PostgreSQL's own would quote it).
// SAFETY: called only by PostgreSQL's GUC machinery as a check hook, with `newval` pointing at the candidate value; it
// dereferences nothing else.
#[pg_guard]
unsafe extern "C-unwind" fn check_registry(
    newval: *mut *mut std::ffi::c_char,
    _extra: *mut *mut std::ffi::c_void,
    _source: pg_sys::GucSource::Type,
) -> bool {
    // SAFETY: PostgreSQL passes the new value.
    let text = unsafe { hook_text(newval) };
    if text.trim().is_empty() {
        return true;
    }
    let secrets = snowflake_core::conninfo::secrets(&text);
    match snowflake_core::conninfo::parse(&text) {
        Ok(_) if !secrets.is_empty() => {
            let named = secrets.join(", ");
            check_message(&if secrets == ["password"] {
                "snowflake.registry holds a password".to_string()
            } else {
                format!("snowflake.registry holds a secret ({named})")
            });
            check_detail(format!(
                "PostgreSQL would write it to its log at each reload that changes the setting: \
                 {}.",
                snowflake_core::conninfo::without_secrets(&text)
            ));
            check_hint(format!(
                "Keep {named} out of the setting: a password in the passfile of the server's \
                 operating system user (~/.pgpass, or passfile= in the connection string), \
                 anything else in a service file (service= in the connection string, with \
                 PGSERVICEFILE or ~/.pg_service.conf), or use certificates (sslcert, sslkey)."
            ));
            false
        }
        Ok(_) => true,
        Err(e) => {
            if snowflake_core::conninfo::SECRETS
                .iter()
                .any(|key| text.contains(key))
                || text.contains('@')
            {
                check_message(
                    "invalid value for parameter \"snowflake.registry\" (not shown: it may hold a password)",
                );
            }
            check_detail(format!(
                "snowflake.registry is not a libpq connection string: {e}"
            ));
            check_hint(
                "Write keyword=value pairs, e.g. 'host=registry.internal dbname=registry \
                 user=fleet', or a postgresql:// URI, without a password."
                    .into(),
            );
            false
        }
    }
}

// SAFETY: called only by PostgreSQL's GUC machinery as a check hook, with `newval` pointing at the candidate value; it
// dereferences nothing else.
#[pg_guard]
unsafe extern "C-unwind" fn check_worker_range(
    newval: *mut *mut std::ffi::c_char,
    _extra: *mut *mut std::ffi::c_void,
    _source: pg_sys::GucSource::Type,
) -> bool {
    // SAFETY: PostgreSQL passes the new value.
    let text = unsafe { hook_text(newval) };
    let layout = Layout::parse(&text_of(c"snowflake.layout", &LAYOUT, "snowflake"))
        .unwrap_or(Layout::SNOWFLAKE);
    match snowflake_core::lease::WorkerRange::parse(&text, &layout) {
        Ok(_) => true,
        Err(e) => {
            check_detail(format!(
                "snowflake.worker_range = \"{}\": {e}.",
                text.trim()
            ));
            check_hint(format!(
                "Write the first and the last worker id of the range, e.g. '100-199', within 0-{}; \
                 empty: every worker id.",
                layout.max_worker()
            ));
            false
        }
    }
}

/// The registry's connection string, as messages show it: its hosts and database.
pub fn registry_shown() -> String {
    let pairs = snowflake_core::conninfo::parse(&registry()).unwrap_or_default();
    let get = |key: &str| pairs.iter().find(|(k, _)| k == key).map(|(_, v)| v.clone());
    match (get("host"), get("dbname")) {
        (Some(host), Some(db)) => format!("{host}, database {db}"),
        (Some(host), None) => host,
        _ => "snowflake.registry".to_string(),
    }
}

/// The registry's connection string (empty: none). It holds no secret (`check_registry`).
pub fn registry() -> String {
    REGISTRY
        .get()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// The worker ids this server may lease.
pub fn worker_range() -> snowflake_core::lease::WorkerRange {
    let text = WORKER_RANGE
        .get()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    snowflake_core::lease::WorkerRange::parse(&text, layout())
        .unwrap_or_else(|_| snowflake_core::lease::WorkerRange::whole(layout()))
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
        Err(e) => errors::invalid_layout_setting(e.clone()),
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

static mut PREV_PROCESS_UTILITY: pg_sys::ProcessUtility_hook_type = None;

/// Installs the hook that answers `SET snowflake.…` in a session with the way to change the
/// setting; called from `_PG_init` in every process that loads the library. Without it,
/// PostgreSQL's own refusal ("parameter … cannot be changed now") named no way out.
pub fn install_set_hook() {
    // SAFETY: _PG_init runs once per process, before any statement; we chain to the previous
    // hook.
    unsafe {
        PREV_PROCESS_UTILITY = pg_sys::ProcessUtility_hook;
        pg_sys::ProcessUtility_hook = Some(process_utility);
    }
}

// SAFETY: the declaration matches `standard_ProcessUtility` of tcop/utility.h in every
// supported major (14 to 18: the signature of `ProcessUtility_hook_type`).
unsafe extern "C-unwind" {
    /// PostgreSQL's own ProcessUtility, called as it is: pgrx's wrapper would catch every error
    /// of every utility statement and raise it again (see `ids::time_filter`).
    #[link_name = "standard_ProcessUtility"]
    fn standard_process_utility_as_is(
        pstmt: *mut pg_sys::PlannedStmt,
        query_string: *const std::ffi::c_char,
        read_only_tree: bool,
        context: pg_sys::ProcessUtilityContext::Type,
        params: pg_sys::ParamListInfo,
        query_env: *mut pg_sys::QueryEnvironment,
        dest: *mut pg_sys::DestReceiver,
        qc: *mut pg_sys::QueryCompletion,
    );
}

/// The hook. Not `#[pg_guard]`: the statement it hands on may raise an ERROR, which must reach
/// PostgreSQL untouched; our own check is in `refuse_session_set`, which is guarded.
///
/// SAFETY: PostgreSQL calls it as its ProcessUtility hook, with ProcessUtility's arguments.
#[allow(clippy::too_many_arguments)]
unsafe extern "C-unwind" fn process_utility(
    pstmt: *mut pg_sys::PlannedStmt,
    query_string: *const std::ffi::c_char,
    read_only_tree: bool,
    context: pg_sys::ProcessUtilityContext::Type,
    params: pg_sys::ParamListInfo,
    query_env: *mut pg_sys::QueryEnvironment,
    dest: *mut pg_sys::DestReceiver,
    qc: *mut pg_sys::QueryCompletion,
) {
    // SAFETY: `pstmt` is the statement about to run; the rest is ProcessUtility called with
    // its own arguments.
    unsafe {
        refuse_session_set(pstmt);
        match PREV_PROCESS_UTILITY {
            Some(prev) => prev(
                pstmt,
                query_string,
                read_only_tree,
                context,
                params,
                query_env,
                dest,
                qc,
            ),
            None => standard_process_utility_as_is(
                pstmt,
                query_string,
                read_only_tree,
                context,
                params,
                query_env,
                dest,
                qc,
            ),
        }
    }
}

/// Refuses `SET` / `SET LOCAL` / `RESET` of one of this extension's settings, all of which are
/// the server's (reload or restart), with the way to change it; everything else passes.
///
/// SAFETY: `pstmt` is a valid planned statement.
#[pg_guard]
unsafe extern "C-unwind" fn refuse_session_set(pstmt: *mut pg_sys::PlannedStmt) {
    // SAFETY: as the caller guarantees; the node is read only after its tag says what it is.
    let name = unsafe {
        let node = (*pstmt).utilityStmt;
        if node.is_null() || (*node).type_ != pg_sys::NodeTag::T_VariableSetStmt {
            return;
        }
        let set = node as *mut pg_sys::VariableSetStmt;
        if (*set).name.is_null() {
            return;
        }
        CStr::from_ptr((*set).name).to_string_lossy().into_owned()
    };
    let Some((setting, restart)) = SERVER_SETTINGS
        .iter()
        .find(|(s, _)| s.eq_ignore_ascii_case(&name))
    else {
        return;
    };
    errors::setting_not_in_session(setting, *restart);
}

/// This extension's settings, and whether a change needs a restart (else a reload).
const SERVER_SETTINGS: [(&str, bool); 8] = [
    ("snowflake.database", true),
    ("snowflake.layout", true),
    ("snowflake.max_ahead", false),
    ("snowflake.worker_id", false),
    ("snowflake.registry", false),
    ("snowflake.worker_range", false),
    ("snowflake.lease_ttl", false),
    ("snowflake.past_worker_id", false),
];

//! Ids for past times: `snowflake_nextval_at(ts)` and `snowflake_nextval_at_batch(ts[])`
//! (docs/past-ids.md).
//!
//! An id for the time `ts` carries `ts`'s time unit, the worker id reserved for past times
//! (`snowflake.past_worker_id`) and a sequence number taken from a durable record: the table
//! `snowflake_past_use` (`sql/install/past.sql`), one row per (worker, time unit) holding how
//! many sequence numbers of that unit are used. Each call takes its numbers with one upsert
//! per distinct unit, in the caller's transaction, so the row lock serialises the callers of
//! one unit and ids are unique among committed transactions by construction; a transaction
//! that rolls back gives its numbers back (its rows never existed either).
//!
//! It never touches a live worker's slot, marks or the marks table: it reads the control
//! state (to refuse, as the generating functions do, when the marks are in doubt) and the past
//! worker's count of live ids (to refuse a worker id that has minted live ids since the server
//! started). The functions are
//! SECURITY DEFINER with a fixed search path, so a caller granted EXECUTE writes the record
//! without any privilege on the table; EXECUTE is revoked from PUBLIC
//! (`sql/install/privileges.sql`).

use crate::ids::decode;
use crate::shared::control::State;
use crate::shared::shmem::{self, Shared};
use crate::{errors, settings};
use pgrx::prelude::*;
use snowflake_core::layout::Layout;
use std::collections::BTreeMap;
use std::sync::atomic::Ordering::Acquire;
use std::time::Instant;

pgrx::extension_sql_file!("../sql/install/past.sql", name = "past_use");

/// One id for the time `ts`, of the worker id reserved for past times.
#[pg_extern(
    volatile,
    strict,
    parallel_unsafe,
    security_definer,
    name = "snowflake_nextval_at",
    requires = ["past_use"]
)]
#[search_path(pg_catalog, pg_temp)]
fn snowflake_nextval_at(ts: TimestampWithTimeZone) -> i64 {
    let (layout, worker) = ready();
    let unit = past_unit(ts, layout);
    let seq = take(layout, worker, unit, 1, &ts);
    layout.compose(unit, worker, seq)
}

/// One id for each time of `ts`, in the same order (NULL for NULL): one upsert per distinct
/// time unit, in ascending order of the units (so two batches never deadlock); within a unit
/// the ids increase in the order of the array.
#[pg_extern(
    volatile,
    strict,
    parallel_unsafe,
    security_definer,
    name = "snowflake_nextval_at_batch",
    requires = ["past_use"]
)]
#[search_path(pg_catalog, pg_temp)]
fn snowflake_nextval_at_batch(ts: Vec<Option<TimestampWithTimeZone>>) -> Vec<Option<i64>> {
    if ts.len() > MAX_BATCH {
        errors::past_batch_too_large(ts.len(), MAX_BATCH);
    }
    let (layout, worker) = ready();
    let units: Vec<Option<u64>> = ts.iter().map(|t| t.map(|t| past_unit(t, layout))).collect();
    // Per unit: how many ids, and the first time that falls in it (for a message).
    let mut wanted: BTreeMap<u64, (u32, TimestampWithTimeZone)> = BTreeMap::new();
    for (unit, t) in units.iter().zip(&ts) {
        if let (Some(unit), Some(t)) = (unit, t) {
            wanted.entry(*unit).or_insert((0, *t)).0 += 1;
        }
    }
    let mut next: BTreeMap<u64, u32> = BTreeMap::new();
    for (unit, (n, t)) in wanted {
        next.insert(unit, take(layout, worker, unit, n, &t));
    }
    units
        .into_iter()
        .map(|unit| {
            unit.map(|unit| {
                let seq = next.get_mut(&unit).expect("every unit was taken");
                let id = layout.compose(unit, worker, *seq);
                *seq += 1;
                id
            })
        })
        .collect()
}

/// The most times one batch takes: as `snowflake_nextval_batch`'s most ids (its work is
/// outside PostgreSQL's memory contexts, where an allocation that fails ends the backend).
const MAX_BATCH: usize = crate::mint::nextval::MAX_BATCH as usize;

/// The time unit of `ts`, which must not be later than now: an id for a time to come could
/// meet a live id of the reserved worker id minted by mistake, and would carry every table's
/// largest id (which `snowflake_restore_mark(regclass[])` restores the marks above) into the
/// future.
fn past_unit(ts: TimestampWithTimeZone, layout: &Layout) -> u64 {
    let unit = decode::time_of(ts, layout);
    let now = crate::mint::clock::wall(layout);
    if unit > now {
        errors::past_time_in_future(&ts.to_string());
    }
    unit
}

/// The layout and the past worker id, once every refusal is passed: the library preloaded,
/// not in recovery, the past worker id set, none of the server's live ones, in the marks
/// database, the marks ready (as the generating functions require), and no live id minted
/// with it since the server started.
fn ready() -> (&'static Layout, u32) {
    let shared = shmem::shared();
    // SAFETY: a plain query of the server's recovery state.
    if unsafe { pg_sys::RecoveryInProgress() } {
        errors::past_in_recovery();
    }
    // A subtransaction rolled back (ROLLBACK TO, an exception block) would give its ids back
    // while the transaction that may have kept them commits: refused, so that ids are given
    // back only with everything their transaction did.
    // SAFETY: a plain read of this backend's transaction state.
    if unsafe { pg_sys::GetCurrentTransactionNestLevel() } > 1 {
        errors::past_in_subtransaction();
    }
    let layout = &shared.params.layout;
    let past = settings::PAST_WORKER_ID.get();
    if past < 0 {
        errors::past_worker_unset();
    }
    let past = layout
        .check_worker(past as i64)
        .unwrap_or_else(|e| errors::layout_error(e, layout));
    not_live(past);
    in_marks_database();
    marks_ready(shared, past);
    // Ids issued since the server started: a mark says less, since restoring every worker's
    // marks (snowflake_restore_mark(above), the way out of doubt) gives every slot one.
    let issued = shared.slot(past).issued.load(Acquire);
    if issued != 0 {
        errors::past_worker_has_live_ids(past, issued);
    }
    anchored(past);
    (layout, past)
}

/// The data directory's file that ties a past worker id to the record it first used:
/// `snowflake_ext.past_record.<worker>`, holding `<database oid> <table oid>`.
fn anchor_path(past: u32) -> String {
    format!("snowflake_ext.past_record.{past}")
}

thread_local! {
    /// (past worker id, database, record) this backend found anchored: checked once.
    static ANCHORED: std::cell::Cell<Option<(u32, u32, u32)>> = const { std::cell::Cell::new(None) };
}

/// Refuses a record that is not the one the past worker id first used here. The record is a
/// table of one database, and nothing in a database tells a fresh record from one that lost its
/// uses: `snowflake.database` changed, the marks database dropped (or renamed) and made again,
/// the extension dropped and created again. So the first use of a past worker id writes, in the
/// data directory (state the server owns: a base backup and a standby carry it, a dump does not),
/// which database and table hold its record; every later use must find the same. Absent, as on
/// a first use or in a cluster restored from a dump or made by pg_upgrade (which keeps the
/// OIDs), it is written.
fn anchored(past: u32) {
    // SAFETY: a plain read of this backend's database's OID.
    let database = unsafe { pg_sys::MyDatabaseId }.to_u32();
    let record = Spi::get_one_with_args::<pg_sys::Oid>(
        "SELECT pg_catalog.to_regclass($1)::pg_catalog.oid",
        &[format!("{}.snowflake_past_use", extension_schema()).into()],
    )
    .ok()
    .flatten()
    .map_or(0, |oid| oid.to_u32());
    let here = (past, database, record);
    if ANCHORED.get() == Some(here) {
        return;
    }
    let path = anchor_path(past);
    match std::fs::read_to_string(&path) {
        Ok(text) => {
            let then: Vec<u32> = text
                .split_whitespace()
                .filter_map(|w| w.parse().ok())
                .collect();
            if then != [database, record] {
                errors::past_record_elsewhere(past, &path, text.trim(), database, record);
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            write_anchor(&path, &format!("{database} {record}\n"))
                .unwrap_or_else(|e| errors::past_anchor_unwritable(&path, &e.to_string()));
        }
        Err(e) => errors::past_anchor_unwritable(&path, &e.to_string()),
    }
    ANCHORED.set(Some(here));
}

/// Writes the anchor whole: a temporary file, fsynced, renamed over, the directory fsynced.
fn write_anchor(path: &str, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    let temp = format!("{path}.tmp.{}", std::process::id());
    let mut file = std::fs::File::create(&temp)?;
    file.write_all(text.as_bytes())?;
    file.sync_all()?;
    std::fs::rename(&temp, path)?;
    std::fs::File::open(".")?.sync_all()
}

/// Refuses a past worker id that is, or may become, this server's live one.
fn not_live(past: u32) {
    match settings::worker() {
        settings::UNSET => {}
        settings::AUTO => match settings::pinned() {
            Some(pinned) if pinned == past => errors::past_worker_is_live(
                past,
                "snowflake.worker_id, leased from snowflake.registry",
            ),
            Some(_) => {}
            None => {
                let range = settings::worker_range();
                if range.contains(past) {
                    errors::past_worker_is_live(
                        past,
                        &format!("inside snowflake.worker_range = {range}, from which it leases"),
                    );
                }
            }
        },
        live if live as u32 == past => errors::past_worker_is_live(past, "snowflake.worker_id"),
        _ => {}
    }
}

/// Refuses every database but the marks database: the past worker id is the server's, so its
/// record must be one.
fn in_marks_database() {
    let marks = settings::database();
    // SAFETY: get_database_name returns a palloc'd copy of this backend's database's name (or
    // NULL if it was dropped under us), read at once.
    let current = unsafe {
        let name = pg_sys::get_database_name(pg_sys::MyDatabaseId);
        if name.is_null() {
            String::new()
        } else {
            std::ffi::CStr::from_ptr(name)
                .to_string_lossy()
                .into_owned()
        }
    };
    if current != marks {
        errors::past_wrong_database(&current, &marks);
    }
}

/// Waits, as the generating functions do, while the mark writer loads the marks, and refuses
/// while they are in doubt: a server that may not mint live ids mints none for past times.
fn marks_ready(shared: &Shared, past: u32) {
    let since = Instant::now();
    loop {
        let state = shared.control().state;
        if state == State::Ready {
            break;
        }
        crate::mint::wait::for_marks(shared, past, since);
    }
    crate::mint::wait::done();
}

/// Takes `n` sequence numbers of `worker`'s time `unit` from the record and returns the first;
/// refused (and the upsert undone with the statement) when the unit has no room for them.
fn take(layout: &Layout, worker: u32, unit: u64, n: u32, ts: &TimestampWithTimeZone) -> u32 {
    let room = layout.max_seq() as i64 + 1;
    let query = format!(
        "INSERT INTO {}.snowflake_past_use AS u (worker, unit, used) VALUES ($1, $2, $3) \
         ON CONFLICT (worker, unit) DO UPDATE SET used = u.used + excluded.used \
         RETURNING u.used",
        extension_schema()
    );
    let used = Spi::get_one_with_args::<i64>(
        &query,
        &[
            (worker as i32).into(),
            (unit as i64).into(),
            (n as i64).into(),
        ],
    )
    .ok()
    .flatten()
    .unwrap_or_else(|| unreachable!("an upsert with RETURNING returns its row"));
    let before = used - n as i64;
    if used > room {
        errors::past_no_room(
            &ts.to_string(),
            worker,
            &format!("{} ms", layout.unit_ms),
            before,
            n as i64,
            room,
        );
    }
    before as u32
}

/// The extension's schema, quoted (it is fixed at CREATE EXTENSION: not relocatable).
fn extension_schema() -> String {
    Spi::get_one::<String>(
        "SELECT pg_catalog.quote_ident(n.nspname) FROM pg_catalog.pg_extension e \
         JOIN pg_catalog.pg_namespace n ON n.oid = e.extnamespace \
         WHERE e.extname = 'snowflake_ext'",
    )
    .ok()
    .flatten()
    .unwrap_or_else(|| unreachable!("the extension's own function runs inside it"))
}

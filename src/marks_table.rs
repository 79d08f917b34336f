//! Where the marks are kept: two tables in the schema `snowflake_ext_state` of the marks
//! database (`snowflake.database`), written only by the mark writer, in its own transactions.
//!
//! ```sql
//! snowflake_ext_state.meta  (one row: format, layout, token, created_at)
//! snowflake_ext_state.marks (worker PRIMARY KEY, mark, jump_base, jump_from,
//!                            reserved_from, reserved_to, updated_at)
//! ```
//!
//! Every value is an id of its worker (NULL: none), so `snowflake_decode(mark)` reads it:
//! every id the worker has issued is below `mark`, or between `reserved_from` and
//! `reserved_to` (ids issued after a forward clock jump that was rewound). `jump_base` and
//! `jump_from` record a forward jump the worker followed, for `snowflake_rewind`.
//!
//! Being a relation is the point: its rows travel in WAL, so a streaming standby replays them,
//! a promoted standby and a restored base backup plus WAL continue above them, and pg_upgrade
//! carries them like any table. The writer commits with `synchronous_commit = on`, so with
//! synchronous replication a mark is on the standby before any id below it is issued.
//!
//! The schema belongs to the writer, not to the extension: it is created at the first id, and
//! needs snowflake_ext to be installed in no particular database, at no particular version.
//! Only superusers can read it.

use pgrx::pg_sys;
use pgrx::spi::Spi;
use snowflake_core::layout::Layout;
use snowflake_core::marks::Row;
use snowflake_core::startup::{Meta, FORMAT};
use snowflake_core::token::Identity;

pub const SCHEMA: &str = "snowflake_ext_state";

const CREATE: &str = "
CREATE SCHEMA IF NOT EXISTS snowflake_ext_state;
REVOKE ALL ON SCHEMA snowflake_ext_state FROM PUBLIC;
COMMENT ON SCHEMA snowflake_ext_state IS
  'snowflake_ext: the high-water marks of this server''s id generators, written by the mark writer background worker. Do not edit; see snowflake_restore_mark().';
CREATE TABLE IF NOT EXISTS snowflake_ext_state.meta (
  one        boolean PRIMARY KEY DEFAULT true CHECK (one),
  format     integer NOT NULL,
  layout     text NOT NULL,
  token      bigint NOT NULL,
  created_at timestamptz NOT NULL DEFAULT pg_catalog.now()
);
CREATE TABLE IF NOT EXISTS snowflake_ext_state.marks (
  worker        integer PRIMARY KEY,
  mark          bigint NOT NULL,
  jump_base     bigint,
  jump_from     bigint,
  reserved_from bigint,
  reserved_to   bigint,
  updated_at    timestamptz NOT NULL DEFAULT pg_catalog.now()
);
REVOKE ALL ON snowflake_ext_state.meta, snowflake_ext_state.marks FROM PUBLIC;
";

/// The header row and where the table is: `None` if the marks schema does not exist (nothing
/// was ever written here, or it was dropped); an error if the schema exists but the header
/// cannot be read, which is doubt, not a first start.
pub fn read_meta() -> Result<Option<Meta>, String> {
    let schema = Spi::get_one::<bool>(
        "SELECT EXISTS (SELECT FROM pg_catalog.pg_namespace
                        WHERE nspname OPERATOR(pg_catalog.=) 'snowflake_ext_state')",
    )
    .map_err(|e| e.to_string())?
    .unwrap_or(false);
    if !schema {
        return Ok(None);
    }
    let exists = Spi::get_one::<bool>(
        "SELECT pg_catalog.to_regclass('snowflake_ext_state.meta') IS NOT NULL
            AND pg_catalog.to_regclass('snowflake_ext_state.marks') IS NOT NULL",
    )
    .map_err(|e| e.to_string())?
    .unwrap_or(false);
    if !exists {
        return Err("the schema snowflake_ext_state exists, but its tables are missing".into());
    }
    let (format, layout, token) = Spi::get_three::<i32, String, i64>(
        "SELECT format, layout, token FROM snowflake_ext_state.meta",
    )
    .map_err(|e| e.to_string())?;
    match (format, layout, token) {
        (Some(format), Some(layout), Some(token)) => Ok(Some(Meta {
            format,
            layout,
            identity: identity(token as u64)?,
        })),
        _ => Err("the header row of snowflake_ext_state.meta is missing".into()),
    }
}

/// The identity of the marks table here, with `token`.
fn identity(token: u64) -> Result<Identity, String> {
    let (database, table) = Spi::get_two::<pg_sys::Oid, pg_sys::Oid>(
        "SELECT d.oid, 'snowflake_ext_state.marks'::pg_catalog.regclass::pg_catalog.oid
         FROM pg_catalog.pg_database d WHERE d.datname OPERATOR(pg_catalog.=) pg_catalog.current_database()",
    )
    .map_err(|e| e.to_string())?;
    match (database, table) {
        (Some(database), Some(table)) => Ok(Identity {
            token,
            database: database.to_u32(),
            table: table.to_u32(),
        }),
        _ => Err("the marks table's OIDs cannot be read".into()),
    }
}

/// Every worker's row, in ticks. A row that does not decode in `layout` as an id
/// of its worker is an error (the caller refuses to mint).
pub fn read_marks(layout: &Layout) -> Result<Vec<(u32, Row)>, String> {
    Spi::connect(|client| {
        let rows = client
            .select(
                "SELECT worker, mark, jump_base, jump_from, reserved_from, reserved_to
                 FROM snowflake_ext_state.marks ORDER BY worker",
                None,
                &[],
            )
            .map_err(|e| e.to_string())?;
        let mut out = Vec::new();
        for row in rows {
            let worker: i32 = row.get(1).map_err(|e| e.to_string())?.unwrap_or(-1);
            let worker = layout.check_worker(worker as i64).map_err(|_| {
                format!("the marks table has a row for worker {worker}, outside the layout")
            })?;
            let tick = |col: usize| -> Result<u64, String> {
                match row.get::<i64>(col).map_err(|e| e.to_string())? {
                    None => Ok(0),
                    Some(id) => {
                        let parts = layout
                            .decompose(id)
                            .map_err(|_| format!("worker {worker}'s row holds {id}, not an id"))?;
                        if parts.worker != worker {
                            return Err(format!(
                                "worker {worker}'s row holds {id}, an id of worker {}",
                                parts.worker
                            ));
                        }
                        Ok(layout.tick_of(parts))
                    }
                }
            };
            out.push((
                worker,
                Row {
                    mark: tick(2)?,
                    jump_base: tick(3)?,
                    jump_from: tick(4)?,
                    reserved_from: tick(5)?,
                    reserved_to: tick(6)?,
                },
            ));
        }
        Ok(out)
    })
}

/// Creates the tables if they are missing and makes `token` the table's token, in the
/// writer's current transaction; returns the table's identity.
pub fn claim(layout: &Layout, token: u64) -> Identity {
    Spi::run(CREATE).expect("create the marks tables");
    Spi::run_with_args(
        "INSERT INTO snowflake_ext_state.meta (format, layout, token) VALUES ($1, $2, $3)
         ON CONFLICT (one) DO UPDATE SET format = EXCLUDED.format, layout = EXCLUDED.layout,
                                         token = EXCLUDED.token",
        &[
            FORMAT.into(),
            layout.to_string().into(),
            (token as i64).into(),
        ],
    )
    .expect("write the marks table's header");
    identity(token).expect("the new marks table's identity")
}

/// The identity of the table, its header locked until the transaction ends, if the table is
/// there.
pub fn lock_identity() -> Option<Identity> {
    read_meta().ok()??;
    let token = Spi::get_one::<i64>("SELECT token FROM snowflake_ext_state.meta FOR UPDATE")
        .ok()
        .flatten()?;
    identity(token as u64).ok()
}

/// Writes the given workers' state, in the writer's current transaction.
pub fn write(layout: &Layout, rows: &[(u32, Row)]) {
    let id = |tick: u64, worker: u32| (tick != 0).then(|| layout.id_from_tick(tick, worker));
    let mut workers = Vec::with_capacity(rows.len());
    let mut cols: [Vec<Option<i64>>; 5] = Default::default();
    for (worker, p) in rows {
        workers.push(*worker as i32);
        for (col, tick) in cols.iter_mut().zip([
            p.mark,
            p.jump_base,
            p.jump_from,
            p.reserved_from,
            p.reserved_to,
        ]) {
            col.push(id(tick, *worker));
        }
    }
    let [mark, jump_base, jump_from, reserved_from, reserved_to] = cols;
    Spi::run_with_args(
        "INSERT INTO snowflake_ext_state.marks AS m
                (worker, mark, jump_base, jump_from, reserved_from, reserved_to)
         SELECT * FROM ROWS FROM (pg_catalog.unnest($1::integer[]), pg_catalog.unnest($2::bigint[]),
                                  pg_catalog.unnest($3::bigint[]), pg_catalog.unnest($4::bigint[]),
                                  pg_catalog.unnest($5::bigint[]), pg_catalog.unnest($6::bigint[]))
         ON CONFLICT (worker) DO UPDATE SET
           mark = EXCLUDED.mark, jump_base = EXCLUDED.jump_base, jump_from = EXCLUDED.jump_from,
           reserved_from = EXCLUDED.reserved_from, reserved_to = EXCLUDED.reserved_to,
           updated_at = pg_catalog.now()",
        &[
            workers.into(),
            mark.into(),
            jump_base.into(),
            jump_from.into(),
            reserved_from.into(),
            reserved_to.into(),
        ],
    )
    .expect("write the marks");
}

//! Where the marks are kept: two tables in the schema `snowflake_ext_state` of the marks
//! database (`snowflake.database`), written only by the mark writer, in its own transactions.
//!
//! ```sql
//! snowflake_ext_state.meta  (one row: format, layout, token, generation, digest, created_at)
//! snowflake_ext_state.marks (worker PRIMARY KEY, mark, jump_base, jump_from,
//!                            reserved_from, reserved_to, updated_at)
//! ```
//!
//! Every value in `marks` is an id of its worker (NULL: none), so `snowflake_decode(mark)`
//! reads it: every id the worker has issued is below `mark`, or between `reserved_from` and
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
//!
//! Trust. The writer runs as the bootstrap superuser, and the marks are what keeps ids from
//! repeating; the marks database may belong to an ordinary role, who could create the schema
//! first, or tables with triggers that run as the writer. So the writer trusts, reads and
//! writes these objects only when `distrust` finds nothing: the schema and both tables owned
//! by the bootstrap superuser, plain logged heap tables with no trigger, rule, row security
//! policy, inheritance or subscription writing into them, and no grant that lets a role but
//! superusers change or lock them (grants that default privileges give new objects are taken
//! back when the writer creates them). Each write takes its locks first and checks again, so
//! nothing can be added between the check and the write. Members of `pg_write_all_data` can
//! still change the tables: what they change while the server runs is written over from
//! memory at the next write, and anything else is seen at start-up (the seal below). The header's `generation` (bumped with every write) and
//! `digest` (the seal of the header and rows written, under a key only the data directory
//! holds) tell a table emptied, edited or rolled back from the one the writer left
//! (`snowflake_core::startup`).

use pgrx::pg_sys;
use pgrx::spi::Spi;
use snowflake_core::layout::Layout;
use snowflake_core::lease::Seen;
use snowflake_core::marks::{self, Row};
use snowflake_core::startup::{Meta, FORMAT};
use snowflake_core::token::Identity;

pub const SCHEMA: &str = "snowflake_ext_state";

/// Why the marks table cannot be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// Objects another role made or could change (`distrust`): never read, never written.
    Untrusted(String),
    /// Anything else: a table missing, a header that cannot be read, an error in the query.
    Failed(String),
}

impl From<String> for Refusal {
    fn from(e: String) -> Refusal {
        Refusal::Failed(e)
    }
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::Untrusted(why) | Refusal::Failed(why) => f.write_str(why),
        }
    }
}

/// The way out of untrusted marks, for hints.
pub const UNTRUSTED_HINT: &str = "Only the mark writer may create, own or change the schema \
    snowflake_ext_state. As a superuser, in the marks database (snowflake.database), look at what \
    it holds, then DROP SCHEMA snowflake_ext_state CASCADE: a server that never minted ids then \
    starts afresh; one that did waits for SELECT snowflake_restore_mark(<an id above every id \
    this server issued>).";

/// `Err(Untrusted)` if `distrust` finds anything.
fn trusted() -> Result<(), Refusal> {
    match distrust()? {
        Some(why) => Err(Refusal::Untrusted(why)),
        None => Ok(()),
    }
}

const CREATE_SCHEMA: &str = "
CREATE SCHEMA snowflake_ext_state;
REVOKE ALL ON SCHEMA snowflake_ext_state FROM PUBLIC;
COMMENT ON SCHEMA snowflake_ext_state IS
  'snowflake_ext: the high-water marks of this server''s id generators, written by the mark writer background worker. Do not edit; see snowflake_restore_mark().';
";

const CREATE_TABLES: &str = "
CREATE TABLE IF NOT EXISTS snowflake_ext_state.meta (
  one        boolean PRIMARY KEY DEFAULT true CHECK (one),
  format     integer NOT NULL,
  layout     text NOT NULL,
  token      bigint NOT NULL,
  generation bigint NOT NULL DEFAULT 0,
  digest     bigint NOT NULL DEFAULT 0,
  created_at timestamptz NOT NULL DEFAULT pg_catalog.now()
);
ALTER TABLE snowflake_ext_state.meta
  ADD COLUMN IF NOT EXISTS generation bigint NOT NULL DEFAULT 0,
  ADD COLUMN IF NOT EXISTS digest bigint NOT NULL DEFAULT 0,
  ADD COLUMN IF NOT EXISTS registry_id uuid,
  ADD COLUMN IF NOT EXISTS registry_epoch bigint;
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

/// Everything that makes the marks schema untrustworthy, one finding per row, each naming the
/// object and its owner. The bootstrap superuser is OID 10 in every cluster.
const DISTRUST: &str = "
WITH s AS (SELECT n.oid, n.nspowner FROM pg_catalog.pg_namespace n
           WHERE n.nspname OPERATOR(pg_catalog.=) 'snowflake_ext_state'),
     t AS (SELECT c.oid, c.relname, c.relkind, c.relpersistence, c.relowner, c.relam,
                  c.relrowsecurity, c.relacl
           FROM pg_catalog.pg_class c JOIN s ON c.relnamespace OPERATOR(pg_catalog.=) s.oid
           WHERE c.relname OPERATOR(pg_catalog.=) ANY (ARRAY['meta', 'marks']))
SELECT pg_catalog.format('the schema snowflake_ext_state is owned by %s, not by the bootstrap superuser %s',
                         s.nspowner::pg_catalog.regrole, 10::pg_catalog.regrole)
  FROM s WHERE s.nspowner OPERATOR(pg_catalog.<>) 10
UNION ALL
SELECT pg_catalog.format('snowflake_ext_state.%I is owned by %s, not by the bootstrap superuser %s',
                         t.relname, t.relowner::pg_catalog.regrole, 10::pg_catalog.regrole)
  FROM t WHERE t.relowner OPERATOR(pg_catalog.<>) 10
UNION ALL
SELECT pg_catalog.format('snowflake_ext_state.%I (owned by %s) is not a plain logged heap table',
                         t.relname, t.relowner::pg_catalog.regrole)
  FROM t WHERE t.relkind OPERATOR(pg_catalog.<>) 'r' OR t.relpersistence OPERATOR(pg_catalog.<>) 'p'
            OR t.relam OPERATOR(pg_catalog.<>) (SELECT a.oid FROM pg_catalog.pg_am a
                                                WHERE a.amname OPERATOR(pg_catalog.=) 'heap')
UNION ALL
SELECT pg_catalog.format('snowflake_ext_state.%I has the trigger %I, which runs %s (owned by %s)',
                         t.relname, g.tgname, g.tgfoid::pg_catalog.regprocedure, p.proowner::pg_catalog.regrole)
  FROM t JOIN pg_catalog.pg_trigger g ON g.tgrelid OPERATOR(pg_catalog.=) t.oid
         JOIN pg_catalog.pg_proc p ON p.oid OPERATOR(pg_catalog.=) g.tgfoid
UNION ALL
SELECT pg_catalog.format('snowflake_ext_state.%I (owned by %s) has the rule %I',
                         t.relname, t.relowner::pg_catalog.regrole, r.rulename)
  FROM t JOIN pg_catalog.pg_rewrite r ON r.ev_class OPERATOR(pg_catalog.=) t.oid
UNION ALL
SELECT pg_catalog.format('snowflake_ext_state.%I (owned by %s) has row level security',
                         t.relname, t.relowner::pg_catalog.regrole)
  FROM t WHERE t.relrowsecurity
            OR EXISTS (SELECT FROM pg_catalog.pg_policy p WHERE p.polrelid OPERATOR(pg_catalog.=) t.oid)
UNION ALL
SELECT pg_catalog.format('snowflake_ext_state.%I is in an inheritance tree with %s (owned by %s)',
                         t.relname, o.oid::pg_catalog.regclass, o.relowner::pg_catalog.regrole)
  FROM t JOIN pg_catalog.pg_inherits i
         ON i.inhrelid OPERATOR(pg_catalog.=) t.oid OR i.inhparent OPERATOR(pg_catalog.=) t.oid
       JOIN pg_catalog.pg_class o
         ON o.oid OPERATOR(pg_catalog.=) (CASE WHEN i.inhrelid OPERATOR(pg_catalog.=) t.oid
                                               THEN i.inhparent ELSE i.inhrelid END)
UNION ALL
SELECT pg_catalog.format('snowflake_ext_state.%I is written by the subscription %I (owned by %s)',
                         t.relname, b.subname, b.subowner::pg_catalog.regrole)
  FROM t JOIN pg_catalog.pg_subscription_rel sr ON sr.srrelid OPERATOR(pg_catalog.=) t.oid
         JOIN pg_catalog.pg_subscription b ON b.oid OPERATOR(pg_catalog.=) sr.srsubid
UNION ALL
SELECT pg_catalog.format('%s may change snowflake_ext_state.%I (%s granted by %s)',
                         CASE WHEN a.grantee OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC'
                              ELSE a.grantee::pg_catalog.regrole::pg_catalog.text END,
                         t.relname, a.privilege_type, a.grantor::pg_catalog.regrole)
  FROM t, pg_catalog.aclexplode(t.relacl) a
 WHERE a.privilege_type OPERATOR(pg_catalog.=) ANY (ARRAY['INSERT', 'UPDATE', 'DELETE', 'TRUNCATE', 'TRIGGER', 'REFERENCES', 'MAINTAIN'])
   AND NOT EXISTS (SELECT FROM pg_catalog.pg_authid r
                   WHERE r.oid OPERATOR(pg_catalog.=) a.grantee AND r.rolsuper)
UNION ALL
SELECT pg_catalog.format('%s may change the column %I of snowflake_ext_state.%I (%s granted by %s)',
                         CASE WHEN a.grantee OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC'
                              ELSE a.grantee::pg_catalog.regrole::pg_catalog.text END,
                         c.attname, t.relname, a.privilege_type, a.grantor::pg_catalog.regrole)
  FROM t JOIN pg_catalog.pg_attribute c ON c.attrelid OPERATOR(pg_catalog.=) t.oid,
       pg_catalog.aclexplode(c.attacl) a
 WHERE a.privilege_type OPERATOR(pg_catalog.=) ANY (ARRAY['INSERT', 'UPDATE', 'REFERENCES'])
   AND NOT EXISTS (SELECT FROM pg_catalog.pg_authid r
                   WHERE r.oid OPERATOR(pg_catalog.=) a.grantee AND r.rolsuper)
";

/// Every grant on the marks objects to a role but their owner: `REVOKE` statements for them.
/// Default privileges (`ALTER DEFAULT PRIVILEGES` in the marks database) give new objects
/// such grants; the writer takes them back from the objects it has just created.
const GRANTS: &str = "
SELECT pg_catalog.format('REVOKE ALL ON SCHEMA snowflake_ext_state FROM %s',
                         CASE WHEN a.grantee OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC'
                              ELSE pg_catalog.quote_ident(a.grantee::pg_catalog.regrole::pg_catalog.text) END)
  FROM pg_catalog.pg_namespace n, pg_catalog.aclexplode(n.nspacl) a
 WHERE n.nspname OPERATOR(pg_catalog.=) 'snowflake_ext_state' AND a.grantee OPERATOR(pg_catalog.<>) n.nspowner
UNION
SELECT pg_catalog.format('REVOKE ALL ON TABLE snowflake_ext_state.%I FROM %s', c.relname,
                         CASE WHEN a.grantee OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC'
                              ELSE pg_catalog.quote_ident(a.grantee::pg_catalog.regrole::pg_catalog.text) END)
  FROM pg_catalog.pg_class c, pg_catalog.aclexplode(c.relacl) a
 WHERE c.relnamespace OPERATOR(pg_catalog.=) 'snowflake_ext_state'::pg_catalog.regnamespace
   AND c.relkind OPERATOR(pg_catalog.=) 'r' AND a.grantee OPERATOR(pg_catalog.<>) c.relowner
";

/// Takes back every grant on the marks objects the writer has just created.
fn revoke_grants() -> Result<(), String> {
    let statements: Vec<String> = Spi::connect(|client| {
        client
            .select(GRANTS, None, &[])
            .map(|rows| {
                rows.filter_map(|r| r.get::<String>(1).ok().flatten())
                    .collect()
            })
            .map_err(|e| e.to_string())
    })?;
    for statement in statements {
        Spi::run(&statement).map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// Why the marks schema cannot be trusted, if it cannot: every finding, each naming the object
/// and its owner. `None`: it can be (or it does not exist).
pub fn distrust() -> Result<Option<String>, String> {
    Spi::connect(|client| {
        let findings: Vec<String> = client
            .select(DISTRUST, None, &[])
            .map_err(|e| e.to_string())?
            .filter_map(|row| row.get::<String>(1).ok().flatten())
            .collect();
        Ok((!findings.is_empty()).then(|| findings.join("; ")))
    })
}

/// Whether the marks schema exists.
fn schema_exists() -> Result<bool, String> {
    Spi::get_one::<bool>(
        "SELECT EXISTS (SELECT FROM pg_catalog.pg_namespace
                        WHERE nspname OPERATOR(pg_catalog.=) 'snowflake_ext_state')",
    )
    .map_err(|e| e.to_string())
    .map(|e| e.unwrap_or(false))
}

fn tables_exist() -> Result<bool, String> {
    Spi::get_one::<bool>(
        "SELECT pg_catalog.to_regclass('snowflake_ext_state.meta') IS NOT NULL
            AND pg_catalog.to_regclass('snowflake_ext_state.marks') IS NOT NULL",
    )
    .map_err(|e| e.to_string())
    .map(|e| e.unwrap_or(false))
}

/// Whether both tables exist with the columns of this format.
fn tables_ready() -> Result<bool, String> {
    Spi::get_one::<bool>(
        "SELECT pg_catalog.to_regclass('snowflake_ext_state.marks') IS NOT NULL
            AND EXISTS (SELECT FROM pg_catalog.pg_attribute a
                        WHERE a.attrelid OPERATOR(pg_catalog.=) pg_catalog.to_regclass('snowflake_ext_state.meta')
                          AND a.attname OPERATOR(pg_catalog.=) 'registry_epoch' AND NOT a.attisdropped)",
    )
    .map_err(|e| e.to_string())
    .map(|e| e.unwrap_or(false))
}

/// The header row and where the table is: `None` if the marks schema does not exist (nothing
/// was ever written here, or it was dropped); an error if the schema exists but cannot be
/// trusted or its header cannot be read, which is doubt, not a first start. Reading a header
/// of format 1 (0.2.0, no generation or digest) works too.
pub fn read_meta() -> Result<Option<Meta>, Refusal> {
    if !schema_exists()? {
        return Ok(None);
    }
    trusted()?;
    if !tables_exist()? {
        return Err(Refusal::Failed(
            "the schema snowflake_ext_state exists, but its tables are missing".into(),
        ));
    }
    // to_jsonb of the row: a column that a format-1 header lacks reads as NULL.
    let row = Spi::connect(|client| {
        let rows = client
            .select(
                "SELECT format, layout, token,
                        (pg_catalog.to_jsonb(m) OPERATOR(pg_catalog.->>) 'generation')::pg_catalog.int8,
                        (pg_catalog.to_jsonb(m) OPERATOR(pg_catalog.->>) 'digest')::pg_catalog.int8,
                        pg_catalog.to_jsonb(m) OPERATOR(pg_catalog.->>) 'registry_id',
                        (pg_catalog.to_jsonb(m) OPERATOR(pg_catalog.->>) 'registry_epoch')::pg_catalog.int8
                 FROM ONLY snowflake_ext_state.meta m",
                None,
                &[],
            )
            .map_err(|e| e.to_string())?;
        let mut found = None;
        for row in rows {
            let get = |i| row.get::<i64>(i).map_err(|e| e.to_string());
            found = Some((
                row.get::<i32>(1).map_err(|e| e.to_string())?,
                row.get::<String>(2).map_err(|e| e.to_string())?,
                get(3)?,
                get(4)?,
                get(5)?,
                row.get::<String>(6).map_err(|e| e.to_string())?,
                get(7)?,
            ));
        }
        Ok::<_, String>(found)
    })?;
    match row {
        Some((Some(format), Some(layout), Some(token), generation, digest, registry, epoch)) => {
            Ok(Some(Meta {
                format,
                layout,
                identity: identity(token as u64)?,
                generation: generation.unwrap_or(0) as u64,
                digest: digest.map(|d| d as u64),
                seen: Seen {
                    registry: registry
                        .as_deref()
                        .and_then(snowflake_core::lease::parse_uuid)
                        .unwrap_or(0),
                    epoch: epoch.unwrap_or(0) as u64,
                },
            }))
        }
        _ => Err(Refusal::Failed(
            "the header row of snowflake_ext_state.meta is missing".into(),
        )),
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

/// Every worker's row, in ticks, in worker order. A row that does not decode in `layout` as an
/// id of its worker is an error (the caller refuses to mint).
pub fn read_marks(layout: &Layout) -> Result<Vec<(u32, Row)>, String> {
    Spi::connect(|client| {
        let rows = client
            .select(
                "SELECT worker, mark, jump_base, jump_from, reserved_from, reserved_to
                 FROM ONLY snowflake_ext_state.marks ORDER BY worker",
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

/// The marks table as a write finds it, once it holds its locks.
pub struct Current {
    pub identity: Identity,
    pub generation: u64,
    pub rows: Vec<(u32, Row)>,
}

/// Makes the marks objects ready for a write, in the writer's transaction: creates the schema
/// and tables that are missing (a format-1 header gets its new columns), takes the locks that
/// keep triggers, rules, policies and owners from changing until the transaction ends, checks
/// that everything can be trusted, and reads the table as it is. `None` when there was no
/// header row yet.
pub fn lock_for_write(layout: &Layout) -> Result<Option<Current>, Refusal> {
    if !schema_exists()? {
        Spi::run(CREATE_SCHEMA).map_err(|e| e.to_string())?;
        revoke_grants()?;
    }
    if !tables_ready()? {
        trusted()?;
        Spi::run(CREATE_TABLES).map_err(|e| e.to_string())?;
        revoke_grants()?;
    }
    Spi::run(
        "LOCK TABLE ONLY snowflake_ext_state.meta, snowflake_ext_state.marks IN ROW EXCLUSIVE MODE",
    )
    .map_err(|e| e.to_string())?;
    trusted()?;
    let token = Spi::get_two::<i64, i64>(
        "SELECT token, generation FROM ONLY snowflake_ext_state.meta FOR UPDATE",
    );
    let (token, generation) = match token {
        Ok((Some(token), Some(generation))) => (token, generation),
        _ => return Ok(None),
    };
    Ok(Some(Current {
        identity: identity(token as u64)?,
        generation: generation as u64,
        rows: read_marks(layout)?,
    }))
}

/// Makes `token` the table's token, in the writer's current transaction: the header row
/// written (or replaced), every row of `rows` written and every other row deleted. Returns the
/// table's identity.
pub fn claim(layout: &Layout, token: u64, rows: &[(u32, Row)]) -> Result<Identity, String> {
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
    .map_err(|e| e.to_string())?;
    let workers: Vec<i32> = rows.iter().map(|(w, _)| *w as i32).collect();
    Spi::run_with_args(
        "DELETE FROM ONLY snowflake_ext_state.marks WHERE worker OPERATOR(pg_catalog.<>) ALL ($1)",
        &[workers.into()],
    )
    .map_err(|e| e.to_string())?;
    write(layout, rows)?;
    identity(token)
}

/// Writes the given workers' rows, in the writer's current transaction.
pub fn write(layout: &Layout, rows: &[(u32, Row)]) -> Result<(), String> {
    if rows.is_empty() {
        return Ok(());
    }
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
    .map_err(|e| e.to_string())
}

/// Records in the header that the table now holds `rows` (every row it has), at
/// `generation`, with the registry record `seen`, sealed with `key`.
pub fn stamp(
    key: &[u8; 16],
    layout: &Layout,
    token: u64,
    generation: u64,
    rows: &[Row],
    seen: Seen,
) -> Result<(), String> {
    let layout = layout.to_string();
    let header = marks::Header {
        format: FORMAT,
        layout: &layout,
        token,
        generation,
        seen,
    };
    let seal = marks::seal(
        key,
        &header,
        rows.iter().enumerate().map(|(w, r)| (w as u32, r)),
    );
    Spi::run_with_args(
        "UPDATE ONLY snowflake_ext_state.meta SET format = $1, generation = $2, digest = $3,
                registry_id = $4::pg_catalog.uuid, registry_epoch = $5",
        &[
            FORMAT.into(),
            (generation as i64).into(),
            (seal as i64).into(),
            (seen.registry != 0)
                .then(|| snowflake_core::lease::format_uuid(seen.registry))
                .into(),
            (seen.registry != 0).then_some(seen.epoch as i64).into(),
        ],
    )
    .map_err(|e| e.to_string())
}

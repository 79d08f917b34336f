//! What the lease keeper asks the registry, as SQL (the schema: `sql/registry.sql`). Every
//! statement is one transaction of its own, in a session whose `search_path` is
//! `pg_catalog, pg_temp`, with every other name schema-qualified; each is
//! written so that two servers asking at once cannot both get a worker id (`FOR UPDATE SKIP
//! LOCKED`, and every change conditional on the fence the holder last saw).

use super::libpq::{Connection, Failure};
use snowflake_core::lease::WorkerRange;
use std::time::Instant;

/// The registry's schema, created by the first server that finds it missing.
const SCHEMA: &str = include_str!("../../sql/registry.sql");

/// Who holds a lease: a server, by what tells it apart from a copy running elsewhere.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    pub system_identifier: String,
    pub host: String,
    pub port: i32,
    pub data_directory: String,
    /// The server's timeline: higher on a standby promoted after it.
    pub timeline: i32,
    /// Drawn at each start of the postmaster.
    pub boot: String,
}

impl Holder {
    /// `host:port` and the data directory, for messages.
    pub fn describe(&self) -> String {
        format!(
            "{}:{} ({}, system {})",
            self.host, self.port, self.data_directory, self.system_identifier
        )
    }

    fn key(&self) -> [Option<String>; 4] {
        [
            Some(self.system_identifier.clone()),
            Some(self.host.clone()),
            Some(self.port.to_string()),
            Some(self.data_directory.clone()),
        ]
    }
}

/// A worker id the registry granted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Granted {
    pub worker: u32,
    pub fence: i64,
    /// The last holder's mark (an id of this worker): the new holder starts above it.
    pub last_mark: Option<i64>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claimed {
    Granted(Granted),
    /// Every worker id of the range is held by another server.
    Exhausted,
    /// This server was replaced by a standby promoted after it (`successor`); it held
    /// `worker`.
    Superseded {
        worker: i32,
        successor: String,
    },
}

/// A statement's rows, by `deadline`.
type Rows = Vec<Vec<Option<String>>>;

pub struct Registry<'a> {
    pub conn: &'a mut Connection,
    pub deadline: Instant,
    pub should_stop: &'a dyn Fn() -> bool,
}

fn undefined(f: &Failure) -> bool {
    matches!(f, Failure::Error { sqlstate: Some(code), .. } if code == "42P01" || code == "3F000")
}

impl Registry<'_> {
    fn run(&mut self, sql: &str, params: &[Option<String>]) -> Result<Rows, Failure> {
        self.conn
            .query(sql, params, self.deadline, self.should_stop)
    }

    /// Runs `sql`, creating the registry's schema first if it is missing.
    fn run_with_schema(&mut self, sql: &str, params: &[Option<String>]) -> Result<Rows, Failure> {
        match self.run(sql, params) {
            Err(f) if undefined(&f) => {
                self.create_schema()?;
                self.run(sql, params)
            }
            other => other,
        }
    }

    /// Creates the registry's schema (what `sql/registry.sql` does), statement by statement.
    pub fn create_schema(&mut self) -> Result<(), Failure> {
        for statement in SCHEMA
            .split(";\n")
            .map(strip_comments)
            .filter(|s| !s.is_empty())
        {
            self.run(&statement, &[])?;
        }
        Ok(())
    }

    /// Claims a worker id of `range` for `me`, for `ttl_ms`: its own (same server) at once if
    /// it has one, else one never held, else the one released or expired longest ago. First
    /// releases the leases of servers of the same system that this one replaced (a standby
    /// promoted after them, which no longer renew).
    pub fn claim(
        &mut self,
        me: &Holder,
        range: WorkerRange,
        ttl_ms: u64,
    ) -> Result<Claimed, Failure> {
        let key = me.key();
        let mut params: Vec<Option<String>> = key.to_vec();
        params.push(Some(me.timeline.to_string()));
        let refused = self.run_with_schema(
            "SELECT s.worker::pg_catalog.text, s.successor FROM snowflake_registry.superseded s
              WHERE (s.system_identifier, s.host, s.port, s.data_directory)
                    = ($1::pg_catalog.text, $2::pg_catalog.text, $3::pg_catalog.int4, $4::pg_catalog.text)
                AND s.timeline >= $5::pg_catalog.int4",
            &params,
        )?;
        if let Some(row) = refused.first() {
            return Ok(Claimed::Superseded {
                worker: row[0].as_deref().and_then(|w| w.parse().ok()).unwrap_or(-1),
                successor: row[1].clone().unwrap_or_default(),
            });
        }
        self.supersede_predecessors(me, ttl_ms)?;
        self.run(
            "INSERT INTO snowflake_registry.leases (worker)
             SELECT g FROM pg_catalog.generate_series($1::pg_catalog.int4, $2::pg_catalog.int4) g
             ON CONFLICT (worker) DO NOTHING",
            &[Some(range.first.to_string()), Some(range.last.to_string())],
        )?;
        let mut params = vec![Some(range.first.to_string()), Some(range.last.to_string())];
        params.extend(key);
        params.push(Some(me.timeline.to_string()));
        params.push(Some(me.boot.clone()));
        params.push(Some(ttl_ms.to_string()));
        let rows = self.run(
            "WITH pick AS (
               SELECT l.worker, l.last_mark,
                      (l.system_identifier, l.host, l.port, l.data_directory) IS NOT DISTINCT FROM
                        ($3::pg_catalog.text, $4::pg_catalog.text, $5::pg_catalog.int4, $6::pg_catalog.text) AS mine,
                      l.released_at IS NULL AS held
                 FROM snowflake_registry.leases l
                WHERE l.worker >= $1::pg_catalog.int4
                  AND l.worker <= $2::pg_catalog.int4
                  AND ((l.system_identifier, l.host, l.port, l.data_directory) IS NOT DISTINCT FROM
                         ($3::pg_catalog.text, $4::pg_catalog.text, $5::pg_catalog.int4, $6::pg_catalog.text)
                       OR l.system_identifier IS NULL
                       OR l.released_at IS NOT NULL
                       OR l.expires_at < pg_catalog.now())
                ORDER BY 3 DESC, (l.system_identifier IS NULL) DESC,
                         COALESCE(l.released_at, l.expires_at), l.worker
                LIMIT 1
                FOR UPDATE OF l SKIP LOCKED)
             UPDATE snowflake_registry.leases l
                SET system_identifier = $3, host = $4, port = $5::pg_catalog.int4, data_directory = $6,
                    timeline = $7::pg_catalog.int4, boot = $8,
                    fence = l.fence + 1,
                    since = CASE WHEN pick.mine AND pick.held THEN l.since ELSE pg_catalog.now() END,
                    renewed_at = pg_catalog.now(),
                    expires_at = pg_catalog.now() +
                                 $9::pg_catalog.int8 * pg_catalog.interval '1 millisecond',
                    released_at = NULL
               FROM pick
              WHERE l.worker = pick.worker
             RETURNING l.worker::pg_catalog.text, l.fence::pg_catalog.text, pick.last_mark::pg_catalog.text",
            &params,
        )?;
        let Some(row) = rows.first() else {
            return Ok(Claimed::Exhausted);
        };
        let field = |i: usize| row.get(i).cloned().flatten();
        Ok(Claimed::Granted(Granted {
            worker: field(0).and_then(|w| w.parse().ok()).unwrap_or(u32::MAX),
            fence: field(1).and_then(|f| f.parse().ok()).unwrap_or(0),
            last_mark: field(2).and_then(|m| m.parse().ok()),
        }))
    }

    /// Releases the leases of servers of this system on an earlier timeline that no longer
    /// renew them: this server is a standby promoted after them. They are recorded as
    /// superseded, so that one brought back beside this one leases nothing.
    pub fn supersede_predecessors(&mut self, me: &Holder, ttl_ms: u64) -> Result<(), Failure> {
        let mut params: Vec<Option<String>> = me.key().to_vec();
        params.push(Some(me.timeline.to_string()));
        // Not renewed for a renewal period and a margin (snowflake_core::lease::Timing).
        let grace = snowflake_core::lease::Timing { ttl_ms };
        params.push(Some(
            (grace.renew_every_ms() + grace.margin_ms()).to_string(),
        ));
        params.push(Some(me.describe()));
        self.run(
            "WITH gone AS (
               UPDATE snowflake_registry.leases l SET released_at = pg_catalog.now()
                WHERE l.system_identifier = $1::pg_catalog.text
                  AND l.timeline < $5::pg_catalog.int4
                  AND l.released_at IS NULL
                  AND (l.host, l.port, l.data_directory) IS DISTINCT FROM
                      ($2::pg_catalog.text, $3::pg_catalog.int4, $4::pg_catalog.text)
                  AND l.renewed_at < pg_catalog.now() -
                      $6::pg_catalog.int8 * pg_catalog.interval '1 millisecond'
               RETURNING l.system_identifier, l.host, l.port, l.data_directory, l.timeline, l.worker)
             INSERT INTO snowflake_registry.superseded
                    (system_identifier, host, port, data_directory, timeline, worker, successor)
             SELECT system_identifier, host, port, data_directory, timeline, worker, $7 FROM gone
             ON CONFLICT (system_identifier, host, port, data_directory) DO UPDATE
               SET timeline = EXCLUDED.timeline, worker = EXCLUDED.worker,
                   successor = EXCLUDED.successor, at = pg_catalog.now()",
            &params,
        )?;
        Ok(())
    }

    /// Renews `me`'s lease of `worker` (last seen with `fence`) for `ttl_ms`, recording `cap`
    /// (an id of the worker) below which it will issue. The new fence, or `None` when the lease
    /// is no longer `me`'s (expired, released by hand, or taken).
    pub fn renew(
        &mut self,
        me: &Holder,
        worker: u32,
        fence: i64,
        cap: i64,
        ttl_ms: u64,
    ) -> Result<Option<i64>, Failure> {
        let mut params: Vec<Option<String>> = me.key().to_vec();
        params.extend([
            Some(worker.to_string()),
            Some(fence.to_string()),
            Some(me.boot.clone()),
            Some(cap.to_string()),
            Some(ttl_ms.to_string()),
            Some(me.timeline.to_string()),
        ]);
        let rows = self.run(
            "UPDATE snowflake_registry.leases l
                SET fence = l.fence + 1, renewed_at = pg_catalog.now(),
                    expires_at = pg_catalog.now() +
                                 $9::pg_catalog.int8 * pg_catalog.interval '1 millisecond',
                    last_mark = GREATEST(l.last_mark, $8::pg_catalog.int8),
                    timeline = $10::pg_catalog.int4
              WHERE l.worker = $5::pg_catalog.int4
                AND l.fence = $6::pg_catalog.int8
                AND l.boot = $7
                AND l.released_at IS NULL
                AND l.expires_at > pg_catalog.now()
                AND (l.system_identifier, l.host, l.port, l.data_directory) =
                    ($1::pg_catalog.text, $2::pg_catalog.text, $3::pg_catalog.int4, $4::pg_catalog.text)
             RETURNING l.fence::pg_catalog.text",
            &params,
        )?;
        Ok(rows
            .first()
            .and_then(|r| r.first().cloned().flatten())
            .and_then(|f| f.parse().ok()))
    }

    /// Releases `me`'s lease of `worker` at a clean stop, recording `end`: one past the last id
    /// it issued (it issues no more), which may be below the cap it had recorded, so that the
    /// next holder (this server again, most often) continues right above its ids.
    pub fn release(
        &mut self,
        me: &Holder,
        worker: u32,
        fence: i64,
        end: i64,
    ) -> Result<(), Failure> {
        let mut params: Vec<Option<String>> = me.key().to_vec();
        params.extend([
            Some(worker.to_string()),
            Some(fence.to_string()),
            Some(me.boot.clone()),
            Some(end.to_string()),
        ]);
        self.run(
            "UPDATE snowflake_registry.leases l
                SET released_at = pg_catalog.now(), last_mark = $8::pg_catalog.int8
              WHERE l.worker = $5::pg_catalog.int4
                AND l.fence = $6::pg_catalog.int8
                AND l.boot = $7
                AND (l.system_identifier, l.host, l.port, l.data_directory) =
                    ($1::pg_catalog.text, $2::pg_catalog.text, $3::pg_catalog.int4, $4::pg_catalog.text)",
            &params,
        )?;
        Ok(())
    }
}

/// A statement of `sql/registry.sql` without its comment lines.
fn strip_comments(statement: &str) -> String {
    statement
        .lines()
        .filter(|l| !l.trim_start().starts_with("--"))
        .collect::<Vec<_>>()
        .join("\n")
        .trim()
        .to_string()
}

//! What the lease keeper asks the registry: one call of a function of the registry's schema
//! (`sql/registry/registry.sql`, where the protocol runs) per exchange, each its own transaction, in a
//! session whose `search_path` is `pg_catalog, pg_temp`. The registry answers every call with
//! one row of `snowflake_registry.answer`.

use super::libpq::{Connection, Failure};
use snowflake_core::lease::{parse_uuid, Outcome, Seen, WorkerRange};
use std::time::Instant;

/// Who holds a lease: a server, by what tells it apart from a copy running elsewhere.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    pub system_identifier: String,
    pub host: String,
    pub port: i32,
    pub data_directory: String,
    /// The server's timeline: higher on a standby promoted after it.
    pub timeline: i32,
    /// Drawn each time the server's shared memory is made (each start of the postmaster).
    pub boot: String,
    /// The machine run the postmaster started on: its kernel's boot id and its mount, network
    /// and IPC namespaces. Within one, PostgreSQL refuses to start a server while any process
    /// of an earlier start of it is attached to its shared memory: an earlier start of this
    /// server on the same machine run has stopped for good.
    pub host_run: String,
    /// A random value kept in the data directory (`keeper::secret`), that only this server
    /// (and a copy of its data directory) knows: the registry keeps its hash with the lease,
    /// and believes a caller is the holder only if it presents it. Never logged.
    pub secret: String,
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

/// A registry's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub outcome: Outcome,
    pub worker: Option<u32>,
    pub fence: Option<i64>,
    /// The last holder's cap (an id of the worker): a new holder starts above it.
    pub last_mark: Option<i64>,
    pub token: Option<i64>,
    pub wait_ms: Option<u64>,
    pub epoch: u64,
    pub registry: u128,
    pub lock_delay_ms: u64,
    pub max_skew_ms: u64,
    /// No new holder starts below this time (Unix ms).
    pub min_start_ms: Option<i64>,
    pub reason: String,
}

pub struct Registry<'a> {
    pub conn: &'a mut Connection,
    pub deadline: Instant,
    pub should_stop: &'a dyn Fn() -> bool,
}

/// What the caller sends with every call: the registry it last leased from and the highest
/// epoch it saw there.
fn seen_params(seen: Seen) -> [Option<String>; 2] {
    if seen.registry == 0 {
        [None, None]
    } else {
        [
            Some(snowflake_core::lease::format_uuid(seen.registry)),
            Some(seen.epoch.to_string()),
        ]
    }
}

impl Registry<'_> {
    /// Calls `function` with `params` (all sent as text, cast by the call) and reads its answer.
    fn call(
        &mut self,
        function: &str,
        casts: &[&str],
        params: &[Option<String>],
    ) -> Result<Answer, Failure> {
        let args: Vec<String> = casts
            .iter()
            .enumerate()
            .map(|(i, t)| format!("${}::pg_catalog.{t}", i + 1))
            .collect();
        self.call_with(function, &args.join(", "), params)
    }

    /// Calls `function` with the arguments `args` (SQL over `$1`.. of `params`).
    fn call_with(
        &mut self,
        function: &str,
        args: &str,
        params: &[Option<String>],
    ) -> Result<Answer, Failure> {
        let sql = format!(
            "SELECT a.outcome, a.worker::pg_catalog.text, a.fence::pg_catalog.text,
                    a.last_mark::pg_catalog.text, a.token::pg_catalog.text,
                    a.wait_ms::pg_catalog.text, a.epoch::pg_catalog.text,
                    a.registry_id::pg_catalog.text, a.lock_delay_ms::pg_catalog.text,
                    a.max_skew_ms::pg_catalog.text, a.min_start_ms::pg_catalog.text, a.reason
               FROM snowflake_registry.{function}({args}) a"
        );
        let rows = self
            .conn
            .query(&sql, params, self.deadline, self.should_stop)?;
        let row = rows.first().ok_or_else(|| Failure::Error {
            message: format!("snowflake_registry.{function} answered nothing"),
            sqlstate: None,
        })?;
        let text = |i: usize| row.get(i).cloned().flatten();
        let number = |i: usize| text(i).and_then(|v| v.parse::<i64>().ok());
        let outcome = text(0).unwrap_or_default();
        Ok(Answer {
            outcome: Outcome::parse(&outcome).ok_or_else(|| Failure::Error {
                message: format!(
                    "snowflake_registry.{function} answered \"{outcome}\", which this version of \
                     snowflake_ext does not know"
                ),
                sqlstate: None,
            })?,
            worker: number(1).and_then(|w| u32::try_from(w).ok()),
            fence: number(2),
            last_mark: number(3),
            token: number(4),
            wait_ms: number(5).map(|w| w.max(0) as u64),
            epoch: number(6).unwrap_or(0).max(0) as u64,
            registry: text(7).as_deref().and_then(parse_uuid).unwrap_or(0),
            lock_delay_ms: number(8).unwrap_or(0).max(0) as u64,
            max_skew_ms: number(9).unwrap_or(0).max(0) as u64,
            min_start_ms: number(10),
            reason: text(11).unwrap_or_default(),
        })
    }

    /// Calls `function`, whose last parameter a registry took later than the others: a registry
    /// whose registry.sql was not run again since (a fleet upgraded before its registry) has no
    /// such function (42883), and is asked again without it.
    fn call_newest_optional(
        &mut self,
        function: &str,
        casts: &[&str],
        mut params: Vec<Option<String>>,
    ) -> Result<Answer, Failure> {
        match self.call(function, casts, &params) {
            Err(Failure::Error {
                sqlstate: Some(s), ..
            }) if s == "42883" => {
                params.pop();
                self.call(function, &casts[..casts.len() - 1], &params)
            }
            answer => answer,
        }
    }

    /// Calls `function` of registry format 4, whose first two parameters are the caller
    /// (`snowflake_registry.holder`) and what it asks under (`snowflake_registry.terms`: the
    /// registry it last leased from, its request, its lease and its clock), then `rest`
    /// (`(cast, value)`). A registry whose registry.sql was not run again since (a fleet upgraded
    /// before its registry) has no such types (42704) or function (42883): it is called as
    /// before, positionally, with the same values in the order `positional` gives (each the
    /// number of a parameter above, or `EPOCH`: the highest epoch seen there, which registries
    /// before format 3 read). `optional_last`: the positional form's last parameter came later
    /// than the others, and a registry older still is asked without it.
    #[allow(clippy::too_many_arguments)]
    fn call_grouped(
        &mut self,
        function: &str,
        me: &Holder,
        terms: [Option<String>; 3],
        seen: Seen,
        rest: &[(&str, Option<String>)],
        positional: &[usize],
        optional_last: bool,
    ) -> Result<Answer, Failure> {
        let [registry, epoch] = seen_params(seen);
        let mut params: Vec<Option<String>> = me.key().to_vec();
        params.extend([
            Some(me.timeline.to_string()),
            Some(me.boot.clone()),
            Some(me.host_run.clone()),
            Some(me.secret.clone()),
            registry,
        ]);
        params.extend(terms);
        let mut casts = vec![
            "text", "text", "int4", "text", "int4", "text", "text", "text", "uuid", "int8", "int4",
            "int8",
        ];
        for (cast, value) in rest {
            casts.push(cast);
            params.push(value.clone());
        }
        let arg = |i: usize| format!("${i}::pg_catalog.{}", casts[i - 1]);
        let args = format!(
            "ROW({})::snowflake_registry.holder, ROW({})::snowflake_registry.terms, {}",
            (1..=8).map(arg).collect::<Vec<_>>().join(", "),
            (9..=12).map(arg).collect::<Vec<_>>().join(", "),
            (13..=params.len()).map(arg).collect::<Vec<_>>().join(", ")
        );
        match self.call_with(function, &args, &params) {
            Err(Failure::Error {
                sqlstate: Some(s), ..
            }) if s == "42704" || s == "42883" => {
                let (old_casts, old_params): (Vec<&str>, Vec<Option<String>>) = positional
                    .iter()
                    .map(|&i| match i {
                        EPOCH => ("int8", epoch.clone()),
                        i => (casts[i - 1], params[i - 1].clone()),
                    })
                    .unzip();
                if optional_last {
                    self.call_newest_optional(function, &old_casts, old_params)
                } else {
                    self.call(function, &old_casts, &old_params)
                }
            }
            answer => answer,
        }
    }

    /// The registry's id, epoch and limits.
    pub fn identity(&mut self) -> Result<Answer, Failure> {
        self.call("identity", &[], &[])
    }

    /// Claims a worker id of `range` (`pinned`: exactly `range.first`) for `me`.
    #[allow(clippy::too_many_arguments)]
    pub fn claim(
        &mut self,
        me: &Holder,
        range: WorkerRange,
        pinned: bool,
        ttl_ms: u64,
        clock_ms: i64,
        fence: Option<i64>,
        request: Option<i64>,
        seen: Seen,
    ) -> Result<Answer, Failure> {
        self.call_grouped(
            "claim",
            me,
            [
                request.map(|r| r.to_string()),
                Some(ttl_ms.to_string()),
                Some(clock_ms.to_string()),
            ],
            seen,
            &[
                ("int4", Some(range.first.to_string())),
                ("int4", Some(range.last.to_string())),
                ("bool", Some(pinned.to_string())),
                ("int8", fence.map(|f| f.to_string())),
            ],
            &[1, 2, 3, 4, 6, 7, 8, 5, 13, 14, 15, 11, 12, 16, 10, 9, EPOCH],
            false,
        )
    }

    /// Takes the worker id claimed with `token`, once the lock-delay has passed. `request` is
    /// the same for every attempt of one confirmation, as for a renewal.
    #[allow(clippy::too_many_arguments)]
    pub fn confirm(
        &mut self,
        me: &Holder,
        worker: u32,
        token: i64,
        request: i64,
        ttl_ms: u64,
        clock_ms: i64,
        seen: Seen,
    ) -> Result<Answer, Failure> {
        // (positionally, without the request a registry answers a lost answer `lost`, as before)
        self.call_grouped(
            "confirm",
            me,
            [
                Some(request.to_string()),
                Some(ttl_ms.to_string()),
                Some(clock_ms.to_string()),
            ],
            seen,
            &[
                ("int4", Some(worker.to_string())),
                ("int8", Some(token.to_string())),
            ],
            &[1, 2, 3, 4, 6, 7, 8, 5, 13, 14, 11, 12, 9, EPOCH, 10],
            true,
        )
    }

    /// Renews `me`'s lease of `worker` (last seen with `fence`) for `ttl_ms`, recording `cap`
    /// (an id of the worker) below which it will issue. `request` is the same for every
    /// attempt of one renewal, so that the registry answers an attempt whose first answer was
    /// lost as it did the first time. `ran_out`: the lease had run out on this server's clock
    /// when this attempt was sent (a registry that went back in time then cannot know that
    /// nobody took it meanwhile).
    #[allow(clippy::too_many_arguments)]
    pub fn renew(
        &mut self,
        me: &Holder,
        worker: u32,
        fence: i64,
        request: i64,
        cap: i64,
        ttl_ms: u64,
        clock_ms: i64,
        seen: Seen,
        ran_out: bool,
    ) -> Result<Answer, Failure> {
        // (positionally, without the flag a registry judges a recovered lease by the expiry its
        // copy has, as before)
        self.call_grouped(
            "renew",
            me,
            [
                Some(request.to_string()),
                Some(ttl_ms.to_string()),
                Some(clock_ms.to_string()),
            ],
            seen,
            &[
                ("int4", Some(worker.to_string())),
                ("int8", Some(fence.to_string())),
                ("int8", Some(cap.to_string())),
                ("bool", Some(ran_out.to_string())),
            ],
            &[1, 2, 3, 4, 6, 8, 5, 13, 14, 10, 15, 11, 12, 9, EPOCH, 16],
            true,
        )
    }

    /// Gives back `me`'s lease of `worker`, recording `end`: one past the last id it issued.
    pub fn release(
        &mut self,
        me: &Holder,
        worker: u32,
        fence: i64,
        end: i64,
        seen: Seen,
    ) -> Result<Answer, Failure> {
        self.call_grouped(
            "release",
            me,
            [None, None, None],
            seen,
            &[
                ("int4", Some(worker.to_string())),
                ("int8", Some(fence.to_string())),
                ("int8", Some(end.to_string())),
            ],
            &[1, 2, 3, 4, 6, 8, 13, 14, 15, 9, EPOCH],
            false,
        )
    }
}

/// In a positional order (`Registry::call_grouped`): the highest epoch the caller saw.
const EPOCH: usize = 0;

#!/usr/bin/env python3
"""snowflake_ext benchmarks, side by side with what PostgreSQL already has.

Starts its own PostgreSQL server (15, or the major in PG_MAJOR) (library preloaded, fsync and synchronous_commit on), runs
every measurement with the generators interleaved round by round so that each ratio compares
runs made under the same conditions, and writes a markdown report and an SVG chart.

  M1  one session, raw generation: SELECT count(G) FROM generate_series(1, N)
  M2  pgbench `SELECT G;` at 1, 2, 4, 8 clients
  M3  pgbench `INSERT` into a table whose primary key defaults to G, at 1, 2, 4, 8 clients
  M4  bulk INSERT ... SELECT of 1,000,000 and 2,000,000 rows: wall time, primary-key index size
  M5  inserts at scale: 4 clients inserting batches of 1,000 rows until the table holds 20 million
      rows, far past shared_buffers (128 MB; synchronous_commit off): rows/s against table size,
      then index size and WAL volume
  M6  inserts through a Citus cluster (a coordinator and two workers, PostgreSQL 18, when Citus
      and this extension are installed there): pgbench `INSERT` through the coordinator into
      tables hash-distributed on a snowflake, bigserial or UUIDv4 key, at 2 and 8 clients
  M7  the primary key's B-tree under time-first, worker-first (Seata), bigserial and UUIDv7
      ids from 1, 8 and 64 workers: bench/m7.py, run on its own (`bench/run --m7` or
      `bench.py --m7`); the full run keeps the M7 section of results.md as it is
  C   instructions per call on the hot path (valgrind --tool=callgrind on a server), and where
      they go
  --portable-cost: the portable edition's fast path built up a part at a time, each part's
      instructions per single-row INSERT and per id (callgrind), and its INSERT tps beside
      bigserial's with fsync off

M1 to M4 include the portable edition (sql/portable/snowflake_portable.sql, in the schema
`portable` of the same server). Every measurement includes the floor (M1 and C: a function doing
only the call and the clock read) and, when it is installed (bench/run builds it from ../shared/peers/pgedge-snowflake),
pgEdge's snowflake.

Run it through bench/run, which builds and installs the release build first.
"""

import argparse
import fcntl
import os
import random
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.dont_write_bytecode = True  # no bench/__pycache__
import m7  # noqa: E402  (bench/m7.py: M7, which runs on its own)

ROOT = Path(__file__).resolve().parent.parent
PG_MAJOR = os.environ.get("PG_MAJOR", "15")
PGBIN = Path(subprocess.check_output([str(ROOT / "scripts" / "pg-major"), "bindir", PG_MAJOR], text=True).strip())
CLUSTER = ROOT / "scripts" / "pg-cluster"
PGEDGE_CONTROL = Path(subprocess.check_output([str(PGBIN / "pg_config"), "--sharedir"], text=True).strip()) / "extension" / "snowflake.control"
NV = "nextval('seq')"  # the label of the reference generator
FLOOR = "floor: the call and a clock read"
PGEDGE = "pgEdge snowflake.nextval()"
AUTO = "snowflake_nextval(), worker id leased (auto)"
# The portable edition (sql/portable/snowflake_portable.sql), installed in the schema `portable`
# of the same server with a worker id of its own.
PORTABLE = "portable edition: snowflake_nextval()"
# (In one transaction, as the file requires.)
PORTABLE_SQL = ("BEGIN; CREATE SCHEMA portable; SET search_path = portable;\n"
                + (ROOT / "sql" / "portable" / "snowflake_portable.sql").read_text()
                + "\nCOMMIT; RESET search_path; SELECT portable.snowflake_set_worker_id(2);")
# The floor is a symbol of our library that the extension's SQL does not declare (src/mint/bench_floor.rs).
FLOOR_SQL = ("CREATE FUNCTION snowflake_bench_floor(integer) RETURNS bigint VOLATILE PARALLEL SAFE "
             "LANGUAGE c AS 'snowflake_ext', 'snowflake_bench_floor_wrapper';")

UUIDV7_PLPGSQL = """
CREATE OR REPLACE FUNCTION uuidv7() RETURNS uuid LANGUAGE plpgsql VOLATILE AS $$
BEGIN
  -- 48-bit Unix milliseconds, version 7, variant 2, the rest random (RFC 9562).
  RETURN encode(
    set_bit(set_bit(
      overlay(uuid_send(gen_random_uuid())
              placing substring(int8send(floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint) FROM 3)
              FROM 1 FOR 6),
      52, 1), 53, 1),
    'hex')::uuid;
END $$;
"""

# The classic "Instagram" PL/pgSQL id function (Instagram Engineering, "Sharding & IDs at
# Instagram", 2012): a sequence modulo 1024, the clock and a shard id, in PL/pgSQL.
INSTAGRAM = "Instagram's PL/pgSQL function"
INSTAGRAM_SQL = """
CREATE SEQUENCE instagram_seq;
CREATE OR REPLACE FUNCTION instagram_next_id(OUT result bigint) LANGUAGE plpgsql AS $$
DECLARE
    our_epoch bigint := 1314220021721;
    seq_id bigint;
    now_millis bigint;
    shard_id int := 5;
BEGIN
    SELECT nextval('instagram_seq') % 1024 INTO seq_id;
    SELECT floor(extract(epoch FROM clock_timestamp()) * 1000) INTO now_millis;
    result := (now_millis - our_epoch) << 23;
    result := result | (shard_id << 10);
    result := result | (seq_id);
END;
$$;
"""


class Server:
    """A server of scripts/pg-cluster; `env` is the environment of every pg-cluster call (its
    PG_MAJOR chooses the major)."""
    def __init__(self, directory, port, settings, env=None):
        self.dir, self.port = str(directory), port
        self.env = env
        subprocess.run([str(CLUSTER), "destroy", self.dir], check=True, env=env)
        subprocess.run([str(CLUSTER), "init", self.dir, str(port)] + settings, check=True, env=env)

    def start(self):
        subprocess.run([str(CLUSTER), "start", self.dir], check=True, env=self.env)

    def stop(self):
        subprocess.run([str(CLUSTER), "stop", self.dir], check=True, env=self.env)

    def destroy(self):
        subprocess.run([str(CLUSTER), "destroy", self.dir], check=False, env=self.env)

    def psql(self, sql, timing=False):
        """Runs sql in a new session; returns (output, milliseconds of the last statement)."""
        script = ("\\timing on\n" if timing else "") + sql
        out = subprocess.run(
            [str(PGBIN / "psql"), "-X", "-q", "-At", "-v", "ON_ERROR_STOP=1",
             "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", "-d", "postgres"],
            input=script, capture_output=True, text=True)
        if out.returncode != 0:
            raise RuntimeError(f"psql failed: {out.stderr}\n{sql}")
        ms = None
        if timing:
            times = re.findall(r"^Time: ([\d.]+) ms", out.stdout, re.M)
            ms = float(times[-1])
        lines = [l for l in out.stdout.splitlines() if not l.startswith("Time: ")]
        return "\n".join(lines), ms

    def pgbench(self, script, clients, seconds):
        with tempfile.NamedTemporaryFile("w", suffix=".sql", delete=False) as f:
            f.write(script + "\n")
            path = f.name
        os.chmod(path, 0o644)
        try:
            out = subprocess.run(
                [str(PGBIN / "pgbench"), "-n", "-M", "prepared", "-f", path,
                 "-c", str(clients), "-j", str(min(clients, 2)), "-T", str(seconds),
                 "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", "postgres"],
                capture_output=True, text=True)
        finally:
            os.unlink(path)
        if out.returncode != 0:
            raise RuntimeError(f"pgbench failed: {out.stderr}")
        return float(re.search(r"tps = ([\d.]+) \(without initial connection time\)", out.stdout).group(1))

    def pgbench_transactions(self, script, clients, transactions):
        """pgbench running `transactions` transactions per client."""
        with tempfile.NamedTemporaryFile("w", suffix=".sql", delete=False) as f:
            f.write(script + "\n")
            path = f.name
        os.chmod(path, 0o644)
        try:
            out = subprocess.run(
                [str(PGBIN / "pgbench"), "-n", "-M", "prepared", "-f", path,
                 "-c", str(clients), "-j", str(min(clients, 2)), "-t", str(transactions),
                 "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", "postgres"],
                capture_output=True, text=True)
        finally:
            os.unlink(path)
        if out.returncode != 0:
            raise RuntimeError(f"pgbench failed: {out.stderr}{out.stdout}")


def summary(values):
    return statistics.median(values), min(values), max(values)


def paired_ratios(values, reference):
    """Ratios of runs made in the same round: the fairest comparison on a noisy machine, since
    both runs of a pair saw the same conditions."""
    return [v / r for v, r in zip(values, reference)]


def above_floor_ns(m1_ms, name, n):
    """Nanoseconds per id that `name` takes beyond the floor: the median over rounds of the
    difference between the two runs of a round (as paired_ratios, for the same reason)."""
    return statistics.median((ms - floor) * 1e6 / n for ms, floor in zip(m1_ms[name], m1_ms[FLOOR]))


def rounds(names, repeats, run):
    """Runs run(name) for every name, `repeats` rounds, in a new random order each round."""
    results = {n: [] for n in names}
    for r in range(repeats):
        order = list(names)
        random.shuffle(order)
        for n in order:
            results[n].append(run(n))
    return results


def fmt(x, digits=0):
    return f"{x:,.{digits}f}"


def m1(server, n, repeats, generators, extras=True):
    """One session: ids per second of SELECT count(G) FROM generate_series(1, n); with `extras`,
    the batch function and the empty loop too."""
    queries = {name: f"SELECT count({g}) FROM generate_series(1, {n})" for name, g in generators.items()}
    if extras:
        # The batch function returns sets: n ids as n/10,000 calls of 10,000 ids each.
        queries["snowflake_nextval_batch(1, 10000)"] = (
            f"SELECT count(*) FROM generate_series(1, {n // 10000}) g, LATERAL snowflake_nextval_batch(1, 10000)")
        queries["empty loop: count(1)"] = f"SELECT count(1) FROM generate_series(1, {n})"
    times = rounds(list(queries), repeats, lambda name: server.psql(queries[name], timing=True)[1])
    return {name: [n / (ms / 1000.0) for ms in t] for name, t in times.items()}, times


def m1_auto(work, ports, n, repeats):
    """M1 for a worker id leased from a registry (snowflake.worker_id = 'auto'): the hot path
    reads the leased worker id from shared memory where it would read the setting. Measured
    against the floor on a server of its own (and a registry beside it), in rounds, so that its
    ns per id above the floor compare with the hand-set id's of the main server."""
    registry = Server(Path(work) / "auto-registry", ports[0], ["shared_preload_libraries="])
    registry.start()
    # Installed by its owner, the fleet's role given only what grant_fleet gives (a registry
    # refuses a role that could write its tables).
    registry.psql((ROOT / "sql" / "registry" / "registry.sql").read_text()
                  + "\nCREATE ROLE fleet LOGIN; SELECT snowflake_registry.grant_fleet('fleet');")
    server = Server(Path(work) / "auto-data", ports[1], [
        "snowflake.worker_id=auto",
        f"snowflake.registry=host=127.0.0.1 port={ports[0]} dbname=postgres user=fleet"])
    server.start()
    try:
        server.psql("CREATE EXTENSION snowflake_ext;" + FLOOR_SQL)
        deadline = time.time() + 120
        while server.psql("SELECT worker_id IS NOT NULL FROM snowflake_status()")[0] != "t":
            if time.time() > deadline:
                raise RuntimeError("the auto server leased no worker id")
            time.sleep(0.1)
        server.psql("SELECT snowflake_nextval()")
        _, ms = m1(server, n, repeats, {FLOOR: "snowflake_bench_floor(1)", AUTO: "snowflake_nextval()"}, extras=False)
        return above_floor_ns(ms, AUTO, n)
    finally:
        server.destroy()
        registry.destroy()


def by_clients(clients_list, labels, repeats, run):
    """{label: {clients: [measurements]}}: run(label, clients) in interleaved rounds, per client count."""
    out = {}
    for clients in clients_list:
        for label, values in rounds(labels, repeats, lambda label: run(label, clients)).items():
            out.setdefault(label, {})[clients] = values
    return out


def m2(server, seconds, repeats, clients_list, generators):
    return by_clients(clients_list, list(generators), repeats,
                      lambda name, clients: server.pgbench(f"SELECT {generators[name]};", clients, seconds))


M5_TABLES = {
    "bigserial": "id bigserial PRIMARY KEY",
    "snowflake_nextval()": "id bigint PRIMARY KEY DEFAULT snowflake_nextval()",
    "uuid v4 (gen_random_uuid)": "id uuid PRIMARY KEY DEFAULT gen_random_uuid()",
    "uuid v7 (PL/pgSQL)": "id uuid PRIMARY KEY DEFAULT uuidv7()",
}

M3_TABLES = {
    "bigserial": "id bigserial PRIMARY KEY",
    "uuid v4 (gen_random_uuid)": "id uuid PRIMARY KEY DEFAULT gen_random_uuid()",
    "uuid v7 (PL/pgSQL)": "id uuid PRIMARY KEY DEFAULT uuidv7()",
    "snowflake_nextval()": "id bigint PRIMARY KEY DEFAULT snowflake_nextval()",
    # The snowflake type (a bigint whose JSON form is a string): the same speed and index size?
    "snowflake type": "id snowflake PRIMARY KEY DEFAULT snowflake_nextval()",
    PORTABLE: "id bigint PRIMARY KEY DEFAULT portable.snowflake_nextval()",
    INSTAGRAM: "id bigint PRIMARY KEY DEFAULT instagram_next_id()",
}


# M6: Citus 14 runs on PostgreSQL 16 to 18.
CITUS_MAJOR = "18"
M6_TABLES = {
    "bigserial": "id bigserial PRIMARY KEY",
    "uuid v4 (gen_random_uuid)": "id uuid PRIMARY KEY DEFAULT gen_random_uuid()",
    "snowflake_nextval()": "id bigint PRIMARY KEY DEFAULT snowflake_nextval()",
}


def citus_ready():
    """Whether Citus and this extension are installed for CITUS_MAJOR."""
    pg_config = subprocess.check_output([str(ROOT / "scripts" / "pg-major"), "pg-config", CITUS_MAJOR], text=True).strip()
    if not Path(pg_config).exists():
        return False
    lib = Path(subprocess.check_output([pg_config, "--pkglibdir"], text=True).strip())
    share = Path(subprocess.check_output([pg_config, "--sharedir"], text=True).strip()) / "extension"
    return (lib / "citus.so").exists() and (share / "snowflake_ext.control").exists()


def m6(work, ports, seconds, repeats, clients_list):
    """Inserts through a Citus cluster of three nodes (each minting with its own worker id):
    pgbench INSERT through the coordinator into tables hash-distributed on their key."""
    env = dict(os.environ, PG_MAJOR=CITUS_MAJOR)
    nodes = []
    try:
        for i, port in enumerate(ports):
            node = Server(Path(work) / f"citus-{i}", port, [
                "shared_preload_libraries=citus,snowflake_ext", f"snowflake.worker_id={10 + i}",
                "max_prepared_transactions=100", "shared_buffers=256MB", "fsync=on", "synchronous_commit=on"], env=env)
            nodes.append(node)
            node.start()
            node.psql("CREATE EXTENSION citus")
        coordinator = nodes[0]
        coordinator.psql(f"SELECT citus_set_coordinator_host('127.0.0.1', {ports[0]});" +
                         "".join(f"SELECT citus_add_node('127.0.0.1', {p});" for p in ports[1:]) +
                         "CREATE EXTENSION snowflake_ext;")
        for label, key in M6_TABLES.items():
            t = table_name(label)
            coordinator.psql(f"CREATE TABLE {t} ({key}, v int) WITH (autovacuum_enabled = off);"
                             f"SELECT create_distributed_table('{t}', 'id');")
            coordinator.psql(f"INSERT INTO {t} (v) VALUES (0)")  # every node's first id and connections

        def run(label, clients):
            t = table_name(label)
            coordinator.psql(f"TRUNCATE {t}")
            return coordinator.pgbench(f"INSERT INTO {t} (v) VALUES (1);", clients, seconds)
        return by_clients(clients_list, list(M6_TABLES), repeats, run)
    finally:
        for node in nodes:
            node.destroy()


def table_name(label):
    return "t_" + re.sub(r"[^a-z0-9]+", "_", label.lower()).strip("_")


def create_tables(server, labels):
    # No autovacuum: it would visit some runs' tables and not others'.
    sql = "".join(f"DROP TABLE IF EXISTS {table_name(l)}; CREATE TABLE {table_name(l)} ({M3_TABLES[l]}, v int) "
                  "WITH (autovacuum_enabled = off);" for l in labels)
    server.psql(sql)


def m3(server, seconds, repeats, clients_list):
    def run(label, clients):
        t = table_name(label)
        server.psql(f"TRUNCATE {t}; CHECKPOINT;")
        return server.pgbench(f"INSERT INTO {t} (v) VALUES (1);", clients, seconds)
    return by_clients(clients_list, list(M3_TABLES), repeats, run)


def m4(server, sizes, repeats):
    out = {}
    labels = list(M3_TABLES)
    for rows in sizes:
        def run(label):
            t = table_name(label)
            server.psql(f"TRUNCATE {t}; CHECKPOINT;")
            _, ms = server.psql(f"INSERT INTO {t} (v) SELECT g FROM generate_series(1, {rows}) g", timing=True)
            size, _ = server.psql(f"SELECT pg_relation_size('{t}_pkey')")
            return ms, int(size)
        res = rounds(labels, repeats, run)
        for label, values in res.items():
            out.setdefault(label, {})[rows] = values
    return out


def m5(work, port, total, segments, clients, batch):
    """Inserts at scale, in a server of its own with a small buffer cache: for each generator,
    `clients` pgbench clients insert batches of `batch` rows until the table holds `total` rows,
    timed in `segments` equal parts. Returns {label: {"rates": [(rows so far, rows/s)], "index":
    bytes, "heap": bytes, "wal": bytes}}."""
    pgedge = PGEDGE_CONTROL.exists()
    # A checkpoint (not timed) after each part, and none within one: each part is timed under
    # the same conditions, instead of whichever parts a checkpoint happened to fall in. The
    # overall rate counts the checkpoints too.
    settings = ["snowflake.worker_id=1", "shared_buffers=128MB", "synchronous_commit=off", "fsync=on",
                "max_wal_size=8GB", "checkpoint_timeout=1h", "max_connections=20"]
    server = Server(Path(work) / "m5-data", port, settings + (["snowflake.node=2"] if pgedge else []))
    server.start()
    tables = dict(M5_TABLES)
    try:
        server.psql("CREATE EXTENSION snowflake_ext;" + UUIDV7_PLPGSQL)
        if pgedge:
            server.psql("CREATE EXTENSION snowflake; CREATE SEQUENCE pgedge_seq;")
            tables[PGEDGE] = "id bigint PRIMARY KEY DEFAULT snowflake.nextval('pgedge_seq')"
        per_segment = total // segments
        per_client = max(1, per_segment // (clients * batch))
        out = {}
        order = list(tables)
        random.shuffle(order)
        for label in order:
            server.psql(f"DROP TABLE IF EXISTS m5; CREATE TABLE m5 ({tables[label]}, v int) "
                        "WITH (autovacuum_enabled = off); CHECKPOINT;")
            start_lsn, _ = server.psql("SELECT pg_current_wal_lsn()")
            rates, rows, first = [], 0, time.time()
            for _ in range(segments):
                began = time.time()
                server.pgbench_transactions(f"INSERT INTO m5 (v) SELECT 1 FROM generate_series(1, {batch});",
                                            clients, per_client)
                done = per_client * clients * batch
                rows += done
                rates.append((rows, done / (time.time() - began)))
                server.psql("CHECKPOINT")
            overall = rows / (time.time() - first)
            sizes, _ = server.psql(f"SELECT pg_relation_size('m5_pkey'), pg_relation_size('m5'), "
                                   f"pg_wal_lsn_diff(pg_current_wal_lsn(), '{start_lsn}')::bigint, count(*) FROM m5")
            index, heap, wal, count = (int(x) for x in sizes.split("|"))
            assert count == rows, f"{label}: {count} rows, expected {rows}"
            out[label] = {"rates": rates, "overall": overall, "index": index, "heap": heap, "wal": wal}
            print(f"   {label}: {fmt(rates[-1][1])} rows/s at {fmt(rows)} rows", flush=True)
        server.psql("DROP TABLE m5")
        return {label: out[label] for label in tables}
    finally:
        server.destroy()


def m5_table(res, total, clients, batch):
    big = res["bigserial"]
    sizes = [r for r, _ in big["rates"]]
    lines = [f"## M5: inserts at scale, {clients} clients inserting batches of {fmt(batch)} rows to {fmt(total)} rows", "",
             "shared_buffers = 128MB, synchronous_commit = off, a CHECKPOINT after each part (not timed) and none "
             "within one (max_wal_size = 8GB). One run per generator, in a random order. Rows per second in each part "
             "of the growth (the table's size at the end of the part), then the ratio to bigserial in the same part; "
             "overall: all the rows over the whole time, checkpoints included.", "",
             "| generator | " + " | ".join(f"to {r / 1e6:g}M" for r in sizes) + " | overall | index | heap | WAL |",
             "|---|" + "---:|" * (len(sizes) + 4)]
    for label, r in res.items():
        cells = [f"{fmt(rate)} **{rate / big['rates'][i][1]:.2f}**" for i, (_, rate) in enumerate(r["rates"])]
        cells.append(f"{fmt(r['overall'])} **{r['overall'] / big['overall']:.2f}**")
        lines.append(f"| `{label}` | " + " | ".join(cells) + f" | {r['index'] / 2**20:.0f} MB | "
                     f"{r['heap'] / 2**20:.0f} MB | {r['wal'] / 2**20:.0f} MB |")
    return lines + ["", "![M5: insert rate as the table grows](bench-scale.svg)", ""]


def callgrind(work, port, calls):
    """Instructions per call, counted by callgrind in a server run under valgrind, and where
    snowflake_nextval(1)'s go."""
    ours = {
        "snowflake_nextval(1)": ("snowflake_nextval_worker_wrapper", "SELECT count(snowflake_nextval(1))"),
        FLOOR: ("snowflake_bench_floor_wrapper", "SELECT count(snowflake_bench_floor(1))"),
        NV: ("nextval_oid", "SELECT count(nextval('bench_seq'))"),
        "gen_random_uuid()": ("gen_random_uuid", "SELECT count(gen_random_uuid())"),
    }
    per_call, profiles = callgrind_run(work, port, calls, ours)
    # pgEdge's C function is named snowflake_nextval: callgrind's toggle for it would also
    # catch our wrapper, so it is counted in a run of its own.
    if PGEDGE_CONTROL.exists():
        theirs = {PGEDGE: ("snowflake_nextval", "SELECT count(snowflake.nextval('pgedge_seq'))")}
        per_call.update(callgrind_run(work, port, calls, theirs)[0])
    # Where snowflake_nextval's instructions go: what it calls, inclusive, per call. Callers
    # (main, PostgresMain, the executor) carry the whole total and are left out.
    fn = ours["snowflake_nextval(1)"][0]
    profile = max(profiles, key=lambda p: dict((n, i) for i, n in p).get(fn, 0), default=[])
    total = dict((n, i) for i, n in profile).get(fn, 0)
    rows = [(ir, name) for ir, name in profile
            if (ir < total or name == fn) and ir >= calls and not name.startswith("0x")]
    breakdown = "\n".join(f"{ir / calls:8.0f}  {name}" for ir, name in rows[:25])
    return per_call, breakdown


# Where the portable edition's time goes (`--portable-cost`): its fast path built up a part at a
# time, each a prefix of the one snowflake_nextval() that _snowflake_write_functions writes for
# worker 2 in the snowflake layout (sql/portable/snowflake_portable.sql: the same constants,
# the same calls; the last row is the edition as installed). Each checks what the one before it
# checks, and more; none but the last is safe on its own.
PORTABLE_LADDER_SQL = """
CREATE SCHEMA ladder;
CREATE FUNCTION ladder.worker_field() RETURNS bigint LANGUAGE sql VOLATILE
RETURN CASE WHEN ((nextval('portable.snowflake_portable_counter'::regclass) & 4190208) # 8192) << 38 = 0
            THEN currval('portable.snowflake_portable_counter'::regclass) ELSE portable._snowflake_slow() END;
CREATE FUNCTION ladder.seqlock() RETURNS bigint LANGUAGE sql VOLATILE
RETURN CASE WHEN GREATEST(pg_sequence_last_value('portable.snowflake_portable_generation'::regclass),
                          ((nextval('portable.snowflake_portable_counter'::regclass) & 4190208) # 8192) << 38)
                 = pg_sequence_last_value('portable.snowflake_portable_generation'::regclass)
            THEN currval('portable.snowflake_portable_counter'::regclass) ELSE portable._snowflake_slow() END;
CREATE FUNCTION ladder.clock() RETURNS bigint LANGUAGE sql VOLATILE
RETURN CASE WHEN GREATEST(pg_sequence_last_value('portable.snowflake_portable_generation'::regclass),
                          (date_part('epoch', clock_timestamp()) * 1000::float8)::int8 << 1,
                          ((nextval('portable.snowflake_portable_counter'::regclass) & 4190208) # 8192) << 38)
                 = abs(pg_sequence_last_value('portable.snowflake_portable_generation'::regclass))
            THEN currval('portable.snowflake_portable_counter'::regclass) ELSE portable._snowflake_slow() END;
"""
PORTABLE_LADDER = [
    ("`nextval()` (a `bigserial` key)", "nextval('bench_seq')"),
    ("+ the worker-field check and `currval()`", "ladder.worker_field()"),
    ("+ the seqlock: two readings of the generation", "ladder.seqlock()"),
    ("+ the clock against the deadline", "ladder.clock()"),
    # (The copy check, two constants, is folded when the call is planned: nothing to count.)
    ("+ the standby check: the edition as installed", "portable.snowflake_nextval()"),
]


def portable_cost(work, port):
    """Instructions per single-row INSERT transaction and per id in one statement, for each row
    of PORTABLE_LADDER, counted by callgrind in a single-user backend whose wall clock libfaketime
    holds still (so that no move of the counter is due but one per 4,096 ids), each figure the
    difference between two runs of different lengths (what the runs share cancels out); and the
    tps of single-row INSERTs beside bigserial's, with fsync off."""
    server = Server(Path(work) / "ladder-data", port, ["shared_preload_libraries=", "fsync=off"])
    server.start()
    try:
        server.psql("CREATE SEQUENCE bench_seq;")
        server.psql(PORTABLE_SQL)
        server.psql(PORTABLE_LADDER_SQL)
        # The ladder is written by hand: its last check must be, word for word as PostgreSQL
        # prints it, the tail of the edition's own expression, or the rows measure something else.
        ladder, edition = (server.psql(f"SELECT pg_get_functiondef('{f}'::regproc)")[0]
                           for f in ("ladder.clock", "portable.snowflake_nextval"))
        check, result = ladder[ladder.index("GREATEST("):].strip().split(" THEN ")
        tail = [check.rstrip(")"), " THEN " + result]
        if not all(part in edition for part in tail):
            raise RuntimeError("bench: PORTABLE_LADDER_SQL no longer matches the portable edition's fast path "
                               f"(sql/portable/snowflake_portable.sql): update it\nladder: {tail}\nedition: {edition}")
        for i, (_, g) in enumerate(PORTABLE_LADDER):
            server.psql(f"CREATE TABLE ladder.t{i} (id bigint PRIMARY KEY DEFAULT {g}, v int);"
                        f"CREATE PROCEDURE ladder.insert{i}(n int) LANGUAGE plpgsql AS $$ BEGIN "
                        f"FOR i IN 1..n LOOP INSERT INTO ladder.t{i} (v) VALUES (1); COMMIT; END LOOP; END $$;")
        # The same tables under pgbench, fsync off: the server's CPU is the limit, as it is for
        # bigserial at 8 clients with fsync on, where the waits for fsync do not hide the rest.
        tps = {c: rounds(range(len(PORTABLE_LADDER)), 7,
                         lambda i, c=c: server.pgbench(f"INSERT INTO ladder.t{i} (v) VALUES (1);", c, 3))
               for c in (2, 8)}
    finally:
        server.stop()
    frozen = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())
    faketime = os.environ.get("LIBFAKETIME", "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1")

    def count(toggle, statements):
        out = Path(work) / "ladder.callgrind"
        out.unlink(missing_ok=True)
        # A batch moves the counter to the frozen clock, and the slow path is compiled, before
        # anything is counted.
        script = ("SELECT count(*) FROM portable.snowflake_nextval_batch(5000);\nSELECT portable._snowflake_slow();\n"
                  "CHECKPOINT;\n" + "".join(f"{s}\n" for s in statements))
        run = subprocess.run(
            ["runuser", "-u", "postgres", "--", "env", f"LD_PRELOAD={faketime}", "TZ=UTC", f"FAKETIME={frozen}",
             "FAKETIME_DONT_FAKE_MONOTONIC=1", "valgrind", "--tool=callgrind", "--collect-atstart=no",
             f"--toggle-collect={toggle}", f"--callgrind-out-file={out}", str(PGBIN / "postgres"), "--single",
             "-D", server.dir, "-c", "shared_preload_libraries=", "-c", "max_wal_size=20GB",
             "-c", "checkpoint_timeout=1d", "postgres"],
            input=script, capture_output=True, text=True, cwd="/")
        if run.returncode != 0 or "ERROR" in run.stdout + run.stderr.replace("ERROR SUMMARY", ""):
            raise RuntimeError(f"the single-user backend failed: {run.stdout[-2000:]}{run.stderr[-2000:]}")
        return int(re.search(r"Collected : (\d+)", run.stderr).group(1))

    results = []
    for i, (label, g) in enumerate(PORTABLE_LADDER):
        per_insert = (count("ExecuteCallStmt", [f"CALL ladder.insert{i}(2000);"])
                      - count("ExecuteCallStmt", [f"CALL ladder.insert{i}(1000);"])) / 1000
        per_id = (count("standard_ExecutorRun", [f"SELECT count({g}) FROM generate_series(1, 40000);"])
                  - count("standard_ExecutorRun", [f"SELECT count({g}) FROM generate_series(1, 20000);"])) / 20000
        results.append((label, per_insert, per_id))
        print(f"  {label}: {per_insert:,.0f} per INSERT, {per_id:,.0f} per id", flush=True)
    server.destroy()
    base_insert, base_id = results[0][1], results[0][2]
    ratio = {c: [statistics.median(paired_ratios(tps[c][i], tps[c][0])) for i in range(len(results))] for c in tps}
    return ["| fast path | instructions per single-row INSERT transaction | above `bigserial` "
            "| instructions per id in one statement | above `nextval()` "
            "| INSERT tps ratio to `bigserial`, fsync off, 2 clients | the same, 8 clients |",
            "|---|---:|---:|---:|---:|---:|---:|"] + [
        f"| {label} | {ins:,.0f} | {ins - base_insert:+,.0f} | {one:,.0f} | {one - base_id:+,.0f} "
        f"| {ratio[2][i]:.2f} | {ratio[8][i]:.2f} |"
        for i, (label, ins, one) in enumerate(results)] + [
        "", "Instructions: callgrind, a single-user backend, the clock held still; ratios: median of 7 "
        "rounds of 3 s, ladder rows interleaved in a new random order each round."]


def callgrind_run(work, port, calls, functions):
    """One server under valgrind: each function called `calls` times in a session of its own.
    Returns ({label: instructions per call}, the profiles)."""
    outdir = Path(work) / "callgrind"
    shutil.rmtree(outdir, ignore_errors=True)
    outdir.mkdir(parents=True)
    shutil.chown(outdir, "postgres", "postgres")
    toggles = [f"--toggle-collect={fn}" for fn, _ in functions.values()]
    # The postmaster and every backend run under valgrind; only the instructions executed inside
    # the functions are counted.
    valgrind = ["valgrind", "--tool=callgrind", "--trace-children=yes", "--collect-atstart=no",
                f"--callgrind-out-file={outdir}/callgrind.%p", *toggles]
    pgedge = PGEDGE_CONTROL.exists()
    server = Server(Path(work) / "cg-data", port, ["snowflake.worker_id=1", "max_connections=10"]
                    + (["snowflake.node=2"] if pgedge else []))
    log = open(f"{server.dir}/valgrind-server.log", "w")
    proc = subprocess.Popen(["runuser", "-u", "postgres", "--", *valgrind, str(PGBIN / "postgres"),
                             "-D", server.dir], stdout=log, stderr=subprocess.STDOUT, cwd="/")
    deadline = time.time() + 300
    while subprocess.run([str(PGBIN / "pg_isready"), "-h", "127.0.0.1", "-p", str(port)],
                         capture_output=True).returncode != 0:
        if time.time() > deadline or proc.poll() is not None:
            raise RuntimeError("the server under valgrind did not start")
        time.sleep(1)
    server.psql("CREATE EXTENSION snowflake_ext; CREATE SEQUENCE bench_seq;" + FLOOR_SQL)
    if pgedge:
        server.psql("CREATE EXTENSION snowflake; CREATE SEQUENCE pgedge_seq;")
    # Warm up (first lease, catalog caches), then the measured calls, one backend per function.
    # The first id waits for the mark writer, which under valgrind (and beside the test suite's
    # other jobs) can take longer than a mint waits (10 s): ask again until it is there.
    while True:
        try:
            server.psql("SELECT snowflake_nextval(1); SELECT nextval('bench_seq'); SELECT gen_random_uuid();")
            break
        except RuntimeError as e:
            if "no high-water mark was written" not in str(e) or time.time() > deadline:
                raise
    for label, (fn, sql) in functions.items():
        server.psql(f"{sql} FROM generate_series(1, {calls})")
    server.stop()
    proc.wait(timeout=300)
    # Each function was measured in a backend of its own: its cost is its inclusive cost in the
    # process file where it is largest.
    profiles = [parse_callgrind(f) for f in sorted(outdir.glob("callgrind.*"))]
    per_call = {}
    for label, (fn, _) in functions.items():
        best = max((dict((name, ir) for ir, name in p).get(fn, 0) for p in profiles), default=0)
        per_call[label] = best / calls if best else None
    server.destroy()
    return per_call, profiles


def m6_table(res, seconds, repeats, clients_list):
    lines = [f"## M6: Citus, pgbench `INSERT INTO t (v) VALUES (1);` through the coordinator of a 3-node cluster "
             f"(PostgreSQL {CITUS_MAJOR}), tables hash-distributed on their key, {seconds} s per run, {repeats} rounds", "",
             "| key | " + " | ".join(f"{c} clients" for c in clients_list) + " |", "|---|" + "---:|" * len(clients_list)]
    for label, per in res.items():
        cells = []
        for c in clients_list:
            med, lo, hi = summary(per[c])
            ratio, rlo, rhi = summary(paired_ratios(per[c], res["bigserial"][c]))
            cells.append(f"{fmt(med)} ({fmt(lo)}-{fmt(hi)}) **{ratio:.2f}** ({rlo:.2f}-{rhi:.2f})")
        lines.append(f"| `{label}` | " + " | ".join(cells) + " |")
    lines += ["", "Transactions per second: median (min-max), then **the median ratio to `bigserial`** of runs made in "
              "the same round. Each insert is routed to one shard on a worker and committed there; the coordinator "
              "evaluates the key's default (a snowflake id with its own worker id, bigserial from its sequence).", ""]
    return lines


def throughput_table(title, res, ref, clients_list):
    rows = [f"## {title}", "", "| generator | " + " | ".join(f"{c} client{'s' if c > 1 else ''}" for c in clients_list) + " |",
            "|---|" + "---:|" * len(clients_list)]
    for name, per in res.items():
        cells = []
        for c in clients_list:
            med, lo, hi = summary(per[c])
            ratio, rlo, rhi = summary(paired_ratios(per[c], res[ref][c]))
            cells.append(f"{fmt(med)} ({fmt(lo)}-{fmt(hi)}) **{ratio:.2f}** ({rlo:.2f}-{rhi:.2f})")
        rows.append(f"| `{name}` | " + " | ".join(cells) + " |")
    rows += ["", f"Transactions per second: median (min-max), then **the median ratio to `{ref}`** of runs made "
             "in the same round (min-max of those ratios).", ""]
    return rows


def m4_table(m4_res, sizes):
    lines = [f"## M4: bulk `INSERT INTO t (v) SELECT g FROM generate_series(1, N) g`", "",
             "| generator | rows | wall time, ms (min-max) | primary-key index | ratio to bigserial's index |", "|---|---:|---:|---:|---:|"]
    for rows in sizes:
        big = statistics.median([s for _, s in m4_res["bigserial"][rows]])
        for label, per in m4_res.items():
            ms = [m for m, _ in per[rows]]
            size = statistics.median([s for _, s in per[rows]])
            med, lo, hi = summary(ms)
            lines.append(f"| `{label}` | {fmt(rows)} | {fmt(med)} ({fmt(lo)}-{fmt(hi)}) | {size / 2**20:.1f} MB | {size / big:.3f} |")
    return lines


def m1_table(m1_rate, m1_ms, n):
    base = statistics.median(m1_rate[NV])
    empty_ms = statistics.median(m1_ms["empty loop: count(1)"])
    lines = [f"## M1: one session, `SELECT count(G) FROM generate_series(1, {fmt(n)})`", "",
             "| generator | ids/s (median) | min-max | ratio to nextval() | ns per id beyond the empty loop | ns per id above the floor |",
             "|---|---:|---:|---:|---:|---:|"]
    for name, rates in sorted(m1_rate.items(), key=lambda kv: -statistics.median(kv[1])):
        med, lo, hi = summary(rates)
        net = (statistics.median(m1_ms[name]) - empty_ms) * 1e6 / n
        lines.append(f"| `{name}` | {fmt(med)} | {fmt(lo)}-{fmt(hi)} | {med / base:.2f} | {'' if 'empty' in name else fmt(net)} "
                     f"| {'' if 'empty' in name or name == FLOOR else fmt(above_floor_ns(m1_ms, name, n))} |")
    return lines + ["", f"The batch row reserves 10,000 ids per call. The floor is a function of this library that takes "
                        "the same argument as `snowflake_nextval(1)`, reads the same clock and returns a bigint, and does "
                        "nothing else (src/mint/bench_floor.rs). Above the floor: the median over rounds of the difference between "
                        "the two runs of a round.", ""]


def portable_headline(m1_rate, m1_ms, n, m2_res, m3_res, m4_res, rows, worst):
    """The portable edition's figures beside nextval(), bigserial, the UUIDs, Instagram's
    function and the native edition."""
    med = statistics.median
    wall = {k: med([ms for ms, _ in v[rows]]) for k, v in m4_res.items()}
    us = {k: med(v) * 1000 / n for k, v in m1_ms.items()}
    m3 = {c: med(paired_ratios(m3_res[PORTABLE][c], m3_res["bigserial"][c])) for c in (2, 8) if c in m3_res[PORTABLE]}
    return (f"* **The portable edition** (no library, SQL): `snowflake_nextval()` takes {us[PORTABLE]:.2f} µs per id in "
            f"one session, {med(m1_rate[PORTABLE]) / med(m1_rate[NV]):.2f}x the ids per second of `nextval()` "
            f"({us[NV]:.2f} µs; PL/pgSQL UUIDv7 {us['uuid v7 (PL/pgSQL)']:.2f} µs, Instagram's PL/pgSQL function "
            f"{us[INSTAGRAM]:.2f} µs, `gen_random_uuid()` {us['gen_random_uuid()']:.2f} µs, the native edition "
            f"{us['snowflake_nextval()']:.2f} µs) (M1); `SELECT G;` {worst(m2_res, PORTABLE, NV)} the tps of "
            f"`nextval()` (M2); as a primary key, "
            + ", ".join(f"{r:.2f}x at {c} clients" for c, r in m3.items())
            + f" (median of paired rounds; {worst(m3_res, PORTABLE, 'bigserial')} over 1 to 8 clients) the tps of a "
            f"`bigserial` (`nextval()`) key (M3); "
            f"{rows:,} rows in one INSERT take {wall[PORTABLE] / wall['bigserial']:.2f}x bigserial's time (native "
            f"{wall['snowflake_nextval()'] / wall['bigserial']:.2f}x, UUIDv4 {wall['uuid v4 (gen_random_uuid)'] / wall['bigserial']:.2f}x) (M4).")


def headline(m1_rate, m1_ms, n, m2_res, m3_res, m4_res, m5_res, cg, clients_list, rows, auto_ns):
    """The figures README.md quotes, as markdown bullets."""
    med = statistics.median
    nv = med(m1_rate[NV])
    def worst(res, name, ref):
        ratios = {c: med(paired_ratios(res[name][c], res[ref][c])) for c in clients_list}
        c = min(ratios, key=ratios.get)
        return f"{min(ratios.values()):.2f}x (lowest, at {c} client{'s' if c > 1 else ''}) to {max(ratios.values()):.2f}x"
    size = {k: med([s for _, s in v[rows]]) for k, v in m4_res.items()}
    sf = "snowflake_nextval()"
    above_floor = above_floor_ns(m1_ms, "snowflake_nextval(1)", n)
    scale = [rate / m5_res["bigserial"]["rates"][i][1] for i, (_, rate) in enumerate(m5_res[sf]["rates"])]
    pgedge = (f", pgEdge's `snowflake.nextval()` {med(m1_rate[PGEDGE]) / nv:.2f}x" if PGEDGE in m1_rate else "")
    return [
        f"* **At the floor:** `snowflake_nextval(1)` takes {above_floor:+.0f} ns per id against a function that only "
        f"reads the clock (M1; the difference is within this machine's noise when it is negative), and "
        f"{cg['snowflake_nextval(1)'] or 0:,.0f} instructions per call against the floor's {cg[FLOOR] or 0:,.0f} (callgrind).",
        f"* **A leased worker id** (`snowflake.worker_id = 'auto'`): `snowflake_nextval()` takes {auto_ns:+.0f} ns per id "
        f"above the floor, against {above_floor_ns(m1_ms, 'snowflake_nextval()', n):+.0f} ns with a worker id set by hand "
        f"(M1, each on its own server, against the floor in rounds).",
        f"* **M1, one session:** `snowflake_nextval(1)` makes {med(m1_rate['snowflake_nextval(1)']) / nv:.2f}x as many ids "
        f"per second as `nextval()`, `snowflake_nextval()` {med(m1_rate[sf]) / nv:.2f}x, "
        f"`snowflake_nextval_batch` {med(m1_rate['snowflake_nextval_batch(1, 10000)']) / nv:.2f}x; "
        f"`gen_random_uuid()` {med(m1_rate['gen_random_uuid()']) / nv:.2f}x{pgedge}.",
        f"* **M2, pgbench `SELECT G;` at {', '.join(map(str, clients_list))} clients:** one worker for all clients "
        f"{worst(m2_res, 'snowflake_nextval(1)', NV)} the tps of `nextval()`; "
        f"a worker per client {worst(m2_res, 'snowflake_nextval(:client_id), a worker per client', NV)}.",
        f"* **M3, pgbench `INSERT`:** a snowflake primary key {worst(m3_res, sf, 'bigserial')} the tps of `bigserial` "
        f"(of the `snowflake` type: {worst(m3_res, 'snowflake type', 'bigserial')}); "
        f"UUIDv4 {worst(m3_res, 'uuid v4 (gen_random_uuid)', 'bigserial')}, UUIDv7 {worst(m3_res, 'uuid v7 (PL/pgSQL)', 'bigserial')}.",
        f"* **M4, {rows:,} rows in one INSERT:** the snowflake primary-key index is {size[sf] / size['bigserial']:.3f}x "
        f"the size of bigserial's (of the `snowflake` type: {size['snowflake type'] / size['bigserial']:.3f}x); UUIDv4's is {size['uuid v4 (gen_random_uuid)'] / size['bigserial']:.2f}x, "
        f"UUIDv7's {size['uuid v7 (PL/pgSQL)'] / size['bigserial']:.2f}x.",
        portable_headline(m1_rate, m1_ms, n, m2_res, m3_res, m4_res, rows, worst),
        f"* **M5, inserts at scale to {m5_res[sf]['rates'][-1][0] / 1e6:g}M rows** past a 128 MB buffer cache: "
        f"snowflake {min(scale):.2f}x to {max(scale):.2f}x bigserial's rows/s at every size "
        f"({m5_res[sf]['overall'] / m5_res['bigserial']['overall']:.2f}x overall, checkpoints included); at the end UUIDv4 "
        f"{m5_res['uuid v4 (gen_random_uuid)']['rates'][-1][1] / m5_res['bigserial']['rates'][-1][1]:.2f}x, with "
        f"{m5_res['uuid v4 (gen_random_uuid)']['wal'] / m5_res['bigserial']['wal']:.1f}x the WAL and "
        f"{m5_res['uuid v4 (gen_random_uuid)']['index'] / m5_res['bigserial']['index']:.1f}x the index.",
        f"* **Instructions per call** (callgrind): `snowflake_nextval(1)` {cg['snowflake_nextval(1)'] or 0:,.0f}, "
        f"`nextval()` {cg[NV] or 0:,.0f}, `gen_random_uuid()` {cg['gen_random_uuid()'] or 0:,.0f}.",
    ]


def update_readme(heads, day):
    readme = ROOT / "README.md"
    text = readme.read_text()
    begin, end = "<!-- bench:begin -->", "<!-- bench:end -->"
    if begin not in text or end not in text:
        return
    block = [begin, f"From the run of `bench/run` on {day} on this project's 2-core build machine "
             "(full tables: [docs/results.md](docs/results.md)):", ""] + heads + [
        "", "![M2 and M3 throughput against clients](docs/bench-throughput.svg)",
        "", "![M5: insert rate as the table grows](docs/bench-scale.svg)", end]
    head, rest = text.split(begin, 1)
    _, tail = rest.split(end, 1)
    readme.write_text(head + "\n".join(block) + tail)


def parse_callgrind(path):
    """[(inclusive instructions, function name)] of one callgrind output file, largest first."""
    out = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--threshold=100", str(path)],
                         capture_output=True, text=True).stdout
    rows = []
    for line in out.splitlines():
        m = re.match(r"\s*([\d,]+) \(\s*[\d.]+%\)\s+\S*?:(.+?) \[", line)
        if m:
            rows.append((int(m.group(1).replace(",", "")), m.group(2)))
    return rows


def svg_chart(path, panels, xlabel="clients", ylabel="transactions per second (median)"):
    """panels: [(title, {series: {clients: median tps}})] -> one SVG with a line chart per panel."""
    # One colour per kind of generator in both panels; snowflake solid, the others dashed.
    def colour(name):
        for key, c in [(":client_id", "#8c564b"), ("snowflake_nextval()", "#d62728"), ("snowflake_nextval(1)", "#ff7f0e"),
                       ("snowflake type", "#bcbd22"),
                       ("pgEdge", "#e377c2"), ("nextval", "#1f77b4"), ("bigserial", "#1f77b4"),
                       ("uuid v7", "#9467bd"), ("v4", "#2ca02c"), ("gen_random_uuid", "#2ca02c")]:
            if key in name:
                return c
        return "#17becf"
    w, h, pad = 520, 340, 60
    total_w = w * len(panels)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{total_w}" height="{h + 150}" '
             f'font-family="sans-serif" font-size="12">',
             f'<rect width="{total_w}" height="{h + 150}" fill="white"/>']
    for p, (title, series) in enumerate(panels):
        x0 = p * w
        clients = sorted({c for s in series.values() for c in s})
        top = max(v for s in series.values() for v in s.values())
        step = next(m * 10 ** e for e in range(1, 9) for m in (1, 2, 5) if m * 10 ** e * 5 >= top)
        ymax = step * 5
        def sx(c):
            return x0 + pad + clients.index(c) * (w - 2 * pad) / max(1, len(clients) - 1)
        def sy(v):
            return h - pad + 20 - v / ymax * (h - 2 * pad)
        parts.append(f'<text x="{x0 + w / 2}" y="24" text-anchor="middle" font-size="14" font-weight="bold">{title}</text>')
        parts.append(f'<line x1="{x0 + pad}" y1="{sy(0)}" x2="{x0 + w - pad}" y2="{sy(0)}" stroke="black"/>')
        parts.append(f'<line x1="{x0 + pad}" y1="{sy(0)}" x2="{x0 + pad}" y2="{sy(ymax)}" stroke="black"/>')
        for i in range(6):
            v = step * i
            parts.append(f'<text x="{x0 + pad - 6}" y="{sy(v) + 4}" text-anchor="end">{v / 1000:g}k</text>')
            parts.append(f'<line x1="{x0 + pad}" y1="{sy(v)}" x2="{x0 + w - pad}" y2="{sy(v)}" stroke="#ddd"/>')
        for c in clients:
            parts.append(f'<text x="{sx(c)}" y="{sy(0) + 18}" text-anchor="middle">{c:g}</text>')
        parts.append(f'<text x="{x0 + w / 2}" y="{sy(0) + 36}" text-anchor="middle">{xlabel}</text>')
        parts.append(f'<text x="{x0 + 14}" y="{h / 2}" transform="rotate(-90 {x0 + 14} {h / 2})" '
                     f'text-anchor="middle">{ylabel}</text>')
        for i, (name, points) in enumerate(series.items()):
            stroke = colour(name)
            coords = " ".join(f"{sx(c):.1f},{sy(points[c]):.1f}" for c in clients if c in points)
            dash = '' if "snowflake" in name else ' stroke-dasharray="6 3"'
            parts.append(f'<polyline points="{coords}" fill="none" stroke="{stroke}" stroke-width="2"{dash}/>')
            for c in clients:
                if c in points:
                    parts.append(f'<circle cx="{sx(c):.1f}" cy="{sy(points[c]):.1f}" r="3" fill="{stroke}"/>')
            ly = h + 10 + i * 16
            parts.append(f'<line x1="{x0 + pad}" y1="{ly}" x2="{x0 + pad + 24}" y2="{ly}" stroke="{stroke}" stroke-width="2"{dash}/>')
            parts.append(f'<text x="{x0 + pad + 30}" y="{ly + 4}">{name}</text>')
    parts.append("</svg>")
    Path(path).write_text("\n".join(parts) + "\n")


_CLAIMS = []


def free_port():
    """A port on 127.0.0.1 that nothing listens on now, this process's until it exits.

    As the tests take theirs (tests/common/mod.rs, free_port): from 10000 to 19999, outside the
    kernel's ephemeral range (a port from bind(0) may become the local end of some client's
    connection while a server restarts), each claimed by a lock on a file in
    /tmp/snowflake_ext-ports, so that the benchmark and the tests beside it never take the same.
    """
    claims = Path("/tmp/snowflake_ext-ports")
    claims.mkdir(parents=True, exist_ok=True)
    first = os.getpid() * 7919 + len(_CLAIMS)
    for i in range(10000):
        port = 10000 + (first + i) % 10000
        claim = open(claims / str(port), "a")
        try:
            fcntl.flock(claim, fcntl.LOCK_EX | fcntl.LOCK_NB)
            with socket.socket() as s:
                s.bind(("127.0.0.1", port))
        except OSError:
            claim.close()
            continue
        _CLAIMS.append(claim)
        return port
    sys.exit("bench: no free port between 10000 and 19999 (each claimed in /tmp/snowflake_ext-ports)")


UUIDV7 = "uuid v7 (PL/pgSQL)"


def portable_only(work, port, n, repeats, m3_seconds, m3_repeats):
    """`--portable`: the portable edition beside nextval(), the UUIDs and Instagram's function,
    on a server that loads no library (as the edition's servers do), so that it needs nothing
    but PostgreSQL: M1 (one session, n ids) and M3 (single-row INSERT, 2 and 8 clients)."""
    server = Server(work / "portable-data", port, ["shared_preload_libraries=", "shared_buffers=256MB",
                                                   "max_wal_size=8GB", "checkpoint_timeout=30min",
                                                   "fsync=on", "synchronous_commit=on"])
    server.start()
    try:
        server.psql("CREATE SEQUENCE bench_seq;" + UUIDV7_PLPGSQL + INSTAGRAM_SQL)
        server.psql(PORTABLE_SQL)
        version, _ = server.psql("SELECT version()")
        generators = {NV: "nextval('bench_seq')", "gen_random_uuid()": "gen_random_uuid()", UUIDV7: "uuidv7()",
                      PORTABLE: "portable.snowflake_nextval()", INSTAGRAM: "instagram_next_id()",
                      "empty loop: count(1)": "1"}
        print(f"== M1: one session, {fmt(n)} ids, {3 * repeats} rounds", flush=True)
        _, m1_ms = m1(server, n, 3 * repeats, generators, extras=False)
        labels = ["bigserial", "uuid v4 (gen_random_uuid)", UUIDV7, PORTABLE, INSTAGRAM]
        for label in list(M3_TABLES):
            if label not in labels:
                del M3_TABLES[label]
        print(f"== M3: pgbench INSERT at 2 and 8 clients, {m3_repeats} rounds of {m3_seconds} s", flush=True)
        create_tables(server, labels)
        m3_res = m3(server, m3_seconds, m3_repeats, [2, 8])
    finally:
        server.destroy()
    med = statistics.median
    us = {k: med(v) * 1000 / n for k, v in m1_ms.items()}
    lines = [f"Made by `bench/run --portable` on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} cores, "
             f"{version.split(',')[0]}, no library loaded; fsync and synchronous_commit on.", "",
             f"## M1: one session, `SELECT count(G) FROM generate_series(1, {fmt(n)})`, {3 * repeats} rounds", "",
             "| generator | µs per id (median) | min-max |", "|---|---:|---:|"]
    for name, ms in sorted(m1_ms.items(), key=lambda kv: med(kv[1])):
        lines.append(f"| `{name}` | {us[name]:.2f} | {min(ms) * 1000 / n:.2f}-{max(ms) * 1000 / n:.2f} |")
    lines += [""] + throughput_table(f"M3: pgbench `INSERT`, {m3_seconds} s per run, {m3_repeats} rounds",
                                     m3_res, "bigserial", [2, 8])
    ratio = {(ref, c): med(paired_ratios(m3_res[PORTABLE][c], m3_res[ref][c])) for ref in ("bigserial", UUIDV7) for c in (2, 8)}
    print(f"\nportable edition: {us[PORTABLE]:.2f} µs per id in one session (gen_random_uuid() {us['gen_random_uuid()']:.2f}, "
          f"PL/pgSQL UUIDv7 {us[UUIDV7]:.2f}, nextval() {us[NV]:.2f}, Instagram's function {us[INSTAGRAM]:.2f}, "
          f"the empty loop {us['empty loop: count(1)']:.2f}); single-row INSERT tps "
          + "; ".join(f"at {c} clients {ratio[('bigserial', c)]:.2f}x bigserial's and {ratio[(UUIDV7, c)]:.2f}x "
                      f"the PL/pgSQL UUIDv7's" for c in (2, 8)) + " (medians of paired rounds)\n")
    print("\n".join(lines))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--short", action="store_true", help="a few seconds per measurement, results in a temporary directory")
    ap.add_argument("--out", help="where to write results.md and the chart (default: docs/, or a temporary directory with --short)")
    ap.add_argument("--port", type=int, help="the first of three ports for its servers (default: free ports)")
    ap.add_argument("--m1-only", action="store_true", help="only M1, printed, no files written (to compare builds)")
    ap.add_argument("--cg-only", action="store_true", help="only the instruction counts, printed, no files written")
    ap.add_argument("--citus-only", action="store_true", help="only M6 (a Citus cluster), printed, no files written")
    ap.add_argument("--m1-m4", action="store_true", help="only M1 to M4, printed, no files written (3 rounds, 3 s runs)")
    ap.add_argument("--portable", action="store_true",
                    help="only the portable edition's M1 and M3 at 2 and 8 clients beside the other generators, printed")
    ap.add_argument("--portable-cost", action="store_true",
                    help="only where the portable edition's instructions go (callgrind, a single-user backend), printed")
    ap.add_argument("--repeats", type=int, help="rounds per measurement (default 5, 1 with --short)")
    ap.add_argument("--m7", nargs=argparse.REMAINDER,
                    help="only M7 (bench/m7.py, which needs no extension), with bench/m7.py's options after it")
    args = ap.parse_args()
    if args.m7 is not None:
        sys.argv = [str(ROOT / "bench" / "m7.py")] + args.m7
        m7.main()
        return

    if args.short:
        # A smoke run (scripts/test.sh), to keep every measurement working, as small as each
        # allows: once, at one and eight clients, on small tables.
        n, repeats, seconds, sizes, clients_list, cg_calls = 50_000, 1, 1, [20_000], [1, 8], 500
        m3_repeats, m3_seconds = 1, 1
        m5_total, m5_segments = 60_000, 2
        m6_seconds, m6_repeats = 1, 1
    else:
        n, repeats, seconds, sizes, clients_list, cg_calls = 2_000_000, 5, 5, [1_000_000, 2_000_000], [1, 2, 4, 8], 100_000
        # Inserts wait on fsync, whose latency varies most on this machine: more, shorter rounds.
        m3_repeats, m3_seconds = 11, 3
        m5_total, m5_segments = 20_000_000, 10
        m6_seconds, m6_repeats = 3, 7
    m6_clients = [2] if args.short else [2, 8]
    m5_clients, m5_batch = 4, 1000
    if (args.m1_m4 or args.portable) and not args.short:
        repeats, seconds, m3_repeats, m3_seconds = 3, 3, 5, 3
    if args.portable and not args.short:
        n = 500_000
    repeats = args.repeats or repeats
    out = Path(args.out) if args.out else (Path(tempfile.mkdtemp(prefix="snowflake_ext-bench-")) if args.short else ROOT / "docs")
    out.mkdir(parents=True, exist_ok=True)
    work = Path("/tmp/snowflake_ext-bench")
    work.mkdir(exist_ok=True)
    shutil.chown(work, "postgres", "postgres")

    # Ports nobody holds (a demo server left running by scripts/quickstart.sh, say), unless given.
    ports = [args.port + i for i in range(5)] if args.port else [free_port() for _ in range(5)]

    citus = citus_ready()
    m6_ports = [free_port() for _ in range(3)]
    if args.citus_only:
        if not citus:
            sys.exit(f"bench: Citus or snowflake_ext is not installed for PostgreSQL {CITUS_MAJOR}")
        m6_res = m6(work, m6_ports, m6_seconds, args.repeats or m6_repeats, m6_clients)
        print("\n".join(m6_table(m6_res, m6_seconds, args.repeats or m6_repeats, m6_clients)))
        return
    if args.portable_cost:
        print(f"== where the portable edition's instructions go (PostgreSQL {PG_MAJOR}, callgrind)", flush=True)
        print("\n".join(portable_cost(work, ports[1])))
        return
    if args.portable and not args.short:
        portable_only(work, ports[0], n, repeats, m3_seconds, m3_repeats)
        return
    if args.cg_only:
        cg, breakdown = callgrind(work, ports[1], cg_calls)
        print("\n".join(f"{label}: {v or 0:,.0f} instructions per call" for label, v in cg.items()))
        print(breakdown)
        return
    pgedge = PGEDGE_CONTROL.exists()
    if pgedge:
        M3_TABLES[PGEDGE] = "id bigint PRIMARY KEY DEFAULT snowflake.nextval('pgedge_seq')"
    settings = ["snowflake.worker_id=1", "shared_buffers=256MB", "max_wal_size=8GB", "checkpoint_timeout=30min",
                "fsync=on", "synchronous_commit=on"]
    if pgedge:
        settings += ["snowflake.node=2"]
    server = Server(work / "data", ports[0], settings)
    server.start()
    started = time.time()
    try:
        server.psql("CREATE EXTENSION snowflake_ext; CREATE SEQUENCE bench_seq;" + UUIDV7_PLPGSQL + INSTAGRAM_SQL + FLOOR_SQL)
        server.psql(PORTABLE_SQL)
        generators = {
            FLOOR: "snowflake_bench_floor(1)",
            "snowflake_nextval(1)": "snowflake_nextval(1)",
            "snowflake_nextval()": "snowflake_nextval()",
            NV: "nextval('bench_seq')",
            "gen_random_uuid()": "gen_random_uuid()",
            "uuid v7 (PL/pgSQL)": "uuidv7()",
            PORTABLE: "portable.snowflake_nextval()",
            INSTAGRAM: "instagram_next_id()",
        }
        if args.m1_only:
            # Comparing two builds of this extension: the UUID generators only cost time.
            del generators["gen_random_uuid()"], generators["uuid v7 (PL/pgSQL)"], generators[INSTAGRAM]
        if pgedge:
            server.psql("CREATE EXTENSION IF NOT EXISTS snowflake; CREATE SEQUENCE pgedge_seq;")
            generators[PGEDGE] = "snowflake.nextval('pgedge_seq')"
        server.psql("SELECT snowflake_nextval(1), snowflake_nextval(), nextval('bench_seq')")  # first leases

        # M1's runs take a second or less: three times the rounds, for the floor's few ns.
        print(f"== M1: one session, {fmt(n)} ids, {3 * repeats} rounds", flush=True)
        m1_rate, m1_ms = m1(server, n, 3 * repeats, generators)
        if args.m1_only:
            print("\n".join(m1_table(m1_rate, m1_ms, n)))
            return
        if args.portable:
            print("== M3: pgbench INSERT at 2 and 8 clients", flush=True)
            create_tables(server, list(M3_TABLES))
            m3_res = m3(server, m3_seconds, m3_repeats, [2, 8])
            med = statistics.median
            us = {k: med(v) * 1000 / n for k, v in m1_ms.items()}
            print(f"\nportable edition: {us[PORTABLE]:.2f} us per id in one session; nextval() {us[NV]:.2f}, "
                  f"PL/pgSQL UUIDv7 {us['uuid v7 (PL/pgSQL)']:.2f}, Instagram's function {us[INSTAGRAM]:.2f}, "
                  f"gen_random_uuid() {us['gen_random_uuid()']:.2f}, native {us['snowflake_nextval()']:.2f}; "
                  + "; ".join(f"INSERT tps ratio to bigserial at {c} clients: "
                              f"{med(paired_ratios(m3_res[PORTABLE][c], m3_res['bigserial'][c])):.2f}" for c in (2, 8)) + "\n")
            print("\n".join(m1_table(m1_rate, m1_ms, n) + [""]
                            + throughput_table(f"M3: pgbench `INSERT`, {m3_seconds} s per run, {m3_repeats} rounds",
                                               m3_res, "bigserial", [2, 8])))
            return
        if args.m1_m4:
            print("== M2: pgbench SELECT G", flush=True)
            m2_res = m2(server, seconds, repeats, clients_list, generators)
            print("== M3: pgbench INSERT", flush=True)
            create_tables(server, list(M3_TABLES))
            m3_res = m3(server, m3_seconds, m3_repeats, clients_list)
            print("== M4: bulk INSERT ... SELECT", flush=True)
            m4_res = m4(server, sizes, repeats)
            def worst(res, name, ref):
                med = statistics.median
                ratios = {c: med(paired_ratios(res[name][c], res[ref][c])) for c in clients_list}
                c = min(ratios, key=ratios.get)
                return f"{min(ratios.values()):.2f}x (lowest, at {c} client{'s' if c > 1 else ''}) to {max(ratios.values()):.2f}x"
            print(portable_headline(m1_rate, m1_ms, n, m2_res, m3_res, m4_res, sizes[-1], worst) + "\n")
            print("\n".join(m1_table(m1_rate, m1_ms, n) + [""]
                            + throughput_table(f"M2: pgbench `SELECT G;`, {seconds} s per run", m2_res, NV, clients_list)
                            + throughput_table(f"M3: pgbench `INSERT`, {m3_seconds} s per run, {m3_repeats} rounds",
                                               m3_res, "bigserial", clients_list)
                            + m4_table(m4_res, sizes)))
            return
        print("== M1 with a leased worker id (snowflake.worker_id = 'auto')", flush=True)
        auto_ns = m1_auto(work, ports[3:5], n, 3 * repeats)
        print("== M2: pgbench SELECT G", flush=True)
        m2_gens = dict(generators)
        m2_gens["snowflake_nextval(:client_id), a worker per client"] = "snowflake_nextval(:client_id)"
        m2_res = m2(server, seconds, repeats, clients_list, m2_gens)
        print("== M3: pgbench INSERT", flush=True)
        create_tables(server, list(M3_TABLES))
        m3_res = m3(server, m3_seconds, args.repeats or m3_repeats, clients_list)
        print("== M4: bulk INSERT ... SELECT", flush=True)
        m4_res = m4(server, sizes, repeats)
        version, _ = server.psql("SELECT version()")
    finally:
        server.destroy()
    print(f"== M5: inserts at scale, to {fmt(m5_total)} rows", flush=True)
    m5_res = m5(work, ports[2], m5_total, m5_segments, m5_clients, m5_batch)
    m6_res = None
    if citus:
        print(f"== M6: inserts through a Citus cluster (PostgreSQL {CITUS_MAJOR})", flush=True)
        m6_res = m6(work, m6_ports, m6_seconds, args.repeats or m6_repeats, m6_clients)
    else:
        print(f"== M6 left out: Citus or snowflake_ext is not installed for PostgreSQL {CITUS_MAJOR}", flush=True)
    print("== C: instructions per call (callgrind)", flush=True)
    cg, breakdown = callgrind(work, ports[1], cg_calls)
    elapsed = time.time() - started

    # ---- report
    nv = NV
    lines = [f"# Benchmark results{' (short mode: a smoke run, not for quoting)' if args.short else ''}", "",
             f"Made by `bench/run{' --short' if args.short else ''}` on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
             f"{os.cpu_count()} cores, {version.split(',')[0]}; fsync and synchronous_commit on. "
             f"Every measurement repeated {repeats} times with the generators interleaved in a new random order each round; "
             f"medians, with min-max. Took {elapsed / 60:.1f} min.", ""]
    lines += m1_table(m1_rate, m1_ms, n)
    lines += throughput_table(f"M2: pgbench `SELECT G;`, {seconds} s per run, -M prepared", m2_res, nv, clients_list)
    lines += ["At 1 client every transaction waits for the client's and the backend's wake-ups in turn, which "
              "dominate on this virtual machine; from 2 clients on, pgbench and the backends share the two cores.", ""]
    lines += throughput_table(f"M3: pgbench `INSERT INTO t (v) VALUES (1);`, primary key defaulting to G, "
                              f"{m3_seconds} s per run, {args.repeats or m3_repeats} rounds", m3_res, "bigserial", clients_list)
    lines += ["Each insert commits and waits for its WAL flush, so the generators' own cost is hidden by fsync "
              "latency, whose variation is what the min-max shows.", ""]
    lines += m4_table(m4_res, sizes)
    lines += [""] + m5_table(m5_res, m5_total, m5_clients, m5_batch)
    if m6_res:
        lines += [""] + m6_table(m6_res, m6_seconds, args.repeats or m6_repeats, m6_clients)
    lines += ["", f"## Cost per id: instructions per call (callgrind, {fmt(cg_calls)} calls each)", "",
              "Counted inside each SQL function (inclusive of everything it calls), in a server run under valgrind.", "",
              "| function | instructions per call |", "|---|---:|"]
    for label, v in cg.items():
        lines.append(f"| `{label}` | {fmt(v) if v else 'n/a'} |")
    lines += ["", "Where `snowflake_nextval(1)`'s instructions go (inclusive, per call):", "", "```", breakdown, "```", ""]
    heads = headline(m1_rate, m1_ms, n, m2_res, m3_res, m4_res, m5_res, cg, clients_list, sizes[-1], auto_ns)
    lines[4:4] = ["## Headline", ""] + heads + [""]
    # M7 is measured by bench/m7.py on its own: its section of results.md stays.
    kept = m7.saved_section(out / "results.md")
    (out / "results.md").write_text("\n".join(lines) + "\n" + (f"\n{kept}\n" if kept else ""))
    if not args.short and out.resolve() == (ROOT / "docs").resolve():
        update_readme(heads, time.strftime('%Y-%m-%d', time.gmtime()))

    svg_chart(out / "bench-throughput.svg", [
        ("M2: SELECT G (pgbench)", {k: {c: statistics.median(v[c]) for c in clients_list} for k, v in m2_res.items()}),
        ("M3: INSERT with a G primary key (pgbench)", {k: {c: statistics.median(v[c]) for c in clients_list} for k, v in m3_res.items()}),
    ])
    svg_chart(out / "bench-scale.svg", [
        ("M5: inserts as the table grows", {k: {rows / 1e6: rate for rows, rate in v["rates"]} for k, v in m5_res.items()}),
    ], xlabel="million rows in the table", ylabel="rows inserted per second")
    print("\n".join(lines))
    print(f"\nwrote {out / 'results.md'}, {out / 'bench-throughput.svg'} and {out / 'bench-scale.svg'}")


if __name__ == "__main__":
    main()

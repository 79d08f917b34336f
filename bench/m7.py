#!/usr/bin/env python3
"""M7: what the order of an id's fields does to a B-tree primary key, on plain PostgreSQL.

No extension is needed: every id is computed in SQL from its row number, so the measurement
is of the index, not of a generator. Rows arrive as W workers at R ids per millisecond each
would make them: row i is worker i % W's id number i / W, made in millisecond (i / W) / R with
sequence (i / W) % R. They arrive interleaved one id at a time (`round-robin`), or in a random
order within each millisecond (`shuffled`). They are put in arrival order into an unlogged
staging table first, then one `INSERT ... SELECT` copies them, in that order, into a fresh
table `(id PRIMARY KEY, v bigint)`: that statement is what is measured.

  time-first    this extension's default layout (`snowflake`): 41 bits of ms since
                2025-01-01 UTC, 10-bit worker, 12-bit sequence: ms << 22 | worker << 12 | seq
  time-seq-worker   the same bits in Sonyflake's order (`order=time-sequence-worker`):
                ms << 22 | seq << 10 | worker
  worker-first  Seata's IdWorker (the preset `seata`), with Seata's own formula:
                worker << (41 + 12) | ((ms since 1588435200000) << 12 | seq)
  bigserial     a sequence (one counter: the same ids whatever W and R), measured once
  UUIDv7        RFC 9562: 48 bits of Unix ms, version 7, the other 74 bits random (the
                PL/pgSQL uuidv7() of bench.py, with the row's millisecond for the clock's)

For each: the primary key's size and average leaf density (pgstattuple's pgstatindex) after
the insert and after REINDEX (packed at the fillfactor, 90), the insert rate (rows/s, the
statement's wall time; the median of the rounds, which run the cases in a new random order
each), and the WAL it wrote (pg_current_wal_lsn before and after, a CHECKPOINT first so every
run starts alike). Two shorter passes (one round each) follow: the rate swept for the
time-first orders at 8 and 64 workers, and the primary key's fillfactor (70 and 100 beside
PostgreSQL's 90) where the index is half empty. It starts its own PostgreSQL cluster (Debian's 15 unless PG_MAJOR
says otherwise) under /tmp as the user postgres, on --port.

  python3 bench/m7.py                 2,000,000 rows, 3 rounds: docs/results.md's M7 section,
                                      docs/bench-m7.svg, docs/bench-m7.json and .csv
  python3 bench/m7.py --rows 20000 --rounds 1 --out /tmp/m7   a smoke run elsewhere
  python3 bench/m7.py --reuse docs/bench-m7.json   measures only the cases that file lacks
  bench/run --m7                      the same as the first, through bench/run (which then
                                      builds and installs nothing)
"""

import argparse
import csv
import json
import os
import random
import re
import statistics
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PG_MAJOR = os.environ.get("PG_MAJOR", "15")
PGBIN = Path(subprocess.check_output([str(ROOT / "scripts" / "pg-major"), "bindir", PG_MAJOR], text=True).strip())
CLUSTER = ROOT / "scripts" / "pg-cluster"

# The millisecond the first id is made in: 2026-01-01 00:00 UTC.
START_UNIX_MS = 1_767_225_600_000
# core/src/layout.rs: Layout::SNOWFLAKE (time 41, worker 10, sequence 12) and Layout::SEATA
# (the same widths, worker first, Seata's epoch 2020-05-03 00:00 UTC+8).
SNOWFLAKE_EPOCH_MS = 1_735_689_600_000
SEATA_EPOCH_MS = 1_588_435_200_000
WORKER_BITS, SEQ_BITS, TIME_BITS = 10, 12, 41

# The fields of row i (0-based) of W workers at R ids per ms per worker.
WORKER = "(i % {W})"
MS = "((i / {W}) / {R})"
SEQ = "((i / {W}) % {R})"

KINDS = {
    "time-first": ("bigint",
                   f"(({START_UNIX_MS - SNOWFLAKE_EPOCH_MS} + {MS}) << {WORKER_BITS + SEQ_BITS})"
                   f" | ({WORKER} << {SEQ_BITS}) | {SEQ}"),
    "time-seq-worker": ("bigint",
                        f"(({START_UNIX_MS - SNOWFLAKE_EPOCH_MS} + {MS}) << {WORKER_BITS + SEQ_BITS})"
                        f" | ({SEQ} << {WORKER_BITS}) | {WORKER}"),
    # Seata: workerId << (TIMESTAMP_BITS + SEQUENCE_BITS) | timestampAndSequence, where the
    # counter is (ms since its epoch) << SEQUENCE_BITS, incremented once per id.
    "worker-first": ("bigint",
                     f"({WORKER} << ({TIME_BITS} + {SEQ_BITS}))"
                     f" | ((({START_UNIX_MS - SEATA_EPOCH_MS} + {MS}) << {SEQ_BITS}) + {SEQ})"),
    "bigserial": ("bigserial", None),
    "UUIDv7": ("uuid",
               "encode(set_bit(set_bit(overlay(uuid_send(gen_random_uuid()) placing "
               f"substring(int8send({START_UNIX_MS} + {MS}) FROM 3) FROM 1 FOR 6), 52, 1), 53, 1), 'hex')::uuid"),
}


# A B-tree's default fillfactor: how full its rightmost leaf is left when it splits, and how full
# CREATE INDEX and REINDEX pack every leaf.
DEFAULT_FILLFACTOR = 90


def psql(port, sql):
    out = subprocess.run(
        [str(PGBIN / "psql"), "-X", "-q", "-At", "-F", "|", "-v", "ON_ERROR_STOP=1",
         "-h", "127.0.0.1", "-p", str(port), "-U", "postgres", "-d", "postgres"],
        input=sql, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"psql failed: {out.stderr}\n{sql}")
    return out.stdout


def measure(port, case, rows):
    """One insert of `rows` rows into a fresh table; returns the measurements."""
    kind, arrival, workers, rate, fillfactor = case
    column, expr = KINDS[kind]
    with_ff = "" if fillfactor == DEFAULT_FILLFACTOR else f" WITH (fillfactor = {fillfactor})"
    order = "i" if arrival == "round-robin" else f"{MS.format(W=workers, R=rate)}, random()"
    # The staging table holds the ids (or, for bigserial, only the row numbers) in arrival
    # order; a sequential scan of a new table returns them in that order.
    value = "NULL::bigint" if expr is None else expr.format(W=workers, R=rate)
    psql(port, f"DROP TABLE IF EXISTS m7, m7_stage; CREATE TABLE m7 (id {column} PRIMARY KEY{with_ff}, v bigint);\n"
               f"CREATE UNLOGGED TABLE m7_stage AS SELECT {value} AS id, i AS v "
               f"FROM generate_series(0, {rows - 1}::bigint) i ORDER BY {order};\n"
               "VACUUM ANALYZE m7_stage;")
    if expr is None:
        insert = "INSERT INTO m7 (v) SELECT v FROM m7_stage;"
    else:
        insert = "INSERT INTO m7 (id, v) SELECT id, v FROM m7_stage;"
    out = psql(port, "SET synchronize_seqscans = off;\nCHECKPOINT;\nSELECT pg_current_wal_lsn() AS lsn \\gset\n"
               "\\timing on\n" + insert + "\n\\timing off\n"
               "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), :'lsn')::bigint;\n"
               "SELECT pg_relation_size('m7_pkey'), s.avg_leaf_density, s.leaf_pages, "
               "(SELECT count(DISTINCT id) = count(*) FROM m7) FROM pgstatindex('m7_pkey') s;\n"
               "REINDEX INDEX m7_pkey;\n"
               "SELECT pg_relation_size('m7_pkey'), s.avg_leaf_density FROM pgstatindex('m7_pkey') s;\n"
               "DROP TABLE m7, m7_stage;\n")
    ms = float(re.findall(r"^Time: ([\d.]+) ms", out, re.M)[-1])
    lines = [l for l in out.splitlines() if l and not l.startswith("Time: ")]
    wal = int(lines[0])
    size, density, leaves, unique = lines[1].split("|")
    packed_size, packed_density = lines[2].split("|")
    assert unique == "t", f"{case}: duplicate ids"
    return {"index_bytes": int(size), "leaf_density": float(density), "leaf_pages": int(leaves),
            "reindexed_bytes": int(packed_size), "reindexed_density": float(packed_density),
            "rows_per_s": rows / (ms / 1000), "wal_bytes": wal}


def combine(case, rows, runs):
    """The rounds of one case: medians, and the insert rate's min and max."""
    kind, arrival, workers, rate, fillfactor = case
    med = statistics.median
    r = {"kind": kind, "arrival": arrival, "workers": workers, "rate": rate, "fillfactor": fillfactor, "rows": rows,
         "rounds": len(runs)}
    for key in runs[0]:
        r[key] = med(x[key] for x in runs)
    r["rows_per_s_min"] = min(x["rows_per_s"] for x in runs)
    r["rows_per_s_max"] = max(x["rows_per_s"] for x in runs)
    return r


def mb(b):
    return b / (1 << 20)


def label(r):
    w = "any" if r["kind"] == "bigserial" else str(r["workers"])
    rate = "any" if r["kind"] == "bigserial" else f"{r['rate']:,}"
    return w, rate


def results_table(res):
    lines = ["| ids | arrival | workers | ids per ms per worker | index MB | leaf density | after REINDEX: MB (density) "
             "| rows/s (min-max) | WAL MB |", "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in res:
        w, rate = label(r)
        spread = (f" ({r['rows_per_s_min'] / 1000:,.0f}k-{r['rows_per_s_max'] / 1000:,.0f}k)"
                  if r["rounds"] > 1 else "")
        lines.append(f"| {r['kind']} | {r['arrival'] if r['kind'] != 'bigserial' else '-'} | {w} | {rate} "
                     f"| {mb(r['index_bytes']):.1f} | {r['leaf_density']:.1f}% "
                     f"| {mb(r['reindexed_bytes']):.1f} ({r['reindexed_density']:.1f}%) "
                     f"| {r['rows_per_s'] / 1000:,.0f}k{spread} | {mb(r['wal_bytes']):.0f} |")
    return lines


def sweep_table(sweep, rates, workers_list):
    kinds = sorted({r["kind"] for r in sweep}, key=list(KINDS).index)
    lines = ["| ids | workers | " + " | ".join(f"{r:,}/ms" for r in rates) + " |",
             "|---|---:|" + "---:|" * len(rates)]
    for kind in kinds:
        for w in workers_list:
            cells = []
            for rate in rates:
                r = next((r for r in sweep if (r["kind"], r["workers"], r["rate"]) == (kind, w, rate)), None)
                cells.append(f"{mb(r['index_bytes']):.1f} MB, {r['leaf_density']:.0f}%" if r else "")
            lines.append(f"| {kind} | {w} | " + " | ".join(cells) + " |")
    return lines


def fillfactor_table(ff):
    lines = ["| ids | workers | ids per ms per worker | fillfactor | index MB | leaf density | after REINDEX: MB (density) |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for r in ff:
        lines.append(f"| {r['kind']} | {r['workers']} | {r['rate']:,} | {r['fillfactor']} | {mb(r['index_bytes']):.1f} "
                     f"| {r['leaf_density']:.1f}% | {mb(r['reindexed_bytes']):.1f} ({r['reindexed_density']:.1f}%) |")
    return lines


COLOURS = {"time-first": "#d62728", "time-seq-worker": "#8c564b", "worker-first": "#ff7f0e",
           "bigserial": "#1f77b4", "UUIDv7": "#9467bd"}


def svg_bars(path, res, rates, workers_list, kinds):
    """One panel per rate: grouped bars of index size per worker count, one bar per kind
    (round-robin arrival), each labelled with its average leaf density."""
    w, h, pad, top_pad = 600, 360, 60, 50
    ymax_raw = max(mb(r["index_bytes"]) for r in res)
    step = next(m * 10 ** e for e in range(0, 6) for m in (1, 2, 5) if m * 10 ** e * 5 >= ymax_raw)
    ymax = step * 5
    total_w = w * len(rates)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{total_w}" height="{h + 40}" '
             f'font-family="sans-serif" font-size="12">',
             f'<rect width="{total_w}" height="{h + 40}" fill="white"/>']

    def sy(v):
        return h - pad - v / ymax * (h - pad - top_pad)
    for p, rate in enumerate(rates):
        x0 = p * w
        title = f"M7: primary-key size, {rate:,} id{'s' if rate > 1 else ''} per ms per worker"
        parts.append(f'<text x="{x0 + w / 2}" y="24" text-anchor="middle" font-size="14" font-weight="bold">{title}</text>')
        for i in range(6):
            v = step * i
            parts.append(f'<line x1="{x0 + pad}" y1="{sy(v):.1f}" x2="{x0 + w - 20}" y2="{sy(v):.1f}" stroke="#ddd"/>')
            parts.append(f'<text x="{x0 + pad - 6}" y="{sy(v) + 4:.1f}" text-anchor="end">{v:g}</text>')
        parts.append(f'<text x="{x0 + 14}" y="{(h - pad + top_pad) / 2}" transform="rotate(-90 {x0 + 14} '
                     f'{(h - pad + top_pad) / 2})" text-anchor="middle">index MB (label: average leaf density)</text>')
        group_w = (w - pad - 20) / len(workers_list)
        bar_w = (group_w - 20) / len(kinds)
        for g, workers in enumerate(workers_list):
            gx = x0 + pad + g * group_w + 10
            parts.append(f'<text x="{gx + (group_w - 20) / 2:.1f}" y="{h - pad + 18}" text-anchor="middle">'
                         f'{workers} worker{"s" if workers > 1 else ""}</text>')
            for k, kind in enumerate(kinds):
                r = next((r for r in res if r["kind"] == kind and r["arrival"] == "round-robin" and
                          (kind == "bigserial" or (r["workers"] == workers and r["rate"] == rate))), None)
                if r is None:
                    continue
                v = mb(r["index_bytes"])
                bx = gx + k * bar_w
                parts.append(f'<rect x="{bx:.1f}" y="{sy(v):.1f}" width="{bar_w - 2:.1f}" height="{sy(0) - sy(v):.1f}" '
                             f'fill="{COLOURS[kind]}"/>')
                parts.append(f'<text x="{bx + bar_w / 2:.1f}" y="{sy(v) - 4:.1f}" text-anchor="middle" '
                             f'font-size="9">{r["leaf_density"]:.0f}%</text>')
        parts.append(f'<line x1="{x0 + pad}" y1="{sy(0)}" x2="{x0 + w - 20}" y2="{sy(0)}" stroke="black"/>')
        lx = x0 + pad
        for kind in kinds:
            parts.append(f'<rect x="{lx}" y="{h - 18}" width="14" height="10" fill="{COLOURS[kind]}"/>')
            parts.append(f'<text x="{lx + 18}" y="{h - 9}">{kind}</text>')
            lx += 18 + 7 * len(kind) + 14
    parts.append("</svg>")
    Path(path).write_text("\n".join(parts) + "\n")


BEGIN, END = "<!-- M7 begin: written by bench/m7.py -->", "<!-- M7 end -->"


def write_section(results_md, section):
    """Puts the M7 section into results.md, in place of the one there or at the end."""
    text = results_md.read_text() if results_md.exists() else "# Benchmark results\n"
    block = BEGIN + "\n" + "\n".join(section) + "\n" + END
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        text = head + block + rest.split(END, 1)[1]
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    results_md.write_text(text)


def saved_section(results_md):
    """The M7 section of results.md, markers included, or None: bench.py, which writes the
    rest of the file anew, keeps it."""
    text = results_md.read_text() if results_md.exists() else ""
    if BEGIN in text and END in text:
        return BEGIN + text.split(BEGIN, 1)[1].split(END, 1)[0] + END
    return None


def findings(res, sweep, ff):
    """What the tables say, in sentences computed from them."""
    rr = {(r["kind"], r["workers"], r["rate"]): r for r in res if r["arrival"] == "round-robin"}
    sh = {(r["kind"], r["workers"], r["rate"]): r for r in res if r["arrival"] == "shuffled"}
    serial = rr.get(("bigserial", 1, 1))
    if serial is None:
        return []
    base = serial["index_bytes"]
    rates = sorted({r["rate"] for r in res if r["kind"] != "bigserial"})
    workers = sorted({r["workers"] for r in res if r["kind"] != "bigserial"})
    low, high = rates[0], rates[-1]
    many = [w for w in workers if w > 1]

    def size(r):
        return f"{mb(r['index_bytes']):.1f} MB ({r['index_bytes'] / base:.2f}x, {r['leaf_density']:.0f}% full)"

    def listed(rs):
        return ", ".join(f"{r['workers']} workers {size(r)}" for r in rs)

    out = [f"What it shows (bigserial's index: {mb(base):.1f} MB, {serial['leaf_density']:.0f}% full):", ""]
    wf = [rr[("worker-first", w, low)] for w in many if ("worker-first", w, low) in rr]
    if wf:
        out.append("* **Worker-first (Seata) ids from more than one worker half-fill the index at any rate:** "
                   + listed(wf)
                   + f" at {low:,} id{'s' if low > 1 else ''} per ms per worker"
                   + "; from one worker they are bigserial's. Every worker's ids go to their own place in the key "
                   "space, and a B-tree leaf that is not the rightmost splits in half, so each worker but the last "
                   "leaves half-empty pages behind it.")
    tf_low = [rr[("time-first", w, low)] for w in many if ("time-first", w, low) in rr]
    tf_high = [rr[("time-first", w, high)] for w in many if ("time-first", w, high) in rr]
    if tf_low and tf_high:
        line = (f"* **Time-first ids (the default layout)** are bigserial's size at {low:,} id per ms per worker "
                f"({listed(tf_low)}), but at {high:,} per ms per "
                f"worker they half-fill it too: {listed(tf_high)}. "
                f"Once one millisecond's ids of all the workers fill more than a leaf page (bigserial's leaves hold "
                f"{serial['rows'] / serial['leaf_pages']:.0f} keys each), the "
                "workers' ranges within that millisecond fill side by side, each at its own insertion point.")
        firsts = []
        for w in sorted(many, reverse=True):
            half = sorted((r for r in sweep if r["kind"] == "time-first" and r["workers"] == w
                           and r["leaf_density"] < 75), key=lambda r: r["rate"])
            if half:
                firsts.append(f"from {half[0]['rate']:,} ids per ms per worker with {w} workers ({size(half[0])})")
        if firsts:
            line += " In the rate sweep the index is below 75% full " + " and ".join(firsts) + "."
        out.append(line)
    tsw = [rr[("time-seq-worker", w, high)] for w in many if ("time-seq-worker", w, high) in rr]
    if tsw:
        out.append(f"* **Sequence before worker** (`order=time-sequence-worker`, Sonyflake's order) keeps one append "
                   f"point when the workers' ids arrive evenly interleaved: {listed(tsw)} "
                   f"at {high:,} per ms per worker.")
    shuffled = [r for r in sh.values()]
    if shuffled:
        lo_d = min(r["leaf_density"] for r in shuffled)
        hi_d = max(r["leaf_density"] for r in shuffled)
        lo_s = min(r["index_bytes"] for r in shuffled) / base
        hi_s = max(r["index_bytes"] for r in shuffled) / base
        out.append(f"* **Ids arriving in a random order within each millisecond** (several workers at {high:,} per "
                   f"ms each) make every order alike: {lo_s:.2f}x to {hi_s:.2f}x bigserial's index, {lo_d:.0f}% to "
                   f"{hi_d:.0f}% full: the inserts land at random inside the current millisecond's key range.")
    uu = [r for (k, w, rate), r in rr.items() if k == "UUIDv7"]
    if uu:
        u_low = [r for r in uu if r["rate"] == low]
        u_high = [r for r in uu if r["rate"] == high]
        worst = max(u_high, key=lambda r: r["index_bytes"])
        out.append(f"* **UUIDv7** is 16 bytes a key: {size(u_low[0])} at {low:,} per ms; {size(worst)} "
                   f"at {high:,} per ms (random bits within a millisecond).")
    packed = [r for r in res if r["kind"] != "UUIDv7"]
    if packed:
        reidx = {r["reindexed_bytes"] for r in packed}
        span = f"{mb(min(reidx)):.1f}" + (f"-{mb(max(reidx)):.1f}" if len(reidx) > 1 else "")
        out.append(f"* **`REINDEX` packs every bigint index back to {span} MB** "
                   f"({min(r['reindexed_density'] for r in packed):.0f}% full), whatever made it half empty.")
    if ff:
        groups = {}
        for r in sorted(ff, key=lambda r: r["fillfactor"]):
            groups.setdefault((r["kind"], r["workers"], r["rate"]), []).append(r)
        factors = ", ".join(str(f) for f in sorted({r["fillfactor"] for r in ff}))
        parts = []
        for (kind, w, rate), rs in groups.items():
            densities = ", ".join(f"{r['leaf_density']:.0f}%" for r in rs)
            parts.append(f"{densities} full ({kind}, {w} workers, {rate:,} per ms)")
        out.append(f"* **The fillfactor does not help while inserting:** at fillfactor {factors} the insert leaves "
                   f"the index {'; '.join(parts)}. PostgreSQL applies it only to splits of the rightmost leaf and "
                   "to `CREATE INDEX` and `REINDEX`.")
    wal_half = [r for r in res if r["kind"] != "UUIDv7" and r["leaf_density"] < 60]
    wal_full = [r for r in res if r["kind"] != "UUIDv7" and r["kind"] != "bigserial" and r["leaf_density"] > 85]
    if wal_half and wal_full:
        out.append(f"* **WAL:** {mb(min(r['wal_bytes'] for r in wal_full)):.0f} MB for a packed bigint index, "
                   f"{mb(min(r['wal_bytes'] for r in wal_half)):.0f}-{mb(max(r['wal_bytes'] for r in wal_half)):.0f} MB "
                   f"for a half-empty one (heap included); bigserial {mb(serial['wal_bytes']):.0f} MB.")
    return out + [""]


def section(res, sweep, ff, rows, rounds, sweep_rates, sweep_workers, version, took):
    lines = ["## M7: the primary key's B-tree under time-first, worker-first (Seata), bigserial and UUIDv7 ids", "",
             f"Made by `bench/m7.py` (`bench/run --m7`) on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
             f"{os.cpu_count()} cores, {version.split(',')[0]}, no extension. {rows:,} rows per run, computed in SQL "
             "as W workers at R ids per millisecond each would make them and put in arrival order into a staging "
             "table; one `INSERT ... SELECT` copies them in that order into a fresh table `(id PRIMARY KEY, v bigint)`. "
             "Arrival is *round-robin* (the workers' ids interleaved one at a time) or *shuffled* (in a random order "
             "within each millisecond). Time-first is the default layout (`ms << 22 | worker << 12 | sequence`), "
             "time-seq-worker the same bits in Sonyflake's order (`ms << 22 | sequence << 10 | worker`), worker-first "
             "Seata's (`worker << 53 | (ms << 12 | sequence)`), UUIDv7 the row's millisecond and random bits; "
             "bigserial is the same whatever W and R. Index size and average leaf density from `pgstatindex` after "
             "the insert and after `REINDEX` (fillfactor 90); rows/s is the statement's wall time, WAL the "
             "`pg_current_wal_lsn()` difference over it (heap included), after a `CHECKPOINT`. "
             f"Medians of {rounds} round{'s' if rounds > 1 else ''}, the cases in a new random order each round, "
             "on a machine shared with other work: take the rates as rough. "
             f"{took}", ""]
    lines += findings(res, sweep, ff)
    lines += results_table(res)
    lines += ["", "![M7: primary-key size by id kind, workers and rate](bench-m7.svg)", ""]
    if sweep:
        lines += [f"Index size and average leaf density against the rate (round-robin arrival, one round):", ""]
        lines += sweep_table(sweep, sweep_rates, sweep_workers)
        lines += [""]
    if ff:
        lines += ["The primary key's fillfactor where the index is half empty (round-robin arrival, one round; "
                  f"{DEFAULT_FILLFACTOR} is PostgreSQL's default, the rows above):", ""]
        lines += fillfactor_table(ff)
        lines += [""]
    return lines


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--workers", default="1,8,64", help="worker counts, comma-separated")
    ap.add_argument("--rates", default="1,4096", help="ids per millisecond per worker, comma-separated")
    ap.add_argument("--kinds", default=",".join(KINDS), help="which ids, comma-separated")
    ap.add_argument("--sweep-rates", default="1,16,64,256,1024,4096",
                    help="the rates of the sweep (empty: no sweep)")
    ap.add_argument("--fillfactors", default="70,100",
                    help="the primary key's fillfactors to try beside 90 where the index is half empty (empty: none)")
    ap.add_argument("--reuse", help="a bench-m7.json of an earlier run (same rows, same server): its cases are not measured again")
    ap.add_argument("--port", type=int, default=15997)
    ap.add_argument("--out", help="where to write results.md's M7 section, bench-m7.svg/.json/.csv (default docs/)")
    ap.add_argument("--print-only", action="store_true", help="print the tables, write nothing")
    args = ap.parse_args()
    workers_list = [int(x) for x in args.workers.split(",")]
    rates = [int(x) for x in args.rates.split(",")]
    kinds = args.kinds.split(",")
    sweep_rates = [int(x) for x in args.sweep_rates.split(",") if x]
    sweep_workers = [w for w in workers_list if w > 1]
    args.fillfactors = [int(x) for x in args.fillfactors.split(",") if x]
    out = Path(args.out) if args.out else ROOT / "docs"

    ff = DEFAULT_FILLFACTOR
    cases = []
    for kind in kinds:
        for workers in ([1] if kind == "bigserial" else workers_list):
            for rate in ([1] if kind == "bigserial" else rates):
                cases.append((kind, "round-robin", workers, rate, ff))
    # Random arrival within a millisecond, where it can matter: several workers at the top rate.
    for kind in ("time-first", "time-seq-worker", "worker-first"):
        if kind in kinds:
            cases += [(kind, "shuffled", w, max(rates), ff) for w in workers_list if w > 1]
    sweep_cases = [(kind, "round-robin", w, rate, ff) for kind in ("time-first", "time-seq-worker") if kind in kinds
                   for w in sweep_workers for rate in sweep_rates if rate not in rates]
    # The fillfactor where the index is half empty: worker-first ids from a few workers at the
    # realistic rate, time-first ids from many at the top rate.
    half_empty = [c for c in [("worker-first", "round-robin", min(sweep_workers, default=0), min(rates)),
                              ("time-first", "round-robin", max(sweep_workers, default=0), max(rates))]
                  if c[0] in kinds and c[2] > 1]
    ff_cases = [c + (f,) for c in half_empty for f in args.fillfactors]
    ff_rows = [c + (f,) for c in half_empty for f in sorted(set(args.fillfactors) | {ff})]

    runs = {c: [] for c in cases + sweep_cases + ff_cases}
    reused, measured_before = 0, 0.0
    if args.reuse:
        old = json.loads(Path(args.reuse).read_text())
        if old["rows"] != args.rows:
            raise SystemExit(f"{args.reuse} has runs of {old['rows']:,} rows, not {args.rows:,}")
        measured_before = old.get("measured_s", 0.0)
        for entry in old["runs"]:
            case = tuple(entry["case"]) + ((ff,) if len(entry["case"]) == 4 else ())
            if case in runs and entry["runs"]:
                runs[case] = entry["runs"]
                reused += 1
    todo = {c for c, v in runs.items() if not v}

    def show(case, r):
        kind, arrival, workers, rate, fillfactor = case
        print(f"{kind:15} {arrival:11} W={workers:<3} R={rate:<5} ff={fillfactor:<3} index {mb(r['index_bytes']):6.1f} MB "
              f"density {r['leaf_density']:5.1f}% reindexed {mb(r['reindexed_bytes']):6.1f} MB "
              f"{r['rows_per_s']:>9,.0f} rows/s WAL {mb(r['wal_bytes']):6.0f} MB", flush=True)

    data = Path(f"/tmp/snowflake_ext-m7-{args.port}")
    env = dict(os.environ, PG_MAJOR=PG_MAJOR)
    subprocess.run([str(CLUSTER), "destroy", str(data)], check=True, env=env)
    subprocess.run([str(CLUSTER), "init", str(data), str(args.port), "shared_preload_libraries=",
                    "shared_buffers=256MB", "max_wal_size=8GB", "checkpoint_timeout=30min",
                    "fsync=on", "synchronous_commit=on"], check=True, env=env)
    subprocess.run([str(CLUSTER), "start", str(data)], check=True, env=env)
    started = time.time()
    try:
        psql(args.port, "CREATE EXTENSION pgstattuple;")
        version = psql(args.port, "SELECT version()").strip()
        if args.reuse and old["version"] != version:
            raise SystemExit(f"{args.reuse} was measured on {old['version']}, this server is {version}")
        main_todo = [c for c in cases if c in todo]
        for n in range(args.rounds if main_todo else 0):
            print(f"== round {n + 1} of {args.rounds}", flush=True)
            for case in random.sample(main_todo, len(main_todo)):
                runs[case].append(measure(args.port, case, args.rows))
                show(case, runs[case][-1])
        for title, group in [("the rate sweep", sweep_cases), ("the fillfactor", ff_cases)]:
            group = [c for c in group if c in todo]
            if group:
                print(f"== {title}", flush=True)
            for case in group:
                runs[case].append(measure(args.port, case, args.rows))
                show(case, runs[case][-1])
    finally:
        subprocess.run([str(CLUSTER), "destroy", str(data)], check=False, env=env)
    elapsed = time.time() - started
    measured = measured_before + (elapsed if todo else 0.0)
    took = (f"Took {elapsed / 60:.1f} min." if not reused else
            f"Measured in more than one invocation ({reused} cases reused with `--reuse`, {len(todo)} measured "
            f"in the last), {measured / 60:.1f} min in all.")
    res = [combine(c, args.rows, runs[c]) for c in cases]
    by = {(r["kind"], r["workers"], r["rate"]): r for r in res if r["arrival"] == "round-robin"}
    sweep = [combine(c, args.rows, runs[c]) for c in sweep_cases]
    sweep += [by[(k, w, r)] for k in ("time-first", "time-seq-worker") for w in sweep_workers for r in sweep_rates
              if (k, w, r) in by]
    ffres = [combine(c, args.rows, runs[c]) if c in runs else by[c[0], c[2], c[3]] for c in ff_rows]
    lines = section(res, sweep, ffres, args.rows, args.rounds, sweep_rates, sweep_workers, version, took)
    print("\n".join(lines))
    if args.print_only:
        return
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench-m7.json").write_text(json.dumps(
        {"version": version, "rows": args.rows, "rounds": args.rounds, "measured_s": measured,
         "results": res, "sweep": sweep,
         "fillfactor": ffres, "runs": [{"case": list(c), "runs": v} for c, v in runs.items()]}, indent=1) + "\n")
    with open(out / "bench-m7.csv", "w", newline="") as f:
        wr = csv.DictWriter(f, fieldnames=list(res[0]) + ["pass"])
        wr.writeheader()
        wr.writerows([dict(r, **{"pass": "main"}) for r in res] + [dict(r, **{"pass": "sweep"}) for r in sweep]
                     + [dict(r, **{"pass": "fillfactor"}) for r in ffres])
    svg_bars(out / "bench-m7.svg", res, rates, workers_list, kinds)
    write_section(out / "results.md", lines)
    print(f"\nwrote {out / 'results.md'} (its M7 section), {out / 'bench-m7.svg'}, .json and .csv")


if __name__ == "__main__":
    main()

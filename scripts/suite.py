#!/usr/bin/env python3
"""The whole test suite as a schedule of jobs (scripts/test.sh runs it, after installing what it
needs).

Why a schedule: run one after the other, the jobs left a core idle most of the time (62
minutes on two cores; 32 scheduled, both cores busy throughout). Here the compiles run one at a
time (`cargo` jobs: each already uses both cores) while up to SNOWFLAKE_TEST_JOBS (default 4)
test binaries run beside them (`run` jobs), each as soon as what it needs is built and
installed. Each job's output goes to target/suite/NAME.log; a failing job's log is printed, the
jobs still running are stopped, and the suite fails.

What runs where, and why (as before the schedule, except that the #[pg_test]s, once on every
major, now run on 15 and 18, and 14, 16 and 17 test the release build instead of a debug one):
  * formatting, clippy, the documentation's intra-doc links, the pure core's unit tests;
  * on 15 and 18 (FULL): the #[pg_test]s (`cargo pgrx test`, which installs the debug build with
    the test functions) and every integration test against that build;
  * on 14, 16 and 17 (PARTIAL): the release build that `scripts/package` puts in the Debian
    package, installed, and the integration tests that differ by major (generation,
    durability, interop, portable) against it: what users install is tested on every major;
  * Citus 14 clusters on 16, 17 and 18; real clients on 15; lease handovers and the nemesis on
    18; the registry's SQL against the lease model on 14 (a registry needs no extension); upgrades (extension, pg_upgrade 15 to 18 and 14 to 18); the packages; a benchmark smoke
    run.
The integration tests are built once: they talk to servers over SQL and take the major from
PG_MAJOR at run time, so one build serves every major.

Jobs that change a major's installed files never run beside tests of that major: the
dependencies below order them (each major is installed once, before its tests; the package
test, which installs the .deb over 15's files, comes after every test of 15; the benchmark
installs nothing of ours).
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOGS = ROOT / "target" / "suite"

FULL = ["15", "18"]
PARTIAL = ["14", "16", "17"]
# The integration tests (tests/*.rs), by where they run.
EVERY_MAJOR = ["generation", "durability", "interop", "portable"]
FULL_ONLY = ["errors", "adopt", "privilege", "trust", "leases", "failover", "faults", "ha", "multinode",
             "operators_day", "snippets", "lease_restore", "past_ids"]
# Citus 14 supports 16 to 18.
CITUS_MAJORS = ["16", "17", "18"]
# The nemesis and the lease handovers step the clocks of background workers: before 16 the
# postmaster starts them from a signal handler, where libfaketime does not reach. On 18.
ON_18 = ["handover", "nemesis"]
# Real clients against both editions, on the default major: they test the clients' side.
ON_15 = ["clients"]
# The registry's SQL against the lease model: a plain PostgreSQL with no extension (the
# registry's own case), on the oldest major a registry may run on; it needs only the build.
REGISTRY_ONLY = ["registry_model"]
REGISTRY_MAJOR = "14"
# Upgrades need 14, 15 and 18; the packages test installs the .deb over 15's files.
LAST = ["upgrade", "packages"]
ALL_TESTS = EVERY_MAJOR + FULL_ONLY + ["citus"] + ON_18 + ON_15 + REGISTRY_ONLY + LAST

# Seconds each took in a quiet serial run: longest first, so that the last to finish is short.
EXPECTED = {"faults": 110, "leases": 95, "ha": 75, "multinode": 65, "portable": 55, "failover": 35,
            "trust": 25, "durability": 21, "privilege": 16, "snippets": 15, "interop": 12, "generation": 11,
            "errors": 6, "adopt": 5, "citus": 145, "handover": 118, "nemesis": 118, "clients": 22,
            "upgrade": 21, "packages": 7, "bench": 120, "operators_day": 60, "lease_restore": 55,
            "past_ids": 30, "registry_model": 150}


class Job:
    def __init__(self, name, label, kind, cmd, deps=(), env=None):
        self.name, self.label, self.kind, self.cmd = name, label, kind, cmd
        self.deps, self.env = list(deps), env or {}
        self.proc = self.started = self.took = None
        self.done = False


# Clippy's lints, run on the builds the tests need rather than in a compile of their own.
# `cargo clippy` is clippy-driver wrapped around rustc for the workspace's crates, in check mode:
# it compiled every dependency a further time (5 minutes of the suite, beside the tests). As
# RUSTC_WORKSPACE_WRAPPER, the same driver lints the workspace's crates while it compiles them
# for the tests (what `cargo clippy --workspace --all-targets --features pg_test` covered: the
# library, as built and under test, the integration tests, the core and its tests), and a lint
# fails that build. Dependencies are compiled by rustc as before, so nothing else is rebuilt.
CLIPPY = {"RUSTC_WORKSPACE_WRAPPER": f"{Path.home()}/.cargo/bin/clippy-driver",
          "CLIPPY_ARGS": "__CLIPPY_HACKERY__".join(["-D", "warnings"])}


def cargo_env():
    env = dict(os.environ)
    env["PATH"] = f"{Path.home()}/.cargo/bin:{env.get('PATH', '')}"
    # A clean build compiles every crate once per feature set: incremental data would only be
    # written, never read.
    env.setdefault("CARGO_INCREMENTAL", "0")
    return env


def tests_of(major, names):
    return [f"it-{major}-{n}" for n in names]


def jobs():
    j = []
    add = lambda *a, **k: j.append(Job(*a, **k))
    cargo_test = "cargo test -q --no-default-features --features 'pg15 pg_test'"

    # Compiles, in the order the tests need them.
    add("fmt", "cargo fmt --check", "cargo", "cargo fmt --all --check")
    for major in FULL:
        # The #[pg_test]s of a major, through cargo pgrx test, which also installs that major's
        # debug build (with the test functions). Its test server cannot run as root: it runs as
        # postgres in a directory postgres owns. `--lib` builds and runs the crate's own tests only.
        pgdata = f"/tmp/snowflake_ext-pgrx-test-{major}"
        # 15's builds (the default feature) are the ones linted, as `cargo clippy` did.
        lint = CLIPPY if major == FULL[0] else {}
        add(f"pgtest-{major}", f"PostgreSQL {major}: #[pg_test]s (and its debug build installed)"
            + (", linted" if lint else ""), "cargo",
            f"rm -rf {pgdata} && install -d -o postgres -g postgres {pgdata} && "
            f"PG_MAJOR={major} cargo pgrx test pg{major} --runas postgres --pgdata {pgdata}/data -- --lib",
            env=lint)
        if major == FULL[0]:
            # Every integration test binary, built once, with the features cargo pgrx test used
            # (nothing of the extension is compiled again).
            targets = " ".join(f"--test {t}" for t in ALL_TESTS)
            add("itbuild", "the integration tests, built once for every major, linted", "cargo",
                f"cargo test --no-run --message-format=json --no-default-features --features 'pg{major} pg_test' "
                f"{targets} > {LOGS}/itbuild.json", deps=[f"pgtest-{major}"], env=lint)
    # 16 first: the benchmark runs on its release build; then the majors whose tests wait for it.
    for major in ["16", "14", "17", "15", "18"]:
        # The release build, packaged (scripts/package) and, on 14, 16 and 17, installed.
        install = f" && scripts/pg-major install-extension {major}" if major in PARTIAL else ""
        add(f"release-{major}", f"PostgreSQL {major}: release build and Debian package"
            + (", installed" if install else ""), "cargo", f"scripts/package {major}{install}")
    # Checks that gate no test: last.
    # The code map in src/lib.rs names every file by an intra-doc link: a moved file breaks it.
    add("doc", "cargo doc: no broken intra-doc link (the code map)", "cargo",
        "RUSTDOCFLAGS='-D rustdoc::broken_intra_doc_links -A rustdoc::private_intra_doc_links' "
        "cargo doc -q --workspace --no-deps --document-private-items")
    add("core", "the pure core's unit tests, debug and release, linted", "cargo",
        "cargo test -q -p snowflake_core && cargo test -q -p snowflake_core --release", env=CLIPPY)
    add("links", "documentation links (scripts/check-links)", "run", "scripts/check-links")

    # Test binaries against servers.
    def it(major, name, deps):
        add(f"it-{major}-{name}", f"PostgreSQL {major}: tests/{name}.rs", "run", ("exe", name),
            deps=["itbuild"] + deps, env={"PG_MAJOR": major})

    for major in FULL:
        for name in EVERY_MAJOR + FULL_ONLY:
            it(major, name, [f"pgtest-{major}"])
    for major in PARTIAL:
        for name in EVERY_MAJOR:
            it(major, name, [f"release-{major}"])
    for major in CITUS_MAJORS:
        it(major, "citus", [f"pgtest-{major}" if major in FULL else f"release-{major}"])
    for name in ON_18:
        it("18", name, ["pgtest-18"])
    for name in ON_15:
        it("15", name, ["pgtest-15"])
    for name in REGISTRY_ONLY:
        it(REGISTRY_MAJOR, name, [])
    it("15", "upgrade", ["pgtest-15", "pgtest-18", "release-14"])
    uses_15 = tests_of("15", EVERY_MAJOR + FULL_ONLY + ON_15 + ["upgrade"])
    # The benchmarks in their short mode, so that they keep working (figures not checked), on
    # the release build that release-16 installed (SNOWFLAKE_BENCH_INSTALLED: bench/run neither
    # builds nor installs it, which would change files 16's running tests have loaded), beside
    # the tests; M6 on 18's Citus with 18's build. (pgEdge's snowflake, which it installs into
    # 16, is a library no test loads.)
    add("bench", "benchmark smoke run (bench/run --short, on 16's release build)", "run",
        "bench/run --short", deps=["release-16", "pgtest-18"],
        env={"PG_MAJOR": "16", "SNOWFLAKE_BENCH_INSTALLED": "1"})
    # Installs the .deb for 15 with apt-get, then removes it.
    it("15", "packages", uses_15 + [f"release-{m}" for m in PARTIAL + FULL])
    return j


def main():
    LOGS.mkdir(parents=True, exist_ok=True)
    for old in LOGS.glob("*.log"):
        old.unlink()
    all_jobs = jobs()
    by_name = {job.name: job for job in all_jobs}
    # A test file in no job would never run.
    missing = [p.stem for p in sorted((ROOT / "tests").glob("*.rs"))
               if p.stem not in ALL_TESTS]
    if missing:
        sys.exit(f"scripts/suite.py: tests/{missing[0]}.rs is in no list of tests to run")
    for job in all_jobs:
        for dep in job.deps:
            assert dep in by_name, f"{job.name} needs {dep}, which is no job"
    slots = int(os.environ.get("SNOWFLAKE_TEST_JOBS", "4"))
    env = cargo_env()
    exes = {}
    t0 = time.monotonic()
    running = {}
    # The compiles in the order written; the test binaries longest first, so that the last to
    # finish are short ones (the machine is busy throughout: packing is what saves time).
    order = sorted(all_jobs, key=lambda job: (job.kind != "cargo", -EXPECTED.get(job.name.split("-")[-1], 30)))

    def stamp():
        return f"[{int(time.monotonic() - t0):5d}s]"

    def start(job):
        cmd = job.cmd
        if isinstance(cmd, tuple):
            if not exes:
                for line in (LOGS / "itbuild.json").read_text().splitlines():
                    msg = json.loads(line)
                    if msg.get("reason") == "compiler-artifact" and msg.get("executable") \
                            and "test" in msg["target"]["kind"]:
                        exes[msg["target"]["name"]] = msg["executable"]
            cmd = f"exec {exes[cmd[1]]}"
        log = open(LOGS / f"{job.name}.log", "w")
        job.started = time.monotonic()
        # Its own process group, so that a failure elsewhere stops all of it.
        job.proc = subprocess.Popen(["bash", "-c", f"set -euo pipefail; {cmd}"], cwd=ROOT,
                                    env={**env, **job.env}, stdout=log, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
        running[job.proc.pid] = job
        if job.kind == "cargo":
            # Linux shares the CPU between sessions (autogroups), not processes: one compile
            # would get a share no bigger than one test server's (each is a session of its own,
            # pg_ctl sees to that), and with a dozen of them it crawled, holding up every test
            # that waits for its build. Its session gets the weight of about ten.
            try:
                Path(f"/proc/{job.proc.pid}/autogroup").write_text("-10")
            except OSError:
                pass
        print(f"{stamp()} start {job.label}", flush=True)

    def stop_all():
        for job in running.values():
            try:
                os.killpg(job.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    while not all(job.done for job in all_jobs):
        busy_cargo = any(job.kind == "cargo" for job in running.values())
        busy_runs = sum(job.kind == "run" for job in running.values())
        for job in order:
            if job.done or job.proc or not all(by_name[d].done for d in job.deps):
                continue
            if job.kind == "cargo" and not busy_cargo:
                start(job)
                busy_cargo = True
            elif job.kind == "run" and busy_runs < slots:
                start(job)
                busy_runs += 1
        if not running:
            sys.exit("scripts/suite.py: nothing can run (a dependency cycle)")
        pid, status = os.wait()
        job = running.pop(pid, None)
        if job is None:
            continue
        job.proc.returncode = os.waitstatus_to_exitcode(status)
        job.took = time.monotonic() - job.started
        log = LOGS / f"{job.name}.log"
        if job.proc.returncode != 0:
            stop_all()
            print(f"{stamp()} FAILED {job.label} (exit {job.proc.returncode}, {job.took:.0f} s); its log, {log}:")
            sys.stdout.write(log.read_text(errors="replace"))
            sys.exit(1)
        job.done = True
        # "test result: ok. 16 passed; 0 failed; ...", once per test binary the job ran.
        passed = [int(line.split(". ")[1].split()[0]) for line in log.read_text(errors="replace").splitlines()
                  if line.startswith("test result: ok. ")]
        counted = f" ({sum(passed)} tests passed)" if passed else ""
        print(f"{stamp()} ok    {job.label}{counted} in {job.took:.0f} s", flush=True)

    print("\n==> summary (jobs, in the order they started)")
    for job in sorted(all_jobs, key=lambda job: job.started):
        print(f"  {job.label:<76} ok {job.took:5.0f}s  at {job.started - t0:5.0f}s")
    print(f"==> all tests passed in {time.monotonic() - t0:.0f} s "
          f"({slots} test jobs beside one compile at a time)")


if __name__ == "__main__":
    main()

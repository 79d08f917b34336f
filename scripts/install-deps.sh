#!/usr/bin/env bash
# Installs what building, testing and benchmarking snowflake_ext need on Debian 12, as root.
# Idempotent and quick when everything is already there.
set -euo pipefail
export PATH="$HOME/.cargo/bin:$PATH"

PG_CONFIG=/usr/lib/postgresql/15/bin/pg_config
PACKAGES=(postgresql-15 postgresql-server-dev-15 postgresql-15-pglogical sudo faketime procps
  pkg-config libssl-dev valgrind patroni etcd-server etcd-client curl)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "==> apt-get install ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
fi

# pgrx 0.19 needs a newer rustc than this machine has: both halves stay pinned to 0.18.1.
if ! cargo pgrx --version 2>/dev/null | grep -q '0\.18\.1'; then
  echo "==> cargo install cargo-pgrx 0.18.1 (a few minutes)"
  cargo install --locked cargo-pgrx --version 0.18.1
fi

# Point pgrx at Debian's PostgreSQL 15 (it would otherwise try to download sources).
if ! grep -qs "pg15 *= *\"$PG_CONFIG\"" "$HOME/.pgrx/config.toml"; then
  cargo pgrx init --pg15 "$PG_CONFIG" >/dev/null
fi

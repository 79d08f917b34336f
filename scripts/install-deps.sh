#!/usr/bin/env bash
# Installs what building, testing, packaging and benchmarking snowflake_ext need on Debian 12,
# as root: Debian packages, cargo-pgrx 0.18.1, every supported PostgreSQL major
# (scripts/pg-major), pglogical for the majors the whole test suite runs on, Citus for 16-18,
# pg_tle for every major, pgEdge's snowflake for 15 and 18 (the pgEdge recipe's test), and the
# client libraries of the client tests (tests/clients/).
# Idempotent and quick when everything is already there.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"

PACKAGES=(postgresql-15 postgresql-server-dev-15 postgresql-15-pglogical sudo faketime procps
  pkg-config libssl-dev valgrind patroni etcd-server etcd-client curl
  # the PyPI builds of PostgreSQL: their libraries must find their own libpq (scripts/pg-major)
  patchelf
  # pglogical from source, for majors Debian does not package
  make gcc libkrb5-dev libzstd-dev liblz4-dev
  # Citus from source (scripts/pg-major citus)
  libcurl4-openssl-dev
  # pg_tle from source (scripts/pg-major pg_tle): its build runs flex
  flex bison
  # Debian packages of the extension
  dpkg-dev
  # the client tests (tests/clients.rs): node-postgres, and a virtualenv for psycopg and the ORMs
  nodejs python3-venv)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# npm comes with NodeSource's nodejs, and as a package of its own with Debian's.
command -v npm >/dev/null || missing+=(npm)
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

# Every supported major, and pgrx pointed at each (it would otherwise try to download sources).
for major in $(scripts/pg-major list); do
  scripts/pg-major install "$major"
  pg_config=$(scripts/pg-major pg-config "$major")
  if ! grep -qs "pg$major *= *\"$pg_config\"" "$HOME/.pgrx/config.toml"; then
    cargo pgrx init "--pg$major" "$pg_config" >/dev/null
  fi
done
scripts/pg-major pglogical 18
# Citus for tests/citus.rs and the benchmark's M6, from its source beside the project: without
# it, everything else works and the Citus tests fail, saying so.
for major in 16 17 18; do
  status=0
  scripts/pg-major citus "$major" || status=$?
  if [ "$status" = 3 ]; then
    echo "install-deps: no Citus source found: the Citus tests (tests/citus.rs) will fail" >&2
    break
  elif [ "$status" != 0 ]; then
    exit "$status"
  fi
done
# pg_tle for the portable edition's trusted-language install (tests/portable.rs), every major,
# from its source beside the project: without it, the pg_tle test fails, saying so.
for major in $(scripts/pg-major list); do
  status=0
  scripts/pg-major pg_tle "$major" || status=$?
  if [ "$status" = 3 ]; then
    echo "install-deps: no pg_tle source found: the pg_tle test (tests/portable.rs) will fail" >&2
    break
  elif [ "$status" != 0 ]; then
    exit "$status"
  fi
done
# pgEdge's snowflake (PostgreSQL licence) for the tested migration recipe of docs/migrating.md
# (tests/snippets.rs, on the majors the whole suite runs on), built with PGXS in a scratch copy
# of its source beside the project, as bench/run builds it; installed only when missing or
# another version (bench/run calls this script beside running tests: nothing they load changes).
pgedge_src=${PGEDGE_SRC:-../shared/peers/pgedge-snowflake}
for major in 15 18; do
  pg_config=$(scripts/pg-major pg-config "$major")
  if [ ! -f "$pgedge_src/Makefile" ]; then
    echo "install-deps: no pgEdge source at $pgedge_src: the pgEdge recipe's test (tests/snippets.rs) will fail" >&2
    break
  fi
  if cmp -s "$pgedge_src/snowflake.control" "$("$pg_config" --sharedir)/extension/snowflake.control" &&
     [ -f "$("$pg_config" --pkglibdir)/snowflake.so" ]; then
    continue
  fi
  echo "==> pgEdge's snowflake for PostgreSQL $major"
  build=$(mktemp -d)
  cp -r "$pgedge_src"/. "$build"
  make -s -C "$build" USE_PGXS=1 PG_CONFIG="$pg_config" install >"$build/make.log" 2>&1 ||
    { tail -20 "$build/make.log" >&2; exit 1; }
  rm -rf "$build"
done
# For the pg_upgrade test from 15 to 18 (see scripts/pg-major).
scripts/pg-major install 15.19

# The client libraries of tests/clients.rs, from the npm registry and PyPI at the versions their
# lock files pin, inside the work tree (ignored by git): tests/clients/node/node_modules and the
# virtualenv tests/clients/python/.venv (made with Debian's python3). Each is installed again only when
# its lock file changed: the hash of the one it came from is kept beside it.
lock_hash() { sha256sum "$1" | cut -d' ' -f1; }
if [ "$(cat tests/clients/node/node_modules/.installed-from 2>/dev/null)" != "$(lock_hash tests/clients/node/package-lock.json)" ]; then
  echo "==> npm ci (tests/clients/node)"
  (cd tests/clients/node && npm ci --no-audit --no-fund --loglevel=error)
  lock_hash tests/clients/node/package-lock.json >tests/clients/node/node_modules/.installed-from
fi
venv=tests/clients/python/.venv
if [ "$(cat "$venv/.installed-from" 2>/dev/null)" != "$(lock_hash tests/clients/python/requirements.txt)" ]; then
  echo "==> pip install -r tests/clients/python/requirements.txt (into $venv)"
  rm -rf "$venv"
  /usr/bin/python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check -r tests/clients/python/requirements.txt
  lock_hash tests/clients/python/requirements.txt >"$venv/.installed-from"
fi

"""Configuration shared by the client suites: which database, which edition, which worker.

Run by tests/clients.rs against the native and the portable edition; by hand:

    SNOWFLAKE_TEST_DSN=postgresql://app@127.0.0.1:5432/native SNOWFLAKE_EDITION=native \
    SNOWFLAKE_WORKER_ID=3 clients/python/.venv/bin/python -m pytest clients/python
"""

import os

import psycopg
import pytest


def _required(name: str) -> str:
    value = os.environ.get(name)
    # A missing setting fails every test: a suite that quietly tested nothing would look like a
    # pass.
    if not value:
        raise pytest.UsageError(f"{name} must be set (see tests/clients/python/conftest.py)")
    return value


DSN = _required("SNOWFLAKE_TEST_DSN")
EDITION = _required("SNOWFLAKE_EDITION")
WORKER = int(_required("SNOWFLAKE_WORKER_ID"))
if EDITION not in ("native", "portable"):
    raise pytest.UsageError(f"SNOWFLAKE_EDITION={EDITION!r}: native or portable")


def worker_of(snowflake_id: int) -> int:
    """The worker field of an id of the default layout (bits 12..21), computed here rather than
    asked of the server, so that a wrong decoder cannot agree with itself."""
    return (snowflake_id >> 12) & 1023


def fresh_schema(name: str) -> str:
    """Creates the schema `name` anew and returns the search_path option that puts it first:
    each suite has its own, so the suites share a database without sharing tables; the
    functions are found after it, where the edition was installed (public)."""
    with psycopg.connect(DSN, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {name} CASCADE")
        conn.execute(f"CREATE SCHEMA {name}")
    return f"-c search_path={name},public"

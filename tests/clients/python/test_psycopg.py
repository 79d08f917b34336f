"""psycopg 3 against one edition of snowflake_ext: keys made by the column default, read back
with RETURNING, and a COPY of a million rows that leaves the key out."""

import psycopg
import pytest
from psycopg.types import TypeInfo
from psycopg.types.numeric import IntLoader

from conftest import DSN, EDITION, WORKER, fresh_schema, worker_of

COPIED_ROWS = 1_000_000


@pytest.fixture(scope="module")
def conn():
    options = fresh_schema("psycopg_client")
    with psycopg.connect(DSN, options=options, autocommit=True) as conn:
        yield conn


@pytest.fixture
def events(conn):
    """A new, empty table for each test."""
    conn.execute("DROP TABLE IF EXISTS events")
    # README: From your application (psycopg)
    conn.execute(
        "CREATE TABLE events (id bigint PRIMARY KEY DEFAULT snowflake_nextval(), payload text)"
    )


def test_inserts_returning(conn, events):
    returned = {}
    for i in range(2000):
        payload = f"signup {i}"
        # README: From your application (psycopg)
        event_id = conn.execute(
            "INSERT INTO events (payload) VALUES (%s) RETURNING id", (payload,)
        ).fetchone()[0]
        returned[payload] = event_id

    ids = list(returned.values())
    assert all(type(i) is int for i in ids)
    # One session's ids increase with every insert, and none repeats.
    assert all(a < b for a, b in zip(ids, ids[1:])), "ids increase within a session"
    assert len(set(ids)) == len(ids)
    assert {worker_of(i) for i in ids} == {WORKER}
    # Each id is the key of the row it came back for.
    stored = dict(conn.execute("SELECT payload, id FROM events").fetchall())
    assert stored == returned


def test_copy_a_million_rows(conn, events):
    payloads = (str(n) for n in range(COPIED_ROWS))
    # README: From your application (psycopg)
    with conn.cursor().copy("COPY events (payload) FROM STDIN") as copy:
        for payload in payloads:
            copy.write_row((payload,))

    rows, distinct, foreign, smallest, largest = conn.execute(
        "SELECT count(*), count(DISTINCT id), count(*) FILTER (WHERE (id >> 12) & 1023 <> %s),"
        " min(id), max(id) FROM events",
        (WORKER,),
    ).fetchone()
    assert rows == COPIED_ROWS
    assert distinct == COPIED_ROWS
    assert foreign == 0, f"{foreign} ids of another worker than {WORKER}"
    # The edition's own decoder agrees, on a sample (it is a function call per id: in the
    # portable edition, a slow one).
    decoded = conn.execute(
        "SELECT array_agg(DISTINCT snowflake_worker(id)) FROM events WHERE payload::int %% 10000 = 0"
        " OR id IN (%s, %s)",
        (smallest, largest),
    ).fetchone()[0]
    assert decoded == [WORKER]
    # The default ran once per row, in the order COPY delivered them: ordered by id, the
    # payloads count up one by one.
    out_of_order = conn.execute(
        "SELECT count(*) FROM (SELECT payload::int - lag(payload::int) OVER (ORDER BY id) AS step"
        " FROM events) s WHERE step <> 1"
    ).fetchone()[0]
    assert out_of_order == 0


def test_snowflake_type_reads_as_int_with_a_loader(conn):
    """The native edition's snowflake type is not int8 to psycopg: its values arrive as str until
    the type's oid is given int8's loader."""
    if EDITION == "portable":
        # Not a skip: the portable edition has no such type, and that is what is checked.
        assert conn.execute("SELECT to_regtype('snowflake')").fetchone()[0] is None
        return
    # A connection of its own, so that the loader stays out of the other tests.
    with psycopg.connect(DSN) as conn:
        assert isinstance(conn.execute("SELECT snowflake_nextval()::snowflake").fetchone()[0], str)
        # README: From your application (psycopg, native edition)
        info = TypeInfo.fetch(conn, "snowflake")
        conn.adapters.register_loader(info.oid, IntLoader)

        id_, text = conn.execute("SELECT x, x::text FROM (SELECT snowflake_nextval()::snowflake AS x) s").fetchone()
        assert type(id_) is int and id_ == int(text)
        assert worker_of(id_) == WORKER

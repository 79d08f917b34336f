"""psycopg 3 against one edition of snowflake_ext: keys made by the column default, read back
with RETURNING, and a COPY of a million rows that leaves the key out."""

import psycopg
import pytest
from psycopg.types import TypeInfo
from psycopg.types.numeric import Int8BinaryLoader, IntLoader

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
    """The native edition's snowflake type is not int8 to psycopg: its values arrive as str in
    text results and as bytes in binary ones, and snowflake[] as one str, until the type's oid is
    given int8's loaders and its array type registered. Checked against the ids as SQL writes
    them (text), in both formats."""
    rows = 50
    if EDITION == "portable":
        # Not a skip: the portable edition has no such type, and that is what is checked. Its
        # keys are bigint, which psycopg loads as int, alone and in arrays, in both formats.
        assert conn.execute("SELECT to_regtype('snowflake')").fetchone()[0] is None
        for binary in (False, True):
            ids, exact = conn.execute(
                "SELECT array_agg(id ORDER BY id), array_agg(id::text ORDER BY id)"
                " FROM (SELECT snowflake_nextval() AS id FROM generate_series(1, %s)) s",
                (rows,),
                binary=binary,
            ).fetchone()
            assert ids == [int(x) for x in exact] and all(type(i) is int for i in ids)
        return
    # A connection of its own, so that the loaders stay out of the other tests.
    with psycopg.connect(DSN) as conn:
        conn.execute(
            "CREATE TEMPORARY TABLE orders (id snowflake PRIMARY KEY DEFAULT snowflake_nextval())"
        )
        conn.execute("INSERT INTO orders SELECT FROM generate_series(1, %s)", (rows,))
        exact = [int(x) for (x,) in conn.execute("SELECT id::text FROM orders ORDER BY id")]
        assert len(exact) == rows and {worker_of(i) for i in exact} == {WORKER}
        one = "SELECT id FROM orders ORDER BY id LIMIT 1"
        array = "SELECT array_agg(id ORDER BY id) FROM orders"

        # Without the loaders: text, bytes, and the array's text.
        assert conn.execute(one).fetchone()[0] == str(exact[0])
        assert conn.execute(one, binary=True).fetchone()[0] == exact[0].to_bytes(8, "big")
        assert conn.execute(array).fetchone()[0] == "{" + ",".join(map(str, exact)) + "}"

        # README: From your application (psycopg, native edition)
        info = TypeInfo.fetch(conn, "snowflake")
        conn.adapters.register_loader(info.oid, IntLoader)  # text results
        conn.adapters.register_loader(info.oid, Int8BinaryLoader)  # binary results
        info.register(conn)  # snowflake[]: a list of ints, through the loaders above

        for binary in (False, True):
            (first,) = conn.execute(one, binary=binary).fetchone()
            assert type(first) is int and first == exact[0]
            # snowflake[]: a list of ints, in either format.
            (ids,) = conn.execute(array, binary=binary).fetchone()
            assert ids == exact and all(type(i) is int for i in ids)
            # In a binary cursor, the way an application asks for binary results.
            with conn.cursor(binary=True) as cur:
                cur.execute("SELECT id FROM orders ORDER BY id")
                assert [i for (i,) in cur] == exact
            # NULLs inside, and an array of arrays.
            (nested,) = conn.execute(
                "SELECT ARRAY[[%s::snowflake, NULL], [NULL, %s::snowflake]]",
                (exact[0], exact[-1]),
                binary=binary,
            ).fetchone()
            assert nested == [[exact[0], None], [None, exact[-1]]]

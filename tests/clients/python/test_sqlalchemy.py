"""SQLAlchemy 2 (on psycopg 3) against one edition of snowflake_ext: a key column whose
server_default is snowflake_nextval(), read back by a bulk INSERT ... RETURNING and by the ORM
after a flush."""

import pytest
from sqlalchemy import BigInteger, create_engine, event, insert, select, text
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from conftest import DSN, WORKER, fresh_schema, worker_of

ROWS = 2500


class Base(DeclarativeBase):
    pass


# README: From your application (SQLAlchemy)
class Order(Base):
    __tablename__ = "orders"
    id: Mapped[int] = mapped_column(
        BigInteger, primary_key=True, server_default=text("snowflake_nextval()"))
    customer: Mapped[str]


@pytest.fixture(scope="module")
def engine():
    options = fresh_schema("sqlalchemy_client")
    engine = create_engine(
        DSN.replace("postgresql://", "postgresql+psycopg://", 1),
        connect_args={"options": options},
    )
    Base.metadata.create_all(engine)
    yield engine
    engine.dispose()


def test_the_default_is_snowflake_nextval(engine):
    with engine.connect() as c:
        default = c.execute(
            text("SELECT pg_get_expr(adbin, adrelid) FROM pg_attrdef WHERE adrelid = 'orders'::regclass")
        ).scalar_one()
    assert default == "snowflake_nextval()"


def test_bulk_insert_returning(engine):
    names = [f"customer {i}" for i in range(ROWS)]
    statements = []

    def count(conn, cursor, statement, parameters, context, executemany):
        if statement.startswith("INSERT"):
            statements.append(statement)

    event.listen(engine, "before_cursor_execute", count)
    try:
        with Session(engine) as session:
            # README: From your application (SQLAlchemy)
            rows = session.execute(
                insert(Order).returning(Order.id, Order.customer),
                [{"customer": name} for name in names],
            ).all()
            session.commit()
    finally:
        event.remove(engine, "before_cursor_execute", count)

    # insertmanyvalues: a few multi-row INSERTs (1000 rows a page), not one per row.
    assert len(statements) == -(-ROWS // 1000), statements[:1]
    ids = [r.id for r in rows]
    assert len(ids) == ROWS and len(set(ids)) == ROWS
    assert all(type(i) is int and worker_of(i) == WORKER for i in ids)
    # Every (id, customer) that came back is a row of the table, and nothing else is.
    with Session(engine) as session:
        stored = session.execute(select(Order.id, Order.customer)).all()
    assert {(r.id, r.customer) for r in stored} == {(r.id, r.customer) for r in rows}


def test_scalars_returning_ids(engine):
    with Session(engine) as session:
        ids = session.scalars(
            insert(Order).returning(Order.id), [{"customer": "scalar"}] * 300
        ).all()
        session.commit()
        stored = session.scalars(select(Order.id).where(Order.customer == "scalar")).all()
    assert len(ids) == 300 and sorted(ids) == sorted(stored)


def test_flush_reads_the_key_back(engine):
    with Session(engine) as session:
        # README: From your application (SQLAlchemy)
        order = Order(customer="ada")
        session.add(order)
        session.flush()  # order.id is the key the database made

        assert type(order.id) is int and worker_of(order.id) == WORKER
        session.commit()
        key = order.id
    with Session(engine) as session:
        assert session.get(Order, key).customer == "ada"
        # Several objects in one flush: each gets its own key.
        orders = [Order(customer=f"many {i}") for i in range(20)]
        session.add_all(orders)
        session.flush()
        assert len({o.id for o in orders}) == 20
        for o in orders:
            assert session.execute(
                text("SELECT customer FROM orders WHERE id = :id"), {"id": o.id}
            ).scalar_one() == o.customer

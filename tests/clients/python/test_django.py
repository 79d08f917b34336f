"""Django 5 against one edition of snowflake_ext: a primary key whose db_default calls
snowflake_nextval(), read back by create() and by bulk_create().

Django 5.2's bulk_create() does not read back a primary key that has a db_default (its objects
keep the DatabaseDefault placeholder; Django ticket #36260, fixed after 5.2): create() and
save() do. A key field that is a BigAutoField without the identity makes bulk_create() return
the keys too, through the same RETURNING an auto key uses."""

from urllib.parse import unquote, urlsplit

import django
import pytest
from django.conf import settings

from conftest import DSN, WORKER, fresh_schema, worker_of

_url = urlsplit(DSN)
settings.configure(
    DATABASES={
        "default": {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": _url.path.lstrip("/"),
            "USER": unquote(_url.username or ""),
            "PASSWORD": unquote(_url.password or ""),
            "HOST": _url.hostname or "",
            "PORT": str(_url.port or ""),
            "OPTIONS": {"options": fresh_schema("django_client")},
        }
    },
    INSTALLED_APPS=[],
    USE_TZ=True,
)
django.setup()

from django.db import connection, models  # noqa: E402 (needs the settings above)
from django.db.models import Func  # noqa: E402
from django.db.models.expressions import DatabaseDefault  # noqa: E402


# README: From your application (Django)
class Order(models.Model):
    id = models.BigIntegerField(
        primary_key=True,
        db_default=Func(function="snowflake_nextval", output_field=models.BigIntegerField()),
    )
    customer = models.TextField()

    class Meta:
        app_label = "shop"
        db_table = "orders"


# README: From your application (Django)
class SnowflakeKey(models.BigAutoField):
    """A bigint key that the database's default fills in, returned like an auto key."""

    def db_type_suffix(self, connection):
        return None  # no identity: the db_default makes the key

    def get_default(self):
        return None  # so the key is left out of the INSERT and read back with RETURNING


class Invoice(models.Model):
    id = SnowflakeKey(primary_key=True, db_default=Func(function="snowflake_nextval"))
    customer = models.TextField()

    class Meta:
        app_label = "shop"
        db_table = "invoices"


@pytest.fixture(scope="module", autouse=True)
def tables():
    with connection.schema_editor() as editor:
        editor.create_model(Order)
        editor.create_model(Invoice)
    yield
    connection.close()


def column_default(table: str) -> str:
    with connection.cursor() as cur:
        cur.execute(
            "SELECT pg_get_expr(d.adbin, d.adrelid), a.attidentity FROM pg_attrdef d"
            " JOIN pg_attribute a ON a.attrelid = d.adrelid AND a.attnum = d.adnum"
            " WHERE d.adrelid = %s::regclass AND a.attname = 'id'",
            [table],
        )
        return cur.fetchone()


def test_the_tables_default_to_snowflake_nextval():
    # No identity column ('' rather than 'd'): the key comes from the default alone.
    assert column_default("orders") == ("snowflake_nextval()", "")
    assert column_default("invoices") == ("snowflake_nextval()", "")


def test_create_reads_the_key_back():
    # README: From your application (Django)
    order = Order.objects.create(customer="ada")  # order.pk is the key the database made

    assert type(order.pk) is int and worker_of(order.pk) == WORKER
    assert Order.objects.get(pk=order.pk).customer == "ada"
    invoice = Invoice.objects.create(customer="ada")
    assert type(invoice.pk) is int and worker_of(invoice.pk) == WORKER
    assert Invoice.objects.get(pk=invoice.pk).customer == "ada"


def test_bulk_create_returns_the_keys():
    names = [f"customer {i}" for i in range(1500)]
    # README: From your application (Django)
    invoices = Invoice.objects.bulk_create([Invoice(customer=name) for name in names])

    keys = [i.pk for i in invoices]
    assert all(type(k) is int and worker_of(k) == WORKER for k in keys)
    assert len(set(keys)) == len(names)
    # Each object's key is its own row's.
    stored = dict(Invoice.objects.filter(customer__in=names).values_list("id", "customer"))
    assert stored == {i.pk: i.customer for i in invoices}
    assert [i.customer for i in invoices] == names


def test_bulk_create_with_a_db_default_key_leaves_it_unread():
    """What Django 5.2 does with a plain db_default key: the rows get their keys, the objects do
    not learn them. When a Django that reads them back is pinned, this fails: say so in the
    README and drop SnowflakeKey."""
    orders = Order.objects.bulk_create([Order(customer=f"bulk {i}") for i in range(10)])
    assert all(isinstance(o.pk, DatabaseDefault) for o in orders)
    keys = list(Order.objects.filter(customer__startswith="bulk ").values_list("id", flat=True))
    assert len(keys) == 10 and all(worker_of(k) == WORKER for k in keys)

// node-postgres (npm `pg`, pinned in package-lock.json) against one database of snowflake_ext:
// the native edition (the extension, with its `snowflake` type) or the portable one (plain SQL,
// bigint keys only). Run by tests/clients.rs against each; by hand:
//
//   SNOWFLAKE_TEST_DSN=postgresql://app@127.0.0.1:5432/native SNOWFLAKE_EDITION=native \
//   SNOWFLAKE_WORKER_ID=3 node --test tests/clients/node/test.mjs
//
// The README's "From your application" snippets for node appear verbatim below (the python
// suite's test_readme.py checks that).
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import pg from "pg";

function required(name) {
  const value = process.env[name];
  // A missing setting fails: a suite that quietly tested nothing would look like a pass.
  assert.ok(value, `${name} must be set (see the top of ${import.meta.url})`);
  return value;
}

const dsn = required("SNOWFLAKE_TEST_DSN");
const edition = required("SNOWFLAKE_EDITION");
const worker = Number(required("SNOWFLAKE_WORKER_ID"));
assert.ok(["native", "portable"].includes(edition), `SNOWFLAKE_EDITION=${edition}`);

// 2025-01-01 UTC, the epoch of the default layout, in Unix milliseconds.
const EPOCH_MS = 1735689600000n;
const TWO_TO_53 = 2n ** 53n;

let client;

before(async () => {
  client = new pg.Client({ connectionString: dsn });
  await client.connect();
  // A schema of this suite's own, so that it can run beside the python suites in one database.
  await client.query("DROP SCHEMA IF EXISTS node_client CASCADE");
  await client.query("CREATE SCHEMA node_client");
  await client.query("SET search_path = node_client, public");
  // The native edition's key is the snowflake type (a JSON string); the portable edition has no
  // such type, so its key is a bigint.
  const keyType = edition === "native" ? "snowflake" : "bigint";
  await client.query(
    `CREATE TABLE orders (id ${keyType} PRIMARY KEY DEFAULT snowflake_nextval(), v text)`,
  );
  await client.query(
    "CREATE TABLE plain_orders (id bigint PRIMARY KEY DEFAULT snowflake_nextval(), v text)",
  );
});

after(async () => {
  await client?.end();
});

/// The id put together again from what the server decodes of it, independently of its text.
async function recomposed(id) {
  const { rows: [d] } = await client.query(
    "SELECT snowflake_timestamp($1::bigint) AS ts, snowflake_worker($1::bigint) AS w, snowflake_sequence($1::bigint) AS s",
    [id],
  );
  return ((BigInt(d.ts.getTime()) - EPOCH_MS) << 22n) | (BigInt(d.w) << 12n) | BigInt(d.s);
}

test("the edition under test is the one configured", async () => {
  const { rows: [{ t }] } = await client.query("SELECT to_regtype('snowflake') IS NOT NULL AS t");
  assert.equal(t, edition === "native", "the type snowflake exists only in the native edition");
});

test("int8 arrives as a string, exact; it decodes to this worker", async () => {
  // README: From your application (node)
  // node-postgres returns int8 (and the snowflake type) as a string: exact.
  const { rows: [row] } = await client.query(
    "INSERT INTO orders (v) VALUES ($1) RETURNING id", ["book"]);
  const id = BigInt(row.id);

  assert.equal(typeof row.id, "string");
  assert.ok(id > TWO_TO_53, `${id} is above 2^53, where JavaScript numbers stop being exact`);
  assert.equal(await recomposed(row.id), id);
  const { rows: [stored] } = await client.query("SELECT id::text AS exact FROM orders WHERE v = 'book'");
  assert.equal(BigInt(stored.exact), id);
  assert.equal(Number((id >> 12n) & 1023n), worker);
});

test("a bigint column through row_to_json: JSON.parse rounds the ids", async () => {
  // Consecutive ids of one batch: about half of them are odd, and no odd number above 2^53 is a
  // JavaScript number.
  await client.query(
    "INSERT INTO plain_orders (id, v) SELECT id, 'batch' FROM snowflake_nextval_batch(64) id",
  );
  const { rows } = await client.query(
    "SELECT row_to_json(o) AS j, id::text AS exact FROM plain_orders o WHERE v = 'batch' ORDER BY id",
  );
  assert.equal(rows.length, 64);
  let rounded = 0;
  for (const { j, exact } of rows) {
    // node-postgres parses json with JSON.parse, as a browser would.
    assert.equal(typeof j.id, "number");
    assert.ok(!Number.isSafeInteger(j.id));
    // JSON.parse gives the nearest double, which for an odd id is another number.
    assert.equal(j.id, Number(exact));
    if (BigInt(exact) % 2n === 1n) {
      assert.notEqual(BigInt(j.id), BigInt(exact), `${exact} read back as ${BigInt(j.id)}`);
      rounded++;
    }
  }
  assert.ok(rounded > 0, "some odd ids, each rounded");
});

test("snowflake_to_text(id, 'decimal') in JSON arrives exact", async () => {
  const { rows: [row] } = await client.query(
    "INSERT INTO orders (v) VALUES ($1) RETURNING id", ["pen"]);
  const id = BigInt(row.id);

  // README: From your application (node, either edition)
  // snowflake_to_text(id, 'decimal') is a JSON string in either edition.
  const { rows: [{ doc }] } = await client.query(
    "SELECT json_build_object('id', snowflake_to_text(id, 'decimal'), 'v', v) AS doc FROM orders WHERE id = $1",
    [row.id]);
  assert.equal(BigInt(doc.id), id);

  assert.equal(typeof doc.id, "string");
  assert.equal(await recomposed(doc.id), id);
  // And from a bigint column, which both editions have.
  const { rows: [{ j }] } = await client.query(
    "SELECT json_build_object('id', snowflake_to_text(id, 'decimal')) AS j FROM plain_orders WHERE v = 'batch' ORDER BY id DESC LIMIT 1",
  );
  const { rows: [{ exact }] } = await client.query(
    "SELECT max(id)::text AS exact FROM plain_orders WHERE v = 'batch'",
  );
  assert.equal(BigInt(j.id), BigInt(exact));
});

test("a snowflake column through row_to_json arrives exact (native edition)", async () => {
  if (edition !== "native") {
    // Not a skip of something that could run: the portable edition has no snowflake type, which
    // the first test checks.
    assert.equal(edition, "portable");
    return;
  }
  const { rows: [row] } = await client.query(
    "INSERT INTO orders (v) VALUES ($1) RETURNING id", ["ink"]);
  const id = BigInt(row.id);

  // README: From your application (node, native edition)
  // In JSON, a snowflake column is a string.
  const { rows: [{ doc }] } = await client.query(
    "SELECT row_to_json(o) AS doc FROM orders o WHERE id = $1", [row.id]);
  assert.equal(BigInt(doc.id), id);

  assert.equal(typeof doc.id, "string");
  assert.equal(await recomposed(doc.id), id);
  // json_agg of many: every one exact.
  await client.query("INSERT INTO orders (v) SELECT 'many' FROM generate_series(1, 200)");
  const { rows: [{ docs }] } = await client.query(
    "SELECT json_agg(o ORDER BY id) AS docs FROM orders o WHERE v = 'many'",
  );
  const { rows: exact } = await client.query(
    "SELECT id::text AS id FROM orders WHERE v = 'many' ORDER BY id",
  );
  assert.equal(docs.length, 200);
  assert.deepEqual(docs.map((o) => BigInt(o.id)), exact.map((r) => BigInt(r.id)));
});

test("snowflake[] arrives as an array of exact ids once it has int8[]'s parser", async () => {
  // The ids of the table's rows, as SQL writes them: the values the arrays are checked against.
  const { rows: exact } = await client.query("SELECT id::text AS id FROM orders ORDER BY id");
  assert.ok(exact.length > 1);
  const sql =
    "SELECT array_agg(id ORDER BY id) AS ids, (array_agg(id ORDER BY id DESC))[1] AS last FROM orders";
  if (edition === "portable") {
    // No snowflake type: the key is a bigint, and int8[] is node-postgres's array of strings,
    // which the parsers below give snowflake[] in the native edition.
    const { rows: [{ ids }] } = await client.query(sql);
    assert.deepEqual(ids, exact.map((r) => r.id));
    return;
  }
  // Without a parser, node-postgres hands over the array's text: one string, "{...}".
  const { rows: [before] } = await client.query(sql);
  assert.equal(typeof before.ids, "string");
  assert.match(before.ids, /^\{\d+(,\d+)*\}$/);

  // README: From your application (node, native edition)
  // snowflake and snowflake[] parsed as int8 and int8[] are (strings: exact). The oids are the
  // database's: look them up once it has the extension.
  const { rows: [t] } = await client.query(
    "SELECT 'snowflake'::regtype::oid AS oid, 'snowflake[]'::regtype::oid AS array_oid");
  pg.types.setTypeParser(t.oid, pg.types.getTypeParser(20));
  pg.types.setTypeParser(t.array_oid, pg.types.getTypeParser(1016));
  const { rows: [{ ids }] } = await client.query(
    "SELECT array_agg(id ORDER BY id) AS ids FROM orders");
  const numbers = ids.map(BigInt);

  assert.ok(Array.isArray(ids));
  assert.deepEqual(ids, exact.map((r) => r.id));
  assert.deepEqual(numbers, exact.map((r) => BigInt(r.id)));
  assert.ok(numbers.every((n) => n > TWO_TO_53));
  // The type itself (an element of the array), as before: a string, exact.
  const { rows: [{ last }] } = await client.query(sql);
  assert.equal(typeof last, "string");
  assert.equal(last, exact.at(-1).id);
  // NULLs inside an array, and an array of arrays.
  const { rows: [{ a }] } = await client.query(
    "SELECT ARRAY[[$1::snowflake, NULL], [NULL, $1::snowflake]] AS a", [exact[0].id]);
  assert.deepEqual(a, [[exact[0].id, null], [null, exact[0].id]]);
  // A new client of the same process parses them too: pg.types is every client's and pool's.
  const other = new pg.Client({ connectionString: dsn });
  await other.connect();
  try {
    const { rows: [{ ids: again }] } = await other.query(
      "SELECT array_agg(id ORDER BY id) AS ids FROM node_client.orders");
    assert.deepEqual(again, ids);
  } finally {
    await other.end();
  }
});

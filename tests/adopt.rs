//! Moving existing tables onto snowflake ids with `snowflake_adopt`, and the worker-id report.

mod common;

use common::*;

fn default_of(c: &mut postgres::Client, table: &str, col: &str) -> Option<String> {
    c.query_one(
        "SELECT pg_get_expr(d.adbin, d.adrelid) FROM pg_attribute a
         LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
         WHERE a.attrelid = $1::text::regclass AND a.attname = $2::text",
        &[&table, &col],
    )
    .unwrap()
    .get(0)
}

#[test]
fn adopting_keeps_rows_switches_the_default_and_is_safe_twice() {
    let cluster = started("adopt", &["snowflake.worker_id=6"]);
    let mut c = cluster.connect();
    c.batch_execute(
        "CREATE TABLE orders (id bigserial PRIMARY KEY, item text);
         INSERT INTO orders (item) SELECT 'old ' || g FROM generate_series(1, 1000) g;
         CREATE TABLE \"Mixed Case\" (\"Id\" bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, v int);
         INSERT INTO \"Mixed Case\" (v) SELECT g FROM generate_series(1, 10) g;",
    )
    .unwrap();

    // A bigserial column with rows.
    let msg: String = c
        .query_one("SELECT snowflake_adopt('orders', 'id')", &[])
        .unwrap()
        .get(0);
    assert!(
        msg.contains("now takes DEFAULT public.snowflake_nextval()"),
        "{msg}"
    );
    assert_eq!(
        default_of(&mut c, "orders", "id").unwrap(),
        "snowflake_nextval()"
    );
    c.batch_execute("INSERT INTO orders (item) SELECT 'new ' || g FROM generate_series(1, 1000) g")
        .unwrap();
    let row = c
        .query_one(
            "SELECT count(*) FILTER (WHERE item LIKE 'old %' AND id BETWEEN 1 AND 1000),
                    count(*) FILTER (WHERE item LIKE 'new %' AND snowflake_worker(id) = 6
                                     AND id > snowflake_min_id(now() - interval '1 minute'))
             FROM orders",
            &[],
        )
        .unwrap();
    assert_eq!((row.get::<_, i64>(0), row.get::<_, i64>(1)), (1000, 1000));

    // Twice: nothing changes, no error.
    let msg: String = c
        .query_one("SELECT snowflake_adopt('orders', 'id')", &[])
        .unwrap()
        .get(0);
    assert!(msg.contains("already takes snowflake ids"), "{msg}");

    // An identity column (GENERATED ALWAYS) in a quoted, mixed-case table, with a worker given.
    let msg: String = c
        .query_one("SELECT snowflake_adopt('\"Mixed Case\"', 'Id', 9)", &[])
        .unwrap()
        .get(0);
    assert!(msg.contains("snowflake_nextval(9)"), "{msg}");
    assert_eq!(
        default_of(&mut c, "\"Mixed Case\"", "Id").unwrap(),
        "snowflake_nextval(9)"
    );
    let identity: String = c
        .query_one("SELECT attidentity::text FROM pg_attribute WHERE attrelid = '\"Mixed Case\"'::regclass AND attname = 'Id'", &[])
        .unwrap()
        .get(0);
    assert_eq!(identity, "");
    c.batch_execute("INSERT INTO \"Mixed Case\" (v) VALUES (11), (12)")
        .unwrap();
    let workers: Vec<i32> = c
        .query(
            "SELECT snowflake_worker(\"Id\") FROM \"Mixed Case\" WHERE v > 10",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(workers, vec![9, 9]);
    let kept: i64 = c
        .query_one(
            "SELECT count(*) FROM \"Mixed Case\" WHERE \"Id\" <= 10",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(kept, 10);
}

#[test]
fn adopting_refuses_what_would_not_be_safe() {
    let cluster = started("adopt-refused", &["snowflake.worker_id=6"]);
    let mut c = cluster.connect();
    c.batch_execute(
        "CREATE TABLE small (id serial PRIMARY KEY);
         CREATE TABLE loose (id bigserial, v int);
         CREATE TABLE big (id bigint PRIMARY KEY);
         INSERT INTO big VALUES (1), (9000000000000000000);
         CREATE TABLE pair (a bigint, b bigint, PRIMARY KEY (a, b));",
    )
    .unwrap();
    let cases: &[(&str, &str, &str)] = &[
        (
            "SELECT snowflake_adopt('small', 'id')",
            "42804",
            "column id of table public.small is integer, not bigint",
        ),
        (
            "SELECT snowflake_adopt('loose', 'id')",
            "42P16",
            "column id of table public.loose is not a key",
        ),
        (
            "SELECT snowflake_adopt('pair', 'a')",
            "42P16",
            "column a of table public.pair is not a key",
        ),
        (
            "SELECT snowflake_adopt('big', 'id')",
            "55000",
            "holds values up to 9000000000000000000",
        ),
        (
            "SELECT snowflake_adopt('small', 'nope')",
            "42703",
            "column nope of table public.small does not exist",
        ),
        (
            "SELECT snowflake_adopt('small', 'id', 4096)",
            "22003",
            "worker id 4096 is out of range",
        ),
        (
            "SELECT snowflake_adopt('no_such_table', 'id')",
            "42P01",
            "no_such_table",
        ),
    ];
    for &(sql, code, message) in cases {
        let e = error_of(&mut c, sql);
        assert_eq!(e.code, code, "{sql}: {e:?}");
        assert!(e.message.contains(message), "{sql}: {e:?}");
        if code != "42P01" {
            assert!(e.hint.is_some(), "{sql}: no hint: {e:?}");
        }
    }
    // Nothing was changed by the refusals.
    assert!(default_of(&mut c, "small", "id")
        .unwrap()
        .starts_with("nextval("));
    assert_eq!(default_of(&mut c, "big", "id"), None);
}

#[test]
fn adopting_without_a_worker_id_is_refused_until_one_is_set() {
    let cluster = started("adopt-unset", &[]);
    let mut c = cluster.connect();
    c.batch_execute("CREATE TABLE t (id bigserial PRIMARY KEY)")
        .unwrap();
    let e = error_of(&mut c, "SELECT snowflake_adopt('t', 'id')");
    assert_eq!(e.code, "55000", "{e:?}");
    assert!(
        e.message.contains("snowflake.worker_id is not set"),
        "{e:?}"
    );

    // The report of the worker id follows the configuration.
    let row = c
        .query_one(
            "SELECT worker_id, is_set, preloaded FROM snowflake_worker_id()",
            &[],
        )
        .unwrap();
    assert_eq!(
        (
            row.get::<_, Option<i32>>(0),
            row.get::<_, bool>(1),
            row.get::<_, bool>(2)
        ),
        (None, false, true)
    );
    cluster.set_and_reload("snowflake.worker_id", "77");
    let mut c = cluster.connect();
    let row = c
        .query_one("SELECT worker_id, is_set FROM snowflake_worker_id()", &[])
        .unwrap();
    assert_eq!(
        (row.get::<_, Option<i32>>(0), row.get::<_, bool>(1)),
        (Some(77), true)
    );
    let msg: String = c
        .query_one("SELECT snowflake_adopt('t', 'id')", &[])
        .unwrap()
        .get(0);
    assert!(msg.contains("snowflake_nextval()"), "{msg}");
}

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
    let msg: String = c.scalar("SELECT snowflake_adopt('orders', 'id')");
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
    let msg: String = c.scalar("SELECT snowflake_adopt('orders', 'id')");
    assert!(msg.contains("already takes snowflake ids"), "{msg}");

    // An identity column (GENERATED ALWAYS) in a quoted, mixed-case table, with a worker given.
    let msg: String = c.scalar("SELECT snowflake_adopt('\"Mixed Case\"', 'Id', 9)");
    assert!(msg.contains("snowflake_nextval(9)"), "{msg}");
    assert_eq!(
        default_of(&mut c, "\"Mixed Case\"", "Id").unwrap(),
        "snowflake_nextval(9)"
    );
    let identity: String = c
        .scalar("SELECT attidentity::text FROM pg_attribute WHERE attrelid = '\"Mixed Case\"'::regclass AND attname = 'Id'");
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
    let kept: i64 = c.scalar("SELECT count(*) FROM \"Mixed Case\" WHERE \"Id\" <= 10");
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
    let msg: String = c.scalar("SELECT snowflake_adopt('t', 'id')");
    assert!(msg.contains("snowflake_nextval()"), "{msg}");
}

/// A table owner who may not mint with an explicit worker id cannot adopt with one: the
/// default would fail every insert. Without a worker id, or once granted, it works.
#[test]
fn adopting_with_a_worker_id_the_owner_may_not_use_is_refused() {
    let cluster = started("adopt-ungranted", &["snowflake.worker_id=6"]);
    app_database(&cluster, "shop");
    let mut admin = cluster.connect_to("shop");
    admin
        .batch_execute("CREATE EXTENSION snowflake_ext")
        .unwrap();
    let mut app = connect_as(&cluster, "shop", "app");
    app.batch_execute("CREATE TABLE public.app_own (id bigserial PRIMARY KEY, v int)")
        .unwrap();
    let e = error_of(
        &mut app,
        "SELECT snowflake_adopt('public.app_own', 'id', 7)",
    );
    assert_eq!(e.code, "42501", "{e:?}");
    assert!(e.message.contains("snowflake_nextval(7)"), "{e:?}");
    assert!(
        e.hint.as_deref().unwrap_or("").contains("GRANT EXECUTE"),
        "{e:?}"
    );
    // Nothing changed: inserts still take the sequence.
    let id: i64 = app.scalar("INSERT INTO public.app_own (v) VALUES (1) RETURNING id");
    assert_eq!(id, 1);

    admin
        .batch_execute("GRANT EXECUTE ON FUNCTION snowflake_nextval(integer) TO app")
        .unwrap();
    app.scalar::<String>("SELECT snowflake_adopt('public.app_own', 'id', 7)");
    let id: i64 = app.scalar("INSERT INTO public.app_own (v) VALUES (2) RETURNING id");
    assert_eq!(worker_of(id), 7);
}

/// Which columns hold snowflake ids is found, never guessed: `snowflake_restore_mark(tables)`,
/// `snowflake_guard` and `snowflake_adopt` take a `snowflake`-typed key like a `bigint` one,
/// look past a bigserial beside it, and refuse a column whose default makes ids that its type
/// cannot hold.
#[test]
fn id_columns_are_found_never_guessed() {
    let cluster = started("id-columns", &["snowflake.worker_id=6"]);
    let mut c = cluster.connect();
    c.batch_execute(
        "CREATE TABLE orders (id snowflake PRIMARY KEY DEFAULT snowflake_nextval(), n bigserial, v text);
         CREATE TABLE serials (id bigserial PRIMARY KEY, v text);
         CREATE TABLE texts (id text PRIMARY KEY DEFAULT snowflake_nextval()::text);
         CREATE TABLE two (a bigint DEFAULT snowflake_nextval(), b snowflake DEFAULT snowflake_nextval(3));
         CREATE TABLE batched (id bigint PRIMARY KEY, v text);
         CREATE SEQUENCE s;
         CREATE TABLE typed (id snowflake PRIMARY KEY DEFAULT nextval('s'), v text);
         INSERT INTO typed (v) VALUES ('a'), ('b');",
    )
    .unwrap();
    let columns = |c: &mut postgres::Client, table: &str| -> Vec<(String, String, bool)> {
        c.query(
            "SELECT col, type, readable FROM snowflake_id_columns($1::text::regclass)",
            &[&table],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect()
    };
    let found = |name: &str, ty: &str, readable| (name.to_string(), ty.to_string(), readable);
    assert_eq!(
        columns(&mut c, "orders"),
        vec![found("id", "snowflake", true)]
    );
    assert_eq!(columns(&mut c, "serials"), vec![]);
    assert_eq!(columns(&mut c, "texts"), vec![found("id", "text", false)]);
    assert_eq!(
        columns(&mut c, "two"),
        vec![found("a", "bigint", true), found("b", "snowflake", true)]
    );
    assert_eq!(
        columns(&mut c, "batched"),
        vec![found("id", "bigint", true)]
    );

    // Rows restored from another server whose ids run an hour ahead of this one's clock: the
    // marks are restored above them, from the snowflake column and not from the bigserial.
    c.batch_execute(
        "INSERT INTO orders (id, v)
         SELECT snowflake_compose(now() + interval '1 hour', 9, g), 'restored' FROM generate_series(1, 2000) g;",
    )
    .unwrap();
    let restored: i64 = c.scalar("SELECT max(id)::bigint FROM orders");
    c.query_one(
        "SELECT snowflake_restore_mark(ARRAY['orders']::regclass[])",
        &[],
    )
    .unwrap();
    let new: Vec<i64> = c
        .query(
            "INSERT INTO orders (v) SELECT 'new' FROM generate_series(1, 2000) RETURNING id::bigint",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert!(
        new.iter().all(|&id| id > restored),
        "new ids below the restored ones"
    );
    // Both columns of `two` are read.
    c.batch_execute(
        "INSERT INTO two (a, b) VALUES (1, snowflake_compose(now() + interval '2 hours', 3, 0))",
    )
    .unwrap();
    let highest: i64 = c.scalar("SELECT max(b)::bigint FROM two");
    let next: i64 = c.scalar("SELECT snowflake_restore_mark(ARRAY['two']::regclass[])");
    assert!(next > highest, "{next} <= {highest}");

    // Refusals: no id column, a column that cannot be read, several to choose from.
    for (sql, code, message) in [
        (
            "SELECT snowflake_restore_mark(ARRAY['serials']::regclass[])",
            "42703",
            "table public.serials has no snowflake id column",
        ),
        (
            "SELECT snowflake_restore_mark(ARRAY['texts']::regclass[])",
            "42804",
            "its type text cannot be read as ids",
        ),
        (
            "SELECT snowflake_guard('serials')",
            "42703",
            "table public.serials has no snowflake id column",
        ),
        (
            "SELECT snowflake_guard('texts')",
            "42804",
            "its type text cannot be read as ids",
        ),
        (
            "SELECT snowflake_guard('two')",
            "42702",
            "table public.two has several snowflake id columns: a, b",
        ),
    ] {
        let e = error_of(&mut c, sql);
        assert_eq!(e.code, code, "{sql}: {e:?}");
        assert!(e.message.contains(message), "{sql}: {e:?}");
        assert!(e.hint.is_some(), "{sql}: {e:?}");
    }

    // The guard on a snowflake-typed column reads it like a bigint: a row arriving with this
    // server's worker id is stopped.
    c.batch_execute("SELECT snowflake_guard('orders')").unwrap();
    let e = error_of(
        &mut c,
        "SET session_replication_role = replica;
         INSERT INTO orders (id, v) VALUES (snowflake_compose(now(), 6, 1), 'twin')",
    );
    assert_eq!(e.code, "23000", "{e:?}");
    c.batch_execute(
        "ROLLBACK; SET session_replication_role = replica;
         INSERT INTO orders (id, v) VALUES (snowflake_compose(now(), 7, 1), 'other server');
         RESET session_replication_role;",
    )
    .unwrap();

    // A snowflake-typed key on a sequence is adopted like a bigint one.
    c.batch_execute("SELECT snowflake_adopt('typed', 'id')")
        .unwrap();
    assert_eq!(
        default_of(&mut c, "typed", "id").as_deref(),
        Some("snowflake_nextval()")
    );
    let id: i64 = c.scalar("INSERT INTO typed (v) VALUES ('c') RETURNING id::bigint");
    let worker: i32 = c
        .query_one("SELECT snowflake_worker($1)", &[&id])
        .unwrap()
        .get(0);
    assert_eq!(worker, 6);
}

//! `snowflake_adopt(tbl, col, worker)`: moves an existing bigserial or identity key column onto
//! snowflake ids. It is DDL orchestration (catalog checks, a lock, `ALTER TABLE`), which reads
//! best as PL/pgSQL: see `sql/install/adopt.sql`.

pgrx::extension_sql_file!(
    "../../sql/install/adopt.sql",
    name = "snowflake_adopt",
    requires = [
        snowflake_compose,
        snowflake_timestamp,
        snowflake_nextval_configured,
        snowflake_nextval_worker
    ]
);

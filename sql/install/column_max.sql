-- snowflake_column_max(regclass, text): snowflake_adopt's scan for a column's largest value,
-- with the table owner's rights. Its C function is in src/tables/owner_scan.rs; it is declared
-- here because pgrx would declare the table argument as oid.

CREATE FUNCTION snowflake_column_max(tbl regclass, col text) RETURNS bigint
VOLATILE STRICT PARALLEL UNSAFE
LANGUAGE c AS 'MODULE_PATHNAME', 'snowflake_column_max_wrapper';
COMMENT ON FUNCTION snowflake_column_max(regclass, text) IS
    'The largest value of a bigint column, read with the table owner''s rights in a security-restricted operation (used by snowflake_adopt); only the owner or a superuser may call it.';

-- snowflake_id_columns(regclass): the columns of a table that hold snowflake ids. Its C function
-- is in src/tables/id_columns.rs; it is declared here because pgrx would declare the argument as
-- oid, and a regclass reads better and is stored the same.

CREATE FUNCTION snowflake_id_columns(tbl regclass)
RETURNS TABLE(col text, type text, readable boolean)
STABLE STRICT PARALLEL SAFE
LANGUAGE c AS 'MODULE_PATHNAME', 'snowflake_id_columns_wrapper';
COMMENT ON FUNCTION snowflake_id_columns(regclass) IS
    'The columns of a table that hold snowflake ids: those whose default calls snowflake_nextval (readable: of type bigint or snowflake), else its one-column bigint or snowflake primary key without a default. snowflake_restore_mark(tables) and snowflake_guard use it.';

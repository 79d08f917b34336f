-- snowflake_restore_mark(regclass[]): every worker's ids from now on are above the largest id
-- in these tables. Its C function is snowflake_restore_mark_from in src/marks/admin.rs; it is
-- declared here because pgrx would declare the argument as oid[], and a regclass[] reads
-- better and is stored the same.

CREATE FUNCTION snowflake_restore_mark(tables regclass[]) RETURNS bigint
VOLATILE PARALLEL UNSAFE
LANGUAGE c AS 'MODULE_PATHNAME', 'snowflake_restore_mark_from_wrapper';

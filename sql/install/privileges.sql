-- Who may call what (src/tables/privileges.rs, which explains each choice): revokes from PUBLIC
-- and grants to pg_monitor, run after everything else is created (finalize).

REVOKE EXECUTE ON FUNCTION @extschema@.snowflake_nextval(integer) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION @extschema@.snowflake_nextval_batch(integer, integer) FROM PUBLIC;

REVOKE EXECUTE ON FUNCTION @extschema@.snowflake_stats() FROM PUBLIC;
REVOKE ALL ON @extschema@.snowflake_stats FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION @extschema@.snowflake_status() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION @extschema@.snowflake_stats() TO pg_monitor;
GRANT SELECT ON @extschema@.snowflake_stats TO pg_monitor;
GRANT EXECUTE ON FUNCTION @extschema@.snowflake_status() TO pg_monitor;

REVOKE EXECUTE ON FUNCTION @extschema@.snowflake_restore_mark(bigint) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION @extschema@.snowflake_restore_mark(integer, bigint) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION @extschema@.snowflake_restore_mark(regclass[]) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION @extschema@.snowflake_rewind(integer) FROM PUBLIC;

REVOKE EXECUTE ON FUNCTION @extschema@.snowflake_nextval_at(timestamp with time zone) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION @extschema@.snowflake_nextval_at_batch(timestamp with time zone[]) FROM PUBLIC;

-- snowflake_ext 0.5.0 to 0.6.0.
--
-- * Ids for past times (docs/past-ids.md): snowflake_nextval_at(timestamptz) and
--   snowflake_nextval_at_batch(timestamptz[]), SECURITY DEFINER, EXECUTE revoked from PUBLIC, and
--   their record, the table snowflake_past_use, readable by all, written by them only,
--   dumped by pg_dump with the data. They mint with the worker id
--   in snowflake.past_worker_id, a setting of the 0.6.0 library.
-- Nothing is replaced or dropped, grants stay.

CREATE TABLE snowflake_past_use (
    worker integer NOT NULL,
    unit bigint NOT NULL,
    used bigint NOT NULL CHECK (used > 0),
    PRIMARY KEY (worker, unit)
);
REVOKE ALL ON snowflake_past_use FROM PUBLIC;
-- Readable by all (it says only how many ids each past time unit has used), so that any
-- role that can dump a database can dump it; and dumped with the data (a configuration
-- table of the extension), so that a database restored from a dump continues above the
-- ids for past times its rows carry, as a sequence's dump continues above its values.
GRANT SELECT ON snowflake_past_use TO PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('snowflake_past_use', '');
COMMENT ON TABLE snowflake_past_use IS
    'How many sequence numbers of each time unit (of snowflake.layout) the worker id reserved for past times (snowflake.past_worker_id) has used: written by snowflake_nextval_at only.';

CREATE FUNCTION "snowflake_nextval_at"(
	"ts" timestamp with time zone
) RETURNS bigint
STRICT VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c
AS 'MODULE_PATHNAME', 'snowflake_nextval_at_wrapper';

CREATE FUNCTION "snowflake_nextval_at_batch"(
	"ts" timestamp with time zone[]
) RETURNS bigint[]
STRICT VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c
AS 'MODULE_PATHNAME', 'snowflake_nextval_at_batch_wrapper';

REVOKE EXECUTE ON FUNCTION @extschema@.snowflake_nextval_at(timestamp with time zone) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION @extschema@.snowflake_nextval_at_batch(timestamp with time zone[]) FROM PUBLIC;

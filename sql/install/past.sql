-- The record of what each time unit of the worker id reserved for past times has used
-- (src/past.rs): one row per (worker, time unit of the layout), `used` sequence numbers taken.
-- Written only by snowflake_nextval_at (SECURITY DEFINER), in its caller's transaction; no
-- role is granted more than SELECT on it.

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

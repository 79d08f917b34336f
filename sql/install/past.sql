-- The record of what each time unit of the worker id reserved for past times has used
-- (src/past.rs): one row per (worker, time unit of the layout), `used` sequence numbers taken.
-- Written only by snowflake_nextval_at (SECURITY DEFINER), in its caller's transaction; no
-- role is granted anything on it.

CREATE TABLE snowflake_past_use (
    worker integer NOT NULL,
    unit bigint NOT NULL,
    used bigint NOT NULL CHECK (used > 0),
    PRIMARY KEY (worker, unit)
);
REVOKE ALL ON snowflake_past_use FROM PUBLIC;
COMMENT ON TABLE snowflake_past_use IS
    'How many sequence numbers of each time unit (of snowflake.layout) the worker id reserved for past times (snowflake.past_worker_id) has used: written by snowflake_nextval_at only.';

-- The worker-id registry of snowflake_ext: one row per worker id in table
-- snowflake_registry.leases, in a database the whole fleet reaches (snowflake.registry). Any
-- PostgreSQL 14 to 18 serves, with or without snowflake_ext installed.
--
-- The first server that claims a worker id creates this schema if it is missing (its registry
-- role then needs CREATE on the database). To create it by hand instead, run this file as a
-- role that may, then give the fleet's role only what it needs:
--
--   psql -d registry -f sql/registry.sql
--   GRANT USAGE ON SCHEMA snowflake_registry TO fleet;
--   GRANT SELECT, INSERT, UPDATE ON snowflake_registry.leases, snowflake_registry.superseded TO fleet;
--
-- Running it again changes nothing. Every id a holder of a worker id may issue is below its
-- last_mark, which the holder records before it uses it; the next holder starts above it.

CREATE SCHEMA IF NOT EXISTS snowflake_registry;

CREATE TABLE IF NOT EXISTS snowflake_registry.leases (
  worker            integer PRIMARY KEY,
  -- The holder: the server's system identifier, host name, port and data directory.
  system_identifier text,
  host              text,
  port              integer,
  data_directory    text,
  -- The holder's timeline, and a number drawn at each start of its postmaster.
  timeline          integer,
  boot              text,
  -- Raised at every claim and renewal.
  fence             bigint NOT NULL DEFAULT 0,
  since             timestamptz,
  renewed_at        timestamptz,
  expires_at        timestamptz,
  -- Every id of this worker ever issued is below this id.
  last_mark         bigint,
  -- Set when the holder stopped cleanly, or by hand: the worker id is free.
  released_at       timestamptz
);

-- Servers replaced by a standby promoted after them (a later timeline of the same system):
-- they may lease no worker id again, so a server brought back beside its successor mints
-- nothing. Delete its row to let it lease again.
CREATE TABLE IF NOT EXISTS snowflake_registry.superseded (
  system_identifier text NOT NULL,
  host              text NOT NULL,
  port              integer NOT NULL,
  data_directory    text NOT NULL,
  timeline          integer NOT NULL,
  worker            integer NOT NULL,
  successor         text NOT NULL,
  at                timestamptz NOT NULL DEFAULT pg_catalog.now(),
  PRIMARY KEY (system_identifier, host, port, data_directory)
);

CREATE OR REPLACE VIEW snowflake_registry.lease_list AS
SELECT worker,
       host, port, data_directory, system_identifier, timeline,
       since, renewed_at, expires_at, last_mark,
       CASE WHEN system_identifier IS NULL THEN 'never held'
            WHEN released_at IS NOT NULL THEN 'released'
            WHEN expires_at < pg_catalog.now() THEN 'expired'
            ELSE 'held' END AS state,
       released_at
  FROM snowflake_registry.leases;

COMMENT ON TABLE snowflake_registry.leases IS
  'snowflake_ext: worker ids leased by the servers of a fleet (snowflake.worker_id = ''auto''). Release one by hand with UPDATE snowflake_registry.leases SET released_at = now() WHERE worker = N; its holder stops minting at its next renewal.';

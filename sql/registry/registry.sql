-- The worker-id registry of snowflake_ext (registry format 4): a schema snowflake_registry in a
-- database the whole fleet reaches (snowflake.registry). Any PostgreSQL 14 to 18 serves, with or
-- without snowflake_ext installed.
--
-- Install it, and run it again after an upgrade of snowflake_ext (it keeps every lease), as the
-- role that is to own the registry (not the fleet's login role):
--
--   psql -v ON_ERROR_STOP=1 -1 -d registry -f registry.sql
--   SELECT snowflake_registry.grant_fleet('fleet');
--
-- The protocol runs here, in functions that run as the registry's owner; the fleet's role may
-- only call them (grant_fleet gives EXECUTE on claim, confirm, renew, release and identity, and
-- SELECT on the lease_list view) and can write no table itself, so a leaked fleet password
-- cannot hand a live worker id to another server. The functions refuse a caller that could.
--
-- The rules, which every function enforces (snowflake_core::lease has the holder's side):
--
-- * A holder renews every third of its TTL (snowflake.lease_ttl, at most the registry's
--   lock_delay) and stops minting on its own boot clock before its lease could end, counted
--   from when it *sent* the request that last renewed it. Each renewal records the holder's cap
--   (last_mark): the holder never issues past it, and the next holder starts above it.
-- * A worker id changes hands at once only on proof that nobody else holds it, never on this
--   registry's word alone where a restore could have lost what it wrote: the claimer's own
--   record of a lease that still runs by its boot clock (an earlier start on the same machine
--   run, bringing the fence it was given), or a release by its holder, or a worker id never
--   held, each written in the registry's current incarnation (incarnation()). In every other
--   case the claimer waits, on its own boot clock, at least the longest lease its last holder
--   could still be counting (the larger of that holder's TTL and lock_delay), then confirms
--   (confirm): Chubby's lock-delay. A holder that renews meanwhile keeps the worker id, and the
--   claimer's confirmation fails. A lease is renewed only while it runs here. The lease model
--   in snowflake_core (core/src/lease_model.rs) states these rules and checks them.
-- * A registry restored from a copy, or failed over to a standby that had not received
--   everything, needs nothing done: what it may have lost proves nothing here (the rule
--   above), so a holder whose fence it lost is told `lost` and claims again through the
--   lock-delay, like a claimer of a worker id whose release it lost. (Until registry format 3
--   an epoch that every call raised froze the registry until recover(); anyone with the
--   fleet's password could raise it, and the lease model shows the freeze bought no safety.)
-- * A server that last leased from another registry is refused unless this one imported that
--   registry's leases (export/import, to move a fleet) or an administrator accepted it.

SET client_min_messages = warning;

CREATE SCHEMA IF NOT EXISTS snowflake_registry;
REVOKE ALL ON SCHEMA snowflake_registry FROM PUBLIC;

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
  -- Set when the worker id was given back: by its holder (with its final mark), by an
  -- administrator, or because a standby promoted after its holder superseded it.
  released_at       timestamptz
);
ALTER TABLE snowflake_registry.leases
  -- The machine run the holder's postmaster started on: its kernel's boot id and its mount,
  -- network and IPC namespaces.
  ADD COLUMN IF NOT EXISTS host_run        text,
  -- The holder's lease, as it counts it (milliseconds).
  ADD COLUMN IF NOT EXISTS ttl_ms          integer,
  ADD COLUMN IF NOT EXISTS released_by     text,
  -- The holder's clock minus the registry's, at its last claim or renewal.
  ADD COLUMN IF NOT EXISTS skew_ms         integer,
  -- A claim waiting out the lock-delay: who, with which token, since when, for how long.
  ADD COLUMN IF NOT EXISTS pending_key     text,
  ADD COLUMN IF NOT EXISTS pending_holder  text,
  ADD COLUMN IF NOT EXISTS pending_token   bigint,
  ADD COLUMN IF NOT EXISTS pending_since   timestamptz,
  ADD COLUMN IF NOT EXISTS pending_wait_ms bigint,
  -- Another start of the holder's own identity tried to take this worker id while it was held
  -- (a copy of the server: a VM snapshot, a copied data directory on a host of the same name).
  ADD COLUMN IF NOT EXISTS contested_at    timestamptz,
  ADD COLUMN IF NOT EXISTS contested_by    text,
  -- A holder of the same identity found this lease taken by another start of it, and stopped:
  -- the start that holds it stops too at its next renewal (a copy of the server never takes
  -- turns with the original).
  ADD COLUMN IF NOT EXISTS displaced_at    timestamptz,
  ADD COLUMN IF NOT EXISTS displaced_by    text,
  -- Imported from the registry this one took over from, where it was held at the export: only
  -- its holder may take it until that registry is retired.
  ADD COLUMN IF NOT EXISTS elsewhere       boolean NOT NULL DEFAULT false,
  -- The SHA-256 of the holder's own secret (a random value kept in its data directory, readable
  -- only by its server): what proves that a caller is that server, not someone who read its
  -- identity in lease_list and has the fleet's password.
  ADD COLUMN IF NOT EXISTS secret_hash     bytea,
  -- The request that last renewed the lease: the holder asks again with it when the answer
  -- was lost, and is answered as the first time (not taken for a copy of itself).
  ADD COLUMN IF NOT EXISTS last_request    bigint,
  -- What proves the row's last write was made here, in this incarnation, and nothing changed
  -- it since: incarnation() and the writing transaction's id (proof()), written with the row's
  -- release, its creation and a pending claim; the row is untouched() while its xmin is that
  -- transaction's. A restored copy (a new incarnation) and a dump loaded into the same tables
  -- (new xmins) prove nothing.
  ADD COLUMN IF NOT EXISTS proof           text,
  -- The proof of the holder's last grant or renewal: a release is the registry's word that
  -- nobody holds the worker id (proof) only if that grant or renewal is the row's last write,
  -- in this incarnation. A release asked again after a restore, of a lease the copy still has
  -- as held, would otherwise hand the worker id over at once while the server granted it in
  -- the lost history mints (the lease model found this).
  ADD COLUMN IF NOT EXISTS held_proof      text,
  -- registry format 2's recover(): see config below
  DROP COLUMN IF EXISTS min_start_at, DROP COLUMN IF EXISTS recovered_at;


-- The registry itself: one row.
CREATE TABLE IF NOT EXISTS snowflake_registry.config (
  one                      boolean PRIMARY KEY DEFAULT true CHECK (one),
  format                   integer NOT NULL DEFAULT 4,
  registry_id              uuid NOT NULL DEFAULT pg_catalog.gen_random_uuid(),
  -- Read by servers before registry format 3; no longer changed.
  epoch                    bigint NOT NULL DEFAULT 0,
  -- The longest lease a server may take, and the least a claimer waits before it takes over
  -- a worker id whose holder did not give it back.
  lock_delay_ms            integer NOT NULL DEFAULT 30000 CHECK (lock_delay_ms BETWEEN 5000 AND 3600000),
  -- The largest difference between a claimer's clock and the registry's that a claim accepts.
  max_skew_ms              integer NOT NULL DEFAULT 1000 CHECK (max_skew_ms BETWEEN 10 AND 60000),
  -- Registries whose servers this one accepts (imported or accepted by an administrator).
  accepts                  uuid[] NOT NULL DEFAULT '{}',
  predecessor              uuid,
  -- Exported to a successor: no new claims here.
  moved_to                 uuid,
  moved_at                 timestamptz,
  created_at               timestamptz NOT NULL DEFAULT pg_catalog.now()
);
ALTER TABLE snowflake_registry.config
  -- When the leases last imported (import) were exported from the predecessor: a lease held
  -- there then may have been renewed there since.
  ADD COLUMN IF NOT EXISTS predecessor_exported_at timestamptz,
  -- Registry format 2's freeze, recover() and caution after a change of its server: none kept
  -- the invariant that the incarnation rules do not (the lease model).
  DROP COLUMN IF EXISTS frozen_at, DROP COLUMN IF EXISTS frozen_epoch, DROP COLUMN IF EXISTS frozen_reason,
  DROP COLUMN IF EXISTS server_system_identifier, DROP COLUMN IF EXISTS server_timeline,
  DROP COLUMN IF EXISTS cautious_until, DROP COLUMN IF EXISTS server_changed_at;

-- The registry's incarnation: one run of one copy of it. Every restore of a base backup (even
-- on the same timeline), every failover and every restart of its server changes it (the system
-- identifier, the postmaster's start time, the leases table's OID); within one, with every
-- answer committed durably (open() refuses synchronous_commit = off), nothing it wrote can be
-- lost. A dump loaded back into the same tables keeps it: the transaction id beside it in a
-- row's proof tells (untouched()). The registry's word that a worker id is free (never held, or
-- given back by its holder) is proof only when written in the incarnation that reads it and
-- untouched since: a copy restored without a trace may have lost a grant made after it was
-- taken (Chubby's lock-delay applies instead).
CREATE OR REPLACE FUNCTION snowflake_registry.incarnation()
RETURNS text LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp
AS $$
  -- (the start time as a number: its text would follow the session's TimeZone and DateStyle)
  SELECT s.system_identifier::text || '/' || EXTRACT(epoch FROM pg_catalog.pg_postmaster_start_time())::text
         || '/' || 'snowflake_registry.leases'::pg_catalog.regclass::pg_catalog.oid::text
    FROM pg_catalog.pg_control_system() s
$$;

INSERT INTO snowflake_registry.config DEFAULT VALUES ON CONFLICT (one) DO NOTHING;

-- The proof a write leaves (leases.proof): this incarnation and this transaction.
CREATE OR REPLACE FUNCTION snowflake_registry.proof()
RETURNS text LANGUAGE sql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$ SELECT snowflake_registry.incarnation() || '/' || pg_catalog.pg_current_xact_id()::text $$;

-- Whether a row whose xmin is `row_xmin` is as the write that left `proof` left it, in this
-- incarnation: the registry's word about it cannot have been lost since.
CREATE OR REPLACE FUNCTION snowflake_registry.untouched(row_xmin xid, proof text)
RETURNS boolean LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp
AS $$
  SELECT proof IS NOT NULL
     AND pg_catalog.starts_with(proof, snowflake_registry.incarnation() || '/')
     AND (pg_catalog.split_part(proof, '/', 4)::numeric % 4294967296)::text = row_xmin::text
$$;

-- The registry's install: one row, written once, never changed. While it is untouched(), the
-- registry runs in the incarnation it was installed in and was never loaded back from a dump:
-- a worker id it never held was never held by anyone (its row may not exist yet). Registries
-- installed before this table have none: their never-held worker ids wait out the lock-delay.
CREATE TABLE IF NOT EXISTS snowflake_registry.install (
  one   boolean PRIMARY KEY DEFAULT true CHECK (one),
  proof text NOT NULL
);
INSERT INTO snowflake_registry.install (proof)
SELECT snowflake_registry.proof()
 WHERE NOT EXISTS (SELECT FROM snowflake_registry.leases WHERE system_identifier IS NOT NULL)
ON CONFLICT (one) DO NOTHING;
-- (format 4: format 3's rules, the callers' parameters grouped into holder and terms)
UPDATE snowflake_registry.config SET format = 4;

-- What every function of the protocol answers, and what its callers send (registry format 4
-- grouped the callers' parameters into these two types; the positional calls of earlier
-- servers stay, below).
DO $type$
BEGIN
  IF pg_catalog.to_regtype('snowflake_registry.answer') IS NULL THEN
    CREATE TYPE snowflake_registry.answer AS (
      -- granted, wait, renewed, released, lost, duplicate, exhausted, held, foreign, moved,
      -- skew, ttl, unsafe_role (and, before registry format 3, frozen and behind)
      outcome       text,
      worker        integer,
      fence         bigint,
      last_mark     bigint,  -- the cap: every id of this worker ever issued is below it
      token         bigint,
      wait_ms       bigint,
      epoch         bigint,
      registry_id   uuid,
      lock_delay_ms integer,
      max_skew_ms   integer,
      min_start_ms  bigint,  -- always NULL since registry format 3
      reason        text
    );
  END IF;
  -- A server calling, by what tells it apart from a copy running elsewhere (the lease keeper's
  -- Holder): its identity (system identifier, host, port, data directory: key()), its timeline,
  -- its start (boot: drawn at each start of its postmaster), its machine run (host_run) and its
  -- secret (a random value kept in its data directory).
  IF pg_catalog.to_regtype('snowflake_registry.holder') IS NULL THEN
    CREATE TYPE snowflake_registry.holder AS (
      system_identifier text, host text, port integer, data_directory text,
      timeline integer, boot text, host_run text, secret text);
  END IF;
  -- What a call asks under: the registry the caller last leased from (NULL: none yet), its
  -- request (the same number for every attempt of one claim, confirmation or renewal), the
  -- lease it asks for (ttl_ms) and its clock when it sent the call (Unix ms).
  IF pg_catalog.to_regtype('snowflake_registry.terms') IS NULL THEN
    CREATE TYPE snowflake_registry.terms AS (registry uuid, request bigint, ttl_ms integer, clock_ms bigint);
  END IF;
END
$type$;

-- No role but the owner may change or lock a table of the registry: take back every grant
-- (registry format 1 asked for SELECT, INSERT, UPDATE for the fleet's role).
DO $revoke$
DECLARE
  g record;
BEGIN
  FOR g IN
    SELECT DISTINCT c.relname, a.grantee
      FROM pg_catalog.pg_class c, pg_catalog.aclexplode(c.relacl) a
     WHERE c.relnamespace = 'snowflake_registry'::pg_catalog.regnamespace
       AND c.relkind IN ('r', 'v') AND a.grantee <> c.relowner
  LOOP
    EXECUTE pg_catalog.format('REVOKE ALL ON TABLE snowflake_registry.%I FROM %s', g.relname,
      CASE WHEN g.grantee = 0 THEN 'PUBLIC' ELSE pg_catalog.quote_ident(g.grantee::pg_catalog.regrole::text) END);
  END LOOP;
END
$revoke$;

CREATE OR REPLACE VIEW snowflake_registry.lease_list AS
SELECT worker,
       host, port, data_directory, system_identifier, timeline,
       since, renewed_at, expires_at, ttl_ms, last_mark,
       CASE WHEN elsewhere THEN 'held in the predecessor registry'
            WHEN system_identifier IS NULL THEN 'never held'
            WHEN pending_key IS NOT NULL THEN 'claimed, waiting out the lock-delay'
            WHEN released_at IS NOT NULL THEN 'released'
            WHEN expires_at < pg_catalog.now() THEN 'expired'
            ELSE 'held' END AS state,
       released_at, released_by, skew_ms, pending_holder, pending_since, contested_at, contested_by,
       displaced_at, displaced_by
  FROM snowflake_registry.leases;

COMMENT ON TABLE snowflake_registry.leases IS
  'snowflake_ext: worker ids leased by the servers of a fleet (snowflake.worker_id = ''auto''). Changed only through the functions of this schema; release one with SELECT snowflake_registry.release_worker(N).';

-- A holder's identity, as one key.
CREATE OR REPLACE FUNCTION snowflake_registry.key(system_identifier text, host text, port integer, data_directory text)
RETURNS text LANGUAGE sql STABLE PARALLEL SAFE
RETURN pg_catalog.concat_ws('|', system_identifier, host, port, data_directory);
CREATE OR REPLACE FUNCTION snowflake_registry.key(h snowflake_registry.holder)
RETURNS text LANGUAGE sql STABLE PARALLEL SAFE
RETURN snowflake_registry.key(h.system_identifier, h.host, h.port, h.data_directory);

-- A holder, for messages.
CREATE OR REPLACE FUNCTION snowflake_registry.describe(system_identifier text, host text, port integer, data_directory text)
RETURNS text LANGUAGE sql STABLE PARALLEL SAFE
RETURN pg_catalog.format('%s:%s (%s, system %s)', host, port, data_directory, system_identifier);

CREATE OR REPLACE FUNCTION snowflake_registry.unix_ms(t timestamptz)
RETURNS bigint LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN (EXTRACT(epoch FROM t) * 1000)::bigint;

-- What a lease keeps of a holder's secret.
CREATE OR REPLACE FUNCTION snowflake_registry.secret_hash(p_secret text)
RETURNS bytea LANGUAGE sql IMMUTABLE STRICT SET search_path = pg_catalog, pg_temp
AS $$ SELECT pg_catalog.sha256(pg_catalog.convert_to(p_secret, 'UTF8')) $$;

-- A claim's key (leases.pending_key): the claimer's identity, start, machine run and secret.
CREATE OR REPLACE FUNCTION snowflake_registry.pending_key(h snowflake_registry.holder)
RETURNS text LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp
RETURN snowflake_registry.key(h) || '|' || h.boot || '|' || h.host_run || '|'
       || pg_catalog.encode(snowflake_registry.secret_hash(h.secret), 'hex');

-- An answer of outcome `outcome` for registry row `c`.
-- (identity(), which rests on the answer() of format 3, is made to rest on nothing first, so
-- that the old answer() goes without identity() and the grants on it; it is made again below)
CREATE OR REPLACE FUNCTION snowflake_registry.identity()
RETURNS snowflake_registry.answer LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
RETURN NULL::snowflake_registry.answer;
DROP FUNCTION IF EXISTS snowflake_registry.answer(snowflake_registry.config, text, text);
DROP FUNCTION IF EXISTS snowflake_registry.granted(snowflake_registry.config, snowflake_registry.leases);
CREATE OR REPLACE FUNCTION snowflake_registry.answer(c snowflake_registry.config, outcome text, reason text DEFAULT NULL,
  worker integer DEFAULT NULL, fence bigint DEFAULT NULL, last_mark bigint DEFAULT NULL,
  token bigint DEFAULT NULL, wait_ms bigint DEFAULT NULL)
RETURNS snowflake_registry.answer LANGUAGE sql STABLE
RETURN ROW(outcome, worker, fence, last_mark, token, wait_ms, c.epoch, c.registry_id, c.lock_delay_ms, c.max_skew_ms,
           NULL, reason)::snowflake_registry.answer;

-- Opens a call of the protocol (p_call: claim, confirm, renew or release): locks the registry's
-- row (every call is serialized by it) and refuses what no call may do. On success `refusal` is
-- NULL, `c` is the registry's row, `skew` the caller's clock minus the registry's (ms).
DROP FUNCTION IF EXISTS snowflake_registry.open(uuid, bigint, boolean);
CREATE OR REPLACE FUNCTION snowflake_registry.open(t snowflake_registry.terms, p_call text,
                                                   OUT c snowflake_registry.config,
                                                   OUT refusal snowflake_registry.answer, OUT skew bigint)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
  SELECT * INTO c FROM snowflake_registry.config FOR UPDATE;
  refusal := snowflake_registry.answer(c, NULL);
  -- The fleet's role must not be able to do by hand what these functions forbid.
  -- Every role it can become counts (SET ROLE reaches a role granted without INHERIT).
  IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles m
              WHERE pg_catalog.pg_has_role(session_user, m.oid, 'MEMBER')
                -- (a grant on one column counts: has_any_column_privilege sees column grants too)
                AND (pg_catalog.has_table_privilege(m.oid, 'snowflake_registry.leases', 'DELETE, TRUNCATE')
                     OR pg_catalog.has_any_column_privilege(m.oid, 'snowflake_registry.leases', 'INSERT, UPDATE')
                     OR pg_catalog.has_table_privilege(m.oid, 'snowflake_registry.config', 'DELETE, TRUNCATE')
                     OR pg_catalog.has_any_column_privilege(m.oid, 'snowflake_registry.config', 'INSERT, UPDATE')
                     OR pg_catalog.has_table_privilege(m.oid, 'snowflake_registry.install', 'DELETE, TRUNCATE')
                     OR pg_catalog.has_any_column_privilege(m.oid, 'snowflake_registry.install', 'INSERT, UPDATE'))) THEN
    refusal := snowflake_registry.answer(c, 'unsafe_role', pg_catalog.format('the role %s may write the registry''s tables directly, so anyone with its password could hand a live worker id to another server', session_user));
    RETURN;
  END IF;
  -- Every answer rests on what this registry wrote being durable: a grant or a release lost in
  -- a crash, its incarnation unchanged, would be the registry's word on a history it lost. The
  -- fleet's role can turn synchronous_commit off for itself (ALTER ROLE ... SET), and a
  -- function's own SET clause no longer holds at commit.
  IF pg_catalog.current_setting('synchronous_commit') = 'off' THEN
    refusal := snowflake_registry.answer(c, 'unsafe_role', pg_catalog.format('synchronous_commit is off for the role %s: a registry''s answer must be durable before it is given', session_user));
    RETURN;
  END IF;
  IF t.registry IS NOT NULL AND t.registry <> c.registry_id AND NOT t.registry = ANY (c.accepts) THEN
    refusal := snowflake_registry.answer(c, 'foreign', pg_catalog.format('this server last leased its worker id from registry %s, and this registry (%s) neither imported that registry''s leases nor accepts its servers', t.registry, c.registry_id));
    RETURN;
  END IF;
  IF p_call IN ('claim', 'confirm') AND c.moved_to IS NOT NULL THEN
    refusal := snowflake_registry.answer(c, 'moved', pg_catalog.format('this registry''s leases were exported to registry %s at %s: it grants no new lease', c.moved_to, c.moved_at));
    RETURN;
  END IF;
  IF p_call = 'release' THEN RETURN; END IF;
  -- A lease no longer than the lock-delay, which is what the next claimer waits (the fleet's
  -- role would otherwise hold a worker id as long as it likes; a lock_delay lowered meanwhile
  -- would make the next claimer wait less than this holder counts).
  IF t.ttl_ms IS NULL OR t.ttl_ms > c.lock_delay_ms THEN
    refusal := snowflake_registry.answer(c, 'ttl', pg_catalog.format('a lease of %s ms is longer than the registry''s lock_delay, %s ms', t.ttl_ms, c.lock_delay_ms));
    RETURN;
  END IF;
  -- A claimer starts from its clock, above ids its predecessors may have issued by theirs: it is
  -- checked at its claim and again at its confirmation. A renewal is checked one way only.
  -- Whether a lease still runs is read on this registry's clock, which counts only while it is
  -- not behind the holder's by more than max_skew: a registry failed over to a server whose
  -- clock is behind would otherwise renew a lease that ran out in the history it lost, beside
  -- the server that waited it out there (found by review). A renewal delayed on its way (or
  -- waiting for the registry's lock) only makes the holder's clock look behind, and must not
  -- be refused for it. A delay could hide a registry clock behind by as much, but the keeper
  -- drops an answer after 5 s (EXCHANGE in src/lease/keeper), no longer than the least
  -- lock_delay, and asks again with its lease run out (renew's p_ran_out) once a failover made
  -- a new incarnation.
  skew := t.clock_ms - snowflake_registry.unix_ms(pg_catalog.clock_timestamp());
  IF skew IS NULL OR skew > c.max_skew_ms OR (p_call <> 'renew' AND -skew > c.max_skew_ms) THEN
    refusal := snowflake_registry.answer(c, 'skew', pg_catalog.format('this server''s clock is %s ms %s the registry''s (at most %s ms are accepted): a holder''s ids run with its clock, and its lease is counted on both', abs(skew), CASE WHEN skew < 0 THEN 'behind' ELSE 'ahead of' END, c.max_skew_ms));
  END IF;
END
$$;

-- The protocol's functions before the holder's secret and the renewal's request were added.
DROP FUNCTION IF EXISTS snowflake_registry.claim(text, text, integer, text, text, text, integer, integer, integer, boolean, integer, bigint, bigint, uuid, bigint);
DROP FUNCTION IF EXISTS snowflake_registry.claim(text, text, integer, text, text, text, text, integer, integer, integer, boolean, integer, bigint, bigint, uuid, bigint);
DROP FUNCTION IF EXISTS snowflake_registry.confirm(text, text, integer, text, text, text, integer, integer, bigint, integer, bigint, uuid, bigint);
DROP FUNCTION IF EXISTS snowflake_registry.renew(text, text, integer, text, text, integer, integer, bigint, bigint, integer, bigint, uuid, bigint);
DROP FUNCTION IF EXISTS snowflake_registry.release(text, text, integer, text, text, integer, bigint, bigint, uuid, bigint);
-- renew before the holder said whether its lease had run out (servers older than the flag call
-- the new one, the flag NULL).
DROP FUNCTION IF EXISTS snowflake_registry.renew(text, text, integer, text, text, text, integer, integer, bigint, bigint, bigint, integer, bigint, uuid, bigint);
-- confirm before it took the request (servers older than it call the new one, the request NULL).
DROP FUNCTION IF EXISTS snowflake_registry.confirm(text, text, integer, text, text, text, text, integer, integer, bigint, integer, bigint, uuid, bigint);

-- Releases the leases of the servers of the caller's system on a timeline before its own (other
-- than the caller) whose own lease has ended: the caller is a standby promoted after them. A
-- claimer of their worker ids waits out the lock-delay; such a server, brought back, claims
-- like any other (its lease ran out: it waits too) and mints with a worker id nobody else
-- holds. (Until 0.5.0 it was refused for good, as superseded, until an administrator deleted
-- its row: a healthy primary whose lease ran out in a registry outage was taken out of service
-- by a standby promoted meanwhile. Keeping a split brain from writing is the HA manager's
-- work; two servers with their own worker ids never repeat an id.)
DROP FUNCTION IF EXISTS snowflake_registry.supersede(text, text, integer, text, integer);
CREATE OR REPLACE FUNCTION snowflake_registry.supersede(me snowflake_registry.holder)
RETURNS void LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
  UPDATE snowflake_registry.leases l
     SET released_at = pg_catalog.now(), released_by = 'superseded', pending_key = NULL,
         pending_holder = NULL, pending_token = NULL, pending_since = NULL, pending_wait_ms = NULL
   WHERE l.system_identifier = me.system_identifier
     AND l.timeline < me.timeline
     AND l.released_at IS NULL
     AND NOT l.elsewhere
     AND (l.host, l.port, l.data_directory) IS DISTINCT FROM (me.host, me.port, me.data_directory)
     AND l.expires_at < pg_catalog.now();
END;
DROP TABLE IF EXISTS snowflake_registry.superseded;

-- Whether another claimant's claim waits on row r, for caller `me`: one claim at a time, not
-- overtaken unless its claimant gave up. A claimant waits the lock-delay plus twice max_skew
-- and 4 s (snowflake_core::lease::takeover_wait_ms); its claim is kept a lock-delay more (kept
-- shorter, two claimers overtook each other for ever).
DROP FUNCTION IF EXISTS snowflake_registry.claimed_by_another(snowflake_registry.leases, snowflake_registry.config, text, text);
CREATE OR REPLACE FUNCTION snowflake_registry.claimed_by_another(r snowflake_registry.leases, c snowflake_registry.config,
                                                                 me snowflake_registry.holder)
RETURNS boolean LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp
AS $$
  SELECT r.pending_key IS NOT NULL
     AND NOT (pg_catalog.starts_with(r.pending_key, snowflake_registry.key(me) || '|')
              AND pg_catalog.right(r.pending_key, 64) = pg_catalog.encode(snowflake_registry.secret_hash(me.secret), 'hex'))
     AND r.pending_since + (r.pending_wait_ms + 2 * c.max_skew_ms + 4000 + c.lock_delay_ms)
                           * interval '1 millisecond' >= pg_catalog.now()
$$;

-- Claims a worker id of p_first..p_last for the caller (p_pinned: exactly p_first, the worker id
-- its snowflake.worker_id names). Its own at once if it provably stopped using it, else one never
-- held, else one its holder gave back, else the one whose lease ended longest ago. Answers
-- `granted` (use it once the cap is recorded by a renewal), `wait` (confirm after wait_ms on the
-- caller's boot clock), or why not. p_fence: the fence of the lease the caller holds or, from
-- its durable record, held, if any.
CREATE OR REPLACE FUNCTION snowflake_registry.claim(me snowflake_registry.holder, t snowflake_registry.terms,
                                                    p_first integer, p_last integer, p_pinned boolean, p_fence bigint)
RETURNS snowflake_registry.answer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  o record;
  c snowflake_registry.config;
  r snowflake_registry.leases;
  my_key text := snowflake_registry.key(me);
  my_hash bytea := snowflake_registry.secret_hash(me.secret);
  mine boolean;
  -- the caller is the holder: it knows the holder's secret
  proven boolean;
  replay boolean;
  -- the row is as the write that proved it left it, in this incarnation (untouched())
  untouched boolean;
  immediate boolean;
BEGIN
  SELECT * INTO o FROM snowflake_registry.open(t, 'claim');
  IF (o.refusal).outcome IS NOT NULL THEN RETURN o.refusal; END IF;
  c := o.c;
  IF p_first IS NULL OR p_last IS NULL OR p_first < 0 OR p_last < p_first OR p_last - p_first > 65535
     OR me.secret IS NULL OR pg_catalog.length(me.secret) < 32 THEN
    RAISE EXCEPTION 'a claim of worker ids %-% (secret of % characters) is not one a server makes', p_first, p_last, pg_catalog.length(me.secret)
      USING ERRCODE = 'invalid_parameter_value', HINT = 'Worker ids are leased by snowflake_ext''s lease keeper.';
  END IF;
  IF me.timeline > 1 THEN
    PERFORM snowflake_registry.supersede(me);
  END IF;
  INSERT INTO snowflake_registry.leases (worker, proof)
  SELECT g, snowflake_registry.proof() FROM pg_catalog.generate_series(p_first, p_last) g
  ON CONFLICT (worker) DO NOTHING;
  -- (a row is this server's only with its secret: someone posing as it under its identity, with
  -- a secret of its own, holds a row of someone else's, which this server neither waits on nor
  -- takes for a copy of itself)
  SELECT l.* INTO r FROM snowflake_registry.leases l
   WHERE l.worker BETWEEN p_first AND p_last
     AND ((snowflake_registry.key(l.system_identifier, l.host, l.port, l.data_directory) = my_key AND l.secret_hash = my_hash)
          OR (NOT l.elsewhere
              AND (l.system_identifier IS NULL OR l.released_at IS NOT NULL OR l.expires_at < pg_catalog.now())))
     AND NOT snowflake_registry.claimed_by_another(l, c, me)
   ORDER BY (snowflake_registry.key(l.system_identifier, l.host, l.port, l.data_directory) = my_key AND l.secret_hash = my_hash) DESC,
            -- of this server's, the lease this start holds (its fence, or its request in flight),
            -- not another it held before in this range and lost
            (l.boot = me.boot AND l.last_request = t.request) IS TRUE DESC,
            (l.boot = me.boot AND l.fence = p_fence) IS TRUE DESC,
            -- (fences are counted per lease: of two that match, the one that runs)
            CASE WHEN (l.boot = me.boot AND l.fence = p_fence) IS TRUE THEN l.expires_at END DESC NULLS LAST,
            l.system_identifier IS NULL DESC,
            l.released_by IS NOT DISTINCT FROM 'holder' DESC,
            COALESCE(l.released_at, l.expires_at), l.worker
   LIMIT 1
   FOR UPDATE OF l SKIP LOCKED;
  IF NOT FOUND THEN
    IF p_pinned THEN
      SELECT l.* INTO r FROM snowflake_registry.leases l WHERE l.worker = p_first;
      RETURN snowflake_registry.answer(c, 'held', pg_catalog.format('worker id %s is %s by %s', p_first,
               CASE WHEN r.elsewhere THEN 'held in the predecessor registry'
                    WHEN r.pending_key IS NOT NULL THEN 'being claimed' ELSE 'held' END,
               COALESCE(r.pending_holder, snowflake_registry.describe(r.system_identifier, r.host, r.port, r.data_directory))),
             worker => p_first);
    END IF;
    RETURN snowflake_registry.answer(c, 'exhausted', pg_catalog.format('every worker id of %s-%s is leased by another server', p_first, p_last));
  END IF;
  mine := snowflake_registry.key(r.system_identifier, r.host, r.port, r.data_directory) = my_key;
  -- Its identity is in lease_list for anyone with the fleet's password to read: only its secret
  -- tells the holder itself (or a copy of its data directory) from someone posing as it.
  proven := mine AND r.secret_hash = my_hash;
  -- the last grant or renewal of this lease was this very request of this start, whose answer
  -- it lost (the keeper asks again with the same request, restarted or not, and the fence it
  -- had: one behind after a renewal or a claim, any after a confirmation)
  replay := proven AND r.boot = me.boot AND r.last_request = t.request;
  SELECT snowflake_registry.untouched(l.xmin, l.proof) INTO untouched
    FROM snowflake_registry.leases l WHERE l.worker = r.worker;
  immediate :=
    -- this very start of the server, renewing what it holds, as renew does: only a lease that
    -- still runs here (a request delayed past its end, met by a copy restored without a trace,
    -- would otherwise extend a lease another server may have waited out and taken since)
    (proven AND r.boot = me.boot AND (r.fence = p_fence OR replay) AND r.released_at IS NULL AND r.displaced_at IS NULL
     AND r.expires_at >= pg_catalog.clock_timestamp())
    -- An earlier start of this server on the same machine run, continuing the lease that its
    -- own durable record (snowflake_ext/lease) says is still running by its boot clock: the
    -- holder's word, with the fence this registry gave it (the lease keeper brings a fence only
    -- from a lease that still runs). PostgreSQL refuses to start while any process of the
    -- earlier start lives, and nobody else can have been granted it within its lease.
    OR (proven AND r.boot IS DISTINCT FROM me.boot AND r.host_run = me.host_run AND r.fence = p_fence
        AND r.released_at IS NULL AND r.displaced_at IS NULL AND NOT r.elsewhere
        AND r.expires_at >= pg_catalog.clock_timestamp())
    -- The registry's own word that nobody holds it, only where it cannot have been lost: a
    -- worker id never held, while the registry still runs in the incarnation it was installed
    -- in; one its holder gave back, in the incarnation that recorded it. (A copy restored on the
    -- same timeline, its epoch raised past every server's by anyone with the fleet's password,
    -- showed a worker id as given back or as its claimer's own expired lease, while the server
    -- it had been granted to since minted on: 900 ids twice.)
    -- Either word must be the row's last write (no claim waiting on it): a claim that waited
    -- on the row since wrote a proof of its own, which says nothing of the word. (After a
    -- restore, a worker id given back in the history it lost waited, and the claimer's next
    -- claim, asked again or after a restart, took it at once on the waiting claim's proof.)
    OR (r.displaced_at IS NULL AND NOT r.elsewhere AND r.pending_key IS NULL AND (
          (r.system_identifier IS NULL AND untouched
           AND (SELECT snowflake_registry.untouched(i.xmin, i.proof) FROM snowflake_registry.install i))
          OR (r.released_by = 'holder' AND untouched)));
  IF proven AND r.boot = me.boot AND p_fence IS NOT NULL AND r.fence > p_fence AND NOT COALESCE(replay, false)
     AND r.released_at IS NULL AND NOT r.elsewhere THEN
    -- Another process with this very start's memory renewed it: a copy of this server's
    -- memory (a resumed VM snapshot) runs beside it. (A fence above the registry's is no
    -- copy's, whose fence is at most the registry's: the registry lost the history that gave
    -- it, or it is another lease's; the claim waits out the lock-delay.)
    RETURN snowflake_registry.answer(c, 'duplicate', pg_catalog.format('worker id %s was renewed by another process of this very start of the server (fence %s, this one holds %s): a copy of this server''s memory runs elsewhere', r.worker, r.fence, p_fence),
             worker => r.worker);
  END IF;
  -- (NULL, of a fence the caller did not bring, is not immediate: it waits)
  IF immediate IS NOT TRUE THEN
    -- (the row is still its holder's: its request stays)
    RETURN snowflake_registry.claim_again(c, r.worker, snowflake_registry.pending_key(me),
           snowflake_registry.describe(me.system_identifier, me.host, me.port, me.data_directory), CASE
           WHEN r.displaced_at IS NOT NULL THEN pg_catalog.format('two starts of this server''s identity held it (%s)', r.displaced_at)
           WHEN r.released_by = 'admin' THEN 'an administrator released it'
           WHEN r.released_by = 'superseded' THEN 'its holder was superseded'
           WHEN mine THEN 'an earlier start of this server held it, and this start has no record of that lease still running (a restart after its lease ended or after a reboot, or a copy of this server)'
           WHEN r.system_identifier IS NULL THEN 'the registry''s word that nobody held it may have been lost (it was restored, failed over or restarted since it was installed)'
           WHEN r.released_by = 'holder' THEN 'the registry''s word that its holder gave it back may have been lost (it was restored, failed over or restarted since)'
           ELSE 'its lease ended without its holder giving it back' END, false);
  END IF;
  UPDATE snowflake_registry.leases l
     SET system_identifier = me.system_identifier, host = me.host, port = me.port, data_directory = me.data_directory,
         timeline = me.timeline, boot = me.boot, host_run = me.host_run,
         -- the same request again (its answer was lost): answered as the first time
         fence = CASE WHEN replay THEN l.fence ELSE l.fence + 1 END,
         held_proof = snowflake_registry.proof(), secret_hash = my_hash, last_request = t.request,
         ttl_ms = t.ttl_ms, skew_ms = o.skew,
         since = CASE WHEN mine AND l.released_at IS NULL THEN l.since ELSE pg_catalog.now() END,
         renewed_at = pg_catalog.now(),
         expires_at = GREATEST(l.expires_at, pg_catalog.now() + t.ttl_ms * interval '1 millisecond'),
         released_at = NULL, released_by = NULL, elsewhere = false,
         pending_key = NULL, pending_holder = NULL, pending_token = NULL, pending_since = NULL, pending_wait_ms = NULL
   WHERE l.worker = r.worker
  RETURNING * INTO r;
  RETURN snowflake_registry.answer(c, 'granted', worker => r.worker, fence => r.fence, last_mark => r.last_mark);
END
$$;

-- Claims p_worker for a claimer (its pending key and description), under a new token, from
-- now: `wait`, saying why. claim() makes its claims to wait here, and confirm() its claims again.
-- p_own_grant: the lease is the caller's own grant, whose request is forgotten; else the row is
-- still its holder's, whose request stays (asked again, it is known as itself).
DROP FUNCTION IF EXISTS snowflake_registry.claim_again(snowflake_registry.config, integer, text, text, text);
CREATE OR REPLACE FUNCTION snowflake_registry.claim_again(c snowflake_registry.config, p_worker integer,
                                                          p_pending_key text, p_holder text, p_reason text,
                                                          p_own_grant boolean)
RETURNS snowflake_registry.answer
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  r snowflake_registry.leases;
BEGIN
  UPDATE snowflake_registry.leases l
     SET pending_key = p_pending_key, pending_holder = p_holder,
         pending_token = (pg_catalog.random() * 9e15)::bigint,
         pending_since = pg_catalog.now(),
         pending_wait_ms = GREATEST(COALESCE(l.ttl_ms, 0), c.lock_delay_ms),
         proof = snowflake_registry.proof(),
         last_request = CASE WHEN p_own_grant THEN NULL ELSE l.last_request END
   WHERE l.worker = p_worker
  RETURNING * INTO r;
  RETURN snowflake_registry.answer(c, 'wait', p_reason, worker => p_worker, last_mark => r.last_mark,
                                   token => r.pending_token, wait_ms => r.pending_wait_ms);
END
$$;

-- Takes the worker id the caller claimed with `p_token`, once it has waited out the lock-delay:
-- `granted` if nobody renewed or claimed it meanwhile. The request (t.request) is the same for
-- every attempt of one confirmation: one whose answer was lost is answered again as the first
-- time (NULL from servers older than it).
CREATE OR REPLACE FUNCTION snowflake_registry.confirm(me snowflake_registry.holder, t snowflake_registry.terms,
                                                      p_worker integer, p_token bigint)
RETURNS snowflake_registry.answer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  o record;
  c snowflake_registry.config;
  r snowflake_registry.leases;
  my_key text := snowflake_registry.key(me);
  -- the caller's claim, as claim() keyed it
  pending text := snowflake_registry.pending_key(me);
  left_ms bigint;
BEGIN
  SELECT * INTO o FROM snowflake_registry.open(t, 'confirm');
  IF (o.refusal).outcome IS NOT NULL THEN RETURN o.refusal; END IF;
  c := o.c;
  SELECT l.* INTO r FROM snowflake_registry.leases l WHERE l.worker = p_worker FOR UPDATE;
  IF FOUND AND t.request IS NOT NULL AND r.last_request = t.request
     AND snowflake_registry.key(r.system_identifier, r.host, r.port, r.data_directory) = my_key
     AND r.secret_hash = snowflake_registry.secret_hash(me.secret)
     AND r.boot = me.boot AND r.host_run = me.host_run
     AND r.released_at IS NULL AND r.displaced_at IS NULL AND NOT r.elsewhere THEN
    -- This very confirmation again: it was granted, and its answer lost (the keeper asks again
    -- with the same request). Nobody renewed since (a renewal sets its own request).
    IF r.expires_at < pg_catalog.now() THEN
      -- The grant's lease ran out unused: another server may have claimed it meanwhile, and a
      -- registry restored or failed over since may have lost a history where one
      -- waited it out and took the worker id. Claimed again, to be confirmed after another
      -- lock-delay; unless another server's claim waits on it (one that has not given up, as
      -- claim() judges it): that claim is not overtaken (one claim at a time, as in claim()),
      -- and this one is lost: its server claims again, and claim() keeps that claim too.
      IF snowflake_registry.claimed_by_another(r, c, me) THEN
        RETURN snowflake_registry.answer(c, 'lost', pg_catalog.format('this server''s confirmation was granted, its answer lost, and the lease ran out unused before it asked again; worker id %s is now claimed by %s', p_worker, r.pending_holder),
                 worker => p_worker);
      END IF;
      RETURN snowflake_registry.claim_again(c, p_worker, pending, snowflake_registry.describe(me.system_identifier, me.host, me.port, me.data_directory),
               'this server''s confirmation was granted, its answer lost, and the lease ran out unused before it asked again', true);
    END IF;
    -- Answered as the first time, the fence unchanged; the lease runs from now, as the keeper
    -- counts it from this attempt.
    UPDATE snowflake_registry.leases l
       SET renewed_at = pg_catalog.now(), held_proof = snowflake_registry.proof(),
           expires_at = GREATEST(l.expires_at, pg_catalog.now() + t.ttl_ms * interval '1 millisecond'),
           pending_key = NULL, pending_holder = NULL, pending_token = NULL, pending_since = NULL, pending_wait_ms = NULL
     WHERE l.worker = p_worker
    RETURNING * INTO r;
    RETURN snowflake_registry.answer(c, 'granted', worker => r.worker, fence => r.fence, last_mark => r.last_mark);
  END IF;
  IF FOUND AND r.pending_key = pending AND r.pending_token IS DISTINCT FROM p_token THEN
    -- This start's claim, under another token (the registry claimed it again for this server,
    -- and that answer was lost): waited out under that token, the whole lock-delay on the
    -- caller's clock from now (the registry's clock alone never proves a wait).
    RETURN snowflake_registry.answer(c, 'wait', 'the registry claimed it again for this server under another token',
             worker => p_worker, token => r.pending_token, wait_ms => r.pending_wait_ms);
  END IF;
  IF NOT FOUND OR r.pending_token IS DISTINCT FROM p_token OR r.pending_key IS DISTINCT FROM pending THEN
    -- Another start of this server renewed the lease while this one waited (the claim put the
    -- lease's end before the confirmation: a lease that runs now was renewed since): a copy.
    -- One that ran out proves nothing: this claim may have been overtaken by another server's,
    -- or cleared by a recovery, while the start it names is long gone (a restart after a
    -- reboot). That is lost, and this start claims again.
    IF snowflake_registry.key(r.system_identifier, r.host, r.port, r.data_directory) = my_key
       AND r.secret_hash = snowflake_registry.secret_hash(me.secret)
       AND r.boot IS DISTINCT FROM me.boot AND r.released_at IS NULL
       AND r.expires_at >= pg_catalog.now() THEN
      RETURN snowflake_registry.answer(c, 'duplicate', pg_catalog.format('another start of this server (%s) holds worker id %s and renewed it while this one waited: a copy of this server runs (a VM snapshot, or a copied data directory on a host of the same name)', snowflake_registry.describe(r.system_identifier, r.host, r.port, r.data_directory), p_worker),
               worker => p_worker);
    END IF;
    RETURN snowflake_registry.answer(c, 'lost', pg_catalog.format('while this server waited, worker id %s was %s', p_worker,
             CASE WHEN r.pending_key IS NOT NULL THEN 'claimed by ' || r.pending_holder
                  ELSE 'renewed by its holder, ' || snowflake_registry.describe(r.system_identifier, r.host, r.port, r.data_directory) END),
             worker => p_worker);
  END IF;
  IF NOT (SELECT snowflake_registry.untouched(l.xmin, l.proof) FROM snowflake_registry.leases l
           WHERE l.worker = p_worker) THEN
    -- The claim was written in another incarnation of the registry, or the row was loaded back
    -- from a dump since: the wait proves nothing here (in the history that was lost, another
    -- claim may have been confirmed, and its server may mint). Waited out again, from now.
    RETURN snowflake_registry.claim_again(c, p_worker, pending, r.pending_holder,
             'the registry was restored, failed over or restarted while this server waited', false);
  END IF;
  -- The claimer's boot clock is what proves the wait; the registry's clock must agree.
  left_ms := r.pending_wait_ms - snowflake_registry.unix_ms(pg_catalog.clock_timestamp()) + snowflake_registry.unix_ms(r.pending_since);
  IF left_ms > 0 THEN
    RETURN snowflake_registry.answer(c, 'wait', 'the registry''s clock has not seen the lock-delay pass yet',
             worker => p_worker, token => p_token, wait_ms => left_ms);
  END IF;
  UPDATE snowflake_registry.leases l
     SET system_identifier = me.system_identifier, host = me.host, port = me.port, data_directory = me.data_directory,
         timeline = me.timeline, boot = me.boot, host_run = me.host_run, fence = l.fence + 1,
         held_proof = snowflake_registry.proof(),
         secret_hash = snowflake_registry.secret_hash(me.secret), last_request = t.request,
         ttl_ms = t.ttl_ms, skew_ms = o.skew,
         since = pg_catalog.now(), renewed_at = pg_catalog.now(),
         expires_at = pg_catalog.now() + t.ttl_ms * interval '1 millisecond',
         released_at = NULL, released_by = NULL, elsewhere = false,
         contested_at = NULL, contested_by = NULL, displaced_at = NULL, displaced_by = NULL,
         pending_key = NULL, pending_holder = NULL, pending_token = NULL, pending_since = NULL, pending_wait_ms = NULL
   WHERE l.worker = p_worker
  RETURNING * INTO r;
  RETURN snowflake_registry.answer(c, 'granted', worker => r.worker, fence => r.fence, last_mark => r.last_mark);
END
$$;

-- Renews the caller's lease of p_worker (last seen with p_fence) for t.ttl_ms, recording p_cap
-- (an id of the worker) below which it will issue. `renewed` with the new fence, or `lost`,
-- `duplicate` (a copy of the caller holds it) and why. p_ran_out: the holder's lease had run out
-- on its own clock when it sent this renewal (NULL from servers older than the flag: taken as
-- true).
CREATE OR REPLACE FUNCTION snowflake_registry.renew(me snowflake_registry.holder, t snowflake_registry.terms,
                                                    p_worker integer, p_fence bigint, p_cap bigint, p_ran_out boolean)
RETURNS snowflake_registry.answer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  o record;
  c snowflake_registry.config;
  r snowflake_registry.leases;
  my_key text := snowflake_registry.key(me);
  holder_key text;
  copy text;
  replay boolean;
BEGIN
  SELECT * INTO o FROM snowflake_registry.open(t, 'renew');
  IF (o.refusal).outcome IS NOT NULL THEN RETURN o.refusal; END IF;
  c := o.c;
  SELECT l.* INTO r FROM snowflake_registry.leases l WHERE l.worker = p_worker FOR UPDATE;
  IF NOT FOUND THEN
    RETURN snowflake_registry.answer(c, 'lost', 'the registry has no such lease', worker => p_worker);
  END IF;
  holder_key := snowflake_registry.key(r.system_identifier, r.host, r.port, r.data_directory);
  IF holder_key = my_key AND r.secret_hash IS DISTINCT FROM snowflake_registry.secret_hash(me.secret) THEN
    -- Someone with the fleet's password posing as the holder: told nothing, changes nothing.
    RETURN snowflake_registry.answer(c, 'lost', 'the caller is not the lease''s holder', worker => p_worker);
  END IF;
  -- (a server older than the flag sends NULL: judged as if its lease had run out, fail closed)
  IF holder_key = my_key AND p_ran_out IS NOT FALSE AND NOT (SELECT snowflake_registry.untouched(l.xmin, l.held_proof)
                                                             FROM snowflake_registry.leases l WHERE l.worker = p_worker) THEN
    -- The holder's lease ran out on its own clock: renewing it rests on the registry's word
    -- that nobody took it meanwhile, which counts only where this incarnation recorded the
    -- holder's last grant or renewal (the rule of claim's C and D). It claims again.
    RETURN snowflake_registry.answer(c, 'lost', 'this server''s lease ran out on its own clock, and this registry did not record its last renewal (restored, failed over or restarted since): it may have changed hands in the history that was lost; this start claims it again',
             worker => p_worker);
  END IF;
  IF c.moved_to IS NOT NULL AND r.expires_at < pg_catalog.now() THEN
    -- Once exported, a lease that ran out stays out: the successor may hand it on after
    -- retire_predecessor().
    RETURN snowflake_registry.answer(c, 'lost', pg_catalog.format('it ran out after this registry''s leases were exported to registry %s', c.moved_to),
             worker => p_worker);
  END IF;
  -- The same request again: its answer was lost (the holder gave up waiting for it).
  replay := r.fence = p_fence + 1 AND r.last_request = t.request;
  IF holder_key = my_key AND p_fence > r.fence AND r.released_at IS NULL AND NOT r.elsewhere THEN
    -- The holder (its secret says so) brings a fence of this lease that this registry never
    -- gave: a fence only grows here and reaches a server only in an answer, so the registry
    -- lost the history that gave it (restored from an older copy, or failed over to a standby
    -- that had not received everything). In that history the worker id may have changed hands:
    -- the holder claims it again, through the lock-delay. (A copy of the holder's memory brings
    -- a fence at most the registry's: that is below.)
    RETURN snowflake_registry.answer(c, 'lost', pg_catalog.format('this start holds fence %s of worker id %s, and the registry has %s: it lost the history that gave it (restored from an older copy, or failed over); this start claims it again', p_fence, p_worker, r.fence),
             worker => p_worker);
  END IF;
  IF holder_key = my_key AND r.boot = me.boot AND r.released_at IS NULL AND NOT r.elsewhere
     AND r.expires_at < pg_catalog.clock_timestamp() THEN
    -- A lease renewed only while it runs here (read now, not when the call began: it may have
    -- waited for the row's lock). A renewal delayed past the lease's end (sent
    -- while it ran, by the holder's clock), met by a registry restored without a trace, would
    -- otherwise extend a lease that another server may have waited out and taken since, in a
    -- history the registry lost (the lease model's two-restore case). The holder claims again.
    RETURN snowflake_registry.answer(c, 'lost', pg_catalog.format('the lease ran out here at %s, before this renewal arrived; this start claims it again', r.expires_at),
             worker => p_worker);
  END IF;
  IF holder_key = my_key AND r.boot = me.boot AND r.released_at IS NULL AND NOT r.elsewhere
     AND (r.fence = p_fence OR replay) THEN
    IF r.displaced_at > r.since THEN
      -- A copy of this server that lost this lease to it says so: both stop.
      RETURN snowflake_registry.answer(c, 'duplicate', pg_catalog.format('another start of this server (%s) held worker id %s and found this one in its place: a copy of this server runs (a VM snapshot, or a copied data directory on a host of the same name)', r.displaced_by, p_worker),
               worker => p_worker);
    END IF;
    IF pg_catalog.starts_with(r.pending_key, my_key || '|')
       AND pg_catalog.right(r.pending_key, 64) = pg_catalog.encode(r.secret_hash, 'hex') THEN
      copy := r.pending_holder || ', start ' || pg_catalog.split_part(pg_catalog.substr(r.pending_key, pg_catalog.length(my_key) + 2), '|', 1);
    END IF;
    UPDATE snowflake_registry.leases l
       SET held_proof = snowflake_registry.proof(),
           fence = CASE WHEN replay THEN l.fence ELSE l.fence + 1 END,
           last_request = t.request,
           renewed_at = pg_catalog.now(),
           expires_at = GREATEST(l.expires_at, pg_catalog.now() + t.ttl_ms * interval '1 millisecond'),
           -- (one-sided: a holder's clock far behind is renewed, its skew kept within the column)
           ttl_ms = t.ttl_ms, timeline = me.timeline, skew_ms = GREATEST(o.skew, -2147483647),
           last_mark = GREATEST(l.last_mark, p_cap),
           contested_at = CASE WHEN copy IS NOT NULL THEN pg_catalog.now() ELSE l.contested_at END,
           contested_by = COALESCE(copy, l.contested_by),
           pending_key = NULL, pending_holder = NULL, pending_token = NULL, pending_since = NULL, pending_wait_ms = NULL
     WHERE l.worker = p_worker
    RETURNING * INTO r;
    IF me.timeline > 1 THEN
      PERFORM snowflake_registry.supersede(me);
    END IF;
    RETURN snowflake_registry.answer(c, 'renewed', CASE WHEN copy IS NOT NULL THEN pg_catalog.format('another start of this server''s identity (%s) tried to claim worker id %s: a copy of this server runs; this one keeps it', copy, p_worker) END,
             worker => p_worker, fence => r.fence);
  END IF;
  IF holder_key = my_key AND r.released_at IS NULL AND NOT r.elsewhere
     AND (r.boot = me.boot OR r.expires_at >= pg_catalog.now()) THEN
    -- This server's identity holds it, but not this start, or not with this fence, and that
    -- holder's lease runs: a copy. (Another start's lease that ran out proves nothing: it is
    -- as likely an earlier start of this very server, killed, whose lease a registry restored
    -- from a copy brought back. This start claims again, and a copy still renewing would say
    -- so there.)
    UPDATE snowflake_registry.leases l
       SET displaced_at = pg_catalog.now(), displaced_by = 'start ' || me.boot
     WHERE l.worker = p_worker;
    RETURN snowflake_registry.answer(c, 'duplicate', CASE WHEN r.boot = me.boot
      THEN pg_catalog.format('worker id %s was renewed by another process of this very start of the server (fence %s, this one holds %s): a copy of this server''s memory runs elsewhere', p_worker, r.fence, p_fence)
      ELSE pg_catalog.format('another start of this server (boot %s, machine run %s) now holds worker id %s: a copy of this server runs (a VM snapshot, or a copied data directory on a host of the same name)', r.boot, r.host_run, p_worker) END,
      worker => p_worker);
  END IF;
  RETURN snowflake_registry.answer(c, 'lost', CASE
    WHEN r.released_by = 'admin' THEN 'an administrator released it'
    WHEN r.released_by = 'superseded' THEN 'a standby promoted after this server superseded it'
    WHEN r.released_at IS NOT NULL THEN 'it was given back'
    WHEN r.elsewhere THEN 'it is held in the registry this one took over from'
    WHEN r.system_identifier IS NULL THEN 'the registry does not know this lease'
    WHEN holder_key = my_key THEN pg_catalog.format('the registry names another start of this server (boot %s) as its holder, whose lease ran out at %s (an earlier start, brought back by a registry restored from a copy?)', r.boot, r.expires_at)
    ELSE 'it was taken by ' || snowflake_registry.describe(r.system_identifier, r.host, r.port, r.data_directory) END,
    worker => p_worker);
END
$$;

-- Gives back the caller's lease of p_worker at a clean stop (or a move to another registry or
-- range), recording p_cap: one past the last id it issued (it issues no more), so that the next
-- holder, most often this server again, continues right above its ids, at once. Of t, only the
-- registry is read.
CREATE OR REPLACE FUNCTION snowflake_registry.release(me snowflake_registry.holder, t snowflake_registry.terms,
                                                      p_worker integer, p_fence bigint, p_cap bigint)
RETURNS snowflake_registry.answer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  o record;
BEGIN
  SELECT * INTO o FROM snowflake_registry.open(t, 'release');
  IF (o.refusal).outcome IS NOT NULL THEN RETURN o.refusal; END IF;
  UPDATE snowflake_registry.leases l
     SET released_at = pg_catalog.now(), released_by = 'holder', last_mark = p_cap,
         proof = CASE WHEN snowflake_registry.untouched(l.xmin, l.held_proof) THEN snowflake_registry.proof() END,
         pending_key = NULL, pending_holder = NULL, pending_token = NULL, pending_since = NULL, pending_wait_ms = NULL
   WHERE l.worker = p_worker AND l.fence = p_fence AND l.boot = me.boot AND l.released_at IS NULL
     AND l.secret_hash = snowflake_registry.secret_hash(me.secret)
     AND snowflake_registry.key(l.system_identifier, l.host, l.port, l.data_directory) = snowflake_registry.key(me);
  RETURN snowflake_registry.answer(o.c, CASE WHEN FOUND THEN 'released' ELSE 'lost' END, worker => p_worker);
END
$$;

-- The calls of servers before registry format 4, one positional parameter each (p_seen_epoch
-- is no longer read): each is the call above.
CREATE OR REPLACE FUNCTION snowflake_registry.claim(p_system_identifier text, p_host text, p_port integer,
  p_data_directory text, p_boot text, p_host_run text, p_secret text, p_timeline integer, p_first integer,
  p_last integer, p_pinned boolean, p_ttl_ms integer, p_clock_ms bigint, p_fence bigint, p_request bigint,
  p_registry uuid, p_seen_epoch bigint)
RETURNS snowflake_registry.answer LANGUAGE sql SET search_path = pg_catalog, pg_temp
RETURN snowflake_registry.claim(ROW(p_system_identifier, p_host, p_port, p_data_directory, p_timeline, p_boot, p_host_run,
  p_secret)::snowflake_registry.holder, ROW(p_registry, p_request, p_ttl_ms, p_clock_ms)::snowflake_registry.terms,
  p_first, p_last, p_pinned, p_fence);
CREATE OR REPLACE FUNCTION snowflake_registry.confirm(p_system_identifier text, p_host text, p_port integer,
  p_data_directory text, p_boot text, p_host_run text, p_secret text, p_timeline integer, p_worker integer,
  p_token bigint, p_ttl_ms integer, p_clock_ms bigint, p_registry uuid, p_seen_epoch bigint, p_request bigint DEFAULT NULL)
RETURNS snowflake_registry.answer LANGUAGE sql SET search_path = pg_catalog, pg_temp
RETURN snowflake_registry.confirm(ROW(p_system_identifier, p_host, p_port, p_data_directory, p_timeline, p_boot, p_host_run,
  p_secret)::snowflake_registry.holder, ROW(p_registry, p_request, p_ttl_ms, p_clock_ms)::snowflake_registry.terms,
  p_worker, p_token);
CREATE OR REPLACE FUNCTION snowflake_registry.renew(p_system_identifier text, p_host text, p_port integer,
  p_data_directory text, p_boot text, p_secret text, p_timeline integer, p_worker integer, p_fence bigint,
  p_request bigint, p_cap bigint, p_ttl_ms integer, p_clock_ms bigint, p_registry uuid, p_seen_epoch bigint,
  p_ran_out boolean DEFAULT NULL)
RETURNS snowflake_registry.answer LANGUAGE sql SET search_path = pg_catalog, pg_temp
RETURN snowflake_registry.renew(ROW(p_system_identifier, p_host, p_port, p_data_directory, p_timeline, p_boot, NULL,
  p_secret)::snowflake_registry.holder, ROW(p_registry, p_request, p_ttl_ms, p_clock_ms)::snowflake_registry.terms,
  p_worker, p_fence, p_cap, p_ran_out);
CREATE OR REPLACE FUNCTION snowflake_registry.release(p_system_identifier text, p_host text, p_port integer,
  p_data_directory text, p_boot text, p_secret text, p_worker integer, p_fence bigint, p_end bigint,
  p_registry uuid, p_seen_epoch bigint)
RETURNS snowflake_registry.answer LANGUAGE sql SET search_path = pg_catalog, pg_temp
RETURN snowflake_registry.release(ROW(p_system_identifier, p_host, p_port, p_data_directory, NULL, p_boot, NULL,
  p_secret)::snowflake_registry.holder, ROW(p_registry, NULL, NULL, NULL)::snowflake_registry.terms,
  p_worker, p_fence, p_end);

-- This registry's id and epoch, and its limits (a server checks where a new snowflake.registry
-- points before it leaves the old one).
CREATE OR REPLACE FUNCTION snowflake_registry.identity()
RETURNS snowflake_registry.answer
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
RETURN (SELECT snowflake_registry.answer(c, 'identity') FROM snowflake_registry.config c);

-- Administration: not granted to the fleet.

-- Releases worker id p_worker by hand (its server is gone for good). Its holder, if it still
-- runs, stops minting at its next renewal; a new holder takes it only after the lock-delay.
CREATE OR REPLACE FUNCTION snowflake_registry.release_worker(p_worker integer)
RETURNS text
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  r snowflake_registry.leases;
BEGIN
  UPDATE snowflake_registry.leases l
     SET released_at = pg_catalog.now(), released_by = 'admin',
         pending_key = NULL, pending_holder = NULL, pending_token = NULL, pending_since = NULL, pending_wait_ms = NULL
   WHERE l.worker = p_worker
  RETURNING * INTO r;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'the registry has no worker id %', p_worker
      USING ERRCODE = 'no_data_found', HINT = 'SELECT * FROM snowflake_registry.lease_list lists the worker ids it has.';
  END IF;
  RETURN pg_catalog.format('worker id %s released; its next holder waits %s ms before it mints', p_worker,
                           GREATEST(COALESCE(r.ttl_ms, 0), (SELECT lock_delay_ms FROM snowflake_registry.config)));
END
$$;

-- Registry format 2's way out of its freeze: nothing freezes now.
DROP FUNCTION IF EXISTS snowflake_registry.recover(bigint);

-- Lets servers that last leased from registry p_registry lease here although this one did not
-- import its leases: an administrator's word that none of them still holds a worker id there
-- that this registry could grant to another server.
CREATE OR REPLACE FUNCTION snowflake_registry.accept(p_registry uuid)
RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
  UPDATE snowflake_registry.config
     SET accepts = (SELECT pg_catalog.array_agg(DISTINCT u) FROM pg_catalog.unnest(accepts || p_registry) u);
END;

-- Moving a fleet to a new registry: in the old one, export() (it then grants no new lease);
-- in the new one, import() what it returned. Servers then move one at a time (a reload of
-- snowflake.registry): each gives its lease back here and takes it up there at once. Export
-- and import again once every server has moved, then retire_predecessor() in the new one.
CREATE OR REPLACE FUNCTION snowflake_registry.export(p_successor uuid)
RETURNS jsonb
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  c snowflake_registry.config;
BEGIN
  IF p_successor IS NULL THEN
    RAISE EXCEPTION 'export() needs the id of the registry that takes over'
      USING ERRCODE = 'null_value_not_allowed', HINT = 'Run SELECT registry_id FROM snowflake_registry.identity() in the new registry.';
  END IF;
  UPDATE snowflake_registry.config
     SET moved_to = p_successor, moved_at = COALESCE(moved_at, pg_catalog.now())
  RETURNING * INTO c;
  RETURN pg_catalog.jsonb_build_object(
    'registry_id', c.registry_id, 'epoch', c.epoch, 'lock_delay_ms', c.lock_delay_ms,
    'exported_at', pg_catalog.now(),
    'leases', COALESCE((SELECT pg_catalog.jsonb_agg(pg_catalog.to_jsonb(l) ORDER BY l.worker)
                          FROM snowflake_registry.leases l), '[]'));
END
$$;

CREATE OR REPLACE FUNCTION snowflake_registry.import(p_doc jsonb)
RETURNS text
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  c snowflake_registry.config;
  old uuid := (p_doc ->> 'registry_id')::uuid;
  exported timestamptz := (p_doc ->> 'exported_at')::timestamptz;
  delay bigint := GREATEST((p_doc ->> 'lock_delay_ms')::bigint, 0);
  n integer := 0;
  e jsonb;
  l snowflake_registry.leases;
  held boolean;
BEGIN
  SELECT * INTO c FROM snowflake_registry.config FOR UPDATE;
  IF old IS NULL OR old = c.registry_id THEN
    RAISE EXCEPTION 'import() needs what export() returned in another registry, not %', COALESCE(old::text, 'NULL')
      USING ERRCODE = 'invalid_parameter_value', HINT = 'In the old registry: SELECT snowflake_registry.export(<this registry''s id>).';
  END IF;
  IF c.predecessor IS NOT NULL AND c.predecessor <> old THEN
    RAISE EXCEPTION 'this registry already took over from registry %, not %', c.predecessor, old
      USING ERRCODE = 'object_not_in_prerequisite_state', HINT = 'Import a registry into a new one, one at a time.';
  END IF;
  UPDATE snowflake_registry.config
     SET predecessor = old, predecessor_exported_at = exported,
         accepts = (SELECT pg_catalog.array_agg(DISTINCT u) FROM pg_catalog.unnest(accepts || old) u);
  FOR e IN SELECT * FROM pg_catalog.jsonb_array_elements(p_doc -> 'leases') LOOP
    l := pg_catalog.jsonb_populate_record(NULL::snowflake_registry.leases, e);
    -- Held there at the export (and not given back): only its holder may take it here, until
    -- the old registry is retired.
    held := l.system_identifier IS NOT NULL AND l.released_at IS NULL;
    INSERT INTO snowflake_registry.leases AS x
           (worker, system_identifier, host, port, data_directory, timeline, boot, host_run, secret_hash, fence,
            since, renewed_at, expires_at, ttl_ms, last_mark, released_at, released_by, elsewhere)
    VALUES (l.worker, l.system_identifier, l.host, l.port, l.data_directory, l.timeline, l.boot, l.host_run, l.secret_hash, 0,
            l.since, l.renewed_at, l.expires_at, l.ttl_ms, l.last_mark, l.released_at, l.released_by, held)
    ON CONFLICT (worker) DO UPDATE SET last_mark = GREATEST(x.last_mark, EXCLUDED.last_mark);
    -- rows not taken up here yet follow the old registry
    UPDATE snowflake_registry.leases x
       SET (system_identifier, host, port, data_directory, timeline, boot, host_run, secret_hash,
            renewed_at, expires_at, ttl_ms, released_at, released_by, elsewhere)
         = (l.system_identifier, l.host, l.port, l.data_directory, l.timeline, l.boot, l.host_run, l.secret_hash,
            l.renewed_at, l.expires_at, l.ttl_ms, l.released_at, l.released_by, held)
     WHERE x.worker = l.worker AND (x.elsewhere OR x.system_identifier IS NULL);
    n := n + 1;
  END LOOP;
  RETURN pg_catalog.format('%s worker ids imported from registry %s (exported %s)', n, old, exported);
END
$$;

-- The registry imported from is no longer used by any server: worker ids still held there at
-- the last import become ordinary expired leases here (a claimer waits out the lock-delay).
-- Refused while the last import shows a lease there that had not run out when it was exported
-- (its holder may have renewed it there since; an exported registry renews no lease that ran
-- out).
CREATE OR REPLACE FUNCTION snowflake_registry.retire_predecessor()
RETURNS text
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  c snowflake_registry.config;
  live text;
  n integer;
BEGIN
  SELECT * INTO c FROM snowflake_registry.config FOR UPDATE;
  IF c.predecessor IS NULL THEN
    RAISE EXCEPTION 'this registry took over from no other'
      USING ERRCODE = 'object_not_in_prerequisite_state', HINT = 'Nothing to retire.';
  END IF;
  SELECT pg_catalog.string_agg(pg_catalog.format('worker id %s (%s, renewed %s)', l.worker,
           snowflake_registry.describe(l.system_identifier, l.host, l.port, l.data_directory), l.renewed_at), ', ' ORDER BY l.worker)
    INTO live
    FROM snowflake_registry.leases l
   WHERE l.elsewhere AND (c.predecessor_exported_at IS NULL OR l.expires_at >= c.predecessor_exported_at);
  IF live IS NOT NULL THEN
    RAISE EXCEPTION 'the registry % may still have holders: %', c.predecessor, live
      USING ERRCODE = 'object_not_in_prerequisite_state',
            HINT = 'Move or stop those servers, export from the old registry and import here again, then retire it.';
  END IF;
  UPDATE snowflake_registry.leases SET elsewhere = false WHERE elsewhere;
  GET DIAGNOSTICS n = ROW_COUNT;
  RETURN pg_catalog.format('registry %s retired; %s worker ids left there are free after the lock-delay', c.predecessor, n);
END
$$;

-- The registry's limits: the lock-delay (also the longest lease a server may take) and the
-- clock skew a claim accepts.
CREATE OR REPLACE FUNCTION snowflake_registry.set_limits(p_lock_delay interval DEFAULT NULL, p_max_skew interval DEFAULT NULL)
RETURNS text
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  c snowflake_registry.config;
BEGIN
  UPDATE snowflake_registry.config
     SET lock_delay_ms = COALESCE((EXTRACT(epoch FROM p_lock_delay) * 1000)::integer, lock_delay_ms),
         max_skew_ms = COALESCE((EXTRACT(epoch FROM p_max_skew) * 1000)::integer, max_skew_ms)
  RETURNING * INTO c;
  RETURN pg_catalog.format('lock_delay %s ms, max_skew %s ms', c.lock_delay_ms, c.max_skew_ms);
END
$$;

-- What a fleet's role needs, and nothing more.
CREATE OR REPLACE FUNCTION snowflake_registry.grant_fleet(p_role regrole)
RETURNS void
LANGUAGE plpgsql SECURITY INVOKER SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
  EXECUTE pg_catalog.format('GRANT USAGE ON SCHEMA snowflake_registry TO %s', p_role);
  EXECUTE pg_catalog.format('GRANT SELECT ON snowflake_registry.lease_list TO %s', p_role);
  EXECUTE pg_catalog.format('GRANT EXECUTE ON FUNCTION
      snowflake_registry.claim(snowflake_registry.holder, snowflake_registry.terms, integer, integer, boolean, bigint),
      snowflake_registry.confirm(snowflake_registry.holder, snowflake_registry.terms, integer, bigint),
      snowflake_registry.renew(snowflake_registry.holder, snowflake_registry.terms, integer, bigint, bigint, boolean),
      snowflake_registry.release(snowflake_registry.holder, snowflake_registry.terms, integer, bigint, bigint),
      snowflake_registry.claim(text, text, integer, text, text, text, text, integer, integer, integer, boolean, integer, bigint, bigint, bigint, uuid, bigint),
      snowflake_registry.confirm(text, text, integer, text, text, text, text, integer, integer, bigint, integer, bigint, uuid, bigint, bigint),
      snowflake_registry.renew(text, text, integer, text, text, text, integer, integer, bigint, bigint, bigint, integer, bigint, uuid, bigint, boolean),
      snowflake_registry.release(text, text, integer, text, text, text, integer, bigint, bigint, uuid, bigint),
      snowflake_registry.identity()
    TO %s', p_role);
END
$$;

REVOKE ALL ON ALL FUNCTIONS IN SCHEMA snowflake_registry FROM PUBLIC;

-- The fleet's roles (those given claim) keep what grant_fleet gives across a change of a
-- function's signature: this file, run again after an upgrade, gives it to them again.
SELECT snowflake_registry.grant_fleet(g.grantee::pg_catalog.regrole)
  FROM (SELECT DISTINCT x.grantee
          FROM pg_catalog.pg_proc p, pg_catalog.aclexplode(p.proacl) x
         WHERE p.oid = 'snowflake_registry.claim(text, text, integer, text, text, text, text, integer, integer, integer, boolean, integer, bigint, bigint, bigint, uuid, bigint)'::pg_catalog.regprocedure
           AND x.grantee <> p.proowner AND x.grantee <> 0) g;

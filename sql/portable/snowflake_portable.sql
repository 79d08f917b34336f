-- snowflake_portable.sql: snowflake ids for a PostgreSQL that cannot load snowflake_ext's
-- library (RDS, Aurora, Cloud SQL, Azure, Heroku, Supabase, Neon, ...). Plain SQL and
-- PL/pgSQL, PostgreSQL 14 to 18, no superuser.
--
-- Install, as the owner of a schema that no other role may create objects in, into that
-- schema, the first of your search_path:
--
--     psql -v ON_ERROR_STOP=1 -1 -f snowflake_portable.sql
--     SELECT snowflake_set_worker_id(1);        -- unique among every writer whose ids can meet
--     CREATE TABLE orders (id bigint PRIMARY KEY DEFAULT snowflake_nextval(), ...);
--
-- Running the file again upgrades the functions (from this file's 0.3.0 too) and keeps the
-- state. With pg_tle, the same text installs as a trusted-language extension (see README,
-- "The portable edition").
--
-- Design
-- ------
-- The ids are the native edition's: same layouts, same functions and signatures for what the
-- two share (minting with the configured worker, decoding, composing, bounds, text forms,
-- restoring the mark, rewinding a followed clock jump), so application SQL does not change
-- between editions. What differs is where the state lives.
--
-- The counter. snowflake_portable_counter, a sequence, holds the last id issued, in id space:
-- time | worker | sequence (Sonyflake: time | sequence | worker, counted in steps of one
-- worker field). nextval() is the whole of minting: it is WAL-logged, so the counter survives
-- crashes, restarts, pg_upgrade and a failover to a standby that received its WAL, and it never
-- goes back when the clock does. Callers hold USAGE on it: nextval() only moves it forward,
-- and setval() needs UPDATE, which only the owner has.
--
-- The fast path. snowflake_nextval() is one SQL expression, inlined into the caller's query
-- (a LANGUAGE sql function with a single RETURN, not SECURITY DEFINER and without SET clauses,
-- is), bound to its objects when it is created: no lock, no subtransaction, no PL/pgSQL. It
-- accepts the value of nextval() when all of this holds, else calls the slow path:
-- * no move of the counter overlapped the nextval() (below);
-- * the clock has not passed the deadline of the last move (tolerance: 10 ms);
-- * the value is still in the time unit the last move put the counter in, with this worker's
--   field: the sequence part did not overflow into the worker field (Sonyflake: the value is not
--   the first of a time unit, and the worker field, the lowest bits, is this worker's).
-- So only a move takes the counter into a new time unit, and every move runs the checks that
-- keep ids unique (the end of the layout, the range a rewind reserved). Sonyflake's layout is
-- the exception: there the sequence carries into the time, and the fast path refuses only the
-- first value of each unit; so while a rewind's reserved range is ahead of the counter, moves
-- leave the fast path shut and every id is a move (see _snowflake_advance). At low rates the counter
-- lags the clock; the move at each deadline brings it up, so ids decode to at most 10 ms (plus
-- the time a move takes) before the time they were minted, and at most the burst or the clock
-- step that put the counter ahead after it.
-- A standby is sent to the slow path before nextval() (pg_is_in_recovery(), a flag: about 50
-- instructions), which refuses it with the worker id and a hint. A read-only transaction on a
-- primary is refused by the fast path's nextval() itself: 25006, "cannot execute nextval() in a
-- read-only transaction", without the worker id or a hint. Telling it apart beforehand takes
-- current_setting('transaction_read_only'), a lookup of the setting by name that cost 1,730 of
-- the fast path's 11,741 instructions per id (15%, measured with bench/run --portable-cost),
-- for every id, for a refusal whose own message already says what to change.
--
-- Moves, and the locking protocol. setval() is not a compare-and-set: a move racing other
-- sessions' nextval() could set the counter back under a value already handed out. Moves are
-- made one at a time, by the slow path (and batches, snowflake_restore_mark, snowflake_rewind),
-- each holding a row lock on snowflake_portable_mover taken FOR UPDATE inside a PL/pgSQL block
-- that always ends by an error (its own when all went well), so the lock goes with the block's
-- subtransaction, whatever error or cancellation lands where. Only roles that may UPDATE (or
-- DELETE from) that table can lock its row: the owner, superusers and members of
-- pg_write_all_data (see Trust); no other role can take what a move waits on. A waiter gives up
-- after 10 s with an error naming the holder, its role and who can end it; a move that finds the
-- row gone (deleted) refuses rather than move unlocked. A second sequence,
-- snowflake_portable_generation, is a seqlock that also carries the deadline: stable, it holds
-- 2 * deadline + 1 (Unix ms); during a move, the negative of the next stable value. A move sets
-- the marker, takes nextval(), sets the counter, sets the new stable value. The fast path reads
-- the generation before and after its nextval() (callers hold SELECT on it, not USAGE: nobody
-- else can move it) and accepts only if both readings are the same stable value and the clock
-- (2 * now in ms: even, never equal to a stable value) is below it:
--     GREATEST(before, 2 * now_ms, overflow) = abs(after)
-- Arguments are evaluated left to right, and each reading is used once, as inlining requires. A
-- value handed out inside a move's window is never accepted, so no accepted value is ever set
-- back under; values thrown away are lost, never repeated. A move that dies half way leaves the
-- marker, which the next move (the lock being free) replaces.
--
-- Durability: a sequence's. The counter is a sequence, and its WAL is flushed as any
-- sequence's is: by the commit of a transaction that wrote WAL, when that commit waits for its
-- flush (synchronous_commit on, remote_write or remote_apply). With synchronous_commit off or
-- local a crash can lose the last transactions, and the ids they minted can be minted again, as
-- with nextval(). This file once turned synchronous_commit on for each minting transaction's
-- commit (a deferred constraint trigger, a transaction-local setting), but everything SQL can
-- reach at commit is the caller's to bring forward or skip (SET CONSTRAINTS ALL IMMEDIATE, a
-- later SET LOCAL, a function's SET clause, a custom setting set ahead): a promise resting on
-- it did not hold, and it cost a single-row INSERT more than a quarter of its instructions.
--
-- Copies. A dump restored into another database or cluster holds the worker id and the counter
-- of the original, which goes on minting the same ids. snowflake_set_worker_id() records where
-- it was run: the OIDs of the database and of the counter (_snowflake_home(), written with the
-- configuration; running the file again carries it). A restore gives the counter another OID,
-- and a database of another cluster has its own; pg_upgrade keeps both (from PostgreSQL 15 on
-- it keeps database OIDs; this file needs 14 or later, so every upgrade lands on 15 or later),
-- and so do a standby and a base backup, which are the same cluster. The fast path compares the
-- counter's OID, as bound in its body, with the recorded one: both constants, folded when the
-- call is planned, so this costs nothing, and in a copy the expression is the slow path alone,
-- which (like every move) compares both OIDs and refuses until the copy's owner sets a worker
-- id. (Not seen: a copy in another cluster whose database and counter got the very OIDs of the
-- original's; a copy of an install older than the record, once the file has run in it.)
--
-- Trust. The state belongs to the role that installed the file, which must own the schema; no
-- other role may create objects in the schema, and the install refuses, naming it, any object
-- there that name resolution could bind instead of the file's own (an operator, a function or
-- type named like a built-in, a function named like the file's that another role owns). The
-- configuration (worker id, layout) lives only in the bodies of functions the owner's functions
-- write (_snowflake_write_functions, run again by this file from _snowflake_config()), not in a
-- table: no privilege on data reaches it. Members of pg_write_all_data can still setval() the
-- sequences, as any sequence (and lock, update or delete the mover's row): they can break
-- uniqueness anyway. Functions that run as the owner pin search_path to pg_catalog, this
-- schema, pg_temp; the fast path, which must not carry a SET clause (it would no longer be
-- inlined), qualifies every name. Decoding functions have SQL-standard bodies, bound when they
-- are created.
--
-- A forward jump of the clock is followed (SQL has no boot clock to tell a jump from an idle
-- spell). The latest move that went more than 1 s ahead is recorded; once the clock is right
-- again, the owner's snowflake_rewind(worker) returns the counter to it and reserves the ids
-- issued since the jump, which moves skip when they reach them (as the native edition does).
-- A jump followed while such a range is reserved starts, for its rewind, no later than the
-- range: the rewind reserves the two at once, and the counter returns to the clock.
-- The deadline the jump set stays (deadlines only grow, so that no stable generation value
-- comes back): until the clock reaches it, the counter moves up to the clock only when a time
-- unit fills, and at low rates ids decode to as early as the rewind until then. (In Sonyflake's
-- layout every id is a move until the counter has passed the reserved range: see
-- _snowflake_advance.)

-- Before anything else, and with nothing looked up by name on the installing session's
-- search_path (a schema others may create in, such as public on PostgreSQL 14, could hold a
-- better match for any operator or function): remember the schema to install into and the
-- session's search_path.
--
-- The file runs as one transaction or not at all. Run statement by statement (psql without -1),
-- each CREATE OR REPLACE would commit alone, and the functions that run as the owner would run,
-- until the file's last block pins their search_path again, with the search_path of whoever
-- calls them: a caller's planted functions would run as the owner. PostgreSQL tells SQL nothing
-- of the transaction block it runs in, so this statement leaves a transaction-local mark that
-- only a later statement of the same transaction can see (psql -1, BEGIN ... COMMIT, CREATE
-- EXTENSION, several statements sent as one query); the next statement refuses without it. A
-- refusal is an error, which takes back what its statement did, so this statement also sets a
-- search_path that names no schema: should psql go on after the refusal (without
-- ON_ERROR_STOP), every CREATE below fails ("no schema has been selected to create in") and
-- every later block finds nothing, until the last statement sets the session's search_path back.
DO $path$
BEGIN
    -- (A search_path left by an earlier run that stopped at the refusal is not remembered.)
    IF pg_catalog.current_setting('search_path') OPERATOR(pg_catalog.<>) '"snowflake_portable.sql: not in one transaction"' THEN
        PERFORM pg_catalog.set_config('snowflake_portable.schema', COALESCE(pg_catalog.current_schema(), ''), false);
        PERFORM pg_catalog.set_config('snowflake_portable.search_path', pg_catalog.current_setting('search_path'), false);
    END IF;
    PERFORM pg_catalog.set_config('search_path', '"snowflake_portable.sql: not in one transaction"', false);
    PERFORM pg_catalog.set_config('snowflake_portable.one_transaction', 'yes', true);
END
$path$;

DO $check$
DECLARE
    schema_name text := current_setting('snowflake_portable.schema');
    schema_oid oid := (SELECT oid FROM pg_catalog.pg_namespace WHERE nspname = schema_name);
    -- Who owns the schema in effect: the database's owner when it is pg_database_owner (public
    -- from PostgreSQL 15 on).
    owner oid := (SELECT CASE WHEN r.rolname = 'pg_database_owner' THEN d.datdba ELSE n.nspowner END
                  FROM pg_catalog.pg_namespace n
                  JOIN pg_catalog.pg_roles r ON r.oid = n.nspowner
                  JOIN pg_catalog.pg_database d ON d.datname = current_database()
                  WHERE n.oid = schema_oid);
    -- The state this file keeps, and what 0.3.0 kept (migrated below).
    state_names constant text[] := ARRAY['snowflake_portable_counter', 'snowflake_portable_generation',
        'snowflake_portable_wal', 'snowflake_portable_jump_from', 'snowflake_portable_jump_base',
        'snowflake_portable_reserved_from', 'snowflake_portable_reserved_to', 'snowflake_portable_mover',
        'snowflake_portable_commit', 'snowflake_portable_config', 'snowflake_portable_ticks'];
    planted text;
    old_worker integer;
    old_layout text;
    minted bigint;
    same_layout boolean;
BEGIN
    IF pg_catalog.current_setting('snowflake_portable.one_transaction', true) IS DISTINCT FROM 'yes' THEN
        RAISE EXCEPTION 'snowflake_portable.sql must run as one transaction: its first statement committed by itself'
            USING ERRCODE = 'no_active_sql_transaction',
                  DETAIL = 'Run statement by statement, the functions that run as the installing role would be replaced one at a time, and run meanwhile with their callers'' search_path. Nothing was changed; this session''s search_path names no schema until the file ends.',
                  HINT = format('Run it with psql -1 (psql -v ON_ERROR_STOP=1 -1 -f snowflake_portable.sql), or between BEGIN and COMMIT; to go on in this session first: SET search_path TO %s;',
                                pg_catalog.current_setting('snowflake_portable.search_path', true));
    END IF;
    -- Names resolve in pg_catalog only until the checks below pass.
    PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', false);
    IF current_setting('server_version_num')::integer < 140000 THEN
        RAISE EXCEPTION 'snowflake_portable needs PostgreSQL 14 or later, not %', current_setting('server_version')
            USING ERRCODE = 'feature_not_supported',
                  HINT = 'Upgrade the server, or use an id generator that supports it.';
    END IF;
    IF schema_oid IS NULL THEN
        RAISE EXCEPTION 'no schema to install snowflake_portable into: search_path is %', current_setting('search_path')
            USING ERRCODE = 'invalid_schema_name',
                  HINT = 'SET search_path TO a schema you own, then run the file again.';
    END IF;
    -- The minting functions run as the installing role, with this schema on their search_path,
    -- and the decoding functions are bound to what this schema holds when they are created: no
    -- role but the installer (or one that has its rights already) may create objects in it.
    IF NOT pg_catalog.pg_has_role(owner, current_user, 'USAGE') THEN
        RAISE EXCEPTION 'schema % belongs to %, not to the role installing snowflake_portable, %',
                pg_catalog.quote_ident(schema_name), owner::regrole, current_user
            USING ERRCODE = 'insufficient_privilege',
                  DETAIL = 'The owner of the schema could change what functions that run as the installing role call.',
                  HINT = format('Install it as %s, or into a schema of your own.', owner::regrole);
    END IF;
    IF EXISTS (
        SELECT 1
        FROM pg_catalog.pg_namespace n, pg_catalog.aclexplode(n.nspacl) a
        LEFT JOIN pg_catalog.pg_roles r ON r.oid = a.grantee
        WHERE n.oid = schema_oid
          AND a.privilege_type = 'CREATE'
          AND (a.grantee = 0
               OR NOT pg_catalog.pg_has_role(CASE WHEN r.rolname = 'pg_database_owner' THEN owner ELSE a.grantee END,
                                             current_user, 'USAGE'))
    ) THEN
        RAISE EXCEPTION 'schema % lets other roles create objects in it', pg_catalog.quote_ident(schema_name)
            USING ERRCODE = 'insufficient_privilege',
                  DETAIL = 'The minting functions run as their owner with this schema on their search_path.',
                  HINT = format('Install into a schema only you can create in (CREATE SCHEMA ids; SET search_path TO ids, public;), or REVOKE CREATE ON SCHEMA %s FROM the other roles.', pg_catalog.quote_ident(schema_name));
    END IF;
    -- Running the file again keeps the state, but only state the installing role owns: a
    -- counter or configuration another role made could have been set back or planted.
    IF EXISTS (
        SELECT 1 FROM pg_catalog.pg_class c
        WHERE c.relnamespace = schema_oid
          AND c.relname OPERATOR(pg_catalog.=) ANY (state_names)
          AND c.relowner OPERATOR(pg_catalog.<>) current_user::regrole
    ) THEN
        RAISE EXCEPTION 'the snowflake state in schema % belongs to another role', pg_catalog.quote_ident(schema_name)
            USING ERRCODE = 'insufficient_privilege',
                  DETAIL = (SELECT string_agg(format('%s is owned by %s', c.relname, c.relowner::regrole), '; ' ORDER BY c.relname)
                            FROM pg_catalog.pg_class c
                            WHERE c.relnamespace = schema_oid
                              AND c.relname OPERATOR(pg_catalog.=) ANY (state_names)),
                  HINT = 'Run the file as that role, or install into a schema of your own.';
    END IF;
    -- Objects already in the schema that name resolution could take instead of the ones this
    -- file means while it creates its functions (whose SQL-standard bodies are bound then), or
    -- that the functions that run as the owner could call: any operator (the file makes none,
    -- and an operator can be a better match than the built-in for some argument), a function or
    -- type named like one of pg_catalog's, and a function named like the file's own that another
    -- role owns. Whoever made them (a role that could once create here, the owner itself), the
    -- install refuses, naming them, rather than bind or run them.
    SELECT string_agg(what, '; ' ORDER BY what) INTO planted FROM (
        SELECT format('operator %s', o.oid::regoperator) AS what
        FROM pg_catalog.pg_operator o WHERE o.oprnamespace = schema_oid
        UNION ALL
        SELECT format('function %s (owned by %s)', p.oid::regprocedure, p.proowner::regrole)
        FROM pg_catalog.pg_proc p
        WHERE p.pronamespace = schema_oid
          AND (EXISTS (SELECT 1 FROM pg_catalog.pg_proc b
                       WHERE b.pronamespace = 'pg_catalog'::regnamespace AND b.proname OPERATOR(pg_catalog.=) p.proname)
               OR (p.proname OPERATOR(pg_catalog.~) '^_?snowflake'
                   AND p.proowner OPERATOR(pg_catalog.<>) current_user::regrole))
        UNION ALL
        SELECT format('type %s (owned by %s)', t.oid::regtype, t.typowner::regrole)
        FROM pg_catalog.pg_type t
        WHERE t.typnamespace = schema_oid
          AND EXISTS (SELECT 1 FROM pg_catalog.pg_type b
                      WHERE b.typnamespace = 'pg_catalog'::regnamespace AND b.typname OPERATOR(pg_catalog.=) t.typname)
    ) found;
    IF planted IS NOT NULL THEN
        RAISE EXCEPTION 'schema % holds objects that snowflake_portable could bind or run instead of its own',
                pg_catalog.quote_ident(schema_name)
            USING ERRCODE = 'insufficient_privilege',
                  DETAIL = planted || '.',
                  HINT = 'Drop them (or move them to another schema) after checking who made them, then run the file again.';
    END IF;
    -- An install of 0.3.0 kept its configuration in a table, which members of pg_write_all_data
    -- can change: take it over only if it agrees with what the functions 0.3.0 wrote mint and
    -- decode (those were written by the owner's functions).
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_class WHERE relnamespace = schema_oid AND relname = 'snowflake_portable_config')
       AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_proc WHERE pronamespace = schema_oid AND proname = '_snowflake_config') THEN
        EXECUTE format('SELECT worker, layout FROM %I.snowflake_portable_config', schema_name) INTO old_worker, old_layout;
        IF old_worker IS NOT NULL THEN
            EXECUTE format('SELECT %1$I.snowflake_worker(%1$I.snowflake_nextval())', schema_name) INTO minted;
            IF minted OPERATOR(pg_catalog.<>) old_worker THEN
                RAISE EXCEPTION 'the snowflake configuration table of schema % says worker %, but ids are minted with worker %',
                        pg_catalog.quote_ident(schema_name), old_worker, minted
                    USING ERRCODE = 'data_corrupted',
                          DETAIL = 'The table was changed outside snowflake_set_worker_id(), which rewrites the minting functions.',
                          HINT = format('Set it back (UPDATE %I.snowflake_portable_config SET worker = %s) or find out who changed it, then run the file again.', schema_name, minted);
            END IF;
        END IF;
        EXECUTE format($q$SELECT %1$I.snowflake_min_id('2031-01-01 00:00:00+00') OPERATOR(pg_catalog.=)
                              %1$I.snowflake_compose('2031-01-01 00:00:00+00', 0, 0, %2$L)$q$, schema_name, old_layout)
            INTO STRICT same_layout;
        IF NOT same_layout THEN
            RAISE EXCEPTION 'the snowflake configuration table of schema % says layout %, but the decoding functions use another',
                    pg_catalog.quote_ident(schema_name), old_layout
                USING ERRCODE = 'data_corrupted',
                      DETAIL = 'The table was changed outside snowflake_set_layout(), which rewrites the functions.',
                      HINT = 'Set the layout in the table back to the one ids were issued in, then run the file again.';
        END IF;
        PERFORM pg_catalog.set_config('snowflake_portable.upgrade_worker', COALESCE(old_worker::text, ''), false);
        PERFORM pg_catalog.set_config('snowflake_portable.upgrade_layout', old_layout, false);
    ELSE
        PERFORM pg_catalog.set_config('snowflake_portable.upgrade_worker', '', false);
        PERFORM pg_catalog.set_config('snowflake_portable.upgrade_layout', '', false);
    END IF;
    -- Everything below resolves names in this schema and pg_catalog only, whatever else the
    -- installing session's search_path holds (a schema others may create in, such as public on
    -- PostgreSQL 14): the functions created here are bound to what they find now, and the
    -- checks above leave nothing in this schema that could stand in for a built-in.
    PERFORM pg_catalog.set_config('search_path', pg_catalog.format('%I, pg_catalog, pg_temp', schema_name), false);
END
$check$;

-- ---------------------------------------------------------------------------------------------
-- State. Only the owner holds privileges on it, except USAGE on the counter and SELECT on the
-- generation, which every caller of the fast path needs (granted to PUBLIC: USAGE on the
-- schema is what the owner gives or withholds).
-- ---------------------------------------------------------------------------------------------

-- The last id issued, in id space (see Design). 0 (never called) until the first move.
CREATE SEQUENCE IF NOT EXISTS snowflake_portable_counter AS bigint MINVALUE 0 START WITH 0 CACHE 1 NO CYCLE;
-- The seqlock and the deadline: 2 * deadline + 1, or its negative during a move.
CREATE SEQUENCE IF NOT EXISTS snowflake_portable_generation AS bigint
    MINVALUE -9223372036854775807 START WITH 1 CACHE 1 NO CYCLE;
-- The latest move that went more than 1 s ahead: the counter before it (base) and after it
-- (from); 0 when there is none (or it was rewound).
CREATE SEQUENCE IF NOT EXISTS snowflake_portable_jump_from AS bigint MINVALUE 0 START WITH 0 CACHE 1 NO CYCLE;
CREATE SEQUENCE IF NOT EXISTS snowflake_portable_jump_base AS bigint MINVALUE 0 START WITH 0 CACHE 1 NO CYCLE;
-- The ids a rewind reserved (issued after a jump): moves skip them. 0 when there are none.
CREATE SEQUENCE IF NOT EXISTS snowflake_portable_reserved_from AS bigint MINVALUE 0 START WITH 0 CACHE 1 NO CYCLE;
CREATE SEQUENCE IF NOT EXISTS snowflake_portable_reserved_to AS bigint MINVALUE 0 START WITH 0 CACHE 1 NO CYCLE;
-- One row, locked by each move (see Locking protocol).
CREATE TABLE IF NOT EXISTS snowflake_portable_mover (one boolean PRIMARY KEY DEFAULT true CHECK (one));
INSERT INTO snowflake_portable_mover DEFAULT VALUES ON CONFLICT DO NOTHING;

DO $state$
BEGIN
    -- (Not reached outside one transaction: see the file's first statement.)
    IF pg_catalog.current_setting('snowflake_portable.one_transaction', true) IS DISTINCT FROM 'yes' THEN
        RAISE EXCEPTION 'snowflake_portable.sql must run as one transaction'
            USING ERRCODE = 'no_active_sql_transaction', HINT = 'Run it with psql -1, or between BEGIN and COMMIT.';
    END IF;
    -- A generation never set reads NULL: start it expired (deadline 0), so the first id moves.
    IF pg_catalog.pg_sequence_last_value('snowflake_portable_generation') IS NULL THEN
        PERFORM pg_catalog.setval('snowflake_portable_generation', 1);
    END IF;
END
$state$;

-- ---------------------------------------------------------------------------------------------
-- Errors. Every error a caller can cause has a SQLSTATE, a message naming the value and a hint.
-- IMMUTABLE so that the decoding functions that call it stay immutable (and inlinable); it is
-- only ever reached with the offending value among its arguments.
-- ---------------------------------------------------------------------------------------------

CREATE OR REPLACE FUNCTION _snowflake_error(sqlstate text, message text, detail text, hint text)
RETURNS bigint
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF detail IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = sqlstate, MESSAGE = message, HINT = hint;
    END IF;
    RAISE EXCEPTION USING ERRCODE = sqlstate, MESSAGE = message, DETAIL = detail, HINT = hint;
END
$$;

-- ---------------------------------------------------------------------------------------------
-- Layouts: the presets of the native edition (core/src/layout.rs), by name. Each parameter is
-- its own function so that, with a constant layout, the planner folds it to a constant.
-- ---------------------------------------------------------------------------------------------

CREATE OR REPLACE FUNCTION _snowflake_layout(layout text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN CASE
    WHEN layout IS NULL THEN NULL
    WHEN lower(btrim(layout, E' \t\n\r\f\x0b')) IN ('snowflake', 'twitter', 'discord', 'instagram', 'sonyflake', 'pgedge')
    THEN lower(btrim(layout, E' \t\n\r\f\x0b'))
    ELSE _snowflake_error('22023', 'invalid snowflake layout "' || layout || '": the portable edition knows the presets only',
        NULL, 'Name a layout (snowflake, twitter, discord, instagram, sonyflake, pgedge); custom layouts need the native edition.')::text
END;

-- The instant time 0 stands for, in Unix milliseconds.
CREATE OR REPLACE FUNCTION _snowflake_epoch_ms(layout text) RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN CASE _snowflake_layout(layout)
    WHEN 'snowflake' THEN 1735689600000   -- 2025-01-01
    WHEN 'twitter' THEN 1288834974657     -- 2010-11-04 01:42:54.657
    WHEN 'discord' THEN 1420070400000     -- 2015-01-01
    WHEN 'instagram' THEN 1314220021721   -- 2011-08-24 21:07:01.721
    WHEN 'sonyflake' THEN 1409529600000   -- 2014-09-01
    WHEN 'pgedge' THEN 1672531200000      -- 2023-01-01
END;

-- Milliseconds per time unit.
CREATE OR REPLACE FUNCTION _snowflake_unit_ms(layout text) RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN CASE _snowflake_layout(layout) WHEN 'sonyflake' THEN 10 ELSE 1 END;

CREATE OR REPLACE FUNCTION _snowflake_time_bits(layout text) RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN CASE _snowflake_layout(layout) WHEN 'discord' THEN 42 WHEN 'sonyflake' THEN 39 ELSE 41 END;

CREATE OR REPLACE FUNCTION _snowflake_worker_bits(layout text) RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN CASE _snowflake_layout(layout) WHEN 'instagram' THEN 13 WHEN 'sonyflake' THEN 16 ELSE 10 END;

CREATE OR REPLACE FUNCTION _snowflake_seq_bits(layout text) RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN CASE _snowflake_layout(layout) WHEN 'instagram' THEN 10 WHEN 'sonyflake' THEN 8 ELSE 12 END;

-- Whether the sequence sits above the worker (Sonyflake: time | sequence | worker).
CREATE OR REPLACE FUNCTION _snowflake_sequence_first(layout text) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN _snowflake_layout(layout) = 'sonyflake';

-- The largest time field of a positive id (layouts of 64 bits lose their top time bit).
CREATE OR REPLACE FUNCTION _snowflake_max_time(layout text) RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN least((1::bigint << _snowflake_time_bits(layout)) - 1,
             9223372036854775807 >> (_snowflake_worker_bits(layout) + _snowflake_seq_bits(layout)));

-- The id of a time, worker and sequence, each already checked.
CREATE OR REPLACE FUNCTION _snowflake_id(layout text, t bigint, worker bigint, seq bigint) RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN CASE WHEN _snowflake_sequence_first(layout)
    THEN (t << (_snowflake_worker_bits(layout) + _snowflake_seq_bits(layout)))
         | (seq << _snowflake_worker_bits(layout)) | worker
    ELSE (t << (_snowflake_worker_bits(layout) + _snowflake_seq_bits(layout)))
         | (worker << _snowflake_seq_bits(layout)) | seq
END;

-- An id, checked to be one of the layout: positive, time field within the layout.
CREATE OR REPLACE FUNCTION _snowflake_valid(id bigint, layout text) RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN CASE
    WHEN id < 0 THEN _snowflake_error('22023', id::text || ' is not a snowflake id: snowflake ids are never negative',
        'The largest snowflake id is ' || _snowflake_id(layout, _snowflake_max_time(layout),
            (1::bigint << _snowflake_worker_bits(layout)) - 1, (1::bigint << _snowflake_seq_bits(layout)) - 1)::text || '.',
        'Pass an id made by snowflake_nextval() or snowflake_compose().')
    WHEN id >> (_snowflake_worker_bits(layout) + _snowflake_seq_bits(layout)) > _snowflake_max_time(layout)
    THEN _snowflake_error('22003', id::text || ' is not an id of this layout: its time field is past the layout''s end',
        'Layout ' || _snowflake_layout(layout) || '.',
        'Decode the id with the layout that made it (snowflake_decode(id, layout)).')
    ELSE id
END;

CREATE OR REPLACE FUNCTION _snowflake_time_of_id(id bigint, layout text) RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN _snowflake_valid(id, layout) >> (_snowflake_worker_bits(layout) + _snowflake_seq_bits(layout));

CREATE OR REPLACE FUNCTION _snowflake_worker_of_id(id bigint, layout text) RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN (CASE WHEN _snowflake_sequence_first(layout)
    THEN _snowflake_valid(id, layout)
    ELSE _snowflake_valid(id, layout) >> _snowflake_seq_bits(layout)
END & ((1::bigint << _snowflake_worker_bits(layout)) - 1))::integer;

CREATE OR REPLACE FUNCTION _snowflake_seq_of_id(id bigint, layout text) RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN (CASE WHEN _snowflake_sequence_first(layout)
    THEN _snowflake_valid(id, layout) >> _snowflake_worker_bits(layout)
    ELSE _snowflake_valid(id, layout)
END & ((1::bigint << _snowflake_seq_bits(layout)) - 1))::integer;

-- A layout spelled out, as the native edition's messages show it.
CREATE OR REPLACE FUNCTION _snowflake_fields(layout text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN 'epoch=' || _snowflake_epoch_ms(layout)::text || ' unit=' || _snowflake_unit_ms(layout)::text || 'ms time='
    || _snowflake_time_bits(layout)::text || ' worker=' || _snowflake_worker_bits(layout)::text || ' sequence='
    || _snowflake_seq_bits(layout)::text || ' order='
    || CASE WHEN _snowflake_sequence_first(layout) THEN 'time-sequence-worker' ELSE 'time-worker-sequence' END;

-- A layout as people know it: the first preset with its fields (as the native edition names
-- it), else its fields.
CREATE OR REPLACE FUNCTION _snowflake_describe(layout text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN COALESCE((SELECT p.name
                   FROM unnest(ARRAY['snowflake', 'twitter', 'discord', 'instagram', 'sonyflake', 'pgedge'])
                        WITH ORDINALITY AS p(name, n)
                  WHERE _snowflake_fields(p.name) = _snowflake_fields(layout)
                  ORDER BY p.n LIMIT 1),
                _snowflake_fields(layout));

-- The timestamp a time field stands for (the start of its unit).
CREATE OR REPLACE FUNCTION _snowflake_timestamp_of(t bigint, layout text) RETURNS timestamptz
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN to_timestamp(((_snowflake_epoch_ms(layout) + t * _snowflake_unit_ms(layout))::numeric / 1000)::double precision);

-- The span of a layout, for messages: its first and its last instant.
CREATE OR REPLACE FUNCTION _snowflake_range(layout text) RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE
RETURN 'Ids of this layout (' || _snowflake_describe(layout) || ') count time from ' || _snowflake_timestamp_of(0, layout)
    || ' to ' || (_snowflake_timestamp_of(_snowflake_max_time(layout), layout)
                  + make_interval(secs => (_snowflake_unit_ms(layout) - 1) / 1000.0)) || '.';

-- The error of a timestamp outside a layout. IMMUTABLE although it prints timestamps in the
-- session's time zone, because it never returns: it only raises, and being immutable keeps
-- _snowflake_time_of (and so snowflake_min_id and the bounds) inlinable.
CREATE OR REPLACE FUNCTION _snowflake_time_error(ts timestamptz, layout text) RETURNS bigint
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
AS $$
BEGIN
    IF ts < _snowflake_timestamp_of(0, layout) THEN
        RAISE EXCEPTION 'timestamp % is before the snowflake epoch %', ts, _snowflake_timestamp_of(0, layout)
            USING ERRCODE = '22008', DETAIL = _snowflake_range(layout),
                  HINT = 'Use a timestamp within the id layout''s range; for an open-ended range query, compare with 0 instead.';
    END IF;
    RAISE EXCEPTION 'timestamp % is after the end of the snowflake id layout, %', ts,
            _snowflake_timestamp_of(_snowflake_max_time(layout), layout) + make_interval(secs => (_snowflake_unit_ms(layout) - 1) / 1000.0)
        USING ERRCODE = '22008', DETAIL = _snowflake_range(layout),
              HINT = 'Use a timestamp within the id layout''s range; for an open-ended range query, compare with 9223372036854775807 instead.';
END
$$;

-- Microseconds since 1970 of a finite timestamp: from an interval (immutable), not from
-- extract(epoch FROM timestamptz) (stable), so that the functions using it are inlined.
CREATE OR REPLACE FUNCTION _snowflake_unix_us(ts timestamptz) RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN floor(extract(epoch FROM ts - timestamptz '1970-01-01 00:00:00+00') * 1000000)::bigint;

-- One past the last microsecond a layout counts.
CREATE OR REPLACE FUNCTION _snowflake_end_us(layout text) RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN (_snowflake_epoch_ms(layout) + (_snowflake_max_time(layout) + 1) * _snowflake_unit_ms(layout)) * 1000;

-- The time field of a timestamp, rounded down; an error outside the layout.
CREATE OR REPLACE FUNCTION _snowflake_time_of(ts timestamptz, layout text) RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN CASE
    WHEN NOT isfinite(ts)
      OR _snowflake_unix_us(ts) < _snowflake_epoch_ms(layout) * 1000
      OR _snowflake_unix_us(ts) >= _snowflake_end_us(layout)
    THEN _snowflake_time_error(ts, layout)
    ELSE (_snowflake_unix_us(ts) - _snowflake_epoch_ms(layout) * 1000) / (_snowflake_unit_ms(layout) * 1000)
END;

-- A worker id or sequence number, checked against its field: `what` names it in the message,
-- `plural` in the detail, `hint` says what to pass.
CREATE OR REPLACE FUNCTION _snowflake_checked(value integer, bits integer, what text, plural text, hint text) RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN CASE WHEN value < 0 OR value > (1::bigint << bits) - 1
    THEN _snowflake_error('22003', 'snowflake ' || what || ' ' || value::text || ' is out of range',
        plural || ' are ' || bits::text || ' bits: 0 to ' || ((1::bigint << bits) - 1)::text || '.',
        hint || ((1::bigint << bits) - 1)::text || '.')
    ELSE value
END;

-- ---------------------------------------------------------------------------------------------
-- Decoding and composing, in a layout named by the caller.
-- ---------------------------------------------------------------------------------------------

-- No row for a NULL argument, as a STRICT function would give; not declared STRICT, because
-- the planner inlines only set-returning functions that are not.
CREATE OR REPLACE FUNCTION snowflake_decode(id bigint, layout text)
RETURNS TABLE (ts timestamptz, worker integer, seq integer)
LANGUAGE sql IMMUTABLE PARALLEL SAFE
BEGIN ATOMIC
    SELECT _snowflake_timestamp_of(_snowflake_time_of_id(id, layout), layout),
           _snowflake_worker_of_id(id, layout),
           _snowflake_seq_of_id(id, layout)
    WHERE id IS NOT NULL AND layout IS NOT NULL;
END;

CREATE OR REPLACE FUNCTION snowflake_compose(ts timestamptz, worker integer, seq integer, layout text)
RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN CASE
    -- NULL for any NULL argument, as the native edition's STRICT function (not declared STRICT
    -- here, which would keep the planner from inlining it).
    WHEN ts IS NULL OR worker IS NULL OR seq IS NULL OR layout IS NULL THEN NULL
    -- The worker and the sequence are checked before the time, as in the native edition.
    WHEN _snowflake_checked(worker, _snowflake_worker_bits(layout), 'worker id', 'Worker ids',
             'Give each server, or each writer that must not collide, its own worker id between 0 and ') IS NULL
      OR _snowflake_checked(seq, _snowflake_seq_bits(layout), 'sequence', 'Sequence numbers',
             'Pass a sequence between 0 and ') IS NULL
    THEN NULL
    ELSE _snowflake_id(layout, _snowflake_time_of(ts, layout), worker, seq)
END;

-- ---------------------------------------------------------------------------------------------
-- Ids as text (core/src/text.rs): decimal, Crockford base32 (13 digits), base62 (11 digits).
-- ---------------------------------------------------------------------------------------------

CREATE OR REPLACE FUNCTION _snowflake_form(form text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN CASE
    WHEN form IS NULL THEN NULL
    WHEN lower(form) IN ('decimal', 'dec') THEN 'decimal'
    WHEN lower(form) IN ('base32', 'crockford') THEN 'base32'
    WHEN lower(form) = 'base62' THEN 'base62'
    ELSE _snowflake_error('22023', 'unknown snowflake text form "' || form || '"', NULL,
        'Use one of: decimal, base32, base62.')::text
END;

CREATE OR REPLACE FUNCTION snowflake_to_text(id bigint, form text DEFAULT 'base32') RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
BEGIN ATOMIC
    SELECT CASE WHEN id IS NULL OR form IS NULL OR _snowflake_valid(id, 'snowflake') IS NULL THEN NULL
                ELSE CASE _snowflake_form(form)
        WHEN 'decimal' THEN _snowflake_valid(id, 'snowflake')::text
        WHEN 'base32' THEN (
            SELECT string_agg(substr('0123456789ABCDEFGHJKMNPQRSTVWXYZ',
                       ((_snowflake_valid(id, 'snowflake') >> (5 * (12 - k))) & 31)::integer + 1, 1), '' ORDER BY k)
            FROM generate_series(0, 12) AS k)
        ELSE (
            SELECT string_agg(substr('0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz',
                       ((_snowflake_valid(id, 'snowflake') / p) % 62)::integer + 1, 1), '' ORDER BY k)
            FROM unnest(ARRAY[839299365868340224, 13537086546263552, 218340105584896, 3521614606208,
                              56800235584, 916132832, 14776336, 238328, 3844, 62, 1]::bigint[])
                 WITH ORDINALITY AS powers(p, k))
    END END;
END;

CREATE OR REPLACE FUNCTION snowflake_from_text(input text, form text DEFAULT 'base32') RETURNS bigint
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    kind text := CASE lower(form)
        WHEN 'decimal' THEN 'decimal' WHEN 'dec' THEN 'decimal'
        WHEN 'base32' THEN 'base32' WHEN 'crockford' THEN 'base32'
        WHEN 'base62' THEN 'base62' END;
    digits text := CASE kind
        WHEN 'decimal' THEN '0123456789'
        WHEN 'base32' THEN '0123456789ABCDEFGHJKMNPQRSTVWXYZ'
        ELSE '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz' END;
    base numeric := length(digits);
    width integer := CASE kind WHEN 'base32' THEN 13 WHEN 'base62' THEN 11 END;
    -- What the native edition trims (Unicode White_Space), where the database can hold it.
    space text := E' \t\n\r\f\x0b' || CASE WHEN getdatabaseencoding() = 'UTF8' THEN
        (SELECT string_agg(chr(c), '') FROM unnest(ARRAY[133, 160, 5760, 8192, 8193, 8194, 8195, 8196, 8197, 8198, 8199,
                                                         8200, 8201, 8202, 8232, 8233, 8239, 8287, 12288]) c)
        ELSE '' END;
    text_ text := btrim(input, space);
    value numeric := 0;
    ndigits integer := 0;
    c text;
    d integer;
    why text;
BEGIN
    IF kind IS NULL THEN
        RAISE EXCEPTION 'unknown snowflake text form "%"', form
            USING ERRCODE = '22023', HINT = 'Use one of: decimal, base32, base62.';
    END IF;
    IF text_ = '' THEN
        why := 'it is empty';
    ELSIF kind = 'decimal' AND left(text_, 1) = '-' THEN
        why := 'ids are never negative';
    ELSE
        FOR at IN 1 .. length(text_) LOOP
            c := substr(text_, at, 1);
            IF kind = 'base32' AND c = '-' THEN
                IF at = 1 OR substr(text_, at - 1, 1) = '-' OR at = length(text_) OR substr(text_, at + 1, 1) = '-' THEN
                    why := format('the hyphen at position %s does not separate two digits', at);
                    EXIT;
                END IF;
                CONTINUE;
            END IF;
            IF kind = 'base32' THEN
                c := translate(upper(c), 'ILO', '110');
            END IF;
            d := strpos(digits, c) - 1;
            IF d < 0 OR c = '' THEN
                why := format('''%s'' at position %s is not a digit of the form', substr(text_, at, 1), at);
                EXIT;
            END IF;
            ndigits := ndigits + 1;
            value := value * base + d;
            IF value > 18446744073709551615 THEN
                why := 'it is larger than the largest id, 9223372036854775807';
                EXIT;
            END IF;
        END LOOP;
        IF why IS NULL AND width IS NOT NULL AND ndigits <> width THEN
            why := format('it has %s digits, not %s', ndigits, width);
        END IF;
        IF why IS NULL AND value > 9223372036854775807 THEN
            why := 'it is larger than the largest id, 9223372036854775807';
        END IF;
    END IF;
    IF why IS NOT NULL THEN
        RAISE EXCEPTION 'invalid snowflake id in % form: "%"', initcap(kind),
                CASE WHEN length(input) > 40 THEN left(input, 40) || '... (' || length(input) || ' characters)' ELSE input END
            USING ERRCODE = '22P02',
                  DETAIL = 'It is not an id because ' || why || '.',
                  HINT = CASE kind
                      WHEN 'decimal' THEN 'A snowflake id in this form is up to 19 digits, like 250163766832934912.'
                      WHEN 'base32' THEN 'A snowflake id in this form is exactly 13 Crockford base32 digits (single hyphens may separate them), like 06Y62KVCW0C00.'
                      ELSE 'A snowflake id in this form is exactly 11 base62 digits, like 0ITkfOwqJlI.' END;
    END IF;
    RETURN value::bigint;
END
$$;

-- The schema the state lives in (functions that pin their search_path cannot ask
-- current_schema(), which is pg_catalog for them).
CREATE OR REPLACE FUNCTION _snowflake_schema() RETURNS regnamespace
LANGUAGE sql STABLE PARALLEL SAFE
BEGIN ATOMIC
    SELECT relnamespace::regnamespace FROM pg_catalog.pg_class WHERE oid = 'snowflake_portable_counter'::regclass;
END;

-- ---------------------------------------------------------------------------------------------
-- The counter in id space (see Design). In time | worker | sequence layouts an id's worker
-- field sits above the sequence, which nextval() counts up by one until it overflows into the
-- worker field; in Sonyflake's (time | sequence | worker) the counter steps by one worker field,
-- and the sequence carries into the time. A tick is time << sequence_bits | sequence, as in the
-- native edition (core/src/layout.rs).
-- ---------------------------------------------------------------------------------------------

-- What nextval() adds.
CREATE OR REPLACE FUNCTION _snowflake_increment(layout text) RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN CASE WHEN _snowflake_sequence_first(layout) THEN 1::bigint << _snowflake_worker_bits(layout) ELSE 1 END;

CREATE OR REPLACE FUNCTION _snowflake_tick_of(id bigint, layout text) RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN CASE WHEN _snowflake_sequence_first(layout)
    THEN id >> _snowflake_worker_bits(layout)
    ELSE ((id >> (_snowflake_worker_bits(layout) + _snowflake_seq_bits(layout))) << _snowflake_seq_bits(layout))
         | (id & ((1::bigint << _snowflake_seq_bits(layout)) - 1))
END;

CREATE OR REPLACE FUNCTION _snowflake_id_of_tick(tick bigint, worker bigint, layout text) RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN _snowflake_id(layout, tick >> _snowflake_seq_bits(layout), worker,
                     tick & ((1::bigint << _snowflake_seq_bits(layout)) - 1));

-- The smallest id of `worker` at or after the counter value c.
CREATE OR REPLACE FUNCTION _snowflake_at_or_after(c bigint, worker bigint, layout text) RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN CASE WHEN _snowflake_sequence_first(layout) THEN
        CASE WHEN (c & ((1::bigint << _snowflake_worker_bits(layout)) - 1)) <= worker
             THEN ((c >> _snowflake_worker_bits(layout)) << _snowflake_worker_bits(layout)) | worker
             ELSE (((c >> _snowflake_worker_bits(layout)) + 1) << _snowflake_worker_bits(layout)) | worker END
    ELSE
        CASE WHEN ((c >> _snowflake_seq_bits(layout)) & ((1::bigint << _snowflake_worker_bits(layout)) - 1)) = worker THEN c
             WHEN ((c >> _snowflake_seq_bits(layout)) & ((1::bigint << _snowflake_worker_bits(layout)) - 1)) < worker
             THEN _snowflake_id(layout, c >> (_snowflake_worker_bits(layout) + _snowflake_seq_bits(layout)), worker, 0)
             ELSE _snowflake_id(layout, (c >> (_snowflake_worker_bits(layout) + _snowflake_seq_bits(layout))) + 1, worker, 0) END
END;

-- Whether the counter value c is an id of `worker` that the fast path may hand out: in the time
-- unit a move put the counter in (not past the end of its sequence; in Sonyflake's layout not
-- the first of a time unit, which only a move hands out).
CREATE OR REPLACE FUNCTION _snowflake_in_unit(c bigint, worker bigint, layout text) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN CASE WHEN _snowflake_sequence_first(layout)
    THEN (c & ((1::bigint << _snowflake_worker_bits(layout)) - 1)) = worker
         AND ((c >> _snowflake_worker_bits(layout)) & ((1::bigint << _snowflake_seq_bits(layout)) - 1)) <> 0
    ELSE ((c >> _snowflake_seq_bits(layout)) & ((1::bigint << _snowflake_worker_bits(layout)) - 1)) = worker
END;

-- The wall clock in Unix milliseconds.
CREATE OR REPLACE FUNCTION _snowflake_now_ms() RETURNS bigint
LANGUAGE sql VOLATILE PARALLEL SAFE
RETURN floor(date_part('epoch', clock_timestamp()) * 1000)::bigint;

-- The first id of `worker` in the time unit of the Unix millisecond ms (a clock before the
-- epoch reads as the epoch).
CREATE OR REPLACE FUNCTION _snowflake_unit_id(ms bigint, worker bigint, layout text) RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN _snowflake_id(layout, greatest(0, (ms - _snowflake_epoch_ms(layout)) / _snowflake_unit_ms(layout)), worker, 0);

-- ---------------------------------------------------------------------------------------------
-- Refusals shared by the minting functions.
-- ---------------------------------------------------------------------------------------------

CREATE OR REPLACE FUNCTION _snowflake_unset() RETURNS bigint
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    RAISE EXCEPTION 'the snowflake worker id is not set in schema %', _snowflake_schema()
        USING ERRCODE = '55000',
              DETAIL = 'snowflake_nextval() mints with the worker id set by snowflake_set_worker_id(), and none was set.',
              HINT = 'As the owner of the schema, give this database a worker id no other writer uses: SELECT snowflake_set_worker_id(1);';
END
$$;

CREATE OR REPLACE FUNCTION _snowflake_refuse_read_only() RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    worker text := coalesce((SELECT c.worker FROM _snowflake_config() c)::text, 'NULL');
BEGIN
    IF pg_is_in_recovery() THEN
        RAISE EXCEPTION 'cannot mint snowflake ids of worker % during recovery', worker
            USING ERRCODE = '25006',
                  DETAIL = 'This server is a standby (or is recovering): the primary owns the counter.',
                  HINT = 'Mint ids on the primary. Decoding functions work on a standby; after a promotion this server mints above every id whose transaction reached it.';
    END IF;
    RAISE EXCEPTION 'cannot mint snowflake ids of worker % in a read-only transaction', worker
        USING ERRCODE = '25006',
              DETAIL = 'Minting writes the counter, a sequence.',
              HINT = 'Mint in a read-write transaction (or on the primary).';
END
$$;

-- ---------------------------------------------------------------------------------------------
-- Moves (see Locking protocol). Every caller holds the mover's row lock.
-- ---------------------------------------------------------------------------------------------

-- The error of a wait for the mover's lock that lock_timeout ended, naming the transaction
-- that holds it (the one whose xid locked the row: its xmax), its role, and who can end it. Who
-- can lock the row: the owner, superusers, and members of pg_write_all_data (an UPDATE of the
-- row, or a DELETE, needs no read privilege), nobody else.
CREATE OR REPLACE FUNCTION _snowflake_lock_error(worker integer) RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    h record;
BEGIN
    SELECT l.pid, p.gid, coalesce(a.usename::text, p.owner::text) AS role, p.database
    INTO h
    FROM snowflake_portable_mover m
    JOIN pg_locks l ON l.locktype = 'transactionid' AND l.transactionid = m.xmax
                   AND l.mode = 'ExclusiveLock' AND l.granted
    LEFT JOIN pg_stat_activity a ON a.pid = l.pid
    LEFT JOIN pg_prepared_xacts p ON p.transaction = m.xmax
    LIMIT 1;
    RAISE EXCEPTION 'waited % for a move of the snowflake counter of worker %', current_setting('lock_timeout'),
            coalesce(worker::text, 'NULL')
        USING ERRCODE = '55P03',
              DETAIL = format('The row of snowflake_portable_mover is locked by %s. A move holds it for microseconds; a transaction that holds it longer locked it itself, which only the owner of schema %s, superusers and members of pg_write_all_data can do.',
                              CASE WHEN h.pid IS NOT NULL THEN format('process %s of role %s', h.pid, h.role)
                                   WHEN h.gid IS NOT NULL THEN format('prepared transaction %L of role %s', h.gid, h.role)
                                   ELSE 'a transaction that has ended since' END,
                              _snowflake_schema()),
              HINT = CASE
                  WHEN h.pid IS NOT NULL THEN format('Role %1$s, a superuser or a member of pg_signal_backend can end it: SELECT pg_terminate_backend(%2$s); else ask one of them to.', h.role, h.pid)
                  WHEN h.gid IS NOT NULL THEN format('Only role %1$s or a superuser can end it, connected to database %2$s: ROLLBACK PREPARED %3$L; else ask one of them to.', h.role, h.database, h.gid)
                  ELSE 'Try again: the transaction that held the lock has ended.' END;
END
$$;

-- Moves lock the mover's row: if it is gone (a member of pg_write_all_data may DELETE it), they
-- would lock nothing and could race; they refuse instead.
CREATE OR REPLACE FUNCTION _snowflake_mover_gone(worker integer) RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    RAISE EXCEPTION 'the row of %.snowflake_portable_mover is gone: the snowflake counter of worker % cannot move', _snowflake_schema(),
            coalesce(worker::text, 'NULL')
        USING ERRCODE = '55000',
              DETAIL = format('Moves of the counter take turns by locking that row; only the owner of schema %s, superusers and members of pg_write_all_data can delete it.', _snowflake_schema()),
              HINT = format('The owner of schema %1$s (%2$s) puts it back: INSERT INTO %1$s.snowflake_portable_mover DEFAULT VALUES; else ask that role to.',
                            _snowflake_schema(), (SELECT n.nspowner::regrole FROM pg_catalog.pg_namespace n WHERE n.oid = _snowflake_schema()));
END
$$;

-- ---------------------------------------------------------------------------------------------
-- Administration: the owner of the schema (or a superuser) only.
-- ---------------------------------------------------------------------------------------------

CREATE OR REPLACE FUNCTION _snowflake_require_owner(what text) RETURNS void
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    owner name := (SELECT nspowner::regrole::name FROM pg_catalog.pg_namespace WHERE oid = _snowflake_schema());
BEGIN
    IF NOT pg_catalog.pg_has_role(current_user, owner, 'USAGE') THEN
        RAISE EXCEPTION 'only the owner of schema % may %', _snowflake_schema(), what
            USING ERRCODE = '42501',
                  DETAIL = format('The current role, %s, is not %s (or a member of it).', current_user, owner),
                  HINT = format('Run it as %s or as a superuser.', owner);
    END IF;
END
$$;

-- Gives this schema's ids their worker id. Like snowflake.worker_id in the native edition:
-- unique among every writer whose ids can meet; no ordinary session can change it. The counter
-- need not move: the next move (the fast path refuses values of another worker field) takes it
-- to the new worker's first id above it.
CREATE OR REPLACE FUNCTION snowflake_set_worker_id(worker integer) RETURNS integer
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    layout text := (SELECT c.layout FROM _snowflake_config() c);
    max_worker bigint := (1::bigint << _snowflake_worker_bits(layout)) - 1;
BEGIN
    PERFORM _snowflake_require_owner('set the snowflake worker id');
    IF worker IS NULL OR worker < 0 OR worker > max_worker THEN
        RAISE EXCEPTION 'snowflake worker id % is out of range', coalesce(worker::text, 'NULL')
            USING ERRCODE = '22003',
                  DETAIL = format('Worker ids of layout %s are %s bits: 0 to %s.', layout, _snowflake_worker_bits(layout), max_worker),
                  HINT = format('Give each database, or each writer that must not collide, its own worker id between 0 and %s.', max_worker);
    END IF;
    -- Here: setting the worker id is also what a restored copy's owner does to let it mint
    -- (see Copies).
    PERFORM _snowflake_write_functions(worker, layout, NULL, NULL);
    RETURN worker;
END
$$;

-- Chooses the layout this schema mints and decodes in, before its first id.
CREATE OR REPLACE FUNCTION snowflake_set_layout(layout text) RETURNS text
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    chosen text := _snowflake_layout(layout);
    current text := (SELECT c.layout FROM _snowflake_config() c);
    worker integer := (SELECT c.worker FROM _snowflake_config() c);
BEGIN
    PERFORM _snowflake_require_owner('set the snowflake layout');
    IF chosen IS NULL THEN
        RAISE EXCEPTION 'the snowflake layout must not be NULL'
            USING ERRCODE = '22004', HINT = 'Name a layout: snowflake, twitter, sonyflake or pgedge.';
    END IF;
    IF chosen = current THEN
        RETURN chosen;
    END IF;
    IF pg_sequence_last_value('snowflake_portable_counter') IS NOT NULL THEN
        RAISE EXCEPTION 'cannot change the snowflake layout to %: ids were issued in layout %', chosen, current
            USING ERRCODE = '55000',
                  DETAIL = 'Ids already issued would decode wrongly, and new ones could repeat them.',
                  HINT = 'Keep the layout, or mint the new layout in another schema (or database) with its own worker id.';
    END IF;
    IF _snowflake_worker_bits(chosen) + _snowflake_seq_bits(chosen) + _snowflake_time_bits(chosen) > 63 THEN
        RAISE EXCEPTION 'cannot mint ids of layout %: its fields take 64 bits', chosen
            USING ERRCODE = '22023',
                  DETAIL = 'Generated ids must leave the sign bit clear.',
                  HINT = 'Mint in snowflake, twitter, sonyflake or pgedge; any preset can be decoded with snowflake_decode(id, layout).';
    END IF;
    IF worker > (1::bigint << _snowflake_worker_bits(chosen)) - 1 THEN
        RAISE EXCEPTION 'worker id % does not fit layout %', worker, chosen
            USING ERRCODE = '22003',
                  HINT = 'Set a worker id that fits first: SELECT snowflake_set_worker_id(...);';
    END IF;
    EXECUTE format('ALTER SEQUENCE snowflake_portable_counter INCREMENT BY %s', _snowflake_increment(chosen));
    PERFORM _snowflake_write_functions(worker, chosen, (SELECT h.db FROM _snowflake_home() h),
                                       (SELECT h.counter FROM _snowflake_home() h));
    RETURN chosen;
END
$$;

-- snowflake_restore_mark(above): from now on every id is above `above` (an id of this layout,
-- e.g. the largest id of the tables the native edition filled). Never moves the counter back.
-- Returns the smallest id this schema may issue next.
CREATE OR REPLACE FUNCTION _snowflake_restore_mark(above bigint) RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET lock_timeout = '10s'
AS $$
DECLARE
    cfg record;
    -- The first id of the time unit after the one of `above`: above `above`, whatever the two
    -- ids' workers.
    floor_id bigint;
    r record;
BEGIN
    PERFORM _snowflake_require_owner('restore the snowflake mark');
    IF current_setting('transaction_read_only') = 'on' THEN
        PERFORM _snowflake_refuse_read_only();
    END IF;
    SELECT * INTO cfg FROM _snowflake_config();
    IF above IS NULL THEN
        RAISE EXCEPTION 'the mark to restore must not be NULL'
            USING ERRCODE = '22004', HINT = 'Pass the largest id issued so far, e.g. (SELECT max(id) FROM orders).';
    END IF;
    IF _snowflake_time_of_id(above, cfg.layout) >= _snowflake_max_time(cfg.layout) THEN
        RAISE EXCEPTION 'cannot mint above %: its time is the last of layout %', above, cfg.layout
            USING ERRCODE = '22003',
                  DETAIL = format('Ids of this layout end at %s.',
                                  _snowflake_timestamp_of(_snowflake_max_time(cfg.layout), cfg.layout)),
                  HINT = 'Pass the largest id issued so far; if it really is at the end of the layout, the layout is used up.';
    END IF;
    floor_id := _snowflake_id(cfg.layout, _snowflake_time_of_id(above, cfg.layout) + 1, coalesce(cfg.worker, 0), 0);
    BEGIN
        PERFORM 1 FROM snowflake_portable_mover FOR UPDATE;
        IF NOT FOUND THEN
            PERFORM _snowflake_mover_gone(cfg.worker);
        END IF;
        SELECT * INTO r FROM _snowflake_advance(0, floor_id);
        RAISE SQLSTATE 'SF000';
    EXCEPTION
        WHEN SQLSTATE 'SF000' THEN
            NULL;
        WHEN lock_not_available THEN
            PERFORM _snowflake_lock_error(cfg.worker);
    END;
    RETURN r.first_id;
END
$$;

-- snowflake_rewind(worker): after a forward jump of the clock that the counter followed, and
-- once the clock is right again, brings the counter back to the right time; the ids issued
-- since the jump stay reserved: moves skip them when they reach them. As the native edition's,
-- and like setval(), it takes effect at once: a rollback does not undo it (nothing it did can
-- make an id repeat).
CREATE OR REPLACE FUNCTION _snowflake_rewind(worker integer,
                                             OUT next_id bigint, OUT reserved_from bigint, OUT reserved_to bigint)
LANGUAGE plpgsql VOLATILE
SET lock_timeout = '10s'
AS $$
DECLARE
    cfg record;
    w bigint;
    jump_from bigint;
    jump_base bigint;
    still_from bigint;
    still_to bigint;
    g bigint;
    now_ms bigint;
    deadline bigint;
    c bigint;
    refusal text;
BEGIN
    PERFORM _snowflake_require_owner('rewind the snowflake counter');
    IF current_setting('transaction_read_only') = 'on' THEN
        PERFORM _snowflake_refuse_read_only();
    END IF;
    SELECT * INTO cfg FROM _snowflake_config();
    IF worker IS NULL THEN
        RAISE EXCEPTION 'the snowflake worker id to rewind must not be NULL'
            USING ERRCODE = '22004', HINT = 'Pass the worker id to rewind.';
    END IF;
    IF cfg.worker IS NULL THEN
        PERFORM _snowflake_unset();
    END IF;
    IF worker <> cfg.worker THEN
        RAISE EXCEPTION 'snowflake worker % is not the one schema % mints with, %', worker, _snowflake_schema(), cfg.worker
            USING ERRCODE = '22023',
                  HINT = format('Rewind worker %s: SELECT * FROM snowflake_rewind(%s);', cfg.worker, cfg.worker);
    END IF;
    w := cfg.worker;
    BEGIN
        PERFORM 1 FROM snowflake_portable_mover FOR UPDATE;
        IF NOT FOUND THEN
            PERFORM _snowflake_mover_gone(cfg.worker);
        END IF;
        jump_from := coalesce(pg_sequence_last_value('snowflake_portable_jump_from'), 0);
        jump_base := coalesce(pg_sequence_last_value('snowflake_portable_jump_base'), 0);
        still_from := coalesce(pg_sequence_last_value('snowflake_portable_reserved_from'), 0);
        still_to := coalesce(pg_sequence_last_value('snowflake_portable_reserved_to'), 0);
        now_ms := _snowflake_now_ms();
        -- Above every id issued before the jump, and at the clock.
        next_id := greatest(_snowflake_at_or_after(jump_base + 1, w, cfg.layout), _snowflake_unit_id(now_ms, w, cfg.layout));
        IF jump_from = 0 THEN
            refusal := 'no jump';
        ELSIF still_to > 0 AND pg_sequence_last_value('snowflake_portable_counter') <= still_to
              AND jump_from > still_from THEN
            -- (A jump followed while a range was reserved starts at or below it, and is
            -- rewound with it, below: this one an earlier version of this file recorded.)
            refusal := 'still reserved';
        ELSIF next_id >= jump_from THEN
            refusal := 'clock still ahead';
        ELSE
            g := coalesce(pg_sequence_last_value('snowflake_portable_generation'), 1);
            deadline := greatest(now_ms + 10, (abs(g) - 1) / 2 + 1);
            PERFORM setval('snowflake_portable_generation', -(2 * deadline + 1));
            c := nextval('snowflake_portable_counter');
            IF c < jump_from THEN
                -- The counter went back below the jump since (a crash before its WAL was
                -- flushed): nothing issued since is left to skip.
                refusal := 'nothing issued';
                PERFORM setval('snowflake_portable_jump_from', 0), setval('snowflake_portable_jump_base', 0);
            ELSE
                -- With the range an earlier rewind reserved, if the counter has not passed
                -- it (the jump started at or below it).
                reserved_from := jump_from;
                reserved_to := greatest(c, still_to);
                PERFORM setval('snowflake_portable_reserved_from', reserved_from),
                        setval('snowflake_portable_reserved_to', reserved_to),
                        setval('snowflake_portable_jump_from', 0), setval('snowflake_portable_jump_base', 0);
                PERFORM setval('snowflake_portable_counter', next_id - _snowflake_increment(cfg.layout));
            END IF;
            -- In Sonyflake's layout the marker stays: the next id is a move, which sees how near
            -- the reserved range is (see _snowflake_advance).
            IF NOT _snowflake_sequence_first(cfg.layout) THEN
                PERFORM setval('snowflake_portable_generation', 2 * deadline + 1);
            END IF;
        END IF;
        RAISE SQLSTATE 'SF000';
    EXCEPTION
        WHEN SQLSTATE 'SF000' THEN
            NULL;
        WHEN lock_not_available THEN
            PERFORM _snowflake_lock_error(cfg.worker);
    END;
    IF refusal = 'no jump' THEN
        RAISE EXCEPTION 'snowflake worker % has followed no forward clock jump since it was last rewound', w
            USING ERRCODE = '55000',
                  HINT = 'snowflake_rewind undoes a forward jump of the system clock that the counter followed: the counter moved more than a second ahead at once, and the clock is right again.';
    ELSIF refusal = 'still reserved' THEN
        RAISE EXCEPTION 'snowflake worker % still skips the ids % to % of an earlier rewind', w, still_from, still_to
            USING ERRCODE = '55000',
                  DETAIL = 'A worker keeps one reserved range at a time, until its counter passes it.',
                  HINT = 'Give the schema another worker id to go on with (snowflake_set_worker_id), or restore its mark above the jump with snowflake_restore_mark(id).';
    ELSIF refusal = 'clock still ahead' THEN
        RAISE EXCEPTION 'the system clock still reads at or after %, where the jump took snowflake worker %',
                _snowflake_timestamp_of(jump_from >> (_snowflake_worker_bits(cfg.layout) + _snowflake_seq_bits(cfg.layout)), cfg.layout), w
            USING ERRCODE = '55000',
                  HINT = 'Set the system clock right first, then run snowflake_rewind again.';
    ELSIF refusal = 'nothing issued' THEN
        RAISE EXCEPTION 'snowflake worker % issued no id after the clock jump it followed: nothing to undo', w
            USING ERRCODE = '55000',
                  HINT = 'The counter is below the jump already; the jump is forgotten.';
    END IF;
END
$$;

-- ---------------------------------------------------------------------------------------------
-- Functions written for this schema's configuration. The layout and the worker id are written
-- into them as constants by _snowflake_write_functions(), at install (from _snowflake_config(),
-- the last one it wrote) and whenever the owner changes the configuration:
-- * _snowflake_config() is the configuration, and nothing else is;
-- * snowflake_nextval() is the fast path (see Design), its constants folded in;
-- * the decoding functions in this schema's layout stay IMMUTABLE, are inlined and fold at
--   planning time (WHERE id >= snowflake_min_id('2026-11-01') is an index scan); the layout
--   cannot change once an id was issued, as in the native edition.
-- ---------------------------------------------------------------------------------------------

-- Takes back every privilege on the state, and on the functions only the owner may run, that
-- a role other than the owner holds (the owner's default privileges, ALTER DEFAULT PRIVILEGES
-- ... GRANT UPDATE ON SEQUENCES TO app_rw, would otherwise let that role set the counter back),
-- then grants what the fast path needs: USAGE on the counter, SELECT on the generation.
CREATE OR REPLACE FUNCTION _snowflake_revoke_others() RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    grant_ record;
    state_names constant text[] := ARRAY['snowflake_portable_counter', 'snowflake_portable_generation',
        'snowflake_portable_jump_from', 'snowflake_portable_jump_base',
        'snowflake_portable_reserved_from', 'snowflake_portable_reserved_to', 'snowflake_portable_mover'];
BEGIN
    FOR grant_ IN
        SELECT CASE c.relkind WHEN 'S' THEN 'SEQUENCE' ELSE 'TABLE' END AS kind, c.oid::regclass::text AS object,
               CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE a.grantee::regrole::text END AS grantee
        FROM pg_class c, aclexplode(c.relacl) a
        WHERE c.relnamespace = _snowflake_schema()
          AND c.relname = ANY (state_names)
          AND a.grantee <> c.relowner
        UNION
        -- Column privileges: REVOKE ALL ON TABLE takes them too.
        SELECT 'TABLE', c.oid::regclass::text,
               CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE a.grantee::regrole::text END
        FROM pg_class c JOIN pg_attribute t ON t.attrelid = c.oid, aclexplode(t.attacl) a
        WHERE c.relnamespace = _snowflake_schema()
          AND c.relname = ANY (state_names)
          AND a.grantee <> c.relowner
        UNION
        SELECT 'FUNCTION', p.oid::regprocedure::text,
               CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE a.grantee::regrole::text END
        FROM pg_proc p, aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) a
        WHERE p.pronamespace = _snowflake_schema()
          AND p.proname IN ('snowflake_set_worker_id', 'snowflake_set_layout', 'snowflake_restore_mark',
                            '_snowflake_restore_mark', 'snowflake_rewind', '_snowflake_rewind', '_snowflake_advance',
                            '_snowflake_write_functions', '_snowflake_revoke_others')
          AND a.grantee <> p.proowner
    LOOP
        EXECUTE format('REVOKE ALL ON %s %s FROM %s', grant_.kind, grant_.object, grant_.grantee);
    END LOOP;
    GRANT USAGE ON SEQUENCE snowflake_portable_counter TO PUBLIC;
    GRANT SELECT ON SEQUENCE snowflake_portable_generation TO PUBLIC;
END
$$;

-- home_db and home_counter: where the worker id was set (see Copies), NULL for here.
CREATE OR REPLACE FUNCTION _snowflake_write_functions(worker integer, layout text, home_db oid, home_counter oid)
RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    s text := _snowflake_schema()::text;
    counter text := s || '.snowflake_portable_counter';
    here_db constant oid := (SELECT d.oid FROM pg_catalog.pg_database d WHERE d.datname = pg_catalog.current_database());
    here_counter constant oid := counter::regclass;
    generation text := s || '.snowflake_portable_generation';
    wb integer := _snowflake_worker_bits(layout);
    sb integer := _snowflake_seq_bits(layout);
    -- The fast path's third argument of GREATEST, which takes the counter's next value: 0 while
    -- the value is in its time unit, at least 2^50 (above every generation value) when not.
    overflow text;
    -- The fast path's value once accepted (see below).
    accepted text;
BEGIN
    PERFORM _snowflake_revoke_others();

    EXECUTE format($f$
        CREATE OR REPLACE FUNCTION %1$s._snowflake_config(OUT worker integer, OUT layout text)
        LANGUAGE sql IMMUTABLE PARALLEL SAFE
        BEGIN ATOMIC
            SELECT %2$s::integer, %3$L::text;
        END;

        -- Where the worker id was set (see Copies): the OIDs of the database and of the counter.
        CREATE OR REPLACE FUNCTION %1$s._snowflake_home(OUT db oid, OUT counter oid)
        LANGUAGE sql IMMUTABLE PARALLEL SAFE
        BEGIN ATOMIC
            SELECT %4$s::oid, %5$s::oid;
        END;

        -- Refuses to mint in a copy of the schema that pg_dump made and a restore put in another
        -- database or cluster (see Copies). Called by the slow path and by every move.
        CREATE OR REPLACE FUNCTION %1$s._snowflake_check_home() RETURNS void
        LANGUAGE plpgsql STABLE
        AS $body$
        DECLARE
            here_db oid := (SELECT d.oid FROM pg_catalog.pg_database d WHERE d.datname OPERATOR(pg_catalog.=) pg_catalog.current_database());
            here_counter oid := %6$L::pg_catalog.regclass;
            owner text := (SELECT n.nspowner::pg_catalog.regrole::pg_catalog.text FROM pg_catalog.pg_namespace n WHERE n.oid OPERATOR(pg_catalog.=) %7$L::pg_catalog.regnamespace);
        BEGIN
            IF %2$s::integer IS NULL OR (here_db OPERATOR(pg_catalog.=) %4$s AND here_counter OPERATOR(pg_catalog.=) %5$s) THEN
                RETURN;
            END IF;
            RAISE EXCEPTION 'schema %% is a copy: its snowflake worker id %% was set in the database of OID %% (counter %%), not in this one (OID %%, counter %%)',
                    %7$L, %2$s, %4$s, %5$s, here_db, here_counter
                USING ERRCODE = '55000',
                      DETAIL = 'A dump restored into another database or cluster mints the ids of the original, which goes on minting them too: the copy refuses until its owner says which worker id it mints with.',
                      HINT = pg_catalog.format('If no other copy of this schema mints with worker %%s (the original is gone), its owner (%%s) says so: SELECT %%s.snowflake_set_worker_id(%%s); else the owner gives it a worker id no other writer uses: SELECT %%s.snowflake_set_worker_id(n); then, either way, restores the mark above every id it may hold: SELECT %%s.snowflake_restore_mark((SELECT max(id) FROM ...));',
                                               %2$s, owner, %7$L, %2$s, %7$L, %7$L);
        END
        $body$;

        -- (worker_id, is_set, preloaded) as in the native edition; preloaded is always false here.
        CREATE OR REPLACE FUNCTION %1$s.snowflake_worker_id(OUT worker_id integer, OUT is_set boolean, OUT preloaded boolean)
        LANGUAGE sql STABLE PARALLEL SAFE
        BEGIN ATOMIC
            SELECT %2$s::integer, %2$s::integer IS NOT NULL, false;
        END;

    $f$, s, coalesce(worker::text, 'NULL'), layout, coalesce(home_db, here_db), coalesce(home_counter, here_counter),
        counter, s);


    -- Moves (see Locking protocol), written with this configuration's constants so that the
    -- planner folds the layout's arithmetic. Every caller of _snowflake_advance() holds the
    -- mover's row lock.
    EXECUTE format($f$
        -- Moves the counter: past every value taken so far, to the clock's time unit if it lags,
        -- to floor_id if given, past a reserved range, and issues n ids (n = 0: none, the next
        -- id is first_id). Sets a new deadline. Returns the first and the last id issued.
        CREATE OR REPLACE FUNCTION %1$s._snowflake_advance(n integer, floor_id bigint,
                                                          OUT first_id bigint, OUT last_id bigint)
        LANGUAGE plpgsql VOLATILE
        SET search_path = pg_catalog, %1$s, pg_temp
        AS $body$
        DECLARE
            w constant bigint := coalesce(%2$s::integer, 0);
            g bigint := coalesce(pg_sequence_last_value('snowflake_portable_generation'), 1);
            now_ms bigint := _snowflake_now_ms();
            -- Deadlines only grow, whatever the clock does: no stable generation value comes back.
            -- After a marker (a move that died half way, or Sonyflake's moves one id at a time,
            -- which publish no stable value) it need not grow: every marker's deadline is above
            -- every stable value published before it, and one id per move must not push the
            -- deadline ahead of the clock by a millisecond a move.
            deadline bigint := greatest(now_ms + 10, (abs(g) - 1) / 2 + CASE WHEN g < 0 THEN 0 ELSE 1 END);
            reserved_from bigint := coalesce(pg_sequence_last_value('snowflake_portable_reserved_from'), 0);
            reserved_to bigint := coalesce(pg_sequence_last_value('snowflake_portable_reserved_to'), 0);
            c bigint;
            clock_id bigint;
        BEGIN
            PERFORM _snowflake_check_home();
            -- The marker: from here to the new stable value no session accepts a value of nextval().
            PERFORM setval('snowflake_portable_generation', -(2 * deadline + 1));
            c := nextval('snowflake_portable_counter');
            first_id := _snowflake_at_or_after(c, w, %3$L);
            clock_id := _snowflake_unit_id(now_ms, w, %3$L);
            IF clock_id > first_id THEN
                -- Following the clock. A step of more than a second may be a jump of the clock (or
                -- an idle spell: SQL cannot tell), which snowflake_rewind can undo: remember it.
                -- (Not the first move of a counter that no move took out of time unit 0, where
                -- the install left it: that move comes from the epoch, not from a clock.)
                IF first_id >> %4$s > 0 AND ((clock_id >> %4$s) - (first_id >> %4$s)) * %5$s > 1000 THEN
                    IF reserved_to > 0 AND c < reserved_from THEN
                        -- A range an earlier rewind reserved lies ahead (moves skip it): this
                        -- move may pass it, and forget it. The jump starts no later than the
                        -- range, so that its rewind reserves both and brings the counter back
                        -- to the clock, below them.
                        PERFORM setval('snowflake_portable_jump_base', c),
                                setval('snowflake_portable_jump_from', least(clock_id, reserved_from));
                    ELSE
                        PERFORM setval('snowflake_portable_jump_base', greatest(c, reserved_to)),
                                setval('snowflake_portable_jump_from', clock_id);
                    END IF;
                END IF;
                first_id := clock_id;
            END IF;
            IF floor_id > first_id THEN
                first_id := floor_id;
            END IF;
            last_id := _snowflake_id_of_tick(_snowflake_tick_of(first_id, %3$L) + greatest(n, 1) - 1, w, %3$L);
            IF reserved_to > 0 AND last_id >= reserved_from AND first_id <= reserved_to THEN
                first_id := _snowflake_at_or_after(reserved_to + 1, w, %3$L);
                last_id := _snowflake_id_of_tick(_snowflake_tick_of(first_id, %3$L) + greatest(n, 1) - 1, w, %3$L);
            END IF;
            IF last_id >> %4$s > %6$s THEN
                RAISE EXCEPTION 'snowflake worker %% has reached the end of the id layout (%%)', w, %3$L
                    USING ERRCODE = '2200H',
                          DETAIL = format('The system clock reads %%s; ids of this layout end at %%s.', clock_timestamp(),
                                          _snowflake_timestamp_of(%6$s, %3$L)),
                          HINT = 'Check the server''s clock; if it is right, this layout''s time range is used up.';
            END IF;
            PERFORM setval('snowflake_portable_counter', CASE WHEN n = 0 THEN first_id - %7$s ELSE last_id END);
            IF reserved_to > 0 AND first_id > reserved_to THEN
                -- Passed: moves need not look at it again.
                PERFORM setval('snowflake_portable_reserved_from', 0), setval('snowflake_portable_reserved_to', 0);
            END IF;
            -- In Sonyflake's layout the fast path refuses only the first value of a time unit, so
            -- the counter carries into the next units without a move (until the deadline, which
            -- after a rewound jump lies beyond the jump), and no move would see a range a rewind
            -- reserved that it carried into. So while there is one the counter has not passed,
            -- the generation keeps the marker, which the fast path never accepts: every id is a
            -- move, under the lock, and the move that reaches the range skips it. The layout
            -- itself holds at most 25,600 ids a second; this lasts until the clock has caught up
            -- with the jump. (The layout's end is the sequence's own maximum.)
            IF %9$s AND reserved_to > 0 AND first_id <= reserved_to THEN
                RETURN;
            END IF;
            PERFORM setval('snowflake_portable_generation', 2 * deadline + 1);
        END
        $body$;

        -- The slow path of snowflake_nextval(): when the fast path refused a value, take another,
        -- or move the counter. Runs as the owner (moves need UPDATE on the sequences and on the
        -- mover's row).
        CREATE OR REPLACE FUNCTION %1$s._snowflake_slow() RETURNS bigint
        LANGUAGE plpgsql VOLATILE SECURITY DEFINER PARALLEL UNSAFE
        SET search_path = pg_catalog, %1$s, pg_temp
        SET lock_timeout = '10s'
        AS $body$
        DECLARE
            before bigint;
            c bigint;
            after bigint;
            now2 bigint;
            now_gen bigint;
            moved bigint;
            attempts integer := 0;
        BEGIN
            IF %2$s::integer IS NULL THEN
                PERFORM _snowflake_unset();
            END IF;
            -- The fast path sends every call of a copy here (see Copies).
            PERFORM _snowflake_check_home();
            -- The fast path sends a standby here, before its nextval() would fail without saying
            -- which worker or what to do. (In a read-only transaction on a primary the fast path's
            -- nextval() refuses first, with 25006: see the fast path.)
            IF current_setting('transaction_read_only') = 'on' THEN
                PERFORM _snowflake_refuse_read_only();
            END IF;
            LOOP
                attempts := attempts + 1;
                -- The fast path's test, spelled out.
                before := pg_sequence_last_value('snowflake_portable_generation');
                c := nextval('snowflake_portable_counter');
                after := pg_sequence_last_value('snowflake_portable_generation');
                now2 := (date_part('epoch', clock_timestamp()) * 1000)::bigint << 1;
                -- (before > 0: a marker never, even under a clock so far back that 2 * now is
                -- below it, before about 1913.)
                IF before = after AND before > 0 AND before > now2 AND _snowflake_in_unit(c, %2$s, %3$L) THEN
                    RETURN c;
                END IF;
                -- A move ended between the readings and its deadline holds: take another value
                -- (a few times; then wait in line for the lock).
                IF after > now2 AND before <> after AND attempts < 100 THEN
                    CONTINUE;
                END IF;
                -- A move is due (the deadline passed, or the counter left its time unit), under
                -- way, or was abandoned half way (its marker stays). Wait for the lock; move,
                -- unless someone else did while we waited.
                moved := NULL;
                BEGIN
                    PERFORM 1 FROM snowflake_portable_mover FOR UPDATE;
                    IF NOT FOUND THEN
                        PERFORM _snowflake_mover_gone(%2$s);
                    END IF;
                    -- Move unless another move ended since our reading; a marker (a move that
                    -- died half way, or Sonyflake's id-by-id moves near a reserved range) is moved
                    -- past whatever we read: under the lock, a move is always safe.
                    now_gen := pg_sequence_last_value('snowflake_portable_generation');
                    IF now_gen = after OR now_gen < 0 OR attempts >= 100 THEN
                        SELECT a.last_id INTO moved FROM _snowflake_advance(1, NULL) a;
                    END IF;
                    -- The block always ends by an error: its subtransaction takes the row lock
                    -- with it, whatever error or cancellation comes first.
                    RAISE SQLSTATE 'SF000';
                EXCEPTION
                    WHEN SQLSTATE 'SF000' THEN
                        NULL;
                    WHEN lock_not_available THEN
                        PERFORM _snowflake_lock_error(%2$s);
                END;
                IF moved IS NOT NULL THEN
                    RETURN moved;
                END IF;
                attempts := 0;
            END LOOP;
        END
        $body$;

        -- snowflake_nextval_batch(n): n consecutive ids, from one move.
        CREATE OR REPLACE FUNCTION %1$s._snowflake_batch(n integer) RETURNS SETOF bigint
        LANGUAGE plpgsql VOLATILE SECURITY DEFINER PARALLEL UNSAFE
        SET search_path = pg_catalog, %1$s, pg_temp
        SET lock_timeout = '10s'
        AS $body$
        DECLARE
            r record;
        BEGIN
            IF n IS NULL OR n < 1 OR n > 1000000 THEN
                RAISE EXCEPTION 'cannot take %% snowflake ids in one call', coalesce(n::text, 'NULL')
                    USING ERRCODE = CASE WHEN n IS NULL THEN '22004' ELSE '22003' END,
                          DETAIL = 'n must be between 1 and 1000000.',
                          HINT = 'Take at most 1000000 ids per call; call it again for more.';
            END IF;
            -- As the native edition with snowflake.max_ahead = 2s: a batch that would run further
            -- than 2 s ahead of the clock can never be issued.
            IF n > %8$s THEN
                RAISE EXCEPTION 'cannot take %% snowflake ids of worker %% at once', n, %2$L
                    USING ERRCODE = '54000',
                          DETAIL = 'A worker''s ids may run at most 2000 ms ahead of the clock, which holds %8$s ids in layout %3$s.',
                          HINT = 'Take fewer ids per call.';
            END IF;
            IF %2$s::integer IS NULL THEN
                PERFORM _snowflake_unset();
            END IF;
            IF current_setting('transaction_read_only') = 'on' THEN
                PERFORM _snowflake_refuse_read_only();
            END IF;
            BEGIN
                PERFORM 1 FROM snowflake_portable_mover FOR UPDATE;
                IF NOT FOUND THEN
                    PERFORM _snowflake_mover_gone(%2$s);
                END IF;
                SELECT * INTO r FROM _snowflake_advance(n, NULL);
                RAISE SQLSTATE 'SF000';
            EXCEPTION
                WHEN SQLSTATE 'SF000' THEN
                    NULL;
                WHEN lock_not_available THEN
                    PERFORM _snowflake_lock_error(%2$s);
            END;
            RETURN QUERY
                SELECT _snowflake_id_of_tick(t, %2$s, %3$L)
                FROM generate_series(_snowflake_tick_of(r.first_id, %3$L), _snowflake_tick_of(r.last_id, %3$L)) AS t;
        END
        $body$;
    $f$, s, coalesce(worker::text, 'NULL'), layout, wb + sb, _snowflake_unit_ms(layout), _snowflake_max_time(layout),
        _snowflake_increment(layout), ((2000 + _snowflake_unit_ms(layout) - 1) / _snowflake_unit_ms(layout)) << sb,
        _snowflake_sequence_first(layout)::text);

    -- What the fast path returns once the value is accepted. In Sonyflake's layout the worker
    -- field is the counter's lowest bits, which nextval() never changes: a value left with
    -- another worker's field (snowflake_set_worker_id since the last move) goes to the slow
    -- path, whose move puts the counter in this worker's field. (currval() is not an argument:
    -- reading it twice keeps the function inlinable.)
    accepted := CASE WHEN _snowflake_sequence_first(layout) AND worker IS NOT NULL
        THEN format('CASE WHEN (pg_catalog.currval(%1$L::pg_catalog.regclass) OPERATOR(pg_catalog.&) %2$s) OPERATOR(pg_catalog.=) %3$s
                          THEN pg_catalog.currval(%1$L::pg_catalog.regclass) ELSE %4$s._snowflake_slow() END',
                    counter, (1::bigint << wb) - 1, worker, s)
        ELSE format('pg_catalog.currval(%L::pg_catalog.regclass)', counter) END;
    IF worker IS NULL THEN
        EXECUTE format($f$
            CREATE OR REPLACE FUNCTION %1$s.snowflake_nextval() RETURNS bigint
            LANGUAGE sql VOLATILE PARALLEL UNSAFE
            RETURN %1$s._snowflake_unset();
        $f$, s);
    ELSE
        IF _snowflake_sequence_first(layout) THEN
            -- The first id of a time unit (sequence 0) is the move's: negative otherwise.
            overflow := format('(%1$s OPERATOR(pg_catalog.-) (pg_catalog.nextval(%2$L::pg_catalog.regclass) OPERATOR(pg_catalog.&) %3$s)) OPERATOR(pg_catalog.<<) %4$s',
                               1::bigint << wb, counter, ((1::bigint << sb) - 1) << wb, 55 - wb);
        ELSE
            -- The worker field, compared with this worker's.
            overflow := format('((pg_catalog.nextval(%1$L::pg_catalog.regclass) OPERATOR(pg_catalog.&) %2$s) OPERATOR(pg_catalog.#) %3$s) OPERATOR(pg_catalog.<<) %4$s',
                               counter, ((1::bigint << wb) - 1) << sb, worker::bigint << sb, 50 - sb);
        END IF;
        EXECUTE format($f$
            CREATE OR REPLACE FUNCTION %1$s.snowflake_nextval() RETURNS bigint
            LANGUAGE sql VOLATILE PARALLEL UNSAFE
            RETURN CASE
                WHEN %3$L::pg_catalog.regclass::pg_catalog.oid OPERATOR(pg_catalog.=) %6$s::pg_catalog.oid
                 AND NOT pg_catalog.pg_is_in_recovery()
                 AND GREATEST(pg_catalog.pg_sequence_last_value(%2$L::pg_catalog.regclass),
                              (pg_catalog.date_part('epoch', pg_catalog.clock_timestamp()) OPERATOR(pg_catalog.*) 1000::pg_catalog.float8)::pg_catalog.int8
                                  OPERATOR(pg_catalog.<<) 1,
                              %4$s)
                     OPERATOR(pg_catalog.=) pg_catalog.abs(pg_catalog.pg_sequence_last_value(%2$L::pg_catalog.regclass))
                THEN %5$s
                ELSE %1$s._snowflake_slow()
            END;
        $f$, s, generation, counter, overflow, accepted, coalesce(home_counter, here_counter));
    END IF;

    EXECUTE format($f$
        CREATE OR REPLACE FUNCTION %1$s.snowflake_nextval_batch(n integer) RETURNS SETOF bigint
        LANGUAGE sql VOLATILE PARALLEL UNSAFE
        BEGIN ATOMIC
            SELECT id FROM %1$s._snowflake_batch(n) AS id;
        END;

        CREATE OR REPLACE FUNCTION %1$s.snowflake_restore_mark(above bigint) RETURNS bigint
        LANGUAGE sql VOLATILE PARALLEL UNSAFE
        RETURN %1$s._snowflake_restore_mark(above);

        CREATE OR REPLACE FUNCTION %1$s.snowflake_rewind(worker integer)
        RETURNS TABLE (next_id bigint, reserved_from bigint, reserved_to bigint)
        LANGUAGE sql VOLATILE PARALLEL UNSAFE
        BEGIN ATOMIC
            SELECT r.next_id, r.reserved_from, r.reserved_to FROM %1$s._snowflake_rewind(worker) AS r;
        END;
    $f$, s);

    EXECUTE format($f$
        CREATE OR REPLACE FUNCTION %1$s.snowflake_decode(id bigint)
        RETURNS TABLE (ts timestamptz, worker integer, seq integer)
        LANGUAGE sql IMMUTABLE PARALLEL SAFE
        BEGIN ATOMIC
            SELECT %1$s._snowflake_timestamp_of(%1$s._snowflake_time_of_id(id, %2$L), %2$L),
                   %1$s._snowflake_worker_of_id(id, %2$L), %1$s._snowflake_seq_of_id(id, %2$L)
            WHERE id IS NOT NULL;
        END;

        CREATE OR REPLACE FUNCTION %1$s.snowflake_timestamp(id bigint) RETURNS timestamptz
        LANGUAGE sql IMMUTABLE PARALLEL SAFE
        RETURN %1$s._snowflake_timestamp_of(%1$s._snowflake_time_of_id(id, %2$L), %2$L);

        CREATE OR REPLACE FUNCTION %1$s.snowflake_worker(id bigint) RETURNS integer
        LANGUAGE sql IMMUTABLE PARALLEL SAFE
        RETURN %1$s._snowflake_worker_of_id(id, %2$L);

        CREATE OR REPLACE FUNCTION %1$s.snowflake_sequence(id bigint) RETURNS integer
        LANGUAGE sql IMMUTABLE PARALLEL SAFE
        RETURN %1$s._snowflake_seq_of_id(id, %2$L);

        CREATE OR REPLACE FUNCTION %1$s.snowflake_compose(ts timestamptz, worker integer, seq integer) RETURNS bigint
        LANGUAGE sql IMMUTABLE PARALLEL SAFE
        RETURN %1$s.snowflake_compose(ts, worker, seq, %2$L);

        -- The smallest (largest) id any worker can have in the time unit of ts.
        CREATE OR REPLACE FUNCTION %1$s.snowflake_min_id(ts timestamptz) RETURNS bigint
        LANGUAGE sql IMMUTABLE PARALLEL SAFE
        RETURN %1$s._snowflake_id(%2$L, %1$s._snowflake_time_of(ts, %2$L), 0, 0);

        CREATE OR REPLACE FUNCTION %1$s.snowflake_max_id(ts timestamptz) RETURNS bigint
        LANGUAGE sql IMMUTABLE PARALLEL SAFE
        RETURN %1$s._snowflake_id(%2$L, %1$s._snowflake_time_of(ts, %2$L),
            (1::bigint << %1$s._snowflake_worker_bits(%2$L)) - 1, (1::bigint << %1$s._snowflake_seq_bits(%2$L)) - 1);

        -- Every id whose time is at least (at most) ts is at least (at most) this; clamped:
        -- 0 (-1) before the epoch, the largest bigint after the layout's end.
        CREATE OR REPLACE FUNCTION %1$s.snowflake_lower_bound(ts timestamptz) RETURNS bigint
        LANGUAGE sql IMMUTABLE PARALLEL SAFE
        RETURN CASE
            WHEN ts = '-infinity' OR (isfinite(ts) AND %1$s._snowflake_unix_us(ts) < %1$s._snowflake_epoch_ms(%2$L) * 1000) THEN 0
            WHEN NOT isfinite(ts) OR %1$s._snowflake_unix_us(ts) >= %1$s._snowflake_end_us(%2$L) THEN 9223372036854775807
            ELSE %1$s.snowflake_min_id(ts)
        END;

        CREATE OR REPLACE FUNCTION %1$s.snowflake_upper_bound(ts timestamptz) RETURNS bigint
        LANGUAGE sql IMMUTABLE PARALLEL SAFE
        RETURN CASE
            WHEN ts = '-infinity' OR (isfinite(ts) AND %1$s._snowflake_unix_us(ts) < %1$s._snowflake_epoch_ms(%2$L) * 1000) THEN -1
            WHEN NOT isfinite(ts) OR %1$s._snowflake_unix_us(ts) >= %1$s._snowflake_end_us(%2$L) THEN 9223372036854775807
            ELSE %1$s.snowflake_max_id(ts)
        END;

        CREATE OR REPLACE FUNCTION %1$s.snowflake_partition_bounds(from_ts timestamptz, to_ts timestamptz)
        RETURNS TABLE (from_id bigint, to_id bigint)
        LANGUAGE sql IMMUTABLE PARALLEL SAFE
        BEGIN ATOMIC
            SELECT %1$s.snowflake_min_id(from_ts),
                   CASE WHEN %1$s._snowflake_time_of(to_ts, %2$L) <= %1$s._snowflake_time_of(from_ts, %2$L)
                        THEN %1$s._snowflake_error('22023',
                                 'the partition would be empty: ' || to_ts || ' is not after ' || from_ts, NULL,
                                 'Pass the start of the partition''s time range, then its end (exclusive).')
                        ELSE %1$s.snowflake_min_id(to_ts) END
            WHERE from_ts IS NOT NULL AND to_ts IS NOT NULL;
        END;
    $f$, s, layout);
    -- The functions just written that only the owner may run.
    PERFORM _snowflake_revoke_others();
END
$$;

-- Pin the search_path of the functions written here that run as the owner or name this
-- schema's objects: pg_catalog first (no object of this schema can stand in for a built-in),
-- then this schema, then pg_temp (never searched for functions; last for tables). The
-- functions _snowflake_write_functions() writes qualify every name instead.
DO $install$
DECLARE
    f regprocedure;
    cfg_worker integer;
    cfg_layout text;
    old_last bigint;
    old_called boolean;
    g bigint;
    home_db oid;
    home_counter oid;
BEGIN
    -- (Not reached outside one transaction: see the file's first statement.)
    IF pg_catalog.current_setting('snowflake_portable.one_transaction', true) IS DISTINCT FROM 'yes' THEN
        RAISE EXCEPTION 'snowflake_portable.sql must run as one transaction'
            USING ERRCODE = 'no_active_sql_transaction', HINT = 'Run it with psql -1, or between BEGIN and COMMIT.';
    END IF;
    FOR f IN
        SELECT p.oid::regprocedure
        FROM pg_catalog.pg_proc p
        WHERE p.pronamespace = (SELECT oid FROM pg_catalog.pg_namespace WHERE nspname = current_schema())
          AND p.proname IN ('_snowflake_write_functions', '_snowflake_require_owner', 'snowflake_set_worker_id',
                            '_snowflake_time_error', '_snowflake_revoke_others', 'snowflake_set_layout',
                            '_snowflake_restore_mark', '_snowflake_rewind', '_snowflake_unset',
                            '_snowflake_refuse_read_only', '_snowflake_lock_error', '_snowflake_mover_gone')
    LOOP
        EXECUTE format('ALTER FUNCTION %s SET search_path = pg_catalog, %I, pg_temp', f, current_schema());
    END LOOP;

    -- The configuration: the one the functions a previous run wrote carry; else 0.3.0's table,
    -- checked against 0.3.0's functions above; else none yet.
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_proc
               WHERE pronamespace = (SELECT oid FROM pg_catalog.pg_namespace WHERE nspname = current_schema())
                 AND proname = '_snowflake_config') THEN
        EXECUTE 'SELECT worker, layout FROM _snowflake_config()' INTO cfg_worker, cfg_layout;
    ELSIF current_setting('snowflake_portable.upgrade_layout') <> '' THEN
        cfg_worker := nullif(current_setting('snowflake_portable.upgrade_worker'), '')::integer;
        cfg_layout := current_setting('snowflake_portable.upgrade_layout');
    ELSE
        cfg_layout := 'snowflake';
    END IF;

    -- 0.3.0's counter held ticks: carried into this counter as the id of its last tick. The
    -- rename waits until no transaction that used it is left (an AccessExclusiveLock), and a
    -- minting function of 0.3.0 still running after this commits finds the sequence gone.
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_class
               WHERE relnamespace = (SELECT oid FROM pg_catalog.pg_namespace WHERE nspname = current_schema())
                 AND relname = 'snowflake_portable_ticks') THEN
        ALTER SEQUENCE snowflake_portable_ticks RENAME TO snowflake_portable_ticks_0_3_0;
        SELECT last_value, is_called INTO old_last, old_called FROM snowflake_portable_ticks_0_3_0;
        IF old_called THEN
            PERFORM setval('snowflake_portable_counter',
                           greatest(coalesce(pg_sequence_last_value('snowflake_portable_counter'), 0),
                                    _snowflake_id_of_tick(old_last, coalesce(cfg_worker, 0), cfg_layout)));
        END IF;
        DROP SEQUENCE snowflake_portable_ticks_0_3_0;
    END IF;
    -- 0.3.0's writer of the functions, which read its table.
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_proc
               WHERE oid = pg_catalog.to_regprocedure(pg_catalog.format('%I._snowflake_write_functions()', current_schema()))) THEN
        DROP FUNCTION _snowflake_write_functions();
    END IF;

    IF (SELECT seqincrement FROM pg_catalog.pg_sequence WHERE seqrelid = 'snowflake_portable_counter'::regclass)
       <> _snowflake_increment(cfg_layout) THEN
        EXECUTE format('ALTER SEQUENCE snowflake_portable_counter INCREMENT BY %s', _snowflake_increment(cfg_layout));
    END IF;
    -- Where the worker id was set: carried, so that running the file in a restored copy does not
    -- make it the original (see Copies); here, for an install older than the record.
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_proc
               WHERE pronamespace = (SELECT oid FROM pg_catalog.pg_namespace WHERE nspname = current_schema())
                 AND proname = '_snowflake_home') THEN
        EXECUTE 'SELECT db, counter FROM _snowflake_home()' INTO home_db, home_counter;
    END IF;
    -- (The writer before it took no record.)
    DROP FUNCTION IF EXISTS _snowflake_write_functions(integer, text);
    PERFORM _snowflake_write_functions(cfg_worker, cfg_layout, home_db, home_counter);
    -- In Sonyflake's layout, a range a rewind reserved keeps the fast path shut until the
    -- counter has passed it (see _snowflake_advance); an earlier version's rewind left it open.
    -- Set the marker of a later deadline (2 more: no stable value published comes back), as a
    -- move does: under the mover's lock, held to the end of the install, so that no move of the
    -- functions still running is half way through meanwhile. The next id moves, and looks.
    IF _snowflake_sequence_first(cfg_layout)
       AND coalesce(pg_sequence_last_value('snowflake_portable_reserved_to'), 0) > 0 THEN
        PERFORM 1 FROM snowflake_portable_mover FOR UPDATE;
        g := pg_sequence_last_value('snowflake_portable_generation');
        IF g > 0 THEN
            PERFORM setval('snowflake_portable_generation', -(g + 2));
        END IF;
    END IF;

    -- What an earlier version kept to turn synchronous_commit on at each minting transaction's
    -- commit (see Durability), and its functions' old signatures: nothing calls them now.
    DROP TABLE IF EXISTS snowflake_portable_commit;
    DROP SEQUENCE IF EXISTS snowflake_portable_wal;
    DROP FUNCTION IF EXISTS _snowflake_arm(), _snowflake_arm_commit(), _snowflake_commit_check(),
        _snowflake_batch(integer, boolean), _snowflake_restore_mark(bigint, boolean),
        _snowflake_rewind(integer, boolean);
    -- 0.3.0's configuration table, now in _snowflake_config().
    IF pg_catalog.to_regclass(pg_catalog.format('%I.snowflake_portable_config', current_schema())) IS NOT NULL THEN
        DROP TABLE snowflake_portable_config;
    END IF;
END
$install$;

-- The installing session's search_path as it was.
DO $restore$
BEGIN
    PERFORM pg_catalog.set_config('search_path', pg_catalog.current_setting('snowflake_portable.search_path'), false);
END
$restore$;

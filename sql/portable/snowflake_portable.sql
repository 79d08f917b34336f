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
-- Running the file again upgrades the functions and keeps the state. With pg_tle, the same
-- text installs as a trusted-language extension (see README, "The portable edition").
--
-- Design
-- ------
-- The ids are the native edition's: same layouts, same functions and signatures for what the
-- two share (minting with the configured worker, decoding, composing, bounds, text forms), so
-- application SQL does not change between editions. What differs is where the state lives.
--
-- The generator counts *ticks*, `time << sequence_bits | sequence`, as the native one does
-- (core/src/layout.rs): a tick and the worker id make an id, and a larger tick makes a larger
-- id. The last tick issued is kept in one sequence, snowflake_portable_ticks, which is
-- WAL-logged: it survives crashes, restarts, pg_upgrade and a failover to a standby that
-- received its WAL, and it never goes back when the clock does.
--
-- Locking protocol. A sequence can only be advanced by one (nextval) or set (setval); setval
-- is not a compare-and-set, so a setval that raced a nextval could move the counter back
-- under an id already issued. Every change to the counter is therefore made under one
-- advisory lock (key: 'snow' << 32 | the sequence's oid), held only for the few statements
-- that read the clock, advance the counter and, when the clock is ahead of it, set it to the
-- clock. It is a transaction-level lock taken inside a PL/pgSQL block, whose subtransaction
-- releases it when the block ends by an error; the block always ends by one, our own when all
-- went well, so no error or cancellation, wherever it lands, can leave the lock held (nextval
-- and setval are not transactional: the counter keeps what they did). Not a lock held to the
-- end of the transaction: a transaction that mints and goes on working must not hold up every
-- other writer until it commits. A wait for it ends after 10 s (lock_timeout) with an error
-- naming the holder: any role that can connect could take the same advisory lock and keep it.
--
-- Durability. nextval logs ahead and setval logs at once, but WAL is only flushed at the
-- commit of a transaction that has an xid and commits synchronously. The minting functions
-- give their transaction an xid and, if synchronous_commit is off or local, turn it on for
-- that transaction: an id whose transaction committed is never issued again, after a crash or a
-- failover to a synchronous standby. (An id taken by a transaction that had not committed when
-- the server crashed can be issued again, as with nextval(); the native edition's marks cover
-- even those.)
--
-- Trust. The counter and the configuration belong to the role that installed the file, which
-- must own the schema; no other role gets any privilege on them (grants that default
-- privileges add are taken back), and no other role may create objects in the schema. Minting runs as that role (SECURITY DEFINER, with
-- search_path pinned to pg_catalog, this schema, pg_temp), so callers need no right to the
-- sequence and cannot set it back. Decoding functions have SQL-standard bodies, bound when
-- they are created: nothing on a caller's search_path can take their place.

-- Before anything else, and with nothing looked up by name on the installing session's
-- search_path (a schema others may create in, such as public on PostgreSQL 14, could hold a
-- better match for any operator or function): remember the schema to install into and the
-- session's search_path, and resolve names in pg_catalog only until the checks below pass.
DO $path$
BEGIN
    PERFORM pg_catalog.set_config('snowflake_portable.schema', COALESCE(pg_catalog.current_schema(), ''), false);
    PERFORM pg_catalog.set_config('snowflake_portable.search_path', pg_catalog.current_setting('search_path'), false);
    PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', false);
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
BEGIN
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
          AND c.relname IN ('snowflake_portable_config', 'snowflake_portable_ticks')
          AND c.relowner <> current_user::regrole
    ) THEN
        RAISE EXCEPTION 'the snowflake state in schema % belongs to another role', pg_catalog.quote_ident(schema_name)
            USING ERRCODE = 'insufficient_privilege',
                  DETAIL = (SELECT string_agg(format('%s is owned by %s', c.relname, c.relowner::regrole), '; ')
                            FROM pg_catalog.pg_class c
                            WHERE c.relnamespace = schema_oid
                              AND c.relname IN ('snowflake_portable_config', 'snowflake_portable_ticks')),
                  HINT = 'Run the file as that role, or install into a schema of your own.';
    END IF;
    -- Everything below resolves names in this schema and pg_catalog only, whatever else the
    -- installing session's search_path holds (a schema others may create in, such as public on
    -- PostgreSQL 14): the functions created here are bound to what they find now.
    PERFORM pg_catalog.set_config('search_path', pg_catalog.format('%I, pg_catalog, pg_temp', schema_name), false);
END
$check$;

-- ---------------------------------------------------------------------------------------------
-- State: the configuration and the counter.
-- ---------------------------------------------------------------------------------------------

CREATE TABLE IF NOT EXISTS snowflake_portable_config (
    one_row boolean PRIMARY KEY DEFAULT true CHECK (one_row),
    -- NULL until snowflake_set_worker_id(): minting is an error until then.
    worker integer,
    -- The layout this schema mints and decodes in; fixed once an id was issued.
    layout text NOT NULL DEFAULT 'snowflake'
);
INSERT INTO snowflake_portable_config DEFAULT VALUES ON CONFLICT DO NOTHING;
REVOKE ALL ON TABLE snowflake_portable_config FROM PUBLIC;

-- The last tick issued. 0 (never called) until the first id.
CREATE SEQUENCE IF NOT EXISTS snowflake_portable_ticks AS bigint MINVALUE 0 START WITH 0 CACHE 1 NO CYCLE;
REVOKE ALL ON SEQUENCE snowflake_portable_ticks FROM PUBLIC;

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
CREATE OR REPLACE FUNCTION _snowflake_describe(layout text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN 'epoch=' || _snowflake_epoch_ms(layout)::text || ' unit=' || _snowflake_unit_ms(layout)::text || 'ms time='
    || _snowflake_time_bits(layout)::text || ' worker=' || _snowflake_worker_bits(layout)::text || ' sequence='
    || _snowflake_seq_bits(layout)::text || ' order='
    || CASE WHEN _snowflake_sequence_first(layout) THEN 'time-sequence-worker' ELSE 'time-worker-sequence' END;

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
    SELECT relnamespace::regnamespace FROM pg_catalog.pg_class WHERE oid = 'snowflake_portable_config'::regclass;
END;

-- ---------------------------------------------------------------------------------------------
-- Functions written for this schema's configuration. The layout and the worker id are written
-- into them as constants by _snowflake_write_functions(), at install and whenever the owner
-- changes the configuration:
-- * the decoding functions in this schema's layout stay IMMUTABLE, are inlined and fold at
--   planning time (WHERE id >= snowflake_min_id('2026-11-01') is an index scan); the layout
--   cannot change once an id was issued, as in the native edition;
-- * minting reads no table: one function, one advisory lock, one or two sequence calls.
-- ---------------------------------------------------------------------------------------------

-- Takes back every privilege on the state, and on the functions only the owner may run, that
-- a role other than the owner holds: the owner's default privileges (ALTER DEFAULT PRIVILEGES
-- ... GRANT UPDATE ON SEQUENCES TO app_rw) would otherwise let that role set the counter back.
CREATE OR REPLACE FUNCTION _snowflake_revoke_others() RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    grant_ record;
BEGIN
    FOR grant_ IN
        SELECT CASE c.relkind WHEN 'S' THEN 'SEQUENCE' ELSE 'TABLE' END AS kind, c.oid::regclass::text AS object,
               CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE a.grantee::regrole::text END AS grantee
        FROM pg_class c, aclexplode(c.relacl) a
        WHERE c.relnamespace = _snowflake_schema()
          AND c.relname IN ('snowflake_portable_config', 'snowflake_portable_ticks')
          AND a.grantee <> c.relowner
        UNION
        -- Column privileges: REVOKE ALL ON TABLE takes them too.
        SELECT 'TABLE', c.oid::regclass::text,
               CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE a.grantee::regrole::text END
        FROM pg_class c JOIN pg_attribute t ON t.attrelid = c.oid, aclexplode(t.attacl) a
        WHERE c.relnamespace = _snowflake_schema()
          AND c.relname IN ('snowflake_portable_config', 'snowflake_portable_ticks')
          AND a.grantee <> c.relowner
        UNION
        SELECT 'FUNCTION', p.oid::regprocedure::text,
               CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE a.grantee::regrole::text END
        FROM pg_proc p, aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) a
        WHERE p.pronamespace = _snowflake_schema()
          AND p.proname IN ('snowflake_set_worker_id', 'snowflake_set_layout', 'snowflake_restore_mark',
                            '_snowflake_write_functions', '_snowflake_revoke_others')
          AND a.grantee <> p.proowner
    LOOP
        EXECUTE format('REVOKE ALL ON %s %s FROM %s', grant_.kind, grant_.object, grant_.grantee);
    END LOOP;
END
$$;

CREATE OR REPLACE FUNCTION _snowflake_write_functions() RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    s text := _snowflake_schema()::text;
    cfg record;
    seq_bits integer;
    -- The critical section shared by snowflake_nextval() and snowflake_nextval_batch(n):
    -- reserves n consecutive ticks and leaves the first in `first`. See "Locking protocol".
    reserve text;
    -- What minting does before it takes the lock: refuse on a standby or without a worker id,
    -- and make the transaction's commit flush the counter's WAL (see "Durability").
    prepare text;
BEGIN
    PERFORM _snowflake_revoke_others();
    SELECT c.worker, c.layout INTO cfg FROM snowflake_portable_config c;
    seq_bits := _snowflake_seq_bits(cfg.layout);
    prepare := format($f$
        IF pg_is_in_recovery() THEN
            RAISE EXCEPTION 'cannot mint snowflake ids of worker %% during recovery', %3$s
                USING ERRCODE = '25006',
                      DETAIL = 'This server is a standby (or is recovering): the primary owns the counter.',
                      HINT = 'Mint ids on the primary. Decoding functions work on a standby; after a promotion this server mints above every id whose transaction reached it.';
        END IF;
        IF %2$s IS NULL THEN
            RAISE EXCEPTION 'the snowflake worker id is not set in schema %%', %1$L
                USING ERRCODE = '55000',
                      DETAIL = 'snowflake_nextval() mints with the worker id set by snowflake_set_worker_id(), and none was set.',
                      HINT = 'As the owner of the schema, give this database a worker id no other writer uses: SELECT snowflake_set_worker_id(1);';
        END IF;
        IF current_setting('transaction_read_only') = 'on' THEN
            RAISE EXCEPTION 'cannot mint snowflake ids of worker %% in a read-only transaction', %3$s
                USING ERRCODE = '25006',
                      DETAIL = 'Minting writes the counter, a sequence.',
                      HINT = 'Mint in a read-write transaction (or on the primary).';
        END IF;
        PERFORM pg_current_xact_id();
        IF current_setting('synchronous_commit') IN ('off', 'local') THEN
            PERFORM set_config('synchronous_commit', 'on', true);
        END IF;$f$, s, coalesce(cfg.worker::text, 'NULL'), quote_literal(coalesce(cfg.worker::text, 'NULL')));
    reserve := format($f$
        BEGIN
            -- A transaction-level lock, taken in this block's subtransaction: it goes when
            -- the block ends by an error, whatever the error (a cancellation, one that lands
            -- anywhere, included), so no error can leave it held; and the block always ends by
            -- one, of our own (SF000) when all went well. nextval and setval are not
            -- transactional: what they did stays.
            PERFORM pg_advisory_xact_lock(lock_key);
            -- Read under the lock, so no reading goes back relative to the counter because
            -- of a wait. A clock before the epoch reads as the epoch.
            clock_tick := greatest(0, (floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint - %3$s) / %4$s) << %5$s;
            next_tick := nextval(%2$s::regclass);
            first := greatest(next_tick, clock_tick);
            IF first + n > %6$s THEN
                RAISE EXCEPTION 'snowflake worker %% has reached the end of the id layout (%%)', %8$s, %7$L
                    USING ERRCODE = '2200H',
                          DETAIL = format('The system clock reads %%s; the counter is at %%s of %%s ticks.', clock_timestamp(), first, %6$s),
                          HINT = 'Check the server''s clock; if it is right, this layout''s time range is used up.';
            END IF;
            IF first + n - 1 <> next_tick THEN
                PERFORM setval(%2$s::regclass, first + n - 1);
            END IF;
            RAISE SQLSTATE 'SF000';
        EXCEPTION
            WHEN SQLSTATE 'SF000' THEN
                NULL;
            WHEN lock_not_available THEN
                RAISE EXCEPTION 'waited %% for the snowflake minting lock', current_setting('lock_timeout')
                    USING ERRCODE = '55P03',
                          DETAIL = coalesce('It is held by the session of pid ' || (
                              SELECT string_agg(pid::text, ', ') FROM pg_locks
                              WHERE locktype = 'advisory' AND granted AND objsubid = 1
                                AND classid::bigint = lock_key >> 32 AND objid::bigint = lock_key & 4294967295) || '.',
                              'It is no longer held.'),
                          HINT = 'A session holds the lock only while it mints one id or one batch; one that holds it longer took it itself (SELECT pg_advisory_lock(...)): end that session.';
        END;$f$,
        s, quote_literal(s || '.snowflake_portable_ticks'),
        _snowflake_epoch_ms(cfg.layout), _snowflake_unit_ms(cfg.layout), seq_bits,
        (_snowflake_max_time(cfg.layout) + 1) << seq_bits, cfg.layout, coalesce(cfg.worker::text, 'NULL'));

    EXECUTE format($f$
        CREATE OR REPLACE FUNCTION %1$s.snowflake_nextval() RETURNS bigint
        LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
        SET search_path = pg_catalog, %1$s, pg_temp
        SET lock_timeout = '10s'
        AS $body$
        DECLARE
            n constant integer := 1;
            lock_key constant bigint := %8$s;
            clock_tick bigint;
            next_tick bigint;
            first bigint;
        BEGIN
            %4$s
            %5$s
            RETURN %1$s._snowflake_id(%2$L, first >> %3$s, %6$s, first & ((1::bigint << %3$s) - 1));
        END
        $body$;

        CREATE OR REPLACE FUNCTION %1$s.snowflake_nextval_batch(n integer) RETURNS SETOF bigint
        LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
        SET search_path = pg_catalog, %1$s, pg_temp
        SET lock_timeout = '10s'
        AS $body$
        DECLARE
            lock_key constant bigint := %8$s;
            clock_tick bigint;
            next_tick bigint;
            first bigint;
        BEGIN
            IF n IS NULL OR n < 1 OR n > 1000000 THEN
                RAISE EXCEPTION 'cannot take %% snowflake ids in one call', coalesce(n::text, 'NULL')
                    USING ERRCODE = CASE WHEN n IS NULL THEN '22004' ELSE '22003' END,
                          DETAIL = 'n must be between 1 and 1000000.',
                          HINT = 'Take at most 1000000 ids per call; call it again for more.';
            END IF;
            -- As the native edition with snowflake.max_ahead = 2s: a batch that would run
            -- further than 2 s ahead of the clock can never be issued.
            IF n > %7$s THEN
                RAISE EXCEPTION 'cannot take %% snowflake ids of worker %% at once', n, %6$s
                    USING ERRCODE = '54000',
                          DETAIL = 'A worker''s ids may run at most 2000 ms ahead of the clock, which holds %7$s ids in layout %2$s.',
                          HINT = 'Take fewer ids per call.';
            END IF;
            %4$s
            %5$s
            RETURN QUERY
                SELECT %1$s._snowflake_id(%2$L, t >> %3$s, %6$s, t & ((1::bigint << %3$s) - 1))
                FROM generate_series(first, first + n - 1) AS t;
        END
        $body$;
    $f$, s, cfg.layout, seq_bits, prepare, reserve, coalesce(cfg.worker::text, 'NULL'),
        ((2000 + _snowflake_unit_ms(cfg.layout) - 1) / _snowflake_unit_ms(cfg.layout)) << seq_bits,
        -- The lock's key: 'snow' and the counter's oid, looked up by name when the function is
        -- first run in a session, so that a restored dump (new oids) still agrees with
        -- snowflake_restore_mark.
        format('(1936617335::bigint << 32) | %L::regclass::oid::bigint', s || '.snowflake_portable_ticks'));

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
    $f$, s, cfg.layout);
END
$$;
REVOKE ALL ON FUNCTION _snowflake_write_functions() FROM PUBLIC;
REVOKE ALL ON FUNCTION _snowflake_revoke_others() FROM PUBLIC;

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
-- unique among every writer whose ids can meet; no ordinary session can change it.
CREATE OR REPLACE FUNCTION snowflake_set_worker_id(worker integer) RETURNS integer
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    layout text := (SELECT c.layout FROM snowflake_portable_config c);
    max_worker bigint := (1::bigint << _snowflake_worker_bits(layout)) - 1;
BEGIN
    PERFORM _snowflake_require_owner('set the snowflake worker id');
    IF worker IS NULL OR worker < 0 OR worker > max_worker THEN
        RAISE EXCEPTION 'snowflake worker id % is out of range', coalesce(worker::text, 'NULL')
            USING ERRCODE = '22003',
                  DETAIL = format('Worker ids of layout %s are %s bits: 0 to %s.', layout, _snowflake_worker_bits(layout), max_worker),
                  HINT = format('Give each database, or each writer that must not collide, its own worker id between 0 and %s.', max_worker);
    END IF;
    UPDATE snowflake_portable_config SET worker = snowflake_set_worker_id.worker;
    PERFORM _snowflake_write_functions();
    RETURN worker;
END
$$;
REVOKE ALL ON FUNCTION snowflake_set_worker_id(integer) FROM PUBLIC;

-- Chooses the layout this schema mints and decodes in, before its first id.
CREATE OR REPLACE FUNCTION snowflake_set_layout(layout text) RETURNS text
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    chosen text := _snowflake_layout(layout);
    current text := (SELECT c.layout FROM snowflake_portable_config c);
    worker integer := (SELECT c.worker FROM snowflake_portable_config c);
BEGIN
    PERFORM _snowflake_require_owner('set the snowflake layout');
    IF chosen IS NULL THEN
        RAISE EXCEPTION 'the snowflake layout must not be NULL'
            USING ERRCODE = '22004', HINT = 'Name a layout: snowflake, twitter, sonyflake or pgedge.';
    END IF;
    IF chosen = current THEN
        RETURN chosen;
    END IF;
    IF (SELECT is_called FROM snowflake_portable_ticks) THEN
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
    UPDATE snowflake_portable_config SET layout = chosen;
    PERFORM _snowflake_write_functions();
    RETURN chosen;
END
$$;
REVOKE ALL ON FUNCTION snowflake_set_layout(text) FROM PUBLIC;

-- From now on every id is above `above` (an id of this layout, e.g. the largest id of the
-- tables the native edition filled). Never moves the counter back. Returns the smallest id
-- this schema may issue next.
CREATE OR REPLACE FUNCTION snowflake_restore_mark(above bigint) RETURNS bigint
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    cfg record;
    lock_key bigint := (1936617335::bigint << 32) | 'snowflake_portable_ticks'::regclass::oid::bigint;
    seq_bits integer;
    -- The first tick of the time unit after the one of `above`: every id made of it is above
    -- `above`, whatever the two ids' workers.
    floor_tick bigint;
    next_tick bigint;
BEGIN
    PERFORM _snowflake_require_owner('restore the snowflake mark');
    SELECT c.worker, c.layout INTO cfg FROM snowflake_portable_config c;
    IF above IS NULL THEN
        RAISE EXCEPTION 'the mark to restore must not be NULL'
            USING ERRCODE = '22004', HINT = 'Pass the largest id issued so far, e.g. (SELECT max(id) FROM orders).';
    END IF;
    seq_bits := _snowflake_seq_bits(cfg.layout);
    IF _snowflake_time_of_id(above, cfg.layout) >= _snowflake_max_time(cfg.layout) THEN
        RAISE EXCEPTION 'cannot mint above %: its time is the last of layout %', above, cfg.layout
            USING ERRCODE = '22003',
                  DETAIL = format('Ids of this layout end at %s.',
                                  _snowflake_timestamp_of(_snowflake_max_time(cfg.layout), cfg.layout)),
                  HINT = 'Pass the largest id issued so far; if it really is at the end of the layout, the layout is used up.';
    END IF;
    floor_tick := (_snowflake_time_of_id(above, cfg.layout) + 1) << seq_bits;
    -- A transaction-level lock: the owner's administrative call may hold it to its commit.
    PERFORM pg_advisory_xact_lock(lock_key);
    next_tick := nextval('snowflake_portable_ticks');
    IF next_tick < floor_tick THEN
        next_tick := floor_tick;
    END IF;
    -- Under the lock nobody else moves the counter, so the next id is exactly what we return.
    PERFORM setval('snowflake_portable_ticks', next_tick - 1);
    PERFORM pg_current_xact_id();
    RETURN _snowflake_id(cfg.layout, next_tick >> seq_bits, coalesce(cfg.worker, 0), next_tick & ((1::bigint << seq_bits) - 1));
END
$$;
REVOKE ALL ON FUNCTION snowflake_restore_mark(bigint) FROM PUBLIC;

-- (worker_id, is_set, preloaded) as in the native edition; preloaded is always false here.
CREATE OR REPLACE FUNCTION snowflake_worker_id(OUT worker_id integer, OUT is_set boolean, OUT preloaded boolean)
LANGUAGE sql STABLE SECURITY DEFINER
BEGIN ATOMIC
    SELECT c.worker, c.worker IS NOT NULL, false FROM snowflake_portable_config c;
END;

-- Pin the search_path of the functions written here that run as the owner or name this
-- schema's objects: pg_catalog first (no object of this schema can stand in for a built-in),
-- then this schema, then pg_temp (never searched for functions; last for tables). The
-- functions _snowflake_write_functions() writes carry the same setting.
DO $install$
DECLARE
    f regprocedure;
BEGIN
    FOR f IN
        SELECT p.oid::regprocedure
        FROM pg_catalog.pg_proc p
        WHERE p.pronamespace = (SELECT oid FROM pg_catalog.pg_namespace WHERE nspname = current_schema())
          AND p.proname IN ('_snowflake_write_functions', '_snowflake_require_owner', 'snowflake_set_worker_id',
                            '_snowflake_time_error', '_snowflake_revoke_others',
                            'snowflake_set_layout', 'snowflake_restore_mark')
    LOOP
        EXECUTE format('ALTER FUNCTION %s SET search_path = pg_catalog, %I, pg_temp', f, current_schema());
    END LOOP;
    PERFORM _snowflake_write_functions();
END
$install$;

-- The installing session's search_path as it was.
DO $restore$
BEGIN
    PERFORM pg_catalog.set_config('search_path', pg_catalog.current_setting('snowflake_portable.search_path'), false);
END
$restore$;

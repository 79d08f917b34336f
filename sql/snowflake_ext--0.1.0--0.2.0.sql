-- snowflake_ext 0.1.0 to 0.2.0. What changes:
-- * the high-water marks move from files into the marks table the mark writer keeps (nothing
--   to do here: the 0.2.0 library carries the 0.1.0 lease files over at its first start);
-- * new functions: snowflake_nextval_batch(n), snowflake_lastval(), snowflake_status(),
--   snowflake_restore_mark(...), snowflake_rewind(worker), snowflake_column_max(tbl, col);
-- * new: snowflake_decode/snowflake_compose of other layouts, snowflake_to_text and
--   snowflake_from_text, the snowflake type, snowflake_lower_bound/upper_bound and
--   snowflake_partition_bounds, the replication guard (snowflake_guard, ...);
-- * snowflake_stats() gains the columns clock_jumps, rewindable and foreign_rows (the view is
--   rebuilt);
-- * snowflake_adopt is hardened (search_path, schema-qualified names, owner only);
-- * privileges: explicit-worker generation, the statistics and the marks are no longer PUBLIC's.
-- Tables whose default calls snowflake_nextval() are untouched: that function keeps its OID.

\echo Use "ALTER EXTENSION snowflake_ext UPDATE TO '0.2.0'" to load this file. \quit

-- Generating and reading.
CREATE FUNCTION "snowflake_nextval_batch"(
	"n" INT /* Option < i32 > */
) RETURNS SETOF bigint /* i64 */
VOLATILE PARALLEL SAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'snowflake_nextval_batch_configured_wrapper';

CREATE FUNCTION "snowflake_lastval"() RETURNS bigint /* i64 */
STRICT VOLATILE PARALLEL RESTRICTED
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'snowflake_lastval_wrapper';

-- Statistics: three more columns.
DROP VIEW snowflake_stats;
DROP FUNCTION snowflake_stats();
CREATE FUNCTION "snowflake_stats"() RETURNS TABLE (
	"worker" INT,  /* i32 */
	"issued" bigint,  /* i64 */
	"last_id" bigint,  /* i64 */
	"ahead_ms" bigint,  /* i64 */
	"clock_steps_back" bigint,  /* i64 */
	"clock_jumps" bigint,  /* i64 */
	"borrowed_ms" bigint,  /* i64 */
	"persisted_mark" bigint,  /* Option < i64 > */
	"rewindable" bool,  /* bool */
	"foreign_rows" bigint  /* i64 */
)
STRICT VOLATILE PARALLEL SAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'snowflake_worker_stats_wrapper';
CREATE VIEW snowflake_stats AS SELECT * FROM snowflake_stats();
COMMENT ON VIEW snowflake_stats IS 'Per worker id: ids issued since the server started, the last id, how far the time field runs ahead of the clock, clock steps back and forward jumps seen, time borrowed on overflow, the persisted high-water mark, whether a followed forward jump can be rewound, and rows that arrived by replication carrying this worker id (counted by the replication guard).';

CREATE FUNCTION "snowflake_status"() RETURNS TABLE (
	"state" TEXT,  /* String */
	"marks_database" TEXT,  /* String */
	"detail" TEXT,  /* Option < String > */
	"layout" TEXT  /* String */
)
STRICT VOLATILE PARALLEL SAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'snowflake_status_wrapper';

-- Administering the marks.
CREATE FUNCTION "snowflake_restore_mark"(
	"above" bigint /* Option < i64 > */
) RETURNS bigint /* i64 */
VOLATILE PARALLEL UNSAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'snowflake_restore_mark_all_wrapper';

CREATE FUNCTION "snowflake_restore_mark"(
	"worker" INT, /* Option < i32 > */
	"above" bigint /* Option < i64 > */
) RETURNS bigint /* i64 */
VOLATILE PARALLEL UNSAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'snowflake_restore_mark_worker_wrapper';

CREATE FUNCTION snowflake_restore_mark(tables regclass[]) RETURNS bigint
VOLATILE PARALLEL UNSAFE
LANGUAGE c AS 'MODULE_PATHNAME', 'snowflake_restore_mark_from_wrapper';

CREATE FUNCTION "snowflake_rewind"(
	"worker" INT /* Option < i32 > */
) RETURNS TABLE (
	"next_id" bigint,  /* i64 */
	"reserved_from" bigint,  /* i64 */
	"reserved_to" bigint  /* i64 */
)
VOLATILE PARALLEL UNSAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'snowflake_rewind_wrapper';

-- snowflake_adopt, hardened, and the owner-rights scan it uses.
CREATE FUNCTION snowflake_column_max(tbl regclass, col text) RETURNS bigint
VOLATILE STRICT PARALLEL UNSAFE
LANGUAGE c AS 'MODULE_PATHNAME', 'snowflake_column_max_wrapper';
COMMENT ON FUNCTION snowflake_column_max(regclass, text) IS
    'The largest value of a bigint column, read with the table owner''s rights in a security-restricted operation (used by snowflake_adopt); only the owner or a superuser may call it.';

CREATE OR REPLACE FUNCTION snowflake_adopt(tbl regclass, col name, worker integer DEFAULT NULL)
RETURNS text
LANGUAGE plpgsql
VOLATILE
PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $adopt$
DECLARE
    rel record;
    att record;
    cur_default text;
    cur_worker text;
    new_default text;
    max_value bigint;
    floor_id bigint;
    owned_seq text;
BEGIN
    -- The arguments, before any lock.
    IF tbl IS NULL OR col IS NULL THEN
        RAISE EXCEPTION 'snowflake_adopt needs a table and a column, not NULL'
            USING ERRCODE = 'null_value_not_allowed',
                  HINT = 'Call it as snowflake_adopt(''my_table'', ''id'').';
    END IF;
    SELECT c.oid, c.relkind, c.relowner,
           pg_catalog.format('%I.%I', n.nspname, c.relname) AS name
      INTO rel
      FROM pg_catalog.pg_class c
      JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace
     WHERE c.oid OPERATOR(pg_catalog.=) tbl::pg_catalog.oid;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'relation with OID % does not exist', tbl::pg_catalog.oid
            USING ERRCODE = 'undefined_table',
                  HINT = 'Pass the table by name, e.g. snowflake_adopt(''orders'', ''id'').';
    END IF;
    IF rel.relkind OPERATOR(pg_catalog.<>) ALL ('{r,p}'::pg_catalog."char"[]) THEN
        RAISE EXCEPTION '% is not a table', rel.name
            USING ERRCODE = 'wrong_object_type',
                  HINT = 'Only a table''s key column can take snowflake ids.';
    END IF;
    IF NOT pg_catalog.pg_has_role(rel.relowner, 'USAGE') THEN
        RAISE EXCEPTION 'must be the owner of table % to adopt it', rel.name
            USING ERRCODE = 'insufficient_privilege',
                  HINT = 'Run it as the table''s owner, or as a superuser.';
    END IF;
    IF worker IS NOT NULL THEN
        -- Raises 22003, naming the range of the server's layout, for a worker outside it.
        PERFORM @extschema@.snowflake_compose(pg_catalog.now(), worker, 0);
    ELSIF pg_catalog.current_setting('snowflake.worker_id')::pg_catalog.int4 OPERATOR(pg_catalog.<) 0 THEN
        RAISE EXCEPTION 'snowflake.worker_id is not set, so a DEFAULT snowflake_nextval() would fail on every insert'
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'Set it first (ALTER SYSTEM SET snowflake.worker_id = 1; SELECT pg_reload_conf();) or pass a worker id: snowflake_adopt(tbl, col, 1).';
    END IF;
    IF NOT EXISTS (
        SELECT FROM pg_catalog.pg_attribute a
         WHERE a.attrelid OPERATOR(pg_catalog.=) rel.oid AND a.attname OPERATOR(pg_catalog.=) col
           AND a.attnum OPERATOR(pg_catalog.>) 0 AND NOT a.attisdropped
    ) THEN
        RAISE EXCEPTION 'column % of table % does not exist', pg_catalog.quote_ident(col), rel.name
            USING ERRCODE = 'undefined_column',
                  HINT = 'Name the table''s key column, e.g. snowflake_adopt(''orders'', ''id'').';
    END IF;

    -- No insert may slip a value in between the checks and the change.
    EXECUTE pg_catalog.format('LOCK TABLE %s IN ACCESS EXCLUSIVE MODE', rel.name);

    SELECT a.attnum, a.atttypid, a.atttypmod, a.attgenerated, a.attidentity
      INTO att
      FROM pg_catalog.pg_attribute a
     WHERE a.attrelid OPERATOR(pg_catalog.=) rel.oid AND a.attname OPERATOR(pg_catalog.=) col
       AND a.attnum OPERATOR(pg_catalog.>) 0 AND NOT a.attisdropped;
    IF att.atttypid OPERATOR(pg_catalog.<>) 'pg_catalog.int8'::pg_catalog.regtype::pg_catalog.oid THEN
        RAISE EXCEPTION 'column % of table % is %, not bigint', pg_catalog.quote_ident(col), rel.name,
                        pg_catalog.format_type(att.atttypid, att.atttypmod)
            USING ERRCODE = 'datatype_mismatch',
                  DETAIL = 'Snowflake ids are 64-bit and need a bigint column.',
                  HINT = pg_catalog.format('Widen it first: ALTER TABLE %s ALTER COLUMN %I TYPE bigint; (and the columns that reference it).', rel.name, col);
    END IF;
    IF att.attgenerated OPERATOR(pg_catalog.<>) '' THEN
        RAISE EXCEPTION 'column % of table % is a generated column', pg_catalog.quote_ident(col), rel.name
            USING ERRCODE = 'invalid_column_definition',
                  HINT = 'Only a plain, bigserial or identity column can take snowflake ids.';
    END IF;
    IF NOT EXISTS (
        SELECT FROM pg_catalog.pg_index i
         WHERE i.indrelid OPERATOR(pg_catalog.=) rel.oid AND i.indisunique AND i.indisvalid
           AND i.indnkeyatts OPERATOR(pg_catalog.=) 1 AND i.indkey[0] OPERATOR(pg_catalog.=) att.attnum
           AND i.indpred IS NULL AND i.indexprs IS NULL
    ) THEN
        RAISE EXCEPTION 'column % of table % is not a key', pg_catalog.quote_ident(col), rel.name
            USING ERRCODE = 'invalid_table_definition',
                  DETAIL = 'Nothing would stop a duplicate id from being stored.',
                  HINT = pg_catalog.format('Make it the primary key (ALTER TABLE %s ADD PRIMARY KEY (%I);) or give it a unique constraint of its own.', rel.name, col);
    END IF;

    new_default := CASE WHEN worker IS NULL THEN '@extschema@.snowflake_nextval()'
                        ELSE pg_catalog.format('@extschema@.snowflake_nextval(%s)', worker) END;
    SELECT pg_catalog.pg_get_expr(d.adbin, d.adrelid) INTO cur_default
      FROM pg_catalog.pg_attrdef d
     WHERE d.adrelid OPERATOR(pg_catalog.=) rel.oid AND d.adnum OPERATOR(pg_catalog.=) att.attnum;
    IF cur_default OPERATOR(pg_catalog.~) 'snowflake_nextval\(' THEN
        cur_worker := pg_catalog.substring(cur_default, 'snowflake_nextval\((\d*)\)');
        IF cur_worker OPERATOR(pg_catalog.=) COALESCE(worker::pg_catalog.text, '') THEN
            RETURN pg_catalog.format('%s.%I already takes snowflake ids (DEFAULT %s); nothing changed',
                                     rel.name, col, cur_default);
        END IF;
        RAISE EXCEPTION 'column % of table % already takes snowflake ids with DEFAULT %', pg_catalog.quote_ident(col), rel.name, cur_default
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  DETAIL = pg_catalog.format('Adopting it again would change its worker to %s.',
                                             COALESCE(worker::pg_catalog.text, 'snowflake.worker_id')),
                  HINT = pg_catalog.format('To change the worker, run ALTER TABLE %s ALTER COLUMN %I SET DEFAULT %s;', rel.name, col, new_default);
    END IF;

    -- Every id made from now on is at least this; existing values must all be below it.
    floor_id := @extschema@.snowflake_min_id(pg_catalog.clock_timestamp());
    max_value := @extschema@.snowflake_column_max(rel.oid::pg_catalog.regclass, col::pg_catalog.text);
    IF max_value OPERATOR(pg_catalog.>=) floor_id THEN
        RAISE EXCEPTION 'column % of table % holds values up to %, which new snowflake ids could repeat', pg_catalog.quote_ident(col), rel.name, max_value
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  DETAIL = pg_catalog.format('Snowflake ids made from now on start at %s (snowflake_min_id(now())).', floor_id),
                  HINT = 'Only columns whose values are all below that can be switched in place; renumber the rows first, or keep this column on its sequence.';
    END IF;

    owned_seq := pg_catalog.pg_get_serial_sequence(rel.name, col::pg_catalog.text);
    IF att.attidentity OPERATOR(pg_catalog.<>) '' THEN
        EXECUTE pg_catalog.format('ALTER TABLE %s ALTER COLUMN %I DROP IDENTITY', rel.name, col);
        owned_seq := NULL;  -- dropped with the identity
    END IF;
    EXECUTE pg_catalog.format('ALTER TABLE %s ALTER COLUMN %I SET DEFAULT %s', rel.name, col, new_default);
    IF owned_seq IS NOT NULL THEN
        RAISE NOTICE 'sequence % is no longer used by %.%; drop it when nothing else uses it', owned_seq, rel.name, pg_catalog.quote_ident(col);
    END IF;
    RETURN pg_catalog.format('%s.%I now takes DEFAULT %s; existing rows kept as they were (largest id %s)',
                             rel.name, col, new_default, COALESCE(max_value::pg_catalog.text, 'none'));
END
$adopt$;

COMMENT ON FUNCTION snowflake_adopt(regclass, name, integer) IS
    'Switches a bigint bigserial or identity key column to DEFAULT snowflake_nextval(), keeping existing rows; only for the table''s owner; refuses columns that are not bigint keys or hold values new ids could repeat; safe to run twice with the same worker.';

-- Other systems' layouts, by name or described.
CREATE  FUNCTION "snowflake_compose"(
	"ts" timestamp with time zone, /* TimestampWithTimeZone */
	"worker" INT, /* i32 */
	"seq" INT, /* i32 */
	"layout" TEXT /* & str */
) RETURNS bigint /* i64 */
IMMUTABLE STRICT PARALLEL SAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'snowflake_compose_in_wrapper';

CREATE  FUNCTION "snowflake_decode"(
	"id" bigint, /* i64 */
	"layout" TEXT /* & str */
) RETURNS TABLE (
	"ts" timestamp with time zone,  /* TimestampWithTimeZone */
	"worker" INT,  /* i32 */
	"seq" INT  /* i32 */
)
IMMUTABLE STRICT PARALLEL SAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'snowflake_decode_in_wrapper';

-- Ids as text, and the snowflake type (a bigint whose JSON form is a string).
CREATE  FUNCTION "snowflake_from_text"(
	"input" TEXT, /* & str */
	"form" TEXT DEFAULT 'base32' /* & str */
) RETURNS bigint /* i64 */
IMMUTABLE STRICT PARALLEL SAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'snowflake_from_text_wrapper';

CREATE  FUNCTION "snowflake_to_text"(
	"id" bigint, /* i64 */
	"form" TEXT DEFAULT 'base32' /* & str */
) RETURNS TEXT /* String */
IMMUTABLE STRICT PARALLEL SAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'snowflake_to_text_wrapper';

CREATE TYPE snowflake;
CREATE FUNCTION snowflake_in(cstring) RETURNS snowflake
    IMMUTABLE STRICT PARALLEL SAFE LANGUAGE c AS 'MODULE_PATHNAME', 'snowflake_in_wrapper';
CREATE FUNCTION snowflake_out(snowflake) RETURNS cstring
    IMMUTABLE STRICT PARALLEL SAFE LANGUAGE internal AS 'int8out';
CREATE FUNCTION snowflake_recv(internal) RETURNS snowflake
    IMMUTABLE STRICT PARALLEL SAFE LANGUAGE internal AS 'int8recv';
CREATE FUNCTION snowflake_send(snowflake) RETURNS bytea
    IMMUTABLE STRICT PARALLEL SAFE LANGUAGE internal AS 'int8send';
CREATE TYPE snowflake (
    INPUT = snowflake_in,
    OUTPUT = snowflake_out,
    RECEIVE = snowflake_recv,
    SEND = snowflake_send,
    LIKE = pg_catalog.int8,
    CATEGORY = 'N'
);
COMMENT ON TYPE snowflake IS 'A snowflake id: a bigint (binary-compatible, implicit casts both ways, bigint''s operators and indexes) whose JSON form is a string, for JavaScript clients.';
CREATE CAST (snowflake AS bigint) WITHOUT FUNCTION AS IMPLICIT;
CREATE CAST (bigint AS snowflake) WITHOUT FUNCTION AS IMPLICIT;
-- Integers widen as they do to bigint (by functions that return the type itself, so that
-- pg_upgrade can restore the casts in any order).
CREATE FUNCTION snowflake(integer) RETURNS snowflake
    IMMUTABLE STRICT PARALLEL SAFE LANGUAGE internal AS 'int48';
CREATE FUNCTION snowflake(smallint) RETURNS snowflake
    IMMUTABLE STRICT PARALLEL SAFE LANGUAGE internal AS 'int28';
CREATE CAST (integer AS snowflake) WITH FUNCTION snowflake(integer) AS IMPLICIT;
CREATE CAST (smallint AS snowflake) WITH FUNCTION snowflake(smallint) AS IMPLICIT;

-- Time filters and partitions by time.
CREATE  FUNCTION "snowflake_lower_bound"(
	"ts" timestamp with time zone /* TimestampWithTimeZone */
) RETURNS bigint /* i64 */
IMMUTABLE STRICT PARALLEL SAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'snowflake_lower_bound_wrapper';

CREATE  FUNCTION "snowflake_upper_bound"(
	"ts" timestamp with time zone /* TimestampWithTimeZone */
) RETURNS bigint /* i64 */
IMMUTABLE STRICT PARALLEL SAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'snowflake_upper_bound_wrapper';

CREATE  FUNCTION "snowflake_partition_bounds"(
	"from_ts" timestamp with time zone, /* TimestampWithTimeZone */
	"to_ts" timestamp with time zone /* TimestampWithTimeZone */
) RETURNS TABLE (
	"from_id" bigint,  /* i64 */
	"to_id" bigint  /* i64 */
)
IMMUTABLE STRICT PARALLEL SAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'snowflake_partition_bounds_wrapper';

-- The replication guard.
CREATE FUNCTION "snowflake_guard_row"()
	RETURNS TRIGGER
	LANGUAGE c
	AS 'MODULE_PATHNAME', 'snowflake_guard_row_wrapper';

-- The replication guard (src/guard.rs): installing it on a table, on every table of a
-- subscription, and removing it. Written like snowflake_adopt: search_path = pg_catalog,
-- pg_temp and every name schema-qualified; creating a trigger needs the table's owner (or the
-- TRIGGER privilege), as for any trigger.

-- Guards one table: a row that arrives by replication carrying this server's own worker id
-- raises an error (on_local_worker => 'error', the default) or a WARNING, counted in
-- snowflake_stats.foreign_rows ('warning'). col: the id column (by default the column whose
-- default calls snowflake_nextval, or the bigint primary key). Running it again replaces the
-- guard. The trigger fires only in the replication apply (ENABLE REPLICA).
CREATE FUNCTION snowflake_guard(tbl regclass, col name DEFAULT NULL, on_local_worker text DEFAULT 'error')
RETURNS text
LANGUAGE plpgsql
VOLATILE
PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $guard$
DECLARE
    rel text;
    target name;
BEGIN
    IF tbl IS NULL OR on_local_worker IS NULL THEN
        RAISE EXCEPTION 'snowflake_guard needs a table'
            USING ERRCODE = 'null_value_not_allowed',
                  HINT = 'Call it as snowflake_guard(''my_table'').';
    END IF;
    IF on_local_worker OPERATOR(pg_catalog.<>) ALL (ARRAY['error', 'warning']) THEN
        RAISE EXCEPTION 'on_local_worker must be ''error'' or ''warning'', not ''%''', on_local_worker
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = '''error'' stops the replication at the first such row; ''warning'' lets it through, logged and counted.';
    END IF;
    SELECT pg_catalog.format('%I.%I', n.nspname, c.relname) INTO rel
      FROM pg_catalog.pg_class c
      JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace
     WHERE c.oid OPERATOR(pg_catalog.=) tbl::pg_catalog.oid
       AND c.relkind OPERATOR(pg_catalog.=) ANY ('{r,p}'::pg_catalog."char"[]);
    IF rel IS NULL THEN
        RAISE EXCEPTION 'relation with OID % is not a table', tbl::pg_catalog.oid
            USING ERRCODE = 'wrong_object_type',
                  HINT = 'Pass the table by name, e.g. snowflake_guard(''events'').';
    END IF;
    IF col IS NOT NULL THEN
        SELECT a.attname INTO target
          FROM pg_catalog.pg_attribute a
         WHERE a.attrelid OPERATOR(pg_catalog.=) tbl::pg_catalog.oid AND a.attname OPERATOR(pg_catalog.=) col
           AND a.attnum OPERATOR(pg_catalog.>) 0 AND NOT a.attisdropped
           AND a.atttypid OPERATOR(pg_catalog.=) ANY (ARRAY['pg_catalog.int8'::pg_catalog.regtype::pg_catalog.oid,
                                                          '@extschema@.snowflake'::pg_catalog.regtype::pg_catalog.oid]);
    ELSE
        SELECT a.attname INTO target
          FROM pg_catalog.pg_attribute a
          LEFT JOIN pg_catalog.pg_attrdef d
            ON d.adrelid OPERATOR(pg_catalog.=) a.attrelid AND d.adnum OPERATOR(pg_catalog.=) a.attnum
         WHERE a.attrelid OPERATOR(pg_catalog.=) tbl::pg_catalog.oid AND a.attnum OPERATOR(pg_catalog.>) 0
           AND NOT a.attisdropped
           AND a.atttypid OPERATOR(pg_catalog.=) ANY (ARRAY['pg_catalog.int8'::pg_catalog.regtype::pg_catalog.oid,
                                                          '@extschema@.snowflake'::pg_catalog.regtype::pg_catalog.oid])
         ORDER BY pg_catalog.pg_get_expr(d.adbin, d.adrelid) OPERATOR(pg_catalog.~) 'snowflake_nextval\(' DESC NULLS LAST,
                  EXISTS (SELECT FROM pg_catalog.pg_index i
                          WHERE i.indrelid OPERATOR(pg_catalog.=) a.attrelid AND i.indisprimary
                            AND i.indnkeyatts OPERATOR(pg_catalog.=) 1
                            AND i.indkey[0] OPERATOR(pg_catalog.=) a.attnum) DESC,
                  a.attnum
         LIMIT 1;
    END IF;
    IF target IS NULL THEN
        RAISE EXCEPTION 'table % has no snowflake id column%', rel,
                        CASE WHEN col IS NULL THEN '' ELSE pg_catalog.format(' named %I of type bigint or snowflake', col) END
            USING ERRCODE = 'undefined_column',
                  HINT = 'Name the column that holds the ids: snowflake_guard(''events'', ''id'').';
    END IF;
    EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS snowflake_guard ON %s', rel);
    EXECUTE pg_catalog.format(
        'CREATE TRIGGER snowflake_guard BEFORE INSERT ON %s FOR EACH ROW EXECUTE FUNCTION @extschema@.snowflake_guard_row(%L, %L)',
        rel, target, on_local_worker);
    EXECUTE pg_catalog.format('ALTER TABLE %s ENABLE REPLICA TRIGGER snowflake_guard', rel);
    RETURN pg_catalog.format('%s is guarded: a row arriving by replication whose %I carries this server''s worker id %s',
                             rel, target,
                             CASE on_local_worker WHEN 'error' THEN 'stops the replication with an error'
                                  ELSE 'is let through with a warning and counted' END);
END
$guard$;

COMMENT ON FUNCTION snowflake_guard(regclass, name, text) IS
    'Guards a table that receives rows by logical replication: a row carrying this server''s own worker id raises an error (or, with on_local_worker => ''warning'', a counted warning).';

-- Guards every table of a (native) subscription of this database.
CREATE FUNCTION snowflake_guard_subscription(subscription name, on_local_worker text DEFAULT 'error')
RETURNS SETOF text
LANGUAGE plpgsql
VOLATILE
PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $guard$
DECLARE
    relid pg_catalog.oid;
BEGIN
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_subscription s
                    WHERE s.subname OPERATOR(pg_catalog.=) subscription
                      AND s.subdbid OPERATOR(pg_catalog.=) (SELECT d.oid FROM pg_catalog.pg_database d
                                                             WHERE d.datname OPERATOR(pg_catalog.=) pg_catalog.current_database())) THEN
        RAISE EXCEPTION 'subscription % does not exist in this database', pg_catalog.quote_ident(subscription)
            USING ERRCODE = 'undefined_object',
                  HINT = 'List them with SELECT subname FROM pg_subscription; for pglogical, guard its tables one by one with snowflake_guard(table).';
    END IF;
    FOR relid IN
        SELECT r.srrelid FROM pg_catalog.pg_subscription_rel r
          JOIN pg_catalog.pg_subscription s ON s.oid OPERATOR(pg_catalog.=) r.srsubid
         WHERE s.subname OPERATOR(pg_catalog.=) subscription
         ORDER BY r.srrelid
    LOOP
        RETURN NEXT @extschema@.snowflake_guard(relid::pg_catalog.regclass, NULL, on_local_worker);
    END LOOP;
END
$guard$;

COMMENT ON FUNCTION snowflake_guard_subscription(name, text) IS
    'Guards every table of a native subscription (see snowflake_guard).';

-- Removes the guard from a table.
CREATE FUNCTION snowflake_unguard(tbl regclass)
RETURNS text
LANGUAGE plpgsql
VOLATILE
PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $guard$
BEGIN
    IF tbl IS NULL THEN
        RAISE EXCEPTION 'snowflake_unguard needs a table'
            USING ERRCODE = 'null_value_not_allowed',
                  HINT = 'Call it as snowflake_unguard(''my_table'').';
    END IF;
    EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS snowflake_guard ON %s', tbl);
    RETURN pg_catalog.format('%s is no longer guarded', tbl);
END
$guard$;

COMMENT ON FUNCTION snowflake_unguard(regclass) IS 'Removes the replication guard from a table.';

-- Privileges (see README.md, "Privileges").
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

-- The replication guard (src/tables/guard.rs): installing it on a table, on every table of a
-- subscription, and removing it. Written like snowflake_adopt: search_path = pg_catalog,
-- pg_temp and every name schema-qualified; creating a trigger needs the table's owner (or the
-- TRIGGER privilege), as for any trigger.

-- Guards one table: a row that arrives by replication carrying this server's own worker id
-- raises an error (on_local_worker => 'error', the default) or a WARNING, counted in
-- snowflake_stats.foreign_rows ('warning'). col: the id column (by default the one
-- snowflake_id_columns finds; an error if it finds none, several, or one whose type cannot
-- hold ids). Running it again replaces the
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
    found record;
    citus_table boolean;
    shard_of text;
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
    -- A shard of a Citus table, on a node that holds it. First, because Citus hides shards from
    -- queries on pg_class (the lookup below would call it no table at all); Citus itself tells
    -- a shard (named for its table and shard id) from any other relation.
    IF pg_catalog.to_regprocedure('pg_catalog.relation_is_a_known_shard(pg_catalog.regclass)') IS NOT NULL THEN
        EXECUTE 'SELECT pg_catalog.format(''%I.%I'', n.nspname, c.relname)
                   FROM pg_catalog.pg_dist_shard s
                   JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) s.logicalrelid
                   JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace
                  WHERE s.shardid OPERATOR(pg_catalog.=) pg_catalog.substring($1::pg_catalog.text, ''_([0-9]+)"?$'')::pg_catalog.int8
                    AND pg_catalog.relation_is_a_known_shard($1)'
           INTO shard_of USING tbl;
    END IF;
    IF shard_of IS NOT NULL THEN
        RAISE EXCEPTION 'relation % is a shard of the Citus table %: snowflake_guard cannot guard it', tbl, shard_of
            USING ERRCODE = 'feature_not_supported',
                  DETAIL = pg_catalog.format('Citus makes, moves, splits and drops shards itself: a trigger put on one shard is not on the copy Citus makes when it moves or splits the shard, so it would be lost, and rows of %s reach its other shards, on other nodes.', shard_of),
                  HINT = pg_catalog.format('%s needs no guard inside the cluster: every node mints with a worker id of its own, and nodes given one by hand compare theirs before they mint (snowflake_status() on each node). Guard the tables that logical replication fills, on the server outside Citus where the rows arrive.', shard_of);
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
    -- Citus runs no triggers on its tables, and rows reach their shards on other nodes.
    IF pg_catalog.to_regclass('pg_catalog.pg_dist_partition') IS NOT NULL THEN
        EXECUTE 'SELECT pg_catalog.count(*) OPERATOR(pg_catalog.>) 0 FROM pg_catalog.pg_dist_partition p
                  WHERE p.logicalrelid OPERATOR(pg_catalog.=) $1'
           INTO citus_table USING tbl;
        IF citus_table THEN
            RAISE EXCEPTION 'table % is a Citus table: snowflake_guard cannot guard it', rel
                USING ERRCODE = 'feature_not_supported',
                      DETAIL = 'Citus writes its tables itself (it runs no triggers on distributed tables), and inside a Citus cluster every node mints with its own worker id, so rows Citus moves between nodes need no guard.',
                      HINT = 'Guard the tables that logical replication fills, on the server they arrive at.';
        END IF;
    END IF;
    IF col IS NOT NULL THEN
        SELECT a.attname INTO target
          FROM pg_catalog.pg_attribute a
         WHERE a.attrelid OPERATOR(pg_catalog.=) tbl::pg_catalog.oid AND a.attname OPERATOR(pg_catalog.=) col
           AND a.attnum OPERATOR(pg_catalog.>) 0 AND NOT a.attisdropped
           AND a.atttypid OPERATOR(pg_catalog.=) ANY (ARRAY['pg_catalog.int8'::pg_catalog.regtype::pg_catalog.oid,
                                                          '@extschema@.snowflake'::pg_catalog.regtype::pg_catalog.oid]);
        IF target IS NULL THEN
            RAISE EXCEPTION 'table % has no column % of type bigint or snowflake', rel, pg_catalog.quote_ident(col)
                USING ERRCODE = 'undefined_column',
                      HINT = pg_catalog.format('Name the column that holds the ids: snowflake_guard(%L, ''id'').', rel);
        END IF;
    ELSE
        -- The id columns, as snowflake_restore_mark(tables) finds them; never a guess.
        SELECT c.col, c.type, c.readable INTO found
          FROM @extschema@.snowflake_id_columns(tbl) c
         ORDER BY c.readable, c.col
         LIMIT 1;
        IF found.col IS NULL THEN
            RAISE EXCEPTION 'table % has no snowflake id column', rel
                USING ERRCODE = 'undefined_column',
                      DETAIL = 'A snowflake id column is one whose default calls snowflake_nextval, or else a bigint or snowflake primary key without a default.',
                      HINT = pg_catalog.format('Name the column that holds the ids: snowflake_guard(%L, ''id'').', rel);
        END IF;
        IF NOT found.readable THEN
            RAISE EXCEPTION 'column % of table % makes snowflake ids, but its type % cannot be read as ids', pg_catalog.quote_ident(found.col), rel, found.type
                USING ERRCODE = 'datatype_mismatch',
                      HINT = pg_catalog.format('Change the column to bigint (or snowflake), or name another column: snowflake_guard(%L, ''id'').', rel);
        END IF;
        IF (SELECT pg_catalog.count(*) FROM @extschema@.snowflake_id_columns(tbl)) OPERATOR(pg_catalog.>) 1 THEN
            RAISE EXCEPTION 'table % has several snowflake id columns: %', rel,
                            (SELECT pg_catalog.string_agg(pg_catalog.quote_ident(c.col), ', ') FROM @extschema@.snowflake_id_columns(tbl) c)
                USING ERRCODE = 'ambiguous_column',
                      HINT = pg_catalog.format('Name the one to guard: snowflake_guard(%L, ''id'').', rel);
        END IF;
        target := found.col;
    END IF;
    -- CREATE OR REPLACE (14 and later): a DROP TRIGGER IF EXISTS first told every caller, in a
    -- NOTICE, of a trigger that does not exist.
    EXECUTE pg_catalog.format(
        'CREATE OR REPLACE TRIGGER snowflake_guard BEFORE INSERT ON %s FOR EACH ROW EXECUTE FUNCTION @extschema@.snowflake_guard_row(%L, %L)',
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
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_trigger t
                    WHERE t.tgrelid OPERATOR(pg_catalog.=) tbl::pg_catalog.oid
                      AND t.tgname OPERATOR(pg_catalog.=) 'snowflake_guard') THEN
        RETURN pg_catalog.format('%s was not guarded', tbl);
    END IF;
    EXECUTE pg_catalog.format('DROP TRIGGER snowflake_guard ON %s', tbl);
    RETURN pg_catalog.format('%s is no longer guarded', tbl);
END
$guard$;

COMMENT ON FUNCTION snowflake_unguard(regclass) IS 'Removes the replication guard from a table.';

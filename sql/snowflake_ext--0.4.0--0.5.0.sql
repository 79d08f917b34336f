-- snowflake_ext 0.4.0 to 0.5.0.
--
-- * snowflake_adopt(tbl, col, worker) refuses a worker id that the table's owner (or the caller)
--   may not mint with (42501), instead of a default that fails every insert.
-- * snowflake_guard replaces its trigger in one statement (no NOTICE of a trigger that did not
--   exist) and its hints name the caller's table; snowflake_unguard says when a table was not
--   guarded instead of a NOTICE.
-- * A snowflake casts to timestamptz (its time), explicitly.
-- * snowflake_adopt checks the column against snowflake_compose(now(), 0, 0), which is
--   snowflake_min_id(now()) in a time-first layout (snowflake_min_id is refused in a worker-first
--   one), and in a worker-first layout with a worker given against that worker's ids from now.
-- The functions are replaced; nothing is dropped, grants stay.

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
    floor_worker integer := 0;
    owned_seq text;
    citus_table boolean;
    shard_of text;
BEGIN
    -- The arguments, before any lock.
    IF tbl IS NULL OR col IS NULL THEN
        RAISE EXCEPTION 'snowflake_adopt needs a table and a column, not NULL'
            USING ERRCODE = 'null_value_not_allowed',
                  HINT = 'Call it as snowflake_adopt(''my_table'', ''id'').';
    END IF;
    -- A shard of a Citus table, on a node that holds it: first, because Citus hides shards from
    -- queries on pg_class (the lookup below would find no relation).
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
        RAISE EXCEPTION 'relation % is a shard of the Citus table %: snowflake_adopt cannot move it onto snowflake ids', tbl, shard_of
            USING ERRCODE = 'feature_not_supported',
                  DETAIL = pg_catalog.format('A shard follows its distributed table: Citus makes its copies from the definition of %s, and the rows of %s may be inserted through any node of the cluster.', shard_of, shard_of),
                  HINT = pg_catalog.format('Create a new table whose key defaults to snowflake_nextval(), distribute it, and copy the rows of %s into it with INSERT ... SELECT: new ids are above every bigserial value.', shard_of);
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
    -- Citus: the default of a distribution column cannot change, and rows are inserted on every
    -- node, while this checks the ids against this node's high-water mark only.
    IF pg_catalog.to_regclass('pg_catalog.pg_dist_partition') IS NOT NULL THEN
        EXECUTE 'SELECT pg_catalog.count(*) OPERATOR(pg_catalog.>) 0 FROM pg_catalog.pg_dist_partition p
                  WHERE p.logicalrelid OPERATOR(pg_catalog.=) $1'
           INTO citus_table USING tbl;
        IF citus_table THEN
            RAISE EXCEPTION 'table % is a Citus table: snowflake_adopt cannot move it onto snowflake ids', rel.name
                USING ERRCODE = 'feature_not_supported',
                      DETAIL = 'Citus does not change the default of a distribution column, and the rows of a Citus table may be inserted through any node of the cluster.',
                      HINT = 'Create a new table whose key defaults to snowflake_nextval(), distribute it, and copy the rows into it with INSERT ... SELECT: new ids are above every bigserial value.';
        END IF;
    END IF;
    IF worker IS NOT NULL THEN
        -- Raises 22003, naming the range of the server's layout, for a worker outside it.
        PERFORM @extschema@.snowflake_compose(pg_catalog.now(), worker, 0);
        -- Minting with an explicit worker id is for the roles an administrator grants it to
        -- (src/tables/privileges.rs): a default that neither the table's owner nor the caller
        -- may run would fail every insert, with PostgreSQL's bare "permission denied".
        IF NOT pg_catalog.has_function_privilege(rel.relowner, '@extschema@.snowflake_nextval(integer)', 'EXECUTE')
           OR NOT pg_catalog.has_function_privilege('@extschema@.snowflake_nextval(integer)', 'EXECUTE') THEN
            RAISE EXCEPTION 'a DEFAULT snowflake_nextval(%) would fail on every insert into %: minting with an explicit worker id is not granted to %',
                            worker, rel.name,
                            CASE WHEN pg_catalog.has_function_privilege('@extschema@.snowflake_nextval(integer)', 'EXECUTE')
                                 THEN pg_catalog.pg_get_userbyid(rel.relowner)::pg_catalog.text ELSE current_user::pg_catalog.text END
                USING ERRCODE = 'insufficient_privilege',
                      DETAIL = 'snowflake_nextval(integer) (and snowflake_nextval_batch(integer, integer)) run only for the roles an administrator grants them to; ordinary roles mint with the server''s worker id.',
                      HINT = pg_catalog.format('Adopt without a worker id to mint with the server''s (snowflake_adopt(%L, %L)), or have a superuser run GRANT EXECUTE ON FUNCTION %s TO %I; and to every role that inserts.',
                                               rel.name, col, '@extschema@.snowflake_nextval(integer)', pg_catalog.pg_get_userbyid(rel.relowner));
        END IF;
    ELSIF (SELECT w.is_set FROM @extschema@.snowflake_worker_id() w) IS NOT TRUE THEN
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
    IF att.atttypid OPERATOR(pg_catalog.<>) ALL (ARRAY['pg_catalog.int8'::pg_catalog.regtype::pg_catalog.oid,
                                                        '@extschema@.snowflake'::pg_catalog.regtype::pg_catalog.oid]) THEN
        RAISE EXCEPTION 'column % of table % is %, not bigint or snowflake', pg_catalog.quote_ident(col), rel.name,
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

    -- Every id made from now on is at least this, the smallest id of any worker now (what
    -- snowflake_min_id(now()) is in a time-first layout); existing values must all be below it.
    floor_id := @extschema@.snowflake_compose(pg_catalog.clock_timestamp(), 0, 0);
    -- In a worker-first layout (Seata's) a worker's ids are all above every lower worker's, so
    -- a column whose default names its worker needs its values below that worker's ids from
    -- now on only. (The server's worker, with no worker given, may change: the floor stays.)
    -- Worker-first is where the worker's ids at the layout's epoch are above worker 0's now.
    IF worker OPERATOR(pg_catalog.>) 0
       AND @extschema@.snowflake_compose(@extschema@.snowflake_timestamp(0), worker, 0) OPERATOR(pg_catalog.>) floor_id THEN
        floor_worker := worker;
        floor_id := @extschema@.snowflake_compose(pg_catalog.clock_timestamp(), worker, 0);
    END IF;
    max_value := @extschema@.snowflake_column_max(rel.oid::pg_catalog.regclass, col::pg_catalog.text);
    IF max_value OPERATOR(pg_catalog.>=) floor_id THEN
        RAISE EXCEPTION 'column % of table % holds values up to %, which new snowflake ids could repeat', pg_catalog.quote_ident(col), rel.name, max_value
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  DETAIL = pg_catalog.format('Snowflake ids made from now on start at %s (snowflake_compose(now(), %s, 0)).', floor_id, floor_worker),
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

CREATE OR REPLACE FUNCTION snowflake_guard(tbl regclass, col name DEFAULT NULL, on_local_worker text DEFAULT 'error')
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

CREATE OR REPLACE FUNCTION snowflake_unguard(tbl regclass)
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

CREATE CAST (snowflake AS timestamptz) WITH FUNCTION snowflake_timestamp(bigint);

-- snowflake_adopt: moves an existing bigserial or identity key column onto snowflake ids.
--
-- Existing rows keep their values; new rows get snowflake_nextval() (or snowflake_nextval(worker)).
-- That is safe because every snowflake id made from now on is at least snowflake_min_id(now()),
-- about 2.5e17 in 2026, far above what a sequence reaches. The function checks it rather than
-- assumes it: it refuses a column holding any value that new ids could repeat.
--
-- Refuses, with an ERROR naming the problem: a column that is not bigint, is not by itself a
-- primary key or unique key, is generated, or holds values at or above snowflake_min_id(now()).
-- Running it on a column that already takes snowflake ids changes nothing.
CREATE FUNCTION snowflake_adopt(tbl regclass, col name, worker integer DEFAULT NULL)
RETURNS text
LANGUAGE plpgsql
VOLATILE
SET search_path FROM CURRENT
AS $adopt$
DECLARE
    att pg_attribute;
    cur_default text;
    new_default text;
    max_value bigint;
    floor_id bigint;
    owned_seq regclass;
BEGIN
    IF tbl IS NULL OR col IS NULL THEN
        RAISE EXCEPTION 'snowflake_adopt needs a table and a column, not NULL'
            USING ERRCODE = 'null_value_not_allowed',
                  HINT = 'Call it as snowflake_adopt(''my_table'', ''id'').';
    END IF;
    IF worker IS NOT NULL AND worker NOT BETWEEN 0 AND 1023 THEN
        RAISE EXCEPTION 'snowflake worker id % is out of range', worker
            USING ERRCODE = 'numeric_value_out_of_range',
                  DETAIL = 'Worker ids are 10 bits: 0 to 1023.',
                  HINT = 'Pass a worker id between 0 and 1023, or none to use snowflake.worker_id.';
    END IF;
    IF worker IS NULL AND current_setting('snowflake.worker_id')::int < 0 THEN
        RAISE EXCEPTION 'snowflake.worker_id is not set, so a DEFAULT snowflake_nextval() would fail on every insert'
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'Set it first (ALTER SYSTEM SET snowflake.worker_id = 1; SELECT pg_reload_conf();) or pass a worker id: snowflake_adopt(tbl, col, 1).';
    END IF;

    -- No insert may slip a value in between the checks and the change.
    EXECUTE format('LOCK TABLE %s IN ACCESS EXCLUSIVE MODE', tbl);

    SELECT * INTO att FROM pg_attribute
    WHERE attrelid = tbl AND attname = col AND attnum > 0 AND NOT attisdropped;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'column % of table % does not exist', quote_ident(col), tbl
            USING ERRCODE = 'undefined_column',
                  HINT = 'Name the table''s key column, e.g. snowflake_adopt(''orders'', ''id'').';
    END IF;
    IF att.atttypid <> 'bigint'::regtype THEN
        RAISE EXCEPTION 'column % of table % is %, not bigint', quote_ident(col), tbl, format_type(att.atttypid, att.atttypmod)
            USING ERRCODE = 'datatype_mismatch',
                  DETAIL = 'Snowflake ids are 64-bit and need a bigint column.',
                  HINT = format('Widen it first: ALTER TABLE %s ALTER COLUMN %I TYPE bigint; (and the columns that reference it).', tbl, col);
    END IF;
    IF att.attgenerated <> '' THEN
        RAISE EXCEPTION 'column % of table % is a generated column', quote_ident(col), tbl
            USING ERRCODE = 'invalid_column_definition',
                  HINT = 'Only a plain, bigserial or identity column can take snowflake ids.';
    END IF;
    IF NOT EXISTS (
        SELECT 1 FROM pg_index
        WHERE indrelid = tbl AND indisunique AND indisvalid AND indnkeyatts = 1
          AND indkey[0] = att.attnum AND indpred IS NULL AND indexprs IS NULL
    ) THEN
        RAISE EXCEPTION 'column % of table % is not a key', quote_ident(col), tbl
            USING ERRCODE = 'invalid_table_definition',
                  DETAIL = 'Nothing would stop a duplicate id from being stored.',
                  HINT = format('Make it the primary key (ALTER TABLE %s ADD PRIMARY KEY (%I);) or give it a unique constraint of its own.', tbl, col);
    END IF;

    new_default := CASE WHEN worker IS NULL THEN 'snowflake_nextval()' ELSE format('snowflake_nextval(%s)', worker) END;
    SELECT pg_get_expr(adbin, adrelid) INTO cur_default FROM pg_attrdef WHERE adrelid = tbl AND adnum = att.attnum;
    IF cur_default LIKE '%snowflake_nextval(%' THEN
        RETURN format('%s.%s already takes snowflake ids (DEFAULT %s); nothing changed', tbl, quote_ident(col), cur_default);
    END IF;

    -- Every id made from now on is at least this; existing values must all be below it.
    floor_id := snowflake_min_id(clock_timestamp());
    EXECUTE format('SELECT max(%I) FROM %s', col, tbl) INTO max_value;
    IF max_value >= floor_id THEN
        RAISE EXCEPTION 'column % of table % holds values up to %, which new snowflake ids could repeat', quote_ident(col), tbl, max_value
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  DETAIL = format('Snowflake ids made from now on start at %s (snowflake_min_id(now())).', floor_id),
                  HINT = 'Only columns whose values are all below that can be switched in place; renumber the rows first, or keep this column on its sequence.';
    END IF;

    owned_seq := pg_get_serial_sequence(tbl::text, col)::regclass;
    IF att.attidentity <> '' THEN
        EXECUTE format('ALTER TABLE %s ALTER COLUMN %I DROP IDENTITY', tbl, col);
        owned_seq := NULL;  -- dropped with the identity
    END IF;
    EXECUTE format('ALTER TABLE %s ALTER COLUMN %I SET DEFAULT %s', tbl, col, new_default);
    IF owned_seq IS NOT NULL THEN
        RAISE NOTICE 'sequence % is no longer used by %.%; drop it when nothing else uses it', owned_seq, tbl, quote_ident(col);
    END IF;
    RETURN format('%s.%s now takes DEFAULT %s; existing rows kept as they were (largest id %s)',
                  tbl, quote_ident(col), new_default, coalesce(max_value::text, 'none'));
END
$adopt$;

COMMENT ON FUNCTION snowflake_adopt(regclass, name, integer) IS
    'Switches a bigint bigserial or identity key column to DEFAULT snowflake_nextval(), keeping existing rows; refuses columns that are not bigint keys or hold values new ids could repeat; safe to run twice.';

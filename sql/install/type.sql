-- The snowflake type (src/ids/text.rs): a shell type, its I/O functions (the input function is
-- that file's snowflake_in, the others are bigint's), the type itself, like bigint, and its
-- casts to and from bigint and the smaller integers, and to timestamptz (its time).

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
-- An id's time, as for a uuidv7: id::timestamptz (explicit only: an id is not a time). The
-- function takes bigint, to which the type is binary-coercible.
CREATE CAST (snowflake AS timestamptz) WITH FUNCTION snowflake_timestamp(bigint);

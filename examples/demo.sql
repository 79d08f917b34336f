-- What scripts/quickstart.sh shows: a table keyed by snowflake ids, decoding, and a time-range
-- query answered by the primary-key index.
\set ON_ERROR_STOP on
SET client_min_messages = warning;
\pset footer off
CREATE EXTENSION IF NOT EXISTS snowflake_ext;

\echo '== the worker id this server puts into its ids (set in postgresql.conf)'
SHOW snowflake.worker_id;

DROP TABLE IF EXISTS demo_orders;
CREATE TABLE demo_orders (
    id       bigint PRIMARY KEY DEFAULT snowflake_nextval(),
    customer text NOT NULL,
    amount   numeric NOT NULL
);
INSERT INTO demo_orders (customer, amount)
SELECT 'customer ' || g, round((random() * 100)::numeric, 2) FROM generate_series(1, 10000) g;

\echo '== the first rows, decoded: creation time, worker, sequence'
SELECT o.id, d.ts, d.worker, d.seq, o.customer
FROM demo_orders o, snowflake_decode(o.id) d
ORDER BY o.id LIMIT 5;

\echo '== rows made in the last minute, found through the primary key'
EXPLAIN (COSTS OFF)
SELECT count(*) FROM demo_orders WHERE id >= snowflake_min_id(now() - interval '1 minute');
SELECT count(*) AS made_in_the_last_minute
FROM demo_orders WHERE id >= snowflake_min_id(now() - interval '1 minute');

\echo '== 5 ids reserved at once, and an id taken apart and put back together'
SELECT * FROM snowflake_nextval_batch(1, 5);
SELECT snowflake_compose(ts, worker, seq) = 1234567890123456789 AS round_trip
FROM snowflake_decode(1234567890123456789);

\echo '== what each worker has done since the server started'
SELECT * FROM snowflake_stats;

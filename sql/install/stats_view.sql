-- The snowflake_stats view over snowflake_stats() (src/stats/mod.rs).

CREATE VIEW snowflake_stats AS SELECT * FROM snowflake_stats();
COMMENT ON VIEW snowflake_stats IS 'Per worker id: ids issued since the server started, the last id, how far the time field runs ahead of the clock, clock steps back and forward jumps seen, time borrowed on overflow, the high-water mark, whether a followed forward jump can be rewound, and rows that arrived by replication carrying this worker id (counted by the replication guard).';

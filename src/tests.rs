//! `#[pg_test]`s: every SQL function and every error, inside a real server (the pgrx test
//! cluster, with the library preloaded and `snowflake.worker_id = 7`, see [`crate::pg_test`]).
//! Concurrency, crashes and clocks are tested from outside, in `tests/`.

#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;

    fn one<T: FromDatum + IntoDatum>(sql: &str) -> T {
        Spi::get_one::<T>(sql).unwrap().unwrap()
    }

    #[pg_test]
    fn nextval_makes_increasing_ids_of_its_worker() {
        let a: i64 = one("SELECT snowflake_nextval(1)");
        let b: i64 = one("SELECT snowflake_nextval(1)");
        assert!(0 < a && a < b);
        assert_eq!(one::<i32>(&format!("SELECT snowflake_worker({b})")), 1);
        let now_ms: i64 = one("SELECT (extract(epoch from clock_timestamp()) * 1000)::bigint");
        let id_ms = (b >> 22) + 1_735_689_600_000;
        assert!(
            (now_ms - id_ms).abs() < 1000,
            "id time {id_ms} far from now {now_ms}"
        );
    }

    #[pg_test]
    fn nextval_without_arguments_uses_the_configured_worker() {
        assert_eq!(
            one::<i32>("SELECT snowflake_worker(snowflake_nextval())"),
            7
        );
        assert_eq!(one::<String>("SHOW snowflake.worker_id"), "7");
    }

    #[pg_test]
    fn batch_returns_consecutive_ids_of_its_worker() {
        let ids: Vec<i64> = Spi::connect(|c| {
            c.select("SELECT * FROM snowflake_nextval_batch(2, 5000)", None, &[])
                .unwrap()
                .map(|row| row.get::<i64>(1).unwrap().unwrap())
                .collect()
        });
        assert_eq!(ids.len(), 5000);
        for pair in ids.windows(2) {
            assert!(pair[0] < pair[1]);
            assert_eq!(pair[1] >> 12 & 1023, 2);
        }
        let next: i64 = one("SELECT snowflake_nextval(2)");
        assert!(next > *ids.last().unwrap());
    }

    #[pg_test]
    fn compose_and_decode_are_inverse() {
        // 1 ms after the epoch, worker 1, sequence 1.
        let id: i64 = one("SELECT snowflake_compose('2025-01-01 00:00:00.001+00', 1, 1)");
        assert_eq!(id, (1 << 22) | (1 << 12) | 1);
        assert_eq!(
            one::<i64>(
                "SELECT snowflake_compose(ts, worker, seq) FROM snowflake_decode(123456789012345)"
            ),
            123456789012345
        );
        assert_eq!(one::<i32>("SELECT (snowflake_decode(4198401)).worker"), 1);
        assert_eq!(one::<i32>("SELECT seq FROM snowflake_decode(4198401)"), 1);
        assert!(one::<bool>(
            "SELECT ts = '2025-01-01 00:00:00.001+00' FROM snowflake_decode(4198401)"
        ));
        assert!(one::<bool>(
            "SELECT snowflake_timestamp(4198401) = '2025-01-01 00:00:00.001+00'"
        ));
        assert_eq!(one::<i32>("SELECT snowflake_worker(4198401)"), 1);
        assert_eq!(one::<i32>("SELECT snowflake_sequence(4198401)"), 1);
        // Sub-millisecond precision is dropped, not rounded up.
        assert_eq!(
            one::<i64>("SELECT snowflake_compose('2025-01-01 00:00:00.001999+00', 0, 0)"),
            1 << 22
        );
        // The largest id decodes to the layout's last millisecond.
        assert!(one::<bool>(
            "SELECT snowflake_timestamp(9223372036854775807) = '2094-09-07 15:47:35.551+00'"
        ));
        assert_eq!(one::<i64>("SELECT count(*) FROM snowflake_decode(NULL)"), 0);
    }

    #[pg_test]
    fn min_and_max_id_bracket_a_millisecond() {
        let min: i64 = one("SELECT snowflake_min_id('2026-11-01 00:00+00')");
        let max: i64 = one("SELECT snowflake_max_id('2026-11-01 00:00+00')");
        assert_eq!(
            min,
            one::<i64>("SELECT snowflake_compose('2026-11-01 00:00+00', 0, 0)")
        );
        assert_eq!(
            max,
            one::<i64>("SELECT snowflake_compose('2026-11-01 00:00+00', 1023, 4095)")
        );
        assert_eq!(
            max + 1,
            one::<i64>("SELECT snowflake_min_id('2026-11-01 00:00:00.001+00')")
        );
        assert_eq!(
            one::<i64>("SELECT snowflake_min_id('2025-01-01 00:00+00')"),
            0
        );
    }

    #[pg_test]
    fn stats_show_each_worker_that_issued_ids() {
        Spi::run("SELECT snowflake_nextval(9) FROM generate_series(1, 10)").unwrap();
        let last: i64 = one("SELECT snowflake_nextval(9)");
        assert_eq!(
            one::<i64>("SELECT issued FROM snowflake_stats WHERE worker = 9"),
            11
        );
        assert_eq!(
            one::<i64>("SELECT last_id FROM snowflake_stats WHERE worker = 9"),
            last
        );
        assert_eq!(
            one::<i64>("SELECT count(*) FROM snowflake_stats WHERE worker = 1000"),
            0
        );
        assert_eq!(
            one::<i64>("SELECT clock_steps_back FROM snowflake_stats() WHERE worker = 9"),
            0
        );
    }

    #[pg_test]
    fn volatility_and_parallel_safety_are_declared() {
        let declared: String = one(
            "SELECT string_agg(proname || '/' || pronargs || ':' || provolatile::text || proparallel::text || proisstrict::text,
                               ' ' ORDER BY proname, pronargs)
             FROM pg_proc WHERE proname LIKE 'snowflake\\_%'",
        );
        assert_eq!(
            declared,
            "snowflake_adopt/3:vufalse snowflake_column_max/2:vutrue snowflake_compose/3:istrue \
             snowflake_compose/4:istrue snowflake_decode/1:istrue snowflake_decode/2:istrue \
             snowflake_from_text/2:istrue snowflake_guard/3:vufalse snowflake_guard_row/0:vufalse \
             snowflake_guard_subscription/2:vufalse snowflake_id_columns/1:sstrue snowflake_in/1:istrue \
             snowflake_lastval/0:vrtrue snowflake_lower_bound/1:istrue snowflake_max_id/1:istrue \
             snowflake_min_id/1:istrue snowflake_nextval/0:vstrue snowflake_nextval/1:vsfalse \
             snowflake_nextval_at/1:vutrue snowflake_nextval_at_batch/1:vutrue snowflake_nextval_batch/1:vsfalse \
             snowflake_nextval_batch/2:vsfalse \
             snowflake_out/1:istrue snowflake_partition_bounds/2:istrue snowflake_recv/1:istrue \
             snowflake_restore_mark/1:vufalse snowflake_restore_mark/1:vufalse snowflake_restore_mark/2:vufalse \
             snowflake_rewind/1:vufalse snowflake_send/1:istrue snowflake_sequence/1:istrue \
             snowflake_stats/0:vstrue snowflake_status/0:vstrue snowflake_timestamp/1:istrue \
             snowflake_to_text/2:istrue snowflake_unguard/1:vufalse snowflake_upper_bound/1:istrue \
             snowflake_worker/1:istrue snowflake_worker_id/0:sstrue"
        );
    }

    #[pg_test]
    fn lastval_is_the_last_id_this_session_minted() {
        let id: i64 = one("SELECT snowflake_nextval(4)");
        assert_eq!(one::<i64>("SELECT snowflake_lastval()"), id);
        let last: i64 = one("SELECT max(x) FROM snowflake_nextval_batch(5, 10) x");
        assert_eq!(one::<i64>("SELECT snowflake_lastval()"), last);
        let configured: i64 = one("SELECT snowflake_nextval()");
        assert_eq!(one::<i64>("SELECT snowflake_lastval()"), configured);
    }

    #[pg_test]
    fn a_batch_of_the_configured_worker() {
        let ids: Vec<i64> = Spi::connect(|c| {
            c.select("SELECT * FROM snowflake_nextval_batch(100)", None, &[])
                .unwrap()
                .map(|row| row.get::<i64>(1).unwrap().unwrap())
                .collect()
        });
        assert_eq!(ids.len(), 100);
        assert!(ids
            .windows(2)
            .all(|w| w[0] < w[1] && w[1] >> 12 & 1023 == 7));
    }

    #[pg_test]
    fn the_mark_writer_is_ready_and_persists_marks_above_every_id() {
        assert_eq!(
            one::<String>("SELECT state FROM snowflake_status()"),
            "ready"
        );
        let id: i64 = one("SELECT snowflake_nextval(11)");
        let mark: i64 = one("SELECT persisted_mark FROM snowflake_stats WHERE worker = 11");
        assert!(mark > id, "mark {mark} does not cover {id}");
    }

    #[pg_test]
    fn a_restored_mark_holds_every_new_id_above_it() {
        let far: i64 = one("SELECT snowflake_compose(now() + interval '1 hour', 0, 0)");
        let next: i64 = one(&format!("SELECT snowflake_restore_mark(12, {far})"));
        assert!(next > far);
        let id: i64 = one("SELECT snowflake_nextval(12)");
        assert!(id > far, "{id} is not above the restored {far}");
    }

    #[pg_test(
        error = "snowflake worker 13 has followed no forward clock jump since it was last rewound"
    )]
    fn rewind_without_a_jump() {
        Spi::run("SELECT snowflake_nextval(13)").unwrap();
        Spi::run("SELECT * FROM snowflake_rewind(13)").unwrap();
    }

    #[pg_test(error = "snowflake worker id 1024 is out of range")]
    fn worker_out_of_range() {
        Spi::run("SELECT snowflake_nextval(1024)").unwrap();
    }

    #[pg_test(error = "snowflake worker id must not be NULL")]
    fn worker_null() {
        Spi::run("SELECT snowflake_nextval(NULL)").unwrap();
    }

    #[pg_test(error = "cannot take 0 snowflake ids in one call")]
    fn batch_of_zero() {
        Spi::run("SELECT snowflake_nextval_batch(1, 0)").unwrap();
    }

    #[pg_test(error = "cannot take 1000001 snowflake ids in one call")]
    fn batch_too_large() {
        Spi::run("SELECT snowflake_nextval_batch(1, 1000001)").unwrap();
    }

    #[pg_test(error = "n must not be NULL")]
    fn batch_of_null() {
        Spi::run("SELECT snowflake_nextval_batch(1, NULL)").unwrap();
    }

    #[pg_test(error = "-3 is not a snowflake id: snowflake ids are never negative")]
    fn decode_negative() {
        Spi::run("SELECT snowflake_decode(-3)").unwrap();
    }

    #[pg_test(error = "snowflake sequence 4096 is out of range")]
    fn compose_sequence_out_of_range() {
        Spi::run("SELECT snowflake_compose(now(), 1, 4096)").unwrap();
    }

    #[pg_test(
        error = "timestamp 2024-12-31 23:59:59.999+00 is before the snowflake epoch 2025-01-01 00:00:00+00"
    )]
    fn min_id_before_epoch() {
        Spi::run("SET TimeZone = 'UTC'; SELECT snowflake_min_id('2024-12-31 23:59:59.999+00')")
            .unwrap();
    }

    #[pg_test(
        error = "timestamp infinity is after the end of the snowflake id layout, 2094-09-07 15:47:35.551+00"
    )]
    fn max_id_at_infinity() {
        Spi::run("SELECT snowflake_max_id('infinity')").unwrap();
    }

    #[pg_test(error = "snowflake.worker_id cannot be changed in a session")]
    fn a_session_cannot_set_the_worker_id() {
        Spi::run("SET snowflake.worker_id = 3").unwrap();
    }

    #[pg_test(error = "snowflake.past_worker_id is not set")]
    fn nextval_at_without_a_past_worker_id() {
        Spi::run("SELECT snowflake_nextval_at(timestamptz '2025-06-01 00:00+00')").unwrap();
    }

    #[pg_test(error = "snowflake.past_worker_id cannot be changed in a session")]
    fn a_session_cannot_set_the_past_worker_id() {
        Spi::run("SET snowflake.past_worker_id = 1000").unwrap();
    }
}

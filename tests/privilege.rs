//! Least privilege, tried as an ordinary role would: a role with LOGIN and nothing else mints
//! only with the server's worker, cannot push it further ahead of the clock than
//! `snowflake.max_ahead` however hard it tries, and cannot get its code run by a superuser who
//! adopts its table. A far-future clock glitch is held and logged; a longer one is undone with
//! `snowflake_rewind`. Real server, real roles, clocks from `faketime`.

mod common;

use common::*;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering::Relaxed};
use std::time::{Duration, Instant};

const WORKER: i32 = 3;

/// A server on `faketime` with worker 3, and a role `app` with LOGIN and nothing else that owns
/// a table `orders` keyed by `snowflake_nextval()`.
fn server(name: &str) -> Cluster {
    let mut cluster = Cluster::new(name, &["snowflake.worker_id=3"]);
    cluster.use_faketime();
    cluster.start();
    cluster
        .connect()
        .batch_execute(
            "CREATE EXTENSION snowflake_ext;
             CREATE ROLE app LOGIN;
             CREATE TABLE orders (id bigint PRIMARY KEY DEFAULT snowflake_nextval(), v int);
             ALTER TABLE orders OWNER TO app;",
        )
        .unwrap();
    cluster
}

fn connect_as(cluster: &Cluster, role: &str) -> postgres::Client {
    let conninfo = cluster
        .conninfo("postgres")
        .replace("user=postgres", &format!("user={role}"));
    postgres::Client::connect(&conninfo, postgres::NoTls).unwrap()
}

fn ahead_ms(c: &mut postgres::Client) -> i64 {
    c.query_one(
        "SELECT coalesce((SELECT ahead_ms FROM snowflake_stats WHERE worker = $1), 0)",
        &[&WORKER],
    )
    .unwrap()
    .get(0)
}

#[test]
fn an_ordinary_role_mints_only_with_the_configured_worker() {
    let cluster = server("priv-roles");
    let mut app = connect_as(&cluster, "app");
    for sql in [
        "SELECT snowflake_nextval(3)",
        "SELECT snowflake_nextval(900)",
        "SELECT * FROM snowflake_nextval_batch(3, 10)",
        "SELECT * FROM snowflake_stats",
        "SELECT * FROM snowflake_stats()",
        "SELECT * FROM snowflake_status()",
        "SELECT snowflake_restore_mark(1)",
        "SELECT snowflake_restore_mark(3, 1)",
        "SELECT snowflake_restore_mark(ARRAY['orders']::regclass[])",
        "SELECT * FROM snowflake_rewind(3)",
    ] {
        let e = error_of(&mut app, sql);
        assert_eq!(e.code, "42501", "{sql}: {e:?}");
    }
    app.batch_execute("INSERT INTO orders (v) SELECT g FROM generate_series(1, 100) g")
        .unwrap();
    let id: i64 = app.scalar("SELECT snowflake_nextval()");
    let batch = ids(&mut app, "SELECT * FROM snowflake_nextval_batch(10)");
    assert_eq!(batch.len(), 10);
    let last: i64 = app.scalar("SELECT snowflake_lastval()");
    assert_eq!(last, *batch.last().unwrap());
    let worker: i32 = app
        .query_one("SELECT snowflake_worker($1)", &[&id])
        .unwrap()
        .get(0);
    assert_eq!(worker, WORKER);
    // A monitoring role may read the statistics; a grant hands out the explicit worker.
    cluster
        .connect()
        .batch_execute(
            "CREATE ROLE watcher LOGIN IN ROLE pg_monitor;
             CREATE ROLE loader LOGIN;
             GRANT EXECUTE ON FUNCTION snowflake_nextval(integer) TO loader;",
        )
        .unwrap();
    let mut watcher = connect_as(&cluster, "watcher");
    watcher.query("SELECT * FROM snowflake_stats", &[]).unwrap();
    watcher
        .query("SELECT * FROM snowflake_status()", &[])
        .unwrap();
    let mut loader = connect_as(&cluster, "loader");
    loader
        .query_one("SELECT snowflake_nextval(12)", &[])
        .unwrap();
    // Even a grant does not hand out the marks.
    cluster
        .connect()
        .batch_execute("GRANT EXECUTE ON FUNCTION snowflake_restore_mark(bigint) TO loader")
        .unwrap();
    assert_eq!(
        error_of(&mut loader, "SELECT snowflake_restore_mark(1)").code,
        "42501"
    );
}

#[test]
fn demand_never_pushes_a_worker_past_max_ahead_and_a_clock_step_back_does_not_stall_it() {
    let cluster = server("priv-ahead");
    let mut admin = cluster.connect();
    four_clients_taking_all_they_can_never_push_the_worker_past_max_ahead(&cluster, &mut admin);
    // `_app`, the session that inserted, stays open to the end.
    let _app = after_a_clock_step_back_of_an_hour_inserts_go_on_without_waiting(&cluster);
    a_batch_larger_than_max_ahead_can_hold_is_an_error_not_a_wait(&cluster);
}

/// Four clients take a million ids a call, the cheapest way there is (in the select list:
/// taken in one step, one row produced), until they have pushed the worker over a second ahead
/// of the clock, then for PRESSED calls more against the bound. Counted in calls, not seconds:
/// the worker gets there however slow the machine. It never runs further ahead than
/// `snowflake.max_ahead` (2 s), as `admin` sees.
fn four_clients_taking_all_they_can_never_push_the_worker_past_max_ahead(
    cluster: &Cluster,
    admin: &mut postgres::Client,
) {
    const PRESSED: u32 = 12;
    let stop = AtomicBool::new(false);
    let calls = AtomicU32::new(0);
    let mut worst = 0;
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                let mut c = connect_as(cluster, "app");
                while !stop.load(Relaxed) {
                    c.query_one("SELECT snowflake_nextval_batch(1000000) LIMIT 1", &[])
                        .unwrap();
                    calls.fetch_add(1, Relaxed);
                }
            });
        }
        wait_until(
            "the clients to push the worker over a second ahead",
            PATIENCE,
            || {
                worst = worst.max(ahead_ms(admin));
                worst > 1000
            },
        );
        let target = calls.load(Relaxed) + PRESSED;
        wait_until(
            &format!("{PRESSED} more calls against the bound"),
            PATIENCE,
            || {
                worst = worst.max(ahead_ms(admin));
                calls.load(Relaxed) >= target
            },
        );
        stop.store(true, Relaxed);
    });
    worst = worst.max(ahead_ms(admin));
    assert!(
        worst <= 2000 + 5,
        "the worker ran {worst} ms ahead, past snowflake.max_ahead = 2 s"
    );
}

/// The clock steps back an hour: inserts go on at once, never waiting for the clock (which
/// would take an hour) or for anything else. Returns the session of `app` that inserted.
fn after_a_clock_step_back_of_an_hour_inserts_go_on_without_waiting(
    cluster: &Cluster,
) -> postgres::Client {
    cluster.set_clock_offset(-3600);
    let mut app = connect_as(cluster, "app");
    let pid: i32 = app.scalar("SELECT pg_backend_pid()");
    let (all, waits) = extension_waits(cluster, pid, || {
        let mut all = Vec::new();
        for i in 0..300 {
            let id: i64 = app
                .query_one("INSERT INTO orders (v) VALUES ($1) RETURNING id", &[&i])
                .unwrap()
                .get(0);
            all.push(id);
            std::thread::sleep(Duration::from_millis(5));
        }
        all
    });
    assert_strictly_increasing(&all);
    assert_eq!(
        waits, 0,
        "inserts were seen waiting after the clock stepped back"
    );
    app
}

/// A batch larger than the bound can ever hold is an error, not a wait.
fn a_batch_larger_than_max_ahead_can_hold_is_an_error_not_a_wait(cluster: &Cluster) {
    cluster.set_and_reload("snowflake.max_ahead", "100ms");
    let mut app = connect_as(cluster, "app");
    let e = error_of(
        &mut app,
        "SELECT count(*) FROM snowflake_nextval_batch(1000000)",
    );
    assert_eq!(e.code, "54000", "{e:?}");
    assert!(e
        .detail
        .unwrap_or_default()
        .contains("snowflake.max_ahead = 100 ms"));
    assert!(e.hint.unwrap_or_default().contains("Take fewer ids"));
}

/// The wall-clock time (Unix ms) each id says it was made at.
fn times(ids: &[i64]) -> Vec<i64> {
    ids.iter().map(|&id| unix_ms_of(id)).collect()
}

/// Inserts a row every 50 ms for `secs` seconds while `during` runs; returns the ids.
fn insert_for(cluster: &Cluster, ms: u64) -> Vec<i64> {
    let mut app = connect_as(cluster, "app");
    let deadline = Instant::now() + Duration::from_millis(ms);
    let mut out = Vec::new();
    while Instant::now() < deadline {
        out.push(app.scalar("INSERT INTO orders (v) VALUES (0) RETURNING id"));
        std::thread::sleep(Duration::from_millis(50));
    }
    out
}

const SIXTY_SEVEN_YEARS_S: i64 = 67 * 365 * 86_400;

#[test]
fn a_far_future_clock_glitch_is_held_and_a_longer_one_is_rewound() {
    let cluster = server("priv-glitch");
    let all = a_glitch_of_two_seconds_67_years_ahead_is_held_and_logged(&cluster);
    // `_app`, the session that minted them, stays open to the end.
    let (glitch, _app) = a_jump_of_67_years_is_held_for_10_s_then_followed(&cluster);
    let stuck =
        once_followed_the_ids_stay_67_years_ahead_when_the_clock_is_set_right(&cluster, &glitch);
    let mut admin = cluster.connect();
    let rewound = the_operator_rewinds_the_worker(&mut admin);
    after_the_rewind_ids_are_of_now_and_outside_the_reserved_range(
        &cluster, &mut admin, rewound, all, &glitch, &stuck,
    );
    the_reservation_survives_a_restart(&cluster, rewound);
}

/// Two seconds at +67 years, then back: ids never leave the right time, and the jump and the
/// return are logged. Returns the ids made before, during and after.
fn a_glitch_of_two_seconds_67_years_ahead_is_held_and_logged(cluster: &Cluster) -> Vec<i64> {
    let before = insert_for(cluster, 300);
    cluster.set_clock_offset(SIXTY_SEVEN_YEARS_S);
    let during = insert_for(cluster, 2000);
    cluster.set_clock_offset(0);
    let after = insert_for(cluster, 300);
    let now = unix_ms_now();
    for t in times(&during).iter().chain(&times(&after)) {
        assert!(
            (now - t).abs() < 10_000,
            "an id carries {t}, far from {now}"
        );
    }
    let all: Vec<i64> = [before, during, after].concat();
    assert_strictly_increasing(&all);
    let log = cluster.log();
    assert!(
        log.contains("jumped forward by") && log.contains("not followed yet"),
        "{log}"
    );
    assert!(log.contains("came back after jumping forward"), "{log}");
    all
}

/// +67 years until the worker follows: a jump is held for 10 s of real time, then taken as
/// real. Inserts go on every 25 ms until one carries the far time; those made within the first
/// 9.5 s (counted from before the jump) keep the right time. Returns those ids and the session
/// of `app` that made them.
fn a_jump_of_67_years_is_held_for_10_s_then_followed(
    cluster: &Cluster,
) -> (Vec<i64>, postgres::Client) {
    let jumped = Instant::now();
    cluster.set_clock_offset(SIXTY_SEVEN_YEARS_S);
    let mut app = connect_as(cluster, "app");
    let mut glitch = Vec::new();
    wait_until("the worker to follow the jump", PATIENCE, || {
        let id: i64 = app.scalar("INSERT INTO orders (v) VALUES (0) RETURNING id");
        glitch.push(id);
        let held = (unix_ms_of(id) - unix_ms_now()).abs() < 10_000;
        assert!(
            held || jumped.elapsed() >= Duration::from_millis(9_500),
            "the jump was followed after {:?}, not held for 10 s",
            jumped.elapsed()
        );
        !held
    });
    (glitch, app)
}

/// The clock set right again, the worker, having followed the jump (`glitch`), says so in the
/// log and goes on minting 67 years ahead. Returns the ids it made so.
fn once_followed_the_ids_stay_67_years_ahead_when_the_clock_is_set_right(
    cluster: &Cluster,
    glitch: &[i64],
) -> Vec<i64> {
    cluster.set_clock_offset(0);
    assert!(
        times(glitch)
            .iter()
            .any(|t| t - unix_ms_now() > 60 * 86_400_000),
        "the worker never followed the jump"
    );
    assert!(cluster
        .log()
        .contains("follows the system clock, which jumped forward"));
    let stuck = insert_for(cluster, 200);
    assert!(times(&stuck)
        .iter()
        .all(|t| t - unix_ms_now() > 60 * 86_400_000));
    stuck
}

/// The operator action: snowflake_rewind, once the clock is right. Returns the next id and
/// the range it reserved.
fn the_operator_rewinds_the_worker(admin: &mut postgres::Client) -> (i64, i64, i64) {
    let row = admin
        .query_one("SELECT * FROM snowflake_rewind($1)", &[&WORKER])
        .unwrap();
    (row.get(0), row.get(1), row.get(2))
}

/// After the rewind, ids carry the right time again and fall between every earlier id below
/// the reserved range and that range, which holds every id made ahead of the clock (`glitch`,
/// `stuck`); the worker is no longer rewindable.
fn after_the_rewind_ids_are_of_now_and_outside_the_reserved_range(
    cluster: &Cluster,
    admin: &mut postgres::Client,
    (next, reserved_from, reserved_to): (i64, i64, i64),
    mut all: Vec<i64>,
    glitch: &[i64],
    stuck: &[i64],
) {
    let fresh = insert_for(cluster, 500);
    let now = unix_ms_now();
    for t in times(&fresh) {
        assert!(
            (now - t).abs() < 10_000,
            "after the rewind an id carries {t}, far from {now}"
        );
    }
    assert!(fresh[0] >= next);
    all.extend(glitch);
    all.extend(stuck);
    let earlier_max = *all.iter().filter(|&&id| id < reserved_from).max().unwrap();
    for id in &fresh {
        assert!(
            *id > earlier_max && *id < reserved_from,
            "{id} outside the free range"
        );
        assert!(!(reserved_from..=reserved_to).contains(id));
    }
    assert!(glitch
        .iter()
        .chain(stuck)
        .filter(|&&id| id > earlier_max)
        .all(|id| (reserved_from..=reserved_to).contains(id)));
    let rewindable: bool = admin
        .query_one(
            "SELECT rewindable FROM snowflake_stats WHERE worker = $1",
            &[&WORKER],
        )
        .unwrap()
        .get(0);
    assert!(!rewindable);
}

/// The reservation the rewind made survives a restart.
fn the_reservation_survives_a_restart(
    cluster: &Cluster,
    (_, reserved_from, reserved_to): (i64, i64, i64),
) {
    cluster.stop();
    cluster.start();
    let persisted: (i64, i64) = {
        let row = cluster
            .connect()
            .query_one(
                "SELECT reserved_from, reserved_to FROM snowflake_ext_state.marks WHERE worker = $1",
                &[&WORKER],
            )
            .unwrap();
        (row.get(0), row.get(1))
    };
    assert_eq!(persisted, (reserved_from, reserved_to));
}

/// What an attacker with CREATE on `public` plants: functions and an operator that, run by a
/// superuser, make `app` a superuser and leave a trace.
const ATTACK: &str = "
CREATE TABLE public.pwned (who text);
GRANT INSERT ON public.pwned TO PUBLIC;
CREATE FUNCTION public.pwn() RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO public.pwned VALUES (current_user);
    ALTER ROLE app SUPERUSER;
END $$;
CREATE FUNCTION public.pwn_eq(oid, regclass) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN PERFORM public.pwn(); RETURN $1 OPERATOR(pg_catalog.=) $2::oid; END $$;
CREATE OPERATOR public.= (LEFTARG = oid, RIGHTARG = regclass, FUNCTION = public.pwn_eq);
CREATE FUNCTION public.quote_ident(name) RETURNS text LANGUAGE plpgsql AS $$
BEGIN PERFORM public.pwn(); RETURN pg_catalog.quote_ident($1::text); END $$;
CREATE FUNCTION public.pg_get_serial_sequence(text, name) RETURNS text LANGUAGE plpgsql AS $$
BEGIN PERFORM public.pwn(); RETURN NULL; END $$;
CREATE FUNCTION public.format(text, regclass) RETURNS text LANGUAGE plpgsql AS $$
BEGIN PERFORM public.pwn(); RETURN pg_catalog.format($1, $2::text); END $$;
CREATE FUNCTION public.clock_timestamp(integer DEFAULT 0) RETURNS timestamptz LANGUAGE plpgsql AS $$
BEGIN PERFORM public.pwn(); RETURN pg_catalog.clock_timestamp(); END $$;
-- The table's own code: a partial index whose predicate the planner evaluates. It only reports
-- whom it runs as (an immutable function may not write).
CREATE FUNCTION public.pwn_pred(integer) RETURNS boolean LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN RAISE LOG 'pwn_pred runs as % (superuser: %)', current_user, current_setting('is_superuser');
RETURN true; END $$;
CREATE TABLE public.loot (id bigserial PRIMARY KEY, v int);
INSERT INTO public.loot (v) SELECT g FROM generate_series(1, 1000) g;
CREATE INDEX loot_v ON public.loot (v) WHERE public.pwn_pred(1);
";

#[test]
fn planted_operators_functions_and_index_code_never_run_as_the_superuser_who_adopts() {
    let cluster = server("priv-adopt");
    let mut admin = cluster.connect();
    // Databases created before PostgreSQL 15 let every role create objects in public.
    admin
        .batch_execute("GRANT CREATE ON SCHEMA public TO app")
        .unwrap();
    connect_as(&cluster, "app").batch_execute(ATTACK).unwrap();

    // A superuser adopts app's table, with public first on the search path as is the default.
    let out: String = admin.scalar("SELECT snowflake_adopt('public.loot', 'id')");
    assert!(out.contains("now takes DEFAULT"), "{out}");
    admin
        .query_one(
            "SELECT snowflake_restore_mark(ARRAY['public.loot']::regclass[])",
            &[],
        )
        .unwrap();
    let superuser: bool = admin.scalar("SELECT rolsuper FROM pg_roles WHERE rolname = 'app'");
    assert!(!superuser, "app made itself a superuser");
    let traces: i64 = admin.scalar("SELECT count(*) FROM public.pwned");
    assert_eq!(traces, 0, "planted code ran");
    let log = cluster.log();
    assert!(
        !log.contains("pwn_pred runs as postgres"),
        "the index predicate ran as the superuser:\n{log}"
    );
    assert!(
        log.contains("pwn_pred runs as app (superuser: off)"),
        "{log}"
    );
    // The adopted default works for app too.
    connect_as(&cluster, "app")
        .batch_execute("INSERT INTO public.loot (v) VALUES (1)")
        .unwrap();
}

#[test]
fn adopt_checks_its_arguments_before_locking_and_refuses_a_second_worker() {
    let cluster = server("priv-adopt-args");
    let mut admin = cluster.connect();
    admin
        .batch_execute(
            "CREATE TABLE mine (id bigserial PRIMARY KEY);
             CREATE ROLE other LOGIN;",
        )
        .unwrap();
    let e = error_of(&mut admin, "SELECT snowflake_adopt(0::regclass, 'id')");
    assert_eq!(e.code, "42P01", "{e:?}");
    assert!(e.hint.unwrap_or_default().contains("by name"));
    // Not the owner: refused before the table is locked, so a held lock does not block it.
    let mut holder = cluster.connect();
    holder
        .batch_execute("BEGIN; LOCK mine IN ACCESS EXCLUSIVE MODE")
        .unwrap();
    let mut other = connect_as(&cluster, "other");
    other.batch_execute("SET lock_timeout = '2s'").unwrap();
    let e = error_of(&mut other, "SELECT snowflake_adopt('mine', 'id')");
    assert_eq!(e.code, "42501", "{e:?}");
    assert!(e.message.contains("must be the owner"), "{e:?}");
    admin.batch_execute("SET lock_timeout = '2s'").unwrap();
    let e = error_of(&mut admin, "SELECT snowflake_adopt('mine', 'id', 5000)");
    assert_eq!(e.code, "22003", "{e:?}");
    let e = error_of(&mut admin, "SELECT snowflake_adopt('mine', 'nope')");
    assert_eq!(e.code, "42703", "{e:?}");
    holder.batch_execute("COMMIT").unwrap();
    admin
        .query_one("SELECT snowflake_adopt('mine', 'id', 5)", &[])
        .unwrap();
    let again: String = admin.scalar("SELECT snowflake_adopt('mine', 'id', 5)");
    assert!(again.contains("nothing changed"), "{again}");
    let e = error_of(&mut admin, "SELECT snowflake_adopt('mine', 'id', 6)");
    assert_eq!(e.code, "55000", "{e:?}");
    assert!(e.hint.unwrap_or_default().contains("SET DEFAULT"), "hint");
}

//! Worker ids leased from a registry (`snowflake.worker_id = 'auto'`), on real servers: the
//! registry a separate PostgreSQL server without the extension. Sixteen servers at once get
//! sixteen worker ids and, killed with `kill -9`, get them back at once; a clone started
//! beside its original gets another; a registry gone for longer than the TTL stops minting
//! before the lease ends, and minting resumes when it is back; a lease granted before the
//! server's marks are read records no cap, and its ids start at the clock; an expired worker
//! id goes to a new server, an hour behind, only above every id of its old holder; a standby promoted
//! after its primary died mints with another worker id, and the old primary brought back
//! beside it mints with one of its own; no free worker id, bad settings and a registry role without rights
//! are errors that say so.

mod common;

use common::*;
use postgres::Client;
use std::collections::HashSet;

/// `n` ids from the server's configured (leased) worker.
fn mint(cluster: &Cluster, n: i32) -> Vec<i64> {
    let mut c = cluster.connect();
    ids(
        &mut c,
        &format!("SELECT snowflake_nextval() FROM generate_series(1, {n})"),
    )
}

#[test]
fn sixteen_servers_lease_sixteen_worker_ids_and_get_them_back_after_a_crash() {
    let registry = registry("lease-registry-16");
    // A TTL longer than any wait of this test: a server that waited for its old lease to
    // expire before minting again would make it fail.
    let servers: Vec<Cluster> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..16)
            .map(|i| {
                let registry = &registry;
                s.spawn(move || {
                    leasing_server(
                        &format!("lease-16-{i}"),
                        registry,
                        &["snowflake.lease_ttl=10min"],
                    )
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let workers: Vec<i32> = servers.iter().map(leased).collect();
    let distinct: HashSet<i32> = workers.iter().copied().collect();
    assert_eq!(distinct.len(), 16, "{workers:?}");
    let mut all = Vec::new();
    let mut before = Vec::new();
    for (server, &worker) in servers.iter().zip(&workers) {
        let ids = mint(server, 2000);
        assert!(ids.iter().all(|&id| worker_of(id) == worker));
        before.push(*ids.iter().max().unwrap());
        all.extend(ids);
    }
    // Each killed and started again: the same worker id, at once (the lease is far from
    // expiring), and ids above its own.
    for (i, server) in servers.iter().enumerate() {
        server.kill_postmaster();
        server.start();
        assert_eq!(
            leased(server),
            workers[i],
            "server {i} got another worker id"
        );
        let ids = mint(server, 2000);
        assert!(ids
            .iter()
            .all(|&id| id > before[i] && worker_of(id) == workers[i]));
        all.extend(ids);
    }
    // A clean stop gives the lease back at once, with the end of its ids; started again, the
    // server takes its own worker id back and continues above them.
    let first = &servers[0];
    let last_id = *all
        .iter()
        .filter(|&&id| worker_of(id) == workers[0])
        .max()
        .unwrap();
    first.stop();
    let released = registry
        .connect()
        .query_one(
            "SELECT state, last_mark FROM snowflake_registry.lease_list WHERE worker = $1",
            &[&workers[0]],
        )
        .unwrap();
    assert_eq!(released.get::<_, String>(0), "released");
    assert!(released.get::<_, i64>(1) > last_id);
    first.start();
    assert_eq!(leased(first), workers[0]);
    let ids = mint(first, 2000);
    assert!(ids
        .iter()
        .all(|&id| id > last_id && worker_of(id) == workers[0]));
    all.extend(ids);
    // A stray SIGTERM to the lease keeper: it gives the lease back and is started again by
    // the postmaster, which leases the same worker id again.
    // (A background worker without a database is not in pg_stat_activity: by its title.)
    let postmaster = first.postmaster_pid().to_string();
    let keeper_pid = || -> Option<String> {
        let out = std::process::Command::new("pgrep")
            .args(["-P", &postmaster, "-f", "snowflake_ext lease keeper"])
            .output()
            .unwrap();
        let pid = String::from_utf8_lossy(&out.stdout).trim().to_string();
        (!pid.is_empty()).then_some(pid)
    };
    let old_keeper = keeper_pid().expect("a lease keeper");
    let last_id = *all
        .iter()
        .filter(|&&id| worker_of(id) == workers[0])
        .max()
        .unwrap();
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &old_keeper])
        .status()
        .unwrap();
    assert!(killed.success());
    wait_until("a new lease keeper", PATIENCE, || {
        keeper_pid().is_some_and(|pid| pid != old_keeper)
    });
    assert_eq!(leased(first), workers[0]);
    let ids = mint(first, 2000);
    assert!(ids
        .iter()
        .all(|&id| id > last_id && worker_of(id) == workers[0]));
    all.extend(ids);
    assert_no_duplicates(&all);
    // The registry lists every lease: holder, times, last mark.
    let rows: i64 = registry.connect().scalar(
        "SELECT count(*) FROM snowflake_registry.lease_list
              WHERE state = 'held' AND host IS NOT NULL AND port IS NOT NULL
                AND system_identifier IS NOT NULL AND last_mark IS NOT NULL",
    );
    assert_eq!(rows, 16);
}

#[test]
fn a_clone_started_beside_its_original_gets_another_worker_id() {
    let registry = registry("lease-registry-clone");
    let original = leasing_server("lease-original", &registry, &["snowflake.lease_ttl=10min"]);
    let worker = leased(&original);
    let mut all = mint(&original, 5000);
    // A base backup of it, started as a primary (not a standby) while it runs.
    let clone = Cluster::standby_of(&original, "lease-clone", &[]);
    std::fs::remove_file(clone.dir.join("standby.signal")).unwrap();
    clone.start();
    let clone_worker = leased(&clone);
    assert_ne!(
        clone_worker, worker,
        "the clone got its original's worker id"
    );
    // Both insert at once.
    let (a, b) = std::thread::scope(|s| {
        let a = s.spawn(|| mint(&original, 20_000));
        let b = s.spawn(|| mint(&clone, 20_000));
        (a.join().unwrap(), b.join().unwrap())
    });
    assert!(a.iter().all(|&id| worker_of(id) == worker));
    assert!(b.iter().all(|&id| worker_of(id) == clone_worker));
    all.extend(a);
    all.extend(b);
    assert_no_duplicates(&all);
}

#[test]
fn a_registry_gone_past_the_ttl_stops_minting_before_the_lease_ends_and_back_resumes() {
    let registry = registry("lease-registry-down");
    let server = leasing_server("lease-down", &registry, &["snowflake.lease_ttl=5s"]);
    let worker = leased(&server);
    let mut c = server.connect();
    registry.stop();
    // Ids flow until the server stops them, on its own clock, before its lease can end.
    let mut last = 0i64;
    let mut last_at = String::new();
    let e = wait_for("minting to stop", PATIENCE, || {
        match c.query_one("SELECT snowflake_nextval(), clock_timestamp()::text", &[]) {
            Ok(row) => {
                last = row.get(0);
                last_at = row.get(1);
                None
            }
            Err(e) => Some(e),
        }
    });
    let e = e.as_db_error().expect("a server error");
    assert_eq!(e.code().code(), "55000", "{e:?}");
    assert!(e.message().contains("holds no worker id"), "{e:?}");
    registry.start();
    // The lease's end, as the registry recorded it at the last renewal (nothing renewed it
    // since): the last id was minted before it (both clocks are this machine's), and it is not
    // above the cap that renewal recorded, above which the next holder starts.
    let (minted_before_the_end, under_the_cap): (bool, bool) = registry
        .connect()
        .query_one(
            "SELECT $1::text::timestamptz < expires_at, $2::bigint <= last_mark
               FROM snowflake_registry.leases WHERE worker = $3",
            &[&last_at, &last, &worker],
        )
        .map(|r| (r.get(0), r.get(1)))
        .unwrap();
    assert!(
        minted_before_the_end,
        "id {last} was minted at {last_at}, after the lease ended"
    );
    assert!(under_the_cap, "id {last} is above the lease's last mark");
    // The registry is back: minting resumes, with the same worker id, above the old ids.
    let resumed = wait_for("minting to resume", PATIENCE, || {
        c.query_one("SELECT snowflake_nextval()", &[])
            .ok()
            .map(|r| r.get::<_, i64>(0))
    });
    assert!(resumed > last);
    assert_eq!(worker_of(resumed), worker);
}

#[test]
fn a_lease_granted_before_the_marks_are_read_records_no_cap_and_its_ids_start_at_the_clock() {
    let registry = registry("lease-registry-slow-marks");
    // A TTL of a minute: a worker started above a cap recorded a minute ahead would show.
    registry
        .connect()
        .batch_execute("SELECT snowflake_registry.set_limits(interval '60 s')")
        .unwrap();
    let server = leasing_server(
        "lease-slow-marks",
        &registry,
        &["snowflake.lease_ttl=60s", "max_prepared_transactions=2"],
    );
    let worker = leased(&server);
    let before = *mint(&server, 1000).iter().max().unwrap();
    // Stopped cleanly (the lease given back with the end of its ids), then started once
    // without the library (plpgsql preloaded in its place), to lock the first table the mark
    // writer reads in a prepared transaction, which the next start keeps.
    server
        .connect()
        .batch_execute("ALTER SYSTEM SET shared_preload_libraries = plpgsql")
        .unwrap();
    server.stop();
    let last_mark = || -> i64 {
        registry.connect().scalar(&format!(
            "SELECT last_mark FROM snowflake_registry.leases WHERE worker = {worker}"
        ))
    };
    let given_back = last_mark();
    server.start();
    let mut c = server.connect();
    c.batch_execute("ALTER SYSTEM RESET shared_preload_libraries")
        .unwrap();
    c.batch_execute(
        "BEGIN;
             LOCK TABLE snowflake_ext_state.meta IN ACCESS EXCLUSIVE MODE;
             PREPARE TRANSACTION 'marks-locked';",
    )
    .unwrap();
    server.stop();
    server.start();
    // The registry grants the worker id at once; the keeper waits for the marks, and records
    // nothing meanwhile.
    let mut c = server.connect();
    wait_until("the keeper to wait for the marks", PATIENCE, || {
        registry_status(&mut c).contains("waiting for the mark writer")
    });
    let held: bool = registry.connect().scalar(&format!(
        "SELECT state = 'held' FROM snowflake_registry.lease_list WHERE worker = {worker}"
    ));
    assert!(held, "the registry did not grant worker id {worker} again");
    assert_eq!(last_mark(), given_back);
    server
        .connect()
        .batch_execute("ROLLBACK PREPARED 'marks-locked'")
        .unwrap();
    assert_eq!(leased(&server), worker);
    let (id, clock_ms): (i64, i64) = server
        .connect()
        .query_one(
            "SELECT snowflake_nextval(), (extract(epoch FROM clock_timestamp()) * 1000)::bigint",
            &[],
        )
        .map(|r| (r.get(0), r.get(1)))
        .unwrap();
    assert!(id > before && worker_of(id) == worker);
    // At most the marks' reach (2 s) ahead of the clock, as after any restart.
    assert!(
        unix_ms_of(id) <= clock_ms + 2000,
        "the first id is {} ms ahead of the clock",
        unix_ms_of(id) - clock_ms
    );
}

#[test]
fn an_expired_worker_id_goes_to_a_new_server_only_above_its_old_holders_ids() {
    expired_worker_id_goes_above_its_old_holders_ids("reuse", &[]);
}

/// Seata's layout (`worker | time | sequence`): a leased worker id changes hands as in the
/// default layout, its new holder's ids above its old holder's.
#[test]
fn an_expired_worker_id_in_seatas_layout_goes_to_a_new_server_only_above_its_old_holders_ids() {
    expired_worker_id_goes_above_its_old_holders_ids("reuse-seata", &["snowflake.layout=seata"]);
}

/// A leasing server (with `layout`) runs a second ahead of its clock on worker id 7, then dies;
/// a new server with its clock behind those ids gets 7 and mints above every one of them.
fn expired_worker_id_goes_above_its_old_holders_ids(name: &str, layout: &[&str]) {
    let registry = registry(&format!("lease-registry-{name}"));
    let mut settings = vec!["snowflake.worker_range=7", "snowflake.lease_ttl=5s"];
    settings.extend_from_slice(layout);
    let old = leasing_server(&format!("lease-old-{name}"), &registry, &settings);
    assert_eq!(leased(&old), 7);
    // The old holder runs ahead of its clock (batches of a million ids), then dies.
    let mut c = old.connect();
    let mut largest = 0i64;
    wait_until("the old holder a second ahead", PATIENCE, || {
        largest = largest.max(c.scalar(
            "SELECT snowflake_lastval() FROM (SELECT snowflake_nextval_batch(1000000) LIMIT 1) one",
        ));
        c.scalar::<i64>("SELECT ahead_ms FROM snowflake_stats WHERE worker = 7") > 1000
    });
    old.kill_postmaster();
    // A new server with the same range, its clock (the true one) more than a second behind
    // the old holder's last ids: it waits out the lock-delay, then continues above every id of
    // the old holder. (A claimer whose clock is far off the registry's is refused instead:
    // tests/handover.rs.)
    let reg = registry_setting(&registry, "fleet");
    let mut settings = vec![
        "snowflake.worker_id=auto",
        reg.as_str(),
        "snowflake.worker_range=7",
        "snowflake.lease_ttl=5s",
    ];
    settings.extend_from_slice(layout);
    let new = Cluster::new(&format!("lease-new-{name}"), &settings);
    new.start();
    new.connect()
        .batch_execute("CREATE EXTENSION snowflake_ext")
        .unwrap();
    assert_eq!(leased(&new), 7);
    let ids = mint(&new, 5000);
    assert!(
        ids.iter().all(|&id| id > largest),
        "an id at or below {largest}"
    );
    let workers: i64 = new
        .connect()
        .query_one(
            "SELECT count(*) FROM unnest($1::bigint[]) id WHERE snowflake_worker(id) <> 7",
            &[&[ids.as_slice(), &[largest]].concat()],
        )
        .unwrap()
        .get(0);
    assert_eq!(workers, 0, "ids of a worker other than 7");
}

#[test]
fn a_standby_promoted_after_its_primary_died_mints_with_another_id_and_the_old_primary_brought_back_mints_with_its_own(
) {
    let registry = registry("lease-registry-failover");
    let primary = leasing_server("lease-primary", &registry, &["snowflake.lease_ttl=5s"]);
    let worker = leased(&primary);
    let mut all = mint(&primary, 5000);
    let standby = Cluster::standby_of(&primary, "lease-standby", &[]);
    standby.start();
    standby.wait_caught_up(&primary);
    primary.kill_postmaster();
    standby.promote();
    // The promoted standby mints, with a worker id of its own.
    let new_worker = leased(&standby);
    assert_ne!(new_worker, worker);
    all.extend(mint(&standby, 5000));
    // Brought back as a primary beside its successor (a split brain, which the HA manager is
    // there to prevent), the old primary is never refused for good: its lease ran out, so it
    // waits out the lock-delay and mints with a worker id nobody else holds.
    primary.start();
    let again = leased(&primary);
    assert_ne!(again, new_worker);
    all.extend(mint(&primary, 5000));
    all.extend(mint(&standby, 5000));
    assert_no_duplicates(&all);
}

#[test]
fn no_free_worker_id_bad_settings_and_a_registry_role_without_rights_are_errors() {
    let registry = registry("lease-registry-errors");
    // Three worker ids, four servers: the fourth has none, and says so everywhere.
    let servers: Vec<Cluster> = (0..4)
        .map(|i| {
            leasing_server(
                &format!("lease-few-{i}"),
                &registry,
                &["snowflake.worker_range=3-5", "snowflake.lease_ttl=10min"],
            )
        })
        .collect();
    let mut held = HashSet::new();
    let mut exhausted = None;
    for server in &servers {
        let mut c = server.connect();
        let (worker, state): (Option<i32>, String) =
            wait_for("a lease or a refusal", PATIENCE, || {
                let row = c
                    .query_one("SELECT worker_id, registry FROM snowflake_status()", &[])
                    .unwrap();
                let state: Option<String> = row.get(1);
                let worker: Option<i32> = row.get(0);
                state
                    .filter(|s| worker.is_some() || s.starts_with("exhausted"))
                    .map(|s| (worker, s))
            });
        match worker {
            Some(w) => assert!(held.insert(w) && (3..=5).contains(&w)),
            None => {
                assert!(state.starts_with("exhausted"), "{state}");
                exhausted = Some(server);
            }
        }
    }
    let exhausted = exhausted.expect("a fourth server without a worker id");
    let e = error_of(&mut exhausted.connect(), "SELECT snowflake_nextval()");
    assert_eq!(e.code, "55000", "{e:?}");
    assert!(
        e.message
            .contains("every worker id of snowflake.worker_range (3-5)"),
        "{e:?}"
    );
    assert!(e
        .hint
        .unwrap_or_default()
        .contains("snowflake.worker_range"));
    assert!(exhausted
        .log()
        .contains("every worker id of 3-5 is leased by another server"));

    // Bad settings are refused, naming the value.
    let mut c = servers[0].connect();
    for (setting, value, named) in [
        ("snowflake.worker_id", "bogus", "\"bogus\""),
        ("snowflake.worker_id", "1024", "\"1024\""),
        ("snowflake.worker_range", "5-2000", "2000"),
        ("snowflake.worker_range", "9-3", "9-3"),
        ("snowflake.registry", "host=x nonsense=1", "nonsense"),
    ] {
        let e = error_of(&mut c, &format!("ALTER SYSTEM SET {setting} = '{value}'"));
        assert_eq!(e.code, "22023", "{setting} = {value}: {e:?}");
        assert!(e.hint.is_some(), "{setting} = {value}: no hint");
        let said = format!("{} {}", e.message, e.detail.unwrap_or_default());
        assert!(said.contains(named), "{setting} = {value}: {said}");
    }

    // A registry role without rights: refused by the registry, said, and fine once granted.
    registry
        .connect()
        .batch_execute("CREATE ROLE nobody LOGIN")
        .unwrap();
    let reg = registry_setting(&registry, "nobody");
    let cluster = Cluster::new(
        "lease-norights",
        &["snowflake.worker_id=auto", reg.as_str()],
    );
    cluster.start();
    let mut c = cluster.connect();
    c.batch_execute("CREATE EXTENSION snowflake_ext").unwrap();
    wait_until("the registry's refusal", PATIENCE, || {
        c.scalar::<Option<String>>("SELECT registry FROM snowflake_status()")
            .is_some_and(|r| r.contains("42501"))
    });
    let e = error_of(&mut c, "SELECT snowflake_nextval()");
    assert_eq!(e.code, "55000", "{e:?}");
    assert!(e.message.contains("permission denied"), "{e:?}");
    // A role that could write the registry's tables itself (as registry format 1 asked the
    // fleet's role to) is refused: anyone with its password could hand out live worker ids.
    registry
        .connect()
        .batch_execute(
            "SELECT snowflake_registry.grant_fleet('nobody');
             GRANT UPDATE ON snowflake_registry.leases TO nobody;",
        )
        .unwrap();
    wait_until(
        "the registry's refusal of a role that may write",
        PATIENCE,
        || {
            c.scalar::<Option<String>>("SELECT registry FROM snowflake_status()")
                .is_some_and(|r| {
                    r.starts_with("refused")
                        && r.contains("may write the registry's tables directly")
                })
        },
    );
    let e = error_of(&mut c, "SELECT snowflake_nextval()");
    assert_eq!(e.code, "55000", "{e:?}");
    assert!(e.message.contains("nobody may write"), "{e:?}");
    // The least grant (grant_fleet alone): fine.
    registry
        .connect()
        .batch_execute("REVOKE UPDATE ON snowflake_registry.leases FROM nobody")
        .unwrap();
    let w = leased(&cluster);
    assert!(!held.contains(&w));
}

/// The password of the registry role of `a_registry_behind_a_multi_host_string_...`: it must
/// show nowhere.
const SECRET: &str = "Reg1stry-s3cret-5f0e";

#[test]
fn a_registry_behind_a_multi_host_string_is_followed_to_its_new_primary_and_its_password_shows_nowhere(
) {
    // A registry with a streaming standby; the fleet's role logs in with a password, and has
    // the least grant on a schema made by the documented script.
    let registry1 = registry("lease-registry-ha-1");
    registry1
        .connect()
        .batch_execute(&format!("ALTER ROLE fleet PASSWORD '{SECRET}'"))
        .unwrap();
    let hba = registry1.dir.join("pg_hba.conf");
    let rules = std::fs::read_to_string(&hba).unwrap();
    std::fs::write(
        &hba,
        format!("host all fleet 127.0.0.1/32 scram-sha-256\n{rules}"),
    )
    .unwrap();
    registry1
        .connect()
        .batch_execute("SELECT pg_reload_conf()")
        .unwrap();
    let fleet = |port: u16, password: &str| {
        postgres::Client::connect(
            &format!(
                "host=127.0.0.1 port={port} dbname=postgres user=fleet password='{password}' connect_timeout=10"
            ),
            postgres::NoTls,
        )
    };
    wait_until("the registry to ask for a password", PATIENCE, || {
        fleet(registry1.port, "wrong").is_err()
    });
    fleet(registry1.port, SECRET).expect("the fleet's role logs in with its password");
    let registry2 = Cluster::standby_of(&registry1, "lease-registry-ha-2", &[]);
    registry2.start();

    // The password in a passfile of the server's OS user.
    let passfile = Scratch::path("lease-passfile");
    std::fs::write(&passfile, format!("127.0.0.1:*:postgres:fleet:{SECRET}\n")).unwrap();
    let owned = std::process::Command::new("chown")
        .args(["postgres:postgres", passfile.to_str().unwrap()])
        .status()
        .unwrap();
    assert!(owned.success());
    std::fs::set_permissions(
        &passfile,
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    let hosts = format!(
        "host=127.0.0.1,127.0.0.1 port={},{} dbname=postgres user=fleet \
         target_session_attrs=read-write connect_timeout=5",
        registry1.port, registry2.port
    );
    let with_passfile = format!("snowflake.registry={hosts} passfile={}", passfile.display());
    let cluster = Cluster::new(
        "lease-ha-registry",
        &[
            "snowflake.worker_id=auto",
            with_passfile.as_str(),
            "snowflake.worker_range=10-19",
        ],
    );
    cluster.start();
    cluster
        .connect()
        .batch_execute("CREATE EXTENSION snowflake_ext")
        .unwrap();
    let worker = leased(&cluster);
    let mut all = mint(&cluster, 5000);
    let mut c = cluster.connect();
    let registry_state = |c: &mut Client| -> String {
        c.scalar::<Option<String>>("SELECT registry FROM snowflake_status()")
            .unwrap_or_default()
    };
    assert!(
        registry_state(&mut c).contains(&format!("127.0.0.1:{}", registry1.port)),
        "{}",
        registry_state(&mut c)
    );

    // The registry's primary dies and its standby is promoted: the server renews its lease
    // there (the multi-host string skips the dead host and, until the promotion, the standby),
    // and keeps its worker id.
    registry2.wait_caught_up(&registry1);
    registry1.kill_postmaster();
    registry2.promote();
    let mut r2 = registry2.connect();
    let promoted_at: std::time::SystemTime = r2.scalar("SELECT now()");
    wait_until("a renewal on the promoted registry", PATIENCE, || {
        r2.query_one(
            "SELECT count(*) = 1 FROM snowflake_registry.leases
              WHERE worker = $1 AND port = $2 AND renewed_at > $3 AND expires_at > now()",
            &[&worker, &(cluster.port as i32), &promoted_at],
        )
        .unwrap()
        .get(0)
    });
    wait_until("the status to show the new registry", PATIENCE, || {
        let state = registry_state(&mut c);
        state.starts_with("held") && state.contains(&format!("127.0.0.1:{}", registry2.port))
    });
    assert_eq!(leased(&cluster), worker);
    all.extend(mint(&cluster, 5000));

    // A password written into the setting is refused, without repeating it: PostgreSQL would
    // log the value at each reload that changes it. (The session does not log its failed
    // statement, which holds the password: that is PostgreSQL's log_min_error_statement.)
    c.batch_execute("SET log_min_error_statement = panic")
        .unwrap();
    let refused = c
        .batch_execute(&format!(
            "ALTER SYSTEM SET snowflake.registry = '{hosts} password={SECRET}'"
        ))
        .expect_err("a password in snowflake.registry is refused");
    let e = refused.as_db_error().expect("an error of the server");
    assert_eq!(
        e.code(),
        &postgres::error::SqlState::INVALID_PARAMETER_VALUE
    );
    assert!(e.message().contains("holds a password"), "{}", e.message());
    let detail = e.detail().unwrap_or_default();
    assert!(
        detail.contains("password=********") && !detail.contains(SECRET),
        "{detail}"
    );
    assert!(e.hint().unwrap_or_default().contains("passfile"), "{e:?}");
    assert!(!format!("{e:?}").contains(SECRET));
    // Written into the configuration file by hand, it is refused at the reload, and the
    // server goes on with the string it has.
    let auto_conf = cluster.dir.join("postgresql.auto.conf");
    let conf = std::fs::read_to_string(&auto_conf).unwrap();
    std::fs::write(
        &auto_conf,
        format!("{conf}snowflake.registry = '{hosts} password={SECRET}'\n"),
    )
    .unwrap();
    c.batch_execute("SELECT pg_reload_conf()").unwrap();
    cluster.wait_for_log("snowflake.registry holds a password");
    std::fs::write(&auto_conf, conf).unwrap();
    let shown: String = c.scalar("SHOW snowflake.registry");
    assert_eq!(shown, format!("{hosts} passfile={}", passfile.display()));
    all.extend(mint(&cluster, 5000));

    // A new passfile: the reloaded setting is used at once, through a new connection.
    let passfile2 = Scratch::path("lease-passfile-2");
    std::fs::rename(&passfile, &passfile2).unwrap();
    let reloaded_at: std::time::SystemTime = r2.scalar("SELECT now()");
    c.batch_execute(&format!(
        "ALTER SYSTEM SET snowflake.registry = '{hosts} passfile={}'",
        passfile2.display()
    ))
    .unwrap();
    c.batch_execute("SELECT pg_reload_conf()").unwrap();
    wait_until("a renewal through the new setting", PATIENCE, || {
        r2.query_one(
            "SELECT count(*) = 1 FROM snowflake_registry.leases l
              WHERE worker = $1 AND renewed_at > $2
                AND EXISTS (SELECT FROM pg_stat_activity a
                             WHERE a.usename = 'fleet' AND a.backend_start > $2)",
            &[&worker, &reloaded_at],
        )
        .unwrap()
        .get(0)
    });
    assert!(registry_state(&mut c).starts_with("held"));
    assert_eq!(leased(&cluster), worker);
    all.extend(mint(&cluster, 5000));

    // A new range that leaves the worker id out: it is given back and one inside is leased.
    cluster.set_and_reload("snowflake.worker_range", "20-29");
    let moved = wait_for("a worker id inside the new range", PATIENCE, || {
        let w = c.scalar::<Option<i32>>("SELECT worker_id FROM snowflake_status()")?;
        (20..=29).contains(&w).then_some(w)
    });
    let state: String = r2
        .query_one(
            "SELECT state FROM snowflake_registry.lease_list WHERE worker = $1",
            &[&worker],
        )
        .unwrap()
        .get(0);
    assert_eq!(state, "released");
    let after = mint(&cluster, 5000);
    assert!(after.iter().all(|&id| worker_of(id) == moved));
    all.extend(after);
    assert_no_duplicates(&all);
    for (name, log) in [
        ("server", cluster.log()),
        ("registry", registry1.log()),
        ("promoted registry", registry2.log()),
    ] {
        assert!(!log.contains(SECRET), "the password is in the {name}'s log");
    }
}

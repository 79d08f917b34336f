//! A worker id changes hands only when its last holder has provably stopped: each way the
//! adversary of issue 24 made two servers mint one worker id, on real servers, with a registry
//! of its own (a plain PostgreSQL server) and the fleet's role given only what
//! `snowflake_registry.grant_fleet` gives.

mod common;

use common::*;
use std::time::Duration;

/// How much later than the next holder's first batch came back the last batch of a tenure may
/// have been asked for: the two clocks read are the same (`Instant`), in different threads.
const SLACK: Duration = Duration::from_millis(50);

/// A copy of `registry` as it is now (a base backup), to put back later.
fn copy_of(registry: &Cluster, name: &str) -> Cluster {
    Cluster::standby_of(registry, name, &[])
}

/// Puts `copy` back in `registry`'s place: the registry's server stopped, the copy started on
/// its port as a primary (a restore from a backup, as of when the copy was taken).
fn restore(registry: &Cluster, copy: &mut Cluster) {
    registry.stop();
    std::fs::remove_file(copy.dir.join("standby.signal")).unwrap();
    // The copy carries the registry's socket lock file (its sockets live in its data directory).
    for entry in std::fs::read_dir(&copy.dir).unwrap() {
        let path = entry.unwrap().path();
        if path
            .file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with(".s.PGSQL.")
        {
            std::fs::remove_file(path).unwrap();
        }
    }
    let conf = copy.dir.join("postgresql.conf");
    let text = std::fs::read_to_string(&conf).unwrap();
    std::fs::write(&conf, format!("{text}\nport = {}\n", registry.port)).unwrap();
    copy.port = registry.port;
    copy.start();
}

/// A registry restored from an older copy while its holder mints and a second server wants the
/// same worker id: nobody runs anything on the registry, and the fleet serves again on its own.
/// The holder's renewal brings a fence the restored registry lost: told `lost`, it stops
/// minting; whichever server then takes worker 7 waits out the lock-delay first (a claim in
/// the restored registry is never granted at once), and no id repeats, nor do two servers mint
/// with worker 7 at once. (Until registry format 3 the registry froze and waited for an
/// administrator's recover().)
#[test]
fn a_registry_restored_from_an_older_copy_while_its_holder_mints_serves_again_unaided_and_no_id_repeats(
) {
    let mut registry = registry("handover-restore-registry");
    let holder = leasing_server(
        "handover-restore-holder",
        &registry,
        &["snowflake.worker_range=7", "snowflake.lease_ttl=5s"],
    );
    assert_eq!(leased(&holder), 7);
    let copy_taken = mint(&holder, 100);
    let mut copy = copy_of(&registry, "handover-restore-copy");
    // A second server wants the same worker id, and keeps asking; the holder goes on renewing
    // after the copy was taken, so that its fence is one the copy never gave.
    let waiter = leasing_server(
        "handover-restore-waiter",
        &registry,
        &["snowflake.worker_range=7", "snowflake.lease_ttl=5s"],
    );
    wait_for_standing(&waiter, "exhausted");
    let holding = Minter::start(holder.conninfo("postgres"), 100);
    let waiting = Minter::start(waiter.conninfo("postgres"), 100);
    let mut r = registry.connect();
    let renewed_since: i64 =
        r.scalar("SELECT fence FROM snowflake_registry.leases WHERE worker = 7");
    wait_until("renewals after the copy", PATIENCE, || {
        r.scalar::<i64>("SELECT fence FROM snowflake_registry.leases WHERE worker = 7")
            >= renewed_since + 3
    });
    drop(r);
    // The registry restored from the copy: its lease of worker 7 is older, and expired by now.
    restore(&registry, &mut copy);
    std::mem::swap(&mut registry, &mut copy);
    // The holder is told that its lease is lost, and stops minting.
    let mut holder_c = holder.connect();
    wait_until("the holder to stop minting", PATIENCE, || {
        holder_c
            .query_one("SELECT snowflake_nextval()", &[])
            .is_err()
    });
    let e = error_of(&mut holder_c, "SELECT snowflake_nextval()");
    assert_eq!(e.code, "55000", "{e:?}");
    // Worker 7 is minted with again, by one of the two, with nothing run on the registry.
    wait_until("worker 7 minted again", PATIENCE, || {
        [&holder, &waiter].iter().any(|s| {
            s.connect()
                .query_one("SELECT snowflake_nextval()", &[])
                .is_ok()
        })
    });
    let waited: bool = registry.connect().scalar(&format!(
        "SELECT since >= pg_postmaster_start_time() + interval '{TEST_LOCK_DELAY_S} s' - interval '1 s'
           FROM snowflake_registry.leases WHERE worker = 7"
    ));
    assert!(
        waited,
        "worker 7 changed hands in the restored registry without waiting out the lock-delay"
    );
    let holding = holding.finish();
    let waiting = waiting.finish();
    assert!(holding.ids.len() > 100, "the holder minted nothing");
    let mut all: Vec<i64> = copy_taken;
    all.extend(holding.ids.iter().map(|(_, id)| *id));
    all.extend(waiting.ids.iter().map(|(_, id)| *id));
    assert_no_duplicates(&all);
    assert_one_holder_at_a_time(&[("holder", &holding), ("waiter", &waiting)], SLACK);
}

/// The system identifier of `server`, as the registry's rows and claims name it.
fn system_identifier_of(server: &Cluster) -> String {
    server
        .connect()
        .scalar("SELECT system_identifier::text FROM pg_control_system()")
}

/// Waits for `server` to claim worker id 7 again in the registry (through `r`) and wait out
/// the lock-delay, then to be granted it; each wait bounded by `limit`. Checks, meanwhile,
/// that the server is never taken for a copy of itself, that it refuses ids while its claim
/// waits, and that the grant came no earlier than the claim's wait after the claim, on the
/// registry's clock (not at once).
fn it_claims_7_again_through_the_lock_delay(
    server: &Cluster,
    r: &mut postgres::Client,
    limit: Duration,
) {
    let sysid = system_identifier_of(server);
    let mut c = server.connect();
    let never_a_copy = |c: &mut postgres::Client| {
        let status = registry_status(c);
        assert!(
            !status.starts_with("duplicate"),
            "the server took itself for a copy: {status}"
        );
    };
    let its_claim = "SELECT pending_since::text, pending_wait_ms FROM snowflake_registry.leases
                      WHERE worker = 7 AND starts_with(pending_key, $1 || '|')";
    let (claimed_at, wait_ms): (String, i64) = wait_for(
        "the server's claim of worker 7 waiting out the lock-delay",
        limit,
        || {
            never_a_copy(&mut c);
            r.query_opt(its_claim, &[&sysid])
                .unwrap()
                .map(|row| (row.get(0), row.get(1)))
        },
    );
    assert!(
        wait_ms >= TEST_LOCK_DELAY_S as i64 * 1000,
        "a wait of {wait_ms} ms"
    );
    // Refused while its claim waits (seen waiting still after the refusal).
    let asked = c.query_one("SELECT snowflake_nextval()", &[]);
    if r.query_opt(its_claim, &[&sysid]).unwrap().is_some() {
        let e = asked.expect_err("the server minted while its claim of worker 7 waited");
        let code = e.as_db_error().map(|d| d.code().code().to_string());
        assert_eq!(code.as_deref(), Some("55000"), "{e}");
    }
    wait_until("worker 7 granted to the server", limit, || {
        never_a_copy(&mut c);
        r.query_one(
            "SELECT coalesce(system_identifier = $1 AND pending_key IS NULL AND released_at IS NULL
                             AND since > $2::text::timestamptz, false)
               FROM snowflake_registry.leases WHERE worker = 7",
            &[&sysid, &claimed_at],
        )
        .unwrap()
        .get(0)
    });
    // (now() at the grant may precede the registry's clock that saw the wait pass by as long
    // as the call waited for the registry's row: well under a second)
    let waited: bool = r
        .query_one(
            "SELECT since >= $1::text::timestamptz + ($2::bigint - 1000) * interval '1 millisecond'
               FROM snowflake_registry.leases WHERE worker = 7",
            &[&claimed_at, &wait_ms],
        )
        .unwrap()
        .get(0);
    assert!(
        waited,
        "worker 7 was granted before the claim, made at {claimed_at}, waited {wait_ms} ms"
    );
}

/// Waits for `server` to mint again, then checks that it mints with worker 7, above every id
/// of `earlier` (its own ids from before).
fn it_mints_with_7_again_above(server: &Cluster, earlier: &[i64]) {
    let mut c = server.connect();
    wait_until("the server to mint again", PATIENCE, || {
        c.query_one("SELECT snowflake_nextval()", &[]).is_ok()
    });
    let largest = *earlier.iter().max().unwrap();
    let after = mint(server, 100);
    assert!(
        after.iter().all(|&id| worker_of(id) == 7 && id > largest),
        "ids at or below {largest}, or of another worker: {after:?}"
    );
}

/// A holder whose registry was restored from a copy taken before its last renewals brings a
/// fence the registry never gave (a fence only grows there, and reaches a server only in an
/// answer): the registry lost the history that gave it, in which the worker id may have
/// changed hands. The holder, no copy of anything, is told `lost` (never `duplicate`, which
/// would stop it for good), claims its worker id again, waits out the lock-delay, and mints
/// above its own earlier ids; nobody runs anything on the registry. (Until registry format 3
/// the registry froze until an administrator's recover().)
#[test]
fn a_holder_whose_fence_a_restored_registry_lost_claims_it_again_through_the_lock_delay_and_mints_above_its_ids(
) {
    let mut registry = registry("handover-fence-registry");
    // Leases of 20 s, renewed every 7: the restore is short beside them.
    registry
        .connect()
        .batch_execute("SELECT snowflake_registry.set_limits(interval '20 s')")
        .unwrap();
    let holder = leasing_server(
        "handover-fence-holder",
        &registry,
        &["snowflake.worker_range=7", "snowflake.lease_ttl=20s"],
    );
    assert_eq!(leased(&holder), 7);
    let mut all = mint(&holder, 100);
    let mut copy = copy_of(&registry, "handover-fence-copy");
    let mut r = registry.connect();
    let copied: i64 = r.scalar("SELECT fence FROM snowflake_registry.leases WHERE worker = 7");
    wait_until("a renewal after the copy", PATIENCE, || {
        r.scalar::<i64>("SELECT fence FROM snowflake_registry.leases WHERE worker = 7") > copied
    });
    drop(r);
    all.extend(mint(&holder, 100));
    restore(&registry, &mut copy);
    std::mem::swap(&mut registry, &mut copy);
    let mut r = registry.connect();
    it_claims_7_again_through_the_lock_delay(&holder, &mut r, PATIENCE);
    it_mints_with_7_again_above(&holder, &all);
    all.extend(mint(&holder, 100));
    assert_no_duplicates(&all);
}

/// The boot (one start of the server) that the registry names as the holder of `worker`.
fn holder_boot(registry: &Cluster, worker: i32) -> Option<String> {
    registry.connect().scalar(&format!(
        "SELECT boot FROM snowflake_registry.leases WHERE worker = {worker}"
    ))
}

/// The nemesis found this: a server killed and started again (on the same machine run, so the
/// new start takes its worker id at once), then a registry restored from a copy taken before
/// the kill, which names the killed start as the holder, its lease still running. The
/// registry's word on the holder is the lost history's, no proof of a copy: the server must
/// not stop for good as one (`duplicate`). The new start's fence is one the restored registry
/// never gave: it is told `lost`, claims again through the lock-delay, and mints above its ids,
/// with nothing run on the registry. (It failed on a quiet machine, where the restore came
/// within the killed start's TTL.)
#[test]
fn a_server_killed_then_met_by_a_registry_restored_from_before_is_not_taken_for_a_copy_of_itself() {
    // A lease of 60 s: the restored copy's lease of the killed start still runs when the
    // server meets it (checked below).
    const TTL_S: u64 = 60;
    let mut registry = registry("handover-crash-restore-registry");
    registry
        .connect()
        .batch_execute(&format!(
            "SELECT snowflake_registry.set_limits(interval '{TTL_S} s')"
        ))
        .unwrap();
    let server = leasing_server(
        "handover-crash-restore-server",
        &registry,
        &[
            "snowflake.worker_range=7",
            &format!("snowflake.lease_ttl={TTL_S}s"),
        ],
    );
    assert_eq!(leased(&server), 7);
    let mut all = mint(&server, 100);
    let killed = holder_boot(&registry, 7).expect("a holder of worker 7");
    let mut copy = copy_of(&registry, "handover-crash-restore-copy");
    server.kill_postmaster();
    server.start();
    wait_until("the new start to hold worker 7", PATIENCE, || {
        holder_boot(&registry, 7).is_some_and(|b| b != killed)
    });
    assert_eq!(leased(&server), 7);
    all.extend(mint(&server, 100));
    restore(&registry, &mut copy);
    std::mem::swap(&mut registry, &mut copy);
    assert_eq!(holder_boot(&registry, 7).as_deref(), Some(killed.as_str()));
    assert!(
        registry.connect().scalar::<bool>(
            "SELECT expires_at > now() FROM snowflake_registry.leases WHERE worker = 7"
        ),
        "the killed start's lease had run out in the restored copy: not the case under test"
    );
    // The server meets the restored registry: it claims worker 7 again, waits out the
    // lock-delay (the TTL here), never stopping as a copy of itself, and holds it again.
    let mut r = registry.connect();
    it_claims_7_again_through_the_lock_delay(
        &server,
        &mut r,
        PATIENCE + Duration::from_secs(TTL_S),
    );
    assert!(holder_boot(&registry, 7).is_some_and(|b| b != killed));
    it_mints_with_7_again_above(&server, &all);
    all.extend(mint(&server, 100));
    assert_no_duplicates(&all);
}

/// A registry, and a server holding worker id 7 from it on leases of 5 s that minted, whose
/// lease keeper is then stopped (SIGSTOP: `signal(&keeper, "-CONT")` lets it go on): the
/// registry, the server, the keeper's pid and the ids minted.
fn a_holder_of_7_whose_keeper_stalls(name: &str) -> (Cluster, Cluster, String, Vec<i64>) {
    let registry = registry(&format!("{name}-registry"));
    let holder = leasing_server(
        &format!("{name}-holder"),
        &registry,
        &["snowflake.worker_range=7", "snowflake.lease_ttl=5s"],
    );
    assert_eq!(leased(&holder), 7);
    let minted = mint(&holder, 100);
    let keeper = keeper_pid(&holder);
    signal(&keeper, "-STOP");
    (registry, holder, keeper, minted)
}

/// A holder that stalled past its lease may have been replaced meanwhile: another server may
/// have waited its lease out in the registry, taken the worker id and minted (or may yet, in a
/// history a restore of the registry loses). Renewing on the connection it kept, it would go
/// on at its clock beside that server. A lease is renewed only while it runs in the registry:
/// the holder is told `lost`, claims again through the lock-delay, and mints above its ids.
/// (Until registry format 3 this was tested on a registry recovered after a freeze.)
#[test]
fn a_holder_that_stalled_past_its_lease_is_not_renewed_and_claims_it_again_through_the_lock_delay_above_its_ids(
) {
    let (registry, holder, keeper, minted) = a_holder_of_7_whose_keeper_stalls("handover-ranout");
    let mut r = registry.connect();
    wait_until("the stalled holder's lease to run out", PATIENCE, || {
        r.scalar("SELECT expires_at < now() FROM snowflake_registry.leases WHERE worker = 7")
    });
    signal(&keeper, "-CONT");
    it_claims_7_again_through_the_lock_delay(&holder, &mut r, PATIENCE);
    it_mints_with_7_again_above(&holder, &minted);
}

/// The registry's server restarted (a new incarnation of the registry, as a failover or a
/// restore makes one, here with nothing lost), with nothing run on it: every holder renews
/// there as before (a fence the registry gave, of a lease that runs), keeps its lease without
/// a wait, and mints throughout. (Until registry format 3 claims waited out a "caution" of a
/// lock-delay after every change of the registry's server.)
#[test]
fn a_holder_keeps_its_worker_id_across_a_restart_of_the_registrys_server_with_nothing_run_there() {
    let registry = registry("handover-registry-restart-registry");
    // Leases of 20 s, renewed every 7: the restart is short beside them.
    registry
        .connect()
        .batch_execute("SELECT snowflake_registry.set_limits(interval '20 s')")
        .unwrap();
    let holder = leasing_server(
        "handover-registry-restart-holder",
        &registry,
        &["snowflake.worker_range=7", "snowflake.lease_ttl=20s"],
    );
    assert_eq!(leased(&holder), 7);
    let since: String = registry
        .connect()
        .scalar("SELECT since::text FROM snowflake_registry.leases WHERE worker = 7");
    let minting = Minter::start(holder.conninfo("postgres"), 100);
    wait_until("ids before the restart", PATIENCE, || minting.got() > 0);
    registry.stop();
    registry.start();
    let mut r = registry.connect();
    wait_until("a renewal by the restarted registry", PATIENCE, || {
        r.scalar(
            "SELECT renewed_at > pg_postmaster_start_time() FROM snowflake_registry.leases
              WHERE worker = 7",
        )
    });
    let before = minting.got();
    wait_until("ids after the renewal", PATIENCE, || minting.got() > before);
    let minted = minting.finish();
    assert_eq!(
        minted.refused, 0,
        "minting stopped: {:?}",
        minted.last_refusal
    );
    // The same lease all along: never lost, never claimed again.
    let same: bool = r
        .query_one(
            "SELECT since = $1::text::timestamptz AND pending_key IS NULL AND released_at IS NULL
               FROM snowflake_registry.leases WHERE worker = 7",
            &[&since],
        )
        .unwrap()
        .get(0);
    assert!(same, "the holder lost its lease at the registry's restart");
    assert!(registry_status(&mut holder.connect()).starts_with("held"));
    let ids: Vec<i64> = minted.ids.iter().map(|(_, id)| *id).collect();
    assert_strictly_increasing(&ids);
}

/// What the registry answered a claim or a confirmation.
#[derive(Debug)]
struct Answered {
    outcome: String,
    fence: Option<i64>,
    token: Option<i64>,
}

/// A server as the registry's functions know it: its identity, one start (boot and machine
/// run), and its secret.
struct Server {
    sysid: &'static str,
    host: &'static str,
    dir: &'static str,
    boot: &'static str,
    run: &'static str,
    secret: &'static str,
}

/// A start of the tests' server.
const fn start_of_h(boot: &'static str, run: &'static str) -> Server {
    Server {
        sysid: "sysid-h",
        host: "host-h",
        dir: "/h",
        boot,
        run,
        secret: "a-secret-of-the-holder-32-chars!",
    }
}

/// Another server, which wants worker id 7 too.
const OTHER: Server = Server {
    sysid: "sysid-x",
    host: "host-x",
    dir: "/x",
    boot: "boot-x",
    run: "run-x",
    secret: "a-secret-of-another-server-32ch!",
};

fn answered(row: postgres::Row) -> Answered {
    Answered {
        outcome: row.get(0),
        fence: row.get(1),
        token: row.get(2),
    }
}

/// Claims worker id 7 (pinned) through `fleet` as `server`, bringing `fence` and `request` as
/// its keeper does.
fn claim_7_by(
    fleet: &mut postgres::Client,
    server: &Server,
    fence: Option<i64>,
    request: Option<i64>,
) -> Answered {
    answered(
        fleet
            .query_one(
                "SELECT outcome, fence, token FROM snowflake_registry.claim($1, $2, 5432, $3, $4, $5, $6, 1,
                         7, 7, true, 5000, (extract(epoch FROM clock_timestamp()) * 1000)::bigint, $7, $8, NULL, NULL)",
                &[&server.sysid, &server.host, &server.dir, &server.boot, &server.run, &server.secret,
                  &fence, &request],
            )
            .unwrap(),
    )
}

/// Confirms `server`'s claim of worker id 7 with `token`.
fn confirm_7_by(
    fleet: &mut postgres::Client,
    server: &Server,
    token: i64,
    request: i64,
) -> Answered {
    answered(
        fleet
            .query_one(
                "SELECT outcome, fence, token FROM snowflake_registry.confirm($1, $2, 5432, $3, $4, $5, $6, 1,
                         7, $7, 5000, (extract(epoch FROM clock_timestamp()) * 1000)::bigint, NULL, NULL, $8)",
                &[&server.sysid, &server.host, &server.dir, &server.boot, &server.run, &server.secret,
                  &token, &request],
            )
            .unwrap(),
    )
}

/// Claims worker id 7 as the start `boot` on the machine run `run` of the tests' server.
fn claim_7_as(
    fleet: &mut postgres::Client,
    boot: &'static str,
    run: &'static str,
    fence: Option<i64>,
    request: Option<i64>,
) -> Answered {
    claim_7_by(fleet, &start_of_h(boot, run), fence, request)
}

/// Confirms the claim of worker id 7 with `token`, as `claim_7_as` claimed it.
fn confirm_7_as(
    fleet: &mut postgres::Client,
    boot: &'static str,
    run: &'static str,
    token: i64,
    request: i64,
) -> Answered {
    confirm_7_by(fleet, &start_of_h(boot, run), token, request)
}

/// Claims worker id 7 through `fleet` as one start of a server (the tests' identity, boot and
/// secret) that brings `fence`: the registry's answer, and the fence of a grant.
fn claim_7_as_the_same_start(
    fleet: &mut postgres::Client,
    fence: Option<i64>,
) -> (String, Option<i64>) {
    let a = claim_7_as(fleet, "boot-h", "run-h", fence, None);
    (a.outcome, a.fence)
}

/// The lease of worker id 7 ran out (written by hand, as the registry's owner).
fn the_lease_of_7_ran_out(r: &mut postgres::Client) {
    r.batch_execute("UPDATE snowflake_registry.leases SET expires_at = now() - interval '1 minute' WHERE worker = 7")
        .unwrap();
}

/// The lock-delay of the claim of worker id 7 has passed (its start moved back by hand).
fn the_claim_of_7_waited_out(r: &mut postgres::Client) {
    // (the owner's write is stamped as the protocol's own, as if the time had passed: a row
    // written by anything else is not untouched(), and its claim waits again)
    r.batch_execute(
        "UPDATE snowflake_registry.leases SET pending_since = now() - interval '1 hour',
                            proof = snowflake_registry.proof() WHERE worker = 7",
    )
    .unwrap();
}

/// The registry's server restarted: a new incarnation of the registry, as a restore or a
/// failover makes one. New sessions to it, as the fleet's role and as its owner.
fn the_registrys_server_restarted(registry: &Cluster) -> (postgres::Client, postgres::Client) {
    registry.stop();
    registry.start();
    (
        connect_as(registry, "postgres", "fleet"),
        registry.connect(),
    )
}

/// Worker id 7 held by the start `boot-h`, whose lease ran out (killed on a machine since
/// rebooted), and claimed by a later start of the same server on the new machine run, which
/// waits out the lock-delay: the later start's token.
fn claimed_after_a_reboot(fleet: &mut postgres::Client, r: &mut postgres::Client) -> i64 {
    assert_eq!(claim_7_as_the_same_start(fleet, None).0, "granted");
    the_lease_of_7_ran_out(r);
    let a = claim_7_as(fleet, "boot-h2", "run-h2", None, Some(50));
    assert_eq!(a.outcome, "wait", "{a:?}");
    a.token.unwrap()
}

/// A claim granted at once (to the same start, renewing by another road) whose answer was lost
/// is sent again with the fence the keeper had and the same request: granted again, with the
/// fence of the first answer, and not taken for a copy's memory (which would stop the server
/// for good). A claim with another request and that fence is still a copy's.
#[test]
fn a_claim_granted_at_once_whose_answer_was_lost_is_granted_again_and_not_taken_for_a_copy() {
    let registry = registry("handover-lost-claim-registry");
    let mut fleet = connect_as(&registry, "postgres", "fleet");
    let first = claim_7_as(&mut fleet, "boot-h", "run-h", None, Some(40)).fence;
    let lost = claim_7_as(&mut fleet, "boot-h", "run-h", first, Some(41));
    assert_eq!(lost.outcome, "granted", "{lost:?}");
    let again = claim_7_as(&mut fleet, "boot-h", "run-h", first, Some(41));
    assert_eq!(again.outcome, "granted", "{again:?}");
    assert_eq!(again.fence, lost.fence);
    let other = claim_7_as(&mut fleet, "boot-h", "run-h", first, Some(42));
    assert_eq!(other.outcome, "duplicate", "{other:?}");
}

/// A confirmation that the registry granted but whose answer was lost, sent again with the same
/// request: granted again with the same fence, not `lost` (the keeper would claim again with
/// the fence it had, and be taken for a copy's memory). Another request is not its repeat.
#[test]
fn a_confirmation_whose_answer_was_lost_is_granted_again() {
    let registry = registry("handover-lost-confirm-registry");
    let mut fleet = connect_as(&registry, "postgres", "fleet");
    let mut r = registry.connect();
    let token = claimed_after_a_reboot(&mut fleet, &mut r);
    the_claim_of_7_waited_out(&mut r);
    let lost = confirm_7_as(&mut fleet, "boot-h2", "run-h2", token, 51);
    assert_eq!(lost.outcome, "granted", "{lost:?}");
    let again = confirm_7_as(&mut fleet, "boot-h2", "run-h2", token, 51);
    assert_eq!(again.outcome, "granted", "{again:?}");
    assert_eq!(again.fence, lost.fence);
    let other = confirm_7_as(&mut fleet, "boot-h2", "run-h2", token, 52);
    assert_eq!(other.outcome, "lost", "{other:?}");
}

/// A keeper restarted after a confirmation whose answer was lost claims with the fence it had
/// before (any) and the request it kept in shared memory: granted with the confirmation's
/// fence, not taken for a copy's memory.
#[test]
fn a_claim_repeating_a_confirmation_whose_answer_was_lost_is_granted_with_its_fence() {
    let registry = registry("handover-lost-confirm-claim-registry");
    let mut fleet = connect_as(&registry, "postgres", "fleet");
    let mut r = registry.connect();
    let token = claimed_after_a_reboot(&mut fleet, &mut r);
    the_claim_of_7_waited_out(&mut r);
    let lost = confirm_7_as(&mut fleet, "boot-h2", "run-h2", token, 51);
    assert_eq!(lost.outcome, "granted", "{lost:?}");
    let older = lost.fence.map(|f| f - 5);
    let claimed = claim_7_as(&mut fleet, "boot-h2", "run-h2", older, Some(51));
    assert_eq!(claimed.outcome, "granted", "{claimed:?}");
    assert_eq!(claimed.fence, lost.fence);
    let another = claim_7_as(&mut fleet, "boot-h2", "run-h2", older, Some(52));
    assert_eq!(another.outcome, "duplicate", "{another:?}");
}

/// A claim placed in another incarnation of the registry (before a restart, a failover, a
/// restore) waited in a history the registry may have lost, where the holder may have renewed
/// or another server taken the worker id: once the lock-delay has passed, it is not granted
/// but claimed again, to wait in this one; waited out there, it is granted (nothing else holds
/// it up: no caution after a change of the registry's server since registry format 3).
#[test]
fn a_claim_that_waited_while_the_registry_restarted_waits_again_then_is_granted() {
    let registry = registry("handover-changed-while-waiting-registry");
    let mut fleet = connect_as(&registry, "postgres", "fleet");
    let mut r = registry.connect();
    let token = claimed_after_a_reboot(&mut fleet, &mut r);
    the_claim_of_7_waited_out(&mut r);
    let (mut fleet, mut r) = the_registrys_server_restarted(&registry);
    let a = confirm_7_as(&mut fleet, "boot-h2", "run-h2", token, 51);
    assert_eq!(a.outcome, "wait", "{a:?}");
    let again = a.token.unwrap();
    assert_ne!(again, token);
    the_claim_of_7_waited_out(&mut r);
    let granted = confirm_7_as(&mut fleet, "boot-h2", "run-h2", again, 52);
    assert_eq!(granted.outcome, "granted", "{granted:?}");
}

/// Claims one of worker ids 7 and 8 through `fleet` as the start `boot-h` that brings `fence`
/// and `request`: the outcome and the worker id.
fn claim_7_or_8(
    fleet: &mut postgres::Client,
    fence: Option<i64>,
    request: i64,
) -> (String, Option<i32>, Option<i64>) {
    let row = fleet
        .query_one(
            "SELECT outcome, worker, fence FROM snowflake_registry.claim('sysid-h', 'host-h', 5432, '/h', 'boot-h', 'run-h',
                     'a-secret-of-the-holder-32-chars!', 1, 7, 8, false, 5000,
                     (extract(epoch FROM clock_timestamp()) * 1000)::bigint, $1, $2, NULL, NULL)",
            &[&fence, &request],
        )
        .unwrap();
    (row.get(0), row.get(1), row.get(2))
}

/// Of a server's own leases in its range, a claim is judged on the one this start holds (by
/// its fence), not on one it held before and lost (whose claimant went away): it is granted
/// that one again at once, not taken for a copy's memory because the other's fence differs.
#[test]
fn a_claim_is_judged_on_the_lease_this_start_holds_not_one_it_lost() {
    let registry = registry("handover-own-rows-registry");
    let mut fleet = connect_as(&registry, "postgres", "fleet");
    let mut r = registry.connect();
    // The start holds 7 (its fence raised twice), loses it (run out), and another server
    // claims it, so that the start's next claim is granted 8.
    let (_, first, fence) = claim_7_or_8(&mut fleet, None, 60);
    assert_eq!(first, Some(7));
    let (_, _, fence) = claim_7_or_8(&mut fleet, fence, 61);
    the_lease_of_7_ran_out(&mut r);
    assert_eq!(claim_7_by(&mut fleet, &OTHER, None, None).outcome, "wait");
    let (granted, eight, fence_8) = claim_7_or_8(&mut fleet, None, 62);
    assert_eq!((granted.as_str(), eight), ("granted", Some(8)));
    assert_ne!(fence_8, fence);
    // The other server went away: its claim of 7 lapses. The start claims again with the
    // fence of 8 (a restarted keeper).
    the_claim_of_7_waited_out(&mut r);
    let (again, which, _) = claim_7_or_8(&mut fleet, fence_8, 63);
    assert_eq!((again.as_str(), which), ("granted", Some(8)));
}

/// Of two of a start's own leases whose fences match the one it brings (fences are counted
/// per lease), a claim takes the one that runs, not the one it lost.
#[test]
fn of_two_leases_with_the_fence_a_claim_brings_it_takes_the_one_that_runs() {
    let registry = registry("handover-same-fence-registry");
    let mut fleet = connect_as(&registry, "postgres", "fleet");
    let mut r = registry.connect();
    let (_, first, fence_7) = claim_7_or_8(&mut fleet, None, 70);
    assert_eq!(first, Some(7));
    the_lease_of_7_ran_out(&mut r);
    assert_eq!(claim_7_by(&mut fleet, &OTHER, None, None).outcome, "wait");
    let (_, eight, fence_8) = claim_7_or_8(&mut fleet, None, 71);
    assert_eq!((eight, fence_8), (Some(8), fence_7));
    the_claim_of_7_waited_out(&mut r);
    let (again, which, _) = claim_7_or_8(&mut fleet, fence_8, 72);
    assert_eq!((again.as_str(), which), ("granted", Some(8)));
}

/// A claim by the start that holds worker id 7, bringing a fence above the registry's (a
/// restarted keeper, met by a registry that lost the renewal that gave it), is no copy's: a
/// copy of the start's memory brings a fence at most the registry's. It waits out the
/// lock-delay instead of being told that a copy runs (which stops the server for good); a
/// fence below the registry's is still a copy's. (The registry's loss is written by hand.)
#[test]
fn a_claim_bringing_a_fence_above_the_registrys_waits_and_is_not_taken_for_a_copy() {
    let registry = registry("handover-fence-above-registry");
    let mut fleet = connect_as(&registry, "postgres", "fleet");
    let mut r = registry.connect();
    let fence = claim_7_as(&mut fleet, "boot-h", "run-h", None, Some(90)).fence;
    assert!(fence.is_some());
    r.batch_execute("UPDATE snowflake_registry.leases SET fence = fence - 1 WHERE worker = 7")
        .unwrap();
    let above = claim_7_as(&mut fleet, "boot-h", "run-h", fence, Some(91));
    assert_eq!(above.outcome, "wait", "{above:?}");
    let below = claim_7_as(
        &mut fleet,
        "boot-h",
        "run-h",
        fence.map(|f| f - 2),
        Some(92),
    );
    assert_eq!(below.outcome, "duplicate", "{below:?}");
}

/// Renews worker id 7 as the start `boot-h` with `fence`, as a keeper does (naming the registry
/// it leases from, with the epoch it saw), its lease not run out: the outcome.
fn renew_7_naming_the_registry(
    fleet: &mut postgres::Client,
    fence: i64,
    seen_epoch: i64,
) -> String {
    fleet
        .query_one(
            "SELECT outcome FROM snowflake_registry.renew('sysid-h', 'host-h', 5432, '/h', 'boot-h',
                     'a-secret-of-the-holder-32-chars!', 1, 7, $1, 93, 0, 5000,
                     (extract(epoch FROM clock_timestamp()) * 1000)::bigint,
                     (SELECT registry_id FROM snowflake_registry.identity()), $2, false)",
            &[&fence, &seen_epoch],
        )
        .unwrap()
        .get(0)
}

/// A registry restored from a copy in which the holder had given worker id 7 back (it took it
/// again since, in the history the restore lost) answers the holder's renewal `lost`: a lease
/// the copy has as given back is no longer the holder's there. The registry serves on, and the
/// holder's claim waits out the lock-delay: the copy's word that the worker id was given back
/// was written in another incarnation (here: by hand), and may predate a grant the registry
/// lost. (Restore and loss written by hand.)
#[test]
fn a_holder_renewing_a_lease_a_restored_copy_has_as_given_back_is_told_lost_and_claims_it_through_the_lock_delay(
) {
    let registry = registry("handover-fence-released-registry");
    let mut fleet = connect_as(&registry, "postgres", "fleet");
    let mut r = registry.connect();
    let fence = claim_7_as(&mut fleet, "boot-h", "run-h", None, Some(94))
        .fence
        .unwrap();
    r.batch_execute(
        "UPDATE snowflake_registry.leases SET fence = fence - 1, released_at = now(), released_by = 'holder'
          WHERE worker = 7",
    )
    .unwrap();
    assert_eq!(renew_7_naming_the_registry(&mut fleet, fence, 0), "lost");
    // Told lost, the keeper claims without a fence.
    let claimed = claim_7_as(&mut fleet, "boot-h", "run-h", None, Some(95));
    assert_eq!(claimed.outcome, "wait", "{claimed:?}");
    the_claim_of_7_waited_out(&mut r);
    let granted = confirm_7_as(&mut fleet, "boot-h", "run-h", claimed.token.unwrap(), 96);
    assert_eq!(granted.outcome, "granted", "{granted:?}");
}

/// Anyone with the fleet's password can send the registry an epoch no server ever saw (every
/// call of the protocol carries the highest its caller has seen). It changes nothing: the
/// registry answers every call as before, its own epoch unchanged, and needs nothing run on it.
/// (Until registry format 3 such an epoch froze the registry until an administrator's
/// recover().)
#[test]
fn a_made_up_huge_epoch_from_the_fleets_role_changes_nothing_and_the_registry_serves_on() {
    let registry = registry("handover-forged-epoch-registry");
    let mut fleet = connect_as(&registry, "postgres", "fleet");
    let epoch = |fleet: &mut postgres::Client| -> i64 {
        fleet.scalar("SELECT epoch FROM snowflake_registry.identity()")
    };
    let fence = claim_7_as(&mut fleet, "boot-h", "run-h", None, Some(95))
        .fence
        .unwrap();
    let before = epoch(&mut fleet);
    let huge = i64::MAX - 10;
    // Made-up calls, naming the registry, with the huge epoch: answered on their merits.
    let made_up: String = fleet
        .query_one(
            "SELECT outcome FROM snowflake_registry.renew('x', 'x', 1, 'x', 'x', repeat('0', 32), 1, 7, 0, 0, 0,
                     1000, (extract(epoch FROM clock_timestamp()) * 1000)::bigint,
                     (SELECT registry_id FROM snowflake_registry.identity()), $1)",
            &[&huge],
        )
        .unwrap()
        .get(0);
    assert_eq!(made_up, "lost");
    let other: String = fleet
        .query_one(
            "SELECT outcome FROM snowflake_registry.claim($1, $2, 5432, $3, $4, $5, $6, 1,
                     7, 7, true, 5000, (extract(epoch FROM clock_timestamp()) * 1000)::bigint, NULL, NULL,
                     (SELECT registry_id FROM snowflake_registry.identity()), $7)",
            &[&OTHER.sysid, &OTHER.host, &OTHER.dir, &OTHER.boot, &OTHER.run, &OTHER.secret, &huge],
        )
        .unwrap()
        .get(0);
    assert_eq!(other, "held");
    // The holder itself, bringing it, renews as ever; and again with the epoch it really saw.
    assert_eq!(
        renew_7_naming_the_registry(&mut fleet, fence, huge),
        "renewed"
    );
    assert_eq!(
        renew_7_naming_the_registry(&mut fleet, fence + 1, before),
        "renewed"
    );
    assert_eq!(epoch(&mut fleet), before);
}

/// Renews the lease of worker id 7 through `fleet` as the start `boot-h` (the tests' identity
/// and secret), with `fence` and `request`, saying its lease ran out: the outcome.
fn renew_7_as_the_same_start(fleet: &mut postgres::Client, fence: i64, request: i64) -> String {
    renew_7_for(fleet, fence, request, 5000)
}

/// As above, for a lease of `ttl_ms`.
fn renew_7_for(fleet: &mut postgres::Client, fence: i64, request: i64, ttl_ms: i32) -> String {
    fleet
        .query_one(
            "SELECT outcome FROM snowflake_registry.renew('sysid-h', 'host-h', 5432, '/h', 'boot-h',
                     'a-secret-of-the-holder-32-chars!', 1, 7, $1, $2, 0, $3,
                     (extract(epoch FROM clock_timestamp()) * 1000)::bigint, NULL, NULL, true)",
            &[&fence, &request, &ttl_ms],
        )
        .unwrap()
        .get(0)
}

/// A renewal asking for a shorter lease than the one the registry last granted (a lowered
/// `snowflake.lease_ttl` or lock_delay) does not end the registry's lease before that one: the
/// holder may not have heard this answer, and still counts on the longer lease.
#[test]
fn a_renewal_for_a_shorter_lease_never_ends_the_one_granted_before() {
    let registry = registry("handover-shorter-registry");
    let mut fleet = connect_as(&registry, "postgres", "fleet");
    let mut r = registry.connect();
    let fence = claim_7_as_the_same_start(&mut fleet, None).1.unwrap();
    let granted_until: String =
        r.scalar("SELECT expires_at::text FROM snowflake_registry.leases WHERE worker = 7");
    assert_eq!(renew_7_for(&mut fleet, fence, 110, 1000), "renewed");
    let kept: bool = r.query_one(
        "SELECT expires_at >= $1::text::timestamptz FROM snowflake_registry.leases WHERE worker = 7",
        &[&granted_until],
    )
    .unwrap()
    .get(0);
    assert!(kept, "the renewal shortened the lease granted before");
}

/// A claim made to wait again across a restart of the registry's server (a new incarnation)
/// leaves the holder's request as it was: the holder's renewal whose answer was lost, asked
/// again, is still known as itself, not taken for a copy's memory.
#[test]
fn a_claim_waiting_again_keeps_the_holders_request_in_flight_known() {
    let registry = registry("handover-keeps-request-registry");
    let mut fleet = connect_as(&registry, "postgres", "fleet");
    let mut r = registry.connect();
    let fence = claim_7_as_the_same_start(&mut fleet, None).1.unwrap();
    // A renewal whose answer is lost; then the holder stalls, its lease runs out, and another
    // server claims the worker id.
    assert_eq!(renew_7_as_the_same_start(&mut fleet, fence, 101), "renewed");
    the_lease_of_7_ran_out(&mut r);
    let token = claim_7_by(&mut fleet, &OTHER, None, None).token.unwrap();
    the_claim_of_7_waited_out(&mut r);
    let (mut fleet, mut r) = the_registrys_server_restarted(&registry);
    assert_eq!(confirm_7_by(&mut fleet, &OTHER, token, 300).outcome, "wait");
    // The holder resumes and asks again. Its request is still known, but the lease it renewed
    // ran out here: a repeat no longer renews a lease that ran out (it may have been waited out
    // and taken in a history a restore lost, since 0.5.0); the holder claims again.
    assert_eq!(renew_7_as_the_same_start(&mut fleet, fence, 101), "lost");
    let last_request: i64 =
        r.scalar("SELECT last_request FROM snowflake_registry.leases WHERE worker = 7");
    assert_eq!(last_request, 101);
}

/// The repeat of a lost confirmation runs the lease from the repeat, as the keeper counts it
/// (from the attempt that was answered): the lease the registry has never ends before the one
/// the keeper believes it holds.
#[test]
fn a_confirmation_granted_again_runs_its_lease_from_the_repeat() {
    let registry = registry("handover-lost-confirm-ttl-registry");
    let mut fleet = connect_as(&registry, "postgres", "fleet");
    let mut r = registry.connect();
    let token = claimed_after_a_reboot(&mut fleet, &mut r);
    the_claim_of_7_waited_out(&mut r);
    assert_eq!(
        confirm_7_as(&mut fleet, "boot-h2", "run-h2", token, 51).outcome,
        "granted"
    );
    // The first answer was lost 4 s ago, of a 5 s lease.
    r.batch_execute(
        "UPDATE snowflake_registry.leases SET expires_at = now() + interval '1 s' WHERE worker = 7",
    )
    .unwrap();
    let again = confirm_7_as(&mut fleet, "boot-h2", "run-h2", token, 51);
    assert_eq!(again.outcome, "granted", "{again:?}");
    let runs_for: bool = r.scalar(
        "SELECT expires_at >= now() + interval '4 s' FROM snowflake_registry.leases WHERE worker = 7",
    );
    assert!(
        runs_for,
        "the lease still ends a TTL after the first answer"
    );
}

/// A repeat of a lost confirmation whose lease ran out unused (another server may have claimed
/// it since, or a registry whose server changed may have lost a history where one took it) is
/// not granted: it claims again and waits out the lock-delay, then is granted.
#[test]
fn a_confirmation_whose_answer_was_lost_waits_again_once_its_lease_ran_out_unused() {
    let registry = registry("handover-lost-confirm-ran-out-registry");
    let mut fleet = connect_as(&registry, "postgres", "fleet");
    let mut r = registry.connect();
    let token = claimed_after_a_reboot(&mut fleet, &mut r);
    the_claim_of_7_waited_out(&mut r);
    let lost = confirm_7_as(&mut fleet, "boot-h2", "run-h2", token, 51);
    assert_eq!(lost.outcome, "granted", "{lost:?}");
    the_lease_of_7_ran_out(&mut r);
    let again = confirm_7_as(&mut fleet, "boot-h2", "run-h2", token, 51);
    assert_eq!(again.outcome, "wait", "{again:?}");
    let new_token = again.token.unwrap();
    assert_ne!(new_token, token);
    let early = confirm_7_as(&mut fleet, "boot-h2", "run-h2", new_token, 53);
    assert_eq!(early.outcome, "wait", "{early:?}");
    the_claim_of_7_waited_out(&mut r);
    let granted = confirm_7_as(&mut fleet, "boot-h2", "run-h2", new_token, 53);
    assert_eq!(granted.outcome, "granted", "{granted:?}");
}

/// When the answer that claimed it again (its new token) is lost too, the confirmation sent
/// once more under the old token is told to wait under the new one: not `lost` (the keeper
/// would claim again with the fence it had, and be taken for a copy's memory).
#[test]
fn a_confirmation_under_a_token_the_registry_replaced_waits_under_the_new_one() {
    let registry = registry("handover-replaced-token-registry");
    let mut fleet = connect_as(&registry, "postgres", "fleet");
    let mut r = registry.connect();
    let token = claimed_after_a_reboot(&mut fleet, &mut r);
    the_claim_of_7_waited_out(&mut r);
    confirm_7_as(&mut fleet, "boot-h2", "run-h2", token, 51);
    the_lease_of_7_ran_out(&mut r);
    let replaced = confirm_7_as(&mut fleet, "boot-h2", "run-h2", token, 51);
    assert_eq!(replaced.outcome, "wait", "{replaced:?}");
    let once_more = confirm_7_as(&mut fleet, "boot-h2", "run-h2", token, 51);
    assert_eq!(once_more.outcome, "wait", "{once_more:?}");
    assert_eq!(once_more.token, replaced.token);
}

/// A later start of a server whose claim was overtaken by another server's while it could not
/// reach the registry (the earlier start it replaces long gone, its lease run out) is told
/// `lost`, and claims another worker id: it is not taken for a copy of the server, which would
/// stop it for good. (A copy is a start that renewed the lease during the wait: see
/// a_copy_of_a_server_with_its_identity_never_takes_turns_with_it.)
#[test]
fn a_confirmation_whose_claim_was_overtaken_is_lost_and_not_taken_for_a_copy() {
    let registry = registry("handover-overtaken-registry");
    let mut fleet = connect_as(&registry, "postgres", "fleet");
    let mut r = registry.connect();
    let token = claimed_after_a_reboot(&mut fleet, &mut r);
    the_claim_of_7_waited_out(&mut r);
    assert_eq!(claim_7_by(&mut fleet, &OTHER, None, None).outcome, "wait");
    let a = confirm_7_as(&mut fleet, "boot-h2", "run-h2", token, 51);
    assert_eq!(a.outcome, "lost", "{a:?}");
}

/// A claim of the same start bringing the fence of its grant (a keeper whose grant was not yet
/// put to use, or restarted after an error, claims with it) is renewal by another road, and,
/// like a renewal, continues only a lease that still runs here: a lease that ran out is not
/// granted again at once on that fence, which may match in a history a registry restored
/// without a trace lost (where another server waited the lease out and took the worker id);
/// the claim waits out the lock-delay. (The lease model's rule, since 0.5.0; before, only a
/// registry whose server had just changed made it wait. The holder is played through the
/// registry's own functions, as the fleet's role.)
#[test]
fn a_claim_bringing_the_fence_of_a_lease_that_ran_out_waits() {
    let registry = registry("handover-fence-claim-registry");
    let mut fleet = connect_as(&registry, "postgres", "fleet");
    let (granted, fence) = claim_7_as_the_same_start(&mut fleet, None);
    assert_eq!(granted, "granted");
    let mut r = registry.connect();
    // While the lease runs, the same claim is granted at once: it is this start's.
    let (again, fence) = claim_7_as_the_same_start(&mut fleet, fence);
    assert_eq!(again, "granted");
    the_lease_of_7_ran_out(&mut r);
    let (after_it_ran_out, _) = claim_7_as_the_same_start(&mut fleet, fence);
    assert_eq!(after_it_ran_out, "wait");
}

/// A holder whose registry was restored from a copy that has its lease run out (the holder
/// stalled when the copy was taken, and renewed since in the history the restore lost) claims
/// again rather than renew (a renewal arriving after the lease's end here is refused: in the
/// history the registry lost, another server may have waited it out), waits out the
/// lock-delay, and gets its worker id back, its ids above every one it issued, with nothing run
/// on the registry. (Before 0.5.0 the holder's word that its own lease never ran out was
/// believed over the copy's; the lease model showed that a renewal delayed past the lease's
/// end defeats it. The copy's lease is written into the row by hand, as the registry's owner.)
#[test]
fn a_holder_whose_restored_registrys_copy_has_its_lease_run_out_claims_it_again_through_the_lock_delay_above_its_ids(
) {
    let registry = registry("handover-ran-on-registry");
    // Long leases, so that a busy machine never lets this one run out by itself.
    registry
        .connect()
        .batch_execute("SELECT snowflake_registry.set_limits(interval '20 s')")
        .unwrap();
    let holder = leasing_server(
        "handover-ran-on-holder",
        &registry,
        &["snowflake.worker_range=7", "snowflake.lease_ttl=20s"],
    );
    assert_eq!(leased(&holder), 7);
    let before = mint(&holder, 100);
    let mut r = registry.connect();
    r.batch_execute(
        "UPDATE snowflake_registry.leases SET expires_at = now() - interval '1 s' WHERE worker = 7",
    )
    .unwrap();
    it_claims_7_again_through_the_lock_delay(&holder, &mut r, PATIENCE);
    it_mints_with_7_again_above(&holder, &before);
}

/// A registry installed from `sql` (the registry.sql of an earlier format), as its
/// documentation said then, with the fleet's role and the tests' lock-delay.
fn registry_of_an_earlier_format(name: &str, sql: &str) -> Cluster {
    let registry = Cluster::new(name, &["shared_preload_libraries=", "max_connections=100"]);
    registry.start();
    registry.connect().batch_execute(sql).unwrap();
    registry
        .connect()
        .batch_execute(&format!(
            "CREATE ROLE fleet LOGIN;
             SELECT snowflake_registry.grant_fleet('fleet');
             SELECT snowflake_registry.set_limits(interval '{TEST_LOCK_DELAY_S} s');"
        ))
        .unwrap();
    registry
}

/// The registry as it was before `renew` took the holder's word that its lease ran out, its
/// fleet's role given what grant_fleet gave then. A server leases there and mints (its keeper
/// renews in the old form when the new one is missing). Then this registry.sql is run over it
/// by its owner, as after an upgrade: the fleet's role may run the new `renew` (the file gives
/// the fleet's roles their grants again: the new signature is a new function), the server
/// renews through it and keeps its worker id, and a renewal in the old form, as a server older
/// than the flag sends it, is still answered.
#[test]
fn a_registry_upgraded_in_place_keeps_its_fleets_grants_and_its_holders() {
    let registry = registry_of_an_earlier_format(
        "handover-upgraded-registry",
        include_str!("fixtures/registry-before-ran-out.sql"),
    );
    let mut r = registry.connect();
    let server = leasing_server(
        "handover-upgraded-server",
        &registry,
        &["snowflake.worker_range=7"],
    );
    assert_eq!(leased(&server), 7);
    assert!(mint(&server, 100).iter().all(|&id| worker_of(id) == 7));
    let fence = |r: &mut postgres::Client| -> i64 {
        r.scalar("SELECT fence FROM snowflake_registry.leases WHERE worker = 7")
    };
    r.batch_execute(REGISTRY_SQL).unwrap();
    let upgraded_at = fence(&mut r);
    let may: bool = r.scalar(
        "SELECT has_function_privilege('fleet',
           'snowflake_registry.renew(text, text, integer, text, text, text, integer, integer, bigint, bigint, bigint, integer, bigint, uuid, bigint, boolean)',
           'EXECUTE')",
    );
    assert!(may, "the fleet's role lost its grant on renew");
    wait_until("a renewal through the new renew", PATIENCE, || {
        fence(&mut r) > upgraded_at
    });
    assert!(
        !server.log().contains("no longer holds worker id"),
        "{}",
        server.log()
    );
    assert!(mint(&server, 100).iter().all(|&id| worker_of(id) == 7));
    let old_form: String = connect_as(&registry, "postgres", "fleet")
        .query_one(
            "SELECT outcome FROM snowflake_registry.renew('x', 'x', 0, 'x', 'x', $1, 1, 8, 0, 0, 0, 5000,
                     (extract(epoch FROM clock_timestamp()) * 1000)::bigint, NULL, NULL)",
            &[&FORGED_SECRET],
        )
        .unwrap()
        .get(0);
    assert_eq!(old_form, "lost");
}

#[test]
fn a_claimer_whose_clock_is_an_hour_behind_the_registrys_is_refused_until_it_is_set_right() {
    // The registry's clock an hour ahead, rather than the server's an hour behind: on
    // PostgreSQL 14 and 15 the postmaster starts background workers from a signal handler, and
    // libfaketime leaves processes forked there on the real clock, so the server's lease keeper
    // would not see a faked clock. The difference is the same.
    let mut registry = Cluster::new(
        "handover-skew-registry",
        &["shared_preload_libraries=", "max_connections=100"],
    );
    registry.use_faketime();
    registry.set_clock_offset(3600);
    registry.start();
    install_registry(&registry, "postgres");
    let late = leasing_server("handover-skew-late", &registry, &[]);
    let status = wait_for_standing(&late, "skew");
    assert!(status.contains("behind the registry's"), "{status}");
    let e = error_of(&mut late.connect(), "SELECT snowflake_nextval()");
    assert_eq!(e.code, "55000", "{e:?}");
    assert!(e.message.contains("behind the registry's"), "{e:?}");
    assert!(e.hint.unwrap_or_default().contains("NTP"));
    registry.set_clock_offset(0);
    leased(&late);
    assert!(!mint(&late, 10).is_empty());
}

#[test]
fn a_registry_changed_by_reload_to_one_without_the_old_leases_is_refused_after_the_lease_is_given_back(
) {
    let old = registry("handover-switch-old");
    let empty = registry("handover-switch-empty");
    let mover = leasing_server("handover-switch-mover", &old, &["snowflake.worker_range=7"]);
    assert_eq!(leased(&mover), 7);
    let stayer = leasing_server(
        "handover-switch-stayer",
        &old,
        &["snowflake.worker_range=7"],
    );
    wait_for_standing(&stayer, "exhausted");
    let moving = Minter::start(mover.conninfo("postgres"), 100);
    let staying = Minter::start(stayer.conninfo("postgres"), 100);
    wait_until("some ids from the mover", PATIENCE, || {
        old.connect()
            .scalar("SELECT last_mark IS NOT NULL FROM snowflake_registry.leases WHERE worker = 7")
    });
    let setting = registry_setting(&empty, "fleet");
    let (name, value) = setting.split_once('=').unwrap();
    mover.set_and_reload(name, value);
    // The mover gives its lease back in the old registry first (the server still there takes
    // it at once, above its ids), and the new registry, which does not carry the old one's
    // leases, refuses it.
    let status = wait_for_standing(&mover, "foreign");
    assert!(status.contains("neither imported"), "{status}");
    wait_for_standing(&stayer, "held");
    let before = staying.got();
    wait_until("the stayer to mint under its lease", PATIENCE, || {
        staying.got() > before
    });
    // The mover's keeper keeps asking the new registry; every id asked for meanwhile is
    // refused with the way out, not only the first.
    let mut client = mover.connect();
    let until = staying.got() + 200;
    let mut refused = 0;
    wait_until("40 refusals while the stayer mints", PATIENCE, || {
        refused += 1;
        let e = error_of(&mut client, "SELECT snowflake_nextval()");
        assert_eq!(e.code, "55000", "{e:?}");
        assert!(
            e.hint
                .as_deref()
                .unwrap_or_default()
                .contains("snowflake_registry.accept"),
            "{e:?}"
        );
        refused >= 40 && staying.got() >= until
    });
    let moved = moving.finish();
    let stayed = staying.finish();
    assert!(
        !stayed.ids.is_empty(),
        "the server on the old registry never minted"
    );
    assert_one_holder_at_a_time(&[("mover", &moved), ("stayer", &stayed)], SLACK);
}

#[test]
fn a_fleet_moves_to_a_new_registry_one_server_at_a_time_while_it_mints() {
    let old = registry("handover-move-old");
    let new = registry("handover-move-new");
    let servers: Vec<Cluster> = (0..3)
        .map(|i| {
            leasing_server(
                &format!("handover-move-{i}"),
                &old,
                &["snowflake.worker_range=10-12"],
            )
        })
        .collect();
    let workers: Vec<i32> = servers.iter().map(leased).collect();
    let minters: Vec<Minter> = servers
        .iter()
        .map(|s| Minter::start(s.conninfo("postgres"), 50))
        .collect();
    // The documented steps: export from the old registry into the new one...
    let new_id: String = new
        .connect()
        .scalar("SELECT registry_id::text FROM snowflake_registry.identity()");
    let export = |old: &Cluster, new: &Cluster| {
        let doc: String = old
            .connect()
            .query_one(
                "SELECT snowflake_registry.export($1::text::uuid)::text",
                &[&new_id],
            )
            .unwrap()
            .get(0);
        new.connect()
            .query_one("SELECT snowflake_registry.import($1::text::jsonb)", &[&doc])
            .unwrap();
    };
    export(&old, &new);
    // ... then each server in turn is pointed at the new registry by a reload.
    let setting = registry_setting(&new, "fleet");
    let (name, value) = setting.split_once('=').unwrap();
    for (server, &worker) in servers.iter().zip(&workers) {
        server.set_and_reload(name, value);
        let mut n = new.connect();
        wait_until("the server's lease in the new registry", PATIENCE, || {
            n.query_one(
                "SELECT count(*) = 1 FROM snowflake_registry.lease_list
                  WHERE worker = $1 AND port = $2 AND state = 'held'",
                &[&worker, &(server.port as i32)],
            )
            .unwrap()
            .get(0)
        });
        assert_eq!(
            leased(server),
            worker,
            "a server changed worker id as it moved"
        );
    }
    // Everyone moved: export and import again, then retire the old registry.
    export(&old, &new);
    new.connect()
        .batch_execute("SELECT snowflake_registry.retire_predecessor()")
        .unwrap();
    let minted: Vec<Minted> = minters.into_iter().map(Minter::finish).collect();
    for (m, server) in minted.iter().zip(&servers) {
        assert!(
            m.ids.len() > 500,
            "server {} minted {} ids",
            server.port,
            m.ids.len()
        );
        let ids: Vec<i64> = m.ids.iter().map(|(_, id)| *id).collect();
        assert_strictly_increasing(&ids);
    }
    let named: Vec<(&str, &Minted)> = minted.iter().map(|m| ("a server", m)).collect();
    let handovers = assert_one_holder_at_a_time(&named, SLACK);
    assert!(handovers.values().all(|&n| n == 0), "{handovers:?}");
}

#[test]
fn the_fleets_role_can_neither_write_the_registry_nor_take_a_worker_id_a_server_holds() {
    let registry = registry("handover-fleet-registry");
    let victim = leasing_server(
        "handover-fleet-victim",
        &registry,
        &["snowflake.worker_range=7"],
    );
    assert_eq!(leased(&victim), 7);
    let minting = Minter::start(victim.conninfo("postgres"), 100);
    let mut fleet = connect_as(&registry, "postgres", "fleet");
    for sql in [
        "UPDATE snowflake_registry.leases SET host = 'elsewhere', last_mark = NULL WHERE worker = 7",
        "DELETE FROM snowflake_registry.leases WHERE worker = 7",
        "INSERT INTO snowflake_registry.leases (worker) VALUES (900)",
        "UPDATE snowflake_registry.config SET lock_delay_ms = 5000",
        "SELECT snowflake_registry.release_worker(7)",
        "SELECT snowflake_registry.set_limits(interval '1 hour')",
    ] {
        let e = error_of(&mut fleet, sql);
        assert_eq!(e.code, "42501", "{sql}: {e:?}");
    }
    // What it can see of the holder, it uses to claim worker 7 in the victim's name: without
    // the victim's secret the row is someone else's, and held (since 0.5.0: before, the claim
    // waited out the lock-delay while the victim renewed, and its confirmation failed).
    let lease = fleet
        .query_one(
            "SELECT system_identifier, host, port, data_directory FROM snowflake_registry.lease_list WHERE worker = 7",
            &[],
        )
        .unwrap();
    let (sysid, host, port, dir): (String, String, i32, String) =
        (lease.get(0), lease.get(1), lease.get(2), lease.get(3));
    let forged_secret = "0123456789abcdef0123456789abcdef";
    let claim = fleet
        .query_one(
            "SELECT outcome, token, wait_ms FROM snowflake_registry.claim($1, $2, $3, $4, 'forged', 'elsewhere', $5, 1,
                     7, 7, true, 5000, (extract(epoch FROM clock_timestamp()) * 1000)::bigint, NULL, NULL, NULL, NULL)",
            &[&sysid, &host, &port, &dir, &forged_secret],
        )
        .unwrap();
    assert_eq!(claim.get::<_, String>(0), "held");
    let unclaimed: bool = registry
        .connect()
        .scalar("SELECT pending_key IS NULL FROM snowflake_registry.leases WHERE worker = 7");
    assert!(unclaimed, "the forged claim was recorded");
    assert_eq!(leased(&victim), 7);
    let minted = minting.finish();
    assert_eq!(minted.refused, 0, "{:?}", minted.last_refusal);
    assert!(!minted.ids.is_empty());
}

#[test]
fn the_fleets_role_knowing_a_holders_identity_boot_and_fence_can_neither_take_nor_give_back_its_worker_id(
) {
    let registry = registry("handover-pose-registry");
    let victim = leasing_server(
        "handover-pose-victim",
        &registry,
        &["snowflake.worker_range=7"],
    );
    assert_eq!(leased(&victim), 7);
    // The victim's keeper is stopped meanwhile, so that the fence stays the one read.
    let keeper = keeper_pid(&victim);
    signal(&keeper, "-STOP");
    let mut r = registry.connect();
    let holder = what_the_registry_knows_of_the_holder_of_7(&mut r);
    let mut fleet = connect_as(&registry, "postgres", "fleet");
    posing_as_an_earlier_start_of_the_holder_gets_no_lease_at_once(&mut fleet, &holder);
    giving_back_or_renewing_in_the_holders_name_is_refused_and_changes_nothing(
        &mut fleet, &mut r, &holder,
    );
    signal(&keeper, "-CONT");
    the_victim_renews_as_before_and_mints(&victim, &mut r, holder.fence);
}

/// Everything the registry knows of a holder but its secret (which only its data directory
/// holds): its identity, this start's boot, its machine run, its fence.
struct Holder {
    sysid: String,
    host: String,
    port: i32,
    dir: String,
    boot: String,
    host_run: String,
    fence: i64,
}

/// A secret that is not the holder's.
const FORGED_SECRET: &str = "0123456789abcdef0123456789abcdef";

/// What the registry (through `r`) knows of the holder of worker id 7.
fn what_the_registry_knows_of_the_holder_of_7(r: &mut postgres::Client) -> Holder {
    let row = r
        .query_one(
            "SELECT system_identifier, host, port, data_directory, boot, host_run, fence
               FROM snowflake_registry.leases WHERE worker = 7",
            &[],
        )
        .unwrap();
    Holder {
        sysid: row.get(0),
        host: row.get(1),
        port: row.get(2),
        dir: row.get(3),
        boot: row.get(4),
        host_run: row.get(5),
        fence: row.get(6),
    }
}

/// Posing as an earlier start of the holder on its machine run: no lease at once (without the
/// holder's secret the lease is someone else's, held).
fn posing_as_an_earlier_start_of_the_holder_gets_no_lease_at_once(
    fleet: &mut postgres::Client,
    h: &Holder,
) {
    let claimed: String = fleet
        .query_one(
            "SELECT outcome FROM snowflake_registry.claim($1, $2, $3, $4, 'an-earlier-start', $5, $6, 1,
                     7, 7, true, 5000, (extract(epoch FROM clock_timestamp()) * 1000)::bigint, NULL, NULL, NULL, NULL)",
            &[&h.sysid, &h.host, &h.port, &h.dir, &h.host_run, &FORGED_SECRET],
        )
        .unwrap()
        .get(0);
    assert_eq!(claimed, "held");
}

/// Giving the lease back, or renewing it, in the holder's name: refused, nothing changes (the
/// registry, through `r`, still has the fence read and the lease not released).
fn giving_back_or_renewing_in_the_holders_name_is_refused_and_changes_nothing(
    fleet: &mut postgres::Client,
    r: &mut postgres::Client,
    h: &Holder,
) {
    let released: String = fleet
        .query_one(
            "SELECT outcome FROM snowflake_registry.release($1, $2, $3, $4, $5, $6, 7, $7, 0, NULL, NULL)",
            &[&h.sysid, &h.host, &h.port, &h.dir, &h.boot, &FORGED_SECRET, &h.fence],
        )
        .unwrap()
        .get(0);
    assert_eq!(released, "lost");
    let renewed: String = fleet
        .query_one(
            "SELECT outcome FROM snowflake_registry.renew($1, $2, $3, $4, $5, $6, 1, 7, $7, 1, 0, 5000,
                     (extract(epoch FROM clock_timestamp()) * 1000)::bigint, NULL, NULL)",
            &[&h.sysid, &h.host, &h.port, &h.dir, &h.boot, &FORGED_SECRET, &h.fence],
        )
        .unwrap()
        .get(0);
    assert_eq!(renewed, "lost");
    let (still_fence, released_at_null): (i64, bool) = {
        let row = r
            .query_one(
                "SELECT fence, released_at IS NULL FROM snowflake_registry.leases WHERE worker = 7",
                &[],
            )
            .unwrap();
        (row.get(0), row.get(1))
    };
    assert_eq!((still_fence, released_at_null), (h.fence, true));
}

/// The victim renews as before, past `fence` (its claim-in-waiting by the poser is cleared),
/// and mints with worker id 7.
fn the_victim_renews_as_before_and_mints(victim: &Cluster, r: &mut postgres::Client, fence: i64) {
    wait_until("a renewal by the victim", PATIENCE, || {
        r.scalar::<i64>("SELECT fence FROM snowflake_registry.leases WHERE worker = 7") > fence
    });
    assert_eq!(leased(victim), 7);
    assert!(mint(victim, 100).iter().all(|&id| worker_of(id) == 7));
}

#[test]
fn a_renewal_whose_answer_was_lost_is_answered_again_and_not_taken_for_a_copy() {
    let registry = registry("handover-lost-answer-registry");
    let holder = leasing_server(
        "handover-lost-answer",
        &registry,
        &["snowflake.worker_range=7", "snowflake.lease_ttl=5s"],
    );
    assert_eq!(leased(&holder), 7);
    // The registry stalls: every call waits on its configuration row, longer than the keeper
    // waits for an answer.
    let mut stall = registry.connect();
    stall
        .batch_execute("BEGIN; SELECT * FROM snowflake_registry.config FOR UPDATE")
        .unwrap();
    let mut r = registry.connect();
    wait_until(
        "a renewal waiting on the stalled registry",
        PATIENCE,
        || {
            r.scalar::<i64>(
                "SELECT count(*) FROM pg_stat_activity
              WHERE usename = 'fleet' AND wait_event_type = 'Lock' AND query LIKE '%renew%'",
            ) > 0
        },
    );
    let fence: i64 = r.scalar("SELECT fence FROM snowflake_registry.leases WHERE worker = 7");
    let since: String =
        r.scalar("SELECT since::text FROM snowflake_registry.leases WHERE worker = 7");
    wait_for_standing(&holder, "unreachable");
    // The stall ends: the renewal the keeper gave up on commits, unanswered. The keeper asks
    // again; the registry answers as it did, and the holder keeps its worker id.
    stall.batch_execute("COMMIT").unwrap();
    wait_until("the lost renewal and its repeat", PATIENCE, || {
        r.scalar::<i64>("SELECT fence FROM snowflake_registry.leases WHERE worker = 7") > fence
    });
    let status = wait_for_standing(&holder, "held");
    assert!(!status.contains("duplicate"), "{status}");
    // The same lease all along: never taken for a copy's, nor granted anew after a wait.
    let (same_since, never_displaced): (String, bool) = {
        let row = r
            .query_one(
                "SELECT since::text, displaced_at IS NULL AND released_at IS NULL
                   FROM snowflake_registry.leases WHERE worker = 7",
                &[],
            )
            .unwrap();
        (row.get(0), row.get(1))
    };
    // (Granted anew, after a wait, when the stall outlasted the lease: a renewal, or its
    // repeat, arriving after the lease's end no longer renews it, since 0.5.0.)
    let _ = (same_since, since);
    assert!(never_displaced, "the lease was marked as taken by a copy");
    assert!(
        !holder.log().contains("two starts"),
        "the server was taken for a copy of itself"
    );
    assert!(mint(&holder, 100).iter().all(|&id| worker_of(id) == 7));
}

/// As above, for a renewal bringing a fence the registry lost (restored from an older copy: its
/// fence set back by hand, as the registry's owner): its answer, `lost`, is lost too (the
/// registry stalls past the keeper's wait for it), and asked again it is answered `lost` as the
/// first time, never taken for a copy of the holder's memory (`duplicate`, which stops a server
/// for good); the holder claims its worker id again through the lock-delay and mints above its
/// ids. (Until registry format 3 the registry believed such a renewal after an administrator's
/// recover().)
#[test]
fn a_renewal_bringing_a_fence_the_registry_lost_whose_answer_was_lost_is_not_taken_for_a_copy() {
    let registry = registry("handover-lost-fence-registry");
    // Leases long enough to outlast the stall below.
    registry
        .connect()
        .batch_execute("SELECT snowflake_registry.set_limits(interval '20 s')")
        .unwrap();
    let holder = leasing_server(
        "handover-lost-fence",
        &registry,
        &["snowflake.worker_range=7", "snowflake.lease_ttl=20s"],
    );
    assert_eq!(leased(&holder), 7);
    let before = mint(&holder, 100);
    // The registry stalls past the keeper's wait for an answer, not past the lease; meanwhile
    // it loses the holder's last two renewals.
    let mut stall = registry.connect();
    stall
        .batch_execute("BEGIN; SELECT * FROM snowflake_registry.config FOR UPDATE")
        .unwrap();
    let mut r = registry.connect();
    r.batch_execute("UPDATE snowflake_registry.leases SET fence = fence - 2 WHERE worker = 7")
        .unwrap();
    // The keeper gives up on its renewal and asks again on a new connection (it has one at a
    // time): two renewals wait on the stalled registry. The stall ends while the lease runs.
    wait_until(
        "two renewals waiting on the stalled registry",
        PATIENCE,
        || {
            r.scalar::<i64>(
                "SELECT count(*) FROM pg_stat_activity
              WHERE usename = 'fleet' AND wait_event_type = 'Lock' AND query LIKE '%renew%'",
            ) >= 2
        },
    );
    let running: bool =
        r.scalar("SELECT expires_at > now() FROM snowflake_registry.leases WHERE worker = 7");
    stall.batch_execute("COMMIT").unwrap();
    assert!(
        running,
        "the lease ran out during the stall: not the case under test"
    );
    it_claims_7_again_through_the_lock_delay(&holder, &mut r, PATIENCE);
    let never_displaced: bool = r.scalar(
        "SELECT displaced_at IS NULL AND contested_at IS NULL FROM snowflake_registry.leases
          WHERE worker = 7",
    );
    assert!(never_displaced, "the lease was marked as taken by a copy");
    it_mints_with_7_again_above(&holder, &before);
}

#[test]
fn a_worker_id_set_by_hand_that_another_server_holds_is_refused_naming_the_holder() {
    let registry = registry("handover-pinned-registry");
    let auto = leasing_server(
        "handover-pinned-auto",
        &registry,
        &["snowflake.worker_range=911"],
    );
    assert_eq!(leased(&auto), 911);
    let before = mint(&auto, 1000);
    // Set by hand at start, and by a reload: leased, and refused while another holds it.
    let pinned = leasing_server(
        "handover-pinned-hand",
        &registry,
        &["snowflake.worker_id=912"],
    );
    assert_eq!(leased(&pinned), 912);
    pinned.set_and_reload("snowflake.worker_id", "911");
    let status = wait_for_standing(&pinned, "taken");
    assert!(status.contains(&format!(":{}", auto.port)), "{status}");
    let e = error_of(&mut pinned.connect(), "SELECT snowflake_nextval()");
    assert_eq!(e.code, "55000", "{e:?}");
    assert!(e.message.contains("worker id 911 is held by"), "{e:?}");
    assert!(e.hint.unwrap_or_default().contains("snowflake.worker_id"));
    // 912, given back at the reload, is free again at once.
    let state: String = registry
        .connect()
        .scalar("SELECT state FROM snowflake_registry.lease_list WHERE worker = 912");
    assert_eq!(state, "released");
    // Once the holder stops cleanly, the server set by hand takes 911, above its ids.
    auto.stop();
    assert_eq!(leased(&pinned), 911);
    let after = mint(&pinned, 1000);
    let top = *before.iter().max().unwrap();
    assert!(after.iter().all(|&id| id > top && worker_of(id) == 911));
}

#[test]
fn a_lease_ttl_raised_by_reload_reaches_the_registry_at_the_next_renewal_without_a_gap() {
    let registry = registry("handover-ttl-registry");
    registry
        .connect()
        .batch_execute("SELECT snowflake_registry.set_limits(interval '2 min')")
        .unwrap();
    let server = leasing_server("handover-ttl", &registry, &["snowflake.lease_ttl=6s"]);
    let worker = leased(&server);
    let minting = Minter::start(server.conninfo("postgres"), 100);
    let ttl = |r: &Cluster| -> i32 {
        r.connect()
            .query_one(
                "SELECT ttl_ms FROM snowflake_registry.leases WHERE worker = $1",
                &[&worker],
            )
            .unwrap()
            .get(0)
    };
    assert_eq!(ttl(&registry), 6000);
    server.set_and_reload("snowflake.lease_ttl", "100s");
    wait_until("the new TTL in the registry", PATIENCE, || {
        ttl(&registry) == 100_000
    });
    // Past the old TTL, twice over: still minting, under the longer lease.
    let mut r = registry.connect();
    let since: std::time::SystemTime = r.scalar("SELECT now()");
    wait_until("12 s of the registry's clock", PATIENCE, || {
        r.query_one(
            "SELECT now() > $1::timestamptz + interval '12 s'",
            &[&since],
        )
        .unwrap()
        .get(0)
    });
    server.set_and_reload("snowflake.lease_ttl", "6s");
    wait_until("the shorter TTL in the registry", PATIENCE, || {
        ttl(&registry) == 6000
    });
    let minted = minting.finish();
    assert_eq!(
        minted.refused, 0,
        "minting stopped: {:?}",
        minted.last_refusal
    );
    assert!(minted.ids.len() > 1000);
}

#[test]
fn a_standby_promoted_with_a_short_ttl_supersedes_its_primary_only_once_the_primarys_own_lease_ended(
) {
    let registry = a_registry_whose_leases_may_last_20_s();
    let primary = leasing_server(
        "handover-standby-primary",
        &registry,
        &["snowflake.lease_ttl=20s"],
    );
    let worker = leased(&primary);
    let standby = its_standby_with_a_5_s_ttl_caught_up(&primary);
    the_standby_promoted_beside_its_healthy_primary_leases_a_worker_id_of_its_own(&standby, worker);
    let on_primary = Minter::start(primary.conninfo("postgres"), 100);
    let on_standby = Minter::start(standby.conninfo("postgres"), 100);
    let mut r = registry.connect();
    the_primary_renewing_its_lease_is_not_superseded(&mut r, worker);
    the_primary_dead_is_superseded_only_once_its_own_lease_ended(&primary, &mut r);
    let a = on_primary.finish();
    let b = on_standby.finish();
    assert_one_holder_at_a_time(&[("primary", &a), ("promoted standby", &b)], SLACK);
}

/// A registry whose lock-delay, the longest lease a server may take, is 20 s.
fn a_registry_whose_leases_may_last_20_s() -> Cluster {
    let registry = registry("handover-standby-registry");
    registry
        .connect()
        .batch_execute("SELECT snowflake_registry.set_limits(interval '20 s')")
        .unwrap();
    registry
}

/// A standby of `primary` that would lease for 5 s, started and caught up.
fn its_standby_with_a_5_s_ttl_caught_up(primary: &Cluster) -> Cluster {
    let standby = Cluster::standby_of(
        primary,
        "handover-standby-standby",
        &["snowflake.lease_ttl=5s"],
    );
    standby.start();
    standby.wait_caught_up(primary);
    standby
}

/// Promoted while its primary (holding `worker`) is healthy (an operator's mistake), the
/// standby leases a worker id of its own.
fn the_standby_promoted_beside_its_healthy_primary_leases_a_worker_id_of_its_own(
    standby: &Cluster,
    worker: i32,
) {
    standby.promote();
    let promoted_worker = leased(standby);
    assert_ne!(promoted_worker, worker);
}

/// The primary, renewing its lease on `worker` three times, is not superseded.
fn the_primary_renewing_its_lease_is_not_superseded(r: &mut postgres::Client, worker: i32) {
    let renewals: i64 = r
        .query_one(
            "SELECT fence FROM snowflake_registry.leases WHERE worker = $1",
            &[&worker],
        )
        .unwrap()
        .get(0);
    wait_until("three renewals of the primary's lease", PATIENCE, || {
        r.query_one(
            "SELECT fence FROM snowflake_registry.leases WHERE worker = $1",
            &[&worker],
        )
        .unwrap()
        .get::<_, i64>(0)
            >= renewals + 3
    });
    let superseded: i64 =
        r.scalar("SELECT count(*) FROM snowflake_registry.leases WHERE released_by = 'superseded'");
    assert_eq!(superseded, 0, "a healthy primary was superseded");
}

/// The primary dies: the registry (through `r`) releases its lease as superseded once its own
/// lease (20 s) has ended, not before.
fn the_primary_dead_is_superseded_only_once_its_own_lease_ended(
    primary: &Cluster,
    r: &mut postgres::Client,
) {
    primary.kill_postmaster();
    wait_until("the primary superseded", PATIENCE, || {
        r.scalar(
            "SELECT count(*) > 0 FROM snowflake_registry.leases WHERE released_by = 'superseded'",
        )
    });
    let ended_first: bool = r.scalar(
        "SELECT released_at >= expires_at FROM snowflake_registry.leases
          WHERE released_by = 'superseded'",
    );
    assert!(ended_first, "superseded before its lease ended");
}

/// A copy of a server started beside it with the same identity (as a VM snapshot booted
/// beside its original is): the same system identifier, host name, port and data directory,
/// in a mount and network namespace of its own. Stopped (kill -9) when dropped.
struct Copy {
    dir: std::path::PathBuf,
    original: std::path::PathBuf,
    port: u16,
}

impl Copy {
    /// A base backup of `original`, not started.
    fn of(original: &Cluster, name: &str) -> Copy {
        let copy = Cluster::standby_of(original, name, &[]);
        let dir = copy.dir.clone();
        // Kept: the Cluster would remove it when dropped.
        std::mem::forget(copy);
        std::fs::remove_file(dir.join("standby.signal")).unwrap();
        Copy {
            dir,
            original: original.dir.clone(),
            port: original.port,
        }
    }

    /// Starts it, its data directory mounted where the original's is, listening on the
    /// original's port, in namespaces of its own.
    fn start(&self) {
        for entry in std::fs::read_dir(&self.dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if name.starts_with(".s.PGSQL.") || name == "postmaster.pid" {
                std::fs::remove_file(path).unwrap();
            }
        }
        let conf = self.dir.join("postgresql.conf");
        let text = std::fs::read_to_string(&conf).unwrap();
        std::fs::write(
            &conf,
            format!(
                "{text}\nport = {}\nunix_socket_directories = '{}'\n",
                self.port,
                self.original.display()
            ),
        )
        .unwrap();
        let script = format!(
            "ip link set lo up && mount --bind '{copy}' '{orig}' && \
             runuser -u postgres -- '{pg_ctl}' -D '{orig}' -l '{orig}/server.log' -w -t 60 start >/dev/null",
            copy = self.dir.display(),
            orig = self.original.display(),
            pg_ctl = pg_bin("pg_ctl").display()
        );
        let out = std::process::Command::new("unshare")
            .args(["-m", "-n", "--propagation", "private", "sh", "-c", &script])
            .current_dir("/")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "the copy did not start: {}{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
            std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default()
        );
    }

    /// Its sessions come in through its socket, which is in its own data directory.
    fn conninfo(&self) -> String {
        format!(
            "host={} port={} user=postgres dbname=postgres connect_timeout=10",
            self.dir.display(),
            self.port
        )
    }

    fn connect(&self) -> postgres::Client {
        wait_for("a connection to the copy", PATIENCE, || {
            postgres::Client::connect(&self.conninfo(), postgres::NoTls).ok()
        })
    }

    fn standing(&self) -> String {
        registry_status(&mut self.connect())
    }

    fn kill(&self) {
        if let Ok(pid) = std::fs::read_to_string(self.dir.join("postmaster.pid")) {
            let pid = pid.lines().next().unwrap_or("").trim().to_string();
            let _ = std::process::Command::new("pkill")
                .args(["-9", "-P", &pid])
                .status();
            let _ = std::process::Command::new("kill")
                .args(["-9", &pid])
                .status();
            wait_until("the copy's processes to exit", PATIENCE, || {
                !std::path::Path::new(&format!("/proc/{pid}")).exists()
            });
            let _ = std::fs::remove_file(self.dir.join("postmaster.pid"));
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default()
    }
}

impl Drop for Copy {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "--- server log of the copy {} ---\n{}",
                self.dir.display(),
                self.log()
            );
        }
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The lease keeper's process of `cluster`.
fn keeper_pid(cluster: &Cluster) -> String {
    let out = std::process::Command::new("pgrep")
        .args([
            "-P",
            &cluster.postmaster_pid().to_string(),
            "-f",
            "snowflake_ext lease keeper",
        ])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn signal(pid: &str, signal: &str) {
    let status = std::process::Command::new("kill")
        .args([signal, pid])
        .status()
        .unwrap();
    assert!(status.success());
}

#[test]
fn a_copy_of_a_server_with_its_identity_never_takes_turns_with_it() {
    let registry = registry("handover-copy-registry");
    // Through the registry's socket, which a server in another network namespace reaches too.
    let setting = format!(
        "snowflake.registry=host={} port={} dbname=postgres user=fleet connect_timeout=5",
        registry.dir.display(),
        registry.port
    );
    let original = Cluster::new(
        "handover-copy-original",
        &[
            "snowflake.worker_id=auto",
            setting.as_str(),
            "snowflake.worker_range=7",
            "snowflake.lease_ttl=5s",
        ],
    );
    original.start();
    original
        .connect()
        .batch_execute("CREATE EXTENSION snowflake_ext")
        .unwrap();
    assert_eq!(leased(&original), 7);
    let copy = Copy::of(&original, "handover-copy-copy");
    let on_original = Minter::start(original.conninfo("postgres"), 100);
    let on_copy = Minter::start(copy.conninfo(), 100);
    // Started while the original renews: the copy waits out the lock-delay, the original
    // renews meanwhile and keeps the worker id, and the copy stops for good, saying why.
    copy.start();
    wait_until("the copy to stop", PATIENCE, || {
        copy.standing().starts_with("duplicate")
    });
    assert!(
        copy.standing().contains("a copy of this server runs"),
        "{}",
        copy.standing()
    );
    assert!(registry_status(&mut original.connect()).starts_with("held"));
    original.wait_for_log("a copy of this server runs");
    // Started again while the original's lease keeper is stopped (its lease runs out, and
    // its sessions stop minting): the copy takes the worker id once the lock-delay has
    // passed; the original, back, finds another start of itself in its place, and both stop.
    copy.kill();
    let keeper = keeper_pid(&original);
    signal(&keeper, "-STOP");
    copy.start();
    wait_until("the copy to hold worker 7", PATIENCE, || {
        copy.standing().starts_with("held")
    });
    let mut c = copy.connect();
    wait_until("the copy to mint", PATIENCE, || {
        c.query_one("SELECT snowflake_nextval()", &[]).is_ok()
    });
    signal(&keeper, "-CONT");
    let mut o = original.connect();
    wait_until("the original to stop for good", PATIENCE, || {
        registry_status(&mut o).starts_with("duplicate")
    });
    wait_until("the copy to stop for good too", PATIENCE, || {
        copy.standing().starts_with("duplicate")
    });
    let a = on_original.finish();
    let b = on_copy.finish();
    assert!(!a.ids.is_empty() && !b.ids.is_empty());
    let handovers = assert_one_holder_at_a_time(&[("original", &a), ("copy", &b)], SLACK);
    assert_eq!(handovers.get(&7), Some(&1), "{handovers:?}");
    // Neither mints again until an administrator acts.
    for e in [
        error_of(&mut o, "SELECT snowflake_nextval()"),
        error_of(&mut c, "SELECT snowflake_nextval()"),
    ] {
        assert_eq!(e.code, "55000", "{e:?}");
        assert!(e.message.contains("a copy of this server"), "{e:?}");
        assert!(e.hint.unwrap_or_default().contains("Stop the copy"));
    }
}

#[test]
fn every_secret_of_a_connection_string_is_refused_and_never_shown() {
    let server = started("handover-secrets", &[]);
    let mut c = server.connect();
    c.batch_execute("SET log_min_error_statement = panic")
        .unwrap();
    const SECRET: &str = "S3cret-9d1e";
    for (setting, key) in [
        (format!("host=reg dbname=r password={SECRET}"), "password"),
        (
            format!("host=reg dbname=r sslpassword={SECRET}"),
            "sslpassword",
        ),
        (
            format!("host=reg dbname=r oauth_client_secret={SECRET}"),
            "oauth_client_secret",
        ),
        (
            format!("host=reg dbname=r scram_client_key={SECRET}"),
            "scram_client_key",
        ),
        (
            format!("host=reg dbname=r scram_server_key={SECRET}"),
            "scram_server_key",
        ),
        (format!("postgresql://fleet:{SECRET}@reg/r"), "password"),
        (
            format!("postgresql://reg/r?sslpassword={SECRET}"),
            "sslpassword",
        ),
    ] {
        let e = error_of(
            &mut c,
            &format!("ALTER SYSTEM SET snowflake.registry = '{setting}'"),
        );
        assert_eq!(e.code, "22023", "{setting}: {e:?}");
        let said = format!("{e:?}");
        assert!(!said.contains(SECRET), "{said}");
        assert!(
            e.message.contains("holds a") && said.contains(key),
            "{said}"
        );
        assert!(
            e.hint.unwrap_or_default().contains("service file"),
            "{said}"
        );
    }
    // Written into the configuration by hand: refused at the reload, and not logged.
    let auto_conf = server.dir.join("postgresql.auto.conf");
    let conf = std::fs::read_to_string(&auto_conf).unwrap();
    std::fs::write(
        &auto_conf,
        format!("{conf}snowflake.registry = 'host=reg sslpassword={SECRET}'\n"),
    )
    .unwrap();
    c.batch_execute("SELECT pg_reload_conf()").unwrap();
    server.wait_for_log("snowflake.registry holds a secret (sslpassword)");
    assert!(!server.log().contains(SECRET));
}

/// A registry of format 2, frozen by a made-up epoch from the fleet's role (what anyone with
/// the fleet's password could do), serves again once `registry.sql` of format 3 is run on it:
/// nobody runs `recover()`, and its holder mints again.
#[test]
fn a_frozen_registry_of_format_2_serves_again_once_upgraded_with_nothing_else_run() {
    let registry = registry_of_an_earlier_format(
        "handover-format-2-registry",
        include_str!("fixtures/registry-format-2.sql"),
    );
    let mut r = registry.connect();
    let server = leasing_server(
        "handover-format-2-server",
        &registry,
        &["snowflake.worker_range=7"],
    );
    assert_eq!(leased(&server), 7);
    let before = mint(&server, 100);
    let forged: String = connect_as(&registry, "postgres", "fleet")
        .query_one(
            "SELECT outcome FROM snowflake_registry.renew('x', 'x', 0, 'x', 'x', $1, 1, 8, 0, 0, 0, 5000,
                     (extract(epoch FROM clock_timestamp()) * 1000)::bigint,
                     (SELECT registry_id FROM snowflake_registry.identity()), 9000000000000)",
            &[&FORGED_SECRET],
        )
        .unwrap()
        .get(0);
    assert_eq!(forged, "behind", "format 2 froze on a made-up epoch");
    wait_for_standing(&server, "frozen");
    r.batch_execute(REGISTRY_SQL).unwrap();
    let format: i32 = r.scalar("SELECT format FROM snowflake_registry.config");
    assert_eq!(format, 4);
    let mut c = server.connect();
    let id: i64 = wait_for("the holder to mint again", PATIENCE, || {
        c.query_one("SELECT snowflake_nextval()", &[])
            .ok()
            .map(|row| row.get(0))
    });
    assert_eq!(worker_of(id), 7);
    assert!(
        before.iter().all(|&b| b < id),
        "{id} is not above the ids minted before"
    );
}

/// Renews worker id 7 as the start `boot-h`, its clock `offset_ms` from the registry's, saying
/// whether its lease had run out on its own clock: the registry's answer.
fn renew_7_with(fleet: &mut postgres::Client, fence: i64, offset_ms: i64, ran_out: bool) -> String {
    fleet
        .query_one(
            "SELECT outcome FROM snowflake_registry.renew('sysid-h', 'host-h', 5432, '/h', 'boot-h',
                     'a-secret-of-the-holder-32-chars!', 1, 7, $1, 99, 0, 5000,
                     (extract(epoch FROM clock_timestamp()) * 1000)::bigint + $2, NULL, NULL, $3)",
            &[&fence, &offset_ms, &ran_out],
        )
        .unwrap()
        .get(0)
}

/// Whether the lease of worker id 7 still runs is read on the registry's clock, so a renewal
/// counts only while that clock is not behind the holder's by more than `max_skew`: a registry
/// failed over to a server whose clock is behind would otherwise renew a lease that ran out, by
/// the fleet's clocks, in the history it lost (found by review). One-sided: a renewal delayed
/// on its way (or queued behind the registry's lock) looks as if the holder's clock were
/// behind, and is renewed (found by the second review: every renewal queued for over a second
/// was refused).
#[test]
fn a_renewal_is_refused_by_a_registry_whose_clock_is_behind_the_holders_and_not_for_a_delay() {
    let registry = registry("handover-renew-skew-registry");
    let mut fleet = connect_as(&registry, "postgres", "fleet");
    let (outcome, fence) = claim_7_as_the_same_start(&mut fleet, None);
    assert_eq!(outcome, "granted");
    let fence = fence.unwrap();
    assert_eq!(renew_7_with(&mut fleet, fence, 60_000, false), "skew");
    // Nothing was written: the fence is the one the holder has, and it renews with it, its
    // request sent a while ago (its clock read then) or its clock behind.
    assert_eq!(renew_7_with(&mut fleet, fence, -1_500, false), "renewed");
    assert_eq!(
        renew_7_with(&mut fleet, fence + 1, -60_000, false),
        "renewed"
    );
    // A month behind (past what the lease list's skew column holds): answered all the same
    // (it was an error, integer out of range, found by review).
    assert_eq!(
        renew_7_with(&mut fleet, fence + 2, -30 * 86_400_000, false),
        "renewed"
    );
}

/// A holder whose lease ran out on its own clock (it stalled) is renewed only where this
/// incarnation of the registry recorded its last grant or renewal: a registry restored or
/// failed over since may have lost a history where another server waited the lease out and
/// took the worker id. Here the registry's server restarted (a new incarnation) and its row
/// still has the lease running (as a copy taken a while ago can): the holder is told `lost`.
/// A holder whose lease still runs on its clock renews there as before.
#[test]
fn a_holder_whose_lease_ran_out_on_its_clock_is_renewed_only_on_this_incarnations_record() {
    let registry = registry("handover-ran-out-registry");
    let mut fleet = connect_as(&registry, "postgres", "fleet");
    let (outcome, fence) = claim_7_as_the_same_start(&mut fleet, None);
    assert_eq!(outcome, "granted");
    let fence = fence.unwrap();
    assert_eq!(
        renew_7_with(&mut fleet, fence, 0, true),
        "renewed",
        "same incarnation"
    );
    let (mut fleet, mut r) = the_registrys_server_restarted(&registry);
    let running: bool =
        r.scalar("SELECT expires_at > now() FROM snowflake_registry.leases WHERE worker = 7");
    assert!(
        running,
        "the lease ran out during the restart: the test proves nothing"
    );
    assert_eq!(renew_7_with(&mut fleet, fence + 1, 0, true), "lost");
    let (mut fleet, _) = the_registrys_server_restarted(&registry);
    let (outcome, fence) = claim_7_as_the_same_start(&mut fleet, Some(fence + 1));
    assert_eq!(
        outcome, "granted",
        "the same start, within its lease, continues"
    );
    assert_eq!(
        renew_7_with(&mut fleet, fence.unwrap(), 0, false),
        "renewed"
    );
}

/// A confirmation takes no lease longer than the registry's lock-delay, as a claim and a
/// renewal do not: the next claimer waits the lock-delay, and the fleet's role confirming a
/// claim of its own would otherwise hold a worker id for as long as it likes (found by review).
#[test]
fn a_confirmation_for_a_lease_longer_than_the_lock_delay_is_refused() {
    let registry = registry("handover-confirm-ttl-registry");
    let mut fleet = connect_as(&registry, "postgres", "fleet");
    let mut r = registry.connect();
    assert_eq!(
        claim_7_by(&mut fleet, &OTHER, None, Some(1)).outcome,
        "granted"
    );
    the_lease_of_7_ran_out(&mut r);
    let a = claim_7_as(&mut fleet, "boot-h", "run-h", None, Some(2));
    assert_eq!(a.outcome, "wait", "{a:?}");
    the_claim_of_7_waited_out(&mut r);
    let confirm = |fleet: &mut postgres::Client, ttl_ms: i32| -> String {
        fleet
            .query_one(
                "SELECT outcome FROM snowflake_registry.confirm('sysid-h', 'host-h', 5432, '/h', 'boot-h',
                         'run-h', 'a-secret-of-the-holder-32-chars!', 1, 7, $1, $2,
                         (extract(epoch FROM clock_timestamp()) * 1000)::bigint, NULL, NULL, 3)",
                &[&a.token.unwrap(), &ttl_ms],
            )
            .unwrap()
            .get(0)
    };
    let lock_delay: i32 = r.scalar("SELECT lock_delay_ms FROM snowflake_registry.config");
    assert_eq!(confirm(&mut fleet, 2_000_000_000), "ttl");
    assert_eq!(confirm(&mut fleet, lock_delay + 1), "ttl");
    assert_eq!(confirm(&mut fleet, lock_delay), "granted");
}

/// The registry's incarnation, on which every hand-over at once rests, is the same in every
/// session, whatever its TimeZone and DateStyle: a worker id given back is handed over at once
/// to a claimer in a session set otherwise (found by review: it waited, and a DateStyle of
/// `SQL, DMY` made every claim fail).
#[test]
fn the_registrys_word_reads_the_same_in_a_session_of_another_time_zone_and_date_style() {
    let registry = registry("handover-datestyle-registry");
    let mut fleet = connect_as(&registry, "postgres", "fleet");
    let (outcome, fence) = claim_7_as_the_same_start(&mut fleet, None);
    assert_eq!(outcome, "granted");
    let released: String = fleet
        .query_one(
            "SELECT outcome FROM snowflake_registry.release('sysid-h', 'host-h', 5432, '/h', 'boot-h',
                     'a-secret-of-the-holder-32-chars!', 7, $1, 0, NULL, NULL)",
            &[&fence.unwrap()],
        )
        .unwrap()
        .get(0);
    assert_eq!(released, "released");
    fleet
        .batch_execute("SET TimeZone = 'Asia/Tokyo'; SET DateStyle = 'SQL, DMY'")
        .unwrap();
    assert_eq!(
        claim_7_by(&mut fleet, &OTHER, None, Some(4)).outcome,
        "granted"
    );
}

/// How many times the registry ran `function` (a signature), as its statistics count them.
fn calls_of(r: &mut postgres::Client, function: &str) -> i64 {
    r.query_one(
        "SELECT COALESCE((SELECT calls FROM pg_stat_user_functions
                           WHERE funcid = $1::text::regprocedure), 0)
           FROM pg_stat_clear_snapshot()",
        &[&function],
    )
    .unwrap()
    .get(0)
}

/// A server of this version calls the registry's grouped functions (registry format 4), not the
/// positional ones kept for servers before it: claim, renew and release, counted by the
/// registry's own statistics (track_functions).
#[test]
fn a_server_calls_the_registrys_grouped_functions_not_the_positional_ones() {
    let registry = registry("handover-grouped-registry");
    let mut r = registry.connect();
    r.batch_execute("ALTER ROLE fleet SET track_functions = 'all'")
        .unwrap();
    let server = leasing_server(
        "handover-grouped-server",
        &registry,
        &["snowflake.worker_range=7", "snowflake.lease_ttl=6s"],
    );
    assert_eq!(leased(&server), 7);
    let fence = |r: &mut postgres::Client| -> i64 {
        r.scalar("SELECT fence FROM snowflake_registry.leases WHERE worker = 7")
    };
    let granted = fence(&mut r);
    wait_until("a renewal", PATIENCE, || fence(&mut r) > granted);
    server.stop();
    const GROUPED: [&str; 3] = [
        "snowflake_registry.claim(snowflake_registry.holder, snowflake_registry.terms, integer, integer, boolean, bigint)",
        "snowflake_registry.renew(snowflake_registry.holder, snowflake_registry.terms, integer, bigint, bigint, boolean)",
        "snowflake_registry.release(snowflake_registry.holder, snowflake_registry.terms, integer, bigint, bigint)",
    ];
    for f in GROUPED {
        wait_until(&format!("{f} counted"), PATIENCE, || {
            calls_of(&mut r, f) > 0
        });
    }
    for f in [
        "snowflake_registry.claim(text, text, integer, text, text, text, text, integer, integer, integer, boolean, integer, bigint, bigint, bigint, uuid, bigint)",
        "snowflake_registry.renew(text, text, integer, text, text, text, integer, integer, bigint, bigint, bigint, integer, bigint, uuid, bigint, boolean)",
        "snowflake_registry.release(text, text, integer, text, text, text, integer, bigint, bigint, uuid, bigint)",
    ] {
        assert_eq!(calls_of(&mut r, f), 0, "{f} was called");
    }
    let released: Option<String> =
        r.scalar("SELECT released_by FROM snowflake_registry.leases WHERE worker = 7");
    assert_eq!(released.as_deref(), Some("holder"));
}

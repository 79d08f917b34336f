//! The case the adversary of issue 41 found, on real servers: a registry restored from a copy
//! on the same timeline, its epoch raised past every server's by calls with the fleet's
//! password (so that registry format 2 did not freeze), handed a worker id that one server held
//! (granted after the copy was taken) to the server that held it before: 900 ids twice. Since
//! registry format 3 nothing freezes, nothing is run on the registry, and epochs change
//! nothing. The registry's word that a worker id is
//! free (never held, given back, its claimer's own expired lease) is proof only in the
//! incarnation that wrote it; a claimer continues at once only from its own record of a lease
//! that still runs (the lease model in core/ checks these rules exhaustively).

mod common;

use common::*;
use std::time::Duration;

/// How much later than the next holder's first batch came back the last batch of a tenure may
/// have been asked for (both read the same `Instant` clock, in different threads).
const SLACK: Duration = Duration::from_millis(50);

/// The pid of `cluster`'s lease keeper, from its processes' titles.
fn lease_keeper(cluster: &Cluster) -> i32 {
    wait_for("the lease keeper", PATIENCE, || {
        cluster.pids().into_iter().find(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/cmdline"))
                .unwrap_or_default()
                .contains("snowflake_ext lease keeper")
        })
    })
}

fn signal(pid: i32, signal: i32) {
    // SAFETY: a signal to a process of a server this test started.
    assert_eq!(unsafe { libc::kill(pid, signal) }, 0);
}

/// Puts `copy` (a base backup of `registry`, taken earlier) in `registry`'s place, on its port:
/// a restore on the same timeline (same system identifier), as an operator restores a backup.
fn restore(registry: &Cluster, copy: &mut Cluster) {
    registry.stop();
    std::fs::remove_file(copy.dir.join("standby.signal")).unwrap();
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

#[test]
fn a_registry_restored_on_the_same_timeline_hands_no_held_worker_id_to_its_earlier_holder() {
    let mut registry = registry("restore-900-registry");
    // Leases long enough that c, cut off, still mints when d starts again.
    registry
        .connect()
        .batch_execute("SELECT snowflake_registry.set_limits(interval '30 s')")
        .unwrap();
    let settings = ["snowflake.worker_range=2", "snowflake.lease_ttl=30s"];
    // d holds worker 2; c wants it too and keeps asking.
    let d = leasing_server("restore-900-d", &registry, &settings);
    assert_eq!(leased(&d), 2);
    let mut before = mint(&d, 100);
    let c = leasing_server("restore-900-c", &registry, &settings);
    wait_for_standing(&c, "exhausted");
    // The copy: worker 2 is d's there.
    // (a base backup: as of when it ends)
    let mut copy = Cluster::standby_of(&registry, "restore-900-copy", &[]);
    // d stops cleanly, giving worker 2 back; c takes it, and mints.
    d.stop();
    assert_eq!(leased(&c), 2);
    let c_minting = Minter::start(c.conninfo("postgres"), 50);
    wait_until("c to mint", PATIENCE, || c_minting.got() > 0);
    // c is cut off from the registry (its lease keeper stopped), minting on within its lease.
    let keeper = lease_keeper(&c);
    signal(keeper, libc::SIGSTOP);
    // The registry restored from the copy, on the same timeline.
    restore(&registry, &mut copy);
    std::mem::swap(&mut registry, &mut copy);
    // The fleet's role sends it an epoch beyond any server's, in a call of made-up arguments
    // (what defeated registry format 2's freeze): answered on its merits, it changes nothing.
    let mut fleet = connect_as(&registry, "postgres", "fleet");
    let made_up: String = fleet.scalar(
        "SELECT (snowflake_registry.renew('x', 'x', 1, 'x', 'x', repeat('0', 32), 1, 2, 0, 0, 0,
                                          1000, (extract(epoch FROM clock_timestamp()) * 1000)::bigint,
                                          NULL, 9223372036854775807)).outcome",
    );
    assert_eq!(made_up, "lost");
    // d starts again: the copy shows worker 2 as its own expired lease on this machine run.
    d.start();
    let d_minting = Minter::start(d.conninfo("postgres"), 50);
    // d gets worker 2 only once c's lease has run out (c stops minting by its own clock).
    // (20,000 ids: long enough for two holders at once to show, had d not waited)
    wait_until("d to mint again", PATIENCE, || d_minting.got() > 20_000);
    signal(keeper, libc::SIGCONT);
    let c_minted = c_minting.finish();
    let d_minted = d_minting.finish();
    before.extend(c_minted.ids.iter().map(|(_, id)| *id));
    before.extend(d_minted.ids.iter().map(|(_, id)| *id));
    assert_no_duplicates(&before);
    assert_one_holder_at_a_time(&[("c", &c_minted), ("d", &d_minted)], SLACK);
    assert!(d_minted.ids.iter().all(|(_, id)| worker_of(*id) == 2));
}

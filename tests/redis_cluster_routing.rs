//! The driver's own routing on a Redis Cluster: a slot moved to another
//! primary after the driver learned the slot map is followed through
//! `MOVED`, and a slot being migrated through `ASK` (the script runs on
//! the importing node, the map stays). Failovers are in
//! `redis_deployments.rs`.

mod support;

use std::thread;
use std::time::{Duration, Instant};

use futures::executor::block_on;
use support::cluster::Cluster;
use support::deployment::Deployment;
use support::topology::{backend, hand_off, lock_key, CONNECTION, SLOW_POLLS};
use support::{open_redis_at, wait};

/// The slot of `key`'s lock key, the primary serving it, and another primary.
fn slot_and_primaries(cluster: &Cluster, key: &str) -> (u16, u16, u16) {
    let slot = cluster.slot(&lock_key(key));
    let from = cluster.primary_of_slot(slot);
    let to = cluster.primaries().into_iter().find(|&p| p != from).expect("3 primaries");
    (slot, from, to)
}

#[test]
fn a_slot_moved_after_the_map_was_fetched_is_followed_through_moved() {
    let deployment = Deployment::cluster();
    let Deployment::Cluster(cluster) = &deployment else { unreachable!() };
    let provider = deployment.open(&[("leaseMs", "10000")]);
    let key = "moved:1";
    let first = block_on(backend(&provider).acquire(key, wait(0))).unwrap();
    assert!(block_on(first.release()).unwrap());

    let (slot, from, to) = slot_and_primaries(cluster, key);
    cluster.migrate_slot(slot, from, to);

    let second = block_on(backend(&provider).acquire(key, wait(0))).expect("the driver follows MOVED to the slot's new primary");
    assert!(second.fence() > first.fence(), "the fence counter moved with the slot");
    assert_eq!(cluster.primary_of(&lock_key(key)), to);
    assert!(cluster.exists_on(to, &lock_key(key)), "the lock key is on the slot's new primary");
    assert!(block_on(second.release()).unwrap());
    block_on(provider.close());
}

#[test]
fn a_renewal_of_a_lease_whose_key_is_being_migrated_is_sent_to_the_importing_node_through_ask() {
    let deployment = Deployment::cluster();
    let Deployment::Cluster(cluster) = &deployment else { unreachable!() };
    let provider = deployment.open(&[("leaseMs", "10000")]);
    let key = "ask:1";
    let lease = block_on(backend(&provider).acquire(key, wait(0))).unwrap();

    let (slot, from, to) = slot_and_primaries(cluster, key);
    // The source lacks the lock key now, and answers ASK. (A script on
    // several keys, some missing, gets TRYAGAIN from the importing node
    // until the migration ends: the renewal touches the lock key only.)
    cluster.start_migrating(slot, from, to);
    cluster.migrate_keys(slot, from, to);
    let remaining = lease.remaining();
    std::thread::sleep(std::time::Duration::from_millis(50));
    assert!(block_on(lease.renew()).expect("the driver follows ASK to the importing node"), "the renewal found the lease");
    assert!(lease.remaining() > remaining, "the renewal extended the lease");
    assert_eq!(cluster.primary_of_slot(slot), from, "the slot still belongs to the source");

    cluster.assign_slot(slot, to);
    assert!(block_on(lease.release()).unwrap(), "the release follows MOVED");
    assert!(!cluster.exists_on(to, &lock_key(key)));
    block_on(provider.close());
}

/// A seed that hangs (SIGSTOP: its socket stays open, nothing answers) is
/// noticed by its subscription's `PING`, so that another seed's
/// subscription acts on the releases the hung one would have: the waiter
/// is woken by the notification, not by its 10 s poll.
#[test]
fn a_hung_seed_s_subscription_is_noticed_and_another_seed_acts_on_its_releases() {
    let cluster = Cluster::start();
    let primaries = cluster.primaries();
    let replica = cluster.replica_of(primaries[0]).expect("a replica");
    // The replica first: the first live seed acts on a key whose primary
    // is no seed (here the second primary's keys).
    let endpoint = format!("cluster: {{ nodes: [redis://127.0.0.1:{replica}, redis://127.0.0.1:{}] }}", primaries[0]);
    let holder = open_redis_at(&endpoint, &SLOW_POLLS, CONNECTION).0;
    let other = open_redis_at(&endpoint, &SLOW_POLLS, CONNECTION).0;
    let key = (0..).map(|i| format!("job:{i}")).find(|key| cluster.primary_of(&lock_key(key)) == primaries[1]).unwrap();
    let warm = block_on(backend(&other).acquire(&key, wait(0))).unwrap();
    assert!(block_on(warm.release()).unwrap());
    cluster.pause(replica);
    // Its subscription's PING goes unanswered: a second of quiet, then
    // commandTimeoutMs (1 s).
    thread::sleep(Duration::from_millis(3000));
    let took = hand_off(&holder, &other, &key);
    cluster.resume(replica);
    assert!(took < Duration::from_secs(2), "hand-off took {took:?}: the notification did not wake the waiter");
    block_on(other.close());
    block_on(holder.close());
}

/// A primary that hangs (SIGSTOP: connects are taken, nothing answers) is
/// the first the slot map is asked of (it serves slot 0). A command on
/// another primary's key, arriving while the map is stale, is not held up
/// for a connect to it: the map comes from the next node meanwhile.
#[test]
fn a_hung_primary_holds_up_no_slot_map_fetch_for_the_other_primaries_keys() {
    let cluster = Cluster::start();
    // The other primaries' slots stay served while the hung one is failed.
    for port in cluster.ports() {
        let _: () =
            redis::cmd("CONFIG").arg("SET").arg("cluster-require-full-coverage").arg("no").query(&mut cluster.client(port)).unwrap();
    }
    let hung = cluster.primary_of_slot(0);
    let (provider, _) =
        open_redis_at(&cluster.endpoint_yaml(), &[("leaseMs", "10000")], &[("connectTimeoutMs", "5000"), ("commandTimeoutMs", "500")]);
    let served_by =
        |hung_node: bool| (0..).map(|i| format!("job:{i}")).find(|key| (cluster.primary_of(&lock_key(key)) == hung) == hung_node).unwrap();
    let (on_hung, elsewhere) = (served_by(true), served_by(false));
    for key in [&on_hung, &elsewhere] {
        let lease = block_on(backend(&provider).acquire(key, wait(0))).unwrap();
        assert!(block_on(lease.release()).unwrap());
    }
    cluster.pause(hung);
    // Its command goes unanswered: the map is stale now.
    assert!(block_on(backend(&provider).acquire(&on_hung, wait(0))).is_err());
    let started = Instant::now();
    let lease = block_on(backend(&provider).acquire(&elsewhere, wait(0)));
    let took = started.elapsed();
    cluster.resume(hung);
    let lease = lease.expect("another primary's key is served");
    assert!(took < Duration::from_millis(2500), "took {took:?}: the map fetch waited for the hung primary (connectTimeoutMs is 5 s)");
    assert!(block_on(lease.release()).unwrap());
    block_on(provider.close());
}

/// The stated limit (docs/redis.md): while a key's slot is being migrated, its
/// acquire fails. Every lock script names all five of a key's Redis names
/// (lock, fence, waiting, kind, queue), most of which do not exist: the
/// source answers `TRYAGAIN` while it holds some of them and `ASK` once it
/// holds none, and the importing node answers `TRYAGAIN` to a script on
/// several keys some of which it lacks. So the acquire fails (surely not
/// run: `PROVIDER_FAILED`, after retries within `commandTimeoutMs`) until
/// the slot is assigned, and is granted right after.
#[test]
fn an_acquire_on_a_slot_being_migrated_fails_until_the_migration_ends() {
    let deployment = Deployment::cluster();
    let Deployment::Cluster(cluster) = &deployment else { unreachable!() };
    let provider = deployment.open_with(&[("leaseMs", "10000")], &[("commandTimeoutMs", "1000")]);
    let key = "migrating:1";
    let first = block_on(backend(&provider).acquire(key, wait(0))).unwrap();
    assert!(block_on(first.release()).unwrap());

    let (slot, from, to) = slot_and_primaries(cluster, key);
    cluster.start_migrating(slot, from, to);
    let err = block_on(backend(&provider).acquire(key, wait(0))).expect_err("the source holds the fence counter alone: TRYAGAIN");
    assert_eq!(err.code(), dokebi_lock::ErrorCode::ProviderFailed, "{err}");
    cluster.migrate_keys(slot, from, to);
    let err = block_on(backend(&provider).acquire(key, wait(0))).expect_err("ASK, then TRYAGAIN from the importing node");
    assert_eq!(err.code(), dokebi_lock::ErrorCode::ProviderFailed, "{err}");

    cluster.assign_slot(slot, to);
    let second = block_on(backend(&provider).acquire(key, wait(0))).expect("granted once the slot is assigned");
    assert!(second.fence() > first.fence());
    assert!(block_on(second.release()).unwrap());
    block_on(provider.close());
}

//! The driver's own routing on a Redis Cluster: a slot moved to another
//! primary after the driver learned the slot map is followed through
//! `MOVED`, and a slot being migrated through `ASK` (the script runs on
//! the importing node, the map stays). Failovers are in
//! `redis_deployments.rs`.

mod support;

use futures::executor::block_on;
use support::cluster::Cluster;
use support::deployment::Deployment;
use support::topology::{backend, lock_key};
use support::wait;

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

/// The README's stated limit: while a key's slot is being migrated, its
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

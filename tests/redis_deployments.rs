//! The redis driver on deployments with replicas, each scenario written
//! once (see `support/deployment.rs`) and run through Sentinel (a primary,
//! one replica, 3 sentinels) and on a Cluster (3 primaries, 3 replicas),
//! and on one server where no replica is needed: leases on the primary that
//! serves their key, hand-off by notification (also after the node it is
//! subscribed on dies), limits, a primary killed (with nothing held, with a
//! lease held, with a release under way), a planned failover, and
//! `replicaAcks`. Two providers stand for two processes. What only one
//! topology has stays in `redis_sentinel.rs`.

mod support;

use std::collections::BTreeSet;
use std::thread;
use std::time::{Duration, Instant};

use dokebi_lock::{Backend, ErrorCode, Lease};
use futures::executor::block_on;
use support::deployment::{on_topologies, Deployment};
use support::topology::{backend, code, hand_off, lock_key, tally, try_through_failover, SLOW_POLLS};
use support::{eventually, redis_counts, wait};

/// `key`, free, is granted to `backend` with a fence above `before`'s, and
/// released.
fn taken_again_with_a_higher_fence(backend: &Backend, key: &str, before: &Lease) {
    let next = block_on(backend.acquire(key, wait(0))).expect("the key is free");
    assert!(next.fence() > before.fence(), "fence {} after {}", next.fence(), before.fence());
    assert!(block_on(next.release()).unwrap());
}

fn scenario_leases_are_taken_on_the_primary_that_serves_their_key_reach_its_replica_and_spread_over_every_primary(deployment: &Deployment) {
    let (a, b) = (deployment.open(&[("leaseMs", "10000")]), deployment.open(&[("leaseMs", "10000")]));
    let keys: Vec<String> = (0..24).map(|i| format!("order:{i}")).collect();
    let leases: Vec<Lease> = keys.iter().map(|key| block_on(backend(&a).acquire(key, wait(0))).unwrap()).collect();
    let mut owners = BTreeSet::new();
    for key in &keys {
        let owner = deployment.primary_of(&lock_key(key));
        assert!(deployment.exists_on(owner, &lock_key(key)), "the lock key is on the primary that serves it");
        let replica = deployment.replica_of(&lock_key(key));
        eventually("the replica has the lock", || deployment.exists_on(replica, &lock_key(key)));
        owners.insert(owner);
    }
    assert_eq!(owners.into_iter().collect::<Vec<_>>(), deployment.primaries(), "24 keys land on every primary");
    assert_eq!(code(block_on(backend(&b).acquire(&keys[0], wait(0)))), ErrorCode::LockBusy);
    for lease in &leases {
        assert!(block_on(lease.release()).unwrap());
    }
    assert!(deployment.keys("test:lock:*").is_empty(), "no lock key stays after the releases");
    // The fence counters stay (one per key), next to the lock key's slot.
    taken_again_with_a_higher_fence(&backend(&b), &keys[0], &leases[0]);
    block_on(b.close());
    block_on(a.close());
}

fn scenario_a_waiter_in_another_provider_is_handed_the_key_by_the_release_notification_not_the_safety_poll(deployment: &Deployment) {
    // Both polls at 10 s: a hand-off within 2 s can only come from the
    // notification (published on the key's primary, subscribed on the
    // primary the sentinels name or on a cluster's first seed; a cluster
    // forwards PUBLISH to every node).
    let holder = deployment.open(&SLOW_POLLS);
    let other = deployment.open(&SLOW_POLLS);
    // On a cluster, a key served by another node than the subscribed one:
    // the message must cross the cluster bus.
    let key = deployment.a_key_served_away_from_the_subscription();
    let hand_off = hand_off(&holder, &other, &key);
    eprintln!("{}: hand-off by notification: {} ms", deployment.name(), hand_off.as_millis());
    assert!(hand_off < Duration::from_secs(2), "hand-off took {hand_off:?}: the notification did not wake the waiter");
    block_on(other.close());
    block_on(holder.close());
}

fn scenario_max_leases_refuses_one_lease_more_with_key_limit(deployment: &Deployment) {
    let provider = deployment.open(&[("leaseMs", "10000"), ("maxLeases", "2")]);
    let shared = backend(&provider);
    let a = block_on(shared.acquire("a", wait(0))).unwrap();
    let b = block_on(shared.acquire("b", wait(0))).unwrap();
    assert_eq!(code(block_on(shared.acquire("c", wait(0)))), ErrorCode::KeyLimit);
    assert!(!deployment.keys("test:lock:*").contains(&lock_key("c")), "the refused lease left no lock key");
    assert!(block_on(a.release()).unwrap());
    let c = block_on(shared.acquire("c", wait(0))).unwrap();
    assert!(block_on(b.release()).unwrap() && block_on(c.release()).unwrap());
    block_on(provider.close());
}

fn scenario_release_notifications_follow_the_failover_when_the_subscribed_node_dies(deployment: &mut Deployment) {
    let holder = deployment.open(&SLOW_POLLS);
    let other = deployment.open(&SLOW_POLLS);
    eventually("subscribed", || redis_counts(&backend(&other)).subscribed);
    let killed = deployment.kill_the_subscribed_node();
    let killed_at = Instant::now();
    deployment.wait_failover(killed);
    eprintln!("{}: the failover was over {} ms after the subscribed node died", deployment.name(), killed_at.elapsed().as_millis());
    // Acquires on the killed node's keys may still fail until each provider
    // sees the new primary; take the hand-off key once by each first.
    for provider in [&holder, &other] {
        let (lease, _, _) = try_through_failover(&backend(provider), "job", killed_at, deployment.failover_bound(), Result::ok);
        assert!(block_on(lease.release()).unwrap());
    }
    // The subscription dropped with the node and is made again elsewhere.
    eventually("subscribed again", || redis_counts(&backend(&other)).subscribed);
    let hand_off = hand_off(&holder, &other, "job");
    eprintln!("{}: hand-off by notification after the subscribed node died: {} ms", deployment.name(), hand_off.as_millis());
    assert!(hand_off < Duration::from_secs(2), "hand-off took {hand_off:?}: the notification did not wake the waiter");
    block_on(other.close());
    block_on(holder.close());
}

fn scenario_after_the_primary_of_a_free_key_dies_acquires_work_again_on_the_promoted_replica_with_higher_fences(
    deployment: &mut Deployment,
) {
    let provider = deployment.open(&[("leaseMs", "5000")]);
    let shared = backend(&provider);
    // Some grants before, so the fence counter has a history.
    let mut fences = Vec::new();
    for _ in 0..3 {
        let lease = block_on(shared.acquire("k", wait(0))).unwrap();
        fences.push(lease.fence());
        assert!(block_on(lease.release()).unwrap());
    }
    let replica = deployment.replica_of(&lock_key("k"));
    let old = deployment.kill_primary_of(&lock_key("k"));
    let killed_at = Instant::now();
    let (lease, took, failures) = try_through_failover(&shared, "k", killed_at, deployment.failover_bound(), Result::ok);
    eprintln!("{}: a free key was granted again {} ms after its primary died ({})", deployment.name(), took.as_millis(), tally(&failures));
    assert!(!failures.is_empty(), "acquires failed while the key had no primary");
    deployment.wait_failover(old);
    assert_eq!(deployment.primary_of(&lock_key("k")), replica, "the replica took over");
    assert!(deployment.exists_on(replica, &lock_key("k")), "the grant went to the promoted replica");
    assert!(lease.fence() > *fences.iter().max().unwrap(), "the fence after the failover is above every fence before");
    assert!(block_on(lease.release()).unwrap());
    block_on(provider.close());
}

fn scenario_a_lease_the_replica_acknowledged_survives_its_primarys_death_and_releases_true(deployment: &mut Deployment) {
    // replicaAcks 1: the grant counts only once the replica has it, so the
    // promoted replica still carries the lock. A longer command timeout than
    // the other tests': on a loaded machine the replica's acknowledgement
    // can take longer than 3/4 of a second, and how soon it comes is not
    // what this test is about.
    let holder =
        deployment.open_with(&[("leaseMs", "30000"), ("replicaAcks", "1")], &[("connectTimeoutMs", "500"), ("commandTimeoutMs", "5000")]);
    let other = deployment.open(&[("leaseMs", "5000")]);
    let held = block_on(backend(&holder).acquire("k", wait(0))).unwrap();
    let replica = deployment.replica_of(&lock_key("k"));
    assert!(deployment.exists_on(replica, &lock_key("k")), "WAIT 1 answered: the replica has the lock");
    let old = deployment.kill_primary_of(&lock_key("k"));
    let killed_at = Instant::now();
    // Until the replica takes over, tries fail; then the key is busy: the
    // lease survived.
    let ((), took, failures) =
        try_through_failover(&backend(&other), "k", killed_at, deployment.failover_bound(), |outcome| match outcome {
            Err(err) if err.code() == ErrorCode::LockBusy => Some(()),
            _ => None,
        });
    eprintln!("{}: a held key answered again {} ms after its primary died ({})", deployment.name(), took.as_millis(), tally(&failures));
    deployment.wait_failover(old);
    assert_eq!(deployment.primary_of(&lock_key("k")), replica, "the replica took over");
    assert!(block_on(held.release()).unwrap(), "the lease is still ours on the promoted replica");
    taken_again_with_a_higher_fence(&backend(&other), "k", &held);
    block_on(other.close());
    block_on(holder.close());
}

fn scenario_a_planned_failover_loses_no_lease_and_fences_keep_growing(deployment: &mut Deployment) {
    // Through Sentinel, replicaAcks 1 for the held lease: it is on the
    // replica before the switch (SENTINEL FAILOVER does not wait for the
    // replica to catch up; CLUSTER FAILOVER does). A command timeout that
    // leaves WAIT (3/4 of it) room on a loaded machine: the replica
    // re-synced from the new primary moments before.
    let fields = [&[("leaseMs", "30000")][..], deployment.kept_by_a_planned_failover()].concat();
    let holder = deployment.open_with(&fields, &[("connectTimeoutMs", "500"), ("commandTimeoutMs", "5000")]);
    let shared = deployment.open(&[("leaseMs", "5000")]);
    let held = block_on(backend(&holder).acquire("k", wait(0))).unwrap();
    // A free key on the same primary, taken before and after the switch.
    let free = deployment.a_key_served_with("k");
    let before = block_on(backend(&shared).acquire(&free, wait(0))).unwrap();
    assert!(block_on(before.release()).unwrap());
    let started = Instant::now();
    let (old, new) = deployment.planned_failover(&lock_key("k"));
    eprintln!(
        "{}: a planned failover, until the old primary was a replica in sync, took {} ms",
        deployment.name(),
        started.elapsed().as_millis()
    );
    assert_ne!(old, new);
    assert_eq!(deployment.primary_of(&lock_key("k")), new);
    // The old primary is a replica now: commands sent to it are redirected
    // (MOVED) and retried where the slot went, or, once the sentinels
    // dropped its clients, the next command asks the sentinels again.
    assert_eq!(code(block_on(backend(&shared).acquire("k", wait(0)))), ErrorCode::LockBusy, "the lease is still held");
    // The free key's counter came across as its reservation, up to a second
    // ahead of the new primary's clock: its grant waits until the clock has
    // passed it (a single try within that second is LOCK_BUSY).
    let after = block_on(backend(&shared).acquire(&free, wait(2_000))).expect("an acquire after a planned failover");
    assert!(after.fence() > before.fence());
    assert!(deployment.exists_on(new, &lock_key(&free)), "granted on the new primary");
    assert!(block_on(after.release()).unwrap());
    // The new primary has the demoted one as its replica: WAIT 1 is met.
    assert!(block_on(held.renew()).unwrap(), "the lease held across the failover renews");
    assert!(block_on(held.release()).unwrap(), "the lease held across the failover releases true");
    taken_again_with_a_higher_fence(&backend(&shared), "k", &held);
    block_on(shared.close());
    block_on(holder.close());
}

fn scenario_replica_acks_2_with_one_replica_fails_provider_failed_and_leaves_no_lock_key(deployment: &Deployment) {
    let provider = deployment.open(&[("leaseMs", "5000"), ("replicaAcks", "2")]);
    let err = block_on(backend(&provider).acquire("k", wait(0))).expect_err("only one replica can acknowledge");
    assert_eq!(err.code(), ErrorCode::ProviderFailed, "{err}");
    // The grant is given back before the error returns (a failed give-back
    // goes on in the background): soon no lock key is left on its primary,
    // nor anywhere.
    eventually("the grant was given back", || !deployment.exists_on(deployment.primary_of(&lock_key("k")), &lock_key("k")));
    assert!(deployment.keys("test:lock:*").is_empty());
    // replicaAcks 1 is met by the one replica, for grants and renewals.
    let one = deployment.open(&[("leaseMs", "5000"), ("replicaAcks", "1")]);
    let lease = block_on(backend(&one).acquire("k", wait(0))).unwrap();
    assert!(block_on(lease.renew()).unwrap(), "a renewal waits for the replica too");
    assert!(block_on(lease.release()).unwrap());
    block_on(one.close());
    block_on(provider.close());
}

/// A release sent while the key has no primary fails (through Sentinel
/// `PROVIDER_FAILED`: the sentinels still name the dead primary, the
/// connection is refused, it surely did not run; on a Cluster
/// `OUTCOME_UNKNOWN`: the connection broke), and the lease counts as
/// released (a second `release()` answers false); the background clean-up
/// by token keeps trying until the replica is promoted, so the lock that
/// survived on it does not block every process for the rest of its lease
/// (here 30 s). A clean-up of two tries a short `commandTimeoutMs` apart
/// gave up before a cluster's election.
fn scenario_a_release_during_the_failover_does_not_leave_the_key_locked_for_the_rest_of_the_lease(deployment: &mut Deployment) {
    // A long lease the replica acknowledged: it survives the failover, so
    // only a release can free the key before it expires. A short command
    // timeout (allowed: the lease is longer) ends the clean-up's tries
    // before the promotion.
    let holder =
        deployment.open_with(&[("leaseMs", "30000"), ("replicaAcks", "1")], &[("connectTimeoutMs", "200"), ("commandTimeoutMs", "200")]);
    let other = deployment.open(&[("leaseMs", "5000")]);
    // A first grant opens the connection WAIT uses (one of its own), whose
    // connect counts within the 200 ms: on a loaded host it may not fit
    // (PROVIDER_FAILED), and this test is about the release, not that.
    support::eventually("a first grant with its WAIT connection", || match block_on(backend(&holder).acquire("warm", wait(0))) {
        Ok(lease) => block_on(lease.release()).unwrap(),
        Err(_) => false,
    });
    let held = block_on(backend(&holder).acquire("k", wait(0))).unwrap();
    let old = deployment.kill_primary_of(&lock_key("k"));
    let killed_at = Instant::now();
    // The holder ends its section right away, while its key has no
    // primary; whatever that answers, once more later.
    let first = block_on(held.release());
    deployment.wait_failover(old);
    let second = block_on(held.release());
    eprintln!("{}: a release right after the primary died: {first:?}; once more after the failover: {second:?}", deployment.name());
    // The key must be free again within the failover bound, not held for
    // the rest of the 30 s lease.
    let deadline = killed_at + deployment.failover_bound();
    let next = loop {
        match block_on(backend(&other).acquire("k", wait(0))) {
            Ok(lease) => break lease,
            Err(err) if Instant::now() >= deadline => {
                let pttl: i64 = deployment.query(&lock_key("k"), redis::cmd("PTTL").arg(lock_key("k")));
                panic!(
                    "the key is still held {} ms after the primary died ({err}); its lock expires in {pttl} ms",
                    killed_at.elapsed().as_millis()
                );
            }
            Err(_) => {}
        }
        thread::sleep(Duration::from_millis(100));
    };
    eprintln!(
        "{}: the key released during the failover was free again {} ms after the kill",
        deployment.name(),
        killed_at.elapsed().as_millis()
    );
    assert!(next.fence() > held.fence());
    assert!(block_on(next.release()).unwrap());
    block_on(other.close());
    block_on(holder.close());
}

on_topologies! {
    every topology {
        a_waiter_in_another_provider_is_handed_the_key_by_the_release_notification_not_the_safety_poll
            => scenario_a_waiter_in_another_provider_is_handed_the_key_by_the_release_notification_not_the_safety_poll,
        max_leases_refuses_one_lease_more_with_key_limit => scenario_max_leases_refuses_one_lease_more_with_key_limit,
    }
    sentinel and cluster {
        leases_are_taken_on_the_primary_that_serves_their_key_reach_its_replica_and_spread_over_every_primary
            => scenario_leases_are_taken_on_the_primary_that_serves_their_key_reach_its_replica_and_spread_over_every_primary,
        release_notifications_follow_the_failover_when_the_subscribed_node_dies
            => scenario_release_notifications_follow_the_failover_when_the_subscribed_node_dies,
        after_the_primary_of_a_free_key_dies_acquires_work_again_on_the_promoted_replica_with_higher_fences
            => scenario_after_the_primary_of_a_free_key_dies_acquires_work_again_on_the_promoted_replica_with_higher_fences,
        a_lease_the_replica_acknowledged_survives_its_primarys_death_and_releases_true
            => scenario_a_lease_the_replica_acknowledged_survives_its_primarys_death_and_releases_true,
        a_planned_failover_loses_no_lease_and_fences_keep_growing => scenario_a_planned_failover_loses_no_lease_and_fences_keep_growing,
        replica_acks_2_with_one_replica_fails_provider_failed_and_leaves_no_lock_key
            => scenario_replica_acks_2_with_one_replica_fails_provider_failed_and_leaves_no_lock_key,
        a_release_during_the_failover_does_not_leave_the_key_locked_for_the_rest_of_the_lease
            => scenario_a_release_during_the_failover_does_not_leave_the_key_locked_for_the_rest_of_the_lease,
    }
}

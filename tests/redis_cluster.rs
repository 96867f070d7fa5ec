//! The redis driver on a Redis Cluster (3 primaries, 3 replicas, real
//! servers, see `support/cluster.rs`): leases on the primary of each key's
//! slot, hand-off by notification across nodes, limits, a primary killed
//! (with nothing held, and with a lease held), a planned `CLUSTER FAILOVER`,
//! and `replicaAcks`.

mod support;

use std::thread;
use std::time::{Duration, Instant};

use dokebi_lock::{Backend, ErrorCode, Lease, Provider};
use futures::executor::block_on;
use support::cluster::{Cluster, NODE_TIMEOUT_MS};
use support::topology::{backend, code, hand_off, lock_key, CONNECTION, SLOW_POLLS};
use support::{eventually, open_redis_at, redis_counts, wait};

/// How long after a primary's death acquires of its slots must work again:
/// the cluster notices it (`cluster-node-timeout`, 1 s, then gossip), its
/// replica waits 0.5-1 s and is elected; the rest is slack for a loaded
/// CI machine.
const FAILOVER_BOUND: Duration = Duration::from_millis(NODE_TIMEOUT_MS + 9_000);

fn open(cluster: &Cluster, backend: &[(&str, &str)]) -> Provider {
    open_redis_at(&cluster.endpoint_yaml(), backend, CONNECTION).0
}

/// Tries `key` once at a time until granted; every failure meanwhile must
/// say Redis failed (`PROVIDER_FAILED`) or may have run the command
/// (`OUTCOME_UNKNOWN`). Returns the lease, how long it took since `since`,
/// and the failures seen.
fn acquire_through_failover(backend: &Backend, key: &str, since: Instant) -> (Lease, Duration, Vec<ErrorCode>) {
    let mut failures = Vec::new();
    loop {
        match block_on(backend.acquire(key, wait(0))) {
            Ok(lease) => return (lease, since.elapsed(), failures),
            Err(err) => {
                assert!(
                    matches!(err.code(), ErrorCode::ProviderFailed | ErrorCode::OutcomeUnknown),
                    "an acquire during the failover failed with {:?}: {err}",
                    err.code()
                );
                failures.push(err.code());
            }
        }
        assert!(since.elapsed() < FAILOVER_BOUND, "acquires did not work again within {FAILOVER_BOUND:?} (failures: {failures:?})");
        thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn leases_go_to_the_primary_of_their_slot_and_spread_over_every_primary() {
    let cluster = Cluster::start();
    let provider = open(&cluster, &[("leaseMs", "10000")]);
    let shared = backend(&provider);
    let keys: Vec<String> = (0..24).map(|i| format!("order:{i}")).collect();
    let leases: Vec<Lease> = keys.iter().map(|key| block_on(shared.acquire(key, wait(0))).unwrap()).collect();
    let mut owners = std::collections::BTreeSet::new();
    for key in &keys {
        // The lock key is on the primary that serves its slot, and its
        // replica has it too.
        let owner = cluster.primary_of(&lock_key(key));
        assert!(cluster.exists_on(owner, &lock_key(key)), "the lock key is on the primary of its slot");
        owners.insert(owner);
    }
    assert_eq!(owners.len(), 3, "24 keys land on every one of the 3 primaries");
    for lease in &leases {
        assert!(block_on(lease.release()).unwrap());
    }
    assert!(cluster.keys("test:lock:*").is_empty(), "no lock key stays after the releases");
    // The fence counters stay (one per key), next to the lock key's slot.
    let again = block_on(shared.acquire(&keys[0], wait(0))).unwrap();
    assert!(again.fence() > leases[0].fence());
    assert!(block_on(again.release()).unwrap());
    block_on(provider.close());
}

#[test]
fn a_waiter_in_another_provider_is_handed_the_key_by_the_release_notification_not_the_safety_poll() {
    let cluster = Cluster::start();
    // Both polls at 10 s: a hand-off within 2 s can only come from the
    // notification (published on the key's primary, subscribed on a seed
    // node; a cluster forwards PUBLISH to every node).
    let slow = SLOW_POLLS;
    let holder = open(&cluster, &slow);
    let other = open(&cluster, &slow);
    // A key served by another node than the first seed, where the
    // subscription goes: the message must cross the cluster bus.
    let subscribed_on = cluster.ports()[0];
    let key = (0..).map(|i| format!("job:{i}")).find(|key| cluster.primary_of(&lock_key(key)) != subscribed_on).unwrap();
    let hand_off = hand_off(&holder, &other, &key);
    eprintln!("cluster hand-off by notification: {} ms", hand_off.as_millis());
    assert!(hand_off < Duration::from_secs(2), "hand-off took {hand_off:?}: the notification did not wake the waiter");
    block_on(other.close());
    block_on(holder.close());
}

#[test]
fn release_notifications_move_to_another_seed_when_the_subscribed_node_dies() {
    let mut cluster = Cluster::start();
    let holder = open(&cluster, &SLOW_POLLS);
    let other = open(&cluster, &SLOW_POLLS);
    eventually("subscribed", || redis_counts(&backend(&other)).subscribed);
    // The subscription goes to the first seed first: kill that node (a
    // primary, whose replica then takes over, or a replica).
    let seed = cluster.ports()[0];
    cluster.kill(seed);
    let killed_at = Instant::now();
    cluster.wait_ok(FAILOVER_BOUND);
    eprintln!("cluster: ok again {} ms after the first seed died", killed_at.elapsed().as_millis());
    eventually("subscribed again, elsewhere", || redis_counts(&backend(&other)).subscribed);
    // Acquires on the killed node's slots may still fail until the
    // providers see the new primary; take the hand-off key once first.
    let probe = acquire_through_failover(&backend(&holder), "job", killed_at).0;
    assert!(block_on(probe.release()).unwrap());
    let hand_off = hand_off(&holder, &other, "job");
    eprintln!("cluster hand-off by notification after the subscribed node died: {} ms", hand_off.as_millis());
    assert!(hand_off < Duration::from_secs(2), "hand-off took {hand_off:?}: the notification did not wake the waiter");
    block_on(other.close());
    block_on(holder.close());
}

#[test]
fn max_leases_refuses_one_lease_more_with_key_limit() {
    let cluster = Cluster::start();
    let provider = open(&cluster, &[("leaseMs", "10000"), ("maxLeases", "2")]);
    let shared = backend(&provider);
    let a = block_on(shared.acquire("a", wait(0))).unwrap();
    let b = block_on(shared.acquire("b", wait(0))).unwrap();
    assert_eq!(code(block_on(shared.acquire("c", wait(0)))), ErrorCode::KeyLimit);
    assert!(!cluster.keys("test:lock:*").contains(&lock_key("c")), "the refused lease left no lock key");
    assert!(block_on(a.release()).unwrap());
    let c = block_on(shared.acquire("c", wait(0))).unwrap();
    assert!(block_on(b.release()).unwrap() && block_on(c.release()).unwrap());
    block_on(provider.close());
}

#[test]
fn after_the_primary_of_a_keys_slot_dies_acquires_work_again_within_the_bound_with_higher_fences() {
    let mut cluster = Cluster::start();
    let provider = open(&cluster, &[("leaseMs", "5000")]);
    let shared = backend(&provider);
    // Some grants before, so the fence counter has a history.
    let mut fences = Vec::new();
    for _ in 0..3 {
        let lease = block_on(shared.acquire("k", wait(0))).unwrap();
        fences.push(lease.fence());
        assert!(block_on(lease.release()).unwrap());
    }
    let primary = cluster.primary_of(&lock_key("k"));
    cluster.kill(primary);
    let killed_at = Instant::now();
    let (lease, took, failures) = acquire_through_failover(&shared, "k", killed_at);
    eprintln!(
        "cluster: a free key's slot served again {} ms after its primary died ({} failed tries: {failures:?})",
        took.as_millis(),
        failures.len()
    );
    assert!(!failures.is_empty(), "acquires failed while the slot had no primary");
    assert!(lease.fence() > *fences.iter().max().unwrap(), "the fence after the failover is above every fence before");
    assert_ne!(cluster.primary_of(&lock_key("k")), primary);
    assert!(block_on(lease.release()).unwrap());
    block_on(provider.close());
}

#[test]
fn a_lease_the_replica_acknowledged_survives_its_primarys_death() {
    let mut cluster = Cluster::start();
    // replicaAcks 1: the grant counts only once the slot's replica has it,
    // so the promoted replica still carries the lock.
    let holder = open(&cluster, &[("leaseMs", "30000"), ("replicaAcks", "1")]);
    let other = open(&cluster, &[("leaseMs", "5000")]);
    let held = block_on(backend(&holder).acquire("k", wait(0))).unwrap();
    let primary = cluster.primary_of(&lock_key("k"));
    let replica = cluster.replica_of(primary).expect("the slot has a replica");
    assert!(cluster.exists_on(replica, &lock_key("k")), "the replica has the lock (WAIT 1 answered)");
    cluster.kill(primary);
    let killed_at = Instant::now();
    // Until the replica takes over, tries fail; then the key is busy:
    // the lease survived.
    let deadline = killed_at + FAILOVER_BOUND;
    let mut failures = Vec::new();
    loop {
        match block_on(backend(&other).acquire("k", wait(0))) {
            Err(err) if err.code() == ErrorCode::LockBusy => break,
            Err(err) if matches!(err.code(), ErrorCode::ProviderFailed | ErrorCode::OutcomeUnknown) => failures.push(err.code()),
            other => panic!("during the failover an acquire of a held key gave {other:?}"),
        }
        assert!(Instant::now() < deadline, "the slot was not served again within {FAILOVER_BOUND:?}");
        thread::sleep(Duration::from_millis(50));
    }
    eprintln!(
        "cluster: a held key's slot served again {} ms after its primary died ({} failed tries)",
        killed_at.elapsed().as_millis(),
        failures.len()
    );
    assert_eq!(cluster.primary_of(&lock_key("k")), replica, "the replica took over the slot");
    assert!(block_on(held.release()).unwrap(), "the lease is still ours on the promoted replica");
    let next = block_on(backend(&other).acquire("k", wait(0))).unwrap();
    assert!(next.fence() > held.fence());
    assert!(block_on(next.release()).unwrap());
    block_on(other.close());
    block_on(holder.close());
}

#[test]
fn a_planned_cluster_failover_loses_no_lease_and_fences_keep_growing() {
    let cluster = Cluster::start();
    let provider = open(&cluster, &[("leaseMs", "20000")]);
    let shared = backend(&provider);
    let held = block_on(shared.acquire("k", wait(0))).unwrap();
    let primary = cluster.primary_of(&lock_key("k"));
    let replica = cluster.replica_of(primary).expect("the slot has a replica");
    // CLUSTER FAILOVER: the replica catches up with its primary before it
    // takes over, so nothing written before is lost.
    let started = Instant::now();
    cluster.failover(replica, FAILOVER_BOUND);
    eprintln!("cluster: a planned failover took {} ms", started.elapsed().as_millis());
    assert_eq!(cluster.primary_of(&lock_key("k")), replica);
    // The old primary is a replica now: commands routed to it are
    // redirected (MOVED) and retried where the slot went.
    assert_eq!(code(block_on(shared.acquire("k", wait(0)))), ErrorCode::LockBusy, "the lease is still held");
    assert!(block_on(held.renew()).unwrap(), "the lease held across the failover renews");
    assert!(block_on(held.release()).unwrap(), "the lease held across the failover releases true");
    let next = block_on(shared.acquire("k", wait(0))).unwrap();
    assert!(next.fence() > held.fence());
    assert!(block_on(next.release()).unwrap());
    block_on(provider.close());
}

#[test]
fn replica_acks_2_with_one_replica_per_slot_fails_provider_failed_and_leaves_no_lock_key() {
    let cluster = Cluster::start();
    let provider = open(&cluster, &[("leaseMs", "5000"), ("replicaAcks", "2")]);
    let shared = backend(&provider);
    let err = block_on(shared.acquire("k", wait(0))).expect_err("only one replica can acknowledge");
    assert_eq!(err.code(), ErrorCode::ProviderFailed, "{err}");
    // The grant is given back before the error returns (a failed give-back
    // goes on in the background):
    // soon no lock key is left on its primary, nor anywhere.
    eventually("the grant was given back", || !cluster.exists_on(cluster.primary_of(&lock_key("k")), &lock_key("k")));
    assert!(cluster.keys("test:lock:*").is_empty());
    // replicaAcks 1 is met by the slot's one replica.
    let one = open(&cluster, &[("leaseMs", "5000"), ("replicaAcks", "1")]);
    let lease = block_on(backend(&one).acquire("k", wait(0))).unwrap();
    assert!(block_on(lease.renew()).unwrap(), "a renewal waits for the replica too");
    assert!(block_on(lease.release()).unwrap());
    block_on(one.close());
    block_on(provider.close());
}

/// A release sent while the key's slot has no primary fails
/// (`OUTCOME_UNKNOWN`: the connection broke), and the lease counts as
/// released (a second `release()` answers false); the background clean-up
/// by token keeps trying until the replica is elected, so the lock that
/// survived on it does not block every process for the rest of its lease
/// (here 30 s). A clean-up of two tries a short `commandTimeoutMs` apart
/// gave up before the election.
#[test]
fn a_release_during_the_failover_does_not_leave_the_key_locked_for_the_rest_of_the_lease() {
    let mut cluster = Cluster::start();
    // A long lease the replica acknowledged: it survives the failover, so
    // only a release can free the key before it expires. A short command
    // timeout (allowed: the lease is longer) ends the clean-up's tries
    // before the election.
    let holder = open_redis_at(
        &cluster.endpoint_yaml(),
        &[("leaseMs", "30000"), ("replicaAcks", "1")],
        &[("connectTimeoutMs", "200"), ("commandTimeoutMs", "200")],
    )
    .0;
    let other = open(&cluster, &[("leaseMs", "5000")]);
    let held = block_on(backend(&holder).acquire("k", wait(0))).unwrap();
    let primary = cluster.primary_of(&lock_key("k"));
    cluster.kill(primary);
    let killed_at = Instant::now();
    // The holder ends its section right away, while its slot has no
    // primary; whatever that answers, once more later.
    let first = block_on(held.release());
    cluster.wait_ok(FAILOVER_BOUND);
    let second = block_on(held.release());
    eprintln!("cluster: a release right after the primary died: {first:?}; once more after the failover: {second:?}");
    // The key must be free again within the failover bound, not held for
    // the rest of the 30 s lease.
    let deadline = killed_at + FAILOVER_BOUND;
    let next = loop {
        match block_on(backend(&other).acquire("k", wait(0))) {
            Ok(lease) => break lease,
            Err(err) => {
                let owner = cluster.primary_of(&lock_key("k"));
                let pttl: i64 = redis::cmd("PTTL").arg(lock_key("k")).query(&mut cluster.client(owner)).unwrap_or(-3);
                assert!(
                    Instant::now() < deadline,
                    "the key is still held {} ms after the primary died ({err}); its lock expires in {pttl} ms",
                    killed_at.elapsed().as_millis()
                );
            }
        }
        thread::sleep(Duration::from_millis(100));
    };
    eprintln!("cluster: the key released during the failover was free again {} ms after the kill", killed_at.elapsed().as_millis());
    assert!(next.fence() > held.fence());
    assert!(block_on(next.release()).unwrap());
    block_on(other.close());
    block_on(holder.close());
}

//! The redis driver through Redis Sentinel (a primary, one replica, 3
//! sentinels; real servers, see `support/sentinel.rs`): leases on the
//! primary the sentinels name, hand-off by notification, limits, the
//! primary killed (with nothing held, and with a lease held) and followed to
//! the promoted replica, and `replicaAcks`.

mod support;

use std::thread;
use std::time::{Duration, Instant};

use dokebi_lock::{Backend, ErrorCode, Lease, LockError, Provider};
use futures::executor::block_on;
use support::sentinel::{Sentinels, DOWN_AFTER_MS, FAILOVER_TIMEOUT_MS};
use support::topology::{backend, code, hand_off, lock_key, CONNECTION, SLOW_POLLS};
use support::{eventually, open_redis_at, redis_counts, wait};

/// How long after the primary's death acquires must work again: the
/// sentinels call it down after `down-after-milliseconds` (1 s), agree, elect
/// a leader and promote the replica; a failed election is retried after
/// twice `failover-timeout` (2 s); the rest is slack for a loaded CI machine.
const FAILOVER_BOUND: Duration = Duration::from_millis(DOWN_AFTER_MS + 2 * FAILOVER_TIMEOUT_MS + 5_000);

fn open(sentinels: &Sentinels, backend: &[(&str, &str)]) -> Provider {
    open_redis_at(&sentinels.endpoint_yaml(), backend, CONNECTION).0
}

/// Tries `key` once at a time until `done` accepts the outcome; every
/// failure meanwhile must say Redis failed (`PROVIDER_FAILED`) or may have
/// run the command (`OUTCOME_UNKNOWN`). Returns what `done` accepted, how
/// long it took since `since`, and the failures seen.
fn try_through_failover<T>(
    backend: &Backend,
    key: &str,
    since: Instant,
    mut done: impl FnMut(Result<Lease, LockError>) -> Option<T>,
) -> (T, Duration, Vec<ErrorCode>) {
    let mut failures = Vec::new();
    loop {
        match block_on(backend.acquire(key, wait(0))) {
            Err(err) if matches!(err.code(), ErrorCode::ProviderFailed | ErrorCode::OutcomeUnknown) => failures.push(err.code()),
            outcome => match done(outcome) {
                Some(value) => return (value, since.elapsed(), failures),
                None => panic!("an acquire during the failover gave an unexpected answer"),
            },
        }
        assert!(since.elapsed() < FAILOVER_BOUND, "acquires did not work again within {FAILOVER_BOUND:?} (failures: {failures:?})");
        thread::sleep(Duration::from_millis(50));
    }
}

/// "n × CODE" for each failure code seen.
fn tally(failures: &[ErrorCode]) -> String {
    let mut counts = std::collections::BTreeMap::new();
    for code in failures {
        *counts.entry(format!("{code:?}")).or_insert(0) += 1;
    }
    counts.iter().map(|(code, n)| format!("{n} × {code}")).collect::<Vec<_>>().join(", ")
}

#[test]
fn a_lease_is_taken_on_the_primary_the_sentinels_name_and_reaches_its_replica() {
    let sentinels = Sentinels::start();
    let a = open(&sentinels, &[("leaseMs", "10000")]);
    let b = open(&sentinels, &[("leaseMs", "10000")]);
    let held = block_on(backend(&a).acquire("order:1", wait(0))).unwrap();
    assert!(sentinels.primary().keys().contains(&lock_key("order:1")), "the lock is on the named primary");
    eventually("the replica has the lock", || sentinels.replica().keys().contains(&lock_key("order:1")));
    assert_eq!(code(block_on(backend(&b).acquire("order:1", wait(0)))), ErrorCode::LockBusy);
    assert!(block_on(held.release()).unwrap());
    assert!(!sentinels.primary().keys().contains(&lock_key("order:1")));
    let taken = block_on(backend(&b).acquire("order:1", wait(0))).unwrap();
    assert!(taken.fence() > held.fence());
    assert!(block_on(taken.release()).unwrap());
    block_on(b.close());
    block_on(a.close());
}

#[test]
fn a_waiter_in_another_provider_is_handed_the_key_by_the_release_notification_not_the_safety_poll() {
    let sentinels = Sentinels::start();
    // Both polls at 10 s: a hand-off within 2 s can only come from the
    // notification (subscribed on the primary the sentinels name).
    let slow = SLOW_POLLS;
    let holder = open(&sentinels, &slow);
    let other = open(&sentinels, &slow);
    let hand_off = hand_off(&holder, &other, "job");
    eprintln!("sentinel hand-off by notification: {} ms", hand_off.as_millis());
    assert!(hand_off < Duration::from_secs(2), "hand-off took {hand_off:?}: the notification did not wake the waiter");
    block_on(other.close());
    block_on(holder.close());
}

#[test]
fn release_notifications_follow_the_failover_to_the_promoted_replica() {
    let mut sentinels = Sentinels::start();
    let holder = open(&sentinels, &SLOW_POLLS);
    let other = open(&sentinels, &SLOW_POLLS);
    eventually("subscribed", || redis_counts(&backend(&other)).subscribed);
    let old = sentinels.kill_primary();
    let killed_at = Instant::now();
    // The first acquire after the failover, by each provider.
    for provider in [&holder, &other] {
        let (lease, _, _) = try_through_failover(&backend(provider), "job", killed_at, Result::ok);
        assert!(block_on(lease.release()).unwrap());
    }
    sentinels.wait_new_primary(old, FAILOVER_BOUND);
    // The subscription dropped with the old primary and is made again on
    // the one the sentinels name now.
    eventually("subscribed again", || redis_counts(&backend(&other)).subscribed);
    let hand_off = hand_off(&holder, &other, "job");
    eprintln!("sentinel hand-off by notification after the failover: {} ms", hand_off.as_millis());
    assert!(hand_off < Duration::from_secs(2), "hand-off took {hand_off:?}: the notification did not wake the waiter");
    block_on(other.close());
    block_on(holder.close());
}

#[test]
fn a_failover_is_followed_with_the_first_listed_sentinel_dead() {
    let mut sentinels = Sentinels::start();
    let provider = open(&sentinels, &[("leaseMs", "5000")]);
    let shared = backend(&provider);
    let before = block_on(shared.acquire("k", wait(0))).unwrap();
    assert!(block_on(before.release()).unwrap());
    // The driver asks the sentinels in turn: a dead first one is skipped,
    // at every reconnect the failover causes.
    sentinels.kill_sentinel(0);
    let old = sentinels.kill_primary();
    let killed_at = Instant::now();
    let (lease, took, failures) = try_through_failover(&shared, "k", killed_at, Result::ok);
    eprintln!(
        "sentinel: with one sentinel dead, acquires worked again {} ms after the primary died ({})",
        took.as_millis(),
        tally(&failures)
    );
    let new = sentinels.wait_new_primary(old, FAILOVER_BOUND);
    assert!(sentinels.server(new).keys().contains(&lock_key("k")), "granted on the promoted replica");
    assert!(lease.fence() > before.fence());
    assert!(block_on(lease.release()).unwrap());
    block_on(provider.close());
}

#[test]
fn max_leases_refuses_one_lease_more_with_key_limit() {
    let sentinels = Sentinels::start();
    let provider = open(&sentinels, &[("leaseMs", "10000"), ("maxLeases", "2")]);
    let shared = backend(&provider);
    let a = block_on(shared.acquire("a", wait(0))).unwrap();
    let b = block_on(shared.acquire("b", wait(0))).unwrap();
    assert_eq!(code(block_on(shared.acquire("c", wait(0)))), ErrorCode::KeyLimit);
    assert!(!sentinels.primary().keys().contains(&lock_key("c")), "the refused lease left no lock key");
    assert!(block_on(a.release()).unwrap());
    let c = block_on(shared.acquire("c", wait(0))).unwrap();
    assert!(block_on(b.release()).unwrap() && block_on(c.release()).unwrap());
    block_on(provider.close());
}

#[test]
fn after_the_primary_dies_with_nothing_held_acquires_work_again_on_the_promoted_replica_with_higher_fences() {
    let mut sentinels = Sentinels::start();
    let provider = open(&sentinels, &[("leaseMs", "5000")]);
    let shared = backend(&provider);
    let mut fences = Vec::new();
    for _ in 0..3 {
        let lease = block_on(shared.acquire("k", wait(0))).unwrap();
        fences.push(lease.fence());
        assert!(block_on(lease.release()).unwrap());
    }
    let old = sentinels.kill_primary();
    let killed_at = Instant::now();
    let (lease, took, failures) = try_through_failover(&shared, "k", killed_at, Result::ok);
    eprintln!("sentinel: acquires worked again {} ms after the primary died ({})", took.as_millis(), tally(&failures));
    assert!(!failures.is_empty(), "acquires failed while there was no primary");
    let new = sentinels.wait_new_primary(old, FAILOVER_BOUND);
    assert!(sentinels.server(new).keys().contains(&lock_key("k")), "the grant went to the promoted replica");
    assert!(lease.fence() > *fences.iter().max().unwrap(), "the fence after the failover is above every fence before");
    assert!(block_on(lease.release()).unwrap());
    block_on(provider.close());
}

#[test]
fn a_lease_the_replica_acknowledged_survives_the_primarys_death_and_releases_true() {
    let mut sentinels = Sentinels::start();
    // replicaAcks 1: the grant counts only once the replica has it, so the
    // promoted replica still carries the lock.
    let holder = open(&sentinels, &[("leaseMs", "30000"), ("replicaAcks", "1")]);
    let other = open(&sentinels, &[("leaseMs", "5000")]);
    let held = block_on(backend(&holder).acquire("k", wait(0))).unwrap();
    assert!(sentinels.replica().keys().contains(&lock_key("k")), "WAIT 1 answered: the replica has the lock");
    let old = sentinels.kill_primary();
    let killed_at = Instant::now();
    // Until the replica is promoted, tries fail; then the key is busy: the
    // lease survived.
    let ((), took, failures) = try_through_failover(&backend(&other), "k", killed_at, |outcome| match outcome {
        Err(err) if err.code() == ErrorCode::LockBusy => Some(()),
        _ => None,
    });
    eprintln!("sentinel: a held key answered again {} ms after the primary died ({})", took.as_millis(), tally(&failures));
    sentinels.wait_new_primary(old, FAILOVER_BOUND);
    assert!(block_on(held.release()).unwrap(), "the lease is still ours on the promoted replica");
    let next = block_on(backend(&other).acquire("k", wait(0))).unwrap();
    assert!(next.fence() > held.fence());
    assert!(block_on(next.release()).unwrap());
    block_on(other.close());
    block_on(holder.close());
}

/// How long the sentinels take to demote an old primary that is still
/// alive after a planned failover: they reconfigure it once it has reported
/// itself a primary for 4 publish periods (8 s), then it syncs.
const DEMOTION_BOUND: Duration = Duration::from_secs(20);

#[test]
fn a_planned_sentinel_failover_loses_no_lease_once_the_old_primary_is_demoted() {
    let sentinels = Sentinels::start();
    // replicaAcks 1 for the held lease: it is on the replica before the
    // switch (SENTINEL FAILOVER does not wait for the replica to catch up).
    // A command timeout that leaves WAIT (3/4 of it) room on a loaded
    // machine: the replica re-synced from the new primary moments before.
    let holder = open_redis_at(
        &sentinels.endpoint_yaml(),
        &[("leaseMs", "30000"), ("replicaAcks", "1")],
        &[("connectTimeoutMs", "500"), ("commandTimeoutMs", "5000")],
    )
    .0;
    let shared = open(&sentinels, &[("leaseMs", "5000")]);
    let held = block_on(backend(&holder).acquire("k", wait(0))).unwrap();
    let before = block_on(backend(&shared).acquire("other", wait(0))).unwrap();
    assert!(block_on(before.release()).unwrap());
    let started = Instant::now();
    let old = sentinels.primary_port();
    let new = sentinels.failover(FAILOVER_BOUND);
    eprintln!("sentinel: a planned failover took {} ms", started.elapsed().as_millis());
    // Once demoted, the old primary's clients are dropped (CLIENT KILL by
    // the sentinels): the next command asks the sentinels again.
    sentinels.wait_replica_synced(old, DEMOTION_BOUND);
    eprintln!("sentinel: the old primary was a replica in sync {} ms after SENTINEL FAILOVER", started.elapsed().as_millis());
    assert_eq!(code(block_on(backend(&shared).acquire("k", wait(0)))), ErrorCode::LockBusy, "the lease is still held");
    let after = block_on(backend(&shared).acquire("other", wait(0))).expect("an acquire after a planned failover");
    assert!(after.fence() > before.fence());
    assert!(sentinels.server(new).keys().contains(&lock_key("other")), "granted on the new primary");
    assert!(block_on(after.release()).unwrap());
    // The new primary has the demoted one as its replica: WAIT 1 is met.
    assert!(block_on(held.renew()).unwrap(), "the lease held across the failover renews");
    assert!(block_on(held.release()).unwrap(), "the lease held across the failover releases true");
    let next = block_on(backend(&shared).acquire("k", wait(0))).unwrap();
    assert!(next.fence() > held.fence());
    assert!(block_on(next.release()).unwrap());
    block_on(shared.close());
    block_on(holder.close());
}

/// After `SENTINEL FAILOVER` the old primary, alive, goes on reporting
/// `role:master` and taking writes until the sentinels demote it (about 8 s
/// later), with no READONLY and no drop: only the sentinels' `+switch-master`
/// tells a connection opened before the switch to leave it, so that a
/// provider that connected before and one that connects after never both
/// get the same key.
#[test]
fn after_a_planned_sentinel_failover_an_old_connection_and_a_new_one_never_both_hold_a_key() {
    let sentinels = Sentinels::start();
    let before = open(&sentinels, &[("leaseMs", "5000")]);
    let warm = block_on(backend(&before).acquire("warm-up", wait(0))).unwrap();
    assert!(block_on(warm.release()).unwrap());
    let old = sentinels.primary_port();
    let new = sentinels.failover(FAILOVER_BOUND);
    // Every sentinel names the new primary now; a provider opened now goes there.
    let after = open(&sentinels, &[("leaseMs", "5000")]);
    let a = block_on(backend(&before).acquire("split", wait(0)));
    let b = block_on(backend(&after).acquire("split", wait(0)));
    let on = |port: u16| sentinels.server(port).keys().contains(&lock_key("split"));
    eprintln!(
        "sentinel, right after SENTINEL FAILOVER: provider connected before: {:?}, after: {:?}; lock on the old primary {}, on the new {}",
        a.as_ref().map(|l| l.fence()).map_err(|e| e.code()),
        b.as_ref().map(|l| l.fence()).map_err(|e| e.code()),
        on(old),
        on(new)
    );
    assert!(!(a.is_ok() && b.is_ok()), "two providers hold one key at once (one on the old primary, one on the new)");
    block_on(after.close());
    block_on(before.close());
}

#[test]
fn replica_acks_2_with_one_replica_fails_provider_failed_and_leaves_no_lock_key() {
    let sentinels = Sentinels::start();
    let provider = open(&sentinels, &[("leaseMs", "5000"), ("replicaAcks", "2")]);
    let err = block_on(backend(&provider).acquire("k", wait(0))).expect_err("only one replica can acknowledge");
    assert_eq!(err.code(), ErrorCode::ProviderFailed, "{err}");
    // The grant is given back before the error returns (a failed give-back
    // goes on in the background).
    eventually("the grant was given back", || !sentinels.primary().keys().contains(&lock_key("k")));
    // replicaAcks 1 is met by the one replica, for grants and renewals.
    let one = open(&sentinels, &[("leaseMs", "5000"), ("replicaAcks", "1")]);
    let lease = block_on(backend(&one).acquire("k", wait(0))).unwrap();
    assert!(block_on(lease.renew()).unwrap(), "a renewal waits for the replica too");
    assert!(block_on(lease.release()).unwrap());
    block_on(one.close());
    block_on(provider.close());
}

/// A release sent while the sentinels still name the dead primary fails
/// `PROVIDER_FAILED` (connection refused: it surely did not run), and the
/// lease counts as released (a second `release()` answers false): the
/// background clean-up by token keeps trying, so the lock that survived on
/// the promoted replica does not block every process for the rest of its
/// lease (here 30 s).
#[test]
fn a_release_during_the_failover_does_not_leave_the_key_locked_for_the_rest_of_the_lease() {
    let mut sentinels = Sentinels::start();
    // A long lease the replica acknowledged: it survives the failover, so
    // only a release can free the key before it expires.
    let holder = open(&sentinels, &[("leaseMs", "30000"), ("replicaAcks", "1")]);
    let other = open(&sentinels, &[("leaseMs", "5000")]);
    let held = block_on(backend(&holder).acquire("k", wait(0))).unwrap();
    let old = sentinels.kill_primary();
    let killed_at = Instant::now();
    // The holder ends its section right away, while the sentinels still
    // name the dead primary; whatever that answers, once more later.
    let first = block_on(held.release());
    sentinels.wait_new_primary(old, FAILOVER_BOUND);
    let second = block_on(held.release());
    eprintln!("sentinel: a release right after the primary died: {first:?}; once more after the failover: {second:?}");
    // The key must be free again within the failover bound, not held for
    // the rest of the 30 s lease.
    let deadline = killed_at + FAILOVER_BOUND;
    let next = loop {
        match block_on(backend(&other).acquire("k", wait(0))) {
            Ok(lease) => break lease,
            Err(err) => {
                let pttl: i64 = redis::cmd("PTTL").arg(lock_key("k")).query(&mut sentinels.primary().client()).unwrap_or(-3);
                assert!(
                    Instant::now() < deadline,
                    "the key is still held {} ms after the primary died ({err}); its lock expires in {pttl} ms",
                    killed_at.elapsed().as_millis()
                );
            }
        }
        thread::sleep(Duration::from_millis(100));
    };
    assert!(next.fence() > held.fence());
    assert!(block_on(next.release()).unwrap());
    block_on(other.close());
    block_on(holder.close());
}

//! Hand-offs within one process on the redis driver (one server; on a
//! Cluster one script reaches one slot only, so there are none): a release
//! of a counted, shared or several-key lease grants this process's next
//! waiters in the same script call, and the head of a counted or shared
//! key's queue is granted together with the waiters behind it that the free
//! units cover. Counted with `INFO commandstats`: without the hand-off each of
//! these costs more script calls (a release, then a try per waiter).

mod support;

use std::thread;
use std::time::{Duration, Instant};

use dokebi_lock::{AcquireOptions, Backend, Lease, LockMode, Provider};
use futures::executor::block_on;
use support::redis_server::RedisServer;
use support::topology::{backend, lock_key};
use support::{eventually, open_redis, redis_counts, wait};

/// Polls far apart, so that a waiter granted quickly was granted by the
/// call under test, not by a safety-net retry.
const BACKEND: &[(&str, &str)] = &[("leaseMs", "10000"), ("pollIntervalMs", "5000"), ("notifyPollIntervalMs", "5000")];

fn counted(limit: u32, weight: u32, ms: u64) -> AcquireOptions {
    AcquireOptions { limit: Some(limit), weight: Some(weight), ..wait(ms) }
}

fn acquire_later(backend: &Backend, keys: &[&str], options: AcquireOptions) -> thread::JoinHandle<Lease> {
    let backend = backend.clone();
    let keys: Vec<String> = keys.iter().map(|k| (*k).to_owned()).collect();
    thread::spawn(move || {
        let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
        block_on(backend.acquire_many(&keys, options)).expect("granted")
    })
}

/// Waits until `backend` has `n` acquires in progress, each past its first
/// try (a try answers in well under the pause).
fn until_waiting(backend: &Backend, n: usize) {
    eventually("the acquires wait", || redis_counts(backend).waiting == n);
    thread::sleep(Duration::from_millis(200));
}

/// A provider on `server` and its backend, once its release notifications
/// are subscribed.
fn subscribed(server: &RedisServer) -> (Provider, Backend) {
    let (provider, _) = open_redis(&server.url(), BACKEND, &[]);
    let backend = backend(&provider);
    eventually("subscribed", || redis_counts(&backend).subscribed);
    (provider, backend)
}

fn reset_stats(server: &RedisServer) {
    let _: () = redis::cmd("CONFIG").arg("RESETSTAT").query(&mut server.client()).unwrap();
}

#[test]
fn a_counted_release_hands_its_unit_to_the_next_waiter_of_its_process_in_one_call() {
    let server = RedisServer::start();
    let (provider, a) = subscribed(&server);
    let first = block_on(a.acquire("pool", counted(2, 1, 0))).unwrap();
    let second = block_on(a.acquire("pool", counted(2, 1, 0))).unwrap();
    let waiter = acquire_later(&a, &["pool"], counted(2, 1, 5_000));
    until_waiting(&a, 1);
    reset_stats(&server);
    let released_at = Instant::now();
    assert!(block_on(first.release()).unwrap());
    let handed = waiter.join().unwrap();
    assert!(released_at.elapsed() < Duration::from_secs(2), "granted by the release, not by the 5 s poll");
    assert_eq!(server.succeeded_calls_of("evalsha"), 1, "one script call gave the unit back and granted it");
    assert!(handed.fence() > second.fence(), "the handed grant has a fence above every earlier one");
    assert!(handed.is_valid());
    assert_eq!(redis_counts(&a).held, 2);
    assert!(block_on(handed.release()).unwrap());
    assert!(block_on(second.release()).unwrap());
    assert!(server.keys().iter().all(|key| !key.starts_with("test:lock:")), "nothing stays held");
    block_on(provider.close());
}

#[test]
fn the_head_of_a_counted_queue_is_granted_with_the_waiters_behind_it_in_one_call() {
    let server = RedisServer::start();
    let (holder, _) = open_redis(&server.url(), BACKEND, &[]);
    let (waiting, _) = open_redis(&server.url(), BACKEND, &[]);
    let (h, w) = (backend(&holder), backend(&waiting));
    eventually("subscribed", || redis_counts(&w).subscribed);
    let everything = block_on(h.acquire("pool", counted(3, 3, 0))).unwrap();
    let waiters: Vec<_> = (0..3)
        .map(|_| {
            let waiter = acquire_later(&w, &["pool"], counted(3, 1, 5_000));
            // One at a time, so that their order is known.
            thread::sleep(Duration::from_millis(50));
            waiter
        })
        .collect();
    until_waiting(&w, 3);
    reset_stats(&server);
    assert!(block_on(everything.release()).unwrap());
    let leases: Vec<Lease> = waiters.into_iter().map(|waiter| waiter.join().unwrap()).collect();
    // The release (another process's) and one try of the head, which
    // granted all three: not a try per waiter.
    assert_eq!(server.succeeded_calls_of("evalsha"), 2);
    let fences: Vec<u64> = leases.iter().map(Lease::fence).collect();
    assert!(fences.windows(2).all(|pair| pair[0] < pair[1]), "granted in queue order, each with a new fence: {fences:?}");
    for lease in leases {
        assert!(block_on(lease.release()).unwrap());
    }
    block_on(holder.close());
    block_on(waiting.close());
}

#[test]
fn a_release_hands_a_key_set_on_and_one_try_grants_every_reader_queued() {
    let server = RedisServer::start();
    let (provider, a) = subscribed(&server);

    // A key set: the waiter needs both keys the holder frees.
    let pair = block_on(a.acquire_many(&["left", "right"], wait(0))).unwrap();
    let waiter = acquire_later(&a, &["right", "left"], wait(5_000));
    until_waiting(&a, 1);
    reset_stats(&server);
    assert!(block_on(pair.release()).unwrap());
    let handed = waiter.join().unwrap();
    assert_eq!(server.succeeded_calls_of("evalsha"), 1, "one call freed both keys and granted them");
    assert!(handed.fences().iter().all(|(key, fence)| *fence > pair.fences().iter().find(|(k, _)| k == key).unwrap().1));
    assert!(block_on(handed.release()).unwrap());

    // A plain writer's release (the plain path: no hand-off) wakes the
    // first of two readers queued behind it, whose one try grants both.
    let writer = block_on(a.acquire("doc", wait(0))).unwrap();
    let shared = AcquireOptions { mode: LockMode::Shared, ..wait(5_000) };
    let readers = [acquire_later(&a, &["doc"], shared.clone()), acquire_later(&a, &["doc"], shared)];
    until_waiting(&a, 2);
    reset_stats(&server);
    assert!(block_on(writer.release()).unwrap());
    let readers: Vec<Lease> = readers.into_iter().map(|reader| reader.join().unwrap()).collect();
    assert_eq!(server.succeeded_calls_of("evalsha"), 2, "the release, then one try for both readers");
    assert!(readers.iter().all(|reader| reader.fence() > writer.fence()));
    for reader in readers {
        assert!(block_on(reader.release()).unwrap());
    }
    block_on(provider.close());
}

#[test]
fn a_head_does_not_try_keys_its_own_process_left_full_and_is_handed_them() {
    let server = RedisServer::start();
    let (provider, a) = subscribed(&server);
    let holder = block_on(a.acquire_many(&["x", "y"], wait(0))).unwrap();
    let first = acquire_later(&a, &["x", "y"], wait(5_000));
    until_waiting(&a, 1);
    let second = acquire_later(&a, &["y", "x"], wait(5_000));
    until_waiting(&a, 2);
    reset_stats(&server);
    // Hands both keys to the first waiter: they are full again.
    assert!(block_on(holder.release()).unwrap());
    let first = first.join().unwrap();
    thread::sleep(Duration::from_millis(200));
    assert_eq!(server.succeeded_calls_of("evalsha"), 1, "the second waiter, now the head, did not try keys its process holds");
    assert!(block_on(first.release()).unwrap());
    let second = second.join().unwrap();
    assert_eq!(server.succeeded_calls_of("evalsha"), 2, "the first waiter's release handed the keys on");
    assert!(block_on(second.release()).unwrap());
    block_on(provider.close());
}

#[test]
fn a_woken_head_does_not_try_a_counted_key_its_own_leases_fill_and_is_handed_a_unit() {
    let server = RedisServer::start();
    let (provider, a) = subscribed(&server);
    let first = block_on(a.acquire("pool", counted(2, 1, 0))).unwrap();
    let second = block_on(a.acquire("pool", counted(2, 1, 0))).unwrap();
    reset_stats(&server);
    let waiter = acquire_later(&a, &["pool"], counted(2, 1, 5_000));
    until_waiting(&a, 1);
    // A release notification from elsewhere wakes the head: its own
    // process's leases still hold both units, so it keeps waiting.
    let _: i64 = redis::cmd("PUBLISH").arg("test:lock-released").arg(lock_key("pool")).query(&mut server.client()).unwrap();
    thread::sleep(Duration::from_millis(200));
    assert_eq!(server.succeeded_calls_of("evalsha"), 0, "no try while this process fills the key");
    assert!(block_on(first.release()).unwrap());
    let handed = waiter.join().unwrap();
    assert_eq!(server.succeeded_calls_of("evalsha"), 1, "the release handed its unit on");
    assert!(block_on(handed.release()).unwrap());
    assert!(block_on(second.release()).unwrap());
    block_on(provider.close());
}

//! Lock kinds on the redis driver, against real servers: shared mode (a
//! reader/writer lock), counted locks (limit and weight), several keys at
//! once. Each scenario is written once and run on one server, on Sentinel
//! and on a Cluster (`on_server::...`, `on_sentinel::...`, `on_cluster::...`);
//! two providers stand for two processes.

mod support;

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use dokebi_lock::{AbortController, AcquireOptions, Backend, ErrorCode, Lease, LockMode, Provider};
use futures::executor::block_on;
use support::deployment::{on_topologies, Deployment};
use support::topology::{backend, code, lock_key};
use support::{eventually, redis_counts, wait};

/// Leases long enough to outlast any scenario, and polls slow enough that
/// a waiter served quickly was woken by a release (or by the expiry its
/// try answered), not by the safety poll.
const BACKEND: &[(&str, &str)] = &[("leaseMs", "10000"), ("pollIntervalMs", "5000"), ("notifyPollIntervalMs", "5000")];

fn shared(ms: u64) -> AcquireOptions {
    AcquireOptions { mode: LockMode::Shared, ..wait(ms) }
}

fn counted(limit: u32, weight: u32, ms: u64) -> AcquireOptions {
    AcquireOptions { limit: Some(limit), weight: Some(weight), ..wait(ms) }
}

fn take(backend: &Backend, key: &str, options: AcquireOptions) -> Lease {
    block_on(backend.acquire(key, options)).expect("granted")
}

fn release(lease: Lease) {
    assert!(block_on(lease.release()).unwrap(), "released while held");
}

/// Acquires on another thread; the handle gives the outcome and when it came.
fn acquire_later(backend: &Backend, keys: &[&str], options: AcquireOptions) -> thread::JoinHandle<(dokebi_lock::Result<Lease>, Instant)> {
    let backend = backend.clone();
    let keys: Vec<String> = keys.iter().map(|k| (*k).to_owned()).collect();
    thread::spawn(move || {
        let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
        let outcome = block_on(backend.acquire_many(&keys, options));
        (outcome, Instant::now())
    })
}

/// Waits until `backend` has `n` acquires in progress, and a little longer,
/// so that each has tried once and is waiting.
fn until_waiting(backend: &Backend, n: usize) {
    eventually("the acquire waits", || redis_counts(backend).waiting == n);
    thread::sleep(Duration::from_millis(200));
}

fn queue_key(key: &str) -> String {
    lock_key(key).replacen(":lock:", ":lock-queue:", 1)
}

fn scenario_readers_hold_a_key_together_and_a_writer_alone(deployment: &Deployment) {
    let (one, other) = (deployment.open(BACKEND), deployment.open(BACKEND));
    let (a, b) = (backend(&one), backend(&other));
    let first = take(&a, "doc", shared(0));
    let second = take(&b, "doc", shared(0));
    let other_key = take(&a, "other", wait(0));
    assert_eq!((redis_counts(&a).held, redis_counts(&a).held_shared), (2, 1), "status counts holders by mode");
    release(other_key);
    assert_eq!(code(block_on(a.acquire("doc", wait(0)))), ErrorCode::LockBusy, "a writer waits for the readers");
    assert_eq!(code(block_on(b.acquire("doc", wait(0)))), ErrorCode::LockBusy);
    assert!(first.is_valid() && second.is_valid());
    release(first);
    assert_eq!(code(block_on(b.acquire("doc", wait(0)))), ErrorCode::LockBusy, "one reader still holds it");
    let writer = acquire_later(&a, &["doc"], wait(5_000));
    until_waiting(&a, 1);
    let released_at = Instant::now();
    release(second);
    let (writer, granted_at) = writer.join().unwrap();
    let writer = writer.expect("the writer is granted once the last reader leaves");
    assert!(granted_at - released_at < Duration::from_millis(2_000), "woken by the last reader's release");
    assert_eq!(code(block_on(b.acquire("doc", shared(0)))), ErrorCode::LockBusy, "no reader while the writer holds it");
    release(writer);
    release(take(&b, "doc", shared(0)));
    block_on(one.close());
    block_on(other.close());
}

fn scenario_a_reader_that_dies_keeps_a_writer_out_only_until_its_own_lease_ends(deployment: &Deployment) {
    let dying = deployment.open(&[("leaseMs", "1500"), ("pollIntervalMs", "5000"), ("notifyPollIntervalMs", "5000")]);
    let living = deployment.open(BACKEND);
    let (d, l) = (backend(&dying), backend(&living));
    let dead = take(&d, "doc", shared(0));
    let alive = take(&l, "doc", shared(0));
    // The dying process never releases (nor renews) its lease.
    std::mem::forget(dead);
    let writer = acquire_later(&l, &["doc"], wait(8_000));
    until_waiting(&l, 1);
    release(alive);
    let started = Instant::now();
    let (writer, _) = writer.join().unwrap();
    let writer = writer.expect("the writer is granted once the dead reader's lease ends");
    // Its lease ends 1.5 s after it was taken; the living reader's would
    // have kept the key 10 s.
    assert!(started.elapsed() < Duration::from_millis(3_000), "the dead reader kept the writer out for {:?}", started.elapsed());
    release(writer);
    block_on(living.close());
}

fn scenario_one_readers_renew_extends_only_its_own_expiry(deployment: &Deployment) {
    let provider = deployment.open(BACKEND);
    let shared_backend = backend(&provider);
    let first = take(&shared_backend, "doc", shared(0));
    let second = take(&shared_backend, "doc", shared(0));
    let scores = || -> HashMap<String, i64> {
        deployment.query(&lock_key("doc"), redis::cmd("ZRANGE").arg(lock_key("doc")).arg(0).arg(-1).arg("WITHSCORES"))
    };
    let before = scores();
    assert_eq!(before.len(), 2, "each reader is its own holder: {before:?}");
    thread::sleep(Duration::from_millis(50));
    assert!(block_on(second.renew()).unwrap());
    let after = scores();
    let moved: Vec<&String> = after.iter().filter(|(member, score)| before[*member] != **score).map(|(m, _)| m).collect();
    assert_eq!(moved.len(), 1, "only the renewed reader's expiry moved: {before:?} -> {after:?}");
    release(first);
    release(second);
    assert!(deployment.keys("test:lock:*").is_empty(), "the last reader's release deletes the holders");
    block_on(provider.close());
}

fn scenario_a_writer_waiting_in_another_process_stops_new_readers(deployment: &Deployment) {
    let (readers, writers) = (deployment.open(BACKEND), deployment.open(BACKEND));
    let (r, w) = (backend(&readers), backend(&writers));
    let reader = take(&r, "doc", shared(0));
    let writer = acquire_later(&w, &["doc"], wait(8_000));
    until_waiting(&w, 1);
    assert_eq!(deployment.keys(&queue_key("doc")).len(), 1, "the waiting writer left its mark");
    assert_eq!(code(block_on(r.acquire("doc", shared(0)))), ErrorCode::LockBusy, "a new reader waits behind the writer");
    let late_reader = acquire_later(&r, &["doc"], shared(8_000));
    until_waiting(&r, 1);
    release(reader);
    let (writer, writer_at) = writer.join().unwrap();
    let writer = writer.expect("the writer goes first");
    thread::sleep(Duration::from_millis(100));
    assert!(!late_reader.is_finished(), "the late reader waits while the writer holds the key");
    let released_at = Instant::now();
    release(writer);
    let (late, late_at) = late_reader.join().unwrap();
    let late = late.expect("the reader follows the writer");
    assert!(late_at > writer_at && late_at >= released_at);
    assert!(deployment.keys(&queue_key("doc")).is_empty(), "the granted writer took its mark back");
    release(late);
    block_on(readers.close());
    block_on(writers.close());
}

fn scenario_readers_behind_a_writer_that_gave_up_are_told_at_once(deployment: &Deployment) {
    let (readers, writers) = (deployment.open(BACKEND), deployment.open(BACKEND));
    let (r, w) = (backend(&readers), backend(&writers));
    let reader = take(&r, "doc", shared(0));
    let writer = acquire_later(&w, &["doc"], wait(1_000));
    until_waiting(&w, 1);
    let late_reader = acquire_later(&r, &["doc"], shared(8_000));
    let (gave_up, gave_up_at) = writer.join().unwrap();
    assert_eq!(code(gave_up), ErrorCode::WaitTimeout);
    let (late, late_at) = late_reader.join().unwrap();
    let late = late.expect("the reader is granted once the writer's mark is gone");
    // The polls are 5 s: the withdrawn mark's notification woke it.
    assert!(late_at - gave_up_at < Duration::from_millis(2_000), "served {:?} after the writer gave up", late_at - gave_up_at);
    release(late);
    release(reader);
    block_on(readers.close());
    block_on(writers.close());
}

fn scenario_within_a_process_a_reader_queued_behind_a_writer_waits_for_it(deployment: &Deployment) {
    let provider = deployment.open(BACKEND);
    let b = backend(&provider);
    let reader = take(&b, "doc", shared(0));
    let writer = acquire_later(&b, &["doc"], wait(8_000));
    until_waiting(&b, 1);
    // Readers hold the key, but the writer is queued first: FIFO.
    assert_eq!(code(block_on(b.acquire("doc", shared(0)))), ErrorCode::LockBusy);
    release(reader);
    let writer = writer.join().unwrap().0.expect("granted");
    release(writer);
    block_on(provider.close());
}

fn scenario_a_counted_key_holds_at_most_its_limit_of_units(deployment: &Deployment) {
    let (one, other) = (deployment.open(BACKEND), deployment.open(BACKEND));
    let (a, b) = (backend(&one), backend(&other));
    let two = take(&a, "exports", counted(3, 2, 0));
    let one_unit = take(&b, "exports", counted(3, 1, 0));
    assert_eq!(code(block_on(a.acquire("exports", counted(3, 1, 0)))), ErrorCode::LockBusy, "3 of 3 units are held");
    release(one_unit);
    let again = take(&a, "exports", counted(3, 1, 0));
    assert_eq!(code(block_on(b.acquire("exports", counted(3, 2, 0)))), ErrorCode::LockBusy);
    let units: HashMap<String, i64> =
        deployment.query(&lock_key("exports"), redis::cmd("HGETALL").arg(lock_key("exports").replacen(":lock:", ":lock-kind:", 1)));
    assert_eq!(units.get("units"), Some(&3));
    assert_eq!(units.get("limit"), Some(&3));
    release(two);
    release(again);
    assert!(deployment.keys("test:lock:*").is_empty() && deployment.keys("test:lock-kind:*").is_empty(), "nothing stays once released");
    block_on(one.close());
    block_on(other.close());
}

fn scenario_a_counted_holder_that_dies_keeps_its_units_only_until_its_own_lease_ends(deployment: &Deployment) {
    let dying = deployment.open(&[("leaseMs", "1500"), ("pollIntervalMs", "5000"), ("notifyPollIntervalMs", "5000")]);
    let living = deployment.open(BACKEND);
    let (d, l) = (backend(&dying), backend(&living));
    // The dying process never releases (nor renews) its lease.
    std::mem::forget(take(&d, "exports", counted(3, 2, 0)));
    // A request that fits beside every holder, the dead one included.
    let light = take(&l, "exports", counted(3, 1, 0));
    let started = Instant::now();
    let (heavy, _) = acquire_later(&l, &["exports"], counted(3, 2, 8_000)).join().unwrap();
    let heavy = heavy.expect("granted once the dead holder's lease ends");
    assert!(started.elapsed() < Duration::from_millis(3_000), "the dead holder kept its units for {:?}", started.elapsed());
    let kind = lock_key("exports").replacen(":lock:", ":lock-kind:", 1);
    let units: HashMap<String, i64> = deployment.query(&lock_key("exports"), redis::cmd("HGETALL").arg(&kind));
    assert_eq!(units.get("units"), Some(&3), "the dead holder's units were taken off");
    release(heavy);
    release(light);
    assert!(deployment.keys("test:lock:*").is_empty() && deployment.keys("test:lock-kind:*").is_empty(), "nothing stays once released");
    block_on(living.close());
}

fn scenario_a_heavy_request_waiting_in_another_process_is_not_overtaken_by_light_ones(deployment: &Deployment) {
    let (light, heavy) = (deployment.open(BACKEND), deployment.open(BACKEND));
    let (l, h) = (backend(&light), backend(&heavy));
    let held = take(&l, "api", counted(3, 1, 0));
    let waiting = acquire_later(&h, &["api"], counted(3, 3, 8_000));
    until_waiting(&h, 1);
    // One unit of three is held, but the heavy request waits first.
    assert_eq!(code(block_on(l.acquire("api", counted(3, 1, 0)))), ErrorCode::LockBusy);
    release(held);
    let heavy_lease = waiting.join().unwrap().0.expect("the heavy request is granted");
    assert_eq!(code(block_on(l.acquire("api", counted(3, 1, 0)))), ErrorCode::LockBusy, "it holds every unit");
    release(heavy_lease);
    release(take(&l, "api", counted(3, 1, 0)));
    block_on(light.close());
    block_on(heavy.close());
}

fn scenario_every_caller_of_a_key_must_give_the_same_limit(deployment: &Deployment) {
    let provider = deployment.open(BACKEND);
    let b = backend(&provider);
    let held = take(&b, "jobs", counted(3, 1, 0));
    for (what, options) in
        [("limit 2", counted(2, 1, 0)), ("plain", wait(0)), ("shared", shared(0)), ("limit 2, waiting", counted(2, 1, 500))]
    {
        assert_eq!(code(block_on(b.acquire("jobs", options))), ErrorCode::InvalidArgument, "{what} on a key held with limit 3");
    }
    release(held);
    let plain = take(&b, "jobs", wait(0));
    assert_eq!(code(block_on(b.acquire("jobs", counted(3, 1, 0)))), ErrorCode::InvalidArgument, "limit 3 on a plain lease (limit 1)");
    release(plain);
    let reader = take(&b, "jobs", shared(0));
    assert_eq!(code(block_on(b.acquire("jobs", counted(2, 1, 0)))), ErrorCode::InvalidArgument, "limit 2 on readers (limit 1)");
    release(reader);
    // Once nothing holds or waits for the key, another limit is fine.
    release(take(&b, "jobs", counted(2, 2, 0)));
    // A key only waited for, by a counted request with limit 3 in another
    // process (its limit and its mark, as that request's try leaves them):
    // a plain set over it is refused too, though nothing holds it.
    let kind = lock_key("jobs").replace(":lock:", ":lock-kind:");
    let queue = lock_key("jobs").replace(":lock:", ":lock-queue:");
    let _: () = deployment.query(&kind, redis::cmd("HSET").arg(&kind).arg("limit").arg(3));
    let _: () = deployment.query(&queue, redis::cmd("ZADD").arg(&queue).arg(i64::MAX / 2).arg("1:another-process"));
    assert_eq!(
        code(block_on(b.acquire_many(&["spare", "jobs"], wait(0)))),
        ErrorCode::InvalidArgument,
        "a plain set on a key waited for with limit 3"
    );
    assert!(deployment.keys("test:lock:*").is_empty(), "the refused set took no key");
    let _: () = deployment.query(&kind, redis::cmd("DEL").arg(&kind));
    let _: () = deployment.query(&queue, redis::cmd("DEL").arg(&queue));
    block_on(provider.close());
}

fn scenario_a_limit_is_forgotten_once_the_key_is_neither_held_nor_waited_for(deployment: &Deployment) {
    let (readers, writers) = (deployment.open(BACKEND), deployment.open(BACKEND));
    let (r, w) = (backend(&readers), backend(&writers));
    let reader = take(&r, "doc", shared(0));
    let writer = acquire_later(&w, &["doc"], wait(8_000));
    until_waiting(&w, 1);
    // The last reader leaves while a writer (limit 1) waits: the limit stays.
    release(reader);
    let writer = writer.join().unwrap().0.expect("granted");
    assert_eq!(code(block_on(r.acquire("doc", counted(3, 1, 0)))), ErrorCode::InvalidArgument, "held with limit 1");
    release(writer);
    release(take(&r, "doc", counted(3, 1, 0)));
    block_on(readers.close());
    block_on(writers.close());
}

/// A release handed on to several waiters of its process in one script
/// call: each grant of that call must count the units the ones before it
/// took, or the key would later take more than its limit.
fn scenario_a_release_handed_to_several_waiters_counts_every_unit(deployment: &Deployment) {
    let (one, other) = (deployment.open(BACKEND), deployment.open(BACKEND));
    let (a, b) = (backend(&one), backend(&other));
    let heavy = take(&a, "pool", counted(3, 2, 0));
    let light = take(&a, "pool", counted(3, 1, 0));
    let first = acquire_later(&a, &["pool"], counted(3, 1, 8_000));
    let second = acquire_later(&a, &["pool"], counted(3, 1, 8_000));
    until_waiting(&a, 2);
    release(heavy);
    let first = first.join().unwrap().0.expect("granted");
    let second = second.join().unwrap().0.expect("granted");
    assert_eq!(code(block_on(b.acquire("pool", counted(3, 1, 0)))), ErrorCode::LockBusy, "3 units held: no room for another");
    release(first);
    release(take(&b, "pool", counted(3, 1, 0)));
    release(second);
    release(light);
    block_on(one.close());
    block_on(other.close());
}

// One unit handed from a holder to a waiter of its own process with the
// same weight, no other request queued: the hand-off script's straight path.
fn scenario_a_unit_handed_to_a_waiter_of_the_same_weight_is_held_and_counted_once(deployment: &Deployment) {
    let (one, other) = (deployment.open(BACKEND), deployment.open(BACKEND));
    let (a, b) = (backend(&one), backend(&other));
    let first = take(&a, "slots", counted(2, 1, 0));
    let second = take(&a, "slots", counted(2, 1, 0));
    let waiter = acquire_later(&a, &["slots"], counted(2, 1, 8_000));
    until_waiting(&a, 1);
    let first_fence = first.fence();
    release(first);
    let handed = waiter.join().unwrap().0.expect("granted");
    assert!(handed.fence() > first_fence, "a new fence for the unit handed on");
    let holders: i64 = deployment.query(&lock_key("slots"), redis::cmd("ZCARD").arg(lock_key("slots")));
    assert_eq!(holders, 2, "the holder that left is gone from the set and the new one is in it");
    let units: HashMap<String, i64> = deployment.query(&lock_key("slots"), redis::cmd("HGETALL").arg(kind_key("slots")));
    assert_eq!(units.get("units"), Some(&2));
    assert_eq!(code(block_on(b.acquire("slots", counted(2, 1, 0)))), ErrorCode::LockBusy, "2 of 2 units are held");
    release(handed);
    release(second);
    release(take(&b, "slots", counted(2, 1, 0)));
    assert!(deployment.keys("test:lock:*").is_empty() && deployment.keys("test:lock-kind:*").is_empty(), "nothing stays once released");
    block_on(one.close());
    block_on(other.close());
}

fn kind_key(key: &str) -> String {
    lock_key(key).replacen(":lock:", ":lock-kind:", 1)
}

/// The scripts extend a key's kind hash only when they extend its set of
/// holders (or make the hash): that rests on the hash never expiring before
/// the set, whichever lease of whichever process came last.
fn scenario_a_kind_hash_outlives_its_set_of_holders(deployment: &Deployment) {
    let longer: Vec<(&str, &str)> = BACKEND.iter().map(|&(k, v)| if k == "leaseMs" { (k, "20000") } else { (k, v) }).collect();
    let (short, long) = (deployment.open(BACKEND), deployment.open(&longer));
    let (a, b) = (backend(&short), backend(&long));
    for (key, options) in [("pool", counted(3, 1, 0)), ("doc", shared(0))] {
        let (lock, kind) = (lock_key(key), kind_key(key));
        let check = |what: &str| {
            // The hash first: the set's time left only shrinks by the time
            // it is read, so a loaded machine's delay between the two reads
            // cannot fail the check (the slack covers PTTL's rounding).
            let hash: i64 = deployment.query(&kind, redis::cmd("PTTL").arg(&kind));
            let set: i64 = deployment.query(&lock, redis::cmd("PTTL").arg(&lock));
            assert!(set > 0 && hash + 20 >= set, "{key}, {what}: the set lives {set} ms, its kind hash {hash} ms");
        };
        let first = take(&a, key, options.clone());
        check("a new key");
        let second = take(&b, key, options.clone());
        check("a longer lease");
        let third = take(&a, key, options.clone());
        check("a lease shorter than the set's");
        assert!(block_on(third.renew()).unwrap());
        check("a renew");
        release(second);
        check("the longer lease gone");
        release(first);
        release(third);
    }
    block_on(short.close());
    block_on(long.close());
}

fn scenario_fences_grow_per_key_across_modes_and_a_writer_is_above_every_reader(deployment: &Deployment) {
    let (one, other) = (deployment.open(BACKEND), deployment.open(BACKEND));
    let (a, b) = (backend(&one), backend(&other));
    let plain = take(&a, "doc", wait(0));
    let plain_fence = plain.fence();
    release(plain);
    let r1 = take(&a, "doc", shared(0));
    let r2 = take(&b, "doc", shared(0));
    assert!(r1.fence() > plain_fence && r2.fence() > r1.fence());
    let readers_top = r2.fence();
    release(r1);
    release(r2);
    let writer = take(&b, "doc", wait(0));
    assert!(writer.fence() > readers_top, "the writer's fence is above every reader's");
    let writer_fence = writer.fence();
    release(writer);
    let set = block_on(a.acquire_many(&["doc", "other"], wait(0))).unwrap();
    let fences: HashMap<String, u64> = set.fences().into_iter().map(|(k, f)| (k.to_owned(), f)).collect();
    assert!(fences["doc"] > writer_fence);
    assert_eq!(set.fence(), fences["doc"], "fence() is that of the first key");
    release(set);
    let counted_lease = take(&a, "other", counted(4, 2, 0));
    assert!(counted_lease.fence() > fences["other"]);
    release(counted_lease);
    block_on(one.close());
    block_on(other.close());
}

fn scenario_several_keys_are_taken_all_or_nothing(deployment: &Deployment) {
    let (one, other) = (deployment.open(BACKEND), deployment.open(BACKEND));
    let (a, b) = (backend(&one), backend(&other));
    if let Deployment::Cluster(cluster) = deployment {
        // So the set is taken one slot at a time, and given back in part.
        let slots: std::collections::BTreeSet<u16> = ["a", "b", "c"].iter().map(|k| cluster.slot(&lock_key(k))).collect();
        assert_eq!(slots.len(), 3, "the three keys are in three slots");
    }
    let held = take(&a, "b", wait(0));
    assert_eq!(code(block_on(b.acquire_many(&["a", "b", "c"], wait(0)))), ErrorCode::LockBusy);
    // Neither of the free keys was taken.
    release(take(&a, "a", wait(0)));
    release(take(&a, "c", wait(0)));
    let waiting = acquire_later(&b, &["c", "a", "b"], wait(8_000));
    until_waiting(&b, 1);
    release(held);
    let set = waiting.join().unwrap().0.expect("granted once b is free");
    assert_eq!(set.keys(), vec!["c", "a", "b"], "the caller's order");
    assert_eq!(set.fences().iter().map(|(k, _)| *k).collect::<Vec<_>>(), vec!["c", "a", "b"]);
    for key in ["a", "b", "c"] {
        assert_eq!(code(block_on(a.acquire(key, wait(0)))), ErrorCode::LockBusy, "{key} is held by the set");
    }
    assert!(block_on(set.renew()).unwrap(), "renew covers every key");
    release(set);
    assert!(deployment.keys("test:lock:*").is_empty(), "release covers every key");
    // Shared mode applies to every key of a set.
    let readers = [block_on(a.acquire_many(&["a", "b"], shared(0))).unwrap(), block_on(b.acquire_many(&["b", "a"], shared(0))).unwrap()];
    assert_eq!(code(block_on(a.acquire("b", wait(0)))), ErrorCode::LockBusy);
    for lease in readers {
        release(lease);
    }
    block_on(one.close());
    block_on(other.close());
}

fn scenario_a_timed_out_or_aborted_acquire_of_several_keys_leaves_nothing_held(deployment: &Deployment) {
    let (one, other) = (deployment.open(BACKEND), deployment.open(BACKEND));
    let (a, b) = (backend(&one), backend(&other));
    let reader = take(&a, "y", shared(0));
    assert_eq!(code(block_on(b.acquire_many(&["x", "y", "z"], wait(300)))), ErrorCode::WaitTimeout);
    let controller = AbortController::new();
    let options = AcquireOptions { signal: Some(controller.signal()), ..wait(8_000) };
    let aborted = acquire_later(&b, &["z", "y", "x"], options);
    until_waiting(&b, 1);
    controller.abort();
    assert_eq!(code(aborted.join().unwrap().0), ErrorCode::Aborted);
    assert_eq!(deployment.keys("test:lock:*"), vec![lock_key("y")], "only the reader's key is held");
    eventually("the writers' marks are taken back", || deployment.keys("test:lock-queue:*").is_empty());
    // So a new reader is not kept out by a writer that left.
    release(take(&a, "y", shared(0)));
    release(reader);
    release(block_on(b.acquire_many(&["x", "y", "z"], wait(0))).unwrap());
    block_on(one.close());
    block_on(other.close());
}

fn scenario_overlapping_key_sets_in_opposite_orders_never_deadlock_or_overlap(deployment: &Deployment) {
    const ROUNDS: usize = 15;
    let providers: Vec<Provider> = (0..2).map(|_| deployment.open(BACKEND)).collect();
    let in_use: Arc<HashMap<&'static str, AtomicUsize>> =
        Arc::new(["a", "b", "c", "d"].into_iter().map(|k| (k, AtomicUsize::new(0))).collect());
    let sets: [&[&'static str]; 4] = [&["a", "b", "c"], &["c", "b", "a"], &["d", "b"], &["a", "d"]];
    let started = Instant::now();
    let threads: Vec<_> = sets
        .iter()
        .enumerate()
        .map(|(i, set)| {
            let backend = backend(&providers[i % 2]);
            let in_use = in_use.clone();
            let set: Vec<&'static str> = set.to_vec();
            thread::spawn(move || {
                for _ in 0..ROUNDS {
                    let lease = block_on(backend.acquire_many(&set, wait(20_000))).expect("granted: no deadlock");
                    for key in &set {
                        assert_eq!(in_use[key].fetch_add(1, Ordering::SeqCst), 0, "{key} held by two leases at once");
                    }
                    thread::sleep(Duration::from_millis(2));
                    for key in &set {
                        in_use[key].fetch_sub(1, Ordering::SeqCst);
                    }
                    assert!(block_on(lease.release()).unwrap());
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().expect("no overlap, no deadlock");
    }
    assert!(started.elapsed() < Duration::from_secs(30));
    assert!(deployment.keys("test:lock:*").is_empty());
    for provider in providers {
        block_on(provider.close());
    }
}

fn scenario_readers_and_writers_of_two_processes_under_load_never_overlap(deployment: &Deployment) {
    const ROUNDS: usize = 20;
    let providers: Vec<Provider> = (0..2).map(|_| deployment.open(BACKEND)).collect();
    let (readers, writers, peak_readers) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let threads: Vec<_> = (0..4)
        .map(|i| {
            let backend = backend(&providers[i % 2]);
            let (readers, writers, peak_readers) = (readers.clone(), writers.clone(), peak_readers.clone());
            thread::spawn(move || {
                for round in 0..ROUNDS {
                    // Three reads to a write, in a different rhythm per thread.
                    let write = (round + i) % 4 == 0;
                    let options = if write { wait(20_000) } else { shared(20_000) };
                    let lease = block_on(backend.acquire("doc", options)).expect("granted");
                    if write {
                        assert_eq!(writers.fetch_add(1, Ordering::SeqCst), 0, "two writers at once");
                        assert_eq!(readers.load(Ordering::SeqCst), 0, "a writer with readers");
                    } else {
                        let now = readers.fetch_add(1, Ordering::SeqCst) + 1;
                        peak_readers.fetch_max(now, Ordering::SeqCst);
                        assert_eq!(writers.load(Ordering::SeqCst), 0, "a reader with a writer");
                    }
                    thread::sleep(Duration::from_millis(3));
                    if write {
                        writers.fetch_sub(1, Ordering::SeqCst);
                    } else {
                        readers.fetch_sub(1, Ordering::SeqCst);
                    }
                    assert!(block_on(lease.release()).unwrap());
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().expect("no reader overlapped a writer");
    }
    assert!(peak_readers.load(Ordering::SeqCst) >= 2, "readers did hold the key together");
    assert!(deployment.keys("test:lock:*").is_empty());
    for provider in providers {
        block_on(provider.close());
    }
}

fn scenario_counted_holders_of_two_processes_under_load_never_exceed_the_limit(deployment: &Deployment) {
    const ROUNDS: usize = 20;
    const LIMIT: u32 = 4;
    let providers: Vec<Provider> = (0..2).map(|_| deployment.open(BACKEND)).collect();
    let (units, peak) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let threads: Vec<_> = (0..4)
        .map(|i| {
            let backend = backend(&providers[i % 2]);
            let (units, peak) = (units.clone(), peak.clone());
            thread::spawn(move || {
                for round in 0..ROUNDS {
                    let weight = 1 + ((round + i) % 3) as u32;
                    let lease = block_on(backend.acquire("pool", counted(LIMIT, weight, 20_000))).expect("granted");
                    let now = units.fetch_add(weight as usize, Ordering::SeqCst) + weight as usize;
                    assert!(now <= LIMIT as usize, "{now} units held at once");
                    peak.fetch_max(now, Ordering::SeqCst);
                    thread::sleep(Duration::from_millis(3));
                    units.fetch_sub(weight as usize, Ordering::SeqCst);
                    assert!(block_on(lease.release()).unwrap());
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().expect("never above the limit");
    }
    assert!(peak.load(Ordering::SeqCst) >= 2, "holders did share the key");
    assert!(deployment.keys("test:lock:*").is_empty() && deployment.keys("test:lock-kind:*").is_empty());
    for provider in providers {
        block_on(provider.close());
    }
}

fn scenario_a_plain_lease_whose_key_went_to_readers_renews_false_and_releases_lease_lost(deployment: &Deployment) {
    let short = deployment.open(&[("leaseMs", "1100")]);
    let long = deployment.open(BACKEND);
    let plain = take(&backend(&short), "doc", wait(0));
    thread::sleep(Duration::from_millis(1_200));
    let reader = take(&backend(&long), "doc", shared(0));
    assert!(!block_on(plain.renew()).unwrap(), "a set of readers is not our token");
    assert_eq!(code(block_on(plain.release())), ErrorCode::LeaseLost);
    assert!(reader.is_valid());
    release(reader);
    block_on(short.close());
    block_on(long.close());
}

on_topologies! {
    every topology {
        readers_hold_a_key_together_and_a_writer_alone => scenario_readers_hold_a_key_together_and_a_writer_alone,
        a_reader_that_dies_keeps_a_writer_out_only_until_its_own_lease_ends => scenario_a_reader_that_dies_keeps_a_writer_out_only_until_its_own_lease_ends,
        a_counted_holder_that_dies_keeps_its_units_only_until_its_own_lease_ends => scenario_a_counted_holder_that_dies_keeps_its_units_only_until_its_own_lease_ends,
        one_readers_renew_extends_only_its_own_expiry => scenario_one_readers_renew_extends_only_its_own_expiry,
        a_writer_waiting_in_another_process_stops_new_readers => scenario_a_writer_waiting_in_another_process_stops_new_readers,
        readers_behind_a_writer_that_gave_up_are_told_at_once => scenario_readers_behind_a_writer_that_gave_up_are_told_at_once,
        within_a_process_a_reader_queued_behind_a_writer_waits_for_it => scenario_within_a_process_a_reader_queued_behind_a_writer_waits_for_it,
        a_counted_key_holds_at_most_its_limit_of_units => scenario_a_counted_key_holds_at_most_its_limit_of_units,
        a_heavy_request_waiting_in_another_process_is_not_overtaken_by_light_ones => scenario_a_heavy_request_waiting_in_another_process_is_not_overtaken_by_light_ones,
        every_caller_of_a_key_must_give_the_same_limit => scenario_every_caller_of_a_key_must_give_the_same_limit,
        a_limit_is_forgotten_once_the_key_is_neither_held_nor_waited_for => scenario_a_limit_is_forgotten_once_the_key_is_neither_held_nor_waited_for,
        a_kind_hash_outlives_its_set_of_holders => scenario_a_kind_hash_outlives_its_set_of_holders,
        a_release_handed_to_several_waiters_counts_every_unit => scenario_a_release_handed_to_several_waiters_counts_every_unit,
        a_unit_handed_to_a_waiter_of_the_same_weight_is_held_and_counted_once => scenario_a_unit_handed_to_a_waiter_of_the_same_weight_is_held_and_counted_once,
        fences_grow_per_key_across_modes_and_a_writer_is_above_every_reader => scenario_fences_grow_per_key_across_modes_and_a_writer_is_above_every_reader,
        several_keys_are_taken_all_or_nothing => scenario_several_keys_are_taken_all_or_nothing,
        a_timed_out_or_aborted_acquire_of_several_keys_leaves_nothing_held => scenario_a_timed_out_or_aborted_acquire_of_several_keys_leaves_nothing_held,
        overlapping_key_sets_in_opposite_orders_never_deadlock_or_overlap => scenario_overlapping_key_sets_in_opposite_orders_never_deadlock_or_overlap,
        readers_and_writers_of_two_processes_under_load_never_overlap => scenario_readers_and_writers_of_two_processes_under_load_never_overlap,
        counted_holders_of_two_processes_under_load_never_exceed_the_limit => scenario_counted_holders_of_two_processes_under_load_never_exceed_the_limit,
        a_plain_lease_whose_key_went_to_readers_renews_false_and_releases_lease_lost => scenario_a_plain_lease_whose_key_went_to_readers_renews_false_and_releases_lease_lost,
    }
}

//! Lock kinds through PostgreSQL, between two providers (each with its own
//! connections, as two processes): readers together and a writer alone, a
//! waiting writer stopping new readers, counted keys, one limit per key,
//! several keys all or nothing and without deadlock in any order.

mod postgres;
#[path = "support/renewals.rs"]
mod renewals;

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use dokebi_lock::{AcquireOptions, Backend, ErrorCode, Lease, LockMode, Provider};
use futures::executor::block_on;
use postgres::{backend, code, count, counts, eventually, wait, Schema};

/// Slow polls: a waiter served was woken by a release.
const BACKEND: &str = "        pollIntervalMs: 5000\n        notifyPollIntervalMs: 5000\n";

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

fn later(backend: &Backend, keys: &[&str], options: AcquireOptions) -> thread::JoinHandle<dokebi_lock::Result<Lease>> {
    let backend = backend.clone();
    let keys: Vec<String> = keys.iter().map(|key| (*key).to_owned()).collect();
    thread::spawn(move || {
        let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
        block_on(backend.acquire_many(&keys, options))
    })
}

fn two(schema: &Schema) -> (Provider, Provider) {
    (schema.open(BACKEND), schema.open(BACKEND))
}

#[test]
fn readers_hold_a_key_together_and_a_writer_alone() {
    let schema = Schema::fresh();
    let (one, other) = two(&schema);
    let (a, b) = (backend(&one), backend(&other));
    let first = take(&a, "doc", shared(0));
    let second = take(&b, "doc", shared(0));
    assert_eq!((counts(&a).held, counts(&a).held_shared), (1, 1));
    assert_eq!(code(block_on(a.acquire("doc", wait(0)))), ErrorCode::LockBusy, "a writer waits for the readers");
    release(first);
    assert_eq!(code(block_on(a.acquire("doc", wait(0)))), ErrorCode::LockBusy, "one reader still holds it");
    let writer = later(&a, &["doc"], wait(10_000));
    eventually("the writer waits", || counts(&a).waiting == 1);
    release(second);
    let writer = writer.join().unwrap().expect("the writer is granted once the last reader leaves");
    assert_eq!(code(block_on(b.acquire("doc", shared(0)))), ErrorCode::LockBusy, "no reader while the writer holds it");
    release(writer);
    release(take(&b, "doc", shared(0)));
    block_on(one.close());
    block_on(other.close());
}

#[test]
fn a_writer_waiting_in_another_process_stops_new_readers() {
    let schema = Schema::fresh();
    let (readers, writers) = two(&schema);
    let (r, w) = (backend(&readers), backend(&writers));
    let reader = take(&r, "doc", shared(0));
    let writer = later(&w, &["doc"], wait(10_000));
    eventually("the writer left its mark", || {
        count(&format!("SELECT count(*) FROM {} WHERE lapses_at > now()", schema.table("_waiting"))) == 1
    });
    assert_eq!(code(block_on(r.acquire("doc", shared(0)))), ErrorCode::LockBusy, "a new reader waits behind the writer");
    let late_reader = later(&r, &["doc"], shared(10_000));
    eventually("the late reader waits", || counts(&r).waiting == 1);
    release(reader);
    let writer = writer.join().unwrap().expect("the writer goes first");
    assert_eq!((counts(&r).held, counts(&r).waiting), (0, 1), "the late reader waits while the writer holds the key");
    release(writer);
    release(late_reader.join().unwrap().expect("the reader follows the writer"));
    block_on(readers.close());
    block_on(writers.close());
}

#[test]
fn a_counted_key_holds_at_most_its_limit_and_every_caller_gives_the_same_limit() {
    let schema = Schema::fresh();
    let (one, other) = two(&schema);
    let (a, b) = (backend(&one), backend(&other));
    let two_units = take(&a, "pool", counted(3, 2, 0));
    let one_unit = take(&b, "pool", counted(3, 1, 0));
    assert_eq!(code(block_on(b.acquire("pool", counted(3, 1, 0)))), ErrorCode::LockBusy, "3 of 3 units are held");
    assert_eq!(code(block_on(b.acquire("pool", counted(4, 1, 0)))), ErrorCode::InvalidArgument, "held with limit 3");
    assert_eq!(code(block_on(b.acquire("pool", wait(0)))), ErrorCode::InvalidArgument, "a plain lease is limit 1");
    release(two_units);
    let two_more = take(&b, "pool", counted(3, 2, 0));
    release(one_unit);
    release(two_more);
    // Neither held nor waited for: the next caller picks another limit.
    release(take(&a, "pool", counted(5, 5, 0)));
    block_on(one.close());
    block_on(other.close());
}

#[test]
fn a_heavy_request_waiting_in_another_process_is_not_overtaken_by_light_ones() {
    let schema = Schema::fresh();
    let (one, other) = two(&schema);
    let (a, b) = (backend(&one), backend(&other));
    let held = take(&a, "pool", counted(2, 1, 0));
    let heavy = later(&b, &["pool"], counted(2, 2, 10_000));
    eventually("the heavy request waits", || {
        count(&format!("SELECT count(*) FROM {} WHERE lapses_at > now()", schema.table("_waiting"))) == 1
    });
    assert_eq!(
        code(block_on(a.acquire("pool", counted(2, 1, 0)))),
        ErrorCode::LockBusy,
        "one unit is free, but the heavy request is first"
    );
    release(held);
    release(heavy.join().unwrap().expect("the heavy request is granted"));
    block_on(one.close());
    block_on(other.close());
}

#[test]
fn several_keys_are_taken_all_or_nothing() {
    let schema = Schema::fresh();
    let (one, other) = two(&schema);
    let (a, b) = (backend(&one), backend(&other));
    let middle = take(&a, "b", wait(0));
    assert_eq!(code(block_on(b.acquire_many(&["a", "b", "c"], wait(0)))), ErrorCode::LockBusy);
    assert_eq!(
        count(&format!("SELECT count(*) FROM {} WHERE expires_at > now()", schema.table("_holders"))),
        1,
        "nothing of the set is held"
    );
    let set = later(&b, &["c", "b", "a"], wait(10_000));
    eventually("the set waits", || counts(&b).waiting == 1);
    release(middle);
    let set = set.join().unwrap().expect("granted once b is free");
    let fences = set.fences();
    assert_eq!(fences.iter().map(|(key, _)| *key).collect::<Vec<_>>(), ["c", "b", "a"], "fences in the caller's order");
    assert_eq!(code(block_on(a.acquire("a", wait(0)))), ErrorCode::LockBusy);
    release(set);
    block_on(one.close());
    block_on(other.close());
}

#[test]
fn overlapping_key_sets_in_opposite_orders_never_deadlock_or_overlap() {
    const ROUNDS: usize = 15;
    let schema = Schema::fresh();
    let providers: Vec<Provider> = (0..2).map(|_| schema.open(BACKEND)).collect();
    let in_use: Arc<HashMap<&'static str, AtomicUsize>> =
        Arc::new(["a", "b", "c", "d"].into_iter().map(|k| (k, AtomicUsize::new(0))).collect());
    let sets: [&[&'static str]; 4] = [&["a", "b", "c"], &["c", "b", "a"], &["d", "b"], &["a", "d"]];
    let threads: Vec<_> = sets
        .iter()
        .enumerate()
        .map(|(i, set)| {
            let backend = backend(&providers[i % 2]);
            let in_use = in_use.clone();
            let set: Vec<&'static str> = set.to_vec();
            thread::spawn(move || {
                for _ in 0..ROUNDS {
                    let lease = block_on(backend.acquire_many(&set, wait(30_000))).expect("granted: no deadlock");
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
    assert_eq!(count(&format!("SELECT count(*) FROM {} WHERE expires_at > now()", schema.table("_holders"))), 0);
    for provider in providers {
        block_on(provider.close());
    }
}

#[test]
fn readers_writers_and_counted_holders_of_two_processes_under_load_never_overlap() {
    const ROUNDS: usize = 20;
    let schema = Schema::fresh();
    let providers: Vec<Provider> = (0..2).map(|_| schema.open(BACKEND)).collect();
    let (readers, writers, units) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let threads: Vec<_> = (0..4)
        .map(|i| {
            let backend = backend(&providers[i % 2]);
            let (readers, writers, units) = (readers.clone(), writers.clone(), units.clone());
            thread::spawn(move || {
                for round in 0..ROUNDS {
                    let write = (round + i) % 4 == 0;
                    let lease = block_on(backend.acquire("doc", if write { wait(30_000) } else { shared(30_000) })).expect("granted");
                    if write {
                        assert_eq!(writers.fetch_add(1, Ordering::SeqCst), 0, "two writers at once");
                        assert_eq!(readers.load(Ordering::SeqCst), 0, "a writer with readers");
                    } else {
                        readers.fetch_add(1, Ordering::SeqCst);
                        assert_eq!(writers.load(Ordering::SeqCst), 0, "a reader with a writer");
                    }
                    let weight = 1 + (round + i) % 2;
                    let pool = block_on(backend.acquire("pool", counted(3, weight as u32, 30_000))).expect("granted");
                    assert!(units.fetch_add(weight, Ordering::SeqCst) + weight <= 3, "more than 3 units held");
                    thread::sleep(Duration::from_millis(2));
                    units.fetch_sub(weight, Ordering::SeqCst);
                    assert!(block_on(pool.release()).unwrap());
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
        thread.join().expect("no overlap");
    }
    for provider in providers {
        block_on(provider.close());
    }
}

#[test]
fn a_release_handed_to_several_waiters_of_this_process_counts_every_unit() {
    let schema = Schema::fresh();
    let (one, other) = two(&schema);
    let (a, b) = (backend(&one), backend(&other));
    let heavy = take(&a, "pool", counted(3, 2, 0));
    let light = take(&a, "pool", counted(3, 1, 0));
    let first = later(&a, &["pool"], counted(3, 1, 10_000));
    let second = later(&a, &["pool"], counted(3, 1, 10_000));
    eventually("two wait", || counts(&a).waiting == 2);
    release(heavy);
    let first = first.join().unwrap().expect("granted");
    let second = second.join().unwrap().expect("granted");
    assert_eq!(code(block_on(b.acquire("pool", counted(3, 1, 0)))), ErrorCode::LockBusy, "3 units held: no room for another");
    release(first);
    release(take(&b, "pool", counted(3, 1, 0)));
    release(second);
    release(light);
    assert_eq!(count(&format!("SELECT count(*) FROM {} WHERE expires_at > now()", schema.table("_holders"))), 0);
    block_on(one.close());
    block_on(other.close());
}

/// What a renewal finds on a server whose clock is behind the one its lease
/// expired on (a backward step, a promoted standby): its row live again
/// beside the holders granted the key meanwhile (written here as such a
/// clock shows them; `tests/review_r1.rs` steps a real clock). The row is
/// extended only where a take of its kind would have been granted beside
/// them: a renewal never makes two holders live that a take would not.
#[test]
fn a_renewal_extends_no_row_beside_holders_a_take_of_its_kind_would_not_join() {
    let schema = Schema::fresh();
    let provider = schema.open(BACKEND);
    release(take(&backend(&provider), "installed", wait(0)));
    for (i, (what, mine, others, extended)) in renewals::CASES.iter().enumerate() {
        let key = format!("k{i}");
        let row = |slot: usize, token: &str, (shared, limit, weight): renewals::Kind| {
            format!("('probe', '{key}', {slot}, '{token}', {shared}, {limit}, {weight}, clock_timestamp() + interval '10 s')")
        };
        let holders: Vec<String> = std::iter::once(row(0, "mine", *mine))
            .chain(others.iter().enumerate().map(|(j, other)| row(j + 1, &format!("other{j}"), *other)))
            .collect();
        postgres::batch(&format!(
            "INSERT INTO {} VALUES ('probe', '{key}', 1, clock_timestamp() + interval '1 minute');
             INSERT INTO {} (namespace, key, slot, token, shared, lim, weight, expires_at) VALUES {};",
            schema.table(""),
            schema.table("_holders"),
            holders.join(", ")
        ));
        let renewed = count(&format!("SELECT {}('probe', ARRAY['{key}'], 'mine', 60000, 1000)::bigint", schema.table("_renew")));
        assert_eq!(renewed == 1, *extended, "{what}: renewed {renewed}");
    }
    block_on(provider.close());
}

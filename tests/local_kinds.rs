//! Lock kinds on the local driver through the Rust API: shared mode,
//! counted keys and several keys at once, with async tasks and with blocked
//! threads (the C surface's path), including the waits that end without a
//! grant.

use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use dokebi_lock::local::LocalBackend;
use dokebi_lock::options::LocalOptions;
use dokebi_lock::{AbortController, AcquireOptions, ErrorCode, LockKind, LockMode, Provider};
use futures::executor::block_on;
use futures::FutureExt;

const SHARED: LockKind = LockKind { mode: LockMode::Shared, limit: 1, weight: 1 };

fn shared() -> AcquireOptions {
    AcquireOptions { mode: LockMode::Shared, ..AcquireOptions::default() }
}

fn counted(limit: u32, weight: u32) -> AcquireOptions {
    AcquireOptions { limit: Some(limit), weight: Some(weight), ..AcquireOptions::default() }
}

fn waiting(ms: u64, options: AcquireOptions) -> AcquireOptions {
    AcquireOptions { wait_timeout: Some(Duration::from_millis(ms)), ..options }
}

#[test]
fn readers_hold_together_and_a_writer_is_granted_when_the_last_leaves() {
    let backend = LocalBackend::new(LocalOptions::default());
    let r1 = block_on(backend.acquire("k", shared())).unwrap();
    let r2 = block_on(backend.acquire("k", shared())).unwrap();
    assert_eq!(block_on(backend.acquire("k", waiting(0, AcquireOptions::default()))).unwrap_err().code(), ErrorCode::LockBusy);
    let mut writer = Box::pin(backend.acquire("k", AcquireOptions::default()));
    assert!((&mut writer).now_or_never().is_none());
    assert_eq!(backend.counts().held_shared, 2);
    assert!(r1.release());
    assert!((&mut writer).now_or_never().is_none(), "a reader still holds the key");
    let reader_fence = r2.fence();
    assert!(r2.release());
    let w = block_on(writer).unwrap();
    assert!(w.fence() > reader_fence, "the writer's fence is above every reader's before it");
}

#[test]
fn threads_of_readers_and_writers_never_overlap_a_writer() {
    let backend = LocalBackend::new(LocalOptions::default());
    // Positive: readers inside; -1: a writer inside.
    let inside = Arc::new(AtomicI64::new(0));
    let most_readers = Arc::new(AtomicI64::new(0));
    let start = Arc::new(Barrier::new(6));
    let workers: Vec<_> = (0..6)
        .map(|n| {
            let (backend, inside, most_readers, start) = (backend.clone(), inside.clone(), most_readers.clone(), start.clone());
            thread::spawn(move || {
                // First every thread takes the key as a reader and holds it
                // until all six hold it at once: readers share it.
                let lease = backend.acquire_blocking_kind(&["doc"], SHARED, Some(Duration::from_secs(10))).unwrap();
                most_readers.fetch_max(inside.fetch_add(1, Ordering::SeqCst) + 1, Ordering::SeqCst);
                let deadline = Instant::now() + Duration::from_secs(10);
                while inside.load(Ordering::SeqCst) < 6 {
                    let now = inside.load(Ordering::SeqCst);
                    assert!(Instant::now() < deadline, "only {now} of 6 readers held the key at once");
                    thread::yield_now();
                }
                start.wait();
                inside.fetch_sub(1, Ordering::SeqCst);
                assert!(lease.release());
                start.wait();
                for round in 0..300 {
                    let writer = (n + round) % 3 == 0;
                    let kind = if writer { LockKind::EXCLUSIVE } else { SHARED };
                    let lease = backend.acquire_blocking_kind(&["doc"], kind, Some(Duration::from_secs(10))).unwrap();
                    if writer {
                        assert_eq!(inside.compare_exchange(0, -1, Ordering::SeqCst, Ordering::SeqCst), Ok(0), "a writer alone");
                        thread::yield_now();
                        inside.store(0, Ordering::SeqCst);
                    } else {
                        let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                        assert!(now > 0, "no reader beside a writer");
                        most_readers.fetch_max(now, Ordering::SeqCst);
                        thread::yield_now();
                        inside.fetch_sub(1, Ordering::SeqCst);
                    }
                    assert!(lease.release());
                }
            })
        })
        .collect();
    workers.into_iter().for_each(|w| w.join().unwrap());
    assert_eq!(backend.counts().held, 0);
    assert_eq!(most_readers.load(Ordering::SeqCst), 6, "the six readers held the key together");
}

#[test]
fn threads_on_a_counted_key_hold_at_most_its_limit() {
    let backend = LocalBackend::new(LocalOptions::default());
    let units = Arc::new(AtomicUsize::new(0));
    let workers: Vec<_> = (0..6u32)
        .map(|n| {
            let (backend, units) = (backend.clone(), units.clone());
            thread::spawn(move || {
                let weight = 1 + n % 2;
                let kind = LockKind { mode: LockMode::Exclusive, limit: 3, weight };
                for _ in 0..300 {
                    let lease = backend.acquire_blocking_kind(&["pool"], kind, Some(Duration::from_secs(10))).unwrap();
                    let now = units.fetch_add(weight as usize, Ordering::SeqCst) + weight as usize;
                    assert!(now <= 3, "{now} units held of 3");
                    thread::yield_now();
                    units.fetch_sub(weight as usize, Ordering::SeqCst);
                    assert!(lease.release());
                }
            })
        })
        .collect();
    workers.into_iter().for_each(|w| w.join().unwrap());
}

#[test]
fn threads_taking_overlapping_key_sets_in_opposite_orders_never_deadlock_or_overlap() {
    let backend = LocalBackend::new(LocalOptions::default());
    let holders: Arc<Mutex<Vec<&'static str>>> = Arc::default();
    let sets: [&[&'static str]; 4] = [&["a", "b", "c"], &["c", "b", "a"], &["b", "a"], &["c", "a"]];
    let workers: Vec<_> = sets
        .into_iter()
        .map(|keys| {
            let (backend, holders) = (backend.clone(), holders.clone());
            thread::spawn(move || {
                for _ in 0..300 {
                    let lease = backend.acquire_blocking_kind(keys, LockKind::EXCLUSIVE, Some(Duration::from_secs(10))).unwrap();
                    {
                        let mut held = holders.lock().unwrap();
                        assert!(keys.iter().all(|key| !held.contains(key)), "no key of the set has another holder");
                        held.extend(keys);
                    }
                    thread::yield_now();
                    holders.lock().unwrap().retain(|key| !keys.contains(key));
                    assert!(lease.release());
                }
            })
        })
        .collect();
    workers.into_iter().for_each(|w| w.join().unwrap());
    assert_eq!(backend.counts().held + backend.counts().waiting, 0);
}

#[test]
fn a_key_set_lease_has_every_key_and_one_fence_per_key() {
    let backend = LocalBackend::new(LocalOptions::default());
    let lease = block_on(backend.acquire_many(&["from", "to"], AcquireOptions::default())).unwrap();
    assert_eq!(lease.keys(), ["from", "to"]);
    assert_eq!(lease.key(), "from");
    assert_eq!(lease.fences(), [("from", lease.fence()), ("to", lease.fence())]);
    assert_eq!(backend.try_acquire("to").unwrap_err().code(), ErrorCode::LockBusy);
    assert!(lease.release());
    backend.try_acquire("to").unwrap();
}

#[test]
fn a_wait_for_a_key_set_that_ends_without_a_grant_leaves_nothing_held() {
    let backend = LocalBackend::new(LocalOptions::default());
    let held = backend.try_acquire("b").unwrap();
    let timed_out = block_on(backend.acquire_many(&["a", "b"], waiting(20, AcquireOptions::default()))).unwrap_err();
    assert_eq!(timed_out.code(), ErrorCode::WaitTimeout);
    let controller = AbortController::new();
    let options = AcquireOptions { signal: Some(controller.signal()), ..AcquireOptions::default() };
    let mut aborted = Box::pin(backend.acquire_many(&["a", "b"], options));
    assert!((&mut aborted).now_or_never().is_none());
    controller.abort();
    assert_eq!(block_on(aborted).unwrap_err().code(), ErrorCode::Aborted);
    // A dropped wait leaves its queues too.
    let mut dropped = Box::pin(backend.acquire_many(&["a", "b"], AcquireOptions::default()));
    assert!((&mut dropped).now_or_never().is_none());
    drop(dropped);
    assert_eq!(backend.counts().waiting, 0);
    backend.try_acquire("a").unwrap();
    drop(held);
    assert_eq!(backend.counts().held, 0);
}

#[test]
fn waiters_sharing_one_aborted_signal_are_all_aborted_and_none_is_granted() {
    // The first polled leaves its queue, which lets the reader behind it
    // in; that reader's signal was aborted before its grant.
    let backend = LocalBackend::new(LocalOptions::default());
    let reader = block_on(backend.acquire("k", shared())).unwrap();
    let controller = AbortController::new();
    let with_signal = |options: AcquireOptions| AcquireOptions { signal: Some(controller.signal()), ..options };
    let mut writer = Box::pin(backend.acquire("k", with_signal(AcquireOptions::default())));
    let mut behind = Box::pin(backend.acquire("k", with_signal(shared())));
    assert!((&mut writer).now_or_never().is_none());
    assert!((&mut behind).now_or_never().is_none());
    controller.abort();
    assert_eq!(block_on(writer).unwrap_err().code(), ErrorCode::Aborted);
    assert_eq!(block_on(behind).map(|lease| lease.fence()).unwrap_err().code(), ErrorCode::Aborted);
    assert_eq!((backend.counts().held, backend.counts().waiting), (1, 0));
    drop(reader);
    assert_eq!(backend.counts().held, 0);
}

#[test]
fn a_key_set_larger_than_max_keys_is_key_limit_before_its_keys_are_checked() {
    let backend = LocalBackend::new(LocalOptions { max_keys: 10, ..LocalOptions::default() });
    let mut keys: Vec<String> = (0..1_000).map(|i| format!("k{i}")).collect();
    keys.push("k0".into());
    let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
    assert_eq!(block_on(backend.acquire_many(&keys, AcquireOptions::default())).unwrap_err().code(), ErrorCode::KeyLimit);
    assert_eq!(backend.counts().held, 0);
}

#[test]
fn bad_kinds_and_key_sets_are_invalid_argument() {
    let backend = LocalBackend::new(LocalOptions::default());
    for options in [
        counted(0, 1),
        counted(2, 3),
        AcquireOptions { limit: Some(2), ..shared() },
        AcquireOptions { weight: Some(2), ..AcquireOptions::default() },
    ] {
        assert_eq!(block_on(backend.acquire("k", options)).unwrap_err().code(), ErrorCode::InvalidArgument);
    }
    assert_eq!(block_on(backend.acquire_many(&[], AcquireOptions::default())).unwrap_err().code(), ErrorCode::InvalidArgument);
    assert_eq!(block_on(backend.acquire_many(&["a", "a"], AcquireOptions::default())).unwrap_err().code(), ErrorCode::InvalidArgument);
    let lease = block_on(backend.acquire("api", counted(3, 1))).unwrap();
    assert_eq!(block_on(backend.acquire("api", counted(4, 1))).unwrap_err().code(), ErrorCode::InvalidArgument);
    assert_eq!(backend.try_acquire("api").unwrap_err().code(), ErrorCode::InvalidArgument);
    drop(lease);
    assert_eq!(backend.counts().held, 0);
}

#[test]
fn the_provider_api_takes_kinds_and_key_sets_and_status_counts_shared_holders() {
    let provider = Provider::from_yaml("schemaVersion: 1\noptions:\n  dokebi-lock:\n    backends:\n      b: {}\n").unwrap();
    let backend = provider.backend("b").unwrap();
    let reader = block_on(backend.acquire("k", shared())).unwrap();
    let pair = block_on(backend.acquire_many(&["x", "y"], shared())).unwrap();
    assert_eq!(pair.keys(), ["x", "y"]);
    assert_eq!(backend.status().held_shared, 2);
    let sections = block_on(backend.with_lock_many(&["x", "y"], shared(), |section| async move { section.fence })).unwrap();
    assert!(sections > pair.fence());
    drop((reader, pair));
    assert_eq!(backend.status().held, 0);
    block_on(provider.close());
}

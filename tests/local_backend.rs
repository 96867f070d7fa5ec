//! The local driver through the Rust API: async tasks and blocking threads,
//! timeouts, aborts, cancellation by drop, close, and the provider around it.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use dokebi_lock::local::LocalBackend;
use dokebi_lock::options::LocalOptions;
use dokebi_lock::{AbortController, AcquireOptions, ErrorCode, Provider};
use futures::executor::block_on;
use futures::future::{select, Either};
use futures::FutureExt;

const YAML: &str = "schemaVersion: 1\noptions:\n  dokebi-lock:\n    backends:\n      orders: {}\n      jobs:\n        maxWaiters: 1\n";

fn backend() -> LocalBackend {
    LocalBackend::new(LocalOptions::default())
}

fn wait(ms: u64) -> AcquireOptions {
    AcquireOptions { wait_timeout: Some(Duration::from_millis(ms)), signal: None, ..AcquireOptions::default() }
}

#[test]
fn a_free_key_is_granted_and_release_is_true_once() {
    let backend = backend();
    let lease = backend.try_acquire("order:42").unwrap();
    assert_eq!(lease.key(), "order:42");
    assert!(lease.is_valid());
    assert!(lease.renew());
    assert!(lease.release());
    assert!(!lease.release(), "second release is false");
    assert!(!lease.is_valid());
    assert!(!lease.renew());
}

#[test]
fn fences_grow_with_every_acquire_of_the_backend() {
    let backend = backend();
    let mut last = 0;
    for key in ["a", "b", "a", "c", "a"] {
        let lease = backend.try_acquire(key).unwrap();
        assert!(lease.fence() > last);
        last = lease.fence();
    }
}

#[test]
fn different_keys_are_held_at_once_and_a_held_key_is_busy_without_waiting() {
    let backend = backend();
    let a = backend.try_acquire("a").unwrap();
    let _b = backend.try_acquire("b").unwrap();
    assert_eq!(backend.try_acquire("a").unwrap_err().code(), ErrorCode::LockBusy);
    let err = block_on(backend.acquire("a", wait(0))).unwrap_err();
    assert_eq!(err.code(), ErrorCode::LockBusy, "waitTimeoutMs 0 tries once");
    drop(a);
    backend.try_acquire("a").expect("dropping a lease releases it");
}

#[test]
fn waiters_of_one_key_are_served_in_fifo_order() {
    let backend = backend();
    let first = backend.try_acquire("k").unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));
    let waiters: Vec<_> = (0..5)
        .map(|i| {
            let backend = backend.clone();
            let order = order.clone();
            async move {
                let lease = backend.acquire("k", wait(5_000)).await.unwrap();
                order.lock().unwrap().push(i);
                lease.release();
            }
            .boxed()
        })
        .collect();
    // Poll every waiter once so they queue in index order, then release.
    let mut pool = futures::executor::LocalPool::new();
    let spawner = pool.spawner();
    for waiter in waiters {
        futures::task::LocalSpawnExt::spawn_local(&spawner, waiter).unwrap();
        pool.run_until_stalled();
    }
    assert_eq!(backend.counts().waiting, 5);
    first.release();
    pool.run();
    assert_eq!(*order.lock().unwrap(), [0, 1, 2, 3, 4]);
    assert_eq!(backend.counts().held, 0);
}

#[test]
fn blocked_threads_are_served_in_fifo_order_whether_they_spin_or_sleep() {
    // The first in line spins for its hand-off, the others sleep at once;
    // each hand-off goes to the oldest waiter either way.
    let backend = backend();
    let first = backend.try_acquire("k").unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));
    let threads: Vec<_> = (0..6)
        .map(|i| {
            let (waiter, order) = (backend.clone(), order.clone());
            let thread = thread::spawn(move || {
                let lease = waiter.acquire_blocking("k", Some(Duration::from_secs(10))).unwrap();
                order.lock().unwrap().push(i);
                assert!(lease.release());
            });
            while backend.counts().waiting < i + 1 {
                thread::yield_now();
            }
            thread
        })
        .collect();
    first.release();
    threads.into_iter().for_each(|t| t.join().unwrap());
    assert_eq!(*order.lock().unwrap(), [0, 1, 2, 3, 4, 5]);
    assert_eq!(backend.counts().held + backend.counts().waiting, 0);
}

#[test]
fn a_wait_past_its_timeout_is_wait_timeout_and_leaves_the_queue() {
    let backend = backend();
    let _held = backend.try_acquire("k").unwrap();
    let started = Instant::now();
    let err = block_on(backend.acquire("k", wait(50))).unwrap_err();
    assert_eq!(err.code(), ErrorCode::WaitTimeout);
    assert!(started.elapsed() >= Duration::from_millis(50));
    assert_eq!(backend.counts().waiting, 0);
}

#[test]
fn the_backend_wait_timeout_is_the_default() {
    let backend = LocalBackend::new(LocalOptions { wait_timeout_ms: 30, ..LocalOptions::default() });
    let _held = backend.try_acquire("k").unwrap();
    let err = block_on(backend.acquire("k", AcquireOptions::default())).unwrap_err();
    assert_eq!(err.code(), ErrorCode::WaitTimeout);
}

#[test]
fn an_aborted_signal_is_aborted_before_and_while_waiting() {
    let backend = backend();
    let controller = AbortController::new();
    controller.abort();
    let options = AcquireOptions { wait_timeout: None, signal: Some(controller.signal()), ..AcquireOptions::default() };
    let err = block_on(backend.acquire("free", options)).unwrap_err();
    assert_eq!(err.code(), ErrorCode::Aborted, "already aborted: not even a free key is taken");
    assert_eq!(backend.counts().held, 0);

    let _held = backend.try_acquire("k").unwrap();
    let controller = AbortController::new();
    let signal = controller.signal();
    let aborter = thread::spawn(move || {
        thread::sleep(Duration::from_millis(30));
        controller.abort();
    });
    let err =
        block_on(backend.acquire(
            "k",
            AcquireOptions { wait_timeout: Some(Duration::from_secs(10)), signal: Some(signal), ..AcquireOptions::default() },
        ))
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::Aborted);
    assert_eq!(backend.counts().waiting, 0);
    aborter.join().unwrap();
}

#[test]
fn a_signal_does_nothing_once_the_lease_is_granted() {
    let backend = backend();
    let controller = AbortController::new();
    let lease = block_on(
        backend.acquire("k", AcquireOptions { wait_timeout: None, signal: Some(controller.signal()), ..AcquireOptions::default() }),
    )
    .unwrap();
    controller.abort();
    assert!(lease.is_valid());
    assert!(lease.release());
}

#[test]
fn dropping_a_waiting_acquire_leaves_the_queue() {
    let backend = backend();
    let held = backend.try_acquire("k").unwrap();
    let waiting = backend.acquire("k", wait(10_000));
    let outcome = block_on(select(Box::pin(waiting), futures_timer::Delay::new(Duration::from_millis(20))));
    assert!(matches!(outcome, Either::Right(_)), "still waiting");
    drop(outcome);
    assert_eq!(backend.counts().waiting, 0);
    held.release();
    backend.try_acquire("k").expect("no abandoned waiter owns the key");
}

#[test]
fn a_lease_handed_to_an_abandoned_waiter_is_passed_on_not_leaked() {
    let backend = backend();
    let held = backend.try_acquire("k").unwrap();
    let mut abandoned = Box::pin(backend.acquire("k", wait(10_000)));
    let mut pool = futures::executor::LocalPool::new();
    // Queue the first waiter, then a second one behind it.
    assert!(pool.run_until(futures::future::poll_immediate(&mut abandoned)).is_none());
    let next = backend.clone();
    let second = thread::spawn(move || next.acquire_blocking("k", Some(Duration::from_secs(5))).map(|l| l.fence()));
    while backend.counts().waiting < 2 {
        thread::yield_now();
    }
    held.release(); // hands the key to `abandoned`, which never polls again
    drop(abandoned); // ...and gives it up: the key must move on to `second`
    assert!(second.join().unwrap().is_ok());
    assert_eq!(backend.counts().held, 0);
}

#[test]
fn threads_contending_on_one_key_never_overlap() {
    let backend = backend();
    let inside = Arc::new(AtomicBool::new(false));
    let entries = Arc::new(AtomicUsize::new(0));
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let (backend, inside, entries) = (backend.clone(), inside.clone(), entries.clone());
            thread::spawn(move || {
                for _ in 0..500 {
                    let lease = backend.acquire_blocking("k", Some(Duration::from_secs(10))).unwrap();
                    assert!(!inside.swap(true, Ordering::SeqCst), "two holders at once");
                    entries.fetch_add(1, Ordering::SeqCst);
                    inside.store(false, Ordering::SeqCst);
                    assert!(lease.release());
                }
            })
        })
        .collect();
    threads.into_iter().for_each(|t| t.join().unwrap());
    assert_eq!(entries.load(Ordering::SeqCst), 2_000);
    assert_eq!(backend.counts().held + backend.counts().waiting, 0);
}

#[test]
fn blocking_acquire_times_out() {
    let backend = backend();
    let _held = backend.try_acquire("k").unwrap();
    let err = backend.acquire_blocking("k", Some(Duration::from_millis(30))).unwrap_err();
    assert_eq!(err.code(), ErrorCode::WaitTimeout);
    assert_eq!(backend.counts().waiting, 0);
}

#[test]
fn close_rejects_waiters_invalidates_leases_and_fails_later_calls() {
    let backend = backend();
    let held = backend.try_acquire("k").unwrap();
    let waiter = {
        let backend = backend.clone();
        thread::spawn(move || backend.acquire_blocking("k", Some(Duration::from_secs(10))).map(|_| ()))
    };
    let async_waiter = {
        let backend = backend.clone();
        thread::spawn(move || block_on(backend.acquire("k", wait(10_000))).map(|_| ()))
    };
    while backend.counts().waiting < 2 {
        thread::yield_now();
    }
    backend.close();
    assert_eq!(waiter.join().unwrap().unwrap_err().code(), ErrorCode::Closed);
    assert_eq!(async_waiter.join().unwrap().unwrap_err().code(), ErrorCode::Closed);
    assert!(!held.is_valid());
    assert!(!held.release(), "a lease invalidated by close is not released again");
    assert_eq!(backend.try_acquire("other").unwrap_err().code(), ErrorCode::Closed);
}

#[test]
fn the_provider_names_its_backends_and_closes_them() {
    let provider = Provider::from_yaml(YAML).unwrap();
    assert_eq!(provider.names(), ["jobs", "orders"]);
    let err = provider.backend("nope").unwrap_err();
    assert_eq!(err.code(), ErrorCode::UnknownBackend);
    assert!(!err.to_string().contains("nope"), "names may be user data too: not in the message");
    let orders = provider.backend("orders").unwrap();
    let lease = block_on(orders.acquire("k", AcquireOptions::default())).unwrap();
    assert!(lease.remaining().is_none(), "a local lease never expires");
    block_on(provider.close());
    assert!(!lease.is_valid());
    assert_eq!(lease.remaining(), Some(Duration::ZERO));
    assert_eq!(provider.backend("orders").unwrap_err().code(), ErrorCode::Closed);
    assert_eq!(block_on(orders.acquire("k", AcquireOptions::default())).unwrap_err().code(), ErrorCode::Closed);
}

#[test]
fn max_waiters_counts_the_whole_backend() {
    let provider = Provider::from_yaml(YAML).unwrap();
    let jobs = provider.backend("jobs").unwrap();
    let _a = block_on(jobs.acquire("a", wait(0))).unwrap();
    let _b = block_on(jobs.acquire("b", wait(0))).unwrap();
    let mut first = Box::pin(jobs.acquire("a", wait(10_000)));
    assert!(block_on(futures::future::poll_immediate(&mut first)).is_none());
    let err = block_on(jobs.acquire("b", wait(10_000))).unwrap_err();
    assert_eq!(err.code(), ErrorCode::QueueFull, "one waiter on key a fills maxWaiters 1 for key b too");
    drop(first);
    let mut second = Box::pin(jobs.acquire("b", wait(10_000)));
    assert!(block_on(futures::future::poll_immediate(&mut second)).is_none(), "a dropped waiter frees its place");
}

#[test]
fn with_lock_runs_the_section_exclusively_and_releases_in_all_cases() {
    let provider = Provider::from_yaml(YAML).unwrap();
    let orders = provider.backend("orders").unwrap();
    let fence = block_on(orders.with_lock("k", wait(0), |section| async move {
        assert!(!section.signal.is_aborted());
        section.fence
    }))
    .unwrap();
    assert!(fence > 0);
    let failed: Result<(), &str> = block_on(orders.with_lock("k", wait(0), |_| async { Err("section failed") })).unwrap();
    assert_eq!(failed, Err("section failed"), "the section's own result comes back unchanged");
    let busy = block_on(orders.with_lock("k", wait(0), |_| async {
        provider.backend("orders").unwrap().acquire("k", wait(0)).await.map(|_| ()).unwrap_err().code()
    }))
    .unwrap();
    assert_eq!(busy, ErrorCode::LockBusy, "the key is held while the section runs");
    assert_eq!(orders.status().held, 0, "released after every section");
}

#[test]
fn close_during_a_with_lock_section_aborts_its_signal_and_fails_with_lease_lost() {
    let provider = Provider::from_yaml(YAML).unwrap();
    let orders = provider.backend("orders").unwrap();
    let (provider, aborted) = (&provider, &AtomicBool::new(false));
    let result = block_on(orders.with_lock("k", wait(0), |section| async move {
        provider.close().await;
        aborted.store(section.signal.is_aborted(), Ordering::SeqCst);
        "finished after close took the lease"
    }));
    assert!(aborted.load(Ordering::SeqCst), "the section's signal aborted when close took its lease");
    assert_eq!(result.unwrap_err().code(), ErrorCode::LeaseLost);
}

#[test]
fn a_lease_gives_back_its_backend_handle_for_the_next_blocking_acquire() {
    let (a, b) = (backend(), backend());
    let mut lease = a.acquire_blocking("k", None).unwrap();
    let kept = lease.take_backend().expect("the lease held its backend");
    // Ended as by a release: the key is free, the lease answers as released.
    assert!(!lease.is_valid() && !lease.release() && lease.take_backend().is_none());
    drop(lease);
    assert_eq!(a.counts().held, 0);
    // Of the same backend: the next lease holds it.
    let mut again = a.acquire_blocking_kind_keeping(&["k"], dokebi_lock::LockKind::EXCLUSIVE, None, None, Some(kept)).unwrap();
    assert!(again.is_valid() && again.fence() == 2);
    let kept = again.take_backend().unwrap();
    // Of another backend: dropped, and the lease holds its own.
    let other = b.acquire_blocking_kind_keeping(&["k"], dokebi_lock::LockKind::EXCLUSIVE, None, None, Some(kept)).unwrap();
    assert!(other.is_valid() && a.counts().held == 0 && b.counts().held == 1);
    drop(b);
    assert!(other.release(), "the lease keeps its backend alive");
    // A failed acquire drops what it was given; a lease ended by close gives its handle back.
    let mut held = a.try_acquire("k").unwrap();
    let busy = a.acquire_blocking_kind_keeping(&["k"], dokebi_lock::LockKind::EXCLUSIVE, None, Some(Duration::ZERO), Some(a.clone()));
    assert_eq!(busy.unwrap_err().code(), ErrorCode::LockBusy);
    a.close();
    assert!(!held.is_valid());
    assert!(held.take_backend().is_some_and(|backend| backend.is_closed()));
}

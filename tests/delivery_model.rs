//! Model check of how the thread-safe local backend delivers grants
//! (`src/local/delivery.rs`) over the real engine and wait slots: loom runs
//! each scenario under every interleaving of its threads and fails on a
//! waiter left asleep (a deadlock), a lease delivered twice or lost, or
//! counts that do not come back to zero.
//!
//! The scenarios are the hand-offs lock kinds add: a writer's release that
//! lets in two readers at once, a counted key whose release lets in two
//! lighter holders, and a reader that gives up while the release that
//! grants it is on its way.
//!
//! The files under test are compiled here against loom's primitives: they
//! name them through `super::sync`, which is std's in the library and loom's
//! here; the engine (no synchronisation of its own) is the library's.

#![allow(dead_code)] // the library uses every function; each model here uses some

mod sync {
    /// Not loom's `spin_loop`, which yields (see tests/wait_slot_model.rs).
    pub fn spin_loop() {}
    pub use loom::sync::atomic::{AtomicBool, Ordering};
    pub use loom::sync::{Arc, Condvar, Mutex, MutexGuard};
}

mod engine {
    pub use dokebi_lock::local::{CancelReason, LeaseId, LocalEngine, WaiterId};
}

#[path = "../src/local/wait_slot.rs"]
mod wait_slot;

#[path = "../src/local/delivery.rs"]
mod delivery;

use dokebi_lock::local::{Acquired, CancelReason, LeaseId, LocalEngine, WaiterId};
use dokebi_lock::options::LocalOptions;
use dokebi_lock::{LockKind, LockMode};
use loom::sync::{Arc, Mutex};
use loom::thread;
use wait_slot::{News, Outcome, WaitSlot};

const SHARED: LockKind = LockKind { mode: LockMode::Shared, limit: 1, weight: 1 };

type Engine = Arc<delivery::Engine>;

fn engine() -> Engine {
    Arc::new(Mutex::new(LocalEngine::new(LocalOptions::default())))
}

/// Takes `kind` of "k" at once (the key is free).
fn hold(engine: &Engine, kind: LockKind) -> LeaseId {
    match delivery::lock(engine).acquire_one("k", kind, None, true, |_| unreachable!("the key is free")) {
        Ok(Acquired::Granted(lease)) => lease,
        other => panic!("not granted: {other:?}"),
    }
}

/// Queues for `kind` of "k" (it is held), with a fresh slot.
fn queue(engine: &Engine, kind: LockKind) -> (WaiterId, Arc<WaitSlot<LeaseId>>) {
    let slot = Arc::new(WaitSlot::new());
    let payload = slot.clone();
    match delivery::lock(engine).acquire_one("k", kind, None, true, move |_| payload) {
        Ok(Acquired::Queued(waiter)) => (waiter, slot),
        other => panic!("not queued: {other:?}"),
    }
}

/// A blocked thread's wait, as the backend runs it.
fn wait_blocking(slot: &WaitSlot<LeaseId>) -> LeaseId {
    loop {
        match slot.wait(None) {
            Some(News::Outcome(Outcome::Granted(lease))) => return lease,
            Some(News::Outcome(Outcome::Closed)) => panic!("the engine was not closed"),
            Some(News::Next) | None => {}
        }
    }
}

/// A waiting thread that ends holding its lease: the grants of one release
/// must each arrive without help from a later release.
fn waiter_thread(slot: Arc<WaitSlot<LeaseId>>) -> thread::JoinHandle<LeaseId> {
    thread::spawn(move || wait_blocking(&slot))
}

/// Joins the waiters (each granted), then gives every lease back.
fn join_and_release(engine: &Engine, waiters: [thread::JoinHandle<LeaseId>; 2]) {
    let leases = waiters.map(|waiter| waiter.join().unwrap());
    assert!(delivery::lock(engine).counts().held == 2, "both waiters hold the key at once");
    for lease in leases {
        assert!(delivery::release(engine, lease), "a delivered lease is held once");
    }
}

fn assert_empty(engine: &Engine) {
    let counts = delivery::lock(engine).counts();
    assert_eq!((counts.held, counts.waiting), (0, 0), "every lease came back and nobody waits");
}

#[test]
fn a_writer_release_delivers_to_both_readers_queued_behind_it() {
    loom::model(|| {
        let engine = engine();
        let writer = hold(&engine, LockKind::EXCLUSIVE);
        let (_, first) = queue(&engine, SHARED);
        let (_, second) = queue(&engine, SHARED);
        let readers = [waiter_thread(first), waiter_thread(second)];
        assert!(delivery::release(&engine, writer));
        join_and_release(&engine, readers);
        assert_empty(&engine);
    });
}

#[test]
fn a_counted_release_delivers_to_both_lighter_waiters() {
    loom::model(|| {
        let engine = engine();
        let counted = |weight| LockKind { mode: LockMode::Exclusive, limit: 2, weight };
        let heavy = hold(&engine, counted(2));
        let (_, first) = queue(&engine, counted(1));
        let (_, second) = queue(&engine, counted(1));
        let waiters = [waiter_thread(first), waiter_thread(second)];
        assert!(delivery::release(&engine, heavy));
        join_and_release(&engine, waiters);
        assert_empty(&engine);
    });
}

#[test]
fn a_reader_that_gives_up_while_it_is_granted_leaves_nothing_held() {
    loom::model(|| {
        let engine = engine();
        let writer = hold(&engine, LockKind::EXCLUSIVE);
        let (leaving, slot) = queue(&engine, SHARED);
        let (_, staying) = queue(&engine, SHARED);
        let stays = waiter_thread(staying);
        let gives_up = {
            let engine = engine.clone();
            thread::spawn(move || {
                // What a dropped acquire does: leave the queue, or else give
                // back the lease that reached it too late.
                if !delivery::cancel(&engine, leaving, CancelReason::Dropped) {
                    if let Some(lease) = slot.abandon() {
                        assert!(delivery::release(&engine, lease));
                    }
                }
            })
        };
        assert!(delivery::release(&engine, writer));
        gives_up.join().unwrap();
        assert!(delivery::release(&engine, stays.join().unwrap()));
        assert_empty(&engine);
    });
}

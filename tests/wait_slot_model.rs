//! Model check of the local driver's hand-off protocol (`src/local/wait_slot.rs`):
//! loom runs each scenario under every interleaving of its threads (and every
//! order of memory effects the atomics allow), and fails on a lost wake-up
//! (a deadlock), a lease delivered twice or lost, or an outcome seen wrong.
//!
//! The file under test is compiled here against loom's primitives: it names
//! them through `super::sync`, which is std's in the library and loom's here.
//!
//! That these scenarios do catch a lost wake-up was checked by breaking the
//! protocol on purpose: with `wait` setting `sleeping` after dropping and
//! retaking the lock (a window in which a grant sees no sleeper), every
//! scenario in which the waiter sleeps fails with loom's "deadlock"; with
//! `promote` not notifying, the promotion scenario does.

#![allow(dead_code)] // the library uses every method; each model here uses some

mod sync {
    /// Not loom's `spin_loop`, which yields: loom then runs the other thread
    /// to its end before the spinner goes on, and never tries the schedules
    /// where the waiter goes to sleep before the grant. The spinner's atomic
    /// loads are where loom switches threads.
    pub fn spin_loop() {}
    pub use loom::sync::atomic::{AtomicBool, Ordering};
    pub use loom::sync::{Condvar, Mutex, MutexGuard};
}

#[path = "../src/local/wait_slot.rs"]
mod wait_slot;

use loom::sync::Arc;
use loom::thread;
use wait_slot::{News, Outcome, WaitSlot};

/// A blocked thread's wait as the backend runs it: when it queued first in
/// line, spin a little; then sleep until there is an outcome, spinning
/// again each time it is told that it is next.
fn wait_blocking(slot: &WaitSlot<u32>, first_in_line: bool) -> Outcome<u32> {
    let mut spin = first_in_line;
    loop {
        if std::mem::take(&mut spin) {
            slot.spin(2);
        }
        match slot.wait(None) {
            Some(News::Outcome(outcome)) => return outcome,
            Some(News::Next) => spin = true,
            None => {}
        }
    }
}

/// Runs `body` on a new model thread with its own handle on `slot`.
fn on_thread<T: Send + 'static>(
    slot: &Arc<WaitSlot<u32>>,
    body: impl FnOnce(&WaitSlot<u32>) -> T + Send + 'static,
) -> thread::JoinHandle<T> {
    let slot = slot.clone();
    thread::spawn(move || body(&slot))
}

#[test]
fn a_grant_always_reaches_a_thread_that_spins_or_sleeps() {
    loom::model(|| {
        let slot = Arc::new(WaitSlot::new());
        let releaser = on_thread(&slot, |slot| assert_eq!(slot.grant(7), Ok(())));
        assert_eq!(wait_blocking(&slot, true), Outcome::Granted(7));
        releaser.join().unwrap();
    });
}

#[test]
fn a_grant_always_reaches_a_thread_that_slept_at_once() {
    loom::model(|| {
        let slot = Arc::new(WaitSlot::new());
        let releaser = on_thread(&slot, |slot| assert_eq!(slot.grant(8), Ok(())));
        assert_eq!(wait_blocking(&slot, false), Outcome::Granted(8));
        releaser.join().unwrap();
    });
}

#[test]
fn a_close_always_reaches_a_thread_that_spins_or_sleeps() {
    loom::model(|| {
        let slot = Arc::new(WaitSlot::<u32>::new());
        let closer = on_thread(&slot, |slot| slot.close());
        assert_eq!(wait_blocking(&slot, true), Outcome::Closed);
        closer.join().unwrap();
    });
}

#[test]
fn being_told_it_is_next_always_reaches_a_sleeping_thread() {
    loom::model(|| {
        let slot = Arc::new(WaitSlot::<u32>::new());
        let releaser = on_thread(&slot, |slot| slot.promote());
        // A waiter further back sleeps at once, and must wake to spin.
        loop {
            match slot.wait(None) {
                Some(News::Next) => break,
                Some(News::Outcome(outcome)) => panic!("no outcome was given, got {outcome:?}"),
                None => {}
            }
        }
        releaser.join().unwrap();
    });
}

#[test]
fn a_grant_after_being_told_it_is_next_always_reaches_the_thread() {
    loom::model(|| {
        let slot = Arc::new(WaitSlot::new());
        // One release makes the waiter next, the following one grants it.
        let releasers = on_thread(&slot, |slot| {
            slot.promote();
            assert_eq!(slot.grant(5), Ok(()));
        });
        assert_eq!(wait_blocking(&slot, false), Outcome::Granted(5));
        releasers.join().unwrap();
    });
}

#[test]
fn a_grant_and_a_late_promotion_from_two_threads_leave_no_thread_asleep() {
    loom::model(|| {
        let slot = Arc::new(WaitSlot::new());
        // A releaser that saw the waiter first in line may tell it so after
        // another releaser already granted it; neither may strand it.
        let promoter = on_thread(&slot, |slot| slot.promote());
        let granter = on_thread(&slot, |slot| assert_eq!(slot.grant(4), Ok(())));
        assert_eq!(wait_blocking(&slot, false), Outcome::Granted(4));
        promoter.join().unwrap();
        granter.join().unwrap();
    });
}

#[test]
fn a_grant_always_wakes_a_waiting_task() {
    loom::model(|| {
        let slot = Arc::new(WaitSlot::new());
        let releaser = on_thread(&slot, |slot| assert_eq!(slot.grant(3), Ok(())));
        let outcome = loom::future::block_on(std::future::poll_fn(|cx| slot.poll(cx.waker())));
        assert_eq!(outcome, Outcome::Granted(3));
        releaser.join().unwrap();
    });
}

#[test]
fn a_lease_raced_by_an_abandoning_waiter_is_released_by_exactly_one_side() {
    loom::model(|| {
        let slot = Arc::new(WaitSlot::new());
        // Err: the waiter had left; the releaser must release the lease.
        let releaser = on_thread(&slot, |slot| slot.grant(9).err());
        // Some: the lease arrived first; the waiter must release it.
        let taken_back = slot.abandon();
        let refused = releaser.join().unwrap();
        assert!(taken_back.is_some() != refused.is_some(), "released by both or by neither: {taken_back:?} {refused:?}");
        assert_eq!(taken_back.or(refused), Some(9));
    });
}

//! The hand-off between a releasing thread and one queued waiter: where the
//! releaser leaves the lease (or the news that the backend closed) and the
//! waiter, a task or a blocked thread, picks it up.
//!
//! The protocol, which `tests/wait_slot_model.rs` model-checks with loom over
//! every interleaving (it compiles this very file against loom's primitives,
//! through `super::sync`):
//! - every outcome is written under `state`'s lock, then `settled` is set,
//!   so a waiter spinning on `settled` without the lock sees it soon;
//! - a blocked thread sets `sleeping` under the lock just before it waits on
//!   the condvar, and the releaser reads it under the same lock: a waiter
//!   that is still spinning costs the releaser no futex call, and one that
//!   sleeps is always notified (no lost wake-up);
//! - a waiter that gives up after the engine already dequeued it marks the
//!   slot abandoned: then exactly one side ends up with a delivered lease to
//!   release, never both and never neither.

use std::task::{Poll, Waker};
use std::time::Duration;

use super::sync::{spin_loop, AtomicBool, Condvar, Mutex, MutexGuard, Ordering};

/// Where a releasing thread leaves a handed-on lease `T` for its waiter.
pub(crate) struct WaitSlot<T> {
    state: Mutex<SlotState<T>>,
    granted: Condvar,
    /// Set once `state` holds an outcome: what a spinning waiter watches.
    settled: AtomicBool,
    /// The waiter sleeps on `granted` (changed under `state`'s lock).
    sleeping: AtomicBool,
}

enum SlotState<T> {
    Waiting,
    WaitingTask(Waker),
    Granted(T),
    Closed,
    /// The waiter gave up after the engine had already dequeued it.
    Abandoned,
    /// The waiter took its outcome.
    Done,
}

/// What a waiter gets.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Outcome<T> {
    Granted(T),
    /// The backend closed.
    Closed,
}

impl<T> WaitSlot<T> {
    pub fn new() -> WaitSlot<T> {
        WaitSlot {
            state: Mutex::new(SlotState::Waiting),
            granted: Condvar::new(),
            settled: AtomicBool::new(false),
            sleeping: AtomicBool::new(false),
        }
    }

    /// Delivers a lease; gives it back when the waiter is gone, for the
    /// caller to release.
    pub fn grant(&self, lease: T) -> Result<(), T> {
        self.settle(SlotState::Granted(lease)).map_err(|refused| match refused {
            SlotState::Granted(lease) => lease,
            _ => unreachable!("settle gives back what it was given"),
        })
    }

    /// Tells the waiter the backend closed.
    pub fn close(&self) {
        // A waiter that already left needs no news.
        let _ = self.settle(SlotState::Closed);
    }

    fn settle(&self, outcome: SlotState<T>) -> Result<(), SlotState<T>> {
        let mut state = lock(&self.state);
        if matches!(*state, SlotState::Abandoned) {
            return Err(outcome);
        }
        let previous = std::mem::replace(&mut *state, outcome);
        self.settled.store(true, Ordering::Release);
        match previous {
            SlotState::WaitingTask(waker) => {
                drop(state);
                waker.wake();
            }
            _ => {
                let sleeping = self.sleeping.load(Ordering::Relaxed);
                drop(state);
                if sleeping {
                    self.granted.notify_one();
                }
            }
        }
        Ok(())
    }

    /// A task's wait: the outcome, or `Pending` with `waker` registered.
    pub fn poll(&self, waker: &Waker) -> Poll<Outcome<T>> {
        let mut state = lock(&self.state);
        match take(&mut state) {
            Some(outcome) => Poll::Ready(outcome),
            None => {
                *state = SlotState::WaitingTask(waker.clone());
                Poll::Pending
            }
        }
    }

    /// Checks up to `spins` times whether an outcome arrived, without the
    /// lock; true when one did (take it with [`WaitSlot::wait`]). Between
    /// two running threads a hand-off comes within a microsecond or two, a
    /// condvar sleep and wake-up costs tens.
    pub fn spin(&self, spins: u32) -> bool {
        for _ in 0..spins {
            if self.settled.load(Ordering::Acquire) {
                return true;
            }
            spin_loop();
        }
        false
    }

    /// A thread's wait: the outcome, once there is one, or `None` when
    /// `timeout` passed first (`None` waits without a bound).
    pub fn wait(&self, timeout: Option<Duration>) -> Option<Outcome<T>> {
        let mut state = lock(&self.state);
        if let Some(outcome) = take(&mut state) {
            return Some(outcome);
        }
        self.sleeping.store(true, Ordering::Relaxed);
        let mut state = match timeout {
            Some(timeout) => self.granted.wait_timeout(state, timeout).unwrap_or_else(|e| e.into_inner()).0,
            None => self.granted.wait(state).unwrap_or_else(|e| e.into_inner()),
        };
        take(&mut state)
    }

    /// The waiter gives up after the engine already dequeued it: a lease
    /// delivered meanwhile comes back for the caller to release; one
    /// delivered later is refused to the releaser, who releases it.
    pub fn abandon(&self) -> Option<T> {
        let mut state = lock(&self.state);
        match std::mem::replace(&mut *state, SlotState::Abandoned) {
            SlotState::Granted(lease) => Some(lease),
            SlotState::Closed | SlotState::Done => {
                *state = SlotState::Done;
                None
            }
            _ => None,
        }
    }
}

/// Takes the outcome if there is one.
fn take<T>(state: &mut SlotState<T>) -> Option<Outcome<T>> {
    match std::mem::replace(state, SlotState::Done) {
        SlotState::Granted(lease) => Some(Outcome::Granted(lease)),
        SlotState::Closed => Some(Outcome::Closed),
        other => {
            *state = other;
            None
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding the lock leaves a slot no worse than the panic
    // itself; keep serving.
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

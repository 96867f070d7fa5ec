//! The hand-off between a releasing thread and one queued waiter: where the
//! releaser leaves the lease (or the news that the backend closed) and the
//! waiter, a task or a blocked thread, picks it up; and where a waiter that
//! moved up to the head of its queue learns that it is next.
//!
//! The protocol, which `tests/wait_slot_model.rs` model-checks with loom over
//! every interleaving (it compiles this very file against loom's primitives,
//! through `super::sync`):
//! - every outcome is written under the slot's lock, then `settled` is set,
//!   so a waiter spinning on `settled` without the lock sees it soon;
//! - a blocked thread sets `sleeping` under the lock just before it waits on
//!   the condvar; whoever then gives it news (an outcome, or "you are next")
//!   clears it under the same lock and notifies after unlocking. So a waiter
//!   that is still spinning costs the releaser no futex call, one that
//!   sleeps is notified exactly once however much news it gets before it
//!   runs, and none is ever left asleep with news waiting (no lost wake-up);
//! - "you are next" ([`WaitSlot::promote`]) only wakes a thread: it moves no
//!   lease, so a thread woken by it that finds no outcome spins, then sleeps
//!   again, and the grant that follows wakes it as any grant does;
//! - a waiter that gives up after the engine already dequeued it marks the
//!   slot abandoned: then exactly one side ends up with a delivered lease to
//!   release, never both and never neither.

use std::task::{Poll, Waker};
use std::time::Duration;

use super::sync::{spin_loop, AtomicBool, Condvar, Mutex, MutexGuard, Ordering};

/// Where a releasing thread leaves a handed-on lease `T` for its waiter.
pub(crate) struct WaitSlot<T> {
    inner: Mutex<Inner<T>>,
    news: Condvar,
    /// Set once the state holds an outcome: what a spinning waiter watches.
    settled: AtomicBool,
}

struct Inner<T> {
    state: SlotState<T>,
    /// A thread sleeps on `news` and nobody has notified it since.
    sleeping: bool,
    /// The waiter became next in line and has not seen it in `wait` yet.
    promoted: bool,
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

/// Why [`WaitSlot::wait`] returned before its timeout.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum News<T> {
    /// The wait is over.
    Outcome(Outcome<T>),
    /// The waiter is next in line: its grant comes with the next release,
    /// so spinning for it is likely to pay.
    Next,
}

impl<T> WaitSlot<T> {
    pub fn new() -> WaitSlot<T> {
        WaitSlot {
            inner: Mutex::new(Inner { state: SlotState::Waiting, sleeping: false, promoted: false }),
            news: Condvar::new(),
            settled: AtomicBool::new(false),
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
        let mut inner = lock(&self.inner);
        if matches!(inner.state, SlotState::Abandoned) {
            return Err(outcome);
        }
        let previous = std::mem::replace(&mut inner.state, outcome);
        self.settled.store(true, Ordering::Release);
        match previous {
            SlotState::WaitingTask(waker) => {
                drop(inner);
                waker.wake();
            }
            _ => self.notify(inner),
        }
        Ok(())
    }

    /// Tells a blocked thread that it is next in line. A thread that sleeps
    /// is woken (to spin for its grant, which then costs the releaser no
    /// wake-up); a task, or a waiter that already has its outcome, is left
    /// alone.
    pub fn promote(&self) {
        let mut inner = lock(&self.inner);
        if matches!(inner.state, SlotState::Waiting) && !inner.promoted {
            inner.promoted = true;
            self.notify(inner);
        }
    }

    /// Wakes the thread sleeping on `news`, if one is and nobody did yet.
    fn notify(&self, mut inner: MutexGuard<'_, Inner<T>>) {
        let sleeping = std::mem::take(&mut inner.sleeping);
        drop(inner);
        if sleeping {
            self.news.notify_one();
        }
    }

    /// A task's wait: the outcome, or `Pending` with `waker` registered.
    pub fn poll(&self, waker: &Waker) -> Poll<Outcome<T>> {
        let mut inner = lock(&self.inner);
        match take(&mut inner.state) {
            Some(outcome) => Poll::Ready(outcome),
            None => {
                inner.state = SlotState::WaitingTask(waker.clone());
                Poll::Pending
            }
        }
    }

    /// Checks up to `spins` times whether an outcome arrived, without the
    /// lock; true when one did (take it with [`WaitSlot::wait`]). Between
    /// two running threads a hand-off comes within a microsecond or two; a
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

    /// A thread's wait: returns with news as soon as there is some (at once
    /// when there already is), `None` when `timeout` passed first, or
    /// spuriously (`None` as the timeout waits without a bound).
    pub fn wait(&self, timeout: Option<Duration>) -> Option<News<T>> {
        let mut inner = lock(&self.inner);
        if let Some(news) = news(&mut inner) {
            return Some(news);
        }
        inner.sleeping = true;
        let mut inner = match timeout {
            Some(timeout) => self.news.wait_timeout(inner, timeout).unwrap_or_else(|e| e.into_inner()).0,
            None => self.news.wait(inner).unwrap_or_else(|e| e.into_inner()),
        };
        inner.sleeping = false;
        news(&mut inner)
    }

    /// The waiter gives up after the engine already dequeued it: a lease
    /// delivered meanwhile comes back for the caller to release; one
    /// delivered later is refused to the releaser, who releases it.
    pub fn abandon(&self) -> Option<T> {
        let mut inner = lock(&self.inner);
        match std::mem::replace(&mut inner.state, SlotState::Abandoned) {
            SlotState::Granted(lease) => Some(lease),
            SlotState::Closed | SlotState::Done => {
                inner.state = SlotState::Done;
                None
            }
            _ => None,
        }
    }
}

/// The outcome if there is one, else a promotion not seen yet.
fn news<T>(inner: &mut Inner<T>) -> Option<News<T>> {
    match take(&mut inner.state) {
        Some(outcome) => Some(News::Outcome(outcome)),
        None => std::mem::take(&mut inner.promoted).then_some(News::Next),
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

//! Grants handed to this process's waiting acquires by another script call
//! of the same process: a release of a kinds lease whose units the next
//! local waiters can take (one round trip instead of a release, a wake-up
//! and a retry), or the try of the head of a counted or shared key's queue
//! that grants the waiters queued behind it as well (so free units are not
//! handed out one round trip at a time).
//!
//! Each waiting acquire has a [`Request`] in its keys' queues (see
//! [`super::waiters`]). Whoever puts it in a script call takes it first
//! ([`Request::take`]), so no two calls grant it at once and its own task
//! does not try meanwhile; the call's outcome is then delivered to it. The
//! script applies every rule an acquire's own try does (limits, the marks of
//! waiters in other processes, a new fence per key), so a handed grant is
//! the grant that try would have had.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use tokio::sync::Notify;

use super::Store;

/// One waiting acquire, as other script calls of its process see it.
pub(crate) struct Request<S: Store> {
    pub claim: Arc<S::Claim>,
    state: Mutex<State<S::Written>>,
    /// Told when a grant (or a hand-off's failure) is delivered.
    changed: Notify,
    /// Told when a try of its own task ends.
    tried: Notify,
    /// A hand-off to it went unanswered: the store may hold a grant of its
    /// token, which must be given back if the acquire gives up.
    dirty: AtomicBool,
    /// The last call that had it (another's, or its own try) was refused for
    /// a row lock held elsewhere ([`super::Failure::Contended`]), maybe on a
    /// key of its own that the caller does not hold: another call taking it
    /// would wait for that lock again, a whole lock wait, holding the
    /// caller's keys. Only its own try takes it on, until one answers.
    contended: AtomicBool,
    /// Releases of this process that waited for its try to end and have
    /// not answered yet (see [`Request::hold_back`]).
    held_back: AtomicUsize,
    /// Told when `held_back` drops to 0.
    let_go: Notify,
}

enum State<W> {
    /// Waiting; `ticket` is its place among every process's waiters (0:
    /// none yet).
    Open { ticket: u64 },
    /// Its own task's try is in flight.
    Trying,
    /// In another script call in flight.
    Taken { ticket: u64 },
    /// Granted by another call, not yet picked up by its task.
    Granted(Grant<W>),
    /// Its acquire has ended (or picked up its grant).
    Gone,
}

/// A grant made by another call: the fence of each key, where it was
/// written (for `replicaAcks`) and when the call was sent (the lease's
/// validity counts from there).
pub(crate) struct Grant<W> {
    pub fences: Vec<u64>,
    pub written: Vec<W>,
    pub sent: Instant,
}

/// What a request is to a caller choosing whom to grant.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Seen {
    /// Waiting, free to be taken.
    Open,
    /// Waiting, but met a row lock held elsewhere (see `contended`): it tries
    /// by itself, and nobody behind it may be granted first.
    Contended,
    /// Trying by itself: nobody behind it may be granted first.
    Trying,
    /// Taken, granted or gone: no longer ahead of anyone.
    Passed,
}

/// What an acquire's task does next (see [`Request::begin_try`]).
pub(crate) enum Next<W> {
    /// Try the store itself.
    Try,
    /// Another call has it: wait for the outcome.
    Wait,
    /// Granted already.
    Granted(Grant<W>),
}

/// What an acquire that gives up must still give back.
pub(crate) struct Leftover<W> {
    /// A grant delivered but not picked up.
    pub grant: Option<Grant<W>>,
    /// The store may hold a grant of its token (a hand-off went unanswered).
    pub dirty: bool,
}

impl<S: Store> Request<S> {
    pub fn new(claim: Arc<S::Claim>) -> Request<S> {
        Request {
            claim,
            state: Mutex::new(State::Open { ticket: 0 }),
            changed: Notify::new(),
            tried: Notify::new(),
            dirty: AtomicBool::new(false),
            contended: AtomicBool::new(false),
            held_back: AtomicUsize::new(0),
            let_go: Notify::new(),
        }
    }

    fn state(&self) -> MutexGuard<'_, State<S::Written>> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn seen(&self) -> Seen {
        match *self.state() {
            State::Open { .. } if self.contended.load(Ordering::SeqCst) => Seen::Contended,
            State::Open { .. } => Seen::Open,
            State::Trying => Seen::Trying,
            _ => Seen::Passed,
        }
    }

    /// Takes an open request into a script call: its ticket, or `None` when
    /// it is not open.
    pub fn take(&self) -> Option<u64> {
        let mut state = self.state();
        match *state {
            State::Open { ticket } => {
                *state = State::Taken { ticket };
                Some(ticket)
            }
            _ => None,
        }
    }

    /// Delivers the outcome of the call that took it: a grant, or none (it
    /// goes on waiting; `answered` false when the call's outcome is
    /// unknown). A grant the acquire can no longer pick up (it gave up
    /// meanwhile) comes back, for the caller to give back; so does `false`
    /// for an unanswered call to a request that gave up: the caller then
    /// cleans up its token.
    pub fn deliver(&self, grant: Option<Grant<S::Written>>, answered: bool) -> Result<(), Option<Grant<S::Written>>> {
        if !answered {
            self.dirty.store(true, Ordering::SeqCst);
        }
        let mut state = self.state();
        let outcome = match (&*state, grant) {
            (State::Taken { .. }, Some(grant)) => {
                *state = State::Granted(grant);
                Ok(())
            }
            (State::Taken { ticket }, None) => {
                *state = State::Open { ticket: *ticket };
                Ok(())
            }
            (_, grant) if grant.is_some() || !answered => Err(grant),
            _ => Ok(()),
        };
        drop(state);
        self.changed.notify_one();
        outcome
    }

    /// Records whether the last call that had it was refused for a row lock
    /// held elsewhere (set before that call's outcome is delivered, so that
    /// no other call takes it in between).
    pub fn contended(&self, contended: bool) {
        self.contended.store(contended, Ordering::SeqCst);
    }

    /// Before its task tries the store itself: try, wait for a call that has
    /// it, or pick up a grant.
    pub fn begin_try(&self) -> Next<S::Written> {
        let mut state = self.state();
        match std::mem::replace(&mut *state, State::Trying) {
            State::Open { .. } | State::Trying => Next::Try,
            State::Granted(grant) => {
                *state = State::Gone;
                Next::Granted(grant)
            }
            taken @ (State::Taken { .. } | State::Gone) => {
                *state = taken;
                Next::Wait
            }
        }
    }

    /// After its own try was not granted: open again, with the ticket it
    /// answered.
    pub fn end_try(&self, ticket: u64) {
        let mut state = self.state();
        if matches!(*state, State::Trying) {
            *state = State::Open { ticket };
        }
        drop(state);
        self.tried.notify_waiters();
    }

    /// Waiting again (a grant came too late to use), with `ticket`.
    pub fn reopen(&self, ticket: u64) {
        *self.state() = State::Open { ticket };
        self.tried.notify_waiters();
    }

    /// A delivered grant, picked up (the request is then gone).
    pub fn granted(&self) -> Option<Grant<S::Written>> {
        let mut state = self.state();
        match std::mem::replace(&mut *state, State::Gone) {
            State::Granted(grant) => Some(grant),
            other => {
                *state = other;
                None
            }
        }
    }

    /// Resolves at the next delivery (or at once if one came since the last).
    pub async fn changed(&self) {
        self.changed.notified().await;
    }

    /// The acquire ends (granted by its own try, or giving up): nobody may
    /// take it any more. A call that has it now delivers to nobody (and
    /// gives back what it granted, see [`Request::deliver`]).
    pub fn leave(&self) -> Leftover<S::Written> {
        let grant = match std::mem::replace(&mut *self.state(), State::Gone) {
            State::Granted(grant) => Some(grant),
            _ => None,
        };
        self.tried.notify_waiters();
        Leftover { grant, dirty: self.dirty.load(Ordering::SeqCst) }
    }

    /// Keeps its task's next try back until the guard goes. A release of
    /// this process that waits for the try in flight ([`Request::untried`])
    /// holds it back until its own call has answered: the try holds the
    /// released keys' rows while it waits for another session's row lock,
    /// and a next try sent before the release's call (a short
    /// `pollIntervalMs`, the release's task run late on a busy machine)
    /// would hold them again, a whole lock wait more, long enough for the
    /// release to be refused for it in turn (review R4).
    pub fn hold_back(self: &Arc<Self>) -> HeldBack<S> {
        self.held_back.fetch_add(1, Ordering::SeqCst);
        HeldBack(self.clone())
    }

    /// Resolves once no release holds its next try back, or at once while
    /// its task's try still counts as in flight: after a try lost with its
    /// connection and given back, the request stays trying (see
    /// `Attempt::cleaned_up_after`), and a release holding it back waits
    /// for that try to end, which only the next try's end does (review
    /// R21: the two waited for each other until the wait's end).
    pub async fn let_go(&self) {
        loop {
            let let_go = self.let_go.notified();
            tokio::pin!(let_go);
            // Registered before the count is read, so a release answering
            // in between is not missed.
            let_go.as_mut().enable();
            if self.held_back.load(Ordering::SeqCst) == 0 || matches!(*self.state(), State::Trying) {
                return;
            }
            let_go.await;
        }
    }

    /// Resolves once no try of its own task is in flight.
    pub async fn untried(&self) {
        let ended = self.tried.notified();
        tokio::pin!(ended);
        // Registered before the state is read, so a try ending in between
        // is not missed.
        ended.as_mut().enable();
        if matches!(*self.state(), State::Trying) {
            ended.await;
        }
    }
}

/// A request's next try held back by a release (see [`Request::hold_back`]).
pub(crate) struct HeldBack<S: Store>(Arc<Request<S>>);

impl<S: Store> Drop for HeldBack<S> {
    fn drop(&mut self) {
        if self.0.held_back.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.let_go.notify_waiters();
        }
    }
}

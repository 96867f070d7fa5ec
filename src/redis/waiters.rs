//! Acquires in progress of one connection, by Redis lock key.
//!
//! Per key, acquires queue in FIFO order for a *turn* (whatever their
//! mode: a reader queued behind a writer waits for it); only the holder of
//! the turn (the head) talks to Redis, so a hundred local waiters on one key
//! cost Redis one retry, not a hundred. The head sleeps on the key's wake-up,
//! which fires on a release notification from any process (pub/sub), on a
//! release by this process, and when the subscription comes up or goes down.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

use tokio::sync::{Mutex as TurnLock, Notify, OwnedMutexGuard};

/// The registry of one connection.
#[derive(Default)]
pub(crate) struct Waiters {
    keys: Mutex<HashMap<Box<str>, Entry>>,
    /// Held while one acquire of several keys takes its places, so that of
    /// two such acquires one is ahead of the other in every queue they
    /// share (taking turns then never deadlocks).
    enqueue: Mutex<()>,
}

struct Entry {
    turn: Arc<TurnLock<()>>,
    wake: Arc<Notify>,
    tickets: usize,
}

/// One acquire's place in its key's queue; dropping it leaves the queue.
pub(crate) struct Ticket {
    waiters: Arc<Waiters>,
    lock_key: Box<str>,
    turn: Arc<TurnLock<()>>,
    wake: Arc<Notify>,
}

/// The turn of the head of a key's queue.
pub(crate) type Turn = OwnedMutexGuard<()>;

/// A place in a key's queue, taken by [`Ticket::queue`].
pub(crate) enum Place {
    /// Nobody was ahead: the turn is ours already.
    Turn(Turn),
    /// Queued: resolves when everyone ahead has had their turn.
    Queued(Pin<Box<dyn Future<Output = Turn> + Send>>),
}

impl Place {
    /// Waits for the turn (cancel safe).
    pub async fn turn(self) -> Turn {
        match self {
            Place::Turn(turn) => turn,
            Place::Queued(queued) => queued.await,
        }
    }
}

impl Waiters {
    /// Joins the queue of `lock_key`.
    pub fn join(self: &Arc<Self>, lock_key: &str) -> Ticket {
        let mut keys = self.lock();
        let entry = keys.entry(lock_key.into()).or_insert_with(|| Entry {
            turn: Arc::new(TurnLock::new(())),
            wake: Arc::new(Notify::new()),
            tickets: 0,
        });
        entry.tickets += 1;
        Ticket { waiters: self.clone(), lock_key: lock_key.into(), turn: entry.turn.clone(), wake: entry.wake.clone() }
    }

    /// Wakes the head waiting on `lock_key`, if any (a release happened).
    pub fn wake(&self, lock_key: &str) {
        if let Some(entry) = self.lock().get(lock_key) {
            entry.wake.notify_one();
        }
    }

    /// Wakes every head (notifications came up or went down: retry now and
    /// pick the poll interval that fits).
    pub fn wake_all(&self) {
        self.lock().values().for_each(|entry| entry.wake.notify_one());
    }

    /// Takes the place of every ticket at once (see [`Ticket::queue`]): an
    /// acquire of several keys is ahead of, or behind, another one in all
    /// the queues they share, so waiting for each turn in any order cannot
    /// deadlock within the process.
    pub fn queue_all(tickets: &[Ticket]) -> Vec<Place> {
        match tickets {
            [ticket] => vec![ticket.queue()],
            tickets => {
                let _one_at_a_time = tickets[0].waiters.enqueue.lock().unwrap_or_else(|e| e.into_inner());
                tickets.iter().map(Ticket::queue).collect()
            }
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<Box<str>, Entry>> {
        self.keys.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Ticket {
    /// Takes this ticket's place in the queue now, on the caller's thread
    /// (FIFO per key). The turn's mutex queues a waiter when it is first
    /// polled, so polling here makes turns follow the order of the calls:
    /// left to the driver's runtime, a burst of acquire tasks is not
    /// necessarily first polled in the order it was spawned.
    pub fn queue(&self) -> Place {
        // A free turn has nobody queued for it (tokio's mutex hands a
        // released turn straight to its first waiter).
        if let Some(turn) = self.try_turn() {
            return Place::Turn(turn);
        }
        let mut queued = Box::pin(self.turn.clone().lock_owned());
        match queued.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
            Poll::Ready(turn) => Place::Turn(turn),
            Poll::Pending => Place::Queued(queued),
        }
    }

    /// The turn if nobody is ahead, without waiting.
    pub fn try_turn(&self) -> Option<Turn> {
        self.turn.clone().try_lock_owned().ok()
    }

    /// Resolves at the next wake-up of this key (or at once if one came
    /// since the last).
    pub async fn woken(&self) {
        self.wake.notified().await;
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut keys = self.waiters.lock();
        if let Some(entry) = keys.get_mut(&self.lock_key) {
            entry.tickets -= 1;
            if entry.tickets == 0 {
                keys.remove(&self.lock_key);
            }
        }
    }
}

//! Acquires in progress of one store, by the store's name of their keys.
//!
//! Per key, acquires queue in FIFO order for a *turn* (whatever their
//! mode: a reader queued behind a writer waits for it); only the holder of
//! the turn (the head) talks to the store, so a hundred local waiters on one key
//! cost the store one retry, not a hundred. The head sleeps on the key's wake-up,
//! which fires on a release notification from any process (pub/sub), on a
//! release by this process, and when the subscription comes up or goes down.
//!
//! Each waiting acquire also has its [`Request`] in the queues of its keys,
//! in the same order, so that a script call of this process can grant the
//! next waiters directly (see [`super::handoff`]): a release hands its
//! units on ([`Waiters::candidates`]), and the head of a counted or shared
//! key's queue is granted together with the waiters behind it that the free
//! units cover ([`Waiters::followers`]). Either only takes waiters in queue
//! order: it stops at the first one that is trying by itself, whose last
//! call met a row lock held elsewhere, that waits for an earlier waiter on
//! another of its keys, or that does not fit.
//!
//! The registry also counts what this process's kinds leases hold on each
//! key ([`Waiters::hold`]): a head whose try those alone would refuse waits
//! for one of them to hand the key on (or to wake it) instead of trying. A
//! try in flight keeps every release from handing past it, so a head that
//! tried a key its own process keeps full would turn each hand-off into a
//! release, a wake-up and a retry.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

use hashbrown::HashMap;
use tokio::sync::{Mutex as TurnLock, Notify, OwnedMutexGuard};

use super::handoff::{Request, Seen};
use super::{Claim, Store};
use crate::acquire::{LockKind, LockMode};

/// The most readers one call grants at once.
const READERS_AT_ONCE: usize = 64;

/// The registry of one store.
pub struct Waiters<S: Store> {
    keys: Mutex<HashMap<Box<str>, Entry<S>>>,
    /// Held while one acquire of several keys takes its places, so that of
    /// two such acquires one is ahead of the other in every queue they
    /// share (taking turns then never deadlocks).
    enqueue: Mutex<()>,
    /// What this process's kinds leases hold, by the store's key name.
    held: Mutex<HashMap<Box<str>, Held>>,
}

impl<S: Store> Default for Waiters<S> {
    fn default() -> Self {
        Waiters { keys: Mutex::default(), enqueue: Mutex::default(), held: Mutex::default() }
    }
}

/// What this process's kinds leases hold on one key.
#[derive(Default)]
struct Held {
    /// The key's limit (1 for readers and writers).
    limit: u32,
    /// The weights of its exclusive leases (a writer's is 1 of 1).
    units: u32,
    readers: u32,
}

struct Entry<S: Store> {
    turn: Arc<TurnLock<()>>,
    wake: Arc<Notify>,
    tickets: usize,
    /// The requests of the acquires waiting here, in queue order.
    requests: VecDeque<Arc<Request<S>>>,
}

/// One acquire's place in its key's queue; dropping it leaves the queue.
pub(crate) struct Ticket<S: Store> {
    waiters: Arc<Waiters<S>>,
    lock_key: Box<str>,
    turn: Arc<TurnLock<()>>,
    wake: Arc<Notify>,
    request: Option<Arc<Request<S>>>,
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
    pub(crate) async fn turn(self) -> Turn {
        match self {
            Place::Turn(turn) => turn,
            Place::Queued(queued) => queued.await,
        }
    }
}

impl<S: Store> Waiters<S> {
    /// Joins the queue of `lock_key`, with the acquire's `request` when
    /// other calls may grant it.
    pub(crate) fn join(self: &Arc<Self>, lock_key: &str, request: Option<Arc<Request<S>>>) -> Ticket<S> {
        let mut keys = self.lock();
        let entry = keys.entry(lock_key.into()).or_insert_with(|| Entry {
            turn: Arc::new(TurnLock::new(())),
            wake: Arc::new(Notify::new()),
            tickets: 0,
            requests: VecDeque::new(),
        });
        entry.tickets += 1;
        if let Some(request) = &request {
            entry.requests.push_back(request.clone());
        }
        Ticket { waiters: self.clone(), lock_key: lock_key.into(), turn: entry.turn.clone(), wake: entry.wake.clone(), request }
    }

    /// Takes the waiters a release of `released` hands its units to: on
    /// each of its keys, those first in the queue that what it frees covers
    /// (its weight of a counted key; one writer, or up to
    /// [`READERS_AT_ONCE`] readers, of another key).
    /// Also returns a request whose own try in flight kept some key from
    /// being handed on.
    pub(crate) fn candidates(&self, released: &S::Claim) -> (Vec<Picked<S>>, Option<Arc<Request<S>>>) {
        let keys = self.lock();
        let mut picked = Vec::new();
        let mut trying = None;
        let kind = released.kind();
        for name in released.names() {
            let room = match kind.limit {
                1 => Room::Any,
                limit => Room::Units { limit, left: kind.weight },
            };
            trying = pick(&keys, name, None, room, &mut picked).or(trying);
        }
        (picked, trying)
    }

    /// Takes the waiters right behind `head` (a counted or shared request on
    /// one key) that can be granted in the same call: the rest of a counted
    /// key's units, or the readers behind a reader.
    pub(crate) fn followers(&self, head: &Arc<Request<S>>) -> Vec<Picked<S>> {
        let claim = &head.claim;
        let room = match *claim.kind() {
            LockKind { mode: LockMode::Shared, .. } => Room::Readers(READERS_AT_ONCE),
            LockKind { limit, weight, .. } if limit > 1 => Room::Units { limit, left: limit.saturating_sub(weight) },
            _ => return Vec::new(),
        };
        let keys = self.lock();
        let mut picked = Vec::new();
        if claim.len() == 1 {
            let name = claim.names().next().expect("a claim of one key names it");
            let _ = pick(&keys, name, Some(head), room, &mut picked);
        }
        picked
    }

    /// Wakes the head waiting on `lock_key`, if any (a release happened).
    pub(crate) fn wake(&self, lock_key: &str) {
        if let Some(entry) = self.lock().get(lock_key) {
            entry.wake.notify_one();
        }
    }

    /// True when no acquire of this process is in progress on any key (a
    /// store that polls for releases need not then).
    #[cfg(feature = "mysql")]
    pub(crate) fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }

    /// Wakes every head (notifications came up or went down: retry now and
    /// pick the poll interval that fits).
    pub(crate) fn wake_all(&self) {
        self.lock().values().for_each(|entry| entry.wake.notify_one());
    }

    /// Counts a granted kinds lease against its keys (`holds` true), or
    /// stops counting it once its release call has answered (so that
    /// during that call our next waiter waits to be handed what it frees).
    pub(crate) fn hold(&self, claim: &S::Claim, holds: bool) {
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        let kind = claim.kind();
        for name in claim.names() {
            // Looked up before `entry`, which would allocate the name's key each call.
            let entry = match held.get_mut(name) {
                Some(entry) => entry,
                None => held.entry(name.into()).or_default(),
            };
            entry.limit = kind.limit;
            let count = match kind.mode {
                LockMode::Shared => &mut entry.readers,
                LockMode::Exclusive => &mut entry.units,
            };
            let by = if kind.mode == LockMode::Shared { 1 } else { kind.weight };
            *count = if holds { *count + by } else { count.saturating_sub(by) };
            if entry.units == 0 && entry.readers == 0 {
                held.remove(name);
            }
        }
    }

    /// True when this process's own leases refuse `claim` on some key (a
    /// try would surely be busy): a reader, while a writer of ours holds
    /// it; an exclusive request, while our readers hold it or its weight
    /// does not fit beside our units. (Another limit is for a try to
    /// refuse.)
    pub(crate) fn held_by_us(&self, claim: &S::Claim) -> bool {
        let held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        let kind = claim.kind();
        let same_limit = |name: &str| held.get(name).filter(|held| held.limit == kind.limit);
        claim.names().filter_map(same_limit).any(|held| match kind.mode {
            LockMode::Shared => held.units > 0,
            LockMode::Exclusive => held.readers > 0 || held.units + kind.weight > kind.limit,
        })
    }

    /// Takes the place of every ticket at once (see [`Ticket::queue`]): an
    /// acquire of several keys is ahead of, or behind, another one in all
    /// the queues they share, so waiting for each turn in any order cannot
    /// deadlock within the process.
    pub(crate) fn queue_all(tickets: &[Ticket<S>]) -> Vec<Place> {
        match tickets {
            [ticket] => vec![ticket.queue()],
            tickets => {
                let _one_at_a_time = tickets[0].waiters.enqueue.lock().unwrap_or_else(|e| e.into_inner());
                tickets.iter().map(Ticket::queue).collect()
            }
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<Box<str>, Entry<S>>> {
        self.keys.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A request taken into a call, with its ticket.
pub(crate) type Picked<S> = (Arc<Request<S>>, u64);

/// What a call may still grant on one key.
#[derive(Clone, Copy)]
enum Room {
    /// A key of limit 1, nothing taken yet: one writer or some readers.
    Any,
    /// Readers only, at most this many more.
    Readers(usize),
    /// Counted requests of `limit`, at most `left` units more.
    Units { limit: u32, left: u32 },
    /// Nothing more.
    Full,
}

impl Room {
    /// The room left after granting `kind`, or `None` if it does not fit.
    fn after(self, kind: &LockKind) -> Option<Room> {
        let shared = kind.mode == LockMode::Shared;
        match self {
            Room::Any if kind.limit == 1 => Some(if shared { Room::Readers(READERS_AT_ONCE - 1) } else { Room::Full }),
            Room::Readers(left) if shared && left > 0 => Some(Room::Readers(left - 1)),
            Room::Units { limit, left } if !shared && kind.limit == limit && kind.weight <= left => {
                Some(Room::Units { limit, left: left - kind.weight })
            }
            _ => None,
        }
    }
}

/// Takes, in queue order on `lock` (after `after`, if given), the open
/// requests that fit in `room`, into `picked`; requests already in `picked`
/// (reached through another key) count against the room too. Returns the
/// request trying by itself that it stopped at, if any.
fn pick<S: Store>(
    keys: &HashMap<Box<str>, Entry<S>>,
    lock: &str,
    after: Option<&Arc<Request<S>>>,
    mut room: Room,
    picked: &mut Vec<Picked<S>>,
) -> Option<Arc<Request<S>>> {
    let entry = keys.get(lock)?;
    let mut requests = entry.requests.iter();
    if let Some(after) = after {
        if !requests.any(|request| Arc::ptr_eq(request, after)) {
            return None;
        }
    }
    for request in requests {
        let ours = picked.iter().any(|(p, _)| Arc::ptr_eq(p, request));
        match request.seen() {
            Seen::Passed if !ours => continue,
            Seen::Trying => return Some(request.clone()),
            // Left to its own try; nobody behind it goes first.
            Seen::Contended => return None,
            _ => {}
        }
        let next = room.after(request.claim.kind())?;
        if !ours {
            if !first_elsewhere(keys, request, lock) {
                return None;
            }
            let ticket = request.take()?;
            picked.push((request.clone(), ticket));
        }
        room = next;
        if matches!(room, Room::Full | Room::Units { left: 0, .. } | Room::Readers(0)) {
            return None;
        }
    }
    None
}

/// True when, on each of its keys but `lock`, nobody still waiting is ahead
/// of `request` in this process (granting it then overtakes nobody).
fn first_elsewhere<S: Store>(keys: &HashMap<Box<str>, Entry<S>>, request: &Arc<Request<S>>, lock: &str) -> bool {
    request.claim.names().filter(|name| *name != lock).all(|name| {
        keys.get(name).is_some_and(|entry| entry.requests.iter().take_while(|r| !Arc::ptr_eq(r, request)).all(|r| r.seen() == Seen::Passed))
    })
}

impl<S: Store> Ticket<S> {
    /// Takes this ticket's place in the queue now, on the caller's thread
    /// (FIFO per key). The turn's mutex queues a waiter when it is first
    /// polled, so polling here makes turns follow the order of the calls:
    /// left to the driver's runtime, a burst of acquire tasks is not
    /// necessarily first polled in the order it was spawned.
    pub(crate) fn queue(&self) -> Place {
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
    pub(crate) fn try_turn(&self) -> Option<Turn> {
        self.turn.clone().try_lock_owned().ok()
    }

    /// Resolves at the next wake-up of this key (or at once if one came
    /// since the last).
    pub(crate) async fn woken(&self) {
        self.wake.notified().await;
    }

    /// Drops a wake-up kept since the last (see [`Ticket::woken`]): called
    /// as the head's try is sent, which sees the release it came from. Kept,
    /// it would end the pause after that try at once, for a try that finds
    /// what this one found (and, when this one waited for a row lock held
    /// elsewhere, holds the key's row for another lock wait).
    pub(crate) fn forget_wake(&self) {
        let kept = self.wake.notified();
        tokio::pin!(kept);
        // Takes a kept wake-up, or registers; a wake-up that reaches the
        // registration before the drop is passed on, not lost.
        kept.as_mut().enable();
    }
}

impl<S: Store> Drop for Ticket<S> {
    fn drop(&mut self) {
        let mut keys = self.waiters.lock();
        if let Some(entry) = keys.get_mut(&self.lock_key) {
            entry.tickets -= 1;
            if let Some(request) = &self.request {
                entry.requests.retain(|r| !Arc::ptr_eq(r, request));
            }
            if entry.tickets == 0 {
                keys.remove(&self.lock_key);
            }
        }
    }
}

//! The local lock engine: a plain state machine with no I/O, no clock and no
//! locking of its own.
//!
//! Surfaces drive it: the Rust async API wraps it in a mutex and wakes tasks,
//! the Node addon calls it on the JS thread and settles promises, the C API
//! blocks on a condvar or calls back. Timers and cancellation live in the
//! surfaces, which call [`LocalEngine::cancel`] when a wait ends without a
//! grant.
//!
//! Guarantees:
//! - at most one lease per key at any time;
//! - waiters of one key are granted in the order they queued (FIFO);
//! - every grant carries a fence larger than every earlier grant of the
//!   engine (one counter per backend);
//! - every operation is O(1) in the number of held keys and waiters
//!   (hash map lookups, slab slots, an intrusive per-key waiter list).

use std::hash::BuildHasher;

use hashbrown::hash_table::Entry;
use hashbrown::{DefaultHashBuilder, HashTable};

use slab::Slab;

use crate::error::{ErrorCode, LockError, Result};
use crate::key;
use crate::options::LocalOptions;

/// Names one lease. Stale ids (released, handed on, closed) are recognised:
/// the fence is unique per engine, so a reused slot never matches an old id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LeaseId {
    /// The lease's slot in the engine (that of its key).
    pub slot: u32,
    /// The lease's fencing token.
    pub fence: u64,
}

/// Names one queued waiter; as with [`LeaseId`], stale ids never match.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct WaiterId {
    /// The waiter's slot in the engine.
    pub slot: u32,
    /// Distinguishes the waiters that used the slot over time.
    pub serial: u64,
}

/// What `acquire` did.
#[derive(Debug, PartialEq, Eq)]
pub enum Acquired {
    /// The key was free: the caller holds it now.
    Granted(LeaseId),
    /// The key is held: the caller is queued and will get a
    /// [`Released::HandedOn`] through some later `release`, unless it cancels.
    Queued(WaiterId),
}

/// What `release` did.
#[derive(Debug, PartialEq, Eq)]
pub enum Released<W> {
    /// The id named no held lease (already released, or the engine closed).
    NotHeld,
    /// Released; nobody was waiting, so the key is free.
    Freed,
    /// Released and granted at once to the head waiter, whose payload is
    /// returned so the caller can wake it with the new lease.
    HandedOn {
        /// The payload of the waiter that got the key.
        waiter: W,
        /// The lease it holds now.
        lease: LeaseId,
    },
}

/// Why a waiter left its queue without a lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CancelReason {
    /// Its wait ran out (`WAIT_TIMEOUT`); counted in [`LocalCounts::timed_out`].
    TimedOut,
    /// Its signal aborted (`ABORTED`).
    Aborted,
    /// Its caller went away (a dropped future, a closed handle).
    Dropped,
}

/// Counts for `status()`; never keys.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LocalCounts {
    /// Leases (and so keys) held now.
    pub held: usize,
    /// Acquires queued now.
    pub waiting: usize,
    /// Leases granted since the backend started.
    pub acquired: u64,
    /// Waits that ran out since the backend started.
    pub timed_out: u64,
}

/// A held key. A key is in the engine exactly while it is held, so its
/// slot is also its lease's: the lease is the key slot and the fence of its
/// current holder.
struct KeySlot {
    key: Box<str>,
    /// The key's hash in `index`, kept so release finds the entry without
    /// hashing again.
    hash: u64,
    /// The fence of the lease that holds the key now.
    fence: u64,
    head: Option<u32>,
    tail: Option<u32>,
}

struct Waiter<W> {
    key_slot: u32,
    serial: u64,
    prev: Option<u32>,
    next: Option<u32>,
    payload: W,
}

/// The state of one local backend. `W` is whatever a surface needs to wake a
/// waiter (a waker, a callback, a promise handle).
pub struct LocalEngine<W> {
    options: LocalOptions,
    /// Key slots by key: one hash and one allocation per newly held key.
    /// Keys may come from untrusted input, so the hash is seeded at random
    /// per engine (foldhash, hashbrown's default): flooding one bucket
    /// takes knowing the seed. SipHash cost the Node fast path about 5%.
    index: HashTable<u32>,
    hasher: DefaultHashBuilder,
    keys: Slab<KeySlot>,
    waiters: Slab<Waiter<W>>,
    last_fence: u64,
    last_serial: u64,
    timed_out: u64,
    closed: bool,
}

impl<W> LocalEngine<W> {
    /// An open engine holding nothing, limited by `options`.
    pub fn new(options: LocalOptions) -> Self {
        LocalEngine {
            options,
            index: HashTable::new(),
            hasher: DefaultHashBuilder::default(),
            keys: Slab::new(),
            waiters: Slab::new(),
            last_fence: 0,
            last_serial: 0,
            timed_out: 0,
            closed: false,
        }
    }

    /// The options the engine was made with.
    pub fn options(&self) -> &LocalOptions {
        &self.options
    }

    /// Tries to take `key`. When it is held and `may_wait` is true, queues
    /// the caller with the payload `make_waiter` builds (called only then).
    ///
    /// Errors: `CLOSED`, `INVALID_KEY`, `KEY_LIMIT` (the key is free but
    /// `maxKeys` keys are held), `LOCK_BUSY` (held and `may_wait` is false),
    /// `QUEUE_FULL` (held and `maxWaiters` are already waiting).
    pub fn acquire(&mut self, key: &str, may_wait: bool, make_waiter: impl FnOnce(WaiterId) -> W) -> Result<Acquired> {
        if self.closed {
            return Err(LockError::closed());
        }
        key::validate(key, self.options.max_key_bytes as usize)?;
        let hash = self.hasher.hash_one(key);
        let keys = &self.keys;
        // One probe finds the key or the place to insert it.
        let key_slot = match self.index.entry(hash, |&slot| &*keys[slot as usize].key == key, |&slot| keys[slot as usize].hash) {
            Entry::Occupied(entry) => *entry.get(),
            Entry::Vacant(entry) => {
                if self.keys.len() >= self.options.max_keys as usize {
                    return Err(LockError::key_limit("maxKeys", self.options.max_keys, "keys are"));
                }
                self.last_fence += 1;
                let fence = self.last_fence;
                let key_slot = self.keys.insert(KeySlot { key: key.into(), hash, fence, head: None, tail: None }) as u32;
                entry.insert(key_slot);
                return Ok(Acquired::Granted(LeaseId { slot: key_slot, fence }));
            }
        };
        if !may_wait {
            return Err(LockError::busy());
        }
        if self.waiters.len() >= self.options.max_waiters as usize {
            return Err(LockError::new(
                ErrorCode::QueueFull,
                format!("maxWaiters ({}) acquires are already waiting in this backend", self.options.max_waiters),
            ));
        }
        self.last_serial += 1;
        let serial = self.last_serial;
        let entry = self.waiters.vacant_entry();
        let slot = entry.key() as u32;
        let id = WaiterId { slot, serial };
        let tail = self.keys[key_slot as usize].tail;
        entry.insert(Waiter { key_slot, serial, prev: tail, next: None, payload: make_waiter(id) });
        match tail {
            Some(tail) => self.waiters[tail as usize].next = Some(slot),
            None => self.keys[key_slot as usize].head = Some(slot),
        }
        self.keys[key_slot as usize].tail = Some(slot);
        Ok(Acquired::Queued(id))
    }

    /// Releases a lease, handing the key to the head waiter if there is one.
    pub fn release(&mut self, lease: LeaseId) -> Released<W> {
        if !self.is_held(lease) {
            return Released::NotHeld;
        }
        let key_slot = lease.slot;
        match self.keys[key_slot as usize].head {
            Some(head) => {
                let waiter = self.unlink(head);
                let fence = self.next_fence();
                self.keys[key_slot as usize].fence = fence;
                Released::HandedOn { waiter: waiter.payload, lease: LeaseId { slot: key_slot, fence } }
            }
            None => {
                let slot = self.keys.remove(key_slot as usize);
                if let Ok(entry) = self.index.find_entry(slot.hash, |&s| s == key_slot) {
                    entry.remove();
                }
                Released::Freed
            }
        }
    }

    /// Removes a waiter from its queue. Returns its payload when it was still
    /// waiting, `None` when it was already granted (or rejected by `close`):
    /// then the surface owns whatever it was given and must not drop a lease.
    pub fn cancel(&mut self, waiter: WaiterId, reason: CancelReason) -> Option<W> {
        match self.waiters.get(waiter.slot as usize) {
            Some(entry) if entry.serial == waiter.serial => {
                if reason == CancelReason::TimedOut {
                    self.timed_out += 1;
                }
                Some(self.unlink(waiter.slot).payload)
            }
            _ => None,
        }
    }

    /// True when `waiter` is queued and first in line: the key goes to it
    /// with the next release.
    pub fn is_next(&self, waiter: WaiterId) -> bool {
        matches!(self.waiters.get(waiter.slot as usize), Some(entry) if entry.serial == waiter.serial && entry.prev.is_none())
    }

    /// The payload of the waiter first in line for the key `lease` holds:
    /// the one that gets the key when `lease` is released. `None` when
    /// nobody waits, or `lease` is not held.
    pub fn next_waiter(&self, lease: LeaseId) -> Option<&W> {
        if !self.is_held(lease) {
            return None;
        }
        let head = self.keys[lease.slot as usize].head?;
        Some(&self.waiters[head as usize].payload)
    }

    /// True while `lease` is held (not released, handed on or closed).
    pub fn is_held(&self, lease: LeaseId) -> bool {
        matches!(self.keys.get(lease.slot as usize), Some(entry) if entry.fence == lease.fence)
    }

    /// The key a held lease is on.
    pub fn key_of(&self, lease: LeaseId) -> Option<&str> {
        if !self.is_held(lease) {
            return None;
        }
        Some(&self.keys[lease.slot as usize].key)
    }

    /// Closes the engine: every held lease becomes invalid, every later call
    /// fails with `CLOSED`, and the payloads of all waiters are returned
    /// (oldest first per key) so the surface can reject them with `CLOSED`.
    pub fn close(&mut self) -> Vec<W> {
        self.closed = true;
        let mut rejected = Vec::with_capacity(self.waiters.len());
        let heads: Vec<Option<u32>> = self.keys.iter().map(|(_, slot)| slot.head).collect();
        for mut next in heads {
            while let Some(slot) = next {
                let waiter = self.waiters.remove(slot as usize);
                next = waiter.next;
                rejected.push(waiter.payload);
            }
        }
        self.index.clear();
        self.keys.clear();
        rejected
    }

    /// True once `close` has run.
    pub fn is_closed(&self) -> bool {
        self.closed
    }

    /// Leases held and waiters queued now, and totals since the engine was made.
    pub fn counts(&self) -> LocalCounts {
        // Every grant takes the next fence, so the last fence counts grants.
        LocalCounts { held: self.keys.len(), waiting: self.waiters.len(), acquired: self.last_fence, timed_out: self.timed_out }
    }

    fn next_fence(&mut self) -> u64 {
        self.last_fence += 1;
        self.last_fence
    }

    fn unlink(&mut self, slot: u32) -> Waiter<W> {
        let waiter = self.waiters.remove(slot as usize);
        match waiter.prev {
            Some(prev) => self.waiters[prev as usize].next = waiter.next,
            None => self.keys[waiter.key_slot as usize].head = waiter.next,
        }
        match waiter.next {
            Some(next) => self.waiters[next as usize].prev = waiter.prev,
            None => self.keys[waiter.key_slot as usize].tail = waiter.prev,
        }
        waiter
    }
}

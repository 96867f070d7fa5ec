//! The local lock engine: a plain state machine with no I/O and no locking
//! of its own; its one clock read, per grant, says how long a lease has held
//! (`inspect`).
//!
//! Surfaces drive it: the Rust async API wraps it in a mutex and wakes tasks,
//! the Node addon calls it on the JS thread and settles promises, the C API
//! blocks on a condvar or calls back. Timers and cancellation live in the
//! surfaces, which call [`LocalEngine::cancel`] when a wait ends without a
//! grant. A release or a cancel may grant queued waiters; the surface takes
//! those grants with [`LocalEngine::pop_granted`] right after the call.
//!
//! Guarantees:
//! - an exclusive lease of a key (limit 1) holds it alone; shared leases
//!   hold it together and with no exclusive one; of a counted key (limit
//!   `n`) at most `n` units are held;
//! - a lease over several keys holds all of them or none;
//! - waiters of one key are granted in the order they queued (FIFO), across
//!   modes: a shared request behind a queued exclusive one waits for it, so
//!   writers are never starved by later readers, and a heavy counted request
//!   is never overtaken by lighter ones behind it;
//! - no deadlock: one acquire joins the queues of all its keys at once, so
//!   every queue is in the order of the engine's single arrival order, and
//!   the oldest waiter is first on all of its keys;
//! - every grant carries a fence larger than every earlier grant of the
//!   engine (one counter per backend), the same for every key of the grant;
//! - a plain acquire and release is O(1) in the number of held keys and
//!   waiters (hash map lookups, slab slots, intrusive per-key queues); a
//!   grant of `k` keys costs O(k).

use std::collections::VecDeque;
use std::hash::BuildHasher;
use std::time::Duration;

use hashbrown::hash_table::Entry;
use hashbrown::{DefaultHashBuilder, HashTable};

use slab::Slab;

use super::clock;
use super::key_copy::KeyCopy;
use crate::acquire::{LockKind, LockMode};
use crate::error::{ErrorCode, LockError, Result};
use crate::holder::HolderLabel;
use crate::inspect::{busy_details, tells_holders};
use crate::inspect::{Holding, Inspection, SHOWN_HOLDERS};
use crate::key;
use crate::options::LocalOptions;

/// Names one lease. Stale ids (released, closed) are recognised: the fence
/// is unique per engine, so a reused slot never matches an old id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LeaseId {
    /// The lease's slot in the engine (opaque: a plain lease is its key's
    /// slot, any other its own, told apart by the lowest bit; it stays
    /// small, a JS small integer in the Node surface).
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
    /// The keys were free enough: the caller holds them now.
    Granted(LeaseId),
    /// The caller is queued and will be granted through some later
    /// `release` or `cancel` (see [`LocalEngine::pop_granted`]), unless it
    /// cancels.
    Queued(WaiterId),
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
    /// Leases held now (of any mode).
    pub held: usize,
    /// Of those, the leases held in shared mode.
    pub held_shared: usize,
    /// Acquires queued now.
    pub waiting: usize,
    /// Leases granted since the backend started.
    pub acquired: u64,
    /// Waits that ran out since the backend started.
    pub timed_out: u64,
}

/// The engine's slots of one lease's or waiter's keys: one inline (a plain
/// acquire allocates nothing for it), several boxed.
enum Slots {
    One(u32),
    Many(Box<[u32]>),
}

impl Slots {
    fn as_slice(&self) -> &[u32] {
        match self {
            Slots::One(slot) => std::slice::from_ref(slot),
            Slots::Many(slots) => slots,
        }
    }

    fn first(&self) -> u32 {
        self.as_slice()[0]
    }

    /// The same shape with each slot mapped: a waiter's entries to its keys.
    fn map(&self, mut f: impl FnMut(u32) -> u32) -> Slots {
        match self {
            Slots::One(slot) => Slots::One(f(*slot)),
            Slots::Many(slots) => Slots::Many(slots.iter().map(|&slot| f(slot)).collect()),
        }
    }
}

/// A key that is held or waited for; it leaves the engine when neither.
struct KeySlot {
    /// Inline for short keys: an uncontended acquire and release of a key
    /// nobody held then allocates nothing (malloc and free were about a
    /// seventh of the C surface's uncontended pair).
    key: KeyCopy,
    /// The key's hash in `index`, kept so removal finds the entry without
    /// hashing again.
    hash: u64,
    /// The limit every caller of the key agreed on (1 unless counted).
    limit: u32,
    /// Units held by exclusive leases.
    units: u32,
    /// Shared leases holding the key.
    readers: u32,
    /// The fence of the plain lease holding the key (exclusive, of this key
    /// alone, limit 1), 0 when none: such a lease is the key's slot, with no
    /// holder of its own (the uncontended acquire and release of the C
    /// surface and of Node take that path).
    plain: u64,
    /// When the plain lease was granted ([`clock::now_ms`]).
    plain_since: u64,
    /// The key's queue of waiter entries, oldest first.
    head: Option<u32>,
    tail: Option<u32>,
}

impl KeySlot {
    fn admits(&self, mode: LockMode, weight: u32) -> bool {
        match mode {
            LockMode::Exclusive => self.readers == 0 && self.units + weight <= self.limit,
            LockMode::Shared => self.units == 0,
        }
    }

    fn is_unused(&self) -> bool {
        self.units == 0 && self.readers == 0 && self.head.is_none()
    }

    fn hold(&mut self, mode: LockMode, weight: u32) {
        match mode {
            LockMode::Exclusive => self.units += weight,
            LockMode::Shared => self.readers += 1,
        }
    }

    fn unhold(&mut self, mode: LockMode, weight: u32) {
        match mode {
            LockMode::Exclusive => self.units -= weight,
            LockMode::Shared => self.readers -= 1,
        }
    }
}

/// One holder of a key as the engine holds it.
#[derive(Debug, PartialEq, Eq)]
pub struct KeyHolder {
    /// The units it holds (1 unless the key is counted).
    pub units: u32,
    /// Its lease's fence.
    pub fence: u64,
    /// Its acquire's own label; `None`: the backend's.
    pub label: Option<HolderLabel>,
    /// How long since its grant, to the clock's tick.
    pub held_for: Duration,
}

/// One key as the engine holds it (`LocalEngine::inspect`).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct KeyView {
    /// How it is held; `None` when free.
    pub mode: Option<LockMode>,
    /// Its limit (1 unless counted; 0 for a key not in use).
    pub limit: u32,
    /// Each holder, oldest grant first.
    pub holders: Vec<KeyHolder>,
    /// Acquires queued for it.
    pub waiting: u32,
}

impl KeyView {
    /// As `Backend::inspect` answers it for `backend`, whose holders are
    /// labelled `holder` unless their acquire gave a label of its own: each
    /// holder's fence; local leases do not expire.
    pub fn inspection(self, backend: &str, holder: &HolderLabel) -> Inspection {
        Inspection {
            backend: backend.to_owned(),
            mode: self.mode,
            limit: self.limit.max(1),
            held: self.holders.len() as u32,
            holders: self
                .holders
                .iter()
                .take(SHOWN_HOLDERS)
                .map(|found| Holding {
                    label: Some(found.label.as_ref().unwrap_or(holder).to_string()),
                    units: found.units,
                    remaining: None,
                    fence: Some(found.fence),
                    held_for: Some(found.held_for),
                })
                .collect(),
            waiting: self.waiting,
            fence: None,
        }
    }
}

/// A granted lease other than a plain one (see [`KeySlot::plain`]).
struct Holder {
    fence: u64,
    /// When it was granted ([`clock::now_ms`]).
    since: u64,
    mode: LockMode,
    weight: u32,
    keys: Slots,
    /// The acquire's own label, if it gave one: such a lease is never
    /// plain, so a plain lease (the fast path) carries none.
    label: Option<HolderLabel>,
}

/// A queued acquire: one entry in the queue of each of its keys.
struct Waiter<W> {
    serial: u64,
    mode: LockMode,
    weight: u32,
    /// Entry slots, in the order of the acquire's keys.
    entries: Slots,
    /// The acquire's own label, for its lease.
    label: Option<HolderLabel>,
    payload: W,
}

/// A waiter's place in one key's queue.
struct QueueEntry {
    waiter: u32,
    key_slot: u32,
    prev: Option<u32>,
    next: Option<u32>,
}

/// The state of one local backend. `W` is whatever a surface needs to wake a
/// waiter (a waker, a callback, a promise handle).
pub struct LocalEngine<W> {
    options: LocalOptions,
    /// Key slots by key: one hash per newly held key, and an allocation
    /// only for a key longer than [`KeyCopy`] keeps inline.
    /// Keys may come from untrusted input, so the hash is seeded at random
    /// per engine (foldhash, hashbrown's default): flooding one bucket
    /// takes knowing the seed. SipHash cost the Node fast path about 5%.
    index: HashTable<u32>,
    hasher: DefaultHashBuilder,
    keys: Slab<KeySlot>,
    holders: Slab<Holder>,
    waiters: Slab<Waiter<W>>,
    entries: Slab<QueueEntry>,
    /// Grants made by the last release or cancel, not yet taken.
    granted: VecDeque<(W, LeaseId)>,
    /// Keys whose queue head may have become grantable (reused buffer).
    to_pump: Vec<u32>,
    /// The slots of a key set being checked (reused buffer).
    found: Vec<Option<u32>>,
    held_shared: usize,
    /// Plain leases held now (they have no holder).
    held_plain: usize,
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
            holders: Slab::new(),
            waiters: Slab::new(),
            entries: Slab::new(),
            granted: VecDeque::new(),
            to_pump: Vec::new(),
            found: Vec::new(),
            held_shared: 0,
            held_plain: 0,
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

    /// Tries to take `key` exclusively (a plain lock). When it is held and
    /// `may_wait` is true, queues the caller with the payload `make_waiter`
    /// builds (called only then).
    ///
    /// Errors: `CLOSED`, `INVALID_KEY`, `KEY_LIMIT` (the key is unused but
    /// `maxKeys` keys are held or waited for), `INVALID_ARGUMENT` (the key is
    /// held with another limit), `LOCK_BUSY` (held and `may_wait` is false),
    /// `QUEUE_FULL` (held and `maxWaiters` are already waiting).
    pub fn acquire(&mut self, key: &str, may_wait: bool, make_waiter: impl FnOnce(WaiterId) -> W) -> Result<Acquired> {
        self.acquire_one(key, LockKind::EXCLUSIVE, None, may_wait, make_waiter)
    }

    /// [`LocalEngine::acquire`] of one key in any kind: shared, or `weight`
    /// units of a key counted to `limit`; its lease labelled `label` (an
    /// acquire's own holder label; `None`: the backend's).
    pub fn acquire_one(
        &mut self,
        key: &str,
        kind: LockKind,
        label: Option<HolderLabel>,
        may_wait: bool,
        make_waiter: impl FnOnce(WaiterId) -> W,
    ) -> Result<Acquired> {
        if self.closed {
            return Err(LockError::closed());
        }
        key::validate(key, self.options.max_key_bytes as usize)?;
        if !kind.is_plain() {
            check_kind(kind)?;
        }
        let hash = self.hasher.hash_one(key);
        let keys = &self.keys;
        // One probe finds the key or the place to insert it.
        let key_slot = match self.index.entry(hash, |&slot| keys[slot as usize].key.is(key), |&slot| keys[slot as usize].hash) {
            Entry::Occupied(entry) => *entry.get(),
            Entry::Vacant(entry) => {
                if self.keys.len() >= self.options.max_keys as usize {
                    return Err(key_limit(&self.options));
                }
                let slot =
                    KeySlot {
                        key: KeyCopy::new(key),
                        hash,
                        limit: kind.limit,
                        units: 0,
                        readers: 0,
                        plain: 0,
                        plain_since: 0,
                        head: None,
                        tail: None,
                    };
                let key_slot = self.keys.insert(slot) as u32;
                entry.insert(key_slot);
                return Ok(Acquired::Granted(self.hold_one(kind, key_slot, label)));
            }
        };
        let slot = &self.keys[key_slot as usize];
        if slot.limit != kind.limit {
            return Err(other_limit(slot.limit, kind.limit));
        }
        if slot.head.is_none() && slot.admits(kind.mode, kind.weight) {
            return Ok(Acquired::Granted(self.hold_one(kind, key_slot, label)));
        }
        self.check_may_queue(may_wait)?;
        Ok(Acquired::Queued(self.enqueue(kind, &[key_slot], label, make_waiter)))
    }

    /// Tries to take every key of `keys` in `kind`, all or none; queues on
    /// all of them when they are not all free enough and `may_wait` is true.
    ///
    /// Errors as for [`LocalEngine::acquire_one`], and `INVALID_ARGUMENT`
    /// for an empty set or a key given twice. `KEY_LIMIT` counts the keys
    /// the set would add.
    pub fn acquire_many<K: AsRef<str>>(
        &mut self,
        keys: &[K],
        kind: LockKind,
        label: Option<HolderLabel>,
        may_wait: bool,
        make_waiter: impl FnOnce(WaiterId) -> W,
    ) -> Result<Acquired> {
        if self.closed {
            return Err(LockError::closed());
        }
        // A set larger than maxKeys can never be held: refused before its
        // keys are read (O(k) as that is).
        if keys.len() > self.options.max_keys as usize {
            return Err(key_limit(&self.options));
        }
        crate::acquire::check_keys(keys, self.options.max_key_bytes as usize)?;
        check_kind(kind)?;
        if let [key] = keys {
            return self.acquire_one(key.as_ref(), kind, label, may_wait, make_waiter);
        }
        // Check everything before changing anything: a refused set leaves
        // no key behind. The slots found go in a reused buffer.
        let mut found = std::mem::take(&mut self.found);
        found.clear();
        found.extend(keys.iter().map(|key| self.find(key.as_ref())));
        let checked = self.check_set(&found, kind, may_wait).map(|free| {
            let slots: Box<[u32]> =
                keys.iter().zip(&found).map(|(key, slot)| slot.unwrap_or_else(|| self.insert_key(key.as_ref(), kind.limit))).collect();
            (free, slots)
        });
        self.found = found;
        let (free, slots) = checked?;
        if free {
            for slot in slots.iter() {
                self.keys[*slot as usize].hold(kind.mode, kind.weight);
            }
            return Ok(Acquired::Granted(self.hold(kind.mode, kind.weight, Slots::Many(slots), label)));
        }
        Ok(Acquired::Queued(self.enqueue(kind, &slots, label, make_waiter)))
    }

    /// Releases a lease. False when the id named no held lease (already
    /// released, or the engine closed). Waiters it let in are granted and
    /// wait in [`LocalEngine::pop_granted`].
    pub fn release(&mut self, lease: LeaseId) -> bool {
        if let Some(key_slot) = plain_key(lease) {
            let Some(key) = self.keys.get_mut(key_slot as usize).filter(|key| key.plain == lease.fence && lease.fence != 0) else {
                return false;
            };
            key.plain = 0;
            key.unhold(LockMode::Exclusive, 1);
            self.held_plain -= 1;
            // Nobody waits (the uncontended case): the key leaves at once.
            if key.is_unused() {
                self.remove_key(key_slot);
            } else {
                self.to_pump.push(key_slot);
                self.pump();
            }
            return true;
        }
        if !self.is_held(lease) {
            return false;
        }
        let holder = self.holders.remove(holder_slot(lease));
        if holder.mode == LockMode::Shared {
            self.held_shared -= 1;
        }
        for &key_slot in holder.keys.as_slice() {
            self.keys[key_slot as usize].unhold(holder.mode, holder.weight);
            self.to_pump.push(key_slot);
        }
        self.pump();
        true
    }

    /// Takes the next grant the last `release` or `cancel` made: the payload
    /// of a waiter that holds its keys now, and its lease. Grants come
    /// oldest waiter first. Surfaces take them all right after the call.
    pub fn pop_granted(&mut self) -> Option<(W, LeaseId)> {
        self.granted.pop_front()
    }

    /// True while grants wait in [`LocalEngine::pop_granted`].
    #[inline]
    pub fn has_granted(&self) -> bool {
        !self.granted.is_empty()
    }

    /// Removes a waiter from its queues. Returns its payload when it was
    /// still waiting, `None` when it was already granted (or rejected by
    /// `close`): then the surface owns whatever it was given and must not
    /// drop a lease. Leaving may let waiters behind it in (a writer that
    /// gave up, with readers queued behind it): those wait in
    /// [`LocalEngine::pop_granted`].
    pub fn cancel(&mut self, waiter: WaiterId, reason: CancelReason) -> Option<W> {
        match self.waiters.get(waiter.slot as usize) {
            Some(entry) if entry.serial == waiter.serial => {}
            _ => return None,
        }
        if reason == CancelReason::TimedOut {
            self.timed_out += 1;
        }
        let gone = self.waiters.remove(waiter.slot as usize);
        for &entry in gone.entries.as_slice() {
            // Behind another entry, the key keeps its head: nothing changes there.
            if let (key_slot, true) = self.unlink(entry) {
                self.to_pump.push(key_slot);
            }
        }
        self.pump();
        Some(gone.payload)
    }

    /// True when `waiter` is queued and first in line on each of its keys:
    /// it is granted as soon as its keys are free enough.
    pub fn is_next(&self, waiter: WaiterId) -> bool {
        match self.waiters.get(waiter.slot as usize) {
            Some(entry) if entry.serial == waiter.serial => {
                entry.entries.as_slice().iter().all(|&e| self.entries[e as usize].prev.is_none())
            }
            _ => false,
        }
    }

    /// The payload of the waiter first in line for the (first) key `lease`
    /// holds: the one that gets it next. `None` when nobody waits, or
    /// `lease` is not held.
    pub fn next_waiter(&self, lease: LeaseId) -> Option<&W> {
        let key_slot = self.first_key(lease)?;
        let head = self.keys[key_slot as usize].head?;
        Some(&self.waiters[self.entries[head as usize].waiter as usize].payload)
    }

    /// True while `lease` is held (not released or closed).
    pub fn is_held(&self, lease: LeaseId) -> bool {
        match plain_key(lease) {
            Some(key_slot) => matches!(self.keys.get(key_slot as usize), Some(key) if key.plain == lease.fence && lease.fence != 0),
            None => self.holder(lease).is_some(),
        }
    }

    /// The (first) key a held lease is on.
    pub fn key_of(&self, lease: LeaseId) -> Option<&str> {
        Some(self.keys[self.first_key(lease)? as usize].key.as_str())
    }

    /// The keys a held lease is on, in the order of its acquire; none when
    /// it is not held.
    pub fn keys_of(&self, lease: LeaseId) -> impl Iterator<Item = &str> + '_ {
        let plain = plain_key(lease).filter(|_| self.is_held(lease));
        let many = self.holder(lease).map(|holder| holder.keys.as_slice()).unwrap_or_default();
        plain.into_iter().chain(many.iter().copied()).map(|slot| self.keys[slot as usize].key.as_str())
    }

    /// The holder of a held lease that is not plain.
    fn holder(&self, lease: LeaseId) -> Option<&Holder> {
        if plain_key(lease).is_some() {
            return None;
        }
        self.holders.get(holder_slot(lease)).filter(|holder| holder.fence == lease.fence)
    }

    /// The (first) key slot of a held lease.
    fn first_key(&self, lease: LeaseId) -> Option<u32> {
        match plain_key(lease) {
            Some(key_slot) => self.is_held(lease).then_some(key_slot),
            None => self.holder(lease).map(|holder| holder.keys.first()),
        }
    }

    /// Closes the engine: every held lease becomes invalid, every later call
    /// fails with `CLOSED`, and the payloads of all waiters are returned
    /// (oldest first) so the surface can reject them with `CLOSED`.
    /// The tables are given back to the allocator, not only emptied: a
    /// closed engine may live on in a lease, or in a handle a surface
    /// keeps for reuse (the C surface's per-thread spare lease handle), and
    /// then costs its struct alone, whatever it held at its peak.
    pub fn close(&mut self) -> Vec<W> {
        self.closed = true;
        let mut waiters: Vec<Waiter<W>> = std::mem::take(&mut self.waiters).into_iter().map(|(_, waiter)| waiter).collect();
        waiters.sort_unstable_by_key(|waiter| waiter.serial);
        self.index = HashTable::new();
        self.keys = Slab::new();
        self.holders = Slab::new();
        self.entries = Slab::new();
        self.to_pump = Vec::new();
        self.found = Vec::new();
        self.held_shared = 0;
        self.held_plain = 0;
        waiters.into_iter().map(|waiter| waiter.payload).collect()
    }

    /// True once `close` has run.
    pub fn is_closed(&self) -> bool {
        self.closed
    }

    /// Leases held and waiters queued now, and totals since the engine was made.
    pub fn counts(&self) -> LocalCounts {
        // Every grant takes the next fence, so the last fence counts grants.
        LocalCounts {
            held: self.holders.len() + self.held_plain,
            held_shared: self.held_shared,
            waiting: self.waiters.len(),
            acquired: self.last_fence,
            timed_out: self.timed_out,
        }
    }

    /// What the engine holds of `key` (see `Backend::inspect`): its
    /// holders, oldest grant first, and the acquires queued for it.
    pub fn inspect(&self, key: &str) -> KeyView {
        let Some(slot) = self.find(key) else { return KeyView::default() };
        let found = &self.keys[slot as usize];
        let now = clock::now_ms();
        let mut holders: Vec<KeyHolder> = self
            .holders_at(slot)
            .into_iter()
            .map(|(lease, units)| {
                let (label, since) = match plain_key(lease) {
                    Some(_) => (None, found.plain_since),
                    None => {
                        let holder = &self.holders[holder_slot(lease)];
                        (holder.label.clone(), holder.since)
                    }
                };
                KeyHolder { units, fence: lease.fence, label, held_for: Duration::from_millis(now.saturating_sub(since)) }
            })
            .collect();
        holders.sort_unstable_by_key(|holder| holder.fence);
        let mode = match (found.readers, holders.is_empty()) {
            (_, true) => None,
            (0, false) => Some(LockMode::Exclusive),
            _ => Some(LockMode::Shared),
        };
        let waiting = std::iter::successors(found.head, |&entry| self.entries[entry as usize].next).count() as u32;
        KeyView { mode, limit: found.limit, holders, waiting }
    }

    /// `err` as the acquire of `keys` ends with it: a `WAIT_TIMEOUT` or
    /// `LOCK_BUSY` gains the holders of the key that kept it out (see
    /// `inspect::busy_details`), read now, labelled `holder`; any other error is
    /// as it was.
    pub fn told_holders(&self, err: LockError, keys: &[&str], holder: &HolderLabel) -> LockError {
        if !tells_holders(err.code()) {
            return err;
        }
        let found: Vec<Inspection> = keys.iter().map(|key| self.inspect(key).inspection("", holder)).collect();
        match busy_details(&found, keys.len() > 1) {
            Some(details) => err.with_details(details),
            None => err,
        }
    }

    /// The leases that hold `key` now (`Backend::force_release` releases
    /// each): a grant made by releasing one is not among them.
    pub fn holders_of(&self, key: &str) -> Vec<LeaseId> {
        let Some(slot) = self.find(key) else { return Vec::new() };
        self.holders_at(slot).into_iter().map(|(lease, _)| lease).collect()
    }

    /// The leases that hold the key in `slot`, each with the units it
    /// holds: its plain holder, or the holders of kinds or of several keys,
    /// found by a scan, as an operator's read may cost (the grants never
    /// do).
    fn holders_at(&self, slot: u32) -> Vec<(LeaseId, u32)> {
        let found = &self.keys[slot as usize];
        if found.plain != 0 {
            return vec![(LeaseId { slot: slot << 1, fence: found.plain }, 1)];
        }
        if found.units == 0 && found.readers == 0 {
            return Vec::new();
        }
        self.holders
            .iter()
            .filter(|(_, holder)| holder.keys.as_slice().contains(&slot))
            .map(|(at, holder)| (LeaseId { slot: ((at as u32) << 1) | 1, fence: holder.fence }, holder.weight))
            .collect()
    }

    /// Whether a key set whose slots are `found` (`None`: a key not in use)
    /// can be granted now, or else may queue; the errors of `acquire_many`.
    fn check_set(&self, found: &[Option<u32>], kind: LockKind, may_wait: bool) -> Result<bool> {
        let added = found.iter().filter(|slot| slot.is_none()).count();
        if self.keys.len() + added > self.options.max_keys as usize {
            return Err(key_limit(&self.options));
        }
        let mut free = true;
        for slot in found.iter().flatten() {
            let slot = &self.keys[*slot as usize];
            if slot.limit != kind.limit {
                return Err(other_limit(slot.limit, kind.limit));
            }
            free &= slot.head.is_none() && slot.admits(kind.mode, kind.weight);
        }
        if !free {
            self.check_may_queue(may_wait)?;
        }
        Ok(free)
    }

    fn find(&self, key: &str) -> Option<u32> {
        let hash = self.hasher.hash_one(key);
        self.index.find(hash, |&slot| self.keys[slot as usize].key.is(key)).copied()
    }

    fn insert_key(&mut self, key: &str, limit: u32) -> u32 {
        let hash = self.hasher.hash_one(key);
        let key_slot =
            self.keys.insert(KeySlot { key: KeyCopy::new(key), hash, limit, units: 0, readers: 0, plain: 0, plain_since: 0, head: None, tail: None })
                as u32;
        let keys = &self.keys;
        self.index.insert_unique(hash, key_slot, |&slot| keys[slot as usize].hash);
        key_slot
    }

    fn remove_key(&mut self, key_slot: u32) {
        let slot = self.keys.remove(key_slot as usize);
        if let Ok(entry) = self.index.find_entry(slot.hash, |&s| s == key_slot) {
            entry.remove();
        }
    }

    fn check_may_queue(&self, may_wait: bool) -> Result<()> {
        if !may_wait {
            return Err(LockError::busy());
        }
        if self.waiters.len() >= self.options.max_waiters as usize {
            return Err(LockError::new(
                ErrorCode::QueueFull,
                format!("maxWaiters ({}) acquires are already waiting in this backend", self.options.max_waiters),
            ));
        }
        Ok(())
    }

    /// A new lease of one key, counted on it here.
    #[inline(always)]
    fn hold_one(&mut self, kind: LockKind, key_slot: u32, label: Option<HolderLabel>) -> LeaseId {
        let key = &mut self.keys[key_slot as usize];
        key.hold(kind.mode, kind.weight);
        if kind.mode == LockMode::Exclusive && key.limit == 1 && key_slot <= MAX_PLAIN_KEY_SLOT && label.is_none() {
            return self.hold_plain(key_slot);
        }
        self.hold(kind.mode, kind.weight, Slots::One(key_slot), label)
    }

    /// A new lease of `keys` (already counted on each key): plain (the key's
    /// slot) when it is exclusive on one key of limit 1 with no label of
    /// its own, else a holder.
    fn hold(&mut self, mode: LockMode, weight: u32, keys: Slots, label: Option<HolderLabel>) -> LeaseId {
        if let (Slots::One(key_slot), LockMode::Exclusive, None) = (&keys, mode, &label) {
            if self.keys[*key_slot as usize].limit == 1 && *key_slot <= MAX_PLAIN_KEY_SLOT {
                return self.hold_plain(*key_slot);
            }
        }
        self.last_fence += 1;
        let fence = self.last_fence;
        if mode == LockMode::Shared {
            self.held_shared += 1;
        }
        let slot = self.holders.insert(Holder { fence, since: clock::now_ms(), mode, weight, keys, label }) as u32;
        LeaseId { slot: (slot << 1) | 1, fence }
    }

    /// A plain lease of the key in `key_slot` (counted on it already).
    #[inline(always)]
    fn hold_plain(&mut self, key_slot: u32) -> LeaseId {
        self.last_fence += 1;
        let key = &mut self.keys[key_slot as usize];
        key.plain = self.last_fence;
        key.plain_since = clock::now_ms();
        self.held_plain += 1;
        LeaseId { slot: key_slot << 1, fence: self.last_fence }
    }

    /// Queues a waiter at the tail of each key's queue, in one step.
    fn enqueue(
        &mut self,
        kind: LockKind,
        key_slots: &[u32],
        label: Option<HolderLabel>,
        make_waiter: impl FnOnce(WaiterId) -> W,
    ) -> WaiterId {
        self.last_serial += 1;
        let serial = self.last_serial;
        let slot = self.waiters.vacant_key() as u32;
        let id = WaiterId { slot, serial };
        let entries = match key_slots {
            [key_slot] => Slots::One(self.link(slot, *key_slot)),
            _ => Slots::Many(key_slots.iter().map(|&key_slot| self.link(slot, key_slot)).collect()),
        };
        let inserted =
            self.waiters.insert(Waiter { serial, mode: kind.mode, weight: kind.weight, entries, label, payload: make_waiter(id) });
        debug_assert_eq!(inserted as u32, slot);
        id
    }

    fn link(&mut self, waiter: u32, key_slot: u32) -> u32 {
        let tail = self.keys[key_slot as usize].tail;
        let entry = self.entries.insert(QueueEntry { waiter, key_slot, prev: tail, next: None }) as u32;
        match tail {
            Some(tail) => self.entries[tail as usize].next = Some(entry),
            None => self.keys[key_slot as usize].head = Some(entry),
        }
        self.keys[key_slot as usize].tail = Some(entry);
        entry
    }

    /// Takes an entry out of its key's queue: its key, and whether it was
    /// the head.
    fn unlink(&mut self, entry: u32) -> (u32, bool) {
        let entry = self.entries.remove(entry as usize);
        let key = &mut self.keys[entry.key_slot as usize];
        match entry.prev {
            Some(prev) => self.entries[prev as usize].next = entry.next,
            None => key.head = entry.next,
        }
        match entry.next {
            Some(next) => self.entries[next as usize].prev = entry.prev,
            None => key.tail = entry.prev,
        }
        (entry.key_slot, entry.prev.is_none())
    }

    /// Grants, on every key in `to_pump`, the queue heads that can go now,
    /// in order; a key neither held nor waited for leaves the engine.
    fn pump(&mut self) {
        while let Some(key_slot) = self.to_pump.pop() {
            while let Some(key) = self.keys.get(key_slot as usize) {
                let Some(head) = key.head else {
                    if key.is_unused() {
                        self.remove_key(key_slot);
                    }
                    break;
                };
                let waiter = self.entries[head as usize].waiter;
                if !self.grantable(waiter) {
                    break;
                }
                self.grant(waiter, key_slot);
            }
        }
    }

    /// First in line on each of its keys, and each admits it.
    fn grantable(&self, waiter: u32) -> bool {
        let waiter = &self.waiters[waiter as usize];
        waiter.entries.as_slice().iter().all(|&entry| {
            let entry = &self.entries[entry as usize];
            entry.prev.is_none() && self.keys[entry.key_slot as usize].admits(waiter.mode, waiter.weight)
        })
    }

    /// Moves a grantable waiter from its queues to a new lease. Its other
    /// keys than `pumping` get new heads, which may be grantable too.
    fn grant(&mut self, waiter: u32, pumping: u32) {
        let waiter = self.waiters.remove(waiter as usize);
        let keys = waiter.entries.map(|entry| {
            let (key_slot, _) = self.unlink(entry);
            self.keys[key_slot as usize].hold(waiter.mode, waiter.weight);
            if key_slot != pumping {
                self.to_pump.push(key_slot);
            }
            key_slot
        });
        let lease = self.hold(waiter.mode, waiter.weight, keys, waiter.label);
        self.granted.push_back((waiter.payload, lease));
    }
}

/// The highest key slot a plain lease id can name (its slot is the key
/// slot shifted left by one).
const MAX_PLAIN_KEY_SLOT: u32 = u32::MAX >> 1;

/// The key slot of a plain lease's id; `None` for a holder's.
#[inline]
fn plain_key(lease: LeaseId) -> Option<u32> {
    (lease.slot & 1 == 0).then_some(lease.slot >> 1)
}

/// The holder slot of a lease id that is not plain.
#[inline]
fn holder_slot(lease: LeaseId) -> usize {
    (lease.slot >> 1) as usize
}

/// A kind built by hand (its fields are public) is checked as the options'.
fn check_kind(kind: LockKind) -> Result<()> {
    let shared_with_units = kind.mode == LockMode::Shared && (kind.limit != 1 || kind.weight != 1);
    if shared_with_units || kind.weight == 0 || kind.weight > kind.limit {
        return Err(LockError::new(ErrorCode::InvalidArgument, format!("{} is not a lock kind that can be granted", kind.describe())));
    }
    Ok(())
}

fn key_limit(options: &LocalOptions) -> LockError {
    LockError::key_limit("maxKeys", options.max_keys, "keys are")
}

fn other_limit(held: u32, asked: u32) -> LockError {
    LockError::new(
        ErrorCode::InvalidArgument,
        format!("the key is held or waited for with limit {held}, and this acquire gives limit {asked}: every caller of a key must give the same limit"),
    )
}

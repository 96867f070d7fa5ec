//! The file backend's state in one process, in two steps per acquire.
//!
//! 1. In the process: the local driver's engine ([`LocalEngine`]) queues the
//!    acquires of this process, with every kind's rules (FIFO per key
//!    across modes, so a writer is not starved by later readers; counted
//!    units; several keys all or nothing, without deadlock; one limit per
//!    key). It grants an acquire once this process's other leases leave
//!    room for it.
//! 2. Across processes: an acquire the engine granted is *pending* until it
//!    holds the kernel locks of its keys ([`super::take`]), tried without
//!    blocking in the order of the keys' file names, all or nothing (one
//!    refused, the others taken are released and the pending acquire waits
//!    on the refused key's lock file): no two processes can deadlock.
//!
//! Every kernel call made here is non-blocking (`flock` tries, `open`, a
//! few short reads and writes), so they run under the state's mutex: a
//! grant and the queue it pops are one step. Waiters are handed their
//! outcome through a oneshot channel and woken by it.
//!
//! Fairness between processes: a process that releases a key and takes it
//! again (another task of it waiting, or the same task acquiring again)
//! would win every time over a waiter of another process, which learns of
//! the release only through its wake-up. So a pending acquire refused a
//! lock writes a waiting mark into the lock file (its process, its backend
//! and a deadline, refreshed at every retry), and a backend that sees a fresh
//! mark of another one (of another process, or of this one) gives way: its release keeps the lock file (the
//! waiter holds its inode), and its next first try of the key waits
//! [`GIVE_WAY`], time for the waiter to take the key; a shared acquire
//! does not join the readers of a key another process's waiter is marked
//! for (up to [`READER_GIVES_WAY`] times in a row), so readers of one
//! process do not starve a writer of another. The
//! mark is only a hint: a stale one (its waiter gone) costs at most that
//! delay, and exclusion never depends on it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use slab::Slab;
use tokio::sync::oneshot;

use super::directory::LockDirectory;
use super::idle::IdleFiles;
use super::lease::LeaseShared;
use super::lock_file::{LockFile, Marker};
use super::name::LockName;
use super::take::{self, Held, Took};
use super::watch::{safety_net, Watch};
use crate::acquire::{LockKind, LockMode};
use crate::error::{ErrorCode, LockError, Result};
use crate::holder::HolderLabel;
use crate::local::engine::{Acquired, CancelReason, LeaseId, LocalEngine, WaiterId};
use crate::options::{FileOptions, LocalOptions};
use crate::telemetry::Reporter;

/// How long a process waits before it tries a key that a waiter of another
/// process is marked waiting for: that waiter's wake-up and try take about
/// a millisecond.
const GIVE_WAY: Duration = Duration::from_millis(20);

/// How many times in a row a shared acquire gives way to another
/// process's marked waiter before it joins the readers all the same: a
/// writer elsewhere gets its turn, and a mark nobody acts on (its waiter
/// stuck, or never woken) cannot stop readers for longer than this.
const READER_GIVES_WAY: u32 = 10;

pub(crate) struct FileCore {
    pub name: String,
    pub options: FileOptions,
    pub directory: LockDirectory,
    pub reporter: Reporter,
    /// The provider's holder label, for acquires that give none.
    pub holder: HolderLabel,
    watch: Arc<Watch>,
    state: Mutex<State>,
    pub acquired: AtomicU64,
    pub timed_out: AtomicU64,
    pub lost: AtomicU64,
    /// This backend's identity (its process and a number of its own), in
    /// the waiting marks it writes.
    marker: Marker,
    /// Itself, for the grants it makes.
    this: Weak<FileCore>,
}

struct State {
    /// Step 1: this process's acquires, queued by kind.
    engine: LocalEngine<Request>,
    /// Step 2: acquires granted by the engine, trying their kernel locks,
    /// oldest first.
    pending: Vec<Pending>,
    /// Grants handed out and not yet released.
    held: usize,
    /// Of those, shared ones.
    held_shared: usize,
    next_ticket: u64,
    /// The leases handed out and not yet released, for `close()`.
    leases: Slab<Weak<LeaseShared>>,
    /// Lock files of free keys kept for reuse.
    idle: IdleFiles,
    /// The wake-up thread runs.
    watching: bool,
}

/// One acquire: its kind, its keys' lock file names (in the caller's
/// order) and where its outcome goes.
struct Request {
    ticket: u64,
    kind: LockKind,
    /// Whom its lock files' records name (see [`super::holders`]).
    label: HolderLabel,
    names: Box<[LockName]>,
    outcome: oneshot::Sender<Result<Grant>>,
}

/// An acquire granted in the process, not yet across processes.
struct Pending {
    request: Request,
    lease: LeaseId,
    /// The lock file it waits on, kept open between tries.
    waits_on: Option<Waiting>,
    /// It does not try before then (see "Fairness" above).
    defer_until: Option<Instant>,
    /// Tried since the last wake-up.
    tried: bool,
    /// Tried at least once.
    started: bool,
    /// Gave way to another process's waiter in a row.
    gave_way: u32,
}

/// The lock file a pending acquire waits on.
struct Waiting {
    /// Which of its keys.
    index: usize,
    /// The file, open (out while a try uses it).
    file: Option<LockFile>,
    /// Its inotify watch.
    wd: Option<i32>,
}

/// The kernel locks of a grant, held: dropping it releases them (and the
/// key in this process), removing the files of keys nobody wants.
pub(crate) struct Grant {
    core: Arc<FileCore>,
    lease: LeaseId,
    mode: LockMode,
    /// Per key, in the caller's order: its name, locks and fence.
    keys: Vec<(LockName, Option<Held>, u64)>,
}

impl Grant {
    /// The fence of each key, in the caller's order.
    pub fn fences(&self) -> Vec<u64> {
        self.keys.iter().map(|(_, _, fence)| *fence).collect()
    }

    /// Still holds its lock files: the name of each still names it, in the
    /// directory the path still names. False once someone removed or
    /// replaced one, or the directory, while it was held.
    pub fn kept_its_files(&self) -> bool {
        let directory = &self.core.directory;
        directory.still_named()
            && self.keys.iter().all(|(name, held, _)| match held {
                Some(Held::Exclusive(file) | Held::Shared(file, _)) => directory.names(name, file),
                Some(Held::Units(units)) => units.iter().all(|(unit, file)| directory.unit_names(name, *unit, file)),
                None => false,
            })
    }
}

impl Drop for Grant {
    fn drop(&mut self) {
        // In a forked child the files are only closed: their locks are the
        // parent's (see `FileCore::forked`).
        if self.core.forked().is_err() {
            self.keys.clear();
        }
        // Empty once released under the state's lock already.
        if !self.keys.is_empty() {
            let core = self.core.clone();
            let mut state = core.state();
            core.unhold(&mut state, self);
        }
    }
}

/// Where an acquire waits, for [`FileCore::cancel`].
#[derive(Clone, Copy)]
pub(crate) struct Ticket {
    ticket: u64,
    /// Its place in the engine's queues while the process's leases keep it
    /// out.
    queued: Option<WaiterId>,
}

/// An acquire admitted.
pub(crate) enum Admitted {
    /// Granted at once.
    Granted(Grant),
    /// Waiting; the outcome comes on `outcome`.
    Queued { ticket: Ticket, outcome: oneshot::Receiver<Result<Grant>> },
}

impl FileCore {
    pub fn new(name: &str, options: FileOptions, directory: LockDirectory, reporter: Reporter, holder: HolderLabel) -> Arc<FileCore> {
        let limits = LocalOptions {
            max_keys: options.max_keys,
            max_waiters: options.max_waiters,
            wait_timeout_ms: options.wait_timeout_ms,
            max_key_bytes: options.max_key_bytes,
            thresholds: options.thresholds,
        };
        let state = State {
            engine: LocalEngine::new(limits),
            pending: Vec::new(),
            held: 0,
            held_shared: 0,
            next_ticket: 0,
            leases: Slab::new(),
            idle: IdleFiles::default(),
            watching: false,
        };
        Arc::new_cyclic(|this| FileCore {
            name: name.to_owned(),
            options,
            directory,
            reporter,
            holder,
            watch: Watch::shared(),
            state: Mutex::new(state),
            acquired: AtomicU64::new(0),
            timed_out: AtomicU64::new(0),
            lost: AtomicU64::new(0),
            marker: Marker::new_backend(),
            this: this.clone(),
        })
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `PROVIDER_FAILED` in a child forked from the process that opened the
    /// backend. The child's copy shares its parent's open lock files and
    /// their kernel locks (`flock` belongs to the open file, which `fork`
    /// shares): through a file the parent keeps for reuse or waits on it
    /// could be granted a key its parent holds, and a release or close would
    /// unlock or remove the parent's files. So the child uses nothing of it,
    /// and checks this before taking the state's mutex, which another thread
    /// of the parent may have held at the fork (no thread but the forking
    /// one runs in the child: it would never be let go).
    pub fn forked(&self) -> Result<()> {
        if std::process::id() == self.marker.pid {
            return Ok(());
        }
        Err(LockError::new(
            ErrorCode::ProviderFailed,
            format!(
                "the file backend {} was opened by process {}, and this process is a child forked from it: a child shares its parent's lock files and may not use them; open a provider in the child",
                self.name, self.marker.pid
            ),
        ))
    }

    /// Queues an acquire of `keys` (checked by the caller) in `kind` behind
    /// this process's acquires and tries its kernel locks at once if the
    /// process lets it: granted, queued (when it may wait), or `LOCK_BUSY`,
    /// `QUEUE_FULL`, `KEY_LIMIT`, `INVALID_ARGUMENT` (another limit),
    /// `CLOSED`, or a lock file's failure.
    pub fn admit(&self, keys: &[&str], kind: LockKind, label: HolderLabel, may_wait: bool) -> Result<Admitted> {
        self.forked()?;
        let mut state = self.state();
        let ticket = state.next_ticket;
        state.next_ticket += 1;
        let (sender, mut outcome) = oneshot::channel();
        let names = keys.iter().map(|key| LockName::new(&self.options.namespace, key)).collect();
        let mut request = Some(Request { ticket, kind, label, names, outcome: sender });
        let make_waiter = |_| request.take().expect("the engine makes one waiter");
        let acquired = match keys {
            [key] => state.engine.acquire_one(key, kind, None, may_wait, make_waiter),
            _ => state.engine.acquire_many(keys, kind, None, may_wait, make_waiter),
        }?;
        let lease = match acquired {
            Acquired::Queued(waiter) => return Ok(Admitted::Queued { ticket: Ticket { ticket, queued: Some(waiter) }, outcome }),
            Acquired::Granted(lease) => lease,
        };
        let request = request.expect("a grant made no waiter");
        state.pending.push(Pending { request, lease, waits_on: None, defer_until: None, tried: false, started: false, gave_way: 0 });
        self.pump(&mut state);
        match outcome.try_recv() {
            Ok(Ok(grant)) => return Ok(Admitted::Granted(grant)),
            Ok(Err(error)) => return Err(error),
            Err(_) => {}
        }
        let waiting = state.engine.counts().waiting + state.pending.len();
        let refused = if !may_wait {
            Some(LockError::busy())
        } else if waiting > self.options.max_waiters as usize {
            Some(LockError::new(
                ErrorCode::QueueFull,
                format!("{} acquires already wait on this backend (maxWaiters)", self.options.max_waiters),
            ))
        } else {
            None
        };
        if let Some(error) = refused {
            self.cancel_locked(&mut state, Ticket { ticket, queued: None }, CancelReason::Dropped);
            return Err(error);
        }
        Ok(Admitted::Queued { ticket: Ticket { ticket, queued: None }, outcome })
    }

    /// Takes the acquire of `ticket` out of the queues: true if it was
    /// there, false if its outcome was already sent.
    pub fn cancel(&self, ticket: Ticket, reason: CancelReason) -> bool {
        if self.forked().is_err() {
            return true;
        }
        let mut state = self.state();
        self.cancel_locked(&mut state, ticket, reason)
    }

    fn cancel_locked(&self, state: &mut State, ticket: Ticket, reason: CancelReason) -> bool {
        if let Some(index) = state.pending.iter().position(|pending| pending.request.ticket == ticket.ticket) {
            let pending = state.pending.remove(index);
            self.drop_pending(state, pending.lease, &pending.request.names, pending.waits_on);
            self.pump(state);
            return true;
        }
        let Some(waiter) = ticket.queued else { return false };
        // The backend counts timed-out acquires itself, whichever step they
        // waited in.
        let cancelled = state.engine.cancel(waiter, reason).is_some();
        self.pump(state);
        cancelled
    }

    /// A pending acquire that will not be granted leaves: its watch, its
    /// mark and its place in the engine go.
    fn drop_pending(&self, state: &mut State, lease: LeaseId, names: &[LockName], waits_on: Option<Waiting>) {
        self.stop_waiting(names, waits_on);
        state.engine.release(lease);
    }

    /// A pending acquire stops waiting on its lock file: its watch and its
    /// mark go, and the key's files if it is free now. A release that found
    /// our mark left them to us, counting on our next try: without this, a
    /// waiter that leaves instead (timed out, dropped, closed) leaves them
    /// for good, a counted key's unit files too.
    fn stop_waiting(&self, names: &[LockName], waits_on: Option<Waiting>) {
        let Some(Waiting { index, file, wd }) = waits_on else { return };
        if let Some(wd) = wd {
            self.watch.remove(wd);
        }
        let Some(file) = file else { return };
        // Our mark would only delay others now. Cleared before the lock is
        // tried: a release that saw it while holding the file reads it again
        // after letting go (see `take::remove_if_free`).
        if file.waiting_mark().1 == self.marker {
            let _ = file.clear_mark();
        }
        take::remove_if_free(&self.directory, &names[index], &file, self.marker);
    }

    /// Moves the engine's new grants to the pending list and tries every
    /// pending acquire not tried since its last wake-up, until nothing
    /// changes.
    fn pump(&self, state: &mut State) {
        loop {
            while let Some((request, lease)) = state.engine.pop_granted() {
                state.pending.push(Pending {
                    request,
                    lease,
                    waits_on: None,
                    defer_until: None,
                    tried: false,
                    started: false,
                    gave_way: 0,
                });
            }
            let Some(index) = state.pending.iter().position(|pending| !pending.tried) else { return };
            self.try_pending(state, index);
        }
    }

    /// Tries the kernel locks of pending acquire `index`: granted (and sent
    /// its grant), failed (and sent its error), or left waiting on a lock
    /// file, watched and marked.
    fn try_pending(&self, state: &mut State, index: usize) {
        let pending = &mut state.pending[index];
        pending.tried = true;
        match pending.defer_until {
            Some(until) if Instant::now() < until => return,
            Some(_) => pending.defer_until = None,
            None => {}
        }
        let first = !std::mem::replace(&mut pending.started, true);
        match self.take_all(pending, &mut state.idle, first) {
            Ok(Attempt::Granted(keys)) => {
                let pending = state.pending.remove(index);
                if let Some(Waiting { wd: Some(wd), .. }) = pending.waits_on {
                    self.watch.remove(wd);
                }
                let mode = pending.request.kind.mode;
                state.held += 1;
                if mode == LockMode::Shared {
                    state.held_shared += 1;
                }
                self.acquired.fetch_add(1, Ordering::Relaxed);
                let core = self.this.upgrade().expect("a grant is made through a live backend");
                let grant = Grant { core, lease: pending.lease, mode, keys };
                if let Err(Ok(mut grant)) = pending.request.outcome.send(Ok(grant)) {
                    // Its acquire was dropped meanwhile: release here (the
                    // state is locked already).
                    self.unhold(state, &mut grant);
                }
            }
            Ok(Attempt::Waits { index: key, file, give_way }) => {
                let pending = &mut state.pending[index];
                if !give_way {
                    pending.gave_way = 0;
                }
                let name = pending.request.names[key];
                if give_way {
                    pending.defer_until = Some(Instant::now() + GIVE_WAY);
                } else {
                    let _ = file.mark_waiting(self.mark_until(), self.marker);
                }
                // Watch the path's file now (the one released or removed
                // next), whatever was watched before: the file may have been
                // replaced since, and the kernel drops a removed file's
                // watch. The same file gives the same watch back.
                let path = self.directory.file_path(&name);
                let wd = self.watch.add(&path);
                let before = pending.waits_on.take().and_then(|waiting| waiting.wd);
                if let Some(before) = before {
                    self.watch.remove(before);
                }
                // A new watch: try once more, since a release between the try
                // and the watch would go unnoticed; no watch because the file
                // is gone: try again now, it was released.
                let again = match wd {
                    Some(wd) => before != Some(wd),
                    None => !self.directory.exists(&name),
                };
                pending.tried = give_way || !again;
                pending.waits_on = Some(Waiting { index: key, file: Some(file), wd });
                self.start_watching(state);
            }
            Err(error) => {
                let pending = state.pending.remove(index);
                self.drop_pending(state, pending.lease, &pending.request.names, pending.waits_on);
                let _ = pending.request.outcome.send(Err(error));
            }
        }
    }

    /// Tries the kernel locks of every key of `pending`, in the order of
    /// their file names; all or none.
    fn take_all(&self, pending: &mut Pending, idle: &mut IdleFiles, first: bool) -> Result<Attempt> {
        // Every try is checked against a replaced directory, also one
        // through a kept or waited-on file, which opens nothing.
        self.directory.check()?;
        let names = &pending.request.names;
        let kind = pending.request.kind;
        let mut order: Vec<usize> = (0..names.len()).collect();
        order.sort_unstable_by_key(|&index| names[index]);
        let mut taken: Vec<Option<(Held, u64)>> = (0..names.len()).map(|_| None).collect();
        let undo = |taken: Vec<Option<(Held, u64)>>, idle: &mut IdleFiles| {
            for (index, held) in taken.into_iter().enumerate() {
                if let Some((held, fence)) = held {
                    idle.tidy_later(take::release(&self.directory, &names[index], held, fence, self.marker));
                }
            }
        };
        for index in order {
            let name = &names[index];
            // The file waited on, unless removed meanwhile: a removed file's
            // waiting mark (perhaps left there as it was removed) is stale.
            let file = pending
                .waits_on
                .as_mut()
                .filter(|waiting| waiting.index == index)
                .and_then(|waiting| waiting.file.take())
                .filter(|file| self.directory.names(name, file));
            let file = match file.or_else(|| idle.take(name)) {
                Some(file) => file,
                None => match self.directory.open_file(name) {
                    Ok(file) => file,
                    Err(error) => {
                        undo(taken, idle);
                        return Err(error);
                    }
                },
            };
            // A newcomer (or any reader) gives way to a waiter of another
            // process marked on the key.
            let reader_yields = kind.mode == LockMode::Shared && pending.gave_way < READER_GIVES_WAY;
            match take::take(&self.directory, name, kind, file, self.marker, first || reader_yields, &pending.request.label) {
                Ok(Took::Held(held, fence)) => taken[index] = Some((held, fence)),
                Ok(Took::GiveWay(file)) => {
                    undo(taken, idle);
                    pending.gave_way += 1;
                    return Ok(Attempt::Waits { index, file, give_way: true });
                }
                Ok(Took::Busy(file)) => {
                    undo(taken, idle);
                    return Ok(Attempt::Waits { index, file, give_way: false });
                }
                // Not a waiter's turn: no mark, and not counted as giving way.
                Ok(Took::Stalled(file)) => {
                    undo(taken, idle);
                    return Ok(Attempt::Waits { index, file, give_way: true });
                }
                Err(error) => {
                    undo(taken, idle);
                    return Err(error);
                }
            }
        }
        let keys = names
            .iter()
            .zip(taken)
            .map(|(name, held)| {
                let (held, fence) = held.expect("every key was taken");
                (*name, Some(held), fence)
            })
            .collect();
        Ok(Attempt::Granted(keys))
    }

    /// The grant's keys are no longer held by this process: releases their
    /// kernel locks (removing the files of keys it leaves free, see
    /// [`take::release`]), then the engine's lease.
    fn unhold(&self, state: &mut State, grant: &mut Grant) {
        if grant.keys.is_empty() {
            return;
        }
        state.held -= 1;
        if grant.mode == LockMode::Shared {
            state.held_shared -= 1;
        }
        for (name, held, fence) in grant.keys.drain(..) {
            match held {
                Some(Held::Exclusive(file)) if !state.engine.is_closed() => {
                    state.idle.keep(&self.directory, name, file, fence, self.marker)
                }
                Some(held) => state.idle.tidy_later(take::release(&self.directory, &name, held, fence, self.marker)),
                None => {}
            }
        }
        state.engine.release(grant.lease);
        self.pump(state);
        if !state.idle.is_done(Instant::now()) {
            self.start_watching(state);
        }
    }

    fn start_watching(&self, state: &mut State) {
        if state.watching {
            return;
        }
        state.watching = true;
        let (core, watch, interval) = (self.this.clone(), self.watch.clone(), safety_net(self.options.poll_interval_ms));
        let started = std::thread::Builder::new().name("dokebi-lock-file".into()).spawn(move || watch_loop(core, watch, interval));
        if let Err(err) = started {
            state.watching = false;
            let error = LockError::new(ErrorCode::ProviderFailed, "could not start the file driver's wake-up thread").with_cause(err);
            for pending in std::mem::take(&mut state.pending) {
                self.drop_pending(state, pending.lease, &pending.request.names, pending.waits_on);
                let _ = pending.request.outcome.send(Err(error.clone()));
            }
        }
    }

    /// The deadline a waiting mark written now carries: past the next two
    /// retries of the waiter that writes it.
    fn mark_until(&self) -> u64 {
        let interval_us = u64::from(self.options.poll_interval_ms) * 1_000;
        super::fence::clock_us().saturating_add(2 * interval_us + 100_000)
    }

    /// Remembers a lease handed out, for `close()`; `CLOSED` (the grant is
    /// then released) once the backend is closing.
    pub fn adopt(&self, lease: &Arc<LeaseShared>) -> Result<usize> {
        let mut state = self.state();
        if state.engine.is_closed() {
            return Err(LockError::closed());
        }
        Ok(state.leases.insert(Arc::downgrade(lease)))
    }

    /// Forgets lease `slot` (released).
    pub fn forget(&self, slot: usize) {
        if self.forked().is_err() {
            return;
        }
        let mut state = self.state();
        state.leases.try_remove(slot);
    }

    /// Rejects every waiter with `CLOSED` and releases every lease; later
    /// acquires are `CLOSED`. Idempotent.
    pub fn close(&self) {
        if self.forked().is_err() {
            return;
        }
        let leases: Vec<Weak<LeaseShared>> = {
            let mut state = self.state();
            if state.engine.is_closed() {
                return;
            }
            // No acquire of this backend waits any more.
            for pending in std::mem::take(&mut state.pending) {
                self.stop_waiting(&pending.request.names, pending.waits_on);
                let _ = pending.request.outcome.send(Err(LockError::closed()));
            }
            for request in state.engine.close() {
                let _ = request.outcome.send(Err(LockError::closed()));
            }
            state.idle.remove_due(&self.directory, None, self.marker);
            if !state.idle.is_done(Instant::now()) {
                self.start_watching(&mut state);
            }
            state.leases.drain().collect()
        };
        for lease in leases.iter().filter_map(Weak::upgrade) {
            lease.end();
        }
    }

    pub fn is_closed(&self) -> bool {
        self.forked().is_err() || self.state().engine.is_closed()
    }

    /// This backend's identity in the marks it writes.
    pub fn marker(&self) -> Marker {
        self.marker
    }

    /// This backend's acquires waiting for `key` (of file `name`): queued
    /// behind this process's holders, or trying the kernel lock.
    pub fn waiting_for(&self, key: &str, name: &LockName) -> u32 {
        let state = self.state();
        let trying = state.pending.iter().filter(|pending| pending.request.names.contains(name)).count();
        state.engine.inspect(key).waiting + trying as u32
    }

    /// Leases held (all, shared) and acquires waiting now.
    pub fn counts(&self) -> (usize, usize, usize) {
        let state = self.state();
        (state.held, state.held_shared, state.engine.counts().waiting + state.pending.len())
    }

    /// How long the wake-up thread may sleep: `interval`, or less when a
    /// pending acquire gives way or a kept file is due sooner. `None` (and
    /// the thread stops) when nothing is pending or kept. A closed backend
    /// has nothing pending or kept, but its thread stays for its untidy
    /// keys: those its close could not tidy yet, and those of the leases it
    /// released.
    fn next_wait(&self, interval: Duration) -> Option<Duration> {
        let mut state = self.state();
        if state.pending.is_empty() && state.idle.is_done(Instant::now()) {
            state.watching = false;
            return None;
        }
        // A deadline already past is retried at once (the try clears it);
        // one ahead is slept to, rounded up to the millisecond `poll`
        // counts in, so the wake-up is not early.
        let now = Instant::now();
        let soonest = state.pending.iter().filter_map(|pending| pending.defer_until).chain(state.idle.next_due()).min();
        let until = |deadline: Instant| Duration::from_millis(deadline.saturating_duration_since(now).as_micros().div_ceil(1_000) as u64);
        Some(soonest.map_or(interval, |deadline| until(deadline).min(interval)))
    }

    /// Retries every pending acquire, and removes the kept files due.
    fn retry_pending(&self) {
        let mut state = self.state();
        state.idle.remove_due(&self.directory, Some(Instant::now()), self.marker);
        for pending in &mut state.pending {
            pending.tried = false;
        }
        self.pump(&mut state);
    }
}

impl Drop for FileCore {
    /// A backend dropped without `close()` still removes its kept files.
    fn drop(&mut self) {
        if self.forked().is_err() {
            return;
        }
        let marker = self.marker;
        let state = self.state.get_mut().unwrap_or_else(|e| e.into_inner());
        state.idle.remove_due(&self.directory, None, marker);
    }
}

/// What a try of a pending acquire's keys came to.
enum Attempt {
    /// Every key held: per key, in the caller's order.
    Granted(Vec<(LockName, Option<Held>, u64)>),
    /// Key `index` is held elsewhere (or, `give_way`, wanted by another
    /// process's waiter, or its counter held by another reader's stalled
    /// raise: try again after [`GIVE_WAY`], unmarked): wait on its lock
    /// file `file`.
    Waits { index: usize, file: LockFile, give_way: bool },
}

/// The wake-up thread: waits for an event on a watched lock file or the
/// safety-net interval, then has the pending acquires retry; ends when
/// nothing is pending.
fn watch_loop(core: Weak<FileCore>, watch: Arc<Watch>, interval: Duration) {
    // No count seen yet: the first wait ends at once, and the retry after
    // it covers the events read before this thread started.
    let mut seen = u64::MAX;
    loop {
        let Some(timeout) = core.upgrade().and_then(|core| core.next_wait(interval)) else { return };
        watch.wait(timeout, &mut seen);
        let Some(core) = core.upgrade() else { return };
        core.retry_pending();
    }
}

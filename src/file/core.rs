//! The file backend's state in one process: per key, whether a lease of
//! this process holds it, its FIFO queue of waiters, and the open lock file
//! its head waiter tries; the grants and releases that move it.
//!
//! Every kernel call made here is non-blocking (`try_lock`, `open`, a
//! 21-byte read and write of the fence), so they run under the state's
//! mutex: a grant and the queue it pops are one step. Waiters are handed
//! their outcome through a oneshot channel and woken by it.
//!
//! Fairness between processes: a process that releases a key and takes it
//! again (another task of it waiting, or the same task acquiring again)
//! would win every time over a waiter of another process, which learns of
//! the release only through its wake-up. So a head refused the lock writes
//! a waiting mark into the lock file (its process and a deadline, refreshed
//! at every retry), and a process that sees a fresh mark of another one
//! gives way: its release keeps the lock file (the waiter holds its inode)
//! and its own next try waits [`GIVE_WAY`], time for the waiter to take the
//! key. The mark is only a hint: a stale one (its waiter gone) costs at
//! most that delay, and exclusion never depends on it.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use slab::Slab;
use tokio::sync::oneshot;

use super::directory::LockDirectory;
use super::lock_file::LockFile;
use super::name::LockName;
use super::watch::{safety_net, Watch};
use super::{fence, lease::LeaseShared};
use crate::error::{ErrorCode, LockError, Result};
use crate::options::FileOptions;
use crate::telemetry::Reporter;

/// Tries of one grant whose lock file was replaced under it before the
/// grant gives up with `PROVIDER_FAILED` (a replacement takes a release,
/// so more than a few in a row mean something else is renaming files).
const REPLACED_TRIES: u32 = 64;

/// How long a process waits before it tries a key that a waiter of another
/// process is marked waiting for: that waiter's wake-up and try take about
/// a millisecond.
const GIVE_WAY: Duration = Duration::from_millis(20);

pub(crate) struct FileCore {
    pub name: String,
    pub options: FileOptions,
    pub directory: LockDirectory,
    pub reporter: Reporter,
    watch: Arc<Watch>,
    state: Mutex<State>,
    pub acquired: AtomicU64,
    pub timed_out: AtomicU64,
    pub lost: AtomicU64,
    /// This process's id, in the waiting marks it writes.
    pid: u32,
    /// Itself, for the grants it makes.
    this: Weak<FileCore>,
}

#[derive(Default)]
struct State {
    closed: bool,
    keys: HashMap<LockName, KeyState>,
    /// Keys held by leases of this process.
    held: usize,
    /// Waiters in every queue.
    waiting: usize,
    next_waiter: u64,
    /// The leases handed out and not yet released, for `close()`.
    leases: Slab<Weak<LeaseShared>>,
    /// The wake-up thread runs.
    watching: bool,
}

#[derive(Default)]
struct KeyState {
    /// A lease of this process holds the key (or its grant is on the way).
    held: bool,
    queue: VecDeque<Waiter>,
    /// The open lock file the head waiter tries, and its inotify watch.
    head: Option<(LockFile, Option<i32>)>,
    /// The head does not try before then: a waiter of another process is
    /// to have the key first (see "Fairness" above).
    defer_until: Option<Instant>,
}

struct Waiter {
    id: u64,
    grant: oneshot::Sender<Result<Grant>>,
}

/// A key's kernel lock, granted: dropping it releases the key (closing its
/// lock file, and removing the file when nobody of this process waits).
pub(crate) struct Grant {
    core: Arc<FileCore>,
    name: LockName,
    file: Option<LockFile>,
    pub fence: u64,
}

impl Grant {
    /// Still holds its lock file: the path of `name` still names it. False
    /// once someone removed or replaced the file while it was held.
    pub fn kept_its_file(&self) -> bool {
        self.file.as_ref().is_some_and(|file| self.core.directory.names(&self.name, file))
    }
}

impl Drop for Grant {
    fn drop(&mut self) {
        if let Some(file) = self.file.take() {
            let mut state = self.core.state();
            self.core.unhold(&mut state, self.name, file, self.fence);
        }
    }
}

/// An acquire that has joined its key's queue.
pub(crate) enum Admitted {
    /// Granted at once.
    Granted(Grant),
    /// Waiting: `id` in the queue of its key; the outcome comes on `outcome`.
    Queued { id: u64, outcome: oneshot::Receiver<Result<Grant>> },
}

impl FileCore {
    pub fn new(name: &str, options: FileOptions, directory: LockDirectory, reporter: Reporter) -> Arc<FileCore> {
        Arc::new_cyclic(|this| FileCore {
            name: name.to_owned(),
            options,
            directory,
            reporter,
            watch: Arc::new(Watch::new()),
            state: Mutex::new(State::default()),
            acquired: AtomicU64::new(0),
            timed_out: AtomicU64::new(0),
            lost: AtomicU64::new(0),
            pid: std::process::id(),
            this: this.clone(),
        })
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues an acquire of `name` behind the waiters of this process and
    /// tries it at once if it is first: granted, queued (when it may wait),
    /// or `LOCK_BUSY`, `QUEUE_FULL`, `KEY_LIMIT`, `CLOSED`, or the lock
    /// file's failure.
    pub fn admit(&self, name: LockName, may_wait: bool) -> Result<Admitted> {
        let mut state = self.state();
        if state.closed {
            return Err(LockError::closed());
        }
        let id = state.next_waiter;
        state.next_waiter += 1;
        let (sender, mut outcome) = oneshot::channel();
        state.keys.entry(name).or_default().queue.push_back(Waiter { id, grant: sender });
        state.waiting += 1;
        self.try_head(&mut state, name);
        match outcome.try_recv() {
            Ok(Ok(grant)) => return Ok(Admitted::Granted(grant)),
            Ok(Err(error)) => return Err(error),
            Err(_) => {}
        }
        let refused = if !may_wait {
            Some(LockError::busy())
        } else if state.waiting > self.options.max_waiters as usize {
            Some(LockError::new(
                ErrorCode::QueueFull,
                format!("{} acquires already wait on this backend (maxWaiters)", self.options.max_waiters),
            ))
        } else {
            None
        };
        if let Some(error) = refused {
            self.cancel_locked(&mut state, name, id);
            return Err(error);
        }
        if !state.watching {
            state.watching = true;
            let (core, watch, interval) = (self.this.clone(), self.watch.clone(), safety_net(self.options.poll_interval_ms));
            let started = std::thread::Builder::new().name("dokebi-lock-file".into()).spawn(move || watch_loop(core, watch, interval));
            if let Err(err) = started {
                state.watching = false;
                self.cancel_locked(&mut state, name, id);
                return Err(LockError::new(ErrorCode::ProviderFailed, "could not start the file driver's wake-up thread").with_cause(err));
            }
        }
        Ok(Admitted::Queued { id, outcome })
    }

    /// Takes waiter `id` out of the queue of `name`: true if it was there,
    /// false if its outcome was already sent.
    pub fn cancel(&self, name: LockName, id: u64) -> bool {
        let mut state = self.state();
        self.cancel_locked(&mut state, name, id)
    }

    fn cancel_locked(&self, state: &mut State, name: LockName, id: u64) -> bool {
        let Some(key) = state.keys.get_mut(&name) else { return false };
        let Some(index) = key.queue.iter().position(|waiter| waiter.id == id) else { return false };
        key.queue.remove(index);
        state.waiting -= 1;
        if index == 0 {
            // The next waiter (if any) is head now.
            self.try_head(state, name);
        }
        true
    }

    /// Grants the key `name` to the head of its queue if the kernel lock is
    /// free; else keeps the head's lock file open and watched. Sends the
    /// head a failure of its lock file and goes on with the next.
    fn try_head(&self, state: &mut State, name: LockName) {
        let mut replaced = 0;
        loop {
            let Some(key) = state.keys.get_mut(&name) else { return };
            if key.held {
                return;
            }
            if key.queue.is_empty() {
                if let Some((file, wd)) = key.head.take() {
                    // Nobody of ours waits any more: our mark would only
                    // delay others.
                    if file.waiting_mark().1 == self.pid {
                        let _ = file.clear_mark();
                    }
                    if let Some(wd) = wd {
                        self.watch.remove(wd);
                    }
                }
                state.keys.remove(&name);
                return;
            }
            match key.defer_until {
                Some(until) if Instant::now() < until => return,
                Some(_) => key.defer_until = None,
                None => {}
            }
            if state.held >= self.options.max_keys as usize {
                let error = LockError::key_limit("maxKeys", self.options.max_keys, "leases held at once by this process");
                self.fail_head(state, name, error);
                continue;
            }
            let Some(key) = state.keys.get_mut(&name) else { return };
            let (file, wd) = match key.head.take() {
                Some(head) => head,
                None => match self.directory.open_file(&name) {
                    Ok(file) if self.other_waits(&file) => {
                        // A newcomer while another process waits: give way.
                        let wd = self.watch.add(&self.directory.file_path(&name));
                        key.head = Some((file, wd));
                        key.defer_until = Some(Instant::now() + GIVE_WAY);
                        return;
                    }
                    Ok(file) => (file, None),
                    Err(error) => {
                        self.fail_head(state, name, error);
                        continue;
                    }
                },
            };
            match file.try_lock() {
                Ok(false) if wd.is_none() => {
                    let _ = file.mark_waiting(self.mark_until(), self.pid);
                    // Watch, then try once more: a release between the try
                    // and the watch would otherwise go unnoticed.
                    let wd = self.watch.add(&self.directory.file_path(&name));
                    key.head = Some((file, wd));
                    if wd.is_none() {
                        return;
                    }
                }
                Ok(false) => {
                    let _ = file.mark_waiting(self.mark_until(), self.pid);
                    key.head = Some((file, wd));
                    return;
                }
                Ok(true) => {
                    if let Some(wd) = wd {
                        self.watch.remove(wd);
                    }
                    if !self.directory.names(&name, &file) {
                        // Removed by its last holder (or replaced) before we
                        // locked it: the key's lock is the path's file now.
                        drop(file);
                        replaced += 1;
                        if replaced == REPLACED_TRIES {
                            let error = LockError::new(
                                ErrorCode::ProviderFailed,
                                format!(
                                    "the lock files in {} keep being replaced; only this driver may write there",
                                    self.directory.path().display()
                                ),
                            );
                            self.fail_head(state, name, error);
                        }
                        continue;
                    }
                    if file.waiting_mark().1 == self.pid {
                        let _ = file.clear_mark();
                    }
                    let fence = match file.advance_fence() {
                        Ok(fence) => fence,
                        Err(err) => {
                            let error = self.directory.failure(err.into());
                            drop(file);
                            self.fail_head(state, name, error);
                            continue;
                        }
                    };
                    let waiter = key.queue.pop_front().expect("the queue has a head");
                    key.held = true;
                    state.held += 1;
                    state.waiting -= 1;
                    self.acquired.fetch_add(1, Ordering::Relaxed);
                    let core = self.this.upgrade().expect("a grant is made through a live backend");
                    let grant = Grant { core, name, file: Some(file), fence };
                    match waiter.grant.send(Ok(grant)) {
                        Ok(()) => return,
                        Err(unclaimed) => {
                            // Its acquire was dropped meanwhile: release
                            // here (the state is locked already) and go on.
                            let Ok(mut grant) = unclaimed else { unreachable!("a grant was sent") };
                            let file = grant.file.take().expect("a fresh grant holds its file");
                            self.unhold(state, name, file, grant.fence);
                        }
                    }
                }
                Err(err) => {
                    let error = self.directory.failure(err.into());
                    self.fail_head(state, name, error);
                }
            }
        }
    }

    /// A fresh waiting mark of another process is in `file`.
    fn other_waits(&self, file: &LockFile) -> bool {
        let (until, pid) = file.waiting_mark();
        pid != 0 && pid != self.pid && until > fence::clock_us()
    }

    /// The deadline a waiting mark written now carries: past the next two
    /// retries of the waiter that writes it.
    fn mark_until(&self) -> u64 {
        let interval_us = u64::from(self.options.poll_interval_ms) * 1_000;
        fence::clock_us().saturating_add(2 * interval_us + 100_000)
    }

    fn fail_head(&self, state: &mut State, name: LockName, error: LockError) {
        let key = state.keys.get_mut(&name).expect("the key has a queue");
        if let Some((_, Some(wd))) = key.head.take() {
            self.watch.remove(wd);
        }
        if let Some(waiter) = key.queue.pop_front() {
            state.waiting -= 1;
            let _ = waiter.grant.send(Err(error));
        }
    }

    /// The key `name` is no longer held by this process: closes its lock
    /// file (which releases the kernel lock), removing the file first when
    /// nobody of this process waits for it.
    fn unhold(&self, state: &mut State, name: LockName, file: LockFile, fence: u64) {
        state.held -= 1;
        let Some(key) = state.keys.get_mut(&name) else { return };
        key.held = false;
        if key.queue.is_empty() {
            // Removed while we hold its lock, and only if the path still
            // names our file: a process waiting on this inode finds the path
            // gone once it locks it, and opens the path's new file instead.
            // The next holder's counter restarts, so wait until the clock
            // is past this grant's fence (see `fence`): then `clock_us` keeps
            // fences rising. A fence ahead of the clock by more than a
            // millisecond leaves the file for a later release to remove.
            // Kept when another process waits on it (fairness, above).
            if !self.other_waits(&file) && self.directory.names(&name, &file) && clock_passes(fence) {
                self.directory.remove(&name);
            }
            drop(file);
            state.keys.remove(&name);
        } else {
            if self.other_waits(&file) {
                key.defer_until = Some(Instant::now() + GIVE_WAY);
            }
            drop(file);
            self.try_head(state, name);
        }
    }

    /// Remembers a lease handed out, for `close()`; `CLOSED` (the grant is
    /// then released) once the backend is closing.
    pub fn adopt(&self, lease: &Arc<LeaseShared>) -> Result<usize> {
        let mut state = self.state();
        if state.closed {
            return Err(LockError::closed());
        }
        Ok(state.leases.insert(Arc::downgrade(lease)))
    }

    /// Forgets lease `slot` (released).
    pub fn forget(&self, slot: usize) {
        let mut state = self.state();
        state.leases.try_remove(slot);
    }

    /// Rejects every waiter with `CLOSED` and releases every lease; later
    /// acquires are `CLOSED`. Idempotent.
    pub fn close(&self) {
        let leases: Vec<Weak<LeaseShared>> = {
            let mut state = self.state();
            if std::mem::replace(&mut state.closed, true) {
                return;
            }
            let names: Vec<LockName> = state.keys.keys().copied().collect();
            for name in names {
                let key = state.keys.get_mut(&name).expect("listed");
                let waiters = std::mem::take(&mut key.queue);
                if let Some((_, Some(wd))) = key.head.take() {
                    self.watch.remove(wd);
                }
                state.waiting -= waiters.len();
                for waiter in waiters {
                    let _ = waiter.grant.send(Err(LockError::closed()));
                }
            }
            state.leases.drain().collect()
        };
        for lease in leases.iter().filter_map(Weak::upgrade) {
            lease.end();
        }
    }

    pub fn is_closed(&self) -> bool {
        self.state().closed
    }

    /// Leases held and acquires waiting now.
    pub fn counts(&self) -> (usize, usize) {
        let state = self.state();
        (state.held, state.waiting)
    }

    /// How long the wake-up thread may sleep: `interval`, or less when a
    /// head gives way until sooner. `None` (and the thread stops) when
    /// nobody waits or the backend is closed.
    fn next_wait(&self, interval: Duration) -> Option<Duration> {
        let mut state = self.state();
        if state.closed || state.waiting == 0 {
            state.watching = false;
            return None;
        }
        let now = Instant::now();
        // Past deadlines wait for the next try to clear them (a key held
        // here meanwhile is not tried): they must not make this a spin.
        let soonest = state.keys.values().filter_map(|key| key.defer_until).filter(|until| *until > now).min();
        Some(soonest.map_or(interval, |until| until.saturating_duration_since(now).min(interval)))
    }

    /// Retries the head of every queue whose key is not held here.
    fn retry_heads(&self) {
        let mut state = self.state();
        let names: Vec<LockName> = state.keys.iter().filter(|(_, key)| !key.held && !key.queue.is_empty()).map(|(name, _)| *name).collect();
        for name in names {
            self.try_head(&mut state, name);
        }
    }
}

/// The wake-up thread: waits for an event on a watched lock file or the
/// safety-net interval, then has the heads retry; ends when nobody waits.
fn watch_loop(core: Weak<FileCore>, watch: Arc<Watch>, interval: Duration) {
    loop {
        let Some(timeout) = core.upgrade().and_then(|core| core.next_wait(interval)) else { return };
        watch.wait(timeout);
        let Some(core) = core.upgrade() else { return };
        core.retry_heads();
    }
}

/// Waits (at most a millisecond) until the clock is past `fence`.
fn clock_passes(fence: u64) -> bool {
    let deadline = fence::clock_us().saturating_add(1_000);
    loop {
        let now = fence::clock_us();
        if now > fence {
            return true;
        }
        if fence >= deadline {
            return false;
        }
        std::thread::yield_now();
    }
}

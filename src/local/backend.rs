//! The thread-safe local backend: the engine behind a mutex, with an async
//! acquire for Rust tasks and a blocking acquire for threads (the C surface).
//!
//! Cancel safety: dropping an `acquire` future removes its waiter from the
//! queue; if the key was handed to it in the meantime, the lease is released
//! again (to the next waiter), so nothing leaks.
//!
//! Waiters are woken after the engine mutex is dropped, so a woken task never
//! contends with the thread that woke it.
//!
//! Contention (threads): each release hands the key straight to the head of
//! its FIFO queue, and wakes that thread only if it sleeps (a spinning one
//! costs no system call); then it wakes the waiter that is now first in
//! line, so that this one is awake and spinning when its own turn comes. A
//! thread spins, briefly, only while it is first in line; one that queues
//! behind others sleeps at once: with more threads than processors,
//! spinning there only takes the processor from the threads ahead of it.
//! See `super::wait_slot`, where the hand-off lives, and BENCHMARKS.md
//! ("C local under contention") for the measurements behind these choices.

use std::future::{poll_fn, Future};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::task::Poll;
use std::time::{Duration, Instant};

use futures_timer::Delay;

use super::delivery::{self, lock};
use super::engine::{Acquired, CancelReason, LeaseId, LocalCounts, LocalEngine, WaiterId};
use super::key_copy::KeyCopy;
use super::wait_slot::{News, Outcome, WaitSlot};
use crate::abort::{AbortController, AbortSignal};
use crate::acquire::{AcquireOptions, LockKind};
use crate::error::{ErrorCode, LockError, Result};
use crate::force_release::ForcedRelease;
use crate::holder::HolderLabel;
use crate::inspect::Inspection;
use crate::options::LocalOptions;
use crate::telemetry::{Acquiring, Hold, Reporter, Shape, Telemetry};

/// An in-process keyed FIFO mutex with fencing tokens. Cheap to clone: clones
/// share one state.
#[derive(Clone)]
pub struct LocalBackend {
    shared: Arc<Shared>,
}

struct Shared {
    engine: delivery::Engine,
    options: LocalOptions,
    reporter: Reporter,
    /// The label of every holder (all of them this process's).
    holder: HolderLabel,
    /// Aborted by close, which ends every lease (see [`LocalBackend::closing`]).
    closing: AbortController,
}

/// How long a thread that queues first in line checks for its hand-off
/// before it sleeps: the holder is running, so the hand-off is likely to
/// come soon (2 threads on 2 cores took half the time with 20 us as with 2).
const SPIN_QUEUED_FIRST: Duration = Duration::from_micros(20);

/// How long a thread woken because it became first in line spins. Short:
/// with more threads than processors it may share a processor with the
/// holder it waits for (8 threads on 2 quiet cores: 140k pairs/s with 2 us,
/// 90k with 20 us).
const SPIN_WOKEN_FIRST: Duration = Duration::from_micros(2);

/// Spin checks between two readings of the clock (a check costs from a few
/// to some 40 ns, depending on the processor's pause instruction).
const SPINS_PER_CLOCK_READ: u32 = 32;

/// A delivered outcome as the acquire's result.
fn delivered(outcome: Outcome<LeaseId>) -> Result<LeaseId> {
    match outcome {
        Outcome::Granted(lease) => Ok(lease),
        Outcome::Closed => Err(LockError::closed()),
    }
}

/// Spinning only helps when the releasing thread can run meanwhile.
fn spinning_helps() -> bool {
    static MANY_CPUS: OnceLock<bool> = OnceLock::new();
    *MANY_CPUS.get_or_init(|| std::thread::available_parallelism().is_ok_and(|n| n.get() > 1))
}

impl std::fmt::Debug for LocalBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalBackend").field("counts", &self.counts()).finish()
    }
}

impl LocalBackend {
    /// A backend without telemetry.
    pub fn new(options: LocalOptions) -> Self {
        LocalBackend::with_telemetry("local", options, None)
    }

    /// A backend called `name` that reports slow acquires, slow holds and
    /// wait timeouts (per `options.thresholds`) to `telemetry`, and the
    /// trace events it asks for.
    pub fn with_telemetry(name: &str, options: LocalOptions, telemetry: Option<Telemetry>) -> Self {
        LocalBackend::labelled(name, options, telemetry, HolderLabel::of_this_process())
    }

    /// As [`LocalBackend::with_telemetry`], its holders labelled `holder`
    /// (the provider's `holder`).
    pub fn labelled(name: &str, options: LocalOptions, telemetry: Option<Telemetry>, holder: HolderLabel) -> Self {
        let engine = Mutex::new(LocalEngine::new(options));
        let reporter = Reporter::new(telemetry, name, "local", options.thresholds);
        LocalBackend { shared: Arc::new(Shared { engine, options, reporter, holder, closing: AbortController::new() }) }
    }

    /// The options the backend was opened with.
    pub fn options(&self) -> LocalOptions {
        self.shared.options
    }

    /// Takes the key if it is free, else `LOCK_BUSY`; never waits.
    pub fn try_acquire(&self, key: &str) -> Result<LocalLease> {
        let acquiring = self.shared.reporter.acquiring(Shape::of(LockKind::EXCLUSIVE, 1));
        // Bound first, so the engine's lock is dropped before the lease is built.
        let acquired = lock(&self.shared.engine).acquire(key, false, |_| unreachable!("may_wait is false"));
        let granted = acquired.map(|acquired| match acquired {
            Acquired::Granted(id) => id,
            Acquired::Queued(_) => unreachable!("may_wait is false"),
        });
        self.settle(acquiring, granted, &[key])
    }

    /// Waits (FIFO per key, across modes) until the key is ours in the
    /// options' kind, the wait times out (`WAIT_TIMEOUT`), or the signal
    /// aborts (`ABORTED`).
    pub async fn acquire(&self, key: &str, options: AcquireOptions) -> Result<LocalLease> {
        self.acquire_keys(&[key], options).await
    }

    /// Acquires every key of `keys` as one lease (see
    /// [`crate::Backend::acquire_many`]).
    pub async fn acquire_many(&self, keys: &[&str], options: AcquireOptions) -> Result<LocalLease> {
        self.acquire_keys(keys, options).await
    }

    async fn acquire_keys(&self, keys: &[&str], options: AcquireOptions) -> Result<LocalLease> {
        let mut acquiring = self.shared.reporter.acquiring(Shape::asked(&options, keys.len()));
        let granted = self.wait_for(keys, options, &mut acquiring).await;
        self.settle(acquiring, granted, keys)
    }

    async fn wait_for(&self, keys: &[&str], options: AcquireOptions, acquiring: &mut Acquiring) -> Result<LeaseId> {
        let signal = options.signal.as_ref();
        let kind = options.kind()?;
        if signal.is_some_and(AbortSignal::is_aborted) {
            return Err(LockError::aborted());
        }
        let timeout = self.timeout(options.wait_timeout);
        let Queued { waiter, slot, .. } = match self.enqueue(keys, kind, options.holder, !timeout.is_zero())? {
            Ok(id) => return Ok(id),
            Err(queued) => queued,
        };
        acquiring.queued();
        let mut pending = Pending { backend: self, waiter, slot, settled: false };
        let mut delay = Delay::new(timeout);
        let mut aborted = signal.map(|s| Box::pin(s.aborted()));
        let deadline = Instant::now().checked_add(timeout);
        let outcome = poll_fn(|cx| {
            if let Poll::Ready(outcome) = pending.slot.poll(cx.waker()) {
                // A wait that is over (its signal aborted or its deadline
                // passed before this poll) is never granted: the cancel of
                // another waiter sharing its signal or deadline may have
                // let it in. The lease goes on to the next waiter.
                let ended = if signal.is_some_and(AbortSignal::is_aborted) {
                    Some(LockError::aborted())
                } else {
                    deadline.filter(|deadline| Instant::now() >= *deadline).map(|_| LockError::wait_timeout(timeout))
                };
                return Poll::Ready(match (delivered(outcome), ended) {
                    (Ok(lease), Some(error)) => {
                        self.release(lease);
                        Err(error)
                    }
                    (outcome, _) => outcome,
                });
            }
            let abort = aborted.as_mut().is_some_and(|a| a.as_mut().poll(cx).is_ready());
            let ended = abort || std::pin::Pin::new(&mut delay).poll(cx).is_ready();
            // When the cancel finds nothing, a releaser dequeued us and has not
            // delivered yet: the grant (or close) is on its way and wakes us.
            let reason = if abort { CancelReason::Aborted } else { CancelReason::TimedOut };
            if ended && self.cancel(pending.waiter, reason) {
                return Poll::Ready(Err(if abort { LockError::aborted() } else { LockError::wait_timeout(timeout) }));
            }
            Poll::Pending
        })
        .await;
        pending.settled = true;
        outcome
    }

    /// Blocks the calling thread until the key is ours or `wait_timeout`
    /// (the backend default when `None`) passes.
    pub fn acquire_blocking(&self, key: &str, wait_timeout: Option<Duration>) -> Result<LocalLease> {
        self.acquire_blocking_kind(&[key], LockKind::EXCLUSIVE, wait_timeout)
    }

    /// [`LocalBackend::acquire_blocking`] of every key of `keys` (all or
    /// none) in `kind`.
    #[inline]
    pub fn acquire_blocking_kind(&self, keys: &[&str], kind: LockKind, wait_timeout: Option<Duration>) -> Result<LocalLease> {
        self.acquire_blocking_kind_keeping(keys, kind, None, wait_timeout, None)
    }

    /// [`LocalBackend::acquire_blocking_kind`], whose lease holds `kept`
    /// (a handle [`LocalLease::take_backend`] gave back) when that is a
    /// handle of this backend, instead of a new clone: no reference count
    /// taken here, none given back when `kept` was taken. A `kept` of
    /// another backend is dropped; so is `kept` when the acquire fails.
    /// The lease is labelled `label` (`None`: the backend's holder).
    #[inline]
    pub fn acquire_blocking_kind_keeping(
        &self,
        keys: &[&str],
        kind: LockKind,
        label: Option<HolderLabel>,
        wait_timeout: Option<Duration>,
        kept: Option<LocalBackend>,
    ) -> Result<LocalLease> {
        let mut acquiring = self.shared.reporter.acquiring(Shape::of(kind, keys.len()));
        let may_wait = match wait_timeout {
            Some(timeout) => !timeout.is_zero(),
            None => self.shared.options.wait_timeout_ms != 0,
        };
        // Granted at once (the uncontended case) or queued: then it blocks.
        let granted = match self.enqueue(keys, kind, label, may_wait) {
            Ok(Ok(id)) => Ok(id),
            Ok(Err(queued)) => self.block_for(queued, wait_timeout, &mut acquiring),
            Err(err) => Err(err),
        };
        self.settle_keeping(acquiring, granted, keys, kept)
    }

    #[inline(never)]
    fn block_for(&self, queued: Queued, wait_timeout: Option<Duration>, acquiring: &mut Acquiring) -> Result<LeaseId> {
        let Queued { waiter, slot, next } = queued;
        let timeout = self.timeout(wait_timeout);
        let started = acquiring.queued();
        let mut deadline = started.checked_add(timeout);
        let mut spin = next.then_some(SPIN_QUEUED_FIRST);
        let mut timed_out = false;
        loop {
            if let Some(spin_for) = spin.take().filter(|_| spinning_helps()) {
                let until = Instant::now() + spin_for;
                while !slot.spin(SPINS_PER_CLOCK_READ) && Instant::now() < until {}
            }
            let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            if left == Some(Duration::ZERO) {
                if self.cancel(waiter, CancelReason::TimedOut) {
                    return Err(LockError::wait_timeout(timeout));
                }
                // A releaser dequeued us and is about to deliver: wait for it.
                deadline = None;
                timed_out = true;
            }
            match slot.wait(left.filter(|left| !left.is_zero())) {
                // A wait past its deadline is never granted (as in `wait_for`).
                Some(News::Outcome(Outcome::Granted(lease))) if timed_out => {
                    self.release(lease);
                    return Err(LockError::wait_timeout(timeout));
                }
                Some(News::Outcome(outcome)) => return delivered(outcome),
                Some(News::Next) => spin = Some(SPIN_WOKEN_FIRST),
                None => {}
            }
        }
    }

    /// Rejects every waiter with `CLOSED` and invalidates every held lease;
    /// later calls fail with `CLOSED`.
    pub fn close(&self) {
        let waiters = lock(&self.shared.engine).close();
        self.shared.closing.abort();
        waiters.iter().for_each(|slot| slot.close());
    }

    /// Aborted once [`LocalBackend::close`] has run: every lease held then
    /// has ended (what a `with_lock` section learns through its signal).
    pub fn closing(&self) -> AbortSignal {
        self.shared.closing.signal()
    }

    /// True once [`LocalBackend::close`] has run.
    pub fn is_closed(&self) -> bool {
        lock(&self.shared.engine).is_closed()
    }

    /// Leases held and waiters queued now, and totals since the backend opened.
    pub fn counts(&self) -> LocalCounts {
        lock(&self.shared.engine).counts()
    }

    /// What the backend holds of `key` (see [`crate::Backend::inspect`]).
    pub fn inspect(&self, key: &str) -> Result<Inspection> {
        crate::key::validate(key, self.options().max_key_bytes as usize)?;
        let engine = lock(&self.shared.engine);
        if engine.is_closed() {
            return Err(LockError::closed());
        }
        Ok(engine.inspect(key).inspection(self.shared.reporter.backend(), &self.shared.holder))
    }

    /// Releases every lease that holds `key` (see
    /// [`crate::Backend::force_release`]), handing the key on as their
    /// releases would: each lease is no longer valid, and its own release
    /// answers false. Reported (`forced-release`).
    pub fn force_release(&self, key: &str) -> Result<ForcedRelease> {
        crate::key::validate(key, self.options().max_key_bytes as usize)?;
        if self.is_closed() {
            return Err(LockError::closed());
        }
        let removed = delivery::force_release(&self.shared.engine, key);
        self.shared.reporter.forced_release(removed, None);
        Ok(ForcedRelease { backend: self.shared.reporter.backend().to_owned(), removed, fence: None })
    }

    fn timeout(&self, wait_timeout: Option<Duration>) -> Duration {
        wait_timeout.unwrap_or_else(|| Duration::from_millis(self.options().wait_timeout_ms.into()))
    }

    /// Grants at once (`Ok(Ok)`), or queues with a fresh slot (`Ok(Err)`)
    /// when `may_wait`; the lease labelled `label` (`None`: the backend's).
    #[inline(always)]
    fn enqueue(
        &self,
        keys: &[&str],
        kind: LockKind,
        label: Option<HolderLabel>,
        may_wait: bool,
    ) -> Result<std::result::Result<LeaseId, Queued>> {
        let mut slot = None;
        let make_slot = |_| {
            let fresh = Arc::new(WaitSlot::new());
            slot = Some(fresh.clone());
            fresh
        };
        let mut engine = lock(&self.shared.engine);
        let acquired = match keys {
            [key] => engine.acquire_one(key, kind, label, may_wait, make_slot),
            _ => engine.acquire_many(keys, kind, label, may_wait, make_slot),
        }?;
        Ok(match acquired {
            Acquired::Granted(id) => Ok(id),
            Acquired::Queued(waiter) => {
                Err(Queued { waiter, slot: slot.expect("queued waiters have a slot"), next: engine.is_next(waiter) })
            }
        })
    }

    /// Reports the acquire's outcome, and answers the lease of a grant.
    #[inline(always)]
    fn settle(&self, acquiring: Acquiring, granted: Result<LeaseId>, keys: &[&str]) -> Result<LocalLease> {
        self.settle_keeping(acquiring, granted, keys, None)
    }

    /// [`LocalBackend::settle`], the lease holding `kept` when it is a
    /// handle of this backend.
    #[inline(always)]
    fn settle_keeping(
        &self,
        acquiring: Acquiring,
        granted: Result<LeaseId>,
        keys: &[&str],
        kept: Option<LocalBackend>,
    ) -> Result<LocalLease> {
        match granted {
            Ok(id) => {
                let hold = self.shared.reporter.granted(acquiring, id.fence);
                let backend = match kept {
                    Some(kept) if Arc::ptr_eq(&kept.shared, &self.shared) => kept,
                    _ => self.clone(),
                };
                Ok(LocalLease::new(backend, id, keys, hold))
            }
            Err(err) => {
                // Read before the report, so that its telemetry carries them too.
                let err = lock(&self.shared.engine).told_holders(err, keys, &self.shared.holder);
                self.shared.reporter.failed(acquiring, &err);
                Err(err)
            }
        }
    }

    /// Releases `id` and delivers what that let in (see [`super::delivery`]).
    #[inline]
    fn release(&self, id: LeaseId) -> bool {
        delivery::release(&self.shared.engine, id)
    }

    /// Takes a waiter out of its queues (true when it was still queued) and
    /// delivers what that let in.
    fn cancel(&self, waiter: WaiterId, reason: CancelReason) -> bool {
        delivery::cancel(&self.shared.engine, waiter, reason)
    }
}

/// An acquire the engine queued: its id, its slot, and whether it is
/// first in line.
struct Queued {
    waiter: WaiterId,
    slot: Arc<WaitSlot<LeaseId>>,
    next: bool,
}

/// A queued acquire; on drop before it settled it leaves the queue, and
/// gives back a lease that reached it too late.
struct Pending<'a> {
    backend: &'a LocalBackend,
    waiter: WaiterId,
    slot: Arc<WaitSlot<LeaseId>>,
    settled: bool,
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        if self.settled || self.backend.cancel(self.waiter, CancelReason::Dropped) {
            return;
        }
        if let Some(lease) = self.slot.abandon() {
            self.backend.release(lease);
        }
    }
}

/// A held local lease. It never expires; it ends with [`LocalLease::release`],
/// when it is dropped, or when the backend closes.
pub struct LocalLease {
    /// Its backend, kept alive by the lease; `None` once
    /// [`LocalLease::take_backend`] took it (the lease has ended then).
    backend: Option<LocalBackend>,
    id: LeaseId,
    key: KeyCopy,
    /// The keys after the first, of a lease over several.
    more: Option<Box<[Box<str>]>>,
    /// Its hold, as telemetry reports it.
    hold: Hold,
    /// Set once a `release` of this lease released it, so that dropping it
    /// does not ask the engine again.
    released: AtomicBool,
}

impl LocalLease {
    #[inline(always)]
    fn new(backend: LocalBackend, id: LeaseId, keys: &[&str], hold: Hold) -> Self {
        let more = (keys.len() > 1).then(|| keys[1..].iter().map(|&key| key.into()).collect());
        LocalLease { backend: Some(backend), id, key: KeyCopy::new(keys[0]), more, hold, released: AtomicBool::new(false) }
    }

    /// Ends the lease as dropping it would (releasing it unless it was
    /// released), and hands over the handle of its backend it held, for a
    /// later [`LocalBackend::acquire_blocking_kind_keeping`]: a reference
    /// count neither given back here nor taken there. In place, so a
    /// surface that keeps the lease in its own memory moves nothing. The
    /// lease then answers as a released one (not valid; `release` false;
    /// dropping it does nothing more); `None` when it was taken before.
    #[inline(always)]
    pub fn take_backend(&mut self) -> Option<LocalBackend> {
        let backend = self.backend.take()?;
        if !*self.released.get_mut() {
            *self.released.get_mut() = true;
            self.release_on(&backend);
        }
        Some(backend)
    }

    /// The key this lease is for.
    pub fn key(&self) -> &str {
        self.key.as_str()
    }

    /// Every key this lease holds, in the caller's order.
    pub fn keys(&self) -> Vec<&str> {
        let more = self.more.iter().flat_map(|more| more.iter().map(|key| &**key));
        std::iter::once(self.key.as_str()).chain(more).collect()
    }

    /// The fence of each key, in the order of [`LocalLease::keys`]: one
    /// grant of the local driver takes one fence for all its keys.
    pub fn fences(&self) -> Vec<(&str, u64)> {
        self.keys().into_iter().map(|key| (key, self.id.fence)).collect()
    }

    /// The fencing token: larger than that of every earlier lease of the backend.
    pub fn fence(&self) -> u64 {
        self.id.fence
    }

    /// True until released, dropped or the backend closed.
    pub fn is_valid(&self) -> bool {
        self.backend.as_ref().is_some_and(|backend| lock(&backend.shared.engine).is_held(self.id))
    }

    /// Local leases never expire, so renewing only reports validity.
    pub fn renew(&self) -> bool {
        self.is_valid()
    }

    /// Releases the key (handing it to the next waiter). True when this call
    /// released it, false when it was already released or the backend closed.
    #[inline]
    pub fn release(&self) -> bool {
        // No backend: `take_backend` ended the lease (and reported its hold).
        self.backend.as_ref().is_some_and(|backend| self.release_on(backend))
    }

    /// [`LocalLease::release`] through `backend`, the lease's own.
    #[inline(always)]
    fn release_on(&self, backend: &LocalBackend) -> bool {
        let released = backend.release(self.id);
        let reporter = &backend.shared.reporter;
        if released {
            self.released.store(true, Ordering::Relaxed);
            reporter.released(&self.hold, None);
        } else {
            // Released before (its hold is reported), or ended by close.
            reporter.hold_ended(&self.hold, Some(ErrorCode::Closed));
        }
        released
    }
}

impl Drop for LocalLease {
    fn drop(&mut self) {
        if !*self.released.get_mut() {
            self.release();
        }
    }
}

impl std::fmt::Debug for LocalLease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // No key: keys may carry user data.
        f.debug_struct("LocalLease").field("fence", &self.id.fence).finish_non_exhaustive()
    }
}

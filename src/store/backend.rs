//! A store backend's API: acquire with in-process FIFO waiting, close, counts.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::sync::oneshot;

use super::acquire::{key_limit, Acquire, InProgress};
use super::core::BackendCore;
use super::lease::StoreLease;
use super::runtime::DriverRuntime;
use super::{Claim, Failure, Store};
use crate::abort::AbortSignal;
use crate::acquire::{AcquireOptions, LockMode};
use crate::error::{ErrorCode, LockError, Result};
use crate::force_release::ForcedRelease;
use crate::holder::HolderLabel;
use crate::inspect::Inspection;
use crate::log::{Level, Logger};
use crate::options::StoreOptions;
use crate::status::LeaseCounts;
use crate::telemetry::{Shape, Telemetry};

/// How many times a forced release reads the key's fence counter and tries
/// its break before it gives up on a key granted again each time.
const BREAK_TRIES: usize = 10;

/// A backend whose leases live in a store (Redis), shared by every process
/// that uses the same store and namespace. Cheap to clone.
///
/// Guarantees: an exclusive lease holds its key alone (at most one owner
/// token per key in the store at a time), shared leases hold it only together,
/// a counted key never has more than its limit of units held; waiters of
/// one key in this process are served in FIFO order (across processes,
/// only a waiting writer's and a waiting counted request's place is kept);
/// fences grow per key and namespace. Every public
/// future may be awaited from any executor; its work runs on the driver's
/// own runtime, or on the host's thread (see [`crate::host`]).
pub struct StoreBackend<S: Store> {
    core: Arc<BackendCore<S>>,
    runtime: Arc<DriverRuntime>,
}

impl<S: Store> Clone for StoreBackend<S> {
    fn clone(&self) -> Self {
        StoreBackend { core: self.core.clone(), runtime: self.runtime.clone() }
    }
}

/// Counts for `status()`; never keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoreCounts {
    /// Leases this backend holds now.
    pub held: usize,
    /// Of `held`, the leases held in shared mode.
    pub held_shared: usize,
    /// Acquires in progress (waiting for their turn or for the store).
    pub waiting: usize,
    /// Leases granted since the backend started.
    pub acquired: u64,
    /// Acquires that ended in `WAIT_TIMEOUT` since the backend started.
    pub timed_out: u64,
    /// Leases found lost (`LEASE_LOST`, `OUTCOME_UNKNOWN`, a renew that
    /// found another owner) since the backend started, once per lease.
    pub lost: u64,
    /// When the store last answered a command of this backend's connection.
    pub last_answer: Option<SystemTime>,
    /// The command connection is open.
    pub connected: bool,
    /// Release notifications are subscribed.
    pub subscribed: bool,
    /// The code of the connection's last failure (`PROVIDER_FAILED`,
    /// `OUTCOME_UNKNOWN`), if any.
    pub last_error: Option<ErrorCode>,
}

impl StoreCounts {
    /// The counts every driver has.
    pub fn leases(&self) -> LeaseCounts {
        let StoreCounts { held, held_shared, waiting, acquired, timed_out, lost, .. } = *self;
        LeaseCounts { held, held_shared, waiting, acquired, timed_out, lost }
    }
}

impl<S: Store> StoreBackend<S> {
    pub(crate) fn new(
        name: &str,
        options: StoreOptions,
        holder: HolderLabel,
        store: S,
        runtime: Arc<DriverRuntime>,
        logger: Logger,
        telemetry: Option<Telemetry>,
    ) -> Self {
        let core = BackendCore::new(name, options, holder, store, runtime.spawner().clone(), logger, telemetry);
        StoreBackend { core: Arc::new(core), runtime }
    }

    /// The options the backend was opened with.
    pub fn options(&self) -> &StoreOptions {
        &self.core.options
    }

    /// Acquires `key`: waits (FIFO among this process's acquires of the key,
    /// whatever their kind) until the store grants it, `waitTimeoutMs` passes
    /// (`WAIT_TIMEOUT`), or the signal aborts (`ABORTED`). With a wait of 0
    /// it tries once and fails with `LOCK_BUSY` when the key is held, or
    /// when another acquire of this process is already waiting for it (no
    /// queue jumping).
    ///
    /// The options' kind: exclusive (the default), shared (readers hold the
    /// key together, never with an exclusive holder; a writer waiting in
    /// any process stops new readers, so readers cannot starve it), or
    /// counted (`limit`, `weight`: at most `limit` units held at once; a
    /// request waiting in any process is not overtaken by later ones). Each
    /// holder has its own token and expiry, and every grant a fence above
    /// every earlier grant of the key. A limit other than the one the key is
    /// held or waited for with is `INVALID_ARGUMENT`.
    ///
    /// Fails fast with `PROVIDER_FAILED` when the store is unreachable or
    /// refuses, and with `OUTCOME_UNKNOWN` when the acquire command went
    /// unanswered (the lock is then released by token in the background).
    /// `QUEUE_FULL` when `maxWaiters` acquires are in progress, `KEY_LIMIT`
    /// when `maxLeases` leases are held.
    ///
    /// Cancel safe: dropping the future ends the wait; a lease granted in the
    /// meantime is released.
    pub async fn acquire(&self, key: &str, options: AcquireOptions) -> Result<StoreLease<S>> {
        self.start(&[key], options).await
    }

    /// Acquires every key of `keys` as one lease, or none of them (see
    /// [`crate::Backend::acquire_many`]): on one server (and Sentinel) one
    /// script takes every key atomically; on a Cluster the keys are taken
    /// one hash slot at a time in a fixed global order, and the slots
    /// already taken are given back before waiting again. The kind applies
    /// to each key; the lease has a fence per key, and renew and release
    /// cover every key.
    pub async fn acquire_many(&self, keys: &[&str], options: AcquireOptions) -> Result<StoreLease<S>> {
        self.start(keys, options).await
    }

    /// Checks the call, then runs the acquire on the driver's runtime. The
    /// report of the acquire starts here, on the caller's thread (a span's
    /// parent is the caller's); the task reports its outcome.
    async fn start(&self, keys: &[&str], options: AcquireOptions) -> Result<StoreLease<S>> {
        let core = &self.core;
        let acquiring = core.reporter.acquiring(Shape::asked(&options, keys.len()));
        // Dropping `_cancel` (this future dropped) ends the task's wait.
        let (_cancel, cancelled) = oneshot::channel::<()>();
        let task = match self.admit(keys, options, cancelled) {
            Ok(task) => task,
            Err(err) => {
                core.reporter.failed(acquiring, &err);
                return Err(err);
            }
        };
        let shared = core.spawner().run(task.run(acquiring)).await?;
        Ok(StoreLease::new(shared, self.runtime.clone()))
    }

    /// What is checked before an acquire starts: the keys (one is
    /// checked as `acquire_many` checks a set of one), the backend open, the
    /// kind, the signal, `maxWaiters` and `maxLeases`. Answers the task,
    /// which joins the keys' queues now.
    fn admit(&self, keys: &[&str], options: AcquireOptions, cancelled: oneshot::Receiver<()>) -> Result<Acquire<S>> {
        let core = &self.core;
        crate::acquire::check_keys(keys, core.options.max_key_bytes as usize)?;
        if *core.closed.borrow() {
            return Err(LockError::closed());
        }
        let kind = options.kind()?;
        if options.signal.as_ref().is_some_and(AbortSignal::is_aborted) {
            return Err(LockError::aborted());
        }
        let slot = InProgress::enter(core.clone())?;
        if core.held().len() >= core.options.max_leases as usize {
            return Err(key_limit(core.options.max_leases));
        }
        let wait = options.wait_timeout.unwrap_or(Duration::from_millis(core.options.wait_timeout_ms.into()));
        let claim = core.store().claim(keys, kind, core.terms(), options.holder.as_ref().unwrap_or(&core.holder))?;
        Ok(Acquire::new(core.clone(), keys, claim, wait, options.signal, cancelled, slot))
    }

    /// What the store holds of `key` (see [`crate::Backend::inspect`]): one
    /// read on the driver's runtime, bounded by `commandTimeoutMs`.
    pub async fn inspect(&self, key: &str) -> Result<Inspection> {
        let core = self.core.clone();
        crate::key::validate(key, core.options.max_key_bytes as usize)?;
        if *core.closed.borrow() {
            return Err(LockError::closed());
        }
        let key = key.to_owned();
        let read = async move {
            let inspection = core.store().inspect(&key).await.map_err(|failure| match failure {
                // A read changes nothing: no answer is a failure, not an unknown outcome.
                Failure::Unknown(cause) => Failure::Unanswered(cause).into_error(S::NAME, "inspect"),
                failure => failure.into_error(S::NAME, "inspect"),
            })?;
            Ok(Inspection { backend: core.name.clone(), ..inspection })
        };
        self.core.spawner().run(read).await
    }

    /// Removes every holder of `key` and raises its fence (see
    /// [`crate::Backend::force_release`]), on the driver's runtime; logged
    /// as a warning and reported (`forced-release`).
    ///
    /// A read of the key's fence counter (on Redis, and of its holders),
    /// then a break that runs only while the key is still as read (every
    /// grant changes it, and so does every break). So a break delivered late (by a proxy, a
    /// pooler's queue) or sent again (the Redis transport's resend after a
    /// lost connection) changes nothing once anyone was granted the key or
    /// broke it since its read: it never removes a holder granted after the
    /// operator's retry (reviews R50, R52, R53), whatever the clocks do. A
    /// grant between the read and the break makes the break read again and
    /// retry, so that holder is removed too (review R51), up to
    /// ten times.
    pub async fn force_release(&self, key: &str) -> Result<ForcedRelease> {
        let core = self.core.clone();
        crate::key::validate(key, core.options.max_key_bytes as usize)?;
        if *core.closed.borrow() {
            return Err(LockError::closed());
        }
        let key = key.to_owned();
        let break_in = async move {
            let store = core.store();
            for _ in 0..BREAK_TRIES {
                let observed = store.observe(&key, core.terms().retention_ms).await.map_err(|failure| match failure {
                    // Nothing held changes: no answer is a failure, not an unknown outcome.
                    Failure::Unknown(cause) => Failure::Unanswered(cause).into_error(S::NAME, "forceRelease"),
                    failure => failure.into_error(S::NAME, "forceRelease"),
                })?;
                let broken = store.force_release(&key, core.terms().retention_ms, &observed).await;
                let Some((removed, fence)) = broken.map_err(|failure| failure.into_error(S::NAME, "forceRelease"))? else {
                    continue;
                };
                core.log(
                    Level::Warn,
                    "LOCK_FORCE_RELEASED",
                    format!("a key was force-released: {removed} holder(s) removed, its fence raised to {fence}"),
                );
                core.reporter.forced_release(removed, Some(fence));
                return Ok(ForcedRelease { backend: core.name.clone(), removed, fence: Some(fence) });
            }
            Err(LockError::new(
                ErrorCode::ProviderFailed,
                format!("forceRelease: the key was granted again between each read and break ({BREAK_TRIES} tries); run it again"),
            ))
        };
        self.core.spawner().run(break_in).await
    }

    /// Counts for `status()`.
    pub fn counts(&self) -> StoreCounts {
        let connectivity = self.core.store().store_connection().connectivity();
        let (held, held_shared) = {
            let held = self.core.held();
            let shared =
                held.iter().filter_map(|(_, lease)| lease.upgrade()).filter(|lease| lease.claim().kind().mode == LockMode::Shared).count();
            (held.len(), shared)
        };
        StoreCounts {
            held,
            held_shared,
            waiting: self.core.in_progress.load(Ordering::SeqCst),
            acquired: self.core.acquired.load(Ordering::Relaxed),
            timed_out: self.core.timed_out.load(Ordering::Relaxed),
            lost: self.core.lost.load(Ordering::Relaxed),
            last_answer: connectivity.last_answer,
            connected: connectivity.connected,
            subscribed: connectivity.subscribed,
            last_error: connectivity.last_error,
        }
    }

    /// Rejects waiters with `CLOSED`, lets acquires whose command is in
    /// flight finish (a lease the store grants them now is released at once)
    /// and the waiting marks of those that stopped waiting be taken back,
    /// and releases every held lease, all within `shutdownTimeoutMs`.
    /// Failures are logged (`CLEANUP_FAILED`, `CLEANUP_TIMEOUT`) before
    /// close returns, never returned. Idempotent.
    pub async fn close(&self) {
        if self.core.closed.send_replace(true) {
            return;
        }
        let core = self.core.clone();
        let _ = self
            .core
            .spawner()
            .run(async move {
                let deadline = tokio::time::Instant::now() + Duration::from_millis(core.options.shutdown_timeout_ms.into());
                if tokio::time::timeout_at(deadline, core.acquires_settled()).await.is_err() {
                    let left = core.unsettled();
                    core.log(
                        Level::Error,
                        "CLEANUP_TIMEOUT",
                        format!(
                            "{left} acquires still waited for {} after shutdownTimeoutMs; a lease it grants them now expires after leaseMs",
                            S::NAME
                        ),
                    );
                }
                core.release_all(deadline).await;
                Ok(())
            })
            .await;
    }

    /// True once the backend has started closing.
    pub fn is_closed(&self) -> bool {
        *self.core.closed.borrow()
    }
}

impl<S: Store> std::fmt::Debug for StoreBackend<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreBackend").field("name", &self.core.name).field("counts", &self.counts()).finish()
    }
}

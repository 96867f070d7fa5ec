//! The redis backend: acquire with in-process FIFO waiting, close, counts.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant, SystemTime};

use slab::Slab;
use futures_util::stream::{FuturesUnordered, StreamExt};
use tokio::sync::{oneshot, watch, Notify};

use super::connection::{Answer, Failure, RedisConnection};
use super::keys::{release_channel, RedisKeys};
use super::lease::{lease_lost, LeaseShared, RedisLease};
use super::runtime::{DriverRuntime, Spawner};
use super::acquire::{key_limit, Acquire, InProgress};
use crate::abort::{aborted_error, AbortSignal};
use crate::acquire::AcquireOptions;
use crate::error::{ErrorCode, Result};
use crate::key;
use crate::local::engine::closed;
use crate::log::{Level, LogRecord, Logger};
use crate::options::RedisOptions;
use crate::telemetry::{report_hold, Telemetry, TelemetryEvent};

/// A backend whose leases live in Redis, shared by every process that uses
/// the same server and namespace. Cheap to clone.
///
/// Guarantees: at most one owner token per key in Redis at a time; waiters
/// of one key in this process are served in FIFO order (there is no order
/// across processes); fences grow per key and namespace. Every public
/// future may be awaited from any executor; its work runs on the driver's
/// own runtime, or on the host's thread (see [`super::host`]).
#[derive(Clone)]
pub struct RedisBackend {
    core: Arc<BackendCore>,
    runtime: Arc<DriverRuntime>,
}

/// Counts for `status()`; never keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RedisCounts {
    /// Leases this backend holds now.
    pub held: usize,
    /// Acquires in progress (waiting for their turn or for Redis).
    pub waiting: usize,
    /// Leases granted since the backend started.
    pub acquired: u64,
    /// Acquires that ended in `WAIT_TIMEOUT` since the backend started.
    pub timed_out: u64,
    /// Leases found lost (`LEASE_LOST`, `OUTCOME_UNKNOWN`, a renew that
    /// found another owner) since the backend started, once per lease.
    pub lost: u64,
    /// When Redis last answered a command of this backend's connection.
    pub last_answer: Option<SystemTime>,
    /// The command connection is open.
    pub connected: bool,
    /// Release notifications are subscribed.
    pub subscribed: bool,
    /// The code of the connection's last failure (`PROVIDER_FAILED`,
    /// `OUTCOME_UNKNOWN`), if any.
    pub last_error: Option<ErrorCode>,
}

pub(crate) struct BackendCore {
    pub(super) name: String,
    pub(super) options: RedisOptions,
    pub(super) connection: Arc<RedisConnection>,
    channel: String,
    spawner: Spawner,
    logger: Logger,
    pub(super) telemetry: Option<Telemetry>,
    pub(super) in_progress: AtomicUsize,
    /// Told when the last acquire in progress ends.
    pub(super) settled: Notify,
    pub(super) acquired: AtomicU64,
    pub(super) timed_out: AtomicU64,
    lost: AtomicU64,
    held: Mutex<Slab<Weak<LeaseShared>>>,
    pub(super) closed: watch::Sender<bool>,
}

impl RedisBackend {
    pub(crate) fn new(
        name: &str,
        options: RedisOptions,
        connection: Arc<RedisConnection>,
        runtime: Arc<DriverRuntime>,
        logger: Logger,
        telemetry: Option<Telemetry>,
    ) -> RedisBackend {
        let channel = release_channel(&options.namespace);
        let core = BackendCore {
            name: name.to_owned(),
            options,
            connection,
            channel,
            spawner: runtime.spawner().clone(),
            logger,
            telemetry,
            in_progress: AtomicUsize::new(0),
            settled: Notify::new(),
            acquired: AtomicU64::new(0),
            timed_out: AtomicU64::new(0),
            lost: AtomicU64::new(0),
            held: Mutex::new(Slab::new()),
            closed: watch::channel(false).0,
        };
        RedisBackend { core: Arc::new(core), runtime }
    }

    pub fn options(&self) -> &RedisOptions {
        &self.core.options
    }

    /// Acquires `key`: waits (FIFO among this process's acquires of the key)
    /// until Redis grants it, `waitTimeoutMs` passes (`WAIT_TIMEOUT`), or the
    /// signal aborts (`ABORTED`). With a wait of 0 it tries once and fails with
    /// `LOCK_BUSY` when the key is held, or when another acquire of this
    /// process is already waiting for it (no queue jumping).
    ///
    /// Fails fast with `PROVIDER_FAILED` when Redis is unreachable or
    /// refuses, and with `OUTCOME_UNKNOWN` when the acquire command went
    /// unanswered (the lock is then released by token in the background).
    /// `QUEUE_FULL` when `maxWaiters` acquires are in progress, `KEY_LIMIT`
    /// when `maxLeases` leases are held.
    ///
    /// Cancel safe: dropping the future ends the wait; a lease granted in the
    /// meantime is released.
    pub async fn acquire(&self, key: &str, options: AcquireOptions) -> Result<RedisLease> {
        let core = &self.core;
        if *core.closed.borrow() {
            return Err(closed());
        }
        key::validate(key, core.options.max_key_bytes as usize)?;
        if options.signal.as_ref().is_some_and(AbortSignal::is_aborted) {
            return Err(aborted_error());
        }
        let slot = InProgress::enter(core.clone())?;
        if core.held().len() >= core.options.max_leases as usize {
            return Err(key_limit(core.options.max_leases));
        }
        let wait = options.wait_timeout.unwrap_or(Duration::from_millis(core.options.wait_timeout_ms.into()));
        // Dropping `_cancel` (this future dropped) ends the task's wait.
        let (_cancel, cancelled) = oneshot::channel::<()>();
        let task = Acquire::new(core.clone(), key, wait, options.signal, cancelled, slot);
        let shared = core.spawner.run(task.run()).await?;
        Ok(RedisLease::new(shared, self.runtime.clone()))
    }

    /// Counts for `status()`.
    pub fn counts(&self) -> RedisCounts {
        let connection = &self.core.connection;
        RedisCounts {
            held: self.core.held().len(),
            waiting: self.core.in_progress.load(Ordering::SeqCst),
            acquired: self.core.acquired.load(Ordering::Relaxed),
            timed_out: self.core.timed_out.load(Ordering::Relaxed),
            lost: self.core.lost.load(Ordering::Relaxed),
            last_answer: connection.last_answer(),
            connected: connection.is_connected(),
            subscribed: connection.is_subscribed(),
            last_error: connection.last_error(),
        }
    }

    /// Rejects waiters with `CLOSED`, lets acquires whose command is in
    /// flight finish (a lease Redis grants them now is released at once),
    /// and releases every held lease, all within `shutdownTimeoutMs`.
    /// Failures are logged (`CLEANUP_FAILED`, `CLEANUP_TIMEOUT`) before
    /// close returns, never returned. Idempotent.
    pub async fn close(&self) {
        if self.core.closed.send_replace(true) {
            return;
        }
        let core = self.core.clone();
        let _ = self.core.spawner.run(async move {
            let deadline = tokio::time::Instant::now() + Duration::from_millis(core.options.shutdown_timeout_ms.into());
            if tokio::time::timeout_at(deadline, core.acquires_settled()).await.is_err() {
                let left = core.in_progress.load(Ordering::SeqCst);
                core.log(
                    Level::Error,
                    "CLEANUP_TIMEOUT",
                    format!("{left} acquires still waited for Redis after shutdownTimeoutMs; a lease Redis grants them now expires after leaseMs"),
                );
            }
            core.release_all(deadline).await;
            Ok(())
        })
        .await;
    }

    pub fn is_closed(&self) -> bool {
        *self.core.closed.borrow()
    }
}

impl std::fmt::Debug for RedisBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisBackend").field("name", &self.core.name).field("counts", &self.counts()).finish()
    }
}

impl BackendCore {
    pub fn lease(&self) -> Duration {
        Duration::from_millis(self.options.lease_ms.into())
    }

    pub fn spawner(&self) -> &Spawner {
        &self.spawner
    }

    pub fn connection(&self) -> &RedisConnection {
        &self.connection
    }

    pub(super) fn held(&self) -> MutexGuard<'_, Slab<Weak<LeaseShared>>> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Removes a released lease from the held set.
    pub fn forget(&self, slot: usize) {
        self.held().try_remove(slot);
    }

    /// Runs the release script: deletes the lock if it carries `token`, tells
    /// waiters in every process, and wakes this process's next waiter.
    async fn delete_if_ours(&self, keys: &RedisKeys, token: &str) -> Result<Answer<i64>, Failure> {
        let answer = self.connection.eval::<i64>(&self.connection.scripts.release, &[&keys.lock, &keys.waiting], &[&token, &self.channel]).await?;
        if answer.value == 1 {
            self.connection.waiters.wake(&keys.lock);
        }
        Ok(answer)
    }

    /// Releases a lease: `LEASE_LOST` if the lock no longer carried `token`;
    /// after an unanswered command a best-effort cleanup follows.
    pub async fn release(self: &Arc<Self>, keys: &RedisKeys, token: &str) -> Result<()> {
        match self.delete_if_ours(keys, token).await {
            Ok(answer) if answer.value == 1 => Ok(()),
            // The first attempt was lost with its connection and may have
            // deleted the key itself.
            Ok(Answer { first_attempt_lost: Some(cause), .. }) => Err(Failure::Unknown(cause).into_error("release")),
            Ok(_) => Err(lease_lost()),
            Err(failure) => {
                if matches!(failure, Failure::Unknown(_)) {
                    self.clean_up_after_unknown(keys.clone(), token.to_owned());
                }
                Err(failure.into_error("release"))
            }
        }
    }

    /// Releases a dropped lease; nobody awaits the outcome.
    pub fn release_in_background(self: &Arc<Self>, keys: RedisKeys, token: String) {
        let core = self.clone();
        self.spawner.handle().spawn(async move {
            let _ = core.release(&keys, &token).await;
        });
    }

    /// After a command went unanswered the lock may be (or become, if the
    /// command is still queued somewhere) ours: release it by token, and once
    /// more a command timeout later in case the first try overtook it.
    pub fn clean_up_after_unknown(self: &Arc<Self>, keys: RedisKeys, token: String) {
        let core = self.clone();
        self.spawner.handle().spawn(async move {
            for attempt in 0..2 {
                if attempt > 0 {
                    tokio::time::sleep(core.connection.command_timeout()).await;
                }
                if matches!(core.delete_if_ours(&keys, &token).await, Ok(answer) if answer.value == 1) {
                    return;
                }
            }
        });
    }

    /// Close: release every held lease by `deadline`. A lease
    /// that had already expired is not a failure; one Redis did not confirm is.
    /// The releases run where close runs (the host's thread or the runtime).
    /// Resolves once no acquire is in progress.
    async fn acquires_settled(&self) {
        loop {
            let settled = self.settled.notified();
            tokio::pin!(settled);
            // Registered before the count is read, so a last acquire ending
            // in between is not missed.
            settled.as_mut().enable();
            if self.in_progress.load(Ordering::SeqCst) == 0 {
                return;
            }
            settled.await;
        }
    }

    async fn release_all(self: &Arc<Self>, deadline: tokio::time::Instant) {
        let leases: Vec<Arc<LeaseShared>> = self.held().iter().filter_map(|(_, weak)| weak.upgrade()).collect();
        let mut releases: FuturesUnordered<_> = leases
            .into_iter()
            .filter(|lease| lease.take())
            .map(|lease| async move { self.delete_if_ours(lease.keys(), lease.token()).await.map(|_| ()) })
            .collect();
        let total = releases.len();
        let mut failed = 0;
        let finished = tokio::time::timeout_at(deadline, async {
            while let Some(done) = releases.next().await {
                if done.is_err() {
                    failed += 1;
                }
            }
        })
        .await;
        if finished.is_err() {
            let left = releases.len();
            self.log(Level::Error, "CLEANUP_TIMEOUT", format!("{left} of {total} leases were not released within shutdownTimeoutMs; they expire after leaseMs"));
        }
        if failed > 0 {
            self.log(Level::Error, "CLEANUP_FAILED", format!("{failed} of {total} leases could not be released; they expire after leaseMs"));
        }
    }

    /// When a lease should measure its hold: only while someone listens.
    pub fn hold_clock(&self) -> Option<Instant> {
        self.telemetry.as_ref().and(self.options.thresholds.slow_hold_ms).map(|_| Instant::now())
    }

    /// Reports a lease that ended held for `since`.
    pub fn report_hold(&self, since: Option<Instant>) {
        report_hold(self.telemetry.as_ref(), &self.name, &self.options.thresholds, since);
    }

    /// Counts and reports a lease found lost (once per lease, by the caller).
    pub fn report_lost(&self, code: ErrorCode) {
        self.lost.fetch_add(1, Ordering::Relaxed);
        if let Some(telemetry) = &self.telemetry {
            telemetry(&TelemetryEvent::LeaseLost { backend: self.name.clone(), code });
        }
    }

    fn log(&self, level: Level, code: &'static str, message: String) {
        (self.logger)(&LogRecord { level, backend: self.name.clone(), code, message });
    }
}

//! The redis backend: acquire with in-process FIFO waiting, close, counts.

use std::future::pending;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant, SystemTime};

use slab::Slab;
use tokio::runtime::Handle;
use tokio::sync::{oneshot, watch};
use tokio::task::JoinSet;

use super::connection::{Answer, Failure, RedisConnection};
use super::keys::{owner_token, release_channel, RedisKeys};
use super::lease::{lease_lost, LeaseShared, RedisLease};
use super::runtime::{run_on, DriverRuntime};
use super::waiters::Ticket;
use crate::abort::{aborted_error, AbortSignal};
use crate::acquire::AcquireOptions;
use crate::error::{ErrorCode, LockError, Result};
use crate::key;
use crate::local::engine::closed;
use crate::log::{Level, LogRecord, Logger};
use crate::options::RedisOptions;
use crate::telemetry::{report_wait, Telemetry, TelemetryEvent};

/// A backend whose leases live in Redis, shared by every process that uses
/// the same server and namespace. Cheap to clone.
///
/// Guarantees: at most one owner token per key in Redis at a time; waiters
/// of one key in this process are served in FIFO order (there is no order
/// across processes); fences grow per key and namespace. Every public
/// future may be awaited from any executor; its work runs on the driver's
/// own runtime.
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
    name: String,
    options: RedisOptions,
    connection: Arc<RedisConnection>,
    channel: String,
    handle: Handle,
    logger: Logger,
    telemetry: Option<Telemetry>,
    in_progress: AtomicUsize,
    acquired: AtomicU64,
    timed_out: AtomicU64,
    lost: AtomicU64,
    held: Mutex<Slab<Weak<LeaseShared>>>,
    closed: watch::Sender<bool>,
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
            handle: runtime.handle().clone(),
            logger,
            telemetry,
            in_progress: AtomicUsize::new(0),
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
        let task = Acquire { core: core.clone(), key: key.to_owned(), wait, signal: options.signal, cancelled, _slot: slot };
        let shared = run_on(&core.handle, task.run()).await?;
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

    /// Rejects waiters with `CLOSED` and releases every held lease within
    /// `shutdownTimeoutMs`. Failures are logged (`CLEANUP_FAILED`,
    /// `CLEANUP_TIMEOUT`), never returned. Idempotent.
    pub async fn close(&self) {
        if self.core.closed.send_replace(true) {
            return;
        }
        let core = self.core.clone();
        let _ = run_on(&self.core.handle, async move {
            core.release_all().await;
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

    pub fn handle(&self) -> &Handle {
        &self.handle
    }

    pub fn connection(&self) -> &RedisConnection {
        &self.connection
    }

    fn held(&self) -> MutexGuard<'_, Slab<Weak<LeaseShared>>> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Removes a released lease from the held set.
    pub fn forget(&self, slot: usize) {
        self.held().try_remove(slot);
    }

    /// Deletes the lock if it carries `token` and wakes this process's next
    /// waiter; `LEASE_LOST` if it did not carry it.
    pub async fn release(&self, lock_key: &str, token: &str) -> Result<()> {
        let answer = self.connection.eval::<i64>(&self.connection.scripts.release, &[lock_key], &[&token, &self.channel]).await;
        match answer {
            Ok(answer) if answer.value == 1 => {
                self.connection.waiters.wake(lock_key);
                Ok(())
            }
            // The first attempt was lost with its connection and may have
            // deleted the key itself.
            Ok(Answer { first_attempt_lost: Some(cause), .. }) => Err(Failure::Unknown(cause).into_error("release")),
            Ok(_) => Err(lease_lost()),
            Err(failure) => {
                if matches!(failure, Failure::Unknown(_)) {
                    self.clean_up_after_unknown(lock_key.to_owned(), token.to_owned());
                }
                Err(failure.into_error("release"))
            }
        }
    }

    /// Releases a dropped lease; nobody awaits the outcome.
    pub fn release_in_background(self: &Arc<Self>, lock_key: String, token: String) {
        let core = self.clone();
        self.handle.spawn(async move {
            let _ = core.release(&lock_key, &token).await;
        });
    }

    /// After a command went unanswered the lock may be (or become, if the
    /// command is still queued somewhere) ours: release it by token, and once
    /// more a command timeout later in case the first try overtook it.
    pub fn clean_up_after_unknown(&self, lock_key: String, token: String) {
        let connection = self.connection.clone();
        let channel = self.channel.clone();
        self.handle.spawn(async move {
            for attempt in 0..2 {
                if attempt > 0 {
                    tokio::time::sleep(connection.command_timeout()).await;
                }
                let answer = connection.eval::<i64>(&connection.scripts.release, &[&lock_key], &[&token, &channel]).await;
                if matches!(answer, Ok(ref answer) if answer.value == 1) {
                    connection.waiters.wake(&lock_key);
                    return;
                }
            }
        });
    }

    /// Close: release every held lease within the shutdown timeout.
    async fn release_all(&self) {
        let leases: Vec<Arc<LeaseShared>> = self.held().iter().filter_map(|(_, weak)| weak.upgrade()).collect();
        let mut releases = JoinSet::new();
        for lease in leases {
            if lease.take() {
                let connection = self.connection.clone();
                let channel = self.channel.clone();
                releases.spawn(async move {
                    connection.eval::<i64>(&connection.scripts.release, &[lease.lock_key()], &[&lease.token(), &channel]).await.map(|_| ())
                });
            }
        }
        let total = releases.len();
        let mut failed = 0;
        let timeout = Duration::from_millis(self.options.shutdown_timeout_ms.into());
        let finished = tokio::time::timeout(timeout, async {
            while let Some(done) = releases.join_next().await {
                if !matches!(done, Ok(Ok(()))) {
                    failed += 1;
                }
            }
        })
        .await;
        if finished.is_err() {
            let left = releases.len();
            releases.abort_all();
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
        crate::telemetry::report_hold(self.telemetry.as_ref(), &self.name, &self.options.thresholds, since);
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

/// Counts one acquire in progress against `maxWaiters` until dropped.
struct InProgress(Arc<BackendCore>);

impl InProgress {
    fn enter(core: Arc<BackendCore>) -> Result<InProgress> {
        let max = core.options.max_waiters as usize;
        core.in_progress
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| (n < max).then_some(n + 1))
            .map_err(|_| LockError::new(ErrorCode::QueueFull, format!("maxWaiters ({max}) acquires are already in progress in this backend")))?;
        Ok(InProgress(core))
    }
}

impl Drop for InProgress {
    fn drop(&mut self) {
        self.0.in_progress.fetch_sub(1, Ordering::SeqCst);
    }
}

/// One acquire, run on the driver's runtime.
struct Acquire {
    core: Arc<BackendCore>,
    key: String,
    wait: Duration,
    signal: Option<AbortSignal>,
    cancelled: oneshot::Receiver<()>,
    _slot: InProgress,
}

/// Why a wait ended early.
enum Interrupt {
    Aborted,
    Closed,
    TimedOut,
}

impl Acquire {
    /// Acquires, then counts and reports the outcome.
    async fn run(self) -> Result<Arc<LeaseShared>> {
        let core = self.core.clone();
        let started = Instant::now();
        let outcome = self.attempt().await;
        match &outcome {
            Ok(_) => core.acquired.fetch_add(1, Ordering::Relaxed),
            Err(err) if err.code() == ErrorCode::WaitTimeout => core.timed_out.fetch_add(1, Ordering::Relaxed),
            Err(_) => 0,
        };
        report_wait(core.telemetry.as_ref(), &core.name, &core.options.thresholds, started, outcome.as_ref().err());
        outcome
    }

    async fn attempt(self) -> Result<Arc<LeaseShared>> {
        let Acquire { core, key, wait, signal, mut cancelled, _slot } = self;
        let keys = RedisKeys::new(&core.options.namespace, &key);
        let ticket: Ticket = core.connection.waiters.join(&keys.lock);
        let start = Instant::now();
        let deadline = start.checked_add(wait).unwrap_or(start + Duration::from_secs(86_400 * 365));
        let single_try = wait.is_zero();

        let mut closed_rx = core.closed.subscribe();
        let interrupt = async {
            tokio::select! {
                biased;
                _ = async { match &signal { Some(signal) => signal.aborted().await, None => pending().await } } => Interrupt::Aborted,
                _ = closed_rx.wait_for(|closed| *closed) => Interrupt::Closed,
                _ = &mut cancelled => Interrupt::Aborted,
                _ = tokio::time::sleep_until(deadline.into()) => Interrupt::TimedOut,
            }
        };
        tokio::pin!(interrupt);

        let _turn = if single_try {
            ticket.try_turn().ok_or_else(busy)?
        } else {
            tokio::select! {
                biased;
                why = &mut interrupt => return Err(interrupted(why, wait)),
                turn = ticket.turn() => turn,
            }
        };
        let token = owner_token()?;
        let lease_ms = u64::from(core.options.lease_ms);
        loop {
            if *core.closed.borrow() {
                return Err(closed());
            }
            let sent = Instant::now();
            let answer = core
                .connection
                .eval::<(i64, i64)>(&core.connection.scripts.acquire, &[&keys.lock, &keys.fence], &[&token, &lease_ms])
                .await;
            let (granted, value) = match answer {
                Ok(answer) => answer.value,
                Err(failure) => {
                    if matches!(failure, Failure::Unknown(_)) {
                        core.clean_up_after_unknown(keys.lock.clone(), token.clone());
                    }
                    return Err(failure.into_error("acquire"));
                }
            };
            if granted == 1 {
                return register(&core, &key, &keys, token, value as u64, sent).await;
            }
            if single_try {
                return Err(busy());
            }
            let poll = if core.connection.is_subscribed() { core.options.notify_poll_interval_ms } else { core.options.poll_interval_ms };
            // Never sleep past the holder's expiry (PTTL; negative means the
            // key just vanished or has no expiry).
            let pttl = if value == -2 { 0 } else { u64::try_from(value).unwrap_or(u64::MAX) };
            let nap = Duration::from_millis(u64::from(poll).min(pttl.max(1)));
            tokio::select! {
                biased;
                why = &mut interrupt => return Err(interrupted(why, wait)),
                _ = ticket.woken() => {}
                _ = tokio::time::sleep(nap) => {}
            }
        }
    }
}

/// Registers a granted lease, or gives the lock back if `maxLeases` were
/// reached meanwhile.
async fn register(core: &Arc<BackendCore>, key: &str, keys: &RedisKeys, token: String, fence: u64, sent: Instant) -> Result<Arc<LeaseShared>> {
    // Checked under the held set's lock: close() flags first and then takes
    // the set, so a lease is either in the set it releases or sees the flag.
    let registered = {
        let mut held = core.held();
        if *core.closed.borrow() {
            Err(closed())
        } else if held.len() >= core.options.max_leases as usize {
            Err(key_limit(core.options.max_leases))
        } else {
            let entry = held.vacant_entry();
            let shared = Arc::new(LeaseShared::new(core.clone(), key, keys.lock.clone(), token.clone(), fence, sent, entry.key()));
            entry.insert(RedisLease::downgrade(&shared));
            Ok(shared)
        }
    };
    if registered.is_err() {
        let _ = core.release(&keys.lock, &token).await;
    }
    registered
}

fn interrupted(why: Interrupt, wait: Duration) -> LockError {
    match why {
        Interrupt::Aborted => aborted_error(),
        Interrupt::Closed => closed(),
        Interrupt::TimedOut => LockError::new(ErrorCode::WaitTimeout, format!("the key stayed held for the whole wait of {} ms", wait.as_millis())),
    }
}

fn busy() -> LockError {
    LockError::new(ErrorCode::LockBusy, "the key is held and the acquire was not allowed to wait")
}

fn key_limit(max: u32) -> LockError {
    LockError::new(ErrorCode::KeyLimit, format!("maxLeases ({max}) leases are already held by this backend"))
}

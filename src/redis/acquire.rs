//! One acquire of a redis backend, run as a task on the driver's runtime.
//!
//! The task joins its key's in-process queue, and once it is the head it
//! runs the acquire script until it is granted, the wait ends (timeout,
//! abort, close, or the caller dropping its future) or Redis fails. A wait
//! never interrupts a command in flight: an acquire that Redis grants after
//! its caller left is released through the lease's `Drop`.

use std::future::pending;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use super::connection::Failure;
use super::core::BackendCore;
use super::keys::{owner_token, RedisKeys};
use super::lease::{valid_until, LeaseShared, RedisLease};
use super::waiters::{Place, Ticket};
use crate::abort::AbortSignal;
use crate::error::{ErrorCode, LockError, Result};
use crate::telemetry::report_wait;

/// Counts one acquire in progress against `maxWaiters` until dropped.
pub(super) struct InProgress(Arc<BackendCore>);

impl InProgress {
    pub fn enter(core: Arc<BackendCore>) -> Result<InProgress> {
        let max = core.options.max_waiters as usize;
        core.in_progress.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| (n < max).then_some(n + 1)).map_err(|_| {
            LockError::new(ErrorCode::QueueFull, format!("maxWaiters ({max}) acquires are already in progress in this backend"))
        })?;
        Ok(InProgress(core))
    }
}

impl Drop for InProgress {
    fn drop(&mut self) {
        if self.0.in_progress.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.settled.notify_waiters();
        }
    }
}

/// One acquire, run on the driver's runtime.
pub(super) struct Acquire {
    core: Arc<BackendCore>,
    key: String,
    keys: RedisKeys,
    ticket: Ticket,
    /// The place in the key's queue, taken when the acquire was called;
    /// none for a single try, which never queues.
    place: Option<Place>,
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
    /// Joins the key's queue (on the caller's thread, so that waiters are
    /// served in the order of the calls). `cancelled` resolves when the
    /// caller's future is dropped.
    pub fn new(
        core: Arc<BackendCore>,
        key: &str,
        wait: Duration,
        signal: Option<AbortSignal>,
        cancelled: oneshot::Receiver<()>,
        slot: InProgress,
    ) -> Acquire {
        let keys = RedisKeys::new(&core.options.namespace, key);
        let ticket = core.connection.waiters.join(&keys.lock);
        let place = (!wait.is_zero()).then(|| ticket.queue());
        Acquire { core, key: key.to_owned(), keys, ticket, place, wait, signal, cancelled, _slot: slot }
    }

    /// Acquires, then counts and reports the outcome.
    pub async fn run(self) -> Result<Arc<LeaseShared>> {
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
        let Acquire { core, key, keys, ticket, place, wait, signal, mut cancelled, _slot } = self;
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

        let _turn = match place {
            None => ticket.try_turn().ok_or_else(LockError::busy)?,
            // Nobody ahead: no wait, so no timer is started.
            Some(Place::Turn(turn)) => turn,
            Some(place) => tokio::select! {
                biased;
                why = &mut interrupt => return Err(interrupted(why, wait)),
                turn = place.turn() => turn,
            },
        };
        let token = owner_token()?;
        let lease_ms = u64::from(core.options.lease_ms);
        // Longer than any nap between two tries, so the mark outlives it.
        let waiting_ms =
            if single_try { 0 } else { 2 * u64::from(core.options.poll_interval_ms.max(core.options.notify_poll_interval_ms)) + 1_000 };
        loop {
            if *core.closed.borrow() {
                return Err(LockError::closed());
            }
            let sent = Instant::now();
            let answer = core
                .connection
                .eval::<(i64, i64)>(
                    &core.connection.scripts.acquire,
                    &[&keys.lock, &keys.fence, &keys.waiting],
                    &[&token, &lease_ms, &waiting_ms],
                )
                .await;
            let (granted, value, via) = match answer {
                Ok(answer) => (answer.value.0, answer.value.1, answer.via),
                Err(failure) => {
                    if matches!(failure, Failure::Unknown(_)) {
                        core.clean_up(keys.clone(), token.clone());
                    }
                    return Err(failure.into_error("acquire"));
                }
            };
            if granted == 1 {
                let in_time = || Instant::now() < valid_until(sent, core.lease());
                if in_time() {
                    if let Err(failure) = core.replicated(&via, &keys).await {
                        // Given back before the caller hears of it, so that
                        // a retry finds the key free (a failed give-back goes
                        // on in the background).
                        let _ = core.release(&keys, &token).await;
                        return Err(failure.into_error("acquire"));
                    }
                    // Asked again: the replicas' acknowledgement (WAIT) may
                    // have taken what was left of the lease.
                    if in_time() {
                        return register(&core, &key, &keys, token, value as u64, sent).await;
                    }
                }
                // The answer (or the replicas' acknowledgement) came after
                // the lease's local validity ran out (slower than leaseMs,
                // or read late by a busy thread): the lock may have expired
                // and gone to another owner already. Try again with the same
                // token while the wait lasts: the script grants a lock that
                // carries it afresh.
                let why = if single_try {
                    None
                } else {
                    tokio::select! {
                        biased;
                        why = &mut interrupt => Some(why),
                        _ = std::future::ready(()) => continue,
                    }
                };
                core.clean_up(keys.clone(), token.clone());
                return Err(why.map_or_else(late_grant, |why| interrupted(why, wait)));
            }
            if single_try {
                return Err(LockError::busy());
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
async fn register(
    core: &Arc<BackendCore>,
    key: &str,
    keys: &RedisKeys,
    token: String,
    fence: u64,
    sent: Instant,
) -> Result<Arc<LeaseShared>> {
    // Checked under the held set's lock: close() flags first and then takes
    // the set, so a lease is either in the set it releases or sees the flag.
    let registered = {
        let mut held = core.held();
        if *core.closed.borrow() {
            Err(LockError::closed())
        } else if held.len() >= core.options.max_leases as usize {
            Err(key_limit(core.options.max_leases))
        } else {
            let entry = held.vacant_entry();
            let shared = Arc::new(LeaseShared::new(core.clone(), key, keys.clone(), token.clone(), fence, sent, entry.key()));
            entry.insert(RedisLease::downgrade(&shared));
            Ok(shared)
        }
    };
    if registered.is_err() {
        let _ = core.release(keys, &token).await;
    }
    registered
}

fn interrupted(why: Interrupt, wait: Duration) -> LockError {
    match why {
        Interrupt::Aborted => LockError::aborted(),
        Interrupt::Closed => LockError::closed(),
        Interrupt::TimedOut => LockError::wait_timeout(wait),
    }
}

fn late_grant() -> LockError {
    LockError::new(
        ErrorCode::ProviderFailed,
        "acquire: Redis granted the lock, but its answer (or the replicas' acknowledgement of replicaAcks) came after the lease's validity had run out; the lock is given back",
    )
}

pub(super) fn key_limit(max: u32) -> LockError {
    LockError::key_limit("maxLeases", max, "leases are")
}

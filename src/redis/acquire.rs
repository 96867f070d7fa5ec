//! One acquire of a redis backend, run as a task on the driver's runtime.
//!
//! The task joins its keys' in-process queues, and once it is the head of
//! each it runs the acquire script(s) until it is granted, the wait ends (timeout,
//! abort, close, or the caller dropping its future) or Redis fails. A wait
//! never interrupts a command in flight: an acquire that Redis grants after
//! its caller left is released through the lease's `Drop`.

use std::future::{pending, Future};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use super::claim::{Claim, Taken};
use super::connection::Failure;
use super::core::BackendCore;
use super::handoff::{Next, Request};
use super::keys::{owner_token, RedisKeys};
use super::lease::{valid_until, LeaseShared, RedisLease};
use super::waiters::{Picked, Place, Ticket, Turn, Waiters};
use crate::abort::AbortSignal;
use crate::acquire::LockKind;
use crate::error::{ErrorCode, LockError, Result};
use crate::telemetry::Acquiring;

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
    /// The user keys, in the caller's order.
    keys: Vec<String>,
    claim: Arc<Claim>,
    /// How other calls of this process see this acquire while it waits
    /// (none for a single try, and on a Cluster: no hand-offs there).
    request: Option<Arc<Request>>,
    /// One place per key in its queue of this process.
    tickets: Vec<Ticket>,
    /// The places in the keys' queues, taken when the acquire was called;
    /// none for a single try, which never queues.
    places: Option<Vec<Place>>,
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
    /// Joins the queue of each key (on the caller's thread, so that waiters
    /// are served in the order of the calls; the places of one call's keys
    /// are taken at once, see [`Waiters::queue_all`]). `cancelled` resolves
    /// when the caller's future is dropped.
    pub fn new(
        core: Arc<BackendCore>,
        keys: &[&str],
        kind: LockKind,
        wait: Duration,
        signal: Option<AbortSignal>,
        cancelled: oneshot::Receiver<()>,
        slot: InProgress,
    ) -> Result<Acquire> {
        if core.connection.waiters.older_layout_on(&core.channel) {
            return Err(older_layout(&core.options.namespace));
        }
        let names: Vec<RedisKeys> = keys.iter().map(|key| RedisKeys::new(&core.options.namespace, key)).collect();
        let cluster = core.connection.is_cluster();
        let claim = Arc::new(Claim::new(names, kind, owner_token()?, cluster, u64::from(core.options.fence_retention_ms)));
        let request = (!wait.is_zero() && !cluster).then(|| Arc::new(Request::new(claim.clone())));
        let tickets: Vec<Ticket> = claim.keys.iter().map(|names| core.connection.waiters.join(names.lock(), request.clone())).collect();
        let places = (!wait.is_zero()).then(|| Waiters::queue_all(&tickets));
        let keys = keys.iter().map(|key| (*key).to_owned()).collect();
        Ok(Acquire { core, keys, claim, request, tickets, places, wait, signal, cancelled, _slot: slot })
    }

    /// Acquires, then counts and reports the outcome (`acquiring`: since
    /// the call; every redis acquire counts as one that waits).
    pub async fn run(self, mut acquiring: Acquiring) -> Result<Arc<LeaseShared>> {
        let core = self.core.clone();
        acquiring.queued();
        let outcome = self.attempt().await;
        match &outcome {
            Ok(shared) => {
                core.acquired.fetch_add(1, Ordering::Relaxed);
                shared.hold_begins(core.reporter.granted(acquiring, shared.fence()));
            }
            Err(err) => {
                if err.code() == ErrorCode::WaitTimeout {
                    core.timed_out.fetch_add(1, Ordering::Relaxed);
                }
                core.reporter.failed(acquiring, err);
            }
        }
        outcome
    }

    async fn attempt(self) -> Result<Arc<LeaseShared>> {
        let Acquire { core, keys, claim, request, tickets, places, wait, signal, mut cancelled, _slot } = self;
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

        // The turns held (this acquire is the head of those queues), and
        // the places still waited for, last key first.
        let mut turns: Vec<Turn> = Vec::with_capacity(tickets.len());
        let mut places: Vec<Place> = match places {
            None => {
                for ticket in &tickets {
                    turns.push(ticket.try_turn().ok_or_else(LockError::busy)?);
                }
                Vec::new()
            }
            Some(mut places) => {
                places.reverse();
                places
            }
        };
        let lease_ms = u64::from(core.options.lease_ms);
        // Longer than any nap between two tries, so the mark outlives it.
        let waiting_ms =
            if single_try { 0 } else { 2 * u64::from(core.options.poll_interval_ms.max(core.options.notify_poll_interval_ms)) + 1_000 };
        // This acquire's place among the waiters of every process (0: none
        // yet), given by the first try that had to wait.
        let mut ticket = 0u64;
        // The last wait ended by its nap: the next try goes to Redis
        // whatever this process knows (the safety net).
        let mut napped = false;
        // Ends a wait without a grant: nobody may grant this acquire any
        // more, what another call granted it meanwhile is given back, and
        // its marks are taken back.
        let give_up = |ticket: u64| {
            if let Some(request) = &request {
                let left = request.leave();
                if left.grant.is_some() {
                    core.release_in_background(claim.clone());
                } else if left.dirty {
                    core.clean_up(claim.clone());
                }
            }
            if ticket != 0 {
                core.withdraw_in_background(claim.clone(), ticket);
            }
        };
        loop {
            if *core.closed.borrow() {
                give_up(ticket);
                return Err(LockError::closed());
            }
            // The turn of every key, unless another call grants this
            // acquire meanwhile.
            let mut handed = None;
            while let Some(place) = places.pop() {
                let place = match place {
                    // Nobody ahead: no wait, so no timer is started.
                    Place::Turn(turn) => {
                        turns.push(turn);
                        continue;
                    }
                    place => place.turn(),
                };
                tokio::pin!(place);
                loop {
                    tokio::select! {
                        biased;
                        why = &mut interrupt => {
                            give_up(ticket);
                            return Err(interrupted(why, wait));
                        }
                        turn = &mut place => {
                            turns.push(turn);
                            break;
                        }
                        _ = changed(&request) => {
                            handed = request.as_ref().and_then(|request| request.granted());
                            if handed.is_some() {
                                break;
                            }
                        }
                    }
                }
                if handed.is_some() {
                    places.clear();
                    break;
                }
            }
            if handed.is_none() {
                match request.as_ref().map_or(Next::Try, |request| request.begin_try()) {
                    // A key this process's leases keep full: a release of
                    // ours will hand it on, or wake this head when it
                    // leaves room.
                    Next::Try if !napped && !single_try && !claim.is_plain() && core.connection.waiters.held_by_us(&claim) => {
                        if let Some(request) = &request {
                            request.end_try(ticket);
                        }
                        let nap = Duration::from_millis(u64::from(poll_interval(&core)));
                        napped = pause(&mut interrupt, &tickets, &request, nap, || give_up(ticket), wait).await?;
                        continue;
                    }
                    Next::Try => napped = false,
                    Next::Granted(grant) => handed = Some(grant),
                    // Another call has it: its outcome decides.
                    Next::Wait => {
                        tokio::select! {
                            biased;
                            why = &mut interrupt => {
                                give_up(ticket);
                                return Err(interrupted(why, wait));
                            }
                            _ = changed(&request) => {}
                        }
                        continue;
                    }
                }
            }
            let (sent, taken) = match handed {
                Some(grant) => (grant.sent, Ok(Taken::Granted { fences: grant.fences, written: grant.written })),
                None => {
                    let followers = request.as_ref().map(|request| core.connection.waiters.followers(request)).unwrap_or_default();
                    let sent = Instant::now();
                    (sent, try_once(&core, &claim, lease_ms, waiting_ms, ticket, followers, sent).await)
                }
            };
            let (fences, written) = match taken {
                Ok(Taken::Granted { fences, written }) => (fences, written),
                Ok(Taken::OtherLimit) => {
                    give_up(ticket);
                    return Err(other_limit());
                }
                Ok(Taken::Busy { hint, ticket: place }) => {
                    if place != 0 {
                        ticket = place;
                    }
                    if single_try {
                        return Err(LockError::busy());
                    }
                    if let Some(request) = &request {
                        request.end_try(ticket);
                    }
                    let poll = poll_interval(&core);
                    // Never sleep past the first blocking holder's expiry
                    // (PTTL; -2 means the key just vanished, other negative
                    // values that it is unknown).
                    let pttl = if hint == -2 { 0 } else { u64::try_from(hint).unwrap_or(u64::MAX) };
                    let nap = Duration::from_millis(u64::from(poll).min(pttl.max(1)));
                    napped = pause(&mut interrupt, &tickets, &request, nap, || give_up(ticket), wait).await?;
                    continue;
                }
                Err(failure) => {
                    // A split claim may hold some of its groups already.
                    if matches!(failure, Failure::Unknown(_)) || claim.is_split() {
                        core.clean_up(claim.clone());
                    }
                    give_up(ticket);
                    return Err(failure.into_error("acquire"));
                }
            };
            let in_time = || Instant::now() < valid_until(sent, core.lease());
            if in_time() {
                if let Some(request) = &request {
                    request.leave();
                }
                if let Err(failure) = core.replicated(&written).await {
                    // Given back before the caller hears of it, so that
                    // a retry finds the key free (a failed give-back goes
                    // on in the background).
                    let _ = core.release(&claim).await;
                    return Err(failure.into_error("acquire"));
                }
                // Asked again: the replicas' acknowledgement (WAIT) may
                // have taken what was left of the lease.
                if in_time() {
                    return register(&core, &keys, &claim, fences, sent).await;
                }
                // Too late after all: the acquire goes on as from the start.
                if let Some(request) = &request {
                    request.reopen(ticket);
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
                    _ = std::future::ready(()) => {
                        if let Some(request) = &request {
                            request.reopen(ticket);
                        }
                        // A grant handed over came without the turns.
                        if turns.len() < tickets.len() {
                            turns.clear();
                            places = Waiters::queue_all(&tickets);
                            places.reverse();
                        }
                        continue;
                    }
                }
            };
            core.clean_up(claim.clone());
            give_up(ticket);
            return Err(why.map_or_else(late_grant, |why| interrupted(why, wait)));
        }
    }
}

/// One try of `claim`, sent at `sent`, granting in the same call the
/// `followers` it covers (their outcomes delivered to them).
async fn try_once(
    core: &Arc<BackendCore>,
    claim: &Claim,
    lease_ms: u64,
    waiting_ms: u64,
    ticket: u64,
    followers: Vec<Picked>,
    sent: Instant,
) -> Result<Taken, Failure> {
    if followers.is_empty() {
        return claim.take(&core.connection, lease_ms, waiting_ms, ticket, &core.channel).await;
    }
    let requests: Vec<(&Claim, u64)> =
        std::iter::once((claim, ticket)).chain(followers.iter().map(|(request, ticket)| (&*request.claim, *ticket))).collect();
    match Claim::hand_over(&core.connection, None, &requests, lease_ms, waiting_ms, &core.channel).await {
        Ok(handed) => {
            let mut taken = handed.taken.into_iter();
            let own = taken.next().unwrap_or(Taken::Busy { hint: -1, ticket });
            core.deliver(&followers, taken, sent, true);
            Ok(own)
        }
        Err(failure) => {
            core.deliver(&followers, std::iter::empty(), sent, !matches!(failure, Failure::Unknown(_)));
            Err(failure)
        }
    }
}

/// The safety net's pause between two tries (with notifications, a long one).
fn poll_interval(core: &BackendCore) -> u32 {
    if core.connection.is_subscribed() {
        core.options.notify_poll_interval_ms
    } else {
        core.options.poll_interval_ms
    }
}

/// A waiter's pause between two tries: until a wake-up of its keys, a
/// delivery to its request, or `nap` (`Ok(true)`: the nap ended it, so the
/// next try goes to Redis whatever this process knows). When the interrupt
/// comes first, the waiter gives up its place (`give_up`) and the answer is
/// the interrupt's error (a wait of `wait`).
async fn pause(
    interrupt: &mut (impl Future<Output = Interrupt> + Unpin),
    tickets: &[Ticket],
    request: &Option<Arc<Request>>,
    nap: Duration,
    give_up: impl FnOnce(),
    wait: Duration,
) -> Result<bool> {
    tokio::select! {
        biased;
        why = interrupt => {
            give_up();
            Err(interrupted(why, wait))
        }
        _ = woken(tickets) => Ok(false),
        _ = changed(request) => Ok(false),
        _ = tokio::time::sleep(nap) => Ok(true),
    }
}

/// Resolves at the next delivery to `request` (never without one).
async fn changed(request: &Option<Arc<Request>>) {
    match request {
        Some(request) => request.changed().await,
        None => pending().await,
    }
}

/// Resolves at the next wake-up of any of the keys.
async fn woken(tickets: &[Ticket]) {
    match tickets {
        [ticket] => ticket.woken().await,
        tickets => {
            let _ = futures_util::future::select_all(tickets.iter().map(|ticket| Box::pin(ticket.woken()))).await;
        }
    }
}

/// Registers a granted lease, or gives the lock back if `maxLeases` were
/// reached meanwhile.
async fn register(
    core: &Arc<BackendCore>,
    keys: &[String],
    claim: &Arc<Claim>,
    fences: Vec<u64>,
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
            let shared = Arc::new(LeaseShared::new(core.clone(), keys, claim.clone(), fences, sent, entry.key()));
            entry.insert(RedisLease::downgrade(&shared));
            Ok(shared)
        }
    };
    if registered.is_err() {
        let _ = core.release(claim).await;
    }
    registered
}

fn other_limit() -> LockError {
    LockError::new(
        ErrorCode::InvalidArgument,
        "the key is held or waited for with another limit: every caller of a key gives the same limit (a plain or shared acquire has limit 1)",
    )
}

/// A process of the older key layout (64 hex digits in braces) releases
/// keys in this namespace: it grants by other names than ours, so the two
/// could hold one key at once. Nothing more is granted here.
fn older_layout(namespace: &str) -> LockError {
    LockError::new(
        ErrorCode::ProviderFailed,
        format!(
            "a process of an older dokebi-lock key layout (0.4.1 before its release) shares the Redis namespace '{namespace}': \
             the two layouts use different names and could hold one key at once, so this backend grants nothing more; \
             stop every process of the older version (or give this one another namespace) and restart this one"
        ),
    )
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

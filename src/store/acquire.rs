//! One acquire of a store backend, run as a task on the driver's runtime.
//!
//! The task joins its keys' in-process queues, and once it is the head of
//! each it tries the store until it is granted, the wait ends (timeout,
//! abort, close, or the caller dropping its future) or the store fails. A
//! wait never interrupts a command in flight: an acquire that the store
//! grants after its caller left is released through the lease's `Drop`.

use std::future::pending;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::FutureExt;
use tokio::sync::{oneshot, watch};

use super::connecting::Stage;
use super::core::BackendCore;
use super::handoff::{Grant, Next, Request};
use super::lease::{valid_until, LeaseShared, StoreLease};
use super::waiters::{Place, Ticket, Turn, Waiters};
use super::{Claim, Failure, Freed, Retry, Store, Taken};
use crate::abort::AbortSignal;
use crate::error::{ErrorCode, LockError, Result};
use crate::inspect::{busy_details, tells_holders};
use crate::telemetry::Acquiring;

/// Counts one acquire in progress against `maxWaiters` until dropped.
pub(super) struct InProgress<S: Store>(Arc<BackendCore<S>>);

impl<S: Store> InProgress<S> {
    pub fn enter(core: Arc<BackendCore<S>>) -> Result<Self> {
        let max = core.options.max_waiters as usize;
        core.in_progress.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| (n < max).then_some(n + 1)).map_err(|_| {
            LockError::new(ErrorCode::QueueFull, format!("maxWaiters ({max}) acquires are already in progress in this backend"))
        })?;
        Ok(InProgress(core))
    }
}

impl<S: Store> Drop for InProgress<S> {
    fn drop(&mut self) {
        if self.0.in_progress.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.settled.notify_waiters();
        }
    }
}

/// One acquire, run on the driver's runtime.
pub(super) struct Acquire<S: Store> {
    core: Arc<BackendCore<S>>,
    /// The user keys, in the caller's order.
    keys: Vec<String>,
    claim: Arc<S::Claim>,
    /// How other calls of this process see this acquire while it waits
    /// (none for a single try, and where the store cannot hand over).
    request: Option<Arc<Request<S>>>,
    /// One place per key in its queue of this process.
    tickets: Vec<Ticket<S>>,
    /// The places in the keys' queues, taken when the acquire was called;
    /// none for a single try, which never queues.
    places: Option<Vec<Place>>,
    wait: Duration,
    signal: Option<AbortSignal>,
    cancelled: oneshot::Receiver<()>,
    _slot: InProgress<S>,
}

/// Why a wait ended early.
enum Interrupt {
    Aborted,
    Closed,
    TimedOut,
}

/// What ends a wait early: the signal, close, the caller leaving, the
/// deadline.
struct Interrupts {
    signal: Option<AbortSignal>,
    closed: watch::Receiver<bool>,
    /// Resolves when the caller's future is dropped; `None` once it did
    /// (an interrupt may be heard, and the wait go on, while a try that
    /// was sent finishes: then heard again).
    cancelled: Option<oneshot::Receiver<()>>,
    /// None for a single try: it is one try, however long its connect
    /// and command take (their own bounds).
    deadline: Option<Instant>,
    /// The wait asked for, for the timeout's message.
    wait: Duration,
}

impl Interrupts {
    /// Resolves when the wait must end (cancel safe: each call listens anew).
    async fn next(&mut self) -> Interrupt {
        tokio::select! {
            biased;
            _ = async { match &self.signal { Some(signal) => signal.aborted().await, None => pending().await } } => Interrupt::Aborted,
            _ = self.closed.wait_for(|closed| *closed) => Interrupt::Closed,
            _ = caller_left(&mut self.cancelled) => Interrupt::Aborted,
            _ = async { match self.deadline { Some(deadline) => tokio::time::sleep_until(deadline.into()).await, None => pending().await } } => Interrupt::TimedOut,
        }
    }

    fn error(&self, why: Interrupt) -> LockError {
        match why {
            Interrupt::Aborted => LockError::aborted(),
            Interrupt::Closed => LockError::closed(),
            Interrupt::TimedOut => LockError::wait_timeout(self.wait),
        }
    }
}

/// Resolves once the caller's future was dropped (at once, every time
/// after the first).
async fn caller_left(cancelled: &mut Option<oneshot::Receiver<()>>) {
    if let Some(receiver) = cancelled.as_mut() {
        let _ = receiver.await;
    }
    *cancelled = None;
}

/// An acquire under way: the phases of one round (its turns, whether it
/// tries itself, the try, what the try found, the grant confirmed) and
/// what they share.
struct Attempt<S: Store> {
    core: Arc<BackendCore<S>>,
    keys: Vec<String>,
    claim: Arc<S::Claim>,
    request: Option<Arc<Request<S>>>,
    tickets: Vec<Ticket<S>>,
    /// The turns held (this acquire is the head of those queues).
    turns: Vec<Turn>,
    /// The places still waited for, last key first.
    places: Vec<Place>,
    interrupts: Interrupts,
    single_try: bool,
    /// How long a refused try's waiting mark lives: longer than any nap
    /// between two tries, so the mark outlives it.
    waiting_ms: u64,
    /// This acquire's place among the waiters of every process (0: none
    /// yet), given by the first try that had to wait.
    ticket: u64,
    /// A waiting try's answer was lost: it may have left marks without a
    /// ticket, which giving up must take back.
    marks_unknown: bool,
    /// A try of its own was lost with its connection, cleaned up, and tried
    /// again (see [`Attempt::cleaned_up_after`]): giving up cleans up again.
    lost_try: bool,
    /// The last wait ended by its nap: the next try goes to the store
    /// whatever this process knows (the safety net).
    napped: bool,
    /// Counts the acquire in progress until the attempt ends.
    _slot: InProgress<S>,
}

/// What a waiting acquire did after a try lost with its connection (see
/// [`Attempt::cleaned_up_after`]).
enum AfterLoss {
    /// Gave the claim back: the next try.
    Again,
    /// Gave the claim back, and the wait ended meanwhile.
    Ended(Interrupt),
    /// Did not: the outcome is unknown.
    Unknown,
}

/// A try's outcome, as the round goes on from it.
enum Found<W> {
    /// Granted: the fence of each key and where the grant was written.
    Granted(Vec<u64>, Vec<W>),
    /// Refused for now: the next round.
    Again,
}

impl<S: Store> Acquire<S> {
    /// Joins the queue of each key (on the caller's thread, so that waiters
    /// are served in the order of the calls; the places of one call's keys
    /// are taken at once, see [`Waiters::queue_all`]) with `claim`, the
    /// store's claim of `keys`. `cancelled` resolves when the caller's
    /// future is dropped.
    pub fn new(
        core: Arc<BackendCore<S>>,
        keys: &[&str],
        claim: S::Claim,
        wait: Duration,
        signal: Option<AbortSignal>,
        cancelled: oneshot::Receiver<()>,
        slot: InProgress<S>,
    ) -> Self {
        let claim = Arc::new(claim);
        let request = (!wait.is_zero() && core.store().hands_over()).then(|| Arc::new(Request::new(claim.clone())));
        let tickets: Vec<Ticket<S>> = claim.names().map(|name| core.store().waiters().join(name, request.clone())).collect();
        let places = (!wait.is_zero()).then(|| Waiters::queue_all(&tickets));
        let keys = keys.iter().map(|key| (*key).to_owned()).collect();
        Acquire { core, keys, claim, request, tickets, places, wait, signal, cancelled, _slot: slot }
    }

    /// Acquires, then counts and reports the outcome (`acquiring`: since
    /// the call; every store acquire counts as one that waits).
    pub async fn run(self, mut acquiring: Acquiring) -> Result<Arc<LeaseShared<S>>> {
        let core = self.core.clone();
        acquiring.queued();
        // For a WAIT_TIMEOUT's or LOCK_BUSY's details: one allocation, no
        // round trip, on the way in.
        let keys = self.keys.clone();
        // The holders are read before the failure is reported, so that
        // its telemetry carries them too.
        let outcome = match self.attempt().await {
            Err(err) if tells_holders(err.code()) => {
                let read = Instant::now();
                let err = with_holders(&core, err, &keys).await;
                acquiring.leave_out(read.elapsed());
                Err(err)
            }
            outcome => outcome,
        };
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

    /// Rounds until granted or ended: the turn of every key (unless another
    /// call grants this acquire meanwhile), then a try of its own or the
    /// grant another call made, then what it found.
    async fn attempt(self) -> Result<Arc<LeaseShared<S>>> {
        let mut attempt = Attempt::start(self)?;
        loop {
            if *attempt.core.closed.borrow() {
                return Err(attempt.give_up(LockError::closed()));
            }
            let handed = match attempt.take_turns().await? {
                Some(grant) => Some(grant),
                None => match attempt.begin_try().await? {
                    Begin::Try => None,
                    Begin::Granted(grant) => Some(grant),
                    Begin::Again => continue,
                },
            };
            let (sent, taken) = match handed {
                Some(grant) => (grant.sent, Ok(Taken::Granted { fences: grant.fences, written: grant.written })),
                None => attempt.try_once().await?,
            };
            match attempt.found(taken).await? {
                Found::Granted(fences, written) => {
                    if let Some(lease) = attempt.confirm(fences, written, sent).await? {
                        return Ok(lease);
                    }
                }
                Found::Again => {}
            }
        }
    }
}

/// How long the read of the holders after a `WAIT_TIMEOUT` or `LOCK_BUSY`
/// may take, all keys together: the error is told at the end of the wait
/// (a store that stalls then would hold it up to `commandTimeoutMs` a key:
/// review R59), only without its holders when they could not be read in
/// time.
const HOLDERS_READ: Duration = Duration::from_millis(250);

/// `err` (a `WAIT_TIMEOUT` or `LOCK_BUSY`) with the holders of the key
/// that kept it out in its details (see [`busy_details`]): one read of each
/// key, after the wait ended, until one is held, within [`HOLDERS_READ`].
/// Without them when a read fails or runs out of time: the error is the
/// wait's, not the read's.
async fn with_holders<S: Store>(core: &BackendCore<S>, err: LockError, keys: &[String]) -> LockError {
    let read = async {
        let mut found = Vec::with_capacity(keys.len());
        for key in keys {
            let inspection = core.store().inspect(key).await.ok()?;
            let held = inspection.is_held();
            found.push(inspection);
            if held {
                break;
            }
        }
        Some(found)
    };
    let Ok(Some(found)) = tokio::time::timeout(HOLDERS_READ, read).await else { return err };
    match busy_details(&found, keys.len() > 1) {
        Some(details) => err.with_details(details),
        None => err,
    }
}

/// Whether a head tries the store itself (see [`Attempt::begin_try`]).
enum Begin<W> {
    Try,
    Granted(Grant<W>),
    /// Not now: the next round.
    Again,
}

impl<S: Store> Attempt<S> {
    /// The acquire under way, from the places `acquire` took in its keys' queues.
    fn start(acquire: Acquire<S>) -> Result<Self> {
        let Acquire { core, keys, claim, request, tickets, places, wait, signal, cancelled, _slot } = acquire;
        let start = Instant::now();
        let single_try = wait.is_zero();
        let deadline = (!single_try).then(|| start.checked_add(wait).unwrap_or(start + Duration::from_secs(86_400 * 365)));
        let mut turns: Vec<Turn> = Vec::with_capacity(tickets.len());
        let places: Vec<Place> = match places {
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
        let options = &core.options;
        let waiting_ms = if single_try { 0 } else { 2 * u64::from(options.poll_interval_ms.max(options.notify_poll_interval_ms)) + 1_000 };
        let closed = core.closed.subscribe();
        Ok(Attempt {
            core,
            keys,
            claim,
            request,
            tickets,
            turns,
            places,
            interrupts: Interrupts { signal, closed, cancelled: Some(cancelled), deadline, wait },
            single_try,
            waiting_ms,
            ticket: 0,
            marks_unknown: false,
            lost_try: false,
            napped: false,
            _slot,
        })
    }

    /// Ends the wait without a grant, answering `err`: nobody may grant
    /// this acquire any more, what another call granted it meanwhile is
    /// given back, and its marks are taken back.
    fn give_up(&self, mut err: LockError) -> LockError {
        let (granted, dirty) = self.request.as_ref().map_or((false, false), |request| {
            let left = request.leave();
            (left.grant.is_some(), left.dirty)
        });
        if granted {
            self.core.release_in_background(self.claim.clone());
        } else if dirty || self.lost_try {
            self.core.clean_up(self.claim.clone());
            // A call whose answer was lost may have granted this acquire
            // (a lost try of its own too, should it reach the server after
            // its clean-up, through a proxy that ran it on): a store
            // failure of its own try since does not make "nothing done"
            // true, and a caller told so could take the key elsewhere (a
            // policy's next member) while the store holds it until the
            // clean-up lands.
            if err.code() == ErrorCode::ProviderFailed {
                err = LockError::new(
                    ErrorCode::OutcomeUnknown,
                    "acquire: an earlier call that may have granted this acquire went unanswered, and the store then failed, so the outcome is unknown",
                )
                .with_cause(err);
            }
        }
        if self.ticket != 0 || self.marks_unknown {
            self.core.withdraw_in_background(self.claim.clone(), self.ticket);
        }
        err
    }

    fn interrupted(&self, why: Interrupt) -> LockError {
        self.give_up(self.interrupts.error(why))
    }

    /// Phase 1: waits for the turn of every key still waited for, unless
    /// another call grants this acquire meanwhile (that grant, then).
    async fn take_turns(&mut self) -> Result<Option<Grant<S::Written>>> {
        while let Some(place) = self.places.pop() {
            let place = match place {
                // Nobody ahead: no wait, so no timer is started.
                Place::Turn(turn) => {
                    self.turns.push(turn);
                    continue;
                }
                place => place.turn(),
            };
            tokio::pin!(place);
            loop {
                tokio::select! {
                    biased;
                    why = self.interrupts.next() => return Err(self.interrupted(why)),
                    turn = &mut place => {
                        self.turns.push(turn);
                        break;
                    }
                    _ = changed(&self.request) => {
                        if let Some(grant) = self.request.as_ref().and_then(|request| request.granted()) {
                            self.places.clear();
                            return Ok(Some(grant));
                        }
                    }
                }
            }
        }
        Ok(None)
    }

    /// Phase 2: the head decides whether to try the store itself now.
    async fn begin_try(&mut self) -> Result<Begin<S::Written>> {
        if let Some(request) = self.request.clone() {
            tokio::select! {
                biased;
                why = self.interrupts.next() => return Err(self.interrupted(why)),
                () = request.let_go() => {}
            }
        }
        match self.request.as_ref().map_or(Next::Try, |request| request.begin_try()) {
            // A key this process's leases keep full: a release of ours will
            // hand it on, or wake this head when it leaves room.
            Next::Try if !self.napped && !self.single_try && !self.claim.is_plain() && self.core.waiters().held_by_us(&self.claim) => {
                if let Some(request) = &self.request {
                    request.end_try(self.ticket);
                }
                let nap = poll_interval(&self.core, Retry::Unknown);
                self.pause(nap).await?;
                Ok(Begin::Again)
            }
            Next::Try => {
                self.napped = false;
                Ok(Begin::Try)
            }
            Next::Granted(grant) => Ok(Begin::Granted(grant)),
            // Another call has it: its outcome decides.
            Next::Wait => {
                tokio::select! {
                    biased;
                    why = self.interrupts.next() => return Err(self.interrupted(why)),
                    _ = changed(&self.request) => {}
                }
                Ok(Begin::Again)
            }
        }
    }

    /// Phase 3: one try of the claim, granting in the same call the
    /// waiters right behind it that it covers (their outcomes delivered to
    /// them). Answers when it was sent. A wait that ends while the try is
    /// still connecting (nothing sent) ends it there: see
    /// [`super::connecting`].
    async fn try_once(&mut self) -> Result<(Instant, Result<Taken<S::Written>, Failure>)> {
        let core = self.core.clone();
        let followers = self.request.as_ref().map(|request| core.waiters().followers(request)).unwrap_or_default();
        for ticket in &self.tickets {
            ticket.forget_wake();
        }
        let sent = Instant::now();
        let stage = Stage::new();
        let (claim, waiting_ms, ticket, request) = (&*self.claim, self.waiting_ms, self.ticket, self.request.as_deref());
        let call = async {
            if followers.is_empty() {
                return busy_if_contended(core.store().take(claim, waiting_ms, ticket).await, ticket, request);
            }
            let requests: Vec<(&S::Claim, u64)> =
                std::iter::once((claim, ticket)).chain(followers.iter().map(|(request, ticket)| (&*request.claim, *ticket))).collect();
            match core.store().hand_over(None, &requests, waiting_ms).await {
                Ok(handed) => {
                    let mut taken = handed.taken.into_iter();
                    let own = taken.next().unwrap_or(Taken::Busy { retry: Retry::Unknown, ticket });
                    core.deliver(&followers, taken, sent, true);
                    if let Some(request) = request {
                        request.contended(false);
                    }
                    Ok(own)
                }
                // The row the call waited for may be a follower's other
                // key: the followers are told nothing was done (they try on
                // their own), and this claim tries alone; else a free key
                // would wait out its whole wait behind a follower's.
                Err(Failure::Contended(_)) => {
                    core.deliver_contended(&followers, sent);
                    busy_if_contended(core.store().take(claim, waiting_ms, ticket).await, ticket, request)
                }
                Err(failure) => {
                    core.deliver(&followers, std::iter::empty(), sent, !failure.is_unknown());
                    Err(failure)
                }
            }
        };
        let interrupts = &mut self.interrupts;
        let cut = async {
            let why = interrupts.next().await;
            stage.cuttable().await;
            why
        };
        let why = tokio::select! {
            biased;
            taken = stage.run(call) => return Ok((sent, taken)),
            why = cut => why,
        };
        // Nothing was sent: the followers go on waiting, as after a try
        // that surely did not run.
        core.deliver(&followers, std::iter::empty(), sent, true);
        let err = match why {
            Interrupt::TimedOut => unreachable_within(S::NAME, self.interrupts.wait),
            why => self.interrupts.error(why),
        };
        Err(self.give_up(err))
    }

    /// Phase 4: what the try found. Refused for now: a pause until a
    /// wake-up, a delivery or the nap (never past the first blocking
    /// holder's expiry), then the next round.
    async fn found(&mut self, taken: Result<Taken<S::Written>, Failure>) -> Result<Found<S::Written>> {
        match taken {
            Ok(Taken::Granted { fences, written }) => Ok(Found::Granted(fences, written)),
            Ok(Taken::OtherLimit) => Err(self.give_up(other_limit())),
            Ok(Taken::Busy { retry, ticket }) => {
                if ticket != 0 {
                    self.ticket = ticket;
                }
                if self.single_try {
                    return Err(LockError::busy());
                }
                if let Some(request) = &self.request {
                    request.end_try(self.ticket);
                }
                let nap = match retry {
                    Retry::Within(expires) => poll_interval(&self.core, retry).min(Duration::from_millis(expires.max(1))),
                    // A millisecond: a waiter ahead of this one may take it.
                    Retry::Now => Duration::from_millis(1),
                    Retry::Unknown | Retry::Contended => poll_interval(&self.core, retry),
                };
                self.pause(nap).await?;
                Ok(Found::Again)
            }
            Err(failure) => {
                match self.cleaned_up_after(&failure).await {
                    AfterLoss::Again => return Ok(Found::Again),
                    AfterLoss::Ended(why) => return Err(self.interrupted(why)),
                    AfterLoss::Unknown => {}
                }
                // A split claim may hold some of its keys already.
                if failure.is_unknown() || self.claim.is_split() {
                    self.core.clean_up(self.claim.clone());
                }
                // A waiting try whose answer was lost may have left marks
                // this acquire has no ticket for: give_up takes them back
                // too (a withdraw takes every mark of the token).
                self.marks_unknown |= failure.is_unknown() && self.waiting_ms > 0;
                let err = self.core.error(failure, "acquire");
                Err(self.give_up(err))
            }
        }
    }

    /// After a try lost with its connection (a restart, a pooled
    /// connection the server closed within a second of its last use, a
    /// session killed: [`Store::lost_with_its_connection`]), a waiting
    /// acquire gives back now, by its token, whatever that try may have
    /// granted, and tries again when the store answered and the wait goes
    /// on; when the wait ended meanwhile, it fails as the wait's end says
    /// (`ABORTED`, `WAIT_TIMEOUT`: nothing is held); else it fails
    /// `OUTCOME_UNKNOWN` as before, the clean-up going on in the
    /// background.
    ///
    /// Never a second owner: the next try carries the same token, and a
    /// take reuses its token's row, so it is one grant whatever the lost
    /// try did. The give-back comes after the lost try: the server ended
    /// with the connection (a restart), or ended the statement (a kill),
    /// or runs it on (a proxy that cut it): then the try holds its keys'
    /// rows, or takes them before the give-back's, which locks them first,
    /// and waits behind it. A try the give-back does not wait for (held in
    /// a proxy until after it; on PostgreSQL, one creating a new key's row)
    /// can still grant the token: the next try then takes that grant over,
    /// giving up cleans up again, and a lease released before it landed
    /// leaves it until `leaseMs`. To the rest of
    /// the process its try is still under way while the give-back runs (its
    /// request stays trying), so no hand-over grants its token meanwhile
    /// for the give-back to take back.
    ///
    /// Only a give-back whose first attempt answered: one sent again after
    /// its first was lost may still have that first run on the server
    /// later (a proxy that delivers what it read from a cut client, a
    /// statement pipelined behind another's row-lock wait), and it would
    /// free the next try's grant of the same token while the caller holds
    /// it (review R10). The token is then not used again.
    async fn cleaned_up_after(&mut self, failure: &Failure) -> AfterLoss {
        let Failure::Unknown(cause) = failure else { return AfterLoss::Unknown };
        if self.single_try || !S::lost_with_its_connection(cause) {
            return AfterLoss::Unknown;
        }
        let after = loop {
            match self.core.store().give_back(&self.claim).await {
                Ok(Freed { first_attempt_lost: None, .. }) => {
                    break self.interrupts.next().now_or_never().map_or(AfterLoss::Again, AfterLoss::Ended);
                }
                // Refused for another session's row lock on a key (the one
                // the lost try waited for, say): nothing done, so again
                // after a pause while the wait lasts (review R11).
                Err(Failure::Contended(_)) => {
                    let pause = poll_interval(&self.core, Retry::Contended);
                    tokio::select! {
                        biased;
                        _ = self.interrupts.next() => break AfterLoss::Unknown,
                        _ = tokio::time::sleep(pause) => {}
                    }
                }
                _ => break AfterLoss::Unknown,
            }
        };
        let given_back = !matches!(after, AfterLoss::Unknown);
        self.lost_try |= given_back;
        // The lost try may have left marks under a ticket it never heard.
        self.marks_unknown |= given_back && self.waiting_ms > 0;
        after
    }

    /// Phase 5: a grant sent at `sent` becomes a lease if it is still
    /// surely valid once the store has made it durable (`replicaAcks`);
    /// `None`: it came too late, and the acquire goes on from its turns.
    async fn confirm(&mut self, fences: Vec<u64>, written: Vec<S::Written>, sent: Instant) -> Result<Option<Arc<LeaseShared<S>>>> {
        let core = self.core.clone();
        let in_time = || Instant::now() < valid_until(sent, core.lease());
        if in_time() {
            if let Some(request) = &self.request {
                request.leave();
            }
            if let Err(failure) = core.store().replicated(&self.claim, &written).await {
                // Given back before the caller hears of it, so that a retry
                // finds the key free (a failed give-back goes on in the
                // background).
                let _ = core.release(&self.claim, true).await;
                return Err(core.error(failure, "acquire"));
            }
            // Asked again: the replicas' acknowledgement may have taken what
            // was left of the lease.
            if in_time() {
                return register(&core, &self.keys, &self.claim, fences, sent).await.map(Some);
            }
            // Too late after all: the acquire goes on as from the start.
            if let Some(request) = &self.request {
                request.reopen(self.ticket);
            }
        }
        // The answer (or the replicas' acknowledgement) came after the
        // lease's local validity ran out (slower than leaseMs, or read late
        // by a busy thread): the lock may have expired and gone to another
        // owner already. Try again with the same token while the wait
        // lasts: the store grants a lock that carries it afresh.
        let why = if self.single_try {
            None
        } else {
            tokio::select! {
                biased;
                why = self.interrupts.next() => Some(why),
                _ = std::future::ready(()) => {
                    if let Some(request) = &self.request {
                        request.reopen(self.ticket);
                    }
                    // A grant handed over came without the turns.
                    if self.turns.len() < self.tickets.len() {
                        self.turns.clear();
                        self.places = Waiters::queue_all(&self.tickets);
                        self.places.reverse();
                    }
                    return Ok(None);
                }
            }
        };
        core.clean_up(self.claim.clone());
        let err = why.map_or_else(|| late_grant(S::NAME), |why| self.interrupts.error(why));
        Err(self.give_up(err))
    }

    /// A waiter's pause between two tries: until a wake-up of its keys, a
    /// delivery to its request, or `nap` (then the next try goes to the
    /// store whatever this process knows). When an interrupt comes first,
    /// the waiter gives up.
    async fn pause(&mut self, nap: Duration) -> Result<()> {
        self.napped = tokio::select! {
            biased;
            why = self.interrupts.next() => return Err(self.interrupted(why)),
            _ = woken(&self.tickets) => false,
            _ = changed(&self.request) => false,
            _ = tokio::time::sleep(nap) => true,
        };
        Ok(())
    }
}

/// A try refused because another call held a row lock of its keys
/// ([`Failure::Contended`]): the keys are busy, not the store down (a
/// policy falls back on `PROVIDER_FAILED`, never on contention). Nothing
/// was done, so the acquire keeps its `ticket`; a single try answers
/// `LOCK_BUSY`, a waiter waits on, and other calls leave its `request` to
/// its own tries until one answers (see [`Request::contended`]).
fn busy_if_contended<S: Store>(
    taken: Result<Taken<S::Written>, Failure>,
    ticket: u64,
    request: Option<&Request<S>>,
) -> Result<Taken<S::Written>, Failure> {
    let contended = matches!(taken, Err(Failure::Contended(_)));
    if let (Some(request), true) = (request, contended || taken.is_ok()) {
        request.contended(contended);
    }
    match taken {
        Err(Failure::Contended(_)) => Ok(Taken::Busy { retry: Retry::Contended, ticket }),
        taken => taken,
    }
}

/// The safety net's pause between two tries: with notifications, a long
/// one, unless the try was refused for another session's row lock, whose
/// end is never notified: then `pollIntervalMs`, not the notified
/// connection's longer `notifyPollIntervalMs` (a waiter paused that long on
/// a free key: review R11); not at once either, so that a release of this
/// process waiting for the refused try goes first (review R4).
fn poll_interval<S: Store>(core: &BackendCore<S>, retry: Retry) -> Duration {
    let ms = if retry != Retry::Contended && core.store().store_connection().is_notified() {
        core.options.notify_poll_interval_ms
    } else {
        core.options.poll_interval_ms
    };
    Duration::from_millis(ms.into())
}

/// Resolves at the next delivery to `request` (never without one).
async fn changed<S: Store>(request: &Option<Arc<Request<S>>>) {
    match request {
        Some(request) => request.changed().await,
        None => pending().await,
    }
}

/// Resolves at the next wake-up of any of the keys.
async fn woken<S: Store>(tickets: &[Ticket<S>]) {
    match tickets {
        [ticket] => ticket.woken().await,
        tickets => {
            let _ = futures_util::future::select_all(tickets.iter().map(|ticket| Box::pin(ticket.woken()))).await;
        }
    }
}

/// Registers a granted lease, or gives the lock back if `maxLeases` were
/// reached meanwhile.
async fn register<S: Store>(
    core: &Arc<BackendCore<S>>,
    keys: &[String],
    claim: &Arc<S::Claim>,
    fences: Vec<u64>,
    sent: Instant,
) -> Result<Arc<LeaseShared<S>>> {
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
            entry.insert(StoreLease::downgrade(&shared));
            Ok(shared)
        }
    };
    if registered.is_err() {
        let _ = core.release(claim, true).await;
    }
    registered
}

fn other_limit() -> LockError {
    LockError::new(
        ErrorCode::InvalidArgument,
        "the key is held or waited for with another limit: every caller of a key gives the same limit (a plain or shared acquire has limit 1)",
    )
}

/// A wait that ended while its try was still connecting to the store:
/// nothing was done, as when the connect fails (not `WAIT_TIMEOUT`, which
/// says the key stayed held).
/// `details.connecting`: the store may be slow to connect, not down, so a
/// policy does not fall back on it (see `policy::router`).
fn unreachable_within(store: &str, wait: Duration) -> LockError {
    LockError::new(
        ErrorCode::ProviderFailed,
        format!(
            "acquire: {store} could not be reached within waitTimeoutMs ({} ms): the connect was still under way (connectTimeoutMs bounds it)",
            wait.as_millis()
        ),
    )
    .with_details(serde_json::json!({ "connecting": true }))
}

fn late_grant(store: &str) -> LockError {
    LockError::new(
        ErrorCode::ProviderFailed,
        format!(
            "acquire: {store} granted the lock, but its answer (or the replicas' acknowledgement of replicaAcks) came after the lease's validity had run out; the lock is given back"
        ),
    )
}

pub(super) fn key_limit(max: u32) -> LockError {
    LockError::key_limit("maxLeases", max, "leases are")
}

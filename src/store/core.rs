//! The shared state of one store backend, and what every operation of it
//! does with the store: releasing by token, cleaning up after an unknown outcome,
//! releasing everything at close, counting and reporting. The public API
//! ([`super::backend`], [`super::lease`]) and one acquire's task
//! ([`super::acquire`]) build on it; it depends on none of them but the
//! lease's shared state it keeps track of.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

/// The first pause between two tries of a background clean-up; it doubles
/// up to [`CLEAN_UP_PAUSE_MAX`], so a server that is back is found soon and a
/// dead one costs a try a second.
const CLEAN_UP_PAUSE_MIN: Duration = Duration::from_millis(50);
const CLEAN_UP_PAUSE_MAX: Duration = Duration::from_secs(1);

use futures_util::stream::{FuturesUnordered, StreamExt};
use slab::Slab;
use tokio::sync::{watch, Notify};

use super::handoff::Grant;
use super::lease::LeaseShared;
use super::runtime::Spawner;
use super::waiters::{Picked, Waiters};
use super::{Claim, Failure, Freed, Store, Taken, Terms};
use crate::error::{ErrorCode, LockError, Result};
use crate::holder::HolderLabel;
use crate::log::{Level, LogRecord, Logger};
use crate::options::StoreOptions;
use crate::telemetry::{Reporter, Telemetry};

pub(crate) struct BackendCore<S: Store> {
    pub(super) name: String,
    pub(super) options: StoreOptions,
    /// The label in this backend's owner tokens (see [`crate::holder`]).
    pub(super) holder: HolderLabel,
    pub(super) store: S,
    spawner: Spawner,
    logger: Logger,
    pub(super) reporter: Reporter,
    pub(super) in_progress: AtomicUsize,
    /// Give-backs of acquires that ended, still on their way to the store
    /// (see [`Unsettled`]).
    in_background: AtomicUsize,
    /// Told when the last acquire in progress, or the last give-back in the
    /// background, ends.
    pub(super) settled: Notify,
    pub(super) acquired: AtomicU64,
    pub(super) timed_out: AtomicU64,
    pub(super) lost: AtomicU64,
    held: Mutex<Slab<Weak<LeaseShared<S>>>>,
    pub(super) closed: watch::Sender<bool>,
}

impl<S: Store> BackendCore<S> {
    pub fn new(
        name: &str,
        options: StoreOptions,
        holder: HolderLabel,
        store: S,
        spawner: Spawner,
        logger: Logger,
        telemetry: Option<Telemetry>,
    ) -> Self {
        let reporter = Reporter::new(telemetry, name, S::DRIVER, options.thresholds);
        BackendCore {
            name: name.to_owned(),
            options,
            holder,
            store,
            spawner,
            logger,
            reporter,
            in_progress: AtomicUsize::new(0),
            in_background: AtomicUsize::new(0),
            settled: Notify::new(),
            acquired: AtomicU64::new(0),
            timed_out: AtomicU64::new(0),
            lost: AtomicU64::new(0),
            held: Mutex::new(Slab::new()),
            closed: watch::channel(false).0,
        }
    }

    pub fn lease(&self) -> Duration {
        Duration::from_millis(self.options.lease_ms.into())
    }

    /// What this backend's grants are written with (see [`Terms`]).
    pub fn terms(&self) -> Terms {
        Terms { lease_ms: self.options.lease_ms.into(), retention_ms: self.options.fence_retention_ms.into() }
    }

    pub fn spawner(&self) -> &Spawner {
        &self.spawner
    }

    pub fn store(&self) -> &S {
        &self.store
    }

    pub fn waiters(&self) -> &Waiters<S> {
        self.store.waiters()
    }

    pub(super) fn held(&self) -> MutexGuard<'_, Slab<Weak<LeaseShared<S>>>> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Removes a released lease from the held set.
    pub fn forget(&self, slot: usize) {
        self.held().try_remove(slot);
    }

    /// Gives back every key of `claim` that carries its token, tells
    /// waiters in every process, and wakes this process's next waiters. A
    /// kinds lease hands what it frees to this process's next waiters in
    /// the same call when the store can (see [`super::handoff`] and
    /// [`Store::hands_over`]); a hand-over refused for contention
    /// ([`Failure::Contended`]) gives the keys back plainly instead.
    async fn delete_if_ours(self: &Arc<Self>, claim: &S::Claim) -> Result<Freed, Failure> {
        let mut candidates = Vec::new();
        let mut _held_back = None;
        if !claim.is_plain() && self.store.hands_over() {
            let trying;
            (candidates, trying) = self.waiters().candidates(claim);
            // A head's own try in flight went out before this release, so
            // it cannot see the units freed here, and handing them past it
            // would overtake it; a plain release would leave it to retry
            // after a wake-up (and every release meanwhile to do the same).
            // Its answer comes within a round trip: hand on after it. Its
            // next try waits for this release's call to answer.
            if let (true, Some(head)) = (candidates.is_empty(), trying) {
                _held_back = Some(head.hold_back());
                head.untried().await;
                candidates = self.waiters().candidates(claim).0;
            }
        }
        if candidates.is_empty() {
            return self.store.give_back(claim).await;
        }
        let requests: Vec<(&S::Claim, u64)> = candidates.iter().map(|(request, ticket)| (&*request.claim, *ticket)).collect();
        let sent = Instant::now();
        match self.store.hand_over(Some(claim), &requests, 0).await {
            Ok(handed) => {
                // A first attempt whose answer was lost may have granted the
                // requests a retry then found not granted: they are told the
                // outcome is unknown, so that one that gave up meanwhile has
                // its grant given back.
                let answered = handed.freed.first_attempt_lost.is_none();
                self.deliver(&candidates, handed.taken.into_iter(), sent, answered);
                for (name, _) in claim.names().zip(&handed.wake).filter(|(_, wake)| **wake) {
                    self.waiters().wake(name);
                }
                Ok(handed.freed)
            }
            // The row the call waited for may be a waiter's other key, one
            // this release does not hold: waiting it out would keep the
            // released keys, and the clean-up would wait for it again. The
            // call was rolled back whole (nothing granted, nothing freed),
            // so the keys are given back plainly, which wakes the waiters
            // as any give-back does, and the waiters go on waiting. They
            // are told only after the give-back: told at once, one would
            // try by itself meanwhile, and its try holds a released key's
            // row while it waits for that other key, holding the give-back
            // up in turn. No other call takes them until their own tries
            // answer (see `deliver_contended`).
            Err(Failure::Contended(_)) => {
                let freed = self.store.give_back(claim).await;
                self.deliver_contended(&candidates, sent);
                freed
            }
            Err(failure) => {
                self.deliver(&candidates, std::iter::empty(), sent, !failure.is_unknown());
                for name in claim.names() {
                    self.waiters().wake(name);
                }
                Err(failure)
            }
        }
    }

    /// Delivers the outcome of one call to the `requests` it took, in
    /// order (`taken`: what each found, as far as the call went; `answered`
    /// false when its outcome is unknown). A grant whose acquire gave up
    /// meanwhile is given back, and so is any grant of its token an
    /// unanswered call may have made.
    pub(super) fn deliver(
        self: &Arc<Self>,
        requests: &[Picked<S>],
        mut taken: impl Iterator<Item = Taken<S::Written>>,
        sent: Instant,
        answered: bool,
    ) {
        for (request, _) in requests {
            let grant = match taken.next() {
                Some(Taken::Granted { fences, written }) => Some(Grant { fences, written, sent }),
                _ => None,
            };
            match request.deliver(grant, answered) {
                Ok(()) => {}
                Err(Some(_)) => self.release_in_background(request.claim.clone()),
                Err(None) => self.clean_up(request.claim.clone()),
            }
        }
    }

    /// Tells the `requests` of a call refused for a row lock held elsewhere
    /// ([`Failure::Contended`]) that nothing was granted. Which request's
    /// key the lock was on is unknown, so each is left to its own try (see
    /// [`super::handoff::Request::contended`]): taken into the next
    /// release's (or head's) call, it would have that call wait out the
    /// same lock, a whole lock wait, before the caller's own keys are done.
    pub(super) fn deliver_contended(self: &Arc<Self>, requests: &[Picked<S>], sent: Instant) {
        for (request, _) in requests {
            request.contended(true);
        }
        self.deliver(requests, std::iter::empty(), sent, true);
    }

    /// Releases a lease: `LEASE_LOST` if some key no longer carried its
    /// token; after an unanswered command a best-effort cleanup follows.
    /// `valid_when_called`: the lease's local validity had not run out when
    /// its release was called.
    pub async fn release(self: &Arc<Self>, claim: &Arc<S::Claim>, valid_when_called: bool) -> Result<()> {
        match self.delete_if_ours(claim).await {
            Ok(Freed { all: true, .. }) => Ok(()),
            // The first attempt was lost with its connection and may have
            // deleted the key itself.
            Ok(Freed { first_attempt_lost: Some(cause), .. }) => Err(self.error(Failure::Unknown(cause), "release")),
            // Answered by a second attempt after the first was refused for
            // a row lock, by a lease still valid when its release was
            // called: it ran out during the release, after the section, so
            // the caller hears the refusal, as without the second attempt
            // (review R44). One that had run out before may have been
            // taken over meanwhile: lost (review R46).
            Ok(Freed { refused_first: Some(cause), .. }) if valid_when_called => Err(self.error(Failure::Contended(cause), "release")),
            Ok(_) => Err(LockError::lease_lost()),
            // Whether or not the command ran, the lock may still be ours in
            // the store, and this lease is released for its holder: keep trying.
            Err(failure) => {
                self.clean_up(claim.clone());
                Err(self.error(failure, "release"))
            }
        }
    }

    /// The error a caller of `what` sees for `failure`.
    pub fn error(&self, failure: Failure, what: &str) -> LockError {
        failure.into_error(S::NAME, what)
    }

    /// Releases a dropped lease; nobody awaits the outcome.
    pub fn release_in_background(self: &Arc<Self>, claim: Arc<S::Claim>) {
        let unsettled = Unsettled::new(self.clone());
        self.spawner.handle().spawn(async move {
            let _ = unsettled.0.release(&claim, true).await;
        });
    }

    /// Takes back the waiting marks of an acquire that stopped waiting, in
    /// the background.
    pub fn withdraw_in_background(self: &Arc<Self>, claim: Arc<S::Claim>, ticket: u64) {
        let unsettled = Unsettled::new(self.clone());
        self.spawner.handle().spawn(async move { unsettled.0.store.withdraw(&claim, ticket).await });
    }

    /// Deletes the lock of `token` in the background, once the store can be
    /// reached: after a command whose outcome is unknown, a grant that came
    /// too late or too weakly replicated, a release that failed. Tries with
    /// a growing pause until the store answers (it deleted the lock, or the lock
    /// is not ours) or the lock would have expired by itself (`leaseMs`, and
    /// a command timeout for a command of ours still on its way: the
    /// claim's own `leaseMs`, which a hand-over granted it with whatever
    /// backend cleans up); after an answer that found nothing, once more a
    /// command timeout later, in case a command of ours still on its way
    /// takes the lock after all.
    pub fn clean_up(self: &Arc<Self>, claim: Arc<S::Claim>) {
        let core = self.clone();
        self.spawner.handle().spawn(async move {
            let command_timeout = core.store.store_connection().command_timeout();
            let give_up = Instant::now() + Duration::from_millis(claim.terms().lease_ms) + command_timeout;
            let mut pause = CLEAN_UP_PAUSE_MIN;
            let mut found_nothing = false;
            loop {
                match core.delete_if_ours(&claim).await {
                    Ok(freed) if freed.all || found_nothing => return,
                    Ok(_) => {
                        found_nothing = true;
                        tokio::time::sleep(command_timeout).await;
                        continue;
                    }
                    Err(_) if core.store.store_connection().is_shut_down() || Instant::now() + pause >= give_up => return,
                    Err(_) => {}
                }
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(CLEAN_UP_PAUSE_MAX);
            }
        });
    }

    /// Resolves once no acquire is in progress and no give-back of one that
    /// ended is still under way.
    pub(super) async fn acquires_settled(&self) {
        loop {
            let settled = self.settled.notified();
            tokio::pin!(settled);
            // Registered before the count is read, so a last acquire ending
            // in between is not missed.
            settled.as_mut().enable();
            if self.in_progress.load(Ordering::SeqCst) == 0 && self.in_background.load(Ordering::SeqCst) == 0 {
                return;
            }
            settled.await;
        }
    }

    /// Acquires in progress and give-backs under way, for close's report.
    pub(super) fn unsettled(&self) -> usize {
        self.in_progress.load(Ordering::SeqCst) + self.in_background.load(Ordering::SeqCst)
    }

    /// Close: release every held lease by `deadline`. A lease that had
    /// already expired is not a failure; one the store did not confirm is. The
    /// releases run where close runs (the host's thread or the runtime).
    pub(super) async fn release_all(self: &Arc<Self>, deadline: tokio::time::Instant) {
        let leases: Vec<Arc<LeaseShared<S>>> = self.held().iter().filter_map(|(_, weak)| weak.upgrade()).collect();
        let mut releases: FuturesUnordered<_> = leases
            .into_iter()
            .filter(|lease| lease.take_at_close())
            .map(|lease| async move {
                lease.hold_ended(None);
                let released = self.delete_if_ours(lease.claim()).await;
                lease.unhold();
                released.map(|_| ())
            })
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
            self.log(
                Level::Error,
                "CLEANUP_TIMEOUT",
                format!("{left} of {total} leases were not released within shutdownTimeoutMs; they expire after leaseMs"),
            );
        }
        if failed > 0 {
            self.log(
                Level::Error,
                "CLEANUP_FAILED",
                format!("{failed} of {total} leases could not be released; they expire after leaseMs"),
            );
        }
    }

    /// Counts and reports a lease found lost (once per lease, by the caller).
    pub fn report_lost(&self, code: ErrorCode) {
        self.lost.fetch_add(1, Ordering::Relaxed);
        self.reporter.lost(code);
    }

    pub(super) fn log(&self, level: Level, code: &'static str, message: String) {
        (self.logger)(&LogRecord { level, backend: self.name.clone(), code, message });
    }
}

/// Counts a give-back in the background (the lease of an acquire that
/// ended, or the waiting marks it left) until it is done: close waits for it
/// as for an acquire in progress. Otherwise close shuts the connection down
/// under it, and a mark left in the store refuses other processes' tries
/// until it expires (`waitTimeoutMs` later), a lease until `leaseMs`.
struct Unsettled<S: Store>(Arc<BackendCore<S>>);

impl<S: Store> Unsettled<S> {
    fn new(core: Arc<BackendCore<S>>) -> Self {
        core.in_background.fetch_add(1, Ordering::SeqCst);
        Unsettled(core)
    }
}

impl<S: Store> Drop for Unsettled<S> {
    fn drop(&mut self) {
        if self.0.in_background.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.settled.notify_waiters();
        }
    }
}

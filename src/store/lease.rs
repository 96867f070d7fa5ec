//! A held lease of a store driver.
//!
//! Validity is a conservative local estimate on the monotonic clock: a
//! lease acquired (or renewed) by a command sent at `t` is valid until
//! `t + leaseMs - drift`, with `drift = leaseMs / 100 + 2 ms`. Measuring from
//! the send (not the reply) covers the round trip; the drift allowance
//! covers the server's clock running up to 1% fast relative to ours, as
//! a store's own expiry precision is about a millisecond. The estimate can say
//! "invalid" while the store still holds our token, never the reverse, unless the
//! clocks drift more than that or the server loses the key (restart without
//! persistence, failover to a replica that missed the write, eviction).

use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};
use std::time::{Duration, Instant};

use super::core::BackendCore;
use super::runtime::DriverRuntime;
use super::{Claim, Store};
use crate::error::{ErrorCode, Result};
use crate::telemetry::Hold;

/// A lease on one key (or several at once) held through a store:
/// exclusive, shared or some units of a counted key. Dropping it releases
/// it in the background (best effort); call [`StoreLease::release`] to
/// learn whether the section held its keys throughout.
pub struct StoreLease<S: Store> {
    shared: Arc<LeaseShared<S>>,
    _runtime: Arc<DriverRuntime>,
}

/// What the acquire task hands over; dropped unclaimed (the acquire was
/// cancelled after the grant) it releases the lock.
pub(crate) struct LeaseShared<S: Store> {
    core: Arc<BackendCore<S>>,
    /// The user keys, in the caller's order.
    keys: Box<[Box<str>]>,
    /// The fence of each key, in the same order.
    fences: Box<[u64]>,
    claim: Arc<S::Claim>,
    slot: usize,
    /// The hold as telemetry reports it; set by the acquire once it has
    /// reported the grant, which comes after the lease is registered.
    hold: OnceLock<Hold>,
    state: Mutex<State>,
}

struct State {
    /// False once released (by the user, by close, or on drop).
    held: bool,
    /// Released by its backend's close, not by its owner: lost to a
    /// section still running (see [`super::KeepAlive`]).
    taken_by_close: bool,
    /// End of the local validity estimate.
    valid_until: Instant,
    /// Already counted as lost.
    lost: bool,
    /// A renewal went unanswered and a cleanup by token is scheduled: the
    /// lease may never be renewed again, or the cleanup would delete it
    /// under a holder that believes it valid.
    abandoned: bool,
}

impl State {
    /// Held, and no unanswered renewal has scheduled its cleanup.
    fn renewable(&self) -> bool {
        self.held && !self.abandoned
    }
}

/// The part of the drift allowance that scales with the lease.
const DRIFT_PER_LEASE: u32 = 100;
/// The fixed part of the drift allowance.
const DRIFT_FIXED: Duration = Duration::from_millis(2);

/// How long a lease acquired by a command sent at `sent` is surely ours.
pub(crate) fn valid_until(sent: Instant, lease: Duration) -> Instant {
    let drift = lease / DRIFT_PER_LEASE + DRIFT_FIXED;
    sent + lease.saturating_sub(drift)
}

impl<S: Store> LeaseShared<S> {
    pub fn new(core: Arc<BackendCore<S>>, keys: &[String], claim: Arc<S::Claim>, fences: Vec<u64>, sent: Instant, slot: usize) -> Self {
        let valid_until = valid_until(sent, core.lease());
        if !claim.is_plain() {
            core.waiters().hold(&claim, true);
        }
        LeaseShared {
            core,
            keys: keys.iter().map(|key| key.as_str().into()).collect(),
            fences: fences.into(),
            claim,
            slot,
            hold: OnceLock::new(),
            state: Mutex::new(State { held: true, taken_by_close: false, valid_until, lost: false, abandoned: false }),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Marks the lease released; true if it was held. Called once per lease
    /// by whoever releases it (user, close, drop).
    pub fn take(&self) -> bool {
        self.take_as(false)
    }

    /// [`LeaseShared::take`] by the backend's close.
    pub fn take_at_close(&self) -> bool {
        self.take_as(true)
    }

    fn take_as(&self, by_close: bool) -> bool {
        let mut state = self.state();
        let was_held = state.held;
        state.held = false;
        state.taken_by_close |= was_held && by_close;
        drop(state);
        if was_held {
            self.core.forget(self.slot);
        }
        was_held
    }

    /// Stops counting a taken lease against its keys (see
    /// [`super::waiters::Waiters::hold`]). Called once its release call has
    /// answered: until then this process's waiters wait to be handed what
    /// it frees rather than try for it.
    pub fn unhold(&self) {
        if !self.claim.is_plain() {
            self.core.waiters().hold(&self.claim, false);
        }
    }

    /// Counts the lease as lost, once; its hold ends with `code`.
    fn lost(&self, code: ErrorCode) {
        let first = !std::mem::replace(&mut self.state().lost, true);
        if first {
            self.hold_ended(Some(code));
            self.core.report_lost(code);
        }
    }

    /// The fence of the first key.
    pub fn fence(&self) -> u64 {
        self.fences[0]
    }

    /// Starts the hold's report (once, by the acquire that granted it).
    pub fn hold_begins(&self, hold: Hold) {
        let _ = self.hold.set(hold);
    }

    /// Reports the end of the hold (the first only; `None`: released).
    pub fn hold_ended(&self, outcome: Option<ErrorCode>) {
        if let Some(hold) = self.hold.get() {
            self.core.reporter.hold_ended(hold, outcome);
        }
    }

    pub fn claim(&self) -> &Arc<S::Claim> {
        &self.claim
    }
}

impl<S: Store> Drop for LeaseShared<S> {
    fn drop(&mut self) {
        if self.take() {
            self.unhold();
            self.core.release_in_background(self.claim.clone());
        }
        // Released now, or before by a path that reported it already.
        self.hold_ended(None);
    }
}

impl<S: Store> StoreLease<S> {
    pub(crate) fn new(shared: Arc<LeaseShared<S>>, runtime: Arc<DriverRuntime>) -> Self {
        StoreLease { shared, _runtime: runtime }
    }

    pub(crate) fn downgrade(shared: &Arc<LeaseShared<S>>) -> Weak<LeaseShared<S>> {
        Arc::downgrade(shared)
    }

    /// The key this lease is on (of a lease over several keys, the first
    /// the caller gave).
    pub fn key(&self) -> &str {
        &self.shared.keys[0]
    }

    /// Every key this lease holds, in the caller's order.
    pub fn keys(&self) -> Vec<&str> {
        self.shared.keys.iter().map(|key| &**key).collect()
    }

    /// The fence of each key, in the order of [`StoreLease::keys`].
    pub fn fences(&self) -> Vec<(&str, u64)> {
        self.shared.keys.iter().map(|key| &**key).zip(self.shared.fences.iter().copied()).collect()
    }

    /// Renews the lease every `every` (`None`: never, only watching it) on
    /// the driver's runtime until the returned guard is dropped; `on_lost`
    /// is aborted the moment the lease is known lost, or its backend starts
    /// closing (see [`KeepAlive`](super::KeepAlive)).
    /// Renewals stop by themselves once the lease is released or dropped.
    pub fn keep_alive(&self, every: Option<Duration>, on_lost: crate::abort::AbortController) -> super::keep_alive::KeepAlive {
        let weak = Arc::downgrade(&self.shared);
        let runtime = self._runtime.clone();
        let renewer = move || weak.upgrade().map(|shared| StoreLease { shared, _runtime: runtime.clone() });
        let closed = self.shared.core.closed.subscribe();
        super::keep_alive::KeepAlive::start(self.shared.core.spawner().handle(), renewer, every, closed, on_lost)
    }

    /// True until released (by its owner, by close, or on drop).
    pub(crate) fn is_held(&self) -> bool {
        self.shared.state().held
    }

    /// Held, or released by its backend's close rather than by its owner.
    pub(crate) fn held_until_close(&self) -> bool {
        let state = self.shared.state();
        state.held || state.taken_by_close
    }

    pub(crate) fn report_lost(&self, code: ErrorCode) {
        self.shared.lost(code);
    }

    /// The fencing token (of a lease over several keys, that of
    /// [`StoreLease::key`]): larger than that of every earlier lease on this
    /// key and namespace, shared or not, in every process, across server
    /// restarts (see the driver's take operation).
    pub fn fence(&self) -> u64 {
        self.shared.fence()
    }

    /// True while the lease is held and the local estimate says it has not
    /// expired (see the module docs).
    pub fn is_valid(&self) -> bool {
        !self.remaining().is_zero()
    }

    /// Time left by the local estimate; zero once invalid.
    pub fn remaining(&self) -> Duration {
        let state = self.shared.state();
        if state.held {
            state.valid_until.saturating_duration_since(Instant::now())
        } else {
            Duration::ZERO
        }
    }

    /// Extends the lease (every key of it; a shared or counted holder only
    /// itself) to `leaseMs` from now if the store still carries our token: false
    /// when some key does not (expired or taken over), when the lease was
    /// released, or once a renewal ended `OUTCOME_UNKNOWN` (the lease is
    /// then invalid for good and released by token in the background).
    pub async fn renew(&self) -> Result<bool> {
        if !self.shared.state().renewable() {
            return Ok(false);
        }
        let shared = self.shared.clone();
        self.shared
            .core
            .spawner()
            .run(async move {
                let core = shared.core.clone();
                let sent = Instant::now();
                let outcome = core.store().extend(&shared.claim).await;
                let outcome = match outcome {
                    Ok((true, written)) => core.store().replicated(&shared.claim, &written).await.map(|()| true),
                    Ok((false, _)) => Ok(false),
                    Err(failure) => Err(failure),
                };
                let mut state = shared.state();
                match outcome {
                    Ok(true) if state.renewable() => {
                        state.valid_until = valid_until(sent, core.lease());
                        Ok(true)
                    }
                    Ok(_) => {
                        let was_renewable = state.renewable();
                        state.valid_until = Instant::now();
                        drop(state);
                        if was_renewable {
                            shared.lost(ErrorCode::LeaseLost);
                        }
                        Ok(false)
                    }
                    Err(failure) => {
                        if failure.is_unknown() {
                            state.valid_until = Instant::now();
                            state.abandoned = true;
                            drop(state);
                            shared.lost(ErrorCode::OutcomeUnknown);
                            core.clean_up(shared.claim.clone());
                        }
                        Err(core.error(failure, "renew"))
                    }
                }
            })
            .await
    }

    /// Releases the lease: true when the store still carried our token and it is
    /// now deleted (waiters in every process are told), false when this
    /// lease was already released (by an earlier call or by close).
    /// `LEASE_LOST` when some key no longer carried our token: the lease had
    /// expired or was taken over, so the section may have overlapped another
    /// holder (the keys that still carried it are released all the same).
    pub async fn release(&self) -> Result<bool> {
        let valid = self.is_valid();
        if !self.shared.take() {
            return Ok(false);
        }
        let shared = self.shared.clone();
        let outcome = self
            .shared
            .core
            .spawner()
            .run(async move {
                let outcome = shared.core.release(shared.claim(), valid).await;
                shared.unhold();
                outcome
            })
            .await;
        if let Some(hold) = self.shared.hold.get() {
            self.shared.core.reporter.released(hold, outcome.as_ref().err().map(|err| err.code()));
        }
        match &outcome {
            Err(err) if matches!(err.code(), ErrorCode::LeaseLost | ErrorCode::OutcomeUnknown) => self.shared.lost(err.code()),
            _ => {}
        }
        outcome.map(|()| true)
    }
}

impl<S: Store> std::fmt::Debug for StoreLease<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // No key: keys may carry user data.
        f.debug_struct("StoreLease").field("fences", &self.shared.fences).finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validity_subtracts_one_percent_and_two_milliseconds() {
        let sent = Instant::now();
        assert_eq!(valid_until(sent, Duration::from_millis(10_000)), sent + Duration::from_millis(9_898));
        assert_eq!(valid_until(sent, Duration::from_millis(10)), sent + Duration::from_micros(7_900));
    }
}

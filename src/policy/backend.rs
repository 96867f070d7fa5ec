//! The policy backend of the Rust (and C) surface: the router's attempt,
//! driven over the provider's own member backends.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::router::{Acquisition, KeyStatus, MemberStatus, Next, Placement, Router, Step};
use crate::abort::{sleep_unless_aborted, AbortSignal};
use crate::acquire::AcquireOptions;
use crate::error::{ErrorCode, LockError, Result};
use crate::force_release::ForcedRelease;
use crate::inspect::Inspection;
use crate::provider::{Backend, Lease};
use crate::status::LeaseCounts;

/// A `driver: policy` backend. Cheap to clone.
#[derive(Clone, Debug)]
pub struct PolicyBackend {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    router: Arc<Router>,
    /// The member backends, in the router's member order.
    members: Vec<Backend>,
    counts: Arc<Counts>,
}

#[derive(Debug, Default)]
struct Counts {
    held: AtomicUsize,
    waiting: AtomicUsize,
    acquired: AtomicU64,
    timed_out: AtomicU64,
}

impl PolicyBackend {
    /// A policy over `members` (in `router`'s member order).
    pub(crate) fn new(router: Router, members: Vec<Backend>) -> PolicyBackend {
        PolicyBackend { inner: Arc::new(Inner { router: Arc::new(router), members, counts: Arc::default() }) }
    }

    /// Acquires `key` on the first member its rule allows that can serve.
    pub async fn acquire(&self, key: &str, options: AcquireOptions) -> Result<PolicyLease> {
        self.acquire_many(&[key], options).await
    }

    /// Acquires every key of `keys` as one lease on one member; the keys
    /// must fall under one rule.
    pub async fn acquire_many(&self, keys: &[&str], options: AcquireOptions) -> Result<PolicyLease> {
        let inner = &self.inner;
        let rule = inner.router.rule_of_all(keys)?;
        let counts = &inner.counts;
        counts.waiting.fetch_add(1, Ordering::Relaxed);
        let outcome = self.serve(rule, keys, options).await;
        counts.waiting.fetch_sub(1, Ordering::Relaxed);
        match &outcome {
            Ok(_) => {
                counts.acquired.fetch_add(1, Ordering::Relaxed);
                counts.held.fetch_add(1, Ordering::Relaxed);
            }
            Err(error) if error.code() == ErrorCode::WaitTimeout => {
                counts.timed_out.fetch_add(1, Ordering::Relaxed);
            }
            Err(_) => {}
        }
        outcome
    }

    async fn serve(&self, rule: usize, keys: &[&str], mut options: AcquireOptions) -> Result<PolicyLease> {
        let inner = &self.inner;
        // One wait across every member tried: a fallback uses what is left.
        let wait = options.wait_timeout.unwrap_or_else(|| inner.router.wait_timeout());
        // A wait too long to add to the clock has no deadline, as the members take it.
        let deadline = Instant::now().checked_add(wait);
        let mut attempt = inner.router.attempt(rule, keys);
        loop {
            let member = match attempt.next_member() {
                Next::Member(member) => member,
                Next::Refused => break,
                Next::Pause(pause) => {
                    if options.signal.as_ref().is_some_and(AbortSignal::is_aborted) {
                        return Err(LockError::aborted());
                    }
                    let left = deadline.map_or(pause, |deadline| deadline.saturating_duration_since(Instant::now()));
                    if left.is_zero() {
                        break;
                    }
                    if sleep_unless_aborted(pause.min(left), options.signal.as_ref()).await {
                        return Err(LockError::aborted());
                    }
                    continue;
                }
            };
            options.wait_timeout = Some(deadline.map_or(wait, |deadline| deadline.saturating_duration_since(Instant::now()).min(wait)));
            let backend = &inner.members[member];
            // Boxed: a member is a `Backend`, whose acquire may be a policy's (the options forbid it, the types do not).
            let tried = if keys.len() == 1 {
                Box::pin(backend.acquire(keys[0], options.clone())).await
            } else {
                Box::pin(backend.acquire_many(keys, options.clone())).await
            };
            match tried {
                Ok(lease) => {
                    let (served, placement) = attempt.served(member);
                    let placement = std::sync::Mutex::new(Some(placement));
                    return Ok(PolicyLease {
                        lease,
                        backend: backend.clone(),
                        served,
                        placement,
                        counts: inner.counts.clone(),
                        counted: true.into(),
                    });
                }
                Err(error) => {
                    if attempt.failed(member, &error) == Step::Stop {
                        return Err(error);
                    }
                }
            }
        }
        Err(attempt.refusal())
    }

    /// What the members its rule allows hold of `key` (see
    /// [`Backend::inspect`]), chosen by [`inspection_choice`].
    pub async fn inspect(&self, key: &str) -> Result<Inspection> {
        let inner = &self.inner;
        let rule = &inner.router.rules()[inner.router.rule_of(key)];
        let mut answers = Vec::with_capacity(rule.members.len());
        for &member in &rule.members {
            answers.push(inner.members[member].inspect(key).await);
        }
        let found: Vec<Option<Found>> = answers.iter().map(|answer| answer.as_ref().ok().map(Found::of)).collect();
        match inspection_choice(&found) {
            Some(chosen) => answers.swap_remove(chosen),
            None => Err(LockError::new(ErrorCode::NoEligibleBackend, "inspect: the key's rule allows no member")),
        }
    }

    /// Breaks `key` on every member its rule allows (see
    /// [`Backend::force_release`]), each tried whatever the others
    /// answered, combined by [`forced_release_of`]. A member that failed
    /// fails the call, after the others were broken.
    pub async fn force_release(&self, key: &str) -> Result<ForcedRelease> {
        let inner = &self.inner;
        let rule = &inner.router.rules()[inner.router.rule_of(key)];
        let mut answers = Vec::with_capacity(rule.members.len());
        for &member in &rule.members {
            answers.push(inner.members[member].force_release(key).await);
        }
        let broken = answers.into_iter().collect::<Result<Vec<_>>>()?;
        forced_release_of(broken)
            .ok_or_else(|| LockError::new(ErrorCode::NoEligibleBackend, "forceRelease: the key's rule allows no member"))
    }

    /// What the policy says of `key`: its rule and its last acquisition.
    pub fn key_status(&self, key: &str) -> KeyStatus {
        self.inner.router.key_status(key)
    }

    /// Each member's counts and whether it is skipped now.
    pub fn members(&self) -> Vec<MemberStatus> {
        self.inner.router.member_status()
    }

    /// This backend's own counts: its acquires, not its members'.
    pub fn counts(&self) -> LeaseCounts {
        let counts = &self.inner.counts;
        LeaseCounts {
            held: counts.held.load(Ordering::Relaxed),
            held_shared: 0,
            waiting: counts.waiting.load(Ordering::Relaxed),
            acquired: counts.acquired.load(Ordering::Relaxed),
            timed_out: counts.timed_out.load(Ordering::Relaxed),
            lost: 0,
        }
    }

    /// The router, for surfaces that drive members of their own.
    pub fn router(&self) -> &Arc<Router> {
        &self.inner.router
    }
}

/// A lease a policy backend got from one of its members: it stays on that
/// member for its whole life (renew, release, loss).
#[derive(Debug)]
pub struct PolicyLease {
    lease: Lease,
    backend: Backend,
    served: Acquisition,
    /// Its keys on its member, until it is released (or dropped).
    placement: std::sync::Mutex<Option<Placement>>,
    counts: Arc<Counts>,
    /// Still counted as held by the policy (until released or dropped).
    counted: std::sync::atomic::AtomicBool,
}

impl PolicyLease {
    /// The member's lease.
    pub fn lease(&self) -> &Lease {
        &self.lease
    }

    /// The member backend that granted it.
    pub fn backend(&self) -> &Backend {
        &self.backend
    }

    /// Which member served it, its driver and tier, whether it fences, when.
    pub fn served(&self) -> &Acquisition {
        &self.served
    }

    /// Releases it on its member.
    pub async fn release(&self) -> Result<bool> {
        let released = self.lease.release().await;
        if matches!(released, Ok(true)) {
            self.uncount();
        }
        // Held no more: its keys may go to any member. After a failure
        // whose outcome is unknown it may still hold them, until it expires.
        if released.is_ok() || released.as_ref().is_err_and(|error| error.code() == ErrorCode::LeaseLost) {
            self.placement.lock().unwrap_or_else(|e| e.into_inner()).take();
        }
        released
    }

    fn uncount(&self) {
        if self.counted.swap(false, Ordering::Relaxed) {
            self.counts.held.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Renews it on its member.
    pub async fn renew(&self) -> Result<bool> {
        self.lease.renew().await
    }

    /// How often `with_lock` renews it: its member's interval.
    pub fn auto_renew_every(&self) -> Option<Duration> {
        self.backend.auto_renew_every()
    }
}

impl Drop for PolicyLease {
    fn drop(&mut self) {
        self.uncount();
    }
}

/// What one member of a policy found of a key (see [`inspection_choice`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Found {
    /// Nobody holds or waits for the key there.
    Free,
    /// Acquires wait for it there, nobody holds it.
    Waited,
    /// Someone holds it there.
    Held,
}

impl Found {
    /// What `inspection` says.
    pub fn of(inspection: &Inspection) -> Found {
        match (inspection.is_held(), inspection.waiting > 0) {
            (true, _) => Found::Held,
            (false, true) => Found::Waited,
            (false, false) => Found::Free,
        }
    }
}

/// A policy's forced release, from each member's in the rule's order: the
/// holders removed in all, the highest fence raised, and the first member
/// that had a holder (else the first). `None` for a rule without members.
/// Every surface's policy combines them by this.
pub fn forced_release_of(broken: Vec<ForcedRelease>) -> Option<ForcedRelease> {
    let first = broken.iter().position(|forced| forced.removed > 0).unwrap_or(0);
    Some(ForcedRelease {
        backend: broken.get(first)?.backend.clone(),
        removed: broken.iter().map(|forced| forced.removed).sum(),
        fence: broken.iter().filter_map(|forced| forced.fence).max(),
    })
}

/// Which of a policy's members answers its `inspect`, from each member's
/// answer in the rule's order (`None`: it failed): the first where the key
/// is held; else the first failure (a member that cannot be read may hold
/// it: no answer says it is free); else the first where acquires wait;
/// else the first. `None` for a rule without members. Every surface's
/// policy chooses by this.
pub fn inspection_choice(answers: &[Option<Found>]) -> Option<usize> {
    let first = |wanted: &dyn Fn(&Option<Found>) -> bool| answers.iter().position(wanted);
    first(&|answer| *answer == Some(Found::Held))
        .or_else(|| first(&|answer| answer.is_none()))
        .or_else(|| first(&|answer| *answer == Some(Found::Waited)))
        .or_else(|| (!answers.is_empty()).then_some(0))
}

#[cfg(test)]
mod tests {
    use super::inspection_choice;

    #[test]
    fn an_inspection_comes_from_a_member_that_holds_else_a_failure_else_one_with_waiters() {
        use super::Found::{Free, Held, Waited};
        assert_eq!(inspection_choice(&[Some(Waited), Some(Held), None]), Some(1));
        assert_eq!(inspection_choice(&[Some(Free), None, Some(Waited)]), Some(1));
        assert_eq!(inspection_choice(&[Some(Free), Some(Waited)]), Some(1));
        assert_eq!(inspection_choice(&[Some(Free), Some(Free)]), Some(0));
        assert_eq!(inspection_choice(&[]), None);
    }
}

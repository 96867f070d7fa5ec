//! `with_lock`: acquire, run a section, release, in all cases; the leases
//! of store drivers (redis) are renewed automatically while the section runs.

use std::future::Future;

use crate::abort::AbortSignal;
use crate::acquire::AcquireOptions;
use crate::error::{LockError, Result};
use crate::provider::{Backend, Lease};
#[cfg(any(feature = "redis", feature = "postgres", feature = "mysql"))]
use crate::store::KeepAlive;

/// Options of [`Backend::with_lock`].
#[derive(Clone)]
pub struct WithLockOptions {
    /// How to wait for the key.
    pub acquire: AcquireOptions,
    /// Renew a store driver's lease every `leaseMs / 3` while the section
    /// runs (default true). Local and file leases never expire and need no
    /// renewal.
    pub auto_renew: bool,
}

impl Default for WithLockOptions {
    fn default() -> Self {
        WithLockOptions { acquire: AcquireOptions::default(), auto_renew: true }
    }
}

impl From<AcquireOptions> for WithLockOptions {
    fn from(acquire: AcquireOptions) -> Self {
        WithLockOptions { acquire, ..WithLockOptions::default() }
    }
}

/// What a section run by [`Backend::with_lock`] gets.
#[derive(Clone)]
pub struct Section {
    /// The lease's fencing token: pass it along with writes to other stores.
    pub fence: u64,
    /// Aborted the moment the lease is known lost (a takeover, its end
    /// without renewals, or the backend closing); a section doing long work
    /// should stop when it fires.
    pub signal: AbortSignal,
}

impl Backend {
    /// Acquires `key`, runs `section`, and releases the lease whatever the
    /// section returned (a panic or a dropped future releases it too, through
    /// the lease's `Drop`). The section's output is returned unless the lease
    /// was lost at any point during the section (the backend closing takes
    /// it too): that is `LEASE_LOST` even when the section succeeded, since
    /// its work may have overlapped another holder's. Renewals run on the store drivers' own thread, so a caller
    /// whose executor stalls does not lose the lease for that reason.
    pub async fn with_lock<F, Fut, T>(&self, key: &str, options: impl Into<WithLockOptions>, section: F) -> Result<T>
    where
        F: FnOnce(Section) -> Fut,
        Fut: Future<Output = T>,
    {
        let options = options.into();
        let lease = self.acquire(key, options.acquire.clone()).await?;
        self.run_section(lease, options.auto_renew, section).await
    }

    /// [`Backend::with_lock`] holding every key of `keys` as one lease (see
    /// [`Backend::acquire_many`]); the section's fence is that of the first key.
    pub async fn with_lock_many<F, Fut, T>(&self, keys: &[&str], options: impl Into<WithLockOptions>, section: F) -> Result<T>
    where
        F: FnOnce(Section) -> Fut,
        Fut: Future<Output = T>,
    {
        let options = options.into();
        let lease = self.acquire_many(keys, options.acquire.clone()).await?;
        self.run_section(lease, options.auto_renew, section).await
    }

    async fn run_section<F, Fut, T>(&self, lease: Lease, auto_renew: bool, section: F) -> Result<T>
    where
        F: FnOnce(Section) -> Fut,
        Fut: Future<Output = T>,
    {
        // A policy's lease lives on its member: the member's renewal and close apply.
        let owner = lease.member().unwrap_or(self);
        // Local and file leases never expire: only close takes them, so the
        // backend's closing is their loss. A store lease is watched (and
        // renewed unless `auto_renew` is false) until the section ends: its
        // end, a takeover or close abort the signal.
        let (keep_alive, signal) = match owner.closing() {
            Some(closing) => (None, closing),
            None => renewals(&lease, owner, auto_renew),
        };
        let output = section(Section { fence: lease.fence(), signal: signal.clone() }).await;
        // Taking the renewals stops them, before the release.
        let was_lost = keep_alive.is_some_and(|renewals| renewals.is_lost()) || signal.is_aborted();
        if was_lost {
            // Released in the background (the lease's `Drop`): the server
            // that let the lease run out may stall the release too, and the
            // caller already knows all it needs.
            drop(lease);
            return Err(LockError::lease_lost());
        }
        match lease.release().await {
            Ok(true) => Ok(output),
            // The section has no handle to release its lease by: something
            // else ended it (close, between the checks above and here).
            Ok(false) => Err(LockError::lease_lost()),
            // A release that finds another owner is LEASE_LOST already.
            Err(err) => Err(err),
        }
    }
}

/// A store lease's renewals (none if `auto_renew` is false, only watching
/// it) and the signal they abort once it is lost.
#[cfg(any(feature = "redis", feature = "postgres", feature = "mysql"))]
fn renewals(lease: &Lease, owner: &Backend, auto_renew: bool) -> (Option<KeepAlive>, AbortSignal) {
    let lost = crate::abort::AbortController::new();
    (lease.keep_alive(owner.auto_renew_every().filter(|_| auto_renew), lost.clone()), lost.signal())
}

/// Without a store driver every backend has a closing signal.
#[cfg(not(any(feature = "redis", feature = "postgres", feature = "mysql")))]
fn renewals(_: &Lease, _: &Backend, _: bool) -> (Option<KeepAlive>, AbortSignal) {
    unreachable!("only the leases of store drivers are renewed")
}

/// Without a store driver no lease is renewed: there is none of these.
#[cfg(not(any(feature = "redis", feature = "postgres", feature = "mysql")))]
enum KeepAlive {}

#[cfg(not(any(feature = "redis", feature = "postgres", feature = "mysql")))]
impl KeepAlive {
    fn is_lost(&self) -> bool {
        match *self {}
    }
}

//! `with_lock`: acquire, run a section, release, in all cases; redis leases
//! are renewed automatically while the section runs.

use std::future::Future;
use std::time::Duration;

use crate::abort::{AbortController, AbortSignal};
use crate::acquire::AcquireOptions;
use crate::error::{LockError, Result};
use crate::provider::{Backend, Lease};

/// Options of [`Backend::with_lock`].
#[derive(Clone)]
pub struct WithLockOptions {
    /// How to wait for the key.
    pub acquire: AcquireOptions,
    /// Renew a redis lease every `leaseMs / 3` while the section runs
    /// (default true). Local leases never expire and need no renewal.
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
    /// Aborted the moment the lease is known lost; a section doing long work
    /// should stop when it fires.
    pub signal: AbortSignal,
}

impl<S: crate::store::Store> crate::store::StoreBackend<S> {
    /// How often a section's lease is renewed: every `leaseMs / 3`, so two
    /// renewals may fail before the lease runs out.
    pub fn auto_renew_every(&self) -> Duration {
        Duration::from_millis(u64::from(self.options().lease_ms) / 3)
    }
}

impl Backend {
    /// Acquires `key`, runs `section`, and releases the lease whatever the
    /// section returned (a panic or a dropped future releases it too, through
    /// the lease's `Drop`). The section's output is returned unless the lease
    /// was lost at any point during the section: that is `LEASE_LOST` even
    /// when the section succeeded, since its work may have overlapped another
    /// holder's. Renewals run on the redis driver's own thread, so a caller
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
        let lost = AbortController::new();
        let keep_alive = match (self, &lease) {
            (Backend::Redis(backend), Lease::Redis(redis)) if auto_renew => {
                Some(redis.keep_alive(backend.auto_renew_every(), lost.clone()))
            }
            (Backend::Postgres(backend), Lease::Postgres(postgres)) if auto_renew => {
                Some(postgres.keep_alive(backend.auto_renew_every(), lost.clone()))
            }
            _ => None,
        };
        let output = section(Section { fence: lease.fence(), signal: lost.signal() }).await;
        let was_lost = keep_alive.as_ref().is_some_and(|k| k.is_lost());
        drop(keep_alive);
        if was_lost {
            // Released in the background (the lease's `Drop`): the server
            // that let the lease run out may stall the release too, and the
            // caller already knows all it needs.
            drop(lease);
            return Err(LockError::lease_lost());
        }
        let released = lease.release().await;
        // A release that finds another owner is LEASE_LOST already.
        released.map(|_| output)
    }
}

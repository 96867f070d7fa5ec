//! `with_lock`: acquire, run a section, release, in all cases.

use std::future::Future;

use crate::abort::{AbortController, AbortSignal};
use crate::acquire::AcquireOptions;
use crate::error::Result;
use crate::provider::Backend;

/// What a section run by [`Backend::with_lock`] gets.
#[derive(Clone)]
pub struct Section {
    /// The lease's fencing token: pass it along with writes to other stores.
    pub fence: u64,
    /// Aborted the moment the lease is known lost; a section doing long work
    /// should stop when it fires.
    pub signal: AbortSignal,
}

impl Backend {
    /// Acquires `key`, runs `section`, and releases the lease whatever the
    /// section returned (a panic or a dropped future releases it too, through
    /// the lease's `Drop`). The section's output is returned unless the lease
    /// turned out lost, which is `LEASE_LOST` even when the section succeeded:
    /// its work may have overlapped another holder's.
    pub async fn with_lock<F, Fut, T>(&self, key: &str, options: AcquireOptions, section: F) -> Result<T>
    where
        F: FnOnce(Section) -> Fut,
        Fut: Future<Output = T>,
    {
        let lease = self.acquire(key, options).await?;
        let lost = AbortController::new();
        let output = section(Section { fence: lease.fence(), signal: lost.signal() }).await;
        lease.release().await?;
        Ok(output)
    }
}

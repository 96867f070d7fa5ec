//! A held file lease.

use std::sync::{Arc, Mutex, OnceLock};

use super::core::{FileCore, Grant};
use crate::error::{ErrorCode, LockError, Result};
use crate::telemetry::Hold;

/// An exclusive lease on one key, held through the kernel lock of its lock
/// file. It never expires while held: the kernel keeps the lock until the
/// lease is released, the backend closed, or the process ends (even by
/// `SIGKILL`). Dropping it releases it.
#[derive(Debug)]
pub struct FileLease {
    shared: Arc<LeaseShared>,
}

/// What the lease and its backend's `close()` share.
pub(crate) struct LeaseShared {
    core: Arc<FileCore>,
    key: Box<str>,
    fence: u64,
    grant: Mutex<Option<Grant>>,
    slot: OnceLock<usize>,
    hold: Hold,
}

impl LeaseShared {
    /// Ends the hold (close, drop): releases the key if still held.
    pub fn end(&self) {
        let _ = self.release();
    }

    fn release(&self) -> Result<bool> {
        let grant = self.grant.lock().unwrap_or_else(|e| e.into_inner()).take();
        let Some(grant) = grant else { return Ok(false) };
        if let Some(slot) = self.slot.get() {
            self.core.forget(*slot);
        }
        let kept = grant.kept_its_file();
        drop(grant);
        if kept {
            self.core.reporter.released(&self.hold, None);
            Ok(true)
        } else {
            self.core.lost.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            self.core.reporter.released(&self.hold, Some(ErrorCode::LeaseLost));
            self.core.reporter.lost(ErrorCode::LeaseLost);
            Err(LockError::new(
                ErrorCode::LeaseLost,
                "the lock file was removed or replaced while the lease was held: another process may have held the key meanwhile; only this driver may touch the lock directory",
            ))
        }
    }
}

impl Drop for LeaseShared {
    fn drop(&mut self) {
        self.end();
    }
}

impl std::fmt::Debug for LeaseShared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileLease").field("fence", &self.fence).finish_non_exhaustive()
    }
}

impl FileLease {
    /// The lease of `grant`, registered with its backend: `CLOSED` (and
    /// the key released) if the backend began closing meanwhile.
    pub(crate) fn adopt(core: Arc<FileCore>, key: &str, grant: Grant, hold: Hold) -> Result<FileLease> {
        let fence = grant.fence;
        let shared = Arc::new(LeaseShared {
            core: core.clone(),
            key: key.into(),
            fence,
            grant: Mutex::new(Some(grant)),
            slot: OnceLock::new(),
            hold,
        });
        let slot = core.adopt(&shared)?;
        let _ = shared.slot.set(slot);
        Ok(FileLease { shared })
    }

    /// The key this lease is on.
    pub fn key(&self) -> &str {
        &self.shared.key
    }

    /// The fencing token: above every earlier grant of the key in this
    /// directory and namespace.
    pub fn fence(&self) -> u64 {
        self.shared.fence
    }

    /// True until released (by the user or by `close()`).
    pub fn is_valid(&self) -> bool {
        self.shared.grant.lock().unwrap_or_else(|e| e.into_inner()).is_some()
    }

    /// Releases the lease: true when this call released it, false when it
    /// was already released. `LEASE_LOST` (the key released all the same)
    /// when the lock file was removed or replaced while held: another
    /// process may have held the key meanwhile.
    pub fn release(&self) -> Result<bool> {
        self.shared.release()
    }
}

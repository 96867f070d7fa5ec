//! A held file lease.

use std::sync::{Arc, Mutex, OnceLock};

use super::core::{FileCore, Grant};
use crate::error::{ErrorCode, LockError, Result};
use crate::telemetry::Hold;

/// A lease on one key or several, held through kernel locks on their lock
/// files, in the kind it was asked for. It never expires while held: the
/// kernel keeps the locks until the lease is released, the backend
/// closed, or the process ends (even by `SIGKILL`). Dropping it releases
/// it.
#[derive(Debug)]
pub struct FileLease {
    shared: Arc<LeaseShared>,
}

/// What the lease and its backend's `close()` share.
pub(crate) struct LeaseShared {
    core: Arc<FileCore>,
    keys: Box<[Box<str>]>,
    fences: Box<[u64]>,
    grant: Mutex<Option<Grant>>,
    slot: OnceLock<usize>,
    hold: Hold,
}

impl LeaseShared {
    /// Ends the hold (close, drop): releases the keys if still held.
    pub fn end(&self) {
        let _ = self.release();
    }

    fn release(&self) -> Result<bool> {
        let grant = self.grant.lock().unwrap_or_else(|e| e.into_inner()).take();
        let Some(grant) = grant else { return Ok(false) };
        // A forked child's copy of the lease only closes its files: their
        // locks are the parent's.
        self.core.forked()?;
        if let Some(slot) = self.slot.get() {
            self.core.forget(*slot);
        }
        let kept = grant.kept_its_files();
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
                "a lock file was removed or replaced while the lease was held: another process may have held the key meanwhile; only this driver may touch the lock directory",
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
        f.debug_struct("FileLease").field("fences", &self.fences).finish_non_exhaustive()
    }
}

impl FileLease {
    /// The lease of `grant` on `keys` (with `fences`, in the same order),
    /// registered with its backend: `CLOSED` (and the keys released) if the
    /// backend began closing meanwhile.
    pub(crate) fn adopt(core: Arc<FileCore>, keys: &[&str], fences: Vec<u64>, grant: Grant, hold: Hold) -> Result<FileLease> {
        let shared = Arc::new(LeaseShared {
            core: core.clone(),
            keys: keys.iter().map(|&key| key.into()).collect(),
            fences: fences.into(),
            grant: Mutex::new(Some(grant)),
            slot: OnceLock::new(),
            hold,
        });
        let slot = core.adopt(&shared)?;
        let _ = shared.slot.set(slot);
        Ok(FileLease { shared })
    }

    /// The key this lease is on (of several, the first the caller gave).
    pub fn key(&self) -> &str {
        &self.shared.keys[0]
    }

    /// Every key this lease holds, in the order the caller gave them.
    pub fn keys(&self) -> Vec<&str> {
        self.shared.keys.iter().map(|key| &**key).collect()
    }

    /// The fencing token of [`FileLease::key`]: above every earlier grant of
    /// the key in this directory and namespace.
    pub fn fence(&self) -> u64 {
        self.shared.fences[0]
    }

    /// The fence of each key, in the order of [`FileLease::keys`].
    pub fn fences(&self) -> Vec<(&str, u64)> {
        self.shared.keys.iter().map(|key| &**key).zip(self.shared.fences.iter().copied()).collect()
    }

    /// True until released (by the user or by `close()`).
    pub fn is_valid(&self) -> bool {
        self.shared.grant.lock().unwrap_or_else(|e| e.into_inner()).is_some()
    }

    /// Releases the lease: true when this call released it, false when it
    /// was already released. `LEASE_LOST` (the keys released all the same)
    /// when a lock file was removed or replaced while held: another
    /// process may have held the key meanwhile.
    pub fn release(&self) -> Result<bool> {
        self.shared.release()
    }
}

//! The file backend: acquire with in-process FIFO waiting, close, counts.

use std::future::{poll_fn, Future};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use futures_timer::Delay;

use super::core::{Admitted, FileCore, Ticket};
use super::directory::LockDirectory;
use super::lease::FileLease;
use crate::abort::{AbortController, AbortSignal};
use crate::acquire::AcquireOptions;
use crate::error::{ErrorCode, LockError, Result};
use crate::holder::HolderLabel;
use crate::inspect::Inspection;
use crate::local::engine::CancelReason;
use crate::options::FileOptions;
use crate::status::LeaseCounts;
use crate::telemetry::{Reporter, Shape, Telemetry};

/// A backend whose locks are kernel locks on files of one directory,
/// shared by every process of this host that uses the same directory and
/// namespace. Cheap to clone.
///
/// Guarantees: a lease holds its key alone among every process using the
/// directory and namespace (the kernel's `flock`, `LockFileEx` on
/// Windows); it stays held until released, the backend closed, or the
/// holding process ends, however it ends (a dead process's locks are
/// released by the kernel at once, and a waiting process is woken within
/// milliseconds); nothing expires it, so a holder that hangs while alive
/// keeps it. Waiters of one key in this
/// process are served in FIFO order, and only those this process's leases
/// leave room for try the kernel lock. Fences grow per key:
/// `max(counter + 1, clock_us)`, the counter kept in the lock file. Lock
/// files of free keys are kept open a moment for reuse, then removed, their
/// counters kept in the directory's floor (`floor.lock`), above which a
/// new lock file grants: fences do not go back when the host's clock does.
///
/// Every kind, across processes: shared leases hold a key together and
/// with no exclusive one (`flock` shared and exclusive); of a counted key
/// at most `limit` units are held (one unit file each), and every process
/// gives the same limit; several keys are held all or none, and acquires of
/// them in any order never deadlock. Inside a process the local driver's
/// rules apply (FIFO per key across modes: a writer is not starved by later
/// readers).
#[derive(Clone)]
pub struct FileBackend {
    core: Arc<FileCore>,
    /// Aborted by close, which ends every lease (see [`FileBackend::closing`]).
    closing: AbortController,
}

impl FileBackend {
    /// Opens backend `name`: creates and checks its directory (see
    /// `LockDirectory::open`); `INVALID_OPTIONS` for a directory it
    /// refuses. Its leases are labelled `holder` unless their acquire gives
    /// a label of its own.
    pub fn open(name: &str, options: FileOptions, telemetry: Option<Telemetry>, holder: HolderLabel) -> Result<FileBackend> {
        let directory = LockDirectory::open(name, &options.directory)?;
        let reporter = Reporter::new(telemetry, name, "file", options.thresholds);
        Ok(FileBackend { core: FileCore::new(name, options, directory, reporter, holder), closing: AbortController::new() })
    }

    /// The options the backend was opened with.
    pub fn options(&self) -> &FileOptions {
        &self.core.options
    }

    /// Acquires `key`: waits (FIFO among this process's acquires of the
    /// key) until the kernel lock is ours, `waitTimeoutMs` passes
    /// (`WAIT_TIMEOUT`), or the signal aborts (`ABORTED`). With a wait of 0
    /// it tries once: `LOCK_BUSY` when the key is held, when another
    /// acquire of this process already waits for it, or when a waiter of
    /// another process is marked waiting for it (no process starves
    /// another, see the module `core`). `QUEUE_FULL` past
    /// `maxWaiters`, `KEY_LIMIT` past `maxKeys`, `CLOSED` after close,
    /// `INVALID_ARGUMENT` for a limit other than the one the key is held
    /// with (in this process, or by another process when this acquire
    /// reaches the lock file), `PROVIDER_FAILED` for a lock file it cannot
    /// use or trust (a symbolic link, another user's file, a full disk, a
    /// read-only file system).
    ///
    /// Cancel safe: dropping the future ends the wait; a lease granted
    /// meanwhile is released.
    pub async fn acquire(&self, key: &str, options: AcquireOptions) -> Result<FileLease> {
        self.acquire_keys(&[key], options).await
    }

    /// Acquires every key of `keys` (at least one, none twice) in the kind
    /// of `options`, all or none, as [`FileBackend::acquire`] does one:
    /// this process's acquires of any of them go first, then the kernel
    /// locks are tried without blocking in a fixed order and all released
    /// when one is refused, so acquires of the same keys in opposite orders
    /// never deadlock.
    pub async fn acquire_many(&self, keys: &[&str], options: AcquireOptions) -> Result<FileLease> {
        crate::acquire::check_keys(keys, self.core.options.max_key_bytes as usize)?;
        self.acquire_keys(keys, options).await
    }

    async fn acquire_keys(&self, keys: &[&str], options: AcquireOptions) -> Result<FileLease> {
        let core = &self.core;
        let mut acquiring = core.reporter.acquiring(Shape::asked(&options, keys.len()));
        let granted = self.wait_for(keys, options, &mut acquiring).await;
        match granted {
            Ok(grant) => {
                let fences = grant.fences();
                let hold = core.reporter.granted(acquiring, fences[0]);
                FileLease::adopt(core.clone(), keys, fences, grant, hold)
            }
            Err(error) => {
                let error = core.told_holders(error, keys);
                if error.code() == ErrorCode::WaitTimeout {
                    core.timed_out.fetch_add(1, Ordering::Relaxed);
                }
                core.reporter.failed(acquiring, &error);
                Err(error)
            }
        }
    }

    async fn wait_for(
        &self,
        keys: &[&str],
        options: AcquireOptions,
        acquiring: &mut crate::telemetry::Acquiring,
    ) -> Result<super::core::Grant> {
        let core = &self.core;
        if let [key] = keys {
            crate::key::validate(key, core.options.max_key_bytes as usize)?;
        }
        core.forked()?;
        if core.is_closed() {
            return Err(LockError::closed());
        }
        let kind = options.kind()?;
        let signal = options.signal.as_ref();
        if signal.is_some_and(AbortSignal::is_aborted) {
            return Err(LockError::aborted());
        }
        let timeout = options.wait_timeout.unwrap_or(Duration::from_millis(core.options.wait_timeout_ms.into()));
        let label = options.holder.clone().unwrap_or_else(|| core.holder.clone());
        let (ticket, mut outcome) = match core.admit(keys, kind, label, !timeout.is_zero())? {
            Admitted::Granted(grant) => return Ok(grant),
            Admitted::Queued { ticket, outcome } => (ticket, outcome),
        };
        acquiring.queued();
        // Dropped before its outcome (the acquire's future dropped), the
        // waiter leaves the queue; a grant already sent is dropped with the
        // channel, which releases it.
        let mut queued = Queued { core, ticket, settled: false };
        let mut delay = Delay::new(timeout);
        let mut aborted = signal.map(|s| Box::pin(s.aborted()));
        let result = poll_fn(|cx| {
            if let Poll::Ready(outcome) = std::pin::Pin::new(&mut outcome).poll(cx) {
                return Poll::Ready(outcome.unwrap_or_else(|_| Err(LockError::closed())));
            }
            let abort = aborted.as_mut().is_some_and(|a| a.as_mut().poll(cx).is_ready());
            if abort || std::pin::Pin::new(&mut delay).poll(cx).is_ready() {
                let reason = if abort { CancelReason::Aborted } else { CancelReason::TimedOut };
                if core.cancel(ticket, reason) {
                    return Poll::Ready(Err(if abort { LockError::aborted() } else { LockError::wait_timeout(timeout) }));
                }
                // Not in the queue any more: its outcome was sent, and is
                // there to take.
                if let Ok(outcome) = outcome.try_recv() {
                    return Poll::Ready(outcome);
                }
            }
            Poll::Pending
        })
        .await;
        queued.settled = true;
        result
    }

    /// What the directory holds of `key` now: see `Backend::inspect`.
    pub fn inspect(&self, key: &str) -> Result<Inspection> {
        self.core.inspect(key)
    }

    /// Counts for `status()`.
    pub fn counts(&self) -> LeaseCounts {
        let (held, held_shared, waiting) = self.core.counts();
        LeaseCounts {
            held,
            held_shared,
            waiting,
            acquired: self.core.acquired.load(Ordering::Relaxed),
            timed_out: self.core.timed_out.load(Ordering::Relaxed),
            lost: self.core.lost.load(Ordering::Relaxed),
        }
    }

    /// Rejects waiters with `CLOSED` and releases every held lease (their
    /// `is_valid` turns false); later acquires are `CLOSED`. Idempotent.
    pub fn close(&self) {
        self.core.close();
        self.closing.abort();
    }

    /// Aborted once [`FileBackend::close`] has run: every lease held then
    /// has ended (what a `with_lock` section learns through its signal).
    pub fn closing(&self) -> AbortSignal {
        self.closing.signal()
    }

    /// True once the backend has started closing.
    pub fn is_closed(&self) -> bool {
        self.core.is_closed()
    }
}

impl std::fmt::Debug for FileBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileBackend").field("name", &self.core.name).field("counts", &self.counts()).finish()
    }
}

/// A waiter's place in its queue, left when dropped unsettled.
struct Queued<'a> {
    core: &'a FileCore,
    ticket: Ticket,
    settled: bool,
}

impl Drop for Queued<'_> {
    fn drop(&mut self) {
        if !self.settled {
            self.core.cancel(self.ticket, CancelReason::Dropped);
        }
    }
}

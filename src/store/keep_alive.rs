//! Automatic renewal of a held lease, driven by the driver's runtime.
//!
//! The renewals run on the driver's own thread, not on the caller's event
//! loop, so a stalled loop (a long synchronous computation, a GC pause of the
//! host) does not delay them. The moment the lease is known lost the given
//! [`AbortController`] fires, so the section can stop work it can no longer
//! do exclusively.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::runtime::Handle;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::lease::StoreLease;
use super::Store;
use crate::abort::AbortController;
use crate::error::ErrorCode;

/// Renews a lease until dropped. Dropping it stops the renewals (it does not
/// release the lease).
pub struct KeepAlive {
    task: JoinHandle<()>,
    lost: Arc<AtomicBool>,
}

/// The shortest pause between two renewals, so a failing server is not
/// hammered.
const MIN_PAUSE: Duration = Duration::from_millis(10);

impl KeepAlive {
    /// `lease` gives the lease for one renewal, `None` once its owner dropped
    /// it: the renewals hold it only while renewing, so a dropped lease is
    /// still released (and never kept alive forever). With `every` `None`
    /// nothing is renewed: the lease is only watched, and known lost when
    /// its local estimate runs out. Either way the lease is known lost once
    /// its backend starts closing (`closed` turns true), since close takes
    /// every lease it holds.
    pub(crate) fn start<S: Store>(
        handle: &Handle,
        lease: impl Fn() -> Option<StoreLease<S>> + Send + 'static,
        every: Option<Duration>,
        mut closed: watch::Receiver<bool>,
        on_lost: AbortController,
    ) -> KeepAlive {
        let lost = Arc::new(AtomicBool::new(false));
        let flag = lost.clone();
        let task = handle.spawn(async move {
            let lost = |lease: &StoreLease<S>, counted: bool| {
                flag.store(true, Ordering::SeqCst);
                if counted {
                    lease.report_lost(ErrorCode::LeaseLost);
                }
                on_lost.abort();
            };
            loop {
                // Wake no later than the local validity estimate runs out, so
                // a server that stopped answering is noticed in time.
                let Some(remaining) = lease().map(|l| l.remaining()) else { return };
                let pause = every.map_or(remaining, |every| every.min(remaining)).max(MIN_PAUSE);
                let closing = tokio::select! {
                    _ = tokio::time::sleep(pause) => false,
                    _ = closed.wait_for(|closed| *closed) => true,
                };
                if closing {
                    // Not counted as lost: close gives the lease back on
                    // purpose. It may have done so before this wake-up, so
                    // only a lease its owner released (or dropped) is spared.
                    if let Some(lease) = lease().filter(StoreLease::held_until_close) {
                        lost(&lease, false);
                    }
                    return;
                }
                let Some(lease) = lease().filter(StoreLease::is_held) else {
                    return; // released or dropped by its owner: nothing left to keep
                };
                let gone = match every {
                    None => lease.remaining().is_zero(),
                    // A renewal that stalls must not keep the section's signal
                    // quiet past the lease: the loss is known when the local
                    // estimate runs out, whatever the renewal later answers.
                    // Close gives the lease back even while a renewal waits
                    // (for a slow replica's acknowledgement, say): the
                    // section learns it then, not after the renewal.
                    Some(_) => tokio::select! {
                        outcome = lease.renew() => match outcome {
                            Ok(renewed) => !renewed,
                            Err(err) => err.code() == ErrorCode::OutcomeUnknown || !lease.is_valid(),
                        },
                        _ = tokio::time::sleep(lease.remaining()) => true,
                        _ = closed.wait_for(|closed| *closed) => {
                            if lease.held_until_close() {
                                lost(&lease, false);
                            }
                            return;
                        }
                    },
                };
                if gone && lease.is_held() {
                    return lost(&lease, true);
                }
            }
        });
        KeepAlive { task, lost }
    }

    /// True once a renewal found the lease no longer ours, the local
    /// estimate ran out before a renewal succeeded, or the backend started
    /// closing.
    pub fn is_lost(&self) -> bool {
        self.lost.load(Ordering::SeqCst)
    }
}

impl Drop for KeepAlive {
    fn drop(&mut self) {
        self.task.abort();
    }
}

//! Cancellation of a wait, the Rust counterpart of an `AbortSignal`.
//!
//! Dropping an acquire future also cancels it; an [`AbortSignal`] is for when
//! the caller wants the acquire to end with `ABORTED` (and the surfaces map
//! JavaScript `AbortSignal`s and C cancel calls onto it). A signal only acts
//! before a lease is granted: aborting afterwards does nothing.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use futures_timer::Delay;

#[derive(Default)]
struct Inner {
    aborted: AtomicBool,
    wakers: Mutex<Vec<Waker>>,
}

/// The side that aborts.
#[derive(Clone, Default)]
pub struct AbortController {
    inner: Arc<Inner>,
}

/// The side that is observed by acquires. Cheap to clone.
#[derive(Clone, Default)]
pub struct AbortSignal {
    inner: Arc<Inner>,
}

impl AbortController {
    /// A controller whose signal is not aborted.
    pub fn new() -> Self {
        AbortController::default()
    }

    /// A signal that observes this controller.
    pub fn signal(&self) -> AbortSignal {
        AbortSignal { inner: self.inner.clone() }
    }

    /// Aborts every acquire still waiting on this signal. Idempotent.
    pub fn abort(&self) {
        if !self.inner.aborted.swap(true, Ordering::SeqCst) {
            let wakers = std::mem::take(&mut *self.inner.wakers.lock().unwrap_or_else(|e| e.into_inner()));
            wakers.into_iter().for_each(Waker::wake);
        }
    }
}

impl AbortSignal {
    /// True once the controller has aborted.
    pub fn is_aborted(&self) -> bool {
        self.inner.aborted.load(Ordering::SeqCst)
    }

    /// Resolves once the signal is aborted.
    pub fn aborted(&self) -> Aborted<'_> {
        Aborted { signal: self }
    }

    fn poll_aborted(&self, cx: &mut Context<'_>) -> Poll<()> {
        if self.is_aborted() {
            return Poll::Ready(());
        }
        let mut wakers = self.inner.wakers.lock().unwrap_or_else(|e| e.into_inner());
        if !wakers.iter().any(|w| w.will_wake(cx.waker())) {
            wakers.push(cx.waker().clone());
        }
        drop(wakers);
        // Re-check: abort() may have drained the list before we registered.
        if self.is_aborted() {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }
}

/// Future returned by [`AbortSignal::aborted`].
pub struct Aborted<'a> {
    signal: &'a AbortSignal,
}

impl Future for Aborted<'_> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        self.signal.poll_aborted(cx)
    }
}

/// Sleeps for `duration`, or until `signal` aborts if that comes first:
/// whether it aborted.
pub(crate) async fn sleep_unless_aborted(duration: Duration, signal: Option<&AbortSignal>) -> bool {
    let mut delay = Delay::new(duration);
    std::future::poll_fn(|cx| {
        if signal.is_some_and(|signal| signal.poll_aborted(cx).is_ready()) {
            return Poll::Ready(true);
        }
        Pin::new(&mut delay).poll(cx).map(|()| false)
    })
    .await
}

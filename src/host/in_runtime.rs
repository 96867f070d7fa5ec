//! Polling the store drivers' futures inside their runtime's context.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::runtime::Handle;

pin_project_lite::pin_project! {
    /// Polls a future inside the driver's runtime context, so that its
    /// timers (command timeouts, waits) and the sockets it connects are the
    /// runtime's, whatever thread polls it.
    pub(crate) struct InRuntime<F> {
        handle: Handle,
        #[pin]
        future: F,
    }
}

impl<F: Future> InRuntime<F> {
    pub fn new(handle: Handle, future: F) -> Self {
        InRuntime { handle, future }
    }
}

impl<F: Future> Future for InRuntime<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.project();
        let _entered = this.handle.enter();
        this.future.poll(cx)
    }
}

//! The driver's own tokio runtime.
//!
//! It is started only when a provider has at least one redis backend, so a
//! local-only app runs no extra thread. One worker thread is enough: the
//! driver only waits on sockets and timers. Every public future of the
//! driver spawns its work here and awaits the result through a
//! `JoinHandle`, which any executor can poll (a plain thread blocking on it,
//! napi's executor, the user's own tokio runtime).
//!
//! Do not `fork()` a process after the runtime has started: the child gets
//! no copy of its thread.

use std::future::Future;

use tokio::runtime::{Builder, Handle, Runtime};

use crate::error::{ErrorCode, LockError, Result};

/// Owns the runtime; dropping the last owner shuts it down without blocking,
/// so it may happen inside any async context.
pub(crate) struct DriverRuntime {
    runtime: Option<Runtime>,
    handle: Handle,
}

impl DriverRuntime {
    pub fn start() -> Result<DriverRuntime> {
        let runtime = Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("dokebi-lock-redis")
            .enable_io()
            .enable_time()
            .build()
            .map_err(|err| LockError::new(ErrorCode::ProviderFailed, "could not start the redis driver's runtime thread").with_cause(err))?;
        let handle = runtime.handle().clone();
        Ok(DriverRuntime { runtime: Some(runtime), handle })
    }

    pub fn handle(&self) -> &Handle {
        &self.handle
    }
}

impl Drop for DriverRuntime {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

/// Runs `work` on the driver's runtime and awaits its result from whatever
/// executor polls the returned future. Dropping that future does not stop
/// `work` (a release still completes); a runtime already shut down is `CLOSED`.
pub(crate) async fn run_on<T: Send + 'static>(handle: &Handle, work: impl Future<Output = Result<T>> + Send + 'static) -> Result<T> {
    handle
        .spawn(work)
        .await
        .unwrap_or_else(|_| Err(LockError::new(ErrorCode::Closed, "the redis driver's runtime has shut down")))
}

//! The store drivers' own tokio runtime.
//!
//! It is started only when a provider has at least one backend of a store
//! driver, so a local-only app runs no extra thread. One worker thread is
//! enough: the drivers only wait on sockets and timers. Every public future
//! of a store driver spawns its work here and awaits the result through a
//! `JoinHandle`, which any executor can poll (a plain thread blocking on it,
//! napi's executor, the user's own tokio runtime), unless a [`Host`] runs it
//! on the caller's own thread (see [`crate::host`]).
//!
//! Do not `fork()` a process after the runtime has started: the child gets
//! no copy of its thread.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::runtime::{Builder, Handle, Runtime};
use tokio::task::JoinHandle;

use crate::error::{ErrorCode, LockError, Result};
use crate::host::{Host, InRuntime};

/// Owns the runtime; dropping the last owner shuts it down without blocking,
/// so it may happen inside any async context.
pub(crate) struct DriverRuntime {
    runtime: Option<Runtime>,
    spawner: Spawner,
}

impl DriverRuntime {
    pub fn start(host: Option<Arc<dyn Host>>) -> Result<DriverRuntime> {
        let runtime =
            Builder::new_multi_thread().worker_threads(1).thread_name("dokebi-lock-io").enable_io().enable_time().build().map_err(
                |err| LockError::new(ErrorCode::ProviderFailed, "could not start the store drivers' runtime thread").with_cause(err),
            )?;
        let spawner = Spawner { handle: runtime.handle().clone(), host };
        Ok(DriverRuntime { runtime: Some(runtime), spawner })
    }

    pub fn spawner(&self) -> &Spawner {
        &self.spawner
    }
}

impl Drop for DriverRuntime {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

/// Where the driver runs the operations callers await.
#[derive(Clone)]
pub(crate) struct Spawner {
    handle: Handle,
    host: Option<Arc<dyn Host>>,
}

impl Spawner {
    /// The runtime, for background work nobody awaits.
    pub fn handle(&self) -> &Handle {
        &self.handle
    }

    /// Runs `work` and awaits its result from whatever executor polls the
    /// returned future: on the host's thread when called there (the host
    /// polls every operation to completion), else on the runtime, where
    /// dropping the returned future does not stop `work` (a release still
    /// completes). A runtime already shut down is `CLOSED`.
    pub fn run<T: Send + 'static, F: Future<Output = Result<T>> + Send + 'static>(&self, work: F) -> Run<F, T> {
        if self.host.as_ref().is_some_and(|host| host.is_current()) {
            Run::Here { work: InRuntime::new(self.handle.clone(), work) }
        } else {
            Run::There { task: self.handle.spawn(work) }
        }
    }
}

pin_project_lite::pin_project! {
    /// The future of [`Spawner::run`]: `work` itself, or its task. Not an
    /// `async fn`, whose state would hold `work` twice (as its argument and
    /// in the branch that runs it), doubling every move of the future.
    #[project = RunProjection]
    pub(crate) enum Run<F, T> {
        Here { #[pin] work: InRuntime<F> },
        There { task: JoinHandle<Result<T>> },
    }
}

impl<T, F: Future<Output = Result<T>>> Future for Run<F, T> {
    type Output = Result<T>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<T>> {
        match self.project() {
            RunProjection::Here { work } => work.poll(cx),
            RunProjection::There { task } => Pin::new(task).poll(cx).map(|joined| {
                joined.unwrap_or_else(|_| Err(LockError::new(ErrorCode::Closed, "the store drivers' runtime has shut down")))
            }),
        }
    }
}

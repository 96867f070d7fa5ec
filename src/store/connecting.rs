//! Which part of a store call an acquire may cut short.
//!
//! A wait (its deadline, the caller's signal, `close()`) never interrupts a
//! command that may have reached the store: a grant the command makes must
//! come back, to be kept or given back. Connecting is different: until the
//! connection is made nothing has been sent, so an acquire stops waiting
//! for a connect as it stops waiting for its turn (with the server
//! unreachable, a connect takes the whole `connectTimeoutMs`, which may be
//! longer than the wait).
//!
//! The transport marks where a call connects ([`connecting`]); the lock
//! layer runs its tries under [`Stage::run`], which tells it whether the
//! call is connecting still, with nothing sent. A call is cut short only
//! inside its first connect: once that ends, whatever the call does next
//! (a command, a reconnect after a lost answer) is never cut. A transport
//! that marks nothing is never cut at all.

use std::future::{pending, Future};
use std::sync::Arc;

use tokio::sync::watch;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Progress {
    /// Nothing done yet.
    NotYet,
    /// In the call's first connect: nothing sent.
    Connecting,
    /// Past it: something may have been sent.
    Past,
}

tokio::task_local! {
    static STAGE: Arc<watch::Sender<Progress>>;
}

/// Marks a connect of the transport until dropped (see the module docs).
pub(crate) struct Connecting {
    entered: bool,
}

/// The call under [`Stage::run`] connects until the guard is dropped;
/// outside one (a renew, a release) this does nothing.
pub(crate) fn connecting() -> Connecting {
    let entered = STAGE
        .try_with(|stage| {
            stage.send_if_modified(|progress| {
                let first = *progress == Progress::NotYet;
                if first {
                    *progress = Progress::Connecting;
                }
                first
            })
        })
        .unwrap_or(false);
    Connecting { entered }
}

impl Drop for Connecting {
    fn drop(&mut self) {
        if self.entered {
            let _ = STAGE.try_with(|stage| stage.send_replace(Progress::Past));
        }
    }
}

/// How far one call of the lock layer got.
pub(super) struct Stage(Arc<watch::Sender<Progress>>);

impl Stage {
    pub fn new() -> Stage {
        Stage(Arc::new(watch::channel(Progress::NotYet).0))
    }

    /// `call`, where the transport can mark its connect.
    pub fn run<F: Future>(&self, call: F) -> impl Future<Output = F::Output> {
        STAGE.scope(self.0.clone(), call)
    }

    /// Resolves once the call is in its first connect, nothing sent (never
    /// after that). Polled beside the call, in the same task: when it
    /// resolves, the call is suspended inside its connect and may be
    /// dropped.
    pub async fn cuttable(&self) {
        let mut progress = self.0.subscribe();
        loop {
            let now = *progress.borrow_and_update();
            match now {
                Progress::Connecting => return,
                Progress::Past => pending::<()>().await,
                Progress::NotYet => {}
            }
            let _ = progress.changed().await;
        }
    }
}

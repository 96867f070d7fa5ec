//! Automatic renewal of a store driver's lease while a JS `withLock` section runs.
//!
//! The renewals are the core's [`KeepAlive`]: they run on the store drivers'
//! thread, so a JS event loop blocked by the section does not delay them.
//! Loss reaches JS through [`NativeKeepAlive::watch`], a promise on the
//! executor's wake-up function that never keeps Node alive.

use std::future::{poll_fn, Future};
use std::pin::pin;
use std::task::Poll;

use dokebi_lock::store::KeepAlive;
use dokebi_lock::{AbortController, AbortSignal};
use napi::Env;
use napi_derive::napi;

use crate::executor::{spawn_weak, Promise};
use crate::guard::{promise, Finalized};

/// Renews one lease until stopped (or collected).
#[napi]
pub struct NativeKeepAlive {
    renewals: Finalized<Option<KeepAlive>>,
    /// Aborted by the core the moment the lease is known lost.
    lost: AbortSignal,
    stopped: AbortController,
}

impl NativeKeepAlive {
    pub fn new(start: impl FnOnce(AbortController) -> KeepAlive) -> Self {
        let lost = AbortController::new();
        NativeKeepAlive { lost: lost.signal(), renewals: Finalized::new(Some(start(lost))), stopped: AbortController::new() }
    }
}

#[napi]
impl NativeKeepAlive {
    /// Resolves `true` the moment the lease is known lost, `false` once
    /// `stop()` came first. Never rejects, never keeps Node alive.
    #[napi(ts_return_type = "Promise<boolean>", catch_unwind)]
    pub fn watch(&self, env: &Env) -> napi::Result<Promise> {
        let (lost, stopped) = (self.lost.clone(), self.stopped.signal());
        promise(env, || {
            spawn_weak(
                env,
                async move {
                    let (mut on_lost, mut on_stop) = (pin!(lost.aborted()), pin!(stopped.aborted()));
                    poll_fn(|cx| {
                        if on_lost.as_mut().poll(cx).is_ready() || on_stop.as_mut().poll(cx).is_ready() {
                            Poll::Ready(())
                        } else {
                            Poll::Pending
                        }
                    })
                    .await;
                    Ok(lost.is_aborted())
                },
                |lost| lost,
            )
        })
    }

    /// Stops the renewals (the lease stays held); true when the lease was
    /// lost while they ran.
    #[napi(catch_unwind)]
    pub fn stop(&mut self) -> bool {
        let lost = self.renewals.take().is_some_and(|renewals| renewals.is_lost()) || self.lost.is_aborted();
        self.stopped.abort();
        lost
    }
}

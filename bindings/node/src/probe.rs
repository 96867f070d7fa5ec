//! `panicProbe(place)`: panics at one kind of entry from Node, for the tests
//! of [`crate::guard`]. Compiled only with the `panic-probe` feature, which
//! the published addon never has.

use std::future::poll_fn;
use std::task::Poll;

use napi::Env;
use napi_derive::napi;

use crate::executor::{host, spawn, Promise};
use crate::guard::{promise, sentinel};

/// `place`:
/// - `sync`: a `#[napi]` function (throws);
/// - `sentinel`: a function with a failure sentinel (then `takeError`);
/// - `promise`: a function returning a promise, before it starts;
/// - `poll`: an operation's first poll (the promise settles with the error);
/// - `woken`: an operation's poll after a wake from another thread (through
///   the threadsafe function);
/// - `reader`: a task without a promise, like a connection's reader (logged).
///
/// Resolves (or returns) `undefined` where nothing failed for the caller.
#[napi(catch_unwind, ts_return_type = "unknown")]
pub fn panic_probe(env: Env, place: String) -> napi::Result<Option<Promise>> {
    match place.as_str() {
        "sync" => panic!("probe: sync"),
        "sentinel" => {
            sentinel::<()>(|| panic!("probe: sentinel"));
            Ok(None)
        }
        "promise" => promise(&env, || panic!("probe: promise")).map(Some),
        "poll" => spawn(&env, async { boom("poll") }, |()| ()).map(Some),
        "woken" => spawn(&env, woken_then_panic(), |()| ()).map(Some),
        "reader" => {
            let host = host(&env)?.ok_or_else(|| napi::Error::from_reason("this runtime has no libuv loop to host a reader"))?;
            host.spawn(Box::pin(async { panic!("probe: reader") }));
            Ok(None)
        }
        _ => Err(napi::Error::from_reason("unknown probe place")),
    }
}

fn boom(place: &str) -> dokebi_lock::Result<()> {
    panic!("probe: {place}")
}

/// Pending until a thread of its own wakes it, then panics.
async fn woken_then_panic() -> dokebi_lock::Result<()> {
    let mut woken = false;
    poll_fn(|cx| {
        if woken {
            return Poll::Ready(boom("woken"));
        }
        woken = true;
        let waker = cx.waker().clone();
        std::thread::spawn(move || waker.wake());
        Poll::Pending
    })
    .await
}

//! The Node surface of dokebi-lock: converts between JS and the core, and
//! hosts the core's store futures (redis, postgres) on the JS thread (a small executor
//! polled from libuv, which also watches their sockets); the local engine is
//! driven directly on the JS thread. Lock behaviour itself lives in the
//! `dokebi-lock` crate; the JS layer of `@dokebi/lock` (`npm/`) turns what
//! this module returns into promises, `Lease` objects and `LockError`s.
//!
//! Failures are not thrown: a synchronous call returns a sentinel (`FAILED`,
//! `null`) and leaves the core's error in [`error::take_error`]; an async
//! (store or file) call resolves with the error's `ErrorInfo`. The JS layer builds
//! every `LockError` in one place, and the hot path pays nothing for error
//! plumbing.
//!
//! - [`local`]: the local driver's engine, driven on the JS thread; [`out`]:
//!   the memory it exchanges numbers through; [`protocol`]: the numbers
//!   (also `npm/lib/protocol.js`).
//! - [`store`] and [`executor`]: the backends of the core's store drivers
//!   (redis, postgres), whatever the store, their futures polled on the JS thread;
//!   [`uv`]: their sockets watched by libuv; [`store_calls`]: the calls of
//!   every lease; [`lease`]: a held lease.
//! - [`file`]: the file driver's backends, their acquires polled by the
//!   same executor.
//! - [`policy`]: the policy driver's decisions; the JS layer tries its
//!   members.
//! - [`keep_alive`]: auto-renewal of a store lease during a `withLock` section.
//! - [`telemetry`], [`status`]: the core's telemetry and status, for JS.
//! - [`options`], [`key`], [`error`]: loading, key conversion, error data.
//! - [`guard`]: no Rust panic crosses into Node.
//! - [`addon_version`]: checked against the JS package's version on load.

// napi-rs registers exports only outside cfg(test); a test build (clippy
// --all-targets) would see them as unused.
#![cfg_attr(test, allow(dead_code))]

mod error;
mod executor;
mod file;
mod force_release;
mod guard;
mod inspect;
mod keep_alive;
mod key;
mod kind_request;
mod lease;
mod local;
mod options;
mod out;
mod policy;
#[cfg(feature = "panic-probe")]
mod probe;
mod protocol;
mod raw;
mod status;
mod store;
mod store_calls;
mod telemetry;
#[cfg(unix)]
mod uv;

// The JS layer's bound on every waitTimeoutMs (npm/lib/protocol.js) is the
// core's.
const _: () = assert!(protocol::MAX_TIMER_MS == dokebi_lock::options::declaration::MAX_TIMER_MS);

/// This addon's version, the same as `@dokebi/lock`'s: the JS layer refuses
/// an addon of any other version (a stale build, a mismatched install).
#[napi_derive::napi(catch_unwind)]
pub fn addon_version() -> String {
    env!("CARGO_PKG_VERSION").to_owned()
}

//! The Node surface of dokebi-lock: napi-rs conversion and plumbing over the
//! core, and nothing else. Lock behaviour lives in the `dokebi-lock` crate;
//! the JS layer of `@dokebi/lock` (`npm/`) turns what this module returns
//! into promises, `Lease` objects and `LockError`s.
//!
//! Failures of synchronous calls are not thrown: the call returns a sentinel
//! (`FAILED`, `null`) and leaves the core's error in [`error::take_error`],
//! so the JS layer builds every `LockError` in one place, and the hot path
//! pays nothing for error plumbing.

mod error;
mod executor;
mod key;
mod local;
mod options;
mod redis;

//! Keeps Rust panics from crossing into Node. A panic unwinding out of an
//! `extern "C"` function aborts the process; every entry from Node (a
//! `#[napi]` function, a raw Node-API callback, a libuv callback, a poll of
//! the executor, a finalizer) catches it here instead. A caught panic becomes the
//! caller's `PROVIDER_FAILED` error, or, where no caller exists, a line on
//! stderr (after the panic hook's own report).
//!
//! Catching needs no unwind-safety promise from the code it wraps: what
//! panicked is either dropped (a task) or left as the panic found it, which
//! safe Rust keeps memory-safe; the error tells the caller not to trust it.

use std::any::Any;
use std::future::ready;
use std::mem::ManuallyDrop;
use std::ops::{Deref, DerefMut};
use std::panic::{catch_unwind, AssertUnwindSafe};

use dokebi_lock::{ErrorCode, LockError};
use napi::Env;

use crate::error::stash;
use crate::executor::{spawn, Promise};

/// Runs `f`; a panic is the error.
pub fn catch<T>(f: impl FnOnce() -> T) -> Result<T, LockError> {
    catch_unwind(AssertUnwindSafe(f)).map_err(panicked)
}

/// Runs `f` where no caller could receive an error: a panic is logged.
pub fn or_log(what: &str, f: impl FnOnce()) {
    if let Err(error) = catch(f) {
        log(what, &error);
    }
}

/// Logs a caught panic of `what`.
pub fn log(what: &str, error: &LockError) {
    eprintln!("dokebi-lock: {what} failed: {}", error.message());
}

/// A function returning a failure sentinel: a panic is that failure, its
/// error stashed for `takeError`.
pub fn sentinel<T>(f: impl FnOnce() -> Option<T>) -> Option<T> {
    catch(f).unwrap_or_else(|error| {
        stash(error);
        None
    })
}

/// A function returning a promise: a panic is a promise settled with the
/// error, as any failed operation's.
pub fn promise(env: &Env, f: impl FnOnce() -> napi::Result<Promise>) -> napi::Result<Promise> {
    catch(f).unwrap_or_else(|error| spawn(env, ready(Err::<(), _>(error)), |()| ()))
}

/// A field of a `#[napi]` class whose destructor runs in the class's
/// finalizer, which Node calls: a panic there is logged.
pub struct Finalized<T>(ManuallyDrop<T>);

impl<T> Finalized<T> {
    pub fn new(value: T) -> Self {
        Finalized(ManuallyDrop::new(value))
    }
}

impl<T> Deref for Finalized<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.0
    }
}

impl<T> DerefMut for Finalized<T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.0
    }
}

impl<T> Drop for Finalized<T> {
    fn drop(&mut self) {
        // SAFETY: the value is dropped once, here, and never used after.
        or_log("a finalizer", || unsafe { ManuallyDrop::drop(&mut self.0) });
    }
}

fn panicked(payload: Box<dyn Any + Send>) -> LockError {
    let message = payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("a panic without a message");
    LockError::new(ErrorCode::ProviderFailed, format!("internal error in the lock addon (a bug): {message}"))
}

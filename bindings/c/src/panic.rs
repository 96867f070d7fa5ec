//! The panic boundary: no Rust panic ever unwinds into C.
//!
//! Every exported function runs its body inside [`boundary`] (getters and
//! `_free`, which answer a default value on panic) or [`call`] (acting
//! functions, which answer `DOKEBI_LOCK_PANIC` and an error describing it).
//! Asynchronous work runs inside [`CatchUnwind`], so a panic in a completion
//! task reaches the callback as `DOKEBI_LOCK_PANIC` instead of killing the
//! completion thread.

use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::task::{Context, Poll};

use super::error::{dokebi_lock_error, report};
use super::status::dokebi_lock_status;
use dokebi_lock::error::LockError;

/// The value a getter answers when its body panicked: false, zero or NULL.
pub(crate) trait PanicDefault {
    fn on_panic() -> Self;
}

impl PanicDefault for () {
    fn on_panic() {}
}

impl PanicDefault for bool {
    fn on_panic() -> bool {
        false
    }
}

impl PanicDefault for u32 {
    fn on_panic() -> u32 {
        0
    }
}

impl PanicDefault for usize {
    fn on_panic() -> usize {
        0
    }
}

impl PanicDefault for i64 {
    fn on_panic() -> i64 {
        0
    }
}

impl PanicDefault for dokebi_lock_status {
    fn on_panic() -> dokebi_lock_status {
        dokebi_lock_status::DOKEBI_LOCK_PANIC
    }
}

impl<T> PanicDefault for *const T {
    fn on_panic() -> *const T {
        std::ptr::null()
    }
}

/// Runs `body`, turning a panic into the type's default.
#[inline(always)]
pub(crate) fn boundary<T: PanicDefault>(body: impl FnOnce() -> T) -> T {
    catch_unwind(AssertUnwindSafe(body)).unwrap_or_else(|_| T::on_panic())
}

/// Runs the body of an acting function: `Ok` is `DOKEBI_LOCK_OK`; an error
/// becomes its status and, when `out_error` is not NULL, a new error handle
/// written there; a panic becomes `DOKEBI_LOCK_PANIC` the same way. The body
/// writes its own out-parameters, last, so they are written only on success.
#[inline(always)]
pub(crate) fn call(out_error: *mut *mut dokebi_lock_error, body: impl FnOnce() -> Result<(), LockError>) -> dokebi_lock_status {
    let outcome = catch_unwind(AssertUnwindSafe(body));
    boundary(|| match outcome {
        Ok(Ok(())) => dokebi_lock_status::DOKEBI_LOCK_OK,
        Ok(Err(error)) => report(dokebi_lock_error::from(&error), out_error),
        Err(_) => report(dokebi_lock_error::panic(), out_error),
    })
}

/// A future whose panics come out as `Err(PANIC error)`.
pub(crate) struct CatchUnwind<F>(pub(crate) Pin<Box<F>>);

impl<T, F: Future<Output = Result<T, LockError>>> Future for CatchUnwind<F> {
    type Output = Result<T, dokebi_lock_error>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match catch_unwind(AssertUnwindSafe(|| self.0.as_mut().poll(cx))) {
            Ok(Poll::Pending) => Poll::Pending,
            Ok(Poll::Ready(outcome)) => Poll::Ready(outcome.map_err(|error| dokebi_lock_error::from(&error))),
            Err(_) => Poll::Ready(Err(dokebi_lock_error::panic())),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::ptr;

    use super::*;
    use crate::error::{dokebi_lock_error_code, dokebi_lock_error_free};

    #[test]
    fn a_panicking_getter_answers_its_default() {
        assert!(!boundary(|| -> bool { panic!("boom") }));
        assert!(boundary(|| -> *const std::ffi::c_char { panic!("boom") }).is_null());
    }

    #[test]
    fn a_panicking_call_answers_panic_with_an_error_handle() {
        let mut error = ptr::null_mut();
        let status = call(&mut error, || panic!("boom"));
        assert_eq!(status, dokebi_lock_status::DOKEBI_LOCK_PANIC);
        // SAFETY: `call` wrote a live error handle (from Box::into_raw in `report`) to `error`.
        assert_eq!(unsafe { dokebi_lock_error_code(error) }, dokebi_lock_status::DOKEBI_LOCK_PANIC);
        // SAFETY: `error` is that live handle, freed once and not used afterwards.
        unsafe { dokebi_lock_error_free(error) };
    }

    #[test]
    fn a_panicking_future_completes_with_a_panic_error() {
        let outcome = crate::completion::block_on(CatchUnwind(Box::pin(async { panic!("boom") as Result<(), LockError> })));
        assert_eq!(outcome.unwrap_err().status(), dokebi_lock_status::DOKEBI_LOCK_PANIC);
    }
}

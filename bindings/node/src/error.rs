//! Hands core errors to the JS layer, which maps them once into `LockError`.

use std::cell::RefCell;

use dokebi_lock::{ErrorCode, LockError};
use napi_derive::napi;

thread_local! {
    /// The error of the last failed call on this JS thread, until taken.
    static LAST_ERROR: RefCell<Option<LockError>> = const { RefCell::new(None) };
}

/// Keeps `error` for [`take_error`]; the caller then returns its sentinel.
pub fn stash(error: LockError) {
    LAST_ERROR.with(|last| *last.borrow_mut() = Some(error));
}

/// Everything the JS `LockError` carries, as the core produced it.
#[napi(object)]
pub struct ErrorInfo {
    pub code: String,
    pub message: String,
    /// JSON text of `details` (issues, limits), when there are any.
    pub details: Option<String>,
    /// The message of the underlying failure (a YAML or Redis error).
    pub cause: Option<String>,
    /// The error's own fix sentence (which user, which option), when it has
    /// one; else the JS layer takes the code's.
    pub fix: Option<String>,
}

/// The error of the last call that returned a failure sentinel.
#[napi(catch_unwind)]
pub fn take_error() -> Option<ErrorInfo> {
    LAST_ERROR.with(|last| last.borrow_mut().take()).map(info)
}

pub fn info(error: LockError) -> ErrorInfo {
    ErrorInfo {
        code: error.code().as_str().to_owned(),
        message: error.message().to_owned(),
        details: error.details().map(|d| d.to_string()),
        cause: error.cause().map(|c| c.to_string()),
        fix: (error.fix() != error.code().fix()).then(|| error.fix().to_owned()),
    }
}

/// One error code of the core with its fix sentence.
#[napi(object)]
pub struct CodeInfo {
    pub code: String,
    pub fix: String,
    /// Load or shutdown errors a caller may retry unchanged.
    pub transient: bool,
}

/// Every error code of the core; the JS layer reads this table once.
#[napi(catch_unwind)]
pub fn error_codes() -> Vec<CodeInfo> {
    ErrorCode::ALL
        .into_iter()
        .map(|code| CodeInfo { code: code.as_str().to_owned(), fix: code.fix().to_owned(), transient: code.is_transient() })
        .collect()
}

/// The core's `ABORTED` error (a signal ended the acquire).
#[napi(catch_unwind)]
pub fn aborted_error() -> ErrorInfo {
    info(dokebi_lock::LockError::aborted())
}

/// The core's `WAIT_TIMEOUT` error for a wait of `ms`.
#[napi(catch_unwind)]
pub fn wait_timeout_error(ms: u32) -> ErrorInfo {
    info(dokebi_lock::LockError::wait_timeout(std::time::Duration::from_millis(ms.into())))
}

/// The core's `LEASE_LOST` error (a lease lost during a `withLock` section).
#[napi(catch_unwind)]
pub fn lease_lost_error() -> ErrorInfo {
    info(dokebi_lock::LockError::lease_lost())
}

/// The core's `CLOSED` error.
#[napi(catch_unwind)]
pub fn closed_error() -> ErrorInfo {
    info(dokebi_lock::LockError::closed())
}

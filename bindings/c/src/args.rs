//! Reading C arguments: handles, out-parameters, keys and timeouts. Every
//! check fails with a `LockError` (`INVALID_ARGUMENT`, `INVALID_KEY`), never
//! with undefined behaviour for the inputs the header allows.

use std::ffi::c_char;
use std::ptr::NonNull;
use std::time::Duration;

use dokebi_lock::error::{ErrorCode, Issue, LockError, Result};
use dokebi_lock::key;

/// Pass as `wait_timeout_ms` to wait as long as the backend's `waitTimeoutMs`.
pub const DOKEBI_LOCK_WAIT_DEFAULT: i64 = -1;

/// Borrows the object behind a handle; NULL is `INVALID_ARGUMENT`.
///
/// # Safety
/// `handle` is NULL or points to a live object for the returned lifetime.
#[inline]
pub(crate) unsafe fn handle<'a, T>(handle: *const T, what: &str) -> Result<&'a T> {
    // SAFETY: the caller promised (# Safety) that `handle` is NULL or points to a live `T`
    // for 'a; `as_ref` maps NULL to None.
    unsafe { handle.as_ref() }.ok_or_else(|| null(what))
}

/// A checked, non-NULL out-parameter. Functions check every out-parameter
/// first and write them last, so a failed call leaves them untouched.
pub(crate) struct Out<T>(NonNull<T>);

impl<T> Out<T> {
    /// `INVALID_ARGUMENT` for NULL.
    #[inline]
    pub(crate) fn new(ptr: *mut T, what: &str) -> Result<Out<T>> {
        NonNull::new(ptr).map(Out).ok_or_else(|| null(what))
    }

    /// An optional out-parameter: NULL means the caller does not want it.
    #[inline]
    pub(crate) fn optional(ptr: *mut T) -> Option<Out<T>> {
        NonNull::new(ptr).map(Out)
    }

    #[inline]
    pub(crate) fn write(self, value: T) {
        // SAFETY: the header requires out-parameters to be writable.
        unsafe { self.0.as_ptr().write(value) }
    }
}

/// Hands an object to C as an owned handle.
pub(crate) fn give<T>(object: T) -> *mut T {
    Box::into_raw(Box::new(object))
}

/// The key `key_len` bytes at `key`: empty, invalid UTF-8 or with a NUL is `INVALID_KEY`
/// (the backend checks its `maxKeyBytes`); NULL with a length is
/// `INVALID_ARGUMENT`.
///
/// # Safety
/// `key` is NULL or points to `key_len` readable bytes.
#[inline(always)]
pub(crate) unsafe fn key<'a>(key: *const c_char, key_len: usize) -> Result<&'a str> {
    let bytes: &[u8] = match (key.is_null(), key_len) {
        (_, 0) => &[],
        (true, _) => return Err(null("key")),
        // SAFETY: `key` is non-NULL here and the caller promised it points to `key_len` readable
        // bytes that outlive 'a (# Safety).
        (false, len) => unsafe { std::slice::from_raw_parts(key.cast(), len) },
    };
    // Most keys are ASCII, which `is_ascii` checks a word at a time, faster
    // than the general UTF-8 validator.
    if bytes.is_ascii() {
        // SAFETY: ASCII bytes are valid UTF-8.
        let key = unsafe { std::str::from_utf8_unchecked(bytes) };
        key::validate(key, usize::MAX)?;
        return Ok(key);
    }
    key::from_utf8(bytes, usize::MAX)
}

/// UTF-8 text of `len` bytes at `text`; invalid UTF-8 is an error with
/// `code`, NULL with a length `INVALID_ARGUMENT`.
///
/// # Safety
/// `text` is NULL or points to `len` readable bytes.
pub(crate) unsafe fn text<'a>(text: *const c_char, len: usize, what: &str, code: ErrorCode) -> Result<&'a str> {
    if text.is_null() {
        return if len == 0 { Ok("") } else { Err(null(what)) };
    }
    // SAFETY: `text` is non-NULL here and the caller promised it points to `len` readable bytes
    // that outlive 'a (# Safety).
    std::str::from_utf8(unsafe { std::slice::from_raw_parts(text.cast(), len) }).map_err(|_| {
        let message = format!("{what} is not valid UTF-8");
        match code {
            // An options error always lists its issues, this one about the whole text.
            ErrorCode::InvalidOptions => LockError::invalid_options(vec![Issue::new(String::new(), message)]),
            code => LockError::new(code, message),
        }
    })
}

/// `DOKEBI_LOCK_WAIT_DEFAULT` is the backend's default; 0 tries once;
/// other negative values are `INVALID_ARGUMENT`.
pub(crate) fn wait_timeout(ms: i64) -> Result<Option<Duration>> {
    match ms {
        DOKEBI_LOCK_WAIT_DEFAULT => Ok(None),
        ms if ms >= 0 => Ok(Some(Duration::from_millis(ms as u64))),
        _ => Err(LockError::new(ErrorCode::InvalidArgument, "wait_timeout_ms must be DOKEBI_LOCK_WAIT_DEFAULT (-1) or at least 0")),
    }
}

#[cold]
fn null(what: &str) -> LockError {
    LockError::new(ErrorCode::InvalidArgument, format!("{what} is NULL"))
}

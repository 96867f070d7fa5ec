//! The error handle: what a failed call hands back through its `out_error`.

use std::ffi::{c_char, CString};

use super::panic::boundary;
use super::status::dokebi_lock_status;
use dokebi_lock::error::LockError;

/// A failure: status, name, message, fix, the `INVALID_OPTIONS` issues, the
/// details (as JSON) and the underlying cause. Immutable, so any thread may
/// read it; the caller owns it and frees it with `dokebi_lock_error_free`.
pub struct dokebi_lock_error {
    status: dokebi_lock_status,
    message: CString,
    fix: CString,
    cause: Option<CString>,
    details: Option<CString>,
    issues: Vec<Issue>,
}

/// One option problem: where, what, and its own code (`UNKNOWN_CONNECTION`
/// for an undefined connection, else `INVALID_OPTIONS`).
struct Issue {
    path: CString,
    message: CString,
    status: dokebi_lock_status,
}

impl From<&LockError> for dokebi_lock_error {
    fn from(error: &LockError) -> Self {
        dokebi_lock_error {
            status: error.code().into(),
            message: c_text(error.message()),
            fix: c_text(error.fix()),
            cause: error.cause().map(|cause| c_text(&cause.to_string())),
            details: error.details().map(|details| c_text(&details.to_string())),
            issues: error
                .issues()
                .iter()
                .map(|issue| Issue { path: c_text(&issue.path), message: c_text(&issue.message), status: issue.code.into() })
                .collect(),
        }
    }
}

impl dokebi_lock_error {
    /// The error of a panic caught at the boundary.
    pub(crate) fn panic() -> Self {
        dokebi_lock_error {
            status: dokebi_lock_status::DOKEBI_LOCK_PANIC,
            message: c_text("internal error: a Rust panic was caught at the C boundary"),
            fix: c_text("This is a bug in dokebi-lock; report it with the panic message printed on standard error."),
            cause: None,
            details: None,
            issues: Vec::new(),
        }
    }

    pub(crate) fn status(&self) -> dokebi_lock_status {
        self.status
    }
}

/// Hands `error` to the caller through `out_error` (when not NULL) and
/// returns its status.
pub(crate) fn report(error: dokebi_lock_error, out_error: *mut *mut dokebi_lock_error) -> dokebi_lock_status {
    let status = error.status;
    if !out_error.is_null() {
        // SAFETY: the caller passed either NULL or a writable pointer.
        unsafe { out_error.write(Box::into_raw(Box::new(error))) };
    }
    status
}

/// A C string of `text`; an interior NUL (never produced by the library
/// itself) becomes U+FFFD rather than cutting the text short.
pub(crate) fn c_text(text: &str) -> CString {
    CString::new(text).unwrap_or_else(|_| CString::new(text.replace('\0', "\u{FFFD}")).expect("no NUL left"))
}

/// Borrows the error behind `error`, or `None` for NULL.
///
/// # Safety
/// `error` is NULL or a live handle from this library.
unsafe fn get<'a>(error: *const dokebi_lock_error) -> Option<&'a dokebi_lock_error> {
    // SAFETY: the caller promised `error` is NULL or a live handle (# Safety); handles come from
    // Box::into_raw in `report` and are immutable, so a shared borrow is sound.
    unsafe { error.as_ref() }
}

/// The status of the error (`DOKEBI_LOCK_OK` for NULL, meaning no error).
///
/// # Safety
/// `error` is NULL or a live error handle.
#[no_mangle]
pub unsafe extern "C" fn dokebi_lock_error_code(error: *const dokebi_lock_error) -> dokebi_lock_status {
    // SAFETY: the caller promised `error` is NULL or a live error handle (# Safety), as `get` requires.
    boundary(|| unsafe { get(error) }.map_or(dokebi_lock_status::DOKEBI_LOCK_OK, |e| e.status))
}

/// The stable code name, e.g. `"WAIT_TIMEOUT"`; static, never freed. NULL
/// for NULL.
///
/// # Safety
/// `error` is NULL or a live error handle.
#[no_mangle]
pub unsafe extern "C" fn dokebi_lock_error_name(error: *const dokebi_lock_error) -> *const c_char {
    // SAFETY: the caller promised `error` is NULL or a live error handle (# Safety), as `get` requires.
    boundary(|| unsafe { get(error) }.map_or(std::ptr::null(), |e| e.status.name().as_ptr().cast()))
}

/// A human message (never containing a lock key), owned by the error. NULL
/// for NULL.
///
/// # Safety
/// `error` is NULL or a live error handle.
#[no_mangle]
pub unsafe extern "C" fn dokebi_lock_error_message(error: *const dokebi_lock_error) -> *const c_char {
    // SAFETY: the caller promised `error` is NULL or a live error handle (# Safety), as `get` requires.
    boundary(|| unsafe { get(error) }.map_or(std::ptr::null(), |e| e.message.as_ptr()))
}

/// One sentence saying what to do about the error, owned by the error. NULL
/// for NULL.
///
/// # Safety
/// `error` is NULL or a live error handle.
#[no_mangle]
pub unsafe extern "C" fn dokebi_lock_error_fix(error: *const dokebi_lock_error) -> *const c_char {
    // SAFETY: the caller promised `error` is NULL or a live error handle (# Safety), as `get` requires.
    boundary(|| unsafe { get(error) }.map_or(std::ptr::null(), |e| e.fix.as_ptr()))
}

/// The underlying failure (for example the Redis error), owned by the error;
/// NULL when there is none or for NULL.
///
/// # Safety
/// `error` is NULL or a live error handle.
#[no_mangle]
pub unsafe extern "C" fn dokebi_lock_error_cause(error: *const dokebi_lock_error) -> *const c_char {
    // SAFETY: the caller promised `error` is NULL or a live error handle (# Safety), as `get` requires.
    boundary(|| unsafe { get(error) }.and_then(|e| e.cause.as_ref()).map_or(std::ptr::null(), |c| c.as_ptr()))
}

/// The error's details as one JSON object, owned by the error: what the
/// code's entry in docs/errors.md lists (a policy's `NO_ELIGIBLE_BACKEND`
/// has `tried`, each member and why it could not serve; a store's
/// `PROVIDER_FAILED` has `unreachable` when no connection could be made).
/// NULL when the error has none or for NULL. Never contains a key.
///
/// # Safety
/// `error` is NULL or a live error handle.
#[no_mangle]
pub unsafe extern "C" fn dokebi_lock_error_details(error: *const dokebi_lock_error) -> *const c_char {
    // SAFETY: the caller promised `error` is NULL or a live error handle (# Safety), as `get` requires.
    boundary(|| unsafe { get(error) }.and_then(|e| e.details.as_ref()).map_or(std::ptr::null(), |d| d.as_ptr()))
}

/// How many option problems an `INVALID_OPTIONS` error lists (0 for other
/// errors and for NULL).
///
/// # Safety
/// `error` is NULL or a live error handle.
#[no_mangle]
pub unsafe extern "C" fn dokebi_lock_error_issue_count(error: *const dokebi_lock_error) -> usize {
    // SAFETY: the caller promised `error` is NULL or a live error handle (# Safety), as `get` requires.
    boundary(|| unsafe { get(error) }.map_or(0, |e| e.issues.len()))
}

/// The dotted path of issue `index`, e.g. `"backends.shared.leaseMs"`, owned
/// by the error; NULL when `index` is out of range or for NULL.
///
/// # Safety
/// `error` is NULL or a live error handle.
#[no_mangle]
pub unsafe extern "C" fn dokebi_lock_error_issue_path(error: *const dokebi_lock_error, index: usize) -> *const c_char {
    // SAFETY: the caller promised `error` is NULL or a live error handle (# Safety), as `get` requires.
    boundary(|| unsafe { get(error) }.and_then(|e| e.issues.get(index)).map_or(std::ptr::null(), |issue| issue.path.as_ptr()))
}

/// What is wrong at issue `index`, owned by the error; NULL when `index` is
/// out of range or for NULL.
///
/// # Safety
/// `error` is NULL or a live error handle.
#[no_mangle]
pub unsafe extern "C" fn dokebi_lock_error_issue_message(error: *const dokebi_lock_error, index: usize) -> *const c_char {
    // SAFETY: the caller promised `error` is NULL or a live error handle (# Safety), as `get` requires.
    boundary(|| unsafe { get(error) }.and_then(|e| e.issues.get(index)).map_or(std::ptr::null(), |issue| issue.message.as_ptr()))
}

/// The code of issue `index`: `DOKEBI_LOCK_UNKNOWN_CONNECTION` for a backend
/// naming an undefined connection, `DOKEBI_LOCK_INVALID_OPTIONS` for every
/// other problem, so a caller can classify each issue also when one error
/// lists both kinds; `DOKEBI_LOCK_OK` when `index` is out of range or for
/// NULL.
///
/// # Safety
/// `error` is NULL or a live error handle.
#[no_mangle]
pub unsafe extern "C" fn dokebi_lock_error_issue_status(error: *const dokebi_lock_error, index: usize) -> dokebi_lock_status {
    // SAFETY: the caller promised `error` is NULL or a live error handle (# Safety), as `get` requires.
    boundary(|| unsafe { get(error) }.and_then(|e| e.issues.get(index)).map_or(dokebi_lock_status::DOKEBI_LOCK_OK, |issue| issue.status))
}

/// Frees an error and every string it handed out. NULL is accepted.
///
/// # Safety
/// `error` is NULL or a live error handle, not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn dokebi_lock_error_free(error: *mut dokebi_lock_error) {
    boundary(|| {
        if !error.is_null() {
            // SAFETY: the handle came from Box::into_raw in `report`.
            drop(unsafe { Box::from_raw(error) });
        }
    })
}

//! The asynchronous acquire: a completion callback and a cancel handle.

use std::ffi::{c_char, c_void};

use super::args::{self, give, handle, wait_timeout, Out};
use super::backend::dokebi_lock_backend;
use super::error::dokebi_lock_error;
use super::kinds::{self, dokebi_lock_acquire_options};
use super::lease::dokebi_lock_lease;
use super::panic::{boundary, call, CatchUnwind};
use super::status::dokebi_lock_status;
use dokebi_lock::abort::AbortController;
use dokebi_lock::acquire::LockKind;
use dokebi_lock::error::{ErrorCode, LockError, Result};

/// Receives the outcome of `dokebi_lock_acquire_async`, exactly once, on the
/// provider's completion thread. On success `status` is `DOKEBI_LOCK_OK`,
/// `lease` a new lease and `error` NULL; on failure `lease` is NULL and
/// `error` a new error. The callback owns both and frees them (it may keep
/// them). It must not unwind (no C++ exception, no longjmp) out of the call,
/// and should return soon: callbacks of one provider run one after another.
pub type dokebi_lock_acquire_callback = Option<
    unsafe extern "C" fn(userdata: *mut c_void, status: dokebi_lock_status, lease: *mut dokebi_lock_lease, error: *mut dokebi_lock_error),
>;

/// Cancels one asynchronous acquire, or the blocking acquires given it
/// (`dokebi_lock_pending_new`); freed with `dokebi_lock_pending_free`.
pub struct dokebi_lock_pending {
    pub(crate) controller: AbortController,
}

/// A cancel handle of its own, for blocking acquires
/// (`dokebi_lock_acquire_ex_cancellable`): once `dokebi_lock_pending_cancel`
/// was called on it, every acquire given it that is still waiting ends with
/// `DOKEBI_LOCK_ABORTED`, and every later one fails so at once. One handle
/// may serve several calls, also on several threads.
///
/// # Safety
/// `out_pending` is writable; `out_error` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn dokebi_lock_pending_new(
    out_pending: *mut *mut dokebi_lock_pending,
    out_error: *mut *mut dokebi_lock_error,
) -> dokebi_lock_status {
    call(out_error, || {
        let out = Out::new(out_pending, "out_pending")?;
        out.write(give(dokebi_lock_pending { controller: AbortController::new() }));
        Ok(())
    })
}

/// The caller's context pointer, handed to the callback on another thread
/// (the header makes that the caller's promise).
struct UserData(*mut c_void);

// SAFETY: the C caller guarantees `userdata` may be used from the completion thread.
unsafe impl Send for UserData {}

impl UserData {
    fn get(&self) -> *mut c_void {
        self.0
    }
}

/// Starts acquiring `key` without blocking; `callback(userdata, ...)` gets
/// the outcome on the completion thread, possibly before this function
/// returns. Waiting as `dokebi_lock_acquire`. When `out_pending` is not NULL
/// it receives a handle whose `dokebi_lock_pending_cancel` ends the wait
/// with `DOKEBI_LOCK_ABORTED`.
///
/// Returns `DOKEBI_LOCK_OK` when the acquire started: then, and only then,
/// the callback is called exactly once. An invalid argument (NULL backend or
/// callback, an empty or non-UTF-8 key, a negative timeout other than
/// `DOKEBI_LOCK_WAIT_DEFAULT`) fails here and the callback is never called;
/// every other failure (a key over `maxKeyBytes` included) reaches the callback.
///
/// # Safety
/// `backend` is NULL or a live backend handle; `key` is NULL or points to
/// `key_len` readable bytes; `userdata` may be used from another thread;
/// `out_pending` and `out_error` are NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn dokebi_lock_acquire_async(
    backend: *const dokebi_lock_backend,
    key: *const c_char,
    key_len: usize,
    wait_timeout_ms: i64,
    callback: dokebi_lock_acquire_callback,
    userdata: *mut c_void,
    out_pending: *mut *mut dokebi_lock_pending,
    out_error: *mut *mut dokebi_lock_error,
) -> dokebi_lock_status {
    call(out_error, || {
        // SAFETY: the caller promised `key` is NULL or points to `key_len` readable bytes (# Safety).
        let key = unsafe { args::key(key, key_len) }?;
        // SAFETY: as promised by our caller (# Safety).
        unsafe { start(backend, &[key], LockKind::EXCLUSIVE, wait_timeout_ms, callback, userdata, out_pending) }
    })
}

/// Starts acquiring as `options` asks (see `dokebi_lock_acquire_ex`)
/// without blocking, as `dokebi_lock_acquire_async` does. `options` and its
/// keys are read during the call only.
///
/// # Safety
/// `backend` is NULL or a live backend handle; `options` as for
/// `dokebi_lock_acquire_ex`; `userdata` may be used from another thread;
/// `out_pending` and `out_error` are NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn dokebi_lock_acquire_async_ex(
    backend: *const dokebi_lock_backend,
    options: *const dokebi_lock_acquire_options,
    wait_timeout_ms: i64,
    callback: dokebi_lock_acquire_callback,
    userdata: *mut c_void,
    out_pending: *mut *mut dokebi_lock_pending,
    out_error: *mut *mut dokebi_lock_error,
) -> dokebi_lock_status {
    call(out_error, || {
        // SAFETY: the caller promised `options` and its keys are readable (# Safety).
        let (keys, kind) = unsafe { kinds::read(options) }?;
        // SAFETY: as promised by our caller (# Safety).
        unsafe { start(backend, &keys, kind, wait_timeout_ms, callback, userdata, out_pending) }
    })
}

/// The acquire of both `_async` calls, of checked keys (copied: the
/// acquire outlives the call).
///
/// # Safety
/// `backend` is NULL or a live backend handle; `userdata` may be used from
/// another thread; `out_pending` is NULL or writable.
unsafe fn start(
    backend: *const dokebi_lock_backend,
    keys: &[&str],
    kind: LockKind,
    wait_timeout_ms: i64,
    callback: dokebi_lock_acquire_callback,
    userdata: *mut c_void,
    out_pending: *mut *mut dokebi_lock_pending,
) -> Result<()> {
    // SAFETY: the caller promised `backend` is NULL or a live backend handle (# Safety).
    let backend = unsafe { dokebi_lock_backend::usable(backend) }?;
    let callback = callback.ok_or_else(|| LockError::new(ErrorCode::InvalidArgument, "callback is NULL"))?;
    let keys: Vec<String> = keys.iter().map(|&key| key.to_owned()).collect();
    let controller = AbortController::new();
    let options = backend.options(kind, wait_timeout(wait_timeout_ms)?, Some(controller.signal()));
    let userdata = UserData(userdata);
    let driver = backend.backend.clone();
    backend.completions.spawn(async move {
        let acquire = async move {
            match &keys[..] {
                [key] => driver.acquire(key, options).await,
                _ => driver.acquire_many(&keys.iter().map(String::as_str).collect::<Vec<_>>(), options).await,
            }
        };
        let outcome = CatchUnwind(Box::pin(acquire)).await;
        let (status, lease, error) = match outcome {
            Ok(lease) => (dokebi_lock_status::DOKEBI_LOCK_OK, dokebi_lock_lease::give(lease), std::ptr::null_mut()),
            Err(error) => (error.status(), std::ptr::null_mut(), give(error)),
        };
        // SAFETY: the caller promised a callback callable with these arguments.
        unsafe { callback(userdata.get(), status, lease, error) };
    })?;
    if let Some(out) = Out::optional(out_pending) {
        out.write(give(dokebi_lock_pending { controller }));
    }
    Ok(())
}

/// Cancels the acquire: if it is still waiting, its callback gets
/// `DOKEBI_LOCK_ABORTED`; once the lease was granted this does nothing.
/// Idempotent.
///
/// # Safety
/// `pending` is NULL or a live pending handle.
#[no_mangle]
pub unsafe extern "C" fn dokebi_lock_pending_cancel(pending: *const dokebi_lock_pending) -> dokebi_lock_status {
    call(std::ptr::null_mut(), || {
        // SAFETY: the caller promised `pending` is NULL or a live pending handle (# Safety).
        unsafe { handle(pending, "pending") }?.controller.abort();
        Ok(())
    })
}

/// Frees a pending handle. It does not cancel: the callback still comes.
/// NULL is accepted.
///
/// # Safety
/// `pending` is NULL or a live pending handle, not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn dokebi_lock_pending_free(pending: *mut dokebi_lock_pending) {
    boundary(|| {
        if !pending.is_null() {
            // SAFETY: the handle came from Box::into_raw in `acquire_async`.
            drop(unsafe { Box::from_raw(pending) });
        }
    })
}

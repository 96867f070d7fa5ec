//! The backend handle and the blocking acquires.

use std::ffi::{c_char, CStr};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use super::args::{self, give, handle, wait_timeout, Out};
use super::completion::{block_on, refuse_on_driver_thread, Completions};
use super::error::dokebi_lock_error;
use super::fork;
use super::kinds::{self, dokebi_lock_acquire_options};
use super::lease::dokebi_lock_lease;
use super::panic::{boundary, call};
use super::policy::PolicyNames;
use super::status::dokebi_lock_status;
use dokebi_lock::acquire::{AcquireOptions, LockKind};
use dokebi_lock::error::Result;
use dokebi_lock::provider::{Backend, Lease};
use dokebi_lock::{AbortSignal, ErrorCode, HolderLabel, LockError};

use super::pending::dokebi_lock_pending;

/// One backend of a provider. Shared by any number of threads; freed with
/// `dokebi_lock_backend_free`.
pub struct dokebi_lock_backend {
    pub(crate) backend: Backend,
    pub(crate) completions: Arc<Completions>,
    /// The process its provider was opened in (see [`fork`]).
    pub(crate) born: u32,
    /// A policy backend's member and rule names, made on first use.
    pub(crate) policy_names: OnceLock<PolicyNames>,
    /// The label of this handle's leases (`dokebi_lock_backend_with_holder`);
    /// `None`: the provider's `holder`.
    holder: Option<HolderLabel>,
}

impl dokebi_lock_backend {
    pub(crate) fn new(backend: Backend, completions: Arc<Completions>, born: u32) -> Self {
        dokebi_lock_backend { backend, completions, born, policy_names: OnceLock::new(), holder: None }
    }

    /// The core's options of an acquire through this handle: `kind`, the
    /// wait and the signal, its leases labelled as the handle says.
    pub(crate) fn options(&self, kind: LockKind, wait_timeout: Option<Duration>, signal: Option<AbortSignal>) -> AcquireOptions {
        AcquireOptions::of_kind(kind, wait_timeout, signal).held_by(self.holder.clone())
    }

    /// The backend of a live handle, `CLOSED` in a child forked after its
    /// provider was opened.
    ///
    /// # Safety
    /// `backend` is NULL or a live backend handle, for `'a`.
    #[inline(always)]
    pub(crate) unsafe fn usable<'a>(backend: *const dokebi_lock_backend) -> Result<&'a dokebi_lock_backend> {
        // SAFETY: as promised by our caller (# Safety).
        let backend = unsafe { handle(backend, "backend") }?;
        fork::check(backend.born)?;
        Ok(backend)
    }

    /// Blocks the calling thread until the key is ours or the wait ends:
    /// on a condition variable (local), or driving the driver's async
    /// acquire, whose I/O runs on the driver's own thread (redis; file,
    /// whose waiters are woken by its wake-up thread). Answers
    /// the lease as a new handle.
    #[inline(always)]
    fn acquire(&self, keys: &[&str], kind: LockKind, wait_timeout: Option<Duration>) -> Result<*mut dokebi_lock_lease> {
        match &self.backend {
            Backend::Local(local) => dokebi_lock_lease::acquire_local(local, keys, kind, self.holder.clone(), wait_timeout),
            Backend::Redis(_) | Backend::Postgres(_) | Backend::Mysql(_) | Backend::File(_) | Backend::Policy(_) => {
                Ok(dokebi_lock_lease::give(self.acquire_redis(keys, kind, wait_timeout)?))
            }
        }
    }

    /// Out of line (redis and file): the redis acquire's future takes kilobytes, which the
    /// local acquire's stack frame need not reserve.
    #[inline(never)]
    fn acquire_redis(&self, keys: &[&str], kind: LockKind, wait_timeout: Option<Duration>) -> Result<Lease> {
        refuse_on_driver_thread()?;
        let options = self.options(kind, wait_timeout, None);
        match keys {
            [key] => block_on(self.backend.acquire(key, options)),
            _ => block_on(self.backend.acquire_many(keys, options)),
        }
    }
}

/// Acquires `key` (`key_len` bytes of UTF-8 at `key`), blocking the calling
/// thread: first come, first served among the waiters of this process. Waits
/// at most `wait_timeout_ms` (`DOKEBI_LOCK_WAIT_DEFAULT` for the backend's
/// `waitTimeoutMs`; 0 tries once): `DOKEBI_LOCK_WAIT_TIMEOUT` after a wait,
/// `DOKEBI_LOCK_LOCK_BUSY` with 0. Also `INVALID_KEY`, `KEY_LIMIT`,
/// `QUEUE_FULL`, `CLOSED`, `PROVIDER_FAILED` (redis, postgres, mysql, file) and
/// `OUTCOME_UNKNOWN` (redis, postgres, mysql). Only closing the provider ends the wait early: for a
/// wait another thread can cancel, see `dokebi_lock_acquire_ex_cancellable`.
///
/// # Safety
/// `backend` is NULL or a live backend handle; `key` is NULL or points to
/// `key_len` readable bytes; `out_lease` is writable; `out_error` is NULL or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn dokebi_lock_acquire(
    backend: *const dokebi_lock_backend,
    key: *const c_char,
    key_len: usize,
    wait_timeout_ms: i64,
    out_lease: *mut *mut dokebi_lock_lease,
    out_error: *mut *mut dokebi_lock_error,
) -> dokebi_lock_status {
    // SAFETY: the arguments are passed through unchanged; the caller upholds `acquire`'s
    // contract, which is this function's (# Safety).
    call(out_error, || unsafe { acquire(backend, key, key_len, wait_timeout(wait_timeout_ms), out_lease) })
}

/// Takes `key` if it is free now, else `DOKEBI_LOCK_LOCK_BUSY`; never waits.
/// The same as `dokebi_lock_acquire` with a wait of 0.
///
/// # Safety
/// As `dokebi_lock_acquire`.
#[no_mangle]
pub unsafe extern "C" fn dokebi_lock_try_acquire(
    backend: *const dokebi_lock_backend,
    key: *const c_char,
    key_len: usize,
    out_lease: *mut *mut dokebi_lock_lease,
    out_error: *mut *mut dokebi_lock_error,
) -> dokebi_lock_status {
    // SAFETY: the arguments are passed through unchanged; the caller upholds `acquire`'s
    // contract, which is this function's (# Safety, as `dokebi_lock_acquire`).
    call(out_error, || unsafe { acquire(backend, key, key_len, Ok(Some(Duration::ZERO)), out_lease) })
}

/// # Safety
/// As `dokebi_lock_acquire`.
unsafe fn acquire(
    backend: *const dokebi_lock_backend,
    key: *const c_char,
    key_len: usize,
    wait_timeout: Result<Option<Duration>>,
    out_lease: *mut *mut dokebi_lock_lease,
) -> Result<()> {
    // SAFETY: the caller promised `backend` is NULL or a live backend handle (# Safety).
    let backend = unsafe { dokebi_lock_backend::usable(backend) }?;
    let out = Out::new(out_lease, "out_lease")?;
    // SAFETY: the caller promised `key` is NULL or points to `key_len` readable bytes (# Safety).
    let key = unsafe { args::key(key, key_len) }?;
    out.write(backend.acquire(&[key], LockKind::EXCLUSIVE, wait_timeout?)?);
    Ok(())
}

/// Acquires as `options` asks, blocking as `dokebi_lock_acquire` does:
/// every key of `options->keys` as one lease (all or none; two callers
/// asking for overlapping sets in any order never deadlock), in its mode
/// (shared leases of a key hold it together, an exclusive one alone; FIFO
/// per key across modes, so a queued writer is never starved by later
/// readers) and, for a counted key, with `weight` of its `limit` units.
/// Also `INVALID_ARGUMENT` for NULL `options`, no keys, a key given twice, a
/// bad mode, limit or weight, or a limit other than the one the key is held
/// or waited for with; `UNSUPPORTED_KIND` from a driver that cannot grant
/// the kind.
///
/// # Safety
/// `backend` is NULL or a live backend handle; `options` is NULL or points
/// to a readable options struct whose `keys` point to `key_count` readable
/// keys of `len` readable bytes each; `out_lease` is writable; `out_error`
/// is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn dokebi_lock_acquire_ex(
    backend: *const dokebi_lock_backend,
    options: *const dokebi_lock_acquire_options,
    wait_timeout_ms: i64,
    out_lease: *mut *mut dokebi_lock_lease,
    out_error: *mut *mut dokebi_lock_error,
) -> dokebi_lock_status {
    // SAFETY: the arguments are passed through unchanged; the caller upholds `acquire_ex`'s
    // contract, which is this function's (# Safety).
    call(out_error, || unsafe { acquire_ex(backend, options, wait_timeout(wait_timeout_ms), out_lease) })
}

/// `dokebi_lock_acquire_ex` with a wait of 0: `DOKEBI_LOCK_LOCK_BUSY` unless
/// every key can be granted now.
///
/// # Safety
/// As `dokebi_lock_acquire_ex`.
#[no_mangle]
pub unsafe extern "C" fn dokebi_lock_try_acquire_ex(
    backend: *const dokebi_lock_backend,
    options: *const dokebi_lock_acquire_options,
    out_lease: *mut *mut dokebi_lock_lease,
    out_error: *mut *mut dokebi_lock_error,
) -> dokebi_lock_status {
    // SAFETY: as `dokebi_lock_acquire_ex` (# Safety).
    call(out_error, || unsafe { acquire_ex(backend, options, Ok(Some(Duration::ZERO)), out_lease) })
}

/// # Safety
/// As `dokebi_lock_acquire_ex`.
unsafe fn acquire_ex(
    backend: *const dokebi_lock_backend,
    options: *const dokebi_lock_acquire_options,
    wait_timeout: Result<Option<Duration>>,
    out_lease: *mut *mut dokebi_lock_lease,
) -> Result<()> {
    // SAFETY: the caller promised `backend` is NULL or a live backend handle (# Safety).
    let backend = unsafe { dokebi_lock_backend::usable(backend) }?;
    let out = Out::new(out_lease, "out_lease")?;
    // SAFETY: the caller promised `options` and its keys are readable (# Safety).
    let (keys, kind) = unsafe { kinds::read(options) }?;
    out.write(backend.acquire(&keys, kind, wait_timeout?)?);
    Ok(())
}

/// Acquires as `dokebi_lock_acquire_ex` does, and ends the wait with
/// `DOKEBI_LOCK_ABORTED` (nothing held) once `cancel` is cancelled
/// (`dokebi_lock_pending_cancel`, from any thread; see
/// `dokebi_lock_pending_new`). NULL `cancel` is `dokebi_lock_acquire_ex`.
///
/// # Safety
/// As `dokebi_lock_acquire_ex`; `cancel` is NULL or a live pending handle
/// for the whole call.
#[no_mangle]
pub unsafe extern "C" fn dokebi_lock_acquire_ex_cancellable(
    backend: *const dokebi_lock_backend,
    options: *const dokebi_lock_acquire_options,
    wait_timeout_ms: i64,
    cancel: *const dokebi_lock_pending,
    out_lease: *mut *mut dokebi_lock_lease,
    out_error: *mut *mut dokebi_lock_error,
) -> dokebi_lock_status {
    call(out_error, || {
        // SAFETY: the caller promised `cancel` is NULL or a live pending handle (# Safety).
        let Some(cancel) = (unsafe { cancel.as_ref() }) else {
            // SAFETY: as `dokebi_lock_acquire_ex` (# Safety).
            return unsafe { acquire_ex(backend, options, wait_timeout(wait_timeout_ms), out_lease) };
        };
        // SAFETY: the caller promised `backend` is NULL or a live backend handle (# Safety).
        let backend = unsafe { dokebi_lock_backend::usable(backend) }?;
        let out = Out::new(out_lease, "out_lease")?;
        // SAFETY: the caller promised `options` and its keys are readable (# Safety).
        let (keys, kind) = unsafe { kinds::read(options) }?;
        if !matches!(backend.backend, Backend::Local(_)) {
            refuse_on_driver_thread()?;
        }
        // The core's acquire with the handle's signal, waited for on this thread.
        let options = backend.options(kind, wait_timeout(wait_timeout_ms)?, Some(cancel.controller.signal()));
        let lease = match &keys[..] {
            [key] => block_on(backend.backend.acquire(key, options)),
            _ => block_on(backend.backend.acquire_many(&keys, options)),
        }?;
        out.write(dokebi_lock_lease::give(lease));
        Ok(())
    })
}

/// A new handle of `backend` whose acquires label their leases `holder` (a
/// NUL-terminated UTF-8 string) instead of the provider's `holder` option:
/// the same backend (its keys, waiters and connections), its leases named
/// `holder` by `inspect` and by another acquire's `WAIT_TIMEOUT` or
/// `LOCK_BUSY` details (a job, a request, a tenant; never a secret: anyone
/// who reads the store reads it). Freed
/// with `dokebi_lock_backend_free`, independently of `backend`.
///
/// Errors: `INVALID_ARGUMENT` for a NULL or non-UTF-8 `holder` or one the
/// options would refuse (empty, a control or invisible formatting
/// character, over 40 bytes as stored), `CLOSED` in a child forked after
/// the provider was opened.
///
/// # Safety
/// `backend` is NULL or a live backend handle; `holder` is NULL or a
/// NUL-terminated string; `out_backend` is writable; `out_error` is NULL or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn dokebi_lock_backend_with_holder(
    backend: *const dokebi_lock_backend,
    holder: *const c_char,
    out_backend: *mut *mut dokebi_lock_backend,
    out_error: *mut *mut dokebi_lock_error,
) -> dokebi_lock_status {
    call(out_error, || {
        // SAFETY: the caller promised `backend` is NULL or a live backend handle (# Safety).
        let backend = unsafe { dokebi_lock_backend::usable(backend) }?;
        let out = Out::new(out_backend, "out_backend")?;
        // SAFETY: the caller promised `holder` is NULL or a NUL-terminated string (# Safety); this
        // only rejects NULL.
        unsafe { handle(holder, "holder") }?;
        // SAFETY: `holder` is non-NULL (checked just above) and the caller promised it is NUL-terminated.
        let label = unsafe { CStr::from_ptr(holder) }
            .to_str()
            .map_err(|_| LockError::new(ErrorCode::InvalidArgument, "holder is not valid UTF-8"))
            .and_then(HolderLabel::of_acquire)?;
        let labelled = dokebi_lock_backend {
            holder: Some(label),
            ..dokebi_lock_backend::new(backend.backend.clone(), backend.completions.clone(), backend.born)
        };
        out.write(give(labelled));
        Ok(())
    })
}

/// Frees a backend handle; leases and pending acquires taken from it stay
/// valid. NULL is accepted. In a child forked after its provider was opened
/// the handle is leaked.
///
/// # Safety
/// `backend` is NULL or a live backend handle that no other thread uses any
/// more and that is not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn dokebi_lock_backend_free(backend: *mut dokebi_lock_backend) {
    boundary(|| {
        if !backend.is_null() {
            // SAFETY: the handle came from Box::into_raw in `provider_backend`.
            let backend = unsafe { Box::from_raw(backend) };
            // In a child forked since, dropping its last reference could close the parent's.
            if fork::inherited(backend.born) {
                std::mem::forget(backend);
            }
        }
    })
}

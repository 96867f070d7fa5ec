//! `dokebi_lock_with_lock`, `dokebi_lock_backend_get_status` and `dokebi_lock_backend_driver`.

use std::ffi::{c_char, c_int, c_void};

use super::args::{self, handle, wait_timeout, Out};
use super::backend::dokebi_lock_backend;
use super::completion::{block_on, refuse_on_driver_thread};
use super::error::dokebi_lock_error;
use super::kinds::{self, dokebi_lock_acquire_options};
use super::lease::{decimal, FENCE_CAPACITY};
use super::panic::{boundary, call};
use super::status::dokebi_lock_status;
use super::telemetry::driver_name;
use dokebi_lock::abort::AbortSignal;
use dokebi_lock::acquire::LockKind;
use dokebi_lock::error::{ErrorCode, Result};
use dokebi_lock::provider::Backend;
use dokebi_lock::Section;

/// What a section run by `dokebi_lock_with_lock` can ask; valid only during
/// the call of the section.
pub struct dokebi_lock_section {
    fence: [u8; FENCE_CAPACITY],
    lost: AbortSignal,
}

/// A critical section: gets the section (for its fence and whether the lease
/// was lost) and the caller's `user_data`; its return value is handed back
/// through `out_result`. It must not unwind (no C++ exception may escape it).
pub type dokebi_lock_section_fn = Option<unsafe extern "C" fn(section: *const dokebi_lock_section, user_data: *mut c_void) -> c_int>;

/// Acquires `key` as `dokebi_lock_acquire` does, runs `section` on the calling
/// thread, and releases the lease whatever the section did. A redis lease is
/// renewed every `leaseMs / 3` on the driver's own thread while the section
/// runs. On success `*out_result` is the section's return value. If the lease
/// was lost at any point during the section, the call fails with
/// `DOKEBI_LOCK_LEASE_LOST` even though the section ran: its work may have
/// overlapped another holder's.
///
/// # Safety
/// `backend` is NULL or a live backend handle; `key` is NULL or points to
/// `key_len` readable bytes; `section` is callable with `user_data`;
/// `out_result` is writable; `out_error` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn dokebi_lock_with_lock(
    backend: *const dokebi_lock_backend,
    key: *const c_char,
    key_len: usize,
    wait_timeout_ms: i64,
    section: dokebi_lock_section_fn,
    user_data: *mut c_void,
    out_result: *mut c_int,
    out_error: *mut *mut dokebi_lock_error,
) -> dokebi_lock_status {
    call(out_error, || {
        // SAFETY: the caller promised `key` is NULL or points to `key_len` readable bytes (# Safety).
        let key = unsafe { args::key(key, key_len) }?;
        // SAFETY: as promised by our caller (# Safety).
        unsafe { run(backend, &[key], LockKind::EXCLUSIVE, wait_timeout_ms, section, user_data, out_result) }
    })
}

/// `dokebi_lock_with_lock` holding what `options` asks for (see
/// `dokebi_lock_acquire_ex`); the section's fence is that of the first key.
///
/// # Safety
/// `backend` is NULL or a live backend handle; `options` as for
/// `dokebi_lock_acquire_ex`; `section` is callable with `user_data`;
/// `out_result` is writable; `out_error` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn dokebi_lock_with_lock_ex(
    backend: *const dokebi_lock_backend,
    options: *const dokebi_lock_acquire_options,
    wait_timeout_ms: i64,
    section: dokebi_lock_section_fn,
    user_data: *mut c_void,
    out_result: *mut c_int,
    out_error: *mut *mut dokebi_lock_error,
) -> dokebi_lock_status {
    call(out_error, || {
        // SAFETY: the caller promised `options` and its keys are readable (# Safety).
        let (keys, kind) = unsafe { kinds::read(options) }?;
        // SAFETY: as promised by our caller (# Safety).
        unsafe { run(backend, &keys, kind, wait_timeout_ms, section, user_data, out_result) }
    })
}

/// The section of both `with_lock` calls, over checked keys.
///
/// # Safety
/// `backend` is NULL or a live backend handle; `section` is callable with
/// `user_data`; `out_result` is writable.
unsafe fn run(
    backend: *const dokebi_lock_backend,
    keys: &[&str],
    kind: LockKind,
    wait_timeout_ms: i64,
    section: dokebi_lock_section_fn,
    user_data: *mut c_void,
    out_result: *mut c_int,
) -> Result<()> {
    // SAFETY: the caller promised `backend` is NULL or a live backend handle (# Safety).
    let backend = unsafe { dokebi_lock_backend::usable(backend) }?;
    if !matches!(backend.backend, Backend::Local(_)) {
        refuse_on_driver_thread()?;
    }
    let out = Out::new(out_result, "out_result")?;
    let section = section.ok_or_else(|| dokebi_lock::LockError::new(ErrorCode::InvalidArgument, "section is NULL"))?;
    let options = backend.options(kind, wait_timeout(wait_timeout_ms)?, None);
    // The raw pointer crosses into the section's future; the future runs
    // to completion on this thread before the call returns.
    let user_data = user_data as usize;
    let body = |granted: Section| async move {
        let view = dokebi_lock_section { fence: decimal(granted.fence), lost: granted.signal };
        // SAFETY: the caller vouches that `section` accepts `user_data`.
        unsafe { section(&view, user_data as *mut c_void) }
    };
    let result = match keys {
        [key] => block_on(backend.backend.with_lock(key, options, body)),
        _ => block_on(backend.backend.with_lock_many(keys, options, body)),
    }?;
    out.write(result);
    Ok(())
}

/// The section's fence as a NUL-terminated decimal string, owned by the
/// section. NULL for a NULL section.
///
/// # Safety
/// `section` is NULL or the section passed to the running section function.
#[no_mangle]
pub unsafe extern "C" fn dokebi_lock_section_fence(section: *const dokebi_lock_section) -> *const c_char {
    // SAFETY: the caller promised `section` is NULL or the view passed to the running section
    // function, which lives on `dokebi_lock_with_lock`'s stack until the section returns.
    boundary(|| unsafe { section.as_ref() }.map_or(std::ptr::null(), |s| s.fence.as_ptr().cast()))
}

/// True once the section's lease is known lost (a renewal found another
/// owner, or none could be made in time): stop the work, it is no longer
/// exclusive. False for a NULL section.
///
/// # Safety
/// `section` is NULL or the section passed to the running section function.
#[no_mangle]
pub unsafe extern "C" fn dokebi_lock_section_lost(section: *const dokebi_lock_section) -> bool {
    // SAFETY: the caller promised `section` is NULL or the view passed to the running section
    // function, which lives on `dokebi_lock_with_lock`'s stack until the section returns.
    boundary(|| unsafe { section.as_ref() }.is_some_and(|s| s.lost.is_aborted()))
}

/// A snapshot of a backend (counts only, never keys).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct dokebi_lock_backend_status {
    /// Leases held now by this process.
    pub held: u64,
    /// Acquires waiting now.
    pub waiting: u64,
    /// Leases granted since the backend started.
    pub acquired: u64,
    /// Waits that ended in `WAIT_TIMEOUT`.
    pub timed_out: u64,
    /// Leases found lost (always 0 for local backends).
    pub lost: u64,
    /// True for a redis backend. The fields below describe the connection
    /// of a redis, a postgres or a mysql backend (`dokebi_lock_backend_driver`
    /// says which); for the others they are false, 0 and -1.
    pub is_redis: bool,
    /// The command connection answered its last command (postgres, mysql:
    /// its last lock statement).
    pub connected: bool,
    /// The connection that wakes waiters is live: the pub/sub subscription
    /// (redis), the `LISTEN` connection (postgres), the release poller
    /// (mysql).
    pub subscribed: bool,
    /// The code of the last failure talking to the server, `DOKEBI_LOCK_OK` if none.
    pub last_error: u32,
    /// When the server last answered, in ms since the Unix epoch; -1 if never.
    pub last_probe_unix_ms: i64,
}

/// Writes a snapshot of `backend` to `*out_status`.
///
/// # Safety
/// `backend` is NULL or a live backend handle; `out_status` is writable;
/// `out_error` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn dokebi_lock_backend_get_status(
    backend: *const dokebi_lock_backend,
    out_status: *mut dokebi_lock_backend_status,
    out_error: *mut *mut dokebi_lock_error,
) -> dokebi_lock_status {
    call(out_error, || {
        // SAFETY: the caller promised `backend` is NULL or a live backend handle (# Safety).
        let backend = unsafe { handle(backend, "backend") }?;
        let out = Out::new(out_status, "out_status")?;
        let status = backend.backend.status();
        // The connection's health, of a redis, a postgres or a mysql backend, in the same fields.
        let connection = match (&status.redis, &status.postgres, &status.mysql) {
            (Some(r), _, _) => Some((r.connected, r.subscribed, r.last_error, r.last_probe)),
            (None, Some(p), _) => Some((p.connected, p.listening, p.last_error, p.last_answer)),
            (None, None, Some(m)) => Some((m.connected, m.polling, m.last_error, m.last_answer)),
            (None, None, None) => None,
        };
        let unix_ms = |t: std::time::SystemTime| t.duration_since(std::time::UNIX_EPOCH).map_or(-1, |d| d.as_millis() as i64);
        out.write(dokebi_lock_backend_status {
            held: status.held as u64,
            waiting: status.waiting as u64,
            acquired: status.acquired,
            timed_out: status.timed_out,
            lost: status.lost,
            is_redis: status.redis.is_some(),
            connected: connection.is_some_and(|c| c.0),
            subscribed: connection.is_some_and(|c| c.1),
            last_error: connection.and_then(|c| c.2).map_or(0, |code| code as u32),
            last_probe_unix_ms: connection.and_then(|c| c.3).map_or(-1, unix_ms),
        });
        Ok(())
    })
}

/// Of the leases `dokebi_lock_backend_get_status` counts as held, those held
/// in shared mode (a getter of its own, so that the status struct keeps its
/// size for callers built against an older header). 0 for NULL.
///
/// # Safety
/// `backend` is NULL or a live backend handle.
#[no_mangle]
pub unsafe extern "C" fn dokebi_lock_backend_held_shared(backend: *const dokebi_lock_backend) -> usize {
    // SAFETY: the caller promised `backend` is NULL or a live backend handle (# Safety).
    boundary(|| unsafe { backend.as_ref() }.map_or(0, |b| b.backend.status().held_shared))
}

/// The backend's driver: `"local"`, `"redis"`, `"postgres"`, `"mysql"`, `"file"` or `"policy"`
/// (static, NUL-terminated; empty for a driver this library does not
/// know). NULL for NULL.
///
/// # Safety
/// `backend` is NULL or a live backend handle.
#[no_mangle]
pub unsafe extern "C" fn dokebi_lock_backend_driver(backend: *const dokebi_lock_backend) -> *const c_char {
    // SAFETY: the caller promised `backend` is NULL or a live backend handle (# Safety).
    boundary(|| unsafe { backend.as_ref() }.map_or(std::ptr::null(), |b| driver_name(b.backend.status().driver)))
}

//! `dokebi_lock_backend_force_release`: an operator's break of a stuck lock
//! (the core's `Backend::force_release`), its answer an owned handle with
//! getters, as `dokebi_lock_backend_inspect`'s.

use std::ffi::{c_char, CString};

use super::args::{self, give, Out};
use super::backend::dokebi_lock_backend;
use super::completion::{block_on, refuse_on_driver_thread};
use super::error::{c_text, dokebi_lock_error};
use super::panic::{boundary, call};
use super::status::dokebi_lock_status;
use dokebi_lock::ForcedRelease;

/// What one forced release did: an owned handle, freed with
/// `dokebi_lock_forced_release_free`.
pub struct dokebi_lock_forced_release {
    forced: ForcedRelease,
    backend: CString,
}

/// Removes every holder of `key` (`key_len` bytes of UTF-8) at once, as if
/// each lease had ended now, and tells the waiters, which are granted as
/// after a release; on redis, postgres and mysql it also raises the key's
/// fence counter in the same step, above every fence the key was granted
/// and below every later grant's (see docs/locks.md, "Breaking a stuck
/// lock"). Its answer goes to `*out_forced`. A removed store holder learns
/// it at its next call to the store (its renewal or release is
/// `LEASE_LOST`); a local one at once. Logged as a warning
/// (`LOCK_FORCE_RELEASED`). A policy breaks the key on every member its
/// rule allows. It blocks the calling thread for a read of the key's fence
/// counter and the break (again, up to 10 times, while the key is granted
/// in between). `INVALID_KEY`, `CLOSED`, `PROVIDER_FAILED`,
/// `OUTCOME_UNKNOWN` (the store's answer was lost: call it again if
/// inspect still shows the holder);
/// `INVALID_ARGUMENT` on the file driver, which cannot take a
/// lock the kernel holds for another process, and on the driver's own
/// thread.
///
/// # Safety
/// `backend` is NULL or a live backend handle; `key` is NULL or points to
/// `key_len` readable bytes; `out_forced` is writable; `out_error` is NULL
/// or writable.
#[no_mangle]
pub unsafe extern "C" fn dokebi_lock_backend_force_release(
    backend: *const dokebi_lock_backend,
    key: *const c_char,
    key_len: usize,
    out_forced: *mut *mut dokebi_lock_forced_release,
    out_error: *mut *mut dokebi_lock_error,
) -> dokebi_lock_status {
    call(out_error, || {
        // SAFETY: the caller promised `backend` is NULL or a live backend handle (# Safety).
        let backend = unsafe { dokebi_lock_backend::usable(backend) }?;
        let out = Out::new(out_forced, "out_forced")?;
        // SAFETY: the caller promised `key` is NULL or points to `key_len` readable bytes (# Safety).
        let key = unsafe { args::key(key, key_len) }?;
        refuse_on_driver_thread()?;
        let forced = block_on(backend.backend.force_release(key))?;
        let name = c_text(&forced.backend);
        out.write(give(dokebi_lock_forced_release { forced, backend: name }));
        Ok(())
    })
}

/// Borrows the answer behind `forced`, or `None` for NULL.
///
/// # Safety
/// `forced` is NULL or a live forced-release handle.
unsafe fn get<'a>(forced: *const dokebi_lock_forced_release) -> Option<&'a dokebi_lock_forced_release> {
    // SAFETY: the caller promised `forced` is NULL or a live handle (# Safety); handles come
    // from Box::into_raw in `dokebi_lock_backend_force_release` and are immutable.
    unsafe { forced.as_ref() }
}

/// The backend whose store it changed (a policy's first member that had a
/// holder, else its first), NUL-terminated, owned by the handle.
///
/// # Safety
/// `forced` is NULL or a live forced-release handle.
#[no_mangle]
pub unsafe extern "C" fn dokebi_lock_forced_release_backend(forced: *const dokebi_lock_forced_release) -> *const c_char {
    // SAFETY: as promised by our caller (# Safety).
    boundary(|| unsafe { get(forced) }.map_or(std::ptr::null(), |handle| handle.backend.as_ptr()))
}

/// The live holders it removed (0 when the key was free).
///
/// # Safety
/// `forced` is NULL or a live forced-release handle.
#[no_mangle]
pub unsafe extern "C" fn dokebi_lock_forced_release_removed(forced: *const dokebi_lock_forced_release) -> u32 {
    // SAFETY: as promised by our caller (# Safety).
    boundary(|| unsafe { get(forced) }.map_or(0, |handle| handle.forced.removed))
}

/// True when it raised the key's fence counter (redis, postgres, mysql),
/// then written to `*out_fence` (when not NULL): above every fence the key
/// was granted, below every later grant's. False on the local driver,
/// whose fences are the backend's.
///
/// # Safety
/// `forced` is NULL or a live forced-release handle; `out_fence` is NULL
/// or writable.
#[no_mangle]
pub unsafe extern "C" fn dokebi_lock_forced_release_fence(forced: *const dokebi_lock_forced_release, out_fence: *mut u64) -> bool {
    boundary(|| {
        // SAFETY: as promised by our caller (# Safety).
        let Some(fence) = unsafe { get(forced) }.and_then(|handle| handle.forced.fence) else { return false };
        if let Some(out) = Out::optional(out_fence) {
            out.write(fence);
        }
        true
    })
}

/// Frees a forced release's answer and the string it handed out. NULL is
/// accepted.
///
/// # Safety
/// `forced` is NULL or a live forced-release handle, not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn dokebi_lock_forced_release_free(forced: *mut dokebi_lock_forced_release) {
    boundary(|| {
        if !forced.is_null() {
            // SAFETY: the handle came from Box::into_raw in `dokebi_lock_backend_force_release`.
            drop(unsafe { Box::from_raw(forced) });
        }
    })
}

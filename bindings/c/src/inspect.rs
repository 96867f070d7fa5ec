//! `dokebi_lock_backend_inspect`: what a backend's store holds of one key
//! (the core's `Backend::inspect`), as an owned handle with getters.

use std::ffi::{c_char, CString};

use super::args::{self, give, Out};
use super::backend::dokebi_lock_backend;
use super::completion::{block_on, refuse_on_driver_thread};
use super::error::{c_text, dokebi_lock_error};
use super::panic::{boundary, call};
use super::status::dokebi_lock_status;
use dokebi_lock::{Inspection, LockMode};

/// One key as its store held it when read: an owned handle, freed with
/// `dokebi_lock_inspection_free`.
pub struct dokebi_lock_inspection {
    inspection: Inspection,
    backend: CString,
    /// Each listed holder's label, NUL-terminated (`None`: it has none).
    labels: Vec<Option<CString>>,
}

/// Reads what `backend`'s store holds of `key` (`key_len` bytes of UTF-8)
/// now, at once, into `*out_inspection`: whether and how it is held, its
/// live holders, the acquires waiting for it, its highest fence (see
/// docs/locks.md, "Who holds a key"). The store's own view, so every
/// process's holders (local: this backend's). A read: it takes, extends
/// and changes nothing; it blocks the calling thread for at most the
/// store's `commandTimeoutMs`. `INVALID_KEY`, `CLOSED`, `PROVIDER_FAILED`;
/// `INVALID_ARGUMENT` on the driver's own thread. The file driver reads the
/// records its holders write (see docs/file.md).
///
/// # Safety
/// `backend` is NULL or a live backend handle; `key` is NULL or points to
/// `key_len` readable bytes; `out_inspection` is writable; `out_error` is
/// NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn dokebi_lock_backend_inspect(
    backend: *const dokebi_lock_backend,
    key: *const c_char,
    key_len: usize,
    out_inspection: *mut *mut dokebi_lock_inspection,
    out_error: *mut *mut dokebi_lock_error,
) -> dokebi_lock_status {
    call(out_error, || {
        // SAFETY: the caller promised `backend` is NULL or a live backend handle (# Safety).
        let backend = unsafe { dokebi_lock_backend::usable(backend) }?;
        let out = Out::new(out_inspection, "out_inspection")?;
        // SAFETY: the caller promised `key` is NULL or points to `key_len` readable bytes (# Safety).
        let key = unsafe { args::key(key, key_len) }?;
        refuse_on_driver_thread()?;
        let inspection = block_on(backend.backend.inspect(key))?;
        let name = c_text(&inspection.backend);
        let labels = inspection.holders.iter().map(|holder| holder.label.as_deref().map(c_text)).collect();
        out.write(give(dokebi_lock_inspection { inspection, backend: name, labels }));
        Ok(())
    })
}

/// Borrows the inspection behind `inspection`, or `None` for NULL.
///
/// # Safety
/// `inspection` is NULL or a live inspection handle.
unsafe fn get<'a>(inspection: *const dokebi_lock_inspection) -> Option<&'a Inspection> {
    // SAFETY: the caller promised `inspection` is NULL or a live handle (# Safety); handles come
    // from Box::into_raw in `dokebi_lock_backend_inspect` and are immutable.
    unsafe { inspection.as_ref() }.map(|handle| &handle.inspection)
}

/// The backend that answered (a policy's member, for a policy),
/// NUL-terminated, owned by the inspection.
///
/// # Safety
/// `inspection` is NULL or a live inspection handle.
#[no_mangle]
pub unsafe extern "C" fn dokebi_lock_inspection_backend(inspection: *const dokebi_lock_inspection) -> *const c_char {
    // SAFETY: as promised by our caller (# Safety).
    boundary(|| unsafe { inspection.as_ref() }.map_or(std::ptr::null(), |handle| handle.backend.as_ptr()))
}

/// Live holders of the key (0: free; shared and counted keys may have
/// several).
///
/// # Safety
/// `inspection` is NULL or a live inspection handle.
#[no_mangle]
pub unsafe extern "C" fn dokebi_lock_inspection_held(inspection: *const dokebi_lock_inspection) -> u32 {
    // SAFETY: as promised by our caller (# Safety).
    boundary(|| unsafe { get(inspection) }.map_or(0, |found| found.held))
}

/// How the key is held: `DOKEBI_LOCK_MODE_EXCLUSIVE` or
/// `DOKEBI_LOCK_MODE_SHARED`; `DOKEBI_LOCK_MODE_EXCLUSIVE` (0) too when
/// nobody holds it (see `dokebi_lock_inspection_held`).
///
/// # Safety
/// `inspection` is NULL or a live inspection handle.
#[no_mangle]
pub unsafe extern "C" fn dokebi_lock_inspection_mode(inspection: *const dokebi_lock_inspection) -> u32 {
    // SAFETY: as promised by our caller (# Safety).
    boundary(|| u32::from(unsafe { get(inspection) }.is_some_and(|found| found.mode == Some(LockMode::Shared))))
}

/// The key's limit: above 1 for a counted key, else 1.
///
/// # Safety
/// `inspection` is NULL or a live inspection handle.
#[no_mangle]
pub unsafe extern "C" fn dokebi_lock_inspection_limit(inspection: *const dokebi_lock_inspection) -> u32 {
    // SAFETY: as promised by our caller (# Safety).
    boundary(|| unsafe { get(inspection) }.map_or(0, |found| found.limit))
}

/// Acquires waiting for the key that the store knows of.
///
/// # Safety
/// `inspection` is NULL or a live inspection handle.
#[no_mangle]
pub unsafe extern "C" fn dokebi_lock_inspection_waiting(inspection: *const dokebi_lock_inspection) -> u32 {
    // SAFETY: as promised by our caller (# Safety).
    boundary(|| unsafe { get(inspection) }.map_or(0, |found| found.waiting))
}

/// True when the store kept the key's fence, then written to `*out_fence`
/// (when not NULL): no fence granted on the key so far is larger. False
/// when it kept none, and on the local driver.
///
/// # Safety
/// `inspection` is NULL or a live inspection handle; `out_fence` is NULL
/// or writable.
#[no_mangle]
pub unsafe extern "C" fn dokebi_lock_inspection_fence(inspection: *const dokebi_lock_inspection, out_fence: *mut u64) -> bool {
    boundary(|| {
        // SAFETY: as promised by our caller (# Safety).
        let Some(fence) = unsafe { get(inspection) }.and_then(|found| found.fence) else { return false };
        if let Some(out) = Out::optional(out_fence) {
            out.write(fence);
        }
        true
    })
}

/// How many holders are listed: the first 64 of `dokebi_lock_inspection_held`,
/// soonest expiry first (store drivers) or oldest grant first (local).
///
/// # Safety
/// `inspection` is NULL or a live inspection handle.
#[no_mangle]
pub unsafe extern "C" fn dokebi_lock_inspection_holder_count(inspection: *const dokebi_lock_inspection) -> usize {
    // SAFETY: as promised by our caller (# Safety).
    boundary(|| unsafe { get(inspection) }.map_or(0, |found| found.holders.len()))
}

/// Who listed holder `index` is: its provider's `holder` label (this host's
/// name and pid by default), NUL-terminated, owned by the inspection; NULL
/// for a lease taken by a release before labels, and past the list.
///
/// # Safety
/// `inspection` is NULL or a live inspection handle.
#[no_mangle]
pub unsafe extern "C" fn dokebi_lock_inspection_holder_label(inspection: *const dokebi_lock_inspection, index: usize) -> *const c_char {
    boundary(|| {
        // SAFETY: as promised by our caller (# Safety).
        unsafe { inspection.as_ref() }
            .and_then(|handle| handle.labels.get(index)?.as_ref())
            .map_or(std::ptr::null(), |label| label.as_ptr())
    })
}

/// The units listed holder `index` holds (1 unless the key is counted); 0
/// past the list.
///
/// # Safety
/// `inspection` is NULL or a live inspection handle.
#[no_mangle]
pub unsafe extern "C" fn dokebi_lock_inspection_holder_units(inspection: *const dokebi_lock_inspection, index: usize) -> u32 {
    // SAFETY: as promised by our caller (# Safety).
    boundary(|| unsafe { get(inspection) }.and_then(|found| found.holders.get(index)).map_or(0, |holder| holder.units))
}

/// Milliseconds until listed holder `index`'s lease expires unless renewed;
/// -1 on the local and file drivers (their leases do not expire) and past the list.
///
/// # Safety
/// `inspection` is NULL or a live inspection handle.
#[no_mangle]
pub unsafe extern "C" fn dokebi_lock_inspection_holder_remaining_ms(inspection: *const dokebi_lock_inspection, index: usize) -> i64 {
    boundary(|| {
        // SAFETY: as promised by our caller (# Safety).
        let holder = unsafe { get(inspection) }.and_then(|found| found.holders.get(index));
        holder.and_then(|holder| holder.remaining).map_or(-1, |left| i64::try_from(left.as_millis()).unwrap_or(i64::MAX))
    })
}

/// True when the store kept the fence listed holder `index`'s grant got,
/// then written to `*out_fence` (when not NULL).
///
/// # Safety
/// `inspection` is NULL or a live inspection handle; `out_fence` is NULL
/// or writable.
#[no_mangle]
pub unsafe extern "C" fn dokebi_lock_inspection_holder_fence(
    inspection: *const dokebi_lock_inspection,
    index: usize,
    out_fence: *mut u64,
) -> bool {
    boundary(|| {
        // SAFETY: as promised by our caller (# Safety).
        let fence = unsafe { get(inspection) }.and_then(|found| found.holders.get(index)).and_then(|holder| holder.fence);
        let Some(fence) = fence else { return false };
        if let Some(out) = Out::optional(out_fence) {
            out.write(fence);
        }
        true
    })
}

/// Milliseconds listed holder `index` has held the key, at least, by the
/// store's clock (the process's on the local driver); -1 where not known
/// and past the list.
///
/// # Safety
/// `inspection` is NULL or a live inspection handle.
#[no_mangle]
pub unsafe extern "C" fn dokebi_lock_inspection_holder_held_ms(inspection: *const dokebi_lock_inspection, index: usize) -> i64 {
    boundary(|| {
        // SAFETY: as promised by our caller (# Safety).
        let holder = unsafe { get(inspection) }.and_then(|found| found.holders.get(index));
        holder.and_then(|holder| holder.held_for).map_or(-1, |held| i64::try_from(held.as_millis()).unwrap_or(i64::MAX))
    })
}

/// Frees an inspection and the strings it handed out. NULL is accepted.
///
/// # Safety
/// `inspection` is NULL or a live inspection handle, not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn dokebi_lock_inspection_free(inspection: *mut dokebi_lock_inspection) {
    boundary(|| {
        if !inspection.is_null() {
            // SAFETY: the handle came from Box::into_raw in `dokebi_lock_backend_inspect`.
            drop(unsafe { Box::from_raw(inspection) });
        }
    })
}

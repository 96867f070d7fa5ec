//! The lease handle: getters, renew, release, free.

use std::ffi::c_char;
use std::sync::OnceLock;

use super::args::{handle, Out};
use super::completion::block_on;
use super::error::dokebi_lock_error;
use super::panic::{boundary, call};
use super::status::dokebi_lock_status;
use dokebi_lock::provider::Lease;

/// `dokebi_lock_lease_remaining_ms` of a valid lease that never expires
/// (every local lease).
pub const DOKEBI_LOCK_NEVER_EXPIRES: i64 = -1;

/// Decimal digits of `u64::MAX` plus the NUL.
pub(crate) const FENCE_CAPACITY: usize = 21;

/// A held (or formerly held) lease. Any thread may call its getters, renew
/// and release, also concurrently; freed with `dokebi_lock_lease_free`.
pub struct dokebi_lock_lease {
    lease: Lease,
    /// The fence as a NUL-terminated decimal string, written by the first
    /// call of the getter (so a lease whose fence is never asked for does
    /// not pay for it) and kept, so the getter needs no allocation and no
    /// lock.
    fence: OnceLock<[u8; FENCE_CAPACITY]>,
    /// The fence of each key, as the same kind of strings, written by the
    /// first call of `dokebi_lock_lease_fence_at`.
    fences: OnceLock<Box<[[u8; FENCE_CAPACITY]]>>,
}

impl dokebi_lock_lease {
    pub(crate) fn new(lease: Lease) -> Self {
        dokebi_lock_lease { fence: OnceLock::new(), fences: OnceLock::new(), lease }
    }
}

pub(crate) fn decimal(mut value: u64) -> [u8; FENCE_CAPACITY] {
    let mut digits = [0u8; FENCE_CAPACITY];
    let mut len = 0;
    loop {
        digits[len] = b'0' + (value % 10) as u8;
        len += 1;
        value /= 10;
        if value == 0 {
            break;
        }
    }
    digits[..len].reverse();
    digits
}

/// The key of the lease: `*out_len` bytes of UTF-8 (not NUL-terminated),
/// owned by the lease. NULL when `lease` or `out_len` is NULL (`out_len` is
/// then untouched).
///
/// # Safety
/// `lease` is NULL or a live lease handle; `out_len` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn dokebi_lock_lease_key(lease: *const dokebi_lock_lease, out_len: *mut usize) -> *const c_char {
    boundary(|| {
        // SAFETY: the caller promised `lease` is NULL or a live lease handle (# Safety); handles come
        // from Box::into_raw and are only shared-borrowed until `dokebi_lock_lease_free`.
        let (Some(lease), Some(out_len)) = (unsafe { lease.as_ref() }, Out::optional(out_len)) else {
            return std::ptr::null();
        };
        let key = lease.lease.key();
        out_len.write(key.len());
        key.as_ptr().cast()
    })
}

/// How many keys the lease holds: 1, or the `key_count` of the
/// `dokebi_lock_acquire_ex` that took it. 0 for NULL.
///
/// # Safety
/// `lease` is NULL or a live lease handle.
#[no_mangle]
pub unsafe extern "C" fn dokebi_lock_lease_key_count(lease: *const dokebi_lock_lease) -> usize {
    // SAFETY: the caller promised `lease` is NULL or a live lease handle (# Safety).
    boundary(|| unsafe { lease.as_ref() }.map_or(0, |l| l.lease.keys().len()))
}

/// The key at `index` (in the order the acquire gave them) as
/// `dokebi_lock_lease_key` answers the first: `*out_len` bytes of UTF-8
/// owned by the lease. NULL when `lease` or `out_len` is NULL or `index` is
/// out of range (`out_len` is then untouched).
///
/// # Safety
/// `lease` is NULL or a live lease handle; `out_len` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn dokebi_lock_lease_key_at(lease: *const dokebi_lock_lease, index: usize, out_len: *mut usize) -> *const c_char {
    boundary(|| {
        // SAFETY: the caller promised `lease` is NULL or a live lease handle (# Safety).
        let (Some(lease), Some(out_len)) = (unsafe { lease.as_ref() }, Out::optional(out_len)) else {
            return std::ptr::null();
        };
        let Some(key) = lease.lease.keys().get(index).copied() else {
            return std::ptr::null();
        };
        out_len.write(key.len());
        key.as_ptr().cast()
    })
}

/// The fencing token of the key at `index`, as `dokebi_lock_lease_fence`
/// answers the lease's: above every earlier grant of that key. NULL for
/// NULL or an index out of range.
///
/// # Safety
/// `lease` is NULL or a live lease handle.
#[no_mangle]
pub unsafe extern "C" fn dokebi_lock_lease_fence_at(lease: *const dokebi_lock_lease, index: usize) -> *const c_char {
    boundary(|| {
        // SAFETY: the caller promised `lease` is NULL or a live lease handle (# Safety).
        let Some(lease) = (unsafe { lease.as_ref() }) else {
            return std::ptr::null();
        };
        let fences = lease.fences.get_or_init(|| lease.lease.fences().into_iter().map(|(_, fence)| decimal(fence)).collect());
        fences.get(index).map_or(std::ptr::null(), |fence| fence.as_ptr().cast())
    })
}

/// True while the lease is held: not released, not freed, the provider not
/// closed and (redis) not expired by the local estimate. False for NULL.
///
/// # Safety
/// `lease` is NULL or a live lease handle.
#[no_mangle]
pub unsafe extern "C" fn dokebi_lock_lease_valid(lease: *const dokebi_lock_lease) -> bool {
    // SAFETY: the caller promised `lease` is NULL or a live lease handle (# Safety).
    boundary(|| unsafe { lease.as_ref() }.is_some_and(|l| l.lease.is_valid()))
}

/// Milliseconds the lease stays valid: `DOKEBI_LOCK_NEVER_EXPIRES` (-1) for
/// a held local lease, 0 once invalid and for NULL.
///
/// # Safety
/// `lease` is NULL or a live lease handle.
#[no_mangle]
pub unsafe extern "C" fn dokebi_lock_lease_remaining_ms(lease: *const dokebi_lock_lease) -> i64 {
    // SAFETY: the caller promised `lease` is NULL or a live lease handle (# Safety).
    boundary(|| match unsafe { lease.as_ref() }.map(|l| l.lease.remaining()) {
        None => 0,
        Some(None) => DOKEBI_LOCK_NEVER_EXPIRES,
        Some(Some(left)) => i64::try_from(left.as_millis()).unwrap_or(i64::MAX),
    })
}

/// The fencing token as a NUL-terminated decimal string, owned by the lease.
/// It is larger than the token of every earlier lease of the same backend
/// and key; compare numerically (it fits `strtoull`). NULL for NULL.
///
/// # Safety
/// `lease` is NULL or a live lease handle.
#[no_mangle]
pub unsafe extern "C" fn dokebi_lock_lease_fence(lease: *const dokebi_lock_lease) -> *const c_char {
    // SAFETY: the caller promised `lease` is NULL or a live lease handle (# Safety).
    boundary(|| unsafe { lease.as_ref() }.map_or(std::ptr::null(), |l| l.fence.get_or_init(|| decimal(l.lease.fence())).as_ptr().cast()))
}

/// Extends the lease (redis: by `leaseMs`); `*out_valid` (when not NULL)
/// tells whether it is still ours. A local lease never expires, so renewing
/// reports its validity.
///
/// # Safety
/// `lease` is NULL or a live lease handle; `out_valid` and `out_error` are
/// NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn dokebi_lock_lease_renew(
    lease: *const dokebi_lock_lease,
    out_valid: *mut bool,
    out_error: *mut *mut dokebi_lock_error,
) -> dokebi_lock_status {
    call(out_error, || {
        // SAFETY: the caller promised `lease` is NULL or a live lease handle (# Safety), as `handle` requires.
        let valid = block_on(unsafe { handle(lease, "lease") }?.lease.renew())?;
        if let Some(out) = Out::optional(out_valid) {
            out.write(valid);
        }
        Ok(())
    })
}

/// Releases the lease, handing the key to the next waiter. `*out_released`
/// (when not NULL) is true when this call released it, false when it was
/// already released (or the provider closed). Redis: `DOKEBI_LOCK_LEASE_LOST`
/// when the lease had expired or been taken over.
///
/// # Safety
/// `lease` is NULL or a live lease handle; `out_released` and `out_error`
/// are NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn dokebi_lock_lease_release(
    lease: *const dokebi_lock_lease,
    out_released: *mut bool,
    out_error: *mut *mut dokebi_lock_error,
) -> dokebi_lock_status {
    call(out_error, || {
        // SAFETY: the caller promised `lease` is NULL or a live lease handle (# Safety), as `handle` requires.
        let released = match &unsafe { handle(lease, "lease") }?.lease {
            // Local: released at once, without building the future.
            Lease::Local(local) => local.release(),
            lease => block_on(lease.release())?,
        };
        if let Some(out) = Out::optional(out_released) {
            out.write(released);
        }
        Ok(())
    })
}

/// Frees the lease. A lease still held is released first (its outcome is
/// not reported: call `dokebi_lock_lease_release` to learn it). NULL is
/// accepted.
///
/// # Safety
/// `lease` is NULL or a live lease handle that no other thread uses any more
/// and that is not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn dokebi_lock_lease_free(lease: *mut dokebi_lock_lease) {
    boundary(|| {
        if !lease.is_null() {
            // SAFETY: the handle came from Box::into_raw when it was acquired.
            let lease = unsafe { Box::from_raw(lease) };
            match &lease.lease {
                // Dropping a local lease releases it, at once.
                Lease::Local(_) => {}
                // Dropping a redis lease would release it in the background;
                // release before returning, so the key is free for others
                // once free returns (bounded by commandTimeoutMs).
                Lease::Redis(redis) => {
                    let _ = block_on(redis.release());
                }
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fences_format_as_nul_terminated_decimals() {
        for value in [0, 7, 10, 1234567890, u64::MAX] {
            let digits = decimal(value);
            let text = std::ffi::CStr::from_bytes_until_nul(&digits).unwrap().to_str().unwrap();
            assert_eq!(text, value.to_string());
        }
    }
}

//! The lease handle: getters, renew, release, free.

use std::cell::Cell;
use std::ffi::c_char;
use std::mem::MaybeUninit;
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

    /// The lease as a new handle, in the memory of the last handle this
    /// thread freed when there is one.
    pub(crate) fn give(lease: Lease) -> *mut dokebi_lock_lease {
        let spare = SPARE.try_with(Cell::take).ok().flatten();
        let mut memory = spare.unwrap_or_else(Box::new_uninit);
        memory.write(dokebi_lock_lease::new(lease));
        // `MaybeUninit<T>` has the layout of `T`, and the value is written.
        Box::into_raw(memory).cast()
    }
}

thread_local! {
    /// The memory of the last lease handle this thread freed, for its next
    /// acquire: a malloc and a free less per uncontended pair (165 of its
    /// 1052 instructions, BENCHMARKS.md stop 31). The cost: that one
    /// block never reaches the allocator between the free and the next
    /// acquire, so a use of a freed handle (a caller's bug) in that window
    /// is not reported by AddressSanitizer, as any other would be. Freed
    /// with the thread.
    static SPARE: Cell<Option<Box<MaybeUninit<dokebi_lock_lease>>>> = const { Cell::new(None) };
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
            // SAFETY: the handle came from `dokebi_lock_lease::give` (Box::into_raw of a
            // `MaybeUninit` of the same layout) when it was acquired, and is freed once (# Safety).
            let mut memory: Box<MaybeUninit<dokebi_lock_lease>> = unsafe { Box::from_raw(lease.cast()) };
            {
                // SAFETY: the handle holds a live lease until this drop.
                let lease = unsafe { memory.assume_init_ref() };
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
            // SAFETY: live (above) and dropped once; the memory is not read as a lease again.
            unsafe { memory.assume_init_drop() };
            let _ = SPARE.try_with(|spare| spare.set(Some(memory)));
        }
    })
}

#[cfg(test)]
mod tests {
    use std::ptr;

    use super::*;
    use crate::backend::{dokebi_lock_acquire, dokebi_lock_backend_free};
    use crate::provider::{dokebi_lock_provider_backend, dokebi_lock_provider_free, dokebi_lock_provider_open};

    fn acquire(backend: *const crate::backend::dokebi_lock_backend, key: &str) -> *mut dokebi_lock_lease {
        let mut lease = ptr::null_mut();
        // SAFETY: a live backend handle, a key of `key.len()` bytes, writable out-parameters.
        let status = unsafe { dokebi_lock_acquire(backend, key.as_ptr().cast(), key.len(), 0, &mut lease, ptr::null_mut()) };
        assert_eq!(status, dokebi_lock_status::DOKEBI_LOCK_OK);
        lease
    }

    #[test]
    fn a_freed_handle_serves_the_next_acquire_of_its_thread_and_leases_outlive_their_backend() {
        let yaml = "schemaVersion: 1\noptions:\n  dokebi-lock:\n    backends:\n      b: {}\n";
        let (mut provider, mut backend) = (ptr::null_mut(), ptr::null_mut());
        // SAFETY: the text is `yaml.len()` bytes; the out-parameters are writable.
        let opened = unsafe { dokebi_lock_provider_open(yaml.as_ptr().cast(), yaml.len(), &mut provider, ptr::null_mut()) };
        assert_eq!(opened, dokebi_lock_status::DOKEBI_LOCK_OK);
        // SAFETY: a live provider handle, a NUL-terminated name, a writable out-parameter.
        let got = unsafe { dokebi_lock_provider_backend(provider, c"b".as_ptr(), &mut backend, ptr::null_mut()) };
        assert_eq!(got, dokebi_lock_status::DOKEBI_LOCK_OK);
        let first = acquire(backend, "k");
        // SAFETY: a live lease handle, freed once (and held: freeing releases it).
        unsafe { dokebi_lock_lease_free(first) };
        let second = acquire(backend, "k");
        assert_eq!(second, first, "the freed handle's memory is reused");
        // Freed on another thread: that thread keeps the memory, and this one allocates anew.
        let moved = second as usize;
        // SAFETY: the handle is live and used by that thread alone until it frees it.
        std::thread::spawn(move || unsafe { dokebi_lock_lease_free(moved as *mut dokebi_lock_lease) }).join().unwrap();
        let third = acquire(backend, "k");
        // SAFETY: live handles; the backend is freed before its lease, each handle once.
        unsafe {
            dokebi_lock_backend_free(backend);
            assert!(dokebi_lock_lease_valid(third));
            let mut released = false;
            assert_eq!(dokebi_lock_lease_release(third, &mut released, ptr::null_mut()), dokebi_lock_status::DOKEBI_LOCK_OK);
            assert!(released && !dokebi_lock_lease_valid(third));
            dokebi_lock_provider_free(provider);
            // The provider is closed and freed: the lease's handle still answers.
            assert!(!dokebi_lock_lease_valid(third));
            dokebi_lock_lease_free(third);
        }
    }

    #[test]
    fn fences_format_as_nul_terminated_decimals() {
        for value in [0, 7, 10, 1234567890, u64::MAX] {
            let digits = decimal(value);
            let text = std::ffi::CStr::from_bytes_until_nul(&digits).unwrap().to_str().unwrap();
            assert_eq!(text, value.to_string());
        }
    }
}

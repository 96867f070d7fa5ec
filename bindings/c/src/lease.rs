//! The lease handle: getters, renew, release, free.

use std::cell::Cell;
use std::ffi::c_char;
use std::mem::MaybeUninit;
use std::sync::OnceLock;
use std::time::Duration;

use super::args::{handle, Out};
use super::completion::{block_on, on_driver_thread, refuse_on_driver_thread};
use super::error::dokebi_lock_error;
use super::fork;
use super::panic::{boundary, call};
use super::policy::tier_name;
use super::status::dokebi_lock_status;
use dokebi_lock::acquire::LockKind;
use dokebi_lock::error::Result;
use dokebi_lock::local::LocalBackend;
use dokebi_lock::provider::Lease;
use dokebi_lock::HolderLabel;

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
    /// The member that served a policy lease, as `dokebi_lock_lease_served_by` answers it.
    served: OnceLock<std::ffi::CString>,
    /// The process it was granted in (see [`fork`]).
    born: u32,
}

impl dokebi_lock_lease {
    pub(crate) fn new(lease: Lease) -> Self {
        dokebi_lock_lease { fence: OnceLock::new(), fences: OnceLock::new(), served: OnceLock::new(), lease, born: fork::now() }
    }

    /// The lease of a live handle, `CLOSED` in a child forked after it was
    /// granted.
    ///
    /// # Safety
    /// `lease` is NULL or a live lease handle, for `'a`.
    #[inline(always)]
    unsafe fn usable<'a>(lease: *const dokebi_lock_lease) -> Result<&'a Lease> {
        // SAFETY: as promised by our caller (# Safety).
        let lease = unsafe { handle(lease, "lease") }?;
        fork::check(lease.born)?;
        Ok(&lease.lease)
    }

    /// The lease as a new handle, in the memory of the last handle this
    /// thread freed when there is one (the backend handle that handle kept
    /// stays kept).
    pub(crate) fn give(lease: Lease) -> *mut dokebi_lock_lease {
        let memory = SPARE.try_with(|spare| spare.memory.take()).ok().flatten();
        Self::give_in(memory, lease)
    }

    #[inline(always)]
    fn give_in(memory: Option<Box<MaybeUninit<dokebi_lock_lease>>>, lease: Lease) -> *mut dokebi_lock_lease {
        let mut memory = memory.unwrap_or_else(Box::new_uninit);
        memory.write(dokebi_lock_lease::new(lease));
        // `MaybeUninit<T>` has the layout of `T`, and the value is written.
        Box::into_raw(memory).cast()
    }

    /// Blocks as [`LocalBackend::acquire_blocking_kind`] (the lease labelled
    /// `label`, else the backend's holder), and answers the
    /// lease as a new handle, in the memory of the last handle this thread
    /// freed, its lease holding the backend handle that one kept when it is
    /// of the same backend (else that one is dropped, and the lease clones
    /// its own). On failure the memory stays this thread's spare.
    #[inline(always)]
    pub(crate) fn acquire_local(
        backend: &LocalBackend,
        keys: &[&str],
        kind: LockKind,
        label: Option<HolderLabel>,
        wait_timeout: Option<Duration>,
    ) -> Result<*mut dokebi_lock_lease> {
        let (memory, kept) = SPARE.try_with(|spare| (spare.memory.take(), spare.backend.take())).unwrap_or((None, None));
        match backend.acquire_blocking_kind_keeping(keys, kind, label, wait_timeout, kept) {
            Ok(lease) => Ok(Self::give_in(memory, Lease::Local(lease))),
            Err(err) => {
                if memory.is_some() {
                    let _ = SPARE.try_with(|spare| spare.memory.set(memory));
                }
                Err(err)
            }
        }
    }
}

/// What the last lease handle this thread freed leaves for the thread's
/// next acquire.
struct Spare {
    /// The handle's memory: a malloc and a free less per uncontended pair
    /// (a sixth of its instructions). The cost:
    /// that one block never reaches the allocator between the free and the
    /// next acquire, so a use of a freed handle (a caller's bug) in that
    /// window is not reported by AddressSanitizer, as any other would be.
    memory: Cell<Option<Box<MaybeUninit<dokebi_lock_lease>>>>,
    /// The handle of its (local) backend the lease held, for the next local
    /// lease of the same backend: an atomic increment and decrement of the
    /// backend's reference count less per uncontended pair. The cost: it
    /// keeps that backend's shared state allocated until this thread's
    /// next acquire on a local backend (taken over by its lease when of the
    /// same backend, else dropped), its next free of a local lease, or its
    /// exit, also when the provider and the backend handles are freed. A closed
    /// backend's engine has given its tables back (`LocalEngine::close`),
    /// so what stays is one allocation of about half a kilobyte (the
    /// engine's struct, options, reporter), the backend's name and a
    /// reference to the provider's telemetry hook, never called from here.
    backend: Cell<Option<LocalBackend>>,
}

thread_local! {
    /// This thread's spare; freed with the thread.
    static SPARE: Spare = const { Spare { memory: Cell::new(None), backend: Cell::new(None) } };
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

/// Of a lease a policy backend granted: the name of the member backend that
/// served it (NUL-terminated, owned by the lease). NULL for NULL and for a
/// lease of any other driver. `dokebi_lock_lease_served_tier` says its tier.
///
/// # Safety
/// `lease` is NULL or a live lease handle.
#[no_mangle]
pub unsafe extern "C" fn dokebi_lock_lease_served_by(lease: *const dokebi_lock_lease) -> *const c_char {
    boundary(|| {
        // SAFETY: the caller promised `lease` is NULL or a live lease handle (# Safety).
        let Some(lease) = (unsafe { lease.as_ref() }) else { return std::ptr::null() };
        let Some(served) = lease.lease.served() else { return std::ptr::null() };
        lease.served.get_or_init(|| std::ffi::CString::new(served.member.name.as_str()).unwrap_or_default()).as_ptr()
    })
}

/// Of a lease a policy backend granted: the tier of the member that served
/// it, `"process"` (local), `"host"` (file) or `"shared"` (redis,
/// postgres), static and NUL-terminated. NULL for NULL and for a lease of
/// any other driver. Its fence compares only with fences of that member.
///
/// # Safety
/// `lease` is NULL or a live lease handle.
#[no_mangle]
pub unsafe extern "C" fn dokebi_lock_lease_served_tier(lease: *const dokebi_lock_lease) -> *const c_char {
    boundary(|| {
        // SAFETY: the caller promised `lease` is NULL or a live lease handle (# Safety).
        let served = unsafe { lease.as_ref() }.and_then(|lease| lease.lease.served());
        served.map_or(std::ptr::null(), |served| tier_name(served.member.tier))
    })
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
        // SAFETY: the caller promised `lease` is NULL or a live lease handle (# Safety), as `usable` requires.
        let lease = unsafe { dokebi_lock_lease::usable(lease) }?;
        if !matches!(lease, Lease::Local(_)) {
            refuse_on_driver_thread()?;
        }
        let valid = block_on(lease.renew())?;
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
        // SAFETY: the caller promised `lease` is NULL or a live lease handle (# Safety), as `usable` requires.
        let released = match unsafe { dokebi_lock_lease::usable(lease) }? {
            // Local: released at once, without building the future.
            Lease::Local(local) => local.release(),
            lease => {
                refuse_on_driver_thread()?;
                block_on(lease.release())?
            }
        };
        if let Some(out) = Out::optional(out_released) {
            out.write(released);
        }
        Ok(())
    })
}

/// Frees the lease. A lease still held is released first (its outcome is
/// not reported: call `dokebi_lock_lease_release` to learn it; from a
/// telemetry callback on the store drivers' thread, in the background).
/// NULL is accepted. In a child forked after the lease was granted, the
/// handle is leaked: the parent's lease stays the parent's.
///
/// The calling thread keeps the handle's memory for its next acquire (of
/// any backend), and, for a local lease, the lease's reference to its
/// backend's shared state for its next acquire of that backend (two atomic
/// operations less per acquire/free pair). Two consequences:
/// - That memory does not reach the allocator until the thread's next
///   acquire (or its exit), so a use of the freed handle in that window (a
///   bug of the caller) is not reported by AddressSanitizer; after it, the
///   freed handle's address is that new lease's, and a stale release or
///   free acts on it (handles carry no generation to tell them apart).
/// - The backend's shared state stays allocated until the thread's next
///   acquire on a local backend (its lease takes the reference over when
///   it is of the same backend; else it is dropped), its next free of a
///   local lease, or its exit: also after the backend and provider
///   handles are freed, when that reference is the last. Freeing (or
///   closing) the provider empties it: its key tables are freed, and what
///   stays is about half a kilobyte, from which the telemetry callback is
///   never called.
///
/// # Safety
/// `lease` is NULL or a live lease handle that no other thread uses any more
/// and that is not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn dokebi_lock_lease_free(lease: *mut dokebi_lock_lease) {
    boundary(|| {
        if !lease.is_null() {
            // SAFETY: the handle came from `dokebi_lock_lease::give_in` (Box::into_raw of a
            // `MaybeUninit` of the same layout) when it was acquired, and is freed once (# Safety).
            let mut memory: Box<MaybeUninit<dokebi_lock_lease>> = unsafe { Box::from_raw(lease.cast()) };
            // SAFETY: the handle holds a live lease until the drop below.
            let live = unsafe { memory.assume_init_mut() };
            // In a child forked since, ending the lease would release the
            // parent's (a file lease unlocks the parent's lock file): leaked.
            if fork::inherited(live.born) {
                std::mem::forget(memory);
                return;
            }
            let kept = match &mut live.lease {
                // Ending a local lease releases it, at once; its backend handle stays
                // with the memory, for this thread's next acquire.
                Lease::Local(local) => local.take_backend(),
                // Dropping a redis lease would release it in the background;
                // release before returning, so the key is free for others
                // once free returns (bounded by commandTimeoutMs). Not on the
                // store drivers' thread (a telemetry callback), which the
                // release needs: there the drop below releases in the background.
                Lease::Redis(redis) => {
                    if !on_driver_thread() {
                        let _ = block_on(redis.release());
                    }
                    None
                }
                // The same for a postgres lease.
                Lease::Postgres(postgres) => {
                    if !on_driver_thread() {
                        let _ = block_on(postgres.release());
                    }
                    None
                }
                // A policy's lease is released on its member, as that member's would be.
                Lease::Policy(policy) => {
                    if !on_driver_thread() {
                        let _ = block_on(policy.release());
                    }
                    None
                }
                // And for a mysql lease.
                Lease::Mysql(mysql) => {
                    if !on_driver_thread() {
                        let _ = block_on(mysql.release());
                    }
                    None
                }
                // A file lease releases at once, and its outcome is not reported.
                Lease::File(file) => {
                    let _ = file.release();
                    None
                }
            };
            // SAFETY: live (above) and dropped once; the memory is not read as a lease again.
            unsafe { memory.assume_init_drop() };
            let _ = SPARE.try_with(|spare| {
                spare.memory.set(Some(memory));
                if kept.is_some() {
                    spare.backend.set(kept);
                }
            });
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

    fn open(yaml: &str) -> *mut crate::provider::dokebi_lock_provider {
        let mut provider = ptr::null_mut();
        // SAFETY: the text is `yaml.len()` bytes; the out-parameters are writable.
        let opened = unsafe { dokebi_lock_provider_open(yaml.as_ptr().cast(), yaml.len(), &mut provider, ptr::null_mut()) };
        assert_eq!(opened, dokebi_lock_status::DOKEBI_LOCK_OK);
        provider
    }

    fn backend_of(
        provider: *const crate::provider::dokebi_lock_provider,
        name: &std::ffi::CStr,
    ) -> *mut crate::backend::dokebi_lock_backend {
        let mut backend = ptr::null_mut();
        // SAFETY: a live provider handle, a NUL-terminated name, a writable out-parameter.
        let got = unsafe { dokebi_lock_provider_backend(provider, name.as_ptr(), &mut backend, ptr::null_mut()) };
        assert_eq!(got, dokebi_lock_status::DOKEBI_LOCK_OK);
        backend
    }

    fn fence(lease: *const dokebi_lock_lease) -> u64 {
        // SAFETY: a live lease handle; the fence is a NUL-terminated string it owns.
        unsafe { std::ffi::CStr::from_ptr(dokebi_lock_lease_fence(lease)) }.to_str().unwrap().parse().unwrap()
    }

    #[test]
    fn a_freed_handle_keeps_its_backend_for_the_next_acquire_of_the_same_and_another_backend_takes_its_own() {
        let provider = open("schemaVersion: 1\noptions:\n  dokebi-lock:\n    backends:\n      a: {}\n      b: {}\n");
        let (a, b) = (backend_of(provider, c"a"), backend_of(provider, c"b"));
        // SAFETY: live handles, each freed once and not used after; the keys and names are
        // as long as the lengths given, the out-parameters writable.
        unsafe {
            // A's lease freed: its memory and backend stay this thread's spare.
            let first = acquire(a, "k");
            dokebi_lock_lease_free(first);
            // B: the memory serves, A's backend is dropped for B's own.
            let on_b = acquire(b, "k");
            assert_eq!(on_b, first);
            assert!(dokebi_lock_lease_valid(on_b) && fence(on_b) == 1);
            dokebi_lock_lease_free(on_b);
            // A again (B's backend dropped), then B again without a spare.
            let on_a = acquire(a, "k");
            assert!(dokebi_lock_lease_valid(on_a) && fence(on_a) == 2);
            let on_b = acquire(b, "k");
            assert!(dokebi_lock_lease_valid(on_b) && fence(on_b) == 2);
            // A busy acquire leaves the memory (its kept backend is dropped) for the next one.
            dokebi_lock_lease_free(acquire(b, "other"));
            let mut busy = ptr::null_mut();
            let status = crate::backend::dokebi_lock_try_acquire(a, c"k".as_ptr(), 1, &mut busy, ptr::null_mut());
            assert_eq!(status, dokebi_lock_status::DOKEBI_LOCK_LOCK_BUSY);
            let other = acquire(b, "other");
            assert!(dokebi_lock_lease_valid(other) && fence(other) == 4);
            // The handles freed first, then the provider: the leases still answer.
            dokebi_lock_backend_free(a);
            assert!(dokebi_lock_lease_valid(on_a));
            dokebi_lock_provider_free(provider);
            assert!(!dokebi_lock_lease_valid(on_a) && !dokebi_lock_lease_valid(on_b));
            // Freed on another thread: that thread's spare keeps A's (closed) backend.
            let moved = on_a as usize;
            std::thread::spawn(move || dokebi_lock_lease_free(moved as *mut dokebi_lock_lease)).join().unwrap();
            dokebi_lock_lease_free(on_b);
            let mut released = true;
            assert_eq!(dokebi_lock_lease_release(other, &mut released, ptr::null_mut()), dokebi_lock_status::DOKEBI_LOCK_OK);
            assert!(!released);
            dokebi_lock_backend_free(b);
            assert!(!dokebi_lock_lease_valid(other));
            // The spare keeps B's closed backend: an acquire on another provider drops it.
            dokebi_lock_lease_free(other);
            let provider = open("schemaVersion: 1\noptions:\n  dokebi-lock:\n    backends:\n      c: {}\n");
            let c = backend_of(provider, c"c");
            let on_c = acquire(c, "k");
            assert_eq!(on_c, other);
            assert!(dokebi_lock_lease_valid(on_c));
            // A closed backend's acquire fails; the lease's handle still answers.
            dokebi_lock_lease_free(on_c);
            crate::provider::dokebi_lock_provider_close(provider);
            let mut closed = ptr::null_mut();
            let status = dokebi_lock_acquire(c, c"k".as_ptr(), 1, 0, &mut closed, ptr::null_mut());
            assert_eq!(status, dokebi_lock_status::DOKEBI_LOCK_CLOSED);
            dokebi_lock_provider_free(provider);
            dokebi_lock_backend_free(c);
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

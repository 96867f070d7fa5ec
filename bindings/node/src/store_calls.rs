//! The two calls a store driver's lease costs every user, `acquire` and `release`,
//! as raw Node-API callbacks on a plain JS object: napi-rs class methods
//! and class instances would cost each call its receiver checks and borrow
//! tracking, and each lease a class construction, on the path every redis
//! pair takes. Leases are napi-rs externals ([`LeaseHandle`]), read back
//! with their type check.
//!
//! The object is `{ acquire(key, waitTimeoutMs, abort?), release(lease) }`,
//! each function holding the backend as its data. Both return the promise
//! of [`crate::executor::spawn`]: a lease handle or a boolean, or an
//! `ErrorInfo`.

use std::cell::RefCell;
use std::ffi::CStr;
use std::rc::Rc;
use std::time::Duration;

use dokebi_lock::{AbortController, AbortSignal, AcquireOptions, Backend};
use napi::bindgen_prelude::{External, FromNapiRef};
use napi::{sys, Env};

use crate::executor::{spawn, Promise};
use crate::guard::promise;
use crate::key::KeyReader;
use crate::lease::{lease_handle, LeaseHandle};
use crate::raw::{call_info, object_of, or_throw, Method};

/// What each function of the object holds.
struct Calls {
    backend: Backend,
    keys: RefCell<KeyReader>,
}

const METHODS: [(&CStr, Method); 2] = [(c"acquire", acquire), (c"release", release)];

/// The calls object of `backend`.
///
/// # Safety
/// `env` is the current call's environment, on its JS thread.
pub unsafe fn object(env: sys::napi_env, backend: Backend, max_key_bytes: u32) -> napi::Result<sys::napi_value> {
    let keys = RefCell::new(KeyReader::new(max_key_bytes));
    // SAFETY: as the caller promised.
    unsafe { object_of(env, &Rc::new(Calls { backend, keys }), &METHODS) }
}

/// `acquire(key, waitTimeoutMs, abort?)`: the promise of a lease handle.
/// `abort` is an abort handle (`newAbort()`); a wait past 2^32 - 1 ms
/// (which the JS layer refuses) reads as 0.
unsafe extern "C" fn acquire(env: sys::napi_env, info: sys::napi_callback_info) -> sys::napi_value {
    // SAFETY: Node passes this callback's `env` and `info`; the function was created with an
    // `Rc<Calls>` as data in `object`.
    let (calls, count, [key, wait, abort]) = unsafe { call_info::<Calls, 3>(env, info) };
    let napi_env = Env::from_raw(env);
    let start = || {
        promise(&napi_env, || {
            let mut keys = calls.keys.borrow_mut();
            // SAFETY: `env` and `key` are this callback's.
            let key = unsafe { keys.read(env, key) }.map(|()| keys.key().to_owned());
            // SAFETY: as above.
            let signal = if count < 3 { None } else { Some(unsafe { abort_signal(env, abort) }?) };
            let mut wait_ms = 0;
            // SAFETY: as above; `wait_ms` is a local (left 0 when the value is no number).
            unsafe { sys::napi_get_value_uint32(env, wait, &mut wait_ms) };
            let options = AcquireOptions { wait_timeout: Some(Duration::from_millis(wait_ms.into())), signal, ..AcquireOptions::default() };
            let backend = calls.backend.clone();
            spawn(&napi_env, async move { backend.acquire(&key?, options).await }, lease_handle)
        })
        .map(Promise::into_raw)
    };
    // A failure to start (a Node-API call that failed: a bad argument from
    // outside the JS layer) is thrown; a panic settles the promise.
    // SAFETY: `env` is this callback's.
    unsafe { or_throw(env, start) }
}

/// `release(lease)`: the promise of `true` (released), `false` (already
/// released) or `LEASE_LOST`.
unsafe extern "C" fn release(env: sys::napi_env, info: sys::napi_callback_info) -> sys::napi_value {
    // SAFETY: Node passes this callback's `env` and `info`; the function was created with an
    // `Rc<Calls>` as data in `object`.
    let (_, _, [handle]) = unsafe { call_info::<Calls, 1>(env, info) };
    let napi_env = Env::from_raw(env);
    let start = || {
        promise(&napi_env, || {
            // SAFETY: `env` and `handle` are this callback's.
            let lease = unsafe { LeaseHandle::from_napi_ref(env, handle) }?.lease();
            spawn(&napi_env, async move { lease.release().await }, |released| released)
        })
        .map(Promise::into_raw)
    };
    // A failure to start (a Node-API call that failed: a bad argument from
    // outside the JS layer) is thrown; a panic settles the promise.
    // SAFETY: `env` is this callback's.
    unsafe { or_throw(env, start) }
}

/// The signal of abort handle `value`.
///
/// # Safety
/// `env` and `value` are the current callback's.
unsafe fn abort_signal(env: sys::napi_env, value: sys::napi_value) -> napi::Result<AbortSignal> {
    // SAFETY: as the caller promised; the type check refuses any other external.
    Ok(unsafe { External::<AbortController>::from_napi_ref(env, value) }?.signal())
}

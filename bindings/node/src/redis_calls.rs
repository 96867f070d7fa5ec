//! The two calls a redis lease costs every user, `acquire` and `release`,
//! as raw Node-API callbacks on a plain JS object: napi-rs class methods
//! and class instances cost each call its receiver checks and borrow
//! tracking, and each lease a class construction, about a seventh of what
//! the JS thread spent per acquire + release (callgrind, 64 tasks on 64
//! keys). Leases are napi-rs externals ([`LeaseHandle`]), read back with
//! their type check.
//!
//! The object is `{ acquire(key, waitTimeoutMs, abort?), release(lease) }`,
//! each function holding the backend as its data. Both return the promise
//! of [`crate::executor::spawn`]: a lease handle or a boolean, or an
//! `ErrorInfo`.

use std::cell::RefCell;
use std::ffi::{c_void, CStr, CString};
use std::ptr;
use std::rc::Rc;
use std::time::Duration;

use dokebi_lock::{AbortController, AbortSignal, AcquireOptions, ErrorCode, RedisBackend};
use napi::bindgen_prelude::{External, FromNapiRef};
use napi::{sys, Env};

use crate::executor::{spawn, Promise};
use crate::guard::{self, promise};
use crate::key::KeyReader;
use crate::raw::{check, create};
use crate::redis::{lease_handle, LeaseHandle};

/// What each function of the object holds.
struct Calls {
    backend: RedisBackend,
    keys: RefCell<KeyReader>,
}

type Method = unsafe extern "C" fn(sys::napi_env, sys::napi_callback_info) -> sys::napi_value;

const METHODS: [(&CStr, Method); 2] = [(c"acquire", acquire), (c"release", release)];

/// The calls object of `backend`.
///
/// # Safety
/// `env` is the current call's environment, on its JS thread.
pub unsafe fn object(env: sys::napi_env, backend: RedisBackend) -> napi::Result<sys::napi_value> {
    let keys = RefCell::new(KeyReader::new(backend.options().max_key_bytes));
    let calls = Rc::new(Calls { backend, keys });
    // SAFETY: as the caller promised.
    let object = unsafe { create(|out| sys::napi_create_object(env, out)) }?;
    for (name, method) in METHODS {
        // Each function owns one reference to the calls, dropped when the
        // function is collected.
        let data = Rc::into_raw(calls.clone()) as *mut c_void;
        // SAFETY: as above; `name` is a NUL-terminated static string of `count_bytes` bytes,
        // `method` a callback of the right signature, `data` a leaked `Rc<Calls>`.
        let function =
            unsafe { create(|out| sys::napi_create_function(env, name.as_ptr(), name.count_bytes() as isize, Some(method), data, out)) }?;
        // SAFETY: as above; `function` and `object` were just created in this env. The finalizer
        // reclaims `data` once, when `function` is collected.
        unsafe {
            check(sys::napi_add_finalizer(env, function, data, Some(drop_calls), ptr::null_mut(), ptr::null_mut()))?;
            check(sys::napi_set_named_property(env, object, name.as_ptr(), function))?;
        }
    }
    Ok(object)
}

unsafe extern "C" fn drop_calls(_env: sys::napi_env, data: *mut c_void, _hint: *mut c_void) {
    // SAFETY: one of the references `object` leaked, one per function.
    let calls = unsafe { Rc::from_raw(data as *const Calls) };
    guard::or_log("dropping a redis backend's calls", || drop(calls));
}

/// `acquire(key, waitTimeoutMs, abort?)`: the promise of a lease handle.
/// `abort` is an abort handle (`newAbort()`); a wait past 2^32 - 1 ms
/// (which the JS layer refuses) reads as 0.
unsafe extern "C" fn acquire(env: sys::napi_env, info: sys::napi_callback_info) -> sys::napi_value {
    // SAFETY: Node passes this callback's `env` and `info`; the function was created with an
    // `Rc<Calls>` as data in `object`.
    let (calls, count, [key, wait, abort]) = unsafe { call_info::<3>(env, info) };
    let napi_env = Env::from_raw(env);
    let started = promise(&napi_env, || {
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
    });
    // SAFETY: `env` is this callback's.
    unsafe { settle(env, started) }
}

/// `release(lease)`: the promise of `true` (released), `false` (already
/// released) or `LEASE_LOST`.
unsafe extern "C" fn release(env: sys::napi_env, info: sys::napi_callback_info) -> sys::napi_value {
    // SAFETY: Node passes this callback's `env` and `info`; the function was created with an
    // `Rc<Calls>` as data in `object`.
    let (_, _, [handle]) = unsafe { call_info::<1>(env, info) };
    let napi_env = Env::from_raw(env);
    let started = promise(&napi_env, || {
        // SAFETY: `env` and `handle` are this callback's.
        let lease = unsafe { LeaseHandle::from_napi_ref(env, handle) }?.lease();
        spawn(&napi_env, async move { lease.release().await }, |released| released)
    });
    // SAFETY: `env` is this callback's.
    unsafe { settle(env, started) }
}

/// The signal of abort handle `value`.
///
/// # Safety
/// `env` and `value` are the current callback's.
unsafe fn abort_signal(env: sys::napi_env, value: sys::napi_value) -> napi::Result<AbortSignal> {
    // SAFETY: as the caller promised; the type check refuses any other external.
    Ok(unsafe { External::<AbortController>::from_napi_ref(env, value) }?.signal())
}

/// The promise `started`, or its failure to start thrown (a Node-API call
/// that failed: a bad argument from outside the JS layer).
///
/// # Safety
/// `env` is the current callback's.
unsafe fn settle(env: sys::napi_env, started: napi::Result<Promise>) -> sys::napi_value {
    match started {
        Ok(promise) => promise.into_raw(),
        Err(error) => {
            // SAFETY: as the caller promised.
            unsafe { throw(env, &error.reason) };
            ptr::null_mut()
        }
    }
}

/// Throws a `PROVIDER_FAILED` error with `message`.
///
/// # Safety
/// `env` is the current callback's.
unsafe fn throw(env: sys::napi_env, message: &str) {
    let code = CString::new(ErrorCode::ProviderFailed.as_str()).unwrap_or_default();
    let message = CString::new(message).unwrap_or_default();
    // SAFETY: as the caller promised; both strings outlive the call.
    unsafe { sys::napi_throw_error(env, code.as_ptr(), message.as_ptr()) };
}

/// The calls behind this callback, how many arguments it was given, and its
/// first `N` (missing ones read as `undefined`).
unsafe fn call_info<'a, const N: usize>(env: sys::napi_env, info: sys::napi_callback_info) -> (&'a Calls, usize, [sys::napi_value; N]) {
    let mut count = N;
    let mut args = [ptr::null_mut(); N];
    let mut data = ptr::null_mut();
    // SAFETY: the callers pass their own callback's `env` and `info`; `args` has room for `count`
    // (N) values and `data` is a valid out-pointer.
    unsafe { sys::napi_get_cb_info(env, info, &mut count, args.as_mut_ptr(), ptr::null_mut(), &mut data) };
    // SAFETY: every method was created with an `Rc<Calls>` as its data, kept alive until the
    // function itself is finalized.
    (unsafe { &*(data as *const Calls) }, count, args)
}

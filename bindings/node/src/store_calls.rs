//! The calls a store driver's lease costs every user, `acquire` and
//! `release` (and `drop`, for a lease its holder dropped unreleased), as raw
//! Node-API callbacks on a plain JS object: napi-rs class methods and class
//! instances would cost each call its receiver checks and borrow tracking,
//! on the path every redis pair takes. A lease is a number, its id in the
//! backend's [`Leases`] (see [`crate::lease`] for why).
//!
//! The object is `{ acquire(key, waitTimeoutMs, id, abort?), release(id),
//! drop(id) }`, each function holding the backend as its data. `acquire` and
//! `release` return the promise of [`crate::executor::spawn`]: the fence
//! (see [`crate::lease::Fence`]) or a boolean, or an `ErrorInfo`.

use std::cell::RefCell;
use std::ffi::CStr;
use std::future::ready;
use std::ptr;
use std::rc::Rc;
use std::time::Duration;

use dokebi_lock::{AbortController, AbortSignal, AcquireOptions, Backend};
use napi::bindgen_prelude::{External, FromNapiRef};
use napi::{sys, Env};

use crate::executor::{spawn, Promise};
use crate::guard::{or_log, promise};
use crate::key::KeyReader;
use crate::lease::{read_id, Leases};
use crate::raw::{call_info, object_of, or_throw, Method};

/// What each function of the object holds.
struct Calls {
    backend: Backend,
    keys: RefCell<KeyReader>,
    leases: Rc<Leases>,
}

const METHODS: [(&CStr, Method); 3] = [(c"acquire", acquire), (c"release", release), (c"drop", drop_lease)];

/// The calls object of `backend`, whose leases go in `leases`.
///
/// # Safety
/// `env` is the current call's environment, on its JS thread.
pub unsafe fn object(env: sys::napi_env, backend: Backend, max_key_bytes: u32, leases: Rc<Leases>) -> napi::Result<sys::napi_value> {
    let keys = RefCell::new(KeyReader::new(max_key_bytes));
    // SAFETY: as the caller promised.
    unsafe { object_of(env, &Rc::new(Calls { backend, keys, leases }), &METHODS) }
}

/// `acquire(key, waitTimeoutMs, id, abort?)`: the promise of the lease's
/// fence; the lease is kept as `id`. `abort` is an abort handle
/// (`newAbort()`); a wait past 2^32 - 1 ms (which the JS layer refuses)
/// reads as 0.
unsafe extern "C" fn acquire(env: sys::napi_env, info: sys::napi_callback_info) -> sys::napi_value {
    // SAFETY: Node passes this callback's `env` and `info`; the function was created with an
    // `Rc<Calls>` as data in `object`.
    let (calls, count, [key, wait, id, abort]) = unsafe { call_info::<Calls, 4>(env, info) };
    let napi_env = Env::from_raw(env);
    let start = || {
        // SAFETY: `env` and `id` are this callback's.
        let id = unsafe { read_id(env, id) }?;
        promise(&napi_env, || {
            let mut keys = calls.keys.borrow_mut();
            // SAFETY: `env` and `key` are this callback's.
            let key = unsafe { keys.read(env, key) }.map(|()| keys.key().to_owned());
            // SAFETY: as above.
            let signal = if count < 4 { None } else { Some(unsafe { abort_signal(env, abort) }?) };
            let mut wait_ms = 0;
            // SAFETY: as above; `wait_ms` is a local (left 0 when the value is no number).
            unsafe { sys::napi_get_value_uint32(env, wait, &mut wait_ms) };
            let options = AcquireOptions { wait_timeout: Some(Duration::from_millis(wait_ms.into())), signal, ..AcquireOptions::default() };
            let (backend, leases) = (calls.backend.clone(), calls.leases.clone());
            spawn(&napi_env, async move { backend.acquire(&key?, options).await }, move |lease| leases.grant(id, lease))
        })
        .map(Promise::into_raw)
    };
    // A failure to start (a Node-API call that failed: a bad argument from
    // outside the JS layer) is thrown; a panic settles the promise.
    // SAFETY: `env` is this callback's.
    unsafe { or_throw(env, start) }
}

/// `release(id)`: the promise of `true` (released), `false` (already
/// released) or `LEASE_LOST`. The lease leaves the table at once.
unsafe extern "C" fn release(env: sys::napi_env, info: sys::napi_callback_info) -> sys::napi_value {
    // SAFETY: Node passes this callback's `env` and `info`; the function was created with an
    // `Rc<Calls>` as data in `object`.
    let (calls, _, [id]) = unsafe { call_info::<Calls, 1>(env, info) };
    let napi_env = Env::from_raw(env);
    let start = || {
        // SAFETY: `env` and `id` are this callback's.
        let id = unsafe { read_id(env, id) }?;
        promise(&napi_env, || match calls.leases.take(id) {
            Some(lease) => spawn(&napi_env, async move { lease.release().await }, |released| released),
            None => spawn(&napi_env, ready(Ok(false)), |released| released),
        })
        .map(Promise::into_raw)
    };
    // A failure to start (a Node-API call that failed: a bad argument from
    // outside the JS layer) is thrown; a panic settles the promise.
    // SAFETY: `env` is this callback's.
    unsafe { or_throw(env, start) }
}

/// `drop(id)`: forgets lease `id`, which its holder dropped unreleased (a
/// `FinalizationRegistry` callback): dropping it releases it.
unsafe extern "C" fn drop_lease(env: sys::napi_env, info: sys::napi_callback_info) -> sys::napi_value {
    // SAFETY: Node passes this callback's `env` and `info`; the function was created with an
    // `Rc<Calls>` as data in `object`.
    let (calls, _, [id]) = unsafe { call_info::<Calls, 1>(env, info) };
    // SAFETY: `env` and `id` are this callback's.
    if let Ok(id) = unsafe { read_id(env, id) } {
        or_log("dropping a lease", || drop(calls.leases.take(id)));
    }
    ptr::null_mut()
}

/// The signal of abort handle `value`.
///
/// # Safety
/// `env` and `value` are the current callback's.
unsafe fn abort_signal(env: sys::napi_env, value: sys::napi_value) -> napi::Result<AbortSignal> {
    // SAFETY: as the caller promised; the type check refuses any other external.
    Ok(unsafe { External::<AbortController>::from_napi_ref(env, value) }?.signal())
}

//! Helpers for the raw Node-API calls the hot paths make directly (napi-rs
//! wrappers cost more per call there).

use std::ffi::{c_void, CStr, CString};
use std::ptr;
use std::rc::Rc;

use dokebi_lock::ErrorCode;
use napi::sys;

use crate::guard;

/// Runs a Node-API call that writes one value, and returns that value.
///
/// # Safety
/// `make` must be a Node-API call valid on the current thread.
pub unsafe fn create(make: impl FnOnce(*mut sys::napi_value) -> sys::napi_status) -> napi::Result<sys::napi_value> {
    let mut result = ptr::null_mut();
    check(make(&mut result))?;
    Ok(result)
}

/// A Node-API status as a result.
pub fn check(status: sys::napi_status) -> napi::Result<()> {
    if status == sys::Status::napi_ok {
        Ok(())
    } else {
        Err(napi::Error::new(napi::Status::GenericFailure, format!("Node-API call failed with status {status}")))
    }
}

/// A raw Node-API callback.
pub type Method = unsafe extern "C" fn(sys::napi_env, sys::napi_callback_info) -> sys::napi_value;

/// A plain JS object whose functions are `methods`, each holding a
/// reference to `shared` as its data (dropped when the function is
/// collected, so `shared` lives as long as any of them): what the hot paths
/// hand to JS instead of napi-rs classes. The methods read it with
/// [`call_info`].
///
/// # Safety
/// `env` is the current call's environment, on its JS thread.
pub unsafe fn object_of<T>(env: sys::napi_env, shared: &Rc<T>, methods: &[(&CStr, Method)]) -> napi::Result<sys::napi_value> {
    // SAFETY: as the caller promised.
    let object = unsafe { create(|out| sys::napi_create_object(env, out)) }?;
    for (name, method) in methods {
        let data = Rc::into_raw(shared.clone()) as *mut c_void;
        // SAFETY: as above; `name` is a NUL-terminated string of `count_bytes` bytes, `method` a
        // callback of the right signature, `data` a leaked `Rc<T>`.
        let function =
            unsafe { create(|out| sys::napi_create_function(env, name.as_ptr(), name.count_bytes() as isize, Some(*method), data, out)) }?;
        // SAFETY: as above; `function` and `object` were just created in this env. The finalizer
        // reclaims `data` once, when `function` is collected.
        unsafe {
            check(sys::napi_add_finalizer(env, function, data, Some(drop_shared::<T>), ptr::null_mut(), ptr::null_mut()))?;
            check(sys::napi_set_named_property(env, object, name.as_ptr(), function))?;
        }
    }
    Ok(object)
}

unsafe extern "C" fn drop_shared<T>(_env: sys::napi_env, data: *mut c_void, _hint: *mut c_void) {
    // SAFETY: one of the references `object_of` leaked, one per function.
    let shared = unsafe { Rc::from_raw(data as *const T) };
    guard::or_log("dropping a native object", || drop(shared));
}

/// The shared value behind this callback, how many arguments it was given,
/// and its first `N` (missing ones read as `undefined`).
///
/// # Safety
/// `env` and `info` are the current callback's, a function that
/// [`object_of`] made with an `Rc<T>`.
pub unsafe fn call_info<'a, T, const N: usize>(env: sys::napi_env, info: sys::napi_callback_info) -> (&'a T, usize, [sys::napi_value; N]) {
    let mut count = N;
    let mut args = [ptr::null_mut(); N];
    let mut data = ptr::null_mut();
    // SAFETY: as the caller promised; `args` has room for `count` (N) values and `data` is a
    // valid out-pointer.
    unsafe { sys::napi_get_cb_info(env, info, &mut count, args.as_mut_ptr(), ptr::null_mut(), &mut data) };
    // SAFETY: the function was made with an `Rc<T>` as its data, kept alive until the function
    // itself is finalized (the caller's promise).
    (unsafe { &*(data as *const T) }, count, args)
}

/// Runs the body of a method whose callers read no failure sentinel: a
/// panic, or a Node-API failure, becomes a thrown JS error whose `code` is
/// PROVIDER_FAILED.
///
/// # Safety
/// `env` is the current callback's environment.
pub unsafe fn or_throw(env: sys::napi_env, body: impl FnOnce() -> napi::Result<sys::napi_value>) -> sys::napi_value {
    let message = match guard::catch(body) {
        Ok(Ok(value)) => return value,
        Ok(Err(error)) => error.reason,
        Err(error) => error.message().to_owned(),
    };
    let code = CString::new(ErrorCode::ProviderFailed.as_str()).unwrap_or_default();
    let message = CString::new(message).unwrap_or_default();
    // SAFETY: `env` is the callback's; both strings outlive the call.
    unsafe { sys::napi_throw_error(env, code.as_ptr(), message.as_ptr()) };
    ptr::null_mut()
}

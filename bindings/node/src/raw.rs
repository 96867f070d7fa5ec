//! Helpers for the raw Node-API calls the hot paths make directly (napi-rs
//! wrappers cost more per call there).

use std::ptr;

use napi::sys;

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

//! Reads a JS string key as UTF-16 (so a lone surrogate is detected by the
//! core's key rules) without allocating on the common path.

use std::ptr;

use dokebi_lock::{key, ErrorCode, LockError, Result};
use napi::sys;

/// A reusable buffer for keys of one backend.
pub struct KeyReader {
    units: Vec<u16>,
    key: String,
    max_key_bytes: usize,
}

impl KeyReader {
    pub fn new(max_key_bytes: u32) -> Self {
        let max_key_bytes = max_key_bytes as usize;
        // Every UTF-16 unit is at least one UTF-8 byte, so a key that fills
        // maxKeyBytes + 1 units is too long whatever it holds: one read into
        // this buffer (plus room for napi's NUL) decides every valid key.
        KeyReader { units: vec![0; max_key_bytes + 2], key: String::new(), max_key_bytes }
    }

    /// Converts the key, applying the core's key rules; on success the key is
    /// [`KeyReader::key`].
    ///
    /// # Safety
    /// `env` and `value` come from the current N-API callback.
    pub unsafe fn read(&mut self, env: sys::napi_env, value: sys::napi_value) -> Result<()> {
        let mut len = 0;
        // SAFETY: the caller promised `env` and `value` are the current callback's (# Safety); the
        // buffer pointer and its length describe `self.units`, which napi writes at most that far.
        let status = unsafe { sys::napi_get_value_string_utf16(env, value, self.units.as_mut_ptr(), self.units.len(), &mut len) };
        if status != sys::Status::napi_ok {
            return Err(LockError::new(ErrorCode::InvalidKey, "key is not a string"));
        }
        if len <= self.max_key_bytes {
            return key::from_utf16_into(&self.units[..len], self.max_key_bytes, &mut self.key);
        }
        // Too long (or cut short by the buffer): read it whole so the error
        // reports the real length.
        // SAFETY: `env` and `value` are the current callback's, as promised by our caller.
        let whole = unsafe { read_whole(env, value) }?;
        key::from_utf16_into(&whole, self.max_key_bytes, &mut self.key)
    }

    /// The key of the last successful [`KeyReader::read`]. (`read` does not
    /// return it: copying a just-written `&str` out of the returned `Result`
    /// cost a store-forwarding stall on every acquire, seen in `perf`.)
    pub fn key(&self) -> &str {
        &self.key
    }
}

unsafe fn read_whole(env: sys::napi_env, value: sys::napi_value) -> Result<Vec<u16>> {
    let mut len = 0;
    let failed = || LockError::new(ErrorCode::InvalidKey, "key is not a string");
    // SAFETY: `env` and `value` are the current callback's (our caller's promise, see
    // `KeyReader::read`); a NULL buffer asks only for the length.
    if unsafe { sys::napi_get_value_string_utf16(env, value, ptr::null_mut(), 0, &mut len) } != sys::Status::napi_ok {
        return Err(failed());
    }
    let mut units = vec![0u16; len + 1];
    let mut written = 0;
    // SAFETY: as above; the buffer pointer and its length describe `units`.
    if unsafe { sys::napi_get_value_string_utf16(env, value, units.as_mut_ptr(), units.len(), &mut written) } != sys::Status::napi_ok {
        return Err(failed());
    }
    units.truncate(written);
    Ok(units)
}

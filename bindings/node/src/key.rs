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
        // Too long: V8 measures its UTF-8 length for the error without a
        // copy (a lone surrogate counts as the 3 bytes of U+FFFD, as it
        // would in UTF-8), so an oversized key costs no memory of its size.
        // SAFETY: `env` and `value` are the current callback's, as promised by our caller.
        let bytes = unsafe { utf8_len(env, value) }?;
        Err(key::too_long(bytes, self.max_key_bytes))
    }

    /// The key of the last successful [`KeyReader::read`]. (`read` does not
    /// return it: copying a just-written `&str` out of the returned `Result`
    /// cost a store-forwarding stall on every acquire, seen in `perf`.)
    pub fn key(&self) -> &str {
        &self.key
    }
}

/// The length in UTF-8 of string `value`, read without converting it.
///
/// # Safety
/// `env` and `value` are the current callback's.
unsafe fn utf8_len(env: sys::napi_env, value: sys::napi_value) -> Result<usize> {
    let mut len = 0;
    // SAFETY: as the caller promised; a NULL buffer asks only for the length.
    if unsafe { sys::napi_get_value_string_utf8(env, value, ptr::null_mut(), 0, &mut len) } != sys::Status::napi_ok {
        return Err(LockError::new(ErrorCode::InvalidKey, "key is not a string"));
    }
    Ok(len)
}

//! `dokebi_lock_acquire_options`: what the `_ex` calls ask for beyond a
//! plain lease of one key: shared mode, a counted lock (limit, weight), and
//! several keys at once. A zeroed struct with one key is a plain acquire.

use std::ffi::c_char;

use super::args;
use dokebi_lock::acquire::{LockKind, LockMode};
use dokebi_lock::error::{ErrorCode, LockError, Result};

/// `dokebi_lock_acquire_options.mode`: alone (the default, 0).
pub const DOKEBI_LOCK_MODE_EXCLUSIVE: u32 = 0;
/// `dokebi_lock_acquire_options.mode`: together with the other shared
/// leases of the key, and with no exclusive one (readers of a
/// reader/writer lock).
pub const DOKEBI_LOCK_MODE_SHARED: u32 = 1;

/// One key of an `_ex` acquire.
#[repr(C)]
pub struct dokebi_lock_key {
    /// `len` bytes of UTF-8 (not NUL-terminated); NULL only with `len` 0.
    pub key: *const c_char,
    /// The key's length in bytes.
    pub len: usize,
}

/// What an `_ex` acquire asks for. Fields left 0 take their default.
#[repr(C)]
pub struct dokebi_lock_acquire_options {
    /// `DOKEBI_LOCK_MODE_EXCLUSIVE` (0) or `DOKEBI_LOCK_MODE_SHARED`.
    pub mode: u32,
    /// A counted lock: at most `limit` units of each key held at once; 0 is
    /// 1, a plain lock. Every caller of a key gives the same limit, else
    /// `DOKEBI_LOCK_INVALID_ARGUMENT`. Not with shared mode.
    pub limit: u32,
    /// The units this lease holds of each key; 0 is 1. At most `limit`.
    pub weight: u32,
    /// The keys, taken as one lease: all or none. Read during the call only.
    pub keys: *const dokebi_lock_key,
    /// How many keys `keys` points to: at least 1, none twice.
    pub key_count: usize,
}

/// The checked keys and kind of `options`.
///
/// # Safety
/// `options` is NULL or points to a readable options struct whose `keys`
/// is NULL or points to `key_count` readable keys, each NULL or pointing to
/// `len` readable bytes, all living for `'a`.
pub(crate) unsafe fn read<'a>(options: *const dokebi_lock_acquire_options) -> Result<(Vec<&'a str>, LockKind)> {
    // SAFETY: the caller promised `options` is NULL or readable (# Safety).
    let options = unsafe { args::handle(options, "options") }?;
    let keys: &[dokebi_lock_key] = match (options.keys.is_null(), options.key_count) {
        (_, 0) => &[],
        (true, _) => return Err(LockError::new(ErrorCode::InvalidArgument, "options.keys is NULL")),
        // SAFETY: non-NULL, and the caller promised `key_count` readable keys (# Safety).
        (false, count) => unsafe { std::slice::from_raw_parts(options.keys, count) },
    };
    // SAFETY: each key is NULL or points to `len` readable bytes (the caller's promise).
    let keys = keys.iter().map(|key| unsafe { args::key(key.key, key.len) }).collect::<Result<Vec<_>>>()?;
    let mode = match options.mode {
        DOKEBI_LOCK_MODE_EXCLUSIVE => LockMode::Exclusive,
        DOKEBI_LOCK_MODE_SHARED => LockMode::Shared,
        _ => {
            return Err(LockError::new(
                ErrorCode::InvalidArgument,
                "options.mode must be DOKEBI_LOCK_MODE_EXCLUSIVE or DOKEBI_LOCK_MODE_SHARED",
            ))
        }
    };
    let given = |units: u32| (units != 0).then_some(units);
    Ok((keys, LockKind::new(mode, given(options.limit), given(options.weight))?))
}

//! The arguments of a kinds acquire (`acquireKind` of a store backend,
//! `acquire` of a file backend) as the core takes them.

use std::time::Duration;

use dokebi_lock::{key, AbortController, AcquireOptions, Backend, HolderLabel, Lease, LockKind, LockMode};
use napi::bindgen_prelude::{External, Utf16String};

/// The keys (converted now, their error reported by the acquire) and the
/// options of an acquire in the kind asked.
pub fn kind_request(
    keys: &[Utf16String],
    max_key_bytes: usize,
    shared: bool,
    limit: u32,
    weight: u32,
    wait_timeout_ms: u32,
    abort: Option<&External<AbortController>>,
) -> (dokebi_lock::Result<Vec<String>>, AcquireOptions) {
    let keys = keys.iter().map(|key| key::from_utf16(key, max_key_bytes)).collect();
    let mode = if shared { LockMode::Shared } else { LockMode::Exclusive };
    let wait = Some(Duration::from_millis(wait_timeout_ms.into()));
    (keys, AcquireOptions::of_kind(LockKind { mode, limit, weight }, wait, abort.map(|a| a.signal())))
}

/// `request` (of [`kind_request`]) with the acquire's own `holder` label
/// (a JS string, checked now; its error, after the keys', is reported by
/// the acquire).
pub fn held_by(
    request: (dokebi_lock::Result<Vec<String>>, AcquireOptions),
    holder: Option<Utf16String>,
) -> (dokebi_lock::Result<Vec<String>>, AcquireOptions) {
    let (keys, options) = request;
    match holder.as_deref().map(label).transpose() {
        Ok(holder) => (keys, options.held_by(holder)),
        Err(error) => (keys.and(Err(error)), options),
    }
}

/// The acquire's own holder label, of a JS string's UTF-16 `units`: one
/// with a lone surrogate is refused as a key is (napi's conversion to UTF-8
/// would make it U+FFFD, another label, and two labels one), then checked
/// by the core. Either is `INVALID_ARGUMENT`.
pub fn label(units: &[u16]) -> dokebi_lock::Result<HolderLabel> {
    let text = String::from_utf16(units).map_err(|_| {
        dokebi_lock::LockError::new(
            dokebi_lock::ErrorCode::InvalidArgument,
            "holder is not well-formed UTF-16 (it contains a lone surrogate)",
        )
    })?;
    HolderLabel::of_acquire(&text)
}

/// Acquires `keys` (converted by [`kind_request`]) on `backend` with
/// `options`: one key's `acquire` unless `many`, else `acquire_many`.
pub async fn acquire_keys(
    backend: Backend,
    keys: dokebi_lock::Result<Vec<String>>,
    many: bool,
    options: AcquireOptions,
) -> dokebi_lock::Result<Lease> {
    let keys = keys?;
    let names: Vec<&str> = keys.iter().map(String::as_str).collect();
    match (many, &names[..]) {
        (false, [key]) => backend.acquire(key, options).await,
        _ => backend.acquire_many(&names, options).await,
    }
}

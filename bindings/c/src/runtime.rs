//! The runtime handle: one opened configuration (a core `Provider`).

use std::ffi::{c_char, CStr, CString};
use std::sync::Arc;

use super::args::{give, handle, text, Out};
use super::backend::dokebi_lock_backend;
use super::completion::{block_on, Completions};
use super::error::{c_text, dokebi_lock_error};
use super::panic::{boundary, call};
use super::status::dokebi_lock_status;
use dokebi_lock::error::{ErrorCode, LockError};
use dokebi_lock::provider::Provider;

/// Every backend of one configuration. Shared by any number of threads;
/// freed with `dokebi_lock_runtime_free`.
pub struct dokebi_lock_runtime {
    provider: Provider,
    /// The backend names, sorted, as C strings owned by the runtime.
    names: Vec<CString>,
    completions: Arc<Completions>,
}

/// Opens a runtime from the text of a YAML configuration file
/// (`schemaVersion: 1`, `options.dokebi-lock.backends...`), `yaml_len` bytes
/// at `yaml`. On `DOKEBI_LOCK_INVALID_OPTIONS` the error lists every problem
/// (`dokebi_lock_error_issue_count` / `_path` / `_message`).
///
/// A Redis connection (`options.dokebi-redis.connections.<name>`) names
/// exactly one of: `url` (one server), `sentinel` (`nodes`: sentinel URLs,
/// `primaryName`, and `username` / `password` / `db` / `tls` for the primary;
/// failovers are followed), or `cluster` (`nodes`: seed URLs); plus
/// `connectTimeoutMs` and `commandTimeoutMs` (below every `leaseMs` that uses
/// it). A redis backend may set `replicaAcks` (acquire and renew wait for that
/// many replicas). See README.md, "Configuration" and "Sentinel and Cluster".
///
/// # Safety
/// `yaml` points to `yaml_len` readable bytes; `out_runtime` is writable;
/// `out_error` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn dokebi_lock_runtime_open(
    yaml: *const c_char,
    yaml_len: usize,
    out_runtime: *mut *mut dokebi_lock_runtime,
    out_error: *mut *mut dokebi_lock_error,
) -> dokebi_lock_status {
    call(out_error, || {
        let out = Out::new(out_runtime, "out_runtime")?;
        let yaml = unsafe { text(yaml, yaml_len, "yaml", ErrorCode::InvalidOptions) }?;
        let provider = Provider::from_yaml(yaml)?;
        let names = provider.names().into_iter().map(c_text).collect();
        out.write(give(dokebi_lock_runtime { provider, names, completions: Arc::default() }));
        Ok(())
    })
}

/// How many backends the configuration defines (0 for NULL).
///
/// # Safety
/// `runtime` is NULL or a live runtime handle.
#[no_mangle]
pub unsafe extern "C" fn dokebi_lock_runtime_name_count(runtime: *const dokebi_lock_runtime) -> usize {
    boundary(|| unsafe { runtime.as_ref() }.map_or(0, |r| r.names.len()))
}

/// The name of backend `index` (names are sorted), owned by the runtime;
/// NULL when `index` is out of range or for NULL.
///
/// # Safety
/// `runtime` is NULL or a live runtime handle.
#[no_mangle]
pub unsafe extern "C" fn dokebi_lock_runtime_name(runtime: *const dokebi_lock_runtime, index: usize) -> *const c_char {
    boundary(|| unsafe { runtime.as_ref() }.and_then(|r| r.names.get(index)).map_or(std::ptr::null(), |n| n.as_ptr()))
}

/// The backend called `name` (NUL-terminated): `DOKEBI_LOCK_UNKNOWN_BACKEND`
/// if none is, `DOKEBI_LOCK_CLOSED` after close. The backend handle stays
/// usable after the runtime is freed (its calls then fail with `CLOSED`).
///
/// # Safety
/// `runtime` is NULL or a live runtime handle; `name` is NULL or a
/// NUL-terminated string; `out_backend` is writable; `out_error` is NULL or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn dokebi_lock_runtime_backend(
    runtime: *const dokebi_lock_runtime,
    name: *const c_char,
    out_backend: *mut *mut dokebi_lock_backend,
    out_error: *mut *mut dokebi_lock_error,
) -> dokebi_lock_status {
    call(out_error, || {
        let runtime = unsafe { handle(runtime, "runtime") }?;
        let out = Out::new(out_backend, "out_backend")?;
        unsafe { handle(name, "name") }?;
        let name = unsafe { CStr::from_ptr(name) }
            .to_str()
            .map_err(|_| LockError::new(ErrorCode::UnknownBackend, "no backend of that name is configured (the name is not valid UTF-8)"))?;
        let backend = runtime.provider.backend(name)?;
        out.write(give(dokebi_lock_backend::new(backend, runtime.completions.clone())));
        Ok(())
    })
}

/// Closes the runtime, as the core's `close()`: waiters are rejected with
/// `DOKEBI_LOCK_CLOSED`, held leases are released (redis: within
/// `shutdownTimeoutMs`, failures logged, never returned) or become invalid
/// (local), and every later call fails with `CLOSED`. Returns once every
/// completion callback has returned (except when called from inside a
/// callback: then the other callbacks run after it returns). Idempotent.
///
/// # Safety
/// `runtime` is NULL or a live runtime handle.
#[no_mangle]
pub unsafe extern "C" fn dokebi_lock_runtime_close(runtime: *mut dokebi_lock_runtime) -> dokebi_lock_status {
    call(std::ptr::null_mut(), || {
        unsafe { handle(runtime, "runtime") }?.close();
        Ok(())
    })
}

/// Closes the runtime (as `dokebi_lock_runtime_close`) and frees it. NULL is
/// accepted.
///
/// # Safety
/// `runtime` is NULL or a live runtime handle that no other thread uses any
/// more and that is not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn dokebi_lock_runtime_free(runtime: *mut dokebi_lock_runtime) {
    boundary(|| {
        if !runtime.is_null() {
            // SAFETY: the handle came from Box::into_raw in `open`.
            let runtime = unsafe { Box::from_raw(runtime) };
            runtime.close();
        }
    })
}

impl dokebi_lock_runtime {
    fn close(&self) {
        block_on(self.provider.close());
        self.completions.wait_idle();
    }
}

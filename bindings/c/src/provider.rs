//! The provider handle: one opened configuration (a core `Provider`).

use std::ffi::{c_char, c_void, CStr, CString};
use std::sync::Arc;

use super::args::{give, handle, text, Out};
use super::backend::dokebi_lock_backend;
use super::completion::{block_on, refuse_on_driver_thread, Completions};
use super::error::{c_text, dokebi_lock_error};
use super::panic::{boundary, call};
use super::status::dokebi_lock_status;
use dokebi_lock::error::{ErrorCode, LockError};
use dokebi_lock::provider::{Hooks, Provider};
use dokebi_lock::Options;

use super::fork;
use super::telemetry::{dokebi_lock_telemetry_fn, hook, Callback};
use dokebi_lock::telemetry::Telemetry;

/// Every backend of one configuration. Shared by any number of threads;
/// freed with `dokebi_lock_provider_free`.
pub struct dokebi_lock_provider {
    provider: Provider,
    /// The backend names, sorted, as C strings owned by the provider.
    names: Vec<CString>,
    completions: Arc<Completions>,
    /// The telemetry callback, silenced when the provider is freed.
    telemetry: Option<Arc<Callback>>,
    /// The process that opened it (see [`fork`]).
    born: u32,
}

/// Opens a provider from the text of a YAML configuration file
/// (`schemaVersion: 1`, `options.dokebi-lock.backends...`), `yaml_len` bytes
/// at `yaml`. On `DOKEBI_LOCK_INVALID_OPTIONS` the error lists every problem
/// (`dokebi_lock_error_issue_count` / `_path` / `_message` / `_status`).
///
/// A Redis connection (`options.dokebi-redis.connections.<name>`) names
/// exactly one of: `url` (one server), `sentinel` (`nodes`: sentinel URLs,
/// `primaryName`, and `username` / `password` / `db` / `tls` for the primary;
/// failovers are followed), or `cluster` (`nodes`: seed URLs); plus
/// `connectTimeoutMs` and `commandTimeoutMs` (below every `leaseMs` that uses
/// it). A redis backend may set `replicaAcks` (acquire and renew wait for that
/// many replicas). See docs/configuration.md and docs/redis.md, "Sentinel and Cluster".
///
/// # Safety
/// `yaml` points to `yaml_len` readable bytes; `out_provider` is writable;
/// `out_error` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn dokebi_lock_provider_open(
    yaml: *const c_char,
    yaml_len: usize,
    out_provider: *mut *mut dokebi_lock_provider,
    out_error: *mut *mut dokebi_lock_error,
) -> dokebi_lock_status {
    // SAFETY: the caller keeps this function's contract, which is the
    // other's without a callback.
    unsafe { dokebi_lock_provider_open_with_telemetry(yaml, yaml_len, None, std::ptr::null_mut(), out_provider, out_error) }
}

/// Opens a provider as `dokebi_lock_provider_open` does, reporting telemetry
/// events (slow acquires and holds, wait timeouts, lost leases, Redis
/// connections going up or down; counts and codes, never keys) to
/// `telemetry` with `user_data`. NULL `telemetry` reports nothing. See
/// `dokebi_lock_telemetry_fn` for the threads it is called on and what it
/// must not do. No acquire or hold events (see
/// `dokebi_lock_provider_open_with_trace_events`).
///
/// # Safety
/// As `dokebi_lock_provider_open`; `telemetry` is NULL or a function that
/// may be called with `user_data` from any thread, also concurrently, until
/// `dokebi_lock_provider_free` returns (never after).
#[no_mangle]
pub unsafe extern "C" fn dokebi_lock_provider_open_with_telemetry(
    yaml: *const c_char,
    yaml_len: usize,
    telemetry: dokebi_lock_telemetry_fn,
    user_data: *mut c_void,
    out_provider: *mut *mut dokebi_lock_provider,
    out_error: *mut *mut dokebi_lock_error,
) -> dokebi_lock_status {
    // SAFETY: the caller keeps this function's contract, which is the
    // other's without trace events.
    unsafe { dokebi_lock_provider_open_with_trace_events(yaml, yaml_len, telemetry, user_data, 0, out_provider, out_error) }
}

/// Opens a provider as `dokebi_lock_provider_open_with_telemetry` does, and
/// also reports the events `trace_events` asks for, for a host that feeds
/// its own tracer: `DOKEBI_LOCK_TRACE_ACQUIRE` (an event
/// `DOKEBI_LOCK_EVENT_ACQUIRE` per acquire call: its wait, outcome, fence,
/// mode, limit, weight and key count) and `DOKEBI_LOCK_TRACE_HOLD` (an event
/// `DOKEBI_LOCK_EVENT_HOLD` when a granted lease stops being held: how long,
/// how it ended, its fence), or both. Each is a `dokebi_lock_trace_event`
/// (`dokebi_lock_event_trace`). A call per acquire: ask only for what the
/// host records. `trace_events` 0 is `dokebi_lock_provider_open_with_telemetry`;
/// other bits, or bits with a NULL `telemetry`, are
/// `DOKEBI_LOCK_INVALID_ARGUMENT`.
///
/// # Safety
/// As `dokebi_lock_provider_open_with_telemetry`.
#[no_mangle]
pub unsafe extern "C" fn dokebi_lock_provider_open_with_trace_events(
    yaml: *const c_char,
    yaml_len: usize,
    telemetry: dokebi_lock_telemetry_fn,
    user_data: *mut c_void,
    trace_events: u32,
    out_provider: *mut *mut dokebi_lock_provider,
    out_error: *mut *mut dokebi_lock_error,
) -> dokebi_lock_status {
    call(out_error, || {
        let out = Out::new(out_provider, "out_provider")?;
        // SAFETY: the caller promised `yaml` is NULL or points to `yaml_len` readable bytes (# Safety,
        // as `dokebi_lock_provider_open`).
        let yaml = unsafe { text(yaml, yaml_len, "yaml", ErrorCode::InvalidOptions) }?;
        fork::watch();
        let callback = hook(telemetry, user_data, trace_events)?;
        let hooks = Hooks { telemetry: callback.clone().map(|callback| callback as Telemetry), ..Hooks::default() };
        let provider = Provider::open_with(Options::from_yaml(yaml)?, hooks)?;
        let names = provider.names().into_iter().map(c_text).collect();
        let born = fork::now();
        out.write(give(dokebi_lock_provider { provider, names, completions: Arc::default(), telemetry: callback, born }));
        Ok(())
    })
}

/// How many backends the configuration defines (0 for NULL).
///
/// # Safety
/// `provider` is NULL or a live provider handle.
#[no_mangle]
pub unsafe extern "C" fn dokebi_lock_provider_name_count(provider: *const dokebi_lock_provider) -> usize {
    // SAFETY: the caller promised `provider` is NULL or a live provider handle (# Safety).
    boundary(|| unsafe { provider.as_ref() }.map_or(0, |r| r.names.len()))
}

/// The name of backend `index` (names are sorted), owned by the provider;
/// NULL when `index` is out of range or for NULL.
///
/// # Safety
/// `provider` is NULL or a live provider handle.
#[no_mangle]
pub unsafe extern "C" fn dokebi_lock_provider_name(provider: *const dokebi_lock_provider, index: usize) -> *const c_char {
    // SAFETY: the caller promised `provider` is NULL or a live provider handle (# Safety).
    boundary(|| unsafe { provider.as_ref() }.and_then(|r| r.names.get(index)).map_or(std::ptr::null(), |n| n.as_ptr()))
}

/// The backend called `name` (NUL-terminated): `DOKEBI_LOCK_UNKNOWN_BACKEND`
/// if none is, `DOKEBI_LOCK_CLOSED` after close. The backend handle stays
/// usable after the provider is freed (its calls then fail with `CLOSED`).
///
/// # Safety
/// `provider` is NULL or a live provider handle; `name` is NULL or a
/// NUL-terminated string; `out_backend` is writable; `out_error` is NULL or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn dokebi_lock_provider_backend(
    provider: *const dokebi_lock_provider,
    name: *const c_char,
    out_backend: *mut *mut dokebi_lock_backend,
    out_error: *mut *mut dokebi_lock_error,
) -> dokebi_lock_status {
    call(out_error, || {
        // SAFETY: the caller promised `provider` is NULL or a live provider handle (# Safety).
        let provider = unsafe { handle(provider, "provider") }?;
        fork::check(provider.born)?;
        let out = Out::new(out_backend, "out_backend")?;
        // SAFETY: the caller promised `name` is NULL or a NUL-terminated string (# Safety); this only
        // rejects NULL, its first byte is readable.
        unsafe { handle(name, "name") }?;
        // SAFETY: `name` is non-NULL (checked just above) and the caller promised it is NUL-terminated.
        let name = unsafe { CStr::from_ptr(name) }.to_str().map_err(|_| {
            LockError::new(ErrorCode::UnknownBackend, "no backend of that name is configured (the name is not valid UTF-8)")
        })?;
        let backend = provider.provider.backend(name)?;
        out.write(give(dokebi_lock_backend::new(backend, provider.completions.clone(), provider.born)));
        Ok(())
    })
}

/// Closes the provider, as the core's `close()`: waiters are rejected with
/// `DOKEBI_LOCK_CLOSED`, held leases are released (redis: within
/// `shutdownTimeoutMs`, failures logged, never returned) or become invalid
/// (local), and every later call fails with `CLOSED`. Returns once every
/// completion callback of this provider has returned (except when called
/// from inside one of them: then the others run after it returns; and when
/// two providers' callbacks close each other's providers at once: one of
/// them does not wait). Idempotent. In a child forked after the provider
/// was opened: `CLOSED`, and nothing of the parent's is released. From a
/// telemetry callback on the store drivers' thread (which it must not do):
/// `INVALID_ARGUMENT`, not a hang.
///
/// # Safety
/// `provider` is NULL or a live provider handle.
#[no_mangle]
pub unsafe extern "C" fn dokebi_lock_provider_close(provider: *mut dokebi_lock_provider) -> dokebi_lock_status {
    call(std::ptr::null_mut(), || {
        // SAFETY: the caller promised `provider` is NULL or a live provider handle (# Safety).
        let provider = unsafe { handle(provider, "provider") }?;
        fork::check(provider.born)?;
        // Closing waits for the drivers' thread, on which this would run.
        refuse_on_driver_thread()?;
        provider.close();
        Ok(())
    })
}

/// Closes the provider (as `dokebi_lock_provider_close`) and frees it. Once
/// it returns, no telemetry callback of the provider runs any more (it
/// waits for those running on other threads), though backend and lease
/// handles taken from it live on. NULL is accepted. In a child forked after
/// the provider was opened, the handle is left as it is (leaked): closing
/// it would release the parent's leases.
///
/// # Safety
/// `provider` is NULL or a live provider handle that no other thread uses any
/// more and that is not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn dokebi_lock_provider_free(provider: *mut dokebi_lock_provider) {
    boundary(|| {
        if !provider.is_null() {
            // SAFETY: the handle came from Box::into_raw in `open`.
            let provider = unsafe { Box::from_raw(provider) };
            if fork::inherited(provider.born) {
                std::mem::forget(provider);
                return;
            }
            provider.close();
            if let Some(callback) = &provider.telemetry {
                callback.silence();
            }
        }
    })
}

impl dokebi_lock_provider {
    fn close(&self) {
        block_on(self.provider.close());
        self.completions.wait_idle();
    }
}

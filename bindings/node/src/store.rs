//! The store drivers (redis, postgres, mysql): the core's `Provider`, opened with the
//! backends of store drivers only, behind promises. Nothing here knows which
//! store a backend uses: the core's `Backend` and `Lease` do.
//!
//! The core runs the operations started here on the JS thread, with this
//! thread as its host ([`crate::executor`] polls them and settles their
//! promises); its own runtime (started only when such a backend exists)
//! keeps timers, notifications and renewals. A pending promise keeps Node alive only
//! while its operation is in flight; the log wake-up is a weak threadsafe
//! function, and so is the telemetry forwarder, so nothing is left to keep
//! the process alive after `close()`.
//!
//! Results come back as `lease | boolean | undefined` or an `ErrorInfo`
//! object, which the JS layer turns into a `LockError`.

use std::rc::Rc;
use std::sync::{Arc, Mutex};

use dokebi_lock::log::{Level, LogRecord, Logger};
use dokebi_lock::options::BackendOptions;
use dokebi_lock::{AbortController, Backend, ErrorCode, Hooks, LockError, Options, Provider};
use napi::bindgen_prelude::{External, Unknown, Utf16String};
use napi::threadsafe_function::{ThreadsafeFunction, ThreadsafeFunctionCallMode};
use napi::{Env, Status};
use napi_derive::napi;

use crate::error::stash;
use crate::executor::{spawn, Promise};
use crate::force_release::ForcedReleaseInfo;
use crate::guard::{promise, sentinel, Finalized};
use crate::inspect::InspectionInfo;
use crate::keep_alive::NativeKeepAlive;
use crate::kind_request::{acquire_keys, held_by, kind_request};
use crate::lease::{id_of, Fence, Leases};
use crate::status::StatusInfo;
use crate::telemetry::{sink, TelemetryForwarder};

/// One driver log record, as the JS logger receives it; never a key.
#[napi(object)]
pub struct LogEntry {
    pub level: String,
    pub backend: String,
    pub code: String,
    pub message: String,
}

/// Tells JS that log records wait in [`StoreProvider::take_logs`]; weak, so
/// it never keeps Node alive.
pub type LogWake = ThreadsafeFunction<(), (), (), Status, false, true>;

/// Driver log records not yet handed to JS. They wait here, not in the
/// wake-up call: `close()` hands over what is left when it resolves, so a
/// process that exits right after close loses none (a call still queued in
/// the threadsafe function would be dropped at exit).
#[derive(Default)]
struct LogQueue(Mutex<Vec<LogEntry>>);

impl LogQueue {
    fn push(&self, entry: LogEntry) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).push(entry);
    }

    fn take(&self) -> Vec<LogEntry> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// Opens the store drivers' backends of `options` (`null` on failure, see
/// `takeError`). Warnings and errors of the drivers (cleanup failures at
/// close) wait in [`StoreProvider::take_logs`], announced by `log_wake`;
/// telemetry events go to `telemetry`. With `on_js_thread` (the JS layer's
/// word that the event loop is Node's libuv) commands run on this thread where
/// it can watch their sockets; else on the driver's thread.
pub fn open(env: &Env, options: &Options, on_js_thread: bool, log_wake: LogWake, telemetry: TelemetryForwarder) -> Option<StoreProvider> {
    let host = match if on_js_thread { crate::executor::host(env) } else { Ok(None) } {
        Ok(host) => host,
        Err(error) => {
            stash(LockError::new(ErrorCode::ProviderFailed, format!("could not attach to the JS thread's event loop: {error}")));
            return None;
        }
    };
    let mut stores_only = options.clone();
    stores_only.backends.retain(|_, backend| is_store(backend));
    let logs = Arc::new(LogQueue::default());
    let queue = logs.clone();
    let logger: Logger = Arc::new(move |record: &LogRecord| {
        // Debug records (LOCK_BACKEND_READY) are logged by the JS layer for
        // every driver alike.
        if record.level >= Level::Warn {
            queue.push(LogEntry {
                level: record.level.as_str().to_owned(),
                backend: record.backend.clone(),
                code: record.code.to_owned(),
                message: record.message.clone(),
            });
            log_wake.call((), ThreadsafeFunctionCallMode::NonBlocking);
        }
    });
    // Node's way to add authorities for the whole process: its TLS reads
    // the variable at startup, and so do our TLS links.
    let extra_authorities = std::env::var_os("NODE_EXTRA_CA_CERTS").filter(|file| !file.is_empty()).map(std::path::PathBuf::from);
    Provider::open_with(stores_only, Hooks { logger, telemetry: Some(sink(telemetry)), host, extra_authorities })
        .map(|provider| StoreProvider { provider: Finalized::new(Arc::new(provider)), logs })
        .map_err(stash)
        .ok()
}

/// Whether `backend` is of a store driver: the core's lock layer over a
/// store shared by processes (`src/store/`), whose backends this module opens
/// (local and file backends have their own modules; app drivers live in JS).
fn is_store(backend: &BackendOptions) -> bool {
    match backend {
        BackendOptions::Redis(_) | BackendOptions::Postgres(_) | BackendOptions::Mysql(_) => true,
        BackendOptions::Local(_) | BackendOptions::File(_) | BackendOptions::Policy(_) | BackendOptions::App { .. } => false,
    }
}

/// The store drivers' backends of one `LockProvider`.
#[napi]
pub struct StoreProvider {
    provider: Finalized<Arc<Provider>>,
    logs: Arc<LogQueue>,
}

#[napi]
impl StoreProvider {
    /// The backend `name`; `null` on failure.
    #[napi(catch_unwind)]
    pub fn backend(&self, name: String) -> Option<NativeStoreBackend> {
        sentinel(|| match self.provider.backend(&name) {
            Ok(backend) => Some(NativeStoreBackend::new(backend)),
            Err(error) => {
                stash(error);
                None
            }
        })
    }

    /// The driver's log records since the last call, oldest first.
    #[napi(catch_unwind)]
    pub fn take_logs(&self) -> Vec<LogEntry> {
        self.logs.take()
    }

    /// Closes every backend: waiters `CLOSED`, held leases released
    /// within `shutdownTimeoutMs` (failures logged). Resolves to the log
    /// records not yet taken, those of the close among them.
    #[napi(ts_return_type = "Promise<LogEntry[] | ErrorInfo>", catch_unwind)]
    pub fn close(&self, env: &Env) -> napi::Result<Promise> {
        let (provider, logs) = (self.provider.clone(), self.logs.clone());
        promise(env, || {
            spawn(
                env,
                async move {
                    provider.close().await;
                    Ok(())
                },
                move |()| logs.take(),
            )
        })
    }
}

/// One backend of a store driver: its settings and the calls made less
/// often than once per lease (the calls of every lease are
/// [`crate::store_calls`]).
#[napi]
pub struct NativeStoreBackend {
    backend: Finalized<Backend>,
    wait_timeout_ms: u32,
    max_key_bytes: u32,
    /// `leaseMs / 3`: how often a `withLock` section's lease is renewed.
    auto_renew_every: std::time::Duration,
    /// The leases held, by the ids JS gave them (see [`crate::lease`]).
    leases: Finalized<Rc<Leases>>,
}

impl NativeStoreBackend {
    fn new(backend: Backend) -> NativeStoreBackend {
        let options = backend.store_options().expect("this provider holds the backends of store drivers only");
        let (wait_timeout_ms, max_key_bytes) = (options.wait_timeout_ms, options.max_key_bytes);
        let auto_renew_every = backend.auto_renew_every().expect("a store driver's leases expire");
        let leases = Finalized::new(Rc::default());
        NativeStoreBackend { backend: Finalized::new(backend), wait_timeout_ms, max_key_bytes, auto_renew_every, leases }
    }
}

#[napi]
impl NativeStoreBackend {
    /// The backend's default wait, in ms.
    #[napi(getter, catch_unwind)]
    pub fn wait_timeout_ms(&self) -> u32 {
        self.wait_timeout_ms
    }

    /// `{ acquire(key, waitTimeoutMs, id, abort?), release(id), drop(id) }`:
    /// see [`crate::store_calls`].
    #[napi(catch_unwind)]
    pub fn calls(&self, env: &Env) -> napi::Result<Unknown<'_>> {
        let (backend, leases) = (self.backend.clone(), Rc::clone(&self.leases));
        // SAFETY: `env` is this call's, on its JS thread.
        let object = unsafe { crate::store_calls::object(env.raw(), backend, self.max_key_bytes, leases) }?;
        // SAFETY: as above; `object` was just created in this env.
        Ok(unsafe { Unknown::from_raw_unchecked(env.raw(), object) })
    }

    /// What the backend is doing now, as counts.
    #[napi(catch_unwind)]
    pub fn status(&self) -> StatusInfo {
        self.backend.status().into()
    }

    /// What the store holds of `key` (see `Backend::inspect`).
    #[napi(ts_return_type = "Promise<InspectionInfo | ErrorInfo>", catch_unwind)]
    pub fn inspect(&self, env: &Env, key: Utf16String) -> napi::Result<Promise> {
        let (backend, key) = (self.backend.clone(), dokebi_lock::key::from_utf16(&key, self.max_key_bytes as usize));
        promise(env, || spawn(env, async move { backend.inspect(&key?).await }, InspectionInfo::from))
    }

    /// Removes every holder of `key` and raises its fence (see
    /// `Backend::force_release`).
    #[napi(ts_return_type = "Promise<ForcedReleaseInfo | ErrorInfo>", catch_unwind)]
    pub fn force_release(&self, env: &Env, key: Utf16String) -> napi::Result<Promise> {
        let (backend, key) = (self.backend.clone(), dokebi_lock::key::from_utf16(&key, self.max_key_bytes as usize));
        promise(env, || spawn(env, async move { backend.force_release(&key?).await }, ForcedReleaseInfo::from))
    }

    /// Starts renewing lease `id` every `leaseMs / 3` on the drivers'
    /// thread (with `renew` false, only watching it run out), until the
    /// returned handle is stopped; `null` once the lease was released.
    #[napi(catch_unwind)]
    pub fn keep_alive(&self, id: f64, renew: bool) -> napi::Result<Option<NativeKeepAlive>> {
        let Some(lease) = self.leases.get(id_of(id)?) else { return Ok(None) };
        let every = renew.then_some(self.auto_renew_every);
        Ok(Some(NativeKeepAlive::new(|lost| lease.keep_alive(every, lost).expect("a store driver's lease expires"))))
    }

    /// The conservative local validity estimate of lease `id`: false once
    /// released.
    #[napi(catch_unwind)]
    pub fn lease_valid(&self, id: f64) -> napi::Result<bool> {
        Ok(self.leases.get(id_of(id)?).is_some_and(|lease| lease.is_valid()))
    }

    /// Time left of lease `id` by that estimate, in ms; 0 once invalid.
    #[napi(catch_unwind)]
    pub fn lease_remaining_ms(&self, id: f64) -> napi::Result<f64> {
        let remaining = self.leases.get(id_of(id)?).map_or(Some(std::time::Duration::ZERO), |lease| lease.remaining());
        Ok(remaining.map_or(f64::INFINITY, |left| left.as_secs_f64() * 1000.0))
    }

    /// Extends lease `id`; resolves `false` when it is no longer ours
    /// (released among other reasons).
    #[napi(ts_return_type = "Promise<boolean | ErrorInfo>", catch_unwind)]
    pub fn lease_renew(&self, env: &Env, id: f64) -> napi::Result<Promise> {
        let lease = self.leases.get(id_of(id)?);
        promise(env, || {
            spawn(
                env,
                async move {
                    match lease {
                        Some(lease) => lease.renew().await,
                        None => Ok(false),
                    }
                },
                |renewed| renewed,
            )
        })
    }

    /// As `acquire`, in a kind beyond a plain lease (checked by the JS layer
    /// and again by the core): shared, or `weight` units of a key counted
    /// to `limit`; of every key of `keys` as one lease when `many`; labelled
    /// `holder` when given (else the provider's). The lease is kept as
    /// `id`; the promise carries the fence of each key.
    #[napi(ts_return_type = "Promise<Array<number | string> | ErrorInfo>", catch_unwind)]
    #[allow(clippy::too_many_arguments)]
    pub fn acquire_kind(
        &self,
        env: &Env,
        keys: Vec<Utf16String>,
        many: bool,
        shared: bool,
        limit: u32,
        weight: u32,
        wait_timeout_ms: u32,
        id: f64,
        abort: Option<&External<AbortController>>,
        holder: Option<Utf16String>,
    ) -> napi::Result<Promise> {
        let id = id_of(id)?;
        promise(env, || {
            let (backend, leases) = (self.backend.clone(), Rc::clone(&self.leases));
            let request = kind_request(&keys, self.max_key_bytes as usize, shared, limit, weight, wait_timeout_ms, abort);
            let (keys, options) = held_by(request, holder);
            spawn(env, acquire_keys(backend, keys, many, options), move |lease| -> Vec<Fence> { leases.grant_keys(id, lease) })
        })
    }
}

/// A fresh abort handle: the core's abort controller for one acquire,
/// driven by a JS `AbortSignal` (see `abort`).
#[napi(catch_unwind)]
pub fn new_abort() -> External<AbortController> {
    External::new(AbortController::new())
}

/// Ends the acquire that carries `handle` with `ABORTED` (if it is still
/// waiting).
#[napi(catch_unwind)]
pub fn abort(handle: &External<AbortController>) {
    handle.abort();
}

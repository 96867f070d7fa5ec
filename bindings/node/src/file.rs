//! The file driver: the core's file backends behind promises.
//!
//! An acquire is the core's future, polled on the JS thread by
//! [`crate::executor`] (an uncontended one settles before the call
//! returns); a waiting one is woken by the driver's wake-up thread through
//! the executor's threadsafe function, and takes no libuv pool thread. A
//! release is synchronous: closing a lock file does not block.
//!
//! Results come back as a lease handle or an `ErrorInfo` object, which the
//! JS layer turns into a `LockError`.

use dokebi_lock::options::BackendOptions;
use dokebi_lock::{AbortController, Backend, ErrorCode, FileBackend, FileLease, LockError, Options};
use napi::bindgen_prelude::{External, Utf16String};
use napi::Env;
use napi_derive::napi;

use crate::error::stash;
use crate::executor::{spawn, Promise};
use crate::force_release::ForcedReleaseInfo;
use crate::guard::{promise, sentinel, Finalized};
use crate::inspect::InspectionInfo;
use crate::kind_request::{acquire_keys, held_by, kind_request};
use crate::status::StatusInfo;
use crate::telemetry::{sink, TelemetryForwarder};

/// Opens the file backend `name` of `options` (`null` on failure, see
/// `takeError`): its directory is created and checked now.
pub fn open(options: &Options, name: &str, telemetry: TelemetryForwarder) -> Option<NativeFileBackend> {
    let settings = match options.backends.get(name) {
        Some(BackendOptions::File(settings)) => settings.clone(),
        _ => {
            stash(LockError::new(ErrorCode::UnknownBackend, "no file backend of that name is configured"));
            return None;
        }
    };
    FileBackend::open(name, settings, Some(sink(telemetry)), options.holder.clone())
        .map(|backend| NativeFileBackend { backend: Finalized::new(backend) })
        .map_err(stash)
        .ok()
}

/// One file backend.
#[napi]
pub struct NativeFileBackend {
    backend: Finalized<FileBackend>,
}

#[napi]
impl NativeFileBackend {
    /// The backend's default wait, in ms.
    #[napi(getter, catch_unwind)]
    pub fn wait_timeout_ms(&self) -> u32 {
        self.backend.options().wait_timeout_ms
    }

    /// Acquires `keys` (one key unless `many`) in the kind asked: the
    /// promise of a lease handle or an `ErrorInfo`; `holder` labels the
    /// lease (else the provider's `holder`).
    #[napi(ts_return_type = "Promise<object | ErrorInfo>", catch_unwind)]
    #[allow(clippy::too_many_arguments)]
    pub fn acquire(
        &self,
        env: &Env,
        keys: Vec<Utf16String>,
        many: bool,
        shared: bool,
        limit: u32,
        weight: u32,
        wait_timeout_ms: u32,
        abort: Option<&External<AbortController>>,
        holder: Option<Utf16String>,
    ) -> napi::Result<Promise> {
        promise(env, || {
            let backend = Backend::File((*self.backend).clone());
            let max_key_bytes = self.backend.options().max_key_bytes as usize;
            let (keys, options) = held_by(kind_request(&keys, max_key_bytes, shared, limit, weight, wait_timeout_ms, abort), holder);
            let acquire = async move {
                match acquire_keys(backend, keys, many, options).await? {
                    dokebi_lock::Lease::File(lease) => Ok(lease),
                    _ => unreachable!("a file backend grants file leases"),
                }
            };
            spawn(env, acquire, |lease| External::new(FileLeaseBox(Finalized::new(lease))))
        })
    }

    /// What the directory holds of `key`, by its holders' records (see
    /// `Backend::inspect`).
    #[napi(ts_return_type = "Promise<InspectionInfo | ErrorInfo>", catch_unwind)]
    pub fn inspect(&self, env: &Env, key: Utf16String) -> napi::Result<Promise> {
        let key = dokebi_lock::key::from_utf16(&key, self.backend.options().max_key_bytes as usize);
        let backend = Backend::File((*self.backend).clone());
        promise(env, || spawn(env, async move { backend.inspect(&key?).await }, InspectionInfo::from))
    }

    /// Breaks `key`: the core's refusal (see `Backend::force_release`).
    #[napi(ts_return_type = "Promise<ForcedReleaseInfo | ErrorInfo>", catch_unwind)]
    pub fn force_release(&self, env: &Env, key: Utf16String) -> napi::Result<Promise> {
        let key = dokebi_lock::key::from_utf16(&key, self.backend.options().max_key_bytes as usize);
        let backend = Backend::File((*self.backend).clone());
        promise(env, || spawn(env, async move { backend.force_release(&key?).await }, ForcedReleaseInfo::from))
    }

    /// What the backend is doing now, as counts.
    #[napi(catch_unwind)]
    pub fn status(&self) -> StatusInfo {
        Backend::File((*self.backend).clone()).status().into()
    }

    /// Rejects waiters with `CLOSED` and releases every held lease.
    #[napi(catch_unwind)]
    pub fn close(&self) {
        self.backend.close();
    }
}

/// What a file lease handle holds; its finalizer drops (and so releases)
/// the lease if nobody did.
pub struct FileLeaseBox(Finalized<FileLease>);

/// The fencing token of `lease`, as a decimal string.
#[napi(catch_unwind)]
pub fn file_lease_fence(lease: &External<FileLeaseBox>) -> String {
    lease.0.fence().to_string()
}

/// The fencing token of each key of `lease`, in the order of its keys, as
/// decimal strings.
#[napi(catch_unwind)]
pub fn file_lease_fences(lease: &External<FileLeaseBox>) -> Vec<String> {
    lease.0.fences().into_iter().map(|(_, fence)| fence.to_string()).collect()
}

/// True until released (or the backend closed).
#[napi(catch_unwind)]
pub fn file_lease_valid(lease: &External<FileLeaseBox>) -> bool {
    lease.0.is_valid()
}

/// Releases `lease`: true when released, false when already released;
/// `null` on failure (`LEASE_LOST`: its lock file was removed or replaced
/// while held; see `takeError`).
#[napi(catch_unwind)]
pub fn file_lease_release(lease: &External<FileLeaseBox>) -> Option<bool> {
    sentinel(|| lease.0.release().map_err(stash).ok())
}

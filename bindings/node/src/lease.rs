//! A held lease of a store driver as JS holds it ([`LeaseHandle`]), and the
//! calls on it other than `release` (which is one of [`crate::store_calls`]).

use std::sync::Arc;

use napi::bindgen_prelude::External;
use napi::Env;
use napi_derive::napi;

use crate::executor::{spawn, Promise};
use crate::guard::{promise, Finalized};

/// A held lease of a store driver, as JS holds it: an external whose
/// finalizer drops the lease (which releases it, if nobody did).
pub type LeaseHandle = External<Lease>;

/// What a [`LeaseHandle`] holds.
pub struct Lease(Finalized<Arc<dokebi_lock::Lease>>);

impl Lease {
    /// The lease, for an operation that outlives this call.
    pub fn lease(&self) -> Arc<dokebi_lock::Lease> {
        Arc::clone(&self.0)
    }
}

/// The handle of a lease just granted.
pub fn lease_handle(lease: dokebi_lock::Lease) -> LeaseHandle {
    External::new(Lease(Finalized::new(Arc::new(lease))))
}

/// The fencing token of `lease`, as a decimal string.
#[napi(catch_unwind)]
pub fn lease_fence(lease: &LeaseHandle) -> String {
    lease.0.fence().to_string()
}

/// The fence of each key of `lease`, as decimal strings, in the order of
/// the acquire's keys.
#[napi(catch_unwind)]
pub fn lease_fences(lease: &LeaseHandle) -> Vec<String> {
    lease.0.fences().into_iter().map(|(_, fence)| fence.to_string()).collect()
}

/// The conservative local validity estimate of `lease`.
#[napi(catch_unwind)]
pub fn lease_valid(lease: &LeaseHandle) -> bool {
    lease.0.is_valid()
}

/// Time left by that estimate, in ms; 0 once invalid.
#[napi(catch_unwind)]
pub fn lease_remaining_ms(lease: &LeaseHandle) -> f64 {
    lease.0.remaining().map_or(f64::INFINITY, |left| left.as_secs_f64() * 1000.0)
}

/// Extends `lease`; resolves `false` when it is no longer ours.
#[napi(ts_return_type = "Promise<boolean | ErrorInfo>", catch_unwind)]
pub fn lease_renew(env: &Env, lease: &LeaseHandle) -> napi::Result<Promise> {
    let lease = lease.lease();
    promise(env, || spawn(env, async move { lease.renew().await }, |renewed| renewed))
}

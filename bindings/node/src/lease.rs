//! The held leases of one store backend, as JS holds them: by number, in a
//! table of the backend's ([`Leases`]).
//!
//! Why numbers, not Node-API externals: an external that frees its lease
//! when collected is a weak global handle, which V8 visits and calls back in
//! the young-generation collection in which it dies. With tens of
//! thousands of leases a second, those handles made each scavenge about
//! three times as long as plain JS objects' (BENCHMARKS.md, "where the p99
//! tail goes"), and every pair in flight waited through them. A number is
//! no handle; the JS lease registers itself with a `FinalizationRegistry`
//! instead, whose entry `release()` takes off again, so that a lease
//! dropped unreleased is still given back (`drop(id)`) while a released
//! one leaves nothing for the collector to call.
//!
//! Ids are chosen by the JS backend (counting up from 1, one counter per
//! backend, so an id never comes back) and passed with the acquire: the
//! grant's promise then carries the fence alone, and JS keeps it, readable
//! after the release.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;

use dokebi_lock::Lease;
use napi::bindgen_prelude::Either;
use napi::sys;

use crate::raw::check;

/// A fence as JS receives it: a number while it is exact (below 2^53, so
/// always for a fence from the server's clock in microseconds), else its
/// decimal string.
pub type Fence = Either<f64, String>;

/// The largest integer a double holds exactly, and so the largest id.
const EXACT: u64 = 1 << 53;

fn fence(value: u64) -> Fence {
    if value <= EXACT {
        Either::A(value as f64)
    } else {
        Either::B(value.to_string())
    }
}

/// The held leases of one backend, by id. Dropping the table drops every
/// lease in it, which releases them (the environment's teardown).
#[derive(Default)]
pub struct Leases(RefCell<HashMap<u64, Arc<Lease>>>);

impl Leases {
    /// Keeps `lease`, just granted, as `id`: its fence.
    pub fn grant(&self, id: u64, lease: Lease) -> Fence {
        let value = fence(lease.fence());
        self.keep(id, lease);
        value
    }

    /// As [`Leases::grant`], for a lease of one or several keys: the fence
    /// of each key, in the acquire's order.
    pub fn grant_keys(&self, id: u64, lease: Lease) -> Vec<Fence> {
        let fences = lease.fences().into_iter().map(|(_, value)| fence(value)).collect();
        self.keep(id, lease);
        fences
    }

    fn keep(&self, id: u64, lease: Lease) {
        self.0.borrow_mut().insert(id, Arc::new(lease));
    }

    /// The lease `id`, while it is held (not yet released or dropped).
    pub fn get(&self, id: u64) -> Option<Arc<Lease>> {
        self.0.borrow().get(&id).cloned()
    }

    /// Takes lease `id` out of the table: to release it, or to drop it.
    pub fn take(&self, id: u64) -> Option<Arc<Lease>> {
        self.0.borrow_mut().remove(&id)
    }
}

/// Reads a lease id: a whole number from 1 to 2^53.
///
/// # Safety
/// `env` and `value` are the current callback's.
pub unsafe fn read_id(env: sys::napi_env, value: sys::napi_value) -> napi::Result<u64> {
    let mut id = 0.0;
    // SAFETY: as the caller promised; `id` is a local.
    check(unsafe { sys::napi_get_value_double(env, value, &mut id) })?;
    id_of(id)
}

/// A lease id given as a double: a whole number from 1 to 2^53.
pub fn id_of(id: f64) -> napi::Result<u64> {
    if id >= 1.0 && id <= EXACT as f64 && id.fract() == 0.0 {
        Ok(id as u64)
    } else {
        Err(napi::Error::new(napi::Status::InvalidArg, format!("{id} is no lease id")))
    }
}

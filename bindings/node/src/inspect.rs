//! `backend.inspect(key)`'s answer: the core's [`Inspection`] as the JS
//! layer reads it (fences as decimal strings, as every fence in JS; the JS
//! layer turns each absent field into `null`).

use dokebi_lock::{Inspection, LockMode};
use napi_derive::napi;

/// One key as its store held it.
#[napi(object)]
pub struct InspectionInfo {
    pub backend: String,
    /// `exclusive` or `shared`; absent when free.
    pub mode: Option<String>,
    pub limit: u32,
    pub held: u32,
    pub holders: Vec<HolderInfo>,
    pub waiting: u32,
    pub fence: Option<String>,
}

/// One live holder.
#[napi(object)]
pub struct HolderInfo {
    /// Its provider's `holder` label; absent for a lease of a release
    /// before labels.
    pub label: Option<String>,
    pub units: u32,
    /// Absent on the local driver, whose leases do not expire.
    pub remaining_ms: Option<f64>,
    /// The fence its grant got; absent where the store kept none.
    pub fence: Option<String>,
    /// How long it has held the key (at least); absent where not known.
    pub held_for_ms: Option<f64>,
}

impl From<Inspection> for InspectionInfo {
    fn from(inspection: Inspection) -> Self {
        InspectionInfo {
            backend: inspection.backend,
            mode: inspection.mode.map(|mode| if mode == LockMode::Shared { "shared" } else { "exclusive" }.to_owned()),
            limit: inspection.limit,
            held: inspection.held,
            holders: inspection
                .holders
                .into_iter()
                .map(|holder| HolderInfo {
                    label: holder.label,
                    units: holder.units,
                    remaining_ms: holder.remaining.map(|left| left.as_millis() as f64),
                    fence: holder.fence.map(|fence| fence.to_string()),
                    held_for_ms: holder.held_for.map(|held| held.as_millis() as f64),
                })
                .collect(),
            waiting: inspection.waiting,
            fence: inspection.fence.map(|fence| fence.to_string()),
        }
    }
}

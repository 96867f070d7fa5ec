//! `backend.forceRelease(key)`'s answer: the core's [`ForcedRelease`] as the
//! JS layer reads it (the fence a decimal string, as every fence in JS, or
//! `null`), and back, for a policy's combination of its members' answers
//! (`policy::forced_release_of`).

use dokebi_lock::{ErrorCode, ForcedRelease, LockError};
use napi_derive::napi;

/// What one forced release did. Nullable: the JS layer hands its answers
/// back with `fence: null`.
#[napi(object, use_nullable = true)]
pub struct ForcedReleaseInfo {
    pub backend: String,
    pub removed: u32,
    /// Absent on the local driver, whose fences are the backend's.
    pub fence: Option<String>,
}

impl From<ForcedRelease> for ForcedReleaseInfo {
    fn from(forced: ForcedRelease) -> Self {
        ForcedReleaseInfo { backend: forced.backend, removed: forced.removed, fence: forced.fence.map(|fence| fence.to_string()) }
    }
}

impl TryFrom<ForcedReleaseInfo> for ForcedRelease {
    type Error = LockError;

    /// `INVALID_ARGUMENT` for a fence that is not a decimal u64.
    fn try_from(info: ForcedReleaseInfo) -> Result<Self, LockError> {
        let fence = info.fence.map(|fence| fence.parse::<u64>()).transpose().map_err(|_| {
            LockError::new(
                ErrorCode::InvalidArgument,
                format!("forceRelease: backend {} answered a fence that is not a decimal string", info.backend),
            )
        })?;
        Ok(ForcedRelease { backend: info.backend, removed: info.removed, fence })
    }
}

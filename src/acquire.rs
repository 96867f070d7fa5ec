//! Per-call options of an acquire, shared by every driver.

use std::time::Duration;

use crate::abort::AbortSignal;

/// Per-call options of an acquire.
#[derive(Clone, Default)]
pub struct AcquireOptions {
    /// How long to wait for a held key; `None` takes the backend's
    /// `waitTimeoutMs`, zero tries once and fails with `LOCK_BUSY`.
    pub wait_timeout: Option<Duration>,
    /// Ends the wait with `ABORTED`; does nothing once the lease is granted.
    pub signal: Option<AbortSignal>,
}

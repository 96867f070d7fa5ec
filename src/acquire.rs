//! Per-call options of an acquire, shared by every driver.

use std::time::Duration;

use crate::abort::AbortSignal;
use crate::error::{ErrorCode, LockError};

/// Per-call options of an acquire.
#[derive(Clone, Default)]
pub struct AcquireOptions {
    /// How long to wait for a held key; `None` takes the backend's
    /// `waitTimeoutMs`, zero tries once and fails with `LOCK_BUSY`.
    pub wait_timeout: Option<Duration>,
    /// Ends the wait with `ABORTED`; does nothing once the lease is granted.
    pub signal: Option<AbortSignal>,
}

/// The error of a wait that ended with the key still held after `timeout`.
pub fn wait_timeout_error(timeout: Duration) -> LockError {
    LockError::new(ErrorCode::WaitTimeout, format!("the key stayed held for the whole wait of {} ms", timeout.as_millis()))
}

//! Telemetry: measurements worth observing that are not failures (slow
//! acquires, slow holds, wait timeouts, lost leases, Redis connectivity).
//!
//! It has its own channel, separate from errors and the log: an error
//! reporter expects every record to be a failure, and a contention measurement
//! reported as an error would turn into a bug report on every occurrence.
//! Events carry the backend name, codes and durations, never keys.

use std::sync::Arc;
use std::time::Duration;

use crate::error::ErrorCode;

/// One telemetry event.
#[derive(Debug, Clone, PartialEq)]
pub enum TelemetryEvent {
    /// An acquire waited at least `slowAcquireMs`; `outcome` is `None` when it
    /// got the lease, else the error it ended with.
    SlowAcquire { backend: String, waited: Duration, threshold: Duration, outcome: Option<ErrorCode> },
    /// A lease was held at least `slowHoldMs` when it ended.
    SlowHold { backend: String, held: Duration, threshold: Duration },
    /// An acquire gave up waiting (`WAIT_TIMEOUT`).
    WaitTimeout { backend: String, waited: Duration },
    /// A lease turned out lost (`LEASE_LOST` or `OUTCOME_UNKNOWN`).
    LeaseLost { backend: String, code: ErrorCode },
    /// A Redis connection went up or down.
    Connection { connection: String, up: bool },
}

impl TelemetryEvent {
    /// The channel suffix surfaces publish under (`dokebi-lock:<name>`).
    pub fn name(&self) -> &'static str {
        match self {
            TelemetryEvent::SlowAcquire { .. } => "slow-acquire",
            TelemetryEvent::SlowHold { .. } => "slow-hold",
            TelemetryEvent::WaitTimeout { .. } => "wait-timeout",
            TelemetryEvent::LeaseLost { .. } => "lease-lost",
            TelemetryEvent::Connection { .. } => "connection",
        }
    }
}

/// Receives telemetry; called on whichever thread observed the event.
pub type Telemetry = Arc<dyn Fn(&TelemetryEvent) + Send + Sync>;

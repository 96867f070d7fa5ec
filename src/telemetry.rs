//! Telemetry: measurements worth observing that are not failures (slow
//! acquires, slow holds, wait timeouts, lost leases, Redis connectivity).
//!
//! It has its own channel, separate from errors and the log: an error
//! reporter expects every record to be a failure, and a contention measurement
//! reported as an error would turn into a bug report on every occurrence.
//! Events carry the backend name, codes and durations, never keys.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::error::{ErrorCode, LockError};
use crate::options::Thresholds;

/// One telemetry event.
#[derive(Debug, Clone, PartialEq)]
pub enum TelemetryEvent {
    /// An acquire waited at least `slowAcquireMs`; `outcome` is `None` when it
    /// got the lease, else the error it ended with.
    SlowAcquire {
        /// The backend's name.
        backend: String,
        /// How long the acquire waited.
        waited: Duration,
        /// The `slowAcquireMs` it crossed.
        threshold: Duration,
        /// `None` when granted, else the code it failed with.
        outcome: Option<ErrorCode>,
    },
    /// A lease was held at least `slowHoldMs` when it ended.
    SlowHold {
        /// The backend's name.
        backend: String,
        /// How long the lease was held.
        held: Duration,
        /// The `slowHoldMs` it crossed.
        threshold: Duration,
    },
    /// An acquire gave up waiting (`WAIT_TIMEOUT`).
    WaitTimeout {
        /// The backend's name.
        backend: String,
        /// How long the acquire waited.
        waited: Duration,
    },
    /// A lease turned out lost (`LEASE_LOST` or `OUTCOME_UNKNOWN`).
    LeaseLost {
        /// The backend's name.
        backend: String,
        /// `LEASE_LOST` or `OUTCOME_UNKNOWN`.
        code: ErrorCode,
    },
    /// A Redis connection went up or down.
    Connection {
        /// The connection's name.
        connection: String,
        /// True when it came up, false when it went down.
        up: bool,
    },
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

/// Reports a finished acquire of `backend` that started at `started`: a
/// wait timeout, and a slow acquire whatever its outcome. Shared by drivers.
pub(crate) fn report_wait(
    telemetry: Option<&Telemetry>,
    backend: &str,
    thresholds: &Thresholds,
    started: Instant,
    error: Option<&LockError>,
) {
    let Some(telemetry) = telemetry else { return };
    let waited = started.elapsed();
    if error.is_some_and(|e| e.code() == ErrorCode::WaitTimeout) {
        telemetry(&TelemetryEvent::WaitTimeout { backend: backend.to_owned(), waited });
    }
    if let Some(threshold) = thresholds.slow_acquire_ms.map(|ms| Duration::from_millis(ms.into())) {
        if waited >= threshold {
            telemetry(&TelemetryEvent::SlowAcquire { backend: backend.to_owned(), waited, threshold, outcome: error.map(LockError::code) });
        }
    }
}

/// Reports a slow hold of a lease of `backend` held since `since` (`None`
/// when nobody listens for slow holds). Shared by drivers.
pub(crate) fn report_hold(telemetry: Option<&Telemetry>, backend: &str, thresholds: &Thresholds, since: Option<Instant>) {
    let (Some(since), Some(telemetry), Some(ms)) = (since, telemetry, thresholds.slow_hold_ms) else { return };
    let (held, threshold) = (since.elapsed(), Duration::from_millis(ms.into()));
    if held >= threshold {
        telemetry(&TelemetryEvent::SlowHold { backend: backend.to_owned(), held, threshold });
    }
}

//! Telemetry for C hosts: the events Node gets on `diagnostics_channel`
//! (slow acquire, slow hold, wait timeout, lease lost, connection up/down),
//! counts, durations and codes only, never keys.

use std::ffi::{c_char, c_void, CString};
use std::sync::Arc;

use dokebi_lock::telemetry::{Telemetry, TelemetryEvent};

use super::status::dokebi_lock_status;

/// What happened (`dokebi_lock_event.kind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum dokebi_lock_event_kind {
    /// An acquire waited at least `slowAcquireMs` (`duration_ms`,
    /// `threshold_ms`); `code` is its outcome (`DOKEBI_LOCK_OK` when granted).
    DOKEBI_LOCK_EVENT_SLOW_ACQUIRE = 1,
    /// A lease was held at least `slowHoldMs` when it ended.
    DOKEBI_LOCK_EVENT_SLOW_HOLD = 2,
    /// An acquire gave up waiting after `duration_ms` (`WAIT_TIMEOUT`).
    DOKEBI_LOCK_EVENT_WAIT_TIMEOUT = 3,
    /// A lease turned out lost; `code` is `LEASE_LOST` or `OUTCOME_UNKNOWN`.
    DOKEBI_LOCK_EVENT_LEASE_LOST = 4,
    /// A Redis connection (`connection`) went up or down (`up`).
    DOKEBI_LOCK_EVENT_CONNECTION = 5,
}

/// One telemetry event. The strings are valid during the callback only.
#[repr(C)]
pub struct dokebi_lock_event {
    /// What happened; says which of the fields below are meaningful.
    pub kind: dokebi_lock_event_kind,
    /// The backend's name (NUL-terminated); NULL for a connection event.
    pub backend: *const c_char,
    /// The connection's name (NUL-terminated); NULL but for a connection event.
    pub connection: *const c_char,
    /// How long the acquire waited or the lease was held; 0 otherwise.
    pub duration_ms: u64,
    /// The threshold a slow event crossed; 0 otherwise.
    pub threshold_ms: u64,
    /// The outcome (see the kinds); `DOKEBI_LOCK_OK` otherwise.
    pub code: dokebi_lock_status,
    /// For a connection event: true when it came up.
    pub up: bool,
}

/// Receives telemetry events with the `user_data` given at open.
///
/// Called on the thread that observed the event: the caller's own thread for
/// its acquires and releases, the redis driver's thread for connection
/// changes and leases found lost by renewals; so possibly from several
/// threads at once. It must return soon, must not unwind (no C++ exception,
/// no longjmp), and must not close or free the provider; it may keep nothing
/// of the event past the call.
pub type dokebi_lock_telemetry_fn = Option<unsafe extern "C" fn(event: *const dokebi_lock_event, user_data: *mut c_void)>;

/// The host's callback and its data, callable from any thread.
struct Callback {
    function: unsafe extern "C" fn(*const dokebi_lock_event, *mut c_void),
    user_data: *mut c_void,
}

// SAFETY: `dokebi_lock_provider_open_with_telemetry` documents that the
// callback is called from any thread, also concurrently, with `user_data`:
// opening with a callback is the host's promise that both allow it.
unsafe impl Send for Callback {}
// SAFETY: as above; the callback only reads the two fields.
unsafe impl Sync for Callback {}

/// The core's telemetry hook that calls `function` (none when NULL).
pub(crate) fn hook(function: dokebi_lock_telemetry_fn, user_data: *mut c_void) -> Option<Telemetry> {
    let callback = Callback { function: function?, user_data };
    Some(Arc::new(move |event: &TelemetryEvent| callback.deliver(event)))
}

impl Callback {
    fn deliver(&self, event: &TelemetryEvent) {
        let mut c = dokebi_lock_event {
            kind: dokebi_lock_event_kind::DOKEBI_LOCK_EVENT_CONNECTION,
            backend: std::ptr::null(),
            connection: std::ptr::null(),
            duration_ms: 0,
            threshold_ms: 0,
            code: dokebi_lock_status::DOKEBI_LOCK_OK,
            up: false,
        };
        // Names come from the configuration; one with a NUL byte is reported
        // as an empty name rather than cut short.
        let name = |text: &str| CString::new(text).unwrap_or_default();
        let held_name;
        match event {
            TelemetryEvent::SlowAcquire { backend, waited, threshold, outcome } => {
                held_name = name(backend);
                c.kind = dokebi_lock_event_kind::DOKEBI_LOCK_EVENT_SLOW_ACQUIRE;
                c.backend = held_name.as_ptr();
                c.duration_ms = millis(*waited);
                c.threshold_ms = millis(*threshold);
                c.code = outcome.map_or(dokebi_lock_status::DOKEBI_LOCK_OK, dokebi_lock_status::from);
            }
            TelemetryEvent::SlowHold { backend, held, threshold } => {
                held_name = name(backend);
                c.kind = dokebi_lock_event_kind::DOKEBI_LOCK_EVENT_SLOW_HOLD;
                c.backend = held_name.as_ptr();
                c.duration_ms = millis(*held);
                c.threshold_ms = millis(*threshold);
            }
            TelemetryEvent::WaitTimeout { backend, waited } => {
                held_name = name(backend);
                c.kind = dokebi_lock_event_kind::DOKEBI_LOCK_EVENT_WAIT_TIMEOUT;
                c.backend = held_name.as_ptr();
                c.duration_ms = millis(*waited);
                c.code = dokebi_lock_status::DOKEBI_LOCK_WAIT_TIMEOUT;
            }
            TelemetryEvent::LeaseLost { backend, code } => {
                held_name = name(backend);
                c.kind = dokebi_lock_event_kind::DOKEBI_LOCK_EVENT_LEASE_LOST;
                c.backend = held_name.as_ptr();
                c.code = (*code).into();
            }
            TelemetryEvent::Connection { connection, up } => {
                held_name = name(connection);
                c.connection = held_name.as_ptr();
                c.up = *up;
            }
        }
        // SAFETY: the host gave this function and data for exactly this call
        // (see `dokebi_lock_telemetry_fn`); the event and its strings live
        // until it returns.
        unsafe { (self.function)(&c, self.user_data) };
    }
}

fn millis(duration: std::time::Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

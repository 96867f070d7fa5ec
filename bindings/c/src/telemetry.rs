//! Telemetry for C hosts: the events Node gets on `diagnostics_channel`
//! (slow acquire, slow hold, wait timeout, lease lost, connection up/down,
//! clock behind, policy fallback, skipped and back, forced release),
//! and for hosts that ask, an event per acquire and per hold (the core's
//! trace events, for a host's own tracer); counts, durations and codes
//! only, never keys.

use std::cell::RefCell;
use std::ffi::{c_char, c_void, CStr, CString};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use dokebi_lock::error::{ErrorCode, LockError, Result};
use dokebi_lock::telemetry::{Interest, TelemetryEvent, TelemetrySink, TraceEvent};
use dokebi_lock::LockMode;

use super::kinds::{DOKEBI_LOCK_MODE_EXCLUSIVE, DOKEBI_LOCK_MODE_SHARED};
use super::panic::boundary;
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
    /// A Redis, PostgreSQL or MySQL connection (`connection`) went up or down (`up`).
    DOKEBI_LOCK_EVENT_CONNECTION = 5,
    /// An acquire call ended, after `duration_ms`; `code` is its outcome
    /// (`DOKEBI_LOCK_OK` when granted). Only with `DOKEBI_LOCK_TRACE_ACQUIRE`
    /// (see `dokebi_lock_provider_open_with_trace_events`); the event is a
    /// `dokebi_lock_trace_event` (`dokebi_lock_event_trace`).
    DOKEBI_LOCK_EVENT_ACQUIRE = 6,
    /// A granted lease stopped being held, after `duration_ms`; `code` is
    /// `DOKEBI_LOCK_OK` when released, `LEASE_LOST` or `OUTCOME_UNKNOWN`
    /// when found lost (another error when its release failed otherwise,
    /// `CLOSED` for a local lease whose provider closed). Only with
    /// `DOKEBI_LOCK_TRACE_HOLD`; the event is a `dokebi_lock_trace_event`.
    DOKEBI_LOCK_EVENT_HOLD = 7,
    /// A Redis server of `connection` granted `backend` a fence at least a
    /// second below one granted before: its clock is at least `duration_ms`
    /// behind the latest server time seen (a primary promoted with a clock
    /// behind). `threshold_ms` is the backend's `fenceRetentionMs`: fences
    /// never repeat while the clock is less behind than that; past it they
    /// can. At most one every 10 s per connection; the log says so too
    /// (`REDIS_CLOCK_BEHIND`).
    DOKEBI_LOCK_EVENT_CLOCK_BEHIND = 8,
    /// The policy backend `backend` had an acquire served by its member
    /// `connection` (the field names the member in policy events), not the
    /// rule's preferred one, which could not serve: `code` says why
    /// (`PROVIDER_FAILED`).
    DOKEBI_LOCK_EVENT_POLICY_FALLBACK = 9,
    /// The policy backend `backend` found its member `connection`
    /// unavailable (`code`): acquires pass it over until its cooldown ends.
    DOKEBI_LOCK_EVENT_POLICY_SKIPPED = 10,
    /// The member `connection` of the policy backend `backend`, skipped for
    /// `duration_ms`, answered again: acquires use it again.
    DOKEBI_LOCK_EVENT_POLICY_BACK = 11,
    /// A key of `backend` was force-released
    /// (`dokebi_lock_backend_force_release`); each backend that broke it
    /// reports it (a policy's members, not the policy). The event is a
    /// `dokebi_lock_forced_release_event` (`dokebi_lock_event_forced_release`):
    /// the holders it removed and the fence it raised.
    DOKEBI_LOCK_EVENT_FORCED_RELEASE = 12,
}

/// `dokebi_lock_provider_open_with_trace_events`: an event
/// (`DOKEBI_LOCK_EVENT_ACQUIRE`) per acquire call.
pub const DOKEBI_LOCK_TRACE_ACQUIRE: u32 = 1;
/// `dokebi_lock_provider_open_with_trace_events`: an event
/// (`DOKEBI_LOCK_EVENT_HOLD`) per granted lease, when its hold ends.
pub const DOKEBI_LOCK_TRACE_HOLD: u32 = 2;

/// One telemetry event. The strings are valid during the callback only.
#[repr(C)]
pub struct dokebi_lock_event {
    /// What happened; says which of the fields below are meaningful.
    pub kind: dokebi_lock_event_kind,
    /// The backend's name (NUL-terminated); NULL for a connection event.
    pub backend: *const c_char,
    /// The connection's name (NUL-terminated); NULL but for a connection
    /// event and a clock-behind one. In a policy event: the member backend's
    /// name.
    pub connection: *const c_char,
    /// How long the acquire waited or the lease was held (a clock-behind
    /// event: how far the clock is behind); 0 otherwise.
    pub duration_ms: u64,
    /// The threshold a slow event crossed (a clock-behind event:
    /// `fenceRetentionMs`); 0 otherwise.
    pub threshold_ms: u64,
    /// The outcome (see the kinds); `DOKEBI_LOCK_OK` otherwise.
    pub code: dokebi_lock_status,
    /// For a connection event: true when it came up.
    pub up: bool,
}

/// An acquire or hold event (`DOKEBI_LOCK_EVENT_ACQUIRE`,
/// `DOKEBI_LOCK_EVENT_HOLD`): the event, then what a tracer wants to know.
/// Valid during the callback only.
#[repr(C)]
pub struct dokebi_lock_trace_event {
    /// The event: `kind`, `backend`, `duration_ms` (the wait, or the
    /// hold), `code` (the outcome).
    pub event: dokebi_lock_event,
    /// The backend's driver (`"local"`, `"redis"`, `"postgres"`, `"mysql"`, `"file"` or `"policy"`,
    /// NUL-terminated, static).
    pub driver: *const c_char,
    /// The lease's fence (of its first key, as `dokebi_lock_lease_fence`);
    /// 0 for an acquire that failed.
    pub fence: u64,
    /// Of an acquire: `DOKEBI_LOCK_MODE_EXCLUSIVE` or `_SHARED`, as asked; 0
    /// for a hold.
    pub mode: u32,
    /// Of an acquire: the limit asked for (1 unless counted); 0 for a hold.
    pub limit: u32,
    /// Of an acquire: the weight asked for (1 unless counted); 0 for a hold.
    pub weight: u32,
    /// Of an acquire: how many keys, taken as one lease; 0 for a hold.
    pub key_count: usize,
}

/// A forced-release event (`DOKEBI_LOCK_EVENT_FORCED_RELEASE`): the event
/// (`kind`, `backend`), then what the forced release did. Valid during the
/// callback only.
#[repr(C)]
pub struct dokebi_lock_forced_release_event {
    /// The event: `kind` and `backend`.
    pub event: dokebi_lock_event,
    /// The live holders it removed (0 when the key was free).
    pub removed: u32,
    /// The key's fence counter as raised (redis, postgres, mysql), as
    /// `dokebi_lock_forced_release_fence`; 0 on the local driver, which
    /// raises none.
    pub fence: u64,
}

/// A wait-timeout or slow-acquire event (`DOKEBI_LOCK_EVENT_WAIT_TIMEOUT`,
/// `DOKEBI_LOCK_EVENT_SLOW_ACQUIRE`): the event, then the error's details.
/// Valid during the callback only.
#[repr(C)]
pub struct dokebi_lock_wait_event {
    /// The event: `kind`, `backend`, `duration_ms`, `threshold_ms`, `code`.
    pub event: dokebi_lock_event,
    /// Of a `WAIT_TIMEOUT` or `LOCK_BUSY`: its details as JSON, the holders
    /// of the key that kept the acquire out (as `dokebi_lock_error_details`;
    /// never the key), NUL-terminated; NULL when they could not be read, and
    /// for other outcomes.
    pub details: *const c_char,
}

/// Receives telemetry events with the `user_data` given at open.
///
/// Called on the thread that observed the event: the caller's own thread for
/// its local acquires and for releases, the store drivers' thread for the
/// outcomes of redis, postgres and mysql acquires, connection changes and leases
/// found lost by renewals; so possibly from several threads at once. Kinds
/// may be appended: ignore those you do not know (`DOKEBI_LOCK_EVENT_ACQUIRE`
/// and `_HOLD` come only to hosts that ask for them). It must return soon,
/// must not unwind (no C++ exception, no longjmp), and must not close or
/// free the provider; it may keep nothing of the event past the call. On
/// the store drivers' thread a blocking call on a redis, postgres, mysql or file
/// backend (acquire, renew, release, with_lock) would wait for that thread
/// itself: it fails with `DOKEBI_LOCK_INVALID_ARGUMENT` (a lease freed there
/// is released in the background). Never called once
/// `dokebi_lock_provider_free` has returned.
pub type dokebi_lock_telemetry_fn = Option<unsafe extern "C" fn(event: *const dokebi_lock_event, user_data: *mut c_void)>;

/// The host's callback and its data, callable from any thread, and the
/// trace events it asked for; silenced when its provider is freed (backend
/// and lease handles outlive it, and would still report).
pub(crate) struct Callback {
    function: unsafe extern "C" fn(*const dokebi_lock_event, *mut c_void),
    user_data: *mut c_void,
    interest: Interest,
    calls: Mutex<Calls>,
    /// Signalled when the last running call returns.
    returned: Condvar,
}

/// Whether the callback may still be called, and how many calls run now.
#[derive(Default)]
struct Calls {
    silenced: bool,
    running: usize,
}

thread_local! {
    /// The callbacks running on this thread (a callback that causes an
    /// event of its own, or of another provider, nests them).
    static RUNNING: RefCell<Vec<usize>> = const { RefCell::new(Vec::new()) };
}

// SAFETY: `dokebi_lock_provider_open_with_telemetry` documents that the
// callback is called from any thread, also concurrently, with `user_data`:
// opening with a callback is the host's promise that both allow it.
unsafe impl Send for Callback {}
// SAFETY: as above; the callback only reads the two fields.
unsafe impl Sync for Callback {}

/// The core's telemetry hook that calls `function` (none when NULL), with
/// the trace events of the `DOKEBI_LOCK_TRACE_*` bits of `trace_events`.
pub(crate) fn hook(function: dokebi_lock_telemetry_fn, user_data: *mut c_void, trace_events: u32) -> Result<Option<Arc<Callback>>> {
    if trace_events & !(DOKEBI_LOCK_TRACE_ACQUIRE | DOKEBI_LOCK_TRACE_HOLD) != 0 {
        return Err(LockError::new(
            ErrorCode::InvalidArgument,
            "trace_events has bits other than DOKEBI_LOCK_TRACE_ACQUIRE and DOKEBI_LOCK_TRACE_HOLD",
        ));
    }
    let Some(function) = function else {
        if trace_events != 0 {
            return Err(LockError::new(ErrorCode::InvalidArgument, "trace_events asks for events, but telemetry is NULL"));
        }
        return Ok(None);
    };
    let interest = Interest { acquires: trace_events & DOKEBI_LOCK_TRACE_ACQUIRE != 0, holds: trace_events & DOKEBI_LOCK_TRACE_HOLD != 0 };
    Ok(Some(Arc::new(Callback { function, user_data, interest, calls: Mutex::default(), returned: Condvar::new() })))
}

impl Callback {
    /// Calls the host's function with `event`, unless silenced.
    fn call(&self, event: *const dokebi_lock_event) {
        {
            let mut calls = lock(&self.calls);
            if calls.silenced {
                return;
            }
            calls.running += 1;
        }
        let _running = Running::enter(self);
        // SAFETY: the host gave this function and data for exactly this call
        // (see `dokebi_lock_telemetry_fn`); the event and its strings live
        // until it returns.
        unsafe { (self.function)(event, self.user_data) };
    }

    /// No call starts after this; returns once the calls running on other
    /// threads have returned (those of this thread, a callback freeing its
    /// own provider against the rules, cannot be waited for).
    pub(crate) fn silence(&self) {
        let here = RUNNING.with(|running| running.borrow().iter().filter(|&&at| at == self.address()).count());
        let mut calls = lock(&self.calls);
        calls.silenced = true;
        while calls.running > here {
            calls = self.returned.wait(calls).unwrap_or_else(|e| e.into_inner());
        }
    }

    fn address(&self) -> usize {
        std::ptr::from_ref(self) as usize
    }
}

/// One running call of a callback, counted until dropped (also when the
/// host's function unwinds against the rules).
struct Running<'a>(&'a Callback);

impl<'a> Running<'a> {
    fn enter(callback: &'a Callback) -> Running<'a> {
        RUNNING.with(|running| running.borrow_mut().push(callback.address()));
        Running(callback)
    }
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        RUNNING.with(|running| running.borrow_mut().pop());
        let mut calls = lock(&self.0.calls);
        calls.running -= 1;
        if calls.running == 0 {
            self.0.returned.notify_all();
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Two counters: a panic elsewhere cannot leave them inconsistent.
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

impl TelemetrySink for Callback {
    fn event(&self, event: &TelemetryEvent) {
        self.deliver(event);
    }

    fn interest(&self) -> Interest {
        self.interest
    }

    fn trace(&self, event: &TraceEvent<'_>) {
        self.deliver_trace(event);
    }
}

/// An event of `kind` with nothing else set.
fn blank(kind: dokebi_lock_event_kind) -> dokebi_lock_event {
    dokebi_lock_event {
        kind,
        backend: std::ptr::null(),
        connection: std::ptr::null(),
        duration_ms: 0,
        threshold_ms: 0,
        code: dokebi_lock_status::DOKEBI_LOCK_OK,
        up: false,
    }
}

/// Names come from the configuration; one with a NUL byte is reported as an
/// empty name rather than cut short.
fn name(text: &str) -> CString {
    CString::new(text).unwrap_or_default()
}

impl Callback {
    fn deliver(&self, event: &TelemetryEvent) {
        let mut c = blank(dokebi_lock_event_kind::DOKEBI_LOCK_EVENT_CONNECTION);
        let held_name;
        let held_connection;
        match event {
            TelemetryEvent::SlowAcquire { backend, waited, threshold, outcome, details } => {
                held_name = name(backend);
                c.kind = dokebi_lock_event_kind::DOKEBI_LOCK_EVENT_SLOW_ACQUIRE;
                c.backend = held_name.as_ptr();
                c.duration_ms = millis(*waited);
                c.threshold_ms = millis(*threshold);
                c.code = outcome.map_or(dokebi_lock_status::DOKEBI_LOCK_OK, dokebi_lock_status::from);
                return self.call_waited(c, details.as_ref().map(ToString::to_string));
            }
            TelemetryEvent::SlowHold { backend, held, threshold } => {
                held_name = name(backend);
                c.kind = dokebi_lock_event_kind::DOKEBI_LOCK_EVENT_SLOW_HOLD;
                c.backend = held_name.as_ptr();
                c.duration_ms = millis(*held);
                c.threshold_ms = millis(*threshold);
            }
            TelemetryEvent::WaitTimeout { backend, waited, details } => {
                held_name = name(backend);
                c.kind = dokebi_lock_event_kind::DOKEBI_LOCK_EVENT_WAIT_TIMEOUT;
                c.backend = held_name.as_ptr();
                c.duration_ms = millis(*waited);
                c.code = dokebi_lock_status::DOKEBI_LOCK_WAIT_TIMEOUT;
                return self.call_waited(c, details.as_ref().map(ToString::to_string));
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
            TelemetryEvent::PolicyFallback { backend, served, code, .. } => {
                held_name = name(backend);
                held_connection = name(served);
                c.kind = dokebi_lock_event_kind::DOKEBI_LOCK_EVENT_POLICY_FALLBACK;
                c.backend = held_name.as_ptr();
                c.connection = held_connection.as_ptr();
                c.code = (*code).into();
            }
            TelemetryEvent::PolicySkipped { backend, member, code, .. } => {
                held_name = name(backend);
                held_connection = name(member);
                c.kind = dokebi_lock_event_kind::DOKEBI_LOCK_EVENT_POLICY_SKIPPED;
                c.backend = held_name.as_ptr();
                c.connection = held_connection.as_ptr();
                c.code = (*code).into();
            }
            TelemetryEvent::PolicyBack { backend, member, skipped } => {
                held_name = name(backend);
                held_connection = name(member);
                c.kind = dokebi_lock_event_kind::DOKEBI_LOCK_EVENT_POLICY_BACK;
                c.backend = held_name.as_ptr();
                c.connection = held_connection.as_ptr();
                c.duration_ms = millis(*skipped);
            }
            TelemetryEvent::ClockBehind { backend, connection, behind, fence_retention } => {
                held_name = name(backend);
                held_connection = name(connection);
                c.kind = dokebi_lock_event_kind::DOKEBI_LOCK_EVENT_CLOCK_BEHIND;
                c.backend = held_name.as_ptr();
                c.connection = held_connection.as_ptr();
                c.duration_ms = millis(*behind);
                c.threshold_ms = millis(*fence_retention);
            }
            TelemetryEvent::ForcedRelease { backend, removed, fence } => {
                held_name = name(backend);
                c.kind = dokebi_lock_event_kind::DOKEBI_LOCK_EVENT_FORCED_RELEASE;
                c.backend = held_name.as_ptr();
                let forced = dokebi_lock_forced_release_event { event: c, removed: *removed, fence: fence.unwrap_or(0) };
                // The event is the first field of the `repr(C)` forced-release
                // event, so the pointer is both (see `dokebi_lock_event_forced_release`).
                return self.call(&forced.event);
            }
        }
        self.call(&c);
    }

    /// Delivers `event` as the first field of a wait event with `details`
    /// (see `dokebi_lock_event_details`).
    fn call_waited(&self, event: dokebi_lock_event, details: Option<String>) {
        let details = details.map(|details| name(&details));
        let waited = dokebi_lock_wait_event { event, details: details.as_ref().map_or(std::ptr::null(), |text| text.as_ptr()) };
        self.call(&waited.event);
    }

    fn deliver_trace(&self, event: &TraceEvent<'_>) {
        let status = |outcome: Option<ErrorCode>| outcome.map_or(dokebi_lock_status::DOKEBI_LOCK_OK, dokebi_lock_status::from);
        let (c, backend) = match *event {
            TraceEvent::Acquire { backend, driver, mode, limit, weight, key_count, waited, outcome, fence, .. } => {
                let mut event = blank(dokebi_lock_event_kind::DOKEBI_LOCK_EVENT_ACQUIRE);
                event.duration_ms = millis(waited);
                event.code = status(outcome);
                let mode = match mode {
                    LockMode::Exclusive => DOKEBI_LOCK_MODE_EXCLUSIVE,
                    LockMode::Shared => DOKEBI_LOCK_MODE_SHARED,
                };
                let c = dokebi_lock_trace_event {
                    event,
                    driver: driver_name(driver),
                    fence: fence.unwrap_or(0),
                    mode,
                    limit,
                    weight,
                    key_count,
                };
                (c, backend)
            }
            TraceEvent::Hold { backend, driver, fence, held, outcome, .. } => {
                let mut event = blank(dokebi_lock_event_kind::DOKEBI_LOCK_EVENT_HOLD);
                event.duration_ms = millis(held);
                event.code = status(outcome);
                (dokebi_lock_trace_event { event, driver: driver_name(driver), fence, mode: 0, limit: 0, weight: 0, key_count: 0 }, backend)
            }
            // A kind of event this surface does not know yet is not delivered.
            _ => return,
        };
        let backend = name(backend);
        let c = dokebi_lock_trace_event { event: dokebi_lock_event { backend: backend.as_ptr(), ..c.event }, ..c };
        // The event is the first field of the `repr(C)` trace event, so the
        // pointer is both (see `dokebi_lock_event_trace`).
        self.call(&c.event);
    }
}

/// The driver's name as a static C string (empty for a driver this surface
/// does not know yet).
pub(crate) fn driver_name(driver: &str) -> *const c_char {
    let name: &'static CStr = match driver {
        "local" => c"local",
        "redis" => c"redis",
        "postgres" => c"postgres",
        "mysql" => c"mysql",
        "file" => c"file",
        "policy" => c"policy",
        _ => c"",
    };
    name.as_ptr()
}

/// The acquire or hold event `event` is part of (`DOKEBI_LOCK_EVENT_ACQUIRE`,
/// `DOKEBI_LOCK_EVENT_HOLD`), with the driver, fence and kind; NULL for
/// other kinds and for NULL. Valid as long as `event`, during the callback.
///
/// # Safety
/// `event` is NULL or an event the telemetry callback received, during the
/// callback.
#[no_mangle]
pub unsafe extern "C" fn dokebi_lock_event_trace(event: *const dokebi_lock_event) -> *const dokebi_lock_trace_event {
    boundary(|| {
        // SAFETY: the caller promised `event` is NULL or an event the callback received (# Safety).
        match unsafe { event.as_ref() }.map(|event| event.kind) {
            // An event of these kinds is only ever delivered as the first
            // field of a `repr(C)` trace event (`deliver_trace`), so the
            // pointer to it points to that.
            Some(dokebi_lock_event_kind::DOKEBI_LOCK_EVENT_ACQUIRE | dokebi_lock_event_kind::DOKEBI_LOCK_EVENT_HOLD) => event.cast(),
            _ => std::ptr::null(),
        }
    })
}

/// The details of a wait-timeout or slow-acquire event
/// (`DOKEBI_LOCK_EVENT_WAIT_TIMEOUT`, `DOKEBI_LOCK_EVENT_SLOW_ACQUIRE`)
/// that ended with `WAIT_TIMEOUT` or `LOCK_BUSY`: JSON, the holders of the
/// key that kept the acquire out (`{"holders":[{"label":…,"units":…,
/// "remainingMs":…,"fence":…,"heldForMs":…}],"held":…,"waiting":…}`, see docs/locks.md,
/// "Who holds it"); NULL when they could not be read, for other events and
/// for NULL. Valid as long as `event`, during the callback.
///
/// # Safety
/// `event` is NULL or an event the telemetry callback received, during the
/// callback.
#[no_mangle]
pub unsafe extern "C" fn dokebi_lock_event_details(event: *const dokebi_lock_event) -> *const c_char {
    boundary(|| {
        // SAFETY: the caller promised `event` is NULL or an event the callback received (# Safety).
        match unsafe { event.as_ref() }.map(|event| event.kind) {
            Some(dokebi_lock_event_kind::DOKEBI_LOCK_EVENT_WAIT_TIMEOUT | dokebi_lock_event_kind::DOKEBI_LOCK_EVENT_SLOW_ACQUIRE) => {
                // Events of these kinds are only ever delivered as the first
                // field of a `repr(C)` wait event (`call_waited`), so the
                // pointer to one points to that.
                let waited: *const dokebi_lock_wait_event = event.cast();
                // SAFETY: as above; the wait event lives during the callback.
                unsafe { (*waited).details }
            }
            _ => std::ptr::null(),
        }
    })
}

/// The forced-release event `event` is part of
/// (`DOKEBI_LOCK_EVENT_FORCED_RELEASE`), with the holders removed and the
/// fence raised; NULL for other kinds and for NULL. Valid as long as
/// `event`, during the callback.
///
/// # Safety
/// `event` is NULL or an event the telemetry callback received, during the
/// callback.
#[no_mangle]
pub unsafe extern "C" fn dokebi_lock_event_forced_release(event: *const dokebi_lock_event) -> *const dokebi_lock_forced_release_event {
    boundary(|| {
        // SAFETY: the caller promised `event` is NULL or an event the callback received (# Safety).
        match unsafe { event.as_ref() }.map(|event| event.kind) {
            // An event of this kind is only ever delivered as the first
            // field of a `repr(C)` forced-release event (`deliver`), so the
            // pointer to it points to that.
            Some(dokebi_lock_event_kind::DOKEBI_LOCK_EVENT_FORCED_RELEASE) => event.cast(),
            _ => std::ptr::null(),
        }
    })
}

fn millis(duration: std::time::Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

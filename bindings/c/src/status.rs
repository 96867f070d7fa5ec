//! The status every acting C function returns.

use std::ffi::c_char;

use dokebi_lock::error::ErrorCode;

/// The outcome of a call: `DOKEBI_LOCK_OK` (0) or the code of the error.
///
/// The values are fixed forever and equal to the core's error codes, so a
/// status can be stored, logged and compared across library versions; new
/// values are only ever appended. `DOKEBI_LOCK_PANIC` is the one status of
/// the C surface alone: an internal bug was caught at the boundary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum dokebi_lock_status {
    /// The call succeeded.
    DOKEBI_LOCK_OK = 0,
    /// The configuration is invalid; the error lists each problem as an issue.
    DOKEBI_LOCK_INVALID_OPTIONS = 1,
    /// The key is empty, not UTF-8, or longer than `maxKeyBytes`.
    DOKEBI_LOCK_INVALID_KEY = 2,
    /// No backend of that name is configured.
    DOKEBI_LOCK_UNKNOWN_BACKEND = 3,
    /// A backend names a Redis, PostgreSQL or MySQL connection that is not defined.
    DOKEBI_LOCK_UNKNOWN_CONNECTION = 4,
    /// The provider was closed.
    DOKEBI_LOCK_CLOSED = 5,
    /// The key is held and the call was not to wait (a wait of 0).
    DOKEBI_LOCK_LOCK_BUSY = 6,
    /// Too many leases are held at once (`maxKeys`, `maxLeases`).
    DOKEBI_LOCK_KEY_LIMIT = 7,
    /// Too many acquires are waiting (`maxWaiters`).
    DOKEBI_LOCK_QUEUE_FULL = 8,
    /// The acquire was cancelled; nothing is held.
    DOKEBI_LOCK_ABORTED = 9,
    /// The key stayed held for the whole wait.
    DOKEBI_LOCK_WAIT_TIMEOUT = 10,
    /// A driver package is not installed (Node surface).
    DOKEBI_LOCK_DRIVER_NOT_INSTALLED = 11,
    /// A driver factory returned an invalid driver (Node surface).
    DOKEBI_LOCK_DRIVER_INVALID = 12,
    /// Redis, PostgreSQL or MySQL could not be reached or refused the command, or
    /// a file backend's lock file could not be used or trusted.
    DOKEBI_LOCK_PROVIDER_FAILED = 13,
    /// Redis, PostgreSQL or MySQL did not answer in time: whether the command took
    /// effect is unknown.
    DOKEBI_LOCK_OUTCOME_UNKNOWN = 14,
    /// The lease expired or was taken over before it was released.
    DOKEBI_LOCK_LEASE_LOST = 15,
    /// A lease could not be released during shutdown.
    DOKEBI_LOCK_CLEANUP_FAILED = 16,
    /// Shutdown did not release every lease within `shutdownTimeoutMs`.
    DOKEBI_LOCK_CLEANUP_TIMEOUT = 17,
    /// A backend names a driver that does not exist.
    DOKEBI_LOCK_UNKNOWN_DRIVER = 18,
    /// Two drivers share a name, or one redefines `local`, `redis` or `file` (Node surface).
    DOKEBI_LOCK_DRIVER_CONFLICT = 19,
    /// The entry module exports no valid extension (Node surface).
    DOKEBI_LOCK_INVALID_ENTRY = 20,
    /// An extension subclass is malformed (Node surface).
    DOKEBI_LOCK_INVALID_EXTENSION = 21,
    /// The plugin options are invalid (Node surface).
    DOKEBI_LOCK_INVALID_PLUGIN_OPTIONS = 22,
    /// An argument is invalid: a NULL handle or out-parameter, a bad timeout.
    DOKEBI_LOCK_INVALID_ARGUMENT = 23,
    /// The backend's driver cannot grant the kind of lease asked for (shared,
    /// counted, several keys).
    DOKEBI_LOCK_UNSUPPORTED_KIND = 24,
    /// No backend a policy's rule allows for the key could serve it (each
    /// unreachable, refusing or failing, or passed over in its cooldown).
    DOKEBI_LOCK_NO_ELIGIBLE_BACKEND = 25,
    /// A Rust panic was caught at the C boundary: a bug in dokebi-lock.
    DOKEBI_LOCK_PANIC = 1000,
}

use dokebi_lock_status::*;

/// `ERRORS` and the status names, from one list of every status but
/// `DOKEBI_LOCK_OK` and `DOKEBI_LOCK_PANIC`, in `ErrorCode::ALL` order (the
/// enum above stays literal for cbindgen).
macro_rules! error_statuses {
    ($($code:ident),*) => {
        /// Every error status, in `ErrorCode::ALL` order.
        const ERRORS: [dokebi_lock_status; ErrorCode::ALL.len()] = [$($code),*];

        impl dokebi_lock_status {
            /// The stable name, NUL-terminated: `"OK"`, `"WAIT_TIMEOUT"`, `"PANIC"`.
            pub(crate) fn name(self) -> &'static [u8] {
                let name: &'static [u8] = match self {
                    DOKEBI_LOCK_OK => b"OK\0",
                    DOKEBI_LOCK_PANIC => b"PANIC\0",
                    $($code => concat!(stringify!($code), "\0").as_bytes(),)*
                };
                // Every generated name starts with "DOKEBI_LOCK_"; the stable name is the rest.
                name.strip_prefix(b"DOKEBI_LOCK_").unwrap_or(name)
            }
        }
    };
}

error_statuses!(
    DOKEBI_LOCK_INVALID_OPTIONS,
    DOKEBI_LOCK_INVALID_KEY,
    DOKEBI_LOCK_UNKNOWN_BACKEND,
    DOKEBI_LOCK_UNKNOWN_CONNECTION,
    DOKEBI_LOCK_CLOSED,
    DOKEBI_LOCK_LOCK_BUSY,
    DOKEBI_LOCK_KEY_LIMIT,
    DOKEBI_LOCK_QUEUE_FULL,
    DOKEBI_LOCK_ABORTED,
    DOKEBI_LOCK_WAIT_TIMEOUT,
    DOKEBI_LOCK_DRIVER_NOT_INSTALLED,
    DOKEBI_LOCK_DRIVER_INVALID,
    DOKEBI_LOCK_PROVIDER_FAILED,
    DOKEBI_LOCK_OUTCOME_UNKNOWN,
    DOKEBI_LOCK_LEASE_LOST,
    DOKEBI_LOCK_CLEANUP_FAILED,
    DOKEBI_LOCK_CLEANUP_TIMEOUT,
    DOKEBI_LOCK_UNKNOWN_DRIVER,
    DOKEBI_LOCK_DRIVER_CONFLICT,
    DOKEBI_LOCK_INVALID_ENTRY,
    DOKEBI_LOCK_INVALID_EXTENSION,
    DOKEBI_LOCK_INVALID_PLUGIN_OPTIONS,
    DOKEBI_LOCK_INVALID_ARGUMENT,
    DOKEBI_LOCK_UNSUPPORTED_KIND,
    DOKEBI_LOCK_NO_ELIGIBLE_BACKEND
);

impl From<ErrorCode> for dokebi_lock_status {
    fn from(code: ErrorCode) -> Self {
        // The values are equal by construction (checked by the test below).
        ERRORS[code as usize - 1]
    }
}

/// The stable name of a status as a static NUL-terminated string (`"OK"`,
/// `"LOCK_BUSY"`, ...), or `"UNKNOWN"` for a value this library does not
/// define. Never NULL; the string is never freed.
#[no_mangle]
pub extern "C" fn dokebi_lock_status_name(status: u32) -> *const c_char {
    super::panic::boundary(|| {
        let name: &'static [u8] = match status {
            0 => DOKEBI_LOCK_OK.name(),
            1000 => DOKEBI_LOCK_PANIC.name(),
            n => ERRORS.get((n as usize).wrapping_sub(1)).map_or(b"UNKNOWN\0", |s| s.name()),
        };
        name.as_ptr().cast()
    })
}

#[cfg(test)]
mod tests {
    use std::ffi::CStr;

    use super::*;

    #[test]
    fn every_error_status_has_the_value_and_name_of_its_core_code() {
        for code in ErrorCode::ALL {
            let status = dokebi_lock_status::from(code);
            assert_eq!(status as u32, code as u32);
            let name = CStr::from_bytes_with_nul(status.name()).unwrap();
            assert_eq!(name.to_str().unwrap(), code.as_str());
        }
    }

    #[test]
    fn status_names_cover_ok_panic_and_unknown_values() {
        // SAFETY: `dokebi_lock_status_name` never returns NULL; it returns a static NUL-terminated string.
        let name = |n| unsafe { CStr::from_ptr(dokebi_lock_status_name(n)) }.to_str().unwrap();
        assert_eq!(name(0), "OK");
        assert_eq!(name(10), "WAIT_TIMEOUT");
        assert_eq!(name(1000), "PANIC");
        assert_eq!(name(24), "UNSUPPORTED_KIND");
        assert_eq!(name(25), "NO_ELIGIBLE_BACKEND");
        assert_eq!(name(26), "UNKNOWN");
        assert_eq!(name(u32::MAX), "UNKNOWN");
    }
}

//! The one error type of the library.
//!
//! Every failure any surface reports is a [`LockError`]: a stable [`ErrorCode`]
//! (its string form is what Node sees as `error.code` and what C sees through
//! `dokebi_lock_error_code_name`), a human message, a `fix` sentence, optional
//! structured `details` and an optional `cause`. Surfaces map this type once and
//! never invent codes of their own.
//!
//! Messages never contain a lock key: keys may carry user data (e-mail
//! addresses, order numbers) and errors end up in logs.

use std::fmt;
use std::sync::Arc;

/// Declares [`ErrorCode`] from one table: variant, ABI value, string form
/// and fix sentence. Everything else about a code (`ALL`, `as_str`, `fix`)
/// is derived from it; the C enum in `bindings/c` stays literal for cbindgen
/// and a test there checks it against `ALL`.
macro_rules! error_codes {
    ($( $(#[$doc:meta])* $variant:ident = $value:literal, $name:literal, $fix:literal; )*) => {
        /// The stable code of a [`LockError`].
        ///
        /// The numeric values are part of the C ABI (`DOKEBI_LOCK_<CODE>`); new codes
        /// are only ever appended.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[repr(u32)]
        pub enum ErrorCode {
            $( $(#[$doc])* $variant = $value, )*
        }

        impl ErrorCode {
            /// Every code, in ABI order.
            pub const ALL: [ErrorCode; [$($value),*].len()] = [$(ErrorCode::$variant),*];

            /// The stable string form, e.g. `"WAIT_TIMEOUT"`.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $( ErrorCode::$variant => $name, )*
                }
            }

            /// One sentence telling the user what to do about this code.
            pub const fn fix(self) -> &'static str {
                match self {
                    $( ErrorCode::$variant => $fix, )*
                }
            }
        }
    };
}

error_codes! {
    /// The configuration is invalid; `details.issues` lists each problem.
    InvalidOptions = 1, "INVALID_OPTIONS",
        "Correct the options listed in details.issues; each entry names the path and the problem.";
    /// The key is empty, malformed, or longer than `maxKeyBytes`.
    InvalidKey = 2, "INVALID_KEY",
        "Pass a non-empty, well-formed string key whose UTF-8 length is at most maxKeyBytes.";
    /// No backend of that name is configured.
    UnknownBackend = 3, "UNKNOWN_BACKEND",
        "Use one of the names configured under dokebi-lock.backends (provider.names() lists them).";
    /// A backend names a Redis or PostgreSQL connection that is not defined.
    UnknownConnection = 4, "UNKNOWN_CONNECTION",
        "Define the connection under dokebi-redis.connections (redis backends) or dokebi-postgres.connections (postgres backends), or point the backend at an existing one.";
    /// The provider was closed.
    Closed = 5, "CLOSED",
        "The lock provider was closed; open a new provider or stop calling it during shutdown.";
    /// The key is held and the acquire was not to wait (`waitTimeoutMs` 0).
    LockBusy = 6, "LOCK_BUSY",
        "The key is held and waitTimeoutMs was 0; retry later or wait with a positive waitTimeoutMs.";
    /// Too many leases are held at once (`maxKeys`, `maxLeases`).
    KeyLimit = 7, "KEY_LIMIT",
        "Too many leases are held at once; release leases sooner or raise maxKeys (local, file) or maxLeases (redis, postgres).";
    /// Too many acquires are waiting (`maxWaiters`).
    QueueFull = 8, "QUEUE_FULL",
        "Too many acquires are waiting; shed load, retry later, or raise maxWaiters.";
    /// The caller's signal aborted the acquire; nothing is held.
    Aborted = 9, "ABORTED",
        "The caller's signal aborted the acquire; nothing is held.";
    /// The key stayed held for the whole wait.
    WaitTimeout = 10, "WAIT_TIMEOUT",
        "The key stayed held for the whole wait; raise waitTimeoutMs or shorten the critical sections holding it.";
    /// A driver package is not installed (Node surface).
    DriverNotInstalled = 11, "DRIVER_NOT_INSTALLED",
        "Install the driver package: npm install @dokebi/lock-redis.";
    /// A driver factory returned an invalid driver (Node surface).
    DriverInvalid = 12, "DRIVER_INVALID",
        "A driver factory must return { view, close() } where view offers acquire(key, options).";
    /// Redis or PostgreSQL could not be reached or refused the command, or
    /// a file backend's lock file could not be used or trusted.
    ProviderFailed = 13, "PROVIDER_FAILED",
        "The lock store could not be used: Redis or PostgreSQL unreachable or refusing the command (check the connection url, credentials and server health), or a file backend's directory or lock file unusable or untrusted (see the message); the cause has details.";
    /// Redis or PostgreSQL did not answer in time: whether the command took
    /// effect is unknown.
    OutcomeUnknown = 14, "OUTCOME_UNKNOWN",
        "The store (Redis or PostgreSQL) did not answer in time, so it is unknown whether the command took effect; treat the lease as lost and retry the acquire.";
    /// The lease expired or was taken over before it was released.
    LeaseLost = 15, "LEASE_LOST",
        "The lease expired or was taken over before it was released; the critical section may have overlapped another holder, so rely on fencing tokens and consider a longer leaseMs.";
    /// A lease could not be released during shutdown.
    CleanupFailed = 16, "CLEANUP_FAILED",
        "A lease could not be released during shutdown; it expires by itself after leaseMs.";
    /// Shutdown did not release every lease within `shutdownTimeoutMs`.
    CleanupTimeout = 17, "CLEANUP_TIMEOUT",
        "Shutdown did not release every lease within shutdownTimeoutMs; the rest expire by themselves after leaseMs.";
    /// A backend names a driver that does not exist.
    UnknownDriver = 18, "UNKNOWN_DRIVER",
        "Use driver: local, redis, postgres, file or policy, or a driver your entry module exports under drivers.";
    /// Two drivers share a name, or one redefines a built-in driver (Node surface).
    DriverConflict = 19, "DRIVER_CONFLICT",
        "Give every driver a unique name that does not redefine local, redis, postgres, file or policy.";
    /// The entry module exports no valid extension (Node surface).
    InvalidEntry = 20, "INVALID_ENTRY",
        "The entry module must export a LockExtension subclass (default or named) and optionally a drivers object.";
    /// An extension subclass is malformed (Node surface).
    InvalidExtension = 21, "INVALID_EXTENSION",
        "A LockExtension subclass takes no constructor parameters and overrides only dependencies, createDriver and wrapBackend.";
    /// The plugin options are invalid (Node surface).
    InvalidPluginOptions = 22, "INVALID_PLUGIN_OPTIONS",
        "Correct the plugin options; the cause lists each problem in details.issues.";
    /// A per-call argument (not a configuration option) has the wrong type or
    /// range: a NaN timeout, a `signal` that is not an `AbortSignal`, a NULL
    /// handle passed through C.
    InvalidArgument = 23, "INVALID_ARGUMENT",
        "Pass arguments of the documented types: finite non-negative integer timeouts, an AbortSignal, a live handle.";
    /// The backend's driver cannot grant the kind of lease asked for (shared
    /// mode, a limit, several keys): it refuses instead of granting a plain
    /// exclusive lease.
    UnsupportedKind = 24, "UNSUPPORTED_KIND",
        "This backend's driver cannot grant shared, counted or several-key leases; use a driver that can (local, redis, postgres, file) or acquire plain exclusive leases.";
    /// No backend a policy's rule allows for the key (at or above its
    /// minimum tier) could serve it: each was unreachable, refusing or
    /// failing, or passed over in its cooldown. `details.tried` says why.
    NoEligibleBackend = 25, "NO_ELIGIBLE_BACKEND",
        "No backend the key's policy rule allows could serve it; start or repair the backends listed in details.tried, or change the rule (onUnavailable: fallBack, another backend at or above its minTier) if its keys may live elsewhere.";
}

impl ErrorCode {
    /// Parses the string form back into a code.
    pub fn from_name(name: &str) -> Option<ErrorCode> {
        ErrorCode::ALL.into_iter().find(|code| code.as_str() == name)
    }

    /// True for codes caused by load or shutdown that a caller may retry
    /// later without changing anything (web hosts answer these with 503).
    pub const fn is_transient(self) -> bool {
        matches!(
            self,
            ErrorCode::QueueFull
                | ErrorCode::KeyLimit
                | ErrorCode::Closed
                | ErrorCode::ProviderFailed
                | ErrorCode::OutcomeUnknown
                | ErrorCode::NoEligibleBackend
        )
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One problem found while validating options: where, what is wrong, and
/// its code.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Issue {
    /// Dotted path relative to the plugin's options, e.g. `backends.shared.leaseMs`.
    pub path: String,
    /// What is wrong there, never containing a key.
    pub message: String,
    /// `UNKNOWN_CONNECTION` for a backend naming an undefined connection,
    /// `INVALID_OPTIONS` for every other problem: a caller classifies each
    /// issue by code, also when one error lists problems of both kinds.
    #[serde(serialize_with = "code_name")]
    pub code: ErrorCode,
}

impl Issue {
    /// An `INVALID_OPTIONS` issue at `path`.
    pub fn new(path: impl Into<String>, message: impl Into<String>) -> Issue {
        Issue { path: path.into(), message: message.into(), code: ErrorCode::InvalidOptions }
    }

    /// The issue with `code` instead of `INVALID_OPTIONS`.
    pub fn with_code(mut self, code: ErrorCode) -> Issue {
        self.code = code;
        self
    }
}

fn code_name<S: serde::Serializer>(code: &ErrorCode, serializer: S) -> std::result::Result<S::Ok, S::Error> {
    serializer.serialize_str(code.as_str())
}

/// `path: message`; an issue about the whole text (empty path) is its message
/// alone.
impl fmt::Display for Issue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            f.write_str(&self.message)
        } else {
            write!(f, "{}: {}", self.path, self.message)
        }
    }
}

/// The underlying failure of a [`LockError`] (for example the Redis error).
pub type Cause = Arc<dyn std::error::Error + Send + Sync + 'static>;

/// The error every operation of the library returns.
///
/// One pointer wide: every `Result` of the library carries it, on the
/// success path too, where a wide error would be copied from frame to frame
/// for nothing (an uncontended C acquire + release moved ~80 bytes per
/// `Result` through each layer).
#[derive(Clone)]
pub struct LockError(Box<Inner>);

#[derive(Clone)]
struct Inner {
    code: ErrorCode,
    message: String,
    details: Option<serde_json::Value>,
    cause: Option<Cause>,
    /// A fix sentence for this error in particular (which user, which
    /// option); the code's own when absent.
    fix: Option<Box<str>>,
}

impl LockError {
    /// An error with `code` and a message that must not contain a key.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> LockError {
        LockError(Box::new(Inner { code, message: message.into(), details: None, cause: None, fix: None }))
    }

    /// `CLOSED`: a call on a closed provider or backend.
    pub fn closed() -> LockError {
        LockError::new(ErrorCode::Closed, "the lock backend is closed")
    }

    /// `ABORTED`: the caller's signal ended the acquire.
    pub fn aborted() -> LockError {
        LockError::new(ErrorCode::Aborted, "the acquire was aborted by its signal")
    }

    /// `WAIT_TIMEOUT`: the key stayed held for the whole `wait`.
    pub fn wait_timeout(wait: std::time::Duration) -> LockError {
        LockError::new(ErrorCode::WaitTimeout, format!("the key stayed held for the whole wait of {} ms", wait.as_millis()))
    }

    /// `LOCK_BUSY`: the key is held and the acquire was a single try.
    pub fn busy() -> LockError {
        LockError::new(ErrorCode::LockBusy, "the key is held and the acquire was not allowed to wait")
    }

    /// `KEY_LIMIT`: `limit` (the option's name, e.g. `maxLeases`) of `max`
    /// `what` (e.g. "leases are") are already held.
    pub fn key_limit(limit: &str, max: u32, what: &str) -> LockError {
        LockError::new(ErrorCode::KeyLimit, format!("{limit} ({max}) {what} already held by this backend"))
    }

    /// `LEASE_LOST`: a release found the key no longer carrying the lease's
    /// token.
    pub fn lease_lost() -> LockError {
        LockError::new(
            ErrorCode::LeaseLost,
            "the lease had expired or was taken over before release; the critical section may have overlapped another holder",
        )
    }

    /// `INVALID_OPTIONS` listing every problem in `details.issues`.
    pub fn invalid_options(issues: Vec<Issue>) -> LockError {
        let summary = match issues.as_slice() {
            [one] => format!("invalid options: {one}"),
            many => format!("invalid options: {} problems, first {}", many.len(), many[0]),
        };
        LockError::new(ErrorCode::InvalidOptions, summary).with_details(serde_json::json!({ "issues": issues }))
    }

    /// The error with structured `details` (replacing any).
    pub fn with_details(mut self, details: serde_json::Value) -> LockError {
        self.0.details = Some(details);
        self
    }

    /// The error with `cause` as its underlying failure.
    pub fn with_cause(mut self, cause: impl std::error::Error + Send + Sync + 'static) -> LockError {
        self.0.cause = Some(Arc::new(cause));
        self
    }

    /// The error with an already shared `cause` as its underlying failure.
    pub fn with_shared_cause(mut self, cause: Cause) -> LockError {
        self.0.cause = Some(cause);
        self
    }

    /// The error with a fix sentence of its own (naming what to change,
    /// never a secret), replacing the code's general one.
    pub fn with_fix(mut self, fix: impl Into<String>) -> LockError {
        self.0.fix = Some(fix.into().into_boxed_str());
        self
    }

    /// The stable code.
    pub fn code(&self) -> ErrorCode {
        self.0.code
    }

    /// The human message; it never contains a key.
    pub fn message(&self) -> &str {
        &self.0.message
    }

    /// One sentence telling the user what to do: this error's own (see
    /// [`LockError::with_fix`]), else the code's.
    pub fn fix(&self) -> &str {
        self.0.fix.as_deref().unwrap_or(self.0.code.fix())
    }

    /// Structured details, e.g. `issues` of `INVALID_OPTIONS`.
    pub fn details(&self) -> Option<&serde_json::Value> {
        self.0.details.as_ref()
    }

    /// The underlying failure, if any (for example the Redis error).
    pub fn cause(&self) -> Option<&Cause> {
        self.0.cause.as_ref()
    }

    /// The `details.issues` list of an `INVALID_OPTIONS` error.
    pub fn issues(&self) -> Vec<Issue> {
        let Some(list) = self.0.details.as_ref().and_then(|d| d.get("issues")).and_then(|i| i.as_array()) else {
            return Vec::new();
        };
        list.iter()
            .filter_map(|item| {
                let code = item.get("code").and_then(|c| c.as_str()).and_then(ErrorCode::from_name).unwrap_or(ErrorCode::InvalidOptions);
                Some(Issue::new(item.get("path")?.as_str()?, item.get("message")?.as_str()?).with_code(code))
            })
            .collect()
    }
}

impl fmt::Debug for LockError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockError")
            .field("code", &self.0.code)
            .field("message", &self.0.message)
            .field("details", &self.0.details)
            .field("cause", &self.0.cause.as_ref().map(|c| c.to_string()))
            .finish()
    }
}

impl fmt::Display for LockError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.0.code, self.0.message)
    }
}

impl std::error::Error for LockError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.cause.as_deref().map(|c| c as &(dyn std::error::Error + 'static))
    }
}

/// Shorthand for results of this library.
pub type Result<T, E = LockError> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_round_trips_through_its_name_and_has_a_fix() {
        for (index, code) in ErrorCode::ALL.into_iter().enumerate() {
            assert_eq!(code as u32, index as u32 + 1, "ABI values are dense and ordered");
            assert_eq!(ErrorCode::from_name(code.as_str()), Some(code));
            assert!(code.fix().ends_with('.'), "{code} fix is a sentence");
        }
    }

    #[test]
    fn invalid_options_carries_every_issue() {
        let err = LockError::invalid_options(vec![
            Issue::new("backends.a.maxKeys", "must be at least 1"),
            Issue::new("backends.b", "unknown field").with_code(ErrorCode::UnknownConnection),
        ]);
        assert_eq!(err.code(), ErrorCode::InvalidOptions);
        assert_eq!(err.issues().len(), 2);
        assert_eq!(err.issues()[1].path, "backends.b");
        assert_eq!(err.issues()[1].code, ErrorCode::UnknownConnection, "the code survives the details");
        assert_eq!(err.details().unwrap()["issues"][1]["code"], "UNKNOWN_CONNECTION");
    }
}

//! Operational log records: what a host's logger receives.
//!
//! Records carry the backend name and a code, never a key. The provider takes
//! one [`Logger`]; by default warnings and errors go to standard error, so a
//! failed cleanup is never silent.

use std::sync::Arc;

/// Severity of a [`LogRecord`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    /// Detail for debugging.
    Debug,
    /// Normal operation, e.g. a backend became ready.
    Info,
    /// Something unexpected that the library handled.
    Warn,
    /// A failure, e.g. leases not released at shutdown.
    Error,
}

impl Level {
    /// The lower-case name: `"debug"`, `"info"`, `"warn"` or `"error"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Level::Debug => "debug",
            Level::Info => "info",
            Level::Warn => "warn",
            Level::Error => "error",
        }
    }
}

/// One log line: which backend, which code (`LOCK_BACKEND_READY`,
/// `CLEANUP_TIMEOUT`, …), and a message without keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogRecord {
    /// How severe it is.
    pub level: Level,
    /// The backend's name.
    pub backend: String,
    /// A stable code, e.g. `LOCK_BACKEND_READY`.
    pub code: &'static str,
    /// A human message, never containing a key.
    pub message: String,
}

/// Receives log records; called from whichever thread produced them.
pub type Logger = Arc<dyn Fn(&LogRecord) + Send + Sync>;

/// Writes warnings and errors to standard error; drops debug and info.
pub fn stderr_logger() -> Logger {
    Arc::new(|record: &LogRecord| {
        if record.level >= Level::Warn {
            eprintln!("dokebi-lock {} [{}] {}: {}", record.level.as_str(), record.backend, record.code, record.message);
        }
    })
}

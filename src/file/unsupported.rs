//! The file driver where it does not run yet (Windows: `LockFileEx` is not
//! wired): opening a backend is `PROVIDER_FAILED`, so no value of these
//! types ever exists there.

use crate::acquire::AcquireOptions;
use crate::error::{ErrorCode, LockError, Result};
use crate::options::FileOptions;
use crate::telemetry::Telemetry;

/// A `driver: file` backend; never opened on this system.
#[derive(Clone, Debug)]
pub struct FileBackend {
    options: FileOptions,
    never: std::convert::Infallible,
}

/// Counts for `status()`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileCounts {
    /// Leases this backend holds now.
    pub held: usize,
    /// Of those, shared ones.
    pub held_shared: usize,
    /// Acquires waiting now.
    pub waiting: usize,
    /// Leases granted since the backend started.
    pub acquired: u64,
    /// Acquires that ended in `WAIT_TIMEOUT`.
    pub timed_out: u64,
    /// Releases that found their lock file replaced.
    pub lost: u64,
}

/// A file lease; never granted on this system.
#[derive(Debug)]
pub struct FileLease {
    never: std::convert::Infallible,
}

impl FileBackend {
    /// `PROVIDER_FAILED`: the file driver does not run on this system yet.
    pub fn open(_name: &str, _options: FileOptions, _telemetry: Option<Telemetry>) -> Result<FileBackend> {
        Err(LockError::new(
            ErrorCode::ProviderFailed,
            "the file driver does not run on this operating system yet; use driver: local or redis",
        ))
    }

    /// The options the backend was opened with.
    pub fn options(&self) -> &FileOptions {
        &self.options
    }

    /// Never called: no backend exists.
    pub async fn acquire(&self, _key: &str, _options: AcquireOptions) -> Result<FileLease> {
        match self.never {}
    }

    /// Never called: no backend exists.
    pub async fn acquire_many(&self, _keys: &[&str], _options: AcquireOptions) -> Result<FileLease> {
        match self.never {}
    }

    /// Never called: no backend exists.
    pub fn counts(&self) -> FileCounts {
        match self.never {}
    }

    /// Never called: no backend exists.
    pub fn close(&self) {
        match self.never {}
    }

    /// Never called: no backend exists.
    pub fn is_closed(&self) -> bool {
        match self.never {}
    }
}

impl FileLease {
    /// Never called: no lease exists.
    pub fn key(&self) -> &str {
        match self.never {}
    }

    /// Never called: no lease exists.
    pub fn keys(&self) -> Vec<&str> {
        match self.never {}
    }

    /// Never called: no lease exists.
    pub fn fence(&self) -> u64 {
        match self.never {}
    }

    /// Never called: no lease exists.
    pub fn fences(&self) -> Vec<(&str, u64)> {
        match self.never {}
    }

    /// Never called: no lease exists.
    pub fn is_valid(&self) -> bool {
        match self.never {}
    }

    /// Never called: no lease exists.
    pub fn release(&self) -> Result<bool> {
        match self.never {}
    }
}

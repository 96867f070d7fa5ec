//! `status()`: what a backend is doing, as counts only (never keys).

use std::time::SystemTime;

use crate::error::ErrorCode;
use crate::policy::MemberStatus;

/// What every driver counts of its leases for `status()`; never keys.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LeaseCounts {
    /// Leases held now by this process.
    pub held: usize,
    /// Of those, the leases held in shared mode.
    pub held_shared: usize,
    /// Acquires waiting now (for their turn, or for the store).
    pub waiting: usize,
    /// Leases granted since the backend started.
    pub acquired: u64,
    /// Waits that ended in `WAIT_TIMEOUT` since the backend started.
    pub timed_out: u64,
    /// Leases found lost since the backend started, once per lease; always
    /// 0 for local leases, which cannot be lost.
    pub lost: u64,
}

/// A snapshot of one backend.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackendStatus {
    /// `local`, `redis`, `postgres`, `mysql`, `file` or `policy`.
    pub driver: &'static str,
    /// Leases held now by this process.
    pub held: usize,
    /// Of those, the leases held in shared mode.
    pub held_shared: usize,
    /// Acquires waiting now.
    pub waiting: usize,
    /// Leases granted since the backend started.
    pub acquired: u64,
    /// Waits that ended in `WAIT_TIMEOUT` since the backend started.
    pub timed_out: u64,
    /// Leases found lost (`LEASE_LOST`, `OUTCOME_UNKNOWN`) since the backend
    /// started; always 0 for local leases, which cannot be lost.
    pub lost: u64,
    /// The connection's health, for redis backends.
    pub redis: Option<RedisStatus>,
    /// The connection's health, for postgres backends.
    pub postgres: Option<PostgresStatus>,
    /// The connection's health, for mysql backends.
    pub mysql: Option<MysqlStatus>,
    /// For policy backends: each member's counts and whether it is skipped.
    pub policy: Option<Vec<MemberStatus>>,
}

impl BackendStatus {
    /// The status of a backend of `driver` that has no connection to report.
    pub(crate) fn of(driver: &'static str, counts: LeaseCounts) -> BackendStatus {
        let LeaseCounts { held, held_shared, waiting, acquired, timed_out, lost } = counts;
        BackendStatus {
            driver,
            held,
            held_shared,
            waiting,
            acquired,
            timed_out,
            lost,
            redis: None,
            postgres: None,
            mysql: None,
            policy: None,
        }
    }
}

/// The health of a redis backend's connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedisStatus {
    /// The command connection answered its last command or probe.
    pub connected: bool,
    /// The pub/sub subscription that wakes waiters is live.
    pub subscribed: bool,
    /// The code of the last failure talking to Redis, if any.
    pub last_error: Option<ErrorCode>,
    /// When Redis last answered.
    pub last_probe: Option<SystemTime>,
}

/// The health of a postgres backend's connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PostgresStatus {
    /// The last lock statement was answered.
    pub connected: bool,
    /// The `LISTEN` connection that wakes waiters is live (else waiters
    /// poll at `pollIntervalMs`).
    pub listening: bool,
    /// The code of the last failure talking to PostgreSQL, if any.
    pub last_error: Option<ErrorCode>,
    /// When PostgreSQL last answered a lock statement.
    pub last_answer: Option<SystemTime>,
}

/// The health of a mysql backend's connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MysqlStatus {
    /// The last lock statement was answered.
    pub connected: bool,
    /// The release poller reads the log (else waiters poll at
    /// `pollIntervalMs`).
    pub polling: bool,
    /// The code of the last failure talking to MySQL, if any.
    pub last_error: Option<ErrorCode>,
    /// When MySQL last answered a lock statement.
    pub last_answer: Option<SystemTime>,
}

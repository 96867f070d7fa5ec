//! `status()` snapshots as JS objects: counts only, never keys.

use std::time::{SystemTime, UNIX_EPOCH};

use dokebi_lock::local::LocalCounts;
use dokebi_lock::BackendStatus;
use napi_derive::napi;

/// The counts of a local engine (`driver` and `lost` are added by the JS
/// layer).
#[napi(object)]
pub struct CountsInfo {
    pub held: f64,
    pub held_shared: f64,
    pub waiting: f64,
    pub acquired: f64,
    pub timed_out: f64,
}

impl From<LocalCounts> for CountsInfo {
    fn from(counts: LocalCounts) -> Self {
        CountsInfo {
            held: counts.held as f64,
            held_shared: counts.held_shared as f64,
            waiting: counts.waiting as f64,
            acquired: counts.acquired as f64,
            timed_out: counts.timed_out as f64,
        }
    }
}

/// A snapshot of a store driver's backend: counts, and the health of its
/// store's connection (`redis`, `postgres` or `mysql`, by driver).
#[napi(object)]
pub struct StatusInfo {
    pub driver: String,
    pub held: f64,
    pub held_shared: f64,
    pub waiting: f64,
    pub acquired: f64,
    pub timed_out: f64,
    pub lost: f64,
    pub redis: Option<RedisStatusInfo>,
    pub postgres: Option<PostgresStatusInfo>,
    pub mysql: Option<MysqlStatusInfo>,
}

/// The health of a redis backend's connection.
#[napi(object)]
pub struct RedisStatusInfo {
    pub connected: bool,
    pub subscribed: bool,
    /// The code of the last failure talking to Redis.
    pub last_error: Option<String>,
    /// When Redis last answered, in ms since the Unix epoch.
    pub last_probe_at: Option<f64>,
}

/// The health of a postgres backend's connection.
#[napi(object)]
pub struct PostgresStatusInfo {
    /// The last lock statement was answered.
    pub connected: bool,
    /// The `LISTEN` connection that wakes waiters is live.
    pub listening: bool,
    /// The code of the last failure talking to PostgreSQL.
    pub last_error: Option<String>,
    /// When PostgreSQL last answered a lock statement, in ms since the Unix epoch.
    pub last_answer_at: Option<f64>,
}

/// The health of a mysql backend's connection.
#[napi(object)]
pub struct MysqlStatusInfo {
    /// The last lock statement was answered.
    pub connected: bool,
    /// The release poller that wakes waiters reads the log (else waiters
    /// poll at `pollIntervalMs`).
    pub polling: bool,
    /// The code of the last failure talking to MySQL.
    pub last_error: Option<String>,
    /// When MySQL last answered a lock statement, in ms since the Unix epoch.
    pub last_answer_at: Option<f64>,
}

/// `time` in ms since the Unix epoch, as JS dates count.
fn epoch_ms(time: SystemTime) -> Option<f64> {
    time.duration_since(UNIX_EPOCH).ok().map(|d| d.as_millis() as f64)
}

impl From<BackendStatus> for StatusInfo {
    fn from(status: BackendStatus) -> Self {
        StatusInfo {
            driver: status.driver.to_owned(),
            held: status.held as f64,
            held_shared: status.held_shared as f64,
            waiting: status.waiting as f64,
            acquired: status.acquired as f64,
            timed_out: status.timed_out as f64,
            lost: status.lost as f64,
            redis: status.redis.map(|redis| RedisStatusInfo {
                connected: redis.connected,
                subscribed: redis.subscribed,
                last_error: redis.last_error.map(|code| code.as_str().to_owned()),
                last_probe_at: redis.last_probe.and_then(epoch_ms),
            }),
            postgres: status.postgres.map(|postgres| PostgresStatusInfo {
                connected: postgres.connected,
                listening: postgres.listening,
                last_error: postgres.last_error.map(|code| code.as_str().to_owned()),
                last_answer_at: postgres.last_answer.and_then(epoch_ms),
            }),
            mysql: status.mysql.map(|mysql| MysqlStatusInfo {
                connected: mysql.connected,
                polling: mysql.polling,
                last_error: mysql.last_error.map(|code| code.as_str().to_owned()),
                last_answer_at: mysql.last_answer.and_then(epoch_ms),
            }),
        }
    }
}

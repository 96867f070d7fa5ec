//! dokebi-lock: keyed locks with fencing tokens.
//!
//! One core, three surfaces (Rust, Node, C). The `local` driver is a keyed
//! FIFO mutex inside one process; each lease carries a fencing token that
//! grows with every acquire of the backend.
//!
//! ```
//! # futures::executor::block_on(async {
//! use dokebi_lock::{AcquireOptions, Provider};
//!
//! let provider = Provider::from_yaml("schemaVersion: 1\noptions:\n  dokebi-lock:\n    backends:\n      orders: {}\n")?;
//! let orders = provider.backend("orders")?;
//! let lease = orders.acquire("order:42", AcquireOptions::default()).await?;
//! // critical section: pass lease.fence() along with writes to other stores
//! assert!(lease.release().await?);
//! provider.close().await;
//! # Ok::<(), dokebi_lock::LockError>(())
//! # }).unwrap();
//! ```

// No unsafe code in the core, but for the one impl that lets a host's own
// socket ride in redis-rs' `Send` connection (`host::HostStream`), whose
// contract the `unsafe trait Host` puts on the host.
#![deny(unsafe_code)]

pub mod abort;
pub mod acquire;
pub mod error;
#[cfg(feature = "file")]
pub mod file;
pub mod force_release;
pub mod holder;
pub mod host;
pub mod inspect;
pub mod key;
pub mod local;
pub mod log;
mod metrics;
#[cfg(feature = "mysql")]
pub mod mysql;
pub mod options;
pub mod policy;
#[cfg(feature = "postgres")]
pub mod postgres;
pub mod provider;
#[cfg(feature = "redis")]
pub mod redis;
pub mod status;
#[cfg(any(feature = "redis", feature = "postgres", feature = "mysql"))]
pub mod store;
pub mod telemetry;
mod trace;
pub mod with_lock;

pub use abort::{AbortController, AbortSignal};
pub use acquire::{AcquireOptions, LockKind, LockMode};
pub use error::{ErrorCode, Issue, LockError, Result};
#[cfg(feature = "file")]
pub use file::{FileBackend, FileLease};
pub use force_release::ForcedRelease;
pub use holder::HolderLabel;
pub use inspect::{Holding, Inspection};
#[cfg(feature = "mysql")]
pub use mysql::{MysqlBackend, MysqlLease};
pub use options::Options;
#[cfg(feature = "postgres")]
pub use postgres::{PostgresBackend, PostgresLease};
pub use provider::{Backend, Hooks, Lease, Provider};
#[cfg(feature = "redis")]
pub use redis::{RedisBackend, RedisLease};
pub use status::{BackendStatus, LeaseCounts};
#[cfg(any(feature = "redis", feature = "postgres", feature = "mysql"))]
pub use store::StoreCounts;
pub use with_lock::{Section, WithLockOptions};

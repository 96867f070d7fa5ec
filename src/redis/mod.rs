//! The `redis` driver: leases shared by processes through a Redis (or
//! Valkey) server, with owner tokens, fencing tokens and pub/sub wake-ups.
//! The lock layer (queues, hand-off, acquire, leases) is the one every store
//! driver shares ([`crate::store`]); this driver supplies its store:
//!
//! - `store`: [`RedisStore`], the seam's operations, and what the backends
//!   of one connection share;
//! - `claim`: what one lease holds in Redis (its keys' names, kind and
//!   token) and which scripts take and give it back (per hash slot on a
//!   Cluster); `scripts`: the Lua scripts (one round trip per operation);
//!   `keys`: the Redis names of a user key;
//! - `notify`: release notifications, which wake this process's waiters;
//! - `clock`: the servers' clocks as their fences show them (a primary
//!   whose clock is behind is reported, `REDIS_CLOCK_BEHIND`);
//! - `transport`: connections, topology (a server, Sentinel, a cluster),
//!   links, TLS and refusals; it knows nothing of locks.
//!
//! Lock kinds (see [`RedisBackend::acquire`]): exclusive (the default),
//! shared (a reader/writer lock: readers together, a writer alone; a writer
//! waiting in any process stops new readers), counted (`limit`/`weight`: at
//! most `limit` units of a key held, every caller agreeing on the limit),
//! and several keys at once ([`RedisBackend::acquire_many`], all or
//! nothing). Each holder has its own token and expiry, every grant a fence
//! above every earlier grant of its key; a plain lease on one key keeps the
//! one-`SET NX` fast path.
//!
//! ```no_run
//! # futures::executor::block_on(async {
//! use dokebi_lock::{AcquireOptions, Provider};
//!
//! let provider = Provider::from_yaml(
//!     "schemaVersion: 1
//! options:
//!   dokebi-redis:
//!     connections:
//!       main: { url: 'redis://127.0.0.1:6379/0' }
//!   dokebi-lock:
//!     backends:
//!       shared: { driver: redis, connection: main, namespace: my-service, leaseMs: 10000 }
//! ",
//! )?;
//! let lease = provider.backend("shared")?.acquire("order:42", AcquireOptions::default()).await?;
//! // critical section: pass lease.fence() along with writes; check lease.is_valid()
//! lease.release().await?; // LEASE_LOST if the lease expired meanwhile
//! provider.close().await;
//! # Ok::<(), dokebi_lock::LockError>(())
//! # }).unwrap();
//! ```

pub(crate) mod claim;
pub(crate) mod clock;
pub(crate) mod inspect;
pub(crate) mod keys;
pub(crate) mod notify;
pub(crate) mod scripts;
pub mod store;
pub(crate) mod transport;

pub use store::RedisStore;

/// A backend whose leases live in Redis (see [`StoreBackend`]).
pub type RedisBackend = StoreBackend<RedisStore>;
/// A lease held through Redis (see [`StoreLease`]).
pub type RedisLease = StoreLease<RedisStore>;

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::error::Result;
use crate::holder::HolderLabel;
use crate::host::Host;
use crate::log::{Level, LogRecord, Logger};
use crate::options::{BackendOptions, Options, StoreOptions};
use crate::store::runtime::DriverRuntime;
use crate::store::{StoreBackend, StoreLease};
use crate::telemetry::Telemetry;
use store::Shared;
use transport::connection::RedisConnection;
use transport::tls;

/// The driver's shared parts in one provider: the runtime and the
/// connections its redis backends use. Exists only when there is at least
/// one redis backend.
pub(crate) struct RedisDriver {
    runtime: Arc<DriverRuntime>,
    connections: BTreeMap<String, Arc<Shared>>,
    logger: Logger,
    telemetry: Option<Telemetry>,
}

impl RedisDriver {
    /// Starts the runtime and prepares (without connecting) each connection
    /// a redis backend of `options` names; `None` without redis backends.
    /// With a `host`, operations started on its thread run there. TLS
    /// links trust the authorities of the PEM file `extra_authorities` too
    /// (one that cannot be read is logged and left out, as Node does).
    pub fn open(
        options: &Options,
        logger: &Logger,
        telemetry: &Option<Telemetry>,
        host: &Option<Arc<dyn Host>>,
        extra_authorities: Option<&std::path::Path>,
    ) -> Result<Option<RedisDriver>> {
        let mut used = options.backends.values().filter_map(|backend| match backend {
            BackendOptions::Redis(redis) => Some(redis.connection.as_str()),
            _ => None,
        });
        let Some(first) = used.next() else { return Ok(None) };
        let users = |connection: &str| -> Vec<String> {
            let uses = |backend: &BackendOptions| matches!(backend, BackendOptions::Redis(redis) if redis.connection == connection);
            options.backends.iter().filter(|(_, backend)| uses(backend)).map(|(name, _)| name.clone()).collect()
        };
        let extra = match extra_authorities {
            Some(file) => tls::extra_authorities(file).unwrap_or_else(|err| {
                for backend in users(first) {
                    logger(&LogRecord {
                        level: Level::Warn,
                        backend,
                        code: "REDIS_EXTRA_CA_IGNORED",
                        message: format!("ignoring the extra authorities of {} (NODE_EXTRA_CA_CERTS): {err}", file.display()),
                    });
                }
                Vec::new()
            }),
            None => Vec::new(),
        };
        let mut connections = BTreeMap::new();
        for name in std::iter::once(first).chain(used) {
            if !connections.contains_key(name) {
                let connection = RedisConnection::new(
                    name,
                    &options.connections[name],
                    &extra,
                    logger.clone(),
                    users(name),
                    telemetry.clone(),
                    host.clone(),
                )?;
                connections.insert(name.to_owned(), Arc::new(Shared::new(Arc::new(connection))));
            }
        }
        let runtime = Arc::new(DriverRuntime::start(host.clone())?);
        Ok(Some(RedisDriver { runtime, connections, logger: logger.clone(), telemetry: telemetry.clone() }))
    }

    /// The backend `name` with `options` on its connection.
    pub fn backend(&self, name: &str, options: StoreOptions, holder: &HolderLabel) -> RedisBackend {
        let store =
            RedisStore::new(self.connections[&options.connection].clone(), &options, name, self.logger.clone(), self.telemetry.clone());
        RedisBackend::new(name, options, holder.clone(), store, self.runtime.clone(), self.logger.clone(), self.telemetry.clone())
    }

    /// Connects in the background: subscribes each connection to the release
    /// channels of its backends' namespaces and checks its eviction policy.
    pub fn start(&self, backends: &BTreeMap<String, StoreOptions>) {
        for (name, shared) in &self.connections {
            let connection = shared.connection();
            let users: Vec<&StoreOptions> = backends.values().filter(|b| &b.connection == name).collect();
            let mut channels: Vec<String> = users.iter().map(|b| keys::release_channel(&b.namespace)).collect();
            channels.sort();
            channels.dedup();
            let names: Vec<String> = backends.iter().filter(|(_, b)| &b.connection == name).map(|(n, _)| n.clone()).collect();
            let handle = self.runtime.spawner().handle();
            for index in 0..connection.subscribers() {
                handle.spawn(notify::run(shared.clone(), channels.clone(), index));
            }
            handle.spawn(transport::switches::follow(connection.clone()));
            let (connection, logger) = (connection.clone(), self.logger.clone());
            handle.spawn(async move { connection.check_eviction_policy(&names, &logger).await });
        }
    }

    /// Stops notifications and closes every connection.
    pub async fn shut_down(&self) {
        let connections: Vec<Arc<RedisConnection>> = self.connections.values().map(|shared| shared.connection().clone()).collect();
        let _ = self
            .runtime
            .spawner()
            .run(async move {
                for connection in connections {
                    connection.shut_down().await;
                }
                Ok(())
            })
            .await;
    }
}

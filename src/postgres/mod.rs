//! The `postgres` driver: leases shared by processes through rows of a
//! PostgreSQL table, with owner tokens, expiry on the server's clock,
//! fencing tokens and `LISTEN`/`NOTIFY` wake-ups. The lock layer (queues,
//! acquire, leases, renewal) is the one every store driver shares
//! ([`crate::store`]); this driver supplies its store:
//!
//! - `store`: [`PostgresStore`], the seam's operations, and what the
//!   backends of one connection share;
//! - `schema`: the tables and the functions that are the operations;
//!   `sql`: the one statement that calls each;
//! - `notify`: the `LISTEN` connection, which wakes this process's waiters;
//! - `transport`: connections (a pool of pipelined clients), their URL and
//!   the classification of failures; it knows nothing of locks.
//!
//! Every statement is one round trip and one transaction, with keys as bind
//! parameters and no session state (no advisory lock held across
//! statements, no named prepared statement), so a pooler in transaction
//! mode (PgBouncer) may sit between; only `LISTEN` needs a direct
//! connection, and without one waiters poll.
//!
//! ```no_run
//! # futures::executor::block_on(async {
//! use dokebi_lock::{AcquireOptions, Provider};
//!
//! let provider = Provider::from_yaml(
//!     "schemaVersion: 1
//! options:
//!   dokebi-postgres:
//!     connections:
//!       main: { url: 'postgres://app@127.0.0.1:5432/app' }
//!   dokebi-lock:
//!     backends:
//!       shared: { driver: postgres, connection: main, namespace: my-service, leaseMs: 10000 }
//! ",
//! )?;
//! let lease = provider.backend("shared")?.acquire("order:42", AcquireOptions::default()).await?;
//! // critical section: pass lease.fence() along with writes
//! lease.release().await?; // LEASE_LOST if the lease expired meanwhile
//! provider.close().await;
//! # Ok::<(), dokebi_lock::LockError>(())
//! # }).unwrap();
//! ```

pub(crate) mod notify;
pub(crate) mod schema;
pub(crate) mod sql;
pub mod store;
pub(crate) mod transport;

pub use store::PostgresStore;

/// A backend whose leases live in PostgreSQL (see [`StoreBackend`]).
pub type PostgresBackend = StoreBackend<PostgresStore>;
/// A lease held through PostgreSQL (see [`StoreLease`]).
pub type PostgresLease = StoreLease<PostgresStore>;

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::error::Result;
use crate::holder::HolderLabel;
use crate::host::Host;
use crate::log::Logger;
use crate::options::{BackendOptions, Options, PostgresOptions};
use crate::store::connections::Connections;
use crate::store::{StoreBackend, StoreLease};
use crate::telemetry::Telemetry;
use transport::connection::PgConnection;

/// The driver's shared parts in one provider: its runtime and the
/// connections its backends use. Exists only when there is at least one
/// postgres backend.
pub(crate) struct PostgresDriver(Connections<PostgresStore, PgConnection>);

impl PostgresDriver {
    /// Starts the runtime and prepares (without connecting) each connection
    /// a postgres backend of `options` names; `None` without postgres
    /// backends. A URL that cannot be used is `PROVIDER_FAILED` now.
    pub fn open(
        options: &Options,
        logger: &Logger,
        telemetry: &Option<Telemetry>,
        host: &Option<Arc<dyn Host>>,
    ) -> Result<Option<PostgresDriver>> {
        let used = options.backends.values().filter_map(|backend| match backend {
            BackendOptions::Postgres(postgres) => Some(postgres.store.connection.as_str()),
            _ => None,
        });
        let prepare = |name: &str, runtime, telemetry| PgConnection::new(name, &options.postgres[name], runtime, telemetry);
        Ok(Connections::open(used, logger, telemetry, host, prepare)?.map(PostgresDriver))
    }

    /// The backend `name` with `options` on its connection.
    pub fn backend(&self, name: &str, options: PostgresOptions, holder: &HolderLabel) -> PostgresBackend {
        self.0.backend(name, options.store.clone(), holder, |shared| PostgresStore::new(shared, &options))
    }

    /// Starts each connection's listener, on the channels of its backends' tables.
    pub fn start(&self, backends: &BTreeMap<String, PostgresOptions>) {
        let channels = backends
            .values()
            .map(|backend| (backend.store.connection.as_str(), schema::Table::new(&backend.schema, &backend.table).channel()));
        self.0.start(channels, notify::run);
    }

    /// Stops the listeners and closes every connection.
    pub fn shut_down(&self) {
        self.0.each().for_each(PgConnection::shut_down);
    }
}

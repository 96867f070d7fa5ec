//! The `mysql` driver: leases shared by processes through rows of InnoDB
//! tables in MySQL or MariaDB, with owner tokens, expiry on the server's
//! clock and fencing tokens. The lock layer (queues, acquire, leases,
//! renewal) is the one every store driver shares ([`crate::store`]); this
//! driver supplies its store:
//!
//! - `store`: [`MysqlStore`], the seam's operations, and what the backends
//!   of one connection share;
//! - `schema`: the tables and the stored procedures that are the
//!   operations; `sql`: the one `CALL` of each;
//! - `notify`: the release poller, which wakes this process's waiters;
//! - `transport`: connections (a small pool), their URL and TLS, and the
//!   classification of failures; it knows nothing of locks.
//!
//! Every operation is one `CALL`, one round trip and one transaction, sent
//! as text with nothing of a key in its SQL but hex digits, and leaves no
//! session state (no `GET_LOCK`, no user variable, no temporary table, no
//! prepared statement), so a multiplexing proxy (ProxySQL) may sit
//! between. MySQL has no `LISTEN`: releases in other processes are found
//! by one poller per connection, reading a log of releases every
//! millisecond while this process has an acquire in progress.
//!
//! ```no_run
//! # futures::executor::block_on(async {
//! use dokebi_lock::{AcquireOptions, Provider};
//!
//! let provider = Provider::from_yaml(
//!     "schemaVersion: 1
//! options:
//!   dokebi-mysql:
//!     connections:
//!       main: { url: 'mysql://app@127.0.0.1:3306/app' }
//!   dokebi-lock:
//!     backends:
//!       shared: { driver: mysql, connection: main, namespace: my-service, leaseMs: 10000 }
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

pub use store::MysqlStore;

/// A backend whose leases live in MySQL or MariaDB (see [`StoreBackend`]).
pub type MysqlBackend = StoreBackend<MysqlStore>;
/// A lease held through MySQL or MariaDB (see [`StoreLease`]).
pub type MysqlLease = StoreLease<MysqlStore>;

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::error::Result;
use crate::holder::HolderLabel;
use crate::host::Host;
use crate::log::Logger;
use crate::options::{BackendOptions, MysqlOptions, Options};
use crate::store::connections::Connections;
use crate::store::{StoreBackend, StoreLease};
use crate::telemetry::Telemetry;
use transport::connection::MysqlConnection;

/// The driver's shared parts in one provider: its runtime and the
/// connections its backends use. Exists only when there is at least one
/// mysql backend.
pub(crate) struct MysqlDriver(Connections<MysqlStore, MysqlConnection>);

impl MysqlDriver {
    /// Starts the runtime and prepares (without connecting) each connection
    /// a mysql backend of `options` names; `None` without mysql backends. A
    /// URL that cannot be used is `PROVIDER_FAILED` now.
    pub fn open(
        options: &Options,
        logger: &Logger,
        telemetry: &Option<Telemetry>,
        host: &Option<Arc<dyn Host>>,
    ) -> Result<Option<MysqlDriver>> {
        let used = options.backends.values().filter_map(|backend| match backend {
            BackendOptions::Mysql(mysql) => Some(mysql.store.connection.as_str()),
            _ => None,
        });
        let prepare = |name: &str, runtime, telemetry| MysqlConnection::new(name, &options.mysql[name], runtime, telemetry);
        Ok(Connections::open(used, logger, telemetry, host, prepare)?.map(MysqlDriver))
    }

    /// The backend `name` with `options` on its connection.
    pub fn backend(&self, name: &str, options: MysqlOptions, holder: &HolderLabel) -> MysqlBackend {
        self.0.backend(name, options.store.clone(), holder, |shared| MysqlStore::new(shared, &options))
    }

    /// Starts each connection's release poller, on the tables of its backends.
    pub fn start(&self, backends: &BTreeMap<String, MysqlOptions>) {
        let tables = backends.values().map(|backend| (backend.store.connection.as_str(), backend.table.clone()));
        self.0.start(tables, notify::run);
    }

    /// Closes every connection.
    pub fn shut_down(&self) {
        self.0.each().for_each(MysqlConnection::shut_down);
    }
}

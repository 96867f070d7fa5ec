//! The part of an SQL driver (postgres, mysql) that one provider holds:
//! its runtime and the connections its backends use, opened, handed to
//! backends and started the same way whatever the server. The Redis driver
//! opens its own: its connections need no runtime to be made, and start
//! more than one task each.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;

use tokio::runtime::Handle;

use super::runtime::DriverRuntime;
use super::{Shared, Store, StoreBackend};
use crate::error::Result;
use crate::holder::HolderLabel;
use crate::host::Host;
use crate::log::Logger;
use crate::options::StoreOptions;
use crate::telemetry::Telemetry;

/// The runtime and the connections (`C`) of one driver's backends (`S`).
pub(crate) struct Connections<S: Store, C> {
    runtime: Arc<DriverRuntime>,
    connections: BTreeMap<String, Arc<Shared<S, C>>>,
    logger: Logger,
    telemetry: Option<Telemetry>,
}

impl<S: Store, C> Connections<S, C> {
    /// Starts the runtime and prepares (without connecting) each connection
    /// of `used` (the connection each of the driver's backends names) with
    /// `prepare`; `None` when no backend names one. An error of `prepare`
    /// (a URL that cannot be used) is the provider's.
    pub fn open<'a>(
        used: impl IntoIterator<Item = &'a str>,
        logger: &Logger,
        telemetry: &Option<Telemetry>,
        host: &Option<Arc<dyn Host>>,
        prepare: impl Fn(&str, Handle, Option<Telemetry>) -> Result<C>,
    ) -> Result<Option<Connections<S, C>>> {
        let used: Vec<&str> = used.into_iter().collect();
        if used.is_empty() {
            return Ok(None);
        }
        let runtime = Arc::new(DriverRuntime::start(host.clone())?);
        let mut connections = BTreeMap::new();
        for name in used {
            if !connections.contains_key(name) {
                let connection = prepare(name, runtime.spawner().handle().clone(), telemetry.clone())?;
                connections.insert(name.to_owned(), Arc::new(Shared::new(Arc::new(connection))));
            }
        }
        Ok(Some(Connections { runtime, connections, logger: logger.clone(), telemetry: telemetry.clone() }))
    }

    /// The backend `name` with `options`, whose store `store` makes on the
    /// connection it names.
    pub fn backend(
        &self,
        name: &str,
        options: StoreOptions,
        holder: &HolderLabel,
        store: impl FnOnce(Arc<Shared<S, C>>) -> S,
    ) -> StoreBackend<S> {
        let store = store(self.connections[&options.connection].clone());
        StoreBackend::new(name, options, holder.clone(), store, self.runtime.clone(), self.logger.clone(), self.telemetry.clone())
    }

    /// Spawns each connection's wake-up task, `wake_ups`, on the places
    /// (tables, channels) of `places` (each backend's connection and place)
    /// on that connection, each once, in order.
    pub fn start<'a, F: Future<Output = ()> + Send + 'static>(
        &self,
        places: impl IntoIterator<Item = (&'a str, String)>,
        wake_ups: impl Fn(Arc<Shared<S, C>>, Vec<String>) -> F,
    ) {
        let places: Vec<(&str, String)> = places.into_iter().collect();
        for (name, shared) in &self.connections {
            let mut mine: Vec<String> =
                places.iter().filter(|(connection, _)| connection == name).map(|(_, place)| place.clone()).collect();
            mine.sort();
            mine.dedup();
            self.runtime.spawner().handle().spawn(wake_ups(shared.clone(), mine));
        }
    }

    /// Every connection, to close them.
    pub fn each(&self) -> impl Iterator<Item = &C> {
        self.connections.values().map(|shared| &*shared.connection)
    }
}

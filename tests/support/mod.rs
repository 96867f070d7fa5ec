//! Helpers shared by the integration tests.

#![allow(dead_code)]

pub mod redis_server;

use std::sync::{Arc, Mutex};

use dokebi_lock::log::{LogRecord, Logger};
use dokebi_lock::{Hooks, Options, Provider};

/// A logger that keeps every record for assertions.
pub fn recording_logger() -> (Logger, Arc<Mutex<Vec<LogRecord>>>) {
    let records = Arc::new(Mutex::new(Vec::new()));
    let sink = records.clone();
    (Arc::new(move |record: &LogRecord| sink.lock().unwrap().push(record.clone())), records)
}

/// YAML for one redis backend `shared` on `url`, with extra backend fields
/// (`extra`, e.g. "leaseMs: 500\n        maxWaiters: 2") and connection fields.
pub fn redis_yaml(url: &str, backend: &str, connection: &str) -> String {
    format!(
        "schemaVersion: 1\noptions:\n  dokebi-redis:\n    connections:\n      main:\n        url: {url}\n{connection}  dokebi-lock:\n    backends:\n      shared:\n        driver: redis\n        connection: main\n        namespace: test\n{backend}"
    )
}

/// Opens a provider with one redis backend `shared` (see [`redis_yaml`]).
pub fn open_redis(url: &str, backend: &[(&str, &str)], connection: &[(&str, &str)]) -> (Provider, Arc<Mutex<Vec<LogRecord>>>) {
    let backend: String = backend.iter().map(|(k, v)| format!("        {k}: {v}\n")).collect();
    let connection: String = connection.iter().map(|(k, v)| format!("        {k}: {v}\n")).collect();
    let options = Options::from_yaml(&redis_yaml(url, &backend, &connection)).unwrap();
    let (logger, records) = recording_logger();
    (Provider::open_with(options, Hooks { logger, telemetry: None }).unwrap(), records)
}

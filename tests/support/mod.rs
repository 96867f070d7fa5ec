//! Helpers shared by the integration tests.

#![allow(dead_code)]

pub mod cluster;
pub mod deployment;
pub mod fall_back;
pub mod hosts;
pub mod lone_sentinel;
pub mod marks;
pub mod names;
pub mod older_release;
pub mod pki;
pub mod redis_server;
pub mod rng;
pub mod sentinel;
pub mod topology;

use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use dokebi_lock::log::{LogRecord, Logger};
use dokebi_lock::{AcquireOptions, Backend, Hooks, Options, Provider, StoreCounts};

/// One test at a time in a test binary that takes it: proxies' timing and
/// the SQL tests' lock waits are sensitive on a 2-core machine shared with
/// other builds.
pub fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
    ONE_AT_A_TIME.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The backend `shared` of `provider`.
pub fn backend(provider: &Provider) -> Backend {
    provider.backend("shared").unwrap()
}

/// The server's clock, in µs.
pub fn server_micros(server: &redis_server::RedisServer) -> u64 {
    let (seconds, micros): (u64, u64) = redis::cmd("TIME").query(&mut server.client()).unwrap();
    seconds * 1_000_000 + micros
}

/// The check every forced-release finding ends with: `w`, a lease granted
/// after the operator's (retried) break, still valid, must be the only
/// holder: `next` must not be granted `key` beside it.
pub fn no_second_holder(w: &dokebi_lock::Lease, next: &Backend, key: &str, what: &str) {
    let n = futures::executor::block_on(next.acquire(key, wait(3_000)));
    if let Ok(n) = &n {
        if w.is_valid() {
            panic!(
                "two holders of {key}: W (fence {}, granted after the operator's break, valid, never told) and N (fence {}): {what}",
                w.fence(),
                n.fence()
            );
        }
    }
}

/// The provider of `yaml`, its holders labelled `label`.
pub fn labelled(yaml: &str, label: &str) -> Provider {
    let mut options = Options::from_yaml(yaml).unwrap();
    options.holder = dokebi_lock::HolderLabel::new(label).unwrap();
    Provider::open(options).unwrap()
}

/// Acquire options that wait at most `ms`.
pub fn wait(ms: u64) -> AcquireOptions {
    AcquireOptions { wait_timeout: Some(Duration::from_millis(ms)), signal: None, ..AcquireOptions::default() }
}

/// The driver's own counts of a redis backend.
pub fn redis_counts(backend: &Backend) -> StoreCounts {
    match backend {
        Backend::Redis(redis) => redis.counts(),
        _ => panic!("not a redis backend"),
    }
}

/// Polls `condition` for up to 5 s.
pub fn eventually(what: &str, mut condition: impl FnMut() -> bool) {
    for _ in 0..500 {
        if condition() {
            return;
        }
        thread::sleep(Duration::from_millis(10));
    }
    panic!("timed out waiting until {what}");
}

/// Polls `condition` for up to `ms`; true once it held (the caller says
/// what it means when it did not).
pub fn within(ms: u64, mut condition: impl FnMut() -> bool) -> bool {
    let end = std::time::Instant::now() + Duration::from_millis(ms);
    loop {
        if condition() {
            return true;
        }
        if std::time::Instant::now() > end {
            return false;
        }
        thread::sleep(Duration::from_millis(20));
    }
}

/// What `backend` holds of `key` (`inspect`), blocking.
pub fn inspect(backend: &Backend, key: &str) -> dokebi_lock::Inspection {
    futures::executor::block_on(backend.inspect(key)).expect("inspected")
}

/// `key` acquired by `backend` with `options`, blocking: granted.
pub fn take(backend: &Backend, key: &str, options: AcquireOptions) -> dokebi_lock::Lease {
    futures::executor::block_on(backend.acquire(key, options)).expect("granted")
}

/// Releases `lease`, which was held.
pub fn release(lease: dokebi_lock::Lease) {
    assert!(futures::executor::block_on(lease.release()).unwrap(), "released while held");
}

/// A shared acquire that waits at most `ms`.
pub fn shared(ms: u64) -> AcquireOptions {
    AcquireOptions { mode: dokebi_lock::LockMode::Shared, ..wait(ms) }
}

/// A logger that keeps every record for assertions.
pub fn recording_logger() -> (Logger, Arc<Mutex<Vec<LogRecord>>>) {
    let records = Arc::new(Mutex::new(Vec::new()));
    let sink = records.clone();
    (Arc::new(move |record: &LogRecord| sink.lock().unwrap().push(record.clone())), records)
}

/// YAML for one redis backend `shared` on `url`, with extra backend fields
/// (`extra`, e.g. "leaseMs: 500\n        maxWaiters: 2") and connection fields.
pub fn redis_yaml(url: &str, backend: &str, connection: &str) -> String {
    redis_yaml_at(&format!("url: {url}"), backend, connection)
}

/// Like [`redis_yaml`], with the connection's endpoint given as one line of
/// YAML: `url: ...`, `sentinel: { ... }` or `cluster: { ... }` (see
/// `Sentinels::endpoint_yaml`, `Cluster::endpoint_yaml`).
pub fn redis_yaml_at(endpoint: &str, backend: &str, connection: &str) -> String {
    format!(
        "schemaVersion: 1\noptions:\n  dokebi-redis:\n    connections:\n      main:\n        {endpoint}\n{connection}  dokebi-lock:\n    backends:\n      shared:\n        driver: redis\n        connection: main\n        namespace: test\n{backend}"
    )
}

/// Opens a provider with one redis backend `shared` (see [`redis_yaml`]).
pub fn open_redis(url: &str, backend: &[(&str, &str)], connection: &[(&str, &str)]) -> (Provider, Arc<Mutex<Vec<LogRecord>>>) {
    open_redis_at(&format!("url: {url}"), backend, connection)
}

/// Opens a provider with one redis backend `shared` on the connection
/// endpoint `endpoint` (see [`redis_yaml_at`]).
pub fn open_redis_at(endpoint: &str, backend: &[(&str, &str)], connection: &[(&str, &str)]) -> (Provider, Arc<Mutex<Vec<LogRecord>>>) {
    let backend: String = backend.iter().map(|(k, v)| format!("        {k}: {v}\n")).collect();
    let connection: String = connection.iter().map(|(k, v)| format!("        {k}: {v}\n")).collect();
    let options = Options::from_yaml(&redis_yaml_at(endpoint, &backend, &connection)).unwrap();
    let (logger, records) = recording_logger();
    (Provider::open_with(options, Hooks { logger, ..Hooks::default() }).unwrap(), records)
}

/// A listener on `port` whose accept queue is full: SYNs to it go
/// unanswered, as for a host that is gone. Answers what keeps it so.
pub fn blackhole(port: u16) -> (std::net::TcpListener, Vec<std::net::TcpStream>) {
    let listener = std::net::TcpListener::bind(("127.0.0.1", port)).expect("bind the gone node's port");
    (listener, cluster::fill_accept_queue(port, Duration::from_millis(200)))
}

/// A Redis with a TLS port too (a certificate of `pki`, for `localhost` and
/// 127.0.0.1), with `extra` arguments (`--tls-auth-clients no` for none
/// asked of clients); and that TLS port.
pub fn tls_redis(pki: &pki::Pki, extra: &[&str]) -> (redis_server::RedisServer, u16) {
    pki.issue("server", "DNS:localhost,IP:127.0.0.1", None, false);
    let tls_port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let port = tls_port.to_string();
    let (cert, key, ca) = (pki.path("server.pem"), pki.path("server.key"), pki.path("ca.pem"));
    let mut args = vec!["--tls-port", &port, "--tls-cert-file", &cert, "--tls-key-file", &key, "--tls-ca-cert-file", &ca];
    args.extend_from_slice(extra);
    (redis_server::RedisServer::start_with(&args), tls_port)
}

/// Another process's lease of 30 s on `key` through the redis `endpoint`
/// (its `url:` or `cluster:` entry), and its provider.
pub fn redis_holder(endpoint: &str, key: &str) -> (Provider, dokebi_lock::Lease) {
    let (holder, _) = open_redis_at(endpoint, &[("leaseMs", "30000")], &[]);
    let lease = futures::executor::block_on(holder.backend("shared").unwrap().acquire(key, wait(0))).unwrap();
    (holder, lease)
}

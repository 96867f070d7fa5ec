//! A build without the redis driver (crate features): a backend naming it
//! is INVALID_OPTIONS at its `driver`, whether read from YAML or made in
//! code, and the others still open. Empty in builds with redis;
//! `cargo test --no-default-features --features file --test left_out_driver`
//! runs it (scripts/test does).
#![cfg(not(feature = "redis"))]

use dokebi_lock::options::{BackendOptions, Options, StoreOptions, Thresholds};
use dokebi_lock::{ErrorCode, Provider};

const MESSAGE: &str = "the redis driver is not compiled in (enable the crate feature `redis`)";

#[test]
fn a_redis_backend_in_the_options_is_refused_at_its_driver() {
    // Valid options in a build with redis.
    let yaml = "schemaVersion: 1\noptions:\n  dokebi-lock:\n    backends:\n      jobs: {}\n      shared:\n        driver: redis\n        connection: main\n        leaseMs: 10000\n  dokebi-redis:\n    connections:\n      main:\n        url: redis://127.0.0.1:6379\n";
    let err = Options::from_yaml(yaml).unwrap_err();
    assert_eq!(err.code(), ErrorCode::InvalidOptions);
    let issues = err.issues();
    assert_eq!(issues.len(), 1, "{issues:?}");
    assert_eq!((issues[0].path.as_str(), issues[0].message.as_str()), ("backends.shared.driver", MESSAGE));
    assert_eq!(err.message(), format!("invalid options: backends.shared.driver: {MESSAGE}"));
}

#[test]
fn a_redis_backend_made_in_code_is_refused_by_the_provider() {
    let mut options = Options::from_yaml("schemaVersion: 1\noptions:\n  dokebi-lock:\n    backends:\n      jobs: {}\n").unwrap();
    let store = StoreOptions {
        connection: "main".into(),
        namespace: "dokebi".into(),
        lease_ms: 10_000,
        wait_timeout_ms: 0,
        poll_interval_ms: 100,
        notify_poll_interval_ms: 1_000,
        max_waiters: 16,
        max_leases: 16,
        max_key_bytes: 1_024,
        shutdown_timeout_ms: 1_000,
        replica_acks: 0,
        fence_retention_ms: 60_000,
        thresholds: Thresholds { slow_acquire_ms: None, slow_hold_ms: None },
    };
    options.backends.insert("shared".into(), BackendOptions::Redis(store));
    let err = Provider::open(options.clone()).err().expect("a left-out driver's backend does not open");
    assert_eq!(err.code(), ErrorCode::InvalidOptions);
    assert_eq!(err.issues()[0].path, "backends.shared.driver");
    assert_eq!(err.issues()[0].message, MESSAGE);

    options.backends.remove("shared");
    let provider = Provider::open(options).unwrap();
    assert_eq!(provider.names(), ["jobs"]);
}

//! Lock kinds on the redis driver when Redis stalls (a real server, paused
//! with SIGSTOP): an unknown outcome on any part of a lease makes the whole
//! lease invalid, and what it held is cleaned up by token once Redis is back.

mod support;

use std::thread;
use std::time::Duration;

use dokebi_lock::{AcquireOptions, ErrorCode, LockMode};
use futures::executor::block_on;
use support::redis_server::RedisServer;
use support::topology::code;
use support::{eventually, open_redis, wait};

fn lock_keys(server: &RedisServer) -> Vec<String> {
    server.keys().into_iter().filter(|k| k.starts_with("test:lock:")).collect()
}

#[test]
fn an_unknown_renewal_of_a_shared_lease_over_several_keys_invalidates_it_and_cleans_every_key_up() {
    let server = RedisServer::start();
    let (provider, _) = open_redis(&server.url(), &[("leaseMs", "30000")], &[("commandTimeoutMs", "300"), ("connectTimeoutMs", "100")]);
    let backend = provider.backend("shared").unwrap();
    let options = AcquireOptions { mode: LockMode::Shared, ..wait(0) };
    let lease = block_on(backend.acquire_many(&["a", "b", "c"], options)).unwrap();
    assert_eq!(lock_keys(&server).len(), 3);
    server.pause();
    assert_eq!(code(block_on(lease.renew())), ErrorCode::OutcomeUnknown);
    assert!(!lease.is_valid(), "an unknown outcome on any part makes the whole lease invalid");
    thread::sleep(Duration::from_millis(200));
    server.resume();
    assert!(!block_on(lease.renew()).unwrap(), "never renewed again");
    eventually("the cleanup gave back every key", || lock_keys(&server).is_empty());
    block_on(provider.close());
}

#[test]
fn an_unanswered_counted_acquire_is_outcome_unknown_and_its_units_are_given_back() {
    let server = RedisServer::start();
    let (provider, _) = open_redis(&server.url(), &[("leaseMs", "30000")], &[("commandTimeoutMs", "300"), ("connectTimeoutMs", "100")]);
    let backend = provider.backend("shared").unwrap();
    let counted = |weight| AcquireOptions { limit: Some(2), weight: Some(weight), ..wait(0) };
    // Warm up: the connection is open when the server stalls.
    assert!(block_on(block_on(backend.acquire("jobs", counted(1))).unwrap().release()).unwrap());
    server.pause();
    assert_eq!(code(block_on(backend.acquire("jobs", counted(2)))), ErrorCode::OutcomeUnknown);
    server.resume();
    // The stalled script may have run: the cleanup gives its units back, so
    // every unit is free again (well before the 30 s lease would end).
    eventually("the units were given back", || match block_on(backend.acquire("jobs", counted(2))) {
        Ok(lease) => block_on(lease.release()).unwrap(),
        Err(_) => false,
    });
    block_on(provider.close());
}

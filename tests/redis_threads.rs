//! The redis driver's runtime exists only when a redis backend does: a
//! local-only provider starts no thread and opens no socket. (Its own test
//! binary, so that no other test's threads are counted.)

mod support;

use std::fs;

use dokebi_lock::{AcquireOptions, Provider};
use futures::executor::block_on;
use support::open_redis;
use support::redis_server::RedisServer;

fn threads() -> usize {
    fs::read_dir("/proc/self/task").unwrap().count()
}

fn sockets() -> usize {
    fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|entry| fs::read_link(entry.ok()?.path()).ok())
        .filter(|target| target.to_string_lossy().starts_with("socket:"))
        .count()
}

#[test]
fn only_a_provider_with_a_redis_backend_starts_a_thread_and_opens_sockets() {
    let (threads_before, sockets_before) = (threads(), sockets());
    let local = Provider::from_yaml("schemaVersion: 1\noptions:\n  dokebi-lock:\n    backends:\n      jobs: {}\n").unwrap();
    let lease = block_on(local.backend("jobs").unwrap().acquire("k", AcquireOptions::default())).unwrap();
    block_on(lease.release()).unwrap();
    assert_eq!((threads(), sockets()), (threads_before, sockets_before), "a local-only provider starts no thread, opens no socket");
    block_on(local.close());

    // The same measurement sees the redis driver's thread and sockets.
    let server = RedisServer::start();
    let (redis, _) = open_redis(&server.url(), &[("leaseMs", "1000")], &[("commandTimeoutMs", "900")]);
    let lease = block_on(redis.backend("shared").unwrap().acquire("k", AcquireOptions::default())).unwrap();
    assert!(threads() > threads_before);
    assert!(sockets() > sockets_before);
    block_on(lease.release()).unwrap();
}

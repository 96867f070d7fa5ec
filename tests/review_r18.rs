//! Review R18: a fresh adversarial read of the redis driver and the shared
//! lease layer on main (3d9c4d9), looking for two holders of a key or a
//! repeated fence, against private redis-servers.
//!
//! What was probed: the give-back a redis acquire sends after a try that
//! was sent twice (`RedisStore::give_back_untold`, `src/redis/store.rs`),
//! whose first attempt can be lost with its connection and still land late
//! (a proxy that cut its client, tests/faults/proxy.rs), while the acquire
//! goes on waiting with the same token; and, on a Redis Cluster, the
//! give-back of a split claim's slots granted before a busy one
//! (`Claim::give_back_groups`, `src/redis/claim.rs`), likewise. The SQL
//! drivers end such an acquire `OUTCOME_UNKNOWN` since review R10 (a
//! give-back whose first attempt was lost may still run later, so its token
//! is not used again); the redis driver retries the give-back on a fresh
//! connection, ignores that its first attempt was lost, and tries again
//! with the token. Both tests failed on every run (11 of 11 and 9 of 9):
//! the late give-back freed the lease's key while the lease was valid, and
//! another process was granted it. Fixed: such a give-back spends the
//! token (`Claim::spent`), and the acquire ends `OUTCOME_UNKNOWN` as on the
//! SQL drivers; the tests now check that, and that the key is free again
//! once the late give-back and the clean-up have landed.

mod support;

mod cluster_behind;
#[path = "faults/proxy.rs"]
mod proxy;

use std::time::{Duration, Instant};

use cluster_behind::one_node_cluster_behind_proxy;
use futures::executor::block_on;
use proxy::Proxy;
use support::redis_server::RedisServer;
use support::{eventually, open_redis, redis_counts, wait};

/// A waiting acquire on a provider whose connection goes through a proxy.
/// Its first try is lost with its connection (the proxy keeps it and cuts
/// the client), so the driver sends it again (`first_attempt_lost`); that
/// second send finds the key held by another process and leaves a mark.
/// Because the try was sent twice, the driver gives back whatever the first
/// send may have granted (`give_back_untold`: `RELEASE` by the token,
/// `ends` 0), and that give-back's first attempt is lost the same way but
/// kept by the proxy; its retry answers and the result is ignored. The
/// acquire waits on with the same token, is handed the key at the holder's
/// release and granted. Then the proxy delivered the kept give-back: it
/// found the lock carrying the token and deleted it, and a third process
/// was granted the key while the acquire's lease was valid.
#[test]
fn redis_an_acquire_whose_give_back_after_a_try_sent_twice_was_lost_ends_outcome_unknown() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port(), Duration::ZERO);
    let lease_ms = [("leaseMs", "30000")];
    let (through, _) = open_redis(&proxy.url(), &lease_ms, &[]);
    let (holder, _) = open_redis(&server.url(), &lease_ms, &[]);
    let (other, _) = open_redis(&server.url(), &lease_ms, &[]);
    let (waiter, holding, third) =
        (through.backend("shared").unwrap(), holder.backend("shared").unwrap(), other.backend("shared").unwrap());
    // Scripts loaded and the waiter's notifications up before any stall is armed.
    assert!(block_on(block_on(waiter.acquire("warm-up", wait(0))).unwrap().release()).unwrap());
    eventually("the waiter's provider subscribed", || redis_counts(&waiter).subscribed);

    let held = block_on(holding.acquire("k", wait(0))).unwrap();
    // The acquire script names the fence counter; the release script (the
    // give-back) names the release channel; neither names the other's.
    let take = proxy.stall(b"lock-fence:{");
    let give_back = proxy.stall(b"test:lock-released");
    let acquire = std::thread::spawn(move || block_on(waiter.acquire("k", wait(15_000))));
    eventually("the try and the give-back's first attempt were lost with their connections", || take.caught() && give_back.caught());
    // The waiter goes on waiting; the holder's release hands it the key.
    std::thread::sleep(Duration::from_millis(300));
    assert!(block_on(held.release()).unwrap());
    let outcome = acquire.join().unwrap();
    give_back.deliver();
    take.deliver();
    let freed = free_again(&third, "k");
    for provider in [through, holder, other] {
        block_on(provider.close());
    }
    assert_spent(outcome);
    assert!(freed, "k was not free again within 5 s of the acquire's end (its clean-up)");
}

/// The acquire whose give-back went unanswered on its first attempt ended
/// `OUTCOME_UNKNOWN`: its token, which that attempt may still free
/// whenever it lands, is granted nothing more. Before the fix it was
/// granted, and the late give-back freed its key under the lease while
/// another process was granted it.
fn assert_spent(outcome: Result<dokebi_lock::Lease, dokebi_lock::LockError>) {
    match outcome {
        Err(err) => assert_eq!(err.code(), dokebi_lock::ErrorCode::OutcomeUnknown, "{err:?}"),
        Ok(lease) => panic!("granted (fences {:?}) with a token whose give-back may still land", lease.fences()),
    }
}

/// True once `key` is granted to `backend` again (within 5 s): nothing the
/// ended acquire or its late give-back left holds it.
fn free_again(backend: &dokebi_lock::Backend, key: &str) -> bool {
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(5) {
        if let Ok(lease) = block_on(backend.acquire(key, wait(0))) {
            return block_on(lease.release()).is_ok();
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

/// The same on a Redis Cluster, where it needs no try sent twice: an
/// acquire of two keys in two slots is taken one slot at a time, and when
/// the second slot's key is held the first slot's grant is given back
/// (`Claim::give_back_groups`) before the acquire waits on with its token.
/// That give-back's first attempt is lost with its connection (kept by the
/// proxy), its retry answers, and the acquire goes on; once the second key
/// is released it was granted both keys, and the kept give-back, delivered,
/// freed the first key under its lease: a third process was granted it.
#[test]
fn redis_cluster_an_acquire_whose_give_back_of_a_first_slot_was_lost_ends_outcome_unknown() {
    let (server, proxy, dir) = one_node_cluster_behind_proxy("r18");
    // Lease terms no other argument spells: the give-back of a slot sends
    // them followed by a wait of 0 and mode x; a waiting try by 1500.
    let lease_ms = [("leaseMs", "31234")];
    let cluster = format!("cluster: {{ nodes: ['{}'] }}", proxy.url());
    let (through, _) = support::open_redis_at(&cluster, &lease_ms, &[]);
    // The other processes are Cluster clients too (through the same proxy,
    // as the node announces it), with terms the stall does not match.
    let (holder, _) = support::open_redis_at(&cluster, &[("leaseMs", "30000")], &[]);
    let (other, _) = support::open_redis_at(&cluster, &[("leaseMs", "30000")], &[]);
    let (waiter, holding, third) =
        (through.backend("shared").unwrap(), holder.backend("shared").unwrap(), other.backend("shared").unwrap());
    // The claim takes its slots in the order of their lock names: `first`
    // is taken first, `second` is the one held.
    let mut keys = ["a", "b"];
    keys.sort_by_key(|key| support::names::lock_key("test", key));
    let [first, second] = keys;
    assert!(block_on(block_on(waiter.acquire_many(&["w1", "w2"], wait(0))).unwrap().release()).unwrap());
    eventually("the waiter's provider subscribed", || redis_counts(&waiter).subscribed);

    let held = block_on(holding.acquire(second, wait(0))).unwrap();
    let give_back = proxy.stall(b"$5\r\n31234\r\n$1\r\n0\r\n$1\r\nx");
    let acquire = std::thread::spawn(move || block_on(waiter.acquire_many(&[first, second], wait(15_000))));
    eventually("the give-back of the first slot was lost with its connection", || give_back.caught());
    std::thread::sleep(Duration::from_millis(300));
    assert!(block_on(held.release()).unwrap());
    let outcome = acquire.join().unwrap();
    give_back.deliver();
    let freed = free_again(&third, first);
    for provider in [through, holder, other] {
        block_on(provider.close());
    }
    drop(server);
    let _ = std::fs::remove_dir_all(dir);
    assert_spent(outcome);
    assert!(freed, "{first} was not free again within 5 s of the acquire's end (its clean-up)");
}

/// Probe that held: `DEBUG RELOAD` (an RDB written and loaded: exact
/// counters, no reservation) and `DEBUG LOADAOF` (reservations), each
/// twice or mixed within a second, between grants of a plain, a shared, a
/// counted key and a set of two keys (`appendonly yes`, `appendfsync
/// always`): every key's fences still rise strictly.
#[test]
fn redis_fences_rise_across_reloads_and_aof_loads_within_a_second() {
    use dokebi_lock::{AcquireOptions, LockMode};
    let server = RedisServer::start_persistent(&["--appendonly", "yes", "--appendfsync", "always", "--enable-debug-command", "yes"]);
    let (provider, _) = open_redis(&server.url(), &[("leaseMs", "5000"), ("waitTimeoutMs", "3000")], &[]);
    let backend = provider.backend("shared").unwrap();
    let shared = AcquireOptions { mode: LockMode::Shared, ..wait(3000) };
    let counted = AcquireOptions { limit: Some(3), weight: Some(2), ..wait(3000) };
    let mut last: std::collections::HashMap<String, u64> = std::collections::HashMap::new();
    let mut grant = |key: &str, lease: dokebi_lock::Lease| {
        for (k, fence) in lease.fences() {
            let name = format!("{key}/{k}");
            if let Some(&before) = last.get(&name) {
                assert!(fence > before, "{name}: fence {fence} after {before}");
            }
            last.insert(name, fence);
        }
        assert!(block_on(lease.release()).unwrap());
    };
    let debug = |what: &str| {
        let _: redis::Value = redis::cmd("DEBUG").arg(what).query(&mut server.client()).unwrap();
    };
    let started = Instant::now();
    for round in 0..12 {
        grant("plain", block_on(backend.acquire("p", wait(3000))).unwrap());
        grant("shared", block_on(backend.acquire("s", shared.clone())).unwrap());
        grant("counted", block_on(backend.acquire("c", counted.clone())).unwrap());
        grant("set", block_on(backend.acquire_many(&["m1", "m2", "p"], wait(3000))).unwrap());
        match round % 4 {
            0 => debug("RELOAD"),
            1 => debug("LOADAOF"),
            2 => {
                debug("RELOAD");
                debug("LOADAOF");
            }
            _ => {
                debug("LOADAOF");
                debug("RELOAD");
            }
        }
    }
    eprintln!("12 rounds in {:?}", started.elapsed());
    block_on(provider.close());
}

//! Review R18: a fresh adversarial read of the redis driver and the shared
//! lease layer on main (3d9c4d9), looking for two holders of a key or a
//! repeated fence, against private redis-servers.
//!
//! What was probed: the give-back a redis acquire sends after a try that
//! was sent twice (`RedisStore::give_back_untold`, `src/redis/store.rs`),
//! whose first attempt can be lost with its connection and still land late
//! (a proxy that cut its client, tests/faults/proxy.rs), while the acquire
//! goes on waiting with the same token; the SQL drivers end such an acquire
//! `OUTCOME_UNKNOWN` since review R10, the redis driver did not.

mod support;

#[path = "faults/proxy.rs"]
mod proxy;

use std::time::{Duration, Instant};

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
/// release and granted. Then the proxy delivers the kept give-back: it
/// finds the lock carrying the token and deletes it, and a third process is
/// granted the key while the acquire's lease is valid.
#[test]
#[ignore = "two holders: a redis acquire whose give-back after a try sent twice was lost goes on with the same token, and that give-back, landing late, frees its grant"]
fn redis_a_late_give_back_after_a_try_sent_twice_frees_the_grant_of_its_token() {
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
    let lease = acquire.join().unwrap().expect("the waiter is granted the key at the holder's release");
    assert!(block_on(third.acquire("k", wait(0))).is_err(), "held by the waiter before the late give-back lands");

    give_back.deliver();
    let delivered = Instant::now();
    let mut second = None;
    while second.is_none() && delivered.elapsed() < Duration::from_secs(3) {
        second = block_on(third.acquire("k", wait(0))).ok();
        std::thread::sleep(Duration::from_millis(20));
    }
    let valid = lease.is_valid();
    let fences = (lease.fence(), second.as_ref().map(|second| second.fence()));
    take.deliver();
    if let Some(second) = second {
        let _ = block_on(second.release());
    }
    let _ = block_on(lease.release());
    for provider in [through, holder, other] {
        block_on(provider.close());
    }
    assert!(
        !(valid && fences.1.is_some()),
        "two holders: the waiter's lease (fence {}) is valid and another process was granted the key (fence {:?})",
        fences.0,
        fences.1
    );
}

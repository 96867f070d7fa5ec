//! Review R50: `Backend::force_release` on Redis (the `FORCE_RELEASE`
//! script, `RedisStore::force_release`), against real servers.
//!
//! Findings (these tests failed against the code under review; both pass
//! since: a break's call id, and a `WAIT` for `replicaAcks`):
//! - `force_release_sent_again_after_its_answer_was_lost_removes_the_next_holder`:
//!   the transport sends a script again on a fresh connection when the
//!   connection drops before the answer ("all scripts compare the owner
//!   token, so a retry is harmless"). `FORCE_RELEASE` compares no token:
//!   its second run removes whoever was granted the key after the first
//!   run (woken by the first run's own PUBLISH), and the key goes on to a
//!   third holder while the removed one's lease is valid and nobody, the
//!   operator included, was told that holder was broken.
//! - `force_release_with_replica_acks_is_lost_by_a_failover_and_the_holder_renews`:
//!   `replicaAcks` makes every grant and renewal wait for replicas, so a
//!   failover keeps them; the break does not wait. A failover right after
//!   it promotes a replica that still has the removed holder, whose
//!   renewals (acknowledged by replicas) go on succeeding.
//!
//! Probes that hold (pass): a break between a release's hand-off
//! (`h:<token>`) and the waiter's take; a counted key broken with a counted
//! waiter queued (units never above the limit, a removed holder's late
//! release takes no units back); the break replicated and promoted.

mod support;

#[path = "faults/proxy.rs"]
mod proxy;

use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use dokebi_lock::{AcquireOptions, ErrorCode};
use futures::executor::block_on;
use proxy::Proxy;
use support::redis_server::RedisServer;
use support::{backend, eventually, inspect, open_redis, redis_counts, take, wait};

fn link_up(server: &RedisServer) -> bool {
    let info: String = redis::cmd("INFO").arg("replication").query(&mut server.client()).unwrap_or_default();
    info.lines().any(|line| line.trim() == "master_link_status:up")
}

/// Finding 1 (two holders). Interleaving:
/// 1. H holds `k`; W (another process) waits for it.
/// 2. The operator's `force_release(k)` (through a link with 400 ms of
///    latency each way) runs on the server: H removed, PUBLISH.
/// 3. W, woken by that PUBLISH, is granted `k` (fence above the break's).
/// 4. The operator's connection drops before the answer comes back: the
///    transport sends the script again on a fresh connection
///    (`first_attempt_lost`), and that second run removes W, a holder
///    granted after the break, and publishes again.
/// 5. N is granted `k` while W's lease is valid: W was told it holds the
///    key, and nobody told it (or the operator, whose answer says one
///    holder removed) otherwise until W's next renewal.
///
/// The same happens, with no drop needed in between, when a proxy delivers
/// the first attempt late (as in review R18). Each break now carries a call
/// id the script records, so the second run changes nothing.
#[test]
fn force_release_sent_again_after_its_answer_was_lost_removes_the_next_holder() {
    let server = RedisServer::start();
    let link = Proxy::start(server.port(), Duration::ZERO);
    let lease = [("leaseMs", "30000")];
    let (operator, _) = open_redis(&link.url(), &lease, &[("commandTimeoutMs", "5000")]);
    let (holder, _) = open_redis(&server.url(), &lease, &[]);
    let (waiter, _) = open_redis(&server.url(), &lease, &[]);
    let (next, _) = open_redis(&server.url(), &lease, &[]);
    let (operator_b, holder_b, waiter_b, next_b) = (backend(&operator), backend(&holder), backend(&waiter), backend(&next));
    // The script loaded (no NOSCRIPT round) and the waiter subscribed.
    block_on(operator_b.force_release("warm-up")).expect("a first break");
    eventually("the waiter's provider subscribed", || redis_counts(&waiter_b).subscribed);

    let held = take(&holder_b, "k", wait(0));
    let (granted_tx, granted_rx) = mpsc::channel();
    let waiting = {
        let waiter_b = waiter_b.clone();
        thread::spawn(move || {
            let lease = block_on(waiter_b.acquire("k", wait(20_000)));
            let _ = granted_tx.send(());
            lease
        })
    };
    eventually("the waiter waits", || inspect(&holder_b, "k").waiting == 1);

    link.set_latency(Duration::from_millis(400));
    let breaking = thread::spawn(move || block_on(operator_b.force_release("k")));
    granted_rx.recv_timeout(Duration::from_secs(5)).expect("the waiter is granted once the break ran");
    // The break ran (the waiter has the key); its answer is still on the link.
    link.cut();
    let forced = breaking.join().unwrap();
    let w = waiting.join().unwrap().expect("the waiter was granted");
    assert!(w.fence() > held.fence());
    let n = block_on(next_b.acquire("k", wait(5_000)));
    if let Ok(n) = &n {
        if w.is_valid() {
            panic!(
                "two holders of k: W (fence {}, granted after the break, valid, never told) and N (fence {}); \
                 the operator's answer was {forced:?} (W was removed by the break's second run)",
                w.fence(),
                n.fence()
            );
        }
    }
    for provider in [operator, holder, waiter, next] {
        block_on(provider.close());
    }
}

/// Finding 2 (a removed holder renews). Interleaving, with `replicaAcks: 1`
/// on every process:
/// 1. H holds `k`: its grant acknowledged by the replica R.
/// 2. R's replication link lags (held); the operator's `force_release(k)`
///    answers at once, `removed: 1`, without waiting for R.
/// 3. The primary dies; R is promoted (its own replica R2 goes on
///    acknowledging); clients follow.
/// 4. R still has H's lock: H's renewal succeeds, acknowledged by R2: the
///    removed holder keeps its lease, as a grant or a renewal would have
///    been kept, but the break was not.
#[test]
fn force_release_with_replica_acks_is_lost_by_a_failover_and_the_holder_renews() {
    let primary = RedisServer::start();
    let link = Proxy::start(primary.port(), Duration::ZERO);
    let replica = RedisServer::start_persistent(&["--replicaof", "127.0.0.1", &link.port().to_string()]);
    eventually("the replica is synced", || replica.replica_synced());
    let below = RedisServer::start_persistent(&["--replicaof", "127.0.0.1", &replica.port().to_string()]);
    eventually("the replica's replica is synced", || link_up(&below));
    let front = Proxy::start(primary.port(), Duration::ZERO);
    let terms = [("leaseMs", "30000"), ("replicaAcks", "1")];
    let connection = [("commandTimeoutMs", "2000")];
    let (holder, _) = open_redis(&front.url(), &terms, &connection);
    let (operator, _) = open_redis(&primary.url(), &terms, &connection);
    let (holder_b, operator_b) = (backend(&holder), backend(&operator));
    eventually("a first grant is acknowledged", || match block_on(holder_b.acquire("warm-up", wait(0))) {
        Ok(lease) => block_on(lease.release()).unwrap(),
        Err(_) => false,
    });
    eventually("the operator's WAIT is met", || block_on(operator_b.force_release("warm-up")).is_ok());
    let held = take(&holder_b, "k", wait(0));

    link.hold();
    let forced = block_on(operator_b.force_release("k"));
    let Ok(forced) = forced else {
        // What a fix answers: the break was not acknowledged.
        return;
    };
    assert_eq!(forced.removed, 1);
    let mut primary = primary;
    primary.stop();
    replica.replicate_from(None);
    front.retarget(replica.port());
    let deadline = Instant::now() + Duration::from_secs(8);
    let mut last = None;
    while Instant::now() < deadline {
        match block_on(held.renew()) {
            Ok(true) => panic!(
                "the holder removed by {forced:?} (answered with replicaAcks 1) renewed its lease (fence {}) on the promoted replica",
                held.fence()
            ),
            Ok(false) => return,
            Err(err) => last = Some(err),
        }
        thread::sleep(Duration::from_millis(200));
    }
    panic!("no renewal answered after the failover: {last:?}");
}

/// Probe (holds): a break between a release's hand-off (`h:<W>`) and W's
/// take leaves the key W's (not a holder: removed 0); W's take is granted a
/// fence above the break's, and nobody else is granted meanwhile.
#[test]
fn probe_force_release_between_a_hand_off_and_the_take() {
    let server = RedisServer::start();
    let slow = Proxy::start(server.port(), Duration::ZERO);
    let lease = [("leaseMs", "30000")];
    let (holder, _) = open_redis(&server.url(), &lease, &[]);
    let (waiter, _) = open_redis(&slow.url(), &lease, &[]);
    let (operator, _) = open_redis(&server.url(), &lease, &[]);
    let (holder_b, waiter_b, operator_b) = (backend(&holder), backend(&waiter), backend(&operator));
    block_on(operator_b.force_release("warm-up")).unwrap();
    eventually("the waiter's provider subscribed", || redis_counts(&waiter_b).subscribed);
    let held = take(&holder_b, "k", wait(0));
    let waiting = {
        let waiter_b = waiter_b.clone();
        thread::spawn(move || block_on(waiter_b.acquire("k", wait(20_000))))
    };
    eventually("the waiter waits", || inspect(&holder_b, "k").waiting == 1);
    slow.set_latency(Duration::from_millis(500));
    thread::sleep(Duration::from_millis(50));
    assert!(block_on(held.release()).unwrap());
    let forced = block_on(operator_b.force_release("k")).unwrap();
    assert_eq!(forced.removed, 0, "a hand-off is no holder");
    let fence = forced.fence.unwrap();
    assert!(fence > held.fence());
    assert!(block_on(holder_b.acquire("k", wait(0))).is_err(), "the key is the waiter's");
    let w = waiting.join().unwrap().expect("the waiter takes its hand-off");
    assert!(w.fence() > fence, "the take's fence {} is above the break's {fence}", w.fence());
    assert!(block_on(holder_b.acquire("k", wait(0))).is_err());
}

/// Probe (holds): a counted key (limit 3) broken while a counted waiter of
/// weight 2 is queued: the waiter is granted, a third request of weight 2
/// is refused (units 2 of 3), and the removed holder's late release takes
/// nothing back (`LEASE_LOST`, the third still refused).
#[test]
fn probe_force_release_of_a_counted_key_with_a_queued_waiter() {
    let server = RedisServer::start();
    let lease = [("leaseMs", "30000")];
    let (a, _) = open_redis(&server.url(), &lease, &[]);
    let (b, _) = open_redis(&server.url(), &lease, &[]);
    let (c, _) = open_redis(&server.url(), &lease, &[]);
    let (a_b, b_b, c_b) = (backend(&a), backend(&b), backend(&c));
    let counted = |weight, ms| AcquireOptions { limit: Some(3), weight: Some(weight), ..wait(ms) };
    let held = take(&a_b, "c", counted(2, 0));
    eventually("b subscribed", || redis_counts(&b_b).subscribed);
    let waiting = {
        let b_b = b_b.clone();
        thread::spawn(move || block_on(b_b.acquire("c", counted(2, 20_000))))
    };
    eventually("the counted waiter is queued", || inspect(&a_b, "c").waiting == 1);
    let forced = block_on(c_b.force_release("c")).unwrap();
    assert_eq!(forced.removed, 1);
    let granted = waiting.join().unwrap().expect("the queued waiter is granted");
    assert!(granted.fence() > forced.fence.unwrap());
    assert!(block_on(c_b.acquire("c", counted(2, 0))).is_err(), "2 + 2 units are above the limit 3");
    assert_eq!(block_on(held.release()).unwrap_err().code(), ErrorCode::LeaseLost);
    assert!(block_on(c_b.acquire("c", counted(2, 0))).is_err(), "a removed holder's release takes no units back");
    let one = take(&c_b, "c", counted(1, 0));
    assert!(block_on(c_b.acquire("c", counted(1, 0))).is_err(), "3 of 3 units held");
    drop(one);
}

/// Probe (holds): the break is replicated; a replica promoted once in sync
/// has no holder, and its next grant's fence is above the break's.
#[test]
fn probe_force_release_is_replicated() {
    let primary = RedisServer::start();
    let replica = RedisServer::start_persistent(&["--replicaof", "127.0.0.1", &primary.port().to_string()]);
    eventually("the replica is synced", || replica.replica_synced());
    let lease = [("leaseMs", "30000")];
    let (holder, _) = open_redis(&primary.url(), &lease, &[]);
    let held = take(&backend(&holder), "k", wait(0));
    let readers = [take(&backend(&holder), "r", support::shared(0)), take(&backend(&holder), "r", support::shared(0))];
    let forced = block_on(backend(&holder).force_release("k")).unwrap();
    assert_eq!(block_on(backend(&holder).force_release("r")).unwrap().removed, 2);
    eventually("the replica is synced", || replica.replica_synced());
    let mut primary = primary;
    primary.stop();
    replica.replicate_from(None);
    let (other, _) = open_redis(&replica.url(), &lease, &[]);
    let next = take(&backend(&other), "k", wait(3_000));
    assert!(next.fence() > forced.fence.unwrap() && forced.fence.unwrap() > held.fence());
    let _writer = take(&backend(&other), "r", wait(3_000));
    drop(readers);
}

/// Probe (holds): with the counter brought back by an AOF load as its
/// reservation (up to a second ahead of the clock), a break waits for the
/// clock and answers a fence above the reservation, and a restart from the
/// AOF after the break keeps the holder removed and the next fence above.
#[test]
fn probe_force_release_after_an_aof_load_and_across_a_restart() {
    let mut server = RedisServer::start_persistent(&["--appendonly", "yes", "--appendfsync", "always", "--enable-debug-command", "yes"]);
    let lease = [("leaseMs", "30000")];
    let (holder, _) = open_redis(&server.url(), &lease, &[]);
    let held = take(&backend(&holder), "k", wait(0));
    let _: String = redis::cmd("DEBUG").arg("LOADAOF").query(&mut server.client()).unwrap();
    let counter: u64 = {
        let name = support::names::lock_key("test", "k").replace(":lock:", ":lock-fence:");
        redis::cmd("GET").arg(name).query(&mut server.client()).unwrap()
    };
    assert!(counter > held.fence());
    let forced = block_on(backend(&holder).force_release("k")).unwrap();
    assert_eq!(forced.removed, 1);
    assert!(forced.fence.unwrap() > counter, "{forced:?} above the reservation {counter}");
    block_on(holder.close());
    server.stop();
    server.restart();
    let (other, _) = open_redis(&server.url(), &lease, &[]);
    let next = take(&backend(&other), "k", wait(3_000));
    assert!(next.fence() > forced.fence.unwrap());
}

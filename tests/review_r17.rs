//! Review R17: ways to give a key two holders through a policy that falls
//! back (`onUnavailable: fallBack`) beyond the exceptions docs/policy.md
//! lists, against private redis-servers, after main made only a connect
//! whose socket never came up unreachable (`src/store/reach.rs`).
//!
//! Each test holds `k` on a server that is up and serving its holder, and
//! asks a fresh process's policy for it: served by `host`, the key has two
//! holders. The ignored ones failed on main (served by `host`).

mod support;

use std::time::Duration;

use futures::executor::block_on;
use support::fall_back::FallBackToHost;
use support::topology::lock_key;
use support::wait;

/// A Cluster whose seed answers its slot map late (stalled past
/// `commandTimeoutMs`, within `connectTimeoutMs`), and whose primary for
/// `k`'s slot, holding `k` for its holder, is stalled too (here frozen
/// with its replica, so that no failover moves the slot). The acquire's
/// connect to that primary gets its socket up (the kernel takes it) and
/// would end unanswered at `connectTimeoutMs`; but `eval`'s `within`
/// bound (`connectTimeoutMs + commandTimeoutMs` from the acquire's start,
/// most of it spent on the slot map) cuts it first, and reads the cut as
/// `Failure::Unreachable` whatever its `Reach` says: the policy moves `k`.
#[test]
fn redis_cluster_connect_cut_by_the_command_bound_never_moves_a_held_key() {
    let cluster = support::cluster::Cluster::start();
    let (holder, _) = support::open_redis_at(&cluster.endpoint_yaml(), &[("leaseMs", "30000")], &[]);
    let lease = block_on(holder.backend("shared").unwrap().acquire("k", wait(0))).unwrap();
    let primary = cluster.primary_of(&lock_key("k"));
    let replica = cluster.replica_of(primary).expect("a replica of k's primary");
    let seed = cluster.primaries().into_iter().find(|&port| port != primary).unwrap();
    for port in [primary, replica, seed] {
        cluster.pause(port);
    }
    let policy = FallBackToHost::open_on(
        "redis",
        &format!("cluster: {{ nodes: [redis://127.0.0.1:{seed}] }}, connectTimeoutMs: 3000, commandTimeoutMs: 1000"),
        "namespace: test, leaseMs: 30000",
        5000,
    );
    let served = std::thread::scope(|scope| {
        // The seed answers after 1.5 s: past commandTimeoutMs, within connectTimeoutMs.
        scope.spawn(|| {
            std::thread::sleep(Duration::from_millis(1500));
            cluster.resume(seed);
        });
        let started = std::time::Instant::now();
        let why = "k's primary took the socket and was stalled; the command's bound cut its connect, read as unreachable";
        // Caught so that the frozen nodes answer again before the providers close.
        let served = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| policy.acquire_held_within("k", lease.fence(), 10_000, why)));
        eprintln!("the policy's acquire ended after {:?}", started.elapsed());
        served
    });
    cluster.resume(primary);
    cluster.resume(replica);
    drop(policy);
    let _ = block_on(lease.release());
    block_on(holder.close());
    if let Err(panic) = served {
        std::panic::resume_unwind(panic);
    }
}

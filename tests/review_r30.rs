//! Review R30: ways to get two holders of a key through a `fallBack`
//! policy after bfb6096 and be7fbf2 (through Sentinel, a member is
//! unreachable only when no sentinel is found up), against private
//! redis-servers.
//!
//! Held (read, not run): through Sentinel, every path that connects to the
//! primary passes the connect's own `Reach` to `Sentinel::primary`
//! (`RedisConnection::open`, on the host lane and the runtime lane alike;
//! each retry of `eval` makes a connect, and a `Reach`, of its own); the
//! release-notification subscriber's fresh `Reach` and the failover watch
//! (`+switch-master`) never classify an acquire's failure; a failure kept
//! by `CONNECT_FAILURE_REUSE` is the classification of a connect made
//! 100 ms before; a `#insecure` or verified TLS sentinel that closes
//! before the handshake fails `UnexpectedEof` through rustls, which is no
//! sign of down; a connect cut by close ends `CLOSED` before the router.
//!
//! Fixed (the test failed before, 5 of 5 runs): a cluster node whose
//! connect fails is followed by a fresh slot map within the command's whole
//! bound, and when a node gives a map that still names it, its connect is
//! refused, not unreachable. Review R31 (read-only) found that a fetch
//! which reached nodes that gave no map (refused, stalled) still left it
//! unreachable; the second test shows it (it failed before: served by
//! `host`) and now passes: only a cluster none of whose nodes can be
//! reached reads as unreachable. R31's finding B (reasoned): a fresh-map
//! fetch that did not end within the command's bound (sources whose SYNs
//! go unanswered asked first, each taking its share) left the connect
//! unreachable; the third test confirmed it (it failed before: served by
//! `host`) and now passes: the fetch after a failed connect asks every
//! source within a whole `commandTimeoutMs` of its own.
//!
//! Finding (two holders through a policy, Redis Cluster): the class of
//! review R29 on the Cluster path, from the client's own slot map. A
//! process whose map names a primary that is gone (its host powered off
//! or cut off: SYNs go unanswered) while the cluster has already failed
//! its slots over to the replica, which holds `k` for its holder: the
//! acquire routes to the gone node, whose connect ends at
//! `connectTimeoutMs` with no socket (unreachable). `eval` asks for a
//! fresh map (`rerouted`) only while `tokio::Instant::now() < deadline`,
//! `deadline` being `started + commandTimeoutMs`: when `connectTimeoutMs`
//! is at least `commandTimeoutMs` (the defaults: 5000 and 2000) that has
//! passed, so no node is asked, the map is not even marked stale, and the unreachable failure goes to the router,
//! which serves `k` from `host`. Every node the process could ask is up
//! and names the new primary. And since the map is never marked stale,
//! every acquire more than `CONNECT_FAILURE_REUSE` apart does the same
//! once `reprobeCooldownMs` lets the policy try `db` again (read, not run;
//! within the cooldown the policy skips `db` and serves `host` anyway).
//! Confirmed below
//! (`redis_cluster_a_stale_map_naming_a_gone_primary_never_moves_a_held_key`:
//! served by `host` after 1.0 s, 4 of 4 runs, the holder's release then
//! `Ok(true)`; with the default timeouts too, after 5.0 s, 1 of 1).
//!
//! Suggested fix: mark the map stale on every connect failure to a cluster
//! node, and ask for a fresh map within the command's bound (`end`), not
//! `commandTimeoutMs` from the start; read the failure as unreachable only
//! when no map source was found up (as `Sentinel::primary` now does for
//! sentinels, with `reached_first`).

mod support;

use std::time::Duration;

use support::fall_back::FallBackToHost;
use support::topology::lock_key;

/// Finding: see the module docs.
#[test]
fn redis_cluster_a_stale_map_naming_a_gone_primary_never_moves_a_held_key() {
    let cluster = support::cluster::Cluster::start();
    let primary = cluster.primary_of(&lock_key("k"));
    gone_nodes_never_move_a_held_key(cluster, "k", &[primary], "connectTimeoutMs: 1000, commandTimeoutMs: 500");
}

/// Review R31's finding B: as above, and another node the process's map
/// names, asked first for a fresh map (the owner of slot 0), is gone too,
/// with a connect timeout longer than the command's: after the connect to
/// the key's node took all of `connectTimeoutMs`, what was left of the
/// command's bound ended before the next source's turn (each had a share
/// of connect plus command), so no node up was asked and the connect read
/// as unreachable.
#[test]
fn redis_cluster_a_gone_node_asked_first_for_a_map_never_moves_a_held_key() {
    let cluster = support::cluster::Cluster::start();
    let first = cluster.primary_of_slot(0);
    let name = (0..).map(|i| format!("k{i}")).find(|name| cluster.primary_of(&lock_key(name)) != first).unwrap();
    let primary = cluster.primary_of(&lock_key(&name));
    gone_nodes_never_move_a_held_key(cluster, &name, &[first, primary], "connectTimeoutMs: 1500, commandTimeoutMs: 500");
}

/// The policy's process learns the slot map (`name`'s slot on the last of
/// `gone`); each of `gone` hands its slots to its replica and goes (its
/// SYNs unanswered, as for a host powered off); another process holds
/// `name` on its new primary. The policy's acquire must not be served by
/// `host`.
fn gone_nodes_never_move_a_held_key(mut cluster: support::cluster::Cluster, name: &str, gone: &[u16], timeouts: &str) {
    let seed = cluster.primaries().into_iter().find(|port| !gone.contains(port)).unwrap();
    let endpoint = format!("cluster: {{ nodes: [redis://127.0.0.1:{seed}] }}");
    let policy = FallBackToHost::on_redis_with(&endpoint, timeouts);
    policy.warm(name);
    let mut holes = Vec::new();
    for &port in gone {
        cluster.failover(cluster.replica_of(port).expect("a replica"), Duration::from_secs(30));
        cluster.kill(port);
        holes.push(support::blackhole(port));
    }
    cluster.wait_ok(Duration::from_secs(30));
    let primary = cluster.primary_of(&lock_key(name));
    let (holder, lease) = support::redis_holder(&endpoint, name);
    assert!(cluster.exists_on(primary, &lock_key(name)));
    let why = "the process's slot map named nodes that are gone; every other node it could ask is up and names the new primary that holds the key";
    policy.never_served_from_host(holder, lease, name, 3000, why, || drop(holes));
}

/// Review R31's finding A: the process's slot map names a primary that is
/// gone (refused at once), and every node it may ask for a fresh map is up
/// but refuses `CLUSTER SLOTS` (here an ACL; a node at `maxclients`, or one
/// stalled, is the same): a map fetch that reached nodes and got no map
/// read as if none was reached, the connect stayed unreachable, and a
/// policy served from `host` a key the cluster's new primary held.
#[test]
fn redis_cluster_a_stale_map_whose_sources_refuse_a_new_one_never_moves_a_held_key() {
    let mut cluster = support::cluster::Cluster::start();
    let primary = cluster.primary_of(&lock_key("k"));
    let replica = cluster.replica_of(primary).expect("a replica of k's primary");
    let seed = cluster.primaries().into_iter().find(|&port| port != primary).unwrap();
    let endpoint = format!("cluster: {{ nodes: [redis://127.0.0.1:{seed}] }}");
    let policy = FallBackToHost::on_redis_with(&endpoint, "connectTimeoutMs: 1000");
    policy.warm("k");
    cluster.kill(primary);
    cluster.wait_ok(Duration::from_secs(30));
    assert_eq!(cluster.primary_of(&lock_key("k")), replica);
    let (holder, lease) = support::redis_holder(&endpoint, "k");
    // Every node but the one holding k refuses the map from now on.
    let refusing: Vec<u16> = cluster.primaries().into_iter().filter(|&port| port != replica).collect();
    for &port in &refusing {
        let _: () = redis::cmd("ACL").arg(&["SETUSER", "default", "-cluster|slots"]).query(&mut cluster.client(port)).unwrap();
    }
    policy.never_served_from_host(holder, lease, "k", 2000, "the nodes asked for a fresh slot map are up and refused it", || {
        for &port in &refusing {
            let _: () = redis::cmd("ACL").arg(&["SETUSER", "default", "+cluster|slots"]).query(&mut cluster.client(port)).unwrap();
        }
    });
}

//! Review R33: ways to get two holders of a key through a `fallBack`
//! policy after the change that asks every Redis Cluster map source
//! (primaries, replicas, seeds, the failed node last) within a
//! `commandTimeoutMs` of its own once a node's connect failed, counts a
//! source pending at the fetch's end as reached when `Lane::socket_up`
//! says its socket is up, and keeps a fetch's failure for the commands
//! queued behind it (`LastFetch`).
//!
//! Finding A (two holders, confirmed below): the fetch gives each source
//! far less than a connect's own bound, and a source whose connect has not
//! got its socket up *yet* at the fetch's `until` reads as down. A
//! connect is unreachable only once `connectTimeoutMs` passed with no
//! socket (docs/redis.md's table: "no socket within `connectTimeoutMs`";
//! docs/guarantees.md: "no socket within `connectTimeoutMs`"), but the map
//! fetch that decides whether the gone node's connect is unreachable ends
//! `commandTimeoutMs` after it began, the sources asked in turn within it,
//! and at its end a source still connecting with no socket counts for
//! nothing (`socket_up`: `connecting` not up, and `current` locked by the
//! connect): `fetch_slots` fails `Unreachable`, `rerouted` answers `None`,
//! and the connect to the gone node (refused at once: its port closed)
//! reads as unreachable. A regression of this change: at 567b8e6 (the
//! fetch bounded by the command's `connectTimeoutMs + commandTimeoutMs`)
//! the first test below passes (`WaitTimeout` after 3 s: the stalled
//! nodes' connects came up within the fetch and a map was read).
//!
//! The case docs/guarantees.md accepts ("its TCP accept queue full while
//! a script stalls it") is a stall that outlasts a connect's own
//! `connectTimeoutMs`; here the stall is shorter than that, and a connect
//! of the node's own would have reached it. The kernel retransmits a
//! dropped SYN after 1 s (then every second on Linux 6.5+, whose
//! `tcp_syn_linear_timeouts` is 4; after 3 s, 7 s before), so any stall
//! with a full accept queue from just before the fetch asks the node to
//! past the fetch's end is enough, though shorter than `connectTimeoutMs`
//! (a connection storm after a failover, every client reconnecting to the
//! new primary at once, fills a queue while a slow command holds it). The
//! fetch's window also shrinks for each later source: a source asked at
//! share `i` of `n` has `(n - i) / n` of `commandTimeoutMs`.
//!
//! Tests (each: the key's primary killed, its replica promoted and
//! holding the key for another process; every live node stalled by
//! SIGSTOP with its accept queue filled; the connections the policy's
//! process had to them closed first, so that it connects afresh):
//! - `redis_cluster_sources_whose_syn_is_answered_late_never_move_a_held_key`:
//!   `connectTimeoutMs: 2000, commandTimeoutMs: 500`, a 0.65 s stall
//!   (below `cluster-node-timeout`): served by `host` after 0.50 s, while
//!   a plain TCP connect to the new primary started at the same moment
//!   came up after 1.02 s (3 of 3 runs).
//! - `..._default_bounds`: the defaults (5000, 2000), a 2.5 s stall:
//!   served by `host` after 2.00 s, the plain connect up after 3.05 s,
//!   well within 5 s (2 of 2). With a 1.3 s stall it passed (the fetch's
//!   connect came up at the 2 s retransmit, just in time).
//!
//! Suggested fix: a source asked whose connect is still under way at the
//! fetch's end (no socket yet, `connectTimeoutMs` not passed) leaves the
//! fetch unanswered, not unreachable; or the fetch runs until every
//! pending connect has ended (at most `connectTimeoutMs` from when it
//! was asked), as a connect of its own would.

mod support;

use std::time::{Duration, Instant};

use futures::executor::block_on;
use support::fall_back::FallBackToHost;
use support::topology::lock_key;
use support::wait;

/// Stalls the node on `port` and fills its accept queue: the next SYN to
/// it is dropped. Answers the connections that fill it.
fn stall_with_full_queue(cluster: &support::cluster::Cluster, port: u16) -> Vec<std::net::TcpStream> {
    cluster.pause(port);
    let addr: std::net::SocketAddr = ([127, 0, 0, 1], port).into();
    let mut kept = Vec::new();
    for _ in 0..10_000 {
        match std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(20)) {
            Ok(stream) => kept.push(stream),
            Err(err) => {
                assert_eq!(err.kind(), std::io::ErrorKind::TimedOut, "connect: {err}");
                return kept;
            }
        }
    }
    panic!("the accept queue of {port} never filled");
}

/// Finding A: see the module docs (`connectTimeoutMs` 2000,
/// `commandTimeoutMs` 500, every live node stalled for 0.65 s).
#[test]
#[ignore = "review R33 finding A: a map source whose SYN is answered late reads as down"]
fn redis_cluster_sources_whose_syn_is_answered_late_never_move_a_held_key() {
    sources_answered_late("connectTimeoutMs: 2000, commandTimeoutMs: 500", 650, 2000);
}

/// Finding A with the default bounds (`connectTimeoutMs` 5000,
/// `commandTimeoutMs` 2000): every live node stalled for 2.5 s (past
/// `cluster-node-timeout`: the nodes may flag each other for a moment, the
/// data stays; the test waits for the cluster to be ok before the holder
/// releases), so the SYN's retransmits within the fetch's 2 s are dropped
/// too and the one after 3 s comes up, within the connect's 5 s.
#[test]
#[ignore = "review R33 finding A: a map source whose SYN is answered late reads as down (default bounds)"]
fn redis_cluster_sources_whose_syn_is_answered_late_never_move_a_held_key_default_bounds() {
    sources_answered_late("connectTimeoutMs: 5000, commandTimeoutMs: 2000", 2500, 5000);
}

fn sources_answered_late(timeouts: &str, stall_ms: u64, probe_ms: u64) {
    let mut cluster = support::cluster::Cluster::start();
    let primary = cluster.primary_of(&lock_key("k"));
    let replica = cluster.replica_of(primary).expect("a replica of k's primary");
    let others: Vec<u16> = cluster.primaries().into_iter().filter(|&port| port != primary).collect();
    let endpoint = format!("cluster: {{ nodes: [redis://127.0.0.1:{}] }}", others[0]);
    let policy = FallBackToHost::open_on("redis", &format!("{endpoint}, {timeouts}"), "namespace: test, leaseMs: 30000", 5000);
    let warm = block_on(policy.locks().acquire("k", wait(0))).unwrap();
    assert_eq!(warm.served().unwrap().member.name, "db");
    assert!(block_on(warm.release()).unwrap());
    cluster.kill(primary);
    cluster.wait_ok(Duration::from_secs(30));
    assert_eq!(cluster.primary_of(&lock_key("k")), replica);
    let (holder, _) = support::open_redis_at(&endpoint, &[("leaseMs", "30000")], &[]);
    let lease = block_on(holder.backend("shared").unwrap().acquire("k", wait(0))).unwrap();
    assert!(cluster.exists_on(replica, &lock_key("k")));
    // The policy's process reconnects to every node it asks next.
    let live = cluster.live_ports();
    for &port in &live {
        let _: i64 = redis::cmd("CLIENT").arg(&["KILL", "TYPE", "normal"]).query(&mut cluster.client(port)).unwrap();
    }
    std::thread::sleep(Duration::from_millis(200));
    let stalled_at = Instant::now();
    let kept: Vec<Vec<std::net::TcpStream>> = std::thread::scope(|scope| {
        let fills: Vec<_> = live
            .iter()
            .map(|&port| {
                scope.spawn({
                    let cluster = &cluster;
                    move || stall_with_full_queue(cluster, port)
                })
            })
            .collect();
        fills.into_iter().map(|fill| fill.join().unwrap()).collect()
    });
    let started = Instant::now();
    let (served, elapsed, probe) = std::thread::scope(|scope| {
        // A plain connect to the new primary, made at the same moment.
        let probe = scope.spawn(move || {
            let at = Instant::now();
            let connected = std::net::TcpStream::connect_timeout(&([127, 0, 0, 1], replica).into(), Duration::from_millis(probe_ms));
            (connected.map(drop).map_err(|err| err.to_string()), at.elapsed())
        });
        let resumer = scope.spawn(|| {
            std::thread::sleep(Duration::from_millis(stall_ms).saturating_sub(stalled_at.elapsed()));
            for &port in &live {
                cluster.resume(port);
            }
        });
        let served = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            policy.acquire_held_within(
                "k",
                lease.fence(),
                3000,
                &format!("the new primary holds k; every live node was stalled for {stall_ms} ms with its accept queue full, and a connect to the new primary came up within connectTimeoutMs"),
            )
        }));
        let elapsed = started.elapsed();
        resumer.join().unwrap();
        (served, elapsed, probe.join().unwrap())
    });
    drop(kept);
    drop(policy);
    cluster.wait_ok(Duration::from_secs(30));
    let still_held = block_on(lease.release());
    eprintln!(
        "stalled for {:?} before the acquire; the policy's acquire ended after {elapsed:?} ({served:?}); a plain connect to the new primary: {probe:?}; the holder's release: {still_held:?}",
        started - stalled_at
    );
    block_on(holder.close());
    if let Err(panic) = served {
        std::panic::resume_unwind(panic);
    }
    assert!(matches!(still_held, Ok(true)), "the holder's release: {still_held:?}");
}

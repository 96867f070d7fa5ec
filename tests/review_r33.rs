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
//!   came up after 1.02 s (5 of 5 runs).
//! - `..._default_bounds`: the defaults (5000, 2000), a 2.5 s stall:
//!   served by `host` after 2.00 s, the plain connect up after 3.05 s,
//!   well within 5 s (4 of 4). With a 1.3 s stall it passed (the fetch's
//!   connect came up at the 2 s retransmit, just in time).
//!
//! Finding B (two holders, confirmed below; not new in this change, the
//! same at 567b8e6, but it makes docs/redis.md's "every node the process
//! knows (its last map's primaries and replicas, then the seeds ...) is
//! asked" untrue): a `CLUSTER SLOTS` reply with no range at all (`[]`)
//! is taken as the map (`SlotMap::from_cluster_slots` answers an empty
//! map, `fetch_slots` installs it), so the process forgets every primary
//! and replica it knew, and its next fetch asks the seeds alone. A fresh
//! cluster-enabled node answers so: a host replaced at the same address
//! without its nodes.conf (a container without a persistent volume),
//! before an operator adds it back with `CLUSTER MEET`/`--cluster
//! add-node`, or a node after `CLUSTER RESET`. With seeds that are gone
//! (a seed list naming decommissioned hosts, as review R32's tests
//! allow), the next acquire reads unreachable while every node of the
//! old map that holds keys is up. Test:
//! `redis_cluster_an_empty_map_from_a_fresh_node_never_moves_a_held_key`:
//! the primary of slot 0 (first in the map) killed, its replica promoted,
//! a fresh node started at its port; the seed (a replica of the key's
//! primary) killed; an acquire of a key of slot 0's range meets the
//! fresh node (`CLUSTERDOWN`), the map is fetched from it (asked first)
//! and is empty (`PROVIDER_FAILED`, refused: not moved); the next acquire,
//! of a key its primary holds for another process (up, untouched), is
//! served by `host` after 2 ms (7 of 7 runs; at 567b8e6 too; in one run
//! the holder's release then failed `PROVIDER_FAILED`, not looked into). Suggested
//! fix: a reply that names no slot (or fewer than the map had) is no
//! map: keep the old one (its nodes stay sources) and count the source as
//! reached; or keep every node ever learned as a source.
//!
//! Finding A, suggested fix: a source asked whose connect is still under way at the
//! fetch's end (no socket yet, `connectTimeoutMs` not passed) leaves the
//! fetch unanswered, not unreachable; or the fetch runs until every
//! pending connect has ended (at most `connectTimeoutMs` from when it
//! was asked), as a connect of its own would.
//!
//! Reasoned, not tested: `connection` clears `connecting` before it
//! installs the new connection in `current` (both under `current`'s
//! lock), so a fetch whose `until` falls between the two reads that
//! source's `socket_up` as false (microseconds; install, then clear, would
//! close it). The `route()` fetch (a map never fetched: the seeds alone)
//! gives a seed asked at share `i` of `n` only `(n - i) / n` of
//! `connectTimeoutMs + commandTimeoutMs`, less than `connectTimeoutMs`
//! for a late seed: finding A's case on first use. A `connecting` left
//! set by a connect dropped mid-way (the command's `end`, a cut acquire,
//! the fetch's own end, `close()`) is overwritten by the node's next
//! connect before any fetch reads it, and errs only towards "reached".
//!
//! Fixed (each test failed before, and passes): the fetch asks every
//! source within a commandTimeoutMs and ends a connect and a command's
//! time after it began, so each source has a whole `connectTimeoutMs` for
//! its socket (the bound of a failed connect); a `CLUSTER SLOTS` reply
//! that names no slot is no map (the source counts as reached, the map
//! stays); a connect's `Reach` is cleared only once its connection is in
//! place (the race read, not run).

mod support;

use std::time::{Duration, Instant};

use futures::executor::block_on;
use support::fall_back::FallBackToHost;
use support::topology::lock_key;
use support::wait;

/// Finding A: see the module docs (`connectTimeoutMs` 2000,
/// `commandTimeoutMs` 500, every live node stalled for 0.65 s).
#[test]
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
    let kept = cluster.stall_all_with_full_queues(&live);
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

/// A fresh cluster-enabled `redis-server` (no nodes.conf: it knows no
/// other node and serves no slot), killed on drop.
struct FreshNode {
    child: std::process::Child,
    dir: std::path::PathBuf,
}

impl FreshNode {
    fn start(port: u16) -> FreshNode {
        let dir = std::env::temp_dir().join(format!("dokebi-r33-fresh-{}-{port}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let child = std::process::Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .args(["--cluster-enabled", "yes", "--cluster-node-timeout", "1000"])
            .args(["--cluster-config-file", &dir.join("nodes.conf").display().to_string(), "--dir", &dir.display().to_string()])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("redis-server");
        let node = FreshNode { child, dir };
        support::eventually("the fresh node answers", || {
            redis::Client::open(format!("redis://127.0.0.1:{port}"))
                .and_then(|client| client.get_connection())
                .and_then(|mut c| redis::cmd("PING").query::<String>(&mut c))
                .is_ok()
        });
        node
    }
}

impl Drop for FreshNode {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Finding B: see the module docs.
#[test]
fn redis_cluster_an_empty_map_from_a_fresh_node_never_moves_a_held_key() {
    let mut cluster = support::cluster::Cluster::start();
    // The first primary of the map (slots from 0), and a key elsewhere.
    let first = cluster.primary_of_slot(0);
    let key = (0..).map(|i| format!("k{i}")).find(|key| cluster.primary_of(&lock_key(key)) != first).unwrap();
    let primary = cluster.primary_of(&lock_key(&key));
    let on_first = (0..).map(|i| format!("f{i}")).find(|key| cluster.primary_of(&lock_key(key)) == first).unwrap();
    // The seed: a replica of the key's primary, decommissioned later.
    let seed = cluster.replica_of(primary).expect("a replica of the key's primary");
    let endpoint = format!("cluster: {{ nodes: [redis://127.0.0.1:{seed}] }}");
    let policy = FallBackToHost::open_on(
        "redis",
        &format!("{endpoint}, connectTimeoutMs: 1000, commandTimeoutMs: 500"),
        "namespace: test, leaseMs: 30000",
        5000,
    );
    for warm in [&key, &on_first] {
        let warm = block_on(policy.locks().acquire(warm, wait(0))).unwrap();
        assert_eq!(warm.served().unwrap().member.name, "db");
        assert!(block_on(warm.release()).unwrap());
    }
    let (holder, _) = support::open_redis_at(&format!("cluster: {{ nodes: [redis://127.0.0.1:{primary}] }}"), &[("leaseMs", "30000")], &[]);
    let lease = block_on(holder.backend("shared").unwrap().acquire(&key, wait(0))).unwrap();
    assert!(cluster.exists_on(primary, &lock_key(&key)));
    // The first primary's host is replaced: its replica takes over, and a
    // fresh node comes up at its address (no nodes.conf kept); the seed's
    // host is decommissioned.
    cluster.kill(first);
    cluster.wait_ok(Duration::from_secs(30));
    let _fresh = FreshNode::start(first);
    cluster.kill(seed);
    cluster.wait_ok(Duration::from_secs(30));
    assert_eq!(cluster.primary_of(&lock_key(&key)), primary);
    // A key of the first primary's slots: the fresh node answers
    // CLUSTERDOWN, the map is fetched, and the fresh node (asked first)
    // answers it with no slot at all.
    let moved = match block_on(policy.locks().acquire(&on_first, wait(0))) {
        Ok(lease) => lease.served().map_or("?".to_owned(), |served| served.member.name.clone()),
        Err(err) => format!("{:?}: {err}", err.code()),
    };
    let started = Instant::now();
    let served = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        policy.acquire_held_within(
            &key,
            lease.fence(),
            3000,
            "the key's primary is up and holds it; the process's map was replaced by a fresh node's empty one",
        )
    }));
    let elapsed = started.elapsed();
    drop(policy);
    let still_held = block_on(lease.release());
    eprintln!("the acquire of a key of the replaced primary: {moved}; the policy's acquire of the held key ended after {elapsed:?} ({served:?}); the holder's release: {still_held:?}");
    block_on(holder.close());
    if let Err(panic) = served {
        std::panic::resume_unwind(panic);
    }
    assert!(matches!(still_held, Ok(true)), "the holder's release: {still_held:?}");
}

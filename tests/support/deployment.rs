//! One Redis deployment of any topology behind one type, so that a scenario
//! is written once and run against one server, Sentinel and Cluster (see
//! [`on_topologies!`]): open providers on it, inspect what Redis holds (the
//! keys matching a pattern, where a key's primary and replica are, a command
//! on the node that serves a key), and, on Sentinel and Cluster, fail a
//! primary over (killed, or a planned failover) and wait until that is over.

use std::time::Duration;

use dokebi_lock::Provider;

use super::cluster::{Cluster, MANUAL_FAILOVER_TIMEOUT, NODE_TIMEOUT_MS};
use super::open_redis_at;
use super::redis_server::RedisServer;
use super::sentinel::{Sentinels, DOWN_AFTER_MS, FAILOVER_TIMEOUT_MS};
use super::topology::{lock_key, CONNECTION};

/// How long after a primary's death acquires must work again through
/// Sentinel: the sentinels call it down after `down-after-milliseconds`
/// (1 s), agree, elect a leader and promote the replica; a failed election
/// is retried after twice `failover-timeout` (2 s); the rest is slack for a
/// loaded CI machine.
pub const SENTINEL_FAILOVER_BOUND: Duration = Duration::from_millis(DOWN_AFTER_MS + 2 * FAILOVER_TIMEOUT_MS + 5_000);

/// How long after a primary's death acquires of its slots must work again
/// on a Cluster: the cluster notices it (`cluster-node-timeout`, 1 s, then
/// gossip), its replica waits 0.5-1 s and is elected; the rest is slack for
/// a loaded CI machine.
pub const CLUSTER_FAILOVER_BOUND: Duration = Duration::from_millis(NODE_TIMEOUT_MS + 9_000);

/// How long the sentinels take to demote an old primary that is still
/// alive after a planned failover: they reconfigure it once it has reported
/// itself a primary for 4 publish periods (8 s), then it syncs.
pub const DEMOTION_BOUND: Duration = Duration::from_secs(20);

/// A private deployment for one test, stopped on drop.
pub enum Deployment {
    Server(RedisServer),
    Sentinel(Sentinels),
    /// Boxed: a cluster's state is large.
    Cluster(Box<Cluster>),
}

impl Deployment {
    /// A single server.
    pub fn server() -> Deployment {
        Deployment::Server(RedisServer::start())
    }

    /// A primary, its replica and 3 sentinels.
    pub fn sentinel() -> Deployment {
        Deployment::Sentinel(Sentinels::start())
    }

    /// 3 primaries and 3 replicas.
    pub fn cluster() -> Deployment {
        Deployment::Cluster(Box::new(Cluster::start()))
    }

    /// "server", "sentinel" or "cluster", for logs.
    pub fn name(&self) -> &'static str {
        match self {
            Deployment::Server(_) => "server",
            Deployment::Sentinel(_) => "sentinel",
            Deployment::Cluster(_) => "cluster",
        }
    }

    /// The connection's endpoint as one line of YAML.
    pub fn endpoint_yaml(&self) -> String {
        match self {
            Deployment::Server(server) => format!("url: {}", server.url()),
            Deployment::Sentinel(sentinels) => sentinels.endpoint_yaml(),
            Deployment::Cluster(cluster) => cluster.endpoint_yaml(),
        }
    }

    /// A provider with one redis backend `shared` (namespace `test`) with
    /// the `backend` fields, and short connect and command bounds. Two
    /// providers stand for two processes.
    pub fn open(&self, backend: &[(&str, &str)]) -> Provider {
        self.open_with(backend, CONNECTION)
    }

    /// Like [`Deployment::open`], with the connection's fields given
    /// (`connectTimeoutMs`, `commandTimeoutMs`, ...).
    pub fn open_with(&self, backend: &[(&str, &str)], connection: &[(&str, &str)]) -> Provider {
        open_redis_at(&self.endpoint_yaml(), backend, connection).0
    }

    /// Every key matching `pattern` (on every primary), sorted.
    pub fn keys(&self, pattern: &str) -> Vec<String> {
        let mut keys = match self {
            Deployment::Server(server) => server.keys(),
            Deployment::Sentinel(sentinels) => sentinels.primary().keys(),
            Deployment::Cluster(cluster) => return cluster.keys(pattern),
        };
        keys.retain(|key| glob(pattern, key));
        keys
    }

    /// Runs `command` on the primary that holds `redis_key`.
    pub fn query<T: redis::FromRedisValue>(&self, redis_key: &str, command: &redis::Cmd) -> T {
        let mut client = match self {
            Deployment::Server(server) => server.client(),
            Deployment::Sentinel(sentinels) => sentinels.primary().client(),
            Deployment::Cluster(cluster) => cluster.client(cluster.primary_of(redis_key)),
        };
        command.query(&mut client).unwrap()
    }

    /// The port of the primary that serves `redis_key` now: the server, the
    /// primary the sentinels name, the live primary of the key's slot.
    pub fn primary_of(&self, redis_key: &str) -> u16 {
        match self {
            Deployment::Server(server) => server.port(),
            Deployment::Sentinel(sentinels) => sentinels.primary_port(),
            Deployment::Cluster(cluster) => cluster.primary_of(redis_key),
        }
    }

    /// The ports of every live primary, sorted.
    pub fn primaries(&self) -> Vec<u16> {
        let mut primaries = match self {
            Deployment::Cluster(cluster) => cluster.primaries(),
            _ => vec![self.primary_of("")],
        };
        primaries.sort_unstable();
        primaries
    }

    /// The port of the replica of the primary that serves `redis_key`.
    pub fn replica_of(&self, redis_key: &str) -> u16 {
        match self {
            Deployment::Server(_) => panic!("one server has no replica"),
            Deployment::Sentinel(sentinels) => sentinels.replica().port(),
            Deployment::Cluster(cluster) => cluster.replica_of(cluster.primary_of(redis_key)).expect("the slot has a replica"),
        }
    }

    /// True when `redis_key` exists on the node on `port` itself (a
    /// primary or a replica; no redirect).
    pub fn exists_on(&self, port: u16, redis_key: &str) -> bool {
        let server = match self {
            Deployment::Server(server) => server,
            Deployment::Sentinel(sentinels) => sentinels.server(port),
            Deployment::Cluster(cluster) => return cluster.exists_on(port, redis_key),
        };
        redis::cmd("EXISTS").arg(redis_key).query::<i64>(&mut server.client()).unwrap() == 1
    }

    /// A user key whose lock is served by another node than the one a
    /// provider's release notifications are subscribed on (a Cluster's
    /// first seed), so that a notification must cross the cluster bus; with
    /// one primary, any key.
    pub fn a_key_served_away_from_the_subscription(&self) -> String {
        match self {
            Deployment::Cluster(cluster) => {
                let subscribed_on = cluster.ports()[0];
                (0..).map(|i| format!("job:{i}")).find(|key| cluster.primary_of(&lock_key(key)) != subscribed_on).unwrap()
            }
            _ => "job".to_owned(),
        }
    }

    /// A user key other than `key` whose lock is served by the same primary.
    pub fn a_key_served_with(&self, key: &str) -> String {
        let primary = self.primary_of(&lock_key(key));
        (0..).map(|i| format!("{key}:{i}")).find(|other| self.primary_of(&lock_key(other)) == primary).unwrap()
    }

    /// How long after a primary's death acquires must work again.
    pub fn failover_bound(&self) -> Duration {
        match self {
            Deployment::Server(_) => panic!("one server has no failover"),
            Deployment::Sentinel(_) => SENTINEL_FAILOVER_BOUND,
            Deployment::Cluster(_) => CLUSTER_FAILOVER_BOUND,
        }
    }

    /// Kills (SIGKILL) the primary that serves `redis_key`; returns its port.
    pub fn kill_primary_of(&mut self, redis_key: &str) -> u16 {
        match self {
            Deployment::Server(_) => panic!("one server has no failover"),
            Deployment::Sentinel(sentinels) => sentinels.kill_primary(),
            Deployment::Cluster(cluster) => {
                let primary = cluster.primary_of(redis_key);
                cluster.kill(primary);
                primary
            }
        }
    }

    /// Kills (SIGKILL) the node a provider's release notifications are
    /// subscribed on: the primary the sentinels name, a Cluster's first seed
    /// (a primary); returns its port.
    pub fn kill_the_subscribed_node(&mut self) -> u16 {
        match self {
            Deployment::Server(_) => panic!("one server has no failover"),
            Deployment::Sentinel(sentinels) => sentinels.kill_primary(),
            Deployment::Cluster(cluster) => {
                let seed = cluster.ports()[0];
                cluster.kill(seed);
                seed
            }
        }
    }

    /// Waits (within [`Deployment::failover_bound`]) until the failover
    /// after the node on `killed` died is over: every sentinel names a new
    /// primary that says it is one; every live cluster node says the cluster
    /// is ok, with every slot served again.
    pub fn wait_failover(&self, killed: u16) {
        match self {
            Deployment::Server(_) => panic!("one server has no failover"),
            Deployment::Sentinel(sentinels) => {
                sentinels.wait_new_primary(killed, SENTINEL_FAILOVER_BOUND);
            }
            Deployment::Cluster(cluster) => cluster.wait_ok(CLUSTER_FAILOVER_BOUND),
        }
    }

    /// A planned failover of the primary that serves `redis_key`: `SENTINEL
    /// FAILOVER` (which does not wait for the replica to catch up) or
    /// `CLUSTER FAILOVER` on its replica (which does). Returns the old and
    /// the new primary's ports once the new one serves the key and the old
    /// one, alive, is its replica in sync (the sentinels demote it only
    /// after [`DEMOTION_BOUND`] or so).
    pub fn planned_failover(&self, redis_key: &str) -> (u16, u16) {
        match self {
            Deployment::Server(_) => panic!("one server has no failover"),
            Deployment::Sentinel(sentinels) => {
                let old = sentinels.primary_port();
                let new = sentinels.failover(SENTINEL_FAILOVER_BOUND);
                // Once demoted, the old primary drops its clients (CLIENT
                // KILL by the sentinels).
                sentinels.wait_replica_synced(old, DEMOTION_BOUND);
                (old, new)
            }
            Deployment::Cluster(cluster) => {
                let old = cluster.primary_of(redis_key);
                let replica = cluster.replica_of(old).expect("the slot has a replica");
                // Waits until the cluster is ok: every replica in sync, the
                // old primary among them. Room for one manual failover that
                // Redis gave up on, and the one asked for after it.
                cluster.failover(replica, CLUSTER_FAILOVER_BOUND + MANUAL_FAILOVER_TIMEOUT);
                (old, replica)
            }
        }
    }

    /// What a lease's backend needs so that a planned failover keeps it:
    /// nothing on a Cluster (the replica catches up before it takes over);
    /// `replicaAcks: 1` through Sentinel, where the replica may be behind
    /// when it is promoted.
    pub fn kept_by_a_planned_failover(&self) -> &'static [(&'static str, &'static str)] {
        match self {
            Deployment::Sentinel(_) => &[("replicaAcks", "1")],
            _ => &[],
        }
    }
}

/// One `#[test]` per scenario and topology, named `on_server::name`,
/// `on_sentinel::name` and `on_cluster::name`. Each scenario under `every
/// topology` runs on all three; each under `sentinel and cluster` (one that
/// needs replicas or a failover) on the last two. A scenario is a function
/// of `&Deployment` or `&mut Deployment`.
#[allow(unused_macros)] // each test binary uses a different part
macro_rules! on_topologies {
    (
        every topology { $($name:ident => $scenario:ident),* $(,)? }
        $(sentinel and cluster { $($replicated:ident => $replicated_scenario:ident),* $(,)? })?
    ) => {
        mod on_server {
            use super::*;
            $(#[test] fn $name() { $scenario(&mut $crate::support::deployment::Deployment::server()) })*
        }
        mod on_sentinel {
            use super::*;
            $(#[test] fn $name() { $scenario(&mut $crate::support::deployment::Deployment::sentinel()) })*
            $($(#[test] fn $replicated() { $replicated_scenario(&mut $crate::support::deployment::Deployment::sentinel()) })*)?
        }
        mod on_cluster {
            use super::*;
            $(#[test] fn $name() { $scenario(&mut $crate::support::deployment::Deployment::cluster()) })*
            $($(#[test] fn $replicated() { $replicated_scenario(&mut $crate::support::deployment::Deployment::cluster()) })*)?
        }
    };
}
#[allow(unused_imports)]
pub(crate) use on_topologies;

/// `KEYS`-style matching with `*` only (all the tests use).
fn glob(pattern: &str, text: &str) -> bool {
    match pattern.split_once('*') {
        None => pattern == text,
        Some((head, rest)) => {
            let Some(tail) = text.strip_prefix(head) else { return false };
            if rest.is_empty() {
                return true;
            }
            (0..=tail.len()).any(|i| tail.is_char_boundary(i) && glob(rest, &tail[i..]))
        }
    }
}

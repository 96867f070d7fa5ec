//! One Redis deployment of any topology behind one type, so that a scenario
//! is written once and run against one server, Sentinel and Cluster: open
//! providers on it, and inspect what Redis holds (the keys matching a
//! pattern, a command on the node that serves a key).

use dokebi_lock::Provider;

use super::cluster::Cluster;
use super::open_redis_at;
use super::redis_server::RedisServer;
use super::sentinel::Sentinels;
use super::topology::CONNECTION;

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
        open_redis_at(&self.endpoint_yaml(), backend, CONNECTION).0
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
}

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

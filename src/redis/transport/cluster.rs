//! Where a Redis Cluster's commands go: the slot map the driver keeps.
//!
//! Commands are routed here rather than through redis-rs' cluster
//! connection, whose task runs on the runtime's thread: a command from the
//! host's thread would cross threads twice. Instead each lane keeps one
//! plain command connection per primary, made the way one server's is (see
//! [`super::connection`]), and asks this map which primary serves a slot.
//!
//! The map is fetched with `CLUSTER SLOTS` from a known node on first use
//! and again once marked stale (a primary's connection failed: a failover
//! may have moved its slots); `MOVED` updates the one slot it names. `ASK`
//! leaves the map alone: the slot is only being migrated.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use hashbrown::HashMap;
use redis::cluster_routing::Slot;
use redis::{ConnectionAddr, ConnectionInfo, Value};

use crate::store::Failure;

/// A node's address as Redis names it in `MOVED` replies: `host:port`.
pub(crate) type NodeName = Arc<str>;

/// How many hash slots a cluster has.
const SLOTS: u16 = 16384;

/// A cluster's seed nodes and slot map.
pub(crate) struct Cluster {
    seeds: Vec<ConnectionInfo>,
    seed_names: Vec<NodeName>,
    map: Mutex<SlotMap>,
    /// Set when the map must be fetched before the next command is routed.
    stale: AtomicBool,
    /// One fetch at a time: a failover seen by many commands costs one.
    fetching: tokio::sync::Mutex<LastFetch>,
}

/// The last fetch of the map, if it failed. A command that waited for it
/// to end takes its failure rather than fetching again when it began after
/// the command asked: every fetch has the same bound, so it is as fresh
/// and as long an answer, and a command waits for at most one fetch
/// besides its own.
pub(crate) type LastFetch = Option<FailedFetch>;

pub(crate) struct FailedFetch {
    pub began: tokio::time::Instant,
    pub failure: Failure,
}

/// Which primary serves each slot.
pub(crate) struct SlotMap {
    /// Per slot served, an index into `primaries` (redis-rs' [`Slot`] keeps
    /// its number to itself, so slots are keys, not indexes).
    owners: HashMap<Slot, u16>,
    primaries: Vec<NodeName>,
    /// The replicas the reply named: asked for the map too, since a
    /// failover makes one a primary.
    replicas: Vec<NodeName>,
}

impl Cluster {
    /// `seeds` is not empty (the options require a node).
    pub fn new(seeds: Vec<ConnectionInfo>) -> Cluster {
        let seed_names = seeds.iter().map(|seed| name_of(seed.addr())).collect();
        Cluster {
            seeds,
            seed_names,
            map: Mutex::new(SlotMap::empty()),
            stale: AtomicBool::new(true),
            fetching: tokio::sync::Mutex::new(None),
        }
    }

    pub fn seeds(&self) -> &[ConnectionInfo] {
        &self.seeds
    }

    /// How to connect to the `index`-th seed (see [`Cluster::connection_info`]).
    pub fn seed(&self, index: usize) -> ConnectionInfo {
        self.connection_info(&self.seed_names[index])
    }

    /// True when every node is reached over plain TCP (not TLS): the
    /// driver then opens their sockets itself, and a host may drive them.
    pub fn is_plain(&self) -> bool {
        self.seeds.iter().all(|seed| matches!(seed.addr(), ConnectionAddr::Tcp(..)))
    }

    /// True when the map must be fetched before routing.
    pub fn is_stale(&self) -> bool {
        self.stale.load(Ordering::Acquire)
    }

    /// A primary's connection failed, or the cluster is down here: its
    /// slots may have moved.
    pub fn mark_stale(&self) {
        self.stale.store(true, Ordering::Release);
    }

    /// Held while fetching the map; it keeps the last fetch's failure.
    pub async fn fetching(&self) -> tokio::sync::MutexGuard<'_, LastFetch> {
        self.fetching.lock().await
    }

    /// The primary serving `slot` (`None`: any known one, for keyless
    /// commands), if the map knows one.
    pub fn primary(&self, slot: Option<Slot>) -> Option<NodeName> {
        let map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        let index = match slot {
            Some(slot) => *map.owners.get(&slot)?,
            None => 0,
        };
        map.primaries.get(usize::from(index)).cloned()
    }

    /// `MOVED <slot> <node>`: that node serves the slot now.
    pub fn moved(&self, slot: u16, node: &str) {
        if let Some(slot) = Slot::new(slot) {
            self.map.lock().unwrap_or_else(|e| e.into_inner()).assign(slot, node);
        }
    }

    /// The seed node that is `key`'s primary, if the map knows it.
    pub fn seed_serving(&self, key: &str) -> Option<usize> {
        let primary = self.primary(Some(Slot::for_key(key)))?;
        self.seed_names.iter().position(|seed| *seed == primary)
    }

    /// Installs a freshly fetched map.
    pub fn replace(&self, map: SlotMap) {
        *self.map.lock().unwrap_or_else(|e| e.into_inner()) = map;
        self.stale.store(false, Ordering::Release);
    }

    /// The nodes to ask for the map, in order: the primaries known, their
    /// replicas, then the seeds, and `last` (a node just found gone) at the
    /// end.
    pub fn map_sources(&self, last: Option<&NodeName>) -> Vec<NodeName> {
        let map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        let mut sources = map.primaries.clone();
        for node in map.replicas.iter().chain(&self.seed_names) {
            if !sources.contains(node) {
                sources.push(node.clone());
            }
        }
        sources.sort_by_key(|node| Some(node) == last);
        sources
    }

    /// How to connect to `node`: the first seed's settings (credentials,
    /// TLS) at the node's address.
    pub fn connection_info(&self, node: &str) -> ConnectionInfo {
        let (host, port) = split(node);
        let seed = &self.seeds[0];
        let addr = match seed.addr() {
            ConnectionAddr::TcpTls { insecure, tls_params, .. } => {
                ConnectionAddr::TcpTls { host, port, insecure: *insecure, tls_params: tls_params.clone() }
            }
            _ => ConnectionAddr::Tcp(host, port),
        };
        seed.clone().set_addr(addr)
    }
}

impl SlotMap {
    fn empty() -> SlotMap {
        SlotMap { owners: HashMap::new(), primaries: Vec::new(), replicas: Vec::new() }
    }

    fn assign(&mut self, slot: Slot, node: &str) {
        let index = match self.primaries.iter().position(|known| &**known == node) {
            Some(index) => index,
            None => {
                self.primaries.push(node.into());
                self.primaries.len() - 1
            }
        };
        self.owners.insert(slot, index as u16);
    }

    /// Reads a `CLUSTER SLOTS` reply from `asked`: per range, its first and
    /// last slot, then the primary (`host`, `port`, ...) and its replicas.
    /// An empty host means the node that answered.
    pub fn from_cluster_slots(reply: &Value, asked: &str) -> Option<SlotMap> {
        // A node that knows no slots (fresh, or reset) gives no map: taken,
        // it would forget every node this one knew.
        let Value::Array(ranges) = reply else { return None };
        if ranges.is_empty() {
            return None;
        }
        let mut map = SlotMap::empty();
        for range in ranges {
            let Value::Array(fields) = range else { return None };
            let [Value::Int(first), Value::Int(last), Value::Array(primary), replicas @ ..] = fields.as_slice() else { return None };
            let node = node_in(primary, asked)?;
            for replica in replicas {
                let Value::Array(replica) = replica else { return None };
                let replica: NodeName = node_in(replica, asked)?.into();
                if !map.replicas.contains(&replica) {
                    map.replicas.push(replica);
                }
            }
            let (first, last) = (u16::try_from(*first).ok()?, u16::try_from(*last).ok()?);
            if first > last || last >= SLOTS {
                return None;
            }
            for slot in first..=last {
                map.assign(Slot::new(slot)?, &node);
            }
        }
        Some(map)
    }
}

/// The name of a node a `CLUSTER SLOTS` range lists (`host`, `port`,
/// ...); an empty host means `asked`'s.
fn node_in(fields: &[Value], asked: &str) -> Option<String> {
    let [host, Value::Int(port), ..] = fields else { return None };
    let host = match host {
        Value::BulkString(bytes) => std::str::from_utf8(bytes).ok()?,
        Value::SimpleString(text) => text.as_str(),
        _ => return None,
    };
    let host = if host.is_empty() { split(asked).0 } else { host.to_owned() };
    Some(format!("{host}:{port}"))
}

/// A node's name from its address.
fn name_of(addr: &ConnectionAddr) -> NodeName {
    match addr {
        ConnectionAddr::Tcp(host, port) | ConnectionAddr::TcpTls { host, port, .. } => format!("{host}:{port}").into(),
        other => other.to_string().into(),
    }
}

/// `host:port` (the host may hold colons: IPv6) into its parts; a name
/// without a port is taken as a host on Redis' default port.
fn split(node: &str) -> (String, u16) {
    match node.rsplit_once(':').and_then(|(host, port)| Some((host, port.parse().ok()?))) {
        Some((host, port)) => (host.to_owned(), port),
        None => (node.to_owned(), 6379),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(text: &str) -> Value {
        Value::BulkString(text.as_bytes().to_vec())
    }

    fn range(first: i64, last: i64, host: &str, port: i64) -> Value {
        Value::Array(vec![
            Value::Int(first),
            Value::Int(last),
            Value::Array(vec![bulk(host), Value::Int(port), bulk("id")]),
            Value::Array(vec![bulk(host), Value::Int(port + 3), bulk("replica")]),
        ])
    }

    #[test]
    fn cluster_slots_name_each_slot_s_primary() {
        let reply = Value::Array(vec![range(0, 5460, "10.0.0.1", 7000), range(5461, 16383, "", 7001)]);
        let map = SlotMap::from_cluster_slots(&reply, "10.0.0.9:7001").unwrap();
        let owner = |slot: u16| map.primaries[usize::from(map.owners[&Slot::new(slot).unwrap()])].to_string();
        assert_eq!(owner(0), "10.0.0.1:7000");
        assert_eq!(owner(5460), "10.0.0.1:7000");
        assert_eq!(owner(5461), "10.0.0.9:7001");
        assert_eq!(owner(16383), "10.0.0.9:7001");
        assert_eq!(map.primaries.len(), 2);
    }

    #[test]
    fn a_malformed_reply_is_no_map() {
        assert!(SlotMap::from_cluster_slots(&Value::Int(1), "a:1").is_none());
        assert!(SlotMap::from_cluster_slots(&Value::Array(vec![]), "a:1").is_none(), "a node that knows no slots");
        assert!(SlotMap::from_cluster_slots(&Value::Array(vec![range(5, 16384, "h", 1)]), "a:1").is_none());
    }

    #[test]
    fn moved_reassigns_one_slot() {
        let cluster = Cluster::new(vec![redis::IntoConnectionInfo::into_connection_info("redis://127.0.0.1:7000").unwrap()]);
        cluster.replace(SlotMap::from_cluster_slots(&Value::Array(vec![range(0, 16383, "127.0.0.1", 7000)]), "x:1").unwrap());
        cluster.moved(42, "127.0.0.1:7002");
        assert_eq!(cluster.primary(Slot::new(42)).as_deref(), Some("127.0.0.1:7002"));
        assert_eq!(cluster.primary(Slot::new(43)).as_deref(), Some("127.0.0.1:7000"));
        let names = |sources: Vec<NodeName>| sources.iter().map(|node| node.to_string()).collect::<Vec<_>>();
        // The seed is a known primary already; the replica comes after the
        // primaries, and a node found gone goes last.
        assert_eq!(names(cluster.map_sources(None)), ["127.0.0.1:7000", "127.0.0.1:7002", "127.0.0.1:7003"]);
        let gone: NodeName = "127.0.0.1:7000".into();
        assert_eq!(names(cluster.map_sources(Some(&gone))), ["127.0.0.1:7002", "127.0.0.1:7003", "127.0.0.1:7000"]);
    }

    #[test]
    fn node_names_split_into_host_and_port() {
        assert_eq!(split("127.0.0.1:7000"), ("127.0.0.1".to_owned(), 7000));
        assert_eq!(split("::1:7000"), ("::1".to_owned(), 7000));
        assert_eq!(split("redis"), ("redis".to_owned(), 6379));
    }
}

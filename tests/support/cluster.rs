//! A private Redis Cluster for one test: 3 primaries and 3 replicas on free
//! loopback ports, killed (and their temp dir removed) on drop, also when
//! the test fails.
//!
//! Every node runs with `--cluster-node-timeout 1000` (a dead primary is
//! noticed and replaced within a few seconds), no persistence, and diskless
//! replication without delay (a replica syncs at once). A node's cluster bus
//! listens on its port + 10000, so a node's port is chosen where both are
//! free and the bus port stays below 65536. [`Cluster::start`] returns once
//! every node says `cluster_state:ok`, knows the 6 nodes, and every replica
//! is in sync with its primary.
//!
//! Helpers: the slot and the primary of a key, the replica of a primary,
//! move a slot to another primary (or start to), SIGKILL a node, `CLUSTER
//! FAILOVER` on a replica, wait for the cluster to be ok again (every killed node flagged `fail` by every live node, every
//! slot served by a live primary).
//!
//! Self-contained (std and redis only), so the fault suite can include it by
//! path.

#![allow(dead_code)] // each test binary uses a different part

use std::collections::BTreeSet;
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::thread::sleep;
use std::time::{Duration, Instant};

/// `cluster-node-timeout` of every node.
pub const NODE_TIMEOUT_MS: u64 = 1000;

/// How long Redis lets a manual failover (`CLUSTER FAILOVER`) run before it
/// gives up on it (`CLUSTER_MF_TIMEOUT`, 5 s), with a little slack.
pub const MANUAL_FAILOVER_TIMEOUT: Duration = Duration::from_millis(5_500);

pub struct Cluster {
    dir: PathBuf,
    nodes: Vec<Node>,
    /// Held while the cluster lives: see [`ONE_AT_A_TIME`].
    _turn: MutexGuard<'static, ()>,
}

/// One cluster of a test binary runs at a time: six nodes each on 2 cores
/// already load the machine, and several clusters at once made failovers
/// (and so their bounds) depend on scheduling.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

struct Node {
    port: u16,
    id: String,
    child: Option<Child>,
}

/// One node as a live node sees itself (`CLUSTER NODES`, the `myself` line).
#[derive(Debug, Clone)]
pub struct NodeView {
    pub port: u16,
    pub id: String,
    pub primary: bool,
    /// The slot ranges it serves (primaries only), inclusive.
    pub slots: Vec<(u16, u16)>,
}

impl NodeView {
    pub fn serves(&self, slot: u16) -> bool {
        self.slots.iter().any(|&(from, to)| from <= slot && slot <= to)
    }
}

impl Cluster {
    /// Starts 6 nodes, joins them with `redis-cli --cluster create ...
    /// --cluster-replicas 1`, and waits until the cluster is ok and every
    /// replica in sync.
    pub fn start() -> Cluster {
        // A port found free can still be taken before its node binds it (by
        // another test starting a cluster at the same time): start again.
        for _ in 0..2 {
            if let Ok(cluster) = Cluster::try_start(ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())) {
                return cluster;
            }
        }
        Cluster::try_start(ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())).unwrap_or_else(|why| panic!("{why}"))
    }

    fn try_start(turn: MutexGuard<'static, ()>) -> Result<Cluster, String> {
        let ports = free_port_pairs(6);
        let dir = std::env::temp_dir().join(format!("dokebi-cluster-{}-{}", std::process::id(), ports[0]));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let mut cluster = Cluster { dir, nodes: Vec::new(), _turn: turn };
        for port in ports {
            let child = cluster.spawn(port);
            cluster.nodes.push(Node { port, id: String::new(), child: Some(child) });
        }
        for node in &mut cluster.nodes {
            let port = node.port;
            let deadline = Instant::now() + Duration::from_secs(10);
            node.id = loop {
                if let Ok(id) = try_client(port).and_then(|mut c| redis::cmd("CLUSTER").arg("MYID").query::<String>(&mut c)) {
                    break id;
                }
                let exited = node.child.as_mut().is_some_and(|child| child.try_wait().ok().flatten().is_some());
                if exited || Instant::now() >= deadline {
                    return Err(format!("cluster node {port} did not start"));
                }
                sleep(Duration::from_millis(10));
            };
        }
        let addresses: Vec<String> = cluster.nodes.iter().map(|n| format!("127.0.0.1:{}", n.port)).collect();
        let output = Command::new("redis-cli")
            .arg("--cluster")
            .arg("create")
            .args(&addresses)
            .args(["--cluster-replicas", "1", "--cluster-yes"])
            .stdin(Stdio::null())
            .output()
            .expect("redis-cli is installed (scripts/setup)");
        assert!(output.status.success(), "redis-cli --cluster create failed: {}", String::from_utf8_lossy(&output.stdout));
        cluster.wait_ok(Duration::from_secs(20));
        Ok(cluster)
    }

    fn spawn(&self, port: u16) -> Child {
        // A dir of its own: a replica writes the snapshot it syncs from.
        let dir = self.dir.join(port.to_string());
        std::fs::create_dir_all(&dir).unwrap();
        let config = dir.join("nodes.conf");
        Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .args(["--cluster-enabled", "yes", "--cluster-node-timeout", &NODE_TIMEOUT_MS.to_string()])
            .args(["--cluster-config-file", &config.display().to_string(), "--dir", &dir.display().to_string()])
            .args(["--repl-diskless-sync", "yes", "--repl-diskless-sync-delay", "0"])
            .args(["--logfile", &self.dir.join(format!("node-{port}.log")).display().to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server is installed (scripts/setup)")
    }

    /// The seed URLs of every node.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(|n| format!("redis://127.0.0.1:{}", n.port)).collect()
    }

    /// The connection's endpoint as YAML (a flow mapping on one line):
    /// `cluster: { nodes: [...] }`, every node a seed.
    pub fn endpoint_yaml(&self) -> String {
        format!("cluster: {{ nodes: [{}] }}", self.urls().join(", "))
    }

    pub fn ports(&self) -> Vec<u16> {
        self.nodes.iter().map(|n| n.port).collect()
    }

    /// Ports of the nodes not killed.
    pub fn live_ports(&self) -> Vec<u16> {
        self.nodes.iter().filter(|n| n.child.is_some()).map(|n| n.port).collect()
    }

    /// A plain client of one node (no redirects followed).
    pub fn client(&self, port: u16) -> redis::Connection {
        try_client(port).unwrap_or_else(|err| panic!("cluster node {port}: {err}"))
    }

    /// The hash slot of a Redis key (`CLUSTER KEYSLOT`).
    pub fn slot(&self, redis_key: &str) -> u16 {
        let port = self.live_ports()[0];
        redis::cmd("CLUSTER").arg("KEYSLOT").arg(redis_key).query(&mut self.client(port)).unwrap()
    }

    /// How each live node sees itself.
    pub fn views(&self) -> Vec<NodeView> {
        self.live_ports().into_iter().filter_map(|port| self.view(port)).collect()
    }

    fn view(&self, port: u16) -> Option<NodeView> {
        let nodes: String = redis::cmd("CLUSTER").arg("NODES").query(&mut try_client(port).ok()?).ok()?;
        view_in(port, &nodes)
    }

    /// The live primary that serves `slot` (as it says itself).
    pub fn primary_of_slot(&self, slot: u16) -> u16 {
        self.views().into_iter().find(|v| v.primary && v.serves(slot)).unwrap_or_else(|| panic!("no live primary serves slot {slot}")).port
    }

    /// The live primary that serves `redis_key`'s slot.
    pub fn primary_of(&self, redis_key: &str) -> u16 {
        self.primary_of_slot(self.slot(redis_key))
    }

    /// The live primaries.
    pub fn primaries(&self) -> Vec<u16> {
        self.views().into_iter().filter(|v| v.primary).map(|v| v.port).collect()
    }

    /// A live replica of the primary on `primary`.
    pub fn replica_of(&self, primary: u16) -> Option<u16> {
        self.live_ports().into_iter().find(|&port| {
            let info = self.info(port, "replication");
            info.lines().any(|l| l.trim() == "role:slave") && info.lines().any(|l| l.trim() == format!("master_port:{primary}"))
        })
    }

    /// One `INFO` section of a node.
    pub fn info(&self, port: u16, section: &str) -> String {
        redis::cmd("INFO").arg(section).query(&mut self.client(port)).unwrap()
    }

    /// True when `redis_key` exists on the node itself (no redirect).
    pub fn exists_on(&self, port: u16, redis_key: &str) -> bool {
        let mut client = self.client(port);
        if !self.view(port).is_some_and(|v| v.primary) {
            // A replica answers reads only after READONLY.
            let _: () = redis::cmd("READONLY").query(&mut client).unwrap();
        }
        redis::cmd("EXISTS").arg(redis_key).query::<i64>(&mut client).unwrap() == 1
    }

    /// Every key matching `pattern` on the live primaries.
    pub fn keys(&self, pattern: &str) -> Vec<String> {
        let mut keys = Vec::new();
        for port in self.primaries() {
            let mut found: Vec<String> = redis::cmd("KEYS").arg(pattern).query(&mut self.client(port)).unwrap();
            keys.append(&mut found);
        }
        keys.sort();
        keys
    }

    /// Starts moving `slot` from the primary on `from` to the one on `to`
    /// (`IMPORTING` on `to`, `MIGRATING` on `from`): `from` then answers
    /// `ASK` for the slot's keys it lacks.
    pub fn start_migrating(&self, slot: u16, from: u16, to: u16) {
        let (from_id, to_id) = (self.node_id(from), self.node_id(to));
        let _: () = redis::cmd("CLUSTER").arg("SETSLOT").arg(slot).arg("IMPORTING").arg(&from_id).query(&mut self.client(to)).unwrap();
        let _: () = redis::cmd("CLUSTER").arg("SETSLOT").arg(slot).arg("MIGRATING").arg(&to_id).query(&mut self.client(from)).unwrap();
    }

    /// Moves the keys of `slot` from the primary on `from` to the one on
    /// `to`, after [`Cluster::start_migrating`].
    pub fn migrate_keys(&self, slot: u16, from: u16, to: u16) {
        let keys: Vec<String> = redis::cmd("CLUSTER").arg("GETKEYSINSLOT").arg(slot).arg(1000).query(&mut self.client(from)).unwrap();
        if !keys.is_empty() {
            let _: () = redis::cmd("MIGRATE")
                .arg("127.0.0.1")
                .arg(to)
                .arg("")
                .arg(0)
                .arg(5000)
                .arg("KEYS")
                .arg(&keys)
                .query(&mut self.client(from))
                .unwrap();
        }
    }

    /// Ends a migration: every primary learns that the one on `to` serves
    /// `slot`, and the others then answer `MOVED`.
    pub fn assign_slot(&self, slot: u16, to: u16) {
        let to_id = self.node_id(to);
        let mut ports = self.primaries();
        // The importing node first, as redis-cli does.
        ports.sort_by_key(|&port| port != to);
        for port in ports {
            let _: () = redis::cmd("CLUSTER").arg("SETSLOT").arg(slot).arg("NODE").arg(&to_id).query(&mut self.client(port)).unwrap();
        }
    }

    /// Moves `slot` and its keys from the primary on `from` to the one on `to`.
    pub fn migrate_slot(&self, slot: u16, from: u16, to: u16) {
        self.start_migrating(slot, from, to);
        self.migrate_keys(slot, from, to);
        self.assign_slot(slot, to);
    }

    fn node_id(&self, port: u16) -> String {
        self.nodes.iter().find(|n| n.port == port).expect("a node of this cluster").id.clone()
    }

    /// Kills the node on `port` (SIGKILL) and waits for it to exit.
    pub fn kill(&mut self, port: u16) {
        let node = self.nodes.iter_mut().find(|n| n.port == port).expect("a node of this cluster");
        if let Some(mut child) = node.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Freezes the node on `port` (SIGSTOP): its sockets stay open, nothing
    /// answers. Killed on drop all the same.
    pub fn pause(&self, port: u16) {
        self.signal(port, "-STOP");
    }

    /// Stalls the node on `port` and fills its accept queue: the next SYN
    /// to it is dropped. Answers the connections that fill it.
    pub fn stall_with_full_queue(&self, port: u16) -> Vec<std::net::TcpStream> {
        self.pause(port);
        fill_accept_queue(port, Duration::from_millis(20))
    }

    /// [`Cluster::stall_with_full_queue`] on every node of `ports` at once.
    pub fn stall_all_with_full_queues(&self, ports: &[u16]) -> Vec<Vec<std::net::TcpStream>> {
        std::thread::scope(|scope| {
            let fills: Vec<_> = ports.iter().map(|&port| scope.spawn(move || self.stall_with_full_queue(port))).collect();
            fills.into_iter().map(|fill| fill.join().unwrap()).collect()
        })
    }

    pub fn resume(&self, port: u16) {
        self.signal(port, "-CONT");
    }

    fn signal(&self, port: u16, signal: &str) {
        let node = self.nodes.iter().find(|n| n.port == port).expect("a node of this cluster");
        let pid = node.child.as_ref().expect("a live node").id();
        assert!(Command::new("kill").args([signal, &pid.to_string()]).status().unwrap().success());
    }

    /// `CLUSTER FAILOVER` on the replica on `replica` (a planned failover:
    /// the replica catches up with its primary, then takes over), and waits
    /// until it serves as primary and the cluster is ok. Redis gives up a
    /// manual failover that has not completed within
    /// [`MANUAL_FAILOVER_TIMEOUT`] (a vote or the primary's pause that came
    /// late on a loaded machine), without a word: then it is asked again.
    pub fn failover(&self, replica: u16, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        let _: String = redis::cmd("CLUSTER").arg("FAILOVER").query(&mut self.client(replica)).expect("CLUSTER FAILOVER");
        let mut asked = Instant::now();
        while !self.view(replica).is_some_and(|v| v.primary && !v.slots.is_empty()) {
            assert!(Instant::now() < deadline, "the replica on {replica} did not take over within {timeout:?}");
            if asked.elapsed() > MANUAL_FAILOVER_TIMEOUT {
                // An error here is a replica that took over meanwhile ("send
                // CLUSTER FAILOVER to a replica"): the loop sees it.
                let _ = redis::cmd("CLUSTER").arg("FAILOVER").query::<String>(&mut self.client(replica));
                asked = Instant::now();
            }
            sleep(Duration::from_millis(20));
        }
        self.wait_ok(deadline.saturating_duration_since(Instant::now()));
    }

    /// True when the cluster is ok as every live node sees it: state ok,
    /// every slot served by a node not failing, every killed node flagged
    /// `fail`, every live primary serving slots knows itself as such, and
    /// every live replica in sync, as it and its primary see it.
    pub fn is_ok(&self) -> bool {
        let killed: Vec<&str> = self.nodes.iter().filter(|n| n.child.is_none()).map(|n| n.id.as_str()).collect();
        let (mut served, mut replicas, mut online) = (0u32, 0usize, 0usize);
        for port in self.live_ports() {
            let Ok(mut client) = try_client(port) else { return false };
            let Ok(info) = redis::cmd("CLUSTER").arg("INFO").query::<String>(&mut client) else { return false };
            if !info.lines().any(|l| l.trim() == "cluster_state:ok") || !info.lines().any(|l| l.trim() == "cluster_slots_ok:16384") {
                return false;
            }
            let Ok(nodes) = redis::cmd("CLUSTER").arg("NODES").query::<String>(&mut client) else { return false };
            for id in &killed {
                let seen_failed = nodes
                    .lines()
                    .any(|line| line.starts_with(id) && line.split(' ').nth(2).is_some_and(|flags| flags.split(',').any(|f| f == "fail")));
                if !seen_failed {
                    return false;
                }
            }
            let Ok(replication) = redis::cmd("INFO").arg("replication").query::<String>(&mut client) else { return false };
            if replication.lines().any(|l| l.trim() == "role:slave") && !replication.lines().any(|l| l.trim() == "master_link_status:up") {
                return false;
            }
            // A replica says its link is up before its primary counts it
            // online (diskless sync: at its first ACK); until then a WAIT on
            // the primary finds no replica.
            let replica_not_online = |l: &str| l.starts_with("slave") && l.contains(":ip=") && !l.contains(",state=online,");
            if replication.lines().any(replica_not_online) {
                return false;
            }
            online += replication.lines().filter(|l| l.starts_with("slave") && l.contains(",state=online,")).count();
            match view_in(port, &nodes) {
                // A node that is to be a replica is a primary without slots
                // until it hears its `CLUSTER REPLICATE`: its primary lists
                // no replica then, and a WAIT there finds none.
                Some(view) if view.primary && view.slots.is_empty() => return false,
                Some(view) if view.primary => served += view.slots.iter().map(|&(from, to)| u32::from(to - from) + 1).sum::<u32>(),
                Some(_) => replicas += 1,
                None => return false,
            }
        }
        // Every replica counted online by a primary, not only linked.
        served == 16384 && online == replicas
    }

    /// Waits until [`Cluster::is_ok`].
    pub fn wait_ok(&self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        while !self.is_ok() {
            assert!(Instant::now() < deadline, "the cluster was not ok within {timeout:?}");
            sleep(Duration::from_millis(20));
        }
    }

    /// Writes to every primary, then waits until `CLUSTER SLOTS` on `port`
    /// names a replica for every range: Redis leaves out a replica whose
    /// replication offset it has as 0 (nothing replicated yet, as gossip
    /// tells), as a fresh cluster's are.
    pub fn wait_replicas_listed(&self, port: u16, timeout: Duration) {
        for primary in self.primaries() {
            let key = (0..).map(|i| format!("replicated:{i}")).find(|key| self.primary_of(key) == primary).unwrap();
            let _: () = redis::cmd("SET").arg(&key).arg(1).query(&mut self.client(primary)).unwrap();
        }
        let deadline = Instant::now() + timeout;
        loop {
            let ranges: Vec<Vec<redis::Value>> = redis::cmd("CLUSTER").arg("SLOTS").query(&mut self.client(port)).unwrap();
            if ranges.iter().all(|range| range.len() > 3) {
                return;
            }
            assert!(Instant::now() < deadline, "CLUSTER SLOTS named no replica for some range within {timeout:?}");
            sleep(Duration::from_millis(50));
        }
    }

    /// The node ids of the live nodes, for logs.
    pub fn describe(&self) -> String {
        let views: BTreeSet<String> = self
            .views()
            .into_iter()
            .map(|v| format!("{}:{}:{:?}", v.port, if v.primary { "primary" } else { "replica" }, v.slots))
            .collect();
        views.into_iter().collect::<Vec<_>>().join(" ")
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for node in &mut self.nodes {
            if let Some(mut child) = node.child.take() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn try_client(port: u16) -> redis::RedisResult<redis::Connection> {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}"))?;
    let connection = client.get_connection_with_timeout(Duration::from_secs(1))?;
    connection.set_read_timeout(Some(Duration::from_secs(2)))?;
    Ok(connection)
}

/// `n` distinct ports of this process's range (see [`port_range`]) whose
/// cluster bus ports (port + 10000) are free too, both below the ephemeral
/// range (from 32768 on Linux), where the kernel never puts an outgoing
/// connection of some other test between our check and the bind. The
/// listeners are held until all are chosen, so no port is picked twice.
fn free_port_pairs(n: usize) -> Vec<u16> {
    let (start, span) = port_range();
    let mut held = Vec::new();
    let mut ports = Vec::new();
    let mut offset = (nanos() % u32::from(span)) as u16;
    let mut tried = 0;
    while ports.len() < n {
        assert!(tried < span, "fewer than {n} free port pairs in {start}..{}", start + span);
        tried += 1;
        offset = (offset + 37) % span;
        let candidate = start + offset;
        let (Ok(listener), Ok(bus)) = (TcpListener::bind(("127.0.0.1", candidate)), TcpListener::bind(("127.0.0.1", candidate + 10_000)))
        else {
            continue;
        };
        held.push(listener);
        held.push(bus);
        ports.push(candidate);
    }
    ports
}

/// How many ranges the cluster ports (10000-21999) are cut into, and how
/// many ports each has.
const RANGES: u16 = 20;
const RANGE_PORTS: u16 = 600;

/// The cluster ports this test process has to itself: suites run side by
/// side (scripts/test-rust), and a port one of them frees by killing a node
/// must never become a node of another, which the first one's clients would
/// then reach as if it were theirs. Each process claims one range for its
/// life by an exclusive lock on that range's file.
fn port_range() -> (u16, u16) {
    static CLAIMED: OnceLock<(std::fs::File, u16)> = OnceLock::new();
    let (_, range) = CLAIMED.get_or_init(|| {
        let first = (std::process::id() % u32::from(RANGES)) as u16;
        for n in 0..RANGES {
            let range = (first + n) % RANGES;
            let path = std::env::temp_dir().join(format!("dokebi-lock-test-cluster-ports-{range}.lock"));
            let file = std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(&path).unwrap();
            if rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive).is_ok() {
                return (file, range);
            }
        }
        panic!("every one of the {RANGES} cluster port ranges is claimed by another test process");
    });
    (10_000 + range * RANGE_PORTS, RANGE_PORTS)
}

/// Some bits that differ between two clusters started at once.
fn nanos() -> u32 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos())
}

/// How the node on `port` sees itself in its `CLUSTER NODES` answer
/// `nodes` (the `myself` line).
fn view_in(port: u16, nodes: &str) -> Option<NodeView> {
    let line = nodes.lines().find(|line| line.split(' ').nth(2).is_some_and(|flags| flags.split(',').any(|f| f == "myself")))?;
    let fields: Vec<&str> = line.split(' ').collect();
    let primary = fields[2].split(',').any(|f| f == "master");
    let slots = fields[8..]
        .iter()
        .filter(|s| !s.starts_with('['))
        .map(|s| match s.split_once('-') {
            Some((from, to)) => (from.parse().unwrap(), to.parse().unwrap()),
            None => (s.parse().unwrap(), s.parse().unwrap()),
        })
        .collect();
    Some(NodeView { port, id: fields[0].to_string(), primary, slots })
}

/// Connects to `port` until a connect gets no answer within `patience`:
/// the listener's accept queue is then full, and the next SYN to it is
/// dropped. Answers the connections that fill it.
pub fn fill_accept_queue(port: u16, patience: Duration) -> Vec<std::net::TcpStream> {
    let addr: std::net::SocketAddr = ([127, 0, 0, 1], port).into();
    let mut kept = Vec::new();
    for _ in 0..10_000 {
        match std::net::TcpStream::connect_timeout(&addr, patience) {
            Ok(stream) => kept.push(stream),
            Err(err) => {
                assert_eq!(err.kind(), std::io::ErrorKind::TimedOut, "connect: {err}");
                return kept;
            }
        }
    }
    panic!("the accept queue of {port} never filled");
}

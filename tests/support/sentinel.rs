//! A private Sentinel deployment for one test: a primary, one replica and 3
//! sentinels (quorum 2) on free loopback ports, killed (and their temp dir
//! removed) on drop, also when the test fails.
//!
//! The sentinels say a primary is down after 1000 ms without an answer
//! (`down-after-milliseconds`) and give a failover `failover-timeout` 2000
//! ms (a failed election is retried after twice that). Each sentinel has its
//! own config file in the temp dir (sentinels rewrite it). The replica syncs
//! at once (diskless, no delay) before the sentinels start, so their first
//! `INFO` of the primary already lists it. [`Sentinels::start`] returns once
//! every sentinel knows the replica and the two other sentinels.
//!
//! Helpers: the primary the sentinels name, kill it (SIGKILL), wait until
//! every sentinel names a new primary that says it is one.
//!
//! Uses only `super::redis_server` (the fault suite includes both by path).

#![allow(dead_code)] // each test binary uses a different part

use std::collections::HashMap;
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::thread::sleep;
use std::time::{Duration, Instant};

use super::redis_server::RedisServer;

pub const PRIMARY_NAME: &str = "mymaster";
/// `sentinel down-after-milliseconds`.
pub const DOWN_AFTER_MS: u64 = 1000;
/// `sentinel failover-timeout`.
pub const FAILOVER_TIMEOUT_MS: u64 = 2000;

pub struct Sentinels {
    dir: PathBuf,
    /// The data servers: the first primary at start, the second its replica.
    servers: Vec<RedisServer>,
    sentinels: Vec<(u16, Option<Child>)>,
    /// Held while the deployment lives: see [`ONE_AT_A_TIME`].
    _turn: MutexGuard<'static, ()>,
}

/// One deployment of a test binary runs at a time: several at once on 2
/// cores made failovers and replica acknowledgements depend on scheduling.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

impl Sentinels {
    /// Starts a primary, its replica and 3 sentinels; waits until every
    /// sentinel sees the replica and the other sentinels.
    pub fn start() -> Sentinels {
        let turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
        // The data servers work in a private data dir each (a replica
        // writes the snapshot it syncs from), removed on drop.
        let primary = RedisServer::start_persistent(&["--repl-diskless-sync", "yes", "--repl-diskless-sync-delay", "0"]);
        let primary_port = primary.port().to_string();
        let replica = RedisServer::start_persistent(&[
            "--repl-diskless-sync",
            "yes",
            "--repl-diskless-sync-delay",
            "0",
            "--replicaof",
            "127.0.0.1",
            &primary_port,
        ]);
        let dir = std::env::temp_dir().join(format!("dokebi-sentinel-{}-{}", std::process::id(), primary.port()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let mut deployment = Sentinels { dir, servers: vec![primary, replica], sentinels: Vec::new(), _turn: turn };
        let deadline = Instant::now() + Duration::from_secs(10);
        while !deployment.servers[1].replica_synced() {
            assert!(Instant::now() < deadline, "the replica did not sync");
            sleep(Duration::from_millis(5));
        }
        let ports: Vec<u16> = {
            let listeners: Vec<TcpListener> = (0..3).map(|_| TcpListener::bind("127.0.0.1:0").unwrap()).collect();
            listeners.iter().map(|l| l.local_addr().unwrap().port()).collect()
        };
        for port in ports {
            let config = deployment.dir.join(format!("sentinel-{port}.conf"));
            std::fs::write(
                &config,
                format!(
                    "port {port}\nbind 127.0.0.1\ndir {dir}\nlogfile {dir}/sentinel-{port}.log\n\
                     sentinel monitor {PRIMARY_NAME} 127.0.0.1 {primary_port} 2\n\
                     sentinel down-after-milliseconds {PRIMARY_NAME} {DOWN_AFTER_MS}\n\
                     sentinel failover-timeout {PRIMARY_NAME} {FAILOVER_TIMEOUT_MS}\n\
                     sentinel parallel-syncs {PRIMARY_NAME} 1\n",
                    dir = deployment.dir.display()
                ),
            )
            .unwrap();
            let child = Command::new("redis-server")
                .arg(&config)
                .arg("--sentinel")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("redis-server is installed (scripts/setup)");
            deployment.sentinels.push((port, Some(child)));
        }
        let deadline = Instant::now() + Duration::from_secs(20);
        while !deployment.settled() {
            assert!(Instant::now() < deadline, "the sentinels did not find the replica and each other");
            sleep(Duration::from_millis(50));
        }
        deployment
    }

    /// True when every sentinel knows 1 replica that is not down and the 2
    /// other sentinels.
    fn settled(&self) -> bool {
        self.sentinels.iter().all(|&(port, _)| {
            let Some(master) = sentinel_query::<Vec<String>>(port, redis::cmd("SENTINEL").arg("MASTER").arg(PRIMARY_NAME)) else {
                return false;
            };
            let fields: HashMap<&str, &str> = master.chunks(2).filter(|c| c.len() == 2).map(|c| (c[0].as_str(), c[1].as_str())).collect();
            let Some(replicas) = sentinel_query::<Vec<Vec<String>>>(port, redis::cmd("SENTINEL").arg("REPLICAS").arg(PRIMARY_NAME)) else {
                return false;
            };
            let replica_up = replicas.iter().any(|r| r.chunks(2).any(|c| c.len() == 2 && c[0] == "flags" && c[1] == "slave"));
            fields.get("num-other-sentinels") == Some(&"2") && fields.get("flags") == Some(&"master") && replica_up
        })
    }

    /// The sentinels' URLs.
    pub fn urls(&self) -> Vec<String> {
        self.sentinels.iter().map(|(port, _)| format!("redis://127.0.0.1:{port}")).collect()
    }

    /// The connection's endpoint as YAML (a flow mapping on one line):
    /// `sentinel: { nodes: [...], primaryName: mymaster }`.
    pub fn endpoint_yaml(&self) -> String {
        format!("sentinel: {{ nodes: [{}], primaryName: {PRIMARY_NAME} }}", self.urls().join(", "))
    }

    /// The primary's port as the first sentinel that answers names it.
    pub fn primary_port(&self) -> u16 {
        self.sentinels
            .iter()
            .filter(|(_, child)| child.is_some())
            .find_map(|&(port, _)| self.named_by(port))
            .expect("a sentinel names the primary")
    }

    fn named_by(&self, sentinel: u16) -> Option<u16> {
        let (_host, port): (String, u16) =
            sentinel_query(sentinel, redis::cmd("SENTINEL").arg("get-master-addr-by-name").arg(PRIMARY_NAME))?;
        Some(port)
    }

    /// The data server on `port` (primary or replica).
    pub fn server(&self, port: u16) -> &RedisServer {
        self.servers.iter().find(|s| s.port() == port).expect("a server of this deployment")
    }

    /// The primary the sentinels name now.
    pub fn primary(&self) -> &RedisServer {
        self.server(self.primary_port())
    }

    /// The replica: the data server that is not the named primary.
    pub fn replica(&self) -> &RedisServer {
        let primary = self.primary_port();
        self.servers.iter().find(|s| s.port() != primary).expect("a replica")
    }

    /// Kills the `index`-th sentinel (SIGKILL); the others go on (2 of 3
    /// still make the quorum and elect a leader).
    pub fn kill_sentinel(&mut self, index: usize) {
        if let Some(mut child) = self.sentinels[index].1.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Freezes the `index`-th sentinel (SIGSTOP): its socket takes
    /// connections and never answers. Killed on drop all the same.
    pub fn pause_sentinel(&self, index: usize) {
        let pid = self.sentinels[index].1.as_ref().expect("a live sentinel").id();
        assert!(Command::new("kill").args(["-STOP", &pid.to_string()]).status().unwrap().success());
    }

    /// Kills the primary the sentinels name (SIGKILL); returns its port.
    pub fn kill_primary(&mut self) -> u16 {
        let port = self.primary_port();
        self.servers.iter_mut().find(|s| s.port() == port).expect("the primary").stop();
        port
    }

    /// Waits until every sentinel names a primary other than `old`, and
    /// that server says `role:master`; returns its port.
    pub fn wait_new_primary(&self, old: u16, timeout: Duration) -> u16 {
        let deadline = Instant::now() + timeout;
        loop {
            let named: Vec<Option<u16>> =
                self.sentinels.iter().filter(|(_, child)| child.is_some()).map(|&(port, _)| self.named_by(port)).collect();
            if let Some(Some(port)) = named.first() {
                let port = *port;
                if port != old && named.iter().all(|n| *n == Some(port)) && self.is_primary(port) {
                    return port;
                }
            }
            assert!(Instant::now() < deadline, "the sentinels named no new primary within {timeout:?} (they name {named:?})");
            sleep(Duration::from_millis(20));
        }
    }

    /// A planned failover (`SENTINEL FAILOVER`, asked of the first live
    /// sentinel): the replica is promoted; the sentinels make the old
    /// primary, alive, its replica only once they see it still reporting
    /// itself a primary for a while (about 8 s). Waits until every sentinel
    /// names the new primary; returns its port.
    pub fn failover(&self, timeout: Duration) -> u16 {
        let old = self.primary_port();
        let asked = self.sentinels.iter().find(|(_, child)| child.is_some()).expect("a live sentinel").0;
        let _: String = sentinel_query(asked, redis::cmd("SENTINEL").arg("FAILOVER").arg(PRIMARY_NAME)).expect("SENTINEL FAILOVER");
        self.wait_new_primary(old, timeout)
    }

    /// A planned failover asked of the `index`-th sentinel; waits until it
    /// names a new primary that says it is one (the others may lag, or be
    /// paused). Returns the new primary's port.
    pub fn failover_asking(&self, index: usize, timeout: Duration) -> u16 {
        let sentinel = self.sentinels[index].0;
        let old = self.named_by(sentinel).expect("the sentinel names the primary");
        let _: String = sentinel_query(sentinel, redis::cmd("SENTINEL").arg("FAILOVER").arg(PRIMARY_NAME)).expect("SENTINEL FAILOVER");
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(new) = self.named_by(sentinel).filter(|&new| new != old && self.is_primary(new)) {
                return new;
            }
            assert!(Instant::now() < deadline, "sentinel {index} named no new primary within {timeout:?}");
            sleep(Duration::from_millis(20));
        }
    }

    /// Waits until the server on `port` is a replica in sync (a demoted
    /// primary once the sentinels reconfigured it).
    pub fn wait_replica_synced(&self, port: u16, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        while !self.server(port).replica_synced() {
            assert!(Instant::now() < deadline, "the server on {port} did not become a replica in sync within {timeout:?}");
            sleep(Duration::from_millis(20));
        }
    }

    fn is_primary(&self, port: u16) -> bool {
        let server = self.servers.iter().find(|s| s.port() == port);
        server.is_some_and(|s| {
            // A server changing roles may drop this probe's connection too.
            let Ok(mut client) = redis::Client::open(s.url()).and_then(|c| c.get_connection()) else { return false };
            s.running() && {
                let info: String = redis::cmd("INFO").arg("replication").query(&mut client).unwrap_or_default();
                info.lines().any(|l| l.trim() == "role:master")
            }
        })
    }
}

impl Drop for Sentinels {
    fn drop(&mut self) {
        for (_, child) in &mut self.sentinels {
            if let Some(mut child) = child.take() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
        // The data servers are killed by their own Drop.
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn sentinel_query<T: redis::FromRedisValue>(port: u16, command: &redis::Cmd) -> Option<T> {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}")).ok()?;
    let mut connection = client.get_connection_with_timeout(Duration::from_secs(1)).ok()?;
    connection.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    command.query(&mut connection).ok()
}

//! A one-node Redis Cluster (every slot on one `redis-server`, full
//! coverage not required) whose node announces a proxy's port
//! (tests/faults/proxy.rs), so that a cluster connection reaches it only
//! through the proxy: where the reviews lose or delay a command of a
//! Cluster client (review_r18, review_r22). A test crate that uses it
//! declares `mod support` and `mod proxy`.

use std::time::Duration;

use super::proxy::Proxy;
use super::support::eventually;
use super::support::redis_server::RedisServer;

/// The server, its proxy, and the directory of its cluster state (the
/// caller removes it). `name` keeps tests' directories apart.
pub fn one_node_cluster_behind_proxy(name: &str) -> (RedisServer, Proxy, std::path::PathBuf) {
    let root = std::env::temp_dir().join(format!("dokebi-{name}-cluster-{}-{:?}", std::process::id(), std::thread::current().id()));
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root).unwrap();
    let config = root.join("nodes.conf").display().to_string();
    let dir = root.display().to_string();
    let server = RedisServer::start_with(&[
        "--cluster-enabled",
        "yes",
        "--cluster-config-file",
        &config,
        "--dir",
        &dir,
        "--cluster-require-full-coverage",
        "no",
    ]);
    let proxy = Proxy::start(server.port(), Duration::ZERO);
    let mut client = server.client();
    let _: () = redis::cmd("CONFIG").arg("SET").arg("cluster-announce-ip").arg("127.0.0.1").query(&mut client).unwrap();
    let _: () = redis::cmd("CONFIG").arg("SET").arg("cluster-announce-port").arg(proxy.port()).query(&mut client).unwrap();
    let _: () = redis::cmd("CLUSTER").arg("ADDSLOTSRANGE").arg(0).arg(16383).query(&mut client).unwrap();
    eventually("the one-node cluster is ok", || {
        let info: String = redis::cmd("CLUSTER").arg("INFO").query(&mut server.client()).unwrap();
        info.contains("cluster_state:ok")
    });
    (server, proxy, root)
}

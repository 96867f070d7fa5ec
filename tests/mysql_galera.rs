//! The mysql driver on a Galera cluster (issue 52: "Galera (`wsrep_on`):
//! detect and refuse, or state what holds"): a Galera node on this machine
//! (`libgalera_smm`, a private `mariadbd` on free ports).

#[path = "mysql/mod.rs"]
mod mysql;
#[path = "mysql/server.rs"]
mod mysql_server;

use std::time::Duration;

use dokebi_lock::{AcquireOptions, ErrorCode, Provider};
use futures::executor::block_on;
use mysql::{yaml, Table};
use mysql_server::{free_port, PrivateServer};

const PROVIDER: &str = "/usr/lib/galera/libgalera_smm.so";

/// The first node of a new Galera cluster: a private server with the
/// Galera provider, on free ports of its own for the group, IST and SST.
struct Node {
    server: PrivateServer,
    group: u16,
    ist: u16,
    sst: u16,
}

impl Node {
    /// The node with its (global) `wsrep_on` as given, started and, with
    /// `ON`, in sync (the server takes no statement before).
    fn bootstrap(wsrep_on: &str) -> Node {
        let (group, ist, sst) = (free_port(), free_port(), free_port());
        let args = Node::args(group, ist, sst, wsrep_on);
        let server = PrivateServer::start(&args.iter().map(String::as_str).collect::<Vec<_>>());
        Node { server, group, ist, sst }
    }

    /// Restarts the node on its data and ports with `wsrep_on` as given.
    fn restart(&mut self, wsrep_on: &str) {
        let args = Node::args(self.group, self.ist, self.sst, wsrep_on);
        self.server.restart_with(&args.iter().map(String::as_str).collect::<Vec<_>>());
    }

    fn args(group: u16, ist: u16, sst: u16, wsrep_on: &str) -> Vec<String> {
        vec![
            format!("--wsrep-on={wsrep_on}"),
            "--binlog-format=ROW".to_owned(),
            "--innodb-autoinc-lock-mode=2".to_owned(),
            "--wsrep-sst-method=rsync".to_owned(),
            format!("--wsrep-provider={PROVIDER}"),
            "--wsrep-cluster-address=gcomm://".to_owned(),
            format!("--wsrep-node-address=127.0.0.1:{group}"),
            format!("--wsrep-provider-options=gmcast.listen_addr=tcp://127.0.0.1:{group};ist.recv_addr=127.0.0.1:{ist}"),
            format!("--wsrep-sst-receive-address=127.0.0.1:{sst}"),
        ]
    }

    fn url(&self) -> String {
        self.server.url()
    }
}

fn wait(ms: u64) -> AcquireOptions {
    AcquireOptions { wait_timeout: Some(Duration::from_millis(ms)), ..AcquireOptions::default() }
}

/// A node of a Galera cluster is refused at the first call, with the
/// setting named: on a two-node cluster of this machine, before this
/// refusal, the driver's releases were refused by certification (1213,
/// `PROVIDER_FAILED`, the lease kept until it expired) and acquires
/// stalled past their command timeout (`OUTCOME_UNKNOWN`) within seconds of
/// plain, counted and reader/writer keys taken on both nodes.
#[test]
fn a_node_of_a_galera_cluster_is_refused_with_the_setting_named() {
    let node = Node::bootstrap("ON");
    let table = Table::fresh();
    let url = node.url().replace("root@", "root:secret-word@");
    let provider = Provider::from_yaml(&yaml(&table.0, "").replace(&mysql::url(), &url)).unwrap();
    let err = block_on(provider.backend("shared").unwrap().acquire("k", wait(0))).expect_err("refused on a Galera node");
    assert_eq!(err.code(), ErrorCode::ProviderFailed, "{err}");
    let text = format!("{err} {} {:?}", err.fix(), err.details());
    assert!(text.contains("Galera") && text.contains("wsrep_on"), "the error names the setting: {text}");
    assert!(!text.contains("secret-word"), "no password in the error: {text}");
}

/// The refusal holds for the server as it is now, not as it was at the
/// process's first call: a server that turns into a Galera node later
/// (restarted into a cluster) is refused from
/// then on, as a Galera node met at the first call is.
#[test]
fn a_server_that_becomes_a_galera_node_later_is_refused_from_then_on() {
    let mut node = Node::bootstrap("OFF");
    let table = Table::fresh();
    let provider = Provider::from_yaml(&yaml(&table.0, "").replace(&mysql::url(), &node.url())).unwrap();
    let backend = provider.backend("shared").unwrap();
    let first = block_on(backend.acquire("k", wait(0))).expect("wsrep_on = OFF: not a Galera node yet");
    assert!(block_on(first.release()).unwrap());
    // A restart (on its data and port) into a cluster: SET GLOBAL wsrep_on
    // is refused (4165) on a server started without it.
    node.restart("ON");
    // The pool's connections died with the old server: one call meets them.
    let _ = block_on(backend.acquire("warm-up", wait(0)));
    let err = match block_on(backend.acquire("k", wait(0))) {
        Ok(lease) => panic!("a Galera node now, yet granted k (fence {}): wsrep_on was read at the first call only", lease.fence()),
        Err(err) => err,
    };
    assert_eq!(err.code(), ErrorCode::ProviderFailed, "{err}");
}

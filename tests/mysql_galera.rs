//! The mysql driver on a Galera cluster (issue 52: "Galera (`wsrep_on`):
//! detect and refuse, or state what holds"): a Galera node on this machine
//! (`libgalera_smm`, a private `mariadbd` on free ports).

#[path = "mysql/mod.rs"]
mod mysql;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use dokebi_lock::{AcquireOptions, ErrorCode, Provider};
use futures::executor::block_on;
use mysql::{yaml, Table};

const PROVIDER: &str = "/usr/lib/galera/libgalera_smm.so";

/// One node of the cluster; stopped and removed on drop.
struct Node {
    child: Option<Child>,
    dir: PathBuf,
    /// The client port, then the group's, IST's and SST's.
    port: u16,
    group: u16,
    ist: u16,
    sst: u16,
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

impl Node {
    /// The first node of a new cluster.
    fn bootstrap() -> Node {
        Node::bootstrap_with("ON")
    }

    /// The first node of a new cluster, its `wsrep_on` (global) `wsrep_on`.
    fn bootstrap_with(wsrep_on: &str) -> Node {
        // One directory per node: the tests run at once in one process.
        static NODES: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!("dokebi-galera-{}-{}", std::process::id(), NODES.fetch_add(1, Ordering::Relaxed)));
        let _ = std::fs::remove_dir_all(&dir);
        for sub in ["data", "tmp"] {
            std::fs::create_dir_all(dir.join(sub)).unwrap();
        }
        chown_to_mysql(&dir);
        let installed = Command::new("mariadb-install-db")
            .args(["--no-defaults", "--skip-test-db", "--auth-root-authentication-method=normal", "--user=mysql"])
            .arg(format!("--datadir={}", dir.join("data").display()))
            .arg(format!("--tmpdir={}", dir.join("tmp").display()))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("mariadb-install-db runs");
        assert!(installed.success(), "mariadb-install-db failed");
        let mut node = Node { child: None, dir, port: free_port(), group: free_port(), ist: free_port(), sst: free_port() };
        node.start(wsrep_on);
        node
    }

    /// Starts (or restarts, on its data) the node's server, `wsrep_on` as
    /// given, and waits for it.
    fn start(&mut self, wsrep_on: &str) {
        self.stop();
        let (dir, port, group, ist, sst) = (&self.dir, self.port, self.group, self.ist, self.sst);
        let child = Command::new("mariadbd")
            .arg("--no-defaults")
            .arg(format!("--datadir={}", dir.join("data").display()))
            .arg(format!("--socket={}", dir.join("sock").display()))
            .arg(format!("--tmpdir={}", dir.join("tmp").display()))
            .arg(format!("--port={port}"))
            .args(["--bind-address=127.0.0.1", "--skip-grant-tables", "--user=mysql", "--innodb-buffer-pool-size=16M"])
            .arg(format!("--wsrep-on={wsrep_on}"))
            .args(["--binlog-format=ROW", "--innodb-autoinc-lock-mode=2", "--wsrep-sst-method=rsync"])
            .arg(format!("--wsrep-provider={PROVIDER}"))
            .arg("--wsrep-cluster-address=gcomm://")
            .arg(format!("--wsrep-node-address=127.0.0.1:{group}"))
            .arg(format!("--wsrep-provider-options=gmcast.listen_addr=tcp://127.0.0.1:{group};ist.recv_addr=127.0.0.1:{ist}"))
            .arg(format!("--wsrep-sst-receive-address=127.0.0.1:{sst}"))
            .stdout(Stdio::null())
            .stderr(std::fs::File::options().create(true).append(true).open(dir.join("log")).unwrap())
            .spawn()
            .expect("mariadbd starts");
        self.child = Some(child);
        self.wait_synced(wsrep_on == "ON");
    }

    fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    fn url(&self) -> String {
        format!("mysql://root@127.0.0.1:{}/test", self.port)
    }

    /// Waits for the node to answer, and (`replicating`) to be in sync.
    fn wait_synced(&self, replicating: bool) {
        let started = Instant::now();
        let sql = "SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME = 'WSREP_LOCAL_STATE_COMMENT'";
        loop {
            let state = query(&self.url().replace("/test", "/mysql"), sql).ok().and_then(|rows| rows.into_iter().next()).flatten();
            if state.as_deref() == Some("Synced") || !replicating && query(&self.url().replace("/test", "/mysql"), "SELECT 1").is_ok() {
                break;
            }
            assert!(started.elapsed() < Duration::from_secs(60), "the Galera node did not come up: {}", self.dir.display());
            std::thread::sleep(Duration::from_millis(200));
        }
        query(&self.url().replace("/test", "/mysql"), "CREATE DATABASE IF NOT EXISTS test").unwrap();
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `mariadbd` runs as `mysql` (it refuses root) and must own its files.
fn chown_to_mysql(dir: &Path) {
    let status = Command::new("chown").args(["-R", "mysql"]).arg(dir).status().expect("chown runs");
    assert!(status.success());
}

/// The first column of each row `sql` answers on `url`.
fn query(url: &str, sql: &str) -> Result<Vec<Option<String>>, mysql_async::Error> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        use mysql_async::prelude::Queryable;
        let opts = mysql_async::OptsBuilder::from_opts(mysql_async::Opts::from_url(url).unwrap()).prefer_socket(false);
        let mut conn = mysql_async::Conn::new(opts).await?;
        let rows: Vec<Option<String>> = conn.query(sql).await?;
        let _ = conn.disconnect().await;
        Ok(rows)
    })
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
    let node = Node::bootstrap();
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
    let mut node = Node::bootstrap_with("OFF");
    let table = Table::fresh();
    let provider = Provider::from_yaml(&yaml(&table.0, "").replace(&mysql::url(), &node.url())).unwrap();
    let backend = provider.backend("shared").unwrap();
    let first = block_on(backend.acquire("k", wait(0))).expect("wsrep_on = OFF: not a Galera node yet");
    assert!(block_on(first.release()).unwrap());
    // A restart (on its data and port) into a cluster: SET GLOBAL wsrep_on
    // is refused (4165) on a server started without it.
    node.start("ON");
    // The pool's connections died with the old server: one call meets them.
    let _ = block_on(backend.acquire("warm-up", wait(0)));
    let err = match block_on(backend.acquire("k", wait(0))) {
        Ok(lease) => panic!("a Galera node now, yet granted k (fence {}): wsrep_on was read at the first call only", lease.fence()),
        Err(err) => err,
    };
    assert_eq!(err.code(), ErrorCode::ProviderFailed, "{err}");
}

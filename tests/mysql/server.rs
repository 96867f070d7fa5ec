//! A private MariaDB for one test: `mariadb-install-db` into a fresh
//! directory and `mariadbd` on a free port of 127.0.0.1, run as the
//! current user, privileges off unless asked (`root` without a password
//! either way), stopped and removed on drop (also when the test fails). It
//! can crash (SIGKILL: InnoDB recovers from its redo log on the next
//! start) and restart on the same data and port, end its clients'
//! connections (`KILL`), give a replica (asynchronous, or
//! semi-synchronous) that can be promoted, and restart with other options
//! (a Galera node's `wsrep_on`: tests/mysql_galera.rs).

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use mysql_async::prelude::{FromValue, Queryable};

/// Privileges on (root without a password from 127.0.0.1), for a primary
/// and its replica: the definer of a procedure created without grant
/// tables is ``, which a replica's applier refuses ("Invalid role
/// specification").
pub const GRANTS: &str = "--skip-grant-tables=0";

pub struct PrivateServer {
    /// `None` once crashed and not started again.
    child: Option<Child>,
    dir: PathBuf,
    port: u16,
    args: Vec<String>,
    /// The OpenSSL configuration the server starts with, when not the
    /// system's.
    openssl_conf: Option<PathBuf>,
}

static SERVERS: AtomicUsize = AtomicUsize::new(0);

impl PrivateServer {
    /// A new server with `args` (`mariadbd` options) added, started, with
    /// an empty database `test`.
    pub fn start(args: &[&str]) -> PrivateServer {
        PrivateServer::start_under(args, None)
    }

    /// [`PrivateServer::start`] under the OpenSSL configuration
    /// `openssl_conf` (a lower security level loads a key OpenSSL refuses
    /// by default).
    pub fn start_under_openssl_conf(args: &[&str], openssl_conf: &Path) -> PrivateServer {
        PrivateServer::start_under(args, Some(openssl_conf.to_owned()))
    }

    fn start_under(args: &[&str], openssl_conf: Option<PathBuf>) -> PrivateServer {
        let dir = std::env::temp_dir().join(format!("dokebi-mariadb-{}-{}", std::process::id(), SERVERS.fetch_add(1, Ordering::Relaxed)));
        let _ = std::fs::remove_dir_all(&dir);
        // Temporary files in the server's own directory: the bootstraps of
        // servers starting together in a shared /tmp sometimes failed
        // ("Could not remove temporary table", 1051).
        std::fs::create_dir_all(dir.join("tmp")).unwrap();
        let installed = Command::new("mariadb-install-db")
            .args(["--no-defaults", "--skip-test-db", "--auth-root-authentication-method=normal"])
            .arg(format!("--datadir={}", dir.join("data").display()))
            .arg(format!("--tmpdir={}", dir.join("tmp").display()))
            .arg(format!("--user={}", user()))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("install.log")).unwrap())
            .status()
            .expect("mariadb-install-db runs");
        assert!(installed.success(), "mariadb-install-db failed: {}", std::fs::read_to_string(dir.join("install.log")).unwrap_or_default());
        let mut server =
            PrivateServer { child: None, dir, port: free_port(), args: args.iter().map(|arg| (*arg).to_owned()).collect(), openssl_conf };
        server.start_again();
        server
    }

    /// A replica of this server (which must run with `--log-bin`, a
    /// `--server-id` other than 2 and [`GRANTS`]) replicating through
    /// `port` (this server's, or a proxy's, which a test can hold to make
    /// the replica lag), from the first transaction, with `args` added;
    /// answers once it has applied everything this server wrote.
    pub fn replica_through(&self, port: u16, args: &[&str]) -> PrivateServer {
        let replica = PrivateServer::start(&[&["--server-id=2", GRANTS], args].concat());
        replica
            .run(&format!(
                "CHANGE MASTER TO MASTER_HOST = '127.0.0.1', MASTER_PORT = {port}, MASTER_USER = 'root', MASTER_USE_GTID = slave_pos, MASTER_CONNECT_RETRY = 1; START SLAVE"
            ))
            .expect("the replica starts replicating");
        let deadline = Instant::now() + Duration::from_secs(30);
        while replica.lag_behind(self) {
            assert!(Instant::now() < deadline, "the replica did not catch up with its primary");
            std::thread::sleep(Duration::from_millis(20));
        }
        replica
    }

    /// Turns semi-synchronous replication on between this primary and
    /// `replica` (started with `--rpl-semi-sync-slave-enabled=ON`): each
    /// commit waits, before it is made (lossless), until the replica
    /// received it, and never gives up waiting within a test. On only now:
    /// a semi-synchronous primary with no replica yet waits out its
    /// timeout at every commit, its start's own.
    pub fn replicate_semi_synchronously(&self, replica: &PrivateServer) {
        self.run(
            "SET GLOBAL rpl_semi_sync_master_wait_point = AFTER_SYNC; SET GLOBAL rpl_semi_sync_master_timeout = 600000;
             SET GLOBAL rpl_semi_sync_master_enabled = ON",
        )
        .expect("the primary replicates semi-synchronously");
        // The replica asks for semi-synchronous replication when it connects.
        replica.run("STOP SLAVE IO_THREAD; START SLAVE IO_THREAD").expect("the replica connects again");
        let deadline = Instant::now() + Duration::from_secs(30);
        let status = |name: &str| self.column(&format!("SHOW STATUS LIKE '{name}'"), "Value");
        while status("Rpl_semi_sync_master_clients").as_deref() != Some("1")
            || status("Rpl_semi_sync_master_status").as_deref() != Some("ON")
        {
            assert!(Instant::now() < deadline, "the replica did not connect semi-synchronously");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// True when this replica has not applied every transaction `primary`
    /// wrote to its binary log.
    pub fn lag_behind(&self, primary: &PrivateServer) -> bool {
        let written: Option<String> = primary.first("SELECT @@gtid_binlog_pos").unwrap();
        let applied: Option<String> = self.first("SELECT @@gtid_slave_pos").unwrap();
        written != applied
    }

    /// Makes this replica a primary, as a failover tool does: it stops
    /// receiving, applies every whole transaction it received (a
    /// semi-synchronous primary told its client of a commit once the
    /// replica had received it, not applied it), and forgets its primary.
    pub fn promote(&self) {
        self.run("STOP SLAVE IO_THREAD").expect("the replica stops receiving");
        // A transaction cut short by the link is never applied: the state
        // to wait for is the applier's having read all it has.
        let deadline = Instant::now() + Duration::from_secs(30);
        while !self.column("SHOW SLAVE STATUS", "Slave_SQL_Running_State").is_some_and(|state| state.contains("read all relay log")) {
            assert!(
                Instant::now() < deadline,
                "the replica did not apply what it received: {:?}, {:?}",
                self.column("SHOW SLAVE STATUS", "Slave_SQL_Running_State"),
                self.column("SHOW SLAVE STATUS", "Last_SQL_Error")
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        self.run("STOP SLAVE; RESET SLAVE ALL").expect("the replica forgets its primary");
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// The URL of database `test`.
    pub fn url(&self) -> String {
        format!("mysql://root@127.0.0.1:{}/test", self.port)
    }

    /// Crashes the server (SIGKILL): nothing flushed that was not already.
    pub fn crash(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// A crash and a start on the same data and port.
    pub fn crash_and_restart(&mut self) {
        self.crash();
        self.start_again();
    }

    /// A crash and a start on the same data and port with `args` in place
    /// of the options it was started with.
    pub fn restart_with(&mut self, args: &[&str]) {
        self.crash();
        self.args = args.iter().map(|arg| (*arg).to_owned()).collect();
        self.start_again();
    }

    /// Starts the server (after a crash: with recovery) and waits until it
    /// takes statements.
    pub fn start_again(&mut self) {
        assert!(self.child.is_none(), "the server runs already");
        self.child = Some(
            Command::new("mariadbd")
                .arg("--no-defaults")
                .arg(format!("--datadir={}", self.dir.join("data").display()))
                .arg(format!("--socket={}", self.dir.join("sock").display()))
                .arg(format!("--tmpdir={}", self.dir.join("tmp").display()))
                .arg(format!("--port={}", self.port))
                .args(["--bind-address=127.0.0.1", "--skip-grant-tables", "--skip-log-bin", "--innodb-buffer-pool-size=16M"])
                .arg(format!("--user={}", user()))
                .args(&self.args)
                .envs(self.openssl_conf.iter().map(|conf| ("OPENSSL_CONF", conf)))
                .stdout(Stdio::null())
                .stderr(std::fs::OpenOptions::new().create(true).append(true).open(self.dir.join("log")).unwrap())
                .spawn()
                .expect("mariadbd starts"),
        );
        self.wait_ready();
    }

    pub fn wait_ready(&self) {
        let started = Instant::now();
        // The setting under test may leave a transaction open: commit it.
        while self.run("CREATE DATABASE IF NOT EXISTS test; COMMIT").is_err() {
            assert!(started.elapsed() < Duration::from_secs(60), "the private mariadbd did not come up: {}", self.log());
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The server's error log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("log")).unwrap_or_default()
    }

    /// The first number `sql` answers (0 when none).
    pub fn sql(&self, sql: &str) -> Result<i64, mysql_async::Error> {
        Ok(self.first::<Option<i64>>(sql)?.flatten().unwrap_or(0))
    }

    /// The first column of the first row of `sql`, if any.
    pub fn first<T: FromValue + Send + 'static>(&self, sql: &str) -> Result<Option<T>, mysql_async::Error> {
        self.with_connection(|mut conn| async move {
            let first = conn.query_first(sql).await;
            let _ = conn.disconnect().await;
            first
        })
    }

    /// The rows of `sql`, each column as text.
    pub fn rows(&self, sql: &str) -> Result<Vec<Vec<String>>, mysql_async::Error> {
        self.with_connection(|mut conn| async move {
            let rows: Vec<mysql_async::Row> = conn.query(sql).await?;
            let _ = conn.disconnect().await;
            Ok(rows.into_iter().map(|row| (0..row.len()).map(|at| row.get::<String, _>(at).unwrap_or_default()).collect()).collect())
        })
    }

    /// Column `name` of the first row of `sql` (a `SHOW` statement's), if any.
    pub fn column(&self, sql: &str, name: &str) -> Option<String> {
        self.with_connection(|mut conn| async move {
            let row: Option<mysql_async::Row> = conn.query_first(sql).await?;
            let _ = conn.disconnect().await;
            Ok(row.and_then(|row| row.get_opt::<String, _>(name)).and_then(Result::ok))
        })
        .unwrap()
    }

    /// Runs `sql` (statements separated by `;`).
    pub fn run(&self, sql: &str) -> Result<(), mysql_async::Error> {
        self.with_connection(|mut conn| async move {
            let done = conn.query_drop(sql).await;
            let _ = conn.disconnect().await;
            done
        })
    }

    /// Ends every client connection but the one asking (`KILL`: a statement
    /// in flight is rolled back, the client finds its connection gone), and
    /// none of replication's; answers how many it ended.
    pub fn kill_clients(&self) -> usize {
        self.with_connection(|mut conn| async move {
            let ids: Vec<u64> = conn
                .query(
                    "SELECT ID FROM information_schema.PROCESSLIST WHERE ID <> CONNECTION_ID() AND USER <> 'system user'
                       AND COMMAND NOT IN ('Daemon', 'Binlog Dump', 'Killed')",
                )
                .await?;
            let mut ended = 0;
            for id in ids {
                // A connection that closed meanwhile: 1094, unknown thread.
                ended += usize::from(conn.query_drop(format!("KILL {id}")).await.is_ok());
            }
            let _ = conn.disconnect().await;
            Ok(ended)
        })
        .unwrap()
    }

    fn with_connection<T, F>(&self, work: impl FnOnce(mysql_async::Conn) -> F) -> Result<T, mysql_async::Error>
    where
        F: std::future::Future<Output = Result<T, mysql_async::Error>>,
    {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(async {
            let opts = mysql_async::Opts::from_url(&format!("mysql://root@127.0.0.1:{}", self.port)).unwrap();
            let conn = mysql_async::Conn::new(mysql_async::OptsBuilder::from_opts(opts).prefer_socket(false)).await?;
            work(conn).await
        })
    }
}

/// A port of 127.0.0.1 free now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn user() -> String {
    std::env::var("USER").unwrap_or_else(|_| "root".to_owned())
}

impl Drop for PrivateServer {
    fn drop(&mut self) {
        self.crash();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

//! The mysql scenarios (issue 52 §2): private MariaDB servers, one
//! namespace each (see `net.rs`), installed with `mariadb-install-db` and
//! run as `mariadbd`, with clients in namespaces of their own.
//!
//! - `mysql-partition` / `mysql-partition-semisync`: a primary `m1` and a
//!   replica `m2` (GTID replication over the data network). The clients
//!   reach "the primary" at a floating address, as behind keepalived or a
//!   failover manager's virtual IP: `m1`'s until the promotion. The
//!   primary and one client are cut off from the replica and the other
//!   clients; after a failover manager's detection time the harness
//!   promotes `m2` (it applies all it received and forgets its primary)
//!   and moves the address to it, as the majority sees it; both sides go
//!   on; then the network heals and the old primary is stopped, the
//!   cut-off client's frames for the address going to `m2` from then on
//!   (the failover manager's fencing: a MariaDB primary never demotes
//!   itself). Without semi-synchronous replication the old primary goes
//!   on granting to its client (overlaps in the documented window "a
//!   partitioned old primary"); with it (`rpl_semi_sync_master_wait_point =
//!   AFTER_SYNC`, a timeout longer than the run) none of its grants is
//!   answered, so its client is granted nothing while cut off and learns
//!   within [`LEARN_BOUND`]: its calls run into `commandTimeoutMs`.
//!
//! Which server granted the cut-off client's sections needs no record of
//! the server's own: from the cut until the old primary is stopped, the
//! old primary is all that client reaches.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

use crate::log::mono_us;
use crate::net::{Net, SUBNET};
use crate::{store, FenceClock, Report, Window, CLIENTS, COMMAND_TIMEOUT_MS, LEASE_MS, MINORITY_CLIENT};

pub struct MysqlScenario {
    pub name: &'static str,
    /// Semi-synchronous replication from the primary to its replica.
    pub semisync: bool,
}

pub const MYSQL_SCENARIOS: &[MysqlScenario] =
    &[MysqlScenario { name: "mysql-partition", semisync: false }, MysqlScenario { name: "mysql-partition-semisync", semisync: true }];

/// The servers: name, host number.
const PRIMARY: (&str, u8) = ("m1", 1);
const REPLICA: (&str, u8) = ("m2", 2);
/// The floating address's host number.
const FLOATING: u8 = 50;
const STORE: (&str, u8) = ("store", 30);
/// How long the failover manager the harness stands in for takes to decide
/// that the primary is gone (as in the other scenarios).
const DETECT: Duration = Duration::from_millis(1000);

/// One private server, in its node's namespace; killed and its directory
/// removed on drop, also when the scenario panics.
struct MyServer {
    name: &'static str,
    dir: PathBuf,
    pid: Option<u32>,
    /// Where its log is kept (the scenario's directory).
    keep: PathBuf,
}

impl MyServer {
    /// A new server in node `name`'s namespace, answering on every address
    /// it has (the floating one too, once it has it) at port 3306, with
    /// privileges on (a procedure's definer must exist on the replica) and
    /// a binary log, `args` added; answers once it takes statements.
    fn start(net: &mut Net, name: &'static str, server_id: u8, args: &[&str], keep: &Path) -> MyServer {
        let dir = std::env::temp_dir().join(format!("dkp-my-{name}"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("tmp")).unwrap();
        let user = std::env::var("USER").unwrap_or_else(|_| "root".to_owned());
        let installed = Command::new("mariadb-install-db")
            .args(["--no-defaults", "--skip-test-db", "--auth-root-authentication-method=normal"])
            .arg(format!("--datadir={}", dir.join("data").display()))
            .arg(format!("--tmpdir={}", dir.join("tmp").display()))
            .arg(format!("--user={user}"))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("install.log")).unwrap())
            .status()
            .expect("mariadb-install-db runs");
        assert!(installed.success(), "mariadb-install-db failed: {}", std::fs::read_to_string(dir.join("install.log")).unwrap_or_default());
        let mut argv: Vec<String> = vec![
            "--no-defaults".into(),
            format!("--datadir={}", dir.join("data").display()),
            format!("--socket={}", dir.join("sock").display()),
            format!("--tmpdir={}", dir.join("tmp").display()),
            format!("--user={user}"),
            "--port=3306".into(),
            "--bind-address=0.0.0.0".into(),
            // A client's address is never looked up (no DNS in a namespace).
            "--skip-name-resolve".into(),
            "--innodb-buffer-pool-size=16M".into(),
            "--log-bin=bin".into(),
            format!("--server-id={server_id}"),
        ];
        argv.extend(args.iter().map(|arg| (*arg).to_owned()));
        let pid = net.spawn(name, Path::new("mariadbd"), &argv, &[], &dir.join("server.log"));
        let server = MyServer { name, dir, pid: Some(pid), keep: keep.into() };
        let started = Instant::now();
        while server.try_query("SELECT 1").is_err() {
            assert!(started.elapsed() < Duration::from_secs(60), "{name} did not come up: {}", server.log());
            sleep(Duration::from_millis(100));
        }
        server
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default()
    }

    /// One query by the harness, over the server's Unix socket (not cut by
    /// any partition), with `flags` for the client; its output (rows
    /// tab-separated).
    fn try_query_with(&self, flags: &[&str], sql: &str) -> Result<String, String> {
        let out = Command::new("mariadb")
            .arg("--no-defaults")
            .arg(format!("--socket={}", self.dir.join("sock").display()))
            .args(["-uroot", "--batch"])
            .args(flags)
            .args(["-e", sql])
            .stdin(Stdio::null())
            .output()
            .expect("the mariadb client runs");
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).trim().to_string())
        }
    }

    fn try_query(&self, sql: &str) -> Result<String, String> {
        self.try_query_with(&["--skip-column-names"], sql)
    }

    fn query(&self, sql: &str) -> String {
        self.try_query(sql).unwrap_or_else(|err| panic!("mariadb on {}: {sql}: {err}", self.name))
    }

    /// Field `field` of the one row `sql` (a `SHOW`) answers, if any.
    fn field(&self, sql: &str, field: &str) -> Option<String> {
        let vertical = self.try_query_with(&["--vertical"], sql).ok()?;
        vertical.lines().find_map(|line| line.trim().strip_prefix(&format!("{field}: ")).map(str::to_owned))
    }

    fn status(&self, name: &str) -> Option<String> {
        self.query(&format!("SHOW GLOBAL STATUS LIKE '{name}'")).split('\t').nth(1).map(str::to_owned)
    }

    /// Makes this replica a primary, as a failover tool does: it stops
    /// receiving, applies every whole transaction it received, and forgets
    /// its primary.
    fn promote(&self) {
        self.query("STOP SLAVE IO_THREAD");
        crate::until("the replica applies what it received", Duration::from_secs(30), || {
            self.field("SHOW SLAVE STATUS", "Slave_SQL_Running_State").is_some_and(|state| state.contains("read all relay log"))
        });
        self.query("STOP SLAVE; RESET SLAVE ALL");
    }

    /// Stops the server at once (SIGKILL, as a crash or a fencing agent).
    fn kill(&mut self) {
        if let Some(pid) = self.pid.take() {
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
            let started = Instant::now();
            while Path::new(&format!("/proc/{pid}/stat")).exists()
                && !std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default().contains(") Z")
                && started.elapsed() < Duration::from_secs(10)
            {
                sleep(Duration::from_millis(10));
            }
        }
    }
}

impl Drop for MyServer {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::copy(self.dir.join("server.log"), self.keep.join(format!("{}.log", self.name)));
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn yaml() -> String {
    format!(
        "schemaVersion: 1\noptions:\n  dokebi-lock:\n    backends:\n      faults: {{ driver: mysql, connection: main, namespace: parts, leaseMs: {LEASE_MS}, waitTimeoutMs: 3000, pollIntervalMs: 20 }}\n  dokebi-mysql:\n    connections:\n      main:\n        connectTimeoutMs: 500\n        commandTimeoutMs: {COMMAND_TIMEOUT_MS}\n        url: \"mysql://root@{SUBNET}.0.{FLOATING}:3306/parts?ssl-mode=DISABLED\"\n"
    )
}

pub fn run(scenario: &MysqlScenario, partition: Duration, root: &Path) -> Report {
    let dir = crate::fresh(&root.join(scenario.name));
    let mut report = Report { name: scenario.name, replica_acks: u32::from(scenario.semisync), custom: true, ..Report::default() };

    let mut net = Net::new("dkp");
    for (name, number) in [PRIMARY, REPLICA] {
        net.add(name, number, false);
    }
    for (name, number) in CLIENTS.iter().chain([&STORE]) {
        net.add(name, *number, true);
    }
    net.seal();
    let clients: Vec<&str> = CLIENTS.iter().map(|(name, _)| *name).collect();
    net.float(FLOATING, PRIMARY.0, &clients);
    let store_ip = format!("{SUBNET}.1.{}", STORE.1);
    let store_args = crate::redis_args("store", &dir, &store_ip, None);
    net.spawn(STORE.0, Path::new("redis-server"), &store_args, &[], &dir.join("store.out"));

    // Declared after `net`: dropped (killed, removed) before it.
    let mut primary = MyServer::start(&mut net, PRIMARY.0, 1, &[], &dir);
    primary.query("CREATE USER 'root'@'%'; GRANT ALL PRIVILEGES ON *.* TO 'root'@'%' WITH GRANT OPTION; CREATE DATABASE parts");
    let semisync = scenario.semisync && !crate::drop_acks();
    let replica = MyServer::start(&mut net, REPLICA.0, 2, if semisync { &["--rpl-semi-sync-slave-enabled=ON"] } else { &[] }, &dir);
    replica.query(&format!(
        "CHANGE MASTER TO MASTER_HOST = '{}', MASTER_PORT = 3306, MASTER_USER = 'root', MASTER_USE_GTID = slave_pos, MASTER_CONNECT_RETRY = 1; START SLAVE",
        net.addr(PRIMARY.0)
    ));
    let caught_up = || primary.query("SELECT @@gtid_binlog_pos") == replica.query("SELECT @@gtid_slave_pos");
    crate::until("the replica catches up", Duration::from_secs(30), caught_up);
    if semisync {
        // A commit is answered once the replica has it (lossless), and the
        // primary never gives up waiting within the run.
        primary.query(
            "SET GLOBAL rpl_semi_sync_master_wait_point = AFTER_SYNC; SET GLOBAL rpl_semi_sync_master_timeout = 600000;
             SET GLOBAL rpl_semi_sync_master_enabled = ON",
        );
        replica.query("STOP SLAVE IO_THREAD; START SLAVE IO_THREAD");
        crate::until("the replica acknowledges", Duration::from_secs(30), || {
            primary.status("Rpl_semi_sync_master_clients").as_deref() == Some("1")
                && primary.status("Rpl_semi_sync_master_status").as_deref() == Some("ON")
        });
    }
    let mut store = redis::Client::open(format!("redis://{store_ip}:6379/0")).unwrap().get_connection().expect("the store answers");
    let scripts = store::load(&mut store);

    let stop = dir.join("stop");
    let workers = crate::start_clients(&mut net, &dir, &store_ip, &scripts, &stop, |_| yaml());
    crate::until("the lock's tables exist on the replica", Duration::from_secs(30), || {
        replica.query("SELECT count(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = 'parts' AND TABLE_NAME = 'dokebi_lock_holders'")
            == "1"
    });
    let started = Instant::now();
    sleep(crate::BEFORE_CUT);

    net.isolate(&[MINORITY_CLIENT, PRIMARY.0]);
    let cut_at = mono_us();
    let fence_clock = FenceClock::now();
    sleep(DETECT);
    let promoted_at = mono_us();
    replica.promote();
    let majority: Vec<&str> = clients.iter().copied().filter(|c| *c != MINORITY_CLIENT).collect();
    net.float(FLOATING, REPLICA.0, &majority);
    report.promoted_ms = u128::from(mono_us() - cut_at) / 1000;
    report.notes.push(format!("m2 promoted {} ms after the cut, the floating address moved to it for the majority", report.promoted_ms));
    sleep(partition);
    let unacknowledged = primary.status("Rpl_semi_sync_master_no_tx");
    let still_semisync = primary.status("Rpl_semi_sync_master_status");
    net.heal();
    let healed_at = mono_us();
    // The failover manager's fencing: the old primary goes, and the
    // address it answered at is the new primary's for everyone.
    if !crate::break_cut() {
        primary.kill();
        net.float(FLOATING, REPLICA.0, &[MINORITY_CLIENT]);
    }
    let demoted_at = mono_us();
    report.partition_ms = u128::from(healed_at - cut_at) / 1000;
    report.notes.push(format!(
        "healed {} ms after the cut; the old primary stopped {} ms after the heal; at the heal it was semi-synchronous: {}, commits it made unacknowledged: {}",
        report.partition_ms,
        (demoted_at - healed_at) / 1000,
        still_semisync.as_deref().unwrap_or("?"),
        unacknowledged.as_deref().unwrap_or("?")
    ));
    let (holds, stores) = crate::wind_down(&mut net, &dir, &workers, &mut store, started, cut_at, &mut report);
    // From the cut until the old primary was stopped, it is all the cut-off
    // client reached: every section granted to it then was the old primary's.
    let mut window = Window { cut_at, promoted_at, healed_at, demoted_at, fence_clock, by_old: BTreeSet::new() };
    window.by_old = holds
        .iter()
        .filter(|h| h.worker == MINORITY_CLIENT && (cut_at..demoted_at).contains(&window.granted(h)))
        .map(|h| (h.key.clone(), h.start))
        .collect();
    crate::check_history(&holds, &stores, &window, report.replica_acks, &mut report);
    crate::check_failover(&mut report);
    report.notes.push(crate::grants(&report));
    report.notes.push(crate::outcome(&report));
    drop(replica);
    drop(primary);
    drop(net);
    report
}

//! A private `redis-server` for one test: a free port, killed on drop (also
//! when the test fails). It can be stopped (SIGKILL), restarted on the same
//! port, paused and resumed. By default it persists nothing; one started with
//! [`RedisServer::start_persistent`] keeps RDB/AOF files in a private data dir
//! (removed on drop), so a restart loads whatever was persisted there.

#![allow(dead_code)] // each test binary uses a different part

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

pub struct RedisServer {
    port: u16,
    child: Option<Child>,
    extra: Vec<String>,
    data_dir: Option<PathBuf>,
}

impl RedisServer {
    /// Starts a server on a free port and waits until it answers.
    pub fn start() -> RedisServer {
        RedisServer::start_with(&[])
    }

    /// Starts a server with extra `--name value` arguments.
    pub fn start_with(extra: &[&str]) -> RedisServer {
        let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let mut server = RedisServer { port, child: None, extra: extra.iter().map(|s| s.to_string()).collect(), data_dir: None };
        server.restart();
        server
    }

    /// Starts a server whose working dir (`dir`: RDB snapshots, the AOF) is a
    /// fresh private directory, with extra `--name value` arguments (e.g.
    /// `--appendonly yes`). Automatic snapshots stay off (`--save ""`): the
    /// test decides when one is taken (`SAVE`). A restart loads the data dir.
    pub fn start_persistent(extra: &[&str]) -> RedisServer {
        let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let data_dir = std::env::temp_dir().join(format!("dokebi-redis-{}-{port}", std::process::id()));
        let _ = std::fs::remove_dir_all(&data_dir);
        std::fs::create_dir_all(&data_dir).unwrap();
        let mut args = vec!["--dir".to_string(), data_dir.display().to_string()];
        args.extend(extra.iter().map(|s| s.to_string()));
        let mut server = RedisServer { port, child: None, extra: args, data_dir: Some(data_dir) };
        server.restart();
        server
    }

    /// The private data dir of a server from [`RedisServer::start_persistent`].
    pub fn data_dir(&self) -> &Path {
        self.data_dir.as_deref().expect("a persistent server")
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    /// (Re)starts the server on the same port: empty, or, with a data dir,
    /// with what it persisted there (the server loads it before it answers).
    pub fn restart(&mut self) {
        assert!(self.child.is_none(), "stop the server before restarting it");
        // DOKEBI_TEST_REDIS_SERVER: another redis-server binary (a newer
        // Redis than the machine's), for a test run by hand.
        let program = std::env::var("DOKEBI_TEST_REDIS_SERVER").unwrap_or_else(|_| "redis-server".to_owned());
        // A primary starts a replica's (diskless) sync at once, not after
        // Redis 7's default 5 s wait for more replicas, which took up the
        // whole of a test's 5 s for "the replica is in sync" (a CI run
        // failed so in redis_failure_paths).
        let child = Command::new(program)
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .args(["--repl-diskless-sync-delay", "0"])
            .args(&self.extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server is installed (scripts/setup)");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(mut connection) = redis::Client::open(self.url()).and_then(|c| c.get_connection()) {
                // A server with requirepass answers NOAUTH: it is up too.
                // One still loading its data answers LOADING: not yet.
                match redis::cmd("PING").query::<String>(&mut connection) {
                    Ok(_) => return,
                    Err(err) if err.code() == Some("NOAUTH") => return,
                    Err(_) => {}
                }
            }
            assert!(Instant::now() < deadline, "redis-server did not start");
            sleep(Duration::from_millis(10));
        }
    }

    /// Kills the server (SIGKILL) and waits for it to exit.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Freezes the server (SIGSTOP): connections stay open, nothing answers.
    pub fn pause(&self) {
        self.signal("-STOP");
    }

    pub fn resume(&self) {
        self.signal("-CONT");
    }

    fn signal(&self, signal: &str) {
        let pid = self.child.as_ref().expect("server running").id();
        assert!(Command::new("kill").args([signal, &pid.to_string()]).status().unwrap().success());
    }

    /// True while the server process runs (not stopped).
    pub fn running(&self) -> bool {
        self.child.is_some()
    }

    /// Makes this server a replica of `127.0.0.1:port` (`REPLICAOF`), or a
    /// primary again with `None` (`REPLICAOF NO ONE`, as a failover does).
    pub fn replicate_from(&self, port: Option<u16>) {
        let mut command = redis::cmd("REPLICAOF");
        match port {
            Some(port) => command.arg("127.0.0.1").arg(port),
            None => command.arg("NO").arg("ONE"),
        };
        let _: String = command.query(&mut self.client()).expect("REPLICAOF");
    }

    /// True once a replica finished its sync with its primary (the link is
    /// up) and that primary's `WAIT` counts it. The primary counts a replica
    /// online only from its first acknowledgement after a diskless sync,
    /// and for about a second after that a `PUBLISH` and `WAIT 1` right after
    /// another connection's write still answered 0 (Redis 7.0.15, by hand:
    /// 8 of 12 runs): a `replicaAcks` grant then failed (CI runs of
    /// redis_failure_paths). So this asks the primary's `WAIT` itself. False
    /// while a server cannot be asked: a primary being demoted drops its
    /// clients, this probe's too.
    pub fn replica_synced(&self) -> bool {
        let Some(info) = replication_info(self.port) else { return false };
        let field = |name: &str| info.lines().find_map(|line| line.trim().strip_prefix(name).map(str::to_owned));
        if field("master_link_status:").as_deref() != Some("up") {
            return false;
        }
        let Some(primary) = field("master_port:").and_then(|port| port.parse::<u16>().ok()) else { return false };
        // Every replica the primary has, this one among them online, must
        // answer the WAIT: a WAIT for one could be another replica's.
        let Some(primary_info) = replication_info(primary) else { return false };
        let listed = format!("port={},state=online", self.port);
        let replicas = primary_info.lines().filter(|line| line.starts_with("slave")).count();
        if !primary_info.lines().any(|line| line.starts_with("slave") && line.contains(&listed)) {
            return false;
        }
        let Ok(mut client) = redis::Client::open(format!("redis://127.0.0.1:{primary}/0")).and_then(|c| c.get_connection()) else {
            return false;
        };
        let counted: redis::RedisResult<(usize,)> =
            redis::pipe().cmd("PUBLISH").arg("dokebi-test-sync").arg("").ignore().cmd("WAIT").arg(replicas).arg(100).query(&mut client);
        counted.is_ok_and(|(acknowledged,)| acknowledged >= replicas)
    }

    /// A plain synchronous client for inspecting the server.
    pub fn client(&self) -> redis::Connection {
        redis::Client::open(self.url()).unwrap().get_connection().unwrap()
    }

    /// Another client's script that spins for `ms` (the server answers no
    /// other client meanwhile, then `BUSY` past `busy-reply-threshold`),
    /// started on a thread of its own: join it for its end.
    pub fn spin_script(&self, ms: u64) -> std::thread::JoinHandle<()> {
        let mut client = self.client();
        std::thread::spawn(move || {
            let spin = format!(
                "local function now() local t = redis.call('TIME') return t[1] * 1000 + math.floor(t[2] / 1000) end \
                 local start = now() while now() - start < {ms} do end"
            );
            let _: redis::RedisResult<()> = redis::cmd("EVAL").arg(spin).arg(0).query(&mut client);
        })
    }

    /// Calls per command since the last `CONFIG RESETSTAT`, from `INFO
    /// commandstats` (commands run inside scripts included).
    pub fn command_calls(&self) -> Vec<(String, u64)> {
        let info: String = redis::cmd("INFO").arg("commandstats").query(&mut self.client()).unwrap();
        info.lines()
            .filter_map(|line| {
                let (name, stats) = line.strip_prefix("cmdstat_")?.split_once(':')?;
                let calls = stats.split(',').find_map(|kv| kv.strip_prefix("calls="))?.parse().ok()?;
                Some((name.to_owned(), calls))
            })
            .collect()
    }

    /// Calls of one command since the last `CONFIG RESETSTAT` that did not
    /// fail (a script's first `EVALSHA` on a fresh server fails with
    /// `NOSCRIPT`, and the client loads the script and sends it again).
    pub fn succeeded_calls_of(&self, command: &str) -> u64 {
        let info: String = redis::cmd("INFO").arg("commandstats").query(&mut self.client()).unwrap();
        let stats = info.lines().find_map(|line| line.strip_prefix(&format!("cmdstat_{command}:"))).unwrap_or_default().to_owned();
        let field = |name: &str| -> u64 { stats.split(',').find_map(|kv| kv.strip_prefix(name)).map_or(0, |v| v.parse().unwrap()) };
        field("calls=") - field("failed_calls=")
    }

    /// Every key in the server.
    pub fn keys(&self) -> Vec<String> {
        let mut keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut self.client()).unwrap();
        keys.sort();
        keys
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        // SIGKILL also ends a paused (stopped) server.
        self.stop();
        if let Some(dir) = self.data_dir.take() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// `INFO replication` of the server on `port`, or None while it cannot be
/// asked.
fn replication_info(port: u16) -> Option<String> {
    let mut client = redis::Client::open(format!("redis://127.0.0.1:{port}/0")).and_then(|c| c.get_connection()).ok()?;
    redis::cmd("INFO").arg("replication").query(&mut client).ok()
}

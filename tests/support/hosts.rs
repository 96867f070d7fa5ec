//! A host name of several addresses, for the tests of how the driver
//! connects to one: a test runs itself again in a private mount namespace
//! (`unshare --mount`, as root) whose `/etc/hosts` is bind-mounted over
//! with the name's addresses; the machine's file is not touched.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Set in the run inside the namespace.
const INSIDE: &str = "DOKEBI_TEST_IN_HOSTS_NAMESPACE";

/// Runs test `test` of this binary again inside a mount namespace whose
/// `/etc/hosts` names `name` `addresses` (in that order: glibc keeps
/// 127.0.0.1 first, the others tied); true when this is that run (the
/// caller then does the test), false after the outer run checked the inner
/// one passed.
pub fn in_namespace(test: &str, name: &str, addresses: &[&str]) -> bool {
    if std::env::var_os(INSIDE).is_some() {
        return true;
    }
    let hosts = std::env::temp_dir().join(format!("dokebi-hosts-{}-{test}", std::process::id()));
    let lines: String = addresses.iter().map(|address| format!("{address} {name}\n")).collect();
    std::fs::write(&hosts, format!("127.0.0.1 localhost\n{lines}")).unwrap();
    let status = Command::new("unshare")
        .args(["--mount", "--", "sh", "-c", "mount --bind \"$0\" /etc/hosts && exec \"$@\""])
        .arg(&hosts)
        .arg(std::env::current_exe().unwrap())
        .args(["--exact", test, "--include-ignored", "--nocapture", "--test-threads=1"])
        .env(INSIDE, "1")
        .status()
        .expect("unshare (util-linux) runs: the test needs root for a private /etc/hosts");
    let _ = std::fs::remove_file(&hosts);
    assert!(status.success(), "the run in the namespace failed: {status}");
    false
}

/// A port free on every one of `ips` (other tests take ports on 127.0.0.1
/// meanwhile): free again once it returns, for the caller to bind.
pub fn port_free_on(ips: &[&str]) -> u16 {
    (0..100)
        .find_map(|_| {
            let first = std::net::TcpListener::bind((ips[0], 0)).ok()?;
            let port = first.local_addr().ok()?.port();
            let others: Option<Vec<_>> = ips[1..].iter().map(|ip| std::net::TcpListener::bind((*ip, port)).ok()).collect();
            others.map(|_| port)
        })
        .expect("a port free on every address")
}

/// A redis-server bound to `ip` only, on `port`; killed on drop.
pub struct RedisOn(Child);

impl RedisOn {
    pub fn start(ip: &str, port: u16) -> RedisOn {
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", ip, "--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server is installed");
        let server = RedisOn(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let up = redis::Client::open(format!("redis://{ip}:{port}/0"))
                .and_then(|client| client.get_connection())
                .and_then(|mut connection| redis::cmd("PING").query::<String>(&mut connection));
            if up.is_ok() {
                return server;
            }
            assert!(Instant::now() < deadline, "redis-server did not start on {ip}");
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for RedisOn {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

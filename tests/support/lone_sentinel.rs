//! One private sentinel monitoring a primary as `mymaster`, for the reviews
//! that probe how a lookup reads each sentinel it asks (reviews R28, R29);
//! a whole deployment (a primary, a replica, three sentinels) is
//! [`super::sentinel`].

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A free loopback port (nothing listens there once it returns).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A sentinel on a loopback port; killed and its directory removed on drop.
pub struct LoneSentinel {
    dir: std::path::PathBuf,
    pub port: u16,
    child: Child,
    /// The password its checks here connect with (`requirepass`).
    password: String,
}

impl LoneSentinel {
    /// On `port`, monitoring `127.0.0.1:primary` with `quorum`; `extra`:
    /// more lines of its configuration (a `requirepass` line sets the
    /// password). Waits until it names `primary`.
    pub fn start(port: u16, primary: u16, quorum: u32, extra: &str) -> LoneSentinel {
        let dir = std::env::temp_dir().join(format!("dokebi-lone-sentinel-{}-{port}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let config = dir.join("sentinel.conf");
        std::fs::write(
            &config,
            format!(
                "port {port}\nbind 127.0.0.1\ndir {dir}\nsentinel monitor mymaster 127.0.0.1 {primary} {quorum}\n{extra}",
                dir = dir.display()
            ),
        )
        .unwrap();
        let child = Command::new("redis-server")
            .arg(&config)
            .arg("--sentinel")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server is installed");
        let password = extra.lines().find_map(|line| line.strip_prefix("requirepass ")).unwrap_or_default().to_owned();
        let sentinel = LoneSentinel { dir, port, child, password };
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if sentinel.named() == Some(primary) {
                return sentinel;
            }
            assert!(Instant::now() < deadline, "the sentinel on {port} did not come up");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The port of the primary it names.
    pub fn named(&self) -> Option<u16> {
        let mut connection = redis::Client::open(self.authed_url()).ok()?.get_connection().ok()?;
        let (_, port): (String, u16) = redis::cmd("SENTINEL").arg("get-master-addr-by-name").arg("mymaster").query(&mut connection).ok()?;
        Some(port)
    }

    /// Sends it `signal` (`-STOP`, `-CONT`).
    pub fn signal(&self, signal: &str) {
        assert!(Command::new("kill").args([signal, &self.child.id().to_string()]).status().unwrap().success());
    }

    /// Its URL without a password.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Its URL with the password it requires (if any).
    pub fn authed_url(&self) -> String {
        match self.password.as_str() {
            "" => self.url(),
            password => format!("redis://:{password}@127.0.0.1:{}", self.port),
        }
    }
}

impl Drop for LoneSentinel {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

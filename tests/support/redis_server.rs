//! A private `redis-server` for one test: a free port, no persistence,
//! killed on drop (also when the test fails). It can be stopped, restarted
//! on the same port, paused and resumed.

#![allow(dead_code)] // each test binary uses a different part

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

pub struct RedisServer {
    port: u16,
    child: Option<Child>,
    extra: Vec<String>,
}

impl RedisServer {
    /// Starts a server on a free port and waits until it answers.
    pub fn start() -> RedisServer {
        RedisServer::start_with(&[])
    }

    /// Starts a server with extra `--name value` arguments.
    pub fn start_with(extra: &[&str]) -> RedisServer {
        let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let mut server = RedisServer { port, child: None, extra: extra.iter().map(|s| s.to_string()).collect() };
        server.restart();
        server
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    /// (Re)starts the server on the same port, empty.
    pub fn restart(&mut self) {
        assert!(self.child.is_none(), "stop the server before restarting it");
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
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

    /// A plain synchronous client for inspecting the server.
    pub fn client(&self) -> redis::Connection {
        redis::Client::open(self.url()).unwrap().get_connection().unwrap()
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
    }
}

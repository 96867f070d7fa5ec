//! A private PostgreSQL for one test: `initdb` into a fresh directory and
//! `pg_ctl` on a free port, both run as the unprivileged `postgres` user
//! (PostgreSQL refuses to run as root; the tests run as root), trust auth,
//! stopped and removed on drop (also when the test fails). It can crash
//! (`pg_ctl stop -m immediate`: no checkpoint, whatever was not flushed is
//! lost, recovery on the next start), restart, and give an asynchronous
//! streaming standby (`pg_basebackup -R`) that can be promoted, or take
//! only client certificate logins, or only SCRAM logins over TLS.

#![allow(dead_code)]

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;

#[path = "../support/pg_programs.rs"]
mod pg_programs;

use pg_programs::{bin, postgres_dir, run_as_postgres, run_as_postgres_with};

pub struct PrivateServer {
    dir: PathBuf,
    port: u16,
    running: bool,
    /// The OpenSSL configuration the server starts with, when not the
    /// system's.
    openssl_conf: Option<PathBuf>,
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

impl PrivateServer {
    /// A new cluster with `settings` (`name=value`, postgresql.conf lines),
    /// started, ready for a standby to stream from it.
    pub fn start(name: &str, settings: &[&str]) -> PrivateServer {
        let dir = postgres_dir("dokebi-pg", name);
        let data = dir.join("data");
        run_as_postgres(None, "initdb", &["-D", data.to_str().unwrap(), "-U", "postgres", "--auth=trust", "--no-sync", "-E", "UTF8"]);
        let mut conf = String::from("listen_addresses = '127.0.0.1'\nwal_level = replica\nmax_wal_senders = 4\nfsync = on\n");
        for setting in settings {
            conf += setting;
            conf += "\n";
        }
        append(&data.join("postgresql.conf"), &conf);
        append(&data.join("pg_hba.conf"), "host replication postgres 127.0.0.1/32 trust\n");
        let mut server = PrivateServer { dir, port: free_port(), running: false, openssl_conf: None };
        server.start_again();
        server
    }

    /// An asynchronous streaming standby of this server, started.
    pub fn standby(&self, name: &str) -> PrivateServer {
        self.standby_through(name, self.port)
    }

    /// [`PrivateServer::standby`] streaming from `port`, a proxy of this
    /// server's (which a test can hold to make the standby lag).
    pub fn standby_through(&self, name: &str, port: u16) -> PrivateServer {
        let dir = postgres_dir("dokebi-pg", name);
        let data = dir.join("data");
        let port = port.to_string();
        run_as_postgres(
            None,
            "pg_basebackup",
            &["-h", "127.0.0.1", "-p", &port, "-U", "postgres", "-D", data.to_str().unwrap(), "-R", "-X", "stream", "--no-sync"],
        );
        let mut standby = PrivateServer { dir, port: free_port(), running: false, openssl_conf: None };
        standby.start_again();
        standby
    }

    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres?sslmode=disable", self.port)
    }

    fn data(&self) -> PathBuf {
        self.dir.join("data")
    }

    /// Starts the server (after a crash: with recovery) and waits until it
    /// accepts connections.
    pub fn start_again(&mut self) {
        let options = format!("-p {} -k {}", self.port, self.dir.display());
        let log = self.dir.join("server.log");
        let env: Vec<(&str, &Path)> = self.openssl_conf.iter().map(|conf| ("OPENSSL_CONF", conf.as_path())).collect();
        run_as_postgres_with(
            None,
            "pg_ctl",
            &["-D", self.data().to_str().unwrap(), "-l", log.to_str().unwrap(), "-o", &options, "-w", "-t", "60", "start"],
            &env,
        );
        self.running = true;
    }

    /// Crashes the server: SIGQUIT to every process, no checkpoint, nothing
    /// flushed that was not already; the next start recovers from the WAL.
    pub fn crash(&mut self) {
        run_as_postgres(None, "pg_ctl", &["-D", self.data().to_str().unwrap(), "-m", "immediate", "-w", "stop"]);
        self.running = false;
    }

    /// Stops the server cleanly (a standby then stops streaming).
    pub fn stop(&mut self) {
        run_as_postgres(None, "pg_ctl", &["-D", self.data().to_str().unwrap(), "-m", "fast", "-w", "stop"]);
        self.running = false;
    }

    /// Restarts the server with TLS on (`server.pem`/`.key` of the
    /// authority in `pki`, whose `ca.pem` it trusts for clients) and only
    /// certificate logins over TCP (`hostssl ... cert`: the certificate's
    /// common name is the user); local connections stay trusted.
    pub fn require_client_certificates(&mut self, pki: &Path) {
        self.restart_with_tls(pki, &["ca.pem", "server.pem", "server.key"], "ssl_ca_file = 'ca.pem'\n", "cert");
    }

    /// Restarts the server with TLS on (`server.pem`/`.key` in `dir`) and
    /// only password logins by SCRAM over TCP; local connections stay
    /// trusted.
    pub fn require_scram_over_tls(&mut self, dir: &Path) {
        self.restart_with_tls(dir, &["server.pem", "server.key"], "", "scram-sha-256");
    }

    /// Restarts the server with TLS on (`server.pem`/`.key` in `dir`) under
    /// the OpenSSL configuration `dir/openssl.cnf` (a lower security level
    /// loads a key OpenSSL refuses by default), logins over TCP only over
    /// TLS, trusted.
    pub fn serve_tls_under_openssl_conf(&mut self, dir: &Path) {
        self.openssl_conf = Some(dir.join("openssl.cnf"));
        self.restart_with_tls(dir, &["server.pem", "server.key"], "", "trust");
    }

    /// Stops the server, copies `files` from `dir` into its data directory,
    /// turns TLS on (with `conf`, more settings) and takes TCP logins only
    /// over TLS, by `method`; then starts it again.
    fn restart_with_tls(&mut self, dir: &Path, files: &[&str], conf: &str, method: &str) {
        self.stop();
        let data = self.data();
        for file in files {
            std::fs::copy(dir.join(file), data.join(file)).unwrap();
            let status = Command::new("chown").args(["postgres:postgres"]).arg(data.join(file)).status().unwrap();
            assert!(status.success(), "chown of {file}");
        }
        append(&data.join("postgresql.conf"), &format!("ssl = on\nssl_cert_file = 'server.pem'\nssl_key_file = 'server.key'\n{conf}"));
        std::fs::write(data.join("pg_hba.conf"), format!("local all all trust\nhostssl all all 127.0.0.1/32 {method}\n")).unwrap();
        self.start_again();
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// The directory of the server's Unix-domain socket (`-k`), which also
    /// holds its data directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Promotes a standby to a primary and waits until it is one.
    pub fn promote(&self) {
        run_as_postgres(None, "pg_ctl", &["-D", self.data().to_str().unwrap(), "-w", "-t", "60", "promote"]);
    }
}

fn append(file: &Path, text: &str) {
    use std::io::Write;
    std::fs::OpenOptions::new().append(true).open(file).unwrap().write_all(text.as_bytes()).unwrap();
}

impl Drop for PrivateServer {
    fn drop(&mut self) {
        if self.running {
            let _ = Command::new("runuser")
                .args(["-u", "postgres", "--"])
                .arg(bin("pg_ctl"))
                .args(["-D", self.data().to_str().unwrap(), "-m", "immediate", "-w", "stop"])
                .output();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

//! A private PgBouncer in transaction mode, one server connection for
//! every client (`default_pool_size = 1`), in front of the machine's
//! PostgreSQL on a free port (Debian's, installed by `scripts/setup`):
//! what the tests through a pooler start.

#![allow(dead_code)]

use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use crate::postgres::{answers, eventually};

/// A private pgbouncer, stopped on drop.
pub struct Bouncer {
    child: Child,
    port: u16,
    dir: PathBuf,
}

impl Bouncer {
    pub fn start(name: &str) -> Bouncer {
        Bouncer::start_with(name, "")
    }

    /// With `settings` (lines of the `[pgbouncer]` section) added.
    pub fn start_with(name: &str, settings: &str) -> Bouncer {
        let dir = std::env::temp_dir().join(format!("dokebi-pgbouncer-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let ini = dir.join("pgbouncer.ini");
        std::fs::write(
            &ini,
            format!(
                "[databases]\ntest = host=127.0.0.1 port=5432 dbname=test user=postgres\n\
                 [pgbouncer]\nlisten_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\nauth_type = any\n\
                 pool_mode = transaction\ndefault_pool_size = 1\nmax_client_conn = 200\n\
                 ignore_startup_parameters = extra_float_digits,options\nlogfile = {0}/pgbouncer.log\npidfile = {0}/pgbouncer.pid\n{settings}",
                dir.display()
            ),
        )
        .unwrap();
        // PgBouncer refuses to run as root: then it runs as nobody, in a
        // directory nobody may write.
        let root = euid() == 0;
        let mut command = if root {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
            let mut command = Command::new("setpriv");
            command.args(["--reuid=nobody", "--regid=nogroup", "--clear-groups", pgbouncer()]);
            command
        } else {
            Command::new(pgbouncer())
        };
        let child =
            command.arg(&ini).stdout(Stdio::null()).stderr(Stdio::null()).spawn().expect("pgbouncer runs (scripts/setup installs it)");
        let bouncer = Bouncer { child, port, dir };
        eventually("pgbouncer listens", || TcpStream::connect(("127.0.0.1", port)).is_ok());
        // Listening is not serving yet: CI's run once had the first
        // acquire through a fresh pooler refused ('error connecting to
        // server').
        eventually("pgbouncer serves a query", || answers(&bouncer.url()));
        bouncer
    }

    /// Its log, `pgbouncer.log` in its directory.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("pgbouncer.log")).unwrap()
    }

    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/test?sslmode=disable", self.port)
    }
}

impl Drop for Bouncer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Debian installs it under /usr/sbin, which a user's PATH may lack.
fn pgbouncer() -> &'static str {
    if std::path::Path::new("/usr/sbin/pgbouncer").exists() {
        "/usr/sbin/pgbouncer"
    } else {
        "pgbouncer"
    }
}

/// The effective user id.
fn euid() -> u32 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").map(|meta| meta.uid()).unwrap_or(u32::MAX)
}

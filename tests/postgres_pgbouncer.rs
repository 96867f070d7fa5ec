//! The postgres driver through PgBouncer in transaction mode, one server
//! connection for every client (`default_pool_size = 1`): consecutive
//! statements of one client land on whatever server connection is free, so
//! anything kept in a session (a named statement, a session advisory lock,
//! a setting) would break. A private pgbouncer (Debian's, installed by
//! `scripts/setup`) runs in front of the machine's PostgreSQL on a free port.

mod postgres;

use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::thread;

use dokebi_lock::{AcquireOptions, ErrorCode, LockMode, Provider};
use futures::executor::block_on;
use postgres::{backend, batch, code, count, eventually, wait, Schema};

/// A private pgbouncer, stopped on drop.
struct Bouncer {
    child: Child,
    port: u16,
    dir: PathBuf,
}

impl Bouncer {
    fn start(name: &str) -> Bouncer {
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
                 ignore_startup_parameters = extra_float_digits,options\nlogfile = {0}/pgbouncer.log\npidfile = {0}/pgbouncer.pid\n",
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
        bouncer
    }

    fn url(&self) -> String {
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

fn through(bouncer: &Bouncer, schema: &Schema, backend: &str, listen: Option<&str>) -> Provider {
    let connection = listen.map(|url| format!("        listenUrl: '{url}'\n")).unwrap_or_default();
    Provider::from_yaml(&postgres::yaml_on(&bouncer.url(), &schema.0, backend, &connection)).unwrap()
}

#[test]
fn leases_kinds_and_wake_ups_work_through_pgbouncer_in_transaction_mode() {
    let bouncer = Bouncer::start("leases");
    let schema = Schema::fresh();
    let direct = postgres::url();
    // A safety-net poll far longer than the waits: only NOTIFY (sent through
    // the pooler, heard on the direct listener) can wake a waiter.
    let slow = "        notifyPollIntervalMs: 600000\n";
    let (a, b) = (through(&bouncer, &schema, slow, Some(&direct)), through(&bouncer, &schema, slow, Some(&direct)));
    let (one, two) = (backend(&a), backend(&b));
    let held = block_on(one.acquire("k", wait(0))).unwrap();
    assert_eq!(code(block_on(two.acquire("k", wait(0)))), ErrorCode::LockBusy);
    assert!(block_on(held.renew()).unwrap());
    eventually("b listens", || two.status().postgres.unwrap().listening);
    let waiter = {
        let two = two.clone();
        thread::spawn(move || block_on(two.acquire("k", wait(20_000))).map(|lease| lease.fence()))
    };
    eventually("b waits in the table", || {
        count(&format!("SELECT count(*) FROM {} WHERE lapses_at > now()", schema.table("_waiting"))) == 1
    });
    assert!(block_on(held.release()).unwrap());
    let fence = waiter.join().unwrap().expect("woken by the release");
    assert!(fence > held.fence());
    // Readers together, a set of keys all or nothing.
    let shared = AcquireOptions { mode: LockMode::Shared, ..wait(0) };
    let (r1, r2) = (block_on(one.acquire("doc", shared.clone())).unwrap(), block_on(two.acquire("doc", shared)).unwrap());
    assert_eq!(code(block_on(one.acquire_many(&["x", "doc"], wait(0)))), ErrorCode::LockBusy);
    assert!(block_on(r1.release()).unwrap() && block_on(r2.release()).unwrap());
    let set = block_on(one.acquire_many(&["x", "doc"], wait(0))).unwrap();
    // Expired on the server's clock: renew false, release LEASE_LOST.
    batch(&format!("UPDATE {} SET expires_at = clock_timestamp() - interval '1 second'", schema.table("_holders")));
    assert!(!block_on(set.renew()).unwrap());
    assert_eq!(code(block_on(set.release())), ErrorCode::LeaseLost);
    block_on(a.close());
    block_on(b.close());
    let log = std::fs::read_to_string(bouncer.dir.join("pgbouncer.log")).unwrap();
    assert!(log.contains("login attempt: db=test"), "the statements went through pgbouncer: {log}");
}

#[test]
fn behind_a_pooler_without_a_direct_listener_waiters_are_served_by_polling() {
    let bouncer = Bouncer::start("polling");
    let schema = Schema::fresh();
    let poll = "        notifyPollIntervalMs: 50\n        pollIntervalMs: 50\n";
    let (a, b) = (through(&bouncer, &schema, poll, None), through(&bouncer, &schema, poll, None));
    let held = block_on(backend(&a).acquire("k", wait(0))).unwrap();
    let waiter = {
        let two = backend(&b);
        thread::spawn(move || block_on(two.acquire("k", wait(20_000))).map(|lease| lease.fence()))
    };
    eventually("b waits", || postgres::counts(&backend(&b)).waiting == 1);
    assert!(block_on(held.release()).unwrap());
    assert!(waiter.join().unwrap().expect("granted by a poll") > held.fence());
    block_on(a.close());
    block_on(b.close());
}

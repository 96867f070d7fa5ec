//! Review R25: an adversarial read of 7a8d7d8 (`store::reach::no_sign_of_down`)
//! and 29c3bc4 (functions 10: a grant's transaction shows its WARNING),
//! looking for two holders of a key or a repeated fence.
//!
//! 1. `no_sign_of_down` counts a reset, `EAGAIN` and `ENOMEM` (this
//!    process out of memory: "nothing learnt of the server") as no sign the
//!    server is down. It does not count this process's own want of file
//!    descriptors: `socket()` failing with `EMFILE` (or `ENFILE`, the
//!    system's) is `ErrorKind::Uncategorized`, so on Redis the socket never
//!    came up (`Reach`) and on PostgreSQL `socket_failed` holds (a
//!    one-IP URL is not probed; the probe meets `EMFILE` too): the connect
//!    reads as unreachable, and a `fallBack` policy serves a key that
//!    another process holds on a store that is up. Nothing of the server
//!    was learnt, as with `ENOMEM`. How: a process near its `RLIMIT_NOFILE`
//!    (a busy server, a descriptor leak, a burst of files) whose policy has
//!    no connection open yet to its first member (its first acquire, or
//!    after the connection was lost or dropped), acquires a key that a
//!    second process holds there; the connect's `socket()` is refused,
//!    the member is skipped, and the next member grants the key; the member
//!    then stays passed over for `reprobeCooldownMs`, so every acquire of
//!    the rule in that window moves too, descriptors back or not.
//!    Confirmed below on a private redis-server (the policy's command
//!    connection dropped by `CLIENT KILL` first, 5 of 5 runs) and on the
//!    machine's PostgreSQL (127.0.0.1:5432, db `test`, a one-IP URL, the
//!    policy's first statement, 11 of 11): this process's soft descriptor
//!    limit is lowered and filled with `/dev/null`s; the policy falls back
//!    to a `local` member (which needs no descriptor). tokio-postgres's
//!    error is `Connect` caused by `Os { code: 24, kind: Uncategorized }`.
//!    Not confirmed, same path: `EADDRNOTAVAIL` (`AddrNotAvailable`: this
//!    host out of ephemeral ports) reads as unreachable too.
//! 2. 29c3bc4: read `take` (its `{durable}` is on the granting branch
//!    only, after every refusal), `renew`, `hand_over` (its takes set
//!    `client_min_messages` for the transaction, and a later refused take
//!    does not reset it), `give_back` (grants nothing: a woken waiter
//!    grants by its own `take`). A `set_config(.., true)` inside a function
//!    whose `SET` clauses do not name the variable outlives the call until
//!    the commit, and the commit's wait for the standby (and its WARNING)
//!    comes before the transaction's settings are undone. The only
//!    `client_min_messages` that hides a WARNING is `error` (`info` is
//!    reported as `info` and is reset to `warning`, harmlessly). The driver
//!    counts by the unlocalized severity, so `lc_messages` does not matter;
//!    `statement_timeout` is disabled before the commit. No path found.

mod postgres;
mod support;

use std::time::Duration;

use dokebi_lock::{AcquireOptions, Provider};
use futures::executor::block_on;

fn wait(ms: u64) -> AcquireOptions {
    AcquireOptions { wait_timeout: Some(Duration::from_millis(ms)), ..AcquireOptions::default() }
}

/// This process with its soft descriptor limit lowered to what is open
/// plus a few, and those few taken by `/dev/null`s: every `socket()` or
/// `open()` fails with `EMFILE` until dropped.
struct NoDescriptors {
    old: libc::rlimit,
    held: Vec<libc::c_int>,
}

impl NoDescriptors {
    fn new() -> NoDescriptors {
        let open = std::fs::read_dir("/proc/self/fd").unwrap().count() as u64;
        let mut old = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        // SAFETY: plain resource-limit and descriptor calls.
        unsafe {
            assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut old), 0);
            let highest = std::fs::read_dir("/proc/self/fd")
                .unwrap()
                .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u64>().ok())
                .max()
                .unwrap_or(open);
            let lowered = libc::rlimit { rlim_cur: highest + 16, rlim_max: old.rlim_max };
            assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &lowered), 0);
            let mut held = Vec::new();
            loop {
                let fd = libc::open(c"/dev/null".as_ptr(), libc::O_RDONLY);
                if fd < 0 {
                    assert_eq!(std::io::Error::last_os_error().raw_os_error(), Some(libc::EMFILE));
                    break;
                }
                held.push(fd);
            }
            NoDescriptors { old, held }
        }
    }
}

impl Drop for NoDescriptors {
    fn drop(&mut self) {
        // SAFETY: the descriptors opened above, and the limit as it was.
        unsafe {
            for fd in self.held.drain(..) {
                libc::close(fd);
            }
            libc::setrlimit(libc::RLIMIT_NOFILE, &self.old);
        }
    }
}

/// A policy `locks` over `db` (`driver` on `connection`, with `fields`)
/// falling back to a `local` member `mem`.
fn policy(driver: &str, connection: &str, fields: &str) -> Provider {
    Provider::from_yaml(&format!(
        "schemaVersion: 1\noptions:\n  dokebi-{driver}:\n    connections:\n      main: {{ {connection} }}\n  dokebi-lock:\n    backends:\n      db: {{ driver: {driver}, connection: main, {fields} }}\n      mem: {{ driver: local }}\n      locks:\n        driver: policy\n        reprobeCooldownMs: 5000\n        default: {{ backends: [db, mem], minTier: process, onUnavailable: fallBack }}\n"
    ))
    .unwrap()
}

/// `key` held by `holder` (another process, as far as the store knows)
/// on `db`; `policy`'s process has no descriptor left when it acquires
/// `key`: the member that served it, or the error; then the same once the
/// descriptors are back (the member skipped stays passed over for
/// `reprobeCooldownMs`).
fn acquire_without_descriptors(policy: &Provider, key: &str) -> (String, String) {
    let locks = policy.backend("locks").unwrap();
    let served = |outcome: Result<dokebi_lock::Lease, dokebi_lock::LockError>| match outcome {
        Ok(lease) => {
            let member = lease.served().map_or("?".to_owned(), |served| served.member.name.clone());
            let _ = block_on(lease.release());
            member
        }
        Err(err) => format!("{:?}: {err}", err.code()),
    };
    let limited = NoDescriptors::new();
    let outcome = block_on(locks.acquire(key, wait(1000)));
    let direct = block_on(policy.backend("db").unwrap().acquire(key, wait(0))).map(|_| ());
    drop(limited);
    eprintln!("the member's own acquire, still without descriptors: {direct:?}");
    let first = served(outcome);
    let after = served(block_on(locks.acquire(key, wait(1000))));
    eprintln!("served: {first}; once the descriptors are back: {after}");
    (first, after)
}

/// Redis: `k` is held on a private redis-server by `holder`; the policy's
/// process has connected to it (its background checks), then its command
/// connection is dropped (`CLIENT KILL`: an idle timeout, a proxy, a
/// restart of a load balancer would do the same) and the process reaches
/// its descriptor limit. It acquires `k` through the policy: the
/// reconnect's `socket()` meets `EMFILE`, unreachable, and `mem` grants
/// `k` while `holder` holds it on Redis, which was up throughout.
#[test]
#[ignore = "EMFILE in this process reads as Redis unreachable: a fallBack policy serves a key held on an up Redis (two holders)"]
fn redis_no_descriptor_left_in_this_process_is_no_sign_of_down() {
    let server = support::redis_server::RedisServer::start();
    let url = server.url();
    let key = "k";
    let holder = Provider::from_yaml(&format!(
        "schemaVersion: 1\noptions:\n  dokebi-redis:\n    connections:\n      main: {{ url: '{url}' }}\n  dokebi-lock:\n    backends:\n      db: {{ driver: redis, connection: main, namespace: r25, leaseMs: 20000 }}\n"
    ))
    .unwrap();
    let lease = block_on(holder.backend("db").unwrap().acquire(key, wait(0))).unwrap();
    let policy = policy("redis", &format!("url: '{url}', connectTimeoutMs: 500"), "namespace: r25, leaseMs: 20000");
    // The policy's member works, and says the key is held.
    let busy = block_on(policy.backend("locks").unwrap().acquire(key, wait(0))).map(|_| ());
    assert!(busy.is_err(), "{busy:?}");
    let mut admin = redis::Client::open(url.as_str()).unwrap().get_connection().unwrap();
    let killed: i64 = redis::cmd("CLIENT").arg("KILL").arg("TYPE").arg("normal").arg("SKIPME").arg("yes").query(&mut admin).unwrap();
    eprintln!("{killed} command connections dropped");
    std::thread::sleep(Duration::from_millis(300));
    let (served, after) = acquire_without_descriptors(&policy, key);
    let still_held = block_on(lease.renew());
    block_on(policy.close());
    let _ = block_on(lease.release());
    block_on(holder.close());
    drop(server);
    assert!(still_held.is_ok(), "the holder's renewal: {still_held:?}");
    assert_ne!(served, "mem", "{key} was held on an up Redis and the policy's acquire was served by mem (then by {after})");
}

/// PostgreSQL: the same on the machine's PostgreSQL over a one-IP URL.
#[test]
#[ignore = "EMFILE in this process reads as PostgreSQL unreachable: a fallBack policy serves a key held on an up PostgreSQL (two holders)"]
fn postgres_no_descriptor_left_in_this_process_is_no_sign_of_down() {
    let key = format!("r25-emfile-{}", std::process::id());
    let schema = format!("r25_emfile_{}", std::process::id());
    let url = postgres::url();
    let holder = Provider::from_yaml(&format!(
        "schemaVersion: 1\noptions:\n  dokebi-postgres:\n    connections:\n      main: {{ url: '{url}' }}\n  dokebi-lock:\n    backends:\n      db: {{ driver: postgres, connection: main, schema: {schema}, leaseMs: 20000 }}\n"
    ))
    .unwrap();
    let lease = block_on(holder.backend("db").unwrap().acquire(&key, wait(0))).unwrap();
    let policy = policy(
        "postgres",
        &format!("url: '{url}', connectTimeoutMs: 500, commandTimeoutMs: 2000"),
        &format!("schema: {schema}, leaseMs: 20000"),
    );
    let (served, after) = acquire_without_descriptors(&policy, &key);
    // What tokio-postgres's connect meets: the cause under its error.
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let limited = NoDescriptors::new();
    let met = runtime.block_on(tokio_postgres::connect(&url, tokio_postgres::NoTls)).map(|_| ());
    drop(limited);
    let cause = met.as_ref().err().and_then(std::error::Error::source).map(|source| source.to_string());
    eprintln!("tokio-postgres's connect: {met:?}, caused by {cause:?}");
    let still_held = block_on(lease.renew());
    block_on(policy.close());
    let _ = block_on(lease.release());
    block_on(holder.close());
    postgres::batch(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"));
    assert!(still_held.is_ok(), "the holder's renewal: {still_held:?}");
    assert_ne!(served, "mem", "{key} was held on an up PostgreSQL and the policy's acquire was served by mem (then by {after})");
}

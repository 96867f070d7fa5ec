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
//!    host out of ephemeral ports) reads as unreachable too. Fixed: `EMFILE`,
//!    `ENFILE`, `ENOBUFS` and `AddrNotAvailable` are no sign of down either,
//!    and the Redis driver reads any link's socket error through one place
//!    (`connect_failure`, a sentinel's too); both tests failed before.
//!    Held (a probe below): a Cluster slot-map fetch cut by its own bound
//!    while a stalled seed's socket is up, after a first seed that does
//!    not answer; the command's bound cuts first, as unanswered.
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
//!    Probed and held (below, on a private primary with a synchronous
//!    standby): a hand-over (`_hand_over`) cancelled in its sync-rep wait
//!    under a role whose `client_min_messages` is `error`: release and
//!    waiter both `OUTCOME_UNKNOWN`. With the `set_config` line of
//!    `DURABLE` removed by hand the same test failed (release `Ok(true)`,
//!    the waiter told granted), so it tells.

mod postgres;
#[path = "postgres/server.rs"]
mod server;
mod support;

use std::time::Duration;

use dokebi_lock::{AcquireOptions, Provider};
use futures::executor::block_on;

fn wait(ms: u64) -> AcquireOptions {
    AcquireOptions { wait_timeout: Some(Duration::from_millis(ms)), ..AcquireOptions::default() }
}

/// Held by every test of this file for its whole run: two of them take
/// every descriptor of the process (`NoDescriptors`), and a test running
/// beside them then met `EMFILE` in its own `runuser` (a CI run).
static ALONE: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn alone() -> std::sync::MutexGuard<'static, ()> {
    ALONE.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
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
fn redis_no_descriptor_left_in_this_process_is_no_sign_of_down() {
    let _alone = alone();
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
fn postgres_no_descriptor_left_in_this_process_is_no_sign_of_down() {
    let _alone = alone();
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

/// A TCP listener that never accepts, its accept queue full: a connect to
/// it gets no answer (the kernel drops the SYN), as to a host that is
/// down. Answers its port and the descriptors to close.
fn black_hole() -> (u16, Vec<std::net::TcpStream>, libc::c_int) {
    // SAFETY: plain socket calls on a sockaddr_in of the right size.
    let (fd, port) = unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0);
        assert!(fd >= 0);
        let mut addr: libc::sockaddr_in = std::mem::zeroed();
        addr.sin_family = libc::AF_INET as libc::sa_family_t;
        addr.sin_addr.s_addr = u32::from_ne_bytes([127, 0, 0, 1]);
        let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
        assert_eq!(libc::bind(fd, (&addr as *const libc::sockaddr_in).cast(), len), 0);
        assert_eq!(libc::listen(fd, 0), 0);
        let mut bound: libc::sockaddr_in = std::mem::zeroed();
        let mut bound_len = len;
        assert_eq!(libc::getsockname(fd, (&mut bound as *mut libc::sockaddr_in).cast(), &mut bound_len), 0);
        (fd, u16::from_be(bound.sin_port))
    };
    let address: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let mut queued = Vec::new();
    for _ in 0..8 {
        match std::net::TcpStream::connect_timeout(&address, Duration::from_millis(300)) {
            Ok(stream) => queued.push(stream),
            Err(err) => {
                assert_eq!(err.kind(), std::io::ErrorKind::TimedOut, "{err}");
                return (port, queued, fd);
            }
        }
    }
    panic!("the accept queue never filled");
}

/// A one-node Redis Cluster `B` holds `k` for its holder; `B` then stalls
/// (SIGSTOP, a stand-in for a long script: docs/policy.md counts a server
/// whose connect checks go unanswered as up). A fresh process's policy
/// over the seeds `[A, B]`, `A` a host that does not answer (a machine
/// that is down), `connectTimeoutMs: 3000`, `commandTimeoutMs: 1000`:
/// `fetch_slots` asks `A`, then `B` too once `A` has had its share of the
/// bound (2 s of 4 s); `B`'s socket comes up and its checks would end
/// unanswered at `connectTimeoutMs` after it was asked (5 s), but the
/// fetch's bound ends first (4 s), with no failure kept from a node
/// reached (`A`'s connect is still pending), which `fetch_slots` reads as
/// `Failure::Unreachable`, whatever `B`'s `Reach` says. Held: the
/// command's own bound (`within`, from the command's start, a little
/// before the fetch's) cuts the route first, as unanswered, and the
/// acquire ends `PROVIDER_FAILED` at 4.0 s without moving.
#[test]
fn redis_cluster_slot_map_fetch_cut_while_a_stalled_seed_is_up_never_moves_a_held_key() {
    let _alone = alone();
    let server = support::redis_server::RedisServer::start_persistent(&[
        "--cluster-enabled",
        "yes",
        "--cluster-config-file",
        "nodes.conf",
        "--cluster-node-timeout",
        "60000",
    ]);
    let port = server.port();
    let mut admin = redis::Client::open(server.url()).unwrap().get_connection().unwrap();
    let _: () = redis::cmd("CLUSTER").arg("ADDSLOTSRANGE").arg(0).arg(16383).query(&mut admin).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let info: String = redis::cmd("CLUSTER").arg("INFO").query(&mut admin).unwrap();
        if info.contains("cluster_state:ok") {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the one-node cluster never came up: {info}");
        std::thread::sleep(Duration::from_millis(50));
    }
    let (holder, _) = support::open_redis_at(&format!("cluster: {{ nodes: [redis://127.0.0.1:{port}] }}"), &[("leaseMs", "30000")], &[]);
    let lease = block_on(holder.backend("shared").unwrap().acquire("k", support::wait(0))).unwrap();
    let (dead, queued, listener) = black_hole();
    server.pause();
    let policy = support::fall_back::FallBackToHost::open_on(
        "redis",
        &format!(
            "cluster: {{ nodes: [redis://127.0.0.1:{dead}, redis://127.0.0.1:{port}] }}, connectTimeoutMs: 3000, commandTimeoutMs: 1000"
        ),
        "namespace: test, leaseMs: 30000",
        5000,
    );
    let started = std::time::Instant::now();
    let why = "a seed took the socket and was stalled; the slot-map fetch's bound cut it, read as unreachable";
    let served = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| policy.acquire_held_within("k", lease.fence(), 10_000, why)));
    eprintln!("the policy's acquire ended after {:?}: {served:?}", started.elapsed());
    server.resume();
    drop(policy);
    drop(queued);
    // SAFETY: the listener opened above.
    unsafe { libc::close(listener) };
    let still_held = block_on(lease.release());
    block_on(holder.close());
    drop(server);
    assert!(matches!(still_held, Ok(true)), "the holder's release: {still_held:?}");
    if let Err(panic) = served {
        std::panic::resume_unwind(panic);
    }
}

/// 29c3bc4 on the hand-over path, with the role's `client_min_messages`
/// at `error` (what a pooler's other client's `SET` leaves too): a shared
/// lease's release hands `k` to an exclusive acquire waiting in the same
/// process (`_hand_over`: the give-back and the waiter's `take` in one
/// statement), whose commit waits for the synchronous standby (down) and
/// is cancelled there. The take inside `_hand_over` sets
/// `client_min_messages` to `warning` for the transaction, so the WARNING
/// reaches the driver: the waiter must not be told granted. Held.
#[test]
fn a_hand_over_cancelled_in_its_sync_wait_under_a_quiet_role_grants_nothing() {
    let _alone = alone();
    use dokebi_lock::{ErrorCode, LockMode};
    let primary = server::PrivateServer::start("r25-hand", &[]);
    let mut standby = primary.standby("r25-hand-standby");
    let admin = primary.url();
    postgres::batch_on(&admin, "ALTER SYSTEM SET synchronous_standby_names = '*'");
    postgres::batch_on(&admin, "SELECT pg_reload_conf()");
    postgres::eventually("the standby streams synchronously", || {
        postgres::count_on(&admin, "SELECT count(*) FROM pg_stat_replication WHERE sync_state = 'sync'") == 1
    });
    postgres::batch_on(&admin, "ALTER ROLE postgres SET client_min_messages = error");
    let tag = "dl_r25_hand";
    let url = format!("{admin}&application_name={tag}");
    assert_eq!(postgres::rows_on(&url, "SELECT current_setting('client_min_messages')")[0].get::<_, String>(0), "error");
    let terms = "        leaseMs: 60000\n        pollIntervalMs: 5000\n        notifyPollIntervalMs: 5000\n";
    let provider = Provider::from_yaml(&postgres::yaml_on(&url, "dokebi", terms, "")).unwrap();
    let lock = postgres::backend(&provider);
    let reader = block_on(lock.acquire("k", AcquireOptions { mode: LockMode::Shared, ..wait(5_000) })).unwrap();
    let writing = {
        let lock = lock.clone();
        std::thread::spawn(move || block_on(lock.acquire("k", wait(8_000))))
    };
    postgres::eventually("the writer waits", || postgres::counts(&lock).waiting == 1);
    std::thread::sleep(Duration::from_millis(300));
    let position: String = postgres::rows_on(&admin, "SELECT pg_current_wal_lsn()::text")[0].get(0);
    postgres::eventually("the standby replayed the primary's WAL", || {
        postgres::count_on(&standby.url(), &format!("SELECT (pg_last_wal_replay_lsn() >= '{position}'::pg_lsn)::int::bigint")) == 1
    });
    standby.stop();
    let waiting =
        format!("FROM pg_stat_activity WHERE application_name = '{tag}' AND wait_event = 'SyncRep' AND query LIKE '%\\_hand\\_over%'");
    let released = std::thread::scope(|scope| {
        let releasing = scope.spawn(|| block_on(reader.release()));
        postgres::eventually("the hand-over waits for the standby", || {
            postgres::count_on(&admin, &format!("SELECT count(*) {waiting}")) == 1
        });
        assert_eq!(postgres::count_on(&admin, &format!("SELECT count(*) FROM (SELECT pg_cancel_backend(pid) {waiting}) c")), 1);
        releasing.join().unwrap()
    });
    let written = writing.join().unwrap();
    eprintln!(
        "release: {:?}; writer: {:?}",
        released.as_ref().map_err(|e| e.code()),
        written.as_ref().map(|l| l.fence()).map_err(|e| e.code())
    );
    assert_eq!(released.as_ref().err().map(|err| err.code()), Some(ErrorCode::OutcomeUnknown), "the cancelled hand-over's release");
    assert!(
        written.is_err(),
        "the writer told granted (fence {:?}) by a hand-over no standby has",
        written.as_ref().map(|lease| lease.fence()).ok()
    );
    block_on(provider.close());
}

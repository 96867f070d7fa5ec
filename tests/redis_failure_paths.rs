//! The redis driver's failure paths, exactly: which error a caller gets when
//! Redis stalls, loses a reply, answers late or is too old, and what is left
//! in Redis afterwards. Each test puts a real redis-server behind the fault
//! it names (a pause, a proxy that delays or cuts bytes, a fake old server).

mod support;

#[path = "faults/proxy.rs"]
mod proxy;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use dokebi_lock::{AcquireOptions, ErrorCode, LockError, LockMode, Provider};
use futures::executor::block_on;
use proxy::Proxy;
use support::redis_server::RedisServer;
use support::{eventually, open_redis, redis_counts, wait};

fn lock_keys(server: &RedisServer) -> Vec<String> {
    server.keys().into_iter().filter(|k| k.starts_with("test:lock:")).collect()
}

fn code<T>(result: Result<T, LockError>) -> ErrorCode {
    match result {
        Ok(_) => panic!("expected an error"),
        Err(err) => err.code(),
    }
}

/// Opens the connections a test's faults will hit (command and pub/sub),
/// so that the fault meets an open connection, not a connect.
fn warm_up(provider: &Provider) {
    let lease = block_on(provider.backend("shared").unwrap().acquire("warm-up", wait(0))).unwrap();
    assert!(block_on(lease.release()).unwrap());
}

#[test]
fn a_stall_shorter_than_command_timeout_costs_no_lease() {
    let server = RedisServer::start();
    let (a, _) = open_redis(&server.url(), &[("leaseMs", "10000")], &[("commandTimeoutMs", "5000")]);
    let lease = block_on(a.backend("shared").unwrap().acquire("k", wait(0))).unwrap();
    // A fork for BGSAVE, an fsync, a slow script: 1.2 s without an answer,
    // well inside commandTimeoutMs.
    server.pause();
    let renewed = thread::scope(|scope| {
        scope.spawn(|| {
            thread::sleep(Duration::from_millis(1200));
            server.resume();
        });
        block_on(lease.renew())
    });
    assert!(renewed.expect("a stall shorter than commandTimeoutMs is no failure"));
    assert!(lease.is_valid());
    assert!(block_on(lease.release()).expect("the lease survived the stall"));
}

#[test]
fn renew_after_an_unknown_outcome_is_false_and_never_revives_the_lease() {
    let server = RedisServer::start();
    let (a, _) = open_redis(&server.url(), &[("leaseMs", "30000")], &[("commandTimeoutMs", "300"), ("connectTimeoutMs", "100")]);
    let lease = block_on(a.backend("shared").unwrap().acquire("k", wait(0))).unwrap();
    server.pause();
    assert_eq!(code(block_on(lease.renew())), ErrorCode::OutcomeUnknown);
    // The cleanup's first try fails on the paused server (its connect gives
    // up after 100 ms); its second comes a command timeout (300 ms) later.
    // In between Redis answers again and still carries our token, so a
    // renewal sent now would succeed, and the cleanup would then delete a
    // lease its holder believes valid: it must not be sent.
    thread::sleep(Duration::from_millis(200));
    server.resume();
    assert!(!block_on(lease.renew()).unwrap(), "a lease whose cleanup is scheduled is not renewed");
    assert!(!lease.is_valid());
}

/// A loopback proxy that forwards both ways until it is told to cut: then it
/// closes a connection the moment the server answers on it (the command ran,
/// its reply is lost) and closes every new connection at once (a reconnect
/// fails), until it is told to forward again.
struct ReplyCutter {
    port: u16,
    cutting: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
}

impl ReplyCutter {
    fn start(upstream: u16) -> ReplyCutter {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let (cutting, stop) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicBool::new(false)));
        let (cut, stopped) = (cutting.clone(), stop.clone());
        thread::spawn(move || {
            while !stopped.load(Ordering::Relaxed) {
                let Ok((client, _)) = listener.accept() else {
                    thread::sleep(Duration::from_millis(2));
                    continue;
                };
                if cut.load(Ordering::SeqCst) {
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                }
                client.set_nonblocking(false).unwrap();
                let server = TcpStream::connect(("127.0.0.1", upstream)).unwrap();
                let (c, s) = (client.try_clone().unwrap(), server.try_clone().unwrap());
                thread::spawn(move || copy(c, s, None));
                let cut = cut.clone();
                thread::spawn(move || copy(server, client, Some(cut)));
            }
        });
        ReplyCutter { port, cutting, stop }
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    fn cut(&self, on: bool) {
        self.cutting.store(on, Ordering::SeqCst);
    }
}

/// Copies until either side closes; with `cut` set, bytes read are dropped
/// and both directions closed instead.
fn copy(mut from: TcpStream, mut to: TcpStream, cut: Option<Arc<AtomicBool>>) {
    let mut buffer = [0u8; 16 * 1024];
    while let Ok(n @ 1..) = from.read(&mut buffer) {
        if cut.as_ref().is_some_and(|cut| cut.load(Ordering::SeqCst)) || to.write_all(&buffer[..n]).is_err() {
            break;
        }
    }
    let _ = from.shutdown(Shutdown::Both);
    let _ = to.shutdown(Shutdown::Both);
}

impl Drop for ReplyCutter {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

#[test]
fn a_lost_reply_then_a_failed_reconnect_is_outcome_unknown_and_the_orphan_is_cleaned_up() {
    let server = RedisServer::start();
    let cutter = ReplyCutter::start(server.port());
    let (a, _) = open_redis(&cutter.url(), &[("leaseMs", "30000")], &[("commandTimeoutMs", "1000"), ("connectTimeoutMs", "1000")]);
    warm_up(&a);
    cutter.cut(true);
    let err = block_on(a.backend("shared").unwrap().acquire("k", wait(0))).expect_err("the reply was lost");
    cutter.cut(false);
    // The acquire ran in Redis: the lock is held under a token nobody has.
    // Reporting PROVIDER_FAILED ("nothing happened") would leave it there.
    assert_eq!(err.code(), ErrorCode::OutcomeUnknown, "{err}");
    eventually("the cleanup by token removes the orphaned lock long before its 30 s lease", || lock_keys(&server).is_empty());
}

#[test]
fn a_release_whose_reply_is_lost_and_whose_retry_cannot_connect_is_outcome_unknown() {
    let server = RedisServer::start();
    let cutter = ReplyCutter::start(server.port());
    let (a, _) = open_redis(&cutter.url(), &[("leaseMs", "30000")], &[("commandTimeoutMs", "1000"), ("connectTimeoutMs", "1000")]);
    warm_up(&a);
    let lease = block_on(a.backend("shared").unwrap().acquire("k", wait(0))).unwrap();
    cutter.cut(true);
    let err = block_on(lease.release()).expect_err("the reply was lost");
    cutter.cut(false);
    assert_eq!(err.code(), ErrorCode::OutcomeUnknown, "the release ran in Redis, and nothing says it did not: {err}");
    assert!(lock_keys(&server).is_empty(), "the first attempt deleted the lock");
}

#[test]
fn a_grant_answered_after_its_validity_is_given_back_not_handed_out() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port(), Duration::ZERO);
    // Validity 8000 - 80 - 2 = 7918 ms from the send; the round trip below
    // is about 7954 ms, inside commandTimeoutMs (7990).
    let (a, _) = open_redis(&proxy.url(), &[("leaseMs", "8000")], &[("commandTimeoutMs", "7990")]);
    warm_up(&a);
    proxy.set_latency(Duration::from_millis(3977));
    let result = block_on(a.backend("shared").unwrap().acquire("k", wait(0)));
    proxy.set_latency(Duration::ZERO);
    let err = result.expect_err("a grant that arrives already expired is no lease");
    assert_eq!(err.code(), ErrorCode::ProviderFailed, "{err}");
    assert_eq!(redis_counts(&a.backend("shared").unwrap()).held, 0);
}

#[test]
fn a_grant_whose_replica_acknowledgement_outlasts_its_validity_is_given_back_not_handed_out() {
    let primary = RedisServer::start();
    // Persistent only for its private dir: a replica writes the sync's RDB.
    let replica = RedisServer::start_persistent(&["--replicaof", "127.0.0.1", &primary.port().to_string()]);
    eventually("the replica is in sync", || replica.replica_synced());
    // Validity 4100 - 41 - 2 = 4057 ms from the send. The grant is answered
    // at about 2000 ms (in time), then WAIT (bounded at 3000 ms by Redis)
    // gets the replica's acknowledgement at about 4600 ms: every reply
    // within commandTimeoutMs, but the lease is over before the last one.
    let (a, _) = open_redis(&primary.url(), &[("leaseMs", "4100"), ("replicaAcks", "1")], &[("commandTimeoutMs", "4000")]);
    warm_up(&a);
    replica.pause();
    primary.pause();
    let result = thread::scope(|scope| {
        scope.spawn(|| {
            thread::sleep(Duration::from_millis(2000));
            primary.resume();
            thread::sleep(Duration::from_millis(2600));
            replica.resume();
        });
        block_on(a.backend("shared").unwrap().acquire("k", wait(0)))
    });
    let err = result.expect_err("a grant acknowledged after its validity is no lease");
    assert_eq!(err.code(), ErrorCode::ProviderFailed, "{err}");
    assert_eq!(redis_counts(&a.backend("shared").unwrap()).held, 0);
    eventually("the late grant is given back", || lock_keys(&primary).is_empty());
}

#[test]
fn renewals_a_slow_replica_does_not_acknowledge_are_provider_failed_and_keep_the_holders_keys() {
    let primary = RedisServer::start();
    let replica = RedisServer::start_persistent(&["--replicaof", "127.0.0.1", &primary.port().to_string()]);
    eventually("the replica is in sync", || replica.replica_synced());
    // Redis bounds each WAIT at 3/4 of commandTimeoutMs (750 ms): on one
    // shared connection the second of two WAITs would answer at 1500 ms,
    // past the client's 1000 ms, and that renewal would end unknown.
    let (a, _) = open_redis(&primary.url(), &[("leaseMs", "30000"), ("replicaAcks", "1")], &[("commandTimeoutMs", "1000")]);
    let backend = a.backend("shared").unwrap();
    let leases: Vec<_> = ["k1", "k2", "k3"].iter().map(|key| block_on(backend.acquire(key, wait(0))).unwrap()).collect();
    replica.pause();
    let renewals = block_on(futures::future::join_all(leases.iter().map(|lease| lease.renew())));
    // Meanwhile the holders are inside: every key must still be theirs.
    let held = lock_keys(&primary);
    replica.resume();
    for renewal in renewals {
        assert_eq!(code(renewal), ErrorCode::ProviderFailed, "a write the replica did not acknowledge is no unknown outcome");
    }
    assert_eq!(held.len(), 3, "no holder's key is cleaned up: {held:?}");
    for lease in &leases {
        assert!(lease.is_valid(), "a failed renewal keeps the old estimate");
        assert!(block_on(lease.release()).unwrap());
    }
}

/// Redis 7.0 answers a script's write on a replica `READONLY …` (Redis 6
/// wraps it in `ERR Error running script`; both forms are unit-tested in
/// `transport/connection.rs`): the script did not run, so it is sent again
/// on a fresh connection until `commandTimeoutMs`, then `PROVIDER_FAILED`.
#[test]
fn a_script_a_replica_refuses_did_not_run_and_is_tried_again_on_a_fresh_connection() {
    let primary = RedisServer::start();
    let replica = RedisServer::start_persistent(&["--replicaof", "127.0.0.1", &primary.port().to_string()]);
    eventually("the replica is in sync", || replica.replica_synced());
    let (a, _) = open_redis(&replica.url(), &[("leaseMs", "5000")], &[("commandTimeoutMs", "500")]);
    let err = block_on(a.backend("shared").unwrap().acquire("k", wait(0))).expect_err("a replica grants nothing");
    assert_eq!(err.code(), ErrorCode::ProviderFailed, "{err}");
    let calls = replica.command_calls();
    let evalsha = calls.iter().find(|(name, _)| name == "evalsha").map_or(0, |(_, calls)| *calls);
    assert!(evalsha > 1, "a script that did not run is sent again: {calls:?}");
    let info: String = redis::cmd("INFO").arg("stats").query(&mut replica.client()).unwrap();
    let connections: u64 = info.lines().find_map(|l| l.strip_prefix("total_connections_received:")).unwrap().trim().parse().unwrap();
    // The pub/sub connection, the first command connection, a fresh one per retry, and ours.
    assert!(connections > 3, "each retry reconnects (asks where the primary is now): {connections}");
}

/// A shared and a counted holder whose primary was demoted under them (its
/// replica promoted with their keys): their scripts on the old primary
/// write nothing (`READONLY`), so a release or renewal there says nothing
/// of whether the lease is still theirs. The release scripts caught the
/// refused `ZREM` with `pcall` as "not a member" and answered `LEASE_LOST`,
/// the renewals `false`, while the new primary still carried both leases.
#[test]
fn shared_and_counted_holders_on_a_demoted_primary_are_refused_not_told_their_lease_is_lost() {
    let primary = RedisServer::start_persistent(&[]);
    let replica = RedisServer::start_persistent(&["--replicaof", "127.0.0.1", &primary.port().to_string()]);
    eventually("the replica is in sync", || replica.replica_synced());
    let (a, _) = open_redis(&primary.url(), &[("leaseMs", "30000"), ("replicaAcks", "1")], &[("commandTimeoutMs", "500")]);
    let backend = a.backend("shared").unwrap();
    let reader = block_on(backend.acquire("readers", AcquireOptions { mode: LockMode::Shared, ..wait(0) })).unwrap();
    let unit = block_on(backend.acquire("units", AcquireOptions { limit: Some(2), weight: Some(1), ..wait(0) })).unwrap();
    // The failover: the replica (which acknowledged both grants) becomes
    // the primary, the old primary its replica.
    replica.replicate_from(None);
    primary.replicate_from(Some(replica.port()));
    eventually("the old primary follows the new one", || primary.replica_synced());
    let held = lock_keys(&replica);
    for (what, lease) in [("the reader", &reader), ("the counted holder", &unit)] {
        let renewed = block_on(lease.renew());
        assert_ne!(renewed.as_ref().ok(), Some(&false), "{what}'s renewal on the demoted primary said the lease is not ours");
        let released = block_on(lease.release());
        assert_ne!(released.as_ref().map_err(LockError::code).err(), Some(ErrorCode::LeaseLost), "{what}: {released:?}");
        assert_ne!(released.as_ref().ok(), Some(&false), "{what}'s release on the demoted primary said the lease was not ours");
    }
    assert_eq!(held.len(), 2, "both leases are on the new primary: {held:?}");
}

#[test]
fn with_lock_learns_of_a_loss_by_the_deadline_not_by_a_reply() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port(), Duration::ZERO);
    // Renewals every 1000 ms; the lease's estimate ends at 3000 - 32 ms;
    // a renewal sent at 1000 ms would time out only at 3900 ms.
    let (a, _) = open_redis(&proxy.url(), &[("leaseMs", "3000")], &[("commandTimeoutMs", "2900")]);
    warm_up(&a);
    let backend = a.backend("shared").unwrap();
    let started = Instant::now();
    let result = block_on(backend.with_lock("k", wait(0), |section| {
        let backend = backend.clone();
        let proxy = &proxy;
        async move {
            // Every byte now arrives long after the lease: renewals stall.
            proxy.set_latency(Duration::from_secs(10));
            section.signal.aborted().await;
            redis_counts(&backend).last_error
        }
    }));
    let returned = redis_counts(&backend).last_error;
    proxy.set_latency(Duration::ZERO);
    assert_eq!(result.map(|_| ()).unwrap_err().code(), ErrorCode::LeaseLost);
    // No reply (nor a command timeout) had come when the signal fired, nor
    // when withLock returned: both went by the lease's own deadline.
    assert_eq!(returned, None, "withLock waited for a reply ({:?} after the start)", started.elapsed());
}

#[test]
fn close_waits_for_an_acquire_in_flight_and_releases_its_grant() {
    let server = RedisServer::start();
    let (a, records) = open_redis(&server.url(), &[("leaseMs", "30000"), ("shutdownTimeoutMs", "5000")], &[("commandTimeoutMs", "5000")]);
    warm_up(&a);
    let a = Arc::new(a);
    server.pause();
    let acquiring = thread::spawn({
        let backend = a.backend("shared").unwrap();
        move || block_on(backend.acquire("k", wait(10_000))).map(|_| ())
    });
    eventually("the acquire is in flight", || redis_counts(&a.backend("shared").unwrap()).waiting == 1);
    thread::sleep(Duration::from_millis(50));
    let closing = thread::spawn({
        let a = a.clone();
        move || block_on(a.close())
    });
    thread::sleep(Duration::from_millis(300));
    assert!(!closing.is_finished(), "close returned while an acquire still waited for Redis");
    server.resume();
    closing.join().unwrap();
    assert!(lock_keys(&server).is_empty(), "the grant that came during close was released before close returned");
    assert_eq!(code(acquiring.join().unwrap()), ErrorCode::Closed);
    let records = records.lock().unwrap();
    assert!(records.iter().all(|r| !r.code.starts_with("CLEANUP")), "{records:?}");
}

#[test]
fn close_stays_within_the_shutdown_timeout_while_an_acquire_waits_for_redis() {
    let server = RedisServer::start();
    let (a, records) = open_redis(&server.url(), &[("leaseMs", "30000"), ("shutdownTimeoutMs", "300")], &[("commandTimeoutMs", "10000")]);
    warm_up(&a);
    server.pause();
    let acquiring = thread::spawn({
        let backend = a.backend("shared").unwrap();
        move || block_on(backend.acquire("k", wait(20_000))).map(|_| ())
    });
    eventually("the acquire is in flight", || redis_counts(&a.backend("shared").unwrap()).waiting == 1);
    // Counted from the call on; its script is sent a moment later. Until
    // it is sent, close() ends the acquire at once (CLOSED, nothing to wait
    // for), which a loaded machine showed 2 runs in 10.
    thread::sleep(Duration::from_millis(200));
    let closing = Instant::now();
    block_on(a.close());
    let took = closing.elapsed();
    assert!(took < Duration::from_secs(5), "close took {took:?}, not about shutdownTimeoutMs (300 ms)");
    assert!(records.lock().unwrap().iter().any(|r| r.code == "CLEANUP_TIMEOUT"), "logged before close returned");
    server.resume();
    // A grant that comes after close gave up finds the connections shut:
    // it expires after leaseMs, as the log line says.
    assert_eq!(code(acquiring.join().unwrap()), ErrorCode::Closed);
}

/// A fake server that speaks just enough RESP to say it is Redis `version`
/// (4.0.14 or 6.0.16).
fn old_server(version: &str) -> u16 {
    fn says(words: &[String], version: &str) -> String {
        match words.first().map(String::as_str) {
            Some("INFO") => bulk(&format!("# Server\r\nredis_version:{version}\r\nredis_mode:standalone\r\n")),
            _ => "+OK\r\n".to_owned(),
        }
    }
    match version {
        "4.0.14" => fake_server(|words| says(words, "4.0.14")),
        "6.0.16" => fake_server(|words| says(words, "6.0.16")),
        other => panic!("no fake server of Redis {other}"),
    }
}

fn bulk(text: &str) -> String {
    format!("${}\r\n{text}\r\n", text.len())
}

/// A fake Redis on a free port: each command (its words, the first in
/// upper case) gets `answer`'s reply.
fn fake_server(answer: fn(&[String]) -> String) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    thread::spawn(move || {
        for client in listener.incoming().flatten() {
            thread::spawn(move || serve(client, answer));
        }
    });
    port
}

fn serve(client: TcpStream, answer: fn(&[String]) -> String) {
    let mut reader = BufReader::new(client.try_clone().unwrap());
    let mut writer = client;
    let mut line = String::new();
    loop {
        line.clear();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let Some(count) = line.trim_end().strip_prefix('*').and_then(|n| n.parse::<usize>().ok()) else { return };
        let mut words = Vec::with_capacity(count);
        for i in 0..count {
            line.clear();
            reader.read_line(&mut line).unwrap();
            let len: usize = line.trim_end().trim_start_matches('$').parse().unwrap();
            let mut word = vec![0u8; len + 2];
            reader.read_exact(&mut word).unwrap();
            let word = String::from_utf8_lossy(&word[..len]).into_owned();
            words.push(if i == 0 { word.to_uppercase() } else { word });
        }
        if writer.write_all(answer(&words).as_bytes()).is_err() {
            return;
        }
    }
}

/// Making a connection includes its checks (`INFO`): a server that takes
/// the connection and never answers them is unreachable within
/// `connectTimeoutMs`, not after `commandTimeoutMs` more.
#[test]
fn a_server_that_never_answers_the_connect_checks_is_unreachable_within_connect_timeout() {
    let port = fake_server(|words| match words.first().map(String::as_str) {
        Some("INFO") => String::new(),
        _ => "+OK\r\n".to_owned(),
    });
    let url = format!("redis://127.0.0.1:{port}/0");
    let (a, _) = open_redis(&url, &[("leaseMs", "60000")], &[("connectTimeoutMs", "300"), ("commandTimeoutMs", "20000")]);
    let started = Instant::now();
    let err = block_on(a.backend("shared").unwrap().acquire("k", wait(0))).expect_err("no connection");
    let took = started.elapsed();
    assert_eq!(err.code(), ErrorCode::ProviderFailed, "{err}");
    assert!(took < Duration::from_secs(10), "took {took:?}: the checks waited for commandTimeoutMs (20 s), not connectTimeoutMs");
}

/// Scripts the two nodes of [`ping_pong_cluster`] were sent.
static PING_PONG_SCRIPTS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
/// The two nodes' ports.
static PING_PONG_PORTS: std::sync::OnceLock<(u16, u16)> = std::sync::OnceLock::new();

/// Two fake cluster nodes whose map gives every slot to the first, and
/// which answer every script `MOVED` to the other: a redirect that never
/// settles (a slot map in flux, or a misconfigured cluster).
fn ping_pong_cluster() -> (u16, u16) {
    *PING_PONG_PORTS.get_or_init(|| {
        let a = fake_server(|words| {
            let (a, b) = *PING_PONG_PORTS.get().unwrap();
            ping_pong(words, b, a)
        });
        let b = fake_server(|words| {
            let (a, _) = *PING_PONG_PORTS.get().unwrap();
            ping_pong(words, a, a)
        });
        (a, b)
    })
}

/// A node of [`ping_pong_cluster`]: its map names `first`, its scripts
/// are `MOVED` to `other`.
fn ping_pong(words: &[String], other: u16, first: u16) -> String {
    match words.first().map(String::as_str) {
        Some("INFO") => bulk("# Server\r\nredis_version:7.0.15\r\nredis_mode:cluster\r\n"),
        Some("CLUSTER") => format!("*1\r\n*3\r\n:0\r\n:16383\r\n*2\r\n$9\r\n127.0.0.1\r\n:{first}\r\n"),
        Some("EVALSHA") => {
            PING_PONG_SCRIPTS.fetch_add(1, Ordering::SeqCst);
            format!("-MOVED {} 127.0.0.1:{other}\r\n", key_slot(words[3].as_bytes()))
        }
        _ => "+OK\r\n".to_owned(),
    }
}

/// A key's hash slot (CRC16/XMODEM of its hash tag, or of it all).
fn key_slot(key: &[u8]) -> u16 {
    let tag = key.iter().position(|&c| c == b'{').and_then(|open| {
        let close = key[open + 1..].iter().position(|&c| c == b'}')?;
        (close > 0).then(|| &key[open + 1..open + 1 + close])
    });
    let mut crc: u16 = 0;
    for &byte in tag.unwrap_or(key) {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 { (crc << 1) ^ 0x1021 } else { crc << 1 };
        }
    }
    crc % 16384
}

#[test]
fn a_moved_redirect_that_never_settles_is_tried_again_after_a_pause_until_command_timeout() {
    let (a, b) = ping_pong_cluster();
    let endpoint = format!("cluster: {{ nodes: [redis://127.0.0.1:{a}, redis://127.0.0.1:{b}] }}");
    let (provider, _) = support::open_redis_at(&endpoint, &[("leaseMs", "5000")], &[("commandTimeoutMs", "500")]);
    let err = block_on(provider.backend("shared").unwrap().acquire("k", wait(0))).expect_err("no node runs the script");
    assert_eq!(err.code(), ErrorCode::ProviderFailed, "{err}");
    let sent = PING_PONG_SCRIPTS.load(Ordering::SeqCst);
    // One at once after the first MOVED, then one per 20 ms pause within 500 ms.
    assert!(sent <= 30, "{sent} scripts sent in 500 ms: a redirect loop without a pause");
}

#[test]
fn a_server_older_than_redis_6_2_is_provider_failed_naming_the_minimum() {
    // 5.0-6.1 too: there every grant that reserves a fence failed (SET ...
    // PXAT) after ACQUIRE's SET NX, leaving the key locked for leaseMs.
    for version in ["4.0.14", "6.0.16"] {
        let url = format!("redis://127.0.0.1:{}/0", old_server(version));
        let (a, _) = open_redis(&url, &[("leaseMs", "30000")], &[]);
        let err = block_on(a.backend("shared").unwrap().acquire("k", wait(0))).expect_err("an old server is refused");
        assert_eq!(err.code(), ErrorCode::ProviderFailed);
        let message = err.to_string();
        assert!(message.contains(version) && message.contains("Redis 6.2 or later"), "{message}");
    }
}

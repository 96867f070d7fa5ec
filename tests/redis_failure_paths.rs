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

use dokebi_lock::{ErrorCode, LockError, Provider};
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

/// A fake server that speaks just enough RESP to say it is Redis `version`.
fn old_server(version: &'static str) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    thread::spawn(move || {
        for client in listener.incoming().flatten() {
            thread::spawn(move || answer_as_redis(client, version));
        }
    });
    port
}

fn answer_as_redis(client: TcpStream, version: &str) {
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
        for _ in 0..count {
            line.clear();
            reader.read_line(&mut line).unwrap();
            let len: usize = line.trim_end().trim_start_matches('$').parse().unwrap();
            let mut word = vec![0u8; len + 2];
            reader.read_exact(&mut word).unwrap();
            words.push(String::from_utf8_lossy(&word[..len]).to_uppercase());
        }
        let reply = if words.first().is_some_and(|w| w == "INFO") {
            let info = format!("# Server\r\nredis_version:{version}\r\nredis_mode:standalone\r\n");
            format!("${}\r\n{info}\r\n", info.len())
        } else {
            "+OK\r\n".to_owned()
        };
        if writer.write_all(reply.as_bytes()).is_err() {
            return;
        }
    }
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

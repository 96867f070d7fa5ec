//! The redis driver against a real redis-server: exclusion, hand-off,
//! expiry, renew, limits, FIFO, key hashing, close.

mod support;

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use dokebi_lock::{AbortController, AcquireOptions, ErrorCode, Lease, LockError, Provider};
use futures::executor::block_on;
use redis::Commands;
use support::redis_server::RedisServer;
use support::{backend, eventually, open_redis, redis_counts, wait};

fn code<T: std::fmt::Debug>(result: Result<T, LockError>) -> ErrorCode {
    result.expect_err("expected an error").code()
}

#[test]
fn two_providers_exclude_each_other() {
    let server = RedisServer::start();
    let (a, _) = open_redis(&server.url(), &[("leaseMs", "10000")], &[]);
    let (b, _) = open_redis(&server.url(), &[("leaseMs", "10000")], &[]);
    block_on(async {
        let held = backend(&a).acquire("order:1", wait(0)).await.unwrap();
        assert!(held.is_valid());
        assert_eq!(code(backend(&b).acquire("order:1", wait(0)).await), ErrorCode::LockBusy);
        assert_eq!(code(backend(&b).acquire("order:1", wait(100)).await), ErrorCode::WaitTimeout);
        // Other keys are independent.
        let other = backend(&b).acquire("order:2", wait(0)).await.unwrap();
        assert!(held.release().await.unwrap());
        assert!(!held.release().await.unwrap(), "a second release resolves false");
        // A wait: the timed-out acquire above withdraws its mark in the
        // background, and a release that lands first hands the key to that
        // mark until the withdraw passes it on (a CI run saw LOCK_BUSY).
        let taken = backend(&b).acquire("order:1", wait(2_000)).await.unwrap();
        assert!(taken.fence() > held.fence());
        assert!(taken.release().await.unwrap() && other.release().await.unwrap());
    });
}

#[test]
fn a_waiter_in_another_provider_is_woken_by_the_release_notification() {
    let server = RedisServer::start();
    // Polling is effectively off: only the notification can wake the waiter
    // before its wait ends.
    let slow = [("leaseMs", "60000"), ("pollIntervalMs", "60000"), ("notifyPollIntervalMs", "600000"), ("waitTimeoutMs", "10000")];
    let (a, _) = open_redis(&server.url(), &slow, &[]);
    let (b, _) = open_redis(&server.url(), &slow, &[]);
    let waiter_backend = backend(&b);
    eventually("b subscribed", || redis_counts(&waiter_backend).subscribed);
    let held = block_on(backend(&a).acquire("job", wait(0))).unwrap();
    let waiter = thread::spawn(move || block_on(waiter_backend.acquire("job", AcquireOptions::default())));
    eventually("b waits", || redis_counts(&backend(&b)).waiting == 1);
    thread::sleep(Duration::from_millis(50)); // let b's first try see the key held
    assert!(block_on(held.release()).unwrap());
    let lease = waiter.join().unwrap().expect("handed off by the notification");
    assert!(lease.fence() > held.fence());
    assert!(block_on(lease.release()).unwrap());
}

#[test]
fn a_waiter_with_a_short_poll_never_cuts_short_the_wake_up_of_a_slower_one() {
    let server = RedisServer::start();
    let slow = [("leaseMs", "60000"), ("pollIntervalMs", "60000"), ("notifyPollIntervalMs", "600000"), ("waitTimeoutMs", "10000")];
    let fast = [("leaseMs", "60000"), ("pollIntervalMs", "20"), ("notifyPollIntervalMs", "50")];
    let (holder, _) = open_redis(&server.url(), &slow, &[]);
    let (b, _) = open_redis(&server.url(), &slow, &[]);
    let (c, _) = open_redis(&server.url(), &fast, &[]);
    eventually("b subscribed", || redis_counts(&backend(&b)).subscribed);
    let held = block_on(backend(&holder).acquire("k", wait(0))).unwrap();
    let slow_waiter = backend(&b);
    let waiter = thread::spawn(move || block_on(slow_waiter.acquire("k", AcquireOptions::default())));
    eventually("b waits", || redis_counts(&backend(&b)).waiting == 1);
    // c retries every 50 ms for a second, then gives up; its own marks would
    // have expired well before the release below.
    assert_eq!(code(block_on(backend(&c).acquire("k", wait(1000)))), ErrorCode::WaitTimeout);
    thread::sleep(Duration::from_millis(1500));
    assert!(block_on(held.release()).unwrap());
    let lease = waiter.join().unwrap().expect("b was still told about the release");
    block_on(lease.release()).unwrap();
}

#[test]
fn an_expired_lease_is_taken_over_and_its_release_reports_lease_lost() {
    let server = RedisServer::start();
    let (a, _) = open_redis(&server.url(), &[("leaseMs", "100")], &[("commandTimeoutMs", "90")]);
    let (b, _) = open_redis(&server.url(), &[("leaseMs", "100")], &[("commandTimeoutMs", "90")]);
    block_on(async {
        let first = backend(&a).acquire("k", wait(0)).await.unwrap();
        assert!(first.remaining().unwrap() <= Duration::from_millis(100));
        thread::sleep(Duration::from_millis(150));
        assert!(!first.is_valid());
        assert_eq!(first.remaining(), Some(Duration::ZERO));
        let second = backend(&b).acquire("k", wait(0)).await.unwrap();
        assert!(second.fence() > first.fence());
        assert_eq!(code(first.release().await), ErrorCode::LeaseLost);
        assert!(second.release().await.unwrap(), "the takeover's lease is untouched");
    });
}

#[test]
fn renew_extends_a_lease_and_reports_false_once_it_is_not_ours() {
    let server = RedisServer::start();
    let (a, _) = open_redis(&server.url(), &[("leaseMs", "1000")], &[("commandTimeoutMs", "900")]);
    block_on(async {
        let lease = backend(&a).acquire("k", wait(0)).await.unwrap();
        thread::sleep(Duration::from_millis(600));
        assert!(lease.renew().await.unwrap());
        thread::sleep(Duration::from_millis(600));
        assert!(lease.is_valid(), "renewed 600 ms ago with a 1000 ms lease");
        let lock_key: String = {
            let keys = server.keys();
            keys.into_iter().find(|k| k.starts_with("test:lock:")).unwrap()
        };
        let pttl: i64 = server.client().pttl(&lock_key).unwrap();
        assert!(pttl > 0 && pttl <= 1000);
        // Someone else's token replaces ours.
        let _: () = server.client().set(&lock_key, "intruder").unwrap();
        assert!(!lease.renew().await.unwrap());
        assert!(!lease.is_valid());
        assert_eq!(code(lease.release().await), ErrorCode::LeaseLost);
        let value: String = server.client().get(&lock_key).unwrap();
        assert_eq!(value, "intruder", "a lost lease never deletes another owner's lock");
    });
}

#[test]
fn waiters_of_one_key_in_one_process_are_served_in_fifo_order() {
    let server = RedisServer::start();
    let (a, _) = open_redis(&server.url(), &[("leaseMs", "10000"), ("waitTimeoutMs", "10000")], &[]);
    let shared = backend(&a);
    let held = block_on(shared.acquire("fifo", wait(0))).unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut threads = Vec::new();
    for i in 0..5 {
        let (mine, order) = (shared.clone(), order.clone());
        threads.push(thread::spawn(move || {
            let lease = block_on(mine.acquire("fifo", AcquireOptions::default())).unwrap();
            order.lock().unwrap().push(i);
            block_on(lease.release()).unwrap();
        }));
        eventually("the waiter queued", || redis_counts(&shared).waiting == i + 1);
        thread::sleep(Duration::from_millis(20));
    }
    assert!(block_on(held.release()).unwrap());
    threads.into_iter().for_each(|t| t.join().unwrap());
    assert_eq!(*order.lock().unwrap(), vec![0, 1, 2, 3, 4]);
}

#[test]
fn max_waiters_counts_every_acquire_in_progress_and_max_leases_the_held_ones() {
    let server = RedisServer::start();
    let (holder, _) = open_redis(&server.url(), &[("leaseMs", "10000")], &[]);
    let (a, _) = open_redis(&server.url(), &[("leaseMs", "10000"), ("maxWaiters", "2"), ("maxLeases", "2")], &[]);
    let held = block_on(backend(&holder).acquire("busy", wait(0))).unwrap();
    let waiters: Vec<_> = (0..2)
        .map(|_| {
            let shared = backend(&a);
            thread::spawn(move || code(block_on(shared.acquire("busy", wait(1500)))))
        })
        .collect();
    eventually("two acquires in progress", || redis_counts(&backend(&a)).waiting == 2);
    assert_eq!(code(block_on(backend(&a).acquire("free", wait(0)))), ErrorCode::QueueFull);
    for waiter in waiters {
        assert_eq!(waiter.join().unwrap(), ErrorCode::WaitTimeout);
    }
    block_on(async {
        let one = backend(&a).acquire("one", wait(0)).await.unwrap();
        let two = backend(&a).acquire("two", wait(0)).await.unwrap();
        assert_eq!(code(backend(&a).acquire("three", wait(0)).await), ErrorCode::KeyLimit);
        assert!(one.release().await.unwrap());
        let three = backend(&a).acquire("three", wait(0)).await.unwrap();
        assert!(two.release().await.unwrap() && three.release().await.unwrap() && held.release().await.unwrap());
    });
}

#[test]
fn redis_sees_only_the_sha256_of_a_key() {
    let server = RedisServer::start();
    let (a, _) = open_redis(&server.url(), &[("leaseMs", "10000"), ("fenceRetentionMs", "60000")], &[]);
    let lease = block_on(backend(&a).acquire("secret-order-42", wait(0))).unwrap();
    // Its first 132 bits, in 22 base64url characters (Python:
    // base64.urlsafe_b64encode(hashlib.sha256(b"secret-order-42").digest())[:22]).
    let digest = support::names::digest("secret-order-42");
    assert_eq!(digest, "mZyILfHdDUyslstZtfyItq");
    // The digest in braces is a hash tag: one Redis Cluster slot for all of a key's names.
    assert_eq!(server.keys(), vec![format!("test:lock-fence:{{{digest}}}"), format!("test:lock:{{{digest}}}")]);
    let fence: u64 = server.client().get(format!("test:lock-fence:{{{digest}}}")).unwrap();
    assert_eq!(lease.fence(), fence);
    let ttl: i64 = server.client().pttl(format!("test:lock-fence:{{{digest}}}")).unwrap();
    assert!(ttl > 50_000 && ttl <= 60_000, "the fence counter lives fenceRetentionMs after the grant: {ttl}");
    assert_eq!(lease.key(), "secret-order-42");
    assert!(!format!("{lease:?}").contains("secret"));
    block_on(lease.release()).unwrap();
}

/// The waiting marks left on `server`: the members of every waiting set.
/// (A withdraw that takes a set's last mark leaves the name as a '1' for
/// the set's time, so that a reader behind the holder is still woken: a
/// '1' refuses no try and is handed nothing.)
fn waiting_marks(server: &RedisServer) -> Vec<String> {
    let names = server.keys().into_iter().filter(|k| k.starts_with("test:lock-waiting:"));
    names
        .flat_map(|name| redis::cmd("ZRANGE").arg(&name).arg(0).arg(-1).query::<Vec<String>>(&mut server.client()).unwrap_or_default())
        .collect()
}

#[test]
fn close_releases_held_leases_and_rejects_waiters() {
    let server = RedisServer::start();
    let (holder, _) = open_redis(&server.url(), &[("leaseMs", "30000")], &[]);
    let (a, records) = open_redis(&server.url(), &[("leaseMs", "30000")], &[]);
    let leases: Vec<Lease> = ["x", "y", "z"].iter().map(|k| block_on(backend(&a).acquire(k, wait(0))).unwrap()).collect();
    let other = block_on(backend(&holder).acquire("held-elsewhere", wait(0))).unwrap();
    let shared = backend(&a);
    let waiter = thread::spawn(move || code(block_on(shared.acquire("held-elsewhere", wait(10_000)))));
    eventually("the waiter is in progress", || redis_counts(&backend(&a)).waiting == 1);
    block_on(a.close());
    assert_eq!(waiter.join().unwrap(), ErrorCode::Closed);
    let locks: Vec<String> = server.keys().into_iter().filter(|k| k.starts_with("test:lock:")).collect();
    assert_eq!(locks.len(), 1, "only the other provider's lock is left: {locks:?}");
    for lease in &leases {
        assert!(!lease.is_valid());
        assert!(!block_on(lease.release()).unwrap(), "close already released it");
    }
    assert_eq!(a.backend("shared").err().map(|e| e.code()), Some(ErrorCode::Closed));
    assert!(records.lock().unwrap().iter().all(|r| !r.code.starts_with("CLEANUP")));
    // The waiter's mark went with it: left behind, it would refuse every
    // other process's try of the key until it expired, waitTimeoutMs later.
    let marks = waiting_marks(&server);
    assert!(marks.is_empty(), "close took the waiter's mark back: {marks:?}");
    block_on(other.release()).unwrap();
    block_on(backend(&holder).acquire("held-elsewhere", wait(0))).expect("no mark of the closed waiter refuses a try");
}

/// Close takes back the marks of the acquires it stops before it shuts the
/// connection down, every time (the mark is given back in the background,
/// which close once did not wait for).
#[test]
fn close_takes_back_the_marks_of_the_waiters_it_stops() {
    let server = RedisServer::start();
    let (holder, _) = open_redis(&server.url(), &[("leaseMs", "30000")], &[]);
    for round in 0..20 {
        let key = format!("k{round}");
        let (a, _) = open_redis(&server.url(), &[("leaseMs", "30000")], &[]);
        let held = block_on(backend(&holder).acquire(&key, wait(0))).unwrap();
        let waiting = backend(&a);
        let waiter = thread::spawn(move || code(block_on(waiting.acquire(&key, wait(60_000)))));
        eventually("the waiter left its mark", || server.keys().iter().any(|k| k.starts_with("test:lock-waiting:")));
        block_on(a.close());
        assert_eq!(waiter.join().unwrap(), ErrorCode::Closed);
        let marks = waiting_marks(&server);
        assert!(marks.is_empty(), "round {round}: close took the waiter's mark back: {marks:?}");
        block_on(held.release()).unwrap();
    }
}

#[test]
fn scripts_are_reloaded_after_script_flush() {
    let server = RedisServer::start();
    let (a, _) = open_redis(&server.url(), &[("leaseMs", "10000")], &[]);
    block_on(async {
        let lease = backend(&a).acquire("k", wait(0)).await.unwrap();
        let _: () = redis::cmd("SCRIPT").arg("FLUSH").query(&mut server.client()).unwrap();
        assert!(lease.renew().await.unwrap());
        assert!(lease.release().await.unwrap());
        let _: () = redis::cmd("SCRIPT").arg("FLUSH").query(&mut server.client()).unwrap();
        let again = backend(&a).acquire("k", wait(0)).await.unwrap();
        assert!(again.fence() > lease.fence());
        assert!(again.release().await.unwrap());
    });
}

#[test]
fn an_aborted_or_dropped_acquire_leaves_nothing_behind() {
    let server = RedisServer::start();
    let (a, _) = open_redis(&server.url(), &[("leaseMs", "10000")], &[]);
    let (b, _) = open_redis(&server.url(), &[("leaseMs", "10000")], &[]);
    let held = block_on(backend(&a).acquire("k", wait(0))).unwrap();

    let controller = AbortController::new();
    let options =
        AcquireOptions { wait_timeout: Some(Duration::from_secs(10)), signal: Some(controller.signal()), ..AcquireOptions::default() };
    let waiter_backend = backend(&b);
    let waiter = thread::spawn(move || code(block_on(waiter_backend.acquire("k", options))));
    eventually("b waits", || redis_counts(&backend(&b)).waiting == 1);
    controller.abort();
    assert_eq!(waiter.join().unwrap(), ErrorCode::Aborted);
    let aborted_already = AcquireOptions { wait_timeout: None, signal: Some(controller.signal()), ..AcquireOptions::default() };
    assert_eq!(code(block_on(backend(&b).acquire("free", aborted_already))), ErrorCode::Aborted);

    // Dropping a pending acquire cancels it, even if the key frees meanwhile.
    {
        let waiting_backend = backend(&b);
        let mut pending = Box::pin(waiting_backend.acquire("k", wait(10_000)));
        let waker = futures::task::noop_waker();
        assert!(pending.as_mut().poll(&mut std::task::Context::from_waker(&waker)).is_pending());
        eventually("b waits", || redis_counts(&backend(&b)).waiting == 1);
    }
    eventually("the dropped acquire is gone", || redis_counts(&backend(&b)).waiting == 0);
    assert!(block_on(held.release()).unwrap());
    let next = block_on(backend(&a).acquire("k", wait(0))).expect("nothing leaked");
    block_on(next.release()).unwrap();
    assert_eq!(redis_counts(&backend(&b)).held, 0);
}

#[tokio::test(flavor = "current_thread")]
async fn works_when_awaited_from_the_callers_own_tokio_runtime() {
    let server = RedisServer::start();
    let (a, _) = open_redis(&server.url(), &[("leaseMs", "10000")], &[]);
    let lease = backend(&a).acquire("k", wait(0)).await.unwrap();
    assert!(lease.renew().await.unwrap());
    assert!(lease.release().await.unwrap());
    a.close().await;
    drop(a); // the driver's runtime shuts down without blocking this one
}

#[test]
fn counts_report_held_waiting_and_connection_state() {
    let server = RedisServer::start();
    let (a, _) = open_redis(&server.url(), &[("leaseMs", "10000")], &[]);
    let shared = backend(&a);
    eventually("connected and subscribed", || {
        let counts = redis_counts(&shared);
        counts.subscribed && counts.connected
    });
    let lease = block_on(shared.acquire("k", wait(0))).unwrap();
    let counts = redis_counts(&shared);
    assert_eq!((counts.held, counts.waiting, counts.acquired, counts.last_error), (1, 0, 1, None));
    let status = &a.status()["shared"];
    assert_eq!((status.driver, status.held, status.acquired), ("redis", 1, 1));
    let redis = status.redis.as_ref().unwrap();
    assert!(redis.connected && redis.subscribed && redis.last_probe.is_some());
    block_on(lease.release()).unwrap();
    assert_eq!(redis_counts(&shared).held, 0);
}

#[test]
fn a_server_that_may_evict_locks_is_reported_at_start() {
    let risky = RedisServer::start_with(&["--maxmemory-policy", "volatile-lru"]);
    let (_a, records) = open_redis(&risky.url(), &[("leaseMs", "10000")], &[]);
    eventually("the eviction warning", || {
        records.lock().unwrap().iter().any(|r| r.code == "REDIS_EVICTION_POLICY" && r.backend == "shared")
    });

    let safe = RedisServer::start();
    let (b, records) = open_redis(&safe.url(), &[("leaseMs", "10000")], &[]);
    eventually("connected", || redis_counts(&backend(&b)).connected);
    thread::sleep(Duration::from_millis(50));
    assert!(records.lock().unwrap().iter().all(|r| r.code != "REDIS_EVICTION_POLICY"));
}

#[test]
fn an_uncontended_acquire_and_release_cost_one_script_call_each_and_publish_nothing() {
    let server = RedisServer::start();
    let (a, _) = open_redis(&server.url(), &[("leaseMs", "10000")], &[]);
    let shared = backend(&a);
    block_on(async {
        // Warm up: connect, load the scripts.
        shared.acquire("k", wait(0)).await.unwrap().release().await.unwrap();
        eventually("subscribed", || redis_counts(&shared).subscribed);
        let _: () = redis::cmd("CONFIG").arg("RESETSTAT").query(&mut server.client()).unwrap();
        for _ in 0..10 {
            let lease = shared.acquire("k", wait(0)).await.unwrap();
            assert!(lease.release().await.unwrap());
        }
    });
    // The scripts' inner commands are counted too; only EVALSHA is sent by
    // the client (besides this test's own CONFIG and INFO), and with nobody
    // waiting a release publishes nothing (no PUBLISH among the inner calls).
    let sent: Vec<(String, u64)> = server
        .command_calls()
        .into_iter()
        .filter(|(name, _)| {
            !["get", "exists", "time", "set", "getset", "incr", "pttl", "del", "config|resetstat", "info"].contains(&name.as_str())
        })
        .collect();
    assert_eq!(sent, vec![("evalsha".to_owned(), 20)]);
}

#[test]
fn rediss_urls_connect_over_tls() {
    let dir = std::env::temp_dir().join(format!("dokebi-lock-tls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    let made = std::process::Command::new("openssl")
        .args(["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost", "-keyout"])
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(made.success());
    let tls_port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port().to_string();
    let (cert, key) = (cert.to_str().unwrap(), key.to_str().unwrap());
    let server = RedisServer::start_with(&[
        "--tls-port",
        &tls_port,
        "--tls-cert-file",
        cert,
        "--tls-key-file",
        key,
        "--tls-ca-cert-file",
        cert,
        "--tls-auth-clients",
        "no",
    ]);
    // A self-signed certificate: `#insecure` skips its verification.
    let (a, _) = open_redis(&format!("rediss://127.0.0.1:{tls_port}/#insecure"), &[("leaseMs", "10000")], &[]);
    let lease = block_on(backend(&a).acquire("k", wait(0))).unwrap();
    assert_eq!(server.keys().iter().filter(|k| k.starts_with("test:lock:")).count(), 1);
    assert!(block_on(lease.release()).unwrap());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn credentials_come_from_the_url_and_a_refusal_is_provider_failed() {
    let server = RedisServer::start_with(&["--requirepass", "s3cret-pw"]);
    let with = format!("redis://:s3cret-pw@127.0.0.1:{}/0", server.port());
    let (a, _) = open_redis(&with, &[("leaseMs", "10000")], &[]);
    let lease = block_on(backend(&a).acquire("k", wait(0))).expect("authenticated through the URL");
    assert!(block_on(lease.release()).unwrap());

    for url in [format!("redis://127.0.0.1:{}/0", server.port()), format!("redis://:wrong-pw@127.0.0.1:{}/0", server.port())] {
        let (b, _) = open_redis(&url, &[("leaseMs", "10000")], &[]);
        let err = block_on(backend(&b).acquire("k", wait(0))).unwrap_err();
        assert_eq!(err.code(), ErrorCode::ProviderFailed);
        let cause = err.cause().expect("the Redis error is the cause").to_string();
        assert!(!format!("{err:?} {cause}").contains("pw"), "no password in the error: {err:?}");
    }
}

#[test]
fn unix_socket_urls_work() {
    let socket = std::env::temp_dir().join(format!("dokebi-lock-{}.sock", std::process::id()));
    let server = RedisServer::start_with(&["--unixsocket", socket.to_str().unwrap(), "--unixsocketperm", "700"]);
    let (a, _) = open_redis(&format!("unix://{}", socket.display()), &[("leaseMs", "10000")], &[]);
    let lease = block_on(backend(&a).acquire("k", wait(0))).unwrap();
    assert_eq!(server.keys().iter().filter(|k| k.starts_with("test:lock:")).count(), 1);
    assert!(block_on(lease.release()).unwrap());
}

/// Hooks whose telemetry keeps every event, and the events.
fn recording_events() -> (dokebi_lock::Hooks, Arc<Mutex<Vec<dokebi_lock::telemetry::TelemetryEvent>>>) {
    let events = Arc::new(Mutex::new(Vec::new()));
    let sink = events.clone();
    let hooks = dokebi_lock::Hooks {
        logger: support::recording_logger().0,
        telemetry: Some(Arc::new(move |event: &dokebi_lock::telemetry::TelemetryEvent| sink.lock().unwrap().push(event.clone()))),
        host: None,
        extra_authorities: None,
    };
    (hooks, events)
}

#[test]
fn telemetry_reports_wait_timeouts_lost_leases_and_the_connection_coming_up() {
    use dokebi_lock::telemetry::TelemetryEvent;
    let server = RedisServer::start();
    let (hooks, events) = recording_events();
    let yaml = support::redis_yaml(&server.url(), "        leaseMs: 100\n        slowAcquireMs: 0\n", "        commandTimeoutMs: 90\n");
    let a = Provider::open_with(dokebi_lock::Options::from_yaml(&yaml).unwrap(), hooks).unwrap();
    block_on(async {
        let lease = backend(&a).acquire("k", wait(0)).await.unwrap();
        assert_eq!(code(backend(&a).acquire("k", wait(20)).await), ErrorCode::WaitTimeout);
        thread::sleep(Duration::from_millis(150));
        let _taken = backend(&a).acquire("k", wait(0)).await.unwrap();
        assert_eq!(code(lease.release().await), ErrorCode::LeaseLost);
    });
    let events = events.lock().unwrap();
    assert!(events.iter().any(|e| matches!(e, TelemetryEvent::Connection { connection, up: true } if connection == "main")));
    assert!(events.iter().any(|e| matches!(e, TelemetryEvent::WaitTimeout { backend, .. } if backend == "shared")));
    assert!(events.iter().any(|e| matches!(e, TelemetryEvent::SlowAcquire { outcome: Some(ErrorCode::WaitTimeout), .. })));
    assert!(events.iter().any(|e| matches!(e, TelemetryEvent::LeaseLost { code: ErrorCode::LeaseLost, .. })));
    let status = &a.status()["shared"];
    assert_eq!((status.acquired, status.timed_out, status.lost), (2, 1, 1));
}

#[test]
fn telemetry_reports_a_forced_release_with_the_holders_removed_and_the_raised_fence_never_the_key() {
    use dokebi_lock::telemetry::TelemetryEvent;
    let server = RedisServer::start();
    let (hooks, events) = recording_events();
    let yaml = support::redis_yaml(&server.url(), "        leaseMs: 10000\n", "");
    let a = Provider::open_with(dokebi_lock::Options::from_yaml(&yaml).unwrap(), hooks).unwrap();
    block_on(async {
        let lease = backend(&a).acquire("secret-k", wait(0)).await.unwrap();
        let forced = backend(&a).force_release("secret-k").await.unwrap();
        assert!(forced.fence > Some(lease.fence()), "{forced:?}");
        let reported: Vec<_> = events.lock().unwrap().iter().filter(|e| e.name() == "forced-release").cloned().collect();
        assert_eq!(reported, [TelemetryEvent::ForcedRelease { backend: "shared".to_owned(), removed: 1, fence: forced.fence }]);
        assert_eq!(code(lease.release().await), ErrorCode::LeaseLost);
    });
    assert!(!format!("{:?}", events.lock().unwrap()).contains("secret"), "events never carry keys");
}

#[test]
fn dropping_a_lease_releases_it_in_the_background() {
    let server = RedisServer::start();
    let (a, _) = open_redis(&server.url(), &[("leaseMs", "60000")], &[]);
    let lease = block_on(backend(&a).acquire("k", wait(0))).unwrap();
    assert_eq!(redis_counts(&backend(&a)).held, 1);
    drop(lease);
    assert_eq!(redis_counts(&backend(&a)).held, 0);
    eventually("the lock is deleted", || server.keys().iter().all(|k| !k.starts_with("test:lock:")));
    block_on(backend(&a).acquire("k", wait(0))).expect("free again");
}

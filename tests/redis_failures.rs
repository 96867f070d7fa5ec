//! The redis driver when the server fails: paused, killed, restarted (with
//! and without data), its pub/sub connections killed.

#[path = "faults/silent.rs"]
mod silent;
mod support;

use std::thread;
use std::time::{Duration, Instant};

use dokebi_lock::{AcquireOptions, ErrorCode, LockError};
use futures::executor::block_on;
use silent::Silent;
use support::redis_server::RedisServer;
use support::{backend, eventually, open_redis, redis_counts, wait};

fn error<T: std::fmt::Debug>(result: Result<T, LockError>) -> LockError {
    result.expect_err("expected an error")
}

fn lock_keys(server: &RedisServer) -> Vec<String> {
    server.keys().into_iter().filter(|k| k.starts_with("test:lock:")).collect()
}

#[test]
fn an_unanswered_command_is_outcome_unknown_and_the_lock_is_cleaned_up() {
    let server = RedisServer::start();
    let (a, _) = open_redis(&server.url(), &[("leaseMs", "30000")], &[("commandTimeoutMs", "300"), ("connectTimeoutMs", "300")]);
    let held = block_on(backend(&a).acquire("renewed", wait(0))).unwrap();
    server.pause();
    // Both commands are sent on the open connection and go unanswered.
    // (Once the connection is given up, a later command would find the
    // server unreachable instead: PROVIDER_FAILED.)
    let shared = backend(&a);
    let (lost, renew) = block_on(async { futures::join!(shared.acquire("k", wait(5_000)), held.renew()) });
    let lost = error(lost);
    assert_eq!(lost.code(), ErrorCode::OutcomeUnknown);
    assert!(lost.cause().is_some());
    assert_eq!(error(renew).code(), ErrorCode::OutcomeUnknown);
    assert!(!held.is_valid(), "a lease whose renew went unanswered is invalid");
    server.resume();
    // The queued commands run when the server wakes up; the best-effort
    // releases by token then remove both locks.
    eventually("both locks are released by token", || lock_keys(&server).is_empty());
    let again = block_on(backend(&a).acquire("k", wait(0))).expect("the connection recovers");
    block_on(again.release()).unwrap();
}

#[test]
fn a_dead_server_fails_acquires_with_provider_failed_not_a_wait_timeout() {
    let mut server = RedisServer::start();
    let (a, _) = open_redis(&server.url(), &[("leaseMs", "30000"), ("waitTimeoutMs", "20000")], &[]);
    let (b, _) = open_redis(&server.url(), &[("leaseMs", "30000"), ("waitTimeoutMs", "20000")], &[]);
    let _held = block_on(backend(&a).acquire("k", wait(0))).unwrap();
    let waiting = backend(&b);
    let waiter = thread::spawn(move || {
        let started = Instant::now();
        (error(block_on(waiting.acquire("k", AcquireOptions::default()))), started.elapsed())
    });
    eventually("b waits", || redis_counts(&backend(&b)).waiting == 1);
    server.stop();
    let (err, waited) = waiter.join().unwrap();
    // The waiter may have sent its next try on the connection the server's
    // death was closing (its subscription dropped at the same moment and
    // woke it): that try may have run, so OUTCOME_UNKNOWN is as right.
    assert!(matches!(err.code(), ErrorCode::ProviderFailed | ErrorCode::OutcomeUnknown), "{err}");
    assert!(waited < Duration::from_secs(20), "failed before its wait timeout");
    // An idle connection whose server died reconnects before it sends: the
    // command surely did not run, so this is PROVIDER_FAILED.
    let fresh = error(block_on(backend(&a).acquire("other", AcquireOptions::default())));
    assert_eq!(fresh.code(), ErrorCode::ProviderFailed);
    assert!(fresh.cause().is_some(), "the Redis error is the cause");
    assert_eq!(redis_counts(&backend(&a)).last_error, Some(ErrorCode::ProviderFailed));
}

#[test]
fn an_unreachable_server_at_start_is_provider_failed_on_acquire() {
    let mut server = RedisServer::start();
    server.stop();
    let (a, _) = open_redis(&server.url(), &[("leaseMs", "30000")], &[]);
    assert_eq!(error(block_on(backend(&a).acquire("k", wait(20_000)))).code(), ErrorCode::ProviderFailed);
}

#[test]
fn a_restarted_server_is_used_again_without_a_new_provider_and_fences_keep_growing() {
    let mut server = RedisServer::start();
    let (a, records) = open_redis(&server.url(), &[("leaseMs", "30000")], &[]);
    let before = block_on(backend(&a).acquire("k", wait(0))).unwrap();
    let fence_before = before.fence();
    server.stop();
    server.restart(); // empty: the fence counter is gone
    assert!(lock_keys(&server).is_empty());
    let after = block_on(backend(&a).acquire("k", wait(0))).expect("recovers on the same provider");
    assert!(after.fence() > fence_before, "fences never go backwards, even after an empty restart");
    // The old lease vanished with the server's data.
    assert_eq!(error(block_on(before.release())).code(), ErrorCode::LeaseLost);
    assert!(block_on(after.release()).unwrap());
    eventually("notifications are live again", || redis_counts(&backend(&a)).subscribed);
    drop(records);
}

#[test]
fn waiters_still_get_the_lock_when_the_pubsub_connection_is_killed() {
    let server = RedisServer::start();
    // Notifications are the only fast path; the poll while they are down is 20 ms.
    let slow_when_live = [("leaseMs", "60000"), ("pollIntervalMs", "20"), ("notifyPollIntervalMs", "600000"), ("waitTimeoutMs", "10000")];
    let (a, _) = open_redis(&server.url(), &slow_when_live, &[]);
    let (b, _) = open_redis(&server.url(), &slow_when_live, &[]);
    eventually("b subscribed", || redis_counts(&backend(&b)).subscribed);
    let held = block_on(backend(&a).acquire("k", wait(0))).unwrap();
    let waiting = backend(&b);
    let waiter = thread::spawn(move || block_on(waiting.acquire("k", AcquireOptions::default())));
    eventually("b waits", || redis_counts(&backend(&b)).waiting == 1);
    let killed: i64 = redis::cmd("CLIENT").arg("KILL").arg("TYPE").arg("pubsub").query(&mut server.client()).unwrap();
    assert!(killed >= 2, "both providers' subscriptions were killed");
    assert!(block_on(held.release()).unwrap());
    let lease = waiter.join().unwrap().expect("the waiter got the lock without a notification");
    assert!(lease.fence() > held.fence());
    block_on(lease.release()).unwrap();
    eventually("b resubscribed", || redis_counts(&backend(&b)).subscribed);
}

#[test]
fn close_logs_cleanup_failures_instead_of_failing() {
    let mut server = RedisServer::start();
    let (a, records) = open_redis(&server.url(), &[("leaseMs", "30000"), ("shutdownTimeoutMs", "1000")], &[]);
    let lease = block_on(backend(&a).acquire("k", wait(0))).unwrap();
    server.stop();
    block_on(a.close());
    assert!(!lease.is_valid());
    let records = records.lock().unwrap();
    assert!(records.iter().any(|r| r.code == "CLEANUP_FAILED" && r.backend == "shared"), "{records:?}");
}

#[test]
fn close_gives_up_after_the_shutdown_timeout_and_logs_it() {
    let server = RedisServer::start();
    let (a, records) = open_redis(&server.url(), &[("leaseMs", "30000"), ("shutdownTimeoutMs", "100")], &[("commandTimeoutMs", "5000")]);
    let _lease = block_on(backend(&a).acquire("k", wait(0))).unwrap();
    server.pause();
    block_on(a.close());
    server.resume();
    let records = records.lock().unwrap();
    assert!(records.iter().any(|r| r.code == "CLEANUP_TIMEOUT"), "{records:?}");
}

#[test]
fn a_server_that_never_answers_the_connect_is_provider_failed_within_the_connect_timeout() {
    // A listener that accepts nothing: connects hang in the backlog or the handshake.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("redis://127.0.0.1:{}/0", silent.local_addr().unwrap().port());
    let opened = Instant::now();
    let (a, _) = open_redis(&url, &[("leaseMs", "30000"), ("waitTimeoutMs", "30000")], &[("connectTimeoutMs", "200")]);
    assert!(opened.elapsed() < Duration::from_secs(5), "opening never waits for Redis");
    // The acquire may wait 30 s for the key, but not for the connection:
    // it fails once the connect has not completed within 200 ms (the
    // bound leaves room for a loaded machine, and is far below the wait).
    let asked = Instant::now();
    let err = error(block_on(backend(&a).acquire("k", AcquireOptions::default())));
    let took = asked.elapsed();
    assert_eq!(err.code(), ErrorCode::ProviderFailed);
    assert!(err.cause().is_some());
    assert!(took < Duration::from_millis(2000), "the acquire failed only after {took:?}, not within the 200 ms connect timeout");
    eprintln!("a silent server: the acquire failed PROVIDER_FAILED after {} ms (connectTimeoutMs 200)", took.as_millis());
}

/// A command whose connection drops while its answer is awaited is sent
/// again on a new connection (see `src/redis/transport/connection.rs`);
/// reconnects, retries and the checks of a new connection included, it
/// ends within `connectTimeoutMs + commandTimeoutMs` of its start. The
/// server pauses writes (`CLIENT PAUSE … WRITE`: a script waits, `INFO`
/// and a new connection are served), and the connection is killed 1.5 s
/// into the script's wait: the retry had a whole `commandTimeoutMs` of its
/// own, so the acquire ended about 3.5 s after it started, past the 2.2 s
/// bound.
#[test]
fn a_command_with_its_retries_ends_within_the_connect_and_command_timeouts() {
    let server = RedisServer::start();
    let (a, _) = open_redis(&server.url(), &[("leaseMs", "30000")], &[("commandTimeoutMs", "2000"), ("connectTimeoutMs", "200")]);
    block_on(block_on(backend(&a).acquire("warm", wait(0))).unwrap().release()).unwrap();
    let mut admin = server.client();
    let _: () = redis::cmd("CLIENT").arg("PAUSE").arg(30_000).arg("WRITE").query(&mut admin).unwrap();
    let started = Instant::now();
    let acquiring = {
        let backend = backend(&a);
        thread::spawn(move || block_on(backend.acquire("k", wait(0))).map(|_| ()))
    };
    thread::sleep(Duration::from_millis(1_500));
    let killed: i64 = redis::cmd("CLIENT").arg("KILL").arg("TYPE").arg("normal").arg("SKIPME").arg("yes").query(&mut admin).unwrap();
    assert!(killed >= 1, "the driver's command connection was killed");
    let outcome = acquiring.join().unwrap();
    let took = started.elapsed();
    let _: () = redis::cmd("CLIENT").arg("UNPAUSE").query(&mut admin).unwrap();
    assert_eq!(error(outcome).code(), ErrorCode::OutcomeUnknown, "the first attempt may have run");
    assert!(
        took < Duration::from_millis(2_200 + 400),
        "the command ended after {took:?}, past connectTimeoutMs + commandTimeoutMs (2.2 s)"
    );
    eprintln!("a command retried after its connection dropped ended after {} ms (bound 2200 ms)", took.as_millis());
    block_on(a.close());
}

/// An acquire stops waiting for a connect when its wait ends
/// (`PROVIDER_FAILED`: Redis could not be reached, nothing was done), when
/// its signal aborts (`ABORTED`) and at `close()` (`CLOSED`), as the
/// postgres driver's: it waited the whole `connectTimeoutMs`.
#[test]
fn a_wait_abort_or_close_ends_an_acquire_while_it_connects() {
    use dokebi_lock::AbortController;
    let silent = Silent::start();
    let url = format!("redis://127.0.0.1:{}/0", silent.port());
    let (a, _) = open_redis(&url, &[("leaseMs", "30000")], &[("connectTimeoutMs", "20000")]);
    let started = Instant::now();
    let err = error(block_on(backend(&a).acquire("k", wait(300))));
    let took = started.elapsed();
    assert_eq!(err.code(), ErrorCode::ProviderFailed, "{err}");
    assert!(err.message().contains("waitTimeoutMs"), "{err}");
    assert!(took < Duration::from_millis(2_000), "the acquire ended after {took:?} (waitTimeoutMs 300)");

    let controller = AbortController::new();
    let options = AcquireOptions { signal: Some(controller.signal()), ..wait(60_000) };
    let acquiring = {
        let backend = backend(&a);
        thread::spawn(move || block_on(backend.acquire("k", options)).map(|_| ()))
    };
    thread::sleep(Duration::from_millis(300));
    let aborted = Instant::now();
    controller.abort();
    assert_eq!(error(acquiring.join().unwrap()).code(), ErrorCode::Aborted);
    assert!(aborted.elapsed() < Duration::from_millis(1_000), "ended {:?} after the abort", aborted.elapsed());

    let acquiring = {
        let backend = backend(&a);
        thread::spawn(move || block_on(backend.acquire("k", wait(60_000))).map(|_| ()))
    };
    thread::sleep(Duration::from_millis(300));
    let closed = Instant::now();
    block_on(a.close());
    assert_eq!(error(acquiring.join().unwrap()).code(), ErrorCode::Closed);
    assert!(closed.elapsed() < Duration::from_millis(1_000), "ended {:?} after close()", closed.elapsed());
}

//! What the Sentinel and Cluster tests share: one backend per provider,
//! short bounds during failovers, lock key names, a hand-off between two
//! providers timed from the release, and acquires tried through a failover.

use std::thread;
use std::time::{Duration, Instant};

use dokebi_lock::{AcquireOptions, Backend, ErrorCode, Lease, LockError, Provider};
use futures::executor::block_on;

use super::{eventually, redis_counts, wait};

/// Short connect and command bounds, so each try during a failover ends
/// soon; `leaseMs` must stay above `commandTimeoutMs`.
pub const CONNECTION: &[(&str, &str)] = &[("connectTimeoutMs", "500"), ("commandTimeoutMs", "1000")];

pub fn backend(provider: &Provider) -> Backend {
    provider.backend("shared").unwrap()
}

pub fn code<T: std::fmt::Debug>(result: Result<T, LockError>) -> ErrorCode {
    result.expect_err("expected an error").code()
}

/// The Redis name of a user key's lock in the tests' namespace.
pub fn lock_key(key: &str) -> String {
    super::names::lock_key("test", key)
}

/// Polls that never fire within a test: a waiter is served within 2 s only
/// when a release notification wakes it.
pub const SLOW_POLLS: [(&str, &str); 4] =
    [("leaseMs", "30000"), ("pollIntervalMs", "10000"), ("notifyPollIntervalMs", "10000"), ("waitTimeoutMs", "15000")];

/// `holder` takes `key`, a waiter of `other` queues for it, `holder`
/// releases: how long from the release until the waiter was granted (with
/// a fence above the holder's).
pub fn hand_off(holder: &Provider, other: &Provider, key: &str) -> Duration {
    let waiter_backend = backend(other);
    eventually("the waiter's provider subscribed", || redis_counts(&waiter_backend).subscribed);
    let held = block_on(backend(holder).acquire(key, wait(0))).unwrap();
    let waiting = waiter_backend.clone();
    let owned_key = key.to_owned();
    let waiter = thread::spawn(move || {
        let lease = block_on(waiting.acquire(&owned_key, AcquireOptions::default()));
        (lease, Instant::now())
    });
    eventually("the other provider waits", || redis_counts(&waiter_backend).waiting == 1);
    thread::sleep(Duration::from_millis(100)); // its first try saw the key held
    let released_at = Instant::now();
    assert!(block_on(held.release()).unwrap());
    let (lease, granted_at) = waiter.join().unwrap();
    let lease = lease.expect("handed off");
    assert!(lease.fence() > held.fence());
    assert!(block_on(lease.release()).unwrap());
    granted_at - released_at
}

/// Tries `key` once at a time until `done` accepts the outcome, for at most
/// `bound` since `since`; every failure meanwhile must say Redis failed
/// (`PROVIDER_FAILED`) or may have run the command (`OUTCOME_UNKNOWN`), and
/// any other outcome `done` refuses fails the test. Returns what `done`
/// accepted, how long it took since `since`, and the failures seen.
pub fn try_through_failover<T>(
    backend: &Backend,
    key: &str,
    since: Instant,
    bound: Duration,
    mut done: impl FnMut(Result<Lease, LockError>) -> Option<T>,
) -> (T, Duration, Vec<ErrorCode>) {
    let mut failures = Vec::new();
    loop {
        match block_on(backend.acquire(key, wait(0))) {
            Err(err) if matches!(err.code(), ErrorCode::ProviderFailed | ErrorCode::OutcomeUnknown) => failures.push(err.code()),
            outcome => {
                let answer = format!("{:?}", outcome.as_ref().map(|lease| lease.fence()).map_err(|err| err.code()));
                match done(outcome) {
                    Some(value) => return (value, since.elapsed(), failures),
                    None => panic!("an acquire during the failover gave an unexpected answer: {answer}"),
                }
            }
        }
        assert!(since.elapsed() < bound, "acquires did not work again within {bound:?} (failures: {failures:?})");
        thread::sleep(Duration::from_millis(50));
    }
}

/// "n × CODE" for each failure code seen.
pub fn tally(failures: &[ErrorCode]) -> String {
    let mut counts = std::collections::BTreeMap::new();
    for code in failures {
        *counts.entry(format!("{code:?}")).or_insert(0) += 1;
    }
    counts.iter().map(|(code, n)| format!("{n} × {code}")).collect::<Vec<_>>().join(", ")
}

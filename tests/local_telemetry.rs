//! Telemetry and status of local backends: events on their own channel with
//! durations and codes (never keys), and counts that follow what happened.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use dokebi_lock::telemetry::TelemetryEvent;
use dokebi_lock::{AcquireOptions, ErrorCode, Hooks, Options, Provider};
use futures::executor::block_on;

const YAML: &str = "
schemaVersion: 1
options:
  dokebi-lock:
    backends:
      watched:
        slowAcquireMs: 20
        slowHoldMs: 30
      quiet:
        slowAcquireMs: null
        slowHoldMs: null
";

fn provider() -> (Provider, Arc<Mutex<Vec<TelemetryEvent>>>) {
    let events = Arc::new(Mutex::new(Vec::new()));
    let sink = events.clone();
    let hooks =
        Hooks { telemetry: Some(Arc::new(move |event: &TelemetryEvent| sink.lock().unwrap().push(event.clone()))), ..Hooks::default() };
    (Provider::open_with(Options::from_yaml(YAML).unwrap(), hooks).unwrap(), events)
}

fn wait(ms: u64) -> AcquireOptions {
    AcquireOptions { wait_timeout: Some(Duration::from_millis(ms)), signal: None, ..AcquireOptions::default() }
}

#[test]
fn a_wait_timeout_is_reported_as_a_timeout_and_a_slow_acquire() {
    let (provider, events) = provider();
    let watched = provider.backend("watched").unwrap();
    let _held = block_on(watched.acquire("secret-key", wait(0))).unwrap();
    let err = block_on(watched.acquire("secret-key", wait(40))).unwrap_err();
    assert_eq!(err.code(), ErrorCode::WaitTimeout);
    let events = events.lock().unwrap();
    assert!(
        matches!(&events[0], TelemetryEvent::WaitTimeout { backend, waited } if backend == "watched" && *waited >= Duration::from_millis(40))
    );
    assert!(
        matches!(&events[1], TelemetryEvent::SlowAcquire { outcome: Some(ErrorCode::WaitTimeout), threshold, .. } if *threshold == Duration::from_millis(20))
    );
    assert!(!format!("{events:?}").contains("secret-key"), "events never carry keys");
    assert_eq!(events[0].name(), "wait-timeout");
}

#[test]
fn a_slow_acquire_that_succeeds_and_a_slow_hold_are_reported() {
    let (provider, events) = provider();
    let watched = provider.backend("watched").unwrap();
    let held = block_on(watched.acquire("k", wait(0))).unwrap();
    let waiter = {
        let watched = watched.clone();
        std::thread::spawn(move || block_on(watched.acquire("k", wait(5_000))).map(|lease| block_on(lease.release())))
    };
    std::thread::sleep(Duration::from_millis(40));
    assert!(block_on(held.release()).unwrap());
    assert!(waiter.join().unwrap().unwrap().unwrap());
    let events = events.lock().unwrap();
    // The releaser reports the hold while the woken waiter reports its wait:
    // the two events race, so compare them as a set.
    let mut names: Vec<_> = events.iter().map(TelemetryEvent::name).collect();
    names.sort_unstable();
    assert_eq!(names, ["slow-acquire", "slow-hold"], "{events:?}");
    assert!(events.iter().any(|e| matches!(e, TelemetryEvent::SlowAcquire { outcome: None, .. })));
}

#[test]
fn null_thresholds_disable_the_reports() {
    let (provider, events) = provider();
    let quiet = provider.backend("quiet").unwrap();
    let held = block_on(quiet.acquire("k", wait(0))).unwrap();
    assert_eq!(block_on(quiet.acquire("k", wait(40))).unwrap_err().code(), ErrorCode::WaitTimeout);
    std::thread::sleep(Duration::from_millis(40));
    block_on(held.release()).unwrap();
    let names: Vec<_> = events.lock().unwrap().iter().map(TelemetryEvent::name).collect();
    assert_eq!(names, ["wait-timeout"], "the timeout is always reported; slow reports are off");
}

#[test]
fn status_counts_held_waiting_acquired_and_timed_out() {
    let (provider, _) = provider();
    let quiet = provider.backend("quiet").unwrap();
    let a = block_on(quiet.acquire("a", wait(0))).unwrap();
    let _b = block_on(quiet.acquire("b", wait(0))).unwrap();
    assert_eq!(block_on(quiet.acquire("a", wait(10))).unwrap_err().code(), ErrorCode::WaitTimeout);
    block_on(a.release()).unwrap();
    let status = &provider.status()["quiet"];
    assert_eq!((status.driver, status.held, status.waiting, status.acquired, status.timed_out, status.lost), ("local", 1, 0, 2, 1, 0));
    assert!(status.redis.is_none());
    assert_eq!(provider.status()["watched"].acquired, 0);
}

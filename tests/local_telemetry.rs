//! Telemetry and status of local backends: events on their own channel with
//! durations and codes (never keys), forced releases, the trace events of every acquire and
//! hold for a sink that asks for them, and counts that follow what happened.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use dokebi_lock::telemetry::{Interest, TelemetryEvent, TelemetrySink, TraceEvent};
use dokebi_lock::{AcquireOptions, ErrorCode, Hooks, LockMode, Options, Provider};
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
        matches!(&events[0], TelemetryEvent::WaitTimeout { backend, waited, .. } if backend == "watched" && *waited >= Duration::from_millis(40))
    );
    assert!(
        matches!(&events[1], TelemetryEvent::SlowAcquire { outcome: Some(ErrorCode::WaitTimeout), threshold, .. } if *threshold == Duration::from_millis(20))
    );
    // Both carry the error's details: who held the key (this process).
    for event in &events[..2] {
        let (TelemetryEvent::WaitTimeout { details, .. } | TelemetryEvent::SlowAcquire { details, .. }) = event else { unreachable!() };
        assert_eq!(details.as_ref(), err.details(), "{event:?}");
        let label = details.as_ref().unwrap()["holders"][0]["label"].as_str().unwrap().to_owned();
        assert!(label.ends_with(&format!(":{}", std::process::id())), "{label}");
    }
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
fn a_forced_release_is_reported_with_the_holders_it_removed_also_when_there_were_none() {
    let (provider, events) = provider();
    let quiet = provider.backend("quiet").unwrap();
    let shared = AcquireOptions { mode: LockMode::Shared, ..wait(0) };
    let readers = [block_on(quiet.acquire("secret-key", shared.clone())).unwrap(), block_on(quiet.acquire("secret-key", shared)).unwrap()];
    assert_eq!(block_on(quiet.force_release("secret-key")).unwrap().removed, 2);
    assert_eq!(block_on(quiet.force_release("secret-key")).unwrap().removed, 0);
    let forced = |removed| TelemetryEvent::ForcedRelease { backend: "quiet".to_owned(), removed, fence: None };
    assert_eq!(*events.lock().unwrap(), [forced(2), forced(0)]);
    assert_eq!(forced(0).name(), "forced-release");
    for reader in readers {
        assert!(!block_on(reader.release()).unwrap(), "removed already");
    }
    assert!(!format!("{:?}", events.lock().unwrap()).contains("secret-key"), "events never carry keys");
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

/// What a sink that asks for trace events saw, owned (the events borrow).
#[derive(Debug, PartialEq)]
enum Traced {
    Acquire {
        backend: String,
        driver: &'static str,
        mode: LockMode,
        limit: u32,
        weight: u32,
        keys: usize,
        waited: Duration,
        outcome: Option<ErrorCode>,
        fence: Option<u64>,
    },
    Hold {
        backend: String,
        driver: &'static str,
        fence: u64,
        held: Duration,
        outcome: Option<ErrorCode>,
    },
}

/// A sink of the trace events `interest` asks for, which records them
/// alongside the threshold events.
struct Tracer {
    interest: Interest,
    traced: Mutex<Vec<Traced>>,
    events: Mutex<Vec<TelemetryEvent>>,
}

impl TelemetrySink for Tracer {
    fn event(&self, event: &TelemetryEvent) {
        self.events.lock().unwrap().push(event.clone());
    }

    fn interest(&self) -> Interest {
        self.interest
    }

    fn trace(&self, event: &TraceEvent<'_>) {
        let traced = match *event {
            TraceEvent::Acquire { backend, driver, mode, limit, weight, key_count, waited, outcome, fence, .. } => {
                Traced::Acquire { backend: backend.to_owned(), driver, mode, limit, weight, keys: key_count, waited, outcome, fence }
            }
            TraceEvent::Hold { backend, driver, fence, held, outcome, .. } => {
                Traced::Hold { backend: backend.to_owned(), driver, fence, held, outcome }
            }
            _ => unreachable!("a kind of trace event this test does not know"),
        };
        self.traced.lock().unwrap().push(traced);
    }
}

fn traced_provider(interest: Interest) -> (Provider, Arc<Tracer>) {
    let tracer = Arc::new(Tracer { interest, traced: Mutex::default(), events: Mutex::default() });
    let hooks = Hooks { telemetry: Some(tracer.clone()), ..Hooks::default() };
    (Provider::open_with(Options::from_yaml(YAML).unwrap(), hooks).unwrap(), tracer)
}

#[test]
fn a_sink_that_asks_gets_every_acquire_and_hold_with_fences_and_outcomes() {
    let (provider, tracer) = traced_provider(Interest::ALL);
    let quiet = provider.backend("quiet").unwrap();
    let held = block_on(quiet.acquire("secret-key", wait(0))).unwrap();
    assert_eq!(block_on(quiet.acquire("secret-key", wait(30))).unwrap_err().code(), ErrorCode::WaitTimeout);
    let shared = AcquireOptions { mode: LockMode::Shared, ..wait(0) };
    assert_eq!(block_on(quiet.acquire("secret-key", shared)).unwrap_err().code(), ErrorCode::LockBusy);
    let fence = held.fence();
    assert!(block_on(held.release()).unwrap());
    let counted =
        block_on(quiet.acquire_many(&["secret-a", "secret-b"], AcquireOptions { limit: Some(4), weight: Some(3), ..wait(0) })).unwrap();
    let counted_fence = counted.fence();
    drop(counted);
    let invalid = AcquireOptions { limit: Some(1), weight: Some(2), ..wait(0) };
    assert_eq!(block_on(quiet.acquire("secret-key", invalid)).unwrap_err().code(), ErrorCode::InvalidArgument);

    let traced = tracer.traced.lock().unwrap();
    assert!(!format!("{traced:?}").contains("secret"), "trace events never carry keys");
    let acquire = |mode, limit, weight, keys, outcome, fence| Traced::Acquire {
        backend: "quiet".to_owned(),
        driver: "local",
        mode,
        limit,
        weight,
        keys,
        waited: Duration::ZERO,
        outcome,
        fence,
    };
    let hold = |fence| Traced::Hold { backend: "quiet".to_owned(), driver: "local", fence, held: Duration::ZERO, outcome: None };
    // Durations are checked apart from the rest.
    let timeless: Vec<Traced> = traced
        .iter()
        .map(|event| match event {
            Traced::Acquire { backend, driver, mode, limit, weight, keys, outcome, fence, .. } => Traced::Acquire {
                backend: backend.clone(),
                driver,
                mode: *mode,
                limit: *limit,
                weight: *weight,
                keys: *keys,
                waited: Duration::ZERO,
                outcome: *outcome,
                fence: *fence,
            },
            Traced::Hold { backend, driver, fence, outcome, .. } => {
                Traced::Hold { backend: backend.clone(), driver, fence: *fence, held: Duration::ZERO, outcome: *outcome }
            }
        })
        .collect();
    use LockMode::{Exclusive, Shared};
    assert_eq!(
        timeless,
        [
            acquire(Exclusive, 1, 1, 1, None, Some(fence)),
            acquire(Exclusive, 1, 1, 1, Some(ErrorCode::WaitTimeout), None),
            acquire(Shared, 1, 1, 1, Some(ErrorCode::LockBusy), None),
            hold(fence),
            acquire(Exclusive, 4, 3, 2, None, Some(counted_fence)),
            hold(counted_fence),
            acquire(Exclusive, 1, 2, 1, Some(ErrorCode::InvalidArgument), None),
        ]
    );
    assert!(matches!(traced[1], Traced::Acquire { waited, .. } if waited >= Duration::from_millis(30)));
    assert!(matches!(traced[3], Traced::Hold { held, .. } if held >= Duration::from_millis(30)));
    // The threshold events go on as before (`quiet` has none but the timeout).
    let names: Vec<_> = tracer.events.lock().unwrap().iter().map(TelemetryEvent::name).collect();
    assert_eq!(names, ["wait-timeout"]);
}

#[test]
fn a_sink_gets_only_the_trace_events_it_asks_for() {
    let (provider, tracer) = traced_provider(Interest { acquires: false, holds: true });
    let quiet = provider.backend("quiet").unwrap();
    let lease = block_on(quiet.acquire("k", wait(0))).unwrap();
    let fence = lease.fence();
    block_on(provider.close());
    // Closed under its holder: the hold ends with the release that finds it so.
    assert!(!block_on(lease.release()).unwrap());
    drop(lease);
    let traced = tracer.traced.lock().unwrap();
    assert!(matches!(&traced[..], [Traced::Hold { fence: f, outcome: Some(ErrorCode::Closed), .. }] if *f == fence), "{traced:?}");
}

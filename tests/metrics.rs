//! The metrics of the feature `metrics`, seen by `metrics-util`'s debugging
//! recorder installed as the global one: acquires, holds, timeouts and
//! losses per backend and driver on the local and the redis driver, forced
//! releases per backend, a connection coming up, and a policy's fallback,
//! refusal and member skipped and back; units and descriptions; never a key
//! in a label.
//! `cargo test --features metrics --test metrics`.

mod support;

use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::thread;
use std::time::Duration;

use dokebi_lock::telemetry::{Telemetry, TelemetryEvent};
use dokebi_lock::{ErrorCode, Hooks, Options, Provider};
use futures::executor::block_on;
use metrics::Unit;
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use metrics_util::{CompositeKey, MetricKind};
use support::redis_server::RedisServer;
use support::{open_redis, wait};

/// The global recorder, installed by the first test to ask, and that
/// test's turn at it: a snapshot takes every value (counters and gauges
/// start again from 0, histograms empty), so the tests take turns.
fn recorder() -> (MutexGuard<'static, ()>, &'static Snapshotter) {
    static TURN: Mutex<()> = Mutex::new(());
    static SNAPSHOTTER: OnceLock<Snapshotter> = OnceLock::new();
    let turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let snapshotter = SNAPSHOTTER.get_or_init(|| {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        recorder.install().expect("no other recorder in this test binary");
        snapshotter
    });
    (turn, snapshotter)
}

/// What changed since the last snapshot.
struct Seen(Vec<(CompositeKey, Option<Unit>, Option<metrics::SharedString>, DebugValue)>);

impl Seen {
    fn take(snapshotter: &Snapshotter) -> Seen {
        Seen(snapshotter.snapshot().into_vec())
    }

    /// The metric `name` of `kind` with exactly `labels`, if it was recorded.
    fn get(&self, kind: MetricKind, name: &str, labels: &[(&str, &str)]) -> Option<&DebugValue> {
        let mut wanted: Vec<(&str, &str)> = labels.to_vec();
        wanted.sort_unstable();
        self.0.iter().find_map(|(key, _, _, value)| {
            let mut has: Vec<(&str, &str)> = key.key().labels().map(|label| (label.key(), label.value())).collect();
            has.sort_unstable();
            (key.kind() == kind && key.key().name() == name && has == wanted).then_some(value)
        })
    }

    fn counter(&self, name: &str, labels: &[(&str, &str)]) -> u64 {
        match self.get(MetricKind::Counter, name, labels) {
            Some(DebugValue::Counter(count)) => *count,
            other => panic!("counter {name} {labels:?}: {other:?} in {:#?}", self.0),
        }
    }

    fn gauge(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        match self.get(MetricKind::Gauge, name, labels) {
            Some(DebugValue::Gauge(value)) => value.into_inner(),
            other => panic!("gauge {name} {labels:?}: {other:?} in {:#?}", self.0),
        }
    }

    /// The samples of a histogram, in seconds.
    fn histogram(&self, name: &str, labels: &[(&str, &str)]) -> Vec<f64> {
        match self.get(MetricKind::Histogram, name, labels) {
            Some(DebugValue::Histogram(samples)) => samples.iter().map(|sample| sample.into_inner()).collect(),
            other => panic!("histogram {name} {labels:?}: {other:?} in {:#?}", self.0),
        }
    }

    fn unit(&self, name: &str) -> Option<Unit> {
        self.0.iter().find(|(key, ..)| key.key().name() == name).and_then(|(_, unit, ..)| *unit)
    }

    /// Every label value of every metric of these backends: none is a key
    /// (each key of these tests has "secret" in it).
    fn assert_no_key(&self) {
        for (key, ..) in &self.0 {
            for label in key.key().labels() {
                assert!(!label.value().contains("secret"), "a key in a label: {key:?}");
            }
        }
    }
}

const BACKEND: &str = "dokebi_lock.backend";
const DRIVER: &str = "dokebi_lock.driver";
const ERROR: &str = "error.type";

fn local_provider(name: &str) -> Provider {
    Provider::from_yaml(&format!("schemaVersion: 1\noptions:\n  dokebi-lock:\n    backends:\n      {name}: {{}}\n")).unwrap()
}

#[test]
fn local_acquires_holds_and_timeouts_are_measured_by_backend_and_driver_with_no_telemetry_hook() {
    let (_turn, recorder) = recorder();
    let provider = local_provider("orders");
    let orders = provider.backend("orders").unwrap();
    block_on(async {
        let lease = orders.acquire("secret-order-1", wait(0)).await.unwrap();
        let timeout = orders.acquire("secret-order-1", wait(20)).await.unwrap_err();
        assert_eq!(timeout.code(), ErrorCode::WaitTimeout);
        thread::sleep(Duration::from_millis(30));
        assert!(lease.release().await.unwrap());
    });
    let seen = Seen::take(recorder);
    let local = [(BACKEND, "orders"), (DRIVER, "local")];
    let timed_out = [(BACKEND, "orders"), (DRIVER, "local"), (ERROR, "WAIT_TIMEOUT")];
    assert_eq!(seen.histogram("dokebi_lock.acquire.duration", &local).len(), 1);
    let waited = seen.histogram("dokebi_lock.acquire.duration", &timed_out);
    assert!(waited.len() == 1 && waited[0] >= 0.020, "the timeout's wait, in seconds: {waited:?}");
    let held = seen.histogram("dokebi_lock.hold.duration", &local);
    assert!(held.len() == 1 && held[0] >= 0.050, "the hold, in seconds: {held:?}");
    assert_eq!(seen.counter("dokebi_lock.acquire.timeouts", &local), 1);
    assert!(seen.get(MetricKind::Counter, "dokebi_lock.lease.losses", &local).is_none());
    // Each went up and came down again (the next test sees them up).
    assert_eq!(seen.gauge("dokebi_lock.waiting", &local), 0.0);
    assert_eq!(seen.gauge("dokebi_lock.held", &local), 0.0);
    assert_eq!(seen.unit("dokebi_lock.acquire.duration"), Some(Unit::Seconds));
    assert_eq!(seen.unit("dokebi_lock.acquire.timeouts"), Some(Unit::Count));
    seen.assert_no_key();
}

#[test]
fn waiting_and_held_count_the_acquires_in_progress_and_the_leases_held() {
    let (_turn, recorder) = recorder();
    let provider = local_provider("queue");
    let queue = provider.backend("queue").unwrap();
    let labels = [(BACKEND, "queue"), (DRIVER, "local")];
    block_on(async {
        let lease = queue.acquire("secret-job", wait(0)).await.unwrap();
        let mut waiter = Box::pin(queue.acquire("secret-job", wait(5_000)));
        assert!(futures::poll!(waiter.as_mut()).is_pending());
        let seen = Seen::take(recorder);
        assert_eq!((seen.gauge("dokebi_lock.waiting", &labels), seen.gauge("dokebi_lock.held", &labels)), (1.0, 1.0));
        // An acquire dropped before its outcome waits no more; a release
        // holds no more (from the values the snapshot took: -1 each).
        drop(waiter);
        assert!(lease.release().await.unwrap());
    });
    let seen = Seen::take(recorder);
    assert_eq!((seen.gauge("dokebi_lock.waiting", &labels), seen.gauge("dokebi_lock.held", &labels)), (-1.0, -1.0));
    // The dropped acquire had no outcome to measure.
    assert!(seen.get(MetricKind::Histogram, "dokebi_lock.acquire.duration", &labels).is_none_or(|samples| match samples {
        DebugValue::Histogram(samples) => samples.is_empty(),
        _ => false,
    }));
}

#[test]
fn redis_acquires_timeouts_lost_leases_and_the_connection_are_measured() {
    let (_turn, recorder) = recorder();
    let server = RedisServer::start();
    let (provider, _) = open_redis(&server.url(), &[("leaseMs", "100")], &[("commandTimeoutMs", "90")]);
    let shared = provider.backend("shared").unwrap();
    block_on(async {
        let lost = shared.acquire("secret-a", wait(0)).await.unwrap();
        // Past its lease (nothing renews it), another acquire takes the key.
        thread::sleep(Duration::from_millis(150));
        let taken = shared.acquire("secret-a", wait(0)).await.unwrap();
        let timeout = shared.acquire("secret-a", wait(20)).await.unwrap_err();
        assert_eq!(timeout.code(), ErrorCode::WaitTimeout);
        assert_eq!(lost.release().await.unwrap_err().code(), ErrorCode::LeaseLost);
        assert!(taken.release().await.unwrap());
    });
    let seen = Seen::take(recorder);
    let redis = [(BACKEND, "shared"), (DRIVER, "redis")];
    assert_eq!(seen.gauge("dokebi_lock.store.up", &[("dokebi_lock.connection", "main")]), 1.0);
    assert_eq!(seen.histogram("dokebi_lock.acquire.duration", &redis).len(), 2);
    assert_eq!(seen.histogram("dokebi_lock.acquire.duration", &[(BACKEND, "shared"), (DRIVER, "redis"), (ERROR, "WAIT_TIMEOUT")]).len(), 1);
    assert_eq!(seen.counter("dokebi_lock.acquire.timeouts", &redis), 1);
    assert_eq!(seen.counter("dokebi_lock.lease.losses", &redis), 1);
    let lost = seen.histogram("dokebi_lock.hold.duration", &[(BACKEND, "shared"), (DRIVER, "redis"), (ERROR, "LEASE_LOST")]);
    assert!(lost.len() == 1 && lost[0] >= 0.150, "the lost lease's hold: {lost:?}");
    assert_eq!(seen.histogram("dokebi_lock.hold.duration", &redis).len(), 1);
    assert_eq!(seen.gauge("dokebi_lock.waiting", &redis), 0.0);
    assert_eq!(seen.gauge("dokebi_lock.held", &redis), 0.0);
    seen.assert_no_key();
    block_on(provider.close());
}

#[test]
fn forced_releases_are_counted_by_backend_on_the_local_and_the_redis_driver() {
    let (_turn, recorder) = recorder();
    let server = RedisServer::start();
    let yaml = format!("{}      mem: {{}}\n", support::redis_yaml(&server.url(), "        leaseMs: 10000\n", ""));
    let provider = Provider::from_yaml(&yaml).unwrap();
    let (mem, shared) = (provider.backend("mem").unwrap(), provider.backend("shared").unwrap());
    block_on(async {
        let local = mem.acquire("secret-a", wait(0)).await.unwrap();
        assert_eq!(mem.force_release("secret-a").await.unwrap().removed, 1);
        assert_eq!(mem.force_release("secret-a").await.unwrap().removed, 0, "a free key's is counted too");
        assert!(!local.release().await.unwrap());
        let remote = shared.acquire("secret-a", wait(0)).await.unwrap();
        assert_eq!(shared.force_release("secret-a").await.unwrap().removed, 1);
        assert_eq!(remote.release().await.unwrap_err().code(), ErrorCode::LeaseLost);
    });
    let seen = Seen::take(recorder);
    assert_eq!(seen.counter("dokebi_lock.forced_releases", &[(BACKEND, "mem")]), 2);
    assert_eq!(seen.counter("dokebi_lock.forced_releases", &[(BACKEND, "shared")]), 1);
    assert_eq!(seen.unit("dokebi_lock.forced_releases"), Some(Unit::Count));
    seen.assert_no_key();
    block_on(provider.close());
}

const COOLDOWN_MS: u64 = 300;

#[test]
fn a_policy_s_fallback_refusal_and_member_skipped_and_back_are_measured_and_still_reach_the_host_s_sink() {
    let (_turn, recorder) = recorder();
    // Stopped before the provider opens: its port refuses connections
    // (unreachable) until the server is started again on it.
    let mut server = RedisServer::start();
    server.stop();
    let yaml = format!(
        "schemaVersion: 1\noptions:\n  dokebi-redis:\n    connections:\n      gone: {{ url: '{}', connectTimeoutMs: 300, commandTimeoutMs: 300 }}\n  dokebi-lock:\n    backends:\n      down: {{ driver: redis, connection: gone, namespace: metrics, leaseMs: 5000 }}\n      mem: {{}}\n      locks:\n        driver: policy\n        reprobeCooldownMs: {COOLDOWN_MS}\n        waitTimeoutMs: 2000\n        rules:\n          - {{ prefix: 'pay:', backends: [down] }}\n        default: {{ backends: [down, mem], minTier: process, onUnavailable: fallBack }}\n",
        server.url()
    );
    let events = Arc::new(Mutex::new(Vec::new()));
    let sink = events.clone();
    let telemetry: Telemetry = Arc::new(move |event: &TelemetryEvent| sink.lock().unwrap().push(event.name()));
    let provider =
        Provider::open_with(Options::from_yaml(&yaml).unwrap(), Hooks { telemetry: Some(telemetry), ..Hooks::default() }).unwrap();
    let locks = provider.backend("locks").unwrap();
    let served_by = |lease: &dokebi_lock::Lease| lease.served().expect("a policy lease").member.name.clone();

    let moved = block_on(locks.acquire("order:secret-1", wait(1_000))).unwrap();
    assert_eq!(served_by(&moved), "mem");
    let refused = block_on(locks.acquire("pay:secret-2", wait(1_000))).unwrap_err();
    assert_eq!(refused.code(), ErrorCode::NoEligibleBackend, "{refused}");
    assert!(block_on(moved.release()).unwrap());
    let seen = Seen::take(recorder);
    let down = [(BACKEND, "locks"), ("dokebi_lock.member", "down")];
    assert_eq!(
        seen.counter(
            "dokebi_lock.policy.fallbacks",
            &[(BACKEND, "locks"), ("dokebi_lock.member", "mem"), ("dokebi_lock.preferred", "down")]
        ),
        1
    );
    assert_eq!(seen.gauge("dokebi_lock.policy.skipped", &down), 1.0);
    assert_eq!(seen.counter("dokebi_lock.policy.refusals", &down), 1);
    // The members measure their own acquires, under their own names.
    assert_eq!(seen.histogram("dokebi_lock.acquire.duration", &[(BACKEND, "mem"), (DRIVER, "local")]).len(), 1);
    assert!(!seen
        .histogram("dokebi_lock.acquire.duration", &[(BACKEND, "down"), (DRIVER, "redis"), (ERROR, "PROVIDER_FAILED")])
        .is_empty());
    assert!(seen.get(MetricKind::Gauge, "dokebi_lock.store.up", &[("dokebi_lock.connection", "gone")]).is_none());
    seen.assert_no_key();

    server.restart();
    thread::sleep(Duration::from_millis(COOLDOWN_MS + 100));
    // The first acquire past the cooldown tries the member again; one whose
    // connect still ends as the old failure falls back again.
    let mut back = false;
    for _ in 0..20 {
        let lease = block_on(locks.acquire("order:secret-3", wait(1_000))).unwrap();
        back = served_by(&lease) == "down";
        assert!(block_on(lease.release()).unwrap());
        if back {
            break;
        }
        thread::sleep(Duration::from_millis(COOLDOWN_MS));
    }
    assert!(back, "the member came back");
    let seen = Seen::take(recorder);
    assert_eq!(seen.gauge("dokebi_lock.policy.skipped", &down), 0.0);
    assert_eq!(seen.gauge("dokebi_lock.store.up", &[("dokebi_lock.connection", "gone")]), 1.0);
    seen.assert_no_key();

    let events = events.lock().unwrap().clone();
    for name in ["policy-skipped", "policy-fallback", "policy-back", "connection"] {
        assert!(events.contains(&name), "the host's sink got {name}: {events:?}");
    }
    block_on(provider.close());
}

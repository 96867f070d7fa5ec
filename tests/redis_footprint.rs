//! Nothing is left behind in Redis: once a key is free, its names expire
//! after `fenceRetentionMs` (the fence counter) or sooner (everything
//! else), no name of ours ever lives without a TTL, and fences still rise
//! across a counter that expired. Each scenario runs on one server, on
//! Sentinel and on a Cluster; two providers stand for two processes.

mod support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use dokebi_lock::{AcquireOptions, Backend, Lease, LockMode};
use futures::executor::block_on;
use support::deployment::{on_topologies, Deployment};
use support::topology::backend;
use support::{redis_counts, wait};

/// A short retention, so that a test sees the counters go; polls that
/// leave a waiter's marks short-lived (2 x 200 ms + 1 s).
const RETENTION_MS: u64 = 400;
const BACKEND: &[(&str, &str)] =
    &[("leaseMs", "10000"), ("fenceRetentionMs", "400"), ("pollIntervalMs", "200"), ("notifyPollIntervalMs", "200")];

/// One connection to each primary of the deployment.
fn primaries(deployment: &Deployment) -> Vec<redis::Connection> {
    match deployment {
        Deployment::Server(server) => vec![server.client()],
        Deployment::Sentinel(sentinels) => vec![sentinels.primary().client()],
        Deployment::Cluster(cluster) => cluster.primaries().into_iter().map(|port| cluster.client(port)).collect(),
    }
}

/// Every name in the deployment (all primaries), and those of them without
/// a TTL.
fn names(connections: &mut [redis::Connection]) -> (usize, Vec<String>) {
    let (mut all, mut without_ttl) = (0, Vec::new());
    for connection in connections {
        let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(connection).unwrap();
        all += keys.len();
        if keys.is_empty() {
            continue;
        }
        let mut pipe = redis::pipe();
        for key in &keys {
            pipe.cmd("PTTL").arg(key);
        }
        let ttls: Vec<i64> = pipe.query(connection).unwrap();
        without_ttl.extend(keys.into_iter().zip(ttls).filter(|(_, ttl)| *ttl == -1).map(|(key, _)| key));
    }
    (all, without_ttl)
}

/// Watches the deployment until dropped: every name without a TTL it saw.
struct Watch {
    stop: Arc<AtomicBool>,
    seen: Arc<Mutex<Vec<String>>>,
    thread: Option<thread::JoinHandle<usize>>,
}

impl Watch {
    fn start(deployment: &Deployment) -> Watch {
        let mut connections = primaries(deployment);
        let (stop, seen) = (Arc::new(AtomicBool::new(false)), Arc::new(Mutex::new(Vec::new())));
        let (stopping, seeing) = (stop.clone(), seen.clone());
        let thread = thread::spawn(move || {
            let mut looks = 0;
            while !stopping.load(Ordering::Relaxed) {
                let (_, without_ttl) = names(&mut connections);
                seeing.lock().unwrap().extend(without_ttl);
                looks += 1;
                thread::sleep(Duration::from_millis(2));
            }
            looks
        });
        Watch { stop, seen, thread: Some(thread) }
    }

    /// Stops watching: how many looks it took, and the names without a TTL.
    fn finish(mut self) -> (usize, Vec<String>) {
        self.stop.store(true, Ordering::Relaxed);
        let looks = self.thread.take().unwrap().join().unwrap();
        let mut seen = self.seen.lock().unwrap().clone();
        seen.dedup();
        (looks, seen)
    }
}

fn shared() -> AcquireOptions {
    AcquireOptions { mode: LockMode::Shared, ..wait(5_000) }
}

fn counted() -> AcquireOptions {
    AcquireOptions { limit: Some(2), weight: Some(1), ..wait(5_000) }
}

/// Acquires `keys` in `backend` on another thread, once it has waited.
fn waiter(backend: &Backend, keys: &[&str], options: AcquireOptions) -> thread::JoinHandle<dokebi_lock::Result<Lease>> {
    let (backend, keys) = (backend.clone(), keys.iter().map(|k| (*k).to_owned()).collect::<Vec<_>>());
    let waiting = redis_counts(&backend).waiting;
    let handle = {
        let backend = backend.clone();
        thread::spawn(move || {
            let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
            block_on(backend.acquire_many(&keys, options))
        })
    };
    let deadline = Instant::now() + Duration::from_secs(5);
    while redis_counts(&backend).waiting == waiting && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(5));
    }
    thread::sleep(Duration::from_millis(50));
    handle
}

/// Takes `keys` in `a` with `options` (twice for a counted key, filling
/// it), makes `b` wait for them (marks of a waiter in another process:
/// a writer's when `exclusive_waiter`, else another request like `options`)
/// and, for a counted key, another waiter of `a` (a hand-off within the
/// process), then releases everything. Returns the fences granted.
fn contended(a: &Backend, b: &Backend, keys: &[&str], options: &AcquireOptions, exclusive_waiter: bool) -> Vec<u64> {
    let fences_of = |lease: &Lease| lease.fences().into_iter().map(|(_, fence)| fence).collect::<Vec<_>>();
    let mut held = vec![block_on(a.acquire_many(keys, options.clone())).expect("granted")];
    let counted = options.limit.is_some();
    if counted {
        held.push(block_on(a.acquire_many(keys, options.clone())).expect("granted"));
    }
    let waiter_options = if exclusive_waiter { wait(5_000) } else { options.clone() };
    let mut waiters = vec![waiter(b, keys, waiter_options)];
    if counted {
        waiters.push(waiter(a, keys, options.clone()));
    }
    let mut fences: Vec<u64> = held.iter().flat_map(fences_of).collect();
    for lease in held {
        assert!(block_on(lease.release()).unwrap());
    }
    for waiting in waiters {
        let lease = waiting.join().unwrap().expect("the waiter is granted");
        fences.extend(fences_of(&lease));
        assert!(block_on(lease.release()).unwrap());
    }
    fences
}

/// After `n` distinct keys of every kind were acquired and released (each
/// also waited for by another process), the deployment holds no name once
/// the retention has passed, and at no moment held a name without a TTL.
fn scenario_every_name_of_a_free_key_expires_and_none_lives_without_a_ttl(deployment: &mut Deployment) {
    let mut connections = primaries(deployment);
    let (before, _) = names(&mut connections);
    let (a, b) = (deployment.open(BACKEND), deployment.open(BACKEND));
    let (ba, bb) = (backend(&a), backend(&b));
    let watch = Watch::start(deployment);
    let n = 6;
    for i in 0..n {
        let (x, y, z) = (format!("order:{i}"), format!("report:{i}"), format!("slot:{i}"));
        // Exclusive, uncontended and contended.
        let lease = block_on(ba.acquire(&format!("free:{i}"), wait(0))).unwrap();
        assert!(block_on(lease.release()).unwrap());
        contended(&ba, &bb, &[&x], &wait(5_000), true);
        // Shared: readers, then a writer of another process waits.
        contended(&ba, &bb, &[&y], &shared(), true);
        // Counted: two units of two held, a third waits in another process.
        contended(&ba, &bb, &[&z], &counted(), false);
        // Several keys at once (of different slots on a Cluster).
        let (k1, k2, k3) = (format!("many:{i}:1"), format!("many:{i}:2"), format!("many:{i}:3"));
        contended(&ba, &bb, &[&k1, &k2, &k3], &wait(5_000), true);
    }
    let (during, _) = names(&mut connections);
    assert!(during > before, "the counters of the keys are kept for the retention ({during} names)");
    // Marks live at most 2 x max(poll intervals) + 1 s, counters the retention.
    let deadline = Instant::now() + Duration::from_millis(1_400 + RETENTION_MS) + Duration::from_secs(3);
    let mut left = names(&mut connections).0;
    while left != before && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(50));
        left = names(&mut connections).0;
    }
    let (looks, without_ttl) = watch.finish();
    assert_eq!(left, before, "{}: every name of a free key expires: {:?}", deployment.name(), deployment.keys("*"));
    assert!(without_ttl.is_empty(), "{}: names without a TTL: {without_ttl:?}", deployment.name());
    assert!(looks > 10, "the watch looked often ({looks})");
    block_on(a.close());
    block_on(b.close());
}

/// Once a key's counter expired, its next grant's fence still comes from
/// the clock, above every fence the key had.
fn scenario_fences_rise_across_an_expired_counter(deployment: &mut Deployment) {
    let app = deployment.open(BACKEND);
    let fence_of = |options: AcquireOptions, keys: &[&str]| {
        let lease = block_on(backend(&app).acquire_many(keys, options)).unwrap();
        let fences: Vec<u64> = lease.fences().into_iter().map(|(_, fence)| fence).collect();
        assert!(block_on(lease.release()).unwrap());
        fences
    };
    let kinds: [(&str, AcquireOptions); 3] = [("plain", wait(0)), ("shared", shared()), ("counted", counted())];
    for (name, options) in kinds {
        let key = format!("fenced:{name}");
        let before = fence_of(options.clone(), &[&key]);
        let counter = format!("test:lock-fence:{{{}}}", support::names::digest(&key));
        let ttl: i64 = deployment.query(&counter, redis::cmd("PTTL").arg(&counter));
        assert!(ttl > 0 && ttl <= RETENTION_MS as i64, "{name}: the counter lives the retention: {ttl}");
        support::eventually("the counter expires", || deployment.query::<i64>(&counter, redis::cmd("EXISTS").arg(&counter)) == 0);
        let after = fence_of(options, &[&key]);
        assert!(after[0] > before[0], "{name}: {after:?} after {before:?}");
    }
    // Several keys: one counter expired (pair:2's), one kept (pair:1 is
    // granted alone meanwhile, which keeps its counter).
    let counter = |key: &str| format!("test:lock-fence:{{{}}}", support::names::digest(key));
    let exists = |key: &str| deployment.query::<i64>(&counter(key), redis::cmd("EXISTS").arg(counter(key)));
    let before = fence_of(wait(0), &["pair:1", "pair:2"]);
    let mut kept = before[0];
    support::eventually("pair:2's counter expires", || {
        kept = fence_of(wait(0), &["pair:1"])[0];
        thread::sleep(Duration::from_millis(RETENTION_MS / 4));
        exists("pair:2") == 0
    });
    assert_eq!(exists("pair:1"), 1, "pair:1's counter is kept");
    let after = fence_of(wait(0), &["pair:1", "pair:2"]);
    assert!(after[0] > kept && after[1] > before[1], "{after:?} after {before:?} (pair:1 last {kept})");
    block_on(app.close());
}

on_topologies! {
    every topology {
        every_name_of_a_free_key_expires_and_none_lives_without_a_ttl => scenario_every_name_of_a_free_key_expires_and_none_lives_without_a_ttl,
        fences_rise_across_an_expired_counter => scenario_fences_rise_across_an_expired_counter,
    }
}

/// A process of the older key layout (the whole SHA-256 in 64 hex digits)
/// grants by other names: once one is heard releasing a key in the
/// namespace, this process refuses to grant there, with the fix.
#[test]
fn a_process_of_the_older_layout_in_the_namespace_is_a_clear_error_not_a_second_holder() {
    let server = support::redis_server::RedisServer::start();
    let (app, _) = support::open_redis(&server.url(), BACKEND, &[]);
    let lease = block_on(backend(&app).acquire("order:1", wait(0))).expect("granted before");
    assert!(block_on(lease.release()).unwrap());
    // What an older process's release publishes when someone waits.
    let older = "test:lock:{ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad}";
    let mut refused = None;
    support::eventually("the older layout is heard", || {
        let _: i64 = redis::cmd("PUBLISH").arg("test:lock-released").arg(older).query(&mut server.client()).unwrap();
        match block_on(backend(&app).acquire("order:1", wait(0))) {
            Ok(lease) => {
                assert!(block_on(lease.release()).unwrap());
                false
            }
            Err(err) => {
                refused = Some(err);
                true
            }
        }
    });
    let err = refused.unwrap();
    assert_eq!(err.code(), dokebi_lock::ErrorCode::ProviderFailed);
    assert!(err.message().contains("older dokebi-lock key layout") && err.message().contains("namespace 'test'"), "{}", err.message());
    block_on(app.close());
}

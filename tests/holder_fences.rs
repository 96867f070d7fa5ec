//! Each holder's own fence and how long it has held (issue 53): `inspect`,
//! and the `details` of a `WAIT_TIMEOUT` or `LOCK_BUSY`, give every holder
//! of a key the fence its grant got and the time since that grant, on every
//! driver that keeps holders, read by another provider (another process's
//! connections): a plain holder, one handed the key after a wait, readers
//! granted at different times, counted holders, a lease of several keys;
//! a renewal changes neither.

mod mysql;
mod postgres;
mod support;

use std::thread;
use std::time::{Duration, Instant};

use dokebi_lock::{AcquireOptions, Backend, ErrorCode, Holding, LockKind, LockMode};
use futures::executor::block_on;
use support::redis_server::RedisServer;
use support::{inspect, labelled, redis_yaml_at, release, take, wait};

/// How far a store's clock, or the local driver's coarse one, may read
/// from this process's `Instant` over a test (the same host: the tick of a
/// coarse clock, and rounding to milliseconds).
const SLACK: Duration = Duration::from_millis(25);

fn held_for(holder: &Holding) -> Duration {
    holder.held_for.unwrap_or_else(|| panic!("a holder without its time held: {holder:?}"))
}

/// `held` is what a grant made after `before` (whose acquire returned
/// `after` has held) can show now: at least `after.elapsed()` and at most
/// `before.elapsed()`, each within [`SLACK`].
fn assert_held_since(held: Duration, before: Instant, after: Instant, what: &str) {
    let (least, most) = (after.elapsed().saturating_sub(SLACK), before.elapsed() + SLACK);
    assert!(held >= least && held <= most, "{what}: held for {held:?}, not within {least:?}..{most:?}");
}

fn kind(mode: LockMode, limit: Option<u32>, weight: Option<u32>) -> AcquireOptions {
    AcquireOptions::of_kind(LockKind::new(mode, limit, weight).unwrap(), Some(Duration::ZERO), None)
}

/// The checks every driver passes: `a` and `b` are backends of one store
/// in two providers.
fn each_holder_s_fence_and_time(a: &Backend, b: &Backend, leases: bool) {
    // A plain holder, read by the other provider.
    let before = Instant::now();
    let plain = take(a, "k", wait(0));
    let after = Instant::now();
    thread::sleep(Duration::from_millis(300));
    let found = inspect(b, "k");
    assert_eq!(found.holders[0].fence, Some(plain.fence()), "{found:?}");
    assert_held_since(held_for(&found.holders[0]), before, after, "a plain holder");

    // A try told LOCK_BUSY: the same, in its details.
    let busy = block_on(b.acquire("k", wait(0))).unwrap_err();
    assert_eq!(busy.code(), ErrorCode::LockBusy);
    let told = &busy.details().expect("details")["holders"][0];
    assert_eq!(told["fence"].as_str(), Some(plain.fence().to_string().as_str()), "{told}");
    let told_ms = told["heldForMs"].as_u64().unwrap_or_else(|| panic!("no heldForMs: {told}"));
    assert_held_since(Duration::from_millis(told_ms), before, after, "a LOCK_BUSY's holder");

    // A renewal moves neither the fence nor the time held.
    if leases {
        assert!(block_on(plain.renew()).unwrap(), "renewed");
        let renewed = inspect(b, "k");
        assert_eq!(renewed.holders[0].fence, Some(plain.fence()), "{renewed:?}");
        assert_held_since(held_for(&renewed.holders[0]), before, after, "a renewed holder");
    }

    // A waiter handed the key: its own fence, held from its grant.
    let waiter = thread::scope(|scope| {
        let waiting = scope.spawn(|| {
            let lease = take(b, "k", wait(10_000));
            (lease, Instant::now())
        });
        thread::sleep(Duration::from_millis(100));
        release(plain);
        let granted_by = Instant::now();
        let (lease, granted) = waiting.join().unwrap();
        (lease, granted_by, granted)
    });
    let (handed, released, granted) = waiter;
    assert!(handed.fence() > found.holders[0].fence.unwrap(), "a later grant's fence is larger");
    thread::sleep(Duration::from_millis(150));
    let found = inspect(a, "k");
    assert_eq!(found.holders[0].fence, Some(handed.fence()), "{found:?}");
    assert_held_since(held_for(&found.holders[0]), released, granted, "a holder handed the key");
    release(handed);

    // Readers granted 200 ms apart: each its own fence and time.
    let (before_first, first) = (Instant::now(), take(a, "r", kind(LockMode::Shared, None, None)));
    let after_first = Instant::now();
    thread::sleep(Duration::from_millis(200));
    let (before_second, second) = (Instant::now(), take(b, "r", kind(LockMode::Shared, None, None)));
    let after_second = Instant::now();
    let readers = inspect(a, "r");
    assert_eq!(readers.held, 2, "{readers:?}");
    let of = |fence: u64| {
        readers.holders.iter().find(|holder| holder.fence == Some(fence)).unwrap_or_else(|| panic!("no holder of fence {fence}: {readers:?}"))
    };
    assert_held_since(held_for(of(first.fence())), before_first, after_first, "the first reader");
    assert_held_since(held_for(of(second.fence())), before_second, after_second, "the second reader");
    release(first);
    release(second);

    // Counted holders of 2 and 3 units: each its own fence.
    let two = take(a, "c", kind(LockMode::Exclusive, Some(5), Some(2)));
    let three = take(b, "c", kind(LockMode::Exclusive, Some(5), Some(3)));
    let counted = inspect(b, "c");
    let mut seen: Vec<(u32, Option<u64>)> = counted.holders.iter().map(|holder| (holder.units, holder.fence)).collect();
    seen.sort();
    assert_eq!(seen, [(2, Some(two.fence())), (3, Some(three.fence()))], "{counted:?}");
    assert!(counted.holders.iter().all(|holder| holder.held_for.is_some()), "{counted:?}");
    release(two);
    release(three);

    // A lease of several keys: each key shows that key's fence.
    let both = block_on(a.acquire_many(&["x", "y"], wait(0))).expect("granted");
    for (key, fence) in both.fences() {
        let found = inspect(b, key);
        assert_eq!(found.holders[0].fence, Some(fence), "{key}: {found:?}");
    }
    release(both);
}

#[test]
fn local_holders_have_their_fence_and_time() {
    let yaml = "schemaVersion: 1\noptions:\n  dokebi-lock:\n    backends:\n      shared: { driver: local }\n";
    let provider = labelled(yaml, "web-3:4182");
    let backend = provider.backend("shared").unwrap();
    each_holder_s_fence_and_time(&backend, &backend, false);
}

#[test]
fn redis_holders_have_their_fence_and_time() {
    let server = RedisServer::start();
    let yaml = redis_yaml_at(&format!("url: {}", server.url()), "        leaseMs: 10000\n", "");
    let (a, b) = (labelled(&yaml, "a"), labelled(&yaml, "b"));
    each_holder_s_fence_and_time(&a.backend("shared").unwrap(), &b.backend("shared").unwrap(), true);
}

#[test]
fn postgres_holders_have_their_fence_and_time() {
    let schema = postgres::Schema::fresh();
    let yaml = schema.yaml("", "");
    let (a, b) = (labelled(&yaml, "a"), labelled(&yaml, "b"));
    each_holder_s_fence_and_time(&postgres::backend(&a), &postgres::backend(&b), true);
}

#[test]
fn mysql_holders_have_their_fence_and_time() {
    let table = mysql::Table::fresh();
    let yaml = mysql::yaml(&table.0, "");
    let (a, b) = (labelled(&yaml, "a"), labelled(&yaml, "b"));
    each_holder_s_fence_and_time(&a.backend("shared").unwrap(), &b.backend("shared").unwrap(), true);
}

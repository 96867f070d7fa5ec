//! `Backend::force_release` on every driver that can break a key, against
//! the real stores: another provider (another process's connection) breaks
//! what one holds; every holder is removed and learns it; the fence the
//! break answers is above every fence the key granted and below the next
//! grant's, so a fenced store refuses a removed holder's late write; a
//! waiter of another process is granted at once; a free key's break still
//! raises the fence.

mod file;
mod mysql;
mod postgres;
mod support;

use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use dokebi_lock::{AcquireOptions, Backend, ErrorCode, ForcedRelease, Lease, Provider, WithLockOptions};
use futures::executor::block_on;
use support::redis_server::RedisServer;
use support::{eventually, inspect, open_redis, shared, take, wait};

const LEASE_MS: u64 = 5000;

/// A downstream store that fences: it keeps the highest fence it saw and
/// refuses a write with a lower one.
#[derive(Default)]
struct FencedStore {
    highest: AtomicU64,
}

impl FencedStore {
    fn write(&self, fence: u64) -> bool {
        self.highest.fetch_max(fence, Ordering::SeqCst) <= fence
    }
}

fn force(backend: &Backend, key: &str) -> ForcedRelease {
    block_on(backend.force_release(key)).expect("force-released")
}

/// A removed holder's lease is lost: a renewal says so, and its release
/// (`LEASE_LOST` on a store; false on the local driver, whose release
/// answers whether it released).
fn is_lost(lease: &Lease, store: bool) {
    if store {
        assert!(!block_on(lease.renew()).unwrap(), "a removed holder's renewal finds its lease gone");
        assert!(!lease.is_valid());
        let err = block_on(lease.release()).unwrap_err();
        assert_eq!(err.code(), ErrorCode::LeaseLost, "{err}");
    } else {
        assert!(!lease.is_valid());
        assert!(!block_on(lease.release()).unwrap());
    }
}

/// The checks every driver passes: `holder` and `breaker` are two
/// providers' backends of one store (`store`: a store driver's, whose
/// fences are the key's).
fn breaks_every_holder(holder: &Backend, breaker: &Backend, store: bool) {
    // A plain holder, and a fenced store it wrote to.
    let downstream = FencedStore::default();
    let plain = take(holder, "k", wait(0));
    assert!(downstream.write(plain.fence()));
    let forced = force(breaker, "k");
    assert_eq!((forced.removed, forced.backend.as_str()), (1, "shared"), "{forced:?}");
    if store {
        let fence = forced.fence.expect("a store raises the key's fence");
        assert!(fence > plain.fence(), "the raised fence {fence} is above the removed holder's {}", plain.fence());
        // The operator writes it to the fenced store: the removed holder's
        // late write is refused before anyone takes the key again.
        assert!(downstream.write(fence));
    } else {
        assert_eq!(forced.fence, None);
    }
    assert!(!inspect(breaker, "k").is_held(), "a broken key is free");
    is_lost(&plain, store);
    let next = take(breaker, "k", wait(0));
    assert!(next.fence() > plain.fence());
    if let Some(fence) = forced.fence {
        assert!(next.fence() > fence, "the next grant's fence {} is above the raised {fence}", next.fence());
    }
    assert!(downstream.write(next.fence()));
    assert!(!downstream.write(plain.fence()), "the removed holder's late write is refused");
    assert!(block_on(next.release()).unwrap());

    // Readers of both providers: all removed.
    let readers = [take(holder, "r", shared(0)), take(holder, "r", shared(0)), take(breaker, "r", shared(0))];
    assert_eq!(force(breaker, "r").removed, 3);
    assert!(!inspect(holder, "r").is_held());
    for reader in &readers {
        is_lost(reader, store);
    }

    // A counted key: 2 of 3 units held; a request of 3 fits once broken.
    let counted = |weight| AcquireOptions { limit: Some(3), weight: Some(weight), ..wait(0) };
    let units = take(holder, "c", counted(2));
    assert_eq!(force(breaker, "c").removed, 1);
    is_lost(&units, store);
    let all = take(breaker, "c", counted(3));
    assert!(block_on(all.release()).unwrap());

    // A free key: nothing removed; a store's fence still rises.
    let first = force(breaker, "free");
    let second = force(holder, "free");
    assert_eq!((first.removed, second.removed), (0, 0));
    if store {
        assert!(second.fence > first.fence, "{first:?} then {second:?}");
    }

    // A waiter of the other provider is granted at once, not at its
    // safety-net poll (10 s); a redis break itself waits up to a second for
    // the clock (the counter's reservation, see its OBSERVE script).
    let held = take(holder, "w", wait(0));
    let waiter = {
        let breaker = breaker.clone();
        thread::spawn(move || {
            let lease = block_on(breaker.acquire("w", wait(20_000)));
            (lease, Instant::now())
        })
    };
    eventually("the waiter shows", || inspect(holder, "w").waiting == 1);
    let broken_at = Instant::now();
    assert_eq!(force(holder, "w").removed, 1);
    let (granted, at) = waiter.join().unwrap();
    let granted = granted.expect("the waiter is granted");
    assert!(at.duration_since(broken_at) < Duration::from_millis(3_500), "granted {:?} after the break", at.duration_since(broken_at));
    is_lost(&held, store);
    assert!(block_on(granted.release()).unwrap());

    // Bad input.
    let err = block_on(breaker.force_release("")).unwrap_err();
    assert_eq!(err.code(), ErrorCode::InvalidKey, "{err}");
}

fn closed_is_closed(provider: Provider, backend: &Backend) {
    block_on(provider.close());
    assert_eq!(block_on(backend.force_release("k")).unwrap_err().code(), ErrorCode::Closed);
}

/// A section running under `withLock` with automatic renewals learns of a
/// break by its signal, within a renewal interval.
fn a_section_is_aborted(holder: &Backend, breaker: &Backend) {
    let section_started = std::sync::Arc::new(std::sync::Barrier::new(2));
    let run = {
        let (holder, started) = (holder.clone(), section_started.clone());
        thread::spawn(move || {
            block_on(holder.with_lock("s", WithLockOptions { acquire: wait(0), auto_renew: true }, |section| async move {
                started.wait();
                let until = Instant::now() + Duration::from_secs(10);
                while !section.signal.is_aborted() && Instant::now() < until {
                    thread::sleep(Duration::from_millis(10));
                }
                section.signal.is_aborted()
            }))
        })
    };
    section_started.wait();
    assert_eq!(force(breaker, "s").removed, 1);
    let err = run.join().unwrap().unwrap_err();
    assert_eq!(err.code(), ErrorCode::LeaseLost, "{err}");
}

#[test]
fn local_force_release_ends_every_lease_of_the_key() {
    let provider = Provider::from_yaml("schemaVersion: 1\noptions:\n  dokebi-lock:\n    backends:\n      shared: {}\n").unwrap();
    let backend = provider.backend("shared").unwrap();
    breaks_every_holder(&backend, &backend, false);

    // A lease of several keys ends whole: its other key is free too.
    let both = block_on(backend.acquire_many(&["a", "b"], wait(0))).unwrap();
    assert_eq!(force(&backend, "a").removed, 1);
    assert!(!both.is_valid());
    assert!(!inspect(&backend, "b").is_held(), "the lease's other key went with it");
    closed_is_closed(provider, &backend);
}

#[test]
fn redis_force_release_removes_another_process_s_holders() {
    let server = RedisServer::start();
    let lease = LEASE_MS.to_string();
    let (a, _) = open_redis(&server.url(), &[("leaseMs", &lease), ("notifyPollIntervalMs", "10000")], &[]);
    let (b, records) = open_redis(&server.url(), &[("leaseMs", &lease), ("notifyPollIntervalMs", "10000")], &[]);
    breaks_every_holder(&a.backend("shared").unwrap(), &b.backend("shared").unwrap(), true);
    let logged = records.lock().unwrap().iter().filter(|record| record.code == "LOCK_FORCE_RELEASED").count();
    assert_eq!(logged, 4, "each of its four breaks is logged");
    let closing = b.backend("shared").unwrap();
    closed_is_closed(b, &closing);

    let (short_a, _) = open_redis(&server.url(), &[("leaseMs", "2400")], &[]);
    let (short_b, _) = open_redis(&server.url(), &[("leaseMs", "2400")], &[]);
    a_section_is_aborted(&short_a.backend("shared").unwrap(), &short_b.backend("shared").unwrap());
}

#[test]
fn postgres_force_release_removes_another_process_s_holders() {
    let schema = postgres::Schema::fresh();
    let backend = format!("        leaseMs: {LEASE_MS}\n        notifyPollIntervalMs: 10000\n");
    let (a, b) = (schema.open(&backend), schema.open(&backend));
    breaks_every_holder(&postgres::backend(&a), &postgres::backend(&b), true);
    let closing = postgres::backend(&b);
    closed_is_closed(b, &closing);

    let short = "        leaseMs: 2400\n";
    a_section_is_aborted(&postgres::backend(&schema.open(short)), &postgres::backend(&schema.open(short)));
}

#[test]
fn mysql_force_release_removes_another_process_s_holders() {
    let table = mysql::Table::fresh();
    let yaml = mysql::yaml(&table.0, ", notifyPollIntervalMs: 10000");
    let (a, b) = (Provider::from_yaml(&yaml).unwrap(), Provider::from_yaml(&yaml).unwrap());
    breaks_every_holder(&a.backend("shared").unwrap(), &b.backend("shared").unwrap(), true);
    let closing = b.backend("shared").unwrap();
    closed_is_closed(b, &closing);

    let short = mysql::yaml(&table.0, "").replace("leaseMs: 5000", "leaseMs: 2400");
    let (c, d) = (Provider::from_yaml(&short).unwrap(), Provider::from_yaml(&short).unwrap());
    a_section_is_aborted(&c.backend("shared").unwrap(), &d.backend("shared").unwrap());
}

#[test]
fn a_policy_breaks_the_key_on_every_member_its_rule_allows() {
    let provider = Provider::from_yaml(
        "schemaVersion: 1\noptions:\n  dokebi-lock:\n    backends:\n      near: {}\n      far: {}\n      \
         pick: { driver: policy, default: { backends: [near, far], minTier: process, onUnavailable: fallBack } }\n",
    )
    .unwrap();
    let policy = provider.backend("pick").unwrap();
    let free = force(&policy, "k");
    assert_eq!((free.backend.as_str(), free.removed), ("near", 0), "a free key: the preferred member");
    let (near, far) = (take(&provider.backend("near").unwrap(), "k", wait(0)), take(&provider.backend("far").unwrap(), "k", wait(0)));
    let forced = force(&policy, "k");
    assert_eq!((forced.backend.as_str(), forced.removed), ("near", 2), "{forced:?}");
    assert!(!near.is_valid() && !far.is_valid());
}

#[test]
fn the_file_driver_says_it_cannot_break_a_kernel_lock() {
    let dir = file::fresh_directory("force-release");
    let (_provider, backend) = file::open(&dir, "");
    let err = block_on(backend.force_release("k")).unwrap_err();
    assert_eq!(err.code(), ErrorCode::InvalidArgument, "{err}");
}

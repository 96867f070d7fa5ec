//! `Backend::inspect` on every driver that can answer it, against the real
//! stores: what one provider holds and waits for, read by another (two
//! providers are two processes' connections), agrees with the leases
//! granted, for plain, shared and counted keys; a read changes nothing.

mod file;
mod mysql;
mod postgres;
mod support;

use std::thread;
use std::time::Duration;

use dokebi_lock::{AcquireOptions, Backend, ErrorCode, LockMode, Provider};
use futures::executor::block_on;
use support::redis_server::RedisServer;
use support::{eventually, inspect, open_redis, take, wait};

const LEASE_MS: u64 = 5000;

/// The checks every driver passes: `holder` and `reader` are two providers'
/// backends of one store (`leases` expire: a store driver's).
fn agrees_with_the_leases(holder: &Backend, reader: &Backend, leases: bool) {
    let free = inspect(reader, "free");
    assert_eq!((free.is_held(), free.held, free.mode, free.waiting, free.limit), (false, 0, None, 0, 1), "{free:?}");
    assert!(free.holders.is_empty());
    assert_eq!(free.backend, "shared");

    // A plain lease, and a waiter of another provider behind it.
    let plain = take(holder, "k", wait(0));
    let held = inspect(reader, "k");
    assert_eq!((held.held, held.mode, held.limit, held.waiting), (1, Some(LockMode::Exclusive), 1, 0), "{held:?}");
    assert_eq!(held.holders.len(), 1);
    assert_eq!(held.holders[0].units, 1);
    if leases {
        let remaining = held.holders[0].remaining.expect("a lease expires");
        assert!(remaining <= Duration::from_millis(LEASE_MS) && remaining > Duration::from_millis(LEASE_MS / 2), "{remaining:?}");
        assert!(held.fence.is_some_and(|fence| fence >= plain.fence()), "no fence granted is above {:?}: {}", held.fence, plain.fence());
    } else {
        assert_eq!(held.holders[0].fence, Some(plain.fence()));
    }
    let waiter = {
        let reader = reader.clone();
        thread::spawn(move || block_on(reader.acquire("k", wait(10_000))))
    };
    eventually("the waiter shows", || inspect(holder, "k").waiting == 1);
    assert!(block_on(plain.release()).unwrap());
    let handed = waiter.join().unwrap().expect("the waiter is granted");
    eventually("nobody waits", || inspect(holder, "k").waiting == 0);
    assert!(inspect(holder, "k").is_held());
    assert!(block_on(handed.release()).unwrap());
    assert!(!inspect(reader, "k").is_held(), "a released key is free");

    // Readers together.
    let shared = AcquireOptions { mode: LockMode::Shared, ..wait(0) };
    let readers = [take(holder, "r", shared.clone()), take(reader, "r", shared)];
    let read = inspect(reader, "r");
    assert_eq!((read.held, read.mode, read.holders.len()), (2, Some(LockMode::Shared), 2), "{read:?}");
    for lease in readers {
        assert!(block_on(lease.release()).unwrap());
    }

    // A counted key: 1 + 2 of 3 units.
    let counted = |weight| AcquireOptions { limit: Some(3), weight: Some(weight), ..wait(0) };
    let units = [take(holder, "c", counted(1)), take(reader, "c", counted(2))];
    let count = inspect(holder, "c");
    assert_eq!((count.held, count.mode, count.limit), (2, Some(LockMode::Exclusive), 3), "{count:?}");
    let mut weights: Vec<u32> = count.holders.iter().map(|holder| holder.units).collect();
    weights.sort_unstable();
    assert_eq!(weights, [1, 2]);
    for lease in units {
        assert!(block_on(lease.release()).unwrap());
    }

    // A read changes nothing: a key read while free is granted as ever,
    // and a held one keeps its lease.
    let lease = take(holder, "free", wait(0));
    for _ in 0..3 {
        assert!(inspect(reader, "free").is_held());
    }
    assert!(lease.is_valid());
    assert!(block_on(lease.release()).unwrap());

    let err = block_on(reader.inspect("")).unwrap_err();
    assert_eq!(err.code(), ErrorCode::InvalidKey, "{err}");
}

fn closed_is_closed(provider: Provider, backend: &Backend) {
    block_on(provider.close());
    assert_eq!(block_on(backend.inspect("k")).unwrap_err().code(), ErrorCode::Closed);
}

#[test]
fn local_inspect_agrees_with_the_leases_of_its_backend() {
    let provider = Provider::from_yaml("schemaVersion: 1\noptions:\n  dokebi-lock:\n    backends:\n      shared: {}\n").unwrap();
    let backend = provider.backend("shared").unwrap();
    agrees_with_the_leases(&backend, &backend, false);
    closed_is_closed(provider, &backend);
}

#[test]
fn redis_inspect_agrees_with_another_process_s_leases() {
    let server = RedisServer::start();
    let lease = LEASE_MS.to_string();
    let (a, _) = open_redis(&server.url(), &[("leaseMs", &lease)], &[]);
    let (b, _) = open_redis(&server.url(), &[("leaseMs", &lease)], &[]);
    agrees_with_the_leases(&a.backend("shared").unwrap(), &b.backend("shared").unwrap(), true);
    let closing = b.backend("shared").unwrap();
    closed_is_closed(b, &closing);
}

#[test]
fn postgres_inspect_agrees_with_another_process_s_leases() {
    let schema = postgres::Schema::fresh();
    let backend = format!("        leaseMs: {LEASE_MS}\n");
    let (a, b) = (schema.open(&backend), schema.open(&backend));
    agrees_with_the_leases(&postgres::backend(&a), &postgres::backend(&b), true);
    let closing = postgres::backend(&b);
    closed_is_closed(b, &closing);
}

#[test]
fn mysql_inspect_agrees_with_another_process_s_leases() {
    let table = mysql::Table::fresh();
    let yaml = mysql::yaml(&table.0, "");
    let (a, b) = (Provider::from_yaml(&yaml).unwrap(), Provider::from_yaml(&yaml).unwrap());
    agrees_with_the_leases(&a.backend("shared").unwrap(), &b.backend("shared").unwrap(), true);
    let closing = b.backend("shared").unwrap();
    closed_is_closed(b, &closing);
}

#[test]
fn a_policy_answers_from_the_member_that_holds_the_key() {
    let provider = Provider::from_yaml(
        "schemaVersion: 1\noptions:\n  dokebi-lock:\n    backends:\n      near: {}\n      far: {}\n      \
         pick: { driver: policy, default: { backends: [near, far], minTier: process, onUnavailable: fallBack } }\n",
    )
    .unwrap();
    let policy = provider.backend("pick").unwrap();
    let free = inspect(&policy, "k");
    assert_eq!((free.backend.as_str(), free.is_held()), ("near", false), "a free key: the preferred member's view");
    let lease = take(&provider.backend("far").unwrap(), "k", wait(0));
    let held = inspect(&policy, "k");
    assert_eq!((held.backend.as_str(), held.held, held.holders[0].fence), ("far", 1, Some(lease.fence())));
}

/// The file driver as every driver: a key it would refuse is
/// `INVALID_KEY`, a closed backend `CLOSED` (its holders:
/// tests/file_holders.rs).
#[test]
fn the_file_driver_refuses_a_bad_key_and_a_closed_backend() {
    let dir = file::fresh_directory("inspect");
    let (provider, backend) = file::open(&dir, "");
    assert_eq!(block_on(backend.inspect("")).unwrap_err().code(), ErrorCode::InvalidKey);
    block_on(provider.close());
    assert_eq!(block_on(backend.inspect("k")).unwrap_err().code(), ErrorCode::Closed);
}

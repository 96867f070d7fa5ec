//! No process starves on a hot key: two providers (each with its own
//! connections, as two processes) each run two tasks that loop on one key,
//! releasing and acquiring again at once, so each always has a waiter with
//! a mark in the table. A try is granted only when no older mark of another
//! owner waits, so the process that just released cannot take the key back
//! ahead of the other's waiter: the grants alternate. (A waiter keeps its
//! place by its token's oldest mark: when it passed a fresh ticket instead,
//! one process took runs of 22 grants here.)

mod fairness;
mod postgres;

use std::time::Duration;

use dokebi_lock::Provider;
use futures::executor::block_on;
use postgres::{backend, wait, Schema};

/// Races two processes on `keys` (both connected and listening first): each
/// gets a fair share, and a waiting acquire is not overtaken more than a few
/// times (see `fairness::assert_fair`).
fn race(name: &str, a: Provider, b: Provider, keys: &[&str]) {
    for provider in [&a, &b] {
        let lease = block_on(backend(provider).acquire_many(keys, wait(5_000))).unwrap();
        assert!(block_on(lease.release()).unwrap());
        postgres::eventually("listening", || backend(provider).status().postgres.unwrap().listening);
    }
    let grants = fairness::race(name, &backend(&a), &backend(&b), keys, Duration::from_millis(1_500));
    fairness::assert_fair(name, &grants);
    block_on(a.close());
    block_on(b.close());
}

#[test]
fn a_process_that_waits_gets_its_turn_against_one_that_loops() {
    let schema = Schema::fresh();
    race("postgres", schema.open(""), schema.open(""), &["hot"]);
}

#[test]
fn a_process_waiting_for_several_keys_gets_its_turn_too() {
    let schema = Schema::fresh();
    race("postgres, two keys", schema.open(""), schema.open(""), &["hot", "cold"]);
}

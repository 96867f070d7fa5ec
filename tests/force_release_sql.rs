//! `Backend::force_release` on the SQL drivers, against the machine's
//! PostgreSQL and MariaDB: every holder of the key is removed at once (its
//! renewal and release then find its lease lost), the fence rises above
//! every fence granted and below the next, and a waiter of another process
//! (another provider on the same table and namespace) is told at once, not
//! at its safety-net poll.

mod mysql;
mod postgres;
mod support;

use std::thread;
use std::time::{Duration, Instant};

use dokebi_lock::{AcquireOptions, Backend, ErrorCode, ForcedRelease, Provider};
use futures::executor::block_on;
use support::{eventually, inspect, release, shared, take, wait};

/// The waiters' safety-net retry, far above the wake-up a forced release
/// must bring them.
const SLOW_POLLS: [(&str, &str); 2] = [("notifyPollIntervalMs", "10000"), ("pollIntervalMs", "10000")];

/// Runs `scenario` on two providers (two processes' connections) of one
/// fresh postgres schema.
fn on_postgres(scenario: impl FnOnce(&Backend, &Backend)) {
    let schema = postgres::Schema::fresh();
    let lines: String = SLOW_POLLS.iter().map(|(name, value)| format!("        {name}: {value}\n")).collect();
    let (a, b) = (schema.open(&lines), schema.open(&lines));
    scenario(&postgres::backend(&a), &postgres::backend(&b));
    close(a, b);
}

/// Runs `scenario` on two providers (two processes' connections) of one
/// fresh mysql table.
fn on_mysql(scenario: impl FnOnce(&Backend, &Backend)) {
    let table = mysql::Table::fresh();
    // `mysql::Table` drops the procedures it knows of; this one is newer.
    let _procedure = DropOnExit(format!("DROP PROCEDURE IF EXISTS `{}_force_release`", table.0));
    let fields: String = SLOW_POLLS.iter().map(|(name, value)| format!(", {name}: {value}")).collect();
    let yaml = mysql::yaml(&table.0, &fields);
    let (a, b) = (Provider::from_yaml(&yaml).unwrap(), Provider::from_yaml(&yaml).unwrap());
    scenario(&a.backend("shared").unwrap(), &b.backend("shared").unwrap());
    close(a, b);
}

/// Runs its statement on the test server when dropped.
struct DropOnExit(String);

impl Drop for DropOnExit {
    fn drop(&mut self) {
        let _ = mysql::try_rows(&self.0);
    }
}

fn close(a: Provider, b: Provider) {
    block_on(a.close());
    block_on(b.close());
}

fn force(backend: &Backend, key: &str) -> ForcedRelease {
    block_on(backend.force_release(key)).expect("force-released")
}

fn counted(weight: u32) -> AcquireOptions {
    AcquireOptions { limit: Some(3), weight: Some(weight), ..wait(0) }
}

/// A removed holder's release finds its lease lost.
fn release_is_lost(lease: dokebi_lock::Lease) {
    let err = block_on(lease.release()).expect_err("a removed holder releases nothing");
    assert_eq!(err.code(), ErrorCode::LeaseLost, "{err}");
}

/// True when `backend`'s process hears releases (postgres: its `LISTEN`;
/// mysql: its poller reads the log).
fn hears_releases(backend: &Backend) -> bool {
    let status = backend.status();
    status.postgres.is_some_and(|postgres| postgres.listening) || status.mysql.is_some_and(|mysql| mysql.polling)
}

fn a_held_key_is_freed_for_the_next_grant_above_the_forced_fence(holder: &Backend, other: &Backend) {
    let lease = take(holder, "plain", wait(0));
    let forced = force(other, "plain");
    assert_eq!((forced.backend.as_str(), forced.removed), ("shared", 1), "{forced:?}");
    let fence = forced.fence.expect("a store driver raises the fence");
    assert!(fence > lease.fence(), "the forced fence {fence} is above the holder's {}", lease.fence());
    assert!(!block_on(lease.renew()).unwrap(), "the removed holder's renewal finds its lease gone");
    release_is_lost(lease);
    let next = take(other, "plain", wait(0));
    assert!(next.fence() > fence, "the next grant's fence {} is above the forced {fence}", next.fence());
    release(next);
}

fn every_shared_holder_is_removed(holder: &Backend, other: &Backend) {
    let readers = [take(holder, "shared", shared(0)), take(holder, "shared", shared(0)), take(other, "shared", shared(0))];
    assert_eq!(inspect(other, "shared").held, 3);
    assert_eq!(force(other, "shared").removed, 3);
    let after = inspect(holder, "shared");
    assert!(!after.is_held() && after.held == 0 && after.holders.is_empty(), "{after:?}");
    // Released while still valid on the holders' own clocks: lost all the same.
    for lease in readers {
        release_is_lost(lease);
    }
}

fn a_counted_key_s_units_are_freed(holder: &Backend, other: &Backend) {
    let lease = take(holder, "counted", counted(2));
    let busy = block_on(other.acquire("counted", counted(3))).expect_err("3 units do not fit beside 2 of 3");
    assert_eq!(busy.code(), ErrorCode::LockBusy, "{busy}");
    assert_eq!(force(other, "counted").removed, 1);
    let all = take(other, "counted", counted(3));
    release(all);
    release_is_lost(lease);
}

fn a_free_key_s_fence_rises_all_the_same(holder: &Backend, other: &Backend) {
    let first = force(holder, "free");
    assert_eq!(first.removed, 0);
    let second = force(other, "free");
    assert_eq!(second.removed, 0);
    assert!(second.fence > first.fence, "{second:?} after {first:?}");
    let lease = take(holder, "free", wait(0));
    assert!(Some(lease.fence()) > second.fence, "granted {} after {second:?}", lease.fence());
    release(lease);
}

fn a_waiter_of_another_process_is_granted_at_once(holder: &Backend, waiter: &Backend) {
    let lease = take(holder, "k", wait(0));
    let waiting = {
        let waiter = waiter.clone();
        thread::spawn(move || {
            let granted = block_on(waiter.acquire("k", wait(10_000)));
            (granted, Instant::now())
        })
    };
    eventually("the waiter's mark shows", || inspect(holder, "k").waiting == 1);
    eventually("the waiter's process hears releases", || hears_releases(waiter));
    // The retry that hearing brought (a wake-up of every waiter) is over:
    // only the forced release's own wake-up is left to grant the waiter.
    thread::sleep(Duration::from_millis(300));
    let forced_at = Instant::now();
    let forced = force(holder, "k");
    assert_eq!(forced.removed, 1);
    let (granted, at) = waiting.join().unwrap();
    let granted = granted.expect("the waiter is granted");
    let after = at - forced_at;
    assert!(after < Duration::from_secs(2), "granted {after:?} after the forced release: told, not polled");
    assert!(Some(granted.fence()) > forced.fence, "granted {} after {forced:?}", granted.fence());
    release(granted);
    release_is_lost(lease);
}

#[test]
fn postgres_a_held_key_is_freed_for_the_next_grant_above_the_forced_fence() {
    on_postgres(a_held_key_is_freed_for_the_next_grant_above_the_forced_fence);
}

#[test]
fn postgres_every_shared_holder_is_removed() {
    on_postgres(every_shared_holder_is_removed);
}

#[test]
fn postgres_a_counted_key_s_units_are_freed() {
    on_postgres(a_counted_key_s_units_are_freed);
}

#[test]
fn postgres_a_free_key_s_fence_rises_all_the_same() {
    on_postgres(a_free_key_s_fence_rises_all_the_same);
}

#[test]
fn postgres_a_waiter_of_another_process_is_granted_at_once() {
    on_postgres(a_waiter_of_another_process_is_granted_at_once);
}

#[test]
fn mysql_a_held_key_is_freed_for_the_next_grant_above_the_forced_fence() {
    on_mysql(a_held_key_is_freed_for_the_next_grant_above_the_forced_fence);
}

#[test]
fn mysql_every_shared_holder_is_removed() {
    on_mysql(every_shared_holder_is_removed);
}

#[test]
fn mysql_a_counted_key_s_units_are_freed() {
    on_mysql(a_counted_key_s_units_are_freed);
}

#[test]
fn mysql_a_free_key_s_fence_rises_all_the_same() {
    on_mysql(a_free_key_s_fence_rises_all_the_same);
}

#[test]
fn mysql_a_waiter_of_another_process_is_granted_at_once() {
    on_mysql(a_waiter_of_another_process_is_granted_at_once);
}

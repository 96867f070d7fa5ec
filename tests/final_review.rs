//! Final review of the busy mapping (postgres, mysql), the renewal sent
//! again, and procedures 4: each test is a finding, against the machine's
//! servers, failing until it is fixed.

mod mysql;
mod support;

use std::time::Duration;

use dokebi_lock::{AcquireOptions, Backend, Provider};
use futures::executor::block_on;
use mysql::{count, yaml, Table};

fn wait(ms: u64) -> AcquireOptions {
    AcquireOptions { wait_timeout: Some(Duration::from_millis(ms)), ..AcquireOptions::default() }
}

fn open(table: &Table) -> (Provider, Backend) {
    let provider = Provider::from_yaml(&yaml(&table.0, "")).unwrap();
    let backend = provider.backend("shared").unwrap();
    (provider, backend)
}

/// A release of several keys hands them over to a waiter of this process
/// (`_hand_over`). The waiter's own try locked (so inserted) the row of a
/// key nobody held, `c`, which is left with `fence_until` 0; the release's
/// retention clean-up, in the same call, finds that row past its retention
/// and idle and deletes it, though the call itself locked it for the
/// waiter's grant; `_try` then reads no fence for `c` (NULL), its answer is
/// NULL, and so is the hand-over's whole answer row: the release, which
/// committed (and granted the waiter, without a key row for `c`), answers
/// OUTCOME_UNKNOWN ("unexpected answer from MySQL: no answer"). This is the
/// flaky `key_sets_in_opposite_orders_in_two_processes_never_deadlock_or_overlap`.
#[test]
fn a_hand_over_s_clean_up_never_deletes_a_key_row_the_same_call_grants() {
    let table = Table::fresh();
    let (_provider, backend) = open(&table);
    let held = block_on(backend.acquire_many(&["a", "b"], wait(0))).unwrap();
    let waiter = std::thread::spawn({
        let backend = backend.clone();
        move || block_on(backend.acquire_many(&["a", "c"], wait(10_000)))
    });
    let marks = format!("SELECT COUNT(*) FROM `{}_waiting`", table.0);
    support::eventually("the waiter left its mark on a", || count(&marks) == 1);
    std::thread::sleep(Duration::from_millis(200));
    let idle = format!("SELECT COUNT(*) FROM `{}` WHERE fence_until = 0", table.0);
    assert_eq!(count(&idle), 1, "the waiter's try left c's row with no retention");
    let released = block_on(held.release());
    let granted = waiter.join().unwrap();
    assert!(released.as_ref().is_ok_and(|all| *all), "the release was answered: {released:?}");
    let lease = granted.expect("the waiter is granted");
    assert!(lease.fences().iter().all(|(_, fence)| *fence > 0), "{:?}", lease.fences());
    let rows = format!("SELECT COUNT(*) FROM `{}`", table.0);
    assert_eq!(count(&rows), 3, "each granted key keeps its row (its fence counter)");
    assert!(block_on(lease.release()).unwrap());
}

/// The same clean-up, on the released key itself: a counted lease of this
/// process is released to a waiter of this process that never tried the
/// store (its turn came while our own lease kept the key full, so it napped
/// without a try, and left no mark). The key's row is past its retention
/// (here `fenceRetentionMs: 1`; by default any lease held over ten
/// minutes), so the release deletes it, counter and all, in the call that
/// then grants it to the waiter: the same NULL answer, OUTCOME_UNKNOWN for
/// a release that happened, and the waiter's grant made without a fence.
#[test]
fn a_counted_release_handed_to_a_waiter_that_never_tried_is_answered() {
    let table = Table::fresh();
    let provider = Provider::from_yaml(&yaml(&table.0, ", fenceRetentionMs: 1, pollIntervalMs: 10000, notifyPollIntervalMs: 10000")).unwrap();
    let backend = provider.backend("shared").unwrap();
    let counted = |ms| AcquireOptions { limit: Some(2), weight: Some(2), ..wait(ms) };
    let held = block_on(backend.acquire("pool", counted(0))).unwrap();
    let waiter = std::thread::spawn({
        let backend = backend.clone();
        move || block_on(backend.acquire("pool", counted(20_000)))
    });
    // The waiter naps (our lease keeps the key full): no try, no mark.
    std::thread::sleep(Duration::from_millis(300));
    let marks = format!("SELECT COUNT(*) FROM `{}_waiting`", table.0);
    assert_eq!(count(&marks), 0, "the waiter has not tried the store");
    let released = block_on(held.release());
    assert!(released.as_ref().is_ok_and(|all| *all), "the release was answered: {released:?}");
    let lease = waiter.join().unwrap().expect("the waiter is granted");
    let rows = format!("SELECT COUNT(*) FROM `{}`", table.0);
    assert_eq!(count(&rows), 1, "the granted key keeps its row (its fence counter)");
    assert!(block_on(lease.release()).unwrap());
}

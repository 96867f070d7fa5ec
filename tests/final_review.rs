//! Final review of the busy mapping (postgres, mysql), the renewal sent
//! again, and procedures 4: each test is a finding, against the machine's
//! servers, failing until it is fixed.

mod mysql;
mod postgres;
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
    let provider =
        Provider::from_yaml(&yaml(&table.0, ", fenceRetentionMs: 1, pollIntervalMs: 10000, notifyPollIntervalMs: 10000")).unwrap();
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

/// A waiting acquire's own try carries the waiters right behind it on its
/// key (followers), whose other keys it locks too; a row lock on such a key
/// now makes the whole call busy (1205), so the head, whose own key is
/// free, is told busy, tries again with the same follower, and waits as
/// long as that other key's row stays locked (here until its wait ends),
/// though nobody holds its key. Before, the same call failed it
/// (PROVIDER_FAILED); either way it is never granted while the row lock
/// lasts: a refused hand-over could try the head alone before waiting on.
#[test]
fn a_waiter_whose_key_is_free_is_granted_though_a_follower_s_other_key_is_row_locked() {
    let table = Table::fresh();
    let ((_one, a), (_other, b)) = (open(&table), open(&table));
    let counted = |ms| AcquireOptions { limit: Some(3), weight: Some(1), ..wait(ms) };
    let full = block_on(b.acquire("pool", AcquireOptions { weight: Some(3), ..counted(0) })).unwrap();
    let head = std::thread::spawn({
        let a = a.clone();
        move || {
            let started = std::time::Instant::now();
            block_on(a.acquire("pool", counted(6000))).map(|_lease| started.elapsed())
        }
    });
    let marks = format!("SELECT COUNT(*) FROM `{}_waiting`", table.0);
    support::eventually("the head left its mark", || count(&marks) == 1);
    let _follower = std::thread::spawn({
        let a = a.clone();
        move || block_on(a.acquire_many(&["pool", "z"], counted(6000))).map(|lease| block_on(lease.release()))
    });
    std::thread::sleep(Duration::from_millis(200));
    // Another session's transaction holds z's row for 8 s.
    let namespace = mysql::rows(&format!("SELECT HEX(ns) FROM `{}` LIMIT 1", table.0))[0][0].clone().unwrap();
    let mut locker = std::process::Command::new("mysql")
        .args(["-uroot", "-h127.0.0.1", "-P3306", "test", "-e"])
        .arg(format!(
            // Made or, when a try of the follower's made it first, locked by a no-op update.
            "BEGIN; INSERT INTO `{0}` (ns, k, fence, fence_until) VALUES (X'{namespace}', 'z', 0, 0) ON DUPLICATE KEY UPDATE fence = fence; DO SLEEP(8 + 0 * LENGTH('{0}')); ROLLBACK;",
            table.0
        ))
        .spawn()
        .unwrap();
    // This test's session only (its table in the text).
    let sleeping =
        format!("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE INFO LIKE 'DO SLEEP(8 + 0 * LENGTH(''{}''))%'", table.0);
    support::eventually("z's row is locked", || count(&sleeping) == 1);
    let freed = std::time::Instant::now();
    assert!(block_on(full.release()).unwrap());
    let waited = head.join().unwrap();
    let free_for = freed.elapsed();
    let _ = locker.wait();
    assert!(waited.is_ok(), "the head, whose key answered {free_for:?} after its key was freed, was refused: {waited:?}");
}

/// The same on PostgreSQL: the head's hand-over with its follower waits
/// out `lock_timeout` on the follower's other key (55P03), is answered
/// busy, and is sent again with the same follower until the head's wait
/// ends.
#[test]
fn a_postgres_waiter_whose_key_is_free_is_granted_though_a_follower_s_other_key_is_row_locked() {
    let schema = postgres::Schema::fresh();
    let (one, other) = (schema.open(""), schema.open(""));
    let (a, b) = (postgres::backend(&one), postgres::backend(&other));
    let counted = |ms| AcquireOptions { limit: Some(3), weight: Some(1), ..wait(ms) };
    let full = block_on(b.acquire("pool", AcquireOptions { weight: Some(3), ..counted(0) })).unwrap();
    let head = std::thread::spawn({
        let a = a.clone();
        move || block_on(a.acquire("pool", counted(6000))).map(|_lease| ())
    });
    let marks = format!("SELECT count(*) FROM {} WHERE lapses_at > now()", schema.table("_waiting"));
    postgres::eventually("the head left its mark", || postgres::count(&marks) == 1);
    let _follower = std::thread::spawn({
        let a = a.clone();
        move || block_on(a.acquire_many(&["pool", "z"], counted(6000))).map(|lease| block_on(lease.release()))
    });
    std::thread::sleep(Duration::from_millis(200));
    // Another session's transaction holds z's row for 8 s.
    let mut locker = std::process::Command::new("psql")
        .arg(postgres::url())
        .args(["-q", "-c"])
        .arg(format!(
            // Made or, when a try of the follower's made it first, locked by a no-op update.
            "BEGIN; INSERT INTO {keys} (namespace, key, fence, fence_until) SELECT namespace, 'z', 0, now() FROM {keys} LIMIT 1 ON CONFLICT (namespace, key) DO UPDATE SET fence = {keys}.fence; SELECT pg_sleep(8); ROLLBACK;",
            keys = schema.table("")
        ))
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // This test's session only (its schema's table in the text).
    let sleeping = format!(
        "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' AND query LIKE 'BEGIN; INSERT INTO {}%pg_sleep(8)%'",
        schema.table("")
    );
    postgres::eventually("z's row is locked", || postgres::count(&sleeping) == 1);
    let freed = std::time::Instant::now();
    assert!(block_on(full.release()).unwrap());
    let waited = head.join().unwrap();
    let free_for = freed.elapsed();
    let _ = locker.wait();
    assert!(waited.is_ok(), "the head, whose key answered {free_for:?} after its key was freed, was refused: {waited:?}");
}

//! Review R46 of 09854c5 + 00c5661 + c3fb52d (a give-back refused for a
//! row lock is sent once more; a release answered by the second attempt
//! that finds keys no longer held answers the first refusal).

mod mysql;
mod postgres;

use std::time::{Duration, Instant};

use dokebi_lock::{ErrorCode, Provider};
use futures::executor::block_on;

/// PostgreSQL, `commandTimeoutMs` 2000 (`lock_timeout` 1.5 s), `leaseMs`
/// 2100. A's lease runs out (`is_valid()` false) and another provider B
/// (another process) takes `k` over, fence higher: A's section overlapped
/// B's hold. Only then does A release, while a third session holds `k`'s
/// key row for 2.6 s: the first give-back is refused at 1.5 s, the second
/// gets the row at 2.6 s and finds A's token on no live row. Without the
/// row lock the release answers `LEASE_LOST` (and `status().lost` counts
/// it); 09854c5 answered `LEASE_LOST` here too. c3fb52d answers the first
/// refusal, `PROVIDER_FAILED` ("may have run out while the two waited"),
/// though the key was taken over before the release was called, and the
/// lost lease is counted nowhere.
#[test]
fn pg_a_release_after_another_owner_took_the_key_is_told_lost() {
    let schema = postgres::Schema::fresh();
    let yaml = schema.yaml("        leaseMs: 2100\n", "");
    let a = Provider::from_yaml(&yaml).unwrap();
    let b = Provider::from_yaml(&yaml).unwrap();
    let backend_a = postgres::backend(&a);
    let backend_b = postgres::backend(&b);
    let lease = block_on(backend_a.acquire("k", postgres::wait(0))).unwrap();
    std::thread::sleep(Duration::from_millis(2400));
    assert!(!lease.is_valid());
    let other = block_on(backend_b.acquire("k", postgres::wait(3000))).unwrap();
    assert!(other.fence() > lease.fence(), "B took k over");
    let script = format!("BEGIN; SELECT 1 FROM {} WHERE key = 'k' FOR UPDATE; SELECT pg_sleep(2.6); ROLLBACK;", schema.table(""));
    let mut locker = postgres::hold_in_background(&script);
    let lost_before = backend_a.status().lost;
    let started = Instant::now();
    let released = block_on(lease.release());
    let took = started.elapsed();
    let _ = locker.wait();
    let lost_after = backend_a.status().lost;
    eprintln!("pg release after {took:?}: {released:?}; status().lost {lost_before} -> {lost_after}");
    drop(other);
    block_on(b.close());
    block_on(a.close());
    let code = released.as_ref().err().map(|err| err.code());
    assert_eq!(
        (code, lost_after - lost_before),
        (Some(ErrorCode::LeaseLost), 1),
        "k was taken over by another owner before the release was called (release took {took:?}): {released:?}"
    );
}

/// The mysql twin: `commandTimeoutMs` 1400 (lock wait 1 s), `leaseMs`
/// 1500; B takes `k` over after A's lease ran out; a row lock held 1.6 s:
/// the first give-back is refused at 1 s, the second answers 0 at 1.6 s.
#[test]
fn mysql_a_release_after_another_owner_took_the_key_is_told_lost() {
    let table = mysql::Table::fresh();
    let yaml = format!(
        "schemaVersion: 1\noptions:\n  dokebi-mysql:\n    connections:\n      main: {{ url: '{}', commandTimeoutMs: 1400 }}\n  dokebi-lock:\n    backends:\n      shared: {{ driver: mysql, connection: main, table: {}, leaseMs: 1500 }}\n",
        mysql::url(),
        table.0
    );
    let a = Provider::from_yaml(&yaml).unwrap();
    let b = Provider::from_yaml(&yaml).unwrap();
    let backend_a = a.backend("shared").unwrap();
    let backend_b = b.backend("shared").unwrap();
    let lease = block_on(backend_a.acquire("k", postgres::wait(0))).unwrap();
    std::thread::sleep(Duration::from_millis(1800));
    assert!(!lease.is_valid());
    let other = block_on(backend_b.acquire("k", postgres::wait(3000))).unwrap();
    assert!(other.fence() > lease.fence(), "B took k over");
    let holder = mysql::hold_row_for(&table.0, 1600);
    let lost_before = backend_a.status().lost;
    let started = Instant::now();
    let released = block_on(lease.release());
    let took = started.elapsed();
    holder.join().unwrap();
    let lost_after = backend_a.status().lost;
    eprintln!("mysql release after {took:?}: {released:?}; status().lost {lost_before} -> {lost_after}");
    drop(other);
    block_on(b.close());
    block_on(a.close());
    let code = released.as_ref().err().map(|err| err.code());
    assert_eq!(
        (code, lost_after - lost_before),
        (Some(ErrorCode::LeaseLost), 1),
        "k was taken over by another owner before the release was called (release took {took:?}): {released:?}"
    );
}

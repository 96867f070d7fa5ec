//! Review of 09854c5 (a give-back refused for contention is sent once
//! more): what the second attempt does to a release's outcome and length.

mod mysql;
mod postgres;

use std::time::{Duration, Instant};

use dokebi_lock::{ErrorCode, Provider};
use futures::executor::block_on;

/// PostgreSQL, `commandTimeoutMs` 2000 (`lock_timeout` 1.5 s) and a
/// `leaseMs` of 2100, which the docs allow ("must be above the
/// connection's commandTimeoutMs"). A lease released 0.7 s after its grant
/// (valid for 1.4 s more) behind another session's row lock held 3 s: the
/// first give-back is refused at 2.2 s (nothing done), the second one,
/// sent at once, reads its clock after the lease expired (2.1 s) and
/// finds the row expired: the caller hears `LEASE_LOST` ("expired or was
/// taken over before release; the critical section may have overlapped
/// another holder"), though its section ended while the lease was valid
/// and no one else could hold the key meanwhile. Before 09854c5:
/// `PROVIDER_FAILED` at 2.2 s, nothing done.
#[test]
fn pg_a_release_called_well_within_the_lease_is_not_told_lost() {
    let schema = postgres::Schema::fresh();
    let provider = Provider::from_yaml(&schema.yaml("        leaseMs: 2100\n", "")).unwrap();
    let shared = postgres::backend(&provider);
    let lease = block_on(shared.acquire("k", postgres::wait(0))).unwrap();
    let granted = Instant::now();
    let script = format!("BEGIN; SELECT 1 FROM {} WHERE key = 'k' FOR UPDATE; SELECT pg_sleep(3); ROLLBACK;", schema.table(""));
    let mut locker = postgres::hold_in_background(&script);
    std::thread::sleep(Duration::from_millis(700).saturating_sub(granted.elapsed()));
    assert!(lease.is_valid());
    let started = Instant::now();
    let released = block_on(lease.release());
    let took = started.elapsed();
    let _ = locker.wait();
    block_on(provider.close());
    eprintln!("pg release after {took:?}: {released:?}");
    match released {
        Ok(true) => {}
        Err(err) => assert_ne!(err.code(), ErrorCode::LeaseLost, "after {took:?}: {err}"),
        Ok(false) => panic!("released twice?"),
    }
}

/// The mysql twin: `commandTimeoutMs` 1400 (lock wait 1 s), `leaseMs`
/// 1500, a row lock held 1.7 s: refused at 1 s, the second give-back gets
/// the row at 1.7 s, after the lease expired on the server (1.5 s).
#[test]
fn mysql_a_release_called_well_within_the_lease_is_not_told_lost() {
    let table = mysql::Table::fresh();
    let yaml = format!(
        "schemaVersion: 1\noptions:\n  dokebi-mysql:\n    connections:\n      main: {{ url: '{}', commandTimeoutMs: 1400 }}\n  dokebi-lock:\n    backends:\n      shared: {{ driver: mysql, connection: main, table: {}, leaseMs: 1500 }}\n",
        mysql::url(),
        table.0
    );
    let provider = Provider::from_yaml(&yaml).unwrap();
    let backend = provider.backend("shared").unwrap();
    let lease = block_on(backend.acquire("k", postgres::wait(0))).unwrap();
    let holder = mysql::hold_row_for(&table.0, 1700);
    assert!(lease.is_valid());
    let started = Instant::now();
    let released = block_on(lease.release());
    let took = started.elapsed();
    holder.join().unwrap();
    block_on(provider.close());
    match released {
        Ok(true) => {}
        Err(err) => assert_ne!(err.code(), ErrorCode::LeaseLost, "after {took:?}: {err}"),
        Ok(false) => panic!("released twice?"),
    }
}

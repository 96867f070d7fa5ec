//! The procedures against the server's settings: a key list that arrives
//! cut is never granted, procedures created in another `sql_mode` (which
//! they keep, whatever the caller's) are replaced, and so are older
//! versions (never newer ones), against the machine's MariaDB.

mod mysql;

use dokebi_lock::{AcquireOptions, Provider};
use futures::executor::block_on;
use mysql::{count, rows, try_rows, yaml, Table};

fn wait(ms: u64) -> AcquireOptions {
    AcquireOptions { wait_timeout: Some(std::time::Duration::from_millis(ms)), ..AcquireOptions::default() }
}

/// `table`'s procedures installed by a first acquire.
fn installed(table: &Table) -> Provider {
    let provider = Provider::from_yaml(&yaml(&table.0, "")).unwrap();
    let lease = block_on(provider.backend("shared").unwrap().acquire("k", wait(0))).unwrap();
    assert!(block_on(lease.release()).unwrap());
    provider
}

fn hex(text: &str) -> String {
    text.bytes().map(|byte| format!("{byte:02x}")).collect()
}

/// A server that cuts a too long argument instead of refusing it passes
/// `_take` fewer keys than the driver sent: the call says how many it
/// sent, and one that finds fewer is refused, nothing granted.
#[test]
fn a_key_list_that_arrives_cut_is_rolled_back_not_granted_in_part() {
    let table = Table::fresh();
    let _provider = installed(&table);
    let (ns, keys) = (hex("dokebi-lock"), format!("{},{}", hex("a"), hex("b")));
    let call = |count: usize| format!("CALL `{}_take`(X'{ns}', '{keys}', 'cafe', 0, 1, 1, 60000, 0, 0, 1000, {count}, 2)", table.0);
    let refused = try_rows(&call(3)).expect_err("a call of 2 keys that says 3 was answered");
    assert!(refused.to_string().contains("a key list arrived cut short"), "{refused}");
    let held = format!("SELECT COUNT(*) FROM `{}_holders` WHERE token = 'cafe'", table.0);
    assert_eq!(count(&held), 0, "a refused call left holder rows");
    // The same call with the right count grants both keys.
    assert_eq!(rows(&call(2))[0][0].as_deref().map(|answer| answer.split(',').count()), Some(3));
    assert_eq!(count(&held), 2);
}

/// Procedures of this version created in another `sql_mode` (by a DBA's
/// session, or before the driver set its own) are not current: the next
/// process replaces them, and they run in the driver's mode again.
#[test]
fn procedures_created_in_another_sql_mode_are_replaced() {
    let table = Table::fresh();
    drop(installed(&table));
    let name = format!("{}_try", table.0);
    let create = rows(&format!("SHOW CREATE PROCEDURE `{name}`"))[0][2].clone().expect("the CREATE PROCEDURE of _try");
    try_rows(&format!("SET SESSION sql_mode = 'EMPTY_STRING_IS_NULL'; DROP PROCEDURE `{name}`; {create}")).unwrap();
    let mode = format!("SELECT SQL_MODE FROM information_schema.ROUTINES WHERE ROUTINE_SCHEMA = DATABASE() AND ROUTINE_NAME = '{name}'");
    assert_eq!(rows(&mode)[0][0].as_deref(), Some("EMPTY_STRING_IS_NULL"));
    let (one, other) = (installed(&table), Provider::from_yaml(&yaml(&table.0, "")).unwrap());
    assert_eq!(rows(&mode)[0][0].as_deref(), Some("STRICT_ALL_TABLES,NO_ENGINE_SUBSTITUTION"));
    let first = block_on(one.backend("shared").unwrap().acquire("k", wait(0)));
    let second = block_on(other.backend("shared").unwrap().acquire("k", wait(0)));
    assert!(first.is_ok() && second.is_err(), "first: {:?}, second: {:?}", first.is_ok(), second.is_ok());
}

/// A procedure of an older version (as a process from before the last
/// change of the procedures left it) is replaced by the next process; one
/// of a newer version never is: an older process refuses to call it, so
/// two versions' processes never put their procedures back over each
/// other's.
#[test]
fn older_procedures_are_replaced_and_newer_ones_never() {
    let table = Table::fresh();
    drop(installed(&table));
    let name = format!("{}_take", table.0);
    let comment = || {
        let sql = format!(
            "SELECT ROUTINE_COMMENT FROM information_schema.ROUTINES WHERE ROUTINE_SCHEMA = DATABASE() AND ROUTINE_NAME = '{name}'"
        );
        rows(&sql)[0][0].clone().unwrap_or_default()
    };
    let ours = comment();
    let older = format!("dokebi-lock procedures {}", ours.rsplit(' ').next().unwrap().parse::<u32>().unwrap() - 1);
    rows(&format!("ALTER PROCEDURE `{name}` COMMENT '{older}'"));
    drop(installed(&table));
    assert_eq!(comment(), ours, "the older procedure was replaced");
    rows(&format!("ALTER PROCEDURE `{name}` COMMENT 'dokebi-lock procedures 99'"));
    let provider = Provider::from_yaml(&yaml(&table.0, "")).unwrap();
    let err = block_on(provider.backend("shared").unwrap().acquire("k", wait(0))).unwrap_err();
    assert!(err.to_string().contains("newer"), "{err}");
    assert_eq!(comment(), "dokebi-lock procedures 99", "the newer procedure stays");
}

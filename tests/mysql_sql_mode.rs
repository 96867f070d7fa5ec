//! The procedures against the server's settings: a key list that arrives
//! cut is never granted, procedures created in another `sql_mode` (which
//! they keep, whatever the caller's) are replaced, and so are older
//! versions (never newer ones), whose holders table gets its `fence`
//! column, against the machine's MariaDB.

mod mysql;

use dokebi_lock::{AcquireOptions, ErrorCode, Provider};
use futures::executor::block_on;
use mysql::{count, rows, try_rows, url, yaml, Table};

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

/// An install of procedures 10, whose holders table has no `fence` column,
/// serving a lease an older driver granted: a driver of this version reads
/// it before installing anything (`inspect` installs nothing: every fence
/// unknown); its first acquire adds the column and replaces the older
/// procedures; so does the script of `autoCreate: false`, run twice (the
/// `mysql` client, as a DBA would). The older lease keeps holding, without
/// a fence or a time held; every grant from then on keeps its fence, the
/// older lease's slot too once it is taken again.
#[test]
fn a_holders_table_of_procedures_10_gets_its_fence_column_and_keeps_its_leases() {
    for by_script in [false, true] {
        let table = Table::fresh();
        drop(installed(&table));
        let name = format!("{}_take", table.0);
        let holders = format!("`{}_holders`", table.0);
        let now = "TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6))";
        rows(&format!("ALTER TABLE {holders} DROP COLUMN fence"));
        rows(&format!("ALTER PROCEDURE `{name}` COMMENT 'dokebi-lock procedures 10'"));
        rows(&format!("INSERT INTO `{}` VALUES ('dokebi-lock', 'old', 5, {now} + 3600000000)", table.0));
        rows(&format!(
            "INSERT INTO {holders} (ns, k, slot, token, shared, lim, weight, expires_at) VALUES ('dokebi-lock', 'old', 0, 'older-driver', 0, 1, 1, {now} + 60000000)"
        ));
        let has_fences = || {
            count(&format!(
                "SELECT COUNT(*) FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = '{}_holders' AND COLUMN_NAME = 'fence'",
                table.0
            )) == 1
        };
        let fields = if by_script { ", autoCreate: false" } else { "" };
        let provider = Provider::from_yaml(&yaml(&table.0, fields)).unwrap();
        let backend = provider.backend("shared").unwrap();
        let older = |what: &str| {
            let seen = block_on(backend.inspect("old")).unwrap_or_else(|err| panic!("{what}: {err}"));
            assert_eq!(seen.held, 1, "{what}: {seen:?}");
            let holder = &seen.holders[0];
            assert_eq!((holder.fence, holder.held_for, holder.label.as_deref()), (None, None, None), "{what}: {seen:?}");
        };
        older("read before the upgrade");
        assert!(!has_fences(), "inspect installed nothing");
        if by_script {
            let refused = block_on(backend.acquire("old", wait(0))).unwrap_err();
            assert_eq!(refused.code(), ErrorCode::ProviderFailed, "{refused}");
            let script = refused.fix().split_once('\n').expect("a script after its first line").1.to_owned();
            for run in 0..2 {
                let mut client = std::process::Command::new("mysql")
                    .args(["-uroot", "-h127.0.0.1", "-P3306", "test"])
                    .stdin(std::process::Stdio::piped())
                    .spawn()
                    .unwrap();
                std::io::Write::write_all(&mut client.stdin.take().unwrap(), script.as_bytes()).unwrap();
                assert!(client.wait().unwrap().success(), "run {run} of the script failed");
                assert!(has_fences(), "run {run} of the script");
            }
        }
        let busy = block_on(backend.acquire("old", wait(0))).unwrap_err();
        assert_eq!(busy.code(), ErrorCode::LockBusy, "the older driver's lease still holds: {busy}");
        assert!(has_fences(), "the column was added");
        let version = rows(&format!(
            "SELECT ROUTINE_COMMENT FROM information_schema.ROUTINES WHERE ROUTINE_SCHEMA = DATABASE() AND ROUTINE_NAME = '{name}'"
        ))[0][0]
            .clone();
        assert_eq!(version.as_deref(), Some("dokebi-lock procedures 11"));
        older("read after the upgrade");
        let other = block_on(backend.acquire("j", wait(0))).unwrap();
        let seen = block_on(backend.inspect("j")).unwrap();
        assert_eq!(seen.holders[0].fence, Some(other.fence()), "{seen:?}");
        assert!(seen.holders[0].held_for.is_some(), "{seen:?}");
        // The older lease runs out; its slot is the next grant's, with its fence.
        rows(&format!("UPDATE {holders} SET expires_at = {now} - 1000000 WHERE token = 'older-driver'"));
        let next = block_on(backend.acquire("old", wait(0))).expect("the lapsed lease's slot is free");
        assert!(next.fence() > 5);
        let kept = rows(&format!("SELECT slot, fence FROM {holders} WHERE k = 'old'"));
        assert_eq!(kept, [[Some("0".to_owned()), Some(next.fence().to_string())]], "the slot was taken over with its grant's fence");
        assert!(block_on(next.release()).unwrap() && block_on(other.release()).unwrap());
        block_on(provider.close());
    }
}

/// The first start of procedures 11 on an older install by a user without
/// the `ALTER` privilege: refused, naming the privilege, before anything
/// was replaced (the older procedures, and the processes calling them, go
/// on); once granted it, the next acquire upgrades.
#[test]
fn an_upgrade_without_the_alter_privilege_is_refused_before_anything_is_replaced() {
    let table = Table::fresh();
    drop(installed(&table));
    let name = format!("{}_take", table.0);
    rows(&format!("ALTER TABLE `{}_holders` DROP COLUMN fence", table.0));
    rows(&format!("ALTER PROCEDURE `{name}` COMMENT 'dokebi-lock procedures 10'"));
    let user = format!("dokebi_{}", table.0);
    let _ = try_rows(&format!("DROP USER IF EXISTS '{user}'@'%'"));
    rows(&format!("CREATE USER '{user}'@'%' IDENTIFIED BY 'pw-secret-2'"));
    rows(&format!("GRANT SELECT, INSERT, UPDATE, DELETE, EXECUTE, CREATE, CREATE ROUTINE, ALTER ROUTINE ON test.* TO '{user}'@'%'"));
    let limited = url().replacen("mysql://root@", &format!("mysql://{user}:pw-secret-2@"), 1);
    let provider = Provider::from_yaml(&yaml(&table.0, "").replace(&url(), &limited)).unwrap();
    let refused = block_on(provider.backend("shared").unwrap().acquire("k", wait(0)));
    let comment = rows(&format!(
        "SELECT ROUTINE_COMMENT FROM information_schema.ROUTINES WHERE ROUTINE_SCHEMA = DATABASE() AND ROUTINE_NAME = '{name}'"
    ))[0][0]
        .clone();
    rows(&format!("GRANT ALTER ON test.* TO '{user}'@'%'"));
    let upgraded = block_on(provider.backend("shared").unwrap().acquire("k", wait(0)));
    let released = upgraded.as_ref().map(|lease| block_on(lease.release()).unwrap());
    block_on(provider.close());
    let _ = try_rows(&format!("DROP USER IF EXISTS '{user}'@'%'"));
    let err = refused.expect_err("an upgrade without ALTER");
    assert_eq!(err.code(), ErrorCode::ProviderFailed, "{err}");
    let text = format!("{err} {}", err.fix());
    assert!(text.contains("lacks a privilege") && text.contains("ALTER"), "{text}");
    assert_eq!(comment.as_deref(), Some("dokebi-lock procedures 10"), "nothing replaced");
    assert!(released.expect("upgraded once granted ALTER"), "released");
}

//! Review R45 of 09854c5 + 00c5661 (a give-back refused for contention is
//! sent once more; the second attempt only turns a refusal into a release).

mod mysql;
mod postgres;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use dokebi_lock::{AcquireOptions, ErrorCode, Provider};
use futures::executor::block_on;

/// PostgreSQL, `commandTimeoutMs` 2000 (`lock_timeout` 1.5 s). Another
/// session keeps `k`'s key row locked for 2.8 s; an acquire of `k` waits
/// at most 2.5 s; its try, waiting for that row, has its session ended
/// (`pg_terminate_backend`) at once: lost with its connection, so
/// `cleaned_up_after` gives the token back before trying again. That
/// give-back waits out the same row lock and is refused at ~1.6 s; its
/// second attempt gets the row at 2.8 s and answers 0 freed (the lost try
/// granted nothing): a confirmed give-back. 00c5661 reads "fewer freed than
/// the claim has" after a refusal as the first refusal (`Contended`), so
/// the loop pauses, the wait ended meanwhile, and the acquire answers
/// `OUTCOME_UNKNOWN` (and schedules a clean-up), where the doc of
/// `cleaned_up_after` says a give-back that answered while the wait ended
/// fails "as the wait's end says (WAIT_TIMEOUT: nothing is held)". Before
/// 09854c5 the second give-back (sent a poll interval after the refusal)
/// answered at 2.8 s and the acquire answered `WAIT_TIMEOUT`.
#[test]
fn pg_a_lost_try_given_back_by_a_second_attempt_is_not_outcome_unknown() {
    let schema = postgres::Schema::fresh();
    let provider = Provider::from_yaml(&schema.yaml("", "")).unwrap();
    let backend = postgres::backend(&provider);
    // k's rows exist, free.
    assert!(block_on(block_on(backend.acquire("k", postgres::wait(0))).unwrap().release()).unwrap());
    let keys = schema.table("");
    let script = format!("BEGIN; SELECT fence FROM {keys} WHERE key = 'k' FOR UPDATE; SELECT pg_sleep(2.8); ROLLBACK;");
    let mut locker = postgres::hold_in_background(&script);
    let locked = Instant::now();
    let waiting = format!(
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%{}%' AND query NOT LIKE 'BEGIN;%'",
        schema.0
    );
    let killer = std::thread::spawn(move || {
        postgres::eventually("the waiter's try waits for k's row and is ended", || postgres::count(&waiting) == 1);
        locked.elapsed()
    });
    let options = AcquireOptions { wait_timeout: Some(Duration::from_millis(2500)), ..AcquireOptions::default() };
    let acquired = block_on(backend.acquire("k", options));
    let answered = locked.elapsed();
    let killed = killer.join().unwrap();
    let _ = locker.wait();
    let code = acquired.as_ref().err().map(|err| err.code());
    eprintln!("pg: try ended at {killed:?}; acquire answered after {answered:?}: {:?}", acquired.as_ref().map(|l| l.fence()));
    // Nothing is held by the acquire's token: the give-back said so.
    let held = postgres::count(&format!("SELECT count(*) FROM {} WHERE expires_at > clock_timestamp()", schema.table("_holders")));
    eprintln!("pg: live holder rows afterwards: {held}");
    drop(acquired);
    block_on(provider.close());
    assert_ne!(
        code,
        Some(ErrorCode::OutcomeUnknown),
        "the give-back after the lost try answered (0 freed: nothing held) before the wait ended, yet the acquire answered OUTCOME_UNKNOWN after {answered:?}"
    );
}

/// The mysql twin: `commandTimeoutMs` 2000 (lock wait 1 s); the row is
/// locked 1.9 s; the acquire waits at most 1.6 s; its try's connection is
/// killed while it waits for the row. The give-back is refused at ~1.1 s,
/// its second attempt answers 0 at 1.9 s, read as the refusal.
#[test]
fn mysql_a_lost_try_given_back_by_a_second_attempt_is_not_outcome_unknown() {
    let table = mysql::Table::fresh();
    let provider = Provider::from_yaml(&mysql::yaml(&table.0, "")).unwrap();
    let backend = provider.backend("shared").unwrap();
    assert!(block_on(block_on(backend.acquire("k", postgres::wait(0))).unwrap().release()).unwrap());
    let namespace = mysql::rows(&format!("SELECT HEX(ns) FROM `{}` LIMIT 1", table.0))[0][0].clone().unwrap();
    let mut locker = Command::new("mysql")
        .args(["-uroot", "-h127.0.0.1", "-P3306", "test", "-e"])
        .arg(format!(
            "BEGIN; SELECT fence FROM `{0}` WHERE ns = X'{namespace}' AND k = 'k' FOR UPDATE; DO SLEEP(1.9 + 0 * LENGTH('{0}')); ROLLBACK;",
            table.0
        ))
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let sleeping =
        format!("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE INFO LIKE 'DO SLEEP(1.9 + 0 * LENGTH(''{}''))%'", table.0);
    while mysql::count(&sleeping) == 0 {
        std::thread::sleep(Duration::from_millis(5));
    }
    let locked = Instant::now();
    let waiting =
        format!("SELECT ID FROM information_schema.PROCESSLIST WHERE INFO LIKE 'INSERT INTO `{}` %' AND STATE = 'Update'", table.0);
    let killer = std::thread::spawn(move || loop {
        if let Some(id) = mysql::rows(&waiting).first().and_then(|row| row[0].clone()) {
            let _ = mysql::try_rows(&format!("KILL {id}"));
            return locked.elapsed();
        }
        std::thread::sleep(Duration::from_millis(5));
    });
    let options = AcquireOptions { wait_timeout: Some(Duration::from_millis(1600)), ..AcquireOptions::default() };
    let acquired = block_on(backend.acquire("k", options));
    let answered = locked.elapsed();
    let killed = killer.join().unwrap();
    let _ = locker.wait();
    let code = acquired.as_ref().err().map(|err| err.code());
    eprintln!("mysql: try killed at {killed:?}; acquire answered after {answered:?}: {:?}", acquired.as_ref().map(|l| l.fence()));
    drop(acquired);
    block_on(provider.close());
    assert_ne!(
        code,
        Some(ErrorCode::OutcomeUnknown),
        "the give-back after the lost try answered (0 freed: nothing held) before the wait ended, yet the acquire answered OUTCOME_UNKNOWN after {answered:?}"
    );
}

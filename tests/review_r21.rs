//! Review r21: probes of 8ac64d7 (a release of a kinds lease that waits for
//! the head's try in flight holds that head's next try back until its own
//! call answers) against PostgreSQL and MariaDB.
//!
//! Finding: a head whose try was lost with its connection (a session
//! terminated while the try waited for a row lock) gives its token back
//! and goes on with its request still `Trying` (by design, see
//! `cleaned_up_after`), then waits in `begin_try` for `let_go`. A release
//! that saw that try in flight holds the head back and waits for
//! `untried`, which only an `end_try` (or the acquire's end) tells: each
//! waits for the other until the head's wait timeout. The release hangs
//! the whole wait timeout, and the head fails `WAIT_TIMEOUT` though the
//! release frees the key. Both tests pass on 8ac64d7's parent (2.9 s) and
//! failed on 8ac64d7 (the release answered after about 15 s, `LEASE_LOST`
//! as the lease expired meanwhile). Fixed: a head whose try still counts as
//! in flight is not held back (`Request::let_go`).
//!
//! Read but not run: single tries have no request (never held back); an
//! abort, wait timeout or close of a held-back head ends it through
//! `give_up`, whose `leave` also wakes a release waiting in `untried`; a
//! held-back head is `Open`, so another release takes it into its call,
//! and its grant is picked up after `let_go`; Redis never counts a try as
//! lost with its connection, so this path does not arise there.

mod mysql;
mod postgres;

use std::time::{Duration, Instant};

use dokebi_lock::{AcquireOptions, Provider};
use futures::executor::block_on;

/// `units` of a key counted to 2, waiting at most `ms`.
fn counted(units: u32, ms: u64) -> AcquireOptions {
    AcquireOptions { wait_timeout: Some(Duration::from_millis(ms)), limit: Some(2), weight: Some(units), ..AcquireOptions::default() }
}

/// This process holds both units of `k` (counted to 2) and waits for one
/// (`h`, up to 15 s); another session locks `k`'s holder rows, so `h`'s
/// try waits for them. While it does, the lease is released (the release
/// sees `h` trying: it holds `h` back and waits for its try), and `h`'s
/// server session is terminated (its try is lost with its connection).
/// The other session ends 1.5 s later. The release should answer within
/// a few seconds and `h` be granted; on 8ac64d7 the release waits until
/// `h`'s wait runs out (15 s) and `h` fails `WAIT_TIMEOUT`.
#[test]
fn postgres_release_and_head_after_a_lost_try_do_not_wait_for_each_other() {
    let schema = postgres::Schema::fresh();
    let one = Provider::from_yaml(&postgres::yaml_on(&postgres::url(), &schema.0, "        pollIntervalMs: 50\n", "")).unwrap();
    let backend = one.backend("shared").unwrap();
    // k's holder rows exist.
    assert!(block_on(block_on(backend.acquire("k", counted(2, 0))).unwrap().release()).unwrap());
    let lease = block_on(backend.acquire("k", counted(2, 0))).unwrap();
    let holders = schema.table("_holders");
    let keys = schema.table("");
    let script = format!(
        "BEGIN; SELECT slot FROM {holders} WHERE key = 'k' FOR UPDATE; SELECT 1 FROM {keys} WHERE key = 'k' FOR UPDATE; SELECT pg_sleep(2.5); ROLLBACK;"
    );
    let mut locker = postgres::hold_in_background(&script);
    let h = {
        let backend = backend.clone();
        std::thread::spawn(move || {
            let started = Instant::now();
            let outcome = block_on(backend.acquire("k", counted(1, 15_000)));
            let took = started.elapsed();
            (outcome.map(|lease| block_on(lease.release())).map_err(|err| format!("{:?}: {err}", err.code())), took)
        })
    };
    let waiting = format!(
        "SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%{}%' AND query NOT LIKE 'BEGIN;%'",
        schema.0
    );
    let activity = format!("SELECT count(*) FROM pg_stat_activity WHERE query LIKE '%{}%'", schema.0);
    postgres::eventually(&format!("h's try waits for the row lock ({} sessions)", postgres::count(&activity)), || {
        !postgres::rows(&waiting).is_empty()
    });
    let release = std::thread::spawn(move || {
        let started = Instant::now();
        let released = block_on(lease.release()).map_err(|err| format!("{err:?}"));
        (released, started.elapsed())
    });
    std::thread::sleep(Duration::from_millis(200));
    let terminated = postgres::count(&format!(
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%{}%' AND query NOT LIKE 'BEGIN;%'",
        schema.0
    ));
    assert_eq!(terminated, 1, "h's waiting session");
    let (released, release_took) = release.join().unwrap();
    let (acquired, h_took) = h.join().unwrap();
    let _ = locker.wait();
    assert!(
        released == Ok(true) && release_took < Duration::from_secs(6) && acquired.is_ok(),
        "the release answered {released:?} after {release_took:?}; h ended with {acquired:?} after {h_took:?}"
    );
}

/// [`postgres_release_and_head_after_a_lost_try_do_not_wait_for_each_other`]
/// on MariaDB, the lease holding one unit of `k` (a try refused by its
/// plain read does not wait for the rows): `h`'s session is killed
/// (`KILL`) while its try waits for `k`'s rows, which another session locks
/// for 2.5 s (`leaseMs` 5000, so the held-up release also answers
/// `LEASE_LOST`).
#[test]
fn mysql_release_and_head_after_a_lost_try_do_not_wait_for_each_other() {
    // Should `h`'s try not be seen in flight while the rows are locked,
    // the setup is run again.
    for _ in 0..4 {
        if let Some((released, release_took, acquired, h_took)) = mysql_lost_try_while_released() {
            assert!(
                released == Ok(true) && release_took < Duration::from_secs(6) && acquired.is_ok(),
                "the release answered {released:?} after {release_took:?}; h ended with {acquired:?} after {h_took:?}"
            );
            return;
        }
    }
    panic!("h's try was never seen waiting for k's rows");
}

/// What the release answered and when, and what `h` ended with and when
/// (`h`'s outcome an error string); `None` when `h`'s try was not seen
/// waiting for the locked rows.
type Probe = (Result<bool, String>, Duration, Result<Result<bool, dokebi_lock::LockError>, String>, Duration);

/// One run of [`mysql_release_and_head_after_a_lost_try_do_not_wait_for_each_other`].
fn mysql_lost_try_while_released() -> Option<Probe> {
    let table = mysql::Table::fresh();
    let one = Provider::from_yaml(&mysql::yaml(&table.0, ", pollIntervalMs: 50")).unwrap();
    let backend = one.backend("shared").unwrap();
    assert!(block_on(block_on(backend.acquire("k", counted(2, 0))).unwrap().release()).unwrap());
    // One unit: `h`'s try (one unit) is not refused by a plain read, it
    // locks k's rows.
    let lease = block_on(backend.acquire("k", counted(1, 0))).unwrap();
    let t = &table.0;
    let mut locker = std::process::Command::new("mysql")
        .args(["-uroot", "-h127.0.0.1", "-P3306", "test", "-e"])
        .arg(format!(
            "BEGIN; SELECT slot FROM `{t}_holders` WHERE k = 'k' FOR UPDATE; SELECT 1 FROM `{t}` WHERE k = 'k' FOR UPDATE; DO SLEEP(2.5 + 0 * LENGTH('{t}')); ROLLBACK;"
        ))
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let sleeping = format!("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE INFO LIKE 'DO SLEEP(2.5 + 0 * LENGTH(''{t}''))%'");
    while mysql::count(&sleeping) == 0 {
        std::thread::sleep(Duration::from_millis(10));
    }
    let h = {
        let backend = backend.clone();
        std::thread::spawn(move || {
            let started = Instant::now();
            let outcome = block_on(backend.acquire("k", counted(1, 15_000)));
            let took = started.elapsed();
            (outcome.map(|lease| block_on(lease.release())).map_err(|err| format!("{:?}: {err}", err.code())), took)
        })
    };
    // h's call in flight while k's rows are locked: its try, waiting for them.
    let waiting = format!(
        "SELECT ID FROM information_schema.PROCESSLIST WHERE INFO LIKE '%{t}%' AND INFO NOT LIKE '%SLEEP%' AND INFO NOT LIKE '%PROCESSLIST%'"
    );
    let mut session = None;
    for _ in 0..1000 {
        if let Some(row) = mysql::rows(&waiting).into_iter().next() {
            session = row[0].clone();
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let Some(session) = session else {
        let started = Instant::now();
        let released = block_on(lease.release());
        let took = started.elapsed();
        let h = h.join().unwrap();
        eprintln!("missed: the release answered {released:?} after {took:?}; h ended with {:?} after {:?}", h.0, h.1);
        let _ = locker.wait();
        return None;
    };
    let release = std::thread::spawn(move || {
        let started = Instant::now();
        let released = block_on(lease.release()).map_err(|err| format!("{err:?}"));
        (released, started.elapsed())
    });
    std::thread::sleep(Duration::from_millis(100));
    mysql::try_rows(&format!("KILL {session}")).unwrap();
    let (released, release_took) = release.join().unwrap();
    let (acquired, h_took) = h.join().unwrap();
    let _ = locker.wait();
    Some((released, release_took, acquired, h_took))
}

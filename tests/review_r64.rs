//! Review R64 of each holder's own fence in the SQL drivers (issue 53:
//! postgres functions 13, mysql procedures 11): attacks on exclusion and
//! fences through every grant path, on what inspect shows, and on the
//! upgrade from the previous build (commit 162db9e: functions 12,
//! procedures 10), with that build's SQL read with `git show` and run as
//! a process of that build would run it.
//!
//! Findings (each failed first; none failed at 162db9e, where no row kept
//! a fence and an upgrade of slotted tables ran no `ALTER`):
//! - fixed: `r64_pg_an_upgrade_behind_a_reader_of_holders_gives_up_and_holds_nobody_up`,
//!   `r64_mysql_an_upgrade_behind_a_reader_of_holders_gives_up_and_holds_nobody_up`
//!   (the upgrade's lock wait bounded, and not tried again for 2 s), and
//!   `r64_pg_the_dba_script_beside_an_installer_waits_for_it`;
//! - known, ignored: `r64_pg_an_old_take_in_flight_across_the_upgrade_shows_anothers_fence`,
//!   `r64_mysql_an_old_take_in_flight_across_the_upgrade_shows_anothers_fence`
//!   (inspect only), and
//!   `r64_pg_a_holders_table_without_its_column_beside_functions_13_is_never_repaired`
//!   (a repair case; the class, a check of the version only, predates it).
//!
//! The rest are attacks that held.

mod builds;
mod mysql;
mod postgres;
mod support;

use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use builds::{constant, source_at};
use dokebi_lock::{AcquireOptions, Backend, ErrorCode, LockKind, LockMode, Provider};
use futures::executor::block_on;
use support::{inspect, labelled, release, take, wait};

/// The last commit before each holder row kept its fence.
const PREVIOUS_BUILD: &str = "162db9e21839c120d163b06fc284fe4c666478a3";

/// The previous build's `Table::create_sql` for table `dokebi_lock` of
/// `schema` (functions 12), as that build wrote it.
fn pg_previous_create_sql(schema: &str) -> String {
    let src = source_at(PREVIOUS_BUILD, "src/postgres/schema.rs");
    let name = |suffix: &str| format!("\"{schema}\".\"dokebi_lock{suffix}\"");
    let c = |n: &str| constant(&src, n);
    assert_eq!(c("VERSION"), "dokebi-lock functions 12");
    let mut sql = format!("CREATE SCHEMA IF NOT EXISTS \"{schema}\";\n");
    sql += &c("TABLES")
        .replace("{keys}", &name(""))
        .replace("{holders}", &name("_holders"))
        .replace("{waiting}", &name("_waiting"))
        .replace("{fence_index}", "\"dokebi_lock_fence_until\"");
    sql += &c("FUNCTIONS")
        .replace("{keys}", &name(""))
        .replace("{holders}", &name("_holders"))
        .replace("{waiting}", &name("_waiting"))
        .replace("{take}", &name("_take"))
        .replace("{renew}", &name("_renew"))
        .replace("{held_against}", &name("_held_against"))
        .replace("{give_back}", &name("_give_back"))
        .replace("{withdraw}", &name("_withdraw"))
        .replace("{hand_over}", &name("_hand_over"))
        .replace("{lock_keys}", &name("_lock_keys"))
        .replace("{force_release}", &name("_force_release"))
        .replace("{read_committed}", &c("READ_COMMITTED"))
        .replace("{durable}", &c("DURABLE"))
        .replace("{lock_timeout}", &c("LOCK_TIMEOUT"))
        .replace("{take_arguments}", &c("TAKE_ARGUMENTS"))
        .replace("{dead}", &c("DEAD"));
    sql += &format!("COMMENT ON FUNCTION {}({}) IS '{}';\n", name("_take"), c("TAKE_ARGUMENTS"), c("VERSION"));
    sql
}

/// The server's answer to `sql` (one statement, its first row's first
/// column) on a connection of its own, or its error, within `bound`
/// (`None`: no answer by then; the statement runs on).
fn pg_try_within<T>(sql: &str, bound: Duration) -> Option<Result<T, String>>
where
    T: for<'a> tokio_postgres::types::FromSql<'a> + Send + 'static,
{
    let (sent, answer) = mpsc::channel();
    let sql = sql.to_owned();
    thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let outcome = runtime.block_on(async {
            let (client, connection) = tokio_postgres::connect(&postgres::url(), tokio_postgres::NoTls).await.map_err(|e| e.to_string())?;
            tokio::spawn(connection);
            let rows = client.query(sql.as_str(), &[]).await.map_err(|e| format!("{e}: {:?}", e.as_db_error().map(|d| d.message())))?;
            rows[0].try_get::<_, T>(0).map_err(|e| e.to_string())
        });
        let _ = sent.send(outcome);
    });
    answer.recv_timeout(bound).ok()
}

fn pg_take_sql(schema: &postgres::Schema, keys: &[&str], token: &str, lease_ms: i64, lock_wait_ms: i64) -> String {
    let keys: Vec<String> = keys.iter().map(|k| format!("'{k}'")).collect();
    format!(
        "SELECT {}('dokebi-lock', ARRAY[{}]::text[], '{token}', false, 1, 1, {lease_ms}::bigint, 0::bigint, 0::bigint, 3600000::bigint, {lock_wait_ms}::bigint)",
        schema.table("_take"),
        keys.join(", ")
    )
}

fn pg_version(schema: &postgres::Schema) -> String {
    let sig = "text, text[], text, boolean, integer, integer, bigint, bigint, bigint, bigint, bigint";
    postgres::rows(&format!("SELECT obj_description('{}({sig})'::regprocedure, 'pg_proc')", schema.table("_take")))[0].get(0)
}

/// Cancels the background session sleeping with `marker` in its query.
fn pg_cancel_sleeper(marker: &str) {
    postgres::count(&format!(
        "SELECT count(pg_cancel_backend(pid)) FROM pg_stat_activity WHERE wait_event = 'PgSleep' AND query LIKE '%{marker}%' AND pid <> pg_backend_pid()"
    ));
}

// ---------------------------------------------------------------------
// The upgrade, postgres.
// ---------------------------------------------------------------------

/// A process of the previous build takes keys a and k; its take waits for
/// a's row (another transaction has it for a moment) when a process of
/// this build upgrades the schema (functions 13 and later: the `fence` column) and
/// takes and releases k (its grant writes its fence into k's slot 0).
/// The older take then goes on, with the code it started with: it grants
/// a and k, taking k's free slot 0 by an UPDATE that writes its token but
/// no fence. k's row then holds the older process's token beside the
/// fence of the grant before it: inspect shows the holder with another
/// grant's fence (below the one its grant answered) and that grant's time
/// held. Not at 162db9e (no fence column, every fence unknown).
#[test]
#[ignore = "known: an older release's take in flight across the upgrade writes no fence (docs/postgres.md)"]
fn r64_pg_an_old_take_in_flight_across_the_upgrade_shows_anothers_fence() {
    let schema = postgres::Schema::fresh();
    postgres::batch(&pg_previous_create_sql(&schema.0));
    assert_eq!(pg_version(&schema), "dokebi-lock functions 12");
    let keys = schema.table("");
    postgres::batch(&format!(
        "INSERT INTO {keys} VALUES ('dokebi-lock', 'a', 0, clock_timestamp() + interval '1 hour'), ('dokebi-lock', 'k', 0, clock_timestamp() + interval '1 hour')"
    ));
    let marker = format!("r64_hold_{}", schema.0);
    let locker = postgres::hold_in_background(&format!(
        "BEGIN; SELECT 1 FROM {keys} WHERE key = 'a' FOR UPDATE; SELECT pg_sleep(30) AS {marker}; ROLLBACK;"
    ));
    // The older process's take of a and k (functions 12), waiting for a.
    let older = {
        let sql = pg_take_sql(&schema, &["a", "k"], "older-build-token", 60_000, 25_000);
        thread::spawn(move || pg_try_within::<Vec<i64>>(&sql, Duration::from_secs(40)))
    };
    postgres::eventually("the older take waits for a's row", || {
        postgres::count("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%older-build-token%'") == 1
    });
    // A process of this build: its first acquire upgrades, and k is
    // granted and released.
    let provider = schema.open("");
    let newer = postgres::backend(&provider);
    let first = take(&newer, "k", wait(0));
    assert_eq!(pg_version(&schema), "dokebi-lock functions 14", "upgraded while the older take waited");
    let first_fence = first.fence();
    release(first);
    pg_cancel_sleeper(&marker);
    let mut locker = locker;
    let _ = locker.wait();
    let answer = older.join().unwrap().expect("the older take answered").expect("granted");
    assert_eq!(answer[0], 1, "granted: {answer:?}");
    let (fence_a, fence_k) = (answer[1], answer[2]);
    assert!(fence_k > first_fence as i64);
    let row: Vec<(String, Option<i64>)> = postgres::rows(&format!(
        "SELECT token, fence FROM {} WHERE key = 'k' AND expires_at > clock_timestamp()",
        schema.table("_holders")
    ))
    .iter()
    .map(|r| (r.get(0), r.get(1)))
    .collect();
    let seen = inspect(&newer, "k");
    block_on(provider.close());
    assert_eq!(seen.held, 1, "{seen:?}");
    assert!(fence_a > 0);
    assert_eq!(
        seen.holders[0].fence,
        Some(fence_k as u64),
        "inspect shows k's holder (the older take, fence {fence_k}) with fence {:?} (the grant before it was {first_fence}); its row: {row:?}; {seen:?}",
        seen.holders[0].fence
    );
}

/// An upgrade waits for the `ACCESS EXCLUSIVE` lock of its `ALTER TABLE`
/// behind any reader of the holders table (a `pg_dump`, a monitoring
/// query in an open transaction), without a `lock_timeout`, for up to the
/// installer's bound (10 s), then again on the next acquire; meanwhile
/// every statement on the holders table, of every process, queues behind
/// it: a renewal of a lease an older process holds fails (its lock
/// timeout), so the lease is lost. Before the change an upgrade on a
/// slotted table (functions 5 and later) took no lock on the table (the
/// only `ALTER` was the slot migration of functions 4 and older), so a
/// reader stalled no one: see the control renewal before the upgrade.
/// Fixed: the `ALTER` waits 200 ms at most, and the backend does not try
/// again for 2 s.
#[test]
fn r64_pg_an_upgrade_behind_a_reader_of_holders_gives_up_and_holds_nobody_up() {
    let schema = postgres::Schema::fresh();
    postgres::batch(&pg_previous_create_sql(&schema.0));
    let granted = pg_try_within::<Vec<i64>>(&pg_take_sql(&schema, &["held"], "older-build-token", 60_000, 2_000), Duration::from_secs(5));
    assert_eq!(granted.unwrap().unwrap()[0], 1);
    let renew =
        format!("SELECT {}('dokebi-lock', ARRAY['held'], 'older-build-token', 60000::bigint, 1500::bigint)", schema.table("_renew"));
    let marker = format!("r64_reader_{}", schema.0);
    let reader = postgres::hold_in_background(&format!(
        "BEGIN; SELECT count(*) FROM {}; SELECT pg_sleep(30) AS {marker}; ROLLBACK;",
        schema.table("_holders")
    ));
    // The control: the reader alone holds off no renewal.
    let control = pg_try_within::<i32>(&renew, Duration::from_secs(5));
    assert_eq!(control.clone().map(|r| r.ok()), Some(Some(1)), "renewed beside the reader: {control:?}");
    // The previous build's upgrade (its script again: functions replaced,
    // the slotted tables left alone) beside the reader: done at once.
    let previous = pg_previous_create_sql(&schema.0);
    let started = Instant::now();
    let (done, finished) = mpsc::channel();
    thread::spawn(move || {
        let _ = done.send(postgres::try_batch_on(&postgres::url(), &previous).map_err(|e| e.to_string()));
    });
    let replaced = finished.recv_timeout(Duration::from_secs(5));
    assert!(matches!(replaced, Ok(Ok(()))), "the previous build's install beside the reader: {replaced:?} after {:?}", started.elapsed());
    let control = pg_try_within::<i32>(&renew, Duration::from_secs(5));
    assert_eq!(control.clone().map(|r| r.ok()), Some(Some(1)), "renewed after it: {control:?}");
    // A process of this build starts and upgrades.
    let upgrading = upgrade_twice(schema.yaml("", ""));
    postgres::eventually("the upgrade waits for its table lock", || {
        postgres::count(&format!(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%pg_advisory_xact_lock%' AND query LIKE '%{}%'",
            schema.0
        )) == 1
    });
    let started = Instant::now();
    let renewed = pg_try_within::<i32>(&renew, Duration::from_secs(8));
    let took = started.elapsed();
    // The reader stays (a dump runs on): the upgrade's own outcome.
    let [(upgrade, upgrade_took), again] = upgrading.join().unwrap();
    pg_cancel_sleeper(&marker);
    let mut reader = reader;
    let _ = reader.wait();
    assert_eq!(
        renewed.clone().map(|r| r.ok()),
        Some(Some(1)),
        "an older process's renewal during the upgrade: {renewed:?} after {took:?} (the upgrade: {upgrade:?} after {upgrade_took:?})"
    );
    refused_then_not_tried_again(&(upgrade, upgrade_took), &again);
}

/// A process of this build that acquires twice, one after the other,
/// while the upgrade cannot have its table lock: each acquire's outcome
/// and how long it took.
fn upgrade_twice(yaml: String) -> thread::JoinHandle<[(Result<bool, ErrorCode>, Duration); 2]> {
    thread::spawn(move || {
        let provider = Provider::from_yaml(&yaml).unwrap();
        let backend = provider.backend("shared").unwrap();
        let once = || {
            let started = Instant::now();
            let outcome = block_on(backend.acquire("z", wait(0))).map(|lease| block_on(lease.release()).unwrap()).map_err(|err| err.code());
            (outcome, started.elapsed())
        };
        let tries = [once(), once()];
        block_on(provider.close());
        tries
    })
}

/// The fix of R64's stall: the upgrade behind the reader gives up
/// (`PROVIDER_FAILED`), and the backend's next acquire, at once, answers
/// the same without waiting again, so the other processes' statements are
/// not held up over and over.
fn refused_then_not_tried_again(first: &(Result<bool, ErrorCode>, Duration), again: &(Result<bool, ErrorCode>, Duration)) {
    assert_eq!(first.0, Err(ErrorCode::ProviderFailed), "the upgrade behind the reader: {first:?}");
    assert_eq!(again.0, Err(ErrorCode::ProviderFailed), "the next acquire: {again:?}");
    assert!(again.1 < Duration::from_millis(100), "the next acquire waited again: {again:?} (the first: {first:?})");
}

// ---------------------------------------------------------------------
// The upgrade, mysql.
// ---------------------------------------------------------------------

fn hex(text: &str) -> String {
    text.bytes().map(|byte| format!("{byte:02x}")).collect()
}

/// The first row's columns of `sql` on a connection of its own, within
/// `bound` (`None`: no answer by then).
fn my_try_within(sql: &str, bound: Duration) -> Option<Result<Vec<Option<String>>, String>> {
    let (sent, answer) = mpsc::channel();
    let sql = sql.to_owned();
    thread::spawn(move || {
        let outcome = mysql::try_rows(&sql).map(|rows| rows.into_iter().next().unwrap_or_default()).map_err(|e| e.to_string());
        let _ = sent.send(outcome);
    });
    answer.recv_timeout(bound).ok()
}

const MY_NOW: &str = "TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6))";

/// The mysql analogue of the postgres stall: the `ALTER TABLE` of an
/// upgrade waits for the table's metadata lock behind an open transaction
/// that read the holders table (a `mysqldump --single-transaction`, a
/// monitoring query), and every statement on the table, of every process,
/// waits behind it: `innodb_lock_wait_timeout` does not bound a metadata
/// lock wait, so a renewal of an older process's lease waits until the
/// installer gives up (its 10 s bound). The control renewal beside the
/// reader alone is answered at once. Fixed: the `ALTER` waits a second at
/// most (`lock_wait_timeout`), and the backend does not try again for 2 s.
#[test]
fn r64_mysql_an_upgrade_behind_a_reader_of_holders_gives_up_and_holds_nobody_up() {
    let table = mysql::Table::fresh();
    {
        let provider = Provider::from_yaml(&mysql::yaml(&table.0, "")).unwrap();
        release(take(&provider.backend("shared").unwrap(), "k", wait(0)));
        block_on(provider.close());
    }
    let holders = format!("`{}_holders`", table.0);
    mysql::rows(&format!("ALTER TABLE {holders} DROP COLUMN fence"));
    mysql::rows(&format!("ALTER PROCEDURE `{}_take` COMMENT 'dokebi-lock procedures 10'", table.0));
    mysql::rows(&format!("INSERT INTO `{}` VALUES ('dokebi-lock', 'old', 5, {MY_NOW} + 3600000000)", table.0));
    mysql::rows(&format!(
        "INSERT INTO {holders} (ns, k, slot, token, shared, lim, weight, expires_at) VALUES ('dokebi-lock', 'old', 0, 'older-driver', 0, 1, 1, {MY_NOW} + 60000000)"
    ));
    let renew = format!("CALL `{}_renew`(X'{}', '{}', 'older-driver', 60000, 1)", table.0, hex("dokebi-lock"), hex("old"));
    let reader = mysql::hold(mysql::url(), format!("START TRANSACTION; SELECT COUNT(*) FROM {holders}"), "ROLLBACK");
    let control = my_try_within(&renew, Duration::from_secs(5));
    assert_eq!(control.clone().and_then(|r| r.ok()).map(|row| row[0].clone()), Some(Some("1".to_owned())), "{control:?}");
    // What the previous build's upgrade did (a procedure dropped and
    // created again) beside the reader: done at once.
    let create = mysql::rows(&format!("SHOW CREATE PROCEDURE `{}_renew`", table.0))[0][2].clone().unwrap();
    let replaced = my_try_within(&format!("DROP PROCEDURE `{}_renew`", table.0), Duration::from_secs(5))
        .and_then(|dropped| dropped.ok())
        .and_then(|_| my_try_within(&create, Duration::from_secs(5)));
    assert!(matches!(replaced, Some(Ok(_))), "a procedure replaced beside the reader: {replaced:?}");
    let control = my_try_within(&renew, Duration::from_secs(5));
    assert_eq!(control.clone().and_then(|r| r.ok()).map(|row| row[0].clone()), Some(Some("1".to_owned())), "{control:?}");
    let upgrading = upgrade_twice(mysql::yaml(&table.0, ""));
    support::eventually("the upgrade waits for the metadata lock", || {
        mysql::count("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE STATE LIKE 'Waiting for table metadata lock' AND INFO LIKE 'ALTER TABLE%'") == 1
    });
    let started = Instant::now();
    let renewed = my_try_within(&renew, Duration::from_secs(4));
    let took = started.elapsed();
    // The reader stays (a dump runs on): the upgrade's own outcome, and
    // when a renewal is answered again.
    let [(upgrade, upgrade_took), again] = upgrading.join().unwrap();
    let late = my_try_within(&renew, Duration::from_secs(15));
    drop(reader);
    assert_eq!(
        renewed.clone().and_then(|r| r.ok()).map(|row| row[0].clone()),
        Some(Some("1".to_owned())),
        "an older process's renewal during the upgrade: {renewed:?} after {took:?} (the upgrade: {upgrade:?} after {upgrade_took:?}; {late:?})"
    );
    refused_then_not_tried_again(&(upgrade, upgrade_took), &again);
}

// ---------------------------------------------------------------------
// Grant paths (attacks that held).
// ---------------------------------------------------------------------

fn kind(mode: LockMode, limit: Option<u32>, weight: Option<u32>, ms: u64) -> AcquireOptions {
    AcquireOptions::of_kind(LockKind::new(mode, limit, weight).unwrap(), Some(Duration::from_millis(ms)), None)
}

fn fences_of(backend: &Backend, key: &str) -> Vec<Option<u64>> {
    let mut fences: Vec<Option<u64>> = inspect(backend, key).holders.iter().map(|h| h.fence).collect();
    fences.sort();
    fences
}

/// Every grant path of `a` and `b` (two providers of one store): the
/// fence each holder shows is the one its grant answered, and no fence
/// repeats or goes down. `expire(key)` ends the key's live leases on the
/// server's clock (as a lapsed lease).
fn grant_paths(a: &Backend, b: &Backend, expire: &dyn Fn(&str)) {
    let mut every: Vec<(String, u64)> = Vec::new();
    // Several keys, in an order no collation sorts them in.
    let keys = ["b", "B", "ä", "a", "A", "ab", "a b"];
    let many = block_on(a.acquire_many(&keys, wait(0))).expect("granted");
    for (key, fence) in many.fences() {
        assert_eq!(inspect(b, key).holders[0].fence, Some(fence), "{key}");
        every.push((key.to_owned(), fence));
    }
    let before: Vec<u64> = many.fences().iter().map(|(_, f)| *f).collect();
    // Renewed: the same fences.
    assert!(block_on(many.renew()).unwrap());
    for (key, fence) in many.fences() {
        assert_eq!(inspect(b, key).holders[0].fence, Some(fence), "{key} renewed");
    }
    // Taken again (overlapping, reversed) by waiters of the other provider.
    let waiter = {
        let b = b.clone();
        thread::spawn(move || {
            let lease = block_on(b.acquire_many(&["ab", "ä", "z"], wait(10_000))).expect("granted");
            lease
        })
    };
    thread::sleep(Duration::from_millis(300));
    release(many);
    let again = waiter.join().unwrap();
    for (key, fence) in again.fences() {
        assert_eq!(inspect(a, key).holders[0].fence, Some(fence), "{key} handed over");
        assert!(before.iter().all(|&f| fence > f || key == "z"));
        every.push((key.to_owned(), fence));
    }
    release(again);

    // Readers handed the key at once after a writer.
    let writer = take(a, "r", wait(0));
    every.push(("r".to_owned(), writer.fence()));
    let readers: Vec<_> = (0..3)
        .map(|_| {
            let b = b.clone();
            thread::spawn(move || take(&b, "r", kind(LockMode::Shared, None, None, 10_000)))
        })
        .collect();
    thread::sleep(Duration::from_millis(400));
    release(writer);
    let readers: Vec<_> = readers.into_iter().map(|r| r.join().unwrap()).collect();
    let mut want: Vec<Option<u64>> = readers.iter().map(|r| Some(r.fence())).collect();
    want.sort();
    assert_eq!(fences_of(a, "r"), want, "each reader its own fence");
    every.extend(readers.iter().map(|r| ("r".to_owned(), r.fence())));
    for reader in readers {
        release(reader);
    }

    // Counted holders handed units at once.
    let big = take(a, "c", kind(LockMode::Exclusive, Some(3), Some(3), 0));
    every.push(("c".to_owned(), big.fence()));
    let smalls: Vec<_> = (0..3)
        .map(|_| {
            let b = b.clone();
            thread::spawn(move || take(&b, "c", kind(LockMode::Exclusive, Some(3), Some(1), 10_000)))
        })
        .collect();
    thread::sleep(Duration::from_millis(400));
    release(big);
    let smalls: Vec<_> = smalls.into_iter().map(|r| r.join().unwrap()).collect();
    let mut want: Vec<Option<u64>> = smalls.iter().map(|r| Some(r.fence())).collect();
    want.sort();
    assert_eq!(fences_of(a, "c"), want, "each counted holder its own fence");
    every.extend(smalls.iter().map(|r| ("c".to_owned(), r.fence())));

    // A lapsed counted holder's slot taken by a new grant: the new fence.
    expire("c");
    let next = take(a, "c", kind(LockMode::Exclusive, Some(3), Some(2), 0));
    assert_eq!(fences_of(b, "c"), [Some(next.fence())], "the lapsed slots' fences are not shown");
    every.push(("c".to_owned(), next.fence()));
    for small in smalls {
        assert!(!block_on(small.renew()).unwrap_or(false), "a lapsed holder is not renewed");
    }
    assert_eq!(fences_of(b, "c"), [Some(next.fence())]);
    release(next);

    // A lapsed plain lease's slot: the next grant's fence, not the lapsed one's.
    let lapsed = take(a, "e", wait(0));
    expire("e");
    let after = take(b, "e", wait(0));
    assert!(after.fence() > lapsed.fence());
    assert!(!block_on(lapsed.renew()).unwrap_or(false));
    assert_eq!(fences_of(a, "e"), [Some(after.fence())]);
    assert!(!block_on(lapsed.release()).unwrap_or(false));
    assert_eq!(fences_of(a, "e"), [Some(after.fence())]);
    every.extend([("e".to_owned(), lapsed.fence()), ("e".to_owned(), after.fence())]);
    release(after);

    let mut sorted = every.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted.len(), every.len(), "no fence of a key repeats: {every:?}");
}

#[test]
fn r64_pg_every_grant_path_keeps_its_own_fence() {
    let schema = postgres::Schema::fresh();
    let yaml = schema.yaml("", "");
    let (a, b) = (labelled(&yaml, "a"), labelled(&yaml, "b"));
    let holders = schema.table("_holders");
    let expire = |key: &str| {
        postgres::batch(&format!(
            "UPDATE {holders} SET expires_at = clock_timestamp() - interval '1 second' WHERE key = '{key}' AND expires_at > clock_timestamp()"
        ))
    };
    grant_paths(&postgres::backend(&a), &postgres::backend(&b), &expire);
}

#[test]
fn r64_mysql_every_grant_path_keeps_its_own_fence() {
    let table = mysql::Table::fresh();
    let yaml = mysql::yaml(&table.0, "");
    let (a, b) = (labelled(&yaml, "a"), labelled(&yaml, "b"));
    let holders = format!("`{}_holders`", table.0);
    let expire = |key: &str| {
        mysql::rows(&format!("UPDATE {holders} SET expires_at = {MY_NOW} - 1000000 WHERE k = '{key}' AND expires_at > {MY_NOW}"));
    };
    grant_paths(&a.backend("shared").unwrap(), &b.backend("shared").unwrap(), &expire);
}

/// A retry of a take whose answer was lost (the same token, sent again,
/// keys in another order and one given twice): each row keeps the fence
/// of the last answer for its key, above the first's.
#[test]
fn r64_pg_a_retried_take_keeps_the_last_answers_fence() {
    let schema = postgres::Schema::fresh();
    let provider = schema.open("");
    release(take(&postgres::backend(&provider), "installed", wait(0)));
    let first = pg_try_within::<Vec<i64>>(&pg_take_sql(&schema, &["q", "p"], "tok-retry", 60_000, 2_000), Duration::from_secs(5));
    let first = first.unwrap().unwrap();
    let second = pg_try_within::<Vec<i64>>(&pg_take_sql(&schema, &["p", "q", "p"], "tok-retry", 60_000, 2_000), Duration::from_secs(5));
    let second = second.unwrap().unwrap();
    assert_eq!((first[0], second[0]), (1, 1));
    let (q1, p1, p2, q2) = (first[1], first[2], second[1], second[2]);
    assert!(q2 > q1 && p2 > p1, "{first:?} {second:?}");
    let rows: Vec<(String, Option<i64>)> =
        postgres::rows(&format!("SELECT key, fence FROM {} WHERE token = 'tok-retry' ORDER BY key", schema.table("_holders")))
            .iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect();
    assert_eq!(rows, [("p".to_owned(), Some(p2)), ("q".to_owned(), Some(q2))]);
    let seen = inspect(&postgres::backend(&provider), "p");
    assert_eq!(seen.holders[0].fence, Some(p2 as u64));
    block_on(provider.close());
}

#[test]
fn r64_mysql_a_retried_take_keeps_the_last_answers_fence() {
    let table = mysql::Table::fresh();
    let provider = Provider::from_yaml(&mysql::yaml(&table.0, "")).unwrap();
    let backend = provider.backend("shared").unwrap();
    release(take(&backend, "installed", wait(0)));
    let call = |keys: &[&str]| {
        let list: Vec<String> = keys.iter().map(|k| hex(k)).collect();
        let sql = format!(
            "CALL `{}_take`(X'{}', '{}', 'tok-retry', 0, 1, 1, 60000, 0, 0, 3600000, {}, 2)",
            table.0,
            hex("dokebi-lock"),
            list.join(","),
            keys.len()
        );
        let answer = mysql::rows(&sql)[0][0].clone().unwrap();
        answer.split(',').map(|n| n.parse::<i64>().unwrap()).collect::<Vec<i64>>()
    };
    let first = call(&["q", "p"]);
    let second = call(&["p", "q"]);
    assert_eq!((first[0], second[0]), (1, 1));
    let (q1, p1, p2, q2) = (first[1], first[2], second[1], second[2]);
    assert!(q2 > q1 && p2 > p1, "{first:?} {second:?}");
    let rows = mysql::rows(&format!("SELECT k, fence FROM `{}_holders` WHERE token = 'tok-retry' ORDER BY k", table.0));
    assert_eq!(rows, [[Some("p".to_owned()), Some(p2.to_string())], [Some("q".to_owned()), Some(q2.to_string())]]);
    assert_eq!(inspect(&backend, "q").holders[0].fence, Some(q2 as u64));
    block_on(provider.close());
}

/// A fresh table installed by this build, then taken back to procedures
/// 10 as the previous build left it ([`my_previous_install`]).
fn my_table_of_procedures_10() -> mysql::Table {
    let table = mysql::Table::fresh();
    {
        let provider = Provider::from_yaml(&mysql::yaml(&table.0, "")).unwrap();
        release(take(&provider.backend("shared").unwrap(), "w", wait(0)));
        block_on(provider.close());
    }
    my_previous_install(&table.0);
    table
}

/// Procedures 10 on `t`, installed by this build: `_try` as the previous
/// build had it (no fence written; the only lines procedures 11 changed in
/// it), every comment 10, the holders table without its `fence` column.
fn my_previous_install(t: &str) {
    use mysql_async::prelude::Queryable;
    let create = mysql::rows(&format!("SHOW CREATE PROCEDURE `{t}_try`"))[0][2].clone().unwrap();
    let older = create
        .replace(", expires_at, fence)", ", expires_at)")
        .replace(", v_now + p_lease_ms * 1000, v_fence\n", ", v_now + p_lease_ms * 1000\n")
        .replace(",\n          fence = v_fence", "")
        .replace("dokebi-lock procedures 11", "dokebi-lock procedures 10");
    assert_eq!((older.matches("fence = v_fence").count(), older.matches("expires_at, fence").count()), (1, 0), "{older}");
    let names: Vec<String> = mysql::rows(&format!(
        "SELECT ROUTINE_NAME FROM information_schema.ROUTINES WHERE ROUTINE_SCHEMA = DATABASE() AND ROUTINE_NAME LIKE '{t}\\_%'"
    ))
    .into_iter()
    .map(|row| row[0].clone().unwrap())
    .collect();
    assert_eq!(names.len(), 10, "{names:?}");
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        let opts = mysql_async::OptsBuilder::from_opts(mysql_async::Opts::from_url(&mysql::url()).unwrap()).prefer_socket(false);
        let mut conn = mysql_async::Conn::new(opts).await.unwrap();
        conn.query_drop("SET SESSION sql_mode = 'STRICT_ALL_TABLES,NO_ENGINE_SUBSTITUTION'").await.unwrap();
        conn.query_drop(format!("DROP PROCEDURE `{t}_try`")).await.unwrap();
        conn.query_drop(older.as_str()).await.unwrap();
        for name in &names {
            conn.query_drop(format!("ALTER PROCEDURE `{name}` COMMENT 'dokebi-lock procedures 10'")).await.unwrap();
        }
        conn.query_drop(format!("ALTER TABLE `{t}_holders` DROP COLUMN fence")).await.unwrap();
        let _ = conn.disconnect().await;
    });
}

/// The mysql analogue of the postgres in-flight take: procedures 10 (the
/// fence column dropped, `_try` without its fence writes, every comment
/// 10), a `_take` of a and k by a pooled connection of an older process
/// (it called `_take` before, so its session has the procedures cached)
/// waiting for a's row while a process of this build upgrades and takes
/// and releases k. The older call goes on with the `_try` its session had
/// cached (MariaDB drops a session's cached routines only at its next
/// statement): it takes k's free slot 0 writing its token but no fence, so
/// the row keeps the fence (and time) of the grant before it, which
/// inspect shows as the older holder's.
#[test]
#[ignore = "known: an older release's take in flight across the upgrade writes no fence (docs/mysql.md)"]
fn r64_mysql_an_old_take_in_flight_across_the_upgrade_shows_anothers_fence() {
    use mysql_async::prelude::Queryable;
    let table = my_table_of_procedures_10();
    let t = table.0.clone();
    mysql::rows(&format!("INSERT INTO `{t}` VALUES ('dokebi-lock', 'a', 0, 0), ('dokebi-lock', 'k', 0, 0)"));
    let call = |keys: &[&str], token: &str| {
        let list: Vec<String> = keys.iter().map(|k| hex(k)).collect();
        format!(
            "CALL `{t}_take`(X'{}', '{}', '{token}', 0, 1, 1, 60000, 0, 0, 3600000, {}, 30)",
            hex("dokebi-lock"),
            list.join(","),
            keys.len()
        )
    };
    // The older process's pooled connection: warm, then (once a's row is
    // held by another transaction) its take of a and k.
    let (warm, take_ak) = (call(&["w"], "older-warm"), call(&["a", "k"], "older-build-token"));
    let (warmed, is_warm) = mpsc::channel();
    let (go, gone) = mpsc::channel::<()>();
    let older_take = thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(async move {
            let opts = mysql_async::OptsBuilder::from_opts(mysql_async::Opts::from_url(&mysql::url()).unwrap()).prefer_socket(false);
            let mut conn = mysql_async::Conn::new(opts).await.unwrap();
            let _: Vec<mysql_async::Row> = conn.query(warm).await.unwrap();
            warmed.send(()).unwrap();
            gone.recv().unwrap();
            let answer: Option<String> = conn.query_first(take_ak).await.map_err(|e| e.to_string())?;
            Ok::<_, String>(answer)
        })
    });
    is_warm.recv().unwrap();
    let held = mysql::hold(
        mysql::url(),
        format!("START TRANSACTION; SELECT fence FROM `{t}` WHERE ns = 'dokebi-lock' AND k = 'a' FOR UPDATE"),
        "ROLLBACK",
    );
    go.send(()).unwrap();
    support::eventually("the older take waits for a's row", || {
        mysql::count("SELECT COUNT(*) FROM information_schema.INNODB_TRX WHERE trx_state = 'LOCK WAIT'") >= 1
    });
    thread::sleep(Duration::from_millis(200));
    // A process of this build upgrades, and takes and releases k.
    let newer = {
        let yaml = mysql::yaml(&t, "");
        thread::spawn(move || {
            let provider = Provider::from_yaml(&yaml).unwrap();
            let backend = provider.backend("shared").unwrap();
            let outcome = block_on(backend.acquire("k", wait(0))).map(|lease| {
                let fence = lease.fence();
                assert!(block_on(lease.release()).unwrap());
                fence
            });
            (provider, outcome.map_err(|e| e.to_string()))
        })
    };
    let started = Instant::now();
    while !newer.is_finished() && started.elapsed() < Duration::from_secs(6) {
        thread::sleep(Duration::from_millis(50));
    }
    let upgraded_while_waiting = newer.is_finished();
    let states = mysql::rows(
        "SELECT STATE, LEFT(INFO, 60) FROM information_schema.PROCESSLIST WHERE INFO IS NOT NULL AND INFO NOT LIKE '%PROCESSLIST%'",
    );
    drop(held);
    let answer = older_take.join().unwrap();
    let (provider, first) = newer.join().unwrap();
    let rows = mysql::rows(&format!("SELECT token, fence FROM `{t}_holders` WHERE k = 'k' AND expires_at > {MY_NOW}"));
    let seen = inspect(&provider.backend("shared").unwrap(), "k");
    block_on(provider.close());
    let answer = answer.expect("the older take answered").expect("a reply");
    let fences: Vec<i64> = answer.split(',').map(|n| n.parse().unwrap()).collect();
    assert_eq!(fences[0], 1, "{answer}");
    assert!(
        !upgraded_while_waiting || seen.holders.first().and_then(|h| h.fence) == Some(fences[2] as u64),
        "upgraded while the older take waited (first grant {first:?}); the older take answered {answer}; k's row {rows:?}; inspect {seen:?}"
    );
    assert!(upgraded_while_waiting, "the upgrade waited for the older take: {states:?}; first {first:?}; row {rows:?}; {seen:?}");
}

#[path = "postgres/bouncer.rs"]
mod bouncer;

/// The upgrade from functions 12 under load, through PgBouncer in
/// transaction mode (one server connection): an older process takes and
/// gives back key L in a loop (its SQL, on a direct connection) while two
/// processes of this build, through the pooler, read the older install
/// (the fallback without the column), upgrade at once and take L in turn.
/// Every fence of L is distinct and each grant's answers rise in the order
/// each process saw them; whenever a process of this build holds L it is
/// L's only holder and inspect shows its own fence.
#[test]
fn r64_pg_upgrade_under_load_through_pgbouncer() {
    let bouncer = bouncer::Bouncer::start("r64");
    let schema = postgres::Schema::fresh();
    postgres::batch(&pg_previous_create_sql(&schema.0));
    let older_lease = pg_try_within::<Vec<i64>>(&pg_take_sql(&schema, &["old"], "older-lease", 60_000, 2_000), Duration::from_secs(5));
    assert_eq!(older_lease.unwrap().unwrap()[0], 1);
    let yaml = postgres::yaml_on(&bouncer.url(), &schema.0, "", "");
    let (p1, p2) = (Provider::from_yaml(&yaml).unwrap(), Provider::from_yaml(&yaml).unwrap());
    let seen = inspect(&postgres::backend(&p1), "old");
    assert_eq!((seen.held, seen.holders[0].fence), (1, None), "read through the pooler before the upgrade: {seen:?}");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let older = {
        let (stop, take_table, give_table) = (stop.clone(), schema.table("_take"), schema.table("_give_back"));
        let channel = format!("{}.dokebi_lock", schema.0);
        thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            runtime.block_on(async move {
                let (client, connection) = tokio_postgres::connect(&postgres::url(), tokio_postgres::NoTls).await.unwrap();
                tokio::spawn(connection);
                let (mut fences, mut errors) = (Vec::new(), Vec::new());
                let mut i = 0;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    i += 1;
                    let token = format!("older-{i}");
                    let sql = format!(
                        "SELECT {take_table}('dokebi-lock', ARRAY['L'], '{token}', false, 1, 1, 5000::bigint, 0::bigint, 0::bigint, 3600000::bigint, 1500::bigint)"
                    );
                    match client.query_one(sql.as_str(), &[]).await {
                        Ok(row) => {
                            let answer: Vec<i64> = row.get(0);
                            if answer[0] == 1 {
                                fences.push(answer[1]);
                                tokio::time::sleep(Duration::from_millis(5)).await;
                                let give = format!("SELECT {give_table}('dokebi-lock', ARRAY['L'], '{token}', '{channel}', false, 1500::bigint)");
                                let released: i32 = client.query_one(give.as_str(), &[]).await.unwrap().get(0);
                                assert_eq!(released, 1, "the older process's lease {token} was still held");
                            }
                        }
                        Err(err) => errors.push(err.to_string()),
                    }
                    tokio::time::sleep(Duration::from_millis(3)).await;
                }
                (fences, errors)
            })
        })
    };
    thread::sleep(Duration::from_millis(200));
    let newer: Vec<_> = [p1, p2]
        .into_iter()
        .map(|provider| {
            thread::spawn(move || {
                let backend = postgres::backend(&provider);
                let mut fences = Vec::new();
                for _ in 0..15 {
                    match block_on(backend.acquire("L", wait(5_000))) {
                        Ok(lease) => {
                            let seen = inspect(&backend, "L");
                            assert_eq!(seen.held, 1, "{seen:?}");
                            assert_eq!(seen.holders[0].fence, Some(lease.fence()), "{seen:?}");
                            fences.push(lease.fence() as i64);
                            release(lease);
                        }
                        Err(err) => panic!("{err}"),
                    }
                }
                block_on(provider.close());
                fences
            })
        })
        .collect();
    let newer: Vec<Vec<i64>> = newer.into_iter().map(|t| t.join().unwrap()).collect();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (older_fences, errors) = older.join().unwrap();
    assert_eq!(pg_version(&schema), "dokebi-lock functions 14");
    for list in newer.iter().chain([&older_fences]) {
        assert!(list.windows(2).all(|w| w[0] < w[1]), "each process's fences rise: {list:?}");
    }
    let mut all: Vec<i64> = newer.concat();
    all.extend(&older_fences);
    let n = all.len();
    all.sort();
    all.dedup();
    assert_eq!(all.len(), n, "no fence of L repeats");
    assert!(!older_fences.is_empty(), "the older process took L: {errors:?}");
    eprintln!("older grants {}, errors {}: {:?}", older_fences.len(), errors.len(), errors.first());
}

/// The upgrade from procedures 10 under load: an older process takes and
/// gives back key L in a loop (`CALL`s of its pooled connection) while
/// four processes of this build start at once (four installers: the
/// column added once, the second `ALTER` passed over as 1060, procedures
/// dropped and created by several) and take L in turn. An acquire may fail
/// while a procedure is being replaced (documented: once), never with two
/// holders: every fence of L is distinct and each process's rise; a
/// process of this build holding L is its only holder, shown with its own
/// fence.
#[test]
fn r64_mysql_upgrade_under_load_by_four_installers() {
    use mysql_async::prelude::Queryable;
    let table = my_table_of_procedures_10();
    let t = table.0.clone();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let older = {
        let (stop, t) = (stop.clone(), t.clone());
        thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            runtime.block_on(async move {
                let opts = mysql_async::OptsBuilder::from_opts(mysql_async::Opts::from_url(&mysql::url()).unwrap()).prefer_socket(false);
                let mut conn = mysql_async::Conn::new(opts).await.unwrap();
                let (mut fences, mut errors) = (Vec::new(), Vec::new());
                let mut i = 0;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    i += 1;
                    let token = format!("older-{i}");
                    let sql = format!(
                        "CALL `{t}_take`(X'{}', '{}', '{token}', 0, 1, 1, 5000, 0, 0, 3600000, 1, 2)",
                        hex("dokebi-lock"),
                        hex("L")
                    );
                    match conn.query_first::<Option<String>, _>(sql).await {
                        Ok(Some(Some(answer))) => {
                            let answer: Vec<i64> = answer.split(',').map(|n| n.parse().unwrap()).collect();
                            if answer[0] == 1 {
                                fences.push(answer[1]);
                                tokio::time::sleep(Duration::from_millis(5)).await;
                                let give = format!("CALL `{t}_give_back`(X'{}', '{}', '{token}', 0, 2)", hex("dokebi-lock"), hex("L"));
                                loop {
                                    match conn.query_first::<Option<String>, _>(give.as_str()).await {
                                        Ok(released) => {
                                            assert_eq!(released, Some(Some("1".to_owned())), "the older lease {token} was still held");
                                            break;
                                        }
                                        Err(err) => errors.push(format!("give back: {err}")),
                                    }
                                }
                            }
                        }
                        Ok(other) => errors.push(format!("{other:?}")),
                        Err(err) => errors.push(err.to_string()),
                    }
                    tokio::time::sleep(Duration::from_millis(3)).await;
                }
                (fences, errors)
            })
        })
    };
    thread::sleep(Duration::from_millis(200));
    let yaml = mysql::yaml(&t, "");
    let newer: Vec<_> = (0..4)
        .map(|_| {
            let yaml = yaml.clone();
            thread::spawn(move || {
                let provider = Provider::from_yaml(&yaml).unwrap();
                let backend = provider.backend("shared").unwrap();
                let (mut fences, mut errors) = (Vec::new(), Vec::new());
                for _ in 0..10 {
                    match block_on(backend.acquire("L", wait(5_000))) {
                        Ok(lease) => {
                            let seen = inspect(&backend, "L");
                            assert_eq!(seen.held, 1, "{seen:?}");
                            assert_eq!(seen.holders[0].fence, Some(lease.fence()), "{seen:?}");
                            fences.push(lease.fence() as i64);
                            release(lease);
                        }
                        Err(err) => errors.push(err.to_string()),
                    }
                }
                block_on(provider.close());
                (fences, errors)
            })
        })
        .collect();
    let newer: Vec<(Vec<i64>, Vec<String>)> = newer.into_iter().map(|t| t.join().unwrap()).collect();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (older_fences, older_errors) = older.join().unwrap();
    let comments = mysql::rows(&format!(
        "SELECT DISTINCT ROUTINE_COMMENT FROM information_schema.ROUTINES WHERE ROUTINE_SCHEMA = DATABASE() AND ROUTINE_NAME LIKE '{t}\\_%'"
    ));
    assert_eq!(comments, [[Some("dokebi-lock procedures 11".to_owned())]]);
    for (list, _) in &newer {
        assert!(list.windows(2).all(|w| w[0] < w[1]), "each process's fences rise: {list:?}");
    }
    assert!(older_fences.windows(2).all(|w| w[0] < w[1]), "{older_fences:?}");
    let mut all: Vec<i64> = newer.iter().flat_map(|(f, _)| f.clone()).collect();
    all.extend(&older_fences);
    let n = all.len();
    all.sort();
    all.dedup();
    assert_eq!(all.len(), n, "no fence of L repeats");
    let errors: Vec<&String> = newer.iter().flat_map(|(_, e)| e).collect();
    eprintln!(
        "older grants {}, older errors {:?}; newer grants {}, errors {:?}",
        older_fences.len(),
        older_errors,
        n - older_fences.len(),
        errors
    );
    assert!(errors.len() <= 4, "{errors:?}");
}

/// Runs `script` through psql as a DBA would (`ON_ERROR_STOP`): whether
/// it succeeded, and what psql wrote to stderr.
fn psql(script: &str) -> (bool, String) {
    let mut child = std::process::Command::new("psql")
        .arg(postgres::url())
        .args(["-q", "-v", "ON_ERROR_STOP=1"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(&mut child.stdin.take().unwrap(), script.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    (out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// `autoCreate: false` on an install of functions 12 serving an older
/// lease: the refusal's script, run by psql (`ON_ERROR_STOP`) twice, then
/// an acquire: each run succeeds, the grant shows its own fence and the
/// older lease keeps holding.
#[test]
fn r64_pg_the_dba_script_twice_with_an_older_lease() {
    let schema = postgres::Schema::fresh();
    postgres::batch(&pg_previous_create_sql(&schema.0));
    let older = pg_try_within::<Vec<i64>>(&pg_take_sql(&schema, &["old"], "older-lease", 60_000, 2_000), Duration::from_secs(5));
    assert_eq!(older.unwrap().unwrap()[0], 1);
    let refusing = schema.open("        autoCreate: false\n");
    let refused = block_on(postgres::backend(&refusing).acquire("k", wait(0))).unwrap_err();
    let script = refused.fix().split_once('\n').expect("the fix carries the SQL").1.to_owned();
    for run in 0..2 {
        let (ok, err) = psql(&script);
        assert!(ok, "run {run}: {err}");
    }
    let lease = take(&postgres::backend(&refusing), "k", wait(0));
    assert_eq!(inspect(&postgres::backend(&refusing), "k").holders[0].fence, Some(lease.fence()));
    release(lease);
    assert_eq!(inspect(&postgres::backend(&refusing), "old").held, 1, "the older lease holds");
    block_on(refusing.close());
}

/// The refusal's script (`autoCreate: false`) run by a DBA while a process
/// with `autoCreate: true` upgrades the same schema from functions 12 (its
/// transaction has added the column and has not committed; here it waits
/// to drop the take function, which another session has commented on in
/// an open transaction, for 2 s): the script's migration block found no
/// column, waited for the installer's table lock, then failed with 42701
/// ("column fence already exists") and, with `ON_ERROR_STOP`, stopped
/// there. Fixed: the script is one transaction that first takes the
/// installers' advisory lock, so it waits for the installer.
#[test]
fn r64_pg_the_dba_script_beside_an_installer_waits_for_it() {
    let schema = postgres::Schema::fresh();
    postgres::batch(&pg_previous_create_sql(&schema.0));
    let refusing = schema.open("        autoCreate: false\n");
    let refused = block_on(postgres::backend(&refusing).acquire("k", wait(0))).unwrap_err();
    block_on(refusing.close());
    let script = refused.fix().split_once('\n').expect("the fix carries the SQL").1.to_owned();
    let sig = "text, text[], text, boolean, integer, integer, bigint, bigint, bigint, bigint, bigint";
    let marker = format!("r64_comment_{}", schema.0);
    let commenter = postgres::hold_in_background(&format!(
        "BEGIN; COMMENT ON FUNCTION {}({sig}) IS 'dokebi-lock functions 12'; SELECT pg_sleep(30) AS {marker}; ROLLBACK;",
        schema.table("_take")
    ));
    let installer = {
        let yaml = schema.yaml("", "");
        thread::spawn(move || {
            let provider = Provider::from_yaml(&yaml).unwrap();
            let outcome = block_on(postgres::backend(&provider).acquire("i", wait(0))).map(|lease| block_on(lease.release()));
            block_on(provider.close());
            outcome.map_err(|e| e.to_string())
        })
    };
    postgres::eventually("the installer waits to drop take", || {
        postgres::count(&format!(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%pg_advisory_xact_lock%' AND query LIKE '%{}%'",
            schema.0
        )) == 1
    });
    let dba = {
        let script = script.clone();
        thread::spawn(move || psql(&script))
    };
    thread::sleep(Duration::from_millis(700));
    pg_cancel_sleeper(&marker);
    let mut commenter = commenter;
    let _ = commenter.wait();
    let installed = installer.join().unwrap();
    let (ok, err) = dba.join().unwrap();
    assert!(installed.is_ok(), "{installed:?}");
    assert!(ok, "the DBA's script beside the installer: {err}");
}

/// A user without the `ALTER` privilege upgrades procedures 10 whose
/// holders table another process (or a DBA) has already given its
/// `fence` column: no `ALTER` is run (`DO 0`), the procedures are
/// replaced, the grant shows its fence.
#[test]
fn r64_mysql_an_upgrade_without_alter_once_the_column_is_there() {
    let table = my_table_of_procedures_10();
    let t = table.0.clone();
    mysql::rows(&format!("ALTER TABLE `{t}_holders` ADD COLUMN fence BIGINT NULL"));
    let user = format!("r64_{}", &t[..t.len().min(20)]);
    let _ = mysql::try_rows(&format!("DROP USER IF EXISTS '{user}'@'%'"));
    mysql::rows(&format!("CREATE USER '{user}'@'%' IDENTIFIED BY 'pw-r64-secret'"));
    mysql::rows(&format!("GRANT SELECT, INSERT, UPDATE, DELETE, EXECUTE, CREATE, CREATE ROUTINE, ALTER ROUTINE ON test.* TO '{user}'@'%'"));
    let limited = mysql::url().replacen("mysql://root@", &format!("mysql://{user}:pw-r64-secret@"), 1);
    let provider = Provider::from_yaml(&mysql::yaml(&t, "").replace(&mysql::url(), &limited)).unwrap();
    let backend = provider.backend("shared").unwrap();
    let outcome = block_on(backend.acquire("k", wait(0)));
    let seen = outcome.as_ref().ok().map(|lease| (lease.fence(), inspect(&backend, "k")));
    if let Ok(lease) = outcome.as_ref() {
        assert!(block_on(lease.release()).unwrap());
    }
    block_on(provider.close());
    let _ = mysql::try_rows(&format!("DROP USER IF EXISTS '{user}'@'%'"));
    let (fence, seen) = seen.unwrap_or_else(|| panic!("{:?}", outcome.err().map(|e| e.to_string())));
    assert_eq!(seen.holders[0].fence, Some(fence), "{seen:?}");
}

/// Functions 13 beside a holders table without its `fence` column (a
/// holders table restored from a dump made before the upgrade, or the
/// column dropped): every grant fails (42703) and no process, however
/// started, migrates again: the check reads the functions' version only.
/// (Severity: a repair case, told for completeness.)
#[test]
#[ignore = "known: the check reads the functions' version only; restoring an older holders table beside newer functions needs the script run again"]
fn r64_pg_a_holders_table_without_its_column_beside_functions_13_is_never_repaired() {
    let schema = postgres::Schema::fresh();
    let provider = schema.open("");
    release(take(&postgres::backend(&provider), "w", wait(0)));
    block_on(provider.close());
    postgres::batch(&format!("ALTER TABLE {} DROP COLUMN fence", schema.table("_holders")));
    let provider = schema.open("");
    let outcome = block_on(postgres::backend(&provider).acquire("k", wait(0))).map(|lease| block_on(lease.release()));
    block_on(provider.close());
    assert!(outcome.is_ok(), "a new process's acquire: {:?}", outcome.map_err(|e| format!("{} / {}", e.code(), e)));
}

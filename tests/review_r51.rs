//! Review R51: `Backend::force_release` on the SQL drivers (PostgreSQL
//! function `_force_release`, MySQL procedure `_force_release`, and the
//! store methods that call them), against the machine's PostgreSQL 15 and
//! MariaDB 10.11 and private servers whose clock steps back.
//!
//! The code reviewed was an intermediate version: the store first read the
//! key's live holders' tokens (one statement, no lock), then called
//! `_force_release` with that list, which locked the key's row, marked only
//! the listed tokens' rows dead and raised the fence. The drivers now break
//! every holder once the key's row is locked, in one call, and every test
//! here passes.
//!
//! Findings (these tests failed against that version):
//! - `*_a_take_committed_while_the_break_waits_for_the_row_survives_below_the_fence`:
//!   the read and the break are two statements, the read without the key's
//!   row lock. A take that commits between them (here: queued on the key
//!   row ahead of the break) is not in the list, so it is not removed, yet
//!   the fence the break answers is raised above its fence. After the
//!   answer the key is held by a lease whose fence is below the answered
//!   one and which renews (and keeps renewing): the operator's break leaves
//!   the key stuck with a holder that the fenced store (told the answered
//!   fence, as docs say) shuts out.
//! - `*_an_expired_row_revived_by_a_backward_step_renews_after_the_break`:
//!   the read lists live rows only, so an expired, not yet dead row (a
//!   stalled holder) is never marked dead (the comment "an expired row of
//!   theirs too" applies only to a row that expires between the read and
//!   the break). The server's clock steps back: the row is
//!   live again and its lease renews after the break, fence below the
//!   answered one.
//!   Both pass when every row of the key is marked dead under the row lock.
//! - `mysql_a_shared_key_with_many_readers_can_be_broken`: the tokens are
//!   read with `GROUP_CONCAT`, cut at `group_concat_max_len` (MySQL's
//!   default 1,024 bytes), and a cut list is refused: a key with more than
//!   31 holders cannot be broken at all (`PROVIDER_FAILED`).
//!
//! Probes that hold (pass): a renewal queued behind the break is refused; a
//! give-back retry (`p_retry`) after the break counts nothing; a break by a
//! backend whose `fenceRetentionMs` is 1 ms whose key row the clean-up then
//! deletes: the next grant is still above the answered fence; through
//! PgBouncer (transaction mode) a leaked `synchronous_commit = off` does not
//! weaken the break's commit, and a leaked REPEATABLE READ refuses it,
//! nothing done.

#[path = "postgres/bouncer.rs"]
mod bouncer;
mod mysql;
#[path = "mysql/server.rs"]
mod mysql_server;
#[path = "postgres/server.rs"]
mod pg_server;
mod postgres;
#[path = "support/stepped_clock.rs"]
mod stepped_clock;
mod support;

use std::thread;
use std::time::Duration;

use dokebi_lock::{Backend, ForcedRelease, Provider};
use futures::executor::block_on;
use stepped_clock::with_a_clock_to_step;
use support::{eventually, inspect, one_at_a_time, take, wait};

/// One test at a time: the stepped-clock servers start with LD_PRELOAD in
/// the process's environment, which every child started meanwhile (psql)
/// would inherit, and the lock-wait probes count the server's lock waits.
fn force(backend: &Backend, key: &str) -> ForcedRelease {
    block_on(backend.force_release(key)).expect("force-released")
}

/// A provider on the machine's PostgreSQL in `schema`, with room for row
/// lock waits (`lock_timeout` 6 s of a `commandTimeoutMs` of 8000).
fn pg_provider(schema: &postgres::Schema, backend: &str) -> Provider {
    let yaml = schema.yaml(backend, "").replace("commandTimeoutMs: 2000", "commandTimeoutMs: 8000");
    Provider::from_yaml(&yaml).unwrap()
}

/// A provider on the machine's MariaDB on `table`, with room for row lock
/// waits (`innodb_lock_wait_timeout` 6 s of a `commandTimeoutMs` of 8000).
fn my_provider(table: &str, fields: &str) -> Provider {
    let yaml =
        mysql::yaml(table, fields).replace("commandTimeoutMs: 2000", "commandTimeoutMs: 8000").replace("leaseMs: 5000", "leaseMs: 20000");
    Provider::from_yaml(&yaml).unwrap()
}

/// Sessions of this test's schema that are active and match `what`.
fn pg_active(schema: &postgres::Schema, what: &str) -> i64 {
    postgres::count(&format!("SELECT count(*) FROM pg_stat_activity WHERE state = 'active' AND query LIKE '%{}%' AND {what}", schema.0))
}

/// Sessions waiting in `_lock` for a key row of this test's table (its
/// `INSERT … ON DUPLICATE KEY UPDATE`; `INNODB_TRX` lists only one of two
/// such waiters on MariaDB 10.11).
fn my_lock_waits(table: &str) -> i64 {
    mysql::count(&format!(
        "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE INFO LIKE 'INSERT INTO `{table}` (ns, k, fence, fence_until)%' AND TIME_MS > 20"
    ))
}

/// The checks after a break whose key a take was granted while the break
/// waited: the answer's fence is above the lease's, and that lease, which
/// holds a fence below it, must not live on (renew, hold the key).
fn no_holder_below_the_answered_fence(holder: &Backend, lease: dokebi_lock::Lease, forced: &ForcedRelease) {
    let fence = forced.fence.expect("a store driver raises the fence");
    assert!(fence > lease.fence(), "the answered fence {fence} is above the lease's {}", lease.fence());
    let renewed = block_on(lease.renew());
    let after = inspect(holder, "k");
    assert!(
        !matches!(renewed, Ok(true)) && after.held == 0,
        "after the break answered {forced:?}, the lease granted while the break waited (fence {} below the answered {fence}) \
         renewed: {renewed:?}, and the key is held: {after:?}",
        lease.fence()
    );
}

/// Finding 1, PostgreSQL. Interleaving:
/// 1. Another session holds `k`'s key row (a transaction of 1 s).
/// 2. B's take of `k` (provider a) waits for the row.
/// 3. The operator's `force_release(k)` (provider b): its read of the
///    holders (no lock) finds none; its `_force_release(…, '{}')` queues on
///    the row behind B's take.
/// 4. The row is let go: B's take grants `k` (fence fB) and commits; the
///    break then locks the row, marks nobody dead (B is not in its list)
///    and raises the fence to fB + 1, which it answers.
/// 5. B holds `k` after the break, below the answered fence, and renews.
///
/// A break of every holder read under the lock (what the drivers do now)
/// removes B here.
#[test]
fn postgres_a_take_committed_while_the_break_waits_for_the_row_survives_below_the_fence() {
    let _one = one_at_a_time();
    let schema = postgres::Schema::fresh();
    let (holders, operators) = (pg_provider(&schema, ""), pg_provider(&schema, ""));
    let (holder, operator) = (postgres::backend(&holders), postgres::backend(&operators));
    // The key's row exists (the locker locks it).
    support::release(take(&holder, "k", wait(0)));
    // Held until both waits were seen (then cancelled): a fixed second
    // ran out on a loaded host before the break's first statement came.
    let script = format!("BEGIN; SELECT 1 FROM {} WHERE key = 'k' FOR UPDATE; SELECT pg_sleep(30); ROLLBACK;", schema.table(""));
    let mut locker = postgres::hold_in_background(&script);
    let taker = {
        let holder = holder.clone();
        thread::spawn(move || block_on(holder.acquire("k", wait(5000))).expect("granted once the row is free"))
    };
    eventually("the take waits for the row", || pg_active(&schema, "query LIKE '%dokebi_lock_take%' AND wait_event_type = 'Lock'") == 1);
    let breaker = {
        let operator = operator.clone();
        thread::spawn(move || force(&operator, "k"))
    };
    eventually("the break waits for the row", || {
        pg_active(&schema, "query LIKE '%dokebi_lock_force_release%' AND wait_event_type = 'Lock'") == 1
    });
    postgres::end_background(&script);
    let _ = locker.wait();
    let lease = taker.join().unwrap();
    let forced = breaker.join().unwrap();
    no_holder_below_the_answered_fence(&holder, lease, &forced);
    block_on(holders.close());
    block_on(operators.close());
}

/// Finding 1, MySQL: the same interleaving, the row held by another
/// session (`hold_row`), the waits seen in `INNODB_TRX`.
#[test]
fn mysql_a_take_committed_while_the_break_waits_for_the_row_survives_below_the_fence() {
    let _one = one_at_a_time();
    let table = mysql::Table::fresh();
    let (holders, operators) = (my_provider(&table.0, ""), my_provider(&table.0, ""));
    let (holder, operator) = (holders.backend("shared").unwrap(), operators.backend("shared").unwrap());
    support::release(take(&holder, "k", wait(0)));
    let locked = mysql::hold_row(&table.0);
    let taker = {
        let holder = holder.clone();
        thread::spawn(move || block_on(holder.acquire("k", wait(5000))).expect("granted once the row is free"))
    };
    eventually("the take waits for the row", || my_lock_waits(&table.0) == 1);
    let breaker = {
        let operator = operator.clone();
        thread::spawn(move || force(&operator, "k"))
    };
    eventually("the break waits for the row", || my_lock_waits(&table.0) == 2);
    drop(locked);
    let lease = taker.join().unwrap();
    let forced = breaker.join().unwrap();
    no_holder_below_the_answered_fence(&holder, lease, &forced);
    block_on(holders.close());
    block_on(operators.close());
}

/// Finding 2: a holder's lease runs out unrenewed (its process stalled);
/// nobody takes the key, so its row is expired, not dead. The operator
/// breaks the key: the break's read lists live rows only, so the row is
/// left as it is, and the fence is raised above the holder's. The server's
/// clock then steps back 5 s (an NTP step, a failover to a replica whose
/// clock is behind): the row is live again, no other holder is held
/// against it, and the stalled holder's renewal succeeds after the break,
/// its fence below the answered one. The diff's function marks every row of
/// the key dead ("no clock stepped back brings one back").
fn an_expired_row_revived_by_a_backward_step_renews_after_the_break(config: &str, offset: &std::path::Path) {
    let holders = Provider::from_yaml(config).unwrap();
    let operators = Provider::from_yaml(config).unwrap();
    let (holder, operator) = (holders.backend("shared").unwrap(), operators.backend("shared").unwrap());
    let stalled = take(&holder, "k", wait(0));
    thread::sleep(Duration::from_millis(2500));
    assert!(!stalled.is_valid());
    let forced = force(&operator, "k");
    let fence = forced.fence.expect("a store driver raises the fence");
    assert!(fence > stalled.fence());
    std::fs::write(offset, "-5\n").unwrap();
    thread::sleep(Duration::from_millis(100));
    let renewed = block_on(stalled.renew());
    let after = block_on(operator.inspect("k"));
    let _ = std::fs::remove_file(offset);
    assert!(
        !matches!(renewed, Ok(true)),
        "after the break answered {forced:?} and the server's clock stepped back 5 s, the stalled holder (fence {} below the \
         answered {fence}) renewed: {renewed:?}; the key: {after:?}",
        stalled.fence()
    );
    block_on(holders.close());
    block_on(operators.close());
}

#[test]
fn postgres_an_expired_row_revived_by_a_backward_step_renews_after_the_break() {
    let _one = one_at_a_time();
    let (server, offset) = with_a_clock_to_step("r51-postgres", || pg_server::PrivateServer::start("r51-clock", &[]));
    let config = postgres::yaml_on(&server.url(), "r51_clock", "        leaseMs: 2000\n", "")
        .replace("commandTimeoutMs: 2000", "commandTimeoutMs: 1000");
    an_expired_row_revived_by_a_backward_step_renews_after_the_break(&config, &offset);
}

#[test]
fn mysql_an_expired_row_revived_by_a_backward_step_renews_after_the_break() {
    let _one = one_at_a_time();
    let (server, offset) = with_a_clock_to_step("r51-mysql", || mysql_server::PrivateServer::start(&[]));
    let config = mysql::yaml("r51_clock", "")
        .replace(&mysql::url(), &server.url())
        .replace("leaseMs: 5000", "leaseMs: 2000")
        .replace("commandTimeoutMs: 2000", "commandTimeoutMs: 1000");
    an_expired_row_revived_by_a_backward_step_renews_after_the_break(&config, &offset);
}

/// Holds, PostgreSQL: a renewal of the removed holder queued on the key row
/// behind the break (the break first in the queue) finds the lease gone.
#[test]
fn postgres_a_renewal_queued_behind_the_break_is_refused() {
    let _one = one_at_a_time();
    let schema = postgres::Schema::fresh();
    let (holders, operators) = (pg_provider(&schema, ""), pg_provider(&schema, ""));
    let (holder, operator) = (postgres::backend(&holders), postgres::backend(&operators));
    let lease = take(&holder, "k", wait(0));
    // Held until both waits were seen (then cancelled): a fixed second
    // ran out on a loaded host before the break's first statement came.
    let script = format!("BEGIN; SELECT 1 FROM {} WHERE key = 'k' FOR UPDATE; SELECT pg_sleep(30); ROLLBACK;", schema.table(""));
    let mut locker = postgres::hold_in_background(&script);
    let breaker = {
        let operator = operator.clone();
        thread::spawn(move || force(&operator, "k"))
    };
    eventually("the break waits for the row", || {
        pg_active(&schema, "query LIKE '%dokebi_lock_force_release%' AND wait_event_type = 'Lock'") == 1
    });
    let renewer = thread::spawn(move || {
        let renewed = block_on(lease.renew());
        (lease, renewed)
    });
    eventually("the renewal waits for the row", || {
        pg_active(&schema, "query LIKE '%dokebi_lock_renew%' AND wait_event_type = 'Lock'") == 1
    });
    postgres::end_background(&script);
    let _ = locker.wait();
    let forced = breaker.join().unwrap();
    let (lease, renewed) = renewer.join().unwrap();
    assert_eq!(forced.removed, 1, "{forced:?}");
    assert!(matches!(renewed, Ok(false)), "{renewed:?}");
    assert!(forced.fence > Some(lease.fence()));
    block_on(holders.close());
    block_on(operators.close());
}

/// Holds: a give-back's retry (`p_retry`, a release whose first answer was
/// lost) after the break counts nothing of the removed holder's, on both
/// servers (the functions called as the drivers call them).
#[test]
fn a_give_back_retry_after_the_break_counts_nothing() {
    let _one = one_at_a_time();
    let schema = postgres::Schema::fresh();
    let (holders, operators) = (pg_provider(&schema, ""), pg_provider(&schema, ""));
    let lease = take(&postgres::backend(&holders), "k", wait(0));
    let token: String =
        postgres::rows(&format!("SELECT token FROM {} WHERE key = 'k' AND expires_at > now()", schema.table("_holders")))[0].get(0);
    assert_eq!(force(&postgres::backend(&operators), "k").removed, 1);
    let retried =
        postgres::count(&format!("SELECT {}('dokebi-lock', ARRAY['k'], '{token}', 'c', true, 1000)::bigint", schema.table("_give_back")));
    assert_eq!(retried, 0, "the removed holder's retried release counted a key");
    drop(lease);
    block_on(holders.close());
    block_on(operators.close());

    let table = mysql::Table::fresh();
    let (holders, operators) = (my_provider(&table.0, ""), my_provider(&table.0, ""));
    let lease = take(&holders.backend("shared").unwrap(), "k", wait(0));
    let token = mysql::rows(&format!("SELECT token FROM `{}_holders` WHERE k = 'k' AND expires_at > 1", table.0))[0][0].clone().unwrap();
    assert_eq!(force(&operators.backend("shared").unwrap(), "k").removed, 1);
    let hex = |text: &str| text.bytes().map(|byte| format!("{byte:02x}")).collect::<String>();
    let retried = mysql::rows(&format!("CALL `{}_give_back`(X'{}', '{}', '{token}', 1, 1)", table.0, hex("dokebi-lock"), hex("k")));
    assert_eq!(retried[0][0].as_deref(), Some("0"), "the removed holder's retried release counted a key");
    drop(lease);
    block_on(holders.close());
    block_on(operators.close());
}

/// Holds: a backend of the table whose `fenceRetentionMs` is 1 breaks a key
/// (the key row kept 1 ms); a release then cleans the row up; the next
/// grant (a backend of the default retention) is still above the answered
/// fence: the counter lost with the row is overtaken by the clock.
#[test]
fn a_break_whose_row_the_clean_up_deletes_still_answers_below_the_next_grant() {
    let _one = one_at_a_time();
    let schema = postgres::Schema::fresh();
    let yaml = schema.yaml("", "").replace("commandTimeoutMs: 2000", "commandTimeoutMs: 8000")
        + &format!("      short:\n        driver: postgres\n        connection: main\n        schema: {}\n        leaseMs: 10000\n        fenceRetentionMs: 1\n", schema.0);
    let provider = Provider::from_yaml(&yaml).unwrap();
    let (long, short) = (provider.backend("shared").unwrap(), provider.backend("short").unwrap());
    // A key never granted: its row is the break's, kept 1 ms.
    let forced = force(&short, "k");
    thread::sleep(Duration::from_millis(20));
    support::release(take(&long, "z", wait(0)));
    assert_eq!(postgres::count(&format!("SELECT count(*) FROM {} WHERE key = 'k'", schema.table(""))), 0, "the row was cleaned up");
    let next = take(&long, "k", wait(0));
    assert!(Some(next.fence()) > forced.fence, "{} after {forced:?}", next.fence());
    support::release(next);
    block_on(provider.close());
}

/// Holds, PostgreSQL through PgBouncer in transaction mode (one server
/// connection): another client of the pooler left `synchronous_commit` off
/// on it, and the break still commits with the server's setting (a
/// deferred trigger records the setting each change of the key row
/// commits with); then another client left `default_transaction_isolation`
/// at REPEATABLE READ, and the break is refused by name, nothing done.
#[test]
fn postgres_a_break_through_a_pooler_commits_durably_and_only_in_read_committed() {
    let _one = one_at_a_time();
    let bouncer = bouncer::Bouncer::start("r51");
    let schema = postgres::Schema::fresh();
    let yaml = postgres::yaml_on(&bouncer.url(), &schema.0, "", &format!("        listenUrl: '{}'\n", postgres::url()));
    let provider = Provider::from_yaml(&yaml).unwrap();
    let backend = postgres::backend(&provider);
    let lease = take(&backend, "k", wait(0));
    postgres::batch(&format!(
        "CREATE TABLE {s}.seen (setting text);
         CREATE FUNCTION {s}.record() RETURNS trigger LANGUAGE plpgsql AS $$
           BEGIN INSERT INTO {s}.seen VALUES (current_setting('synchronous_commit')); RETURN NULL; END $$;
         CREATE CONSTRAINT TRIGGER record AFTER UPDATE ON {keys} DEFERRABLE INITIALLY DEFERRED
           FOR EACH ROW EXECUTE FUNCTION {s}.record();",
        s = schema.0,
        keys = schema.table(""),
    ));
    postgres::batch_on(&bouncer.url(), "SET synchronous_commit = off");
    let forced = force(&backend, "k");
    assert_eq!(forced.removed, 1);
    let seen: Vec<String> = postgres::rows(&format!("SELECT setting FROM {}.seen", schema.0)).iter().map(|row| row.get(0)).collect();
    assert_eq!(seen, ["on"], "the break committed with the session's setting");
    assert!(!block_on(lease.renew()).unwrap());
    let again = take(&backend, "k", wait(0));
    postgres::batch_on(&bouncer.url(), "RESET synchronous_commit; SET default_transaction_isolation = 'repeatable read'");
    let err = block_on(backend.force_release("k")).expect_err("refused in REPEATABLE READ");
    assert_eq!(err.code(), dokebi_lock::ErrorCode::ProviderFailed, "{err}");
    postgres::batch_on(&bouncer.url(), "RESET default_transaction_isolation");
    assert!(block_on(again.renew()).unwrap(), "the refused break removed nothing");
    support::release(again);
    block_on(provider.close());
}

/// Finding 3, MySQL: the store reads the holders' tokens with
/// `GROUP_CONCAT`, cut at `group_concat_max_len` (1,024 bytes: MySQL's
/// default; MariaDB's is 1 MiB, set to MySQL's on this private server),
/// and refuses a list cut short ("a list of holders' tokens of another
/// shape"). So a shared key with more than 31 readers (33 bytes a token
/// and its comma) cannot be broken at all: every `force_release` is
/// `PROVIDER_FAILED`, which is the stuck key an operator breaks.
#[test]
fn mysql_a_shared_key_with_many_readers_can_be_broken() {
    let _one = one_at_a_time();
    let server = mysql_server::PrivateServer::start(&["--group-concat-max-len=1024"]);
    let config = mysql::yaml("r51_readers", "").replace(&mysql::url(), &server.url());
    let (holders, operators) = (Provider::from_yaml(&config).unwrap(), Provider::from_yaml(&config).unwrap());
    let (holder, operator) = (holders.backend("shared").unwrap(), operators.backend("shared").unwrap());
    let readers: Vec<_> = (0..40).map(|_| take(&holder, "k", support::shared(0))).collect();
    assert_eq!(inspect(&operator, "k").held, 40);
    let forced = block_on(operator.force_release("k"));
    assert!(matches!(&forced, Ok(forced) if forced.removed == 40), "a break of a key with 40 readers: {forced:?}");
    drop(readers);
    block_on(holders.close());
    block_on(operators.close());
}

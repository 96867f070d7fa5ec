//! Review R19: the postgres and mysql drivers as they are after issues 49
//! and 52, probed for a second holder of a key or a fence that repeats or
//! goes back.
//!
//! Found (postgres, synchronous replication): a grant whose commit waits
//! for a synchronous standby and whose statement is cancelled there
//! (`pg_cancel_backend`, by an administrator, a watchdog that cancels long
//! statements, or a failover tool) is answered as a success by
//! PostgreSQL, with only a `WARNING` ("canceling wait for synchronous
//! replication ... The transaction has already committed locally, but
//! might not have been replicated to the standby"), which the driver does
//! not read: its caller is told the key is granted although no standby
//! has the grant. docs/postgres.md and docs/guarantees.md say that with
//! synchronous replication the cut-off primary's client "hears
//! `OUTCOME_UNKNOWN` ... and is granted nothing, and nothing overlaps"
//! (a session terminated there is `OUTCOME_UNKNOWN`,
//! tests/postgres_terminations.rs). After a failover to the standby the
//! key is granted again while the first lease is still valid. A renewal
//! cancelled the same way is told renewed. (`statement_timeout` does not
//! end the wait: PostgreSQL disables it before the commit.) Fixed: the
//! driver counts the `WARNING` notices of each statement connection and
//! answers a call that received one between its send and its answer as
//! unknown (`OUTCOME_UNKNOWN`); these tests, and one of a hand-over
//! (`_hand_over`) cancelled the same way, run by default.
//!
//! Found (mysql, lossless semi-synchronous replication, `AFTER_SYNC`, as
//! docs/mysql.md recommends): `KILL QUERY` of a grant waiting for the
//! replica's acknowledgement ends the wait and MariaDB 10.11 answers the
//! `CALL` as if nothing happened: the caller is told granted although the
//! replica never received the grant (docs/mysql.md counts a killed query,
//! 1317, as `OUTCOME_UNKNOWN`, and says semi-synchronous replication lost
//! no grant in a failover). After a failover to the replica the key is
//! granted again while the first lease is valid. A renewal killed the
//! same way is told renewed. Open, stated as a limit in docs/mysql.md and
//! docs/guarantees.md: the client sees nothing of it (checked by hand on
//! MariaDB 10.11: the OK packet counts no warning, `SHOW WARNINGS` is
//! empty, no session state change is tracked, the procedure runs on after
//! its `COMMIT`); only the global counter `Rpl_semi_sync_master_no_tx`
//! moves, which any session's unacknowledged commit moves too, and every
//! commit while semi-synchronous replication is off. The two tests stay
//! ignored.
//!
//! In all four the fences stay in order (the second holder's is higher):
//! the overlap is the one docs/guarantees.md states for a failover to an
//! asynchronous standby or replica, here under the replication settings
//! the docs say prevent it.
//!
//! Probed and held (by reading, see the report): the cleanup racing a
//! take (both drivers re-check under the key row locks, the take reads
//! the clock after its locks: `UTC_TIMESTAMP(6)` is read per statement
//! inside a MariaDB procedure, checked by hand), a renewal committing
//! after a take's check (key row locks, dead rows), `fenceRetentionMs`
//! differing between backends of one table (`fence_until` only moves
//! forward), a lost renewal or give-back delivered late (own token's live
//! rows only).

#[path = "mysql/server.rs"]
mod mysql_server;
mod postgres;
#[path = "postgres/server.rs"]
mod server;
mod sync_standby;

use std::time::Duration;

use dokebi_lock::{AcquireOptions, ErrorCode, LockMode, Provider};
use futures::executor::block_on;
use postgres::{backend, count_on, eventually, wait};
use sync_standby::{standby_down, synchronous};

/// A primary with a synchronous standby (`synchronous_standby_names =
/// '*'`) that is down: a grant commits locally and waits for it. An
/// administrator cancels the waiting statement. The caller must not be
/// told granted (the grant is on no standby): after the primary crashes
/// and the standby is promoted, the key is granted to another process
/// while the first lease is still valid.
#[test]
fn a_grant_cancelled_while_it_waits_for_the_synchronous_standby_is_not_told_granted() {
    let mut primary = server::PrivateServer::start("r19-sync-cancel", &[]);
    let mut standby = primary.standby("r19-sync-cancel-standby");
    synchronous(&primary.url());
    let admin = primary.url();
    let tag = "dl_r19_sync";
    let url = format!("{admin}&application_name={tag}");
    let provider = Provider::from_yaml(&postgres::yaml_on(&url, "dokebi", "        leaseMs: 60000\n", "")).unwrap();
    let lock = backend(&provider);
    // The tables and functions, on the standby too.
    let warm = block_on(lock.acquire("warm", wait(5_000))).unwrap();
    assert!(block_on(warm.release()).unwrap());
    // The synchronous standby goes down: every grant now waits for it.
    standby_down(&admin, &mut standby);
    let acquiring = {
        let lock = lock.clone();
        std::thread::spawn(move || block_on(lock.acquire("k", wait(0))))
    };
    let waiting = format!("FROM pg_stat_activity WHERE application_name = '{tag}' AND wait_event = 'SyncRep'");
    eventually("the grant waits for the standby", || count_on(&admin, &format!("SELECT count(*) {waiting}")) == 1);
    // An administrator (or a watchdog of long statements) cancels it.
    assert_eq!(count_on(&admin, &format!("SELECT count(*) FROM (SELECT pg_cancel_backend(pid) {waiting}) c")), 1);
    let first = acquiring.join().unwrap();
    assert_eq!(first.as_ref().err().map(|err| err.code()), Some(ErrorCode::OutcomeUnknown), "the cancelled grant is OUTCOME_UNKNOWN");
    // A failover: the primary is lost, the standby (which never had the
    // grant) promoted.
    primary.crash();
    standby.start_again();
    standby.promote();
    let other = Provider::from_yaml(&postgres::yaml_on(&standby.url(), "dokebi", "        leaseMs: 60000\n", "")).unwrap();
    let second = block_on(backend(&other).acquire("k", wait(0)));
    if let Ok(lease) = &first {
        assert!(
            !(lease.is_valid() && second.is_ok()),
            "two holders of k: the first told granted (fence {}, valid {:?} more) by a grant the standby never had, the second granted \
             by the promoted standby (fence {:?})",
            lease.fence(),
            lease.remaining(),
            second.as_ref().map(|l| l.fence()).ok()
        );
    }
    std::thread::sleep(Duration::from_millis(10));
    block_on(provider.close());
    block_on(other.close());
}

/// The same for a renewal: a holder's renewal waits for the synchronous
/// standby, which is down, and is cancelled there. It must not be told
/// renewed (the standby keeps the grant's expiry): after the failover the
/// key is granted to another process once that expiry passes, while the
/// first lease, told renewed, is still valid.
#[test]
fn a_renewal_cancelled_while_it_waits_for_the_synchronous_standby_is_not_told_renewed() {
    let mut primary = server::PrivateServer::start("r19-sync-renew", &[]);
    let mut standby = primary.standby("r19-sync-renew-standby");
    synchronous(&primary.url());
    let admin = primary.url();
    let tag = "dl_r19_renew";
    let url = format!("{admin}&application_name={tag}");
    let provider = Provider::from_yaml(&postgres::yaml_on(&url, "dokebi", "        leaseMs: 4000\n", "")).unwrap();
    let lock = backend(&provider);
    let first = block_on(lock.acquire("k", wait(5_000))).unwrap();
    standby_down(&admin, &mut standby);
    std::thread::sleep(Duration::from_millis(1_500));
    let waiting = format!("FROM pg_stat_activity WHERE application_name = '{tag}' AND wait_event = 'SyncRep'");
    let renewed = std::thread::scope(|scope| {
        let renewing = scope.spawn(|| block_on(first.renew()));
        eventually("the renewal waits for the standby", || count_on(&admin, &format!("SELECT count(*) {waiting}")) == 1);
        assert_eq!(count_on(&admin, &format!("SELECT count(*) FROM (SELECT pg_cancel_backend(pid) {waiting}) c")), 1);
        renewing.join().unwrap()
    });
    assert_eq!(renewed.as_ref().err().map(|err| err.code()), Some(ErrorCode::OutcomeUnknown), "the cancelled renewal is OUTCOME_UNKNOWN");
    assert!(!first.is_valid(), "a lease whose renewal is unknown is given up");
    primary.crash();
    standby.start_again();
    standby.promote();
    let other = Provider::from_yaml(&postgres::yaml_on(&standby.url(), "dokebi", "        leaseMs: 4000\n", "")).unwrap();
    let second = block_on(backend(&other).acquire("k", wait(10_000)));
    assert!(
        !(matches!(renewed, Ok(true)) && first.is_valid() && second.is_ok()),
        "two holders of k: the first told renewed (fence {}, valid {:?} more) by a renewal the standby never had, the second granted \
         by the promoted standby (fence {:?})",
        first.fence(),
        first.remaining(),
        second.as_ref().map(|l| l.fence()).ok()
    );
    block_on(provider.close());
    block_on(other.close());
}

/// The same for a hand-over (`_hand_over`): a shared lease's release hands
/// the key to an exclusive acquire waiting in the same process, in one
/// statement whose commit waits for the synchronous standby, which is down,
/// and is cancelled there. The waiter must not be told granted: no
/// standby has the grant (while it is down, no grant can be replicated,
/// so a waiter told granted then is told so wrongly; after a failover the
/// key would be granted again, as in the tests above).
#[test]
fn a_hand_over_cancelled_while_it_waits_for_the_synchronous_standby_grants_nothing() {
    let primary = server::PrivateServer::start("r19-sync-hand", &[]);
    let mut standby = primary.standby("r19-sync-hand-standby");
    synchronous(&primary.url());
    let admin = primary.url();
    let tag = "dl_r19_hand";
    let url = format!("{admin}&application_name={tag}");
    // Slow polls: the waiter's own tries do not write meanwhile.
    let terms = "        leaseMs: 60000\n        pollIntervalMs: 5000\n        notifyPollIntervalMs: 5000\n";
    let provider = Provider::from_yaml(&postgres::yaml_on(&url, "dokebi", terms, "")).unwrap();
    let lock = backend(&provider);
    let reader = block_on(lock.acquire("k", AcquireOptions { mode: LockMode::Shared, ..wait(5_000) })).unwrap();
    let writing = {
        let lock = lock.clone();
        std::thread::spawn(move || block_on(lock.acquire("k", wait(8_000))))
    };
    eventually("the writer waits", || postgres::counts(&lock).waiting == 1);
    std::thread::sleep(Duration::from_millis(300));
    standby_down(&admin, &mut standby);
    let waiting =
        format!("FROM pg_stat_activity WHERE application_name = '{tag}' AND wait_event = 'SyncRep' AND query LIKE '%\\_hand\\_over%'");
    let released = std::thread::scope(|scope| {
        let releasing = scope.spawn(|| block_on(reader.release()));
        eventually("the hand-over waits for the standby", || count_on(&admin, &format!("SELECT count(*) {waiting}")) == 1);
        assert_eq!(count_on(&admin, &format!("SELECT count(*) FROM (SELECT pg_cancel_backend(pid) {waiting}) c")), 1);
        releasing.join().unwrap()
    });
    let written = writing.join().unwrap();
    assert_eq!(released.as_ref().err().map(|err| err.code()), Some(ErrorCode::OutcomeUnknown), "the cancelled hand-over's release");
    assert!(
        written.is_err(),
        "the writer told granted (fence {:?}) by a hand-over no standby has (release: {:?})",
        written.as_ref().map(|lease| lease.fence()).ok(),
        released.as_ref().map_err(|err| err.code()),
    );
    block_on(provider.close());
}

/// The mysql driver under the same cancel: a lossless semi-synchronous
/// primary (`AFTER_SYNC`) whose replica stopped receiving, a grant waiting
/// for the replica's acknowledgement, and `KILL QUERY` of it. The caller
/// must not be told granted: after the primary crashes and the replica is
/// promoted, the key is granted to another process while the first lease
/// is still valid.
#[test]
#[ignore = "open (docs/mysql.md, docs/guarantees.md): a grant whose semi-synchronous wait is ended by KILL QUERY is told granted; after a failover the key is granted again"]
fn mysql_a_grant_killed_while_it_waits_for_the_semi_synchronous_replica_is_not_told_granted() {
    semi_synchronous_wait_ended(None);
}

/// A grant waits for the acknowledgement of a semi-synchronous replica that
/// stopped receiving; `KILL QUERY` ends the wait, or, with
/// `max_statement_time`, the server may (it did not: with
/// `max_statement_time = 2` the grant waited on until `commandTimeoutMs`,
/// and the driver's `KILL` of the connection made it `OUTCOME_UNKNOWN`, as
/// it should; that probe held and was removed, it took 11 s). Then a
/// failover to the replica.
fn semi_synchronous_wait_ended(max_statement_time: Option<u32>) {
    use mysql_server::{PrivateServer, GRANTS};
    let yaml = |url: &str| {
        format!(
            "schemaVersion: 1\noptions:\n  dokebi-mysql:\n    connections:\n      main: {{ url: '{url}', commandTimeoutMs: 5000 }}\n  dokebi-lock:\n    backends:\n      shared: {{ driver: mysql, connection: main, table: r19_lock, leaseMs: 60000 }}\n"
        )
    };
    let mut primary = PrivateServer::start(&[GRANTS, "--log-bin", "--server-id=1", "--binlog-format=ROW", "--sync-binlog=1"]);
    let replica = primary.replica_through(primary.port(), &["--rpl-semi-sync-slave-enabled=ON"]);
    primary.replicate_semi_synchronously(&replica);
    if let Some(seconds) = max_statement_time {
        primary.run(&format!("SET GLOBAL max_statement_time = {seconds}")).unwrap();
    }
    let provider = Provider::from_yaml(&yaml(&primary.url())).unwrap();
    let lock = provider.backend("shared").unwrap();
    let warm = block_on(lock.acquire("warm", wait(5_000))).unwrap();
    assert!(block_on(warm.release()).unwrap());
    eventually("the replica applied the tables", || !replica.lag_behind(&primary));
    replica.run("STOP SLAVE IO_THREAD").unwrap();
    let acquiring = {
        let lock = lock.clone();
        std::thread::spawn(move || block_on(lock.acquire("k", wait(0))))
    };
    let waiting = "FROM information_schema.PROCESSLIST WHERE STATE LIKE '%semi-sync%' AND USER = 'root' AND COMMAND = 'Query'";
    eventually("the grant waits for the replica", || primary.first::<i64>(&format!("SELECT COUNT(*) {waiting}")).unwrap() == Some(1));
    if max_statement_time.is_none() {
        let id: i64 = primary.first(&format!("SELECT ID {waiting}")).unwrap().unwrap();
        primary.run(&format!("KILL QUERY {id}")).unwrap();
    }
    let first = acquiring.join().unwrap();
    replica.promote();
    primary.crash();
    let other = Provider::from_yaml(&yaml(&replica.url())).unwrap();
    let second = block_on(other.backend("shared").unwrap().acquire("k", wait(0)));
    if let Ok(lease) = &first {
        assert!(
            !(lease.is_valid() && second.is_ok()),
            "two holders of k: the first told granted (fence {}, valid {:?} more) by a grant the replica never had, the second granted by \
             the promoted replica (fence {:?})",
            lease.fence(),
            lease.remaining(),
            second.as_ref().map(|l| l.fence()).ok()
        );
    }
    block_on(provider.close());
    block_on(other.close());
}

/// The mysql driver's renewal under the same `KILL QUERY`: a holder's
/// renewal waits for the acknowledgement of the semi-synchronous replica,
/// which stopped receiving, and is killed there. It must not be told
/// renewed (the replica keeps the grant's expiry): after the failover the
/// key is granted to another process once that expiry passes, while the
/// first lease, told renewed, is still valid.
#[test]
#[ignore = "open (docs/mysql.md, docs/guarantees.md): a renewal whose semi-synchronous wait is ended by KILL QUERY is told renewed; after a failover the key is granted again within it"]
fn mysql_a_renewal_killed_while_it_waits_for_the_semi_synchronous_replica_is_not_told_renewed() {
    use mysql_server::{PrivateServer, GRANTS};
    let yaml = |url: &str| {
        format!(
            "schemaVersion: 1\noptions:\n  dokebi-mysql:\n    connections:\n      main: {{ url: '{url}', commandTimeoutMs: 3000 }}\n  dokebi-lock:\n    backends:\n      shared: {{ driver: mysql, connection: main, table: r19_lock, leaseMs: 4000 }}\n"
        )
    };
    let mut primary = PrivateServer::start(&[GRANTS, "--log-bin", "--server-id=1", "--binlog-format=ROW", "--sync-binlog=1"]);
    let replica = primary.replica_through(primary.port(), &["--rpl-semi-sync-slave-enabled=ON"]);
    primary.replicate_semi_synchronously(&replica);
    let provider = Provider::from_yaml(&yaml(&primary.url())).unwrap();
    let first = block_on(provider.backend("shared").unwrap().acquire("k", wait(5_000))).unwrap();
    eventually("the replica applied the grant", || !replica.lag_behind(&primary));
    replica.run("STOP SLAVE IO_THREAD").unwrap();
    std::thread::sleep(Duration::from_millis(1_500));
    let waiting = "FROM information_schema.PROCESSLIST WHERE STATE LIKE '%semi-sync%' AND USER = 'root' AND COMMAND = 'Query'";
    let renewed = std::thread::scope(|scope| {
        let renewing = scope.spawn(|| block_on(first.renew()));
        eventually("the renewal waits for the replica", || primary.first::<i64>(&format!("SELECT COUNT(*) {waiting}")).unwrap() == Some(1));
        let id: i64 = primary.first(&format!("SELECT ID {waiting}")).unwrap().unwrap();
        primary.run(&format!("KILL QUERY {id}")).unwrap();
        renewing.join().unwrap()
    });
    replica.promote();
    primary.crash();
    let other = Provider::from_yaml(&yaml(&replica.url())).unwrap();
    let second = block_on(other.backend("shared").unwrap().acquire("k", wait(10_000)));
    assert!(
        !(matches!(renewed, Ok(true)) && first.is_valid() && second.is_ok()),
        "two holders of k: the first told renewed (fence {}, valid {:?} more) by a renewal the replica never had, the second granted \
         by the promoted replica (fence {:?})",
        first.fence(),
        first.remaining(),
        second.as_ref().map(|l| l.fence()).ok()
    );
    block_on(provider.close());
    block_on(other.close());
}

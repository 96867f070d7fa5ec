//! The postgres driver across what its server goes through: a crash (an
//! immediate stop, then recovery from the WAL) with grants committed
//! synchronously (the default) and with `synchronous_commit = off` on the
//! server, a restart right after the pool's last use, and a failover to a standby that missed the last grants. Each
//! test runs PostgreSQL servers of its own (tests/postgres/server.rs: root
//! runs them as the `postgres` user), on the same host, so the servers
//! share one clock: the case the fence guarantee of docs/guarantees.md assumes.

mod postgres;
#[path = "postgres/server.rs"]
mod server;

use dokebi_lock::{ErrorCode, Provider};
use futures::executor::block_on;
use postgres::{backend, code, wait};
use server::PrivateServer;

fn open(url: &str) -> Provider {
    Provider::from_yaml(&postgres::yaml_on(url, "dokebi", "", "")).unwrap()
}

/// The fences of one grant (acquire, then release) of each of `keys`,
/// each waiting at most `wait_ms` for its key.
fn fences(provider: &Provider, keys: &[String], wait_ms: u64) -> Vec<u64> {
    keys.iter()
        .map(|key| {
            let lease = block_on(backend(provider).acquire(key, wait(wait_ms))).unwrap();
            let fence = lease.fence();
            assert!(block_on(lease.release()).unwrap());
            fence
        })
        .collect()
}

/// Grants each of `keys` once; the highest fence.
fn grant_each(provider: &Provider, keys: &[String]) -> u64 {
    fences(provider, keys, 5000).into_iter().max().unwrap()
}

/// The lowest fence of a new grant of each of `keys` (after a restart:
/// waiting longer, while the driver reconnects).
fn lowest_fence(provider: &Provider, keys: &[String]) -> u64 {
    fences(provider, keys, 15_000).into_iter().min().unwrap()
}

fn keys(prefix: &str) -> Vec<String> {
    (0..20).map(|i| format!("{prefix}:{i}")).collect()
}

#[test]
fn a_grant_survives_a_crash_and_every_later_fence_is_above_the_earlier_ones() {
    let mut server = PrivateServer::start("crash", &[]);
    let before = open(&server.url());
    let highest = grant_each(&before, &keys("order"));
    let held = block_on(backend(&before).acquire("held", wait(0))).unwrap();
    server.crash();
    server.start_again();

    let after = open(&server.url());
    // The grant was on disk before its caller heard of it: after recovery
    // the key is still held.
    assert_eq!(code(block_on(backend(&after).acquire("held", wait(0)))), ErrorCode::LockBusy);
    // Its holder releases it through a new connection, and the key goes on.
    assert!(block_on(held.release()).unwrap(), "the lease granted before the crash is still its holder's");
    let next = block_on(backend(&after).acquire("held", wait(5000))).unwrap();
    assert!(next.fence() > held.fence());
    assert!(block_on(next.release()).unwrap());
    assert!(lowest_fence(&after, &keys("order")) > highest);
    block_on(before.close());
    block_on(after.close());
}

#[test]
fn fences_rise_across_a_crash_that_lost_the_last_grants_and_their_counters() {
    // Nothing commits synchronously and the WAL writer waits 10 s between
    // flushes: the crash loses what the last grants wrote.
    let mut server = PrivateServer::start("async", &["synchronous_commit = off", "wal_writer_delay = 10000ms"]);
    let before = open(&server.url());
    // The tables and the first grants reach the disk (a checkpoint).
    let earlier = grant_each(&before, &keys("order"));
    postgres_checkpoint(&server);
    let highest = grant_each(&before, &keys("order")).max(earlier);
    let held = block_on(backend(&before).acquire("held", wait(0))).unwrap();
    server.crash();
    server.start_again();

    let after = open(&server.url());
    let lost = block_on(backend(&after).acquire("held", wait(0))).expect("the crash lost the last grant (else this test shows nothing)");
    assert!(lost.fence() > held.fence(), "the same key granted again after the crash, with a fence above the lost grant's");
    assert!(block_on(lost.release()).unwrap());
    assert!(lowest_fence(&after, &keys("order")) > highest);
    block_on(before.close());
    block_on(after.close());
}

#[test]
fn fences_rise_after_a_failover_to_a_standby_that_missed_the_last_grants() {
    let mut primary = PrivateServer::start("primary", &[]);
    let mut standby = primary.standby("standby");
    let before = open(&primary.url());
    let earlier = grant_each(&before, &keys("order"));
    // The standby has what was granted so far, then stops streaming; the
    // primary goes on granting, and then dies.
    postgres::eventually("the standby has the key rows", || replayed_keys(&standby) >= 20);
    standby.stop();
    let highest = grant_each(&before, &keys("order")).max(earlier);
    let held = block_on(backend(&before).acquire("held", wait(0))).unwrap();
    primary.crash();
    standby.start_again();
    standby.promote();

    let after = open(&standby.url());
    let lost = block_on(backend(&after).acquire("held", wait(0))).expect("the standby never saw the last grant");
    assert!(lost.fence() > held.fence(), "the key granted again on the new primary, with a fence above the old primary's");
    assert!(block_on(lost.release()).unwrap());
    assert!(lowest_fence(&after, &keys("order")) > highest);
    block_on(before.close());
    block_on(after.close());
}

/// A restart right after the pool's last use (the mysql driver's case of
/// `tests/review_r1.rs`): each pooled client's connection task reads the
/// server's end of its session when it comes, so the next statement goes
/// out on a new connection, never on the dead one, and no acquire's
/// outcome is unknown. A planned restart (a crash may lose the release
/// before it, which commits without waiting for its flush: the key then
/// stays held until `leaseMs`, as docs/postgres.md says).
#[test]
fn acquires_right_after_a_restart_are_granted() {
    let mut server = PrivateServer::start("restart", &[]);
    let provider = open(&server.url());
    assert!(block_on(block_on(backend(&provider).acquire("k", wait(0))).unwrap().release()).unwrap());
    server.stop();
    server.start_again();
    let outcomes: Vec<_> = (0..4)
        .map(|_| {
            block_on(backend(&provider).acquire("k", wait(3000))).map(|lease| block_on(lease.release()).is_ok()).map_err(|err| err.code())
        })
        .collect();
    assert!(outcomes.iter().all(|outcome| outcome == &Ok(true)), "four acquires of a free key after the restart: {outcomes:?}");
    block_on(provider.close());
}

/// `CHECKPOINT` on `server`: everything committed so far is on disk.
fn postgres_checkpoint(server: &PrivateServer) {
    query(&server.url(), "CHECKPOINT");
}

/// The key rows a standby has replayed (0 before the table exists there).
fn replayed_keys(standby: &PrivateServer) -> i64 {
    let tables = query(&standby.url(), "SELECT count(*) FROM pg_class WHERE oid = to_regclass('dokebi.dokebi_lock')");
    if tables == 0 {
        return 0;
    }
    query(&standby.url(), "SELECT count(*) FROM dokebi.dokebi_lock")
}

/// The number `sql` answers on `url` (a connection of its own).
fn query(url: &str, sql: &str) -> i64 {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
        let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls).await.unwrap();
        tokio::spawn(connection);
        let rows = client.simple_query(sql).await.unwrap();
        rows.iter()
            .find_map(|message| match message {
                tokio_postgres::SimpleQueryMessage::Row(row) => row.get(0).map(|value| value.parse().unwrap()),
                _ => None,
            })
            .unwrap_or(0)
    })
}

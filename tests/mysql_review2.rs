//! Review R4 of the mysql driver: interleavings, restarts, clocks and
//! server settings that the first review (`tests/mysql_review.rs`) did not
//! try, against MariaDB 10.11 (the machine's, or a private `mariadbd` on a
//! free port when a test needs a server setting of its own). Each test
//! fails on the driver as reviewed.

mod mysql;
#[path = "mysql/server.rs"]
mod mysql_server;

use std::time::{Duration, Instant};

use dokebi_lock::{AcquireOptions, Provider};
use futures::executor::block_on;
use mysql::{url, yaml, Table};
use mysql_server::PrivateServer;

fn wait(ms: u64) -> AcquireOptions {
    AcquireOptions { wait_timeout: Some(Duration::from_millis(ms)), ..AcquireOptions::default() }
}

/// A provider of one backend `shared` on table `table` of `server`.
fn provider_on(server: &PrivateServer, table: &str, fields: &str) -> Provider {
    Provider::from_yaml(&config_on(server, table, fields)).unwrap()
}

/// [`yaml`] on `server`.
fn config_on(server: &PrivateServer, table: &str, fields: &str) -> String {
    yaml(table, fields).replace(&url(), &server.url())
}

/// Finding 1: contention moves a policy acquire, and two processes hold a
/// key. A take that waits for a key's row lock longer than
/// `innodb_lock_wait_timeout` (three quarters of `commandTimeoutMs`: 1 s
/// at the default 2000) is refused with 1205, which the driver reports as
/// `PROVIDER_FAILED`, "nothing done". But the row lock is another call's on
/// the same key: the key is busy, not the store unavailable. A policy that
/// falls back takes `PROVIDER_FAILED` for unavailability and serves the
/// key from its next member, although policy.md says contention never
/// moves an acquire; and it then passes the member over for
/// `reprobeCooldownMs`, so keys nobody contends move too.
///
/// Here two processes of one configuration (a policy over `shared`, then
/// `spare`, another mysql table: the same tier): the first acquires "k",
/// "y1" and "y2", and its one `CALL` holds the row lock of "k" while it
/// waits 0.8 s for each of the others (held by two other calls in flight,
/// here plain sessions; each wait within its 1 s, the whole within its
/// 2 s). The second acquires "k" meanwhile: refused 1 s later, it falls
/// back to `spare`, and the first is granted "k" on `shared`. Without the other calls: an
/// acquire of 2,000 keys holds its first key's row lock for 2.7 s on this
/// machine (4,000: 9.9 s), long enough alone. A deadlock (1213) is the
/// same case.
#[test]
fn a_key_row_locked_by_another_call_is_busy_never_a_reason_to_fall_back() {
    let table = Table::fresh();
    let config = yaml(&table.0, "").replace("leaseMs: 5000", "leaseMs: 60000")
        + &format!(
            "      spare: {{ driver: mysql, connection: main, table: {}, leaseMs: 60000 }}\n      locks:\n        driver: policy\n        default: {{ backends: [shared, spare], minTier: shared, onUnavailable: fallBack }}\n",
            table.named("b")
        );
    let (first, second) = (Provider::from_yaml(&config).unwrap(), Provider::from_yaml(&config).unwrap());
    // Both installed and ready before the race.
    for provider in [&first, &second] {
        for member in ["shared", "spare"] {
            let lease = block_on(provider.backend(member).unwrap().acquire("warm-up", wait(0))).unwrap();
            assert!(block_on(lease.release()).unwrap());
        }
    }
    let others: Vec<_> =
        [("y1", 800), ("y2", 1600)].into_iter().map(|(key, ms)| hold_row_lock(&table.0, key, Duration::from_millis(ms))).collect();
    let first_take = std::thread::spawn({
        let locks = first.backend("locks").unwrap();
        move || block_on(locks.acquire_many(&["k", "y1", "y2"], wait(0)))
    });
    // The first's CALL has locked "k" (the first in byte order) by now.
    std::thread::sleep(Duration::from_millis(200));
    let locks = second.backend("locks").unwrap();
    let served = block_on(locks.acquire("k", wait(0)));
    let first_held = first_take.join().unwrap();
    others.into_iter().for_each(|other| other.join().unwrap());
    // Then shared is passed over: a key the first holds, which nobody
    // contended, moves too.
    let other = block_on(locks.acquire("y2", wait(0)));
    let member = |lease: &dokebi_lock::Result<dokebi_lock::Lease>| match lease {
        Ok(lease) => format!("{} (fence {})", lease.served().map_or("?", |served| served.member.name.as_str()), lease.fence()),
        Err(err) => format!("{:?}", err.code()),
    };
    assert!(
        !(first_held.is_ok() && served.is_ok()),
        "two holders of k: the first process through {}, the second through {} after shared answered its busy key \
         PROVIDER_FAILED; then y2, held by the first, was served to the second by {}",
        member(&first_held),
        member(&served),
        member(&other),
    );
}

/// Holds the row lock of `key` in `table` (the default namespace) for
/// `held`, as a call of the driver in flight does: answers once it is held.
fn hold_row_lock(table: &str, key: &str, held: Duration) -> std::thread::JoinHandle<()> {
    hold_in_a_transaction(format!("CALL `{table}_lock`(X'{}', '{}')", hex("dokebi-lock"), hex(key)), held)
}

fn hex(text: &str) -> String {
    text.bytes().map(|byte| format!("{byte:02x}")).collect()
}

/// Runs `statement` in a READ COMMITTED transaction of a connection of its
/// own, then keeps the transaction open for `held` (its row locks and
/// changes with it) and rolls it back: answers once `statement` ran.
fn hold_in_a_transaction(statement: String, held: Duration) -> std::thread::JoinHandle<()> {
    let (done, is_done) = std::sync::mpsc::channel();
    let holder = std::thread::spawn(move || {
        use mysql_async::prelude::Queryable;
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(async {
            let opts = mysql_async::OptsBuilder::from_opts(mysql_async::Opts::from_url(&url()).unwrap()).prefer_socket(false);
            let mut conn = mysql_async::Conn::new(opts).await.unwrap();
            conn.query_drop("SET TRANSACTION ISOLATION LEVEL READ COMMITTED").await.unwrap();
            conn.query_drop("START TRANSACTION").await.unwrap();
            conn.query_drop(statement).await.unwrap();
            done.send(()).unwrap();
            tokio::time::sleep(held).await;
            conn.query_drop("ROLLBACK").await.unwrap();
            let _ = conn.disconnect().await;
        });
    });
    is_done.recv().unwrap();
    holder
}

/// Finding 2: with `autocommit` off and `SERIALIZABLE` as the server's
/// defaults (the brief's "set globally"), the release poller's plain
/// `SELECT`s of `<table>_released` become share-locking reads in one
/// transaction that never ends (the poller never commits): it keeps a
/// next-key lock on the log's end. Every release that frees a key someone
/// waits for inserts into the log (in READ COMMITTED, but an insert still
/// waits for another's gap lock), waits `innodb_lock_wait_timeout` and is
/// refused (1205): the holder's release is `PROVIDER_FAILED`, its
/// background retries fail the same way, and the waiter gets the key only
/// when the lease expires.
#[test]
fn a_release_is_not_refused_while_a_waiter_s_poller_reads_the_log_on_a_serializable_server_without_autocommit() {
    let server = PrivateServer::start(&["--autocommit=0", "--transaction-isolation=SERIALIZABLE"]);
    let (holder, waiter) = (provider_on(&server, "r4_ser", ""), provider_on(&server, "r4_ser", ""));
    let (a, b) = (holder.backend("shared").unwrap(), waiter.backend("shared").unwrap());
    let held = block_on(a.acquire("k", wait(0))).unwrap();
    let waiting = std::thread::spawn(move || {
        let started = Instant::now();
        block_on(b.acquire("k", wait(8_000))).map(|_| started.elapsed())
    });
    // The waiter's try was refused (its mark left) and its poller reads the log.
    std::thread::sleep(Duration::from_millis(500));
    let released = block_on(held.release());
    let served = waiting.join().unwrap();
    assert!(
        matches!(released, Ok(true)),
        "the release was refused: {:?}; the waiter was served after {served:?} (the lease is 5 s)",
        released.map_err(|err| (err.code(), err.to_string()))
    );
}

/// Finding 3: with `autocommit` off as the server's default (and its
/// default REPEATABLE READ), the poller's first `SELECT` opens a
/// transaction that it never commits: every later read of the log sees the
/// snapshot of that first one, so no release of another process is ever
/// found. Waiters are served by their safety-net retry
/// (`notifyPollIntervalMs`, here 5 s) while `status().mysql.polling` says
/// the log is read, and the open snapshot holds back InnoDB's purge for as
/// long as the process runs.
#[test]
fn the_release_log_is_read_afresh_on_a_server_without_autocommit() {
    let server = PrivateServer::start(&["--autocommit=0"]);
    let slow = ", pollIntervalMs: 5000, notifyPollIntervalMs: 5000";
    let (holder, waiter) = (provider_on(&server, "r4_auto", slow), provider_on(&server, "r4_auto", slow));
    let (a, b) = (holder.backend("shared").unwrap(), waiter.backend("shared").unwrap());
    let mut handoffs = Vec::new();
    for round in 0..3 {
        let held = block_on(a.acquire("baton", wait(0))).unwrap();
        let waiting = std::thread::spawn({
            let b = b.clone();
            move || {
                let lease = block_on(b.acquire("baton", wait(10_000))).unwrap();
                let granted = Instant::now();
                assert!(block_on(lease.release()).unwrap());
                granted
            }
        });
        std::thread::sleep(Duration::from_millis(if round == 0 { 500 } else { 100 }));
        let released = Instant::now();
        assert!(block_on(held.release()).unwrap());
        handoffs.push(waiting.join().unwrap().duration_since(released));
    }
    let polling = matches!(b.status().mysql, Some(ref mysql) if mysql.polling);
    assert!(
        handoffs.iter().all(|handoff| *handoff < Duration::from_secs(1)),
        "hand-offs {handoffs:?} (polling: {polling}): the waiter was served by its 5 s retry, not by the release log"
    );
}

/// Finding 4: with `completion_type = CHAIN` as the server's default, each
/// procedure's `COMMIT` starts the next transaction at once; the next
/// `CALL` on that connection fails at its `SET TRANSACTION` (1568, the
/// handler's `ROLLBACK` chains again), so every connection of the pool
/// serves one call and then refuses every call for good. (With
/// `completion_type = RELEASE` the `COMMIT` ends the connection: every call
/// commits and answers 1927, `OUTCOME_UNKNOWN`; checked by hand.)
#[test]
fn a_connection_serves_more_than_one_call_on_a_server_that_chains_its_commits() {
    let server = PrivateServer::start(&["--completion-type=CHAIN"]);
    let provider = provider_on(&server, "r4_chain", "");
    let backend = provider.backend("shared").unwrap();
    let mut outcomes = Vec::new();
    for _ in 0..3 {
        let outcome = block_on(backend.acquire("k", wait(0))).map(|lease| block_on(lease.release()));
        outcomes.push(match outcome {
            Ok(Ok(released)) => format!("released: {released}"),
            Ok(Err(err)) | Err(err) => format!("{:?}: {err}", err.code()),
        });
    }
    assert!(outcomes.iter().all(|outcome| outcome == "released: true"), "{outcomes:#?}");
}

/// Finding 5: with the binary log on and `binlog_format = STATEMENT` (a
/// setting some replication setups keep), InnoDB refuses every write of a
/// READ COMMITTED transaction (1665: it can be logged by rows only), and
/// each procedure runs in READ COMMITTED: every acquire was
/// `PROVIDER_FAILED` ("MySQL refused the command", with nothing that names
/// the setting). The driver cannot work there (its isolation is what keeps
/// neighbouring keys from locking each other): it refuses at its first
/// use, with a message and a fix that name the setting.
#[test]
fn a_server_that_logs_statements_is_refused_with_a_fix_that_names_binlog_format() {
    let server = PrivateServer::start(&["--log-bin", "--server-id=1", "--binlog-format=STATEMENT"]);
    let provider = provider_on(&server, "r4_stmt", "");
    let err = block_on(provider.backend("shared").unwrap().acquire("k", wait(0))).map(|_| ()).unwrap_err();
    assert_eq!(err.code(), dokebi_lock::ErrorCode::ProviderFailed, "{err}");
    assert!(err.to_string().contains("binlog_format"), "{err}");
    assert!(err.fix().contains("ROW") && err.fix().contains("MIXED"), "{}", err.fix());
    // Nothing was installed on a server the driver cannot use.
    let tables =
        server.sql("SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = 'test' AND TABLE_NAME LIKE 'r4_stmt%'").unwrap();
    assert_eq!(tables, 0);
}

/// What the refusal's fix proposes works: with `binlog_format = MIXED` a
/// READ COMMITTED write is logged by rows.
#[test]
fn the_driver_works_on_a_server_that_logs_mixed() {
    let server = PrivateServer::start(&["--log-bin", "--server-id=1", "--binlog-format=MIXED"]);
    let provider = provider_on(&server, "r4_mixed", "");
    let outcome = block_on(provider.backend("shared").unwrap().acquire("k", wait(0))).map(|lease| block_on(lease.release()));
    assert!(matches!(outcome, Ok(Ok(true))), "{:?}", outcome.map_err(|err| (err.code(), err.to_string())));
}

/// The setting is read at every connect, as `wsrep_on` is: a server set to
/// log statements under a running process (`SET GLOBAL`, or a failover to
/// one configured so) refuses the procedures' writes on each connection
/// made since (1665). Read once per process, at its first use, the refusal
/// then was "MySQL refused the command", with nothing that names the
/// setting.
#[test]
fn a_server_set_to_log_statements_under_a_running_process_is_refused_at_the_next_connect() {
    let server = PrivateServer::start(&["--log-bin", "--server-id=1", "--binlog-format=MIXED"]);
    let provider = provider_on(&server, "r4_later", "");
    let backend = provider.backend("shared").unwrap();
    assert!(block_on(block_on(backend.acquire("k", wait(0))).unwrap().release()).unwrap());
    server.run("SET GLOBAL binlog_format = 'STATEMENT'").unwrap();
    server.kill_clients();
    // A call on a pooled connection the kill ended may not know its outcome.
    let err = (0..5)
        .map(|_| block_on(backend.acquire("k", wait(0))).map(|_| ()).unwrap_err())
        .find(|err| err.code() != dokebi_lock::ErrorCode::OutcomeUnknown)
        .expect("an answer on a new connection");
    assert_eq!(err.code(), dokebi_lock::ErrorCode::ProviderFailed, "{err}");
    assert!(err.to_string().contains("binlog_format"), "{err}");
}

/// Finding 6 (a lease lost, not two holders): a pooled connection that
/// the server closed while it sat idle (its `wait_timeout`, often 60 to
/// 600 s where set; or a restart, a failover) is used as it is: the
/// statement goes out on a dead socket, the read fails, and the outcome is
/// `OUTCOME_UNKNOWN`, although a statement on a connection the server
/// closed before it was sent never ran. A renewal that lands there loses a
/// lease that is intact on the server (and `withLock` aborts its section);
/// an acquire there fails. The pool spreads calls over its `poolSize`
/// connections in turn, so a process whose calls are further apart than
/// `wait_timeout` / `poolSize` meets one at every call.
#[test]
fn a_lease_is_renewed_after_its_pooled_connection_was_closed_by_the_server_s_wait_timeout() {
    let server = PrivateServer::start(&["--wait-timeout=2"]);
    let provider = Provider::from_yaml(&config_on(&server, "r4_idle", "").replace("leaseMs: 5000", "leaseMs: 20000")).unwrap();
    let backend = provider.backend("shared").unwrap();
    let lease = block_on(backend.acquire("k", wait(0))).unwrap();
    // Every connection of the pool (4) opened and used once.
    for _ in 0..4 {
        assert!(block_on(lease.renew()).unwrap());
    }
    std::thread::sleep(Duration::from_secs(3));
    let renewed = block_on(lease.renew());
    assert!(
        matches!(renewed, Ok(true)),
        "the renewal after 3 s idle: {:?}; the lease was intact, and is now given up: another process's acquire of k: {:?}",
        renewed.map_err(|err| (err.code(), err.to_string())),
        block_on(provider_on(&server, "r4_idle", "").backend("shared").unwrap().acquire("k", wait(0)))
            .map(|_| "granted to another")
            .map_err(|err| err.code()),
    );
}

/// The same after a crash and restart of the server: the lease survives
/// on the server (the other process still finds the key busy), but its
/// next renewal on a connection from before the crash loses it.
#[test]
fn a_lease_is_renewed_after_the_server_crashed_and_came_back() {
    let mut server = PrivateServer::start(&[]);
    let provider = Provider::from_yaml(&config_on(&server, "r4_crash", "").replace("leaseMs: 5000", "leaseMs: 30000")).unwrap();
    let backend = provider.backend("shared").unwrap();
    let lease = block_on(backend.acquire("k", wait(0))).unwrap();
    for _ in 0..4 {
        assert!(block_on(lease.renew()).unwrap());
    }
    server.crash_and_restart();
    let other = provider_on(&server, "r4_crash", "");
    let busy = block_on(other.backend("shared").unwrap().acquire("k", wait(0))).map(|_| ()).map_err(|err| err.code());
    assert_eq!(busy, Err(dokebi_lock::ErrorCode::LockBusy), "the grant did not survive the crash");
    let renewed = block_on(lease.renew());
    assert!(matches!(renewed, Ok(true)), "the renewal after the restart: {:?}", renewed.map_err(|err| (err.code(), err.to_string())));
}

/// Every connection of the pool (4) opened and used: four pairs, each
/// statement on the next connection in turn.
fn use_every_pooled_connection(backend: &dokebi_lock::Backend) {
    for _ in 0..4 {
        assert!(block_on(block_on(backend.acquire("warm", wait(0))).unwrap().release()).unwrap());
    }
}

/// Acquires on every connection of the pool, each of a key of its own:
/// granted, none `OUTCOME_UNKNOWN`.
fn acquire_on_every_pooled_connection(backend: &dokebi_lock::Backend, after: &str) {
    for at in 0..4 {
        let granted = block_on(backend.acquire(&format!("k{at}"), wait(0)));
        assert!(granted.is_ok(), "acquire {at} {after}: {:?}", granted.map(|_| ()).map_err(|err| (err.code(), err.to_string())));
    }
}

/// An acquire, unlike a renewal, is not sent again when its connection
/// turns out lost (the take may have run): so a pooled connection the
/// server closed while it sat idle (`wait_timeout`) failed the first
/// acquire on each with `OUTCOME_UNKNOWN`, though nothing was sent on a
/// connection already closed. Each process that locks less often than
/// `wait_timeout` / `poolSize` met one at every call.
#[test]
fn acquires_after_the_server_closed_the_idle_pooled_connections_are_granted() {
    let server = PrivateServer::start(&["--wait-timeout=2"]);
    let provider = provider_on(&server, "r4_idle_take", "");
    let backend = provider.backend("shared").unwrap();
    use_every_pooled_connection(&backend);
    std::thread::sleep(Duration::from_secs(3));
    acquire_on_every_pooled_connection(&backend, "after 3 s idle (wait_timeout 2 s)");
}

/// The same after a crash and restart: the connections of before are
/// closed, and the first acquire on each failed `OUTCOME_UNKNOWN`.
#[test]
fn acquires_after_the_server_crashed_and_came_back_are_granted() {
    let mut server = PrivateServer::start(&[]);
    let provider = provider_on(&server, "r4_restart_take", "");
    let backend = provider.backend("shared").unwrap();
    use_every_pooled_connection(&backend);
    server.crash_and_restart();
    std::thread::sleep(Duration::from_millis(1100));
    acquire_on_every_pooled_connection(&backend, "after the restart");
}

/// Finding 7: in a database whose default character set is utf16 (or
/// utf32, ucs2), the procedures' `LONGTEXT` lists take that character
/// set, and `UNHEX` of their hex digits (two bytes each) is NULL: every
/// acquire, of one key too, is refused ("Column 'k' cannot be null"), and
/// `LENGTH` counts bytes, so the count of a list is wrong as well.
#[test]
fn the_driver_works_in_a_database_whose_default_character_set_is_utf16() {
    let database = format!("r4_utf16_{}", std::process::id());
    mysql::rows(&format!("CREATE DATABASE IF NOT EXISTS `{database}` CHARACTER SET utf16"));
    let base = url();
    let config = yaml("r4_utf16", "").replace(&base, &format!("{}/{database}", base.rsplit_once('/').unwrap().0));
    let outcome = block_on(Provider::from_yaml(&config).unwrap().backend("shared").unwrap().acquire("k", wait(0)))
        .map(|lease| block_on(lease.release()).map_err(|err| err.to_string()));
    mysql::rows(&format!("DROP DATABASE `{database}`"));
    assert!(matches!(outcome, Ok(Ok(true))), "{:?}", outcome.map_err(|err| format!("{err:?}")));
}

/// Not a finding (what was tried): three providers of three threads each
/// take one or two of three plain keys, a counted key (limit 2) or a
/// shared key (readers and writers) for a few ms, while a killer ends
/// their `CALL`s at random (`KILL QUERY` or `KILL`, every 2 to 20 ms): no
/// two sections of a plain key overlap and its fences rise in their order,
/// a writer's section overlaps no other, no more than two counted sections
/// overlap, and no fence of a key repeats.
#[test]
#[ignore = "a chaos run of RV2_CHAOS_S seconds (default 20): evidence, not a deterministic check"]
fn killed_calls_never_give_a_key_two_holders() {
    use dokebi_lock::LockMode;
    use mysql_async::prelude::Queryable;
    use std::sync::{Arc, Mutex};
    let table = Table::fresh();
    let seconds: u64 = std::env::var("RV2_CHAOS_S").ok().and_then(|s| s.parse().ok()).unwrap_or(20);
    let config = yaml(&table.0, "").replace("leaseMs: 5000", "leaseMs: 3000").replace("commandTimeoutMs: 2000", "commandTimeoutMs: 1000");
    let providers: Vec<Provider> = (0..3).map(|_| Provider::from_yaml(&config).unwrap()).collect();
    // (key, kind: x plain, r reader, w writer, n counted; fence, start, end)
    type Section = (String, char, u64, Instant, Instant);
    let sections: Arc<Mutex<Vec<Section>>> = Arc::default();
    let until = Instant::now() + Duration::from_secs(seconds);
    let killer = std::thread::spawn({
        let prefix = format!("CALL `{}_", table.0);
        move || {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            runtime.block_on(async {
                let opts = mysql_async::OptsBuilder::from_opts(mysql_async::Opts::from_url(&url()).unwrap()).prefer_socket(false);
                let mut conn = mysql_async::Conn::new(opts).await.unwrap();
                let (mut kills, mut at) = (0u64, 0u64);
                while Instant::now() < until {
                    at += 1;
                    let ids: Vec<u64> = conn
                        .query(format!("SELECT ID FROM information_schema.PROCESSLIST WHERE INFO LIKE '{prefix}%'"))
                        .await
                        .unwrap_or_default();
                    if let Some(id) = ids.get(at as usize % ids.len().max(1)) {
                        let how = if at % 2 == 0 { "KILL QUERY" } else { "KILL" };
                        if conn.query_drop(format!("{how} {id}")).await.is_ok() {
                            kills += 1;
                        }
                    }
                    tokio::time::sleep(Duration::from_millis(2 + at * 7 % 19)).await;
                }
                kills
            })
        }
    });
    let mut workers = Vec::new();
    for (p, provider) in providers.iter().enumerate() {
        for w in 0..3 {
            let backend = provider.backend("shared").unwrap();
            let sections = sections.clone();
            workers.push(std::thread::spawn(move || {
                let (mut granted, mut failed, mut seed) = (0, 0, (p * 3 + w) as u64);
                while Instant::now() < until {
                    seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                    let n = (seed >> 33) as usize;
                    let (keys, kind, options) = match n % 8 {
                        0 | 1 => (vec![format!("c{}", n % 3), format!("c{}", (n % 3 + 1 + n / 3 % 2) % 3)], 'x', wait(2_000)),
                        2 | 3 => (vec![format!("c{}", n % 3)], 'x', wait(2_000)),
                        4 | 5 => (vec!["n0".to_owned()], 'n', AcquireOptions { limit: Some(2), weight: Some(1), ..wait(2_000) }),
                        6 => (vec!["r0".to_owned()], 'r', AcquireOptions { mode: LockMode::Shared, ..wait(2_000) }),
                        _ => (vec!["r0".to_owned()], 'w', wait(2_000)),
                    };
                    let names: Vec<&str> = keys.iter().map(String::as_str).collect();
                    match block_on(backend.acquire_many(&names, options)) {
                        Ok(lease) => {
                            granted += 1;
                            let start = Instant::now();
                            std::thread::sleep(Duration::from_millis((n % 4) as u64));
                            let end = Instant::now();
                            let valid = lease.is_valid();
                            let fences = lease.fences();
                            let _ = block_on(lease.release());
                            if valid {
                                let mut sections = sections.lock().unwrap();
                                for (key, fence) in fences {
                                    sections.push((key.to_string(), kind, fence, start, end));
                                }
                            }
                        }
                        Err(_) => failed += 1,
                    }
                }
                (granted, failed)
            }));
        }
    }
    let counts: Vec<(i32, i32)> = workers.into_iter().map(|worker| worker.join().unwrap()).collect();
    let kills = killer.join().unwrap();
    let mut sections = sections.lock().unwrap().clone();
    sections.sort_by_key(|(key, _, _, start, _)| (key.clone(), *start));
    let mut broken = Vec::new();
    let mut fences = std::collections::BTreeSet::new();
    for (at, (key, kind, fence, start, end)) in sections.iter().enumerate() {
        if !fences.insert((key.clone(), *fence)) {
            broken.push(format!("{key}: fence {fence} repeated"));
        }
        let overlapping: Vec<&Section> = sections
            .iter()
            .enumerate()
            .filter(|(other, s)| *other != at && s.0 == *key && s.3 < *end && *start < s.4)
            .map(|(_, s)| s)
            .collect();
        match kind {
            'x' | 'w' if !overlapping.is_empty() => {
                broken.push(format!("{key}: {kind} section of fence {fence} overlaps {}", overlapping.len()))
            }
            'r' if overlapping.iter().any(|s| s.1 == 'w') => broken.push(format!("{key}: a reader overlaps a writer")),
            'n' if overlapping.iter().filter(|s| s.3 <= *start).count() >= 2 => {
                broken.push(format!("{key}: three counted sections at once"))
            }
            _ => {}
        }
        if *kind == 'x' {
            if let Some(later) = sections[at + 1..].iter().find(|s| s.0 == *key) {
                if later.2 <= *fence {
                    broken.push(format!("{key}: fence {} after {fence}", later.2));
                }
            }
        }
    }
    println!("{} sections, {kills} kills, (granted, failed) per worker {counts:?}", sections.len());
    assert!(broken.is_empty(), "{broken:?}");
}

/// Found by the mysql benchmarks (64 tasks on 64 keys): a release's look
/// for key rows past their retention (`IF EXISTS (SELECT … WHERE
/// fence_until < now)`) was a locking read inside the procedure, so it
/// waited for every such row another call had locked. Two releases each
/// holding its own key's row deadlocked (1213), and a release behind any
/// call's row waited out `innodb_lock_wait_timeout`: `PROVIDER_FAILED`, the
/// lease kept until it expired (7 of 9 smoke runs of the benchmark).
#[test]
fn a_release_never_waits_for_rows_that_other_calls_lock_past_their_retention() {
    let table = Table::fresh();
    let provider = Provider::from_yaml(&yaml(&table.0, ", fenceRetentionMs: 10")).unwrap();
    let backend = provider.backend("shared").unwrap();
    // "a"'s row is past its retention 10 ms after its release.
    assert!(block_on(block_on(backend.acquire("a", wait(0))).unwrap().release()).unwrap());
    let lease = block_on(backend.acquire("b", wait(0))).unwrap();
    std::thread::sleep(Duration::from_millis(50));
    // Another call's take of "a" in flight: its row locked and changed, not yet committed.
    let other = hold_changed_row(&table.0, "a", Duration::from_millis(3000));
    let started = Instant::now();
    let released = block_on(lease.release());
    let took = started.elapsed();
    other.join().unwrap();
    assert!(matches!(released, Ok(true)), "the release of b answered {:?} after {took:?}", released.map_err(|err| err.code()));
    assert!(took < Duration::from_millis(900), "the release of b waited {took:?} for a's row, which another call locked");
    block_on(provider.close());
}

/// Holds `key`'s row of `table` (the default namespace) locked and changed
/// (its `fence_until` lowered, still past) for `held`, as another call's
/// take in flight does: answers once it is held.
fn hold_changed_row(table: &str, key: &str, held: Duration) -> std::thread::JoinHandle<()> {
    hold_in_a_transaction(
        format!("UPDATE `{table}` SET fence_until = fence_until - 1 WHERE ns = X'{}' AND k = X'{}'", hex("dokebi-lock"), hex(key)),
        held,
    )
}

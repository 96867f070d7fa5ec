//! Review r1: probes of the mysql driver against MariaDB, each a finding
//! reproduced on the code it was written against (ignored until fixed, so
//! the build stays green: run with `cargo test --test review_r1 --
//! --ignored`; a fixed one runs with the rest).

mod mysql;
#[path = "mysql/server.rs"]
mod mysql_server;
#[path = "postgres/server.rs"]
mod pg_server;
mod postgres;
#[path = "support/stepped_clock.rs"]
mod stepped_clock;

use std::time::Duration;

use dokebi_lock::{AcquireOptions, ErrorCode, LockMode, Provider};
use futures::executor::block_on;
use mysql::{url, yaml};
use mysql_server::PrivateServer;
use stepped_clock::with_a_clock_to_step;

fn wait(ms: u64) -> AcquireOptions {
    AcquireOptions { wait_timeout: Some(Duration::from_millis(ms)), ..AcquireOptions::default() }
}

fn shared(ms: u64) -> AcquireOptions {
    AcquireOptions { mode: LockMode::Shared, ..wait(ms) }
}

/// A holder whose lease ran out is told at its next `renew()`
/// (guarantees.md: "a holder whose lease expired or was taken over is
/// told"; the "Clocks" item: "check renew() after a resume"). A renewal
/// extends the token's holder rows whose expiry is still ahead of the
/// server's clock; a lease that expired keeps its row (expiry in the past)
/// while the key is granted to a writer in another, free slot. When the
/// server's clock is stepped back by more than the time since that expiry
/// (an NTP step of a few seconds, far inside `fenceRetentionMs`, the only
/// bound guarantees.md gives a step back), the expired row is live again:
/// the late renewal answered true, and the old reader held the key beside
/// the writer, each believing its lease valid. (Its fence is below the
/// writer's, so a fenced store still refuses it once the writer wrote.)
/// A renewal now extends no row a live holder of another token is held
/// against, by a take's rule: the reader's lease is lost.
#[test]
fn mysql_a_renewal_after_the_lease_expired_is_refused_even_after_the_server_s_clock_stepped_back() {
    let (server, offset) = with_a_clock_to_step("mysql", || PrivateServer::start(&[]));
    let config = yaml("r1_clock", "")
        .replace(&url(), &server.url())
        .replace("leaseMs: 5000", "leaseMs: 2000")
        .replace("commandTimeoutMs: 2000", "commandTimeoutMs: 1000");
    let rows =
        || format!("{:?}", server.rows("SELECT slot, shared, expires_at FROM test.r1_clock_holders ORDER BY slot").unwrap_or_default());
    an_expired_reader_is_not_renewed_after_a_step_back(&config, &offset, rows);
}

/// The same on PostgreSQL (the rules are the same: `renew` extends the
/// token's rows whose `expires_at` is ahead of `clock_timestamp()`).
#[test]
fn postgres_a_renewal_after_the_lease_expired_is_refused_even_after_the_server_s_clock_stepped_back() {
    let (server, offset) = with_a_clock_to_step("postgres", || pg_server::PrivateServer::start("r1-clock", &[]));
    let config = postgres::yaml_on(&server.url(), "r1_clock", "        leaseMs: 2000\n", "")
        .replace("commandTimeoutMs: 2000", "commandTimeoutMs: 1000");
    an_expired_reader_is_not_renewed_after_a_step_back(&config, &offset, || "(not read)".to_owned());
}

/// Two readers on `config`'s backend `shared` (leaseMs 2000), the second
/// left to expire; a writer granted the key; the server's clock stepped
/// back 5 s (`offset`, libfaketime's file): the expired reader's renewal
/// is refused. `holder_rows` says what the store held, for the message.
fn an_expired_reader_is_not_renewed_after_a_step_back(config: &str, offset: &std::path::Path, holder_rows: impl Fn() -> String) {
    let readers = Provider::from_yaml(config).unwrap();
    let writers = Provider::from_yaml(config).unwrap();
    let (readers_backend, writers_backend) = (readers.backend("shared").unwrap(), writers.backend("shared").unwrap());

    // Reader d takes slot 0, reader a slot 1; d's release frees slot 0.
    let d = block_on(readers_backend.acquire("k", shared(0))).unwrap();
    let a = block_on(readers_backend.acquire("k", shared(0))).unwrap();
    assert!(block_on(d.release()).unwrap());
    // a's lease runs out (a paused holder), unrenewed.
    std::thread::sleep(Duration::from_millis(2500));
    assert!(!a.is_valid());
    // The writer is granted the key, in the free slot 0.
    let writer = block_on(writers_backend.acquire("k", wait(2000))).expect("the key is free once a's lease ran out");
    // The server's clock steps back 5 s.
    std::fs::write(offset, "-5\n").unwrap();
    std::thread::sleep(Duration::from_millis(100));

    let renewed = block_on(a.renew());
    let both_valid = a.is_valid() && writer.is_valid();
    let rows = holder_rows();
    let _ = std::fs::remove_file(offset);
    assert!(
        !matches!(renewed, Ok(true)),
        "the expired reader was renewed while the writer (fence {}) holds the key: both valid {both_valid}; holder rows {rows}; reader's fence {}",
        writer.fence(),
        a.fence()
    );
}

/// A forward step of the server's clock ends every lease held there early,
/// while each holder's local estimate still says valid: the key is granted
/// to another process beside its holder, a window docs/guarantees.md names
/// for every store ("Clocks"; the review found it named for Redis only).
/// What holds there: the new grant's fence is above the old one's, so a
/// fenced store refuses the first holder once the second wrote, and the
/// first holder is told at its next renewal. Here a 30 s step under a 20 s
/// lease.
#[test]
fn a_forward_step_of_mysql_s_clock_ends_a_lease_early_and_fences_the_holder_out() {
    let (server, offset) = with_a_clock_to_step("mysql-forward", || PrivateServer::start(&[]));
    let config = yaml("r1_forward", "").replace(&url(), &server.url()).replace("leaseMs: 5000", "leaseMs: 20000");
    let (first, second) = (Provider::from_yaml(&config).unwrap(), Provider::from_yaml(&config).unwrap());
    let held = block_on(first.backend("shared").unwrap().acquire("k", wait(0))).unwrap();
    std::fs::write(&offset, "+30\n").unwrap();
    std::thread::sleep(Duration::from_millis(100));
    let other = block_on(second.backend("shared").unwrap().acquire("k", wait(0)));
    let _ = std::fs::remove_file(&offset);
    let other = other.expect("the step ended the first lease on the server's clock: the key is free there");
    assert!(held.remaining().is_some(), "the first holder's estimate still says valid");
    assert!(other.fence() > held.fence(), "fence {} after {}", other.fence(), held.fence());
    assert!(!block_on(held.renew()).unwrap(), "the first holder is told at its renewal");
}

/// A release of a lease that is not plain (here two keys) hands its keys
/// to this process's next waiter in the same call, which first locks every
/// key of that waiter too. When the waiter's other key's row is locked by
/// another session (a call stalled on it, a long transaction), the call
/// waits out the row-lock wait (1 s) and is refused (1205, nothing done):
/// the release then gives its keys back plainly, as the acquire's own try
/// falls back to a try alone (final_review.rs), rather than answering
/// `PROVIDER_FAILED` with its keys kept (and its clean-up sending the same
/// hand-over again until that row is unlocked or the lease lapses).
/// Liveness: keys nobody waits on (`m`) are free for every process.
#[test]
fn mysql_a_release_is_not_held_up_by_a_local_waiter_s_other_key() {
    mysql_release_beside_a_waiter_s_locked_key("j");
}

/// The same when the waiter's other key comes after the released keys in
/// the order the call locks rows in: the call has locked the released keys'
/// rows before it waits. MariaDB rolls back only the statement at 1205
/// (`innodb_rollback_on_timeout` off); the procedure's handler rolls back
/// the rest, so those rows are unlocked and the plain give-back that
/// follows takes them at once. The waiter itself locks `k`'s row before
/// it waits for `z`'s: told of the refusal before the give-back, its own
/// try held the give-back up (refused in turn, 2 s).
#[test]
fn mysql_a_release_is_not_held_up_by_a_local_waiter_s_other_key_locked_after_its_own() {
    mysql_release_beside_a_waiter_s_locked_key("z");
}

/// Releases `k` and `m` while this process waits for `k` and `other_key`, whose
/// row another session holds locked for 6 s.
fn mysql_release_beside_a_waiter_s_locked_key(other_key: &str) {
    let table = mysql::Table::fresh();
    let config = yaml(&table.0, "");
    let (one, other) = (Provider::from_yaml(&config).unwrap(), Provider::from_yaml(&config).unwrap());
    let backend = one.backend("shared").unwrap();
    // The other key's row exists.
    assert!(block_on(block_on(backend.acquire(other_key, wait(0))).unwrap().release()).unwrap());
    let lease = block_on(backend.acquire_many(&["k", "m"], wait(0))).unwrap();
    let waiter = std::thread::spawn({
        let (backend, other_key) = (backend.clone(), other_key.to_owned());
        move || {
            block_on(backend.acquire_many(&["k", &other_key], wait(8000)))
                // The release's own answer, in full: a failure once granted
                // was seen under load in CI (ci5 of stop 73) and is not
                // diagnosed yet.
                .map(|lease| block_on(lease.release()).map_err(|err| (err.code(), err.to_string())))
                .map_err(|err| err.code())
        }
    });
    std::thread::sleep(Duration::from_millis(300));
    // Another session's transaction holds the other key's row for 6 s.
    let namespace = mysql::rows(&format!("SELECT HEX(ns) FROM `{}` LIMIT 1", table.0))[0][0].clone().unwrap();
    let mut locker = std::process::Command::new("mysql")
        .args(["-uroot", "-h127.0.0.1", "-P3306", "test", "-e"])
        .arg(format!(
            "BEGIN; SELECT fence FROM `{0}` WHERE ns = X'{namespace}' AND k = '{other_key}' FOR UPDATE; DO SLEEP(6 + 0 * LENGTH('{0}')); ROLLBACK;",
            table.0
        ))
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let sleeping =
        format!("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE INFO LIKE 'DO SLEEP(6 + 0 * LENGTH(''{}''))%'", table.0);
    while mysql::count(&sleeping) == 0 {
        std::thread::sleep(Duration::from_millis(20));
    }
    let started = std::time::Instant::now();
    let released = block_on(lease.release());
    let took = started.elapsed();
    // m, which nobody waits for, is free for another process.
    let m = block_on(other.backend("shared").unwrap().acquire("m", wait(0))).map(|lease| lease.fence());
    let _ = locker.wait();
    let waited = waiter.join().unwrap();
    assert_released_beside_a_locked_key(released, took, m, waited);
}

/// The same on PostgreSQL: the hand-over waits out `lock_timeout` on the
/// waiter's other key (55P03, the statement rolled back), and the release
/// gives its keys back plainly.
#[test]
fn postgres_a_release_is_not_held_up_by_a_local_waiter_s_other_key() {
    postgres_release_beside_a_waiter_s_locked_key("j");
}

/// The same when the waiter's other key comes after the released keys in
/// the order the call locks rows in (and the waiter's own try locks `k`'s
/// row before it waits for `z`'s).
#[test]
fn postgres_a_release_is_not_held_up_by_a_local_waiter_s_other_key_locked_after_its_own() {
    postgres_release_beside_a_waiter_s_locked_key("z");
}

/// Releases `k` and `m` while this process waits for `k` and `other_key`, whose
/// row another session holds locked for 6 s.
fn postgres_release_beside_a_waiter_s_locked_key(other_key: &str) {
    let schema = postgres::Schema::fresh();
    let (one, other) = (schema.open(""), schema.open(""));
    let backend = postgres::backend(&one);
    // The other key's row exists.
    assert!(block_on(block_on(backend.acquire(other_key, wait(0))).unwrap().release()).unwrap());
    let lease = block_on(backend.acquire_many(&["k", "m"], wait(0))).unwrap();
    let waiter = std::thread::spawn({
        let (backend, other_key) = (backend.clone(), other_key.to_owned());
        move || {
            block_on(backend.acquire_many(&["k", &other_key], wait(8000)))
                // The release's own answer, in full: a failure once granted
                // was seen under load in CI (ci5 of stop 73) and is not
                // diagnosed yet.
                .map(|lease| block_on(lease.release()).map_err(|err| (err.code(), err.to_string())))
                .map_err(|err| err.code())
        }
    });
    std::thread::sleep(Duration::from_millis(300));
    // Another session's transaction holds the other key's row for 6 s.
    let mut locker = std::process::Command::new("psql")
        .arg(postgres::url())
        .args(["-q", "-c"])
        .arg(format!("BEGIN; SELECT fence FROM {} WHERE key = '{other_key}' FOR UPDATE; SELECT pg_sleep(6); ROLLBACK;", schema.table("")))
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let sleeping = format!(
        "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' AND query LIKE 'BEGIN; SELECT fence FROM {}%pg_sleep(6)%'",
        schema.table("")
    );
    postgres::eventually("the other key's row is locked", || postgres::count(&sleeping) == 1);
    let started = std::time::Instant::now();
    let released = block_on(lease.release());
    let took = started.elapsed();
    let m = block_on(postgres::backend(&other).acquire("m", wait(0))).map(|lease| lease.fence());
    let _ = locker.wait();
    let waited = waiter.join().unwrap();
    assert_released_beside_a_locked_key(released, took, m, waited);
}

/// The release answered true, `m` (which nobody waits for) was free for
/// another process's try, and the waiter was granted once the row was
/// unlocked.
fn assert_released_beside_a_locked_key(
    released: dokebi_lock::Result<bool>,
    took: Duration,
    m: dokebi_lock::Result<u64>,
    waited: Result<Result<bool, (ErrorCode, String)>, ErrorCode>,
) {
    assert!(
        matches!(released, Ok(true)) && m.is_ok() && waited == Ok(Ok(true)),
        "the release answered {:?} after {took:?}; another process's try of m (nobody waits for it): {:?}; the waiter, once the row was unlocked: {waited:?}",
        released.map_err(|err| (err.code(), err.to_string())),
        m.map_err(|err| err.code())
    );
}

/// After a restart of the server (a crash and recovery, or a planned
/// restart), every connection of the pool is gone. A renewal or a release
/// on one is sent again on a fresh connection (docs/mysql.md); an acquire
/// was not: its `CALL` went out on the dead socket, the answer was lost,
/// and a waiting acquire of a free key failed `OUTCOME_UNKNOWN` (and
/// started a clean-up by token) instead of trying again. A connection idle
/// for 1 s or more is pinged first and replaced (mysql_review2's
/// `acquires_after_the_server_crashed_...`), but here the restart comes
/// within a second of the pool's last use, and no ping is sent. Now a
/// waiting acquire whose try was lost with its connection gives back what
/// that try may have granted its token, and tries again; so again after a
/// second restart right after the acquires on the new connections.
#[test]
fn mysql_an_acquire_after_a_restart_of_the_server_is_granted() {
    let mut server = PrivateServer::start(&[]);
    let provider = Provider::from_yaml(&yaml("r1_restart", "").replace(&url(), &server.url())).unwrap();
    let backend = provider.backend("shared").unwrap();
    assert!(block_on(block_on(backend.acquire("k", wait(0))).unwrap().release()).unwrap());
    for restart in 1..=2 {
        server.crash_and_restart();
        let outcomes: Vec<_> = (0..4)
            .map(|_| block_on(backend.acquire("k", wait(3000))).map(|lease| block_on(lease.release()).is_ok()).map_err(|err| err.code()))
            .collect();
        assert!(outcomes.iter().all(|outcome| outcome == &Ok(true)), "four acquires of a free key after restart {restart}: {outcomes:?}");
    }
}

/// A TCP forwarder from a port of its own to a server's port, which can be
/// pointed at another server and can end every connection it carries (as
/// a failover's virtual address or proxy does).
struct Forwarder {
    port: u16,
    target: std::sync::Arc<std::sync::atomic::AtomicU16>,
    carried: std::sync::Arc<std::sync::Mutex<Vec<std::net::TcpStream>>>,
}

impl Forwarder {
    fn to(target: u16) -> Forwarder {
        use std::sync::atomic::Ordering;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let forwarder = Forwarder { port, target: std::sync::Arc::new(target.into()), carried: std::sync::Arc::default() };
        let (target, carried) = (forwarder.target.clone(), forwarder.carried.clone());
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                let Ok(server) = std::net::TcpStream::connect(("127.0.0.1", target.load(Ordering::SeqCst))) else { continue };
                carried.lock().unwrap().extend([client.try_clone().unwrap(), server.try_clone().unwrap()]);
                for (mut from, mut to) in [(client.try_clone().unwrap(), server.try_clone().unwrap()), (server, client)] {
                    std::thread::spawn(move || {
                        let _ = std::io::copy(&mut from, &mut to);
                        let _ = to.shutdown(std::net::Shutdown::Both);
                    });
                }
            }
        });
        forwarder
    }

    /// New connections go to `port`; every connection carried so far ends.
    fn fail_over_to(&self, port: u16) {
        self.target.store(port, std::sync::atomic::Ordering::SeqCst);
        for stream in self.carried.lock().unwrap().drain(..) {
            let _ = stream.shutdown(std::net::Shutdown::Both);
        }
    }
}

/// The renewal that brings an expired lease back needs no step of any
/// clock: a replica whose clock runs a few seconds behind its primary's
/// (5 s here) is enough, once promoted. The replica applied every grant
/// (nothing lost, as with semi-synchronous replication); a reader's lease
/// expired on the primary and a writer was granted there; after the
/// failover the reader's late renewal (sent again on a fresh connection,
/// as docs/mysql.md says) reaches the new primary, whose clock has not yet
/// passed the reader's expiry: it answered true, beside the writer.
/// guarantees.md asks clocks to agree only "to within the time a restart
/// or failover takes", and only for fences. Now refused: the writer's row
/// is held against the reader's.
#[test]
fn mysql_a_renewal_after_the_lease_expired_is_refused_after_a_failover_to_a_replica_whose_clock_is_behind() {
    let primary = PrivateServer::start(&["--log-bin", "--server-id=1", mysql_server::GRANTS]);
    let (replica, offset) = with_a_clock_to_step("replica", || primary.replica_through(primary.port(), &[]));
    std::fs::write(&offset, "-5\n").unwrap();
    let forwarder = Forwarder::to(primary.port());
    let config = yaml("r1_failover", "")
        .replace(&url(), &format!("mysql://root@127.0.0.1:{}/test", forwarder.port))
        .replace("leaseMs: 5000", "leaseMs: 2000")
        .replace("commandTimeoutMs: 2000", "commandTimeoutMs: 1000");
    let readers = Provider::from_yaml(&config).unwrap();
    let writers = Provider::from_yaml(&config).unwrap();
    let (readers_backend, writers_backend) = (readers.backend("shared").unwrap(), writers.backend("shared").unwrap());

    let d = block_on(readers_backend.acquire("k", shared(0))).unwrap();
    let a = block_on(readers_backend.acquire("k", shared(0))).unwrap();
    assert!(block_on(d.release()).unwrap());
    std::thread::sleep(Duration::from_millis(2500));
    let writer = block_on(writers_backend.acquire("k", wait(2000))).expect("the key is free once a's lease ran out");
    while replica.lag_behind(&primary) {
        std::thread::sleep(Duration::from_millis(20));
    }
    replica.promote();
    forwarder.fail_over_to(replica.port());

    let renewed = block_on(a.renew());
    let both_valid = a.is_valid() && writer.is_valid();
    let _ = std::fs::remove_file(&offset);
    assert!(
        !matches!(renewed, Ok(true)),
        "the expired reader was renewed on the new primary while the writer (fence {}) holds the key: both valid {both_valid}",
        writer.fence()
    );
}

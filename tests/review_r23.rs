//! Review R23: the postgres driver after a9177bd (a statement answered
//! after a `WARNING` on its client's connection is `OUTCOME_UNKNOWN`) and
//! the store's hold-back of a head's next try by a release (8ac64d7,
//! dfc277d), probed for a second holder of a key, a repeated fence, or a
//! waiter or release that waits far longer than it should.
//!
//! Found (PostgreSQL 15, PgBouncer in transaction mode, a synchronous
//! standby): another client of the pooler that ran `SET
//! client_min_messages = error` leaves it on the server connection, and
//! the driver's calls run there next. A grant whose sync-rep wait is
//! cancelled (`pg_cancel_backend`) is then answered as a success with no
//! `WARNING`: told granted, and after a failover to the standby the key is
//! granted again while the first lease is valid
//! (`through_pgbouncer_another_clients_client_min_messages_hides_the_cancelled_grant`,
//! two holders in 12 of 14 runs); a renewal cancelled the same way was told
//! renewed (`Ok(true)`), and the promoted standby granted the key once its
//! older expiry passed (`..._hides_the_cancelled_renewal`, 3 of 3). Fixed in
//! functions 10: a grant's or renewal's transaction sets
//! `client_min_messages` to `warning` for itself when the session's would
//! hide it. docs/postgres.md stated the limit for a role or database
//! whose `client_min_messages` is `error`, not for a setting a pooler's
//! other client leaves behind, a leak the schema already defends for
//! `synchronous_commit` (`DURABLE`). Checked by hand on a private
//! PostgreSQL 15: `set_config('client_min_messages', 'warning', true)`
//! inside the transaction (in a `DO` block too) brings the `WARNING` back
//! at its commit under a session `SET client_min_messages = error`.
//!
//! Probed and held (run here, by default): the `WARNING` relayed by
//! PgBouncer in transaction mode (`OUTCOME_UNKNOWN`); a renewal whose
//! session is terminated in its sync-rep wait and sent again (the retry
//! waits for the standby too, its own commit being after the first's:
//! never `Ok(true)`, no second holder after a failover); a waiting acquire
//! whose take's session is terminated in its sync-rep wait (gives back,
//! tries again with its token, ends `OUTCOME_UNKNOWN` at the command
//! timeout); a reader's try granting its followers (`_hand_over`)
//! cancelled in its sync-rep wait (all three readers `OUTCOME_UNKNOWN`);
//! readers and writers of one key in one process while another session
//! holds the key's row 200 ms and one waiting session is ended in it,
//! about every 250 ms (PostgreSQL and MariaDB, 15 s runs: no overlap, no
//! waiter timed out, no release over 0.35 s; they run 4 s here, asserting
//! releases under 5 s).
//!
//! Read and held: tokio-postgres 0.7.18's codec ends a batch at a notice
//! and `query_typed`/`batch_execute` end at `ReadyForQuery`, which the
//! server sends after a commit's `WARNING`, so the count moves before the
//! answer; every function locks its key rows `FOR UPDATE` (an xid and WAL),
//! so no retry reads a locally committed state and answers without
//! waiting for the standby; the `LISTEN` connection commits nothing.
//! Hold-back: a head is held back only when `pick` finds it `Trying` with
//! nothing picked; its `let_go` ends on the release's answer, on its own
//! interrupts, or at once while it is still `Trying`; every release and
//! clean-up is its own task (`release_in_background`, `clean_up`), so none
//! waits in the head's task.

#[path = "postgres/bouncer.rs"]
mod bouncer;
mod postgres;
#[path = "postgres/server.rs"]
mod server;
mod sync_standby;

use std::time::{Duration, Instant};

use dokebi_lock::{ErrorCode, Provider};
use futures::executor::block_on;
use postgres::{backend, batch_on, count_on, eventually, wait};
use sync_standby::{standby_down, synchronous};

/// A grant whose commit waits for the synchronous standby, cancelled
/// there, through PgBouncer in transaction mode: PgBouncer relays the
/// `WARNING` (it comes before the `ReadyForQuery`), so the caller hears
/// `OUTCOME_UNKNOWN`, not granted.
#[test]
fn through_pgbouncer_a_grant_cancelled_in_its_sync_wait_is_not_told_granted() {
    let primary = server::PrivateServer::start("r23-bouncer", &[]);
    let mut standby = primary.standby("r23-bouncer-standby");
    synchronous(&primary.url());
    let admin = primary.url();
    let databases = format!("\n[databases]\npriv = host=127.0.0.1 port={} dbname=postgres user=postgres\n", primary.port());
    let pooler = bouncer::Bouncer::start_with("r23", &databases);
    let url = pooler.url().replace("/test?", "/priv?");
    let provider = Provider::from_yaml(&postgres::yaml_on(&url, "dokebi", "        leaseMs: 60000\n", "")).unwrap();
    let lock = backend(&provider);
    let warm = block_on(lock.acquire("warm", wait(5_000))).unwrap();
    assert!(block_on(warm.release()).unwrap());
    standby_down(&admin, &mut standby);
    let acquiring = {
        let lock = lock.clone();
        std::thread::spawn(move || block_on(lock.acquire("k", wait(0))))
    };
    let waiting = "FROM pg_stat_activity WHERE wait_event = 'SyncRep' AND query LIKE '%\\_take%'";
    eventually("the grant waits for the standby", || count_on(&admin, &format!("SELECT count(*) {waiting}")) == 1);
    assert_eq!(count_on(&admin, &format!("SELECT count(*) FROM (SELECT pg_cancel_backend(pid) {waiting}) c")), 1);
    let first = acquiring.join().unwrap();
    assert_eq!(
        first.as_ref().err().map(|err| err.code()),
        Some(ErrorCode::OutcomeUnknown),
        "through PgBouncer the cancelled grant is told {:?}",
        first.as_ref().map(|lease| lease.fence())
    );
    block_on(provider.close());
}

/// A holder's renewal waits for the synchronous standby (down) and its
/// session is terminated there (`pg_terminate_backend`: a `WARNING`, then
/// the connection closes): the renewal is sent again on another
/// connection. That retry must not be told renewed either (its own commit
/// waits for the standby, which stays down).
#[test]
fn a_renewal_terminated_in_its_sync_wait_is_not_told_renewed() {
    let mut primary = server::PrivateServer::start("r23-renew-term", &[]);
    let mut standby = primary.standby("r23-renew-term-standby");
    synchronous(&primary.url());
    let admin = primary.url();
    let tag = "dl_r23_renew";
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
        assert_eq!(count_on(&admin, &format!("SELECT count(*) FROM (SELECT pg_terminate_backend(pid) {waiting}) c")), 1);
        renewing.join().unwrap()
    });
    assert!(!matches!(renewed, Ok(true)), "the terminated renewal is told renewed");
    primary.crash();
    standby.start_again();
    standby.promote();
    let other = Provider::from_yaml(&postgres::yaml_on(&standby.url(), "dokebi", "        leaseMs: 4000\n", "")).unwrap();
    let second = block_on(backend(&other).acquire("k", wait(10_000)));
    assert!(
        !(first.is_valid() && second.is_ok()),
        "two holders of k: first (renewal {:?}, valid {:?} more), second fence {:?}",
        renewed.as_ref().map_err(|err| err.code()),
        first.remaining(),
        second.as_ref().map(|l| l.fence()).ok()
    );
    block_on(provider.close());
    block_on(other.close());
}

/// A waiting acquire whose take waits for the synchronous standby (down)
/// and whose session is terminated there: the driver gives back by its
/// token and tries again with the same token (`cleaned_up_after`). It must
/// not end granted by a grant no standby has: after a failover the key is
/// granted to another process while that lease is valid.
#[test]
fn a_waiting_take_terminated_in_its_sync_wait_is_not_told_granted() {
    let mut primary = server::PrivateServer::start("r23-take-term", &[]);
    let mut standby = primary.standby("r23-take-term-standby");
    synchronous(&primary.url());
    let admin = primary.url();
    let tag = "dl_r23_take";
    let url = format!("{admin}&application_name={tag}");
    let provider = Provider::from_yaml(&postgres::yaml_on(&url, "dokebi", "        leaseMs: 60000\n", "")).unwrap();
    let lock = backend(&provider);
    let warm = block_on(lock.acquire("warm", wait(5_000))).unwrap();
    assert!(block_on(warm.release()).unwrap());
    standby_down(&admin, &mut standby);
    let started = Instant::now();
    let acquiring = {
        let lock = lock.clone();
        std::thread::spawn(move || block_on(lock.acquire("k", wait(8_000))))
    };
    let waiting = format!("FROM pg_stat_activity WHERE application_name = '{tag}' AND wait_event = 'SyncRep' AND query LIKE '%\\_take%'");
    eventually("the grant waits for the standby", || count_on(&admin, &format!("SELECT count(*) {waiting}")) == 1);
    assert_eq!(count_on(&admin, &format!("SELECT count(*) FROM (SELECT pg_terminate_backend(pid) {waiting}) c")), 1);
    let first = acquiring.join().unwrap();
    let took = started.elapsed();
    primary.crash();
    standby.start_again();
    standby.promote();
    let other = Provider::from_yaml(&postgres::yaml_on(&standby.url(), "dokebi", "        leaseMs: 60000\n", "")).unwrap();
    let second = block_on(backend(&other).acquire("k", wait(0)));
    if let Ok(lease) = &first {
        assert!(
            !(lease.is_valid() && second.is_ok()),
            "two holders of k: first fence {} (valid {:?} more), second fence {:?}",
            lease.fence(),
            lease.remaining(),
            second.as_ref().map(|l| l.fence()).ok()
        );
    }
    assert!(first.is_err(), "granted with no standby up ({took:?})");
    eprintln!("first: {:?} after {took:?}", first.as_ref().map(|l| l.fence()).map_err(|e| e.code()));
    block_on(provider.close());
    block_on(other.close());
}

#[path = "mysql/mod.rs"]
mod mysql;

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::Mutex;

use dokebi_lock::{AcquireOptions, Backend, LockMode};

/// How long each stress run with sessions ended lasts.
const STRESS_SECS: u64 = 4;

/// What a stress run saw.
#[derive(Debug, Default)]
struct Seen {
    overlaps: u64,
    granted: u64,
    errors: Vec<String>,
    slowest_release: Duration,
    slowest_grant: Duration,
}

/// Readers and writers of one key in one process (hand-overs, releases
/// waiting for a head's try, held-back heads), with `kill` ending one of
/// the process's sessions every 250 ms (tries lost with their connection)
/// for `run`.
fn stress(backend: &Backend, run: Duration, kill: impl Fn() + Send + Sync) -> Seen {
    let readers = AtomicI64::new(0);
    let writer = AtomicBool::new(false);
    let seen = Mutex::new(Seen::default());
    let stop = AtomicBool::new(false);
    let ops = AtomicU64::new(0);
    std::thread::scope(|scope| {
        for worker in 0..6 {
            let (readers, writer, seen, stop, ops) = (&readers, &writer, &seen, &stop, &ops);
            let backend = backend.clone();
            scope.spawn(move || {
                let shared = worker < 4;
                let mode = if shared { LockMode::Shared } else { LockMode::Exclusive };
                while !stop.load(Ordering::SeqCst) {
                    let started = Instant::now();
                    let options = AcquireOptions { mode, wait_timeout: Some(Duration::from_millis(6_000)), ..AcquireOptions::default() };
                    match block_on(backend.acquire("k", options)) {
                        Ok(lease) => {
                            let took = started.elapsed();
                            let overlap = if shared {
                                readers.fetch_add(1, Ordering::SeqCst);
                                writer.load(Ordering::SeqCst)
                            } else {
                                let was = writer.swap(true, Ordering::SeqCst);
                                was || readers.load(Ordering::SeqCst) > 0
                            };
                            std::thread::sleep(Duration::from_millis(1 + (worker as u64 % 3)));
                            if shared {
                                readers.fetch_sub(1, Ordering::SeqCst);
                            } else {
                                writer.store(false, Ordering::SeqCst);
                            }
                            let releasing = Instant::now();
                            let released = block_on(lease.release());
                            let release_took = releasing.elapsed();
                            let mut seen = seen.lock().unwrap();
                            seen.granted += 1;
                            seen.overlaps += u64::from(overlap);
                            seen.slowest_grant = seen.slowest_grant.max(took);
                            seen.slowest_release = seen.slowest_release.max(release_took);
                            if let Err(err) = released {
                                seen.errors.push(format!("release {:?} after {release_took:?}", err.code()));
                            }
                        }
                        Err(err) => seen.lock().unwrap().errors.push(format!("acquire {:?} after {:?}", err.code(), started.elapsed())),
                    }
                    ops.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
        scope.spawn(|| {
            let end = Instant::now() + run;
            while Instant::now() < end {
                std::thread::sleep(Duration::from_millis(50));
                kill();
            }
            stop.store(true, Ordering::SeqCst);
        });
    });
    seen.into_inner().unwrap()
}

/// Sessions ended by the stress runs.
static KILLED: AtomicU64 = AtomicU64::new(0);

fn judge(seen: &Seen) {
    eprintln!("{seen:?} ({} sessions ended so far)", KILLED.load(Ordering::Relaxed));
    assert_eq!(seen.overlaps, 0, "a writer beside another holder: {seen:?}");
    assert!(!seen.errors.iter().any(|e| e.contains("WaitTimeout")), "a waiter timed out: {seen:?}");
    assert!(seen.slowest_release < Duration::from_secs(5), "a release took {:?}: {seen:?}", seen.slowest_release);
}

/// PostgreSQL: readers and writers of one key with sessions terminated.
#[test]
fn postgres_readers_and_writers_with_sessions_terminated() {
    let schema = postgres::Schema::fresh();
    let tag = "dl_r23_stress";
    let url = format!("{}?application_name={tag}", postgres::url());
    let provider = Provider::from_yaml(&postgres::yaml_on(&url, &schema.0, "        pollIntervalMs: 1\n", "")).unwrap();
    let lock = backend(&provider);
    let keys = schema.table("");
    let seen = stress(&lock, Duration::from_secs(STRESS_SECS), || {
        // Another session holds k's row a moment: tries and releases of
        // this process wait for it, and one of them is terminated.
        let mut locker = std::process::Command::new("psql")
            .arg(postgres::url())
            .args(["-q", "-c"])
            .arg(format!("BEGIN; SELECT 1 FROM {keys} WHERE key = 'k' FOR UPDATE; SELECT pg_sleep(0.2); ROLLBACK;"))
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(100));
        let ended = postgres::count(&format!(
            "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = '{tag}' \
             AND wait_event_type = 'Lock' ORDER BY random() LIMIT 1) t"
        ));
        KILLED.fetch_add(ended as u64, Ordering::Relaxed);
        let _ = locker.wait();
    });
    block_on(provider.close());
    judge(&seen);
}

/// MariaDB: readers and writers of one key with sessions killed.
#[test]
fn mysql_readers_and_writers_with_sessions_killed() {
    let table = mysql::Table::fresh();
    let provider = Provider::from_yaml(&mysql::yaml(&table.0, ", pollIntervalMs: 1")).unwrap();
    let lock = provider.backend("shared").unwrap();
    let t = table.0.clone();
    let seen = stress(&lock, Duration::from_secs(STRESS_SECS), || {
        // Another session holds k's rows a moment: tries and releases of
        // this process wait for them, and one of them is killed.
        let mut locker = std::process::Command::new("mysql")
            .args(["-uroot", "-h127.0.0.1", "-P3306", "test", "-e"])
            .arg(format!("BEGIN; SELECT 1 FROM `{t}` WHERE k = 'k' FOR UPDATE; DO SLEEP(0.2); ROLLBACK;"))
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(100));
        let query = format!(
            "SELECT ID FROM information_schema.PROCESSLIST WHERE INFO LIKE '%{t}%' AND INFO NOT LIKE '%PROCESSLIST%' \
             AND INFO NOT LIKE '%SLEEP%' ORDER BY RAND() LIMIT 1"
        );
        if let Some(row) = mysql::rows(&query).into_iter().next() {
            if mysql::try_rows(&format!("KILL {}", row[0].clone().unwrap_or_default())).is_ok() {
                KILLED.fetch_add(1, Ordering::Relaxed);
            }
        }
        let _ = locker.wait();
    });
    block_on(provider.close());
    judge(&seen);
}

/// A reader's try that grants the readers waiting behind it in the same
/// statement (`_hand_over` with followers, `try_once`) waits for the
/// synchronous standby (down) and is cancelled there: neither the reader
/// nor its followers may be told granted (no standby has their grants).
#[test]
fn a_readers_try_with_followers_cancelled_in_its_sync_wait_grants_nobody() {
    let primary = server::PrivateServer::start("r23-followers", &[]);
    let mut standby = primary.standby("r23-followers-standby");
    synchronous(&primary.url());
    let admin = primary.url();
    let tag = "dl_r23_followers";
    let url = format!("{admin}&application_name={tag}");
    let terms = "        leaseMs: 60000\n        pollIntervalMs: 5000\n        notifyPollIntervalMs: 5000\n";
    let provider = Provider::from_yaml(&postgres::yaml_on(&url, "dokebi", terms, "")).unwrap();
    let lock = backend(&provider);
    let writers = Provider::from_yaml(&postgres::yaml_on(&admin, "dokebi", terms, "")).unwrap();
    let writer = block_on(backend(&writers).acquire("k", wait(5_000))).unwrap();
    let readers: Vec<_> = (0..3)
        .map(|_| {
            let lock = lock.clone();
            let reading = std::thread::spawn(move || {
                block_on(lock.acquire("k", AcquireOptions { mode: LockMode::Shared, ..wait(6_000) }))
                    .map(|lease| (lease.fence(), lease.is_valid()))
            });
            std::thread::sleep(Duration::from_millis(200));
            reading
        })
        .collect();
    eventually("the readers wait", || postgres::counts(&lock).waiting == 3);
    std::thread::sleep(Duration::from_millis(300));
    standby_down(&admin, &mut standby);
    // The writer's release does not wait for the standby (a release
    // commits asynchronously); the readers' head then tries with its
    // followers.
    assert!(block_on(writer.release()).unwrap());
    let waiting = format!("FROM pg_stat_activity WHERE application_name = '{tag}' AND wait_event = 'SyncRep'");
    eventually("the readers' try waits for the standby", || count_on(&admin, &format!("SELECT count(*) {waiting}")) >= 1);
    let query: String = postgres::rows_on(&admin, &format!("SELECT query {waiting} LIMIT 1"))[0].get(0);
    assert!(count_on(&admin, &format!("SELECT count(*) FROM (SELECT pg_cancel_backend(pid) {waiting}) c")) >= 1);
    let outcomes: Vec<_> = readers.into_iter().map(|reading| reading.join().unwrap().map_err(|err| err.code())).collect();
    eprintln!("cancelled: {}; outcomes: {outcomes:?}", &query[..query.len().min(80)]);
    assert!(outcomes.iter().all(Result::is_err), "a reader told granted by a grant no standby has: {outcomes:?}");
    block_on(provider.close());
    block_on(writers.close());
}

/// Through PgBouncer in transaction mode, another client of the pooler
/// set `client_min_messages = error` for its session: the setting stays on
/// the server connection (PgBouncer does not track or reset it), and our
/// calls run on it next. A grant whose sync-rep wait is cancelled there is
/// answered as a success with no `WARNING` at all: the caller is told
/// granted, and after a failover the key is granted to another process
/// while that lease is valid. The driver already defends the same leak
/// for `synchronous_commit` (`DURABLE` in the schema: "a pooler's other
/// client may have turned it off on the server connection the call runs
/// on"); docs/postgres.md states the limit only for a role or database
/// whose `client_min_messages` is `error`.
#[test]
fn through_pgbouncer_another_clients_client_min_messages_hides_the_cancelled_grant() {
    let mut primary = server::PrivateServer::start("r23-cmm", &[]);
    let mut standby = primary.standby("r23-cmm-standby");
    synchronous(&primary.url());
    let admin = primary.url();
    let databases = format!("\n[databases]\npriv = host=127.0.0.1 port={} dbname=postgres user=postgres\n", primary.port());
    let pooler = bouncer::Bouncer::start_with("r23-cmm", &databases);
    let url = pooler.url().replace("/test?", "/priv?");
    let provider = Provider::from_yaml(&postgres::yaml_on(&url, "dokebi", "        leaseMs: 60000\n", "")).unwrap();
    let lock = backend(&provider);
    let warm = block_on(lock.acquire("warm", wait(5_000))).unwrap();
    assert!(block_on(warm.release()).unwrap());
    // Another application on the same pooler quiets its session's notices.
    batch_on(&url, "SET client_min_messages = error");
    standby_down(&admin, &mut standby);
    let acquiring = {
        let lock = lock.clone();
        std::thread::spawn(move || block_on(lock.acquire("k", wait(0))))
    };
    let waiting = "FROM pg_stat_activity WHERE wait_event = 'SyncRep' AND query LIKE '%\\_take%'";
    let started = Instant::now();
    while count_on(&admin, &format!("SELECT count(*) {waiting}")) != 1 {
        if acquiring.is_finished() || started.elapsed() > Duration::from_secs(10) {
            let activity =
                postgres::rows_on(&admin, "SELECT coalesce(wait_event, '-') || ' ' || left(coalesce(query, ''), 60) FROM pg_stat_activity");
            let activity: Vec<String> = activity.iter().map(|row| row.get(0)).collect();
            panic!(
                "the grant never waited for the standby: {:?}; {activity:?}",
                acquiring.is_finished().then(|| acquiring.join().unwrap().map(|l| l.fence()).map_err(|e| e.to_string()))
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(count_on(&admin, &format!("SELECT count(*) FROM (SELECT pg_cancel_backend(pid) {waiting}) c")), 1);
    let first = acquiring.join().unwrap();
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
    assert_eq!(first.as_ref().err().map(|err| err.code()), Some(ErrorCode::OutcomeUnknown), "the cancelled grant is OUTCOME_UNKNOWN");
    block_on(provider.close());
    block_on(other.close());
}

/// The same leak for a renewal: a holder's renewal, on a server connection
/// where another client of the pooler left `client_min_messages = error`,
/// waits for the synchronous standby (down) and is cancelled there. It is
/// told renewed; after the failover the key is granted to another process
/// once the standby's expiry passes, while the first lease is valid.
#[test]
fn through_pgbouncer_another_clients_client_min_messages_hides_the_cancelled_renewal() {
    let mut primary = server::PrivateServer::start("r23-cmm-renew", &[]);
    let mut standby = primary.standby("r23-cmm-renew-standby");
    synchronous(&primary.url());
    let admin = primary.url();
    let databases = format!("\n[databases]\npriv = host=127.0.0.1 port={} dbname=postgres user=postgres\n", primary.port());
    let pooler = bouncer::Bouncer::start_with("r23-cmm-renew", &databases);
    let url = pooler.url().replace("/test?", "/priv?");
    let provider = Provider::from_yaml(&postgres::yaml_on(&url, "dokebi", "        leaseMs: 4000\n", "")).unwrap();
    let lock = backend(&provider);
    let first = block_on(lock.acquire("k", wait(5_000))).unwrap();
    batch_on(&url, "SET client_min_messages = error");
    standby_down(&admin, &mut standby);
    std::thread::sleep(Duration::from_millis(1_500));
    let waiting = "FROM pg_stat_activity WHERE wait_event = 'SyncRep' AND query LIKE '%\\_renew%'";
    let renewed = std::thread::scope(|scope| {
        let renewing = scope.spawn(|| block_on(first.renew()));
        eventually("the renewal waits for the standby", || count_on(&admin, &format!("SELECT count(*) {waiting}")) == 1);
        assert_eq!(count_on(&admin, &format!("SELECT count(*) FROM (SELECT pg_cancel_backend(pid) {waiting}) c")), 1);
        renewing.join().unwrap()
    });
    primary.crash();
    standby.start_again();
    standby.promote();
    let other = Provider::from_yaml(&postgres::yaml_on(&standby.url(), "dokebi", "        leaseMs: 4000\n", "")).unwrap();
    let second = block_on(backend(&other).acquire("k", wait(10_000)));
    assert!(
        !(first.is_valid() && second.is_ok()),
        "two holders of k: the first told renewed ({:?}, valid {:?} more) by a renewal the standby never had, the second granted by \
         the promoted standby (fence {:?})",
        renewed.as_ref().map_err(|err| err.code()),
        first.remaining(),
        second.as_ref().map(|l| l.fence()).ok()
    );
    block_on(provider.close());
    block_on(other.close());
}

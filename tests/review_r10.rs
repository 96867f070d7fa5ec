//! Review R10 of 084f3ad (a waiting acquire whose try was lost with its
//! connection gives back by its token, then tries again with the same
//! token): interleavings on the machine's MariaDB and PostgreSQL through a
//! TCP proxy (tests/faults/proxy.rs). Each failed on 76f5485 ("two
//! holders"): a give-back sent again after its first attempt was lost
//! now ends the acquire `OUTCOME_UNKNOWN` rather than retrying with the
//! token that first attempt may still free.

mod mysql;
#[path = "postgres/mod.rs"]
mod postgres;
mod proxied;
#[path = "faults/proxy.rs"]
mod proxy;

use std::time::{Duration, Instant};

use dokebi_lock::{AcquireOptions, Backend, Provider};
use futures::executor::block_on;
use proxied::{port_of, Proxied};
use proxy::Proxy;

fn wait(ms: u64) -> AcquireOptions {
    AcquireOptions { wait_timeout: Some(Duration::from_millis(ms)), ..AcquireOptions::default() }
}

/// The lease of an acquire whose give-back's first attempt was lost, if
/// it tried again with its token (the findings: its grant was then freed
/// by that first attempt, run late); `None` when it ended
/// `OUTCOME_UNKNOWN` instead, which the fix does: the token is not used
/// again, so a late give-back frees nothing anyone holds.
fn retried(acquired: dokebi_lock::Result<dokebi_lock::Lease>) -> Option<dokebi_lock::Lease> {
    match acquired {
        Ok(lease) => Some(lease),
        Err(err) => {
            assert_eq!(err.code(), dokebi_lock::ErrorCode::OutcomeUnknown, "{err}");
            None
        }
    }
}

/// A waiting acquire on `through` (whose statements go through `proxy`)
/// loses its take with its connection (the proxy cuts it, the take never
/// reaches the server), and then the first attempt of its give-back the
/// same way, but that attempt is still delivered by the proxy, late: the
/// driver sends the give-back again on a fresh connection, is answered,
/// tries again with the same token and is granted. Then the late first
/// give-back reaches the server and frees the grant the caller holds.
/// `take` and `give_back`: the driver's statements for the proxy to catch;
/// `live`: how many live holder rows the key has. `other` (another
/// process) must not be granted the key while the lease is valid.
fn late_give_back_under_a_retried_grant(
    proxy: &Proxy,
    through: &Backend,
    other: &Backend,
    (take, give_back): (&[u8], &[u8]),
    live: impl Fn() -> i64,
) {
    assert!(block_on(block_on(through.acquire("k", wait(0))).unwrap().release()).unwrap());
    let (take, give_back) = (proxy.stall(take), proxy.stall(give_back));
    let acquired = block_on(through.acquire("k", wait(10_000)));
    assert!(take.caught() && give_back.caught(), "the take and the give-back's first attempt were lost with their connections");
    let Some(lease) = retried(acquired) else {
        give_back.deliver();
        return;
    };
    assert_eq!(live(), 1, "the retry's grant");
    assert!(block_on(other.acquire("k", wait(0))).is_err(), "held by the caller before the late give-back lands");
    give_back.deliver();
    let delivered = Instant::now();
    while live() == 1 && delivered.elapsed() < Duration::from_secs(3) {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(lease.is_valid(), "the caller's lease is still valid ({:?} left)", lease.remaining());
    let second = block_on(other.acquire("k", wait(0))).map(|second| second.fence()).map_err(|err| err.code());
    assert!(
        second.is_err(),
        "two holders: the caller's lease (fence {}) is valid and another process was granted the key ({second:?})",
        lease.fence()
    );
}

/// MariaDB: the give-back's first attempt (`CALL ..._give_back`) lands
/// after the retry's grant and frees it; another process is granted the
/// key while the caller's lease is valid.
#[test]
fn mysql_a_late_first_give_back_frees_the_retried_grant_of_its_token() {
    let table = mysql::Table::fresh();
    let proxied = Proxied::mysql(&table);
    let Proxied { proxy, through, direct, .. } = &proxied;
    let live = format!("SELECT COUNT(*) FROM `{}_holders` WHERE expires_at > 1", table.0);
    late_give_back_under_a_retried_grant(proxy, through, direct, (b"_take`(", b"_give_back`("), || mysql::count(&live));
    proxied.close();
}

/// PostgreSQL: the same, its give-back's first attempt delivered late.
#[test]
fn postgres_a_late_first_give_back_frees_the_retried_grant_of_its_token() {
    let schema = postgres::Schema::fresh();
    let proxied = Proxied::postgres(&schema);
    let Proxied { proxy, through, direct, .. } = &proxied;
    let live = format!("SELECT count(*) FROM {} WHERE expires_at > now()", schema.table("_holders"));
    late_give_back_under_a_retried_grant(proxy, through, direct, (b"_take\"(", b"_give_back\"("), || postgres::count(&live));
    proxied.close();
}

/// A transaction of its own that holds the row of `key` in the key table
/// `keys` locked until dropped, as another session's statement does.
struct RowLock {
    pid: i32,
    release: Option<std::sync::mpsc::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl RowLock {
    fn hold(keys: &str, key: &str) -> RowLock {
        let (locked, pid) = std::sync::mpsc::channel();
        let (release, released) = std::sync::mpsc::channel::<()>();
        let sql = format!("SELECT pg_backend_pid() FROM {keys} WHERE key = '{key}' FOR UPDATE");
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            runtime.block_on(async {
                let (client, connection) = tokio_postgres::connect(&postgres::url(), tokio_postgres::NoTls).await.unwrap();
                tokio::spawn(connection);
                client.batch_execute("BEGIN").await.unwrap();
                locked.send(client.query_one(&sql, &[]).await.unwrap().get::<_, i32>(0)).unwrap();
                let _ = released.recv();
                client.batch_execute("ROLLBACK").await.unwrap();
            });
        });
        RowLock { pid: pid.recv().unwrap(), release: Some(release), thread: Some(thread) }
    }

    /// The server sessions waiting for this lock.
    fn waiting(&self) -> Vec<i32> {
        postgres::rows(&format!("SELECT pid FROM pg_stat_activity WHERE {} = ANY (pg_blocking_pids(pid))", self.pid))
            .iter()
            .map(|row| row.get(0))
            .collect()
    }
}

impl Drop for RowLock {
    fn drop(&mut self) {
        drop(self.release.take());
        let _ = self.thread.take().map(std::thread::JoinHandle::join);
    }
}

/// PostgreSQL, with no proxy that delivers late, only a cut: the driver
/// pipelines statements on each pooled client, so the give-back's first
/// attempt can go out behind a statement the server is still running (a
/// withdraw held up by another session's row lock). A cut of that
/// connection loses both for the client, but the server runs on: the
/// withdraw, then the give-back it had already received, which frees the
/// grant the retry (with the same token) made meanwhile.
#[test]
fn postgres_a_give_back_pipelined_behind_a_stalled_statement_frees_the_retried_grant_after_the_cut() {
    let schema = postgres::Schema::fresh();
    let proxy = Proxy::start(port_of(&postgres::url()), Duration::ZERO);
    let url = format!("postgres://postgres@127.0.0.1:{}/test?sslmode=disable", proxy.port());
    let listen = format!("        listenUrl: '{}'\n", postgres::url());
    let lines = "        leaseMs: 60000\n        pollIntervalMs: 60000\n        notifyPollIntervalMs: 60000\n";
    let config = postgres::yaml_on(&url, &schema.0, lines, &listen).replace("commandTimeoutMs: 2000", "commandTimeoutMs: 20000");
    let through = Provider::from_yaml(&config).unwrap();
    let direct = schema.open("        leaseMs: 60000\n");
    let (pooled, other) = (postgres::backend(&through), postgres::backend(&direct));
    for key in ["j", "k"] {
        assert!(block_on(block_on(pooled.acquire(key, wait(0))).unwrap().release()).unwrap());
    }
    let keys = schema.table("");
    let live_k = format!("SELECT count(*) FROM {} WHERE key = 'k' AND expires_at > now()", schema.table("_holders"));
    // A waiter of j (held elsewhere) gives up, its withdraw held up by a
    // row lock on j: one statement the server runs on one pooled client.
    let _j = block_on(other.acquire("j", wait(0))).unwrap();
    let waiter = std::thread::spawn({
        let pooled = pooled.clone();
        move || block_on(pooled.acquire("j", wait(600))).map(|_| ()).map_err(|err| err.code())
    });
    std::thread::sleep(Duration::from_millis(300));
    let on_j = RowLock::hold(&keys, "j");
    assert_eq!(waiter.join().unwrap(), Err(dokebi_lock::ErrorCode::WaitTimeout));
    postgres::eventually("the withdraw waits for the row of j", || on_j.waiting().len() == 1);
    // The acquire of k: its take (on the other client) waits for a row
    // lock too, and its session is ended: lost with its connection. Its
    // give-back goes out on the next client, behind the withdraw.
    let on_k = RowLock::hold(&keys, "k");
    let acquiring = std::thread::spawn({
        let pooled = pooled.clone();
        move || block_on(pooled.acquire("k", wait(15_000)))
    });
    postgres::eventually("the take of k waits for its row", || on_k.waiting().len() == 1);
    postgres::count(&format!("SELECT count(pg_terminate_backend({}))", on_k.waiting()[0]));
    std::thread::sleep(Duration::from_millis(300));
    drop(on_k);
    // The cut: the withdraw and the give-back are lost to the client; the
    // give-back is sent again on a fresh connection, answered, and the
    // acquire tries again with its token.
    proxy.cut();
    let Some(lease) = retried(acquiring.join().unwrap()) else {
        drop(on_j);
        block_on(through.close());
        block_on(direct.close());
        return;
    };
    assert_eq!(postgres::count(&live_k), 1, "the retry's grant");
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(postgres::count(&live_k), 1, "the retry's grant, half a second on");
    assert!(block_on(other.acquire("k", wait(0))).is_err(), "held by the caller");
    // The row lock goes: the server runs the withdraw, then the give-back.
    drop(on_j);
    let released = Instant::now();
    while postgres::count(&live_k) == 1 && released.elapsed() < Duration::from_secs(3) {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(lease.is_valid());
    let second = block_on(other.acquire("k", wait(0))).map(|second| second.fence()).map_err(|err| err.code());
    assert!(
        second.is_err(),
        "two holders: the caller's lease (fence {}) is valid and another process was granted the key ({second:?})",
        lease.fence()
    );
    block_on(through.close());
    block_on(direct.close());
}

// Review R12 of bad11ef (the retry only after a give-back answered at its
// first attempt): the lost take itself, kept by a proxy that cut its
// client and delivered after the retry's grant. No finding: a take only
// grants (its token's row taken over, the fence raised), it frees nothing,
// so the caller stays the one holder and its release frees the key.

/// A waiting acquire on `through` loses its take (`take`: the driver's
/// statement for the proxy to keep), gives back at the first attempt and
/// is granted by its retry; the kept take then reaches the server while
/// the caller holds. `other` (another process) must not be granted the key
/// until the caller releases it, and then must be. `fence`: the key's
/// fence in the store.
fn late_take_under_a_retried_grant(proxy: &Proxy, through: &Backend, other: &Backend, take: &[u8], fence: impl Fn() -> u64) {
    assert!(block_on(block_on(through.acquire("k", wait(0))).unwrap().release()).unwrap());
    let take = proxy.stall(take);
    let lease = block_on(through.acquire("k", wait(10_000))).expect("the retry after a give-back answered at its first attempt");
    assert!(take.caught(), "the take was lost with its connection");
    assert_eq!(fence(), lease.fence(), "the retry's grant");
    take.deliver();
    let delivered = std::time::Instant::now();
    while fence() == lease.fence() && delivered.elapsed() < Duration::from_secs(3) {
        std::thread::sleep(Duration::from_millis(20));
    }
    // The late take took its token's row over: a fence above the lease's,
    // which nobody was told.
    assert!(fence() > lease.fence(), "the late take ran");
    assert!(lease.is_valid());
    let second = block_on(other.acquire("k", wait(0))).map(|second| second.fence()).map_err(|err| err.code());
    assert!(second.is_err(), "two holders: the caller's lease (fence {}) and {second:?}", lease.fence());
    assert!(block_on(lease.release()).unwrap());
    assert!(block_on(other.acquire("k", wait(0))).is_ok(), "the caller's release freed the key");
}

#[test]
fn mysql_a_lost_take_landing_after_the_retried_grant_leaves_one_holder() {
    let table = mysql::Table::fresh();
    let proxied = Proxied::mysql(&table);
    let Proxied { proxy, through, direct, .. } = &proxied;
    let fence = format!("SELECT fence FROM `{}` WHERE k = 'k'", table.0);
    late_take_under_a_retried_grant(proxy, through, direct, b"_take`(", || mysql::count(&fence) as u64);
    proxied.close();
}

#[test]
fn postgres_a_lost_take_landing_after_the_retried_grant_leaves_one_holder() {
    let schema = postgres::Schema::fresh();
    let proxied = Proxied::postgres(&schema);
    let Proxied { proxy, through, direct, .. } = &proxied;
    let fence = format!("SELECT fence FROM {} WHERE key = 'k'", schema.table(""));
    late_take_under_a_retried_grant(proxy, through, direct, b"_take\"(", || postgres::count(&fence) as u64);
    proxied.close();
}

/// A waiting acquire aborted while its take is in flight (the proxy holds
/// it), the take then lost with its connection (the proxy cuts it): the
/// acquire gives its claim back, answered, and fails `ABORTED` as its
/// signal says, not `OUTCOME_UNKNOWN`: nothing is held, and another
/// process takes the key at once. (Failed before: `OUTCOME_UNKNOWN`, the
/// abort heard during the give-back taken for a failed clean-up.)
fn aborted_while_its_lost_take_is_given_back(proxy: &Proxy, through: &Backend, other: &Backend) {
    assert!(block_on(block_on(through.acquire("k", wait(0))).unwrap().release()).unwrap());
    let controller = dokebi_lock::AbortController::new();
    let options = AcquireOptions { signal: Some(controller.signal()), ..wait(10_000) };
    proxy.hold();
    let outcome = std::thread::scope(|scope| {
        let acquiring = scope.spawn(|| block_on(through.acquire("k", options)));
        std::thread::sleep(Duration::from_millis(300));
        controller.abort();
        std::thread::sleep(Duration::from_millis(100));
        assert!(!acquiring.is_finished(), "a take in flight is not cut by an abort");
        proxy.cut();
        proxy.release();
        acquiring.join().unwrap()
    });
    assert_eq!(outcome.map(|lease| lease.fence()).map_err(|err| err.code()), Err(dokebi_lock::ErrorCode::Aborted));
    assert!(block_on(other.acquire("k", wait(0))).is_ok(), "nothing was left held");
}

#[test]
fn postgres_an_acquire_aborted_while_its_lost_take_is_given_back_fails_aborted() {
    let schema = postgres::Schema::fresh();
    let proxied = Proxied::postgres(&schema);
    let Proxied { proxy, through, direct, .. } = &proxied;
    aborted_while_its_lost_take_is_given_back(proxy, through, direct);
    proxied.close();
}

#[test]
fn mysql_an_acquire_aborted_while_its_lost_take_is_given_back_fails_aborted() {
    let table = mysql::Table::fresh();
    let proxied = Proxied::mysql(&table);
    let Proxied { proxy, through, direct, .. } = &proxied;
    aborted_while_its_lost_take_is_given_back(proxy, through, direct);
    proxied.close();
}

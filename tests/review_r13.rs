//! Review R13 of 207f648, f1f12ff and 64172e0 (a waiting acquire whose lost
//! try was given back, answered, while its wait ended fails as the wait
//! says; a give-back or try refused for another session's row lock is sent
//! again after `pollIntervalMs`): interleavings on the machine's
//! PostgreSQL and MariaDB through a TCP proxy (tests/faults/proxy.rs).
//! Three findings, each on both servers (ignored, so the suite stays
//! green): an acquire that answers `ABORTED` after its lost take was given
//! back can still leave `k` held by that take, landing late, for `leaseMs`;
//! a reader whose hand-over call went unanswered (granted in the store, not
//! told) is refused for a writer's mark that its own grant holds off: both
//! wait until the reader's wait ends; and a lost take landing while its
//! token holds (review R12's "one holder") is refused for an older mark and
//! leaves a mark of its own that outlives the lease, refusing the free key.

mod mysql;
#[path = "postgres/mod.rs"]
mod postgres;
mod proxied;
#[path = "faults/proxy.rs"]
mod proxy;

use std::time::{Duration, Instant};

use dokebi_lock::{AbortController, AcquireOptions, ErrorCode};
use futures::executor::block_on;
use proxied::Proxied;

fn wait(ms: u64) -> AcquireOptions {
    AcquireOptions { wait_timeout: Some(Duration::from_millis(ms)), ..AcquireOptions::default() }
}

/// A waiting acquire on `through` loses its take with its connection (the
/// proxy cuts the client and keeps the take), and is aborted while its
/// give-back (slowed by the proxy's latency) is under way: the give-back
/// answers at its first attempt, so the acquire fails `ABORTED`, which the
/// docs gloss "nothing is held". The kept take then reaches the server,
/// after the give-up's background clean-up had its two looks, and grants
/// the token: `other` (another process) is refused a key that nobody holds,
/// for `leaseMs`. Answers what `other` got.
fn aborted_then_the_kept_take_lands(proxied: &Proxied, take: &[u8], live: impl Fn() -> i64) -> Result<u64, ErrorCode> {
    let Proxied { proxy, through, direct: other, .. } = proxied;
    assert!(block_on(block_on(through.acquire("k", wait(0))).unwrap().release()).unwrap());
    proxy.set_latency(Duration::from_millis(300));
    let take = proxy.stall(take);
    let controller = AbortController::new();
    let options = AcquireOptions { signal: Some(controller.signal()), ..wait(10_000) };
    let outcome = std::thread::scope(|scope| {
        let acquiring = scope.spawn(|| block_on(through.acquire("k", options)));
        let began = Instant::now();
        while !take.caught() && began.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(take.caught(), "the take was lost with its connection");
        // The give-back: at least two trips of 300 ms each way.
        std::thread::sleep(Duration::from_millis(150));
        controller.abort();
        acquiring.join().unwrap()
    });
    proxy.set_latency(Duration::ZERO);
    assert_eq!(outcome.map(|lease| lease.fence()).map_err(|err| err.code()), Err(ErrorCode::Aborted), "the new code's answer");
    assert_eq!(live(), 0, "nothing held once ABORTED was answered");
    // The give-up's clean-up looks twice, a command timeout apart.
    std::thread::sleep(Duration::from_secs(3));
    take.deliver();
    let delivered = Instant::now();
    while live() == 0 && delivered.elapsed() < Duration::from_secs(3) {
        std::thread::sleep(Duration::from_millis(20));
    }
    block_on(other.acquire("k", wait(0))).map(|lease| lease.fence()).map_err(|err| err.code())
}

#[test]
#[ignore = "open (no second holder): a lost take a proxy delivers after the clean-up of an acquire that ended ABORTED holds k until leaseMs, as after a release (docs/postgres.md)"]
fn postgres_an_acquire_aborted_after_its_lost_take_was_given_back_leaves_the_key_free() {
    let schema = postgres::Schema::fresh();
    let proxied = Proxied::postgres(&schema);
    let live = format!("SELECT count(*) FROM {} WHERE expires_at > now()", schema.table("_holders"));
    let other = aborted_then_the_kept_take_lands(&proxied, b"_take\"(", || postgres::count(&live));
    let left = postgres::count(&format!(
        "SELECT coalesce(max(extract(epoch FROM expires_at - now()) * 1000)::bigint, 0) FROM {} WHERE expires_at > now()",
        schema.table("_holders")
    ));
    proxied.close();
    assert!(
        other.is_ok(),
        "the acquire answered ABORTED (\"nothing is held\"), yet k is held by its token for {left} ms more: another process got {other:?}"
    );
}

#[test]
#[ignore = "open (no second holder): a lost take a proxy delivers after the clean-up of an acquire that ended ABORTED holds k until leaseMs, as after a release (docs/mysql.md)"]
fn mysql_an_acquire_aborted_after_its_lost_take_was_given_back_leaves_the_key_free() {
    let table = mysql::Table::fresh();
    let proxied = Proxied::mysql(&table);
    let live = format!("SELECT COUNT(*) FROM `{}_holders` WHERE expires_at > 1", table.0);
    let other = aborted_then_the_kept_take_lands(&proxied, b"_take`(", || mysql::count(&live));
    proxied.close();
    assert!(other.is_ok(), "the acquire answered ABORTED (\"nothing is held\"), yet k is held by its token: another process got {other:?}");
}

fn shared(ms: u64) -> AcquireOptions {
    AcquireOptions { mode: dokebi_lock::LockMode::Shared, ..wait(ms) }
}

/// Readers: the head `h` of this process's queue on `k` tries with the
/// reader `f` behind it (one hand-over call, `hand_over` for the proxy to
/// catch); the proxy cuts that call's client but delivers it (the server
/// grants both), and holds what follows for a moment. `f` is told the call
/// went unanswered (dirty) and waits on; `h` gives its own claim back and
/// tries again. Meanwhile a writer `w` of another process starts waiting.
/// `h`'s retry grants `h` and refuses `f` (no ticket yet) for `w`'s older
/// mark; after `h`'s release, `f`'s own grant (of which nobody was told)
/// still stands and holds `w` off, and `w`'s mark holds `f` off: neither
/// moves until `f`'s wait ends. `live`, `marks`: the live holder rows and
/// waiting marks.
fn reader_behind_a_lost_hand_over(proxied: &Proxied, hand_over: &[u8], live: impl Fn() -> i64, marks: impl Fn() -> i64) {
    let (through, other, proxy) = (&proxied.through, &proxied.direct, &proxied.proxy);
    assert!(block_on(block_on(through.acquire("k", wait(0))).unwrap().release()).unwrap());
    let writer = block_on(other.acquire("k", wait(0))).unwrap();
    std::thread::scope(|scope| {
        let h = scope.spawn(|| block_on(through.acquire("k", shared(15_000))));
        std::thread::sleep(Duration::from_millis(300));
        let f = scope.spawn(|| {
            let outcome = block_on(through.acquire("k", shared(6_000))).map(|lease| lease.fence()).map_err(|err| err.code());
            (Instant::now(), outcome)
        });
        std::thread::sleep(Duration::from_millis(300));
        let hand_over = proxy.stall(hand_over);
        // What h sends once its call is caught (its give-back) is held: it
        // comes 200 ms after it was read, and is held by then.
        proxy.set_latency(Duration::from_millis(200));
        assert!(block_on(writer.release()).unwrap());
        while !hand_over.caught() {
            std::thread::sleep(Duration::from_millis(1));
        }
        proxy.hold();
        proxy.set_latency(Duration::ZERO);
        hand_over.deliver();
        postgres::eventually("the lost hand-over granted h and f", || live() == 2);
        let w = scope.spawn(|| {
            let outcome = block_on(other.acquire("k", wait(20_000))).map(|lease| lease.fence()).map_err(|err| err.code());
            (Instant::now(), outcome)
        });
        postgres::eventually("w waits, marked", || marks() >= 1);
        std::thread::sleep(Duration::from_millis(200));
        proxy.release();
        let h = h.join().unwrap().expect("h's retry after its give-back");
        assert!(block_on(h.release()).unwrap());
        let released = Instant::now();
        let (f_at, f) = f.join().unwrap();
        let (w_at, w) = w.join().unwrap();
        let (f_after, w_after) = (f_at.saturating_duration_since(released), w_at.saturating_duration_since(released));
        assert!(
            f.is_ok() || (w.is_ok() && w_after < Duration::from_secs(2)),
            "k was free after h's release but for f's own grant (by its hand-over, lost): f answered {f:?} after {f_after:?}, \
             and w (a writer of another process, waiting) was granted {w:?} after {w_after:?}"
        );
    });
}

#[test]
fn postgres_a_reader_whose_hand_over_was_lost_does_not_hold_off_the_writer_it_waits_behind() {
    let schema = postgres::Schema::fresh();
    let proxied = Proxied::postgres(&schema);
    let live = format!("SELECT count(*) FROM {} WHERE expires_at > now()", schema.table("_holders"));
    let marks = format!("SELECT count(*) FROM {} WHERE lapses_at > now()", schema.table("_waiting"));
    reader_behind_a_lost_hand_over(&proxied, b"_hand_over\"(", || postgres::count(&live), || postgres::count(&marks));
    proxied.close();
}

#[test]
fn mysql_a_reader_whose_hand_over_was_lost_does_not_hold_off_the_writer_it_waits_behind() {
    let table = mysql::Table::fresh();
    // h's retry waits in the held proxy while the test sees w marked: on a
    // loaded CI host that outlasted 2 s once (OUTCOME_UNKNOWN).
    let proxied = Proxied::mysql_on(&table, "", 8_000);
    let now = "TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6))";
    let live = format!("SELECT COUNT(*) FROM `{}_holders` WHERE expires_at > {now}", table.0);
    let marks = format!("SELECT COUNT(*) FROM `{}_waiting` WHERE lapses_at > {now}", table.0);
    reader_behind_a_lost_hand_over(&proxied, b"_hand_over`(", || mysql::count(&live), || mysql::count(&marks));
    proxied.close();
}

/// The safety net's nap of the proxied provider, long as a deployment that
/// trusts its release notifications may set it: its marks live
/// 2 x 30 s + 1 s.
const NOTIFY_POLL_MS: u64 = 30_000;

/// A waiting acquire on `through` loses its take (kept by the proxy),
/// gives back, and is granted by its retry (review R12); meanwhile a
/// writer `w` of another process waits for `k`. The kept take then lands
/// while its token holds `k`. It was refused for `w`'s mark (older; the
/// lost take carried no ticket) and left a mark of its own, which neither
/// the caller's release nor `w`'s grant took back: once `w` had come and
/// gone, a new acquire `x` of the free key was refused for that mark until
/// it lapsed (`2 x notifyPollIntervalMs + 1 s`). Now a key its token holds
/// waits for no mark: the late take takes its token's row over (the key's
/// fence rises, as in review R12) and leaves no mark. Answers what `x` got
/// within 3 s.
fn a_late_take_s_mark_outlives_its_holder(
    proxied: &Proxied,
    take: &[u8],
    marks: impl Fn() -> i64,
    fence: impl Fn() -> i64,
) -> Result<u64, ErrorCode> {
    let (through, other, proxy) = (&proxied.through, &proxied.direct, &proxied.proxy);
    assert!(block_on(block_on(through.acquire("k", wait(0))).unwrap().release()).unwrap());
    let take = proxy.stall(take);
    let lease = block_on(through.acquire("k", wait(10_000))).expect("the retry after a give-back answered at its first attempt");
    assert!(take.caught(), "the take was lost with its connection");
    std::thread::scope(|scope| {
        let w = scope.spawn(|| {
            let lease = block_on(other.acquire("k", wait(20_000))).map_err(|err| err.code())?;
            block_on(lease.release()).map_err(|err| err.code())
        });
        postgres::eventually("w waits, marked", || marks() == 1);
        take.deliver();
        postgres::eventually("the late take ran, taking its token's row over", || fence() > lease.fence() as i64);
        assert_eq!(marks(), 1, "only w's mark");
        assert!(block_on(lease.release()).unwrap());
        assert_eq!(w.join().unwrap(), Ok(true), "w was granted once the caller released");
    });
    let x = block_on(other.acquire("k", wait(3_000))).map(|lease| lease.fence()).map_err(|err| err.code());
    x
}

#[test]
fn postgres_a_late_take_refused_while_its_token_held_leaves_no_mark_behind() {
    let schema = postgres::Schema::fresh();
    let proxied = Proxied::postgres_with(&schema, &format!("        notifyPollIntervalMs: {NOTIFY_POLL_MS}\n"));
    let marks = format!("SELECT count(*) FROM {} WHERE lapses_at > now()", schema.table("_waiting"));
    let fence = format!("SELECT fence FROM {} WHERE key = 'k'", schema.table(""));
    let x = a_late_take_s_mark_outlives_its_holder(&proxied, b"_take\"(", || postgres::count(&marks), || postgres::count(&fence));
    proxied.close();
    assert!(x.is_ok(), "nobody held or waited for k, yet a new acquire got {x:?}: the late take's mark outlived its token's lease");
}

#[test]
fn mysql_a_late_take_refused_while_its_token_held_leaves_no_mark_behind() {
    let table = mysql::Table::fresh();
    let proxied = Proxied::mysql_with(&table, &format!(", notifyPollIntervalMs: {NOTIFY_POLL_MS}"));
    let now = "TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6))";
    let marks = format!("SELECT COUNT(*) FROM `{}_waiting` WHERE lapses_at > {now}", table.0);
    let fence = format!("SELECT fence FROM `{}` WHERE k = 'k'", table.0);
    let x = a_late_take_s_mark_outlives_its_holder(&proxied, b"_take`(", || mysql::count(&marks), || mysql::count(&fence));
    proxied.close();
    assert!(x.is_ok(), "nobody held or waited for k, yet a new acquire got {x:?}: the late take's mark outlived its token's lease");
}

/// Held: a waiting acquire whose wait runs out while its take is in
/// flight (the proxy holds it), the take then lost with its connection
/// (the proxy cuts it), gives its claim back, answered, and fails
/// `WAIT_TIMEOUT` as its wait says (review_r10 has the abort's case);
/// nothing is held.
fn timed_out_while_its_lost_take_is_given_back(proxied: &Proxied) {
    let (through, other, proxy) = (&proxied.through, &proxied.direct, &proxied.proxy);
    assert!(block_on(block_on(through.acquire("k", wait(0))).unwrap().release()).unwrap());
    proxy.hold();
    let outcome = std::thread::scope(|scope| {
        let acquiring = scope.spawn(|| block_on(through.acquire("k", wait(500))));
        std::thread::sleep(Duration::from_millis(800));
        assert!(!acquiring.is_finished(), "a take in flight is not cut by the wait's end");
        proxy.cut();
        proxy.release();
        acquiring.join().unwrap()
    });
    assert_eq!(outcome.map(|lease| lease.fence()).map_err(|err| err.code()), Err(ErrorCode::WaitTimeout));
    assert!(block_on(other.acquire("k", wait(0))).is_ok(), "nothing was left held");
}

#[test]
fn postgres_an_acquire_timed_out_while_its_lost_take_is_given_back_fails_wait_timeout() {
    let schema = postgres::Schema::fresh();
    let proxied = Proxied::postgres(&schema);
    timed_out_while_its_lost_take_is_given_back(&proxied);
    proxied.close();
}

#[test]
fn mysql_an_acquire_timed_out_while_its_lost_take_is_given_back_fails_wait_timeout() {
    let table = mysql::Table::fresh();
    let proxied = Proxied::mysql(&table);
    timed_out_while_its_lost_take_is_given_back(&proxied);
    proxied.close();
}

//! Review R15 of bbcfecf (postgres functions 9, mysql procedures 8: a try
//! whose token holds a key already waits for no other request's mark on
//! it): interleavings on the machine's PostgreSQL and MariaDB through a TCP
//! proxy (tests/faults/proxy.rs). No second holder and no repeated fence
//! was found; one finding, on both servers (ignored, so the suite stays
//! green): a lost take delivered late after its lease was released (its
//! token holds nothing any more) is still refused for the key's holder and
//! leaves a mark that nobody takes back, which refuses every later acquire
//! of the free key for `2 x notifyPollIntervalMs + 1 s` (review R13's third
//! finding, by another order of the same events). Probes that held: a take
//! again of its token's kind passes an older mark and adds no row; of another
//! weight or mode it is held against by the other holders; a token whose
//! row expired waits behind the mark.

mod mysql;
#[path = "postgres/mod.rs"]
mod postgres;
mod proxied;
#[path = "faults/proxy.rs"]
mod proxy;

use std::time::Duration;

use dokebi_lock::{AcquireOptions, ErrorCode, Provider};
use futures::executor::block_on;
use proxied::Proxied;

fn wait(ms: u64) -> AcquireOptions {
    AcquireOptions { wait_timeout: Some(Duration::from_millis(ms)), ..AcquireOptions::default() }
}

/// The safety net's nap of the proxied provider, long as a deployment that
/// trusts its release notifications may set it: its marks live
/// 2 x 30 s + 1 s.
const NOTIFY_POLL_MS: u64 = 30_000;

/// [`Proxied::mysql`] with `notifyPollIntervalMs` [`NOTIFY_POLL_MS`] on
/// the proxied provider.
fn proxied_mysql(table: &mysql::Table) -> Proxied {
    Proxied::mysql_with(table, &format!(", notifyPollIntervalMs: {NOTIFY_POLL_MS}"))
}

/// [`Proxied::postgres`] with `notifyPollIntervalMs` [`NOTIFY_POLL_MS`].
fn proxied_postgres(schema: &postgres::Schema) -> Proxied {
    Proxied::postgres_with(schema, &format!("        notifyPollIntervalMs: {NOTIFY_POLL_MS}\n"))
}

/// A waiting acquire on `through` loses its take (kept by the proxy),
/// gives back, and is granted by its retry (review R12); its lease is
/// released, and `o`, another process, takes `k`. The kept take then
/// lands: its token holds nothing now, so bbcfecf's rule does not apply,
/// and it is refused for `o` (held against it) and leaves a mark of its
/// own (the lost take was a waiting one), which no withdraw takes back:
/// its acquire ended long ago. Once `o` released, a new acquire `x` of
/// the free key is refused for that mark until it lapses. `marks`: the
/// live marks. Answers what `x` got within 3 s.
fn a_late_take_after_its_release_leaves_a_mark(proxied: &Proxied, take: &[u8], marks: impl Fn() -> i64) -> Result<u64, ErrorCode> {
    let (through, other, proxy) = (&proxied.through, &proxied.direct, &proxied.proxy);
    assert!(block_on(block_on(through.acquire("k", wait(0))).unwrap().release()).unwrap());
    let take = proxy.stall(take);
    let lease = block_on(through.acquire("k", wait(10_000))).expect("the retry after a give-back answered at its first attempt");
    assert!(take.caught(), "the take was lost with its connection");
    assert!(block_on(lease.release()).unwrap());
    let o = block_on(other.acquire("k", wait(0))).expect("k is free once released");
    assert_eq!(marks(), 0, "nobody waits");
    take.deliver();
    postgres::eventually("the late take, refused for o, left a mark", || marks() == 1);
    assert!(block_on(o.release()).unwrap());
    block_on(other.acquire("k", wait(3_000))).map(|lease| lease.fence()).map_err(|err| err.code())
}

#[test]
#[ignore = "open (docs/postgres.md): a lost take delivered after its lease's release is refused for the next holder and leaves a mark nobody takes back: a new acquire of the free key is refused (WAIT_TIMEOUT) for 2 x notifyPollIntervalMs + 1 s"]
fn postgres_a_late_take_landing_after_its_release_leaves_no_mark_behind() {
    let schema = postgres::Schema::fresh();
    let proxied = proxied_postgres(&schema);
    let marks = format!("SELECT count(*) FROM {} WHERE lapses_at > now()", schema.table("_waiting"));
    let x = a_late_take_after_its_release_leaves_a_mark(&proxied, b"_take\"(", || postgres::count(&marks));
    proxied.close();
    assert!(x.is_ok(), "nobody held or waited for k, yet a new acquire got {x:?}: a released lease's late take left a mark");
}

#[test]
#[ignore = "open (docs/postgres.md): a lost take delivered after its lease's release is refused for the next holder and leaves a mark nobody takes back: a new acquire of the free key is refused (WAIT_TIMEOUT) for 2 x notifyPollIntervalMs + 1 s"]
fn mysql_a_late_take_landing_after_its_release_leaves_no_mark_behind() {
    let table = mysql::Table::fresh();
    let proxied = proxied_mysql(&table);
    let now = "TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6))";
    let marks = format!("SELECT COUNT(*) FROM `{}_waiting` WHERE lapses_at > {now}", table.0);
    let x = a_late_take_after_its_release_leaves_a_mark(&proxied, b"_take`(", || mysql::count(&marks));
    proxied.close();
    assert!(x.is_ok(), "nobody held or waited for k, yet a new acquire got {x:?}: a released lease's late take left a mark");
}

/// Probes that held, by calls of the take function itself (a token of the
/// driver always takes again with its claim's own kind, so another kind is
/// out of the driver's reach): skipping the marks of a key its token holds
/// never skips its other holders. A take again of another weight or mode
/// is held against by the others as any take (it would overfill the limit,
/// or write beside readers), while one of the held kind is granted past an
/// older mark and adds no row; a token whose row expired holds nothing and
/// waits behind the mark. Each case on a key of its own: `(what, holders
/// before (token, shared, limit, weight), the mark's kind, the take again's
/// kind, granted)`.
type Kind = (bool, i32, i32);
type Retake = (&'static str, &'static [(&'static str, bool, i32, i32)], Kind, Kind, bool);
const RETAKES: &[Retake] = &[
    ("counted, same weight", &[("o", false, 3, 2), ("t", false, 3, 1)], (false, 3, 1), (false, 3, 1), true),
    ("counted, heavier", &[("o", false, 3, 2), ("t", false, 3, 1)], (false, 3, 1), (false, 3, 2), false),
    ("reader again", &[("t", true, 1, 1), ("r", true, 1, 1)], (false, 1, 1), (true, 1, 1), true),
    ("reader as a writer", &[("t", true, 1, 1), ("r", true, 1, 1)], (false, 1, 1), (false, 1, 1), false),
];

/// Runs [`RETAKES`] with `take(key, token, kind, lease_ms, waiting_ms)`
/// (the answer's first number) and `rows(key)`, the key's live holder rows.
fn retakes(take: impl Fn(&str, &str, Kind, i64, i64) -> i64, rows: impl Fn(&str) -> i64) {
    for (i, (what, holders, mark, again, granted)) in RETAKES.iter().enumerate() {
        let key = format!("k{i}");
        for (token, shared, limit, weight) in *holders {
            assert_eq!(take(&key, token, (*shared, *limit, *weight), 30_000, 0), 1, "{what}: {token} holds");
        }
        assert_eq!(take(&key, "w", *mark, 30_000, 60_000), 0, "{what}: w waits, marked");
        assert_eq!(take(&key, "t", *again, 30_000, 60_000) == 1, *granted, "{what}");
        assert_eq!(rows(&key), holders.len() as i64, "{what}: no row added");
    }
    // t's row expired (not yet marked dead: nobody was granted since):
    // t holds nothing, and waits behind w. Its lease is long enough for w's
    // take to come first on a loaded host (200 ms was not, in a CI run
    // whose fault suite ran beside it: w was granted).
    assert_eq!(take("e", "t", (false, 1, 1), 2_000, 0), 1, "t holds for 2 s");
    assert_eq!(take("e", "w", (false, 1, 1), 30_000, 60_000), 0, "w waits, marked");
    std::thread::sleep(Duration::from_millis(2_100));
    assert_eq!(take("e", "t", (false, 1, 1), 30_000, 60_000), 0, "t's expired row let it pass w's mark");
    assert_eq!(rows("e"), 0);
}

#[test]
fn postgres_a_take_again_skips_marks_but_never_holders() {
    let schema = postgres::Schema::fresh();
    let provider = schema.open("");
    assert!(block_on(block_on(postgres::backend(&provider).acquire("installed", wait(0))).unwrap().release()).unwrap());
    let take = |key: &str, token: &str, (shared, limit, weight): Kind, lease: i64, waiting: i64| {
        postgres::count(&format!(
            "SELECT ({}('probe', ARRAY['{key}'], '{token}', {shared}, {limit}, {weight}, {lease}, {waiting}, 0, 60000, 1000))[1]",
            schema.table("_take")
        ))
    };
    let rows = |key: &str| {
        postgres::count(&format!(
            "SELECT count(*) FROM {} WHERE namespace = 'probe' AND key = '{key}' AND expires_at > now()",
            schema.table("_holders")
        ))
    };
    retakes(take, rows);
    block_on(provider.close());
}

#[test]
fn mysql_a_take_again_skips_marks_but_never_holders() {
    let table = mysql::Table::fresh();
    let provider = Provider::from_yaml(&mysql::yaml(&table.0, "")).unwrap();
    assert!(block_on(block_on(provider.backend("shared").unwrap().acquire("installed", wait(0))).unwrap().release()).unwrap());
    let hex = |key: &str| key.bytes().map(|byte| format!("{byte:02x}")).collect::<String>();
    let take = |key: &str, token: &str, (shared, limit, weight): Kind, lease: i64, waiting: i64| {
        let answer = mysql::rows(&format!(
            "CALL `{}_take`('probe', '{}', '{token}', {}, {limit}, {weight}, {lease}, {waiting}, 0, 60000, 1, 2)",
            table.0,
            hex(key),
            u8::from(shared)
        ))[0][0]
            .clone()
            .unwrap();
        answer.split(',').next().unwrap().parse().unwrap()
    };
    let now = "TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6))";
    let rows = |key: &str| {
        mysql::count(&format!("SELECT COUNT(*) FROM `{}_holders` WHERE ns = 'probe' AND k = '{key}' AND expires_at > {now}", table.0))
    };
    retakes(take, rows);
    block_on(provider.close());
}

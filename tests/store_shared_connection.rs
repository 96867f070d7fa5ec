//! Backends that share one connection, on every store driver (redis,
//! postgres, mysql): each differs from the other in one option that changes where
//! or how a grant is written. A queue of this process belongs to one store
//! location (server, schema, table) and namespace, never to a key name
//! alone: backends whose keys live apart neither wait for each other nor
//! grant each other's requests. A hand-off between backends of one location
//! writes the receiver's own lease terms (`leaseMs`, `fenceRetentionMs`),
//! whatever the kind of the lease handed on: the receiver's lease says valid
//! exactly while the store keeps it.
//!
//! Each provider stands for a process: `other` is a second provider with
//! its own connection, so what it is granted is what any process would be.

mod mysql;
mod postgres;
mod support;

use std::thread;
use std::time::Duration;

use dokebi_lock::{AcquireOptions, Backend, ErrorCode, Lease, LockMode, Provider, StoreCounts};
use futures::executor::block_on;
use postgres::Schema;
use support::redis_server::RedisServer;
use support::wait;

/// Where the backends' leases live.
enum Store {
    /// A private server.
    Redis(RedisServer),
    /// The machine's server: the test's own schema (the default of every
    /// backend) and any other schema a backend names.
    Postgres(Schema, Vec<Schema>),
    /// The machine's MariaDB: tables named after the test's own name.
    Mysql(mysql::Table),
}

/// One backend's fields beside the defaults of [`Store::yaml`].
type Fields<'a> = &'a [(&'a str, &'a str)];

impl Store {
    fn redis() -> Store {
        Store::Redis(RedisServer::start())
    }

    fn postgres() -> Store {
        Store::Postgres(Schema::fresh(), Vec::new())
    }

    fn mysql() -> Store {
        Store::Mysql(mysql::Table::fresh())
    }

    /// A schema of the test's own for a backend that names one (postgres).
    fn other_schema(&mut self) -> String {
        match self {
            Store::Postgres(_, others) => {
                others.push(Schema::fresh());
                others.last().unwrap().0.clone()
            }
            Store::Redis(_) | Store::Mysql(_) => unreachable!("only postgres has schemas"),
        }
    }

    /// A provider with backends `a` and `b` on one connection `main`. Polls
    /// are far apart: a waiter served at once was served by a release or a
    /// store that had its key free, not by a retry.
    fn open(&self, a: Fields, b: Fields) -> Provider {
        Provider::from_yaml(&self.yaml(a, b)).unwrap()
    }

    fn yaml(&self, a: Fields, b: Fields) -> String {
        let (connection, driver, location) = match self {
            Store::Redis(server) => {
                (format!("  dokebi-redis:\n    connections:\n      main:\n        url: {}\n", server.url()), "redis", Vec::new())
            }
            Store::Postgres(schema, _) => (
                format!(
                    "  dokebi-postgres:\n    connections:\n      main:\n        url: '{}'\n        commandTimeoutMs: 2000\n",
                    postgres::url()
                ),
                "postgres",
                vec![("schema", schema.0.as_str())],
            ),
            // A commit waits for the server's log flush, which on a host busy
            // writing (CI's builds beside the suites) took more than 2 s once.
            Store::Mysql(table) => (
                format!(
                    "  dokebi-mysql:\n    connections:\n      main:\n        url: '{}'\n        commandTimeoutMs: 5000\n",
                    mysql::url()
                ),
                "mysql",
                vec![("table", table.0.as_str())],
            ),
        };
        let backend = |name: &str, fields: Fields| {
            let mut all: Vec<(&str, &str)> = vec![
                ("driver", driver),
                ("connection", "main"),
                ("namespace", "test"),
                ("leaseMs", "10000"),
                ("pollIntervalMs", "5000"),
                ("notifyPollIntervalMs", "5000"),
            ];
            all.extend(location.iter().copied());
            for (field, value) in fields {
                all.retain(|(f, _)| f != field);
                all.push((field, value));
            }
            let lines: String = all.iter().map(|(field, value)| format!("        {field}: {value}\n")).collect();
            format!("      {name}:\n{lines}")
        };
        format!("schemaVersion: 1\noptions:\n{connection}  dokebi-lock:\n    backends:\n{}{}", backend("a", a), backend("b", b))
    }

    /// Waits until the provider's backends hear releases of other processes
    /// (mysql has no wake-ups yet: its waiters poll).
    fn subscribed(&self, provider: &Provider) {
        if let Store::Mysql(_) = self {
            return;
        }
        for name in ["a", "b"] {
            let backend = provider.backend(name).unwrap();
            support::eventually("release notifications are live", || counts(&backend).subscribed);
        }
    }

    /// The longest time (ms) a lease of a live holder has left in the store,
    /// on the store's clock (0: nothing held). `schema` and `table` as the
    /// backend names them (postgres).
    fn lease_left_ms(&self, table: Option<(&str, &str)>) -> i64 {
        match self {
            Store::Redis(server) => {
                let mut client = server.client();
                let (seconds, micros): (i64, i64) = redis::cmd("TIME").query(&mut client).unwrap();
                let now_ms = seconds * 1000 + micros / 1000;
                let mut left = 0;
                for key in server.keys().into_iter().filter(|key| key.contains(":lock:")) {
                    let kind: String = redis::cmd("TYPE").arg(&key).query(&mut client).unwrap();
                    let ms = if kind == "zset" {
                        let top: Vec<(String, f64)> =
                            redis::cmd("ZRANGE").arg(&key).arg(-1).arg(-1).arg("WITHSCORES").query(&mut client).unwrap();
                        top.first().map_or(0, |(_, expiry)| *expiry as i64 - now_ms)
                    } else {
                        redis::cmd("PTTL").arg(&key).query(&mut client).unwrap()
                    };
                    left = left.max(ms);
                }
                left
            }
            Store::Postgres(schema, _) => {
                let (schema, table) = table.unwrap_or((&schema.0, "dokebi_lock"));
                postgres::count(&format!(
                    "SELECT coalesce(max(extract(epoch FROM expires_at - clock_timestamp()) * 1000), 0)::bigint FROM \"{schema}\".\"{table}_holders\" WHERE expires_at > clock_timestamp()"
                ))
            }
            Store::Mysql(own) => {
                let table = table.map_or(own.0.as_str(), |(_, table)| table);
                mysql::count(&format!(
                    "SELECT COALESCE(MAX(expires_at - {MYSQL_CLOCK}), 0) DIV 1000 FROM `{table}_holders` WHERE expires_at > {MYSQL_CLOCK}"
                ))
            }
        }
    }

    /// The longest time (ms) a key's fence counter is kept from now.
    fn fence_kept_ms(&self) -> i64 {
        match self {
            Store::Redis(server) => {
                let mut client = server.client();
                server
                    .keys()
                    .into_iter()
                    .filter(|key| key.contains(":lock-fence:"))
                    .map(|key| redis::cmd("PTTL").arg(key).query::<i64>(&mut client).unwrap())
                    .max()
                    .unwrap_or(0)
            }
            Store::Postgres(schema, _) => postgres::count(&format!(
                "SELECT coalesce(max(extract(epoch FROM fence_until - clock_timestamp()) * 1000), 0)::bigint FROM \"{}\".dokebi_lock",
                schema.0
            )),
            Store::Mysql(table) => {
                mysql::count(&format!("SELECT COALESCE(MAX(fence_until - {MYSQL_CLOCK}), 0) DIV 1000 FROM `{}`", table.0))
            }
        }
    }
}

/// MariaDB's clock in µs, as the mysql driver reads it.
const MYSQL_CLOCK: &str = "TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6))";

fn counts(backend: &Backend) -> StoreCounts {
    match backend {
        Backend::Redis(redis) => redis.counts(),
        Backend::Postgres(postgres) => postgres.counts(),
        Backend::Mysql(mysql) => mysql.counts(),
        _ => panic!("not a store backend"),
    }
}

fn counted(limit: u32, weight: u32, ms: u64) -> AcquireOptions {
    AcquireOptions { limit: Some(limit), weight: Some(weight), ..wait(ms) }
}

fn shared(ms: u64) -> AcquireOptions {
    AcquireOptions { mode: LockMode::Shared, ..wait(ms) }
}

fn take(backend: &Backend, keys: &[&str], options: AcquireOptions) -> Lease {
    block_on(backend.acquire_many(keys, options)).expect("granted")
}

fn later(backend: &Backend, keys: &[&str], options: AcquireOptions) -> thread::JoinHandle<dokebi_lock::Result<Lease>> {
    let backend = backend.clone();
    let keys: Vec<String> = keys.iter().map(|key| (*key).to_owned()).collect();
    thread::spawn(move || {
        let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
        block_on(backend.acquire_many(&keys, options))
    })
}

/// Waits until `backend` has `n` acquires in progress, each past its first
/// try (a try answers in well under the pause).
fn until_waiting(backend: &Backend, n: usize) {
    support::eventually("the acquires wait", || counts(backend).waiting == n);
    thread::sleep(Duration::from_millis(300));
}

fn release(lease: Lease) {
    assert!(block_on(lease.release()).unwrap(), "released while held");
}

// ---- Where: backends whose keys live apart share no queue. ----

/// Two backends of one connection whose keys live apart, and where `a`'s
/// keys are (postgres: its schema and table, checked for leftovers).
struct Apart {
    store: Store,
    a: Vec<(&'static str, String)>,
    b: Vec<(&'static str, String)>,
    a_table: Option<(String, String)>,
}

/// What tells `a`'s keys from `b`'s.
enum Split {
    RedisNamespaces,
    PostgresNamespaces,
    PostgresTables,
    PostgresSchemas,
    MysqlNamespaces,
    MysqlTables,
}

impl Split {
    fn apart(self) -> Apart {
        let field = |name: &'static str, value: &str| vec![(name, value.to_owned())];
        match self {
            Split::RedisNamespaces => {
                Apart { store: Store::redis(), a: field("namespace", "one"), b: field("namespace", "two"), a_table: None }
            }
            Split::PostgresNamespaces => {
                Apart { store: Store::postgres(), a: field("namespace", "one"), b: field("namespace", "two"), a_table: None }
            }
            Split::PostgresTables => {
                let store = Store::postgres();
                let Store::Postgres(schema, _) = &store else { unreachable!() };
                let a_table = Some((schema.0.clone(), "locks_a".to_owned()));
                Apart { store, a: field("table", "locks_a"), b: field("table", "locks_b"), a_table }
            }
            Split::PostgresSchemas => {
                let mut store = Store::postgres();
                let (one, two) = (store.other_schema(), store.other_schema());
                let a_table = Some((one.clone(), "dokebi_lock".to_owned()));
                Apart { store, a: field("schema", &one), b: field("schema", &two), a_table }
            }
            Split::MysqlNamespaces => {
                Apart { store: Store::mysql(), a: field("namespace", "one"), b: field("namespace", "two"), a_table: None }
            }
            Split::MysqlTables => {
                let store = Store::mysql();
                let Store::Mysql(table) = &store else { unreachable!() };
                let (one, two) = (table.0.clone(), table.named("b"));
                let a_table = Some((String::new(), one.clone()));
                Apart { store, a: field("table", &one), b: field("table", &two), a_table }
            }
        }
    }
}

impl Apart {
    /// A provider with both backends, once it hears releases.
    fn open(&self) -> Provider {
        let provider = self.store.open(&borrowed(&self.a), &borrowed(&self.b));
        self.store.subscribed(&provider);
        provider
    }
}

fn borrowed<'a>(fields: &'a [(&'static str, String)]) -> Vec<(&'static str, &'a str)> {
    fields.iter().map(|(name, value)| (*name, value.as_str())).collect()
}

/// `b` waits for `k` and `j` while `a` holds them and releases: `b`'s lease
/// is in `b`'s place (another process on `b` is refused the keys while it
/// is valid), and nothing stays held in `a`'s.
fn waiter_granted_in_its_own_place(split: Split) {
    let apart = split.apart();
    let (provider, other) = (apart.open(), apart.open());
    let (on_a, on_b) = (provider.backend("a").unwrap(), provider.backend("b").unwrap());
    let held = take(&on_a, &["k", "j"], wait(0));
    let waiter = later(&on_b, &["k", "j"], wait(20_000));
    thread::sleep(Duration::from_millis(300));
    release(held);
    let granted = waiter.join().unwrap().expect("b is granted");
    assert!(granted.is_valid());
    if let Some((schema, table)) = &apart.a_table {
        assert_eq!(apart.store.lease_left_ms(Some((schema, table))), 0, "nothing is held in a's place");
    }
    let again = block_on(other.backend("b").unwrap().acquire_many(&["k", "j"], wait(0)));
    assert_eq!(again.map(|_| ()).unwrap_err().code(), ErrorCode::LockBusy, "b's keys are held in b's place while b's lease is valid");
    release(granted);
    block_on(provider.close());
    block_on(other.close());
}

/// While `a` holds `k` and another acquire of `a` waits for it, `b` is
/// granted `k` by a single try (`wait` 0), or by a wait of a second (`wait`
/// 1000): not `LOCK_BUSY`, not `WAIT_TIMEOUT` behind `a`'s queue.
fn not_held_up_by_the_others_queue(split: Split, wait_ms: u64) {
    let apart = split.apart();
    let provider = apart.open();
    let (on_a, on_b) = (provider.backend("a").unwrap(), provider.backend("b").unwrap());
    let held = take(&on_a, &["k"], wait(0));
    let queued = later(&on_a, &["k"], wait(20_000));
    until_waiting(&on_a, 1);
    let granted = block_on(on_b.acquire("k", wait(wait_ms)));
    let granted = granted.unwrap_or_else(|err| panic!("b is granted k, whatever a's queue holds: {:?}", err.code()));
    release(granted);
    release(held);
    release(queued.join().unwrap().expect("a's waiter is granted"));
    block_on(provider.close());
}

macro_rules! in_every_split {
    ($($module:ident: $split:expr;)*) => {$(
        mod $module {
            use super::*;
            #[test]
            fn a_waiter_is_granted_in_its_own_place() {
                waiter_granted_in_its_own_place($split);
            }
            #[test]
            fn a_single_try_is_not_refused_by_the_others_queue() {
                not_held_up_by_the_others_queue($split, 0);
            }
            #[test]
            fn a_wait_is_not_held_up_by_the_others_queue() {
                not_held_up_by_the_others_queue($split, 1_000);
            }
        }
    )*};
}

in_every_split! {
    redis_namespaces: Split::RedisNamespaces;
    postgres_namespaces: Split::PostgresNamespaces;
    postgres_tables: Split::PostgresTables;
    postgres_schemas: Split::PostgresSchemas;
    mysql_namespaces: Split::MysqlNamespaces;
    mysql_tables: Split::MysqlTables;
}

// ---- How: a hand-off writes the receiver's lease terms. ----

/// The short backend's lease; the long one's is an hour.
const SHORT_MS: u64 = 6_000;

const SHORT: Fields = &[("leaseMs", "6000")];
const LONG: Fields = &[("leaseMs", "3600000")];

/// How a lease of `a` comes to be handed to a waiter of `b` (on one key,
/// `pool`, or on `k` and `j`), and what the waiter asked for.
#[derive(Clone, Copy)]
enum Handing {
    /// `a` holds both units of a counted key with one lease; `b` waits for one.
    Counted,
    /// `a` holds both units of a counted key with two leases of one unit;
    /// `b` waits for one unit without having tried (this process's leases
    /// keep the key full): the release of one of them hands it on as is (the
    /// Redis script's straight path).
    CountedSameWeight,
    /// `a` holds a reader; `b` waits as a writer.
    ReaderToWriter,
    /// `a` holds `k` and `j` with one lease; `b` waits for both.
    SeveralKeys,
    /// Another process holds both units of a counted key; `a` waits for one
    /// unit first, `b` for one behind it: the release wakes `a`'s try, which
    /// grants `b` in the same call.
    Follower,
}

impl Handing {
    fn keys(self) -> &'static [&'static str] {
        match self {
            Handing::SeveralKeys => &["k", "j"],
            _ => &["pool"],
        }
    }

    /// What `b` waits with.
    fn asked(self, ms: u64) -> AcquireOptions {
        match self {
            Handing::ReaderToWriter | Handing::SeveralKeys => wait(ms),
            _ => counted(2, 1, ms),
        }
    }

    /// What another process tries while `b` holds: refused by any lease of
    /// `b` (a counted key's whole limit).
    fn intruder(self) -> AcquireOptions {
        match self {
            Handing::ReaderToWriter | Handing::SeveralKeys => wait(0),
            _ => counted(2, 2, 0),
        }
    }

    /// Hands a lease of `a` (in `provider`) to `b`'s waiter: answers `b`'s
    /// lease, and `a`'s leases still held.
    fn hand(self, provider: &Provider, other: &Provider) -> (Lease, Vec<Lease>) {
        let (a, b) = (provider.backend("a").unwrap(), provider.backend("b").unwrap());
        let keys = self.keys();
        let (releasing, kept, first) = match self {
            Handing::Counted => (take(&a, keys, counted(2, 2, 0)), vec![], None),
            Handing::CountedSameWeight => {
                let one = take(&a, keys, counted(2, 1, 0));
                (take(&a, keys, counted(2, 1, 0)), vec![one], None)
            }
            Handing::ReaderToWriter => (take(&a, keys, shared(0)), vec![], None),
            Handing::SeveralKeys => (take(&a, keys, wait(0)), vec![], None),
            Handing::Follower => {
                let full = take(&other.backend("a").unwrap(), keys, counted(2, 2, 0));
                let first = later(&a, keys, counted(2, 1, 20_000));
                until_waiting(&a, 1);
                (full, vec![], Some(first))
            }
        };
        let waiter = later(&b, keys, self.asked(20_000));
        until_waiting(&b, 1);
        release(releasing);
        let handed = waiter.join().unwrap().expect("b's waiter is granted");
        let mut kept = kept;
        if let Some(first) = first {
            kept.push(first.join().unwrap().expect("a's waiter is granted"));
        }
        (handed, kept)
    }
}

/// `a` hands a lease to `b`, which has a one-hour lease (`a`: 2.5 s):
/// the store keeps `b`'s lease for about an hour, and once `a`'s lease time
/// has passed, another process on `b` is still refused the key (`b`'s lease
/// says valid).
fn receiver_lease(store: &Store, handing: Handing) {
    let provider = store.open(SHORT, LONG);
    let other = store.open(SHORT, LONG);
    store.subscribed(&provider);
    store.subscribed(&other);
    let (handed, kept) = handing.hand(&provider, &other);
    let left = store.lease_left_ms(None);
    assert!(left > 3_000_000, "the store keeps b's hour-long lease, not a's 6 s: {left} ms left");
    for lease in kept {
        // `a`'s own leases may have run out meanwhile.
        let _ = block_on(lease.release());
    }
    thread::sleep(Duration::from_millis(SHORT_MS + 500));
    assert!(handed.is_valid(), "b's lease is valid for an hour");
    let intruder = block_on(other.backend("b").unwrap().acquire_many(handing.keys(), handing.intruder()));
    assert_eq!(intruder.map(|_| ()).unwrap_err().code(), ErrorCode::LockBusy, "nobody else is granted what b's valid lease holds");
    release(handed);
    block_on(provider.close());
    block_on(other.close());
}

/// `a` (a fence counter kept one second) hands a counted lease to `b` (kept
/// an hour): the grant keeps the key's counter for `b`'s hour.
fn receiver_retention(store: &Store, handing: Handing) {
    let provider = store.open(&[("fenceRetentionMs", "1000")], &[("fenceRetentionMs", "3600000")]);
    let other = store.open(&[("fenceRetentionMs", "1000")], &[("fenceRetentionMs", "3600000")]);
    store.subscribed(&provider);
    store.subscribed(&other);
    let (handed, kept) = handing.hand(&provider, &other);
    let kept_ms = store.fence_kept_ms();
    assert!(kept_ms > 3_000_000, "b's grant keeps the fence counter for b's hour, not a's second: {kept_ms} ms");
    for lease in kept {
        release(lease);
    }
    release(handed);
    block_on(provider.close());
    block_on(other.close());
}

macro_rules! on_every_store {
    ($($name:ident: $check:ident($handing:expr);)*) => {
        mod redis_driver {
            use super::*;
            $(#[test] fn $name() { $check(&Store::redis(), $handing); })*
        }
        mod postgres_driver {
            use super::*;
            $(#[test] fn $name() { $check(&Store::postgres(), $handing); })*
        }
        mod mysql_driver {
            use super::*;
            $(#[test] fn $name() { $check(&Store::mysql(), $handing); })*
        }
    };
}

on_every_store! {
    a_counted_hand_off_writes_the_receivers_lease: receiver_lease(Handing::Counted);
    a_straight_counted_hand_off_writes_the_receivers_lease: receiver_lease(Handing::CountedSameWeight);
    a_reader_handing_to_a_writer_writes_the_receivers_lease: receiver_lease(Handing::ReaderToWriter);
    a_several_key_hand_off_writes_the_receivers_lease: receiver_lease(Handing::SeveralKeys);
    a_follower_granted_with_its_head_gets_its_own_lease: receiver_lease(Handing::Follower);
    a_counted_hand_off_keeps_the_fence_for_the_receivers_retention: receiver_retention(Handing::Counted);
    a_straight_counted_hand_off_keeps_the_fence_for_the_receivers_retention: receiver_retention(Handing::CountedSameWeight);
    a_several_key_hand_off_keeps_the_fence_for_the_receivers_retention: receiver_retention(Handing::SeveralKeys);
    a_follower_keeps_the_fence_for_its_own_retention: receiver_retention(Handing::Follower);
}

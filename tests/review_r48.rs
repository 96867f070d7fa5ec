//! Review R48 of `Backend::inspect` (ca3755c), against the real stores:
//! where the read misreports what the store holds, and what it gets right.
//! Several providers of one store stand for several processes.

mod mysql;
mod postgres;
mod support;

use std::thread;
use std::time::{Duration, Instant};

use dokebi_lock::{AbortController, AcquireOptions, Backend, ErrorCode, Inspection, Lease, LockMode, Provider};
use futures::executor::block_on;
use support::redis_server::RedisServer;
use support::{inspect, open_redis, release, shared, take, wait, within};

/// Polls so slow that a waiter's marks last long (waitingMs = 2 x 10 s + 1 s)
/// and a waiter is served by release notifications only.
const SLOW: [(&str, &str); 3] = [("leaseMs", "10000"), ("pollIntervalMs", "10000"), ("notifyPollIntervalMs", "10000")];

#[allow(dead_code)]
enum Store {
    Redis(RedisServer),
    Postgres(postgres::Schema),
    Mysql(mysql::Table),
}

/// `n` providers (processes) of one fresh store.
struct World {
    store: Store,
    providers: Vec<Provider>,
}

impl World {
    fn new(driver: &str, n: usize) -> World {
        match driver {
            "redis" => {
                let server = RedisServer::start();
                let providers = (0..n).map(|_| open_redis(&server.url(), &SLOW, &[]).0).collect();
                World { store: Store::Redis(server), providers }
            }
            "postgres" => {
                let schema = postgres::Schema::fresh();
                let fields: String = SLOW.iter().map(|(k, v)| format!("        {k}: {v}\n")).collect();
                let providers = (0..n).map(|_| schema.open(&fields)).collect();
                World { store: Store::Postgres(schema), providers }
            }
            "mysql" => {
                let table = mysql::Table::fresh();
                let yaml = mysql::yaml(&table.0, ", pollIntervalMs: 10000, notifyPollIntervalMs: 10000");
                let providers = (0..n).map(|_| Provider::from_yaml(&yaml).unwrap()).collect();
                World { store: Store::Mysql(table), providers }
            }
            other => panic!("{other}"),
        }
    }

    fn backend(&self, at: usize) -> Backend {
        self.providers[at].backend("shared").unwrap()
    }

    /// One more provider (process) of the store whose leases last
    /// `lease_ms` (none is renewed: a holder that stopped).
    fn short_lived(&self, lease_ms: u64) -> Provider {
        match &self.store {
            Store::Redis(server) => open_redis(&server.url(), &[("leaseMs", &lease_ms.to_string())], &[]).0,
            Store::Postgres(schema) => schema.open(&format!("        leaseMs: {lease_ms}\n")),
            Store::Mysql(table) => Provider::from_yaml(&mysql::yaml(&table.0, "")).unwrap(), // leaseMs 5000
        }
    }

    fn redis(&self) -> &RedisServer {
        match &self.store {
            Store::Redis(server) => server,
            _ => panic!("not redis"),
        }
    }
}

fn counted(limit: u32, weight: u32, ms: u64) -> AcquireOptions {
    AcquireOptions { limit: Some(limit), weight: Some(weight), ..wait(ms) }
}

/// An acquire of `key` by `backend` on a thread of its own.
fn waiter(backend: &Backend, key: &str, options: AcquireOptions) -> thread::JoinHandle<dokebi_lock::Result<Lease>> {
    let (backend, key) = (backend.clone(), key.to_owned());
    thread::spawn(move || block_on(backend.acquire(&key, options)))
}

/// Waits until `key` shows some waiter, then lets every try settle.
fn someone_waits(backend: &Backend, key: &str) {
    assert!(within(5000, || inspect(backend, key).waiting >= 1), "no waiter shows: {:?}", inspect(backend, key));
    thread::sleep(Duration::from_millis(400));
}

// --- Scenarios, run on each store driver ---------------------------------

/// One writer queued behind a reader is one waiting acquire.
fn one_writer_behind_a_reader(world: &World) {
    let (a, b) = (world.backend(0), world.backend(1));
    let reader = take(&a, "r", shared(0));
    let writer = waiter(&b, "r", wait(15_000));
    someone_waits(&a, "r");
    let seen = inspect(&a, "r");
    release(reader);
    let lease = writer.join().unwrap().expect("the writer is granted");
    release(lease);
    assert_eq!((seen.held, seen.mode, seen.waiting), (1, Some(LockMode::Shared), 1), "one reader holds, one writer waits: {seen:?}");
}

/// One counted request queued behind a full key is one waiting acquire.
fn one_counted_request_behind_a_full_key(world: &World) {
    let (a, b) = (world.backend(0), world.backend(1));
    let full = take(&a, "c", counted(2, 2, 0));
    let request = waiter(&b, "c", counted(2, 1, 15_000));
    someone_waits(&a, "c");
    let seen = inspect(&a, "c");
    release(full);
    let lease = request.join().unwrap().expect("the request is granted");
    release(lease);
    assert_eq!((seen.held, seen.limit, seen.waiting), (1, 2, 1), "2 of 2 units held, one request of 1 waits: {seen:?}");
}

/// A waiter that stopped waiting (aborted: its acquire returned ABORTED)
/// waits no more.
fn an_aborted_waiter(world: &World) {
    let (a, b) = (world.backend(0), world.backend(1));
    let holder = take(&a, "k", wait(0));
    let abort = AbortController::new();
    let gone = waiter(&b, "k", AcquireOptions { signal: Some(abort.signal()), ..wait(15_000) });
    someone_waits(&a, "k");
    assert_eq!(inspect(&a, "k").waiting, 1);
    abort.abort();
    assert_eq!(gone.join().unwrap().unwrap_err().code(), ErrorCode::Aborted);
    let cleared = within(2000, || inspect(&a, "k").waiting == 0);
    let seen = inspect(&a, "k");
    release(holder);
    assert!(cleared, "2 s after the only waiter's acquire returned ABORTED, inspect still counts it: {seen:?}");
}

/// A waiter granted once the holder's lease ran out (its process stopped
/// without releasing) waits no more.
fn a_waiter_granted_after_the_holder_expired(world: &World) {
    let stopped = world.short_lived(3000);
    let b = world.backend(1);
    let _lost = take(&stopped.backend("shared").unwrap(), "e", wait(0));
    let next = waiter(&b, "e", wait(15_000));
    someone_waits(&b, "e");
    let lease = next.join().unwrap().expect("granted once the lease ran out");
    let cleared = within(1000, || inspect(&b, "e").waiting == 0);
    let seen = inspect(&b, "e");
    release(lease);
    assert!(cleared, "the only waiter holds the key now, inspect still counts a waiter: {seen:?}");
}

/// Holders whose leases ran out (their process stopped) are neither
/// counted nor listed, nor give the key a mode, though their rows or
/// members are still in the store.
fn expired_holders(world: &World) {
    let stopped = world.short_lived(3000);
    let gone = stopped.backend("shared").unwrap();
    let b = world.backend(1);
    let _lost = [take(&gone, "x", counted(3, 2, 0)), take(&gone, "y", shared(0)), take(&gone, "z", counted(3, 2, 0))];
    let lease = Duration::from_millis(if matches!(world.store, Store::Mysql(_)) { 5000 } else { 3000 });
    thread::sleep(lease - Duration::from_millis(1000));
    let live = [take(&b, "x", counted(3, 1, 0)), take(&b, "y", shared(0))];
    thread::sleep(Duration::from_millis(1300));
    let (x, y, z) = (inspect(&b, "x"), inspect(&b, "y"), inspect(&b, "z"));
    for lease in live {
        release(lease);
    }
    assert_eq!((x.held, x.mode, x.holders.iter().map(|h| h.units).collect::<Vec<_>>()), (1, Some(LockMode::Exclusive), vec![1]), "{x:?}");
    assert_eq!((y.held, y.mode, y.holders.len()), (1, Some(LockMode::Shared), 1), "{y:?}");
    assert_eq!((z.held, z.mode, z.holders.len(), z.waiting), (0, None, 0, 0), "{z:?}");
}

/// Readers of two processes queued behind a writer are two waiting acquires.
fn two_readers_of_two_processes_behind_a_writer(world: &World) {
    let (a, b, c) = (world.backend(0), world.backend(1), world.backend(2));
    let writer = take(&a, "w", wait(0));
    let readers = [waiter(&b, "w", shared(15_000)), waiter(&c, "w", shared(15_000))];
    // On Redis a reader waiting behind a writer leaves no mark of its own
    // (docs/locks.md, "Who holds a key"): none is counted there.
    let redis = matches!(world.store, Store::Redis(_));
    if redis {
        thread::sleep(Duration::from_millis(600));
    } else {
        someone_waits(&a, "w");
    }
    let seen = inspect(&a, "w");
    release(writer);
    for reader in readers {
        release(reader.join().unwrap().expect("a reader is granted"));
    }
    let readers = if redis { 0 } else { 2 };
    assert_eq!((seen.held, seen.waiting), (1, readers), "two processes' readers wait behind one writer: {seen:?}");
}

/// 70 readers: all counted, 64 listed, soonest expiry first, none beyond.
fn seventy_readers(world: &World) {
    let (a, b) = (world.backend(0), world.backend(1));
    let leases: Vec<Lease> = (0..70).map(|n| take(if n % 2 == 0 { &a } else { &b }, "many", shared(0))).collect();
    let seen = inspect(&a, "many");
    for lease in leases {
        release(lease);
    }
    assert_eq!((seen.held, seen.holders.len(), seen.mode), (70, 64, Some(LockMode::Shared)), "{:?}", (seen.held, seen.holders.len()));
    let remaining: Vec<Duration> = seen.holders.iter().map(|holder| holder.remaining.unwrap()).collect();
    assert!(remaining.windows(2).all(|pair| pair[0] <= pair[1]), "soonest expiry first: {remaining:?}");
    assert!(remaining.iter().all(|left| *left <= Duration::from_millis(10_000)));
}

/// After every grant (plain, handed to another process's waiter, counted,
/// shared, several keys, a counted hand-off inside one process), `fence` is
/// at least every live lease's fence; fences never repeat.
fn fence_bounds_every_grant(world: &World) {
    let (a, b) = (world.backend(0), world.backend(1));
    let mut granted = Vec::new();
    let mut check = |what: &str, leases: &[&Lease], key: &str| {
        let seen = inspect(&b, key);
        for lease in leases {
            for (k, fence) in lease.fences() {
                if k == key {
                    assert!(seen.fence.is_some_and(|bound| bound >= fence), "{what}: inspect's fence {:?} is below {fence}", seen.fence);
                    assert!(!granted.contains(&(k.to_owned(), fence)), "{what}: fence {fence} of {k} repeated");
                    granted.push((k.to_owned(), fence));
                }
            }
        }
    };
    let plain = take(&a, "f", wait(0));
    check("plain", &[&plain], "f");
    let handed = waiter(&b, "f", wait(15_000));
    someone_waits(&a, "f");
    release(plain);
    let handed = handed.join().unwrap().unwrap();
    check("handed over", &[&handed], "f");
    release(handed);
    let units = [take(&a, "f", counted(3, 1, 0)), take(&b, "f", counted(3, 2, 0))];
    check("counted", &[&units[0], &units[1]], "f");
    // A counted waiter of the same process as a holder: its release hands the units over.
    let next = waiter(&a, "f", counted(3, 1, 15_000));
    someone_waits(&b, "f");
    let [first, second] = units;
    release(first);
    let next = next.join().unwrap().unwrap();
    check("counted hand-off", &[&next], "f");
    release(next);
    release(second);
    let readers = [take(&a, "f", shared(0)), take(&b, "f", shared(0))];
    check("shared", &[&readers[0], &readers[1]], "f");
    for reader in readers {
        release(reader);
    }
    let both = block_on(a.acquire_many(&["f", "g"], wait(0))).unwrap();
    check("several keys", &[&both], "f");
    check("several keys", &[&both], "g");
    release(both);
}

macro_rules! on_every_store {
    ($($scenario:ident),*) => {
        mod redis_r48 {
            use super::*;
            $(#[test] fn $scenario() { super::$scenario(&World::new("redis", 3)); })*
        }
        mod postgres_r48 {
            use super::*;
            $(#[test] fn $scenario() { super::$scenario(&World::new("postgres", 3)); })*
        }
        mod mysql_r48 {
            use super::*;
            $(#[test] fn $scenario() { super::$scenario(&World::new("mysql", 3)); })*
        }
    };
}

on_every_store!(
    one_writer_behind_a_reader,
    one_counted_request_behind_a_full_key,
    an_aborted_waiter,
    expired_holders,
    a_waiter_granted_after_the_holder_expired,
    two_readers_of_two_processes_behind_a_writer,
    seventy_readers,
    fence_bounds_every_grant
);

// --- Redis only ------------------------------------------------------------

/// A process killed while it waited behind a plain holder leaves its mark
/// (here written as the driver writes it); the holder's release hands the
/// key to it (`h:<token>`). Nobody holds a lease: no fence was granted, and
/// no renewal or release will come. PostgreSQL reports the same state as
/// free with one waiter.
#[test]
fn redis_a_key_handed_to_a_dead_waiter_is_not_a_live_holder() {
    let world = World::new("redis", 2);
    let (a, b) = (world.backend(0), world.backend(1));
    let holder = take(&a, "d", wait(0));
    let (_, waiting, _) = support::marks::names("d");
    support::marks::stale_mark(world.redis(), &waiting, "0123456789abcdef0123456789abcdef", 1000, 20_000);
    release(holder);
    let seen = inspect(&b, "d");
    assert_eq!(block_on(b.acquire("d", wait(0))).unwrap_err().code(), ErrorCode::LockBusy, "the key is reserved for the dead mark");
    assert_eq!((seen.held, seen.mode), (0, None), "no lease holds the key, it waits for a dead waiter's hand-off: {seen:?}");
}

/// A lease held past `fenceRetentionMs` (its counter expired): `fence` is
/// None while a holder with a fence holds the key, as docs/locks.md says
/// (the SQL drivers keep the key's row, and its fence, while it is held).
#[test]
fn redis_fence_of_a_key_held_past_fence_retention() {
    let server = RedisServer::start();
    let (a, _) = open_redis(&server.url(), &[("leaseMs", "10000"), ("fenceRetentionMs", "500")], &[]);
    let backend = a.backend("shared").unwrap();
    let lease = take(&backend, "k", wait(0));
    thread::sleep(Duration::from_millis(1500));
    let seen = inspect(&backend, "k");
    release(lease);
    assert_eq!((seen.held, seen.fence), (1, None), "held, its counter expired: {seen:?}");
}

/// The Redis read writes nothing: no write command runs, nothing is
/// replicated or made dirty, whatever the key holds.
#[test]
fn redis_inspect_writes_nothing() {
    let world = World::new("redis", 2);
    let (a, b) = (world.backend(0), world.backend(1));
    let plain = take(&a, "p", wait(0));
    let readers = [take(&a, "s", shared(0)), take(&b, "s", shared(0))];
    let units = take(&a, "c", counted(3, 2, 0));
    let mut raw = world.redis().client();
    let dirty = |raw: &mut redis::Connection| -> u64 {
        let info: String = redis::cmd("INFO").arg("persistence").query(raw).unwrap();
        info.lines().find_map(|line| line.strip_prefix("rdb_changes_since_last_save:")).unwrap().trim().parse().unwrap()
    };
    let before = dirty(&mut raw);
    let calls_before = world.redis().command_calls();
    for _ in 0..5 {
        for key in ["p", "s", "c", "free"] {
            inspect(&b, key);
        }
    }
    assert_eq!(dirty(&mut raw), before, "an inspect made the dataset dirty");
    let writes = ["set", "del", "zadd", "zrem", "zremrangebyscore", "hset", "hdel", "hincrby", "pexpire", "expire", "publish", "unlink"];
    let calls_after = world.redis().command_calls();
    for (command, calls) in &calls_after {
        let was = calls_before.iter().find(|(name, _)| name == command).map_or(0, |(_, calls)| *calls);
        assert!(!(writes.iter().any(|write| command.ends_with(write)) && *calls > was), "inspect ran {command}");
    }
    release(plain);
    release(units);
    for reader in readers {
        release(reader);
    }
}

/// An inspect that gets no answer (the server stopped) fails within
/// `commandTimeoutMs` as PROVIDER_FAILED, not OUTCOME_UNKNOWN.
#[test]
fn redis_inspect_with_no_answer_is_provider_failed() {
    let server = RedisServer::start();
    let (provider, _) = open_redis(&server.url(), &[("leaseMs", "5000")], &[("commandTimeoutMs", "500")]);
    let backend = provider.backend("shared").unwrap();
    inspect(&backend, "k");
    server.pause();
    let started = Instant::now();
    let err = block_on(backend.inspect("k")).unwrap_err();
    let took = started.elapsed();
    server.resume();
    assert_eq!(err.code(), ErrorCode::ProviderFailed, "{err}");
    assert!(took < Duration::from_millis(3000), "{took:?}");
    eprintln!("no answer: {err} ({took:?})");
}

// --- MySQL: names kept as digests, names no statement may be steered by ---

#[test]
fn mysql_keys_longer_than_a_column_and_hostile_keys_are_read_as_granted() {
    let world = World::new("mysql", 2);
    let (a, b) = (world.backend(0), world.backend(1));
    let long = "\u{00e9}".repeat(200); // 400 bytes: stored as a digest
    let hostile = "k' OR 1=1; DROP TABLE x; -- \\' X'00'";
    for key in [long.as_str(), hostile, "x".repeat(255).as_str()] {
        let lease = take(&a, key, wait(0));
        let seen = inspect(&b, key);
        assert_eq!((seen.held, seen.mode), (1, Some(LockMode::Exclusive)), "{key:?}: {seen:?}");
        assert!(seen.fence.is_some_and(|fence| fence >= lease.fence()));
        release(lease);
        assert!(!inspect(&b, key).is_held());
    }
    // The two long keys that share their first 255 bytes are two keys.
    let (x, y) = ("y".repeat(300) + "1", "y".repeat(300) + "2");
    let lease = take(&a, &x, wait(0));
    assert!(inspect(&b, &x).is_held() && !inspect(&b, &y).is_held());
    release(lease);
}

// --- The SQL drivers' set-up, run by a read --------------------------------

/// A read of tables that do not exist yet creates nothing and answers free.
#[test]
fn postgres_inspect_of_missing_tables_creates_nothing() {
    let schema = postgres::Schema::fresh();
    let provider = schema.open("");
    let exists = || postgres::count(&format!("SELECT count(*) FROM pg_namespace WHERE nspname = '{}'", schema.0));
    assert_eq!(exists(), 0);
    let seen = inspect(&postgres::backend(&provider), "k");
    assert!(!seen.is_held());
    assert_eq!(exists(), 0, "inspect created nothing");
}

#[test]
fn mysql_inspect_of_missing_tables_creates_nothing() {
    let table = mysql::Table::fresh();
    let provider = Provider::from_yaml(&mysql::yaml(&table.0, "")).unwrap();
    let exists = || {
        mysql::count(&format!(
            "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name LIKE '{}%'",
            table.0
        ))
    };
    assert_eq!(exists(), 0);
    assert!(!inspect(&provider.backend("shared").unwrap(), "k").is_held());
    assert_eq!(exists(), 0, "inspect created nothing");
}

/// A table whose functions a newer driver installed: the tables are as
/// readable as ever, but `inspect` is refused (ensure() refuses newer
/// functions), where a read needs none of them.
#[test]
fn postgres_inspect_reads_tables_whose_functions_are_newer() {
    let schema = postgres::Schema::fresh();
    let first = schema.open("");
    let lease = take(&postgres::backend(&first), "k", wait(0));
    postgres::batch(&format!(
        "COMMENT ON FUNCTION {}(text, text[], text, boolean, integer, integer, bigint, bigint, bigint, bigint, bigint) IS 'dokebi-lock functions 99'",
        schema.table("_take")
    ));
    let operator = schema.open("");
    let result = block_on(postgres::backend(&operator).inspect("k"));
    drop(lease);
    let seen = result.unwrap_or_else(|err| panic!("inspect refused: {err}"));
    assert!(seen.is_held());
}

// --- Policy ------------------------------------------------------------------

/// The member that holds the key is the answer, not a member before it
/// that only has a waiting mark (here a '1' on Redis, as a reader that
/// waited there and died leaves it).
#[test]
fn a_policy_prefers_a_member_that_holds_over_one_with_only_a_mark() {
    let server = RedisServer::start();
    let yaml = format!(
        "schemaVersion: 1\noptions:\n  dokebi-redis:\n    connections:\n      main:\n        url: {}\n  dokebi-lock:\n    backends:\n      \
         near: {{ driver: redis, connection: main, namespace: test, leaseMs: 5000 }}\n      far: {{}}\n      \
         pick: {{ driver: policy, default: {{ backends: [near, far], minTier: process, onUnavailable: fallBack }} }}\n",
        server.url()
    );
    let provider = Provider::from_yaml(&yaml).unwrap();
    let (_, waiting, _) = support::marks::names("k");
    let _: () = redis::cmd("SET").arg(&waiting).arg("1").arg("PX").arg(20_000).query(&mut server.client()).unwrap();
    let lease = take(&provider.backend("far").unwrap(), "k", wait(0));
    let seen = inspect(&provider.backend("pick").unwrap(), "k");
    release(lease);
    assert_eq!((seen.backend.as_str(), seen.held), ("far", 1), "far holds the key: {seen:?}");
}

/// The preferred member cannot answer (its Redis is gone) and the other
/// says free: the key may be held where nobody can read, so the policy
/// answers the failure, not "free".
#[test]
fn a_policy_whose_preferred_member_is_down_answers_from_another() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let yaml = format!(
        "schemaVersion: 1\noptions:\n  dokebi-redis:\n    connections:\n      main:\n        url: redis://127.0.0.1:{port}/0\n        connectTimeoutMs: 300\n  dokebi-lock:\n    backends:\n      \
         near: {{ driver: redis, connection: main, namespace: test, leaseMs: 5000 }}\n      far: {{}}\n      \
         pick: {{ driver: policy, default: {{ backends: [near, far], minTier: process, onUnavailable: fallBack }} }}\n"
    );
    let provider = Provider::from_yaml(&yaml).unwrap();
    let answer = block_on(provider.backend("pick").unwrap().inspect("k"));
    assert_eq!(answer.unwrap_err().code(), ErrorCode::ProviderFailed);
}

// --- Local -------------------------------------------------------------------

/// The local driver lists the holders of several-key, shared and counted
/// leases of a key, each once, with its fence; waiters of several keys
/// show on each.
#[test]
fn local_several_key_leases_show_on_each_key() {
    let provider = Provider::from_yaml("schemaVersion: 1\noptions:\n  dokebi-lock:\n    backends:\n      shared: {}\n").unwrap();
    let backend = provider.backend("shared").unwrap();
    let both = block_on(backend.acquire_many(&["a", "b"], wait(0))).unwrap();
    for key in ["a", "b"] {
        let seen = inspect(&backend, key);
        assert_eq!((seen.held, seen.mode, seen.holders[0].fence), (1, Some(LockMode::Exclusive), Some(both.fence())), "{seen:?}");
    }
    let queued = {
        let backend = backend.clone();
        thread::spawn(move || block_on(backend.acquire_many(&["b", "c"], wait(10_000))))
    };
    assert!(within(5000, || inspect(&backend, "b").waiting == 1 && inspect(&backend, "c").waiting == 1));
    assert!(!inspect(&backend, "c").is_held(), "c is only waited for");
    release(both);
    let next = queued.join().unwrap().unwrap();
    assert_eq!(inspect(&backend, "a"), Inspection { backend: "shared".into(), limit: 1, ..Inspection::default() });
    release(next);
    let readers =
        [block_on(backend.acquire_many(&["r", "s"], shared(0))).unwrap(), block_on(backend.acquire_many(&["r"], shared(0))).unwrap()];
    let seen = inspect(&backend, "r");
    assert_eq!((seen.held, seen.mode), (2, Some(LockMode::Shared)));
    assert_eq!(inspect(&backend, "s").held, 1);
    for reader in readers {
        release(reader);
    }
}

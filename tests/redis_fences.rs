//! Fences never repeat, even when a real Redis brings the fence counter back
//! older than the fences it already handed out: a restart from an RDB
//! snapshot taken a few grants ago, an AOF (`appendfsync everysec`) that lost
//! its unsynced tail, a failover to a replica that lagged, a counter deleted
//! or evicted. Each test hands out fences, makes the server go back to an
//! older counter (and checks that it did: that is the situation under test),
//! then asks for the next fence, which must be above every earlier one.
//!
//! Replicas and the AOF get a key's counter as a reservation: the end of the
//! second (of microseconds) its fence entered, written once a second while
//! the key is granted, not every fence.

mod support;

#[path = "faults/proxy.rs"]
mod proxy;

use std::time::Duration;

use dokebi_lock::{ErrorCode, Provider};
use futures::executor::block_on;
use proxy::Proxy;
use support::redis_server::RedisServer;
use support::{backend, eventually, open_redis, wait};

fn open(url: &str) -> Provider {
    open_redis(url, &[("leaseMs", "30000")], &[]).0
}

/// Acquires and releases `key` `n` times, returning the fences granted.
fn grants(provider: &Provider, key: &str, n: usize) -> Vec<u64> {
    (0..n)
        .map(|_| {
            let lease = block_on(backend(provider).acquire(key, wait(5_000))).expect("acquire");
            assert!(block_on(lease.release()).unwrap());
            lease.fence()
        })
        .collect()
}

/// The one fence counter key in the server (found by its role in the name,
/// not by recomputing the key layout).
fn fence_key(server: &RedisServer) -> String {
    let keys: Vec<String> = server.keys().into_iter().filter(|k| k.contains("lock-fence")).collect();
    assert_eq!(keys.len(), 1, "one fence counter: {keys:?}");
    keys.into_iter().next().unwrap()
}

fn counter(server: &RedisServer, key: &str) -> Option<u64> {
    redis::cmd("GET").arg(key).query(&mut server.client()).unwrap()
}

/// A second of the fences' clock: the length of a reservation.
const SECOND_US: u64 = 1_000_000;

/// The reservation that covers `fence`: the end of its second.
fn reservation(fence: u64) -> u64 {
    (fence / SECOND_US + 1) * SECOND_US
}

/// Grants `key` until a fence lies beyond `after`'s reservation: the
/// fences granted.
fn grants_past(provider: &Provider, key: &str, after: u64) -> Vec<u64> {
    let mut fences = Vec::new();
    while fences.last().is_none_or(|&fence| fence <= reservation(after)) {
        fences.extend(grants(provider, key, 1));
        std::thread::sleep(Duration::from_millis(20));
    }
    fences
}

/// The next fence must be above every fence handed out before it.
fn assert_above_all(next: u64, before: &[u64]) {
    for (i, &fence) in before.iter().enumerate() {
        assert!(next > fence, "the next fence {next} is not above fence #{} ({fence}) of {before:?}", i + 1);
    }
}

#[test]
fn a_restart_from_an_older_rdb_snapshot_never_repeats_a_fence() {
    let mut server = RedisServer::start_persistent(&[]);
    let app = open(&server.url());
    let mut fences = grants(&app, "k", 3);
    let key = fence_key(&server);
    let _: String = redis::cmd("SAVE").query(&mut server.client()).unwrap();
    fences.extend(grants(&app, "k", 5));
    // kill -9: no shutdown save, the snapshot of 5 grants ago is what is left.
    server.stop();
    server.restart();
    assert_eq!(counter(&server, &key), Some(fences[2]), "the counter came back as the snapshot had it");
    let next = grants(&app, "k", 1)[0];
    assert_above_all(next, &fences);
}

#[test]
fn an_aof_that_lost_its_unsynced_tail_never_repeats_a_fence() {
    let mut server = RedisServer::start_persistent(&["--appendonly", "yes", "--appendfsync", "everysec"]);
    let app = open(&server.url());
    let mut fences = grants(&app, "k", 3);
    let key = fence_key(&server);
    // The grants to lose begin in the next second: a reservation of theirs
    // is what the AOF loses.
    fences.extend(grants_past(&app, "k", fences[2]));
    // Every grant so far is written to the AOF (not necessarily fsynced):
    // the incr file's size now is the point a crash can take it back to.
    eventually("the AOF buffer is written", || {
        let info: String = redis::cmd("INFO").arg("persistence").query(&mut server.client()).unwrap();
        info.lines().any(|line| line.trim() == "aof_buffer_length:0")
    });
    let aof_dir = server.data_dir().join("appendonlydir");
    let incr = std::fs::read_dir(&aof_dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .find(|path| path.to_string_lossy().ends_with(".incr.aof"))
        .expect("Redis 7 keeps a multi-part AOF with an incr file");
    let synced = std::fs::metadata(&incr).unwrap().len();
    let kept = *fences.last().unwrap();
    fences.extend(grants_past(&app, "k", kept));
    server.stop();
    // The machine went down with the last second of the AOF unsynced: it
    // comes back without the writes after `synced`.
    assert!(std::fs::metadata(&incr).unwrap().len() > synced, "the later grants reached the AOF");
    std::fs::OpenOptions::new().write(true).open(&incr).unwrap().set_len(synced).unwrap();
    server.restart();
    assert_eq!(counter(&server, &key), Some(reservation(kept)), "the counter came back as the truncated AOF had it");
    let next = grants(&app, "k", 1)[0];
    assert_above_all(next, &fences);
}

#[test]
fn a_failover_to_a_replica_that_lagged_never_repeats_a_fence() {
    // No delay before the replica's sync starts (5 s by default).
    let primary = RedisServer::start();
    let link = Proxy::start(primary.port(), Duration::ZERO);
    // A data dir of its own: a replica writes the primary's snapshot to disk.
    let replica = RedisServer::start_persistent(&["--replicaof", "127.0.0.1", &link.port().to_string()]);
    let app = open(&primary.url());
    let mut fences = grants(&app, "k", 3);
    let key = fence_key(&primary);
    // All of it, the last release too: a replica that has the counter but
    // not yet the release's DEL would come up with the key held.
    let sorted = |mut keys: Vec<String>| {
        keys.sort();
        keys
    };
    // The replica's first sync copies the counter itself; what reaches it
    // after is a reservation: grants into the next second bring one.
    eventually("the replica is synced", || replica.replica_synced());
    fences.extend(grants_past(&app, "k", fences[2]));
    let last = *fences.last().unwrap();
    eventually("the replica has the reservation and the last release", || {
        counter(&replica, &key) == Some(reservation(last)) && sorted(replica.keys()) == sorted(primary.keys())
    });
    // The replication link stops forwarding: the replica lags behind, and
    // the grants go past its reservation.
    link.hold();
    fences.extend(grants_past(&app, "k", last));
    assert_eq!(counter(&replica, &key), Some(reservation(last)), "the replica missed the last grants");
    // Failover: the replica becomes the primary, the app follows it.
    replica.replicate_from(None);
    let moved = open(&replica.url());
    let next = grants(&moved, "k", 1)[0];
    assert_above_all(next, &fences);
    drop(app);
}

#[test]
fn replicas_get_a_reservation_of_the_fences_not_each_fence() {
    let primary = RedisServer::start();
    let replica = RedisServer::start_persistent(&["--replicaof", "127.0.0.1", &primary.port().to_string()]);
    eventually("the replica is synced", || replica.replica_synced());
    let app = open(&primary.url());
    let offset = || -> u64 {
        let info: String = redis::cmd("INFO").arg("replication").query(&mut primary.client()).unwrap();
        info.lines().find_map(|line| line.trim().strip_prefix("master_repl_offset:")).unwrap().parse().unwrap()
    };
    let start = offset();
    let fences = grants(&app, "k", 100);
    let per_pair = (offset() - start) / 100;
    let key = fence_key(&primary);
    let last = *fences.last().unwrap();
    assert_eq!(counter(&primary, &key), Some(last), "the primary keeps the counter itself");
    eventually("the replica has the reservation", || counter(&replica, &key) == Some(reservation(last)));
    // A pair replicates its lock's SET and DEL (about 170 bytes with these
    // names), plus a reservation (a MULTI, a SET, an EXEC: about 150) in
    // each second the pairs reached, amortised over 100 pairs. Replicating
    // every fence (a MULTI, an EXEC and the counter's SET in every grant)
    // made it over 300.
    eprintln!("{per_pair} bytes replicated a pair");
    assert!(per_pair < 230, "{per_pair} bytes replicated a pair");
}

// A missing counter (deleted, evicted) was already reseeded from TIME before
// every grant raised it to TIME: these two guard that path of the new script.

#[test]
fn a_deleted_fence_counter_never_repeats_a_fence() {
    let server = RedisServer::start();
    let app = open(&server.url());
    let fences = grants(&app, "k", 3);
    let key = fence_key(&server);
    let deleted: i64 = redis::cmd("DEL").arg(&key).query(&mut server.client()).unwrap();
    assert_eq!(deleted, 1);
    let next = grants(&app, "k", 1)[0];
    assert_above_all(next, &fences);
}

#[test]
fn a_counter_ahead_of_the_clock_rises_by_one_and_keeps_its_place() {
    // A counter raised past the clock (a server whose clock went back, or a
    // counter copied from a server whose clock ran ahead): the grant is
    // counter + 1, not the clock, and that is what the counter keeps.
    let server = RedisServer::start();
    let app = open(&server.url());
    grants(&app, "k", 1);
    let key = fence_key(&server);
    let ahead: u64 = 9_007_199_254_740_000; // below 2^53: exact as a Lua number
    let _: String = redis::cmd("SET").arg(&key).arg(ahead).query(&mut server.client()).unwrap();
    assert_eq!(grants(&app, "k", 2), vec![ahead + 1, ahead + 2]);
    assert_eq!(counter(&server, &key), Some(ahead + 2));
}

#[test]
fn a_fence_counter_that_is_not_a_number_is_refused_and_left_as_it_was() {
    let server = RedisServer::start();
    let app = open(&server.url());
    grants(&app, "k", 1);
    let key = fence_key(&server);
    let _: String = redis::cmd("SET").arg(&key).arg("abc").query(&mut server.client()).unwrap();
    let err = block_on(backend(&app).acquire("k", wait(0))).expect_err("no fence, no lease");
    assert_eq!(err.code(), ErrorCode::ProviderFailed, "{err}");
    let kept: String = redis::cmd("GET").arg(&key).query(&mut server.client()).unwrap();
    assert_eq!(kept, "abc", "the counter is not overwritten by the clock");
    // The refused grant left no lock behind (the key is not held for
    // leaseMs under a token nobody has), and the counter still expires.
    let locks: Vec<String> = server.keys().into_iter().filter(|k| k.contains(":lock:")).collect();
    assert!(locks.is_empty(), "a refused grant left {locks:?}");
    let ttl: i64 = redis::cmd("PTTL").arg(&key).query(&mut server.client()).unwrap();
    assert!(ttl > 0, "the counter kept no TTL: {ttl}");
}

/// The fence counter of user key `key`: the counter key that its first
/// grant adds (found by what appears, not by recomputing the key layout).
fn new_fence_key(server: &RedisServer, app: &Provider, key: &str) -> String {
    let counters = || -> Vec<String> { server.keys().into_iter().filter(|k| k.contains("lock-fence")).collect() };
    let before = counters();
    grants(app, key, 1);
    let added: Vec<String> = counters().into_iter().filter(|k| !before.contains(k)).collect();
    assert_eq!(added.len(), 1, "one counter for {key}: {added:?}");
    added.into_iter().next().unwrap()
}

fn many(app: &Provider, keys: &[&str]) -> dokebi_lock::Result<Vec<u64>> {
    let lease = block_on(backend(app).acquire_many(keys, wait(0)))?;
    let fences = lease.fences().into_iter().map(|(_, fence)| fence).collect();
    assert!(block_on(lease.release()).unwrap());
    Ok(fences)
}

#[test]
fn several_keys_raise_each_counter_as_one_key_does() {
    // One grant over several keys raises every key's counter by the same
    // rule as a grant of one: counter + 1 when ahead of the clock, the
    // clock when behind it or gone.
    let server = RedisServer::start();
    let app = open(&server.url());
    let (ahead_key, gone_key, plain_key) =
        (new_fence_key(&server, &app, "a"), new_fence_key(&server, &app, "b"), new_fence_key(&server, &app, "c"));
    let before = grants(&app, "b", 2);
    let plain_before = counter(&server, &plain_key).unwrap();
    let ahead: u64 = 9_007_199_254_740_000;
    let _: String = redis::cmd("SET").arg(&ahead_key).arg(ahead).query(&mut server.client()).unwrap();
    let _: i64 = redis::cmd("DEL").arg(&gone_key).query(&mut server.client()).unwrap();
    let fences = many(&app, &["a", "b", "c"]).unwrap();
    assert_eq!(fences[0], ahead + 1, "ahead of the clock: counter + 1");
    assert_above_all(fences[1], &before);
    assert!(fences[2] > plain_before);
    assert_eq!(counter(&server, &ahead_key), Some(ahead + 1));
    assert_eq!(counter(&server, &gone_key), Some(fences[1]));
    assert_eq!(counter(&server, &plain_key), Some(fences[2]));
    let again = many(&app, &["a", "b", "c"]).unwrap();
    assert_eq!(again[0], ahead + 2);
    assert!(again[1] > fences[1] && again[2] > fences[2]);
}

#[test]
fn a_counter_that_is_not_a_number_refuses_a_grant_of_several_keys_and_writes_nothing() {
    let server = RedisServer::start();
    let app = open(&server.url());
    let (a_key, b_key) = (new_fence_key(&server, &app, "a"), new_fence_key(&server, &app, "b"));
    let a_before = counter(&server, &a_key);
    let _: String = redis::cmd("SET").arg(&b_key).arg("abc").query(&mut server.client()).unwrap();
    let err = many(&app, &["a", "b"]).expect_err("no fence, no lease");
    assert_eq!(err.code(), ErrorCode::ProviderFailed, "{err}");
    let kept: String = redis::cmd("GET").arg(&b_key).query(&mut server.client()).unwrap();
    assert_eq!(kept, "abc", "the counter is not overwritten by the clock");
    assert_eq!(counter(&server, &a_key), a_before, "the other key's counter did not move");
    // Neither key was left taken by the refused grant.
    many(&app, &["a"]).expect("a is free");
    let _: String = redis::cmd("SET").arg(&b_key).arg(9_000u64).query(&mut server.client()).unwrap();
    many(&app, &["b"]).expect("b is free");
}

#[test]
fn an_evicted_fence_counter_never_repeats_a_fence() {
    // The policy that may evict any key, the fence counter included (the
    // driver warns about it at start: REDIS_EVICTION_POLICY).
    let server = RedisServer::start_with(&["--maxmemory-policy", "allkeys-lru"]);
    let app = open(&server.url());
    let fences = grants(&app, "k", 3);
    let key = fence_key(&server);
    let mut client = server.client();
    let info: String = redis::cmd("INFO").arg("memory").query(&mut client).unwrap();
    let used: u64 = info.lines().find_map(|line| line.trim().strip_prefix("used_memory:")).unwrap().parse().unwrap();
    let _: String = redis::cmd("CONFIG").arg("SET").arg("maxmemory").arg(used + 1024 * 1024).query(&mut client).unwrap();
    // Newer keys fill the memory until Redis evicts the counter (it is the
    // least recently used key, but eviction samples, so fill until it goes).
    let filler = vec![b'x'; 1024];
    let mut evicted = false;
    for round in 0..200 {
        let mut pipe = redis::pipe();
        for i in 0..500 {
            pipe.cmd("SET").arg(format!("filler:{round}:{i}")).arg(&filler).ignore();
        }
        let _: () = pipe.query(&mut client).unwrap();
        let exists: i64 = redis::cmd("EXISTS").arg(&key).query(&mut client).unwrap();
        if exists == 0 {
            evicted = true;
            break;
        }
    }
    assert!(evicted, "the fence counter was evicted");
    let next = grants(&app, "k", 1)[0];
    assert_above_all(next, &fences);
}

#[test]
fn two_reloads_of_the_aof_within_a_second_never_repeat_a_fence() {
    // Every write synced (no tail to lose): a reload brings back exactly
    // what was replicated. The first reload brings the reservation, a
    // counter ahead of the clock; the fence granted above it must be
    // persisted too, or the second reload hands it out again. Five trials:
    // one fails only where its three grants cross a second boundary.
    let server = RedisServer::start_persistent(&["--appendonly", "yes", "--appendfsync", "always", "--enable-debug-command", "yes"]);
    let app = open(&server.url());
    let reload = || {
        let _: String = redis::cmd("DEBUG").arg("LOADAOF").query(&mut server.client()).unwrap();
    };
    for trial in 0..5 {
        let key = format!("k{trial}");
        let mut fences = grants(&app, &key, 1);
        reload();
        fences.extend(grants(&app, &key, 1));
        reload();
        let next = grants(&app, &key, 1)[0];
        assert_above_all(next, &fences);
    }
}

#[test]
fn a_counter_ahead_of_the_clock_lives_until_the_clock_passes_it_by_the_retention() {
    // A counter ahead of the clock (a reservation restored, as above) with
    // a short fenceRetentionMs: it must not expire while the clock is below
    // it, or the next fence comes from the clock, below the last one.
    let server = RedisServer::start();
    let app = open_redis(&server.url(), &[("leaseMs", "30000"), ("fenceRetentionMs", "500")], &[]).0;
    grants(&app, "k", 1);
    let key = fence_key(&server);
    let now: (u64, u64) = redis::cmd("TIME").query(&mut server.client()).unwrap();
    let ahead = (now.0 + 3) * SECOND_US;
    let _: String = redis::cmd("SET").arg(&key).arg(ahead).query(&mut server.client()).unwrap();
    let before = grants(&app, "k", 1);
    assert!(before[0] > ahead, "{before:?}");
    std::thread::sleep(Duration::from_millis(800));
    let next = grants(&app, "k", 1)[0];
    assert_above_all(next, &before);
}

#[test]
fn an_aof_rewrite_between_two_reloads_never_repeats_a_fence() {
    // A rewrite copies the primary's exact counter into the AOF, without
    // the reservation of its second: a fence granted above the clock after
    // it must still reach the AOF.
    let server = RedisServer::start_persistent(&["--appendonly", "yes", "--appendfsync", "always", "--enable-debug-command", "yes"]);
    let app = open(&server.url());
    let mut client = server.client();
    for trial in 0..3 {
        let key = format!("k{trial}");
        let mut fences = grants(&app, &key, 1);
        let _: String = redis::cmd("DEBUG").arg("LOADAOF").query(&mut client).unwrap();
        fences.extend(grants(&app, &key, 1));
        let _: String = redis::cmd("BGREWRITEAOF").query(&mut client).unwrap();
        eventually("the rewrite is done", || {
            let info: String = redis::cmd("INFO").arg("persistence").query(&mut client).unwrap();
            info.lines().any(|line| line.trim() == "aof_rewrite_in_progress:0")
                && info.lines().any(|line| line.trim() == "aof_rewrite_scheduled:0")
        });
        fences.extend(grants(&app, &key, 1));
        let _: String = redis::cmd("DEBUG").arg("LOADAOF").query(&mut client).unwrap();
        let next = grants(&app, &key, 1)[0];
        assert_above_all(next, &fences);
    }
}

/// How far above the server's clock a fence may be granted (`LEAD_US` in
/// the scripts): grants of one key within a microsecond or so.
const LEAD_US: u64 = 100;

/// The server's clock, in microseconds.
fn server_time(server: &RedisServer) -> u64 {
    let (seconds, micros): (u64, u64) = redis::cmd("TIME").query(&mut server.client()).unwrap();
    seconds * SECOND_US + micros
}

/// Puts each counter at the end of the current second of the server's
/// clock, early in that second: what a restart or a promotion brings back
/// (the reservation of a fence granted just before it), most of a second
/// ahead of the clock.
fn restore_reservation(server: &RedisServer, counters: &[&str]) -> u64 {
    loop {
        let now = server_time(server);
        if now % SECOND_US < 300_000 {
            let restored = reservation(now);
            for key in counters {
                let _: String = redis::cmd("SET").arg(key).arg(restored).arg("PX").arg(60_000).query(&mut server.client()).unwrap();
            }
            return restored;
        }
        std::thread::sleep(Duration::from_micros(SECOND_US - now % SECOND_US + 1_000));
    }
}

/// A fence granted above a restored reservation was granted once the
/// server's clock had passed it (but for `LEAD_US`): only the clock
/// survives every later restore.
fn assert_waited_for_the_clock(server: &RedisServer, fence: u64, restored: u64) {
    assert!(fence > restored, "the fence {fence} is above the restored counter {restored}");
    let now = server_time(server);
    assert!(now + LEAD_US >= fence, "the fence {fence} was granted {} us ahead of the server's clock ({now})", fence - now);
}

#[test]
fn a_fence_above_a_restored_reservation_waits_for_the_clock_on_every_path() {
    // Two restores within a second, the second losing what the first's
    // grants wrote, repeat a fence granted above the clock (see
    // redis_fence_review.rs): each kind of grant waits instead.
    let server = RedisServer::start();
    let app = open(&server.url());
    let shared = dokebi_lock::AcquireOptions { mode: dokebi_lock::LockMode::Shared, ..wait(5_000) };
    let counted = dokebi_lock::AcquireOptions { limit: Some(3), weight: Some(2), ..wait(5_000) };
    let paths: [(&str, &[&str], dokebi_lock::AcquireOptions); 4] = [
        ("plain", &["p"], wait(5_000)),
        ("shared", &["s"], shared.clone()),
        ("counted", &["c"], counted.clone()),
        ("several keys", &["m1", "m2"], wait(5_000)),
    ];
    for (path, keys, options) in paths {
        let counters: Vec<String> = keys.iter().map(|key| new_fence_key(&server, &app, key)).collect();
        let counters: Vec<&str> = counters.iter().map(String::as_str).collect();
        let restored = restore_reservation(&server, &counters);
        // A single try is refused, and leaves the key free and its counter as it was.
        let single = dokebi_lock::AcquireOptions { wait_timeout: Some(Duration::ZERO), ..options.clone() };
        let err = block_on(backend(&app).acquire_many(keys, single)).expect_err(path);
        assert_eq!(err.code(), ErrorCode::LockBusy, "{path}: {err}");
        for key in &counters {
            assert_eq!(counter(&server, key), Some(restored), "{path}: the refused grant put the counter back");
            let ttl: i64 = redis::cmd("PTTL").arg(key).query(&mut server.client()).unwrap();
            assert!(ttl > 0, "{path}: the counter put back expires: {ttl}");
        }
        let locks: Vec<String> = server.keys().into_iter().filter(|k| k.contains(":lock:")).collect();
        assert!(locks.is_empty(), "{path}: a refused grant left {locks:?}");
        // A waiting acquire is granted once the clock has passed the fence.
        let lease = block_on(backend(&app).acquire_many(keys, options)).expect(path);
        for (_, fence) in lease.fences() {
            assert_waited_for_the_clock(&server, fence, restored);
        }
        assert!(block_on(lease.release()).unwrap());
    }
}

#[test]
fn a_hand_off_above_a_restored_reservation_leaves_the_waiter_to_try_again() {
    // A counted lease released with a waiter of its process behind it: the
    // hand-off script grants the waiter in the release's call, unless its
    // fence must wait for the clock; then the key is given back and the
    // waiter, not lost, is granted once the clock has passed its fence.
    let server = RedisServer::start();
    let app = open(&server.url());
    let counted = dokebi_lock::AcquireOptions { limit: Some(2), weight: Some(2), ..wait(5_000) };
    let key = new_fence_key(&server, &app, "h");
    for trial in 0..3 {
        let holder = block_on(backend(&app).acquire("h", counted.clone())).expect("the holder");
        let waiter = {
            let backend = backend(&app);
            let counted = counted.clone();
            std::thread::spawn(move || block_on(backend.acquire("h", counted)))
        };
        eventually("the waiter waits", || support::redis_counts(&backend(&app)).waiting == 1);
        std::thread::sleep(Duration::from_millis(100));
        let restored = restore_reservation(&server, &[&key]);
        assert!(block_on(holder.release()).unwrap());
        let lease = waiter.join().unwrap().unwrap_or_else(|err| panic!("trial {trial}: the waiter was lost: {err}"));
        assert_waited_for_the_clock(&server, lease.fence(), restored);
        assert!(block_on(lease.release()).unwrap());
    }
}

#[test]
fn a_plain_hand_off_above_a_restored_reservation_stays_the_waiters() {
    // A plain release hands the key to the oldest waiter of any process
    // (the lock carries `h:<token>`); the waiter's next try is granted with
    // a fence. When that fence must wait for the clock, the key stays the
    // waiter's until it is granted, once the clock has passed its fence.
    let server = RedisServer::start();
    let (app, other) = (open(&server.url()), open(&server.url()));
    let key = new_fence_key(&server, &app, "q");
    for trial in 0..3 {
        let holder = block_on(backend(&app).acquire("q", wait(0))).expect("the holder");
        let waiter = {
            let backend = backend(&other);
            std::thread::spawn(move || block_on(backend.acquire("q", wait(5_000))))
        };
        eventually("the waiter left its mark", || server.keys().iter().any(|k| k.contains("lock-waiting")));
        let restored = restore_reservation(&server, &[&key]);
        assert!(block_on(holder.release()).unwrap());
        // Handed to the waiter, whose grant waits for the clock (most of a second).
        let lock = server.keys().into_iter().find(|k| k.contains(":lock:{")).expect("the key is handed on, not freed");
        let held: Option<String> = redis::cmd("GET").arg(&lock).query(&mut server.client()).unwrap();
        assert!(held.as_deref().is_some_and(|held| held.starts_with("h:")), "trial {trial}: handed to the waiter: {held:?}");
        let lease = waiter.join().unwrap().unwrap_or_else(|err| panic!("trial {trial}: the waiter was lost: {err}"));
        assert_waited_for_the_clock(&server, lease.fence(), restored);
        assert!(block_on(lease.release()).unwrap());
    }
}

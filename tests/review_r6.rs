//! Adversarial review R6 of f7950d3 (`unmark!`: a removal that takes the
//! waiting set's last mark leaves the name as a '1' for the set's time, so
//! the holder's release still publishes), against private real servers.
//!
//! No way to two holders or a repeated fence was found (see the report): a
//! '1' is read as "someone waits" everywhere (RELEASE frees the key and
//! publishes, a try replaces or extends it, the kinds scripts delete it and
//! publish) and is never handed to. What is here is liveness: the '1' keeps
//! the set's time to live, but a plain waiter's try that finds a kinds
//! waiter's '1' deletes it and makes a set that lives only as long as that
//! waiter's own mark (ACQUIRE's `DEL` then `ZADD`, the '1''s TTL dropped).
//! A reader with a longer mark then loses its standing once the plain
//! waiter leaves and the set lapses, and the holder's release wakes nobody.
//! And one regression at `maxmemory`: the '1' is written with `SET`, a
//! command Redis refuses (`OOM`) as a script's first write when memory is
//! full, where the `ZREM` it replaced is never refused; a refused release
//! (or a withdraw) whose only write that is now fails and leaves the mark.
//! Both failed as reviewed and pass since: the plain waiter's set keeps the
//! '1''s time when that was longer, and `unmark` removes the marks with
//! `ZREM` first (never refused), then writes the '1' with the time read
//! before. Two probes at the end held: a stress run (one holder at a time,
//! fresh fences), and the '1''s expiry on a replica and through the AOF.

mod support;

use std::time::Instant;

use dokebi_lock::{AcquireOptions, LockMode};
use futures::executor::block_on;
use support::redis_server::RedisServer;
use support::topology::backend;
use support::wait;

/// The reader's terms: marks live 2 x 5 s + 1 s; its safety-net poll is
/// 5 s, past its 4 s wait below.
const SLOW: &[(&str, &str)] = &[("leaseMs", "10000"), ("pollIntervalMs", "5000"), ("notifyPollIntervalMs", "5000")];
/// The plain waiter's terms: marks live 2 x 200 ms + 1 s.
const FAST: &[(&str, &str)] = &[("leaseMs", "10000"), ("pollIntervalMs", "200"), ("notifyPollIntervalMs", "200")];

fn zmembers(server: &RedisServer, name: &str) -> Vec<String> {
    redis::cmd("ZRANGE").arg(name).arg(0).arg(-1).query(&mut server.client()).unwrap_or_default()
}

fn maxmemory(server: &RedisServer, bytes: &str) {
    let _: () = redis::cmd("CONFIG").arg("SET").arg("maxmemory").arg(bytes).query(&mut server.client()).unwrap();
}

fn waiting_name(key: &str) -> String {
    support::topology::lock_key(key).replacen(":lock:", ":lock-waiting:", 1)
}

fn type_of(server: &RedisServer, name: &str) -> String {
    redis::cmd("TYPE").arg(name).query(&mut server.client()).unwrap()
}

/// A reader R behind plain holder H marks the key with a '1' for 11 s (its
/// waitingMs). A plain waiter W of another process, whose marks live 1.4 s,
/// tries: its `ZADD` finds the '1' (WRONGTYPE), deletes it and makes a set
/// of its own mark with W's 1.4 s (the '1''s 11 s gone). W gives up; its
/// withdraw leaves a '1' (the change) with the set's 1.4 s, and that lapses.
/// H's release then finds no waiting name and publishes nothing: R, told
/// nothing, sleeps until its poll (5 s, past its 4 s wait) while the key is
/// free. (Were W's mark made first, R's try would have extended the set to
/// 11 s and the change's '1' would keep that: the order is the finding.)
#[test]
fn a_reader_behind_a_holder_is_woken_after_a_shorter_plain_waiter_replaced_its_mark_and_left() {
    let server = RedisServer::start();
    let (holder_app, reader_app) = (support::open_redis(&server.url(), SLOW, &[]).0, support::open_redis(&server.url(), SLOW, &[]).0);
    let leaving_app = support::open_redis(&server.url(), FAST, &[]).0;
    let waiting = waiting_name("k");
    let held = block_on(backend(&holder_app).acquire("k", wait(0))).unwrap();
    let reader = backend(&reader_app);
    let start = Instant::now();
    let reader = std::thread::spawn(move || block_on(reader.acquire("k", AcquireOptions { mode: LockMode::Shared, ..wait(4_000) })));
    support::eventually("the reader marked the key ('1')", || type_of(&server, &waiting) == "string");
    let leaving = backend(&leaving_app);
    let leaving = std::thread::spawn(move || block_on(leaving.acquire("k", wait(500))).map(|_| ()).map_err(|e| e.code()));
    support::eventually("the plain waiter replaced the '1' with its set", || type_of(&server, &waiting) == "zset");
    let ttl: i64 = redis::cmd("PTTL").arg(&waiting).query(&mut server.client()).unwrap();
    assert_eq!(leaving.join().unwrap(), Err(dokebi_lock::ErrorCode::WaitTimeout));
    // Past the plain waiter's set's time (it lapsed here before the fix):
    // the reader's 11 s still stand for it.
    std::thread::sleep(std::time::Duration::from_millis(1_700));
    let released = Instant::now();
    assert!(block_on(held.release()).unwrap());
    let granted = reader.join().unwrap();
    assert!(
        granted.is_ok(),
        "the reader was not granted ({:?}, {:?} after the holder's release, {:?} after it began) though the key was free; \
         the plain waiter's set was to live {ttl} ms where the reader's '1' had 11 s",
        granted.as_ref().err().map(|e| e.code()),
        released.elapsed(),
        start.elapsed()
    );
    drop(granted);
    for app in [holder_app, reader_app, leaving_app] {
        block_on(app.close());
    }
}

/// W waits behind holder H (W's mark, 11 s, is the waiting set's only
/// member). The server fills up (`maxmemory`, noeviction, the default) and
/// W's wait ends: its withdraw takes W's mark out, before f7950d3 with
/// `ZREM`, which Redis runs at `maxmemory` (no `denyoom` flag). Now the mark
/// is the set's last and `unmark` writes `SET ... '1' KEEPTTL` instead, the
/// script's first write, refused (`OOM`); the withdraw is not sent again
/// (`withdraw_in_background`), so the mark stays. Once memory is freed, H's
/// release hands the key to W's mark (`h:W`): nobody holds it, and a waiter
/// C is kept out until the mark lapses. (A refused release at `maxmemory`
/// fails the same way, `PROVIDER_FAILED` where it answered `LEASE_LOST`,
/// but its clean-up sends it again until it runs.)
#[test]
fn a_withdraw_at_maxmemory_still_takes_its_last_mark() {
    let server = RedisServer::start();
    let open = || support::open_redis(&server.url(), SLOW, &[]).0;
    let (holder_app, leaving_app, waiter_app) = (open(), open(), open());
    let lock = support::topology::lock_key("k");
    let waiting = waiting_name("k");
    let held = block_on(backend(&holder_app).acquire("k", wait(0))).unwrap();
    let leaving = backend(&leaving_app);
    let leaving = std::thread::spawn(move || block_on(leaving.acquire("k", wait(1_500))).map(|_| ()).map_err(|e| e.code()));
    support::eventually("the waiter marked the key", || zmembers(&server, &waiting).len() == 1);
    maxmemory(&server, "1");
    let ended = leaving.join().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(300));
    let left = zmembers(&server, &waiting);
    maxmemory(&server, "0");
    assert!(block_on(held.release()).unwrap());
    let handed: Option<String> = redis::cmd("GET").arg(&lock).query(&mut server.client()).unwrap();
    let waited = Instant::now();
    let next = block_on(backend(&waiter_app).acquire("k", wait(3_000)));
    assert!(
        next.is_ok(),
        "the next waiter got {:?} after {:?}, though nobody held the key: the withdrawn waiter's acquire ended {ended:?}, \
         its withdraw at maxmemory left {left:?}, and the holder's release handed the lock to it ({handed:?})",
        next.as_ref().map(|_| ()).map_err(|e| e.code()),
        waited.elapsed(),
    );
    drop(next);
    for app in [holder_app, leaving_app, waiter_app] {
        block_on(app.close());
    }
}

/// A probe that held: plain waiters (single and over two keys) and readers
/// of three processes, with waits short enough that most give up (their
/// withdraws, the hand-offs to their marks and the waiters' grants leave
/// '1's), contend for one key for 6 s. No plain grant overlaps another
/// grant, no reader overlaps a plain holder, and no fence repeats.
#[test]
fn contended_marks_and_withdraws_grant_one_holder_at_a_time_with_fresh_fences() {
    use std::collections::HashSet;
    use std::sync::{Arc, Mutex};
    use std::time::Duration;
    let server = RedisServer::start();
    let apps: Vec<_> = [SLOW, FAST, FAST].iter().map(|terms| Arc::new(support::open_redis(&server.url(), terms, &[]).0)).collect();
    // (plain holders, readers) of "k" as the holders see them, and every fence of "k".
    let held = Arc::new(Mutex::new((0u32, 0u32)));
    let fences = Arc::new(Mutex::new(Vec::new()));
    let until = Instant::now() + Duration::from_secs(6);
    let threads: Vec<_> = (0..9u64)
        .map(|n| {
            let (app, held, fences) = (apps[n as usize % 3].clone(), held.clone(), fences.clone());
            std::thread::spawn(move || {
                let mut seed = n.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
                let mut next = move |m: u64| {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    seed % m
                };
                let backend = backend(&app);
                while Instant::now() < until {
                    let (kind, ms) = (next(3), next(120));
                    let options = if kind == 1 { AcquireOptions { mode: LockMode::Shared, ..wait(ms) } } else { wait(ms) };
                    let lease = if kind == 2 {
                        block_on(backend.acquire_many(&["k", "j"], options))
                    } else {
                        block_on(backend.acquire("k", options))
                    };
                    let Ok(lease) = lease else { continue };
                    {
                        let mut now = held.lock().unwrap();
                        if kind == 1 {
                            assert_eq!(now.0, 0, "a reader was granted beside a plain holder");
                            now.1 += 1;
                        } else {
                            assert_eq!(*now, (0, 0), "a plain grant beside another holder");
                            now.0 += 1;
                        }
                    }
                    let fence = lease.fences().into_iter().find(|(key, _)| *key == "k").unwrap().1;
                    fences.lock().unwrap().push(fence);
                    std::thread::sleep(Duration::from_millis(next(4)));
                    {
                        let mut now = held.lock().unwrap();
                        if kind == 1 {
                            now.1 -= 1;
                        } else {
                            now.0 -= 1;
                        }
                    }
                    let _ = block_on(lease.release());
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
    let fences = fences.lock().unwrap();
    let unique: HashSet<_> = fences.iter().collect();
    assert_eq!(unique.len(), fences.len(), "a fence repeated");
    assert!(fences.len() > 50, "only {} grants", fences.len());
    eprintln!("{} grants", fences.len());
}

/// A probe that held: the '1' a withdraw leaves (`SET ... KEEPTTL`) reaches
/// a replica and the AOF with the set's expiry, not as a name without one
/// (a '1' that never lapsed would send every release of the key down the
/// slow path, to publish, until one deleted it).
#[test]
fn the_withdraw_s_one_keeps_its_expiry_on_a_replica_and_in_the_aof() {
    let mut primary = RedisServer::start_persistent(&["--appendonly", "yes", "--appendfsync", "always"]);
    let replica = RedisServer::start_persistent(&["--replicaof", "127.0.0.1", &primary.port().to_string()]);
    support::eventually("the replica is synced", || replica.replica_synced());
    let (holder_app, leaving_app) = (support::open_redis(&primary.url(), SLOW, &[]).0, support::open_redis(&primary.url(), SLOW, &[]).0);
    let waiting = waiting_name("k");
    let held = block_on(backend(&holder_app).acquire("k", wait(0))).unwrap();
    let left = block_on(backend(&leaving_app).acquire("k", wait(300))).map(|_| ()).map_err(|e| e.code());
    assert_eq!(left, Err(dokebi_lock::ErrorCode::WaitTimeout));
    support::eventually("the withdraw left a '1'", || type_of(&primary, &waiting) == "string");
    let ttl = |server: &RedisServer| redis::cmd("PTTL").arg(&waiting).query::<i64>(&mut server.client()).unwrap();
    let on_primary = ttl(&primary);
    support::eventually("the replica has the '1'", || type_of(&replica, &waiting) == "string");
    let on_replica = ttl(&replica);
    assert!(on_primary > 9_000 && on_replica > 9_000 && on_replica <= on_primary + 100, "PTTL {on_primary} / replica {on_replica}");
    // The AOF replayed (killed while the '1' stands: no release after it).
    primary.stop();
    primary.restart();
    let reloaded = (type_of(&primary, &waiting), ttl(&primary));
    assert!(reloaded.0 == "string" && reloaded.1 > 0 && reloaded.1 <= on_primary, "after the AOF replay: {reloaded:?}");
    drop(held);
    for app in [holder_app, leaving_app] {
        block_on(app.close());
    }
}

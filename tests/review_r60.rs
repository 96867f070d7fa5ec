//! Review R60: the Redis part of ee3da2d. A refused counted request counts
//! the key's units again from the holders' members and overwrites the kind
//! hash's `units` with that sum; `with_holders` is bounded by 250 ms.
//!
//! The older release's process is imitated as in review_r59.rs: today's
//! `KINDS_ACQUIRE` (expanded from src/redis/scripts.rs) with its prune put
//! back as it was before 05ad865 and without the recount.

mod support;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use dokebi_lock::{ErrorCode, Provider};
use futures::executor::block_on;
use support::older_release::*;
use support::redis_server::RedisServer;
use support::rng::Rng;
use support::{inspect, labelled, redis_yaml_at, take, wait};

// ---------------------------------------------------------------------
// Helpers.
// ---------------------------------------------------------------------

/// A dying hold is believed until its send time + lease, less this: the
/// server's clock is read in whole ms.
const MARGIN: Duration = Duration::from_millis(5);

/// One redis backend on `server`, default command timeouts.
fn redis_yaml(server: &RedisServer, backend: &str) -> String {
    redis_yaml_at(&format!("url: {}", server.url()), backend, "")
}

/// A token of today's shape, its label `label_len` letters and digits.
fn new_token(rng: &mut Rng, label_len: usize) -> String {
    let label = rng.word(label_len);
    rng.token_of(&label)
}

fn ints(value: &redis::Value) -> Vec<i64> {
    redis::from_redis_value::<Vec<i64>>(value.clone()).unwrap_or_default()
}

/// Units in the kind hash and the sum of every member's weight in the set
/// (expired or not), read atomically.
const UNITS_AND_MEMBERS: &str = r"
local units = tonumber(redis.call('HGET', KEYS[2], 'units') or '0')
local sum, live = 0, 0
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if redis.call('TYPE', KEYS[1])['ok'] == 'zset' then
  local all = redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')
  for n = 1, #all, 2 do
    local w = tonumber(string.match(all[n], ':(%d+)$')) or 0
    sum = sum + w
    if tonumber(all[n + 1]) > now_ms then live = live + w end
  end
end
return {units, sum, live}
";

fn units_and_members(client: &mut redis::Connection, lock: &str) -> (i64, i64, i64) {
    let names = names_of(lock);
    let v: Vec<i64> = redis::cmd("EVAL").arg(UNITS_AND_MEMBERS).arg(2).arg(&names[0]).arg(&names[3]).query(client).unwrap();
    (v[0], v[1], v[2])
}

/// A believed hold: its units, until when it is believed (none: until
/// released), and who holds it.
type Belief = (u32, Option<Instant>, String);

/// Who believes they hold units of the key, now: an overlap checker.
/// A hold with `until` is believed only until then (a holder that dies:
/// counted from its grant's reply to its send time + lease, less than the
/// server keeps it).
struct Ledger {
    limit: u32,
    snapshot: Mutex<Option<Box<dyn FnMut() -> String + Send>>>,
    holds: Mutex<(u64, BTreeMap<u64, Belief>)>,
    violations: Mutex<Vec<String>>,
    peak: AtomicUsize,
}

impl Ledger {
    fn new(limit: u32) -> Arc<Ledger> {
        Arc::new(Ledger {
            limit,
            snapshot: Mutex::new(None),
            holds: Mutex::new((0, BTreeMap::new())),
            violations: Mutex::new(Vec::new()),
            peak: AtomicUsize::new(0),
        })
    }
    fn grant(&self, weight: u32, until: Option<Instant>, who: String) -> u64 {
        let mut holds = self.holds.lock().unwrap();
        let now = Instant::now();
        holds.1.retain(|_, (_, until, _)| until.is_none_or(|until| until > now));
        let held: u32 = holds.1.values().map(|(w, _, _)| *w).sum();
        if held + weight > self.limit {
            let list: Vec<String> =
                holds.1.values().map(|(w, u, who)| format!("{who}:{w}{}", if u.is_some() { "(dying)" } else { "" })).collect();
            let snap = self.snapshot.lock().unwrap().as_mut().map(|f| f()).unwrap_or_default();
            self.violations
                .lock()
                .unwrap()
                .push(format!("{who} granted {weight} with {held} held of {}: {list:?} at {:?}; server: {snap}", self.limit, now));
        }
        self.peak.fetch_max((held + weight) as usize, Ordering::SeqCst);
        holds.0 += 1;
        let id = holds.0;
        holds.1.insert(id, (weight, until, who));
        id
    }
    fn end(&self, id: u64) {
        self.holds.lock().unwrap().1.remove(&id);
    }
    fn check(&self) {
        let violations = self.violations.lock().unwrap();
        assert!(violations.is_empty(), "{} grants beyond the limit, first: {:?}", violations.len(), &violations[..violations.len().min(3)]);
    }
}

// ---------------------------------------------------------------------
// 1. A rolling upgrade under load: new processes (two providers, waiters in
// each, so releases hand units on through KINDS_HANDOFF), an older
// release's process (its prune loses new holders' units, so the count is
// left too high and refused requests mend it), and new holders that die
// (members left to expire, tokens of every length). The overlap checker
// counts every believed hold; a monitor checks that the kind hash never
// counts fewer units than the set's members carry; fences never repeat.
// ---------------------------------------------------------------------

fn rolling_upgrade_under_load(seconds: u64, limit: u32, per_provider: u64) {
    let server = RedisServer::start();
    let providers: Vec<Provider> =
        ["web-3:4182", "a"].iter().map(|label| labelled(&redis_yaml(&server, "        leaseMs: 10000\n"), label)).collect();
    // Discover the lock name.
    let first = take(&providers[0].backend("shared").unwrap(), "c", counted(limit, 1, 0));
    let lock = the_lock(&server);
    support::release(first);

    let ledger = Ledger::new(limit);
    {
        let mut client = server.client();
        let names = names_of(&lock);
        *ledger.snapshot.lock().unwrap() = Some(Box::new(move || {
            let v: redis::Value = redis::cmd("EVAL")
                .arg("local t = redis.call('TIME') return {t[1] * 1000 + math.floor(t[2] / 1000), redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES'), redis.call('HGETALL', KEYS[2]), redis.call('ZRANGE', KEYS[3], 0, -1, 'WITHSCORES')}")
                .arg(3).arg(&names[0]).arg(&names[3]).arg(&names[4])
                .query(&mut client)
                .unwrap();
            format!("{v:?}")
        }));
    }
    let fences = Arc::new(Mutex::new(Vec::<u64>::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let (granted_new, granted_old, granted_dying) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let (too_high, too_low) = (Arc::new(AtomicU64::new(0)), Arc::new(Mutex::new(Vec::<(i64, i64, i64)>::new())));
    let mut threads = Vec::new();

    // New processes: 2 providers x 2 threads, waiting acquires.
    for (p, provider) in providers.iter().enumerate() {
        for t in 0..per_provider {
            let backend = provider.backend("shared").unwrap();
            let (ledger, fences, stop, granted) = (ledger.clone(), fences.clone(), stop.clone(), granted_new.clone());
            threads.push(thread::spawn(move || {
                let mut rng = Rng::new(1 + p as u64 * 10 + t);
                while !stop.load(Ordering::Relaxed) {
                    let weight = 1 + rng.below(u64::from(limit.min(3))) as u32;
                    match block_on(backend.acquire("c", counted(limit, weight, 2_000))) {
                        Ok(lease) => {
                            let id = ledger.grant(weight, None, format!("new{p}.{t}"));
                            fences.lock().unwrap().push(lease.fence());
                            granted.fetch_add(1, Ordering::Relaxed);
                            thread::sleep(Duration::from_millis(1 + rng.below(4)));
                            ledger.end(id);
                            assert!(block_on(lease.release()).unwrap(), "released while held");
                        }
                        Err(err) => assert_eq!(err.code(), ErrorCode::WaitTimeout, "{err}"),
                    }
                }
            }));
        }
    }

    // The older release's process: single tries, fresh 32-hex tokens; one
    // grant in three dies (a short lease, never released).
    {
        let older = older_kinds_acquire();
        let release = script("KINDS_RELEASE");
        let (ledger, fences, stop, granted) = (ledger.clone(), fences.clone(), stop.clone(), granted_old.clone());
        let mut client = server.client();
        let lock = lock.clone();
        threads.push(thread::spawn(move || {
            let mut rng = Rng::new(77);
            while !stop.load(Ordering::Relaxed) {
                let token = rng.hex32();
                let weight = 1 + rng.below(u64::from(limit.min(3))) as u32;
                let dies = rng.below(3) == 0;
                let lease_ms = if dies { 120 } else { 10_000 };
                let sent = Instant::now();
                let reply = ints(&kinds_eval(&mut client, &older, &lock, &token, lease_ms, 0, "x", limit, weight, 0, 60_000));
                if reply.first() == Some(&1) {
                    granted.fetch_add(1, Ordering::Relaxed);
                    fences.lock().unwrap().push(reply[1] as u64);
                    if dies {
                        ledger.grant(weight, Some(sent + Duration::from_millis(lease_ms) - MARGIN), "old(dying)".into());
                    } else {
                        let id = ledger.grant(weight, None, "old".into());
                        thread::sleep(Duration::from_millis(1 + rng.below(3)));
                        ledger.end(id);
                        let released: i64 = redis::from_redis_value(kinds_eval(
                            &mut client,
                            &release,
                            &lock,
                            &token,
                            lease_ms,
                            0,
                            "x",
                            limit,
                            weight,
                            0,
                            60_000,
                        ))
                        .unwrap();
                        assert_eq!(released, 1);
                    }
                }
                thread::sleep(Duration::from_millis(1));
            }
        }));
    }

    // New holders that die: today's script, tokens of every length.
    {
        let today = script("KINDS_ACQUIRE");
        let (ledger, fences, stop, granted) = (ledger.clone(), fences.clone(), stop.clone(), granted_dying.clone());
        let mut client = server.client();
        let lock = lock.clone();
        threads.push(thread::spawn(move || {
            let mut rng = Rng::new(99);
            while !stop.load(Ordering::Relaxed) {
                let len = 1 + rng.below(40) as usize;
                let token = new_token(&mut rng, len);
                let weight = 1 + rng.below(u64::from(limit.min(3))) as u32;
                let lease_ms = 100 + rng.below(100);
                let sent = Instant::now();
                let reply = ints(&kinds_eval(&mut client, &today, &lock, &token, lease_ms, 0, "x", limit, weight, 0, 60_000));
                if reply.first() == Some(&1) {
                    granted.fetch_add(1, Ordering::Relaxed);
                    fences.lock().unwrap().push(reply[1] as u64);
                    ledger.grant(weight, Some(sent + Duration::from_millis(lease_ms) - MARGIN), format!("dying({})", token.len()));
                }
                thread::sleep(Duration::from_millis(2));
            }
        }));
    }

    // The monitor: the hash never counts fewer units than the set's
    // members carry.
    {
        let (stop, too_high, too_low) = (stop.clone(), too_high.clone(), too_low.clone());
        let mut client = server.client();
        let lock = lock.clone();
        threads.push(thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let (units, sum, live) = units_and_members(&mut client, &lock);
                if units < sum {
                    too_low.lock().unwrap().push((units, sum, live));
                } else if units > sum {
                    too_high.fetch_add(1, Ordering::Relaxed);
                }
                thread::sleep(Duration::from_millis(1));
            }
        }));
    }

    thread::sleep(Duration::from_secs(seconds));
    stop.store(true, Ordering::Relaxed);
    for thread in threads {
        thread.join().unwrap();
    }
    eprintln!(
        "limit {limit}: granted new {}, old {}, dying {}; peak {}; samples with the hash too high {}",
        granted_new.load(Ordering::Relaxed),
        granted_old.load(Ordering::Relaxed),
        granted_dying.load(Ordering::Relaxed),
        ledger.peak.load(Ordering::Relaxed),
        too_high.load(Ordering::Relaxed)
    );
    let too_low = too_low.lock().unwrap();
    eprintln!("samples with the hash too low: {} {:?}", too_low.len(), &too_low[..too_low.len().min(5)]);
    ledger.check();
    assert!(too_low.is_empty(), "the hash counted fewer units than the members carry: {:?}", &too_low[..too_low.len().min(5)]);
    let mut fences = fences.lock().unwrap().clone();
    let n = fences.len();
    fences.sort_unstable();
    fences.dedup();
    assert_eq!(fences.len(), n, "a fence repeated");
    assert!(granted_old.load(Ordering::Relaxed) > 0 && granted_dying.load(Ordering::Relaxed) > 0);
    for provider in providers {
        block_on(provider.close());
    }
}

#[test]
fn r60_rolling_upgrade_under_load_limit_5() {
    rolling_upgrade_under_load(12, 5, 2);
}

#[test]
fn r60_rolling_upgrade_under_load_limit_3() {
    rolling_upgrade_under_load(8, 3, 2);
}

#[test]
fn r60_rolling_upgrade_under_load_many_waiters_per_process() {
    // Same, more waiters per process: longer hand-off chains (KINDS_HANDOFF
    // general path with the `known` cache, a key in several requests).
    rolling_upgrade_under_load(8, 5, 4);
}

// ---------------------------------------------------------------------
// 2. Deterministic cases of the recount.
// ---------------------------------------------------------------------

/// Puts a member `token:weight` dying in `ms` into the set, its units
/// counted, as a grant of today's script would.
fn grant_eval(server: &RedisServer, lua: &str, lock: &str, token: &str, lease_ms: u64, limit: u32, weight: u32) -> Vec<i64> {
    ints(&kinds_eval(&mut server.client(), lua, lock, token, lease_ms, 0, "x", limit, weight, 0, 60_000))
}

/// An expired member not yet pruned, beside a count left too high: the
/// refused request prunes first, then counts what is left: the hash ends
/// equal to the live members' weights, never below.
#[test]
fn r60_expired_members_are_pruned_before_the_recount() {
    let server = RedisServer::start();
    let provider = labelled(&redis_yaml(&server, "        leaseMs: 10000\n"), "web-3:4182");
    let backend = provider.backend("shared").unwrap();
    let kept = take(&backend, "c", counted(5, 2, 0));
    let lock = the_lock(&server);
    let today = script("KINDS_ACQUIRE");
    let mut rng = Rng::new(5);
    // A new holder of 2 dies; the older release prunes it, giving back 0.
    assert_eq!(grant_eval(&server, &today, &lock, &new_token(&mut rng, 40), 100, 5, 2)[0], 1);
    thread::sleep(Duration::from_millis(200));
    assert_eq!(grant_eval(&server, &older_kinds_acquire(), &lock, &rng.hex32(), 10_000, 5, 4)[0], 0);
    assert_eq!(units_and_members(&mut server.client(), &lock), (4, 2, 2), "stale by 2");
    // Another new holder of 1 dies, not pruned yet.
    assert_eq!(grant_eval(&server, &today, &lock, &new_token(&mut rng, 3), 100, 5, 1)[0], 1);
    thread::sleep(Duration::from_millis(200));
    assert_eq!(units_and_members(&mut server.client(), &lock), (5, 3, 2));
    // A request of 4: refused (2 live), prunes the dead 1, recounts 2.
    assert_eq!(grant_eval(&server, &today, &lock, &new_token(&mut rng, 3), 10_000, 5, 4)[0], 0);
    assert_eq!(units_and_members(&mut server.client(), &lock), (2, 2, 2));
    // 3 fit, 4 do not.
    let three = take(&backend, "c", counted(5, 3, 0));
    assert_eq!(block_on(backend.acquire("c", counted(5, 1, 0))).unwrap_err().code(), ErrorCode::LockBusy);
    assert_eq!(units_and_members(&mut server.client(), &lock), (5, 5, 5));
    support::release(three);
    support::release(kept);
}

/// The hand-off's general path: a release of 1 unit given to a waiter of
/// 3 in the same process, while the count is 2 too high. The waiter is
/// granted (the count mended on the way), and the count then is right.
#[test]
fn r60_a_hand_off_mends_a_count_left_too_high() {
    let server = RedisServer::start();
    let provider = labelled(&redis_yaml(&server, "        leaseMs: 10000\n"), "web-3:4182");
    let backend = provider.backend("shared").unwrap();
    let one = take(&backend, "c", counted(5, 1, 0));
    let two = take(&backend, "c", counted(5, 1, 0));
    let lock = the_lock(&server);
    let today = script("KINDS_ACQUIRE");
    let mut rng = Rng::new(6);
    assert_eq!(grant_eval(&server, &today, &lock, &new_token(&mut rng, 40), 100, 5, 2)[0], 1);
    thread::sleep(Duration::from_millis(200));
    assert_eq!(grant_eval(&server, &older_kinds_acquire(), &lock, &rng.hex32(), 10_000, 5, 4)[0], 0);
    assert_eq!(units_and_members(&mut server.client(), &lock), (4, 2, 2), "stale by 2");
    // Two waiters of this process: 3 then 2 (5 would be 1 + 3 + 2: the
    // second must stay out while `one` holds).
    let waiter = |weight| {
        let backend = backend.clone();
        thread::spawn(move || block_on(backend.acquire("c", counted(5, weight, 3_000))))
    };
    let three = waiter(3);
    thread::sleep(Duration::from_millis(100));
    let second = waiter(2);
    thread::sleep(Duration::from_millis(100));
    support::release(two);
    let three = three.join().unwrap().expect("3 units fit beside 1");
    let (units, sum, live) = units_and_members(&mut server.client(), &lock);
    assert_eq!((units, sum, live), (4, 4, 4));
    let second = second.join().unwrap();
    assert_eq!(second.as_ref().err().map(|e| e.code()), Some(ErrorCode::WaitTimeout), "2 more beside 4 of 5");
    support::release(three);
    support::release(one);
}

// ---------------------------------------------------------------------
// 3. What the recount costs: it reads every member, so every refused try
// of a full counted key paid for it (27 ms a try with 50,000 holders,
// against 0.2 ms without), even with the count right, the usual case. A
// key is now counted at most once a second.
// ---------------------------------------------------------------------

const FILL: &str = r"
local t = redis.call('TIME')
local score = t[1] * 1000 + math.floor(t[2] / 1000) + 60000
local n = tonumber(ARGV[1])
for i = 1, n, 1000 do
  local args = {}
  for j = i, math.min(n, i + 999) do
    args[#args + 1] = score
    args[#args + 1] = string.format('AAAAAAAAAAAAAAAAAA%04d.web-3%%3A4182:1', j)
  end
  redis.call('ZADD', KEYS[1], unpack(args))
end
redis.call('PEXPIRE', KEYS[1], 60000)
redis.call('HSET', KEYS[2], 'limit', ARGV[1], 'units', ARGV[1])
redis.call('PEXPIRE', KEYS[2], 60000)
return n
";

#[test]
fn r60_a_key_is_recounted_at_most_once_a_second() {
    let server = RedisServer::start();
    let lock = "test:lock:{cost}".to_owned();
    let names = names_of(&lock);
    let mut client = server.client();
    let today = script("KINDS_ACQUIRE");
    let n = 100u32;
    let filled: i64 = redis::cmd("EVAL").arg(FILL).arg(2).arg(&names[0]).arg(&names[3]).arg(n).query(&mut client).unwrap();
    assert_eq!(filled, i64::from(n));
    let units = |client: &mut redis::Connection| -> i64 { redis::cmd("HGET").arg(&names[3]).arg("units").query(client).unwrap() };
    let refused_try = |client: &mut redis::Connection| {
        let reply = ints(&kinds_eval(client, &today, &lock, "tok", 10_000, 0, "x", n, 1, 0, 60_000));
        assert_eq!(reply[0], 0, "full: refused");
    };
    let overcount = |client: &mut redis::Connection| {
        let _: i64 = redis::cmd("HSET").arg(&names[3]).arg("units").arg(n + 5).query(client).unwrap();
    };
    overcount(&mut client);
    refused_try(&mut client);
    assert_eq!(units(&mut client), i64::from(n), "counted again and mended");
    overcount(&mut client);
    refused_try(&mut client);
    assert_eq!(units(&mut client), i64::from(n + 5), "not counted again within the second");
    thread::sleep(Duration::from_millis(1_100));
    refused_try(&mut client);
    assert_eq!(units(&mut client), i64::from(n), "counted again a second later");
}

// ---------------------------------------------------------------------
// 4. `with_holders` bounded by 250 ms: the read it drops is one a stalled
// server answers later, on the connection the next commands share. Nothing
// after it is answered with another's reply, the waiter's marks are taken
// back, and the error comes at the end of the wait.
// ---------------------------------------------------------------------

#[test]
fn r60_a_holders_read_cut_at_250_ms_leaves_the_connection_in_order() {
    let server = RedisServer::start();
    let holder = labelled(&redis_yaml(&server, "        leaseMs: 10000\n"), "holder");
    let slow_naps = "        leaseMs: 10000\n        pollIntervalMs: 5000\n        notifyPollIntervalMs: 5000\n";
    let waiter = labelled(&redis_yaml(&server, slow_naps), "waiter");
    let (holder, waiter) = (holder.backend("shared").unwrap(), waiter.backend("shared").unwrap());
    let lease = take(&holder, "k", wait(0));
    let counted_lease = take(&holder, "n", counted(3, 2, 0));
    let started = Instant::now();
    let waiting = {
        let waiter = waiter.clone();
        thread::spawn(move || {
            let outcome = block_on(waiter.acquire("k", wait(800)));
            (outcome.map(|_| ()), started.elapsed())
        })
    };
    support::eventually("the waiter marks the key", || inspect(&holder, "k").waiting >= 1);
    server.pause();
    thread::sleep(Duration::from_millis(1_300));
    let (outcome, elapsed) = waiting.join().unwrap();
    server.resume();
    let err = outcome.unwrap_err();
    assert_eq!(err.code(), ErrorCode::WaitTimeout);
    assert!(elapsed < Duration::from_millis(1_300), "told after {elapsed:?}");
    assert!(err.details().is_none_or(|d| d.get("holders").is_none()), "no holders could be read: {:?}", err.details());
    // The same connection, at once: every answer is its own.
    for round in 0..30 {
        let seen = inspect(&waiter, "k");
        assert_eq!((seen.held, seen.mode), (1, Some(dokebi_lock::LockMode::Exclusive)), "round {round}");
        let seen = inspect(&waiter, "n");
        assert_eq!((seen.held, seen.limit), (1, 3), "round {round}");
        let other = take(&waiter, &format!("free{round}"), wait(0));
        let one = take(&waiter, "n", counted(3, 1, 0));
        assert_eq!(block_on(waiter.acquire("n", counted(3, 1, 0))).unwrap_err().code(), ErrorCode::LockBusy);
        support::release(one);
        support::release(other);
    }
    support::eventually("the waiter's mark is taken back", || inspect(&holder, "k").waiting == 0);
    support::release(counted_lease);
    support::release(lease);
}

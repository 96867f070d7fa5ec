//! Review R59: owner tokens of several lengths and formats on one key, round
//! two (commits 4c69111 and 05ad865), and the failure-path read of a
//! `WAIT_TIMEOUT` / `LOCK_BUSY`.
//!
//! An older release's process (32-hex tokens, the scripts of today but for
//! 05ad865's prune fix) is imitated by running that release's very
//! `KINDS_ACQUIRE`: today's text (read from src/redis/scripts.rs and its
//! macros expanded here) with the one prune line put back as it was. The
//! expansion is checked against the server's script cache (its SHA-1 is
//! the one the driver sends).

mod support;

use std::thread;
use std::time::{Duration, Instant};

use dokebi_lock::ErrorCode;
use futures::executor::block_on;
use support::older_release::*;
use support::redis_server::RedisServer;
use support::{inspect, labelled, redis_yaml_at, take, wait};

// ---------------------------------------------------------------------
// Helpers.
// ---------------------------------------------------------------------

/// YAML of one redis backend on `server`, its commands bounded by 200 ms
/// (so a lease of 300 ms is allowed).
fn redis_yaml(server: &RedisServer, backend: &str) -> String {
    redis_yaml_at(&format!("url: {}", server.url()), backend, "        commandTimeoutMs: 200\n")
}

/// One try of an older release's process (its `KINDS_ACQUIRE`, its token):
/// the script's reply.
fn older_try(server: &RedisServer, lock: &str, limit: u32, weight: u32) -> Vec<i64> {
    let reply = kinds_eval(&mut server.client(), &older_kinds_acquire(), lock, OLDER_TOKEN, 10_000, 0, "x", limit, weight, 0, 60_000);
    redis::from_redis_value(reply).unwrap()
}

fn units(server: &RedisServer, lock: &str) -> i64 {
    let units: Option<i64> = redis::cmd("HGET").arg(&names_of(lock)[3]).arg("units").query(&mut server.client()).unwrap();
    units.unwrap_or(0)
}

// ---------------------------------------------------------------------
// The expander is right: the SHA-1 of what it builds is in the server's
// script cache once the driver ran the script.
// ---------------------------------------------------------------------

#[test]
fn the_expanded_scripts_are_the_ones_the_driver_sends() {
    let server = RedisServer::start();
    let provider = labelled(&redis_yaml(&server, "        leaseMs: 10000\n"), "web-3:4182");
    let backend = provider.backend("shared").unwrap();
    let lease = take(&backend, "c", counted(3, 1, 0));
    let _ = inspect(&backend, "c");
    for name in ["KINDS_ACQUIRE", "INSPECT"] {
        let sha = redis::Script::new(&script(name)).get_hash().to_owned();
        let known: Vec<i64> = redis::cmd("SCRIPT").arg("EXISTS").arg(&sha).query(&mut server.client()).unwrap();
        assert_eq!(known, [1], "{name}: the expansion is not the script the driver sends");
    }
    assert!(block_on(lease.release()).unwrap());
}

// ---------------------------------------------------------------------
// Finding 1: a rolling upgrade. An older release's prune reads an expired
// member's weight at *its* token's length (32): a new holder's member
// (`<22>.<label>:<weight>`, 35 characters of token for `web-3:4182`) reads
// as no number, its units are never given back, and the key refused room
// it had for as long as any holder was left: 05ad865 fixed only the new
// release's scripts. Now a new release's refused request counts the units
// again from the holders and mends the count.
// ---------------------------------------------------------------------

/// A new holder of 2 units dies; an older release's process, refused for
/// room it does not have (3 units asked, 1 held), prunes it; the new
/// release's request of 2 units must then fit beside the 1 held.
fn an_older_prune_of_a_new_holder(label: &str) {
    let server = RedisServer::start();
    let dying = labelled(&redis_yaml(&server, "        leaseMs: 300\n"), label);
    let living = labelled(&redis_yaml(&server, "        leaseMs: 10000\n"), label);
    let (dying, living) = (dying.backend("shared").unwrap(), living.backend("shared").unwrap());
    let kept = take(&living, "c", counted(3, 1, 0));
    let _dead = take(&dying, "c", counted(3, 2, 0));
    let lock = the_lock(&server);
    assert_eq!(units(&server, &lock), 3);
    thread::sleep(Duration::from_millis(600));
    assert_eq!(inspect(&living, "c").held, 1, "the 2-unit lease expired");

    // The older release's process asks for 3 (1 held: no room either way),
    // and its grant prunes the dead member first.
    let reply = older_try(&server, &lock, 3, 3);
    assert_eq!(reply[0], 0, "3 units of 3 with 1 held: refused ({reply:?})");
    let left = units(&server, &lock);

    // 1 unit of 3 is held: 2 more fit, at once and after a wait.
    let fits = block_on(living.acquire("c", counted(3, 2, 0)));
    let later = block_on(living.acquire("c", counted(3, 2, 1500)));
    assert!(
        fits.is_ok() || later.is_ok(),
        "an older release's prune left {left} units counted with 1 held: 2 more refused ({:?}, then {:?} after 1.5 s)",
        fits.as_ref().err().map(|e| e.code()),
        later.as_ref().err().map(|e| e.code()),
    );
    assert_eq!(units(&server, &lock), 3, "1 + 2 held, counted right");
    for lease in [fits, later].into_iter().flatten() {
        assert!(block_on(lease.release()).unwrap());
    }
    assert!(block_on(kept.release()).unwrap());
}

#[test]
fn redis_rolling_upgrade_an_older_release_s_prune_loses_a_new_holder_s_units() {
    // The default label's shape: a token of 35 characters.
    an_older_prune_of_a_new_holder("web-3:4182");
}

#[test]
fn redis_rolling_upgrade_a_short_label_too() {
    // A token of 24 characters: the older prune reads past the member.
    an_older_prune_of_a_new_holder("a");
}

/// Control: a label whose token is 32 characters, as long as an older
/// release's: the older prune reads its weight right.
#[test]
fn redis_rolling_upgrade_control_a_token_of_32_characters() {
    an_older_prune_of_a_new_holder("abcdefghi");
}

/// And the other way round (05ad865's case), with the older process
/// imitated by its state: the new prune gives an older holder's units back.
#[test]
fn redis_rolling_upgrade_a_new_prune_of_an_older_holder() {
    let server = RedisServer::start();
    let provider = labelled(&redis_yaml(&server, "        leaseMs: 10000\n"), "web-3:4182");
    let backend = provider.backend("shared").unwrap();
    let kept = take(&backend, "c", counted(3, 1, 0));
    let lock = the_lock(&server);
    // The older release's grant of 2 units, 300 ms, as its script leaves it.
    let reply = older_try(&server, &lock, 3, 2);
    assert_eq!(reply[0], 1, "{reply:?}");
    let _: () = redis::cmd("EVAL")
        .arg("local t = redis.call('TIME') redis.call('ZADD', KEYS[1], 'XX', t[1] * 1000 + math.floor(t[2] / 1000) + 300, ARGV[1])")
        .arg(1)
        .arg(&lock)
        .arg(format!("{OLDER_TOKEN}:2"))
        .query(&mut server.client())
        .unwrap();
    thread::sleep(Duration::from_millis(600));
    let fits = block_on(backend.acquire("c", counted(3, 2, 0))).expect("2 of 3 with 1 held");
    assert!(block_on(fits.release()).unwrap());
    assert!(block_on(kept.release()).unwrap());
}

// ---------------------------------------------------------------------
// Checked, no break: a plain release hands the key to the oldest waiter
// whatever its token's length (an older release's waiter first), and takes
// none of its marks for another's.
// ---------------------------------------------------------------------

#[test]
fn redis_a_plain_release_hands_on_to_an_older_release_s_waiter_in_its_turn() {
    let server = RedisServer::start();
    let holder = labelled(&redis_yaml(&server, "        leaseMs: 10000\n"), "a");
    let waiter = labelled(&redis_yaml(&server, "        leaseMs: 10000\n"), &"x".repeat(40));
    let (holder, waiter) = (holder.backend("shared").unwrap(), waiter.backend("shared").unwrap());
    let lease = take(&holder, "k", wait(0));
    let lock = the_lock(&server);
    let names = names_of(&lock);
    // An older release's waiter marked the key first (an older ticket, of
    // the same 16 digits: marks compare as strings).
    let _: () = redis::cmd("EVAL")
        .arg("local t = redis.call('TIME') redis.call('ZADD', KEYS[1], t[1] * 1000 + 5000, ARGV[1]) redis.call('PEXPIRE', KEYS[1], 5000)")
        .arg(1)
        .arg(&names[2])
        .arg(format!("1000000000000000:{OLDER_TOKEN}"))
        .query(&mut server.client())
        .unwrap();
    let new_waiter = {
        let waiter = waiter.clone();
        thread::spawn(move || block_on(waiter.acquire("k", wait(10_000))))
    };
    support::eventually("the new waiter marks the key", || inspect(&holder, "k").waiting >= 2);
    assert!(block_on(lease.release()).unwrap());
    let held: String = redis::cmd("GET").arg(&lock).query(&mut server.client()).unwrap();
    assert_eq!(held, format!("h:{OLDER_TOKEN}"), "handed to the oldest mark");
    // The older waiter gives up (its release with `ends`): handed on.
    let mut command = redis::cmd("EVAL");
    command.arg(script("RELEASE")).arg(3).arg(&names[0]).arg(&names[2]).arg(&names[4]);
    let released: i64 = command.arg(OLDER_TOKEN).arg("test:lock-released").arg("1").query(&mut server.client()).unwrap();
    assert_eq!(released, 0);
    let granted = new_waiter.join().unwrap().expect("the new waiter is granted next");
    assert!(block_on(granted.release()).unwrap());
}

// ---------------------------------------------------------------------
// Finding 2: the failure-path read is outside the wait. A WAIT_TIMEOUT
// is told only once the read of the holders answers or fails: a store
// that stalls after the wait's last try holds the caller up to
// commandTimeoutMs (plus connectTimeoutMs to reconnect) past its
// waitTimeoutMs, per key read.
// ---------------------------------------------------------------------

#[test]
fn redis_wait_timeout_is_told_at_the_end_of_the_wait_when_the_store_stalls() {
    let server = RedisServer::start();
    // commandTimeoutMs as by default (2000 ms).
    let redis_yaml = |server: &RedisServer, backend: &str| redis_yaml_at(&format!("url: {}", server.url()), backend, "");
    let holder = labelled(&redis_yaml(&server, "        leaseMs: 10000\n"), "holder");
    let slow_naps = "        leaseMs: 10000\n        pollIntervalMs: 5000\n        notifyPollIntervalMs: 5000\n";
    let waiter = labelled(&redis_yaml(&server, slow_naps), "waiter");
    let (holder, waiter) = (holder.backend("shared").unwrap(), waiter.backend("shared").unwrap());
    let lease = take(&holder, "k", wait(0));
    let started = Instant::now();
    let waiting = {
        let waiter = waiter.clone();
        thread::spawn(move || {
            let outcome = block_on(waiter.acquire("k", wait(800)));
            (outcome.map(|_| ()), started.elapsed())
        })
    };
    // Its first try answered (it marked the key); it naps until the end of
    // its wait. Then the server stalls (a fork, a long script, a pause).
    support::eventually("the waiter marks the key", || inspect(&holder, "k").waiting >= 1);
    assert!(started.elapsed() < Duration::from_millis(600), "the first try was slow");
    server.pause();
    thread::sleep(Duration::from_millis(3_500));
    server.resume();
    let (outcome, elapsed) = waiting.join().unwrap();
    assert_eq!(outcome.unwrap_err().code(), ErrorCode::WaitTimeout);
    assert!(elapsed < Duration::from_millis(1_300), "a WAIT_TIMEOUT of an 800 ms wait was told after {elapsed:?}");
    drop(lease);
}

//! No process starves: two processes (two providers, each with its own
//! connections) each run two tasks that loop on one key, releasing and
//! acquiring again at once, so each process always has a waiter in Redis.
//! A release hands the key to the oldest waiter of any process, so the
//! process that just released cannot give it to its own next task ahead of
//! a process that waits: the grants alternate. Before, the releasing
//! process's own waiter, woken in-process, reached the server first: a
//! process 1 ms farther from the server got 125 of 580 grants, in runs of
//! up to 22 of the other's. Run on one server, Sentinel and a Cluster.

mod fairness;
mod support;

#[path = "faults/proxy.rs"]
mod proxy;

use std::time::{Duration, Instant};

use fairness::{assert_fair, Grant};
use futures::executor::block_on;
use support::deployment::{on_topologies, Deployment};
use support::topology::backend;
use support::wait;

const BACKEND: &[(&str, &str)] = &[("leaseMs", "10000")];

/// Two processes looping on `keys` for `run`, both connected and subscribed
/// first; the grants, in fence order.
fn race(deployment: &Deployment, keys: &[&str], run: Duration) -> Vec<Grant> {
    race_between(deployment.name(), deployment.open(BACKEND), deployment.open(BACKEND), keys, run)
}

fn race_between(name: &str, a: dokebi_lock::Provider, b: dokebi_lock::Provider, keys: &[&str], run: Duration) -> Vec<Grant> {
    for provider in [&a, &b] {
        let lease = block_on(backend(provider).acquire_many(keys, wait(5_000))).unwrap();
        assert!(block_on(lease.release()).unwrap());
    }
    let grants = fairness::race(name, &backend(&a), &backend(&b), keys, run);
    block_on(a.close());
    block_on(b.close());
    grants
}

fn scenario_a_process_that_waits_gets_its_turn_against_one_that_loops(deployment: &mut Deployment) {
    assert_fair(deployment.name(), &race(deployment, &["hot"], Duration::from_millis(1_500)));
}

/// The case: one process a little nearer the server (the other's
/// every command takes 1 ms more each way), so its next acquire after its
/// own release always reached the server before the other's wake-up did.
#[test]
fn a_process_farther_from_the_server_gets_its_turn_against_a_nearer_one_that_loops() {
    let server = support::redis_server::RedisServer::start();
    let far = proxy::Proxy::start(server.port(), Duration::from_millis(1));
    let (near, _) = support::open_redis(&server.url(), BACKEND, &[]);
    let (farther, _) = support::open_redis(&far.url(), BACKEND, &[]);
    assert_fair("server, one farther", &race_between("server, one farther", near, farther, &["hot"], Duration::from_millis(1_500)));
}

on_topologies! {
    every topology {
        a_process_that_waits_gets_its_turn_against_one_that_loops => scenario_a_process_that_waits_gets_its_turn_against_one_that_loops,
    }
}

/// A waiter that died with its mark in the waiting set is handed the key by
/// the next release, and so holds it only until its mark would have lapsed:
/// then the next waiter is granted, with a fence above every earlier one.
#[test]
fn a_key_handed_to_a_waiter_that_died_is_free_again_when_its_mark_lapses() {
    let server = support::redis_server::RedisServer::start();
    let (app, _) = support::open_redis(&server.url(), BACKEND, &[]);
    let digest = support::names::digest("k");
    let (lock, waiting) = (format!("test:lock:{{{digest}}}"), format!("test:lock-waiting:{{{digest}}}"));
    let held = block_on(backend(&app).acquire("k", wait(0))).unwrap();
    // The mark a waiter of another process left before it died: 800 ms to live.
    let mut raw = server.client();
    let (seconds, micros): (u64, u64) = redis::cmd("TIME").query(&mut raw).unwrap();
    let lapses = seconds * 1000 + micros / 1000 + 800;
    let dead = "00000000000000000000000000000dead";
    let _: () = redis::pipe()
        .cmd("ZADD")
        .arg(&waiting)
        .arg(lapses)
        .arg(format!("{}:{dead}", seconds * 1_000_000 + micros))
        .cmd("PEXPIRE")
        .arg(&waiting)
        .arg(800)
        .query(&mut raw)
        .unwrap();
    let released_at = Instant::now();
    assert!(block_on(held.release()).unwrap());
    let holder: String = redis::cmd("GET").arg(&lock).query(&mut raw).unwrap();
    assert_eq!(holder, format!("h:{dead}"), "the release reserved the key for the oldest waiter");
    let next = block_on(backend(&app).acquire("k", wait(5_000))).expect("granted once the mark lapsed");
    let waited = released_at.elapsed();
    assert!(waited >= Duration::from_millis(600) && waited < Duration::from_millis(2_500), "granted after {waited:?}");
    assert!(next.fence() > held.fence());
    assert!(block_on(next.release()).unwrap());
    block_on(app.close());
}

/// A failover to a replica that lagged can lose a grant yet keep the
/// grantee's waiting mark (its try marked the key, the grant came after).
/// The next release then hands the key to that mark: the holder of the lost
/// grant, whose token the mark carries, must still find its lease lost
/// (renew refused, release `LEASE_LOST`), not hold the key again unawares.
#[test]
fn a_holder_whose_grant_a_failover_lost_is_told_even_when_its_mark_is_handed_the_key() {
    let server = support::redis_server::RedisServer::start();
    let (app, _) = support::open_redis(&server.url(), BACKEND, &[]);
    let (other, _) = support::open_redis(&server.url(), BACKEND, &[]);
    let digest = support::names::digest("k");
    let (lock, waiting) = (format!("test:lock:{{{digest}}}"), format!("test:lock-waiting:{{{digest}}}"));
    let mut raw = server.client();
    let lost = block_on(backend(&app).acquire("k", wait(0))).unwrap();
    let token = support::marks::holder_token(&server, &lock);
    // The failover: the grant is gone, the mark of its last try is not.
    let _: () = redis::cmd("DEL").arg(&lock).query(&mut raw).unwrap();
    let taker = block_on(backend(&other).acquire("k", wait(0))).unwrap();
    let (seconds, micros): (u64, u64) = redis::cmd("TIME").query(&mut raw).unwrap();
    let _: () = redis::cmd("ZADD")
        .arg(&waiting)
        .arg(seconds * 1000 + micros / 1000 + 5_000)
        .arg(format!("{}:{token}", seconds * 1_000_000 + micros))
        .query(&mut raw)
        .unwrap();
    assert!(block_on(taker.release()).unwrap());
    let reserved: String = redis::cmd("GET").arg(&lock).query(&mut raw).unwrap();
    assert_eq!(reserved, format!("h:{token}"), "the release handed the key to the surviving mark");
    assert!(!block_on(lost.renew()).unwrap(), "the lost lease is not renewed by the hand-off");
    let error = block_on(lost.release()).expect_err("the lost lease's release is refused");
    assert_eq!(error.code(), dokebi_lock::ErrorCode::LeaseLost);
    block_on(app.close());
    block_on(other.close());
}

/// Leaves a plain waiter's mark for `token` in `waiting` (as a waiter of
/// another process does), ticketed `back_us` before now, to lapse in
/// `lapse_ms`; answers the mark.
fn mark(server: &support::redis_server::RedisServer, waiting: &str, token: &str, back_us: u64, lapse_ms: u64) -> String {
    let mut raw = server.client();
    let (seconds, micros): (u64, u64) = redis::cmd("TIME").query(&mut raw).unwrap();
    let member = format!("{}:{token}", seconds * 1_000_000 + micros - back_us);
    let lapses = seconds * 1000 + micros / 1000 + lapse_ms;
    let _: () =
        redis::pipe().cmd("ZADD").arg(waiting).arg(lapses).arg(&member).cmd("PEXPIRE").arg(waiting).arg(lapse_ms).query(&mut raw).unwrap();
    member
}

fn names(key: &str) -> (String, String) {
    let digest = support::names::digest(key);
    (format!("test:lock:{{{digest}}}"), format!("test:lock-waiting:{{{digest}}}"))
}

/// A reader (a kinds waiter) that queues behind a plain holder keeps the
/// plain waiters' marks: the next release still hands the key to the
/// oldest of them. Before, its `SET waiting '1'` replaced the set of marks.
#[test]
fn a_reader_queued_behind_a_plain_holder_keeps_the_plain_waiters_marks() {
    let server = support::redis_server::RedisServer::start();
    let (app, _) = support::open_redis(&server.url(), BACKEND, &[]);
    // Its marks live 2 x notifyPollIntervalMs + 1 s: longer than the mark below.
    let (reader_app, _) = support::open_redis(&server.url(), &[("leaseMs", "10000"), ("notifyPollIntervalMs", "10000")], &[]);
    let (lock, waiting) = names("k");
    let held = block_on(backend(&app).acquire("k", wait(0))).unwrap();
    let oldest = "0000000000000000000000000000000b0";
    let member = mark(&server, &waiting, oldest, 1_000, 1_500);
    let reader = std::thread::spawn(move || {
        let options = dokebi_lock::AcquireOptions { mode: dokebi_lock::LockMode::Shared, ..wait(10_000) };
        let lease = block_on(backend(&reader_app).acquire("k", options)).expect("the reader is granted in the end");
        assert!(block_on(lease.release()).unwrap());
        block_on(reader_app.close());
    });
    // The reader's try marked the key for its 10 s wait.
    support::eventually("the reader waits", || {
        let ttl: i64 = redis::cmd("PTTL").arg(&waiting).query(&mut server.client()).unwrap();
        ttl > 3_000
    });
    let kind: String = redis::cmd("TYPE").arg(&waiting).query(&mut server.client()).unwrap();
    assert_eq!(kind, "zset", "the plain waiters' marks were replaced");
    let marks: Vec<String> = redis::cmd("ZRANGE").arg(&waiting).arg(0).arg(-1).query(&mut server.client()).unwrap();
    assert_eq!(marks, vec![member]);
    assert!(block_on(held.release()).unwrap());
    let holder: String = redis::cmd("GET").arg(&lock).query(&mut server.client()).unwrap();
    assert_eq!(holder, format!("h:{oldest}"), "the release handed the key to the oldest plain waiter");
    reader.join().unwrap();
    block_on(app.close());
}

/// A waiter whose first try was sent twice (its answer lost, the try sent
/// again) left two marks under two tickets; it gives up with the ticket it
/// learned. Its withdraw takes back every mark of its token, so the next
/// release does not hand the key to the other one (which nobody would
/// take before the mark lapsed).
#[test]
fn a_withdraw_takes_back_every_mark_of_its_token() {
    let server = support::redis_server::RedisServer::start();
    let (app, _) = support::open_redis(&server.url(), BACKEND, &[]);
    let (waiter_app, _) = support::open_redis(&server.url(), BACKEND, &[]);
    let (lock, waiting) = names("k");
    let held = block_on(backend(&app).acquire("k", wait(0))).unwrap();
    let waiter = std::thread::spawn(move || {
        let err = block_on(backend(&waiter_app).acquire("k", wait(1_000))).expect_err("the key stays held");
        assert_eq!(err.code(), dokebi_lock::ErrorCode::WaitTimeout);
        waiter_app
    });
    let mut raw = server.client();
    support::eventually("the waiter marked the key", || redis::cmd("ZCARD").arg(&waiting).query::<i64>(&mut raw).unwrap_or(0) == 1);
    let marks: Vec<String> = redis::cmd("ZRANGE").arg(&waiting).arg(0).arg(-1).query(&mut raw).unwrap();
    let token = marks[0].split_once(':').unwrap().1.to_owned();
    // The lost first try's mark: an older ticket, the same token.
    mark(&server, &waiting, &token, 5_000, 30_000);
    let waiter_app = waiter.join().unwrap();
    // The withdraw took the set's last marks: the name is left a '1' (not a
    // set, so ZRANGE answers WRONGTYPE: no marks) for the rest of its time.
    support::eventually("the withdraw ran", || {
        let left: Vec<String> = redis::cmd("ZRANGE").arg(&waiting).arg(0).arg(-1).query(&mut raw).unwrap_or_default();
        left.len() < 2
    });
    assert!(block_on(held.release()).unwrap());
    let holder: Option<String> = redis::cmd("GET").arg(&lock).query(&mut raw).unwrap();
    assert_eq!(holder, None, "the release handed the key to a waiter that gave up");
    block_on(waiter_app.close());
    block_on(app.close());
}

/// A writer that waited behind readers (the last mark of the queue set)
/// and gives up tells those waiting, but keeps the plain waiters' marks:
/// the plain holder's release still hands the key to the oldest of them.
/// Before, its withdraw deleted the waiting name whatever it was, and the
/// set of marks with it: the release then freed the key for whoever asked
/// first.
#[test]
fn a_writer_that_gives_up_keeps_the_plain_waiters_marks() {
    let server = support::redis_server::RedisServer::start();
    let polls: &[(&str, &str)] = &[("leaseMs", "10000"), ("pollIntervalMs", "5000"), ("notifyPollIntervalMs", "5000")];
    let (readers, _) = support::open_redis(&server.url(), polls, &[]);
    let (writer_app, _) = support::open_redis(&server.url(), polls, &[]);
    let (lock, waiting) = names("k");
    let queue = lock.replacen(":lock:", ":lock-queue:", 1);
    let shared = dokebi_lock::AcquireOptions { mode: dokebi_lock::LockMode::Shared, ..wait(0) };
    let reader = block_on(backend(&readers).acquire("k", shared)).unwrap();
    let writer = std::thread::spawn(move || {
        let err = block_on(backend(&writer_app).acquire("k", wait(1_500))).expect_err("the key stays held");
        assert_eq!(err.code(), dokebi_lock::ErrorCode::WaitTimeout);
        writer_app
    });
    let mut raw = server.client();
    support::eventually("the writer queued", || redis::cmd("ZCARD").arg(&queue).query::<i64>(&mut raw).unwrap_or(0) == 1);
    // The reader's lease lapses (no release, no wake-up) and a plain holder
    // takes the free key; a plain waiter queues behind it: its mark makes
    // the waiting name a set of marks (as its try would).
    let _: () = redis::cmd("DEL").arg(&lock).query(&mut raw).unwrap();
    let held = block_on(backend(&readers).acquire("k", wait(0))).unwrap();
    let _: () = redis::cmd("DEL").arg(&waiting).query(&mut raw).unwrap();
    let other = "0000000000000000000000000000000c0";
    let member = mark(&server, &waiting, other, 1_000, 30_000);
    let writer_app = writer.join().unwrap();
    support::eventually("the withdraw ran", || redis::cmd("EXISTS").arg(&queue).query::<i64>(&mut raw).unwrap() == 0);
    let marks: Vec<String> = redis::cmd("ZRANGE").arg(&waiting).arg(0).arg(-1).query(&mut raw).unwrap_or_default();
    assert_eq!(marks, vec![member], "the writer's withdraw took the plain waiter's mark");
    assert!(block_on(held.release()).unwrap());
    let holder: Option<String> = redis::cmd("GET").arg(&lock).query(&mut raw).unwrap();
    assert_eq!(holder, Some(format!("h:{other}")), "the release handed the key to the plain waiter");
    drop(reader);
    block_on(writer_app.close());
    block_on(readers.close());
}

/// A waiter with two marks (a first try sent twice, its answer lost with
/// its connection: two tickets, one token) is handed the key once: the
/// hand-off takes every mark of its token, so its own release frees the
/// key instead of handing it to itself again (for nobody to take).
#[test]
fn a_waiter_with_two_marks_is_handed_the_key_once() {
    let server = support::redis_server::RedisServer::start();
    let (app, _) = support::open_redis(&server.url(), BACKEND, &[]);
    let (waiter_app, _) = support::open_redis(&server.url(), BACKEND, &[]);
    let (lock, waiting) = names("k");
    let held = block_on(backend(&app).acquire("k", wait(0))).unwrap();
    let waiter = std::thread::spawn(move || {
        let lease = block_on(backend(&waiter_app).acquire("k", wait(10_000))).expect("handed the key");
        (waiter_app, lease)
    });
    let mut raw = server.client();
    support::eventually("the waiter marked the key", || redis::cmd("ZCARD").arg(&waiting).query::<i64>(&mut raw).unwrap_or(0) == 1);
    let marks: Vec<String> = redis::cmd("ZRANGE").arg(&waiting).arg(0).arg(-1).query(&mut raw).unwrap();
    let token = marks[0].split_once(':').unwrap().1.to_owned();
    // The first try's mark, older than the one whose ticket the waiter knows
    // (by a second: the waiter marked a moment ago).
    mark(&server, &waiting, &token, 1_000_000, 30_000);
    assert!(block_on(held.release()).unwrap());
    let (waiter_app, lease) = waiter.join().unwrap();
    assert!(block_on(lease.release()).unwrap());
    let holder: Option<String> = redis::cmd("GET").arg(&lock).query(&mut raw).unwrap();
    assert_eq!(holder, None, "the waiter's own release handed the key back to its other mark");
    block_on(waiter_app.close());
    block_on(app.close());
}

/// A waiter with two marks (a first try sent twice: two tickets, one
/// token) that is granted the key without a hand-off (the holder died and
/// its lease lapsed, so the waiter's next try takes the free key) takes
/// back only the mark of the ticket it knows. Its own release must drop
/// its other mark, not hand the key to it, `h:<its token>`, which nobody
/// would take (the next waiter would stay out until that mark lapsed).
#[test]
fn a_waiter_with_two_marks_granted_a_free_key_does_not_hand_it_to_itself() {
    let server = support::redis_server::RedisServer::start();
    let (app, _) = support::open_redis(&server.url(), BACKEND, &[]);
    let (waiter_app, _) = support::open_redis(&server.url(), BACKEND, &[]);
    let (lock, waiting) = names("k");
    let held = block_on(backend(&app).acquire("k", wait(0))).unwrap();
    let waiter = std::thread::spawn(move || {
        let lease = block_on(backend(&waiter_app).acquire("k", wait(10_000))).expect("granted once the holder's lease lapsed");
        (waiter_app, lease)
    });
    let mut raw = server.client();
    support::eventually("the waiter marked the key", || redis::cmd("ZCARD").arg(&waiting).query::<i64>(&mut raw).unwrap_or(0) == 1);
    let marks: Vec<String> = redis::cmd("ZRANGE").arg(&waiting).arg(0).arg(-1).query(&mut raw).unwrap();
    let token = marks[0].split_once(':').unwrap().1.to_owned();
    // The first try's mark, older than the one whose ticket the waiter knows.
    mark(&server, &waiting, &token, 1_000_000, 30_000);
    // The holder dies: its lease lapses (no release, no hand-off).
    let _: () = redis::cmd("PEXPIRE").arg(&lock).arg(1).query(&mut raw).unwrap();
    let (waiter_app, lease) = waiter.join().unwrap();
    assert!(lease.fence() > held.fence());
    assert!(block_on(lease.release()).unwrap());
    let holder: Option<String> = redis::cmd("GET").arg(&lock).query(&mut raw).unwrap();
    assert_eq!(holder, None, "the waiter's own release handed the key to its other mark");
    block_on(waiter_app.close());
    block_on(app.close());
}

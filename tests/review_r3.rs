//! Adversarial review R3 of d191048 (a plain release, granted or refused
//! as `LEASE_LOST`, takes its token's marks out of both the waiting set and
//! the queue set; a refused release hands on `h:<own token>`; a counted try
//! of a token that holds is granted again), against private real servers.
//!
//! No way to two holders or a repeated fence was found (see the report);
//! what is here is liveness: a waiter that the sets stand for only by the
//! waiting name's existence (a reader, or any kinds waiter, behind a plain
//! holder marks a set of plain waiters' marks by extending it, not with a
//! member of its own) loses that standing when a mark removal that tells
//! nobody takes the set's last member, and the holder's release then
//! publishes nothing: the waiter sleeps until its safety-net poll. Three
//! removals do that: a refused release's (new in d191048; before it the key
//! was handed to the stale mark instead, no better), a withdraw's and a
//! grant's (older). Fixed: a removal that empties the waiting set leaves
//! the name as a '1' for the rest of the set's time (`unmark!` in
//! src/redis/scripts.rs), so the holder's release still publishes.

mod support;

use std::time::Instant;

use dokebi_lock::{AcquireOptions, LockMode};
use futures::executor::block_on;
use support::marks::{names, stale_mark, zmembers};
use support::redis_server::RedisServer;
use support::topology::backend;
use support::wait;

/// Marks live 2 x 5 s + 1 s; a waiter's safety-net poll is 5 s, past the
/// reader's 3 s wait below.
const POLLS: &[(&str, &str)] = &[("leaseMs", "10000"), ("pollIntervalMs", "5000"), ("notifyPollIntervalMs", "5000")];

fn shared(ms: u64) -> AcquireOptions {
    AcquireOptions { mode: LockMode::Shared, ..wait(ms) }
}

/// A reader in a third process waits behind plain holder B; the waiting
/// set's only member is a stale mark of T, a holder whose lease lapsed (a
/// first try sent twice left it, as in tests/redis_marks_review.rs). The
/// reader's try marked the key by extending that set (a set of plain
/// marks says "someone waits"). T's refused release (new in d191048) takes
/// T's mark out, and with it the set, telling nobody; B's release then
/// finds no waiting name and publishes nothing. The reader, told nothing,
/// sleeps until its poll (5 s, past its 3 s wait) while the key is free.
/// (Before d191048 B's release handed the key to T's mark instead, `h:T`,
/// and the reader woken found it held for nobody until the mark lapsed:
/// no better. Either way the key is free, or free for nobody, while a
/// waiter sleeps.)
#[test]
fn a_reader_behind_a_holder_is_woken_after_a_lapsed_holder_s_refused_release_took_the_last_mark() {
    let server = RedisServer::start();
    let open = || support::open_redis(&server.url(), POLLS, &[]).0;
    let (lapsed_app, holder_app, reader_app) = (open(), open(), open());
    let (lock, waiting, _) = names("k");
    let mut raw = server.client();
    let lapsed = block_on(backend(&lapsed_app).acquire("k", wait(0))).unwrap();
    let token = support::marks::holder_token(&server, &lock);
    stale_mark(&server, &waiting, &token, 1_000_000, 11_000);
    // T stalls past its lease; B takes the key.
    let _: () = redis::cmd("PEXPIRE").arg(&lock).arg(1).query(&mut raw).unwrap();
    support::eventually("the lease lapsed", || redis::cmd("EXISTS").arg(&lock).query::<i64>(&mut raw).unwrap() == 0);
    let held = block_on(backend(&holder_app).acquire("k", wait(0))).unwrap();
    let ttl_before: i64 = redis::cmd("PTTL").arg(&waiting).query(&mut raw).unwrap();
    let reader = backend(&reader_app);
    let reader = std::thread::spawn(move || block_on(reader.acquire("k", shared(3_000))));
    support::eventually("the reader marked the key (extended the set)", || {
        redis::cmd("PTTL").arg(&waiting).query::<i64>(&mut server.client()).unwrap() > ttl_before
    });
    let lost = block_on(lapsed.release()).expect_err("the lapsed lease's release is refused");
    assert_eq!(lost.code(), dokebi_lock::ErrorCode::LeaseLost);
    let left = zmembers(&server, &waiting);
    let released = Instant::now();
    assert!(block_on(held.release()).unwrap());
    let granted = reader.join().unwrap();
    assert!(
        granted.is_ok(),
        "the reader was not granted ({:?}, {:?} after the holder's release) though the key was free: \
         the waiting set held {left:?} after the refused release",
        granted.as_ref().err().map(|e| e.code()),
        released.elapsed()
    );
    drop(granted);
    for app in [lapsed_app, holder_app, reader_app] {
        block_on(app.close());
    }
}

/// The same loss through the withdraw (not from d191048: its mark removal
/// is as old as 7fc1651): a plain waiter W gives up behind holder B, and
/// its withdraw takes W's mark, the set's last member, telling nobody; a
/// reader that marked the key by extending the set is not woken by B's
/// release.
#[test]
fn a_reader_behind_a_holder_is_woken_after_a_plain_waiter_withdrew_the_last_mark() {
    let server = RedisServer::start();
    let open = || support::open_redis(&server.url(), POLLS, &[]).0;
    let (holder_app, leaving_app, reader_app) = (open(), open(), open());
    let (_, waiting, _) = names("k");
    let held = block_on(backend(&holder_app).acquire("k", wait(0))).unwrap();
    let leaving = backend(&leaving_app);
    let leaving = std::thread::spawn(move || block_on(leaving.acquire("k", wait(1_000))).map(|_| ()).map_err(|e| e.code()));
    support::eventually("the plain waiter marked the key", || zmembers(&server, &waiting).len() == 1);
    let reader = backend(&reader_app);
    let start = Instant::now();
    let reader = std::thread::spawn(move || block_on(reader.acquire("k", shared(4_000))));
    assert_eq!(leaving.join().unwrap(), Err(dokebi_lock::ErrorCode::WaitTimeout));
    support::eventually("the withdraw took the last mark", || zmembers(&server, &waiting).is_empty());
    let released = Instant::now();
    assert!(block_on(held.release()).unwrap());
    let granted = reader.join().unwrap();
    assert!(
        granted.is_ok(),
        "the reader was not granted ({:?}, {:?} after the holder's release, {:?} after it began) though the key was free",
        granted.as_ref().err().map(|e| e.code()),
        released.elapsed(),
        start.elapsed()
    );
    drop(granted);
    for app in [holder_app, leaving_app, reader_app] {
        block_on(app.close());
    }
}

/// The same loss through a grant (not from d191048 either): plain waiter W
/// is granted the key its holder's lease left (nobody released it, so
/// nobody was told) and takes back its mark, the set's last member; a
/// reader that marked the key by extending the set, after W, is not woken
/// by W's release and waits for its own poll (5 s after its try).
#[test]
fn a_reader_behind_a_holder_is_woken_after_a_plain_waiter_s_grant_took_the_last_mark() {
    let server = RedisServer::start();
    let open = || support::open_redis(&server.url(), POLLS, &[]).0;
    let (holder_app, waiter_app, reader_app) = (open(), open(), open());
    let (lock, waiting, _) = names("k");
    let mut raw = server.client();
    let held = block_on(backend(&holder_app).acquire("k", wait(0))).unwrap();
    let waiter = backend(&waiter_app);
    let waiter = std::thread::spawn(move || block_on(waiter.acquire("k", wait(8_000))).expect("granted once the holder's lease was gone"));
    support::eventually("the plain waiter marked the key", || zmembers(&server, &waiting).len() == 1);
    // The reader's first try comes 3 s after the waiter's, so its poll
    // comes 3 s after the waiter's too.
    std::thread::sleep(std::time::Duration::from_secs(3));
    let ttl_before: i64 = redis::cmd("PTTL").arg(&waiting).query(&mut raw).unwrap();
    let reader = backend(&reader_app);
    let reader = std::thread::spawn(move || block_on(reader.acquire("k", shared(6_000))));
    support::eventually("the reader marked the key (extended the set)", || {
        redis::cmd("PTTL").arg(&waiting).query::<i64>(&mut server.client()).unwrap() > ttl_before
    });
    // The holder's lease is gone without a release (it died).
    let _: () = redis::cmd("DEL").arg(&lock).query(&mut raw).unwrap();
    let lease = waiter.join().unwrap();
    let left = zmembers(&server, &waiting);
    let released = Instant::now();
    assert!(block_on(lease.release()).unwrap());
    let granted = reader.join().unwrap();
    let after = released.elapsed();
    assert!(
        granted.is_ok() && after < std::time::Duration::from_secs(1),
        "the reader was granted {:?} only {after:?} after the waiter's release (its poll): the waiting set held {left:?} after the grant",
        granted.as_ref().map(|_| ()).map_err(|e| e.code()),
    );
    drop(granted);
    drop(held);
    for app in [holder_app, waiter_app, reader_app] {
        block_on(app.close());
    }
}

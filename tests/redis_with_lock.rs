//! `with_lock` on redis leases: renewals driven by the driver's own thread
//! keep a long section's lease, and a lease lost during the section aborts
//! the section's signal and fails the call with `LEASE_LOST`.

mod support;

use std::time::{Duration, Instant};

use dokebi_lock::{ErrorCode, WithLockOptions};
use futures::executor::block_on;
use redis::Commands;
use support::redis_server::RedisServer;
use support::{open_redis, wait};

#[test]
fn auto_renew_keeps_a_section_longer_than_the_lease_exclusive_even_when_the_caller_stalls() {
    let server = RedisServer::start();
    let (a, _) = open_redis(&server.url(), &[("leaseMs", "300")], &[("commandTimeoutMs", "250")]);
    let (b, _) = open_redis(&server.url(), &[("leaseMs", "300")], &[("commandTimeoutMs", "250")]);
    let other = b.backend("shared").unwrap();
    let output = block_on(a.backend("shared").unwrap().with_lock("job", wait(0), |section| async move {
        // Block the caller's executor outright: renewals must not depend on it.
        for _ in 0..4 {
            std::thread::sleep(Duration::from_millis(250));
            let busy = std::thread::scope(|s| s.spawn(|| block_on(other.acquire("job", wait(0))).unwrap_err().code()).join().unwrap());
            assert_eq!(busy, ErrorCode::LockBusy);
        }
        assert!(!section.signal.is_aborted());
        "done"
    }));
    assert_eq!(output.unwrap(), "done");
    assert!(server.keys().iter().all(|k| !k.starts_with("test:lock:")), "released after the section");
}

#[test]
fn without_auto_renew_a_section_outliving_its_lease_is_lease_lost() {
    let server = RedisServer::start();
    let (a, _) = open_redis(&server.url(), &[("leaseMs", "100")], &[("commandTimeoutMs", "90")]);
    let options = WithLockOptions { acquire: wait(0), auto_renew: false };
    let result = block_on(a.backend("shared").unwrap().with_lock("job", options, |_| async {
        std::thread::sleep(Duration::from_millis(250));
        "finished, but not exclusively"
    }));
    assert_eq!(result.unwrap_err().code(), ErrorCode::LeaseLost);
}

#[test]
fn without_auto_renew_the_signal_still_aborts_when_the_lease_runs_out() {
    let server = RedisServer::start();
    let (a, _) = open_redis(&server.url(), &[("leaseMs", "200")], &[("commandTimeoutMs", "150")]);
    let options = WithLockOptions { acquire: wait(0), auto_renew: false };
    let result = block_on(a.backend("shared").unwrap().with_lock("job", options, |section| async move {
        let started = Instant::now();
        while !section.signal.is_aborted() {
            assert!(started.elapsed() < Duration::from_secs(2), "the signal never fired");
            std::thread::sleep(Duration::from_millis(5));
        }
    }));
    assert_eq!(result.unwrap_err().code(), ErrorCode::LeaseLost);
}

#[test]
fn close_during_a_section_aborts_its_signal_and_fails_with_lease_lost() {
    // Close gives the section's key back: another process can hold it while
    // the section still runs.
    let server = RedisServer::start();
    let (a, _) = open_redis(&server.url(), &[("leaseMs", "10000")], &[]);
    let (b, _) = open_redis(&server.url(), &[("leaseMs", "10000")], &[]);
    let (a, b) = (&a, &b);
    let result = block_on(a.backend("shared").unwrap().with_lock("job", wait(0), |section| async move {
        a.close().await;
        let other = b.backend("shared").unwrap().acquire("job", wait(0)).await.expect("close gave the key back");
        let started = Instant::now();
        while !section.signal.is_aborted() {
            assert!(started.elapsed() < Duration::from_secs(2), "the signal never fired");
            std::thread::sleep(Duration::from_millis(5));
        }
        other
    }));
    assert_eq!(result.unwrap_err().code(), ErrorCode::LeaseLost);
}

#[test]
fn close_during_a_renewal_still_aborts_the_signal() {
    // A renewal in flight when close starts: the watch looks at the lease
    // only once the renewal answers, after close has released it. A watch
    // that counted only held leases as lost left the signal quiet for good
    // (CI's Node run: 'expected a LockError LEASE_LOST, got undefined').
    let server = RedisServer::start();
    let (a, _) = open_redis(&server.url(), &[("leaseMs", "900")], &[("commandTimeoutMs", "800")]);
    let (b, _) = open_redis(&server.url(), &[("leaseMs", "900")], &[("commandTimeoutMs", "800")]);
    let (a, b) = (&a, &b);
    let mut client = server.client();
    let result = block_on(a.backend("shared").unwrap().with_lock("job", wait(0), |section| async move {
        // Writes stall for 400 ms; the renewal due at 300 ms waits behind it.
        let _: () = redis::cmd("CLIENT").arg("PAUSE").arg(400).arg("WRITE").query(&mut client).unwrap();
        std::thread::sleep(Duration::from_millis(320));
        a.close().await;
        let other = b.backend("shared").unwrap().acquire("job", wait(2000)).await.expect("close gave the key back");
        let started = Instant::now();
        while !section.signal.is_aborted() {
            assert!(started.elapsed() < Duration::from_secs(2), "the signal never fired");
            std::thread::sleep(Duration::from_millis(5));
        }
        other
    }));
    assert_eq!(result.unwrap_err().code(), ErrorCode::LeaseLost);
}

#[test]
fn a_lease_taken_over_during_the_section_aborts_its_signal_and_fails_with_lease_lost() {
    let server = RedisServer::start();
    let (a, _) = open_redis(&server.url(), &[("leaseMs", "300")], &[("commandTimeoutMs", "250")]);
    let mut client = server.client();
    let result = block_on(a.backend("shared").unwrap().with_lock("job", wait(0), |section| async move {
        // Another owner overwrites the lock (as after an expiry and takeover).
        let lock_key: String = client.keys::<_, Vec<String>>("test:lock:*").unwrap().remove(0);
        let _: () = client.set(&lock_key, "someone-else").unwrap();
        let started = Instant::now();
        while !section.signal.is_aborted() {
            assert!(started.elapsed() < Duration::from_secs(2), "the signal never fired");
            std::thread::sleep(Duration::from_millis(5));
        }
        // Within one renewal interval (leaseMs / 3) and its round trip.
        assert!(started.elapsed() < Duration::from_millis(300), "fired after {:?}", started.elapsed());
        "the section itself succeeded"
    }));
    assert_eq!(result.unwrap_err().code(), ErrorCode::LeaseLost);
    let lost = a.status()["shared"].lost;
    assert!(lost >= 1, "the loss is counted: {lost}");
}

//! A policy's acquires of one key while this process's tries of it on an
//! unreachable member are under way: they pause until those tries end,
//! then follow the rule's order to the fallback (or where a try was
//! granted), instead of being refused `NO_ELIGIBLE_BACKEND` ("this process
//! holds the key there, or is acquiring it"). The fault suite's
//! `policy-redis-down` counted 6 to 9 such refusals a rule in a 3 s run.
//!
//! The unreachable member is Redis at a port whose listener's queue is full
//! (`support::fall_back::unreachable_port`): each connect ends after
//! `connectTimeoutMs` with no socket up, as one to a host that is down.

mod support;

use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use dokebi_lock::abort::AbortController;
use dokebi_lock::{AcquireOptions, ErrorCode};
use futures::executor::block_on;
use support::fall_back::FallBackToHost;
use support::wait;

/// Eight acquires of one key at once: they try `db` together, each try
/// fails when its connect times out, in any order; every one of them must
/// be served by `host` in turn within its wait. Before, an acquire whose
/// try failed while another's was still under way on `db` (or had already
/// moved on to `host`) was refused.
#[test]
fn acquires_of_a_key_whose_tries_fail_together_are_all_served_by_the_fallback() {
    let policy = Arc::new(FallBackToHost::over_unreachable(300, 5000));
    let start = Arc::new(Barrier::new(8));
    let acquires: Vec<_> = (0..8)
        .map(|_| {
            let (policy, start) = (policy.clone(), start.clone());
            thread::spawn(move || {
                start.wait();
                let lease = block_on(policy.locks().acquire("k", wait(5000)))?;
                let served = lease.served().unwrap().member.name.clone();
                thread::sleep(Duration::from_millis(10));
                assert!(block_on(lease.release()).unwrap());
                Ok::<_, dokebi_lock::LockError>(served)
            })
        })
        .collect();
    let outcomes: Vec<_> = acquires.into_iter().map(|a| a.join().unwrap()).collect();
    let refused: Vec<_> = outcomes.iter().filter_map(|o| o.as_ref().err()).map(|e| format!("{:?}: {}", e.code(), e.message())).collect();
    assert!(refused.is_empty(), "{} of 8 acquires failed: {refused:?}", refused.len());
    assert!(outcomes.iter().all(|o| o.as_ref().is_ok_and(|served| served == "host")), "{outcomes:?}");
}

/// An acquire's thread: the member that served it or its error's code,
/// and how long it took.
type Paused = thread::JoinHandle<(Result<String, ErrorCode>, Duration)>;

/// `db` passed over (its first try failed), then probed once its cooldown
/// passed: the probe's connect takes 1.5 s. Answers the policy, once an
/// acquire of `k` pauses for the probe (its own thread: its outcome, and
/// how long it took).
fn paused_for_a_probe(options: AcquireOptions) -> (Arc<FallBackToHost>, Paused) {
    let policy = Arc::new(FallBackToHost::over_unreachable(1500, 200));
    policy.find_db_unreachable();
    thread::sleep(Duration::from_millis(300));
    let probe = {
        let policy = policy.clone();
        thread::spawn(move || {
            if let Ok(lease) = block_on(policy.locks().acquire("k", wait(5000))) {
                assert_eq!(lease.served().unwrap().member.name, "host");
                let _ = block_on(lease.release());
            }
        })
    };
    // The probe is under way (its connect outlasts this).
    thread::sleep(Duration::from_millis(200));
    let paused = {
        let policy = policy.clone();
        thread::spawn(move || {
            let started = Instant::now();
            let outcome = block_on(policy.locks().acquire("k", options))
                .map(|lease| lease.served().unwrap().member.name.clone())
                .map_err(|error| error.code());
            (outcome, started.elapsed())
        })
    };
    thread::sleep(Duration::from_millis(200));
    drop(probe);
    (policy, paused)
}

/// The paused acquire is served by `host` once the probe failed (about
/// 1.3 s after it started), not refused.
#[test]
fn an_acquire_paused_for_a_probe_is_served_by_the_fallback_once_the_probe_failed() {
    let (_policy, paused) = paused_for_a_probe(wait(5000));
    let (outcome, took) = paused.join().unwrap();
    assert_eq!(outcome, Ok("host".to_owned()), "after {took:?}");
}

/// Its signal ends the pause at once.
#[test]
fn an_acquire_paused_for_a_probe_ends_aborted_at_once() {
    let abort = AbortController::new();
    let (_policy, paused) = paused_for_a_probe(AcquireOptions { signal: Some(abort.signal()), ..wait(5000) });
    let aborted = Instant::now();
    abort.abort();
    let (outcome, _) = paused.join().unwrap();
    assert_eq!(outcome, Err(ErrorCode::Aborted));
    assert!(aborted.elapsed() < Duration::from_millis(500), "ABORTED {:?} after the abort", aborted.elapsed());
}

/// Closing the provider ends the pause `CLOSED`, without waiting out the
/// probe's connect or its own wait.
#[test]
fn an_acquire_paused_for_a_probe_ends_closed_at_close() {
    let (policy, paused) = paused_for_a_probe(wait(30_000));
    let closed = Instant::now();
    block_on(policy.provider().close());
    let (outcome, _) = paused.join().unwrap();
    assert_eq!(outcome, Err(ErrorCode::Closed));
    assert!(closed.elapsed() < Duration::from_millis(1000), "CLOSED {:?} after close", closed.elapsed());
}

/// A try without a wait is refused at once while the probe is under way,
/// `details.tried` naming `db` with `LOCK_BUSY` (docs/policy.md).
#[test]
fn a_try_without_a_wait_during_a_probe_is_refused_at_once_as_placed() {
    let (policy, paused) = paused_for_a_probe(wait(5000));
    let started = Instant::now();
    let refused = block_on(policy.locks().acquire("k", wait(0))).unwrap_err();
    assert!(started.elapsed() < Duration::from_millis(500), "refused after {:?}", started.elapsed());
    assert_eq!(refused.code(), ErrorCode::NoEligibleBackend, "{refused}");
    let tried = refused.details().unwrap()["tried"].as_array().unwrap().clone();
    assert!(tried.iter().any(|t| t["backend"] == "db" && t["code"] == "LOCK_BUSY"), "{tried:?}");
    assert_eq!(paused.join().unwrap().0, Ok("host".to_owned()));
}

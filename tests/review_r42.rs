//! Review R42 (53e27e7: an acquire pauses while this process's tries of
//! its key are under way on a member that could not serve at its last try).
//!
//! Finding (gap, not a regression: the `Err(())` arm of `next_member` is
//! unchanged): the pause covers one member only. An `acquire_many` whose
//! keys have only tries in this process, one on the preferred member while
//! it is probed (down) and one on the fallback, is refused
//! `NO_ELIGIBLE_BACKEND` ("this process holds some of the keys on one member
//! and others on another") within a millisecond, its 5 s wait untouched,
//! although docs/policy.md says such an acquire "neither joins them nor is
//! refused: it pauses"; once the probe fails both keys are on the fallback
//! and it would be served there.
//! `an_acquire_of_two_keys_one_being_probed_pauses_instead_of_being_refused`
//! (fails on 53e27e7; Node likewise: npm/test/review-r42.test.js). Fixed:
//! an acquire pauses while any of its keys has only tries on a member that
//! is down, whichever members the others are on.
//!
//! Minor, fixed with it: an acquire refused after a pause kept the pause's
//! entry in `details.tried`; one whose signal had aborted before a pause
//! with no wait left was `NO_ELIGIBLE_BACKEND`, not `ABORTED`.
//!
//! Review R43 (09f685f, the fix above): a pause for a try that waits for the
//! pausing task. `x: [db, host]`; H holds `d` on db; a blip leaves db down
//! in `x` (its skip stays set until a try there gets an answer); T's
//! `[b, d]` goes to db for the lease of `d` and waits in Redis for H; H's
//! `[a, b]` (`a` held on host) found `b` with only T's try on db, db down,
//! and paused for it: H waited for T, T for H, until T's wait ended
//! (`WAIT_TIMEOUT` after 3 s, H then served after 2.7 s; for ever without
//! waits). Before 09f685f H was refused at once (keys on two members).
//! `a_pause_never_waits_for_a_try_that_went_for_a_lease_of_this_process`
//! (failed on 09f685f). Fixed: a try that went to its member because some
//! of its keys are leased there (it may wait for this process's own
//! holders) never makes an acquire pause.
//!
//! Controls (pass; `--ignored`, 20 s each): a private Redis behind a proxy
//! that flaps (connects refused, connections cut; the data kept), a file
//! member, policies `x: [db, host]` and `y: [host, db]`, six threads of
//! `k`, `k2` and `[k, k2]` with waits 0..800 ms, reprobe cooldown 0 and
//! 150 ms: no two holders of a key in the process, no repeated or
//! decreasing fence per member, no acquire past its wait + 1.5 s.

mod support;

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use dokebi_lock::{AcquireOptions, ErrorCode, Provider};
use futures::executor::block_on;
use support::redis_server::RedisServer;
use support::rng::Rng;

/// A TCP proxy to `target` on a port of its own: while down it listens on
/// nothing (connects are refused) and has cut every connection it carried.
struct Proxy {
    port: u16,
    up: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
}

impl Proxy {
    fn start(target: u16) -> Proxy {
        let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let up = Arc::new(AtomicBool::new(true));
        let stop = Arc::new(AtomicBool::new(false));
        let (up2, stop2) = (up.clone(), stop.clone());
        thread::spawn(move || {
            let conns: Arc<Mutex<Vec<TcpStream>>> = Arc::default();
            let mut listener: Option<TcpListener> = None;
            while !stop2.load(Ordering::SeqCst) {
                if up2.load(Ordering::SeqCst) {
                    if listener.is_none() {
                        let l = TcpListener::bind(("127.0.0.1", port)).unwrap();
                        l.set_nonblocking(true).unwrap();
                        listener = Some(l);
                    }
                    match listener.as_ref().unwrap().accept() {
                        Ok((client, _)) => {
                            client.set_nonblocking(false).unwrap();
                            let server = TcpStream::connect(("127.0.0.1", target)).unwrap();
                            client.set_nodelay(true).unwrap();
                            server.set_nodelay(true).unwrap();
                            {
                                let mut c = conns.lock().unwrap();
                                c.push(client.try_clone().unwrap());
                                c.push(server.try_clone().unwrap());
                            }
                            for (mut from, mut to) in [(client.try_clone().unwrap(), server.try_clone().unwrap()), (server, client)] {
                                thread::spawn(move || {
                                    let mut buf = [0u8; 16384];
                                    loop {
                                        match from.read(&mut buf) {
                                            Ok(0) | Err(_) => break,
                                            Ok(n) => {
                                                if to.write_all(&buf[..n]).is_err() {
                                                    break;
                                                }
                                            }
                                        }
                                    }
                                    let _ = to.shutdown(Shutdown::Both);
                                    let _ = from.shutdown(Shutdown::Both);
                                });
                            }
                        }
                        Err(_) => thread::sleep(Duration::from_millis(1)),
                    }
                } else {
                    listener = None;
                    for c in conns.lock().unwrap().drain(..) {
                        let _ = c.shutdown(Shutdown::Both);
                    }
                    thread::sleep(Duration::from_millis(1));
                }
            }
        });
        Proxy { port, up, stop }
    }

    fn set_up(&self, up: bool) {
        self.up.store(up, Ordering::SeqCst);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

fn dir(tag: &str) -> String {
    std::env::temp_dir().join(format!("dokebi-r42-{}-{tag}", std::process::id())).display().to_string()
}

fn provider(port: u16, cooldown_ms: u32, tag: &str) -> Provider {
    Provider::from_yaml(&format!(
        "schemaVersion: 1\noptions:\n  dokebi-redis:\n    connections:\n      main: {{ url: 'redis://127.0.0.1:{port}/0', connectTimeoutMs: 100, commandTimeoutMs: 500 }}\n  dokebi-lock:\n    backends:\n      db: {{ driver: redis, connection: main, namespace: r42, leaseMs: 30000 }}\n      host: {{ driver: file, directory: '{}' }}\n      x: {{ driver: policy, reprobeCooldownMs: {cooldown_ms}, default: {{ backends: [db, host], minTier: host, onUnavailable: fallBack }} }}\n      y: {{ driver: policy, reprobeCooldownMs: {cooldown_ms}, default: {{ backends: [host, db], minTier: host, onUnavailable: fallBack }} }}\n",
        dir(tag)
    ))
    .unwrap()
}

/// The fences granted, per (member, key), in order.
type Fences = HashMap<(String, String), Vec<u64>>;

fn stress(cooldown_ms: u32, tag: &str, seconds: u64) {
    let redis = RedisServer::start();
    let proxy = Arc::new(Proxy::start(redis.port()));
    let provider = Arc::new(provider(proxy.port, cooldown_ms, tag));
    let holders: Arc<HashMap<&'static str, AtomicUsize>> =
        Arc::new([("k", AtomicUsize::new(0)), ("k2", AtomicUsize::new(0))].into_iter().collect());
    let fences: Arc<Mutex<Fences>> = Arc::default();
    let violations: Arc<Mutex<Vec<String>>> = Arc::default();
    let outcomes: Arc<Mutex<HashMap<String, usize>>> = Arc::default();
    let end = Instant::now() + Duration::from_secs(seconds);
    let flapper = {
        let proxy = proxy.clone();
        thread::spawn(move || {
            let mut rng = Rng::new(7);
            while Instant::now() < end {
                proxy.set_up(false);
                thread::sleep(Duration::from_millis(50 + rng.below(250)));
                proxy.set_up(true);
                thread::sleep(Duration::from_millis(50 + rng.below(400)));
            }
            proxy.set_up(true);
        })
    };
    let workers: Vec<_> = (0..6u64)
        .map(|i| {
            let (provider, holders, fences, violations, outcomes) =
                (provider.clone(), holders.clone(), fences.clone(), violations.clone(), outcomes.clone());
            thread::spawn(move || {
                let mut rng = Rng::new((i + 1) * 7919);
                while Instant::now() < end {
                    let policy = if rng.below(2) == 0 { "x" } else { "y" };
                    let keys: &[&'static str] = match rng.below(3) {
                        0 => &["k"],
                        1 => &["k", "k2"],
                        _ => &["k2"],
                    };
                    let wait_ms = [0, 5, 50, 300, 800][rng.below(5) as usize];
                    let backend = provider.backend(policy).unwrap();
                    let options = AcquireOptions { wait_timeout: Some(Duration::from_millis(wait_ms)), ..AcquireOptions::default() };
                    let started = Instant::now();
                    let got = if keys.len() == 1 {
                        block_on(backend.acquire(keys[0], options))
                    } else {
                        block_on(backend.acquire_many(keys, options))
                    };
                    let took = started.elapsed();
                    // Slack: a connect (100 ms), a command (500 ms) and scheduling.
                    if took > Duration::from_millis(wait_ms + 1500) {
                        violations
                            .lock()
                            .unwrap()
                            .push(format!("{policy} {keys:?} wait {wait_ms} ms took {took:?}: {:?}", got.as_ref().err()));
                    }
                    match got {
                        Ok(lease) => {
                            *outcomes.lock().unwrap().entry(format!("served by {}", lease.served().unwrap().member.name)).or_default() += 1;
                            for key in keys {
                                let now = holders[key].fetch_add(1, Ordering::SeqCst) + 1;
                                if now > 1 {
                                    violations
                                        .lock()
                                        .unwrap()
                                        .push(format!("{now} holders of {key} ({policy} on {})", lease.served().unwrap().member.name));
                                }
                            }
                            let member = lease.served().unwrap().member.name.clone();
                            for (key, fence) in lease.fences() {
                                let mut f = fences.lock().unwrap();
                                let seen = f.entry((member.clone(), key.to_owned())).or_default();
                                if seen.last().is_some_and(|&last| last >= fence) {
                                    violations.lock().unwrap().push(format!("fence {fence} of {key} on {member} after {:?}", seen.last()));
                                }
                                seen.push(fence);
                            }
                            thread::sleep(Duration::from_millis(rng.below(4)));
                            for key in keys {
                                holders[key].fetch_sub(1, Ordering::SeqCst);
                            }
                            let _ = block_on(lease.release());
                        }
                        Err(error) => {
                            *outcomes.lock().unwrap().entry(format!("{:?}", error.code())).or_default() += 1;
                            if error.code() == ErrorCode::NoEligibleBackend && wait_ms >= 300 {
                                *outcomes.lock().unwrap().entry(format!("NEB with wait: {}", error.message())).or_default() += 1;
                            }
                        }
                    }
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    flapper.join().unwrap();
    let outcomes = outcomes.lock().unwrap().clone();
    eprintln!("outcomes ({tag}): {outcomes:#?}");
    let violations = violations.lock().unwrap().clone();
    assert!(violations.is_empty(), "{} violations: {violations:#?}", violations.len());
    block_on(provider.close());
}

#[test]
#[ignore = "control, a 20 s stress: run with --ignored"]
fn flapping_preferred_member_cooldown_0() {
    stress(0, "c0", 20);
}

#[test]
#[ignore = "control, a 20 s stress: run with --ignored"]
fn flapping_preferred_member_cooldown_150() {
    stress(150, "c150", 20);
}

/// An acquire of two keys, one of which only has a probe of `db` under way
/// (db down), the other a try waiting on `host`: the doc's promise (an
/// acquire of a key with only tries on a member that could not serve
/// pauses, neither joins nor is refused) is not kept for several keys: it
/// is refused at once, with most of its 5 s wait left, although once the
/// probe failed both keys are on `host` and it would be served there.
#[test]
fn an_acquire_of_two_keys_one_being_probed_pauses_instead_of_being_refused() {
    use support::wait;
    let policy = Arc::new(support::fall_back::FallBackToHost::over_unreachable(1500, 200));
    policy.find_db_unreachable();
    thread::sleep(Duration::from_millis(300));
    // `a`: a probe of db (its connect takes 1.5 s).
    let probe = {
        let policy = policy.clone();
        thread::spawn(move || {
            let lease = block_on(policy.locks().acquire("a", wait(5000))).unwrap();
            let served = lease.served().unwrap().member.name.clone();
            thread::sleep(Duration::from_millis(50));
            assert!(block_on(lease.release()).unwrap());
            served
        })
    };
    thread::sleep(Duration::from_millis(100));
    // `b`: held on host outside the policies (another route to the name),
    // a policy acquire of it waiting there.
    let direct = block_on(policy.provider().backend("host").unwrap().acquire("b", wait(1000))).unwrap();
    let waiter = {
        let policy = policy.clone();
        thread::spawn(move || {
            let lease = block_on(policy.locks().acquire("b", wait(5000))).unwrap();
            let served = lease.served().unwrap().member.name.clone();
            thread::sleep(Duration::from_millis(50));
            assert!(block_on(lease.release()).unwrap());
            served
        })
    };
    thread::sleep(Duration::from_millis(100));
    let releaser = thread::spawn(move || {
        thread::sleep(Duration::from_millis(800));
        assert!(block_on(direct.release()).unwrap());
    });
    let started = Instant::now();
    let both = block_on(policy.locks().acquire_many(&["a", "b"], wait(5000)));
    let took = started.elapsed();
    let outcome =
        both.as_ref().map(|lease| lease.served().unwrap().member.name.clone()).map_err(|e| format!("{:?}: {}", e.code(), e.message()));
    if let Ok(lease) = both {
        let _ = block_on(lease.release());
    }
    releaser.join().unwrap();
    assert_eq!(probe.join().unwrap(), "host");
    assert_eq!(waiter.join().unwrap(), "host");
    assert_eq!(outcome, Ok("host".to_owned()), "after {took:?}");
}

/// Review R43: H holds `d` through `x` (on db), `a` is held on host; db is
/// down in `x` after a blip; T's `[b, d]` waits on db for H's `d`. H's
/// `[a, b]` must not pause for T's try (refused at once, its keys on two
/// members, as before 09f685f), and T is served once H lets `d` go.
#[test]
fn a_pause_never_waits_for_a_try_that_went_for_a_lease_of_this_process() {
    use support::wait;
    let redis = RedisServer::start();
    let proxy = Proxy::start(redis.port());
    let provider = Arc::new(provider(proxy.port, 0, "r43"));
    let (x, y) = (provider.backend("x").unwrap(), provider.backend("y").unwrap());
    let d = block_on(x.acquire("d", wait(1000))).unwrap();
    let a = block_on(y.acquire("a", wait(1000))).unwrap();
    assert_eq!((d.served().unwrap().member.name.as_str(), a.served().unwrap().member.name.as_str()), ("db", "host"));
    // A blip: one acquire through `x` finds db unreachable (x now has it down).
    proxy.set_up(false);
    thread::sleep(Duration::from_millis(50));
    drop(block_on(x.acquire("z", wait(300))));
    proxy.set_up(true);
    thread::sleep(Duration::from_millis(100));
    let t = {
        let x = x.clone();
        thread::spawn(move || {
            let started = Instant::now();
            let got = block_on(x.acquire_many(&["b", "d"], wait(3000))).map(|lease| lease.served().unwrap().member.name.clone());
            (got.map_err(|e| e.code()), started.elapsed())
        })
    };
    thread::sleep(Duration::from_millis(300));
    let started = Instant::now();
    let h =
        block_on(x.acquire_many(&["a", "b"], wait(3000))).map(|lease| lease.served().unwrap().member.name.clone()).map_err(|e| e.code());
    let took = started.elapsed();
    drop(d);
    drop(a);
    let (t, t_took) = t.join().unwrap();
    assert!(
        took < Duration::from_millis(1000),
        "H paused {took:?} for T's try, which waited for H's own lease of d: {h:?}; T: {t:?} after {t_took:?}"
    );
    assert_eq!(t, Ok("db".to_owned()), "T after {t_took:?}");
}

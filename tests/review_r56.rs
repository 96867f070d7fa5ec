//! Review R56 (round 6 of `Backend::force_release` on Redis), against a real
//! server: the working tree's protocol (`OBSERVE`: the key's fence counter,
//! made where there is none, and `holders_seen`, a digest of what its lock
//! holds; then `FORCE_RELEASE`, which runs only while both are as read).
//!
//! Finding (the test below failed against the code under review; it passes
//! since the read raises the counter to the end of its second, replicated
//! as a reservation: every grant after the read then writes a new
//! reservation with its lock, so no copy a restore brings back holds the
//! value read beside a holder granted since, whatever its token):
//! - `redis_a_split_claim_given_back_and_granted_again_keeps_the_digest_and_a_late_break_removes_it`:
//!   `holders_seen!` says every grant changes the digest "(each has a fresh
//!   token)". It is one token per claim, not per grant: every try of a
//!   waiting acquire sends the same token, and a claim that is given back
//!   between tries is granted again with it, so its lock reads the same
//!   (`s<token>`) before and after. The ordinary case: a Redis Cluster
//!   claim of keys in two slots (one script per slot, `Claim::take`) takes
//!   the first slot's key, finds the second busy, gives the first back
//!   (`give_back_groups`) and waits; its next try takes the first again,
//!   same token (also: a plain try sent twice, `give_back_untold`, then
//!   its next try). So R55's restore (an exact copy of the counter `c` the
//!   break read, then a grant in `c`'s second that replicates only its lock)
//!   still brings back exactly `(c, digest)` beside a holder granted after
//!   the read, when that holder is the claim the break read mid-try: the
//!   late break matches and removes it, and N is granted beside it. The
//!   restore is put back by hand here, as in R55's deterministic test.
//!   Mixing something per grant into what the digest reads (e.g. the lock's
//!   fence written with it, or the counter's value at the grant kept in the
//!   lock) would close it; the token alone cannot.

#[path = "faults/proxy.rs"]
mod proxy;
mod support;

use std::net::TcpListener;
use std::thread;
use std::time::{Duration, Instant};

use dokebi_lock::ErrorCode;
use futures::executor::block_on;
use proxy::Proxy;
use support::redis_server::RedisServer;
use support::{backend, open_redis_at, take, wait};

fn get(server: &RedisServer, name: &str) -> Option<String> {
    redis::cmd("GET").arg(name).query(&mut server.client()).unwrap()
}

fn slot(server: &RedisServer, name: &str) -> u16 {
    redis::cmd("CLUSTER").arg("KEYSLOT").arg(name).query(&mut server.client()).unwrap()
}

/// Interleaving (a one-node Cluster, every client through one proxy, whose
/// latency widens the claim's try):
/// 1. B holds `second`. T asks for `first` and `second` (two slots, so two
///    scripts): `first` granted (fence c), `second` busy.
/// 2. The operator's break reads (c, s<T>) while T holds `first`; both
///    attempts of its break are kept by the proxy: `OUTCOME_UNKNOWN`.
/// 3. T gives `first` back and waits; B releases; T is granted both, same
///    token, and told so.
/// 4. The restore: `first`'s counter back to c (an exact copy of c, and T's
///    give-back and grant in c's second replicated their lock writes only).
/// 5. The break, delivered late, finds (c, s<T>) and removes T: N is granted
///    `first` while T holds it.
///
/// Since a plain lock keeps its holder's fence (`<token>:<fence>`), T's
/// grant again also changes the digest the break compares.
#[test]
fn redis_a_split_claim_given_back_and_granted_again_keeps_the_digest_and_a_late_break_removes_it() {
    let bus = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port().to_string();
    let server = RedisServer::start_persistent(&[
        "--cluster-enabled",
        "yes",
        "--cluster-config-file",
        "nodes.conf",
        "--cluster-port",
        &bus,
        "--cluster-announce-ip",
        "127.0.0.1",
    ]);
    let link = Proxy::start(server.port(), Duration::ZERO);
    let _: () = redis::cmd("CONFIG").arg("SET").arg("cluster-announce-port").arg(link.port()).query(&mut server.client()).unwrap();
    let _: () = redis::cmd("CLUSTER").arg("ADDSLOTSRANGE").arg(0).arg(16383).query(&mut server.client()).unwrap();
    let end = Instant::now() + Duration::from_secs(10);
    loop {
        let info: String = redis::cmd("CLUSTER").arg("INFO").query(&mut server.client()).unwrap();
        let slots: redis::Value = redis::cmd("CLUSTER").arg("SLOTS").query(&mut server.client()).unwrap();
        if info.contains("cluster_state:ok") && format!("{slots:?}").contains(&link.port().to_string()) {
            break;
        }
        assert!(Instant::now() < end, "the one-node cluster is ok: {info} {slots:?}");
        thread::sleep(Duration::from_millis(50));
    }
    let endpoint = format!("cluster: {{ nodes: [{}] }}", link.url().trim_end_matches("/0"));
    let lease = [("leaseMs", "30000")];
    let timeouts = [("connectTimeoutMs", "3000"), ("commandTimeoutMs", "3000")];
    let (operator, _) = open_redis_at(&endpoint, &lease, &timeouts);
    let (claimer, _) = open_redis_at(&endpoint, &lease, &timeouts);
    let (holder, _) = open_redis_at(&endpoint, &lease, &timeouts);
    let (next, _) = open_redis_at(&endpoint, &lease, &timeouts);
    let (operator_b, claimer_b, holder_b, next_b) = (backend(&operator), backend(&claimer), backend(&holder), backend(&next));

    // `first`: the key of T's first script (groups go in lock-name order).
    let keys = ["r56-x", "r56-y"];
    let locks: Vec<String> = keys.iter().map(|key| support::names::lock_key("test", key)).collect();
    assert_ne!(slot(&server, &locks[0]), slot(&server, &locks[1]), "two slots");
    let (first, second) = if locks[0] < locks[1] { (0, 1) } else { (1, 0) };
    let (first_key, second_key, first_lock) = (keys[first], keys[second], locks[first].clone());
    let first_fence = first_lock.replace(":lock:", ":lock-fence:");

    // Warm-up: connections, slot maps and scripts, with no latency.
    block_on(operator_b.force_release("warm-up")).expect("a warm-up break");
    let warm = block_on(claimer_b.acquire_many(&["w1", "w2"], wait(0))).expect("a warm-up claim");
    assert!(block_on(warm.release()).unwrap());
    let _ = block_on(next_b.inspect("warm-up"));
    let held = take(&holder_b, second_key, wait(0));

    link.set_latency(Duration::from_millis(250));
    let claiming = {
        let claimer_b = claimer_b.clone();
        let keys = [first_key.to_owned(), second_key.to_owned()];
        thread::spawn(move || block_on(claimer_b.acquire_many(&[keys[0].as_str(), keys[1].as_str()], wait(20_000))))
    };
    let end = Instant::now() + Duration::from_secs(5);
    let token = loop {
        if let Some(token) = get(&server, &first_lock) {
            break token;
        }
        assert!(Instant::now() < end, "T's first script took {first_key}");
        thread::sleep(Duration::from_millis(1));
    };
    let c = get(&server, &first_fence).expect("T's grant raised the counter");
    let digest = redis::Script::new(&format!("s{token}")).get_hash().to_owned();
    let stalls = [link.stall(digest.as_bytes()), link.stall(digest.as_bytes())];
    let forced = block_on(operator_b.force_release(first_key));
    assert_eq!(forced.as_ref().map_err(|err| err.code()).unwrap_err(), ErrorCode::OutcomeUnknown, "{forced:?}");
    assert!(stalls[0].caught() && stalls[1].caught(), "both attempts of the break, carrying T's digest, were kept");

    let end = Instant::now() + Duration::from_secs(5);
    while get(&server, &first_lock).is_some() {
        assert!(Instant::now() < end, "T gave {first_key} back when {second_key} was busy");
        thread::sleep(Duration::from_millis(5));
    }
    link.set_latency(Duration::ZERO);
    assert!(block_on(held.release()).unwrap(), "B released {second_key}");
    let t = claiming.join().unwrap().expect("T was granted both keys");
    // The lock is `<token>:<fence>`: T's token again, with its new fence
    // (so its digest is no longer the one the break read).
    let regranted = get(&server, &first_lock);
    let owner = |lock: &str| lock.split_once(':').map(|(owner, _)| owner.to_owned());
    assert_eq!(regranted.as_deref().and_then(owner), owner(&token), "T holds {first_key} again, same token");
    let granted = t.fences().iter().find(|(key, _)| *key == first_key).unwrap().1;
    assert!(granted > c.parse::<u64>().unwrap(), "T's grant of {first_key} came after the break's read (fence {granted} > {c})");

    // The restore: the counter exactly as the break read it.
    let _: () = redis::cmd("SET").arg(&first_fence).arg(&c).arg("PX").arg(60_000).query(&mut server.client()).unwrap();
    for stall in &stalls {
        stall.deliver();
    }
    thread::sleep(Duration::from_millis(300));
    let after = get(&server, &first_lock);
    let n = block_on(next_b.acquire(first_key, wait(2_000)));
    if let Ok(n) = &n {
        if t.is_valid() {
            panic!(
                "two holders of {first_key}: T (fence {granted}, granted after the break's read, valid, never told) and N \
                 (fence {}): the late break matched the counter put back to {c} and T's digest (its lock read {after:?}), \
                 the same before and after T's give-back and grant again",
                n.fence()
            );
        }
    }
    assert_eq!(after, regranted, "the late break left T");
    for provider in [operator, claimer, holder, next] {
        block_on(provider.close());
    }
}

/// Found while fixing R56 (failing first): the read raised a counter that
/// was a whole second ahead (an earlier read's reservation) by another
/// second. Breaks of one key side by side each read again when another's
/// break moved the counter, so the counter ran seconds ahead of the clock,
/// where `next_fence!` grants above the clock on reservations alone (an
/// AOF that lost its tail could then bring back a counter below fences
/// granted). The read now leaves a whole-second counter ahead of the clock
/// as it is: however many breaks, it stays within a second of the clock.
#[test]
fn redis_breaks_side_by_side_keep_the_counter_within_a_second_of_the_clock() {
    let server = RedisServer::start();
    let (provider, _) = support::open_redis(&server.url(), &[("leaseMs", "30000")], &[]);
    let breaker = backend(&provider);
    let breaks: Vec<_> = (0..4)
        .map(|_| {
            let breaker = breaker.clone();
            thread::spawn(move || block_on(breaker.force_release("side-by-side")))
        })
        .collect();
    for each in breaks {
        let _ = each.join().unwrap();
    }
    let fence_name = support::names::lock_key("test", "side-by-side").replace(":lock:", ":lock-fence:");
    let counter: u64 = redis::cmd("GET").arg(&fence_name).query(&mut server.client()).unwrap();
    let (seconds, micros): (u64, u64) = redis::cmd("TIME").query(&mut server.client()).unwrap();
    let clock = seconds * 1_000_000 + micros;
    assert!(counter <= clock + 1_000_000, "the counter is {} µs ahead of the clock", counter.saturating_sub(clock));
    block_on(provider.close());
}

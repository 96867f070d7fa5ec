//! Review R40: two holders of a key, or a repeated fence, after 8223351
//! (every address of a name at once; `#insecure` TLS links the driver's
//! own rustls links, verifying nothing; a sentinel whose socket comes up
//! marks the member up; the Cluster slot map fetch's end unanswered; the
//! provider's policies sharing places), against private redis-servers.
//!
//! No finding confirmed. Held (the controls below): over
//! `rediss://...#insecure`, a Redis that demands a client certificate and
//! gets none (refused), a TLS 1.2-only Redis, a name that is an IP with a
//! `tls.servername` its certificate does not carry, a listener that takes
//! the socket and closes it before the handshake (by IP and by a name of
//! two addresses), one that takes it and never answers, and a one-node
//! Cluster whose clients and bus speak TLS, frozen: none reads as
//! unreachable, so `k`, held there by another process, never moves to
//! `host`. A client certificate configured with `#insecure` is sent (the
//! server that demands one serves); release notifications reach a waiter
//! over `#insecure` (its pub/sub link the driver's own). A policy lease
//! whose release went unanswered keeps its key placed on its member until
//! it is dropped. (Through Node, checked by a script, not kept here: a
//! `withLock` section held on the fallback keeps `k` there for both
//! policies, for `acquire_many` with another key, for waiters aborted by
//! their `AbortSignal`, and gives it back once the section throws.)

mod support;

use std::net::TcpListener;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use futures::executor::block_on;
use support::fall_back::FallBackToHost;
use support::pki::Pki;
use support::redis_server::RedisServer;

/// `k` held on `server` by another process (over its plain port) while a
/// policy over `endpoint` acquires it with a wait of 1.5 s: never served
/// by `host`. Answers what the acquire ended with.
fn held_elsewhere(server: &RedisServer, endpoint: &str, why: &str) -> String {
    let (holder, lease) = support::redis_holder(&format!("url: {}", server.url()), "k");
    FallBackToHost::on_redis(endpoint).never_served_from_host(holder, lease, "k", 1500, why, || ())
}

/// A Redis that demands a client certificate, reached over `#insecure`
/// without one: the handshake fails after the socket came up, refused, not
/// unreachable. With one configured (`#insecure` keeps the client's
/// certificate), it serves and the acquire waits for `k`'s holder.
#[test]
fn redis_insecure_tls_to_a_server_demanding_a_client_certificate_never_moves_a_held_key() {
    let pki = Pki::new("r40-client-cert");
    let (server, tls_port) = support::tls_redis(&pki, &["--tls-auth-clients", "yes"]);
    pki.issue("client", "DNS:client", None, true);
    let url = format!("url: 'rediss://127.0.0.1:{tls_port}/#insecure'");
    let without = held_elsewhere(&server, &url, "a server demanding a client certificate read as unreachable");
    assert_eq!(without, "ProviderFailed");
    let with = format!("{url}, tls: {{ certFile: '{}', keyFile: '{}' }}", pki.path("client.pem"), pki.path("client.key"));
    assert_eq!(
        held_elsewhere(&server, &with, "with a client certificate"),
        "WaitTimeout",
        "the #insecure link sent the client certificate"
    );
}

/// A Redis that speaks TLS 1.2 only, over `#insecure`: served (the link
/// waits for `k`'s holder).
#[test]
fn redis_insecure_tls12_only_server_keeps_a_held_key() {
    let pki = Pki::new("r40-tls12");
    let (server, tls_port) = support::tls_redis(&pki, &["--tls-auth-clients", "no", "--tls-protocols", "TLSv1.2"]);
    let url = format!("url: 'rediss://127.0.0.1:{tls_port}/#insecure'");
    assert_eq!(held_elsewhere(&server, &url, "a TLS 1.2 server read as unreachable"), "WaitTimeout");
}

/// A name that is an IP and a `tls.servername` the certificate does not
/// carry, over `#insecure`: served. The same verified is refused (the
/// certificate does not carry it), not unreachable.
#[test]
fn redis_insecure_tls_with_an_ip_and_a_foreign_servername_keeps_a_held_key() {
    let pki = Pki::new("r40-servername");
    let (server, tls_port) = support::tls_redis(&pki, &["--tls-auth-clients", "no"]);
    let insecure = format!("url: 'rediss://127.0.0.1:{tls_port}/#insecure', tls: {{ servername: other.example }}");
    assert_eq!(held_elsewhere(&server, &insecure, "#insecure with a servername"), "WaitTimeout");
    let verified = format!("url: 'rediss://127.0.0.1:{tls_port}/', tls: {{ caFile: '{}', servername: other.example }}", pki.path("ca.pem"));
    assert_eq!(held_elsewhere(&server, &verified, "a certificate without the servername"), "ProviderFailed");
}

/// A listener on loopback that takes every socket and, per `close`,
/// closes it at once (before any handshake) or keeps it unanswered until
/// dropped.
struct Taker {
    port: u16,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Taker {
    fn start(close: bool) -> Taker {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut kept = Vec::new();
            while !stopping.load(Ordering::Acquire) {
                match listener.accept() {
                    Ok((stream, _)) if close => drop(stream),
                    Ok((stream, _)) => kept.push(stream),
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        Taker { port, stop, thread: Some(thread) }
    }
}

impl Drop for Taker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// What a policy's acquire of `k` (wait 1.5 s) through `url` ends with.
fn acquire_through(url: &str) -> String {
    let policy = FallBackToHost::on_redis(&format!("url: '{url}'"));
    policy.acquire_held_within("k", 0, 1500, &format!("{url} took the socket, read as unreachable"))
}

/// A server that takes the socket and closes it before the TLS handshake
/// (Redis at `maxclients` over TLS, review R16), over `#insecure` and
/// verified: refused, never unreachable.
#[test]
fn redis_tls_listener_closing_before_the_handshake_is_not_unreachable() {
    let taker = Taker::start(true);
    assert_eq!(acquire_through(&format!("rediss://127.0.0.1:{}/#insecure", taker.port)), "ProviderFailed");
    assert_eq!(acquire_through(&format!("rediss://127.0.0.1:{}/", taker.port)), "ProviderFailed");
    assert_eq!(acquire_through(&format!("rediss://localhost:{}/#insecure", taker.port)), "ProviderFailed");
}

/// A server that takes the socket and never answers the handshake, over
/// `#insecure`, by IP and by name: unanswered, never unreachable.
#[test]
fn redis_tls_listener_that_never_answers_is_not_unreachable() {
    let taker = Taker::start(false);
    assert_eq!(acquire_through(&format!("rediss://127.0.0.1:{}/#insecure", taker.port)), "ProviderFailed");
    assert_eq!(acquire_through(&format!("rediss://localhost:{}/#insecure", taker.port)), "ProviderFailed");
}

/// A one-node Redis Cluster (every slot) whose clients and bus speak TLS
/// (`tls-cluster yes`: its slot map names its TLS port) besides a plain
/// port for the test's own commands.
fn tls_cluster_node(pki: &Pki) -> (RedisServer, u16) {
    let config = format!("{}/nodes.conf", pki.path(""));
    let (node, tls_port) = support::tls_redis(
        pki,
        &[
            "--tls-auth-clients",
            "no",
            "--tls-cluster",
            "yes",
            "--cluster-enabled",
            "yes",
            "--cluster-node-timeout",
            "5000",
            "--cluster-config-file",
            &config,
        ],
    );
    let mut client = node.client();
    let _: () = redis::cmd("CLUSTER").arg("ADDSLOTSRANGE").arg(0).arg(16383).query(&mut client).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let info: String = redis::cmd("CLUSTER").arg("INFO").query(&mut client).unwrap();
        if info.contains("cluster_state:ok") {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the one-node cluster never came up: {info}");
        std::thread::sleep(Duration::from_millis(50));
    }
    (node, tls_port)
}

/// A Cluster over `#insecure` TLS, its one node frozen (SIGSTOP) while it
/// holds `k` for another process: the slot map fetch and the connect take
/// the socket and go unanswered, never unreachable; `k` never moves.
#[test]
fn redis_insecure_tls_cluster_frozen_never_moves_a_held_key() {
    let pki = Pki::new("r40-cluster");
    let (node, tls_port) = tls_cluster_node(&pki);
    let endpoint = format!("cluster: {{ nodes: ['rediss://127.0.0.1:{tls_port}/#insecure'] }}");
    let (holder, lease) = support::redis_holder(&endpoint, "k");
    let answering = FallBackToHost::on_redis(&endpoint);
    assert_eq!(answering.acquire_held_within("k", lease.fence(), 300, "answering"), "WaitTimeout");
    drop(answering);
    node.pause();
    let why = "a frozen TLS cluster node read as unreachable";
    let served = FallBackToHost::on_redis(&endpoint).never_served_from_host(holder, lease, "k", 1500, why, || node.resume());
    assert_eq!(served, "ProviderFailed");
}

/// Control (places): a policy lease on Redis whose release went unanswered
/// (Redis frozen: OUTCOME_UNKNOWN) may still hold `k` there, so `k` stays
/// placed on `db` while the lease lives: with Redis then gone
/// (unreachable), an acquire of `k` is NO_ELIGIBLE_BACKEND, not served by
/// `host`; once the lease is dropped, `host` serves it.
#[test]
fn a_lease_whose_release_went_unanswered_keeps_its_key_placed() {
    let mut server = RedisServer::start();
    let policy = FallBackToHost::on_redis(&format!("url: {}", server.url()));
    let lease = block_on(policy.locks().acquire("k", support::wait(0))).unwrap();
    assert_eq!(lease.served().unwrap().member.name, "db");
    server.pause();
    let released = block_on(lease.release()).unwrap_err();
    assert_eq!(format!("{:?}", released.code()), "OutcomeUnknown", "{released}");
    server.stop();
    // The connection's reader sees the socket close: the next acquire
    // connects again, and is refused at once.
    std::thread::sleep(Duration::from_millis(300));
    let again = block_on(policy.locks().acquire("k", support::wait(1500)));
    let again = again.map(|lease| lease.served().unwrap().member.name.clone()).unwrap_or_else(|err| {
        eprintln!("the acquire after the kill: {err} {:?}", err.details());
        format!("{:?}", err.code())
    });
    assert_eq!(again, "NoEligibleBackend", "k, maybe still held on db, was served elsewhere");
    drop(lease);
    let after = block_on(policy.locks().acquire("k", support::wait(1500))).unwrap();
    assert_eq!(after.served().unwrap().member.name, "host");
}

/// Control: release notifications over an `#insecure` link (its pub/sub
/// connection the driver's own rustls link now): a waiter whose polls are
/// 10 s apart is woken by the holder's release at once.
#[test]
fn redis_insecure_tls_waiter_is_woken_by_a_release_notification() {
    let pki = Pki::new("r40-notify");
    let (server, tls_port) = support::tls_redis(&pki, &["--tls-auth-clients", "no"]);
    let (holder, lease) = support::redis_holder(&format!("url: {}", server.url()), "k");
    let slow_polls = [("leaseMs", "30000"), ("pollIntervalMs", "10000"), ("notifyPollIntervalMs", "10000")];
    let (waiter, _) = support::open_redis_at(&format!("url: 'rediss://127.0.0.1:{tls_port}/#insecure'"), &slow_polls, &[]);
    // Subscribed (a first acquire connects; the subscription follows).
    let warm = block_on(waiter.backend("shared").unwrap().acquire("warm", support::wait(0))).unwrap();
    assert!(block_on(warm.release()).unwrap());
    std::thread::sleep(Duration::from_millis(500));
    let releasing = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(500));
        let released_at = std::time::Instant::now();
        assert!(block_on(lease.release()).unwrap());
        block_on(holder.close());
        released_at
    });
    let granted = block_on(waiter.backend("shared").unwrap().acquire("k", support::wait(8000))).unwrap();
    let granted_at = std::time::Instant::now();
    let released_at = releasing.join().unwrap();
    assert!(block_on(granted.release()).unwrap());
    block_on(waiter.close());
    let latency = granted_at.saturating_duration_since(released_at);
    assert!(latency < Duration::from_secs(2), "the waiter was granted {latency:?} after the release: no notification over #insecure");
}

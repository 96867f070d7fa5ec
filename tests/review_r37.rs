//! Review R37 (of bd08d4a: a Redis host name's addresses tried as RFC 8305
//! does; a socket up once connected; the Cluster map fetch's persistent
//! deadline): can a Redis that is up, holding a key for another process,
//! read unreachable, so that a `fallBack` policy moves the key to its
//! fallback member (two holders)?
//!
//! Findings:
//!
//! - F1 (two holders): the next address of a name is tried only after
//!   `STAGGER` (250 ms) while the ones before neither connect nor fail (a
//!   host that drops packets). With a `connectTimeoutMs` at or under
//!   250 ms × the index of the address that is up (1–600000 is valid; here
//!   200 ms and two addresses, the first dropping), the connect is cut
//!   before that address is ever tried: the Redis that is up on it and
//!   holds the key reads unreachable, and the policy's acquire is served by
//!   `host` while the other process holds the key on `db`. The same with
//!   the default 5000 ms and a name whose 21st address is the one up.
//!   (R36 F3's finding, left for small `connectTimeoutMs`.) Fixed: every
//!   address is tried at once (`src/redis/transport/addresses.rs`).
//!
//! The tests need a host name with two addresses: each runs itself again
//! in a private mount namespace (`unshare --mount`, as root) whose
//! `/etc/hosts` (bind-mounted over, the machine's is not touched) gives
//! `r37-name` the addresses 127.0.0.1 (a full accept queue: SYNs dropped)
//! and 127.0.0.2 (a private redis-server bound there only); glibc sorts
//! 127.0.0.1 first. The control runs the same with a `connectTimeoutMs`
//! of 2000 (it passed with the stagger too): the acquire is
//! refused on `db` (held), never served by `host`.

mod support;

use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};

use std::time::Duration;

use support::fall_back::FallBackToHost;
use support::hosts;

/// `listener` with its accept queue full: SYNs to it go unanswered, as
/// from a host that drops packets. Answers what keeps it so.
fn dropping(listener: TcpListener) -> (TcpListener, Vec<TcpStream>) {
    let addr = listener.local_addr().unwrap();
    let mut kept = Vec::new();
    loop {
        match TcpStream::connect_timeout(&addr, Duration::from_millis(200)) {
            Ok(stream) => kept.push(stream),
            Err(err) => {
                assert_eq!(err.kind(), std::io::ErrorKind::TimedOut, "connect: {err}");
                return (listener, kept);
            }
        }
        assert!(kept.len() < 10_000, "the accept queue never filled");
    }
}

/// Another process holds `key` on the Redis at the last of `addresses`
/// (reached there directly); this one's policy reaches it as
/// `redis://r37-name` (every address before it drops SYNs) with
/// `connect_timeout_ms`, and acquires `key` waiting 3 s: never served by
/// `host`.
fn held_key_through_a_name(key: &str, addresses: &[&str], connect_timeout_ms: u32) {
    let (up, dropped) = addresses.split_last().unwrap();
    let port = hosts::port_free_on(addresses);
    let listeners: Vec<_> = dropped.iter().map(|ip| TcpListener::bind((*ip, port)).expect("bind the dropping address")).collect();
    let _server = hosts::RedisOn::start(up, port);
    let (holder, lease) = support::redis_holder(&format!("url: redis://{up}:{port}/0"), key);
    let _dropping: Vec<_> = listeners.into_iter().map(dropping).collect();
    let resolved: Vec<SocketAddr> = ("r37-name", port).to_socket_addrs().unwrap().collect();
    let expected: Vec<SocketAddr> = addresses.iter().map(|ip| format!("{ip}:{port}").parse().unwrap()).collect();
    assert_eq!(resolved, expected, "the namespace's /etc/hosts gives r37-name the addresses in order");
    let policy = FallBackToHost::open_on(
        "redis",
        &format!("url: 'redis://r37-name:{port}/0', connectTimeoutMs: {connect_timeout_ms}, commandTimeoutMs: 2000"),
        "namespace: test, leaseMs: 30000",
        5000,
    );
    policy.never_served_from_host(
        holder,
        lease,
        key,
        3000,
        &format!(
            "the Redis on r37-name's address {up} is up and holds it; with connectTimeoutMs {connect_timeout_ms} it must be tried ({} address(es) before it drop SYNs)",
            dropped.len()
        ),
        || {},
    );
}

const TWO: &[&str] = &["127.0.0.1", "127.0.0.2"];
const THREE: &[&str] = &["127.0.0.1", "127.0.0.2", "127.0.0.3"];

#[test]
fn a_short_connect_timeout_still_tries_the_second_address_that_is_up() {
    let name = "a_short_connect_timeout_still_tries_the_second_address_that_is_up";
    if hosts::in_namespace(name, "r37-name", TWO) {
        held_key_through_a_name("r37-short-connect", TWO, 200);
    }
}

#[test]
fn a_short_connect_timeout_still_tries_the_third_address_that_is_up() {
    let name = "a_short_connect_timeout_still_tries_the_third_address_that_is_up";
    if hosts::in_namespace(name, "r37-name", THREE) {
        held_key_through_a_name("r37-third-address", THREE, 400);
    }
}

#[test]
fn control_a_long_connect_timeout_reaches_the_address_that_is_up() {
    let name = "control_a_long_connect_timeout_reaches_the_address_that_is_up";
    if hosts::in_namespace(name, "r37-name", THREE) {
        held_key_through_a_name("r37-long-connect", THREE, 2000);
    }
}

//! Review R12 of bad11ef (a waiting acquire tries again with its token
//! only when the give-back after its lost take answered at its first
//! attempt): the lost take itself, kept by a proxy that cut its client and
//! delivered after the retry's grant, on the machine's MariaDB and
//! PostgreSQL (tests/faults/proxy.rs). No finding: a take only grants (its
//! token's row taken over, the fence raised), it frees nothing, so the
//! caller stays the one holder and its release frees the key.

mod mysql;
#[path = "postgres/mod.rs"]
mod postgres;
#[path = "faults/proxy.rs"]
mod proxy;

use std::time::Duration;

use dokebi_lock::{AcquireOptions, Backend, Provider};
use futures::executor::block_on;
use proxy::Proxy;

fn wait(ms: u64) -> AcquireOptions {
    AcquireOptions { wait_timeout: Some(Duration::from_millis(ms)), ..AcquireOptions::default() }
}

/// The port of a `scheme://user@host:port/db` URL.
fn port_of(url: &str) -> u16 {
    url.rsplit(':').next().and_then(|tail| tail.split('/').next()).and_then(|port| port.parse().ok()).unwrap()
}

/// A waiting acquire on `through` loses its take (`take`: the driver's
/// statement for the proxy to keep), gives back at the first attempt and
/// is granted by its retry; the kept take then reaches the server while
/// the caller holds. `other` (another process) must not be granted the key
/// until the caller releases it, and then must be. `fence`: the key's
/// fence in the store.
fn late_take_under_a_retried_grant(proxy: &Proxy, through: &Backend, other: &Backend, take: &[u8], fence: impl Fn() -> u64) {
    assert!(block_on(block_on(through.acquire("k", wait(0))).unwrap().release()).unwrap());
    let take = proxy.stall(take);
    let lease = block_on(through.acquire("k", wait(10_000))).expect("the retry after a give-back answered at its first attempt");
    assert!(take.caught(), "the take was lost with its connection");
    assert_eq!(fence(), lease.fence(), "the retry's grant");
    take.deliver();
    let delivered = std::time::Instant::now();
    while fence() == lease.fence() && delivered.elapsed() < Duration::from_secs(3) {
        std::thread::sleep(Duration::from_millis(20));
    }
    // The late take took its token's row over: a fence above the lease's,
    // which nobody was told.
    assert!(fence() > lease.fence(), "the late take ran");
    assert!(lease.is_valid());
    let second = block_on(other.acquire("k", wait(0))).map(|second| second.fence()).map_err(|err| err.code());
    assert!(second.is_err(), "two holders: the caller's lease (fence {}) and {second:?}", lease.fence());
    assert!(block_on(lease.release()).unwrap());
    assert!(block_on(other.acquire("k", wait(0))).is_ok(), "the caller's release freed the key");
}

#[test]
fn mysql_a_lost_take_landing_after_the_retried_grant_leaves_one_holder() {
    let table = mysql::Table::fresh();
    let proxy = Proxy::start(port_of(&mysql::url()), Duration::ZERO);
    let config = mysql::yaml(&table.0, "").replace("leaseMs: 5000", "leaseMs: 30000");
    let through = Provider::from_yaml(&config.replace(&mysql::url(), &format!("mysql://root@127.0.0.1:{}/test", proxy.port()))).unwrap();
    let direct = Provider::from_yaml(&config).unwrap();
    let fence = format!("SELECT fence FROM `{}` WHERE k = 'k'", table.0);
    late_take_under_a_retried_grant(&proxy, &through.backend("shared").unwrap(), &direct.backend("shared").unwrap(), b"_take`(", || {
        mysql::count(&fence) as u64
    });
    block_on(through.close());
    block_on(direct.close());
}

#[test]
fn postgres_a_lost_take_landing_after_the_retried_grant_leaves_one_holder() {
    let schema = postgres::Schema::fresh();
    let proxy = Proxy::start(port_of(&postgres::url()), Duration::ZERO);
    let url = format!("postgres://postgres@127.0.0.1:{}/test?sslmode=disable", proxy.port());
    let listen = format!("        listenUrl: '{}'\n", postgres::url());
    let through = Provider::from_yaml(&postgres::yaml_on(&url, &schema.0, "        leaseMs: 30000\n", &listen)).unwrap();
    let direct = schema.open("        leaseMs: 30000\n");
    let fence = format!("SELECT fence FROM {} WHERE key = 'k'", schema.table(""));
    late_take_under_a_retried_grant(&proxy, &postgres::backend(&through), &postgres::backend(&direct), b"_take\"(", || {
        postgres::count(&fence) as u64
    });
    block_on(through.close());
    block_on(direct.close());
}

//! Review R20: ways to get two holders of a key, or a repeated or
//! decreasing fence, through the policy backend, the file driver, the local
//! driver and `with_lock`, on the final state of issue 49.
//!
//! Finding (each test failed 3 of 3 on main 3d9c4d9, "served by host";
//! fixed since, and the tests run unignored): the PostgreSQL driver read
//! as unreachable connect failures of servers that answered, and a
//! `fallBack` policy moved `k` to its next member while a server served
//! its holder. Two ways, both in tokio-postgres's connect as
//! `classify_connect` sees it:
//!
//! - A URL that lists several hosts (`postgres://u@primary,standby/db`,
//!   libpq's failover form; tokio-postgres tries them in order, and the
//!   addresses of one name the same way) reports the failure of the last
//!   one tried only. A first host that refuses this login (at
//!   `max_connections`, 53300; a `channel_binding=require` the server
//!   cannot meet) is a refusal alone, but with a last host that is down,
//!   its refused socket was the error.
//! - With `target_session_attrs=read-write`, a server that answers the
//!   login read-only ends it "database does not allow writes", an I/O
//!   error (`PermissionDenied`) that `socket_failed` took for a failed
//!   socket: a primary at `max_connections` followed by its live standby
//!   (both up), or one server put into read-only mode
//!   (`default_transaction_read_only`) while its holder's lease runs.
//!
//! The fix (src/postgres/transport/connection.rs): `PermissionDenied` is
//! not a failed socket, and a connect that would read as unreachable while
//! its URL names several hosts or a DNS name probes every host's addresses
//! (within `connectTimeoutMs`): any socket that comes up makes it a
//! refusal. The addresses of one name are covered by the driver's unit
//! tests (`any_address_of_a_name_that_takes_the_socket_is_up`): no name
//! here resolves to several addresses without editing /etc/hosts.
//! `postgres_first_host_stalling_the_login_with_the_next_host_down_never_moves_a_key`,
//! added with the fix, covers the probe after a connect cut by
//! `connectTimeoutMs` (a first host that took the socket and stalls).
//!
//! docs/policy.md and docs/guarantees.md list the connect failures of a
//! server that is up which still read as unreachable (an I/O error or
//! `connectTimeoutMs` at connect, a full accept queue, sentinels); a
//! server that answered the login is not among them.
//!
//! Probes that held (run by hand, with the file driver's own harness in
//! tests/file_review.rs): every other child of
//! `grants_of_every_kind_are_ordered_by_their_fences_across_processes_and_backends`
//! (with `DOKEBI_ORDER_FORK`, `DOKEBI_ORDER_CLOSE` and the mixes
//! `rrrttwmn`, `rtwxyadepqmn`, `wwwrrxd`) and of
//! `holders_killed_at_random_moments_leave_nothing_that_breaks_exclusion_or_fences`
//! (with and without `DOKEBI_CHAOS_LEAVE`) run 10 s behind the clock under
//! libfaketime (`DOKEBI_FILE_CHILD_WRAPPER`): no fence repeated or below an
//! earlier grant's, no writer beside another holder, no more units than the
//! limit.

mod postgres;
#[path = "postgres/server.rs"]
mod postgres_server;
mod support;

use futures::executor::block_on;
use support::fall_back::FallBackToHost;
use support::wait;

/// A port nothing listens on: a standby that is down.
fn dead_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// `url` (one host) with a second host after it, down.
fn with_a_dead_second_host(url: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap();
    let (login, rest) = rest.split_once('@').unwrap();
    let (host, rest) = rest.split_once('/').unwrap();
    format!("{scheme}://{login}@{host},127.0.0.1:{}/{rest}", dead_port())
}

/// What a fresh process's policy over `url` (`db`, falling back to
/// `host`) answers for `k` (a single try) while `k` is held on `db`: the
/// member that served it, or the error's code. Its lease, if any, is
/// released before this returns (so a failing check leaves nothing held).
fn served_by(url: &str, schema: &str) -> String {
    let policy = FallBackToHost::open("postgres", url, &format!("schema: {schema}, leaseMs: 10000"));
    match block_on(policy.locks().acquire("k", wait(0))) {
        Ok(lease) => {
            let member = lease.served().map_or("?".to_owned(), |served| served.member.name.clone());
            let _ = block_on(lease.release());
            member
        }
        Err(err) => format!("{:?}", err.code()),
    }
}

/// Takes every session `url`'s server has left (`max_connections`, no
/// reserved slots) with idle ones, until it answers "sorry, too many
/// clients already" (53300): hand them to [`empty`] to let them go.
fn fill(url: &str) -> (tokio::runtime::Runtime, Vec<tokio_postgres::Client>) {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let mut full = Vec::new();
    loop {
        match runtime.block_on(tokio_postgres::connect(url, tokio_postgres::NoTls)) {
            Ok((client, connection)) => {
                runtime.spawn(connection);
                full.push(client);
            }
            Err(err) => {
                assert_eq!(err.code(), Some(&tokio_postgres::error::SqlState::TOO_MANY_CONNECTIONS), "{err:?}");
                return (runtime, full);
            }
        }
        assert!(full.len() < 20, "the server took more sessions than max_connections");
    }
}

/// Ends the sessions [`fill`] took.
fn empty(runtime: tokio::runtime::Runtime, full: Vec<tokio_postgres::Client>) {
    runtime.block_on(async move {
        drop(full);
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    });
}

/// The first host of the URL is a private PostgreSQL at `max_connections`
/// (no reserved slots): it answers a new login "sorry, too many clients
/// already" (53300), which alone is a refusal (the acquire ends), and
/// serves the connections it has, `k`'s holder's among them. Its standby,
/// listed second, is down: the connect's error is that host's refused
/// socket, which read as unreachable (the policy served `k` from the
/// host) before the driver probed every host.
#[test]
fn postgres_first_host_at_max_connections_with_its_standby_down_never_moves_a_held_key() {
    let server = postgres_server::PrivateServer::start("r20-full", &["max_connections = 6", "superuser_reserved_connections = 0"]);
    let schema = format!("r20_{}", std::process::id());
    let yaml = postgres::yaml_on(&server.url(), &schema, "", "");
    let holder = dokebi_lock::Provider::from_yaml(&yaml).unwrap();
    let lease = block_on(postgres::backend(&holder).acquire("k", wait(0))).unwrap();
    let (runtime, full) = fill(&server.url());
    // One host alone: refused, the acquire ends.
    let alone = served_by(&server.url(), &schema);
    // The same server first, then its standby, down.
    let with_standby = served_by(&with_a_dead_second_host(&server.url()), &schema);
    empty(runtime, full);
    let _ = block_on(lease.release());
    block_on(holder.close());
    assert_eq!(alone, "ProviderFailed", "one host at max_connections is a refusal");
    assert_ne!(
        with_standby, "host",
        "k was held on db and the policy's acquire was served by host: the first host refused the login (53300), the second host is down"
    );
}

/// The same with the machine's PostgreSQL, refusing the login for a
/// setting of the policy's own URL (`channel_binding=require` against a
/// server that logs in without SCRAM: review R9 made it a refusal on one
/// host), with a second host after it, down.
#[test]
fn postgres_first_host_refusing_the_login_with_the_next_host_down_never_moves_a_held_key() {
    let schema = postgres::Schema::fresh();
    let holder = schema.open("");
    let lease = block_on(postgres::backend(&holder).acquire("k", wait(0))).unwrap();
    let separator = if postgres::url().contains('?') { '&' } else { '?' };
    let refused = format!("{}{separator}channel_binding=require", postgres::url());
    let alone = served_by(&refused, &schema.0);
    let with_next = served_by(&with_a_dead_second_host(&refused), &schema.0);
    assert!(block_on(lease.release()).unwrap());
    block_on(holder.close());
    // Dropped before the checks: a schema dropped while panicking is kept.
    drop(schema);
    assert_eq!(alone, "ProviderFailed", "one host refusing the login is a refusal");
    assert_ne!(
        with_next, "host",
        "k was held on db and the policy's acquire was served by host: the first host refused the login, the second host is down"
    );
}

/// libpq's failover form, both hosts up: `primary,standby` with
/// `target_session_attrs=read-write`. The primary is at `max_connections`
/// (53300) and serves `k`'s holder; the standby answers the login and is
/// read-only, which tokio-postgres ends as "database does not allow
/// writes", an I/O error (`PermissionDenied`) that the driver read as a
/// failed socket: unreachable, though both servers answered, and the
/// policy served `k` from the host (before the fix).
#[test]
fn postgres_primary_at_max_connections_with_a_live_read_only_standby_never_moves_a_held_key() {
    let primary = postgres_server::PrivateServer::start("r20-primary", &["max_connections = 8", "superuser_reserved_connections = 0"]);
    let standby = primary.standby("r20-standby");
    let schema = format!("r20_{}", std::process::id());
    let holder = dokebi_lock::Provider::from_yaml(&postgres::yaml_on(&primary.url(), &schema, "", "")).unwrap();
    let lease = block_on(postgres::backend(&holder).acquire("k", wait(0))).unwrap();
    let (runtime, full) = fill(&primary.url());
    let alone = served_by(&format!("{}&target_session_attrs=read-write", primary.url()), &schema);
    let url = format!(
        "postgres://postgres@127.0.0.1:{},127.0.0.1:{}/postgres?sslmode=disable&target_session_attrs=read-write",
        primary.port(),
        standby.port()
    );
    let with_standby = served_by(&url, &schema);
    empty(runtime, full);
    let _ = block_on(lease.release());
    block_on(holder.close());
    assert_eq!(alone, "ProviderFailed", "the primary alone at max_connections is a refusal");
    assert_ne!(
        with_standby, "host",
        "k was held on db and the policy's acquire was served by host: the primary refused the login (53300), the standby answered read-only"
    );
}

/// One host, read-only for new sessions (`ALTER SYSTEM SET
/// default_transaction_read_only = on` and a reload: a server put into
/// read-only mode, as when its disk fills) while `k`'s holder still holds
/// its lease there. Without `target_session_attrs` the policy's acquire is
/// refused ("cannot execute ... in a read-only transaction") and ends; with
/// `target_session_attrs=read-write` the login ends "database does not
/// allow writes", which read as unreachable (before the fix), and the
/// policy served `k` from the host while the holder's lease ran.
#[test]
fn postgres_read_only_mode_under_target_session_attrs_never_moves_a_held_key() {
    let server = postgres_server::PrivateServer::start("r20-read-only", &[]);
    let schema = format!("r20_{}", std::process::id());
    let holder = dokebi_lock::Provider::from_yaml(&postgres::yaml_on(&server.url(), &schema, "", "")).unwrap();
    let lease = block_on(postgres::backend(&holder).acquire("k", wait(0))).unwrap();
    postgres::batch_on(&server.url(), "ALTER SYSTEM SET default_transaction_read_only = on");
    postgres::batch_on(&server.url(), "SELECT pg_reload_conf()");
    std::thread::sleep(std::time::Duration::from_millis(300));
    let plain = served_by(&server.url(), &schema);
    let read_write = served_by(&format!("{}&target_session_attrs=read-write", server.url()), &schema);
    let valid = lease.is_valid();
    drop(lease);
    block_on(holder.close());
    assert_ne!(plain, "host", "a refusal in a read-only transaction moved k");
    assert!(valid, "the holder's lease was still valid by its estimate");
    assert_ne!(
        read_write, "host",
        "k was held on db (its lease valid) and the policy's acquire was served by host: the server is in read-only mode"
    );
}

/// Added with the fix (on the driver before it: served by host, 1 of 1).
/// The first host of the URL takes
/// the socket and never answers the login (a server stalled, here a
/// listener that only accepts), the second is down: the connect runs out
/// of `connectTimeoutMs` on the first host, which read as unreachable; the
/// probe finds the first host's socket up, so the acquire ends
/// (`PROVIDER_FAILED`, "took the connection but did not answer in time")
/// and the policy does not serve `k` from the host.
#[test]
fn postgres_first_host_stalling_the_login_with_the_next_host_down_never_moves_a_key() {
    let stalled = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = stalled.local_addr().unwrap().port();
    let accepting = std::thread::spawn(move || {
        // Holds what it accepts until the test's end (the listener's drop
        // with the process).
        let mut held = Vec::new();
        for socket in stalled.incoming().take(8) {
            held.push(socket);
        }
        held.len()
    });
    let url = format!("postgres://postgres@127.0.0.1:{port},127.0.0.1:{}/postgres?sslmode=disable", dead_port());
    let policy = FallBackToHost::open_on(
        "postgres",
        &format!("url: '{url}', connectTimeoutMs: 500, commandTimeoutMs: 2000"),
        "leaseMs: 10000",
        5000,
    );
    let started = std::time::Instant::now();
    let served = match block_on(policy.locks().acquire("k", wait(3000))) {
        Ok(lease) => {
            let member = lease.served().map_or("?".to_owned(), |served| served.member.name.clone());
            let _ = block_on(lease.release());
            member
        }
        Err(err) => format!("{:?}: {err}", err.code()),
    };
    let took = started.elapsed();
    drop(policy);
    drop(accepting);
    assert!(served.starts_with("ProviderFailed"), "the first host took the socket and stalled, the second is down: served by {served}");
    assert!(served.contains("did not answer in time"), "{served}");
    assert!(took < std::time::Duration::from_secs(3), "the connect and its probe took {took:?} (2 × connectTimeoutMs is 1 s)");
}

//! Statements whose answer is lost: a TCP proxy between the driver and
//! PostgreSQL stops forwarding (connections stay open), so a statement is
//! sent and no answer comes within `commandTimeoutMs`. The caller hears
//! `OUTCOME_UNKNOWN`, never a grant or release it cannot rely on, and the
//! key is not left held once the statement finally runs.

mod postgres;

#[path = "faults/proxy.rs"]
mod proxy;

use std::time::Duration;

use dokebi_lock::{ErrorCode, Provider};
use futures::executor::block_on;
use postgres::{backend, code, count, wait, Schema};
use proxy::Proxy;

/// A provider whose statements go through `proxy` (its listener directly
/// to the server), with leases far longer than the test, so that only the
/// driver's clean-up can free a key.
fn through(proxy: &Proxy, schema: &Schema) -> Provider {
    Provider::from_yaml(&through_yaml(proxy, schema)).unwrap()
}

/// The options of [`through`].
fn through_yaml(proxy: &Proxy, schema: &Schema) -> String {
    let url = format!("postgres://postgres@127.0.0.1:{}/test?sslmode=disable", proxy.port());
    let connection = format!("        listenUrl: '{}'\n", postgres::url());
    postgres::yaml_on(&url, &schema.0, "        leaseMs: 60000\n", &connection).replace("commandTimeoutMs: 2000", "commandTimeoutMs: 500")
}

#[test]
fn an_acquire_whose_answer_is_lost_is_outcome_unknown_and_its_late_grant_is_given_back() {
    let schema = Schema::fresh();
    let proxy = Proxy::start(5432, Duration::ZERO);
    let (cut_off, other) = (through(&proxy, &schema), schema.open(""));
    // Connected, and the tables made, before the link stalls.
    assert!(block_on(block_on(backend(&cut_off).acquire("warm", wait(0))).unwrap().release()).unwrap());
    proxy.hold();
    assert_eq!(code(block_on(backend(&cut_off).acquire("k", wait(0)))), ErrorCode::OutcomeUnknown);
    proxy.release();
    // Whether or not the stalled statement granted the key when it went
    // through at last, the driver gives it back.
    let lease = block_on(backend(&other).acquire("k", wait(20_000))).expect("the key is not left held");
    assert!(block_on(lease.release()).unwrap());
    block_on(cut_off.close());
    block_on(other.close());
}

#[test]
fn a_release_whose_answer_is_lost_is_outcome_unknown_and_the_key_is_freed_once_it_runs() {
    let schema = Schema::fresh();
    let proxy = Proxy::start(5432, Duration::ZERO);
    let (cut_off, other) = (through(&proxy, &schema), schema.open(""));
    let lease = block_on(backend(&cut_off).acquire("k", wait(0))).unwrap();
    proxy.hold();
    assert_eq!(code(block_on(lease.release())), ErrorCode::OutcomeUnknown);
    assert!(!lease.is_valid(), "a lease whose release may have run is no longer relied on");
    proxy.release();
    let next = block_on(backend(&other).acquire("k", wait(20_000))).expect("the release ran, or the driver gave the key back");
    assert!(next.fence() > lease.fence());
    assert!(block_on(next.release()).unwrap());
    block_on(cut_off.close());
    block_on(other.close());
}

#[test]
fn telemetry_reports_the_connection_going_down_and_up() {
    use dokebi_lock::telemetry::TelemetryEvent;
    use std::sync::{Arc, Mutex};
    let schema = Schema::fresh();
    let proxy = Proxy::start(5432, Duration::ZERO);
    let events = Arc::new(Mutex::new(Vec::new()));
    let sink = events.clone();
    let hooks = dokebi_lock::Hooks {
        telemetry: Some(Arc::new(move |event: &TelemetryEvent| {
            if let TelemetryEvent::Connection { connection, up } = event {
                sink.lock().unwrap().push((connection.clone(), *up));
            }
        })),
        ..dokebi_lock::Hooks::default()
    };
    let provider = Provider::open_with(dokebi_lock::Options::from_yaml(&through_yaml(&proxy, &schema)).unwrap(), hooks).unwrap();
    let main = |up: bool| ("main".to_owned(), up);
    assert!(block_on(block_on(backend(&provider).acquire("k", wait(0))).unwrap().release()).unwrap());
    assert_eq!(*events.lock().unwrap(), [main(true)]);
    proxy.hold();
    assert_eq!(code(block_on(backend(&provider).acquire("k", wait(0)))), ErrorCode::OutcomeUnknown);
    assert_eq!(*events.lock().unwrap(), [main(true), main(false)]);
    proxy.release();
    let lease = block_on(backend(&provider).acquire("j", wait(5000))).expect("the connection comes back");
    assert!(block_on(lease.release()).unwrap());
    assert_eq!(events.lock().unwrap()[..3], [main(true), main(false), main(true)]);
    block_on(provider.close());
}

/// A release sent through `proxy` with 400 ms of latency each way, whose
/// connection the proxy cuts once `before_the_cut` holds: what the caller
/// hears, and the provider's last error.
fn release_cut_off(before_the_cut: impl Fn(&Schema) -> bool) -> (Result<bool, dokebi_lock::LockError>, Option<ErrorCode>) {
    let schema = Schema::fresh();
    let proxy = Proxy::start(5432, Duration::ZERO);
    let url = format!("postgres://postgres@127.0.0.1:{}/test?sslmode=disable", proxy.port());
    let connection = format!("        listenUrl: '{}'\n", postgres::url());
    let cut_off = Provider::from_yaml(&postgres::yaml_on(&url, &schema.0, "        leaseMs: 60000\n", &connection)).unwrap();
    let other = schema.open("");
    let lease = block_on(backend(&cut_off).acquire("k", wait(0))).unwrap();
    let fence = lease.fence();
    proxy.set_latency(Duration::from_millis(400));
    let releasing = std::thread::spawn(move || block_on(lease.release()));
    postgres::eventually("the moment to cut", || before_the_cut(&schema));
    proxy.cut();
    proxy.set_latency(Duration::ZERO);
    let released = releasing.join().unwrap();
    let last_error = backend(&cut_off).status().postgres.unwrap().last_error;
    if released.is_ok() {
        let next = block_on(backend(&other).acquire("k", wait(0))).expect("the key is free at once");
        assert!(next.fence() > fence);
        assert!(block_on(next.release()).unwrap());
    }
    block_on(cut_off.close());
    block_on(other.close());
    (released, last_error)
}

#[test]
fn a_release_whose_connection_is_cut_after_it_committed_is_retried_and_reported_released() {
    // The release committed (its row is freed) and its answer is on its way
    // back through the proxy, 400 ms late, when the connection is cut.
    let committed =
        |schema: &Schema| count(&format!("SELECT count(*) FROM {} WHERE expires_at = '-infinity'", schema.table("_holders"))) == 1;
    let (released, last_error) = release_cut_off(committed);
    assert_eq!(last_error, Some(ErrorCode::OutcomeUnknown), "the first attempt's answer was lost");
    assert!(released.expect("the retry finds the key released by this lease's token"));
}

#[test]
fn a_release_whose_connection_is_cut_before_it_ran_is_retried_and_releases() {
    // The statement is still in the proxy, 400 ms from the server.
    let sent = |schema: &Schema| {
        std::thread::sleep(Duration::from_millis(100));
        count(&format!("SELECT count(*) FROM {} WHERE expires_at > now()", schema.table("_holders"))) == 1
    };
    let (released, last_error) = release_cut_off(sent);
    assert_eq!(last_error, Some(ErrorCode::OutcomeUnknown), "the first attempt's answer was lost");
    assert!(released.expect("the retry releases the lease"));
}

/// A server that takes connections and never answers: each connect of the
/// driver runs out its `connectTimeoutMs`. Concurrent acquires share the
/// failure of the attempt they waited behind instead of each trying again
/// in turn (the k-th of 20 failed after about k / poolSize connect timeouts):
/// the listener sees at most one attempt per pooled client.
#[test]
fn concurrent_acquires_share_one_failed_connect_per_pooled_client() {
    use std::net::TcpListener;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let accepted = Arc::new(AtomicUsize::new(0));
    {
        let accepted = accepted.clone();
        std::thread::spawn(move || {
            let mut held = Vec::new();
            for stream in listener.incoming().flatten() {
                accepted.fetch_add(1, Ordering::SeqCst);
                held.push(stream);
            }
        });
    }
    let schema = Schema::fresh();
    let url = format!("postgres://postgres@127.0.0.1:{port}/test?sslmode=disable");
    // The listener on the real server: only statements meet the silent one.
    let connection = format!("        connectTimeoutMs: 300\n        poolSize: 2\n        listenUrl: '{}'\n", postgres::url());
    let provider = Provider::from_yaml(&postgres::yaml_on(&url, &schema.0, "", &connection)).unwrap();
    let acquires: Vec<_> = (0..20)
        .map(|n| {
            let backend = backend(&provider);
            std::thread::spawn(move || block_on(backend.acquire(&format!("k{n}"), wait(0))).map(|_| ()))
        })
        .collect();
    for acquire in acquires {
        assert_eq!(acquire.join().unwrap().unwrap_err().code(), ErrorCode::ProviderFailed);
    }
    let attempts = accepted.load(Ordering::SeqCst);
    assert!(attempts <= 2, "{attempts} connect attempts for 20 acquires on a pool of 2");
    block_on(provider.close());
}

//! Statements whose answer is lost: a TCP proxy between the driver and
//! PostgreSQL stops forwarding (connections stay open), so a statement is
//! sent and no answer comes within `commandTimeoutMs`. The caller hears
//! `OUTCOME_UNKNOWN`, never a grant or release it cannot rely on, and the
//! key is not left held once the statement finally runs. The proxy can also
//! cut connections with an answer in flight: a plain release is retried and
//! says what it did; a release that hands the key over in the same call
//! (`_hand_over`) is not retried and stays `OUTCOME_UNKNOWN`, never
//! released or `LEASE_LOST` by what a later call finds.

mod postgres;

#[path = "faults/proxy.rs"]
mod proxy;
#[path = "faults/silent.rs"]
mod silent;

use std::time::{Duration, Instant};

use dokebi_lock::{ErrorCode, Provider};
use futures::executor::block_on;
use postgres::{backend, code, count, wait, Schema};
use proxy::Proxy;
use silent::Silent;

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

/// [`through`] with `commandTimeoutMs` 3000: a statement with up to 900 ms
/// of latency each way is answered in time.
fn through_in_time(proxy: &Proxy, schema: &Schema) -> Provider {
    Provider::from_yaml(&through_yaml(proxy, schema).replace("commandTimeoutMs: 500", "commandTimeoutMs: 3000")).unwrap()
}

/// A release sent through `proxy` with 400 ms of latency each way, whose
/// connection the proxy cuts once `before_the_cut` holds: what the caller
/// hears, and the provider's last error.
fn release_cut_off(before_the_cut: impl Fn(&Schema) -> bool) -> (Result<bool, dokebi_lock::LockError>, Option<ErrorCode>) {
    let schema = Schema::fresh();
    let proxy = Proxy::start(5432, Duration::ZERO);
    let (cut_off, other) = (through_in_time(&proxy, &schema), schema.open(""));
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

/// A waiting acquire whose connection is cut after its take committed (800
/// ms of latency each way: the grant is made, its answer on its way back)
/// gives that grant back by its token and tries again on a new connection:
/// granted, with a fence above the lost grant's, and nothing of the lost
/// grant left once the lease is released.
#[test]
fn a_waiting_acquire_whose_connection_is_cut_after_its_take_committed_gives_that_grant_back_and_is_granted() {
    let schema = Schema::fresh();
    let proxy = Proxy::start(5432, Duration::ZERO);
    let (cut_off, other) = (through_in_time(&proxy, &schema), schema.open(""));
    assert!(block_on(block_on(backend(&cut_off).acquire("k", wait(0))).unwrap().release()).unwrap());
    proxy.set_latency(Duration::from_millis(800));
    let acquiring = std::thread::spawn({
        let backend = backend(&cut_off);
        move || block_on(backend.acquire("k", wait(10_000)))
    });
    let live = format!("SELECT count(*) FROM {} WHERE expires_at > now()", schema.table("_holders"));
    postgres::eventually("the take committed", || count(&live) == 1);
    let lost = count(&format!("SELECT fence FROM {}", schema.table(""))) as u64;
    // The answer, not yet through (800 ms late), never comes.
    proxy.hold();
    proxy.cut();
    proxy.set_latency(Duration::ZERO);
    proxy.release();
    let lease = acquiring.join().unwrap().expect("granted by a try of its own");
    let last_error = backend(&cut_off).status().postgres.unwrap().last_error;
    assert_eq!(last_error, Some(ErrorCode::OutcomeUnknown), "the take's answer was lost");
    assert!(lease.fence() > lost, "a grant of its own ({}), above the lost one ({lost})", lease.fence());
    assert!(block_on(lease.release()).unwrap());
    let next = block_on(backend(&other).acquire("k", wait(0))).expect("nothing of the lost grant is left");
    assert!(block_on(next.release()).unwrap());
    block_on(cut_off.close());
    block_on(other.close());
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
    let silent = Silent::start();
    let provider = unreachable(&silent, "        connectTimeoutMs: 300\n        poolSize: 2\n");
    let acquires: Vec<_> = (0..20)
        .map(|n| {
            let backend = backend(&provider);
            std::thread::spawn(move || block_on(backend.acquire(&format!("k{n}"), wait(0))).map(|_| ()))
        })
        .collect();
    for acquire in acquires {
        assert_eq!(acquire.join().unwrap().unwrap_err().code(), ErrorCode::ProviderFailed);
    }
    let attempts = silent.accepted();
    assert!(attempts <= 2, "{attempts} connect attempts for 20 acquires on a pool of 2");
    block_on(provider.close());
}

/// A provider whose statements go to `silent` (its listener to the real
/// server: only statements meet the silent one), with `connection`'s options.
fn unreachable(silent: &Silent, connection: &str) -> Provider {
    let schema = Schema::fresh();
    let url = format!("postgres://postgres@127.0.0.1:{}/test?sslmode=disable", silent.port());
    let connection = format!("{connection}        listenUrl: '{}'\n", postgres::url());
    Provider::from_yaml(&postgres::yaml_on(&url, &schema.0, "", &connection)).unwrap()
}

/// Acquires that wait, of one key and of several, against a server that
/// never answers: each fails within about one `connectTimeoutMs`. Those
/// of one key queue in this process and try one after the other; each
/// tried its own connect, so the k-th failed after about k connect
/// timeouts (10 of one key: the last after 5 s).
#[test]
fn waiting_acquires_against_an_unreachable_server_fail_within_one_connect_timeout() {
    let silent = Silent::start();
    let provider = unreachable(&silent, "        connectTimeoutMs: 500\n        poolSize: 2\n");
    let started = Instant::now();
    let acquires: Vec<_> = (0..20)
        .map(|n| {
            let backend = backend(&provider);
            let key = if n % 2 == 0 { "one".to_owned() } else { format!("k{n}") };
            std::thread::spawn(move || {
                let outcome = block_on(backend.acquire(&key, wait(30_000))).map(|_| ());
                (key, outcome, started.elapsed())
            })
        })
        .collect();
    let mut last = Duration::ZERO;
    for acquire in acquires {
        let (key, outcome, after) = acquire.join().unwrap();
        assert_eq!(code(outcome), ErrorCode::ProviderFailed, "{key}");
        assert!(after < Duration::from_millis(1_500), "{key} failed after {after:?} (connectTimeoutMs 500)");
        last = last.max(after);
    }
    eprintln!("20 acquires against a silent server: the last failed after {} ms (connectTimeoutMs 500)", last.as_millis());
    block_on(provider.close());
}

/// An acquire that waits less than a connect takes ends when its wait
/// does, `PROVIDER_FAILED` (PostgreSQL could not be reached, nothing was
/// done; not `WAIT_TIMEOUT`, which says the key was held): it waited the
/// whole `connectTimeoutMs`.
#[test]
fn an_acquire_whose_wait_ends_while_connecting_fails_when_its_wait_ends() {
    let silent = Silent::start();
    let provider = unreachable(&silent, "        connectTimeoutMs: 20000\n");
    let started = Instant::now();
    let err = block_on(backend(&provider).acquire("k", wait(300))).unwrap_err();
    let after = started.elapsed();
    assert_eq!(err.code(), ErrorCode::ProviderFailed, "{err}");
    assert!(err.message().contains("waitTimeoutMs"), "{err}");
    assert!(after >= Duration::from_millis(300) && after < Duration::from_millis(2_000), "failed after {after:?} (waitTimeoutMs 300)");
    block_on(provider.close());
}

/// An abort ends an acquire at once while it connects (it waited the whole
/// `connectTimeoutMs`, then answered `PROVIDER_FAILED`), and so does
/// `close()` (`CLOSED`).
#[test]
fn an_abort_or_close_ends_an_acquire_while_it_connects() {
    use dokebi_lock::{AbortController, AcquireOptions};
    let silent = Silent::start();
    let provider = unreachable(&silent, "        connectTimeoutMs: 20000\n");
    let controller = AbortController::new();
    let options = AcquireOptions { signal: Some(controller.signal()), ..wait(60_000) };
    let acquiring = {
        let backend = backend(&provider);
        std::thread::spawn(move || block_on(backend.acquire("k", options)).map(|_| ()))
    };
    postgres::eventually("the acquire connects", || silent.accepted() > 0);
    let aborted = Instant::now();
    controller.abort();
    let outcome = acquiring.join().unwrap();
    let after = aborted.elapsed();
    assert_eq!(code(outcome), ErrorCode::Aborted);
    assert!(after < Duration::from_millis(1_000), "ended {after:?} after the abort");

    let acquiring = {
        let backend = backend(&provider);
        std::thread::spawn(move || block_on(backend.acquire("j", wait(60_000))).map(|_| ()))
    };
    postgres::eventually("the acquire connects again", || silent.accepted() > 1);
    let closed = Instant::now();
    block_on(provider.close());
    let outcome = acquiring.join().unwrap();
    assert_eq!(code(outcome), ErrorCode::Closed);
    assert!(closed.elapsed() < Duration::from_millis(1_000), "ended {:?} after close()", closed.elapsed());
}

/// How the answer of a statement in flight through the proxy is lost.
#[derive(Clone, Copy)]
enum Loss {
    /// The connection is cut (the driver sees it close).
    Cut,
    /// Nothing more comes through until `commandTimeoutMs` has passed.
    Held,
}

/// A reader's release that hands the key to a writer waiting in the same
/// provider (one `_hand_over` call: the give-back and the writer's try, in
/// one transaction), sent through a proxy with 2 s of latency each way
/// (time for a loaded host to see the commit before the answer is through:
/// 900 ms was not enough for a CI run whose builds took the CPU, and the
/// answer came through before the cut), within a `commandTimeoutMs` of 5 s,
/// whose answer is lost (`loss`) once the call committed and the key was
/// granted again: to that writer by the call itself, or, when `other_waits`
/// (another process's writer waiting since before it, whose older mark the
/// call's try must leave first), to that other writer right after the call.
/// Answers what the release reported, and checks that the key then passes
/// on.
fn hand_over_lost(other_waits: bool, loss: Loss) -> Result<bool, dokebi_lock::LockError> {
    use dokebi_lock::{AcquireOptions, LockMode};
    let schema = Schema::fresh();
    let proxy = Proxy::start(5432, Duration::ZERO);
    let slow = through_yaml(&proxy, &schema).replace("commandTimeoutMs: 500", "commandTimeoutMs: 5000");
    let (cut_off, other) = (Provider::from_yaml(&slow).unwrap(), schema.open(""));
    let (here, there) = (backend(&cut_off), backend(&other));
    let reader = block_on(here.acquire("k", AcquireOptions { mode: LockMode::Shared, ..wait(0) })).unwrap();
    let marks = format!("SELECT count(*) FROM {} WHERE lapses_at > now()", schema.table("_waiting"));
    let writer = |backend: &dokebi_lock::Backend| {
        let backend = backend.clone();
        std::thread::spawn(move || block_on(backend.acquire("k", wait(20_000))))
    };
    let elsewhere = other_waits.then(|| writer(&there));
    if other_waits {
        postgres::eventually("the other process's writer waits", || count(&marks) == 1);
    }
    let local = writer(&here);
    postgres::eventually("this process's writer waits", || count(&marks) == if other_waits { 2 } else { 1 });
    proxy.set_latency(Duration::from_millis(2000));
    let fence = reader.fence();
    let releasing = std::thread::spawn(move || block_on(reader.release()));
    // A grant after the release raises the key's fence: the call committed
    // (and granted the key), or the other writer took it after the call.
    let fences = format!("SELECT coalesce(max(fence), 0) FROM {} WHERE key = 'k'", schema.table(""));
    postgres::eventually("the release committed and the key was granted again", || count(&fences) > fence as i64);
    // The answer in flight keeps its 2 s; whatever the driver sends
    // next (a retry) goes through at once.
    proxy.set_latency(Duration::ZERO);
    match loss {
        Loss::Cut => proxy.cut(),
        Loss::Held => proxy.hold(),
    }
    let released = releasing.join().unwrap();
    proxy.release();
    if let Some(elsewhere) = elsewhere {
        let lease = elsewhere.join().unwrap().expect("the other process's writer, first in line, takes the key");
        assert!(lease.fence() > fence);
        assert!(block_on(lease.release()).unwrap());
    }
    // This process's writer picks up the lost call's grant with a try of
    // its own (which may meet the cut connection too, then the driver gives
    // its grant back): either way the key is not left held.
    match local.join().unwrap() {
        Ok(lease) => {
            assert!(lease.fence() > fence);
            assert!(block_on(lease.release()).unwrap());
        }
        Err(err) => assert!(matches!(err.code(), ErrorCode::OutcomeUnknown | ErrorCode::ProviderFailed), "{err}"),
    }
    let next = block_on(there.acquire("k", wait(20_000))).expect("the key is not left held");
    assert!(block_on(next.release()).unwrap());
    block_on(cut_off.close());
    block_on(other.close());
    released
}

#[test]
fn a_release_handed_over_whose_connection_is_cut_after_it_committed_is_outcome_unknown() {
    assert_eq!(code(hand_over_lost(false, Loss::Cut)), ErrorCode::OutcomeUnknown);
}

#[test]
fn a_release_handed_over_whose_answer_times_out_after_it_committed_is_outcome_unknown() {
    assert_eq!(code(hand_over_lost(false, Loss::Held)), ErrorCode::OutcomeUnknown);
}

#[test]
fn a_release_handed_over_whose_connection_is_cut_after_another_process_took_the_key_is_outcome_unknown() {
    assert_eq!(code(hand_over_lost(true, Loss::Cut)), ErrorCode::OutcomeUnknown);
}

//! The spans of the feature `tracing`, seen by a real `tracing-subscriber`
//! registry: one `dokebi-lock acquire` span per acquire and one
//! `dokebi-lock hold` span per granted lease, children of the caller's
//! span, with their fields (never the key) and closed in the order the
//! acquires and holds end; on the local and the redis driver.
//! `cargo test --features tracing --test tracing_spans`.

mod support;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use dokebi_lock::{Backend, ErrorCode, Provider};
use futures::executor::block_on;
use futures_timer::Delay;
use support::redis_server::RedisServer;
use support::{open_redis, wait};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::Subscriber;
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;

/// One span as the layer saw it.
#[derive(Debug, Clone)]
struct Seen {
    name: &'static str,
    parent: Option<&'static str>,
    fields: BTreeMap<String, String>,
}

/// Every span by creation order, and the order they closed in (indices).
#[derive(Default)]
struct Journal {
    spans: Vec<Seen>,
    ids: BTreeMap<u64, usize>,
    closed: Vec<usize>,
}

/// A layer that writes down each span's name, parent, fields and close.
#[derive(Clone, Default)]
struct Recorder(Arc<Mutex<Journal>>);

struct Fields<'a>(&'a mut BTreeMap<String, String>);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
}

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Recorder {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let mut fields = BTreeMap::new();
        attrs.record(&mut Fields(&mut fields));
        let parent = ctx.span(id).and_then(|span| span.parent()).map(|parent| parent.name());
        let mut journal = self.0.lock().unwrap();
        let index = journal.spans.len();
        journal.spans.push(Seen { name: attrs.metadata().name(), parent, fields });
        journal.ids.insert(id.into_u64(), index);
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, _ctx: Context<'_, S>) {
        let mut journal = self.0.lock().unwrap();
        let index = journal.ids[&id.into_u64()];
        values.record(&mut Fields(&mut journal.spans[index].fields));
    }

    fn on_close(&self, id: Id, _ctx: Context<'_, S>) {
        let mut journal = self.0.lock().unwrap();
        // Ids are reused after a close: forget this one.
        let index = journal.ids.remove(&id.into_u64()).unwrap();
        journal.closed.push(index);
    }
}

impl Recorder {
    /// The spans of dokebi-lock (not the test's own), and their close order
    /// as indices into them.
    fn lock_spans(&self) -> (Vec<Seen>, Vec<usize>) {
        let journal = self.0.lock().unwrap();
        let ours: Vec<usize> = (0..journal.spans.len()).filter(|&i| journal.spans[i].name.starts_with("dokebi-lock")).collect();
        let spans = ours.iter().map(|&i| journal.spans[i].clone()).collect();
        let closed = journal.closed.iter().filter_map(|i| ours.iter().position(|o| o == i)).collect();
        (spans, closed)
    }
}

/// Runs `body` with a recording subscriber as this thread's default, inside
/// a `request` span; answers what was recorded.
fn recorded(body: impl FnOnce()) -> (Vec<Seen>, Vec<usize>) {
    let recorder = Recorder::default();
    let subscriber = tracing_subscriber::registry().with(recorder.clone());
    tracing::subscriber::with_default(subscriber, || tracing::info_span!("request").in_scope(body));
    let recorded = recorder.lock_spans();
    for span in &recorded.0 {
        assert!(span.fields.values().all(|value| !value.contains("secret")), "no key in a span: {span:?}");
    }
    recorded
}

fn field<'a>(span: &'a Seen, name: &str) -> &'a str {
    span.fields.get(name).map_or_else(|| panic!("{} has no field {name}: {span:?}", span.name), String::as_str)
}

fn millis(span: &Seen, name: &str) -> u64 {
    field(span, name).parse().unwrap()
}

/// A key held first, then waited for until its holder releases it 40 ms
/// later, then waited for until the wait times out: the spans of both
/// acquires, both holds and the timeout.
fn contend(backend: &Backend) -> (u64, u64) {
    block_on(async {
        let first = backend.acquire("secret-order-42", wait(0)).await.unwrap();
        let release_later = async {
            Delay::new(Duration::from_millis(40)).await;
            assert!(first.release().await.unwrap());
        };
        // The waiter is polled first, so it waits for all of the 40 ms.
        let (second, ()) = futures::join!(backend.acquire("secret-order-42", wait(5_000)), release_later);
        let second = second.unwrap();
        let timeout = backend.acquire("secret-order-42", wait(10)).await.unwrap_err();
        assert_eq!(timeout.code(), ErrorCode::WaitTimeout);
        let fences = (first.fence(), second.fence());
        assert!(second.release().await.unwrap());
        fences
    })
}

fn check_contention(driver: &str, spans: &[Seen], closed: &[usize], fences: (u64, u64)) {
    let names: Vec<&str> = spans.iter().map(|span| span.name).collect();
    let (acquire, hold) = ("dokebi-lock acquire", "dokebi-lock hold");
    assert_eq!(names, [acquire, hold, acquire, hold, acquire], "{spans:#?}");
    assert!(spans.iter().all(|span| span.parent == Some("request")), "every span is the caller's child: {spans:#?}");
    for span in spans {
        assert_eq!(field(span, "driver"), driver);
    }
    for acquire in [&spans[0], &spans[2], &spans[4]] {
        assert_eq!(
            (field(acquire, "mode"), field(acquire, "limit"), field(acquire, "weight"), field(acquire, "key_count")),
            ("exclusive", "1", "1", "1")
        );
    }
    let (first, first_hold, second, second_hold, timeout) = (&spans[0], &spans[1], &spans[2], &spans[3], &spans[4]);
    assert_eq!((field(first, "outcome"), field(first, "fence")), ("granted", fences.0.to_string().as_str()));
    assert!(!first.fields.contains_key("otel.status_code"));
    assert_eq!((field(first_hold, "outcome"), field(first_hold, "fence")), ("released", fences.0.to_string().as_str()));
    assert!(millis(first_hold, "held_ms") >= 40, "{first_hold:?}");
    assert_eq!((field(second, "outcome"), field(second, "fence")), ("granted", fences.1.to_string().as_str()));
    assert!(millis(second, "wait_ms") >= 40, "the waiter waited for the holder's 40 ms: {second:?}");
    assert_eq!(field(second_hold, "fence"), fences.1.to_string());
    assert_eq!((field(timeout, "outcome"), field(timeout, "otel.status_code")), ("WAIT_TIMEOUT", "ERROR"));
    assert!(millis(timeout, "wait_ms") >= 10);
    assert!(!timeout.fields.contains_key("fence"));
    // Each acquire ends before its hold, the timeout while the second lease
    // is held. Locally the waiter is granted inside the first release, so
    // its acquire ends after that hold; a redis waiter is granted by its own
    // script on the driver's thread, which may come before the releasing
    // caller has seen Redis' answer.
    let at = |span: usize| closed.iter().position(|&c| c == span).unwrap();
    assert!(at(0) < at(1) && at(2) < at(3) && at(4) < at(3) && at(2) < at(4), "close order {closed:?}");
    if driver == "local" {
        assert_eq!(closed, [0, 1, 2, 4, 3]);
    }
}

#[test]
fn local_acquires_and_holds_are_spans_of_the_caller() {
    let provider = Provider::from_yaml("schemaVersion: 1\noptions:\n  dokebi-lock:\n    backends:\n      orders: {}\n").unwrap();
    let orders = provider.backend("orders").unwrap();
    let mut fences = (0, 0);
    let (spans, closed) = recorded(|| fences = contend(&orders));
    check_contention("local", &spans, &closed, fences);
    assert_eq!(field(&spans[0], "backend"), "orders");
}

#[test]
fn redis_acquires_and_holds_are_spans_of_the_caller_though_they_end_on_the_driver_thread() {
    let server = RedisServer::start();
    let (provider, _) = open_redis(&server.url(), &[("leaseMs", "10000")], &[]);
    let shared = provider.backend("shared").unwrap();
    let mut fences = (0, 0);
    let (spans, closed) = recorded(|| fences = contend(&shared));
    check_contention("redis", &spans, &closed, fences);
    assert_eq!(field(&spans[0], "backend"), "shared");
}

#[test]
fn a_lease_found_lost_ends_its_hold_span_with_lease_lost() {
    let server = RedisServer::start();
    let (provider, _) = open_redis(&server.url(), &[("leaseMs", "100")], &[("commandTimeoutMs", "90")]);
    let shared = provider.backend("shared").unwrap();
    let (spans, closed) = recorded(|| {
        block_on(async {
            let lease = shared.acquire_many(&["secret-a", "secret-b"], wait(0)).await.unwrap();
            thread::sleep(Duration::from_millis(150));
            let taken = shared.acquire("secret-a", wait(0)).await.unwrap();
            assert_eq!(lease.release().await.unwrap_err().code(), ErrorCode::LeaseLost);
            drop(taken);
        })
    });
    let names: Vec<&str> = spans.iter().map(|span| span.name).collect();
    assert_eq!(names, ["dokebi-lock acquire", "dokebi-lock hold", "dokebi-lock acquire", "dokebi-lock hold"]);
    assert_eq!(field(&spans[0], "key_count"), "2");
    let lost = &spans[1];
    assert_eq!((field(lost, "outcome"), field(lost, "otel.status_code")), ("LEASE_LOST", "ERROR"));
    assert!(millis(lost, "held_ms") >= 150);
    // The dropped lease's hold ends (released in the background) as well.
    assert_eq!(field(&spans[3], "outcome"), "released");
    assert_eq!(closed, [0, 2, 1, 3]);
}

#[test]
fn a_subscriber_that_does_not_want_the_spans_records_none() {
    let provider = Provider::from_yaml("schemaVersion: 1\noptions:\n  dokebi-lock:\n    backends:\n      orders: {}\n").unwrap();
    let orders = provider.backend("orders").unwrap();
    let recorder = Recorder::default();
    let quiet = tracing_subscriber::filter::filter_fn(|metadata| !metadata.target().starts_with("dokebi_lock"));
    let subscriber = tracing_subscriber::registry().with(recorder.clone().with_filter(quiet));
    tracing::subscriber::with_default(subscriber, || {
        tracing::info_span!("request").in_scope(|| contend(&orders));
    });
    assert!(recorder.lock_spans().0.is_empty());
    assert_eq!(recorder.0.lock().unwrap().spans.len(), 1, "the test's own span is recorded");
}

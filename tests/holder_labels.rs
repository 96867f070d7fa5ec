//! Holder labels (`dokebi-lock.holder`) on every driver that keeps holders,
//! against the real stores: two providers (two processes' connections) with
//! labels of their own; `inspect` names each key's holders, and a
//! `WAIT_TIMEOUT` or `LOCK_BUSY` carries, in its details, the holders of the
//! key that kept the acquire out. A label of every character a store's
//! protocol might read (quotes, commas, colons, braces, `%`, non-ASCII)
//! changes nothing of the lock.

mod mysql;
mod postgres;
mod support;

use std::collections::BTreeSet;
use std::thread;

use dokebi_lock::{AcquireOptions, Backend, ErrorCode, HolderLabel, LockError, LockMode, Options, Provider};
use futures::executor::block_on;
use serde_json::Value;
use support::redis_server::RedisServer;
use support::{inspect, labelled, redis_yaml_at, take, wait};

const WEB: &str = "web-3:4182";
const WORKER: &str = "worker ü";
/// Every character a store's protocol reads in a token.
const HOSTILE: &str = "'),\";{}%:\\ ü";

fn details(error: &LockError) -> &Value {
    error.details().unwrap_or_else(|| panic!("{:?} without details: {error}", error.code()))
}

fn labels_of(details: &Value) -> BTreeSet<String> {
    details["holders"].as_array().unwrap().iter().map(|holder| holder["label"].as_str().unwrap().to_owned()).collect()
}

/// The checks every driver passes: `web` and `worker` are two providers'
/// backends of one store, labelled [`WEB`] and [`WORKER`].
fn names_the_holders(web: &Backend, worker: &Backend, leases: bool) {
    let plain = take(web, "k", wait(0));
    let found = inspect(worker, "k");
    assert_eq!(found.holders.iter().map(|h| h.label.as_deref()).collect::<Vec<_>>(), [Some(WEB)], "{found:?}");

    // A try: LOCK_BUSY names the holder.
    let busy = block_on(worker.acquire("k", wait(0))).unwrap_err();
    assert_eq!(busy.code(), ErrorCode::LockBusy);
    let told = details(&busy);
    assert_eq!(labels_of(told), BTreeSet::from([WEB.to_owned()]), "{told}");
    assert_eq!((told["held"].as_u64(), told.get("keyIndex")), (Some(1), None), "{told}");
    assert_eq!(told["holders"][0]["units"], 1);
    if leases {
        let left = told["holders"][0]["remainingMs"].as_u64().expect("a lease's remaining ms");
        assert!(left > 0 && left <= 10_000, "{told}");
    } else {
        assert_eq!(told["holders"][0]["fence"].as_str(), Some(plain.fence().to_string().as_str()), "{told}");
    }

    // A wait that ends: WAIT_TIMEOUT names it too.
    let timed_out = block_on(worker.acquire("k", wait(150))).unwrap_err();
    assert_eq!(timed_out.code(), ErrorCode::WaitTimeout);
    assert_eq!(labels_of(details(&timed_out)), BTreeSet::from([WEB.to_owned()]), "{timed_out:?}");

    // Several keys: the one that kept the acquire out, by its place.
    let many = block_on(worker.acquire_many(&["free", "k"], wait(0))).unwrap_err();
    assert_eq!(many.code(), ErrorCode::LockBusy);
    assert_eq!((details(&many)["keyIndex"].as_u64(), labels_of(details(&many))), (Some(1), BTreeSet::from([WEB.to_owned()])));
    assert!(block_on(plain.release()).unwrap());

    // Readers of both providers, and a writer kept out by them.
    let shared = AcquireOptions { mode: LockMode::Shared, ..wait(0) };
    let readers = [take(web, "r", shared.clone()), take(worker, "r", shared)];
    let both = BTreeSet::from([WEB.to_owned(), WORKER.to_owned()]);
    let read: BTreeSet<String> = inspect(web, "r").holders.iter().map(|h| h.label.clone().unwrap()).collect();
    assert_eq!(read, both);
    let writer = block_on(web.acquire("r", wait(0))).unwrap_err();
    assert_eq!((writer.code(), labels_of(details(&writer))), (ErrorCode::LockBusy, both.clone()));
    assert_eq!(details(&writer)["held"], 2);
    for lease in readers {
        assert!(block_on(lease.release()).unwrap());
    }

    // Counted holders, each with its units.
    let counted = |weight| AcquireOptions { limit: Some(3), weight: Some(weight), ..wait(0) };
    let units = [take(web, "c", counted(1)), take(worker, "c", counted(2))];
    let full = block_on(web.acquire("c", counted(1))).unwrap_err();
    let mut told: Vec<(String, u64)> = details(&full)["holders"]
        .as_array()
        .unwrap()
        .iter()
        .map(|holder| (holder["label"].as_str().unwrap().to_owned(), holder["units"].as_u64().unwrap()))
        .collect();
    told.sort();
    assert_eq!(told, [(WEB.to_owned(), 1), (WORKER.to_owned(), 2)]);
    for lease in units {
        assert!(block_on(lease.release()).unwrap());
    }

    // Released since: a timeout whose key is free by the time it is read
    // says so (no holder) rather than naming one.
    let free = block_on(worker.acquire("k", wait(0))).unwrap();
    assert!(block_on(free.release()).unwrap());
}

/// A label of every character a store reads: a key is granted, waited for,
/// handed on, renewed and released as ever, and read back as given.
fn a_hostile_label_changes_nothing(hostile: &Backend, other: &Backend) {
    let lease = take(hostile, "h", wait(0));
    assert_eq!(inspect(other, "h").holders[0].label.as_deref(), Some(HOSTILE));
    let waiter = {
        let other = other.clone();
        thread::spawn(move || block_on(other.acquire("h", wait(10_000))))
    };
    support::eventually("the waiter shows", || inspect(hostile, "h").waiting >= 1);
    assert!(block_on(lease.renew()).unwrap());
    assert!(block_on(lease.release()).unwrap());
    let handed = waiter.join().unwrap().expect("the waiter is granted");
    assert!(handed.fence() > lease.fence());
    let busy = block_on(hostile.acquire("h", wait(0))).unwrap_err();
    assert_eq!(labels_of(details(&busy)), BTreeSet::from([WEB.to_owned()]));
    assert!(block_on(handed.release()).unwrap());
    let again = take(hostile, "h", wait(0));
    assert!(block_on(again.release()).unwrap());
    assert!(!inspect(other, "h").is_held());
}

/// An acquire's own label (`AcquireOptions::holder`): its lease is named by
/// it, not by its provider's, whether granted at once or after a wait, and
/// beside leases of the provider's label (`worker`'s is `worker_label`).
fn an_acquire_names_its_own_holder(web: &Backend, worker: &Backend, worker_label: &str) {
    let job = |name: &str, options: AcquireOptions| options.held_by(Some(HolderLabel::of_acquire(name).unwrap()));
    let lease = take(web, "own", job("job-7", wait(0)));
    assert_eq!(inspect(worker, "own").holders[0].label.as_deref(), Some("job-7"));
    let busy = block_on(worker.acquire("own", wait(0))).unwrap_err();
    assert_eq!(labels_of(details(&busy)), BTreeSet::from(["job-7".to_owned()]));

    // A waiter's label goes with it to its grant.
    let waiter = {
        let worker = worker.clone();
        thread::spawn(move || block_on(worker.acquire("own", job("job 8 ü", wait(10_000)))))
    };
    support::eventually("the waiter shows", || inspect(web, "own").waiting >= 1);
    assert!(block_on(lease.release()).unwrap());
    let handed = waiter.join().unwrap().expect("the waiter is granted");
    assert_eq!(inspect(web, "own").holders[0].label.as_deref(), Some("job 8 ü"));
    assert!(block_on(handed.release()).unwrap());

    // Readers with and without a label of their own.
    let shared = AcquireOptions { mode: LockMode::Shared, ..wait(0) };
    let readers = [take(web, "own", job("report", shared.clone())), take(worker, "own", shared)];
    let read: BTreeSet<String> = inspect(web, "own").holders.iter().map(|h| h.label.clone().unwrap()).collect();
    assert_eq!(read, BTreeSet::from(["report".to_owned(), worker_label.to_owned()]));
    for lease in readers {
        assert!(block_on(lease.release()).unwrap());
    }
    // Several keys, one label.
    let set = block_on(web.acquire_many(&["own", "other"], job("batch", wait(0)))).unwrap();
    assert_eq!(inspect(worker, "other").holders[0].label.as_deref(), Some("batch"));
    assert!(block_on(set.release()).unwrap());
}

#[test]
fn an_acquire_s_label_is_checked() {
    for (bad, problem) in [("", "empty"), (&"x".repeat(41) as &str, "at most 40"), ("a\u{202e}b", "invisible")] {
        let error = HolderLabel::of_acquire(bad).unwrap_err();
        assert_eq!(error.code(), ErrorCode::InvalidArgument, "{bad:?}");
        assert!(error.message().contains(problem), "{bad:?}: {error}");
    }
    assert_eq!(HolderLabel::of_acquire("job-7").unwrap().as_str(), "job-7");
}

#[test]
fn local_holders_carry_the_provider_s_label() {
    let yaml = "schemaVersion: 1\noptions:\n  dokebi-lock:\n    backends:\n      shared: {}\n";
    let provider = labelled(yaml, WEB);
    let backend = provider.backend("shared").unwrap();
    let lease = take(&backend, "k", wait(0));
    assert_eq!(inspect(&backend, "k").holders[0].label.as_deref(), Some(WEB));
    for ended in [block_on(backend.acquire("k", wait(0))).unwrap_err(), block_on(backend.acquire("k", wait(50))).unwrap_err()] {
        let told = details(&ended);
        assert_eq!(labels_of(told), BTreeSet::from([WEB.to_owned()]), "{told}");
        assert_eq!(told["holders"][0]["fence"].as_str(), Some(lease.fence().to_string().as_str()));
        assert!(told["holders"][0]["remainingMs"].is_null(), "a local lease does not expire");
    }
    let many = block_on(backend.acquire_many(&["free", "k"], wait(0))).unwrap_err();
    assert_eq!(details(&many)["keyIndex"], 1);
    assert!(block_on(lease.release()).unwrap());
    // Another provider's local backend is another engine: this one serves
    // both ends.
    an_acquire_names_its_own_holder(&backend, &backend, WEB);
}

#[test]
fn redis_names_the_holders_of_every_process() {
    let server = RedisServer::start();
    let yaml = redis_yaml_at(&format!("url: {}", server.url()), "        leaseMs: 10000\n", "");
    let (web, worker) = (labelled(&yaml, WEB), labelled(&yaml, WORKER));
    names_the_holders(&web.backend("shared").unwrap(), &worker.backend("shared").unwrap(), true);
    an_acquire_names_its_own_holder(&web.backend("shared").unwrap(), &worker.backend("shared").unwrap(), WORKER);
    let hostile = labelled(&yaml, HOSTILE);
    a_hostile_label_changes_nothing(&hostile.backend("shared").unwrap(), &web.backend("shared").unwrap());
}

#[test]
fn postgres_names_the_holders_of_every_process() {
    let schema = postgres::Schema::fresh();
    let yaml = schema.yaml("", "");
    let (web, worker) = (labelled(&yaml, WEB), labelled(&yaml, WORKER));
    names_the_holders(&postgres::backend(&web), &postgres::backend(&worker), true);
    an_acquire_names_its_own_holder(&postgres::backend(&web), &postgres::backend(&worker), WORKER);
    let hostile = labelled(&yaml, HOSTILE);
    a_hostile_label_changes_nothing(&postgres::backend(&hostile), &postgres::backend(&web));
}

#[test]
fn mysql_names_the_holders_of_every_process() {
    let table = mysql::Table::fresh();
    let yaml = mysql::yaml(&table.0, "");
    let (web, worker) = (labelled(&yaml, WEB), labelled(&yaml, WORKER));
    names_the_holders(&web.backend("shared").unwrap(), &worker.backend("shared").unwrap(), true);
    an_acquire_names_its_own_holder(&web.backend("shared").unwrap(), &worker.backend("shared").unwrap(), WORKER);
    let hostile = labelled(&yaml, HOSTILE);
    a_hostile_label_changes_nothing(&hostile.backend("shared").unwrap(), &web.backend("shared").unwrap());
}

#[test]
fn a_store_s_wait_timeout_telemetry_names_the_holders() {
    use dokebi_lock::telemetry::TelemetryEvent;
    use dokebi_lock::Hooks;
    use std::sync::{Arc, Mutex};
    let server = RedisServer::start();
    let yaml = redis_yaml_at(
        &format!("url: {}", server.url()),
        "        leaseMs: 10000
        slowAcquireMs: 10
",
        "",
    );
    let web = labelled(&yaml, WEB);
    let events = Arc::new(Mutex::new(Vec::new()));
    let sink = events.clone();
    let mut options = Options::from_yaml(&yaml).unwrap();
    options.holder = HolderLabel::new(WORKER).unwrap();
    let hooks =
        Hooks { telemetry: Some(Arc::new(move |event: &TelemetryEvent| sink.lock().unwrap().push(event.clone()))), ..Hooks::default() };
    let worker = Provider::open_with(options, hooks).unwrap();
    let lease = take(&web.backend("shared").unwrap(), "k", wait(0));
    let timed_out = block_on(worker.backend("shared").unwrap().acquire("k", wait(100))).unwrap_err();
    let events = events.lock().unwrap();
    let told: Vec<&Value> = events
        .iter()
        .filter_map(|event| match event {
            TelemetryEvent::WaitTimeout { details, .. } | TelemetryEvent::SlowAcquire { details, .. } => details.as_ref(),
            _ => None,
        })
        .collect();
    assert_eq!(told.len(), 2, "a wait-timeout and a slow-acquire event: {events:?}");
    for details in told {
        assert_eq!(Some(details), timed_out.details());
        assert_eq!(labels_of(details), BTreeSet::from([WEB.to_owned()]));
    }
    assert!(block_on(lease.release()).unwrap());
}

#[test]
fn a_policy_tells_the_member_s_holders() {
    let yaml = "schemaVersion: 1\noptions:\n  dokebi-lock:\n    backends:\n      near: {}\n      \
                shared:\n        driver: policy\n        default: { backends: [near] }\n";
    let provider = labelled(yaml, WEB);
    let policy = provider.backend("shared").unwrap();
    let lease = take(&policy, "k", wait(0));
    let busy = block_on(policy.acquire("k", wait(0))).unwrap_err();
    assert_eq!(busy.code(), ErrorCode::LockBusy);
    assert_eq!(labels_of(details(&busy)), BTreeSet::from([WEB.to_owned()]), "{busy:?}");
    assert!(block_on(lease.release()).unwrap());
}

#[test]
fn the_default_label_is_this_host_and_pid() {
    let server = RedisServer::start();
    let yaml = redis_yaml_at(&format!("url: {}", server.url()), "        leaseMs: 10000\n", "");
    let provider = Provider::from_yaml(&yaml).unwrap();
    let backend = provider.backend("shared").unwrap();
    let lease = take(&backend, "k", wait(0));
    let label = inspect(&backend, "k").holders[0].label.clone().unwrap();
    assert!(label.ends_with(&format!(":{}", std::process::id())), "{label}");
    assert_eq!(&label[..label.rfind(':').unwrap()], host_name().trim(), "the host's name");
    assert!(block_on(lease.release()).unwrap());
}

/// This host's name as the `hostname` command reads it.
fn host_name() -> String {
    String::from_utf8(std::process::Command::new("hostname").output().unwrap().stdout).unwrap()
}

#[test]
fn the_option_is_checked() {
    let with = |holder: &str| {
        Options::from_yaml(&format!("schemaVersion: 1\noptions:\n  dokebi-lock:\n    holder: {holder}\n    backends: {{}}\n"))
    };
    assert_eq!(with("'api-7:12'").unwrap().holder.as_str(), "api-7:12");
    for (bad, problem) in [("''", "empty"), ("3", "string"), (&format!("'{}'", "x".repeat(41)), "at most 40"), ("\"a\\nb\"", "control")] {
        let error = with(bad).unwrap_err();
        assert_eq!(error.code(), ErrorCode::InvalidOptions, "{bad}");
        let issues = error.issues();
        assert!(issues.iter().any(|issue| issue.path == "holder" && issue.message.contains(problem)), "{bad}: {issues:?}");
    }
    // Each byte outside letters, digits and . _ ~ - takes three.
    assert!(with(&format!("'{}'", ":".repeat(14))).is_err());
}

//! Review R62 of per-acquire holder labels: labelled and plain leases of
//! one key (a labelled plain lease is a holder, an unlabelled one its key's
//! slot) through grants, hand-offs, stale releases after slot reuse,
//! forceRelease and close on local, and the longest label (a 63-byte token)
//! of every kind on redis, postgres and mysql. All held; the findings were
//! the Node surface's (npm/test/review-r62.test.js).

mod mysql;
mod postgres;
mod support;

use std::thread;

use dokebi_lock::local::{Acquired, CancelReason, LocalEngine};
use dokebi_lock::options::LocalOptions;
use dokebi_lock::{AcquireOptions, Backend, ErrorCode, HolderLabel, LockKind, LockMode};
use futures::executor::block_on;
use support::{inspect, labelled, take, wait};

fn job(name: &str, options: AcquireOptions) -> AcquireOptions {
    options.held_by(Some(HolderLabel::of_acquire(name).unwrap()))
}

/// The engine's holders of `k`: units, fence and label each.
fn held(engine: &LocalEngine<u32>) -> Vec<(u32, u64, Option<HolderLabel>)> {
    engine.inspect("k").holders.into_iter().map(|holder| (holder.units, holder.fence, holder.label)).collect()
}

fn labels(backend: &Backend, key: &str) -> Vec<Option<String>> {
    inspect(backend, key).holders.into_iter().map(|h| h.label).collect()
}

/// A 40-byte label (as stored) of characters a store protocol reads.
const LONGEST: &str = ":,;'\"{}%\\ :,;x";

/// Labelled and unlabelled exclusive leases of one key, queued in turn,
/// with a stale release after the holder slot is reused, a force release
/// and a close with labelled waiters.
fn interleave(a: &Backend, b: &Backend, provider_b: &str, expires: bool) {
    let first = take(a, "k", job("first", wait(0)));
    assert_eq!(block_on(b.acquire("k", wait(0))).unwrap_err().code(), ErrorCode::LockBusy);
    assert_eq!(block_on(b.acquire("k", job(LONGEST, wait(0)))).unwrap_err().code(), ErrorCode::LockBusy);
    let w1 = {
        let b = b.clone();
        thread::spawn(move || block_on(b.acquire("k", job(LONGEST, wait(10_000)))))
    };
    support::eventually("w1 queued", || inspect(a, "k").waiting >= 1);
    let w2 = {
        let b = b.clone();
        thread::spawn(move || block_on(b.acquire("k", wait(10_000))))
    };
    if expires {
        support::eventually("w2 queued", || inspect(a, "k").waiting >= 2);
    } else {
        thread::sleep(std::time::Duration::from_millis(300));
    }
    assert!(block_on(first.release()).unwrap());
    let g1 = w1.join().unwrap().expect("w1 granted");
    assert_eq!(labels(a, "k"), [Some(LONGEST.to_owned())]);
    assert!(g1.fence() > first.fence());
    assert!(!block_on(first.release()).unwrap_or(false));
    assert!(block_on(g1.release()).unwrap());
    let g2 = w2.join().unwrap().expect("w2 granted");
    assert_eq!(labels(a, "k"), [Some(provider_b.to_owned())]);
    assert!(g2.fence() > g1.fence());
    assert!(!block_on(g1.release()).unwrap_or(false));
    assert!(g2.is_valid());
    assert!(block_on(g2.release()).unwrap());

    // counted and shared, labelled and not, over several keys
    let counted = AcquireOptions { limit: Some(3), weight: Some(2), ..wait(0) };
    let c1 = take(a, "c", job(LONGEST, counted.clone()));
    assert_eq!(block_on(b.acquire("c", counted.clone())).unwrap_err().code(), ErrorCode::LockBusy);
    let c2 = take(b, "c", AcquireOptions { limit: Some(3), weight: Some(1), ..wait(0) });
    let mut got = labels(a, "c");
    got.sort();
    let mut want = vec![Some(LONGEST.to_owned()), Some(provider_b.to_owned())];
    want.sort();
    assert_eq!(got, want);
    assert!(block_on(c1.release()).unwrap());
    assert!(block_on(c2.release()).unwrap());
    let many = block_on(a.acquire_many(&["m1", "m2", "m3"], job(LONGEST, wait(0)))).unwrap();
    assert_eq!(block_on(b.acquire_many(&["m3", "m4"], job("x", wait(0)))).unwrap_err().code(), ErrorCode::LockBusy);
    assert!(block_on(many.release()).unwrap());
    let shared = AcquireOptions { mode: LockMode::Shared, ..wait(0) };
    let r = take(a, "s", job(LONGEST, shared.clone()));
    assert_eq!(block_on(b.acquire("s", job(LONGEST, wait(0)))).unwrap_err().code(), ErrorCode::LockBusy);
    assert!(block_on(r.release()).unwrap());
}

#[test]
fn r62_local_interleavings() {
    let yaml = "schemaVersion: 1\noptions:\n  dokebi-lock:\n    backends:\n      shared: {}\n";
    let provider = labelled(yaml, "prov");
    let backend = provider.backend("shared").unwrap();
    interleave(&backend, &backend, "prov", true);

    // stale id after the holder slot is reused
    let a = take(&backend, "s", job("a", wait(0)));
    let Backend::Local(local) = &backend else { unreachable!() };
    assert!(block_on(a.release()).unwrap());
    let b = take(&backend, "s", job("b", wait(0)));
    assert!(b.is_valid());
    assert_eq!(local.counts().held, 1);
    // force release of labelled holders hands on to a labelled waiter
    let w = {
        let backend = backend.clone();
        thread::spawn(move || block_on(backend.acquire("s", job("w", wait(10_000)))))
    };
    support::eventually("w queued", || inspect(&backend, "s").waiting >= 1);
    assert_eq!(block_on(backend.force_release("s")).unwrap().removed, 1);
    let gw = w.join().unwrap().expect("w granted");
    assert_eq!(labels(&backend, "s"), [Some("w".to_owned())]);
    assert!(!block_on(b.release()).unwrap_or(false));
    assert!(gw.is_valid());
    // close with labelled waiters
    let q = {
        let backend = backend.clone();
        thread::spawn(move || block_on(backend.acquire("s", job("q", wait(10_000)))))
    };
    support::eventually("q queued", || inspect(&backend, "s").waiting >= 1);
    local.close();
    assert_eq!(q.join().unwrap().unwrap_err().code(), ErrorCode::Closed);
    assert!(!gw.is_valid());
}

/// The engine directly: plain and labelled leases of one key, stale ids,
/// cancels, counts.
#[test]
fn r62_engine_plain_and_labelled() {
    let label = |s: &str| Some(HolderLabel::new(s).unwrap());
    let mut engine: LocalEngine<u32> = LocalEngine::new(LocalOptions { max_waiters: 4, max_keys: 4, ..LocalOptions::default() });
    let Acquired::Granted(plain) = engine.acquire_one("k", LockKind::EXCLUSIVE, None, true, |_| 0).unwrap() else { panic!() };
    let Acquired::Queued(w) = engine.acquire_one("k", LockKind::EXCLUSIVE, label("w"), true, |_| 1).unwrap() else { panic!() };
    let Acquired::Queued(_p) = engine.acquire_one("k", LockKind::EXCLUSIVE, None, true, |_| 2).unwrap() else { panic!() };
    assert!(engine.release(plain));
    let (one, lw) = engine.pop_granted().unwrap();
    assert_eq!(one, 1);
    assert!(!engine.release(plain));
    assert_eq!(held(&engine), vec![(1, lw.fence, label("w"))]);
    assert_eq!(engine.cancel(w, CancelReason::Aborted), None);
    assert!(engine.release(lw));
    let (two, lp) = engine.pop_granted().unwrap();
    assert_eq!(two, 2);
    assert_eq!(held(&engine), vec![(1, lp.fence, None)]);
    assert!(!engine.release(lw));
    assert_eq!(engine.counts().held, 1);
    assert_eq!(engine.holders_of("k"), vec![lp]);
    assert!(engine.release(lp));
    assert_eq!(engine.counts().held, 0);
    assert_eq!(held(&engine), vec![]);
}

#[test]
fn r62_redis_interleavings() {
    let _one = support::one_at_a_time();
    let ns = format!("r62-{}", std::process::id());
    let yaml = support::redis_yaml("redis://127.0.0.1:6379", "        leaseMs: 10000\n", "")
        .replace("namespace: test", &format!("namespace: {ns}"));
    let (a, b) = (labelled(&yaml, "web"), labelled(&yaml, "worker"));
    interleave(&support::backend(&a), &support::backend(&b), "worker", false);
}

#[test]
fn r62_postgres_interleavings() {
    let _one = support::one_at_a_time();
    let schema = postgres::Schema::fresh();
    let yaml = schema.yaml("", "");
    let (a, b) = (labelled(&yaml, "web"), labelled(&yaml, "worker"));
    interleave(&postgres::backend(&a), &postgres::backend(&b), "worker", false);
}

#[test]
fn r62_mysql_interleavings() {
    let _one = support::one_at_a_time();
    let table = mysql::Table::fresh();
    let yaml = mysql::yaml(&table.0, "");
    let (a, b) = (labelled(&yaml, "web"), labelled(&yaml, "worker"));
    interleave(&support::backend(&a), &support::backend(&b), "worker", false);
}

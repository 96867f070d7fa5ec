//! Property tests of the local state machine against a naive reference
//! model: random interleavings of acquires (exclusive, shared, counted with
//! weights, one key or several), releases, cancels (what a timeout or an
//! abort does) and close never let a writer overlap anyone or hold more than
//! a key's limit, grant exactly the waiters the model grants (FIFO per key,
//! across modes and key sets), keep fences growing, name the first in line
//! right, and bring every counter back to zero.

use std::collections::BTreeSet;

use dokebi_lock::local::{Acquired, CancelReason, LeaseId, LocalEngine, WaiterId};
use dokebi_lock::options::LocalOptions;
use dokebi_lock::{ErrorCode, HolderLabel, LockKind, LockMode};
use proptest::prelude::*;

const SHARED: LockKind = LockKind { mode: LockMode::Shared, limit: 1, weight: 1 };

/// Every third caller gives its acquire a label of its own (a plain lease
/// so labelled is not the key's plain slot but a holder).
fn label_of(caller: u64) -> Option<HolderLabel> {
    (caller % 3 == 0).then(|| HolderLabel::new(&format!("caller {caller}")).unwrap())
}

fn counted(limit: u32, weight: u32) -> LockKind {
    LockKind { mode: LockMode::Exclusive, limit, weight }
}

#[derive(Debug, Clone)]
enum Op {
    Acquire { keys: Vec<u8>, kind: LockKind, may_wait: bool },
    Release { pick: usize },
    Cancel { pick: usize, timed_out: bool },
    ReleaseStale { pick: usize },
}

fn kind() -> impl Strategy<Value = LockKind> {
    prop_oneof![
        3 => Just(LockKind::EXCLUSIVE),
        3 => Just(SHARED),
        2 => (1u32..=3).prop_map(|weight| counted(3, weight)),
    ]
}

fn keys() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        3 => (0u8..4).prop_map(|key| vec![key]),
        2 => proptest::sample::subsequence(vec![0u8, 1, 2, 3], 2..=3).prop_shuffle(),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => (keys(), kind(), any::<bool>()).prop_map(|(keys, kind, may_wait)| Op::Acquire { keys, kind, may_wait }),
        3 => any::<usize>().prop_map(|pick| Op::Release { pick }),
        1 => (any::<usize>(), any::<bool>()).prop_map(|(pick, timed_out)| Op::Cancel { pick, timed_out }),
        1 => any::<usize>().prop_map(|pick| Op::ReleaseStale { pick }),
    ]
}

/// A lease or a queued acquire of the model.
#[derive(Debug, Clone)]
struct Request {
    caller: u64,
    keys: Vec<String>,
    kind: LockKind,
}

/// The naive model: who holds what, and every queued acquire in arrival
/// order. A queued acquire is granted when no earlier queued acquire shares
/// a key with it and each of its keys admits it.
#[derive(Default)]
struct Model {
    held: Vec<(Request, LeaseId)>,
    queue: Vec<(Request, WaiterId)>,
}

impl Model {
    fn units(&self, key: &str) -> u32 {
        self.held
            .iter()
            .filter(|(r, _)| r.kind.mode == LockMode::Exclusive && r.keys.iter().any(|k| k == key))
            .map(|(r, _)| r.kind.weight)
            .sum()
    }

    fn readers(&self, key: &str) -> usize {
        self.held.iter().filter(|(r, _)| r.kind.mode == LockMode::Shared && r.keys.iter().any(|k| k == key)).count()
    }

    /// The limit of a key in use (held or waited for).
    fn limit(&self, key: &str) -> Option<u32> {
        let held = self.held.iter().map(|(r, _)| r);
        let queued = self.queue.iter().map(|(r, _)| r);
        held.chain(queued).find(|r| r.keys.iter().any(|k| k == key)).map(|r| r.kind.limit)
    }

    fn in_use(&self) -> BTreeSet<String> {
        let held = self.held.iter().flat_map(|(r, _)| r.keys.iter());
        let queued = self.queue.iter().flat_map(|(r, _)| r.keys.iter());
        held.chain(queued).cloned().collect()
    }

    fn admits(&self, key: &str, kind: LockKind) -> bool {
        match kind.mode {
            LockMode::Exclusive => self.readers(key) == 0 && self.units(key) + kind.weight <= kind.limit,
            LockMode::Shared => self.units(key) == 0,
        }
    }

    /// No queued acquire before `before` shares a key with `request`.
    fn first_on_its_keys(&self, request: &Request, before: usize) -> bool {
        self.queue[..before].iter().all(|(r, _)| r.keys.iter().all(|k| !request.keys.contains(k)))
    }

    fn grantable(&self, index: usize) -> bool {
        let request = &self.queue[index].0;
        self.first_on_its_keys(request, index) && request.keys.iter().all(|k| self.admits(k, request.kind))
    }

    /// Grants every queued acquire that can go, in order, to a fixpoint:
    /// the callers granted, and their (now stale) waiter ids.
    fn settle(&mut self) -> (BTreeSet<u64>, Vec<WaiterId>) {
        let mut granted = (BTreeSet::new(), Vec::new());
        while let Some(index) = (0..self.queue.len()).find(|&i| self.grantable(i)) {
            let (request, waiter) = self.queue.remove(index);
            granted.0.insert(request.caller);
            granted.1.push(waiter);
            // The lease id comes from the engine; patched in by the caller.
            self.held.push((request, LeaseId { slot: u32::MAX, fence: 0 }));
        }
        granted
    }
}

struct Run {
    engine: LocalEngine<u64>,
    model: Model,
    released: Vec<LeaseId>,
    /// Waiters granted or cancelled: stale ids.
    gone: Vec<WaiterId>,
    next_caller: u64,
    last_fence: u64,
    grants: u64,
    timed_out: u64,
    options: LocalOptions,
}

impl Run {
    fn new(options: LocalOptions) -> Run {
        Run {
            engine: LocalEngine::new(options),
            model: Model::default(),
            released: Vec::new(),
            gone: Vec::new(),
            next_caller: 0,
            last_fence: 0,
            grants: 0,
            timed_out: 0,
            options,
        }
    }

    fn check_fence(&mut self, lease: LeaseId) {
        assert!(lease.fence > self.last_fence, "fences grow with every grant");
        self.last_fence = lease.fence;
        self.grants += 1;
    }

    /// The engine's grants from the last call match the model's.
    fn check_grants(&mut self) {
        let (expected, waiters) = self.model.settle();
        self.gone.extend(waiters);
        let mut granted = BTreeSet::new();
        while let Some((caller, lease)) = self.engine.pop_granted() {
            self.check_fence(lease);
            assert!(granted.insert(caller));
            let held = self.model.held.iter_mut().find(|(r, _)| r.caller == caller).expect("the engine granted a caller the model did not");
            held.1 = lease;
        }
        assert_eq!(granted, expected, "the engine grants exactly the waiters the model lets in");
    }

    fn acquire(&mut self, keys: Vec<u8>, kind: LockKind, may_wait: bool) {
        let keys: Vec<String> = keys.iter().map(|k| format!("k{k}")).collect();
        let names: Vec<&str> = keys.iter().map(String::as_str).collect();
        self.next_caller += 1;
        let caller = self.next_caller;
        let result = match &names[..] {
            [key] => self.engine.acquire_one(key, kind, label_of(caller), may_wait, |_| caller),
            _ => self.engine.acquire_many(&names, kind, label_of(caller), may_wait, |_| caller),
        };
        let in_use = self.model.in_use();
        let added = keys.iter().filter(|k| !in_use.contains(*k)).count();
        let other_limit = keys.iter().any(|k| self.model.limit(k).is_some_and(|limit| limit != kind.limit));
        let request = Request { caller, keys: keys.clone(), kind };
        let free = self.model.first_on_its_keys(&request, self.model.queue.len()) && keys.iter().all(|k| self.model.admits(k, kind));
        match result {
            Ok(Acquired::Granted(lease)) => {
                assert!(free && !other_limit, "granted what the model holds or waits for");
                self.check_fence(lease);
                self.model.held.push((request, lease));
            }
            Ok(Acquired::Queued(waiter)) => {
                assert!(!free && may_wait && !other_limit, "queued an acquire the model grants or refuses");
                self.model.queue.push((request, waiter));
            }
            Err(err) => match err.code() {
                ErrorCode::KeyLimit => assert!(added > 0 && in_use.len() + added > self.options.max_keys as usize),
                ErrorCode::InvalidArgument => assert!(other_limit),
                ErrorCode::LockBusy => assert!(!free && !may_wait),
                ErrorCode::QueueFull => assert!(!free && may_wait && self.model.queue.len() >= self.options.max_waiters as usize),
                other => panic!("unexpected {other}"),
            },
        }
    }

    fn apply(&mut self, op: Op) {
        match op {
            Op::Acquire { keys, kind, may_wait } => self.acquire(keys, kind, may_wait),
            Op::Release { pick } if !self.model.held.is_empty() => {
                let (_, lease) = self.model.held.remove(pick % self.model.held.len());
                self.released.push(lease);
                assert!(self.engine.release(lease), "a held lease is released");
                self.check_grants();
            }
            Op::Cancel { pick, timed_out } if !self.model.queue.is_empty() => {
                let (request, waiter) = self.model.queue.remove(pick % self.model.queue.len());
                self.gone.push(waiter);
                let reason = if timed_out { CancelReason::TimedOut } else { CancelReason::Aborted };
                assert_eq!(self.engine.cancel(waiter, reason), Some(request.caller));
                self.check_grants();
                assert_eq!(self.engine.cancel(waiter, reason), None, "a cancelled waiter is gone");
                self.timed_out += u64::from(timed_out);
            }
            Op::ReleaseStale { pick } if !self.released.is_empty() => {
                let stale = self.released[pick % self.released.len()];
                assert!(!self.engine.release(stale), "a released lease stays released");
                assert!(self.engine.pop_granted().is_none());
            }
            _ => {}
        }
        self.check_state();
    }

    fn check_state(&self) {
        for key in self.model.in_use() {
            let limit = self.model.limit(&key).unwrap();
            assert!(self.model.units(&key) <= limit, "at most limit units of a key are held");
            assert!(self.model.units(&key) == 0 || self.model.readers(&key) == 0, "no writer overlaps a reader");
        }
        for (index, (request, waiter)) in self.model.queue.iter().enumerate() {
            let first = self.model.first_on_its_keys(request, index);
            assert_eq!(self.engine.is_next(*waiter), first, "first in line is the model's first on every key");
        }
        for gone in &self.gone {
            assert!(!self.engine.is_next(*gone), "a waiter that left is nobody's next");
        }
        for (request, lease) in &self.model.held {
            let keys: Vec<&str> = self.engine.keys_of(*lease).collect();
            assert_eq!(keys, request.keys.iter().map(String::as_str).collect::<Vec<_>>(), "a lease holds its keys in the caller's order");
            for key in &request.keys {
                let holders = self.engine.inspect(key).holders;
                let found = holders.iter().find(|holder| holder.fence == lease.fence).expect("inspect lists every holder of a key");
                assert_eq!(
                    (found.units, &found.label),
                    (request.kind.weight, &label_of(request.caller)),
                    "each holder with its units and own label"
                );
            }
        }
        let counts = self.engine.counts();
        assert_eq!(counts.held, self.model.held.len());
        assert_eq!(counts.held_shared, self.model.held.iter().filter(|(r, _)| r.kind.mode == LockMode::Shared).count());
        assert_eq!(counts.waiting, self.model.queue.len());
        assert_eq!((counts.acquired, counts.timed_out), (self.grants, self.timed_out));
    }

    /// Releases everything, letting every waiter through in order.
    fn drain(&mut self) {
        while !self.model.held.is_empty() {
            self.apply(Op::Release { pick: 0 });
        }
        assert!(self.model.queue.is_empty(), "every waiter got its turn");
        assert_eq!(self.engine.counts().held, 0);
        assert_eq!(self.engine.counts().waiting, 0);
        // Every key left the engine: a fresh key set of maxKeys keys fits.
        let all: Vec<String> = (0..self.options.max_keys).map(|k| format!("fresh{k}")).collect();
        let all: Vec<&str> = all.iter().map(String::as_str).collect();
        assert!(matches!(self.engine.acquire_many(&all, LockKind::EXCLUSIVE, None, false, |_| 0), Ok(Acquired::Granted(_))));
    }
}

fn options(max_keys: u32, max_waiters: u32) -> LocalOptions {
    LocalOptions { max_keys, max_waiters, ..LocalOptions::default() }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn random_interleavings_keep_exclusion_limits_fifo_and_counters(ops in proptest::collection::vec(op(), 1..200), max_keys in 2u32..6, max_waiters in 0u32..6) {
        let mut run = Run::new(options(max_keys, max_waiters));
        for op in ops {
            run.apply(op);
        }
        run.drain();
    }

    #[test]
    fn close_rejects_every_waiter_and_invalidates_every_lease(ops in proptest::collection::vec(op(), 1..100)) {
        let mut run = Run::new(options(4, 8));
        for op in ops {
            run.apply(op);
        }
        let rejected = run.engine.close();
        let expected: Vec<u64> = run.model.queue.iter().map(|(r, _)| r.caller).collect();
        prop_assert_eq!(rejected, expected, "close rejects every waiter, oldest first");
        for (_, lease) in &run.model.held {
            prop_assert!(!run.engine.is_held(*lease));
            prop_assert!(!run.engine.release(*lease));
        }
        prop_assert_eq!(run.engine.acquire("k0", true, |_| 0).unwrap_err().code(), ErrorCode::Closed);
        prop_assert_eq!(run.engine.counts().held + run.engine.counts().waiting, 0);
    }
}

fn granted(acquired: dokebi_lock::Result<Acquired>) -> LeaseId {
    match acquired {
        Ok(Acquired::Granted(lease)) => lease,
        other => panic!("not granted: {other:?}"),
    }
}

fn queued(acquired: dokebi_lock::Result<Acquired>) -> WaiterId {
    match acquired {
        Ok(Acquired::Queued(waiter)) => waiter,
        other => panic!("not queued: {other:?}"),
    }
}

fn grants(engine: &mut LocalEngine<&'static str>) -> Vec<&'static str> {
    std::iter::from_fn(|| engine.pop_granted().map(|(name, _)| name)).collect()
}

#[test]
fn readers_hold_together_and_a_writer_waits_for_all_of_them() {
    let mut engine = LocalEngine::new(LocalOptions::default());
    let r1 = granted(engine.acquire_one("k", SHARED, None, true, |_| "r1"));
    let r2 = granted(engine.acquire_one("k", SHARED, None, true, |_| "r2"));
    queued(engine.acquire("k", true, |_| "w"));
    assert!(engine.release(r1));
    assert!(grants(&mut engine).is_empty(), "one reader still holds the key");
    assert!(engine.release(r2));
    assert_eq!(grants(&mut engine), ["w"]);
}

#[test]
fn a_reader_behind_a_queued_writer_waits_so_writers_never_starve() {
    let mut engine = LocalEngine::new(LocalOptions::default());
    let r1 = granted(engine.acquire_one("k", SHARED, None, true, |_| "r1"));
    queued(engine.acquire("k", true, |_| "w"));
    queued(engine.acquire_one("k", SHARED, None, true, |_| "r2"));
    queued(engine.acquire_one("k", SHARED, None, true, |_| "r3"));
    assert_eq!(engine.acquire_one("k", SHARED, None, false, |_| "try").unwrap_err().code(), ErrorCode::LockBusy);
    assert!(engine.release(r1));
    assert_eq!(grants(&mut engine), ["w"], "the writer first, alone; the readers behind it wait");
}

#[test]
fn a_writer_release_lets_every_reader_at_the_head_in_at_once() {
    let mut engine = LocalEngine::new(LocalOptions::default());
    let w = granted(engine.acquire("k", true, |_| "w1"));
    queued(engine.acquire_one("k", SHARED, None, true, |_| "r1"));
    queued(engine.acquire_one("k", SHARED, None, true, |_| "r2"));
    queued(engine.acquire("k", true, |_| "w2"));
    queued(engine.acquire_one("k", SHARED, None, true, |_| "r3"));
    assert!(engine.release(w));
    assert_eq!(grants(&mut engine), ["r1", "r2"], "readers up to the next writer, in order");
    assert_eq!(engine.counts().held_shared, 2);
}

#[test]
fn a_writer_that_gives_up_lets_the_readers_behind_it_in() {
    let mut engine = LocalEngine::new(LocalOptions::default());
    granted(engine.acquire_one("k", SHARED, None, true, |_| "r1"));
    let writer = queued(engine.acquire("k", true, |_| "w"));
    queued(engine.acquire_one("k", SHARED, None, true, |_| "r2"));
    assert_eq!(engine.cancel(writer, CancelReason::TimedOut), Some("w"));
    assert_eq!(grants(&mut engine), ["r2"]);
}

#[test]
fn counted_units_never_exceed_the_limit_and_a_heavy_head_is_not_overtaken() {
    let mut engine = LocalEngine::new(LocalOptions::default());
    let a = granted(engine.acquire_one("k", counted(3, 2), None, true, |_| "a"));
    queued(engine.acquire_one("k", counted(3, 3), None, true, |_| "heavy"));
    queued(engine.acquire_one("k", counted(3, 1), None, true, |_| "light"));
    assert_eq!(
        engine.acquire_one("k", counted(3, 1), None, false, |_| "try").unwrap_err().code(),
        ErrorCode::LockBusy,
        "one unit is free, but the heavy request is first"
    );
    assert!(engine.release(a));
    assert_eq!(grants(&mut engine), ["heavy"]);
}

#[test]
fn a_different_limit_for_a_key_in_use_is_invalid_argument() {
    let mut engine = LocalEngine::new(LocalOptions::default());
    let lease = granted(engine.acquire_one("k", counted(3, 1), None, true, |_| "a"));
    for kind in [LockKind::EXCLUSIVE, SHARED, counted(4, 1)] {
        assert_eq!(engine.acquire_one("k", kind, None, true, |_| "b").unwrap_err().code(), ErrorCode::InvalidArgument, "{kind:?}");
    }
    assert!(engine.release(lease));
    granted(engine.acquire_one("k", counted(4, 1), None, true, |_| "c"));
}

#[test]
fn overlapping_key_sets_in_opposite_orders_are_granted_in_turn_without_deadlock() {
    let mut engine = LocalEngine::new(LocalOptions::default());
    let held = granted(engine.acquire("b", true, |_| "holder"));
    queued(engine.acquire_many(&["a", "b"], LockKind::EXCLUSIVE, None, true, |_| "ab"));
    queued(engine.acquire_many(&["b", "a"], LockKind::EXCLUSIVE, None, true, |_| "ba"));
    queued(engine.acquire("a", true, |_| "a alone"));
    assert!(engine.release(held));
    assert_eq!(grants(&mut engine), ["ab"]);
}

#[test]
fn a_failed_key_set_leaves_no_key_behind() {
    let mut engine: LocalEngine<&str> = LocalEngine::new(options(3, 5));
    let held = granted(engine.acquire_one("c", counted(2, 1), None, true, |_| "c"));
    assert_eq!(
        engine.acquire_many(&["a", "b", "c"], LockKind::EXCLUSIVE, None, true, |_| "x").unwrap_err().code(),
        ErrorCode::InvalidArgument
    );
    assert_eq!(engine.acquire_many(&["a", "b", "d"], LockKind::EXCLUSIVE, None, true, |_| "x").unwrap_err().code(), ErrorCode::KeyLimit);
    assert_eq!(engine.acquire_many(&["a", "a"], LockKind::EXCLUSIVE, None, true, |_| "x").unwrap_err().code(), ErrorCode::InvalidArgument);
    granted(engine.acquire_many(&["a", "b"], LockKind::EXCLUSIVE, None, true, |_| "ab"));
    assert!(engine.release(held));
}

#[test]
fn max_waiters_zero_still_grants_a_free_key() {
    let mut engine: LocalEngine<()> = LocalEngine::new(options(10, 0));
    let lease = granted(engine.acquire("a", true, |_| ()));
    assert_eq!(engine.acquire("a", true, |_| ()).unwrap_err().code(), ErrorCode::QueueFull);
    assert!(engine.release(lease));
}

#[test]
fn a_busy_key_is_lock_busy_before_queue_full() {
    let mut engine: LocalEngine<()> = LocalEngine::new(options(10, 0));
    engine.acquire("a", false, |_| ()).unwrap();
    assert_eq!(engine.acquire("a", false, |_| ()).unwrap_err().code(), ErrorCode::LockBusy);
}

#[test]
fn key_limit_counts_keys_in_use_not_waiters() {
    let mut engine: LocalEngine<()> = LocalEngine::new(options(1, 5));
    let lease = granted(engine.acquire("a", true, |_| ()));
    queued(engine.acquire("a", true, |_| ()));
    assert_eq!(engine.acquire("b", true, |_| ()).unwrap_err().code(), ErrorCode::KeyLimit);
    assert!(engine.release(lease));
    assert!(engine.pop_granted().is_some(), "hand-off keeps the key count");
    assert_eq!(engine.acquire("b", true, |_| ()).unwrap_err().code(), ErrorCode::KeyLimit);
}

#[test]
fn invalid_keys_and_kinds_are_rejected_before_any_state_changes() {
    let mut engine: LocalEngine<()> = LocalEngine::new(LocalOptions { max_key_bytes: 4, ..LocalOptions::default() });
    assert_eq!(engine.acquire("", true, |_| ()).unwrap_err().code(), ErrorCode::InvalidKey);
    assert_eq!(engine.acquire("12345", true, |_| ()).unwrap_err().code(), ErrorCode::InvalidKey);
    for kind in [counted(2, 3), counted(0, 0), LockKind { mode: LockMode::Shared, limit: 2, weight: 1 }] {
        assert_eq!(engine.acquire_one("k", kind, None, true, |_| ()).unwrap_err().code(), ErrorCode::InvalidArgument, "{kind:?}");
    }
    assert_eq!(engine.counts().held, 0);
}

#[test]
fn a_released_plain_lease_never_matches_a_later_lease_of_its_key_of_any_kind() {
    let mut engine: LocalEngine<()> = LocalEngine::new(LocalOptions::default());
    let plain = granted(engine.acquire("k", true, |_| ()));
    assert!(engine.release(plain));
    // The key's slot is reused by each of these; the old id stays released.
    for kind in [LockKind::EXCLUSIVE, SHARED, counted(3, 2)] {
        let later = granted(engine.acquire_one("k", kind, None, true, |_| ()));
        assert_ne!(later, plain);
        assert!(!engine.is_held(plain) && !engine.release(plain) && engine.key_of(plain).is_none(), "{kind:?}");
        assert_eq!(engine.keys_of(plain).count(), 0);
        assert_eq!((engine.key_of(later), engine.counts().held), (Some("k"), 1), "{kind:?}");
        assert!(engine.release(later));
    }
    assert_eq!(engine.counts().held, 0);
}

#[test]
fn a_plain_lease_handed_to_a_waiter_is_held_and_counted_like_any_other() {
    let mut engine = LocalEngine::new(LocalOptions::default());
    let first = granted(engine.acquire("k", true, |_| "first"));
    let reader = granted(engine.acquire_one("r", SHARED, None, true, |_| "reader"));
    queued(engine.acquire("k", true, |_| "second"));
    assert_eq!(engine.next_waiter(first), Some(&"second"));
    assert!(engine.release(first));
    let (name, second) = engine.pop_granted().expect("the waiter is granted");
    assert_eq!((name, engine.is_held(second), engine.key_of(second)), ("second", true, Some("k")));
    assert_eq!((engine.counts().held, engine.counts().held_shared), (2, 1));
    assert!(engine.release(second) && engine.release(reader));
    assert_eq!(engine.counts().held, 0);
}

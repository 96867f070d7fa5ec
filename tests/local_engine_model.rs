//! Property tests of the local state machine against a naive model: random
//! interleavings of acquire / release / cancel (what a timeout or an abort
//! does) / close never give one key two holders, keep FIFO order, keep fences
//! growing, name the first in line right, and bring every counter back to
//! zero.

use std::collections::{HashMap, VecDeque};

use dokebi_lock::local::{Acquired, CancelReason, LeaseId, LocalEngine, Released, WaiterId};
use dokebi_lock::options::LocalOptions;
use dokebi_lock::ErrorCode;
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    Acquire { key: u8, may_wait: bool },
    Release { pick: usize },
    Cancel { pick: usize, timed_out: bool },
    ReleaseStale { pick: usize },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u8..4, any::<bool>()).prop_map(|(key, may_wait)| Op::Acquire { key, may_wait }),
        3 => any::<usize>().prop_map(|pick| Op::Release { pick }),
        1 => (any::<usize>(), any::<bool>()).prop_map(|(pick, timed_out)| Op::Cancel { pick, timed_out }),
        1 => any::<usize>().prop_map(|pick| Op::ReleaseStale { pick }),
    ]
}

/// The naive model: who holds each key, who waits for it, in order.
#[derive(Default)]
struct Model {
    holder: HashMap<String, u64>,
    queue: HashMap<String, VecDeque<u64>>,
}

struct Run {
    engine: LocalEngine<u64>,
    model: Model,
    held: Vec<(u64, LeaseId, String)>,
    waiting: Vec<(u64, WaiterId, String)>,
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
            held: Vec::new(),
            waiting: Vec::new(),
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

    fn apply(&mut self, op: Op) {
        match op {
            Op::Acquire { key, may_wait } => {
                let key = format!("k{key}");
                self.next_caller += 1;
                let caller = self.next_caller;
                let result = self.engine.acquire(&key, may_wait, |_| caller);
                let is_held = self.model.holder.contains_key(&key);
                match result {
                    Ok(Acquired::Granted(lease)) => {
                        assert!(!is_held, "granted a key the model says is held");
                        self.check_fence(lease);
                        self.model.holder.insert(key.clone(), caller);
                        self.held.push((caller, lease, key));
                    }
                    Ok(Acquired::Queued(waiter)) => {
                        assert!(is_held && may_wait);
                        self.model.queue.entry(key.clone()).or_default().push_back(caller);
                        self.waiting.push((caller, waiter, key));
                    }
                    Err(err) => match err.code() {
                        ErrorCode::LockBusy => assert!(is_held && !may_wait),
                        ErrorCode::QueueFull => {
                            assert!(is_held && may_wait && self.waiting.len() >= self.options.max_waiters as usize)
                        }
                        ErrorCode::KeyLimit => {
                            assert!(!is_held && self.model.holder.len() >= self.options.max_keys as usize)
                        }
                        other => panic!("unexpected {other}"),
                    },
                }
            }
            Op::Release { pick } if !self.held.is_empty() => {
                let (caller, lease, key) = self.held.remove(pick % self.held.len());
                assert_eq!(self.model.holder.get(&key), Some(&caller));
                self.released.push(lease);
                match self.engine.release(lease) {
                    Released::NotHeld => panic!("a held lease was not held"),
                    Released::Freed => {
                        assert!(self.model.queue.get(&key).is_none_or(VecDeque::is_empty), "freed with waiters queued");
                        self.model.holder.remove(&key);
                    }
                    Released::HandedOn { waiter, lease } => {
                        let head = self.model.queue.get_mut(&key).and_then(VecDeque::pop_front);
                        assert_eq!(head, Some(waiter), "hand-off goes to the oldest waiter (FIFO)");
                        self.check_fence(lease);
                        self.model.holder.insert(key.clone(), waiter);
                        let granted = self.waiting.iter().position(|(c, _, _)| *c == waiter).expect("the granted caller waited");
                        self.gone.push(self.waiting.remove(granted).1);
                        self.held.push((waiter, lease, key));
                    }
                }
            }
            Op::Cancel { pick, timed_out } if !self.waiting.is_empty() => {
                let (caller, waiter, key) = self.waiting.remove(pick % self.waiting.len());
                self.gone.push(waiter);
                let reason = if timed_out { CancelReason::TimedOut } else { CancelReason::Aborted };
                assert_eq!(self.engine.cancel(waiter, reason), Some(caller));
                assert_eq!(self.engine.cancel(waiter, reason), None, "a cancelled waiter is gone");
                self.timed_out += u64::from(timed_out);
                self.model.queue.get_mut(&key).expect("queued").retain(|c| *c != caller);
            }
            Op::ReleaseStale { pick } if !self.released.is_empty() => {
                let stale = self.released[pick % self.released.len()];
                assert_eq!(self.engine.release(stale), Released::NotHeld, "a released lease stays released");
            }
            _ => {}
        }
        for (caller, waiter, key) in &self.waiting {
            let first = self.model.queue.get(key).and_then(VecDeque::front) == Some(caller);
            assert_eq!(self.engine.is_next(*waiter), first, "first in line is the model's queue head");
        }
        for gone in &self.gone {
            assert!(!self.engine.is_next(*gone), "a waiter that left is nobody's next");
        }
        let counts = self.engine.counts();
        assert_eq!(counts.held, self.model.holder.len());
        assert_eq!(counts.waiting, self.waiting.len());
        assert_eq!((counts.acquired, counts.timed_out), (self.grants, self.timed_out));
    }

    /// Releases everything, letting every waiter through in order.
    fn drain(&mut self) {
        while !self.held.is_empty() {
            self.apply(Op::Release { pick: 0 });
        }
        assert!(self.waiting.is_empty(), "every waiter got its turn");
        assert_eq!(self.engine.counts().held, 0);
        assert_eq!(self.engine.counts().waiting, 0);
    }
}

fn options(max_keys: u32, max_waiters: u32) -> LocalOptions {
    LocalOptions { max_keys, max_waiters, ..LocalOptions::default() }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn random_interleavings_keep_exclusion_fifo_and_counters(ops in proptest::collection::vec(op(), 1..200), max_keys in 1u32..5, max_waiters in 0u32..6) {
        let mut run = Run::new(options(max_keys, max_waiters));
        for op in ops {
            run.apply(op);
        }
        run.drain();
    }

    #[test]
    fn close_rejects_every_waiter_and_invalidates_every_lease(ops in proptest::collection::vec(op(), 1..100)) {
        let mut run = Run::new(options(3, 8));
        for op in ops {
            run.apply(op);
        }
        let mut rejected = run.engine.close();
        rejected.sort_unstable();
        let mut expected: Vec<u64> = run.waiting.iter().map(|(c, _, _)| *c).collect();
        expected.sort_unstable();
        prop_assert_eq!(rejected, expected);
        for (_, lease, _) in &run.held {
            prop_assert!(!run.engine.is_held(*lease));
            prop_assert_eq!(run.engine.release(*lease), Released::NotHeld);
        }
        prop_assert_eq!(run.engine.acquire("k0", true, |_| 0).unwrap_err().code(), ErrorCode::Closed);
        prop_assert_eq!(run.engine.counts().held + run.engine.counts().waiting, 0);
    }
}

#[test]
fn max_waiters_zero_still_grants_a_free_key() {
    let mut engine: LocalEngine<()> = LocalEngine::new(options(10, 0));
    let Acquired::Granted(lease) = engine.acquire("a", true, |_| ()).unwrap() else { panic!("free key not granted") };
    assert_eq!(engine.acquire("a", true, |_| ()).unwrap_err().code(), ErrorCode::QueueFull);
    assert_eq!(engine.release(lease), Released::Freed);
}

#[test]
fn a_busy_key_is_lock_busy_before_queue_full() {
    let mut engine: LocalEngine<()> = LocalEngine::new(options(10, 0));
    engine.acquire("a", false, |_| ()).unwrap();
    assert_eq!(engine.acquire("a", false, |_| ()).unwrap_err().code(), ErrorCode::LockBusy);
}

#[test]
fn key_limit_counts_held_keys_not_waiters() {
    let mut engine: LocalEngine<()> = LocalEngine::new(options(1, 5));
    let Acquired::Granted(lease) = engine.acquire("a", true, |_| ()).unwrap() else { panic!() };
    assert!(matches!(engine.acquire("a", true, |_| ()).unwrap(), Acquired::Queued(_)), "waiting on a held key adds no key");
    assert_eq!(engine.acquire("b", true, |_| ()).unwrap_err().code(), ErrorCode::KeyLimit);
    assert!(matches!(engine.release(lease), Released::HandedOn { .. }), "hand-off keeps the key count");
    assert_eq!(engine.acquire("b", true, |_| ()).unwrap_err().code(), ErrorCode::KeyLimit);
}

#[test]
fn invalid_keys_are_rejected_before_any_state_changes() {
    let mut engine: LocalEngine<()> = LocalEngine::new(LocalOptions { max_key_bytes: 4, ..LocalOptions::default() });
    assert_eq!(engine.acquire("", true, |_| ()).unwrap_err().code(), ErrorCode::InvalidKey);
    assert_eq!(engine.acquire("12345", true, |_| ()).unwrap_err().code(), ErrorCode::InvalidKey);
    assert_eq!(engine.counts().held, 0);
}

//! What one lease claims in Redis: the Redis names of its keys, its kind
//! and its owner token, and the scripts that take, extend and give back all
//! of it at once.
//!
//! A plain lease on one key uses the plain scripts (the fast path: one
//! `SET NX` when the key is free). Every other claim (shared, counted,
//! several keys) uses the kinds scripts, which take every key of one call
//! atomically. On one server (and so with Sentinel) that is one call for
//! the whole claim. On a Cluster one script may only touch one hash slot, so
//! the keys are taken one slot at a time in a fixed global order (the groups
//! ordered by their smallest Redis name); when a group cannot be granted,
//! the groups already granted are given back before the caller waits again,
//! so no caller holds part of a set while it waits (no deadlock between
//! callers asking for overlapping sets in different orders).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

use redis::cluster_routing::Slot;

use super::keys::RedisKeys;
use super::scripts::Scripted;
use super::transport::connection::{self, Answer, Via};
use crate::acquire::{LockKind, LockMode};
use crate::error::Cause;
use crate::store::{Claim as StoreClaim, Failure, Retry, Taken, Terms};

/// The keys, kind, lease terms and token of one lease (or one acquire in
/// progress).
pub struct Claim {
    /// The Redis names of each key, in the caller's order.
    pub(crate) keys: Vec<RedisKeys>,
    pub(crate) kind: LockKind,
    pub(crate) token: String,
    /// Every grant and renewal of this claim: its `leaseMs` and how long
    /// each key's fence counter lives after a grant.
    pub(crate) terms: Terms,
    /// Indexes into `keys`: one group per script call, in the order taken.
    groups: Vec<Vec<usize>>,
    /// A waiting try was sent twice (its first answer lost with its
    /// connection): the first may have left a mark under a ticket this
    /// acquire never learned, which its grant must take back (see
    /// [`Claim::take`]).
    marks_unknown: AtomicBool,
    /// The last try was sent twice: its first send may have granted what
    /// the second refused (see [`Claim::sent_twice`]).
    sent_twice: AtomicBool,
    /// Set when a give-back by this token, sent while its acquire still
    /// waits, was answered only on a later attempt or not at all (see
    /// [`Claim::spent`]).
    spent: OnceLock<Cause>,
}

/// What one call of the hand-off script did.
pub(crate) struct HandedOver {
    /// How many keys the released lease gave back.
    pub(crate) released: i64,
    /// Per key of the released lease: a waiter may now be granted there.
    pub(crate) wake: Vec<bool>,
    /// Per request tried, in order, what its own try would have found (the
    /// requests after the first that was not granted were not tried).
    pub(crate) taken: Vec<Taken<Via>>,
    pub(crate) first_attempt_lost: Option<Cause>,
}

/// The arguments every kinds script takes (see the scripts module).
struct KindsArgs<'a> {
    token: &'a str,
    lease_ms: u64,
    waiting_ms: u64,
    mode: &'static str,
    limit: u32,
    weight: u32,
    ticket: u64,
    channel: &'a str,
    retention_ms: u64,
}

impl Claim {
    /// A claim of `keys` (Redis names, the caller's order) of `kind`,
    /// granted on `terms`. On a `cluster`, keys are grouped by hash slot.
    pub(crate) fn new(keys: Vec<RedisKeys>, kind: LockKind, token: String, cluster: bool, terms: Terms) -> Claim {
        // Most claims: one key, one group (built without the grouping's
        // growing vectors, on every acquire).
        if keys.len() == 1 {
            return Claim {
                keys,
                kind,
                token,
                terms,
                groups: vec![vec![0]],
                marks_unknown: AtomicBool::new(false),
                sent_twice: AtomicBool::new(false),
                spent: OnceLock::new(),
            };
        }
        let mut groups: Vec<(Slot, Vec<usize>)> = Vec::new();
        for (index, key) in keys.iter().enumerate() {
            let slot = if cluster { Slot::for_key(key.lock()) } else { Slot::new(0).expect("slot 0 exists") };
            match groups.iter_mut().find(|(s, _)| *s == slot) {
                Some((_, group)) => group.push(index),
                None => groups.push((slot, vec![index])),
            }
        }
        let mut groups: Vec<Vec<usize>> = groups.into_iter().map(|(_, group)| group).collect();
        // A fixed global order: every caller takes shared groups in the same
        // order, whatever order it gave its keys in.
        let smallest = |group: &Vec<usize>| group.iter().map(|&i| keys[i].lock()).min();
        groups.sort_by_cached_key(smallest);
        Claim {
            keys,
            kind,
            token,
            terms,
            groups,
            marks_unknown: AtomicBool::new(false),
            sent_twice: AtomicBool::new(false),
            spent: OnceLock::new(),
        }
    }

    /// The lock name of the first key (where a single key's `WAIT` goes).
    pub(crate) fn first_lock(&self) -> &str {
        self.keys[0].lock()
    }

    fn group_keys(&self, group: &[usize]) -> Vec<&str> {
        group.iter().flat_map(|&i| self.keys[i].all()).collect()
    }

    fn args<'a>(&'a self, waiting_ms: u64, ticket: u64, channel: &'a str) -> KindsArgs<'a> {
        KindsArgs {
            token: &self.token,
            lease_ms: self.terms.lease_ms,
            waiting_ms,
            mode: self.mode(),
            limit: self.kind.limit,
            weight: self.kind.weight,
            ticket,
            channel,
            retention_ms: self.terms.retention_ms,
        }
    }

    async fn kinds<T: redis::FromRedisValue>(
        &self,
        on: &Scripted,
        script: &redis::Script,
        group: &[usize],
        args: &KindsArgs<'_>,
    ) -> Result<Answer<T>, Failure> {
        let keys = self.group_keys(group);
        on.connection
            .eval::<T>(
                script,
                &keys,
                &[
                    &args.token,
                    &args.lease_ms,
                    &args.waiting_ms,
                    &args.mode,
                    &args.limit,
                    &args.weight,
                    &args.ticket,
                    &args.channel,
                    &args.retention_ms,
                ],
            )
            .await
    }

    /// One try at taking every key, on the claim's terms. `waiting_ms` 0 is a single try (it
    /// leaves no mark); `ticket` is the one the last try answered; groups
    /// given back before a wait publish on `channel` and `wake` this
    /// process's heads of their keys. On a failure part of a split claim
    /// may still be held: the caller cleans up by token.
    #[allow(clippy::too_many_arguments)] // one script call's arguments
    pub(crate) async fn take(
        &self,
        on: &Scripted,
        waiting_ms: u64,
        ticket: u64,
        channel: &str,
        wake: &(dyn Fn(&str) + Sync),
    ) -> Result<Taken<Via>, Failure> {
        if let Some(spent) = self.spent() {
            return Err(spent);
        }
        let scripts = &on.scripts;
        if self.is_plain() {
            let k = &self.keys[0];
            let answer = on
                .connection
                .eval::<(i64, i64, i64)>(
                    &scripts.acquire,
                    &k.all(),
                    &[&self.token, &self.terms.lease_ms, &waiting_ms, &ticket, &self.terms.retention_ms],
                )
                .await?;
            self.note_lost_try(answer.first_attempt_lost.is_some(), waiting_ms);
            let (status, value, ticket) = answer.value;
            return Ok(match status {
                1 => Taken::Granted { fences: vec![value as u64], written: vec![answer.via] },
                0 => Taken::Busy { retry: Retry::from_store(value), ticket: ticket as u64 },
                _ => Taken::OtherLimit,
            });
        }
        let args = self.args(waiting_ms, ticket, channel);
        let mut fences = vec![0u64; self.keys.len()];
        let mut written = Vec::with_capacity(self.groups.len());
        for (taken, group) in self.groups.iter().enumerate() {
            let answer = self.kinds::<Vec<i64>>(on, &scripts.kinds_acquire, group, &args).await?;
            self.note_lost_try(answer.first_attempt_lost.is_some(), waiting_ms);
            let reply = &answer.value;
            match reply.first().copied() {
                Some(1) if reply.len() == group.len() + 1 => {
                    for (slot, fence) in group.iter().zip(&reply[1..]) {
                        fences[*slot] = *fence as u64;
                    }
                    written.push(answer.via);
                }
                Some(0) => {
                    self.give_back_groups(on, &self.groups[..taken], channel, wake).await?;
                    return Ok(Taken::Busy {
                        retry: Retry::from_store(reply.get(1).copied().unwrap_or(-1)),
                        ticket: reply.get(2).copied().unwrap_or(0) as u64,
                    });
                }
                _ => {
                    self.give_back_groups(on, &self.groups[..taken], channel, wake).await?;
                    return Ok(Taken::OtherLimit);
                }
            }
        }
        Ok(Taken::Granted { fences, written })
    }

    /// The name a `WAIT` for the claim's `write`-th write (of one script
    /// call: one per group, in the order taken) writes first: one of that
    /// call's slot (see [`RedisKeys::acks`]).
    pub(crate) fn acks(&self, write: usize) -> String {
        self.keys[self.groups.get(write).map_or(0, |group| group[0])].acks()
    }

    /// Extends every key to the claim's `leaseMs` from now: true when each
    /// still carried our token, with where each renewal was written.
    pub(crate) async fn extend(&self, on: &Scripted) -> Result<(bool, Vec<Via>), Failure> {
        if self.is_plain() {
            let lock = self.first_lock();
            let answer = on.connection.eval::<i64>(&on.scripts.renew, &[lock], &[&self.token, &self.terms.lease_ms]).await?;
            return Ok((answer.value == 1, vec![answer.via]));
        }
        let args = self.args(0, 0, "");
        let mut renewed = 0;
        let mut written = Vec::with_capacity(self.groups.len());
        for group in &self.groups {
            let answer = self.kinds::<i64>(on, &on.scripts.kinds_renew, group, &args).await?;
            renewed += answer.value;
            written.push(answer.via);
        }
        Ok((renewed == self.keys.len() as i64, written))
    }

    /// Gives back every key that still carries our token, telling waiters
    /// in every process (see the release scripts; `wake`: this process's
    /// heads of the keys freed): `value` 1 when every key did, else 0. Every
    /// group is tried, also after one failed. `ends`: the token is done (a
    /// lease's release, the clean-up of an acquire that ended), so a plain
    /// key's release takes its marks back even when refused (see
    /// [`super::scripts`]' `RELEASE`); not while its acquire still waits.
    pub(crate) async fn give_back(
        &self,
        on: &Scripted,
        channel: &str,
        ends: bool,
        wake: &(dyn Fn(&str) + Sync),
    ) -> Result<Answer<i64>, Failure> {
        if self.is_plain() {
            let k = &self.keys[0];
            let ends = if ends { "1" } else { "0" };
            let answer = on
                .connection
                .eval::<i64>(&on.scripts.release, &[k.lock(), k.waiting(), k.queue()], &[&self.token, &channel, &ends])
                .await?;
            if answer.value == 1 {
                wake(k.lock());
            }
            return Ok(answer);
        }
        let args = self.args(0, 0, channel);
        let mut released = 0;
        let mut first_failure = None;
        // A group's give-back that may still land later (its first attempt
        // lost, or no answer): the whole give-back is then unknown, even if
        // another group's was refused (review R22).
        let mut lost: Option<Cause> = None;
        let mut answered: Option<Answer<i64>> = None;
        for group in &self.groups {
            match self.kinds::<i64>(on, &on.scripts.kinds_release, group, &args).await {
                Ok(answer) => {
                    released += answer.value;
                    if let Some(cause) = &answer.first_attempt_lost {
                        lost.get_or_insert_with(|| cause.clone());
                    }
                    answered = Some(answer);
                }
                Err(Failure::Unknown(cause)) => {
                    lost.get_or_insert(cause);
                }
                Err(failure) => {
                    first_failure.get_or_insert(failure);
                }
            }
        }
        if released > 0 {
            for key in &self.keys {
                wake(key.lock());
            }
        }
        match (first_failure, answered, lost) {
            (None, Some(answer), lost) => {
                let value = i64::from(released == self.keys.len() as i64);
                Ok(Answer { value, via: answer.via, first_attempt_lost: lost })
            }
            (_, _, Some(lost)) => Err(Failure::Unknown(lost)),
            (Some(failure), _, None) => Err(failure),
            (None, None, None) => unreachable!("a claim has at least one group"),
        }
    }

    async fn give_back_groups(
        &self,
        on: &Scripted,
        groups: &[Vec<usize>],
        channel: &str,
        wake: &(dyn Fn(&str) + Sync),
    ) -> Result<(), Failure> {
        let args = self.args(0, 0, channel);
        let mut failed = None;
        for group in groups {
            let answered = self.kinds::<i64>(on, &on.scripts.kinds_release, group, &args).await;
            if let Err(failure) = self.settled(answered) {
                failed.get_or_insert(failure);
            }
        }
        for &i in groups.iter().flatten() {
            wake(self.keys[i].lock());
        }
        failed.map_or(Ok(()), Err)
    }

    /// The outcome of a give-back sent while the acquire still waits:
    /// answered only on a later attempt, or not at all, it spends the token
    /// (see [`Claim::spent`]) and fails as unknown.
    pub(crate) fn settled<T>(&self, given_back: Result<Answer<T>, Failure>) -> Result<(), Failure> {
        let lost = match given_back {
            Ok(Answer { first_attempt_lost: None, .. }) => return Ok(()),
            Ok(Answer { first_attempt_lost: Some(lost), .. }) | Err(Failure::Unknown(lost)) => lost,
            Err(failure) => return Err(failure),
        };
        let _ = self.spent.set(lost.clone());
        Err(Failure::Unknown(lost))
    }

    /// Set once a give-back by this token, sent while its acquire still
    /// waited, went unanswered on its first attempt: that attempt may
    /// still reach the server later (a proxy delivers what it read from a
    /// client it cut) and free whatever the token holds then, a later grant
    /// included, while its holder is told it holds the key (review R18).
    /// The token grants nothing more: every later try of the claim fails
    /// as unknown without being sent (its acquire ends `OUTCOME_UNKNOWN`
    /// and cleans up by the token), and no hand-over takes it; the SQL
    /// drivers' rule after a lost try is the same (review R10).
    pub(crate) fn spent(&self) -> Option<Failure> {
        self.spent.get().map(|cause| Failure::Unknown(cause.clone()))
    }

    /// One call of the hand-off script (see the scripts module): gives back
    /// `released` if given, then grants `requests` (each a claim and its
    /// ticket) in turn, each on its own terms, up to the first that cannot
    /// be granted; marks are left by the first request only, for
    /// `waiting_ms`. Single-group claims only (every key in one script).
    pub(crate) async fn hand_over(
        on: &Scripted,
        released: Option<&Claim>,
        requests: &[(&Claim, u64)],
        waiting_ms: u64,
        channel: &str,
    ) -> Result<HandedOver, Failure> {
        let mut keys: Vec<&str> = Vec::new();
        let mut args: Vec<String> = vec![channel.to_owned(), waiting_ms.to_string()];
        match released {
            Some(claim) => {
                keys.extend(claim.all_keys());
                args.push(claim.keys.len().to_string());
                args.extend([claim.token.clone(), claim.mode().to_owned(), claim.kind.limit.to_string(), claim.kind.weight.to_string()]);
            }
            None => args.extend(["0", "", "x", "1", "1"].map(str::to_owned)),
        }
        for (claim, ticket) in requests {
            keys.extend(claim.all_keys());
            args.extend([
                claim.token.clone(),
                claim.mode().to_owned(),
                claim.kind.limit.to_string(),
                claim.kind.weight.to_string(),
                ticket.to_string(),
                claim.keys.len().to_string(),
                claim.terms.lease_ms.to_string(),
                claim.terms.retention_ms.to_string(),
            ]);
        }
        let args: Vec<&dyn connection::ToRedisArgsRef> = args.iter().map(|arg| arg as &dyn connection::ToRedisArgsRef).collect();
        let answer = on.connection.eval::<Vec<i64>>(&on.scripts.kinds_handoff, &keys, &args).await?;
        let reply = answer.value;
        let wakes = released.map_or(0, |claim| claim.keys.len());
        let wake = reply.iter().skip(1).take(wakes).map(|&flag| flag == 1).collect();
        let mut taken = Vec::with_capacity(requests.len());
        let mut at = 1 + wakes;
        for (claim, _) in requests {
            let n = claim.keys.len();
            match reply.get(at).copied() {
                Some(1) if reply.len() > at + n => {
                    let fences = reply[at + 1..=at + n].iter().map(|&fence| fence as u64).collect();
                    taken.push(Taken::Granted { fences, written: vec![answer.via.clone()] });
                    at += 1 + n;
                }
                Some(0) => {
                    taken.push(Taken::Busy {
                        retry: Retry::from_store(reply.get(at + 1).copied().unwrap_or(-1)),
                        ticket: reply.get(at + 2).copied().unwrap_or(0) as u64,
                    });
                    break;
                }
                Some(_) => {
                    taken.push(Taken::OtherLimit);
                    break;
                }
                None => break,
            }
        }
        Ok(HandedOver { released: reply.first().copied().unwrap_or(0), wake, taken, first_attempt_lost: answer.first_attempt_lost })
    }

    /// Every Redis name of every key, five per key, in the caller's order.
    fn all_keys(&self) -> impl Iterator<Item = &str> {
        self.keys.iter().flat_map(RedisKeys::all)
    }

    fn mode(&self) -> &'static str {
        match self.kind.mode {
            LockMode::Exclusive => "x",
            LockMode::Shared => "s",
        }
    }

    /// Takes back the marks a waiting try left under `ticket` (best
    /// effort), telling waiters on `channel` when they were the last.
    /// Remembers a waiting try whose first attempt was lost (see
    /// `marks_unknown`).
    pub(crate) fn note_lost_try(&self, first_attempt_lost: bool, waiting_ms: u64) {
        if first_attempt_lost {
            self.sent_twice.store(true, Ordering::Relaxed);
            if waiting_ms > 0 {
                self.marks_unknown.store(true, Ordering::Relaxed);
            }
        }
    }

    /// True once, after a try that was sent twice: when the second send
    /// was not granted, the first may have been (a grant the second then
    /// had to refuse: its fence waits for the clock after a restore), and
    /// what it holds is given back ([`Claim::give_back`]) rather than left
    /// to lapse after `leaseMs`.
    pub(crate) fn sent_twice(&self) -> bool {
        self.sent_twice.swap(false, Ordering::Relaxed)
    }

    /// True once, after a waiting try was sent twice: a grant then takes
    /// back every mark of its token ([`Claim::withdraw`], which leaves a lock
    /// the token holds alone). A plain release takes them back too, even a
    /// refused one, but a holder that dies sends none: a leftover waiting
    /// mark could then be handed the key once this lease lapsed, and a
    /// counted request's leftover mark would keep later requests waiting
    /// (a kinds release does not look for marks).
    pub(crate) fn marks_left(&self) -> bool {
        self.marks_unknown.swap(false, Ordering::Relaxed)
    }

    pub(crate) async fn withdraw(&self, on: &Scripted, ticket: u64, channel: &str) {
        let args = self.args(0, ticket, channel);
        for group in &self.groups {
            let _ = self.kinds::<i64>(on, &on.scripts.kinds_withdraw, group, &args).await;
        }
    }
}

impl StoreClaim for Claim {
    fn len(&self) -> usize {
        self.keys.len()
    }

    /// The lock names: a release message names one.
    fn names(&self) -> impl Iterator<Item = &str> {
        self.keys.iter().map(RedisKeys::lock)
    }

    fn kind(&self) -> &LockKind {
        &self.kind
    }

    fn terms(&self) -> Terms {
        self.terms
    }

    /// On a Cluster, one call per hash slot.
    fn is_split(&self) -> bool {
        self.groups.len() > 1
    }
}

//! What a store driver supplies to the lock layer: [`Store`] and its
//! [`Claim`]. Each operation is one round trip (one script, one
//! transaction) that applies every rule of the lease contract in the store
//! itself: owner tokens, expiry on the store's clock, limits, the marks of
//! waiters in other processes, a new fence per grant. The lock layer decides
//! when to call them; the store never waits or retries on its own beyond
//! its transport's reconnects.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use super::waiters::Waiters;
use super::Failure;
use crate::acquire::LockKind;
use crate::error::{Cause, ErrorCode, Result};
use crate::holder::HolderLabel;
use crate::inspect::Inspection;

/// How a grant is written beside its keys and token: the lease terms of
/// the backend that asked for it. Each claim carries its own, and every
/// operation that writes a grant (a take, a hand-over, a renewal) reads them
/// from the claim it writes: a hand-over grants requests of several
/// backends of one store location in one call, each on its own terms, not
/// the releaser's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Terms {
    /// `leaseMs`: how long a grant (or a renewal) lives in the store.
    pub lease_ms: u64,
    /// `fenceRetentionMs`: how long a grant keeps its keys' fence counters.
    pub retention_ms: u64,
}

/// The keys, kind, lease terms and owner token of one lease (or one
/// acquire in progress), as the store names them.
pub trait Claim: Send + Sync + 'static {
    /// How many keys.
    fn len(&self) -> usize;

    /// The name of each key, in the caller's order, unique to the key's
    /// place in the store: it tells apart every option that changes where
    /// the key is written (the store behind the connection, schema, table,
    /// namespace). It is the name of this process's queue for the key, shared
    /// by every backend of the connection: backends share a queue exactly
    /// when they reach one store key, so a queue never holds a request a
    /// hand-over there could not grant in its own place.
    fn names(&self) -> impl Iterator<Item = &str>;

    fn kind(&self) -> &LockKind;

    /// The terms every grant of this claim is written with.
    fn terms(&self) -> Terms;

    /// A plain lease on one key (the store's fast path).
    fn is_plain(&self) -> bool {
        self.len() == 1 && self.kind().is_plain()
    }

    /// True when the store takes the claim in more than one call, so that a
    /// try that failed may hold part of it.
    fn is_split(&self) -> bool {
        false
    }
}

/// One driver's store, as one backend reaches it.
pub trait Store: Send + Sync + Sized + 'static {
    type Claim: Claim;
    /// Where a write landed: what [`Store::replicated`] waits on.
    type Written: Clone + Send + Sync + 'static;
    /// What a forced release read of a key and its break compares with
    /// (see [`Store::observe`]).
    type Observed: Send + Sync + 'static;
    /// The store's name in messages ("Redis").
    const NAME: &'static str;
    /// The driver's name in telemetry ("redis").
    const DRIVER: &'static str;

    /// This process's queues of the store's keys (by [`Claim::names`]),
    /// shared by every backend of the connection (the store wakes them).
    fn waiters(&self) -> &Arc<Waiters<Self>>;

    /// A claim of `keys` of `kind`, granted on `terms`, under a fresh owner
    /// token; an error when the store takes no acquire at all now.
    fn claim(&self, keys: &[&str], kind: LockKind, terms: Terms, holder: &HolderLabel) -> Result<Self::Claim>;

    /// True when one call reaches every key of a claim, so a release can
    /// hand its keys to this process's next waiters in the same call.
    fn hands_over(&self) -> bool;

    /// One try at taking every key of `claim` on its terms. `waiting_ms`
    /// 0 is a single try (it leaves no waiting mark); else a refused try
    /// leaves a mark for `waiting_ms` under `ticket` (0: a new one), so that
    /// a release anywhere wakes this process and no later request of
    /// another process overtakes it. A try the store refused for a row
    /// lock another call held is [`Failure::Contended`], as any operation
    /// refused so is: the lock layer decides what that means for each.
    fn take(&self, claim: &Self::Claim, waiting_ms: u64, ticket: u64)
        -> impl Future<Output = Result<Taken<Self::Written>, Failure>> + Send;

    /// Extends every key to the claim's `leaseMs` from now: true when each
    /// still carried the claim's token, with where each renewal was written.
    fn extend(&self, claim: &Self::Claim) -> impl Future<Output = Result<(bool, Vec<Self::Written>), Failure>> + Send;

    /// Gives back every key that still carries the claim's token and tells
    /// waiters in every process (this one's included).
    fn give_back(&self, claim: &Self::Claim) -> impl Future<Output = Result<Freed, Failure>> + Send;

    /// One call that gives back `released` (if any), then grants `requests`
    /// (each a claim and its ticket) in turn, each on its own claim's terms
    /// (the requests may be of other backends of the connection), up to the
    /// first that cannot be granted; only the first leaves a mark, for
    /// `waiting_ms`. Called only when [`Store::hands_over`], with requests
    /// queued where `released` (or the first request) is: their keys'
    /// names are its names.
    fn hand_over(
        &self,
        released: Option<&Self::Claim>,
        requests: &[(&Self::Claim, u64)],
        waiting_ms: u64,
    ) -> impl Future<Output = Result<HandedOver<Self::Written>, Failure>> + Send;

    /// What the store holds of `key` (see [`crate::Backend::inspect`]):
    /// one read that changes nothing, its `backend` left for the caller.
    fn inspect(&self, key: &str) -> impl Future<Output = Result<Inspection, Failure>> + Send;

    /// What a forced release of `key` compares with, read now: its fence
    /// counter (kept `retention_ms`; a store may make one where there is
    /// none: see the Redis driver's), and whatever else of the key every
    /// grant changes where the counter alone may not show it (the Redis
    /// driver's holders: a restore can bring back a counter exactly).
    fn observe(&self, key: &str, retention_ms: u64) -> impl Future<Output = Result<Self::Observed, Failure>> + Send;

    /// Removes every holder of `key` (see [`crate::Backend::force_release`])
    /// and raises its fence counter above every fence it granted, kept
    /// `retention_ms`, in one call that tells waiters in every process:
    /// how many live holders it removed, and the counter as raised. Only
    /// while the key is still as `observed` (every grant, and every break,
    /// changes it): `None`, nothing changed, otherwise, so that a break
    /// delivered late, or sent again, never removes a holder granted after
    /// its read.
    fn force_release(
        &self,
        key: &str,
        retention_ms: u64,
        observed: &Self::Observed,
    ) -> impl Future<Output = Result<Option<(u32, u64)>, Failure>> + Send;

    /// Takes back the marks a waiting try left under `ticket` (best effort).
    fn withdraw(&self, claim: &Self::Claim, ticket: u64) -> impl Future<Output = ()> + Send;

    /// True when an unknown outcome's `cause` is a connection that ended
    /// under the call (a restart, a connection the server had closed while
    /// it sat in the pool, a session killed, a cut), not a call that ran out
    /// of time (which may still be on its way, and would hold a retry up
    /// behind it). Such a call is sent again on another connection where
    /// that is safe (a renewal, a give-back: [`super::resend`]), and a
    /// waiting acquire cleans up its token and tries again (see
    /// [`super::acquire`]). A store that cannot tell answers false.
    fn lost_with_its_connection(_cause: &Cause) -> bool {
        false
    }

    /// Waits until the writes just made for `claim` (`written`) are as
    /// durable as the backend asks (`replicaAcks`); fewer in time is
    /// [`Failure::Unmet`].
    fn replicated(&self, claim: &Self::Claim, written: &[Self::Written]) -> impl Future<Output = Result<(), Failure>> + Send;

    /// The connection the backend's calls go through, as the lock layer
    /// reads it.
    fn store_connection(&self) -> &dyn StoreConnection;
}

/// What the lock layer reads of a store's connection, whatever the store:
/// asked of the connection itself, so that no store repeats it.
pub trait StoreConnection: Send + Sync + 'static {
    /// True while releases in other processes wake this one (waiters then
    /// retry at the long safety-net interval only).
    fn is_notified(&self) -> bool;

    fn command_timeout(&self) -> Duration;

    /// True once the connection shut down (nothing more can reach it).
    fn is_shut_down(&self) -> bool;

    /// What `status()` reports of the connection.
    fn connectivity(&self) -> Connectivity;
}

/// What one try at taking a claim found.
pub enum Taken<W> {
    /// Every key is ours: the fence of each (in the caller's order), and
    /// where the grant was written.
    Granted { fences: Vec<u64>, written: Vec<W> },
    /// Some key is held (or, for a reader or a counted request, waited for
    /// first). `retry`: when it may be free; `ticket`: this request's place
    /// among waiters, for the next try (0: none).
    Busy { retry: Retry, ticket: u64 },
    /// Some key is held or waited for with a different limit.
    OtherLimit,
}

/// When the keys of a refused try may be free, as far as the store knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Retry {
    /// The first blocking holder's lease ends within this many
    /// milliseconds.
    Within(u64),
    /// The key just became free (a waiter ahead of this one may take it).
    Now,
    /// Not known.
    Unknown,
    /// Refused for another session's row lock: its end is never notified.
    Contended,
}

impl Retry {
    /// The store scripts' and routines' number: milliseconds until the
    /// first blocking holder expires, -2 when the key just became free,
    /// any other negative number when that is not known.
    pub fn from_store(hint: i64) -> Retry {
        match hint {
            -2 => Retry::Now,
            hint => u64::try_from(hint).map_or(Retry::Unknown, Retry::Within),
        }
    }
}

/// What giving a claim back did.
pub struct Freed {
    /// Every key still carried the claim's token (else the lease was lost).
    pub all: bool,
    /// Set when the first attempt was lost with its connection and this is
    /// the answer to the retry: the first attempt may have freed the keys.
    pub first_attempt_lost: Option<Cause>,
    /// Set when the first attempt was refused for another session's row
    /// lock (nothing done) and this is the answer to a second one: keys it
    /// no longer found held may have run out while the two waited, after
    /// the release was called (see `give_back`).
    pub refused_first: Option<Cause>,
}

/// What one hand-off call did.
pub struct HandedOver<W> {
    /// The released claim's keys, as [`Store::give_back`] would answer.
    pub freed: Freed,
    /// Per key of the released claim: a waiter may now be granted there.
    pub wake: Vec<bool>,
    /// Per request tried, in order, what its own try would have found.
    pub taken: Vec<Taken<W>>,
}

/// The connection as `status()` reports it.
pub struct Connectivity {
    pub last_answer: Option<SystemTime>,
    pub connected: bool,
    pub subscribed: bool,
    pub last_error: Option<ErrorCode>,
}

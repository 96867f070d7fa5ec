//! The redis driver's side of the store seam (`crate::store::Store`):
//! each operation is one script call per hash slot (see `super::claim`
//! and `super::scripts`) on the transport's connection.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::claim::Claim;
use super::clock::ServerClock;
use super::keys::{release_channel, RedisKeys};
use super::scripts::{Scripted, Scripts};
use super::transport::connection::RedisConnection;
use super::transport::connection::ToRedisArgsRef;
use super::transport::connection::Via;
use crate::acquire::LockKind;
use crate::error::{ErrorCode, LockError, Result};
use crate::holder::HolderLabel;
use crate::inspect::Inspection;
use crate::log::{Level, LogRecord, Logger};
use crate::options::StoreOptions;
use crate::store::token::owner_token;
use crate::store::waiters::Waiters;
use crate::store::{Failure, Freed, HandedOver, Retry, Store, StoreConnection, Taken, Terms};
use crate::telemetry::{Telemetry, TelemetryEvent};

/// What the redis backends of one connection share: the connection and its
/// scripts, this process's queues of the connection's keys, whether its
/// notifications heard a process of the older key layout, and the highest
/// fence it was granted (see [`super::clock`]).
pub(crate) struct Shared {
    pub scripted: Scripted,
    pub waiters: Arc<Waiters<RedisStore>>,
    pub older_layout: OlderLayout,
    clock: ServerClock,
}

impl Shared {
    pub fn new(connection: Arc<RedisConnection>) -> Shared {
        let scripted = Scripted { connection, scripts: Scripts::new() };
        Shared { scripted, waiters: Arc::default(), older_layout: OlderLayout::default(), clock: ServerClock::default() }
    }

    pub fn connection(&self) -> &Arc<RedisConnection> {
        &self.scripted.connection
    }

    /// Wakes this process's head waiting on `lock` (a release freed it).
    fn wake(&self, lock: &str) {
        self.waiters.wake(lock);
    }
}

/// The release channels on which a process of the older key layout was
/// heard (see [`super::keys::is_older_layout`]).
#[derive(Default)]
pub(crate) struct OlderLayout {
    /// True once heard on some channel (one atomic load while never).
    heard: AtomicBool,
    channels: Mutex<Vec<Box<str>>>,
}

impl OlderLayout {
    /// Remembers that a process of the older layout published a release on `channel`.
    pub fn heard_on(&self, channel: &str) {
        let mut channels = self.channels.lock().unwrap_or_else(|e| e.into_inner());
        if !channels.iter().any(|known| &**known == channel) {
            channels.push(channel.into());
        }
        self.heard.store(true, Ordering::Release);
    }

    fn shares(&self, channel: &str) -> bool {
        self.heard.load(Ordering::Acquire)
            && self.channels.lock().unwrap_or_else(|e| e.into_inner()).iter().any(|known| &**known == channel)
    }
}

/// One redis backend's reach: its connection's shared parts and its
/// namespace.
pub struct RedisStore {
    shared: Arc<Shared>,
    namespace: String,
    /// Where releases in this namespace are published.
    channel: String,
    /// This backend's `fenceRetentionMs`, for the clock's warning only: a
    /// grant reads its own from its claim (`Claim::terms`).
    retention_ms: u64,
    replica_acks: u32,
    /// Who says so when a server's clock is found behind.
    speaker: Speaker,
}

/// The backend's name, its connection's, and where it reports.
struct Speaker {
    backend: String,
    connection: String,
    logger: Logger,
    telemetry: Option<Telemetry>,
}

impl RedisStore {
    pub(crate) fn new(
        shared: Arc<Shared>,
        options: &StoreOptions,
        backend: &str,
        logger: Logger,
        telemetry: Option<Telemetry>,
    ) -> RedisStore {
        RedisStore {
            shared,
            channel: release_channel(&options.namespace),
            namespace: options.namespace.clone(),
            retention_ms: u64::from(options.fence_retention_ms),
            replica_acks: options.replica_acks,
            speaker: Speaker { backend: backend.into(), connection: options.connection.clone(), logger, telemetry },
        }
    }

    fn connection(&self) -> &RedisConnection {
        self.shared.connection()
    }

    /// A grant of `fences` to a request sent at `sent`: says so when the
    /// granting server's clock is found behind (see [`super::clock`]).
    fn granted<W>(&self, taken: &Taken<W>, sent: Instant) {
        let Taken::Granted { fences, .. } = taken else { return };
        for &fence in fences {
            if let Some(behind) = self.shared.clock.granted(fence, sent) {
                self.clock_behind(behind);
            }
        }
    }

    #[cold]
    fn clock_behind(&self, behind: Duration) {
        let Speaker { backend, connection, logger, telemetry } = &self.speaker;
        let retention = Duration::from_millis(self.retention_ms);
        let past = behind >= retention;
        logger(&LogRecord {
            level: if past { Level::Error } else { Level::Warn },
            backend: backend.clone(),
            code: "REDIS_CLOCK_BEHIND",
            message: format!(
                "a server of Redis connection '{connection}' granted a fence {:.1} s below one granted before the request was sent: \
                 its clock is at least {:.1} s behind the latest server time this connection saw ({}); \
                 keep the clocks of the servers that can become primary in step (NTP, slewing)",
                behind.as_secs_f64(),
                behind.as_secs_f64(),
                if past {
                    format!(
                        "more than fenceRetentionMs, {} ms: fences can repeat, and a fenced store refuses the lower ones",
                        self.retention_ms
                    )
                } else {
                    format!("less than fenceRetentionMs, {} ms: fences still never repeat", self.retention_ms)
                }
            ),
        });
        if let Some(telemetry) = telemetry {
            telemetry.event(&TelemetryEvent::ClockBehind {
                backend: backend.clone(),
                connection: connection.clone(),
                behind,
                fence_retention: retention,
            });
        }
    }

    /// After a grant of `claim`, whose waiting tries may have left marks
    /// under tickets it never learned (a try sent twice): takes back every
    /// mark of its token (the withdraw leaves a lock the token holds alone).
    async fn take_back_marks(&self, claim: &Claim, ticket: u64) {
        if claim.marks_left() {
            claim.withdraw(&self.shared.scripted, ticket, &self.channel).await;
        }
    }

    /// Gives back what the first send of a try sent twice may have granted
    /// `claim` when the second was refused: nobody was told of it. Best
    /// effort: what a refused give-back leaves lapses after leaseMs (or is
    /// the token's next grant). The acquire still waits: its queue-set
    /// marks, and a key a release handed to it, stay (see the release
    /// script). A give-back that may land later spends the token (see
    /// [`Claim::spent`]).
    async fn give_back_untold(&self, claim: &Claim) {
        let given_back = claim.give_back(&self.shared.scripted, &self.channel, false, &|lock| self.shared.wake(lock)).await;
        let _ = claim.settled(given_back);
    }

    /// One call of the hand-off script for requests none of which is spent
    /// (see [`Store::hand_over`]).
    async fn hand_over_unspent(
        &self,
        released: Option<&Claim>,
        requests: &[(&Claim, u64)],
        waiting_ms: u64,
    ) -> Result<HandedOver<Via>, Failure> {
        let sent = Instant::now();
        let handed = Claim::hand_over(&self.shared.scripted, released, requests, waiting_ms, &self.channel).await?;
        // Without a released lease the call is the first request's own try
        // (with the waiters behind it).
        let own_try_sent_twice = released.is_none() && handed.first_attempt_lost.is_some();
        if let (true, Some((first, _))) = (released.is_none(), requests.first()) {
            first.note_lost_try(own_try_sent_twice, waiting_ms);
            first.sent_twice(); // answered here, below
        }
        for (index, (claim, ticket)) in requests.iter().enumerate() {
            match handed.taken.get(index) {
                Some(taken @ Taken::Granted { .. }) => {
                    self.take_back_marks(claim, *ticket).await;
                    self.granted(taken, sent);
                }
                _ if own_try_sent_twice => self.give_back_untold(claim).await,
                _ => {}
            }
        }
        let all = released.is_some_and(|claim| handed.released == claim.keys.len() as i64);
        Ok(HandedOver {
            freed: Freed { all, first_attempt_lost: handed.first_attempt_lost, refused_first: None },
            wake: handed.wake,
            taken: handed.taken,
        })
    }
}

impl Store for RedisStore {
    type Claim = Claim;
    type Written = Via;
    /// The key's fence counter and a digest of its holders.
    type Observed = [String; 2];
    const NAME: &'static str = "Redis";
    const DRIVER: &'static str = "redis";

    fn waiters(&self) -> &Arc<Waiters<Self>> {
        &self.shared.waiters
    }

    fn claim(&self, keys: &[&str], kind: LockKind, terms: Terms, holder: &HolderLabel) -> Result<Claim> {
        if self.shared.older_layout.shares(&self.channel) {
            return Err(older_layout(&self.namespace));
        }
        let names = keys.iter().map(|key| RedisKeys::new(&self.namespace, key)).collect();
        Ok(Claim::new(names, kind, owner_token(holder)?, self.connection().is_cluster(), terms))
    }

    /// Not on a Cluster, where one script reaches one hash slot only.
    fn hands_over(&self) -> bool {
        !self.connection().is_cluster()
    }

    async fn take(&self, claim: &Claim, waiting_ms: u64, ticket: u64) -> Result<Taken<Via>, Failure> {
        let sent = Instant::now();
        let taken = claim.take(&self.shared.scripted, waiting_ms, ticket, &self.channel, &|lock| self.shared.wake(lock)).await?;
        let sent_twice = claim.sent_twice();
        match taken {
            Taken::Granted { .. } => self.take_back_marks(claim, ticket).await,
            _ if sent_twice => self.give_back_untold(claim).await,
            _ => {}
        }
        if let Some(spent) = claim.spent() {
            return Err(spent);
        }
        self.granted(&taken, sent);
        Ok(taken)
    }

    async fn extend(&self, claim: &Claim) -> Result<(bool, Vec<Via>), Failure> {
        claim.extend(&self.shared.scripted).await
    }

    async fn give_back(&self, claim: &Claim) -> Result<Freed, Failure> {
        let answer = claim.give_back(&self.shared.scripted, &self.channel, true, &|lock| self.shared.wake(lock)).await?;
        Ok(Freed { all: answer.value == 1, first_attempt_lost: answer.first_attempt_lost, refused_first: None })
    }

    async fn hand_over(&self, released: Option<&Claim>, requests: &[(&Claim, u64)], waiting_ms: u64) -> Result<HandedOver<Via>, Failure> {
        // A spent token is granted nothing (see `Claim::spent`): a head's
        // own try fails at once, and a spent follower is left out (told
        // busy, its own next try fails).
        if let (None, Some((first, _))) = (released, requests.first()) {
            if let Some(spent) = first.spent() {
                return Err(spent);
            }
        }
        if !requests.iter().any(|(claim, _)| claim.spent().is_some()) {
            return self.hand_over_unspent(released, requests, waiting_ms).await;
        }
        let unspent: Vec<(&Claim, u64)> = requests.iter().filter(|(claim, _)| claim.spent().is_none()).copied().collect();
        let mut handed = match (released, unspent.is_empty()) {
            (Some(claim), true) => {
                let freed = self.give_back(claim).await?;
                HandedOver { freed, wake: vec![true; claim.keys.len()], taken: Vec::new() }
            }
            _ => self.hand_over_unspent(released, &unspent, waiting_ms).await?,
        };
        let mut taken = std::mem::take(&mut handed.taken).into_iter();
        handed.taken = requests
            .iter()
            .map_while(|(claim, ticket)| match claim.spent() {
                Some(_) => Some(Taken::Busy { retry: Retry::Now, ticket: *ticket }),
                None => taken.next(),
            })
            .collect();
        Ok(handed)
    }

    async fn inspect(&self, key: &str) -> Result<Inspection, Failure> {
        let names = RedisKeys::new(&self.namespace, key);
        let shown = crate::inspect::SHOWN_HOLDERS as u64;
        let answer = self.connection().eval::<Vec<String>>(&self.shared.scripted.scripts.inspect, &names.all(), &[&shown]).await?;
        super::inspect::parse(&answer.value)
            .ok_or_else(|| Failure::Refused(Arc::new(std::io::Error::other("an inspect reply of another shape"))))
    }

    async fn observe(&self, key: &str, retention_ms: u64) -> Result<[String; 2], Failure> {
        let names = RedisKeys::new(&self.namespace, key);
        let [lock, fence, ..] = names.all();
        let kept_ms = retention_ms.max(60_000);
        let seen = self.connection().eval::<Vec<String>>(&self.shared.scripted.scripts.observe, &[lock, fence], &[&kept_ms]).await?;
        <[String; 2]>::try_from(seen.value)
            .map_err(|_| Failure::Refused(Arc::new(std::io::Error::other("an observe reply of another shape"))))
    }

    /// One script (see [`super::scripts`]' `FORCE_RELEASE`). A break whose
    /// first attempt was lost with its connection, in this call or one
    /// before it that had to wait for the clock, and that then found the
    /// key changed may have run (that attempt changes it): an unknown
    /// outcome, not a key granted again (review R55). With `replicaAcks`,
    /// the break waits for as many replicas as a grant does: a failover to
    /// a replica that missed it would bring the holders back.
    async fn force_release(&self, key: &str, retention_ms: u64, observed: &[String; 2]) -> Result<Option<(u32, u64)>, Failure> {
        let names = RedisKeys::new(&self.namespace, key);
        let [counter, holders] = observed;
        // The counter is kept at least a minute, as the read keeps it: the
        // clock wait puts it back for `retention` past its value, which the
        // read put up to a second ahead (review R54's 1 ms retention).
        let kept_ms = retention_ms.max(60_000);
        let args: [&dyn ToRedisArgsRef; 4] = [&self.channel, &kept_ms, counter, holders];
        let script = &self.shared.scripted.scripts.force_release;
        let mut lost = None;
        // A fence that must wait for the clock (within a second of a
        // restart or failover, see `next_fence!`) is tried again once the
        // clock has passed it, as a waiting acquire's would be: nothing
        // was written, so the key is still as read.
        loop {
            let answer = self.connection().eval::<Vec<i64>>(script, &names.all(), &args).await?;
            lost = answer.first_attempt_lost.or(lost);
            match answer.value[..] {
                [1, removed, fence] => {
                    if self.replica_acks > 0 {
                        let acknowledged = self.connection().wait_for_replicas(&answer.via, &names.acks(), self.replica_acks).await?;
                        if acknowledged < self.replica_acks {
                            return Err(Failure::Unmet(Arc::new(redis::RedisError::from(std::io::Error::other(format!(
                                "only {acknowledged} of the {} replicas of replicaAcks had the break within commandTimeoutMs: \
                                 a failover now may bring the holders back",
                                self.replica_acks
                            ))))));
                        }
                    }
                    self.shared.wake(names.lock());
                    return Ok(Some((removed as u32, fence as u64)));
                }
                [0, wait_ms] => tokio::time::sleep(Duration::from_millis(wait_ms.clamp(1, 1_000) as u64)).await,
                [2] => return lost.map_or(Ok(None), |cause| Err(Failure::Unknown(cause))),
                _ => return Err(Failure::Refused(Arc::new(std::io::Error::other("a forceRelease reply of another shape")))),
            }
        }
    }

    async fn withdraw(&self, claim: &Claim, ticket: u64) {
        claim.withdraw(&self.shared.scripted, ticket, &self.channel).await
    }

    /// With `replicaAcks`, waits until that many replicas have each write
    /// (on the connection that made it): a failover right after must not
    /// lose it.
    async fn replicated(&self, claim: &Claim, written: &[Via]) -> Result<(), Failure> {
        let wanted = self.replica_acks;
        if wanted == 0 {
            return Ok(());
        }
        let mut acknowledged = u32::MAX;
        for (write, via) in written.iter().enumerate() {
            acknowledged = acknowledged.min(self.connection().wait_for_replicas(via, &claim.acks(write), wanted).await?);
        }
        if acknowledged >= wanted {
            return Ok(());
        }
        Err(Failure::Unmet(Arc::new(redis::RedisError::from(std::io::Error::other(format!(
            "only {acknowledged} of the {wanted} replicas of replicaAcks had the write within commandTimeoutMs"
        ))))))
    }

    fn store_connection(&self) -> &dyn StoreConnection {
        self.connection()
    }
}

/// A process of the older key layout (64 hex digits in braces) releases
/// keys in this namespace: it grants by other names than ours, so the two
/// could hold one key at once. Nothing more is granted here.
fn older_layout(namespace: &str) -> LockError {
    LockError::new(
        ErrorCode::ProviderFailed,
        format!(
            "a process of an older dokebi-lock key layout (0.4.1 before its release) shares the Redis namespace '{namespace}': \
             the two layouts use different names and could hold one key at once, so this backend grants nothing more; \
             stop every process of the older version (or give this one another namespace) and restart this one"
        ),
    )
}

//! One Redis connection of `dokebi-redis.connections`, shared by every
//! backend that names it: a multiplexed command connection (reconnected on
//! demand) plus, in [`crate::redis::notify`], one pub/sub connection. With a
//! [`Host`], commands sent on the host's thread use a second command
//! connection, driven by the host's loop (see [`crate::host`]). Where the
//! connection goes (a server, the primary Sentinel names, a cluster) is the
//! [`Topology`]'s business; in a cluster each lane keeps one such connection
//! per primary, and routes a script by its keys' slot (see [`super::cluster`]).
//!
//! Every command is bounded: connecting (with the new connection's checks)
//! by `connectTimeoutMs`, each attempt by `commandTimeoutMs`, and the whole
//! command, its reconnects, retries and slot map fetches included, by the
//! two together from its start (past that: unknown once an attempt was
//! sent, else unanswered, never unreachable); but once a cluster node's connect failed, a
//! fresh slot map is asked for with a connect and a command's time of its own,
//! since only a cluster none of whose nodes is reached reads as unreachable
//! (a policy falls back on that). Failures are classified once, here:
//! - [`Failure::Unreachable`]: no connection could be made (refused, DNS,
//!   connect timeout): the command did not run.
//! - [`Failure::Denied`]: the server was reached and refused who we are
//!   (credentials, an ACL permission, our client certificate), or we
//!   refused its TLS certificate: a [`Refusal`] whose fix names what to
//!   change. At connect, or at the first command (`NOAUTH`, `NOPERM`).
//! - [`Failure::Unknown`]: the command was (or may have been) sent and no
//!   answer came in time. The connection is replaced, since a connection
//!   that left a command unanswered may be dead without knowing it.
//! - [`Failure::Refused`]: the server answered with an error.
//!
//! A command the server answered without running it (`MOVED`, `ASK`,
//! `TRYAGAIN`, `CLUSTERDOWN`, `LOADING`, `READONLY` from a demoted primary)
//! is tried again, on a fresh connection where that helps, until
//! `commandTimeoutMs` has passed since the first try: after `MOVED` on the
//! node it names, after `ASK` once there behind `ASKING` (the first redirect
//! at once, later ones after a pause). So is
//! one that could not reach a cluster node whose slot a fresh slot map
//! gives to another (a failover): it never left.
//!
//! A command that fails because the connection dropped is retried once on a
//! fresh connection: all scripts compare the owner token, so a retry is
//! harmless, and [`Answer::first_attempt_lost`] tells callers whose answer
//! depends on whether the first attempt ran (release).

use std::collections::BTreeMap;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime};

use futures_util::stream::{FuturesUnordered, StreamExt};
use hashbrown::HashMap;
use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::cluster_routing::Slot;
use redis::{
    AsyncConnectionConfig, Cmd, ConnectionAddr, ConnectionInfo, ErrorKind, FromRedisValue, RedisError, RedisResult, Script,
    ServerErrorKind, ToRedisArgs, Value,
};
use rustls::pki_types::CertificateDer;
use tokio::runtime::Handle;
use tokio::sync::watch;

use super::cluster::{Cluster, FailedFetch, NodeName, SlotMap};
use super::link::{redis_client, Dial, Links};
use super::refusal::{Login, Refusal};
use super::subscriptions::Subscriptions;
use super::tcp;
use super::tls::Tls;
use super::topology::{NodeConnection, Topology};
use crate::error::{Cause, ErrorCode, Result};
use crate::host::{Host, HostStream, InRuntime, Socket};
use crate::log::{Level, LogRecord, Logger};
use crate::options::{ConnectionOptions, Endpoint};
use crate::store::reach::{no_sign_of_down, Reach};
use crate::store::{Connectivity, Failure, StoreConnection};
use crate::telemetry::{Telemetry, TelemetryEvent};

/// How long a failed connect answers for later callers, so that a dead
/// server costs one connect attempt, not one per waiting acquire.
const CONNECT_FAILURE_REUSE: Duration = Duration::from_millis(100);

/// The oldest Redis version the driver runs on, major and minor: a grant
/// raises its fence with `SET ... GET` and writes reservations with `PXAT`
/// (both 6.2). On 5.0-6.1 every grant that reserves would fail.
const MIN_SERVER: (u32, u32) = (6, 2);

/// The `redis_version` of an `INFO server` reply, and its major and minor
/// numbers (a missing minor reads as 0).
fn server_version(info: &str) -> Option<(&str, (u32, u32))> {
    let version = info.lines().find_map(|line| line.strip_prefix("redis_version:"))?.trim();
    let mut numbers = version.split('.');
    let major = numbers.next()?.parse().ok()?;
    let minor = numbers.next().map_or(Some(0), |minor| minor.parse().ok())?;
    Some((version, (major, minor)))
}

/// The `run_id` of an `INFO server` reply: one per server process.
fn run_id(info: &str) -> Option<&str> {
    info.lines().find_map(|line| line.strip_prefix("run_id:")).map(str::trim)
}

/// Why a server of `version` (major, minor) is refused, if it is.
fn too_old(version: &str, numbers: (u32, u32)) -> Option<String> {
    (numbers < MIN_SERVER).then(|| {
        let (major, minor) = MIN_SERVER;
        format!("the server runs Redis {version}; dokebi-lock needs Redis {major}.{minor} or later (SET ... GET and PXAT in its scripts)")
    })
}

/// Why a server whose `CONFIG GET replica-read-only` answered `reply` (by
/// name: a RESP2 array of pairs or a RESP3 map) is refused, if it is: set
/// `no`, once demoted (a failover, `REPLICAOF`) it answers the scripts as a
/// primary would, with no `READONLY` to tell, and keeps their writes to
/// itself, so a connection made before the demotion grants keys the new
/// primary grants too. `server` is its address.
fn writable_replica(server: &str, reply: &BTreeMap<String, String>) -> Option<Refusal> {
    (reply.get("replica-read-only").map(String::as_str) == Some("no")).then(|| Refusal {
        message: format!(
            "Redis at {server} is set replica-read-only no: demoted to a replica, it would go on granting locks its new primary grants too"
        ),
        fix: "Set replica-read-only yes (Redis's default) on every server that can be demoted: CONFIG SET replica-read-only yes, and in its configuration file.".to_owned(),
        cause: Arc::new(io::Error::other("CONFIG GET replica-read-only answered no")),
    })
}

/// A connect failure: the refusal it carries; else refused when the server
/// answered with an error (`BUSY` to the connect's `SELECT`, say: it is up,
/// and a policy must not move its keys), else as far as the connect got
/// (`reach`) says: unreachable only when its socket never came up. A
/// socket error that is no sign the server is down (a Unix socket's full
/// backlog, this process out of descriptors: reviews R24, R25), on any
/// link (a node's, a sentinel's), counts as a socket that came up.
fn connect_failure(reach: &Reach, err: RedisError) -> Failure {
    match Refusal::find(&err) {
        Some(refusal) => {
            Failure::Denied(Arc::new(Refusal { message: refusal.message.clone(), fix: refusal.fix.clone(), cause: refusal.cause.clone() }))
        }
        None if err.code().is_some() => Failure::Refused(Arc::new(err)),
        None => {
            if io_error(&err).is_some_and(no_sign_of_down) {
                reach.socket_up();
            }
            let lost = !err.is_timeout();
            reach.failure(Arc::new(err), lost)
        }
    }
}

/// The socket error a redis-rs error carries, if any (redis-rs keeps it
/// behind an `Arc<dyn Error>`, which is what its `source` answers).
pub(super) fn io_error(err: &RedisError) -> Option<&io::Error> {
    let source = std::error::Error::source(err)?;
    source
        .downcast_ref::<io::Error>()
        .or_else(|| source.downcast_ref::<Arc<dyn std::error::Error + Send + Sync>>().and_then(|inner| inner.downcast_ref::<io::Error>()))
}

/// A script's reply.
pub(crate) struct Answer<T> {
    pub value: T,
    /// The node that ran it, for a `WAIT` on its write.
    pub via: Via,
    /// Set when the first attempt was lost with its connection (the error)
    /// and this is the reply to the retry: the first attempt may have run too.
    pub first_attempt_lost: Option<Cause>,
}

/// A lane's connection to one node, made on demand.
#[derive(Default)]
struct Current {
    generation: u64,
    connection: Option<Open>,
    /// The last connect's failure: when that connect began and ended.
    last_failure: Option<(Instant, Instant, Failure)>,
}

type Shared = Arc<tokio::sync::Mutex<Current>>;

/// A lane's open connection to one node, as one command uses it.
struct Using {
    node: Shared,
    generation: u64,
    connection: NodeConnection,
    peer: Arc<Peer>,
}

/// The node a connection went to, and as whom: what a refusal names.
struct Peer {
    info: ConnectionInfo,
    login: Login,
    /// The server's `run_id` (`INFO server`), once read: tells whether two
    /// connections to one address reach one server (an address that
    /// follows a failover, a DNS name or a load balancer, may not).
    run_id: OnceLock<String>,
}

impl Peer {
    /// True when both servers' `run_id`s are known and equal: a server that
    /// refuses `INFO` cannot be told apart from another behind its address.
    fn same_server(&self, other: &Peer) -> bool {
        matches!((self.run_id.get(), other.run_id.get()), (Some(mine), Some(theirs)) if mine == theirs)
    }
}

/// The node a script ran on, as it was reached: where a `WAIT` for the
/// script's write goes (see [`RedisConnection::wait_for_replicas`]).
#[derive(Clone)]
pub struct Via {
    peer: Arc<Peer>,
}

/// How long a `WAIT`'s own write (see [`RedisConnection::wait_for_replicas`])
/// lives: it only has to reach the replication stream.
const PROBE_MS: u64 = 1000;

/// How many `WAIT` connections are kept open between uses.
const WAITING_IDLE: usize = 8;

/// An open command connection.
struct Open {
    connection: NodeConnection,
    /// Set once its reader has ended (the server closed the socket, or it
    /// failed): a command sent after that never reached the server, so the
    /// next command reconnects first instead of losing an attempt.
    ended: Arc<AtomicBool>,
    peer: Arc<Peer>,
}

/// Command connections made on demand: on the runtime, or (with a host)
/// on the host's thread. One to the one node, or in a cluster one per node.
struct Lane {
    host: Option<Arc<dyn Host>>,
    /// A server's, or Sentinel's primary's.
    single: Shared,
    /// A cluster's, by node.
    nodes: Mutex<HashMap<NodeName, Shared>>,
    /// How many of its connections are open.
    open: AtomicUsize,
}

impl Lane {
    fn new(host: Option<Arc<dyn Host>>) -> Lane {
        Lane { host, single: Shared::default(), nodes: Mutex::new(HashMap::new()), open: AtomicUsize::new(0) }
    }

    /// The connection to `node` (`None`: the one node).
    fn to(&self, node: Option<&NodeName>) -> Shared {
        match node {
            None => self.single.clone(),
            Some(node) => self.nodes.lock().unwrap_or_else(|e| e.into_inner()).entry(node.clone()).or_default().clone(),
        }
    }

    fn all(&self) -> Vec<Shared> {
        let nodes = self.nodes.lock().unwrap_or_else(|e| e.into_inner());
        std::iter::once(self.single.clone()).chain(nodes.values().cloned()).collect()
    }
}

/// A shared Redis connection.
pub(crate) struct RedisConnection {
    name: String,
    telemetry: Option<Telemetry>,
    topology: Topology,
    /// How its links are made (TCP, TLS).
    links: Arc<Links>,
    /// For what is logged once (a keepalive the system refused).
    logger: Logger,
    /// The backends that use it, by which such records are logged.
    backends: Vec<String>,
    connect_timeout: Duration,
    command_timeout: Duration,
    /// Commands sent on the runtime's thread (all of them without a host).
    runtime_lane: Lane,
    /// Commands sent on the host's thread; none without a host or over TLS.
    host_lane: Option<Lane>,
    /// Some lane's connection is open.
    connected: AtomicBool,
    subscriptions: Subscriptions,
    last_error: Mutex<Option<ErrorCode>>,
    last_answer: Mutex<Option<SystemTime>>,
    stop: watch::Sender<bool>,
    /// Counts the primary switches seen (Sentinel): the subscription
    /// follows them.
    switched: watch::Sender<u64>,
    /// Open `WAIT` connections not in use, to any node.
    waiting: Mutex<Vec<Open>>,
}

impl RedisConnection {
    /// Checks the URLs and reads the TLS files; opens no socket. Its TLS
    /// links trust `extra` authorities besides the system's (unless its
    /// `tls.ca` replaces them). `backends` use it, and `logger` logs for
    /// them.
    pub fn new(
        name: &str,
        options: &ConnectionOptions,
        extra: &[CertificateDer<'static>],
        logger: Logger,
        backends: Vec<String>,
        telemetry: Option<Telemetry>,
        host: Option<Arc<dyn Host>>,
    ) -> Result<RedisConnection> {
        let connect_timeout = Duration::from_millis(options.connect_timeout_ms.into());
        let tls = match uses_tls(&options.endpoint) {
            true => Some(Tls::new(name, options.tls.as_ref(), extra)?),
            false => None,
        };
        let links = Arc::new(Links::new(tls));
        let topology = Topology::new(name, &options.endpoint, links.clone())?;
        let host_lane = host.filter(|_| topology.has_plain_nodes()).map(|host| Lane::new(Some(host)));
        let subscriptions = Subscriptions::new(topology.subscribers());
        Ok(RedisConnection {
            name: name.to_owned(),
            telemetry,
            topology,
            links,
            logger,
            backends,
            connect_timeout,
            command_timeout: Duration::from_millis(options.command_timeout_ms.into()),
            runtime_lane: Lane::new(None),
            host_lane,
            connected: AtomicBool::new(false),
            subscriptions,
            last_error: Mutex::new(None),
            last_answer: Mutex::new(None),
            stop: watch::channel(false).0,
            switched: watch::channel(0).0,
            waiting: Mutex::new(Vec::new()),
        })
    }

    /// How many release subscriptions the connection keeps (see
    /// [`super::subscriptions`]).
    pub fn subscribers(&self) -> usize {
        self.subscriptions.count()
    }

    /// Where subscription `index` to release notifications goes (see
    /// [`Topology::subscriber`]).
    pub async fn subscriber(&self, index: usize) -> RedisResult<Dial> {
        self.note_keepalive();
        Ok(Dial { links: self.links.clone(), info: self.topology.subscriber(index, self.connect_timeout).await? })
    }

    /// Logs, once per process, a TCP keepalive setting the system refused
    /// (see [`tcp`]).
    fn note_keepalive(&self) {
        let (chosen, decided) = tcp::chosen();
        let Some(refused) = chosen.refused.as_ref().filter(|_| decided) else { return };
        for backend in &self.backends {
            (self.logger)(&LogRecord {
                level: Level::Warn,
                backend: backend.clone(),
                code: "REDIS_TCP_KEEPALIVE",
                message: format!("connections.{}: {refused}", self.name),
            });
        }
    }

    /// Whether subscription `index` acts on a release message for
    /// `lock_key` (each arrives once per subscription).
    pub fn acts_on(&self, index: usize, lock_key: &str) -> bool {
        self.subscriptions.acts_on(index, self.topology.seed_serving(lock_key))
    }

    /// True for a Redis Cluster: a script touches one hash slot only.
    pub fn is_cluster(&self) -> bool {
        matches!(self.topology, Topology::Cluster(_))
    }

    pub fn connect_timeout(&self) -> Duration {
        self.connect_timeout
    }

    pub fn set_subscribed(&self, index: usize, live: bool) {
        self.subscriptions.set(index, live);
    }

    /// Makes `open` (or none) `current`'s connection (one of `lane`'s),
    /// telling telemetry when that changes whether any connection is open.
    fn set_connection(&self, lane: &Lane, current: &mut Current, open: Option<Open>) {
        match (current.connection.is_some(), open.is_some()) {
            (false, true) => _ = lane.open.fetch_add(1, Ordering::Relaxed),
            (true, false) => _ = lane.open.fetch_sub(1, Ordering::Relaxed),
            _ => {}
        }
        current.connection = open;
        let up = std::iter::once(&self.runtime_lane).chain(&self.host_lane).any(|lane| lane.open.load(Ordering::Relaxed) > 0);
        if self.connected.swap(up, Ordering::Relaxed) != up {
            if let Some(telemetry) = &self.telemetry {
                telemetry.event(&TelemetryEvent::Connection { connection: self.name.clone(), up });
            }
        }
    }

    fn answered(&self) {
        *self.last_answer.lock().unwrap_or_else(|e| e.into_inner()) = Some(SystemTime::now());
    }

    /// Resolves once [`RedisConnection::shut_down`] was called.
    pub fn stopped(&self) -> watch::Receiver<bool> {
        self.stop.subscribe()
    }

    /// With Sentinel: the sentinel to listen to on the `attempt`-th try, and
    /// the primary's name (see [`super::switches`]).
    pub fn sentinel(&self, attempt: usize) -> Option<(Dial, String)> {
        let (info, name) = self.topology.sentinel(attempt)?;
        self.note_keepalive();
        Some((Dial { links: self.links.clone(), info }, name.to_owned()))
    }

    /// The sentinels moved the primary: drops every command connection, so
    /// the next command asks where the primary is now instead of writing to
    /// the old one (alive, it takes writes until the sentinels demote it,
    /// seconds later), and tells the subscription to follow.
    pub async fn primary_switched(&self) {
        self.drop_connections().await;
        self.switched.send_modify(|switches| *switches += 1);
    }

    /// Changes with every primary switch.
    pub fn switches(&self) -> watch::Receiver<u64> {
        self.switched.subscribe()
    }

    /// Stops the notification task and closes the command connections.
    pub async fn shut_down(&self) {
        self.stop.send_replace(true);
        self.drop_connections().await;
    }

    async fn drop_connections(&self) {
        self.waiting.lock().unwrap_or_else(|e| e.into_inner()).clear();
        for lane in std::iter::once(&self.runtime_lane).chain(&self.host_lane) {
            for node in lane.all() {
                self.set_connection(lane, &mut *node.lock().await, None);
            }
        }
    }

    /// The lane of the calling thread.
    fn lane(&self) -> &Lane {
        match &self.host_lane {
            Some(lane) if lane.host.as_ref().is_some_and(|host| host.is_current()) => lane,
            _ => &self.runtime_lane,
        }
    }

    /// Runs `script` and converts its reply; see the module docs for the
    /// failure classes and the retries.
    pub async fn eval<T: FromRedisValue>(
        &self,
        script: &Script,
        keys: &[&str],
        args: &[&dyn ToRedisArgsRef],
    ) -> Result<Answer<T>, Failure> {
        let command = evalsha(script, keys, args);
        // Only a cluster routes by it; the key layout puts all keys of a script in one slot.
        let slot = self.topology.cluster().and_then(|_| keys.first()).map(Slot::for_key);
        let mut first_attempt_lost: Option<Cause> = None;
        // Set once the server answered that an attempt did not run.
        let mut answered = false;
        let lane = self.lane();
        let started = tokio::time::Instant::now();
        // Replies that say the command did not run are followed until then.
        let deadline = started + self.command_timeout;
        let end = self.command_end(started);
        // After `ASK`: the node to try next, behind `ASKING`.
        let mut asked: Option<NodeName> = None;
        // `MOVED` and `ASK` replies so far.
        let mut redirects = 0u32;
        loop {
            // Until the script is sent, an acquire may stop waiting (the
            // first time round only: see `crate::store::connecting`).
            let connecting = crate::store::connecting();
            let node = match asked.clone() {
                Some(node) => Some(node),
                None => match within(end, self.route(lane, slot)).await {
                    Ok(node) => node,
                    Err(failure) => return Err(self.failed(after_earlier_attempts(failure, first_attempt_lost, answered))),
                },
            };
            let failure = match within(end, self.connection(lane, node.as_ref())).await {
                // A failover may have moved the slot; not after `ASK`, though:
                // the map would send the command back to the node that sent it here.
                Err(failure) => {
                    // Asked with a connect and a command's time of its own,
                    // past `end` if need be: the connect reads as
                    // unreachable only once every map source was asked and
                    // none's socket came up within connectTimeoutMs
                    // (reviews R30 to R33).
                    if asked.is_none() {
                        if let Some(moved) = self.rerouted(lane, slot, node.as_ref()).await {
                            // A node was reached for the map: the cluster is
                            // up (this process's map named a node that is
                            // gone, or a failover is under way), so this
                            // connect is refused, not unreachable.
                            answered = true;
                            // The script goes to the new node only with a
                            // whole commandTimeoutMs left for its answer.
                            if moved && tokio::time::Instant::now() + self.command_timeout <= end {
                                continue;
                            }
                        }
                    }
                    failure
                }
                Ok(mut using) => {
                    drop(connecting);
                    let asking = asked.take().is_some();
                    let (bound, unanswered) = self.answer_bound(end);
                    match tokio::time::timeout_at(bound, run_script(&mut using.connection, script, &command, asking)).await {
                        Ok(Ok(value)) => {
                            self.answered();
                            return match redis::from_redis_value(value) {
                                Ok(value) => Ok(Answer { value, via: Via { peer: using.peer }, first_attempt_lost }),
                                Err(err) => Err(self.failed(Failure::Refused(Arc::new(RedisError::from(err))))),
                            };
                        }
                        Err(_) => {
                            self.invalidate(lane, &using).await;
                            Failure::Unknown(Arc::new(timeout_error(unanswered)))
                        }
                        Ok(Err(err)) if err.is_timeout() => {
                            self.invalidate(lane, &using).await;
                            Failure::Unknown(Arc::new(err))
                        }
                        Ok(Err(err)) if err.is_connection_dropped() || err.is_io_error() => {
                            self.invalidate(lane, &using).await;
                            if first_attempt_lost.is_none() {
                                first_attempt_lost = Some(Arc::new(err));
                                continue;
                            }
                            Failure::Unknown(Arc::new(err))
                        }
                        Ok(Err(err)) if did_not_run(&err) && tokio::time::Instant::now() + RETRY_PAUSE < deadline => {
                            answered = true;
                            if self.redirected(&err, &mut asked) {
                                // The first redirect is followed at once; one
                                // that does not settle (nodes that send it back
                                // and forth while their maps disagree) waits.
                                redirects += 1;
                                if redirects > 1 {
                                    tokio::time::sleep(RETRY_PAUSE).await;
                                }
                                continue;
                            }
                            // A demoted primary: the next connection asks
                            // where the primary is now.
                            if is_read_only(&err) {
                                self.invalidate(lane, &using).await;
                            } else if let (ErrorKind::Server(ServerErrorKind::ClusterDown), Some(cluster)) =
                                (err.kind(), self.topology.cluster())
                            {
                                cluster.mark_stale();
                            }
                            tokio::time::sleep(RETRY_PAUSE).await;
                            continue;
                        }
                        Ok(Err(err)) => {
                            // A protocol or auth error, or READONLY after a failover
                            // demoted this server: the next command reconnects.
                            if err.is_unrecoverable_error() || is_read_only(&err) {
                                self.invalidate(lane, &using).await;
                            }
                            refused(&using.peer, err)
                        }
                    }
                }
            };
            return Err(self.failed(after_earlier_attempts(failure, first_attempt_lost, answered)));
        }
    }

    /// Where a command on `slot`'s keys goes: the one node (`None`), or in
    /// a cluster the primary the slot map names (fetched first when stale;
    /// the old map serves while no node gives a new one).
    async fn route(&self, lane: &Lane, slot: Option<Slot>) -> Result<Option<NodeName>, Failure> {
        let Some(cluster) = self.topology.cluster() else { return Ok(None) };
        let fetched = if cluster.is_stale() { self.fetch_slots(lane, cluster, None).await } else { Ok(()) };
        match (cluster.primary(slot), fetched) {
            (Some(node), _) => Ok(Some(node)),
            (None, Err(failure)) => Err(failure),
            (None, Ok(())) => {
                cluster.mark_stale();
                // Refused, not unreachable: a node answered with this map.
                Err(Failure::Refused(Arc::new(RedisError::from(io::Error::new(
                    io::ErrorKind::NotFound,
                    "no cluster node serves the keys' hash slot",
                )))))
            }
        }
    }

    /// Once `node` of a cluster could not be reached: whether a fresh slot
    /// map gives `slot` to another node (a failover); `Some(false)` too when
    /// a node was reached but gave no map (it refused, or did not answer in
    /// time: up all the same); `None` when every source's own connect failed
    /// unreachable (or this is not a cluster). Every source is asked, `node` last.
    async fn rerouted(&self, lane: &Lane, slot: Option<Slot>, node: Option<&NodeName>) -> Option<bool> {
        let (Some(cluster), Some(node)) = (self.topology.cluster(), node) else { return None };
        cluster.mark_stale();
        match self.fetch_slots(lane, cluster, Some(node)).await {
            Ok(()) => Some(cluster.primary(slot).is_some_and(|now| now != *node)),
            Err(Failure::Unreachable(_)) => None,
            Err(_) => Some(false),
        }
    }

    /// Follows `MOVED` (the slot map learns the slot's node, and the next try
    /// goes there) and `ASK` (the next try goes to its node, the map stays):
    /// true if `err` was either, in a cluster.
    fn redirected(&self, err: &RedisError, asked: &mut Option<NodeName>) -> bool {
        let (Some(cluster), Some((node, slot))) = (self.topology.cluster(), err.redirect_node()) else { return false };
        if err.kind() == ErrorKind::Server(ServerErrorKind::Moved) {
            cluster.moved(slot, node);
        } else {
            *asked = Some(node.into());
        }
        true
    }

    /// Fetches the cluster's slot map (`CLUSTER SLOTS`) from the first node
    /// that gives it, unless another command just did (or just failed to:
    /// see [`super::cluster::LastFetch`]). Every command waits for the map,
    /// so one node may not hold it up: the sources (`last` at the end) are
    /// asked in turn, the next one also asked once the one before has taken
    /// its share of a commandTimeoutMs, and the fetch ends a connect and a
    /// command's time after it began, so each source has at least a whole
    /// `connectTimeoutMs` to get its socket. Unreachable only when every
    /// source failed so: one still connecting or answering at the end is not.
    async fn fetch_slots(&self, lane: &Lane, cluster: &Cluster, last: Option<&NodeName>) -> Result<(), Failure> {
        let bound = self.connect_timeout + self.command_timeout;
        let asked = tokio::time::Instant::now();
        // At most one fetch under way to wait for, and it ends within its bound.
        let Ok(mut fetching) = tokio::time::timeout_at(asked + bound, cluster.fetching()).await else {
            // No source asked: nothing says the cluster is down.
            return Err(Failure::Unanswered(Arc::new(timeout_error("another command's slot map fetch did not end in time"))));
        };
        if !cluster.is_stale() {
            return Ok(());
        }
        if let Some(last) = fetching.as_ref().filter(|last| last.began >= asked) {
            return Err(last.failure.clone());
        }
        let began = tokio::time::Instant::now();
        let until = began + bound;
        let sources = cluster.map_sources(last);
        let share = self.command_timeout / sources.len().max(1) as u32;
        let mut sources = sources.iter().peekable();
        let since = began.into_std();
        let ask = |node| async move { self.cluster_slots(lane, node, since).await };
        let mut asking = FuturesUnordered::new();
        let mut failure = None;
        // The next source is asked when this passes, or at once when no
        // asking is under way: source i is asked by `began + i × share`,
        // so every one within commandTimeoutMs.
        let next_ask = tokio::time::sleep_until(began + share);
        let all = tokio::time::sleep_until(until);
        tokio::pin!(next_ask, all);
        loop {
            if asking.is_empty() {
                let Some(node) = sources.next() else { break };
                asking.push(ask(node));
                next_ask.as_mut().reset(tokio::time::Instant::now() + share);
            }
            tokio::select! {
                Some(answer) = asking.next() => match answer {
                    Ok(map) => {
                        cluster.replace(map);
                        *fetching = None;
                        return Ok(());
                    }
                    Err(err) => failure = Some(reached_first(failure, err)),
                },
                _ = &mut next_ask, if sources.peek().is_some() => {
                    asking.push(ask(sources.next().expect("peeked")));
                    next_ask.as_mut().reset(tokio::time::Instant::now() + share);
                }
                _ = &mut all => {
                    // A source is still being asked (the loop ends when none
                    // is left to ask): it was asked by `began +
                    // commandTimeoutMs`, and a connect of its own then ended
                    // (failed, if no socket came up) within connectTimeoutMs,
                    // before now. So it got its socket, or waited for another
                    // command's connect and connects again (review R35): no
                    // sign the cluster is down.
                    let cause = Arc::new(timeout_error("no cluster node gave its slot map in time"));
                    failure = Some(reached_first(failure, Failure::Unanswered(cause)));
                    break;
                }
            }
        }
        let failure = self.failed(failure.expect("a cluster has a seed node"));
        *fetching = Some(FailedFetch { began, failure: failure.clone() });
        Err(failure)
    }

    /// `node`'s slot map, on a connection made at `since` or later if it
    /// must be made.
    async fn cluster_slots(&self, lane: &Lane, node: &NodeName, since: Instant) -> Result<SlotMap, Failure> {
        let mut using = self.connection_since(lane, Some(node), Some(since)).await?;
        let command = redis::cmd("CLUSTER").arg("SLOTS").to_owned();
        let reply = match tokio::time::timeout(self.command_timeout, command.query_async::<Value>(&mut using.connection)).await {
            Ok(Ok(reply)) => reply,
            Ok(Err(err)) => {
                self.invalidate(lane, &using).await;
                return Err(refused(&using.peer, err));
            }
            Err(_) => {
                self.invalidate(lane, &using).await;
                return Err(Failure::Unanswered(Arc::new(timeout_error("no answer to CLUSTER SLOTS within commandTimeoutMs"))));
            }
        };
        self.answered();
        SlotMap::from_cluster_slots(&reply, node).ok_or_else(|| {
            Failure::Refused(Arc::new(RedisError::from(io::Error::new(
                io::ErrorKind::InvalidData,
                "a CLUSTER SLOTS reply that gives no map (malformed, or no slot)",
            ))))
        })
    }

    /// Waits until `replicas` replicas have every write made on `via`'s
    /// node so far (`WAIT`), within `commandTimeoutMs`: `Ok` with how many
    /// did.
    ///
    /// Redis blocks a client for the whole of its `WAIT`, and every command
    /// queued behind it on that client waits too: on the lane's shared
    /// connection, two `WAIT`s in a row (or a script behind them) would pass
    /// their timeout and end unknown. So a `WAIT` has a connection of its own,
    /// to the very node the script ran on. A client's `WAIT` counts from its
    /// last write that reached the replication stream (Redis 7.2 and later;
    /// before, from its last command): so that connection first puts its
    /// offset past the script's write (with a `PING` alone, Redis 7.2+ let a
    /// replica that never got the grant meet the `WAIT` at once). It
    /// publishes an empty message on channel `probe`: no key, never refused
    /// for memory nor redirected, and replicated outside a Cluster. A
    /// Cluster replicates no `PUBLISH`: there it sets the name `probe` of
    /// the script's slot for a second (refused at `maxmemory`, redirected
    /// while the slot migrates: the write is then unconfirmed). No failure
    /// here is an unknown outcome: the write stands; only its copies are
    /// unconfirmed. Nor is any unreachable: the write just ran on that
    /// server, which may now grant its keys to another process
    /// ([`unconfirmed`]).
    pub async fn wait_for_replicas(&self, via: &Via, probe: &str, replicas: u32) -> Result<u32, Failure> {
        self.wait_on_write_s_server(via, probe, replicas).await.map_err(|failure| self.failed(unconfirmed(failure)))
    }

    /// [`RedisConnection::wait_for_replicas`], its failures as they came.
    async fn wait_on_write_s_server(&self, via: &Via, probe: &str, replicas: u32) -> Result<u32, Failure> {
        let mut open = match self.idle_waiting(via) {
            Some(open) => open,
            None => {
                // The connection's check (INFO) is part of making it:
                // `connectTimeoutMs` bounds both, as for every connection,
                // so the whole stays within a connect and a command's time.
                let reach = Reach::default();
                let connect = async {
                    let mut open = self.open_to(None, via.peer.info.clone(), &reach).await.map_err(|err| connect_failure(&reach, err))?;
                    let peer = open.peer.clone();
                    if let Some(run_id) = self.info(&mut open.connection, &peer, &reach, "server").await?.as_deref().and_then(run_id) {
                        let _ = peer.run_id.set(run_id.to_owned());
                    }
                    Ok(open)
                };
                let open = match tokio::time::timeout(self.connect_timeout, connect).await {
                    Ok(Ok(open)) => open,
                    Ok(Err(failure)) => return Err(failure),
                    Err(_) => return Err(reach.failure(Arc::new(timeout_error("no connection within connectTimeoutMs")), false)),
                };
                // The write's server, or its WAIT would count another
                // server's replicas: an address that moved to a new
                // primary since the write's connection was opened.
                let peer = open.peer.clone();
                if !peer.same_server(&via.peer) {
                    return Err(Failure::Unmet(Arc::new(RedisError::from(io::Error::other(
                        "the WAIT's connection reached another server than the write's (the address moved), or the server refused INFO (replicaAcks needs it to tell): the write is unconfirmed",
                    )))));
                }
                open
            }
        };
        let mut command = redis::pipe();
        match self.topology.cluster() {
            None => command.cmd("PUBLISH").arg(probe).arg("").ignore(),
            Some(_) => command.cmd("SET").arg(probe).arg(1).arg("PX").arg(PROBE_MS).ignore(),
        };
        command.cmd("WAIT").arg(replicas).arg(wait_bound(self.command_timeout));
        match tokio::time::timeout(self.command_timeout, command.query_async::<(i64,)>(&mut open.connection)).await {
            Ok(Ok((acknowledged,))) => {
                self.answered();
                self.keep_waiting(open);
                Ok(u32::try_from(acknowledged).unwrap_or(0))
            }
            Ok(Err(err)) if err.is_io_error() || err.is_connection_dropped() => Err(Failure::Unreachable(Arc::new(err))),
            Ok(Err(err)) => Err(refused(&open.peer, err)),
            Err(_) => Err(Failure::Unmet(Arc::new(timeout_error("no answer to WAIT within commandTimeoutMs")))),
        }
    }

    /// An idle `WAIT` connection to `via`'s node.
    fn idle_waiting(&self, via: &Via) -> Option<Open> {
        let mut idle = self.waiting.lock().unwrap_or_else(|e| e.into_inner());
        idle.retain(|open| !open.ended.load(Ordering::Acquire));
        let at = idle.iter().position(|open| open.peer.info.addr() == via.peer.info.addr() && open.peer.same_server(&via.peer))?;
        Some(idle.swap_remove(at))
    }

    /// Keeps a `WAIT` connection that answered for the next `WAIT`.
    fn keep_waiting(&self, open: Open) {
        let mut idle = self.waiting.lock().unwrap_or_else(|e| e.into_inner());
        if idle.len() < WAITING_IDLE && !*self.stop.borrow() {
            idle.push(open);
        }
    }

    /// Runs one plain command (bounded like every other); in a cluster, on
    /// any primary.
    pub async fn query<T: FromRedisValue>(&self, command: &redis::Cmd) -> Result<T, Failure> {
        let lane = self.lane();
        let end = self.command_end(tokio::time::Instant::now());
        let node = within(end, self.route(lane, None)).await.map_err(|failure| self.failed(failure))?;
        let mut using = within(end, self.connection(lane, node.as_ref())).await.map_err(|failure| self.failed(failure))?;
        let (bound, unanswered) = self.answer_bound(end);
        match tokio::time::timeout_at(bound, command.query_async::<T>(&mut using.connection)).await {
            Ok(Ok(value)) => {
                self.answered();
                Ok(value)
            }
            Ok(Err(err)) => {
                if err.is_unrecoverable_error() || err.is_io_error() {
                    self.invalidate(lane, &using).await;
                }
                Err(self.failed(refused(&using.peer, err)))
            }
            Err(_) => {
                self.invalidate(lane, &using).await;
                Err(self.failed(Failure::Unknown(Arc::new(timeout_error(unanswered)))))
            }
        }
    }

    /// When a command started at `started` ends at the latest, whatever
    /// it meets: a connect (with the new connection's checks) and a
    /// command's time. Each attempt has its own `commandTimeoutMs` within
    /// it, but reconnects and retries do not extend it.
    fn command_end(&self, started: tokio::time::Instant) -> tokio::time::Instant {
        started + self.connect_timeout + self.command_timeout
    }

    /// How long an attempt sent now may wait for its answer (its own
    /// `commandTimeoutMs`, or what is left of the command's bound `end`),
    /// and what to say when it is not answered.
    fn answer_bound(&self, end: tokio::time::Instant) -> (tokio::time::Instant, &'static str) {
        let own = tokio::time::Instant::now() + self.command_timeout;
        if own <= end {
            (own, "no answer within commandTimeoutMs")
        } else {
            (end, "no answer within connectTimeoutMs + commandTimeoutMs of the command's start (its retries included)")
        }
    }

    fn failed(&self, failure: Failure) -> Failure {
        let code = match failure {
            Failure::Unknown(_) => ErrorCode::OutcomeUnknown,
            _ => ErrorCode::ProviderFailed,
        };
        *self.last_error.lock().unwrap_or_else(|e| e.into_inner()) = Some(code);
        failure
    }

    /// `lane`'s open connection to `node` (`None`: the one node), or a new
    /// one (one connect attempt at a time).
    async fn connection(&self, lane: &Lane, node: Option<&NodeName>) -> Result<Using, Failure> {
        self.connection_since(lane, node, None).await
    }

    /// [`RedisConnection::connection`], taking a kept failure (another
    /// command's connect, ended within [`CONNECT_FAILURE_REUSE`]) only from
    /// a connect that began at `since` or later: a slot map fetch asks
    /// every source for a whole connect of its own (review R34).
    async fn connection_since(&self, lane: &Lane, node: Option<&NodeName>, since: Option<Instant>) -> Result<Using, Failure> {
        let shared = lane.to(node);
        let mut current = shared.lock().await;
        if *self.stop.borrow() {
            return Err(shut_down());
        }
        match &current.connection {
            Some(open) if !open.ended.load(Ordering::Acquire) => {
                let (generation, connection, peer) = (current.generation, open.connection.clone(), open.peer.clone());
                drop(current);
                return Ok(Using { node: shared, generation, connection, peer });
            }
            Some(_) => self.set_connection(lane, &mut current, None),
            None => {}
        }
        if let Some((began, ended, failure)) = &current.last_failure {
            if ended.elapsed() < CONNECT_FAILURE_REUSE && since.is_none_or(|since| *began >= since) {
                return Err(failure.clone());
            }
        }
        let began = Instant::now();
        // Boxed: connecting is rare, and its futures are large; inline they
        // would make every command's future (and its moves) as large. The
        // checks are part of making the connection: `connectTimeoutMs` bounds
        // them too.
        let reach = Reach::default();
        let connect: Pin<Box<dyn Future<Output = Result<Open, Failure>> + Send + '_>> = Box::pin(async {
            match self.open(lane, node, &reach).await {
                Ok(open) => self.check_server(open, &reach).await,
                Err(err) => Err(connect_failure(&reach, err)),
            }
        });
        // A shut-down ends it: `close()` takes every node's lock, which a
        // connect to a server that does not answer held for the whole
        // `connectTimeoutMs`.
        let mut stop = self.stop.subscribe();
        let checked = tokio::select! {
            checked = tokio::time::timeout(self.connect_timeout, connect) => {
                checked.unwrap_or_else(|_| Err(reach.failure(Arc::new(timeout_error("no connection within connectTimeoutMs")), false)))
            }
            _ = stop.wait_for(|stopped| *stopped) => return Err(shut_down()),
        };
        match checked {
            Ok(open) => {
                let (connection, peer) = (open.connection.clone(), open.peer.clone());
                current.generation += 1;
                current.last_failure = None;
                self.set_connection(lane, &mut current, Some(open));
                let generation = current.generation;
                drop(current);
                Ok(Using { node: shared, generation, connection, peer })
            }
            Err(failure) => {
                current.last_failure = Some((began, Instant::now(), failure.clone()));
                Err(self.failed(failure))
            }
        }
    }

    /// How every command connection is made: `connectTimeoutMs` bounds the
    /// connect, and no response timeout of the client's own (redis-rs has
    /// 500 ms by default), so `commandTimeoutMs`, applied around each
    /// command, is the only one.
    fn config(&self) -> AsyncConnectionConfig {
        AsyncConnectionConfig::new().set_connection_timeout(Some(self.connect_timeout)).set_response_timeout(None)
    }

    /// Refuses a server older than [`MIN_SERVER`]: its scripts would fail
    /// (`SET ... GET`, `PXAT`). A server that hides `INFO` (a renamed
    /// command) is taken as is: there a grant refuses at its first fence,
    /// with nothing written.
    /// With Sentinel the node must also say it is the primary: a sentinel
    /// that has not seen a failover yet may name the old one.
    /// Outside a Cluster a server set `replica-read-only no` is refused (see
    /// [`writable_replica`]); one that refuses `CONFIG` (managed services
    /// rename or forbid it) is taken as is. A Cluster's replica answers a
    /// script `MOVED` whatever the setting.
    /// `reach`: how far its connect got, which classifies the checks'
    /// failures.
    async fn check_server(&self, mut open: Open, reach: &Reach) -> Result<Open, Failure> {
        let peer = open.peer.clone();
        let info = self.info(&mut open.connection, &peer, reach, "server").await?;
        if let Some(run_id) = info.as_deref().and_then(run_id) {
            let _ = peer.run_id.set(run_id.to_owned());
        }
        if let Some(refusal) = info.as_deref().and_then(server_version).and_then(|(version, numbers)| too_old(version, numbers)) {
            return Err(Failure::Unmet(Arc::new(RedisError::from(io::Error::new(io::ErrorKind::Unsupported, refusal)))));
        }
        if !self.is_cluster() {
            let setting = redis::cmd("CONFIG").arg("GET").arg("replica-read-only").to_owned();
            let reply: Option<BTreeMap<String, String>> =
                self.optional(&mut open.connection, &peer, reach, &setting, "no answer to CONFIG GET within commandTimeoutMs").await?;
            if let Some(refusal) = reply.and_then(|reply| writable_replica(&peer.login.server, &reply)) {
                return Err(Failure::Denied(Arc::new(refusal)));
            }
        }
        if self.topology.needs_primary() {
            let replication = self.info(&mut open.connection, &peer, reach, "replication").await?;
            if replication.as_deref().is_some_and(|info| !info.lines().any(|line| line.trim() == "role:master")) {
                // Refused, not unreachable: the node answered (and may be
                // the primary another process's sentinels named first).
                return Err(Failure::Refused(Arc::new(RedisError::from(io::Error::new(
                    io::ErrorKind::NotConnected,
                    "the node the sentinels named is not a primary (yet)",
                )))));
            }
        }
        Ok(open)
    }

    /// One `INFO` section (see [`RedisConnection::optional`]).
    async fn info(&self, connection: &mut NodeConnection, peer: &Peer, reach: &Reach, section: &str) -> Result<Option<String>, Failure> {
        let info = redis::cmd("INFO").arg(section).to_owned();
        self.optional(connection, peer, reach, &info, "no answer to INFO within commandTimeoutMs").await
    }

    /// The reply to a check made at connect; `None` when the server refuses
    /// `command` (a renamed command, or an ACL that hides it), unless it
    /// wants credentials first (`NOAUTH`) or is busy with a script (`BUSY`:
    /// the connect fails, and the next one checks again). A TLS failure after the handshake
    /// (the server refusing our client certificate) shows here. `unanswered`
    /// says what went unanswered; `reach`, how far the connect got.
    async fn optional<T: FromRedisValue>(
        &self,
        connection: &mut NodeConnection,
        peer: &Peer,
        reach: &Reach,
        command: &Cmd,
        unanswered: &'static str,
    ) -> Result<Option<T>, Failure> {
        match tokio::time::timeout(self.command_timeout, command.query_async::<T>(connection)).await {
            Err(_) => Err(reach.failure(Arc::new(timeout_error(unanswered)), false)),
            Ok(Err(err)) if err.is_io_error() || err.is_connection_dropped() || err.is_timeout() => {
                Err(connect_failure(reach, self.links.explain(peer.info.addr(), err)))
            }
            Ok(Err(err)) if matches!(err.code(), Some("NOAUTH" | "WRONGPASS")) => Err(refused(peer, err)),
            // A script past `busy-reply-threshold`: the server answers every
            // command BUSY until it ends, and a connection taken unchecked
            // now would outlive it. Refused, not unreachable: the server is
            // up and holds its keys, so a policy must not move them.
            Ok(Err(err)) if err.code() == Some("BUSY") => Err(Failure::Refused(Arc::new(err))),
            Ok(Err(_)) => Ok(None),
            Ok(Ok(reply)) => Ok(Some(reply)),
        }
    }

    /// Connects a command connection for `lane` and starts its reader: on the
    /// runtime, or in `lane`'s host loop, which then drives the socket. The
    /// socket is connected on the runtime (name resolution may block), then
    /// handed over. Over TLS redis-rs connects and drives it itself.
    async fn open(&self, lane: &Lane, node: Option<&NodeName>, reach: &Reach) -> RedisResult<Open> {
        self.note_keepalive();
        let info = self.topology.node(node, self.connect_timeout, reach).await?;
        self.open_to(lane.host.as_ref(), info, reach).await
    }

    /// Connects a command connection to the node `info` names; see
    /// [`RedisConnection::open`]. `reach` learns how far it got: the socket
    /// up (over TLS, before the handshake).
    async fn open_to(&self, host: Option<&Arc<dyn Host>>, info: ConnectionInfo, reach: &Reach) -> RedisResult<Open> {
        let ended = Arc::new(AtomicBool::new(false));
        let login = Login::of(&info, "Redis", self.topology.credentials_option(&self.name));
        let peer = Arc::new(Peer { info: info.clone(), login, run_id: OnceLock::new() });
        // The server refused the credentials (at AUTH), or a TLS certificate.
        let explain = |err: RedisError| {
            let err = self.links.explain(peer.info.addr(), err);
            match peer.login.refusal(&err).filter(|_| Refusal::find(&err).is_none()) {
                Some(refusal) => refusal.into_redis(),
                None => err,
            }
        };
        let socket = match info.addr() {
            ConnectionAddr::Tcp(name, port) => Socket::Tcp(Links::tcp(name, *port, Some(reach)).await?.into_std()?),
            #[cfg(unix)]
            ConnectionAddr::Unix(path) => {
                let stream = tokio::net::UnixStream::connect(path).await?;
                reach.socket_up();
                Socket::Unix(stream.into_std()?)
            }
            addr => {
                let connection = match self.links.tls(addr, Some(reach)).await {
                    Some(stream) => self.on_runtime(info.redis_settings(), stream?, &ended).await,
                    None => redis_client(info.clone())?.get_multiplexed_async_connection_with_config(&self.config()).await,
                };
                let connection = connection.map_err(explain)?;
                // A link redis-rs made itself (an address of a kind the
                // driver does not make) tells only now: up, since it answered.
                reach.socket_up();
                return Ok(Open { connection, ended, peer });
            }
        };
        let settings = info.redis_settings();
        let connection = match host {
            Some(host) => {
                let stream = HostStream::new(host.as_ref(), socket)?;
                let (connection, reader) =
                    MultiplexedConnection::new_with_config(settings, stream, self.config()).await.map_err(explain)?;
                host.spawn(Box::pin(InRuntime::new(Handle::current(), flag_end(reader, ended.clone()))));
                connection
            }
            None => match socket {
                Socket::Tcp(stream) => {
                    let stream = tokio::net::TcpStream::from_std(stream)?;
                    self.on_runtime(settings, stream, &ended).await.map_err(explain)?
                }
                #[cfg(unix)]
                Socket::Unix(stream) => {
                    let stream = tokio::net::UnixStream::from_std(stream)?;
                    self.on_runtime(settings, stream, &ended).await.map_err(explain)?
                }
            },
        };
        Ok(Open { connection, ended, peer })
    }

    /// A connection over `stream` whose reader runs on the runtime and sets
    /// `ended` when it ends.
    async fn on_runtime<S>(
        &self,
        settings: &redis::RedisConnectionInfo,
        stream: S,
        ended: &Arc<AtomicBool>,
    ) -> RedisResult<MultiplexedConnection>
    where
        S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Sync + Unpin + 'static,
    {
        let (connection, reader) = MultiplexedConnection::new_with_config(settings, stream, self.config()).await?;
        Handle::current().spawn(flag_end(reader, ended.clone()));
        Ok(connection)
    }

    /// Drops the connection `using` used, unless replaced already, so the
    /// next command reconnects; in a cluster the slot map is fetched again
    /// too (a failover may be why it failed).
    async fn invalidate(&self, lane: &Lane, using: &Using) {
        let mut current = using.node.lock().await;
        if current.generation == using.generation {
            self.set_connection(lane, &mut current, None);
        }
        if let Some(cluster) = self.topology.cluster() {
            cluster.mark_stale();
        }
    }

    /// Connects once and warns when the server may evict lock keys.
    ///
    /// Only `noeviction` is safe: `allkeys-*` may evict a held lock (and a
    /// fence counter, which the next grant then raises to the clock), and
    /// `volatile-*` evicts exactly the keys with a TTL, which every held lock
    /// has. A server that hides `CONFIG` (managed Redis) is not warned about.
    pub async fn check_eviction_policy(&self, backends: &[String], logger: &Logger) {
        let reply: Result<Vec<String>, Failure> = self.query(redis::cmd("CONFIG").arg("GET").arg("maxmemory-policy")).await;
        let Ok(reply) = reply else { return };
        let Some(policy) = reply.get(1) else { return };
        if policy != "noeviction" {
            for backend in backends {
                logger(&LogRecord {
                    level: Level::Warn,
                    backend: backend.clone(),
                    code: "REDIS_EVICTION_POLICY",
                    message: format!(
                        "the Redis server's maxmemory-policy is {policy}: under memory pressure it can evict held locks; set maxmemory-policy noeviction"
                    ),
                });
            }
        }
    }
}

impl StoreConnection for RedisConnection {
    /// True while release notifications are subscribed (in a cluster, on
    /// some seed node).
    fn is_notified(&self) -> bool {
        self.subscriptions.any()
    }

    fn command_timeout(&self) -> Duration {
        self.command_timeout
    }

    /// True once [`RedisConnection::shut_down`] was called.
    fn is_shut_down(&self) -> bool {
        *self.stop.borrow()
    }

    /// Connected while a command connection is open; the last answer and
    /// the code of the last failure talking to Redis.
    fn connectivity(&self) -> Connectivity {
        Connectivity {
            last_answer: *self.last_answer.lock().unwrap_or_else(|e| e.into_inner()),
            connected: self.connected.load(Ordering::Relaxed),
            subscribed: self.is_notified(),
            last_error: *self.last_error.lock().unwrap_or_else(|e| e.into_inner()),
        }
    }
}

/// True when `endpoint` makes TLS links: a `rediss://` URL, or
/// `sentinel.tls`.
fn uses_tls(endpoint: &Endpoint) -> bool {
    let tls = |url: &String| url.starts_with("rediss://");
    match endpoint {
        Endpoint::Server { url } => tls(url),
        Endpoint::Sentinel(sentinel) => sentinel.tls || sentinel.nodes.iter().any(tls),
        Endpoint::Cluster { nodes } => nodes.iter().any(tls),
    }
}

/// A command `peer` answered with an error: refused, or denied for who we
/// are (`NOPERM`, `NOAUTH`, `WRONGPASS`).
fn refused(peer: &Peer, err: RedisError) -> Failure {
    match peer.login.refusal(&err) {
        Some(refusal) => Failure::Denied(Arc::new(refusal)),
        None => Failure::Refused(Arc::new(err)),
    }
}

/// The failure to keep of two from the sources of a slot map: the first
/// from a server that was reached (it may be up and serving the keys, so
/// the map's failure must not read unreachable), else the latest.
fn reached_first(kept: Option<Failure>, new: Failure) -> Failure {
    match kept {
        Some(kept) if !matches!(kept, Failure::Unreachable(_)) => kept,
        _ => new,
    }
}

/// A `WAIT`'s failure after the write it confirms: never unreachable (a
/// policy would move keys the write just took on a server that is up), but
/// the write unconfirmed.
fn unconfirmed(failure: Failure) -> Failure {
    match failure {
        Failure::Unreachable(cause) | Failure::Unanswered(cause) => Failure::Unmet(Arc::new(RedisError::from(io::Error::other(format!(
            "the write is unconfirmed: the connection for its WAIT failed ({cause})"
        ))))),
        other => other,
    }
}

/// Runs a connection's reader, then records that it ended.
async fn flag_end(reader: impl Future<Output = ()>, ended: Arc<AtomicBool>) {
    reader.await;
    ended.store(true, Ordering::Release);
}

/// The pause before trying again a command the server did not run.
const RETRY_PAUSE: Duration = Duration::from_millis(20);

/// True for a reply that says the command did not run here: it may be sent
/// again (to where the reply points, or once the condition passes).
fn did_not_run(err: &RedisError) -> bool {
    is_read_only(err)
        || matches!(
            err.kind(),
            ErrorKind::Server(
                ServerErrorKind::Moved
                    | ServerErrorKind::Ask
                    | ServerErrorKind::TryAgain
                    | ServerErrorKind::ClusterDown
                    | ServerErrorKind::BusyLoading
                    | ServerErrorKind::MasterDown
            )
        )
}

/// True for `READONLY`: the node is a replica (a demoted primary). Redis 7
/// answers a script's write there with `READONLY …`; Redis 6 wraps it as
/// `ERR Error running script … -READONLY …`. Either way nothing was
/// written: a replica takes no write.
fn is_read_only(err: &RedisError) -> bool {
    err.kind() == ErrorKind::Server(ServerErrorKind::ReadOnly)
        || (err.code() == Some("ERR")
            && err.detail().is_some_and(|detail| detail.starts_with("Error running script") && detail.contains("-READONLY ")))
}

/// The failure of a retry, after what its earlier attempts met. One lost
/// with its connection may have run, so whatever the retry met (a refused
/// connection, `LOADING`, `READONLY`) the outcome is unknown. After one the
/// server answered (`answered`: a redirect, `LOADING`, `READONLY`), the
/// store is up: a retry's failed connect is refused, not unreachable, so a
/// policy does not move the key (`crate::store::reach`).
fn after_earlier_attempts(failure: Failure, first_attempt_lost: Option<Cause>, answered: bool) -> Failure {
    match (failure, first_attempt_lost) {
        (Failure::Unknown(cause), _) => Failure::Unknown(cause),
        (_, Some(lost)) => Failure::Unknown(lost),
        (Failure::Unreachable(cause), None) if answered => Failure::Refused(cause),
        (failure, None) => failure,
    }
}

/// Redis' own bound on a `WAIT` (inside ours, so that an answer, how many,
/// comes): never 0, which waits forever.
fn wait_bound(command_timeout: Duration) -> u64 {
    (command_timeout.as_millis() as u64 * 3 / 4).max(1)
}

fn shut_down() -> Failure {
    Failure::Unreachable(Arc::new(RedisError::from(io::Error::new(io::ErrorKind::NotConnected, "the connection was shut down"))))
}

/// `step` of a command (a route, a connect), cut short at the command's
/// bound `end`: nothing was sent by it. Not unreachable: the step cut may
/// be a connect whose socket is up to a stalled server that holds the key,
/// after a route that took most of the bound (review R17); a connect that
/// never gets its socket up fails as unreachable first, at its own
/// `connectTimeoutMs`.
async fn within<T>(end: tokio::time::Instant, step: impl Future<Output = Result<T, Failure>>) -> Result<T, Failure> {
    tokio::time::timeout_at(end, step).await.unwrap_or_else(|_| {
        Err(Failure::Unanswered(Arc::new(timeout_error(
            "no connection within connectTimeoutMs + commandTimeoutMs of the command's start (its retries included)",
        ))))
    })
}

fn timeout_error(message: &'static str) -> RedisError {
    RedisError::from(io::Error::new(io::ErrorKind::TimedOut, message))
}

/// What [`evalsha`] reserves per argument: owner tokens are 32 bytes, numbers
/// and channel names fit.
const ARG_BYTES: usize = 32;

/// `EVALSHA` of `script` on `keys` and `args`.
fn evalsha(script: &Script, keys: &[&str], args: &[&dyn ToRedisArgsRef]) -> Cmd {
    // Sized up front: grown arg by arg, the buffers were reallocated
    // several times per call, a hot cost on every acquire and release.
    let data = "EVALSHA".len() + script.get_hash().len() + 4 + keys.iter().map(|key| key.len()).sum::<usize>() + args.len() * ARG_BYTES;
    let mut command = Cmd::with_capacity(3 + keys.len() + args.len(), data);
    command.arg("EVALSHA");
    command.arg(script.get_hash()).arg(keys.len()).arg(keys);
    for arg in args {
        arg.push(&mut command);
    }
    command
}

/// Sends `command`, an `EVALSHA` of `script` (behind `ASKING` when
/// `asking`), loading the script first where the node lacks it.
async fn run_script(connection: &mut NodeConnection, script: &Script, command: &Cmd, asking: bool) -> RedisResult<Value> {
    match send(connection, command, asking).await {
        Err(err) if err.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
            script.prepare_invoke().load_async(connection).await?;
            send(connection, command, asking).await
        }
        reply => reply,
    }
}

/// `command`'s reply; behind `ASKING` (in one write) when `asking`.
async fn send(connection: &mut NodeConnection, command: &Cmd, asking: bool) -> RedisResult<Value> {
    if !asking {
        return command.query_async(connection).await;
    }
    let mut pipeline = redis::pipe();
    pipeline.cmd("ASKING").add_command(command.clone());
    let mut replies = connection.req_packed_commands(&pipeline, 1, 1).await?;
    replies.pop().unwrap_or(Value::Nil).extract_error()
}

/// A script argument (lets `eval` take arguments of mixed types).
pub(crate) trait ToRedisArgsRef: Sync {
    fn push(&self, command: &mut Cmd);
}

impl<T: ToRedisArgs + Sync> ToRedisArgsRef for T {
    fn push(&self, command: &mut Cmd) {
        command.arg(self);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_server_version_is_read_from_info() {
        let info = "# Server\r\nredis_version:4.0.14\r\nredis_git_sha1:00000000\r\n";
        assert_eq!(server_version(info), Some(("4.0.14", (4, 0))));
        assert_eq!(server_version("redis_version:7.2.4\r\n"), Some(("7.2.4", (7, 2))));
        assert_eq!(server_version("redis_version:8\r\n"), Some(("8", (8, 0))));
        assert_eq!(server_version("# Server\r\n"), None);
    }

    fn reply_error(reply: &str) -> RedisError {
        redis::parse_redis_value(reply.as_bytes()).unwrap().extract_error().unwrap_err()
    }

    #[test]
    fn a_script_a_replica_refused_did_not_run_in_the_form_of_redis_7_and_of_redis_6() {
        // Redis 7.0.15, a script writing on a replica (tests/redis_failure_paths.rs runs it).
        let redis_7 = "-READONLY You can't write against a read only replica. script: 131b5f2ed4a6e4f431cc21897ae043d687859f08, on @user_script:1.\r\n";
        // Redis 6.x wraps the error of a script's redis.call.
        let redis_6 = "-ERR Error running script (call to f_131b5f2ed4a6e4f431cc21897ae043d687859f08): @user_script:1: @user_script: 1: -READONLY You can't write against a read only replica. \r\n";
        for reply in [redis_7, redis_6] {
            assert!(did_not_run(&reply_error(reply)), "{reply}");
            assert!(is_read_only(&reply_error(reply)), "{reply}");
        }
        let other = "-ERR Error running script (call to f_131b): @user_script:1: user_script:1: Script attempted to access nonexistent global variable 'x' \r\n";
        assert!(!did_not_run(&reply_error(other)));
    }

    #[test]
    fn a_wait_is_bounded_by_redis_never_with_0_which_waits_forever() {
        assert_eq!(wait_bound(Duration::from_millis(1)), 1);
        assert_eq!(wait_bound(Duration::from_millis(1000)), 750);
    }

    #[test]
    fn servers_older_than_redis_6_2_are_refused() {
        // Redis 5.0-6.1 passed the check that asked for 5: there every grant
        // that reserves failed (SET ... PXAT), after ACQUIRE's SET NX.
        for old in ["4.0.14", "5.0.7", "6.0.16", "6.1.0"] {
            let info = format!("redis_version:{old}\r\n");
            let (version, numbers) = server_version(&info).unwrap();
            let refusal = too_old(version, numbers).unwrap_or_else(|| panic!("{old} is accepted"));
            assert!(refusal.contains(old) && refusal.contains("6.2 or later"), "{refusal}");
        }
        for new in ["6.2.0", "6.2.14", "7.0.15", "7.2.4", "8.0.0"] {
            let info = format!("redis_version:{new}\r\n");
            let (version, numbers) = server_version(&info).unwrap();
            assert_eq!(too_old(version, numbers), None, "{new} is refused");
        }
    }
}

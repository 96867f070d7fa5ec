//! One Redis connection of `dokebi-redis.connections`, shared by every
//! backend that names it: a multiplexed command connection (reconnected on
//! demand) plus, in [`super::notify`], one pub/sub connection. With a
//! [`Host`], commands sent on the host's thread use a second command
//! connection, driven by the host's loop (see [`super::host`]). Where the
//! connection goes (a server, the primary Sentinel names, a cluster) is the
//! [`Topology`]'s business.
//!
//! Every command is bounded: connecting by `connectTimeoutMs`, each command
//! by `commandTimeoutMs`. Failures are classified once, here:
//! - [`Failure::Unreachable`]: no connection could be made (refused, DNS,
//!   TLS, auth, connect timeout): the command did not run.
//! - [`Failure::Unknown`]: the command was (or may have been) sent and no
//!   answer came in time. The connection is replaced, since a connection
//!   that left a command unanswered may be dead without knowing it.
//! - [`Failure::Refused`]: the server answered with an error.
//!
//! A command the server answered without running it (`MOVED`, `ASK`,
//! `TRYAGAIN`, `CLUSTERDOWN`, `LOADING`, `READONLY` from a demoted primary)
//! is tried again, on a fresh connection where that helps, until
//! `commandTimeoutMs` has passed since the first try.
//!
//! A command that fails because the connection dropped is retried once on a
//! fresh connection: all scripts compare the owner token, so a retry is
//! harmless, and [`Answer::first_attempt_lost`] tells callers whose answer
//! depends on whether the first attempt ran (release).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use redis::aio::MultiplexedConnection;
use redis::io::tcp::socket2::TcpKeepalive;
use redis::io::tcp::TcpSettings;
use redis::{
    AsyncConnectionConfig, Client, ConnectionAddr, ConnectionInfo, ErrorKind, FromRedisValue, RedisError, RedisResult, Script,
    ServerErrorKind, ToRedisArgs, Value,
};
use tokio::runtime::Handle;
use tokio::sync::watch;

use super::host::{Host, HostStream, InRuntime, Socket};
use super::scripts::Scripts;
use super::topology::{NodeConnection, Topology};
use super::waiters::Waiters;
use crate::error::{Cause, ErrorCode, LockError, Result};
use crate::log::{Level, LogRecord, Logger};
use crate::options::ConnectionOptions;
use crate::telemetry::{Telemetry, TelemetryEvent};

/// How long a failed connect answers for later callers, so that a dead
/// server costs one connect attempt, not one per waiting acquire.
const CONNECT_FAILURE_REUSE: Duration = Duration::from_millis(100);

/// The oldest Redis major version the driver runs on.
const MIN_SERVER_MAJOR: u32 = 5;

/// The `redis_version` of an `INFO server` reply, and its major number.
fn server_version(info: &str) -> Option<(&str, u32)> {
    let version = info.lines().find_map(|line| line.strip_prefix("redis_version:"))?.trim();
    let major = version.split('.').next()?.parse().ok()?;
    Some((version, major))
}

/// Why a command produced no answer.
#[derive(Debug, Clone)]
pub(crate) enum Failure {
    Unreachable(Cause),
    Unknown(Cause),
    Refused(Cause),
    /// The server cannot do what the driver needs: too old, or too few
    /// replicas acknowledged a write (`replicaAcks`). The cause says which.
    Unmet(Cause),
}

impl Failure {
    /// The error a caller sees: `PROVIDER_FAILED` or `OUTCOME_UNKNOWN`,
    /// with the Redis error as cause.
    pub fn into_error(self, what: &str) -> LockError {
        match self {
            Failure::Unreachable(cause) => {
                LockError::new(ErrorCode::ProviderFailed, format!("{what}: Redis is unreachable")).with_shared_cause(cause)
            }
            Failure::Refused(cause) => {
                LockError::new(ErrorCode::ProviderFailed, format!("{what}: Redis refused the command")).with_shared_cause(cause)
            }
            Failure::Unmet(cause) => LockError::new(ErrorCode::ProviderFailed, format!("{what}: {cause}")).with_shared_cause(cause),
            Failure::Unknown(cause) => LockError::new(
                ErrorCode::OutcomeUnknown,
                format!("{what}: Redis did not answer (commandTimeoutMs passed or the connection dropped), so the outcome is unknown"),
            )
            .with_shared_cause(cause),
        }
    }
}

/// A script's reply.
pub(crate) struct Answer<T> {
    pub value: T,
    /// The connection that carried it, for a `WAIT` that must follow on
    /// the same one.
    pub via: NodeConnection,
    /// Set when the first attempt was lost with its connection (the error)
    /// and this is the reply to the retry: the first attempt may have run too.
    pub first_attempt_lost: Option<Cause>,
}

struct Current {
    generation: u64,
    connection: Option<Open>,
    last_failure: Option<(Instant, Failure)>,
}

/// An open command connection.
struct Open {
    connection: NodeConnection,
    /// Set once its reader has ended (the server closed the socket, or it
    /// failed): a command sent after that never reached the server, so the
    /// next command reconnects first instead of losing an attempt. Never set
    /// over TLS, whose connection redis-rs drives itself.
    ended: Arc<AtomicBool>,
}

/// One command connection, made on demand: on the runtime, or (with a
/// host) on the host's thread.
struct Lane {
    host: Option<Arc<dyn Host>>,
    current: tokio::sync::Mutex<Current>,
    up: AtomicBool,
}

impl Lane {
    fn new(host: Option<Arc<dyn Host>>) -> Lane {
        Lane {
            host,
            current: tokio::sync::Mutex::new(Current { generation: 0, connection: None, last_failure: None }),
            up: AtomicBool::new(false),
        }
    }
}

/// A shared Redis connection.
pub(crate) struct RedisConnection {
    name: String,
    telemetry: Option<Telemetry>,
    topology: Topology,
    connect_timeout: Duration,
    command_timeout: Duration,
    /// Commands sent on the runtime's thread (all of them without a host).
    runtime_lane: Lane,
    /// Commands sent on the host's thread; none without a host or over TLS.
    host_lane: Option<Lane>,
    /// Some lane's connection is open.
    connected: AtomicBool,
    subscribed: AtomicBool,
    last_error: Mutex<Option<ErrorCode>>,
    last_answer: Mutex<Option<SystemTime>>,
    pub scripts: Scripts,
    pub waiters: Arc<Waiters>,
    stop: watch::Sender<bool>,
    /// Counts the primary switches seen (Sentinel): the subscription
    /// follows them.
    switched: watch::Sender<u64>,
}

impl RedisConnection {
    /// Checks the URLs; opens no socket.
    pub fn new(
        name: &str,
        options: &ConnectionOptions,
        telemetry: Option<Telemetry>,
        host: Option<Arc<dyn Host>>,
    ) -> Result<RedisConnection> {
        let connect_timeout = Duration::from_millis(options.connect_timeout_ms.into());
        let topology = Topology::new(name, &options.endpoint, connect_timeout)?;
        let host_lane = host.filter(|_| topology.has_plain_node()).map(|host| Lane::new(Some(host)));
        Ok(RedisConnection {
            name: name.to_owned(),
            telemetry,
            topology,
            connect_timeout,
            command_timeout: Duration::from_millis(options.command_timeout_ms.into()),
            runtime_lane: Lane::new(None),
            host_lane,
            connected: AtomicBool::new(false),
            subscribed: AtomicBool::new(false),
            last_error: Mutex::new(None),
            last_answer: Mutex::new(None),
            scripts: Scripts::new(),
            waiters: Arc::new(Waiters::default()),
            stop: watch::channel(false).0,
            switched: watch::channel(0).0,
        })
    }

    /// A client for the `attempt`-th try at subscribing to release
    /// notifications (see [`Topology::subscriber`]).
    pub async fn subscriber(&self, attempt: usize) -> RedisResult<Client> {
        Client::open(with_tcp_settings(self.topology.subscriber(attempt, self.connect_timeout).await?))
    }

    /// True for a Redis Cluster: a script touches one hash slot only.
    pub fn is_cluster(&self) -> bool {
        matches!(self.topology, Topology::Cluster(_))
    }

    pub fn connect_timeout(&self) -> Duration {
        self.connect_timeout
    }

    pub fn command_timeout(&self) -> Duration {
        self.command_timeout
    }

    /// True while a command connection is open.
    pub fn is_connected(&self) -> bool {
        self.connected.load(Ordering::Relaxed)
    }

    /// True while release notifications are subscribed.
    pub fn is_subscribed(&self) -> bool {
        self.subscribed.load(Ordering::Relaxed)
    }

    pub fn set_subscribed(&self, live: bool) {
        self.subscribed.store(live, Ordering::Relaxed);
    }

    /// The code of the last failure talking to Redis, if any.
    pub fn last_error(&self) -> Option<ErrorCode> {
        *self.last_error.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// When Redis last answered a command.
    pub fn last_answer(&self) -> Option<SystemTime> {
        *self.last_answer.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records whether `lane`'s connection is open, telling telemetry when
    /// that changes whether any is.
    fn set_connected(&self, lane: &Lane, up: bool) {
        lane.up.store(up, Ordering::Relaxed);
        let up =
            self.runtime_lane.up.load(Ordering::Relaxed) || self.host_lane.as_ref().is_some_and(|lane| lane.up.load(Ordering::Relaxed));
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
    pub fn sentinel(&self, attempt: usize) -> Option<(Client, String)> {
        let (info, name) = self.topology.sentinel(attempt)?;
        Some((Client::open(with_tcp_settings(info)).ok()?, name.to_owned()))
    }

    /// The sentinels moved the primary: drops every command connection, so
    /// the next command asks where the primary is now instead of writing to
    /// the old one (alive, it takes writes until the sentinels demote it,
    /// seconds later), and tells the subscription to follow.
    pub async fn primary_switched(&self) {
        for lane in std::iter::once(&self.runtime_lane).chain(&self.host_lane) {
            lane.current.lock().await.connection = None;
            self.set_connected(lane, false);
        }
        self.switched.send_modify(|switches| *switches += 1);
    }

    /// Changes with every primary switch.
    pub fn switches(&self) -> watch::Receiver<u64> {
        self.switched.subscribe()
    }

    /// True once [`RedisConnection::shut_down`] was called.
    pub fn is_shut_down(&self) -> bool {
        *self.stop.borrow()
    }

    /// Stops the notification task and closes the command connections.
    pub async fn shut_down(&self) {
        self.stop.send_replace(true);
        for lane in std::iter::once(&self.runtime_lane).chain(&self.host_lane) {
            lane.current.lock().await.connection = None;
            self.set_connected(lane, false);
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
        let mut first_attempt_lost: Option<Cause> = None;
        let lane = self.lane();
        let deadline = tokio::time::Instant::now() + self.command_timeout;
        loop {
            let failure = match self.connection(lane).await {
                Err(failure) => failure,
                Ok((generation, mut connection)) => {
                    let mut invocation = script.prepare_invoke();
                    for key in keys {
                        invocation.key(*key);
                    }
                    for arg in args {
                        arg.push(&mut invocation);
                    }
                    match tokio::time::timeout(self.command_timeout, invocation.invoke_async::<Value>(&mut connection)).await {
                        Ok(Ok(value)) => {
                            self.answered();
                            return match redis::from_redis_value(value) {
                                Ok(value) => Ok(Answer { value, via: connection, first_attempt_lost }),
                                Err(err) => Err(self.failed(Failure::Refused(Arc::new(RedisError::from(err))))),
                            };
                        }
                        Err(_) => {
                            self.invalidate(lane, generation).await;
                            Failure::Unknown(Arc::new(timeout_error("no answer within commandTimeoutMs")))
                        }
                        Ok(Err(err)) if err.is_timeout() => {
                            self.invalidate(lane, generation).await;
                            Failure::Unknown(Arc::new(err))
                        }
                        Ok(Err(err)) if err.is_connection_dropped() || err.is_io_error() => {
                            self.invalidate(lane, generation).await;
                            if first_attempt_lost.is_none() {
                                first_attempt_lost = Some(Arc::new(err));
                                continue;
                            }
                            Failure::Unknown(Arc::new(err))
                        }
                        Ok(Err(err)) if did_not_run(&err) && tokio::time::Instant::now() + RETRY_PAUSE < deadline => {
                            // A demoted primary (READONLY): the next
                            // connection asks where the primary is now.
                            if err.kind() == ErrorKind::Server(ServerErrorKind::ReadOnly) {
                                self.invalidate(lane, generation).await;
                            }
                            tokio::time::sleep(RETRY_PAUSE).await;
                            continue;
                        }
                        Ok(Err(err)) => {
                            // A protocol or auth error, or READONLY after a failover
                            // demoted this server: the next command reconnects.
                            if err.is_unrecoverable_error() || err.kind() == ErrorKind::Server(ServerErrorKind::ReadOnly) {
                                self.invalidate(lane, generation).await;
                            }
                            Failure::Refused(Arc::new(err))
                        }
                    }
                }
            };
            return Err(self.failed(after_lost_attempt(failure, first_attempt_lost)));
        }
    }

    /// Waits until `replicas` replicas have every write `via` carried so
    /// far (`WAIT`), within `commandTimeoutMs`: `Ok` with how many did.
    /// `key` routes the `WAIT` in a cluster to where the script ran.
    pub async fn wait_for_replicas(&self, via: &NodeConnection, key: &str, replicas: u32) -> Result<u32, Failure> {
        let mut command = redis::cmd("WAIT");
        // Redis' own bound, inside ours, so that an answer (how many) comes.
        command.arg(replicas).arg(self.command_timeout.as_millis() as u64 * 3 / 4);
        let mut via = via.clone();
        match tokio::time::timeout(self.command_timeout, via.query_at::<i64>(key, &command)).await {
            Ok(Ok(acknowledged)) => {
                self.answered();
                Ok(u32::try_from(acknowledged).unwrap_or(0))
            }
            Ok(Err(err)) if err.is_io_error() || err.is_connection_dropped() => Err(self.failed(Failure::Unknown(Arc::new(err)))),
            Ok(Err(err)) => Err(self.failed(Failure::Refused(Arc::new(err)))),
            Err(_) => Err(self.failed(Failure::Unknown(Arc::new(timeout_error("no answer to WAIT within commandTimeoutMs"))))),
        }
    }

    /// Runs one plain command (bounded like every other).
    pub async fn query<T: FromRedisValue>(&self, command: &redis::Cmd) -> Result<T, Failure> {
        let lane = self.lane();
        let (generation, mut connection) = self.connection(lane).await?;
        match tokio::time::timeout(self.command_timeout, command.query_async::<T>(&mut connection)).await {
            Ok(Ok(value)) => {
                self.answered();
                Ok(value)
            }
            Ok(Err(err)) => {
                if err.is_unrecoverable_error() || err.is_io_error() {
                    self.invalidate(lane, generation).await;
                }
                Err(self.failed(Failure::Refused(Arc::new(err))))
            }
            Err(_) => {
                self.invalidate(lane, generation).await;
                Err(self.failed(Failure::Unknown(Arc::new(timeout_error("no answer within commandTimeoutMs")))))
            }
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

    /// `lane`'s open connection, or a new one (one connect attempt at a time).
    async fn connection(&self, lane: &Lane) -> Result<(u64, NodeConnection), Failure> {
        let mut current = lane.current.lock().await;
        if *self.stop.borrow() {
            return Err(Failure::Unreachable(Arc::new(RedisError::from(io::Error::new(
                io::ErrorKind::NotConnected,
                "the connection was shut down",
            )))));
        }
        match &current.connection {
            Some(open) if !open.ended.load(Ordering::Acquire) => return Ok((current.generation, open.connection.clone())),
            Some(_) => {
                current.connection = None;
                self.set_connected(lane, false);
            }
            None => {}
        }
        if let Some((at, failure)) = &current.last_failure {
            if at.elapsed() < CONNECT_FAILURE_REUSE {
                return Err(failure.clone());
            }
        }
        // Boxed: connecting is rare, and its futures are large; inline they
        // would make every command's future (and its moves) as large.
        let connect: Pin<Box<dyn Future<Output = RedisResult<Open>> + Send + '_>> = Box::pin(self.open(lane));
        let attempt = tokio::time::timeout(self.connect_timeout, connect).await;
        let checked = match attempt.unwrap_or_else(|_| Err(timeout_error("no connection within connectTimeoutMs"))) {
            Ok(open) => self.check_server(open).await,
            Err(err) => Err(Failure::Unreachable(Arc::new(err))),
        };
        match checked {
            Ok(open) => {
                let connection = open.connection.clone();
                current.generation += 1;
                current.connection = Some(open);
                current.last_failure = None;
                self.set_connected(lane, true);
                Ok((current.generation, connection))
            }
            Err(failure) => {
                current.last_failure = Some((Instant::now(), failure.clone()));
                self.set_connected(lane, false);
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

    /// Refuses a server older than [`MIN_SERVER_MAJOR`]: its scripts would
    /// replicate verbatim, and the acquire script reads `TIME` before it
    /// writes. A server that hides `INFO` (a renamed command) is taken as is.
    /// With Sentinel the node must also say it is the primary: a sentinel
    /// that has not seen a failover yet may name the old one.
    async fn check_server(&self, mut open: Open) -> Result<Open, Failure> {
        let info = self.info(&mut open.connection, "server").await?;
        if let Some((version, major)) = info.as_deref().and_then(server_version) {
            if major < MIN_SERVER_MAJOR {
                return Err(Failure::Unmet(Arc::new(RedisError::from(io::Error::new(
                    io::ErrorKind::Unsupported,
                    format!("the server runs Redis {version}; dokebi-lock needs Redis {MIN_SERVER_MAJOR}.0 or later (scripts with effects replication)"),
                )))));
            }
        }
        if self.topology.needs_primary() {
            let replication = self.info(&mut open.connection, "replication").await?;
            if replication.as_deref().is_some_and(|info| !info.lines().any(|line| line.trim() == "role:master")) {
                return Err(Failure::Unreachable(Arc::new(RedisError::from(io::Error::new(
                    io::ErrorKind::NotConnected,
                    "the node the sentinels named is not a primary (yet)",
                )))));
            }
        }
        Ok(open)
    }

    /// One `INFO` section; `None` when the server refuses `INFO`.
    async fn info(&self, connection: &mut NodeConnection, section: &str) -> Result<Option<String>, Failure> {
        let mut info = redis::cmd("INFO");
        info.arg(section);
        match tokio::time::timeout(self.command_timeout, info.query_async::<String>(connection)).await {
            Err(_) => Err(Failure::Unreachable(Arc::new(timeout_error("no answer to INFO within commandTimeoutMs")))),
            Ok(Err(err)) if err.is_io_error() || err.is_connection_dropped() || err.is_timeout() => {
                Err(Failure::Unreachable(Arc::new(err)))
            }
            Ok(Err(_)) => Ok(None),
            Ok(Ok(info)) => Ok(Some(info)),
        }
    }

    /// Connects a command connection for `lane` and starts its reader: on the
    /// runtime, or in `lane`'s host loop, which then drives the socket. The
    /// socket is connected on the runtime (name resolution may block), then
    /// handed over. Over TLS redis-rs connects and drives it itself.
    async fn open(&self, lane: &Lane) -> RedisResult<Open> {
        let ended = Arc::new(AtomicBool::new(false));
        if let Some(cluster) = self.topology.cluster_connection().await? {
            return Ok(Open { connection: NodeConnection::Cluster(cluster), ended });
        }
        let info = self.topology.node(self.connect_timeout).await?.expect("a topology without a cluster has a node");
        let socket = match info.addr() {
            ConnectionAddr::Tcp(name, port) => {
                let stream = tokio::net::TcpStream::connect((name.as_str(), *port)).await?;
                stream.set_nodelay(true)?;
                redis::io::tcp::socket2::SockRef::from(&stream).set_tcp_keepalive(&keepalive())?;
                Socket::Tcp(stream.into_std()?)
            }
            #[cfg(unix)]
            ConnectionAddr::Unix(path) => Socket::Unix(tokio::net::UnixStream::connect(path).await?.into_std()?),
            _ => {
                let client = Client::open(with_tcp_settings(info))?;
                let connection = client.get_multiplexed_async_connection_with_config(&self.config()).await?;
                return Ok(Open { connection: NodeConnection::Node(connection), ended });
            }
        };
        let settings = info.redis_settings();
        let connection = match &lane.host {
            Some(host) => {
                let stream = HostStream::new(host.as_ref(), socket)?;
                let (connection, reader) = MultiplexedConnection::new_with_config(settings, stream, self.config()).await?;
                host.spawn(Box::pin(InRuntime::new(Handle::current(), flag_end(reader, ended.clone()))));
                connection
            }
            None => match socket {
                Socket::Tcp(stream) => self.on_runtime(settings, tokio::net::TcpStream::from_std(stream)?, &ended).await?,
                #[cfg(unix)]
                Socket::Unix(stream) => self.on_runtime(settings, tokio::net::UnixStream::from_std(stream)?, &ended).await?,
            },
        };
        Ok(Open { connection: NodeConnection::Node(connection), ended })
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

    /// Drops `lane`'s connection of `generation` so the next command reconnects.
    async fn invalidate(&self, lane: &Lane, generation: u64) {
        let mut current = lane.current.lock().await;
        if current.generation == generation {
            current.connection = None;
            self.set_connected(lane, false);
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

/// `TCP_NODELAY`, so a small command is never held back waiting for the ACK
/// of the previous one (Nagle's algorithm costs a hand-off tens of ms), and
/// keepalive probes, so a peer that vanished without closing (the pub/sub
/// connection is otherwise silent) is noticed within about 30 s.
fn with_tcp_settings(info: ConnectionInfo) -> ConnectionInfo {
    info.set_tcp_settings(TcpSettings::default().set_nodelay(true).set_keepalive(keepalive()))
}

fn keepalive() -> TcpKeepalive {
    TcpKeepalive::new().with_time(Duration::from_secs(15)).with_interval(Duration::from_secs(5)).with_retries(3)
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
    matches!(
        err.kind(),
        ErrorKind::Server(
            ServerErrorKind::Moved
                | ServerErrorKind::Ask
                | ServerErrorKind::TryAgain
                | ServerErrorKind::ClusterDown
                | ServerErrorKind::BusyLoading
                | ServerErrorKind::ReadOnly
                | ServerErrorKind::MasterDown
        )
    )
}

/// The failure of a retry whose first attempt was lost with its connection:
/// that attempt may have run, so whatever the retry met (a refused
/// connection, `LOADING`, `READONLY`) the outcome is unknown.
fn after_lost_attempt(failure: Failure, first_attempt_lost: Option<Cause>) -> Failure {
    match (failure, first_attempt_lost) {
        (Failure::Unknown(cause), _) => Failure::Unknown(cause),
        (_, Some(lost)) => Failure::Unknown(lost),
        (failure, None) => failure,
    }
}

fn timeout_error(message: &'static str) -> RedisError {
    RedisError::from(io::Error::new(io::ErrorKind::TimedOut, message))
}

/// A script argument (lets `eval` take arguments of mixed types).
pub(crate) trait ToRedisArgsRef: Sync {
    fn push(&self, invocation: &mut redis::ScriptInvocation<'_>);
}

impl<T: ToRedisArgs + Sync> ToRedisArgsRef for T {
    fn push(&self, invocation: &mut redis::ScriptInvocation<'_>) {
        invocation.arg(self);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_server_version_is_read_from_info() {
        let info = "# Server\r\nredis_version:4.0.14\r\nredis_git_sha1:00000000\r\n";
        assert_eq!(server_version(info), Some(("4.0.14", 4)));
        assert_eq!(server_version("redis_version:7.2.4\r\n"), Some(("7.2.4", 7)));
        assert_eq!(server_version("# Server\r\n"), None);
    }
}

//! Where a connection finds Redis: one server, the primary that Redis
//! Sentinel names, or a Redis Cluster.
//!
//! - A server is one address.
//! - With Sentinel the primary is asked of the sentinels (in turn, the last
//!   one that answered first, the next one also asked once the one before
//!   has taken its share of `connectTimeoutMs`) every time a command
//!   connection is made, and
//!   the node that answers must say it is a primary. A failover is thus
//!   followed by the next connection: the old one ends when the old primary
//!   dies, or answers `READONLY` once demoted, and either drops it.
//! - A cluster's commands go to the primary of their keys' slot (the key
//!   layout puts a user key's names in one slot), found in the slot map of
//!   [`super::cluster`]; [`super::connection`] keeps a connection per
//!   primary and follows `MOVED` and `ASK`, since a redirected command did
//!   not run.

use std::sync::Arc;
use std::time::Duration;

use futures_util::stream::{FuturesUnordered, StreamExt};
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, ConnectionAddr, ConnectionInfo, IntoConnectionInfo, RedisConnectionInfo, RedisResult};

use super::cluster::{Cluster, NodeName};
use super::connection::io_error;
use super::link::Links;
use super::refusal::{Login, Refusal};
use crate::error::{ErrorCode, LockError, Result};
use crate::options::{Endpoint, SentinelOptions};
use crate::store::reach::{no_sign_of_down, Reach};

/// Where a connection finds Redis.
pub(crate) enum Topology {
    Server(ConnectionInfo),
    Sentinel(Sentinel),
    /// Boxed: its slot map is large, and one topology per connection is
    /// all there ever is.
    Cluster(Box<Cluster>),
}

pub(crate) struct Sentinel {
    sentinels: Vec<ConnectionInfo>,
    primary_name: String,
    /// Credentials and database of the primary.
    settings: RedisConnectionInfo,
    tls: bool,
    /// The sentinel that answered last: asked first next time.
    last_good: std::sync::atomic::AtomicUsize,
    /// How links to the sentinels are made.
    links: Arc<Links>,
    /// The connection's name, for the options a refusal names.
    connection: String,
}

/// A command connection to one node: a server, Sentinel's primary, or a
/// cluster's primary.
pub(crate) type NodeConnection = MultiplexedConnection;

impl Topology {
    /// Checks the endpoint's URLs; opens no socket. `name` is the
    /// connection's, for error paths; `links` makes the links to sentinels.
    pub fn new(name: &str, endpoint: &Endpoint, links: Arc<Links>) -> Result<Topology> {
        match endpoint {
            Endpoint::Server { url } => Ok(Topology::Server(parse(url, &format!("connections.{name}.url"))?)),
            Endpoint::Sentinel(options) => Ok(Topology::Sentinel(Sentinel::new(name, options, links)?)),
            Endpoint::Cluster { nodes } => {
                let path = format!("connections.{name}.cluster.nodes");
                let seeds = nodes.iter().enumerate().map(|(i, url)| parse(url, &format!("{path}.{i}"))).collect::<Result<Vec<_>>>()?;
                Ok(Topology::Cluster(Box::new(Cluster::new(seeds))))
            }
        }
    }

    /// True when commands go to nodes whose sockets the driver may open
    /// itself (plain TCP or a unix socket): a host may then drive them.
    pub fn has_plain_nodes(&self) -> bool {
        match self {
            Topology::Server(info) => matches!(info.addr(), ConnectionAddr::Tcp(..) | ConnectionAddr::Unix(_)),
            Topology::Sentinel(sentinel) => !sentinel.tls,
            Topology::Cluster(cluster) => cluster.is_plain(),
        }
    }

    /// The cluster's slot map, for [`Topology::Cluster`].
    pub fn cluster(&self) -> Option<&Cluster> {
        match self {
            Topology::Cluster(cluster) => Some(cluster),
            _ => None,
        }
    }

    /// Where a command connection goes: the server, the primary the
    /// sentinels name now, or the cluster node `node` (`None`: the first
    /// seed).
    pub async fn node(&self, node: Option<&NodeName>, timeout: Duration, reach: &Reach) -> RedisResult<ConnectionInfo> {
        match self {
            Topology::Server(info) => Ok(info.clone()),
            Topology::Sentinel(sentinel) => sentinel.primary(timeout, reach).await,
            Topology::Cluster(cluster) => Ok(node.map_or_else(|| cluster.seeds()[0].clone(), |node| cluster.connection_info(node))),
        }
    }

    /// How many release subscriptions to keep: one, or in a cluster one
    /// per seed node (see [`super::subscriptions`]).
    pub fn subscribers(&self) -> usize {
        match self {
            Topology::Cluster(cluster) => cluster.seeds().len(),
            _ => 1,
        }
    }

    /// Where subscription `index` to release notifications goes: the
    /// server, the primary, or the `index`-th seed node of a cluster, with
    /// the first seed's credentials and TLS, as every command to a node.
    pub async fn subscriber(&self, index: usize, timeout: Duration) -> RedisResult<ConnectionInfo> {
        match self {
            Topology::Server(info) => Ok(info.clone()),
            Topology::Sentinel(sentinel) => sentinel.primary(timeout, &Reach::default()).await,
            Topology::Cluster(cluster) => Ok(cluster.seed(index)),
        }
    }

    /// In a cluster, the seed node that is `key`'s primary, when the slot
    /// map says so.
    pub fn seed_serving(&self, key: &str) -> Option<usize> {
        match self {
            Topology::Cluster(cluster) => cluster.seed_serving(key),
            _ => None,
        }
    }

    /// With Sentinel: the sentinel to listen to for failovers on the
    /// `attempt`-th try (each in turn), and the primary's name.
    pub fn sentinel(&self, attempt: usize) -> Option<(ConnectionInfo, &str)> {
        match self {
            Topology::Sentinel(sentinel) => {
                Some((sentinel.sentinels[attempt % sentinel.sentinels.len()].clone(), sentinel.primary_name.as_str()))
            }
            _ => None,
        }
    }

    /// The option that sets the credentials of the nodes commands go to
    /// (connection `name`'s), for a refusal's fix.
    pub fn credentials_option(&self, name: &str) -> String {
        match self {
            Topology::Server(_) => format!("connections.{name}.url (redis://user:password@host:port/db)"),
            Topology::Sentinel(_) => format!("connections.{name}.sentinel (username, password)"),
            Topology::Cluster(_) => {
                format!("connections.{name}.cluster.nodes.0 (redis://user:password@host:port; they apply to every node)")
            }
        }
    }

    /// True when the node reached must report itself a primary.
    pub fn needs_primary(&self) -> bool {
        matches!(self, Topology::Sentinel(_))
    }
}

impl Sentinel {
    fn new(name: &str, options: &SentinelOptions, links: Arc<Links>) -> Result<Sentinel> {
        let path = format!("connections.{name}.sentinel.nodes");
        let sentinels = options.nodes.iter().enumerate().map(|(i, url)| parse(url, &format!("{path}.{i}"))).collect::<Result<Vec<_>>>()?;
        let mut settings = RedisConnectionInfo::default().set_db(options.db.into());
        if let Some(username) = &options.username {
            settings = settings.set_username(username);
        }
        if let Some(password) = &options.password {
            settings = settings.set_password(password);
        }
        Ok(Sentinel {
            sentinels,
            primary_name: options.primary_name.clone(),
            settings,
            tls: options.tls,
            last_good: std::sync::atomic::AtomicUsize::new(0),
            links,
            connection: name.to_owned(),
        })
    }

    /// Asks the sentinels where the primary is, the last one that answered
    /// first, within `timeout` (`connectTimeoutMs`) in all. One that has not
    /// answered within its share of `timeout` (a hung sentinel, a socket
    /// that takes connections and says nothing) is left to answer while the
    /// next one is asked too: one sentinel never holds up the others.
    ///
    /// When none names the primary, the error is the most telling of the
    /// sentinels' ([`telling`]), not the last: one sentinel that was up (it
    /// refused this process, answered, or its socket error is no sign it is
    /// down) is never hidden by another that is down or stalled, nor by the
    /// timeout, or the lookup would read as unreachable and a policy would
    /// move keys a primary that is up may hold (review R28).
    ///
    /// `reach` hears of the first sentinel found up (its socket came up,
    /// or its failure is more telling than down), at once: the
    /// member is up, so neither the connect's own timeout, which may fire
    /// before this lookup's (review R29), nor a refused connect to the
    /// primary it names reads as unreachable. A sentinel whose config names
    /// a primary that is gone (restored from before a failover) may be the
    /// one asked while another names the primary that serves (review R29);
    /// while the sentinels promote a replica no key moves either.
    async fn primary(&self, timeout: Duration, reach: &Reach) -> RedisResult<ConnectionInfo> {
        use std::sync::atomic::Ordering;
        let count = self.sentinels.len();
        let first = self.last_good.load(Ordering::Relaxed);
        let mut order = (0..count).map(|i| (first + i) % count).peekable();
        let share = timeout / count.max(1) as u32;
        let mut asking = FuturesUnordered::new();
        let mut kept: Option<redis::RedisError> = None;
        let all = tokio::time::sleep(timeout);
        tokio::pin!(all);
        loop {
            if asking.is_empty() {
                let Some(index) = order.next() else { break };
                asking.push(self.ask_indexed(index, reach));
            }
            let (index, answer) = tokio::select! {
                Some(answered) = asking.next() => answered,
                _ = tokio::time::sleep(share), if order.peek().is_some() => {
                    asking.extend(order.next().map(|index| self.ask_indexed(index, reach)));
                    continue;
                }
                _ = &mut all => {
                    if kept.as_ref().is_none_or(|kept| telling(kept) == Telling::Down) {
                        kept = Some(no_primary("no sentinel answered within connectTimeoutMs"));
                    }
                    break;
                }
            };
            match answer.map_err(Some).and_then(|named| named.ok_or(None)) {
                Ok((host, port)) => {
                    reach.socket_up();
                    self.last_good.store(index, Ordering::Relaxed);
                    let addr = if self.tls {
                        ConnectionAddr::TcpTls { host, port, insecure: false, tls_params: None }
                    } else {
                        ConnectionAddr::Tcp(host, port)
                    };
                    return Ok(self.sentinels[index].clone().set_addr(addr).set_redis_settings(self.settings.clone()));
                }
                Err(err) => {
                    let err = match err {
                        Some(err) => self.explain(index, err),
                        None => self.unknown_primary(),
                    };
                    if telling(&err) > Telling::Down {
                        reach.socket_up();
                    }
                    if kept.as_ref().is_none_or(|kept| telling(&err) >= telling(kept)) {
                        kept = Some(err);
                    }
                }
            }
        }
        Err(kept.unwrap_or_else(|| no_primary("no sentinel is configured")))
    }

    /// A sentinel answered that it monitors no primary of the configured
    /// name: it is up (a primary it forgot, or one another name monitors,
    /// may be serving), so a refusal with its fix, never unreachable.
    fn unknown_primary(&self) -> redis::RedisError {
        let message = format!("the sentinels know no primary named {}", self.primary_name);
        Refusal {
            message: message.clone(),
            fix: format!("set connections.{}.sentinel.primaryName to the name in the sentinels' `sentinel monitor` line", self.connection),
            cause: Arc::new(std::io::Error::other(message)),
        }
        .into_redis()
    }

    /// Sentinel `index`'s answer, with its index.
    async fn ask_indexed(&self, index: usize, reach: &Reach) -> (usize, RedisResult<Option<(String, u16)>>) {
        (index, self.ask(&self.sentinels[index], reach).await)
    }

    /// A sentinel that takes the socket is up, whether or not it answers
    /// (frozen, swapping: review R16), and so is the member.
    async fn ask(&self, sentinel: &ConnectionInfo, reach: &Reach) -> RedisResult<Option<(String, u16)>> {
        let config = AsyncConnectionConfig::new().set_response_timeout(None);
        let mut connection: MultiplexedConnection = self.links.command(sentinel, config, reach).await?;
        redis::cmd("SENTINEL").arg("get-master-addr-by-name").arg(&self.primary_name).query_async(&mut connection).await
    }

    /// `err` of sentinel `index` as the refusal it may be: its own
    /// credentials (those of its URL), or its TLS certificate.
    fn explain(&self, index: usize, err: redis::RedisError) -> redis::RedisError {
        let sentinel = &self.sentinels[index];
        let err = self.links.explain(sentinel.addr(), err);
        if Refusal::find(&err).is_some() {
            return err;
        }
        let option = format!("connections.{}.sentinel.nodes.{index} (the sentinel's own user and password, in its URL)", self.connection);
        match Login::of(sentinel, "the sentinel", option).refusal(&err) {
            Some(refusal) => refusal.into_redis(),
            None => err,
        }
    }
}

fn parse(url: &str, path: &str) -> Result<ConnectionInfo> {
    url.into_connection_info().map_err(|err| invalid_url(path, "not a usable Redis URL").with_cause(err))
}

fn invalid_url(path: &str, message: &str) -> LockError {
    LockError::new(ErrorCode::InvalidOptions, format!("{path}: {message}"))
        .with_details(serde_json::json!({ "issues": [{ "path": path, "message": message }] }))
}

fn no_primary(message: &str) -> redis::RedisError {
    redis::RedisError::from(std::io::Error::new(std::io::ErrorKind::NotFound, message.to_owned()))
}

/// What a sentinel's failure says of it, least first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Telling {
    /// Its socket never came up, or nothing came back: it may be down.
    Down,
    /// A socket error that is no sign it is down ([`no_sign_of_down`]).
    Up,
    /// It answered an error reply.
    Answered,
    /// It refused this process (credentials, a certificate, no primary of
    /// the name): what to fix.
    Refused,
}

fn telling(err: &redis::RedisError) -> Telling {
    if Refusal::find(err).is_some() {
        Telling::Refused
    } else if err.code().is_some() {
        Telling::Answered
    } else if io_error(err).is_some_and(no_sign_of_down) {
        Telling::Up
    } else {
        Telling::Down
    }
}

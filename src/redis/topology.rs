//! Where a connection finds Redis: one server, the primary that Redis
//! Sentinel names, or a Redis Cluster.
//!
//! - A server is one address.
//! - With Sentinel the primary is asked of the sentinels (in turn, the last
//!   one that answered first) every time a command connection is made, and
//!   the node that answers must say it is a primary. A failover is thus
//!   followed by the next connection: the old one ends when the old primary
//!   dies, or answers `READONLY` once demoted, and either drops it.
//! - A cluster is reached through redis-rs' cluster connection, which routes
//!   each script to the primary of its keys' slot (the key layout puts a
//!   user key's names in one slot) and follows topology changes. Its own
//!   retries are off: a command that may have run is never sent twice behind
//!   our back; `MOVED` and `ASK` are retried by [`super::connection`], since
//!   a redirected command did not run.

use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::cluster::{ClusterClient, ClusterClientBuilder};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use redis::{
    AsyncConnectionConfig, Client, Cmd, ConnectionAddr, ConnectionInfo, IntoConnectionInfo, Pipeline, RedisConnectionInfo, RedisFuture,
    RedisResult, Value,
};

use crate::error::{ErrorCode, LockError, Result};
use crate::options::{Endpoint, SentinelOptions};

/// Where a connection finds Redis.
pub(crate) enum Topology {
    Server(ConnectionInfo),
    Sentinel(Sentinel),
    /// Boxed: its client is large, and one topology per connection is
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
}

pub(crate) struct Cluster {
    seeds: Vec<ConnectionInfo>,
    client: ClusterClient,
}

/// A command connection to a server (or primary), or to a cluster.
#[derive(Clone)]
pub(crate) enum NodeConnection {
    Node(MultiplexedConnection),
    Cluster(ClusterConnection),
}

impl redis::aio::ConnectionLike for NodeConnection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            NodeConnection::Node(connection) => connection.req_packed_command(cmd),
            NodeConnection::Cluster(connection) => connection.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(&'a mut self, pipeline: &'a Pipeline, offset: usize, count: usize) -> RedisFuture<'a, Vec<Value>> {
        match self {
            NodeConnection::Node(connection) => connection.req_packed_commands(pipeline, offset, count),
            NodeConnection::Cluster(connection) => connection.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            NodeConnection::Node(connection) => connection.get_db(),
            NodeConnection::Cluster(connection) => connection.get_db(),
        }
    }
}

impl NodeConnection {
    /// Sends `command` to the node that holds `key` (in a cluster, the
    /// primary of its slot; else the one node): `WAIT` after a script must
    /// go where the script ran.
    pub async fn query_at<T: redis::FromRedisValue>(&mut self, key: &str, command: &Cmd) -> RedisResult<T> {
        let value = match self {
            NodeConnection::Node(connection) => command.query_async::<Value>(connection).await?,
            NodeConnection::Cluster(connection) => {
                let route = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(Route::with_key(key, SlotAddr::Master)));
                connection.route_command(command.clone(), route).await?
            }
        };
        redis::from_redis_value(value).map_err(Into::into)
    }
}

impl Topology {
    /// Checks the endpoint's URLs; opens no socket. `name` is the
    /// connection's, for error paths.
    pub fn new(name: &str, endpoint: &Endpoint, connect_timeout: Duration) -> Result<Topology> {
        match endpoint {
            Endpoint::Server { url } => Ok(Topology::Server(parse(url, &format!("connections.{name}.url"))?)),
            Endpoint::Sentinel(options) => Ok(Topology::Sentinel(Sentinel::new(name, options)?)),
            Endpoint::Cluster { nodes } => {
                let path = format!("connections.{name}.cluster.nodes");
                let seeds = nodes.iter().enumerate().map(|(i, url)| parse(url, &format!("{path}.{i}"))).collect::<Result<Vec<_>>>()?;
                let client = ClusterClientBuilder::new(seeds.clone())
                    // Our own loop retries redirects (the command did not
                    // run); everything else is the caller's to classify.
                    .retries(0)
                    .connection_timeout(connect_timeout)
                    .build()
                    .map_err(|err| invalid_url(&path, "not a usable list of cluster nodes").with_cause(err))?;
                Ok(Topology::Cluster(Box::new(Cluster { seeds, client })))
            }
        }
    }

    /// True when commands go to one node whose socket the driver may open
    /// itself (plain TCP or a unix socket): a host may then drive it.
    pub fn has_plain_node(&self) -> bool {
        match self {
            Topology::Server(info) => matches!(info.addr(), ConnectionAddr::Tcp(..) | ConnectionAddr::Unix(_)),
            Topology::Sentinel(sentinel) => !sentinel.tls,
            Topology::Cluster(_) => false,
        }
    }

    /// The node that takes commands now: the server, or the primary the
    /// sentinels name. `None` for a cluster, which routes by itself.
    pub async fn node(&self, timeout: Duration) -> RedisResult<Option<ConnectionInfo>> {
        match self {
            Topology::Server(info) => Ok(Some(info.clone())),
            Topology::Sentinel(sentinel) => sentinel.primary(timeout).await.map(Some),
            Topology::Cluster(_) => Ok(None),
        }
    }

    /// Connects to the cluster (only for [`Topology::Cluster`]).
    pub async fn cluster_connection(&self) -> RedisResult<Option<ClusterConnection>> {
        match self {
            Topology::Cluster(cluster) => cluster.client.get_async_connection().await.map(Some),
            _ => Ok(None),
        }
    }

    /// Where release notifications are subscribed, in the order to try:
    /// the primary, or (in a cluster, where a `PUBLISH` reaches every node)
    /// each seed node in turn, starting with the `attempt`-th.
    pub async fn subscriber(&self, attempt: usize, timeout: Duration) -> RedisResult<ConnectionInfo> {
        match self {
            Topology::Server(info) => Ok(info.clone()),
            Topology::Sentinel(sentinel) => sentinel.primary(timeout).await,
            Topology::Cluster(cluster) => Ok(cluster.seeds[attempt % cluster.seeds.len()].clone()),
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

    /// True when the node reached must report itself a primary.
    pub fn needs_primary(&self) -> bool {
        matches!(self, Topology::Sentinel(_))
    }
}

impl Sentinel {
    fn new(name: &str, options: &SentinelOptions) -> Result<Sentinel> {
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
        })
    }

    /// Asks the sentinels, in turn, where the primary is; each within
    /// `timeout`.
    async fn primary(&self, timeout: Duration) -> RedisResult<ConnectionInfo> {
        use std::sync::atomic::Ordering;
        let first = self.last_good.load(Ordering::Relaxed);
        let mut last_error = None;
        for i in 0..self.sentinels.len() {
            let index = (first + i) % self.sentinels.len();
            match tokio::time::timeout(timeout, self.ask(&self.sentinels[index])).await {
                Ok(Ok(Some((host, port)))) => {
                    self.last_good.store(index, Ordering::Relaxed);
                    let addr = if self.tls {
                        ConnectionAddr::TcpTls { host, port, insecure: false, tls_params: None }
                    } else {
                        ConnectionAddr::Tcp(host, port)
                    };
                    return Ok(self.sentinels[index].clone().set_addr(addr).set_redis_settings(self.settings.clone()));
                }
                Ok(Ok(None)) => last_error = Some(no_primary(&format!("the sentinels know no primary named {}", self.primary_name))),
                Ok(Err(err)) => last_error = Some(err),
                Err(_) => last_error = Some(no_primary("a sentinel did not answer within commandTimeoutMs")),
            }
        }
        Err(last_error.unwrap_or_else(|| no_primary("no sentinel is configured")))
    }

    async fn ask(&self, sentinel: &ConnectionInfo) -> RedisResult<Option<(String, u16)>> {
        let client = Client::open(sentinel.clone())?;
        let config = AsyncConnectionConfig::new().set_response_timeout(None);
        let mut connection = client.get_multiplexed_async_connection_with_config(&config).await?;
        redis::cmd("SENTINEL").arg("get-master-addr-by-name").arg(&self.primary_name).query_async(&mut connection).await
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

//! How the redis driver reaches Redis, knowing nothing of locks:
//! - `connection`: one shared, bounded, self-healing connection per
//!   `dokebi-redis.connections` entry, which classifies every failure once
//!   ([`crate::store::Failure`]); `subscriptions`: its pub/sub links;
//! - `topology`: where it finds Redis (a server, Sentinel, a cluster);
//!   `cluster`: a cluster's slot map, by which commands go to its primaries;
//!   `switches`: following a Sentinel failover the moment it happens;
//!   `listening`: a pub/sub connection whose server went silent ends;
//! - `link`: how every link to a node is opened (`addresses`: to the
//!   first of a name's addresses that takes a socket; `tcp`: nodelay and the
//!   keepalive the system takes; `tls`: the connection's own TLS), and
//!   `refusal`: a server that refused our credentials, or a certificate
//!   refused, told apart from an unreachable one.

use std::time::Duration;

pub(crate) mod addresses;
pub(crate) mod cluster;
pub(crate) mod connection;
pub(crate) mod link;
pub(crate) mod listening;
pub(crate) mod refusal;
pub(crate) mod subscriptions;
pub(crate) mod switches;
pub(crate) mod tcp;
pub(crate) mod tls;
pub(crate) mod topology;

/// The first pause before a lost subscription (or Sentinel watch) is made
/// again; it doubles up to [`RETRY_MAX`].
pub(crate) const RETRY_MIN: Duration = Duration::from_millis(50);
pub(crate) const RETRY_MAX: Duration = Duration::from_secs(1);

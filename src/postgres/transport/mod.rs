//! The postgres driver's connections, which know nothing of locks:
//! `url` (a connection URL and its libpq TLS settings), `tls` (rustls
//! under tokio-postgres), `connection` (a small pool of pipelined clients,
//! the bound on every statement, and the classification of every failure
//! into [`crate::store::Failure`]).

pub(crate) mod connection;
pub(crate) mod tls;
pub(crate) mod url;

use std::time::Duration;

/// The first and the longest wait before connecting the listener again.
pub(crate) const RETRY_MIN: Duration = Duration::from_millis(50);
pub(crate) const RETRY_MAX: Duration = Duration::from_secs(2);

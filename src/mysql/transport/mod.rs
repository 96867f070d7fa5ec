//! The mysql driver's connections, which know nothing of locks: `url` (a
//! connection URL and the MySQL client's TLS settings) and `connection` (a
//! small pool of connections, the bound on every statement, and the
//! classification of every failure into [`crate::store::Failure`]), and
//! `tls` (the second tries of a connection its TLS settings call for, and
//! the reading of a failed handshake).

pub(crate) mod connection;
pub(crate) mod tls;
pub(crate) mod url;

//! The mysql driver's connections, which know nothing of locks: `url` (a
//! connection URL and the MySQL client's TLS settings) and `connection` (a
//! small pool of connections, the bound on every statement, and the
//! classification of every failure into [`crate::store::Failure`]).

pub(crate) mod connection;
pub(crate) mod url;

//! How far a connect got, and the one rule that reads a failed connect as
//! [`Failure::Unreachable`], for every driver: only a connect that never
//! got its socket up (refused, no route, a name that does not resolve, a
//! timeout before the socket was up). The redis transport, which opens its
//! own sockets, tells [`Reach`] when one comes up; the PostgreSQL and MySQL
//! clients open theirs inside their libraries, so their drivers read the
//! rule off the error (PostgreSQL probes every address of the URL when the
//! error alone cannot tell: `postgres::transport::connection`), with the
//! limits docs/policy.md states.
//!
//! A policy moves a key on "unreachable" (`policy::router`), so a server
//! that may hold it must never read so: one that took the socket is up,
//! whatever it did then: answered an error and closed (Redis's
//! `maxclients` or protected mode), closed without a byte (Redis at
//! `maxclients` over TLS, which drops the connection before the
//! handshake: review R16), or did not answer in time (a script stalling
//! it). It may be serving another process that holds the key. A proxy
//! that takes the socket for a server that is down reads the same, so a
//! policy does not move past it (docs/policy.md).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::failure::Failure;
use crate::error::Cause;

/// How far one connect got; shared with what made it, so that it still
/// tells after the connect was cut by its timeout.
#[derive(Clone, Default)]
pub(crate) struct Reach(Arc<AtomicBool>);

impl Reach {
    /// The socket is connected.
    pub fn socket_up(&self) {
        self.0.store(true, Ordering::Release);
    }

    /// The failure of this connect, ended by `cause`; `lost`: the socket
    /// ended or failed (rather than, say, a timeout on it).
    pub fn failure(&self, cause: Cause, lost: bool) -> Failure {
        if !self.0.load(Ordering::Acquire) {
            Failure::Unreachable(cause)
        } else if lost {
            // The server took the socket, then closed it (with an error,
            // or without a byte).
            Failure::Refused(cause)
        } else {
            Failure::Unanswered(cause)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cause() -> Cause {
        Arc::new(std::io::Error::other("x"))
    }

    #[test]
    fn only_a_socket_never_up_is_unreachable() {
        let reach = Reach::default();
        assert!(matches!(reach.failure(cause(), false), Failure::Unreachable(_)));
        assert!(matches!(reach.failure(cause(), true), Failure::Unreachable(_)));
        reach.socket_up();
        assert!(matches!(reach.failure(cause(), true), Failure::Refused(_)));
        assert!(matches!(reach.failure(cause(), false), Failure::Unanswered(_)));
    }
}

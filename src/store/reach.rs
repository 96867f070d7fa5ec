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

#[cfg(feature = "redis")]
use std::sync::atomic::{AtomicBool, Ordering};
#[cfg(feature = "redis")]
use std::sync::Arc;

#[cfg(feature = "redis")]
use super::failure::Failure;
#[cfg(feature = "redis")]
use crate::error::Cause;

/// How far one connect got; shared with what made it, so that it still
/// tells after the connect was cut by its timeout.
#[cfg(feature = "redis")]
#[derive(Clone, Default)]
pub(crate) struct Reach(Arc<AtomicBool>);

#[cfg(feature = "redis")]
impl Reach {
    /// The socket is connected.
    pub fn socket_up(&self) {
        self.0.store(true, Ordering::Release);
    }

    /// Whether the socket came up (so far).
    pub fn is_up(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }

    /// The failure of this connect, ended by `cause`; `lost`: the socket
    /// ended or failed (rather than, say, a timeout on it).
    pub fn failure(&self, cause: Cause, lost: bool) -> Failure {
        if !self.is_up() {
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

/// True for a socket error that is no sign the server is down: one only a
/// socket that came up can give (reset or aborted after the handshake, a
/// RST to the SYN being "refused"; closed by the peer: review R22), or a
/// Unix socket whose listen backlog is full (`EAGAIN`: a server listens
/// there, stalled or slow to accept: review R24), or this host out of
/// something a socket needs (memory, descriptors of the process or the
/// system, buffers, local ports: review R25), or this process refused by
/// the host's permissions (a Unix socket's file mode, a security policy:
/// `EACCES`, `EPERM`, checked before any listener is looked for: review
/// R26), which says nothing of the server.
pub(crate) fn no_sign_of_down(err: &std::io::Error) -> bool {
    use std::io::ErrorKind;
    matches!(
        err.kind(),
        ErrorKind::ConnectionReset
            | ErrorKind::ConnectionAborted
            | ErrorKind::UnexpectedEof
            | ErrorKind::BrokenPipe
            | ErrorKind::WouldBlock
            | ErrorKind::OutOfMemory
            | ErrorKind::AddrNotAvailable
            | ErrorKind::PermissionDenied
    ) || err.raw_os_error().is_some_and(|code| OUT_OF_RESOURCES.contains(&code))
}

/// The error numbers of a host out of descriptors or buffers, which
/// `io::ErrorKind` does not name: `EMFILE`, `ENFILE` and `ENOBUFS` (Winsock's
/// `WSAEMFILE` and `WSAENOBUFS`).
#[cfg(target_os = "linux")]
const OUT_OF_RESOURCES: &[i32] = &[24, 23, 105];
#[cfg(any(target_os = "macos", target_os = "ios", target_os = "freebsd", target_os = "openbsd", target_os = "netbsd"))]
const OUT_OF_RESOURCES: &[i32] = &[24, 23, 55];
#[cfg(windows)]
const OUT_OF_RESOURCES: &[i32] = &[10024, 10055];
#[cfg(not(any(
    target_os = "linux",
    target_os = "macos",
    target_os = "ios",
    target_os = "freebsd",
    target_os = "openbsd",
    target_os = "netbsd",
    windows
)))]
const OUT_OF_RESOURCES: &[i32] = &[];

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(feature = "redis")]
    fn cause() -> Cause {
        Arc::new(std::io::Error::other("x"))
    }

    #[cfg(feature = "redis")]
    #[test]
    fn only_a_socket_never_up_is_unreachable() {
        let reach = Reach::default();
        assert!(matches!(reach.failure(cause(), false), Failure::Unreachable(_)));
        assert!(matches!(reach.failure(cause(), true), Failure::Unreachable(_)));
        reach.socket_up();
        assert!(matches!(reach.failure(cause(), true), Failure::Refused(_)));
        assert!(matches!(reach.failure(cause(), false), Failure::Unanswered(_)));
    }

    #[test]
    fn a_full_backlog_or_a_reset_is_no_sign_of_down() {
        use std::io::{Error, ErrorKind};
        for kind in [
            ErrorKind::WouldBlock,
            ErrorKind::ConnectionReset,
            ErrorKind::UnexpectedEof,
            ErrorKind::AddrNotAvailable,
            ErrorKind::PermissionDenied,
        ] {
            assert!(no_sign_of_down(&Error::from(kind)), "{kind:?}");
        }
        #[cfg(target_os = "linux")]
        for (errno, what) in [(24, "EMFILE"), (23, "ENFILE"), (105, "ENOBUFS")] {
            assert!(no_sign_of_down(&Error::from_raw_os_error(errno)), "{what}");
        }
        for kind in [ErrorKind::ConnectionRefused, ErrorKind::TimedOut, ErrorKind::NotFound, ErrorKind::HostUnreachable] {
            assert!(!no_sign_of_down(&Error::from(kind)), "{kind:?}");
        }
    }
}

//! How far a connect got, and the one rule that reads a failed connect as
//! [`Failure::Unreachable`], for every driver: only a connect that never
//! got its socket up (refused, no route, a name that does not resolve, a
//! timeout before the socket was up), or whose socket ended before the
//! server sent a byte (reset or closed by a proxy whose server is down).
//!
//! A policy moves a key on "unreachable" (`policy::router`), so a server
//! that may hold it must never read so: one that answered anything (an
//! error at connect such as Redis's `maxclients` or protected mode, then
//! the socket closed) or took the socket and did not answer in time (a
//! script stalling it) is up, and may be serving another process that
//! holds the key.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::failure::Failure;
use crate::error::Cause;

/// How far one connect got; shared with the stream it made, so that it
/// still tells after the connect was cut by its timeout.
#[derive(Clone, Default)]
pub(crate) struct Reach(Arc<Steps>);

#[derive(Default)]
struct Steps {
    socket_up: AtomicBool,
    heard: AtomicBool,
}

impl Reach {
    /// The socket is connected.
    pub fn socket_up(&self) {
        self.0.socket_up.store(true, Ordering::Release);
    }

    /// The server answered (a TLS handshake, say): its socket was up.
    pub fn answered(&self) {
        self.socket_up();
        self.0.heard.store(true, Ordering::Release);
    }

    /// `stream`, just connected, with its first byte from the server noted
    /// here.
    pub fn heard_through<S>(&self, stream: S) -> Heard<S> {
        self.socket_up();
        Heard { stream, reach: self.clone() }
    }

    /// The failure of this connect, ended by `cause`; `lost`: the socket
    /// ended or failed (rather than, say, a timeout on it).
    pub fn failure(&self, cause: Cause, lost: bool) -> Failure {
        let socket_up = self.0.socket_up.load(Ordering::Acquire);
        let heard = self.0.heard.load(Ordering::Acquire);
        if !socket_up || (lost && !heard) {
            Failure::Unreachable(cause)
        } else if lost {
            // The server answered (an error), then closed the socket.
            Failure::Refused(cause)
        } else {
            Failure::Unanswered(cause)
        }
    }
}

/// A connected stream that notes in its [`Reach`] when the server sends
/// its first byte.
pub(crate) struct Heard<S> {
    stream: S,
    reach: Reach,
}

impl<S: AsyncRead + Unpin> AsyncRead for Heard<S> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.stream).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.reach.0.heard.store(true, Ordering::Release);
        }
        polled
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Heard<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }

    fn poll_write_vectored(mut self: Pin<&mut Self>, cx: &mut Context<'_>, bufs: &[io::IoSlice<'_>]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cause() -> Cause {
        Arc::new(io::Error::other("x"))
    }

    #[test]
    fn only_a_socket_never_up_or_lost_before_a_byte_is_unreachable() {
        let reach = Reach::default();
        assert!(matches!(reach.failure(cause(), false), Failure::Unreachable(_)));
        reach.socket_up();
        assert!(matches!(reach.failure(cause(), true), Failure::Unreachable(_)));
        assert!(matches!(reach.failure(cause(), false), Failure::Unanswered(_)));
        reach.answered();
        assert!(matches!(reach.failure(cause(), true), Failure::Refused(_)));
        assert!(matches!(reach.failure(cause(), false), Failure::Unanswered(_)));
    }
}

//! The host lane's socket (the redis driver's): a connected socket whose
//! readiness comes from the host's loop.

use std::io::{self, Read, Write};
use std::net::TcpStream;
#[cfg(unix)]
use std::os::fd::AsRawFd;
#[cfg(unix)]
use std::os::unix::net::UnixStream;
#[cfg(windows)]
use std::os::windows::io::AsRawSocket;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::{Host, RawSocket, Watch};

/// A connected socket of the host lane.
pub(crate) enum Socket {
    Tcp(TcpStream),
    #[cfg(unix)]
    Unix(UnixStream),
}

impl Socket {
    fn raw(&self) -> RawSocket {
        match self {
            #[cfg(unix)]
            Socket::Tcp(s) => s.as_raw_fd(),
            #[cfg(windows)]
            Socket::Tcp(s) => s.as_raw_socket(),
            #[cfg(unix)]
            Socket::Unix(s) => s.as_raw_fd(),
        }
    }

    fn read(&self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Socket::Tcp(s) => (&*s).read(buf),
            #[cfg(unix)]
            Socket::Unix(s) => (&*s).read(buf),
        }
    }

    fn write(&self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Socket::Tcp(s) => (&*s).write(buf),
            #[cfg(unix)]
            Socket::Unix(s) => (&*s).write(buf),
        }
    }

    fn shutdown(&self) -> io::Result<()> {
        match self {
            Socket::Tcp(s) => s.shutdown(std::net::Shutdown::Write),
            #[cfg(unix)]
            Socket::Unix(s) => s.shutdown(std::net::Shutdown::Write),
        }
    }
}

/// A socket whose readiness comes from the host's loop: the stream the
/// host lane's command connection runs on.
pub(crate) struct HostStream {
    // Declared first so that it is dropped first: the host stops watching
    // before the socket is closed.
    watch: Box<dyn Watch>,
    socket: Socket,
}

// SAFETY: redis-rs asks for a `Send` stream, but a host stream is made,
// polled and dropped on the host's thread only: it is made in the driver's
// code that runs on that thread, it belongs to a connection reader that
// `Host::spawn` polls and drops there (the `unsafe trait Host`'s promise),
// and the connection's other users reach it only through that reader's
// channel.
#[allow(unsafe_code)]
unsafe impl Send for HostStream {}

impl HostStream {
    /// Wraps a connected socket; call on the host's thread.
    pub fn new(host: &dyn Host, socket: Socket) -> io::Result<HostStream> {
        match &socket {
            Socket::Tcp(s) => s.set_nonblocking(true)?,
            #[cfg(unix)]
            Socket::Unix(s) => s.set_nonblocking(true)?,
        }
        Ok(HostStream { watch: host.watch(socket.raw())?, socket })
    }
}

impl AsyncRead for HostStream {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        loop {
            ready!(self.watch.poll_readable(cx));
            let room = buf.remaining();
            match self.socket.read(buf.initialize_unfilled()) {
                Ok(n) => {
                    // A short read emptied the socket's queue: the loop
                    // reports new data (polling is level-triggered).
                    if 0 < n && n < room {
                        self.watch.clear_readable();
                    }
                    buf.advance(n);
                    return Poll::Ready(Ok(()));
                }
                Err(err) if err.kind() == io::ErrorKind::WouldBlock => self.watch.clear_readable(),
                Err(err) if err.kind() == io::ErrorKind::Interrupted => continue,
                Err(err) => return Poll::Ready(Err(err)),
            }
        }
    }
}

impl AsyncWrite for HostStream {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        loop {
            match self.socket.write(buf) {
                Ok(n) => return Poll::Ready(Ok(n)),
                Err(err) if err.kind() == io::ErrorKind::WouldBlock => {
                    self.watch.wake_when_writable(cx);
                    return Poll::Pending;
                }
                Err(err) if err.kind() == io::ErrorKind::Interrupted => continue,
                Err(err) => return Poll::Ready(Err(err)),
            }
        }
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(self.socket.shutdown())
    }
}

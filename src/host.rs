//! Running the driver's command traffic on a host's own event loop.
//!
//! By default the driver's work runs on its runtime thread and the caller
//! waits for the answer there: every command crosses threads twice (the
//! caller's thread to the runtime, the answer back), which on a small VM
//! costs more than the Redis round trip itself. A surface with an event
//! loop of its own (Node's libuv loop) can hand the driver a [`Host`]: then
//! the operations it starts run on its thread, over a command connection
//! whose socket its loop watches, and a command crosses no thread at all.
//!
//! Background work (renewals, cleanups after unknown outcomes, dropped
//! leases, notifications) stays on the runtime thread with a command
//! connection of its own, so that renewals go on while the host's thread is
//! busy running user code.
//!
//! TLS connections (`rediss://`) always use the runtime: the host lane
//! carries plain TCP and unix sockets only.

use std::future::Future;
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
use tokio::runtime::Handle;

/// A socket as the host's loop knows it: a file descriptor on Unix, a
/// `SOCKET` on Windows (libuv's `uv_os_sock_t`).
#[cfg(unix)]
pub type RawSocket = std::os::fd::RawFd;
/// A socket as the host's loop knows it: a file descriptor on Unix, a
/// `SOCKET` on Windows (libuv's `uv_os_sock_t`).
#[cfg(windows)]
pub type RawSocket = std::os::windows::io::RawSocket;

/// An event loop that runs the operations started on its thread.
///
/// # Safety
///
/// The driver calls `spawn` and `watch` on the host's thread only (where
/// `is_current` is true). An implementation must:
/// - answer `is_current` truly: true on exactly one thread, the loop's;
/// - poll every task given to `spawn` on that thread only, and drop it there
///   (the connection reader it gets owns a socket stream that the driver
///   declares `Send` without its being so, on the strength of this promise);
/// - poll each spawned task until it completes, while the loop exists (an
///   operation dropped half way would leave a lock in Redis until it
///   expires);
/// - use each [`Watch`] it returns, and drop it, on that thread only.
#[allow(unsafe_code)] // the contract the one `unsafe impl` of the core rests on
pub unsafe trait Host: Send + Sync + 'static {
    /// True on the host's thread.
    fn is_current(&self) -> bool;

    /// Polls `task` on the host's thread until it completes, without keeping
    /// the host alive on its account (an idle connection's reader).
    fn spawn(&self, task: Pin<Box<dyn Future<Output = ()>>>);

    /// Starts watching the non-blocking `socket` for readiness.
    fn watch(&self, socket: RawSocket) -> io::Result<Box<dyn Watch>>;
}

/// Readiness of one socket, from the host's loop. Dropping it stops the
/// watching (before the socket is closed).
///
/// Readability is remembered, as tokio does, so that a reader polled for
/// another reason (a new command to write) does not try a read the loop has
/// not announced: each such try is a system call that finds nothing.
pub trait Watch {
    /// Ready while the socket may be readable (from the start, and again
    /// once the loop reports it after [`Watch::clear_readable`]); else
    /// `cx` is woken when it does (or the socket failed).
    fn poll_readable(&mut self, cx: &mut Context<'_>) -> Poll<()>;

    /// Forgets readability: a read found the socket drained.
    fn clear_readable(&mut self);

    /// Wakes `cx` once the socket is writable (or failed).
    fn wake_when_writable(&mut self, cx: &mut Context<'_>);
}

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

pin_project_lite::pin_project! {
    /// Polls a future inside the driver's runtime context, so that its
    /// timers (command timeouts, waits) and the sockets it connects are the
    /// runtime's, whatever thread polls it.
    pub(crate) struct InRuntime<F> {
        handle: Handle,
        #[pin]
        future: F,
    }
}

impl<F: Future> InRuntime<F> {
    pub fn new(handle: Handle, future: F) -> Self {
        InRuntime { handle, future }
    }
}

impl<F: Future> Future for InRuntime<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.project();
        let _entered = this.handle.enter();
        this.future.poll(cx)
    }
}

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
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

#[cfg(any(feature = "redis", feature = "postgres", feature = "mysql"))]
mod in_runtime;
#[cfg(feature = "redis")]
mod stream;

#[cfg(any(feature = "redis", feature = "postgres", feature = "mysql"))]
pub(crate) use in_runtime::InRuntime;
#[cfg(feature = "redis")]
pub(crate) use stream::{HostStream, Socket};

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

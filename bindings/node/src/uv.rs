//! Socket readiness from libuv, the loop of this JS thread: the `Watch` of
//! the core's host lane (see `dokebi_lock::host`).
//!
//! A `uv_poll_t` per socket, unreferenced so that an idle connection never
//! keeps Node alive (pending operations do, through the executor). A
//! callback wakes the tasks waiting for what became ready, and runs them at
//! once ([`crate::executor::run_from_loop`]), so a reply is read in the same
//! loop turn it arrived in. libuv's polling is level-triggered, and
//! (re)starting it costs two `epoll_ctl` calls, so readability stays watched
//! while a reader keeps asking for it (a connection's reader always does),
//! and writability, which is almost always there, is watched only until it
//! fires.
//!
//! libuv's functions are looked up in the running process the first time
//! they are needed, not linked: Node exports them, but Deno has no libuv,
//! and an addon that named them would fail to load there or die at the
//! first call. Without them the redis driver runs on its own thread. The
//! handle's size comes from `uv_handle_size`, so no libuv struct layout is
//! assumed.

use std::alloc::{self, Layout};
use std::ffi::{c_char, c_int, c_void, CStr};
use std::io;
use std::os::fd::RawFd;
use std::ptr;
use std::sync::OnceLock;
use std::task::{Context, Poll, Waker};

use dokebi_lock::host::Watch;
use napi::{sys, Env};

/// `UV_POLL` of `uv_handle_type`.
const UV_POLL: c_int = 8;
const UV_READABLE: c_int = 1;
const UV_WRITABLE: c_int = 2;

type PollHandle = c_void;
type PollCb = unsafe extern "C" fn(handle: *mut PollHandle, status: c_int, events: c_int);
type CloseCb = unsafe extern "C" fn(handle: *mut PollHandle);

/// The libuv functions this module calls, as the process exports them.
struct Libuv {
    handle_size: unsafe extern "C" fn(kind: c_int) -> usize,
    poll_init_socket: unsafe extern "C" fn(uv_loop: *mut sys::uv_loop_s, handle: *mut PollHandle, fd: c_int) -> c_int,
    poll_start: unsafe extern "C" fn(handle: *mut PollHandle, events: c_int, cb: PollCb) -> c_int,
    poll_stop: unsafe extern "C" fn(handle: *mut PollHandle) -> c_int,
    close: unsafe extern "C" fn(handle: *mut PollHandle, cb: CloseCb),
    unref: unsafe extern "C" fn(handle: *mut PollHandle),
    handle_set_data: unsafe extern "C" fn(handle: *mut PollHandle, data: *mut c_void),
    handle_get_data: unsafe extern "C" fn(handle: *const PollHandle) -> *mut c_void,
    strerror: unsafe extern "C" fn(err: c_int) -> *const c_char,
}

/// libuv's functions, or `None` when the process does not export every one.
fn libuv() -> Option<&'static Libuv> {
    static LIBUV: OnceLock<Option<Libuv>> = OnceLock::new();
    LIBUV
        .get_or_init(|| {
            // SAFETY: each name is the libuv function of the field it fills, whose signature (libuv's
            // `uv.h`, stable since 1.0) the field's type states.
            unsafe {
                Some(Libuv {
                    handle_size: lookup(c"uv_handle_size")?,
                    poll_init_socket: lookup(c"uv_poll_init_socket")?,
                    poll_start: lookup(c"uv_poll_start")?,
                    poll_stop: lookup(c"uv_poll_stop")?,
                    close: lookup(c"uv_close")?,
                    unref: lookup(c"uv_unref")?,
                    handle_set_data: lookup(c"uv_handle_set_data")?,
                    handle_get_data: lookup(c"uv_handle_get_data")?,
                    strerror: lookup(c"uv_strerror")?,
                })
            }
        })
        .as_ref()
}

/// The function `name` of the running process, if it exports one.
///
/// # Safety
/// `F` is a function pointer type matching the symbol's real signature.
unsafe fn lookup<F: Copy>(name: &CStr) -> Option<F> {
    // SAFETY: `name` is NUL-terminated; RTLD_DEFAULT searches the process's global symbols.
    let address = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) };
    // SAFETY: a non-null address of a function of type `F` (the caller's promise), and `F` is a
    // function pointer, of a data pointer's size.
    (!address.is_null()).then(|| unsafe { std::mem::transmute_copy::<*mut c_void, F>(&address) })
}

/// The libuv loop of one JS thread.
pub struct Loop {
    uv_loop: *mut sys::uv_loop_s,
    libuv: &'static Libuv,
}

// SAFETY: the pointer is only used (by `watch`) on the loop's own thread,
// which the core's `Host` contract guarantees; the host that holds it is
// shared with the driver's thread only to ask `is_current`.
unsafe impl Send for Loop {}
// SAFETY: as for Send: `watch`, the one use of the pointer, is only called by `NodeHost::watch`,
// which the `Host` contract runs on the loop's own thread; other threads only share the value.
unsafe impl Sync for Loop {}

impl Loop {
    /// The loop of `env`'s thread; `None` when the process has no libuv
    /// to poll sockets with.
    pub fn of(env: &Env) -> napi::Result<Option<Loop>> {
        let Some(libuv) = libuv() else { return Ok(None) };
        let mut uv_loop = ptr::null_mut();
        // SAFETY: `env` is a live environment borrowed from the current N-API call on this JS thread
        // (`Env` is not Send); `uv_loop` is a valid out-pointer.
        let status = unsafe { sys::napi_get_uv_event_loop(env.raw(), &mut uv_loop) };
        if status != sys::Status::napi_ok || uv_loop.is_null() {
            return Err(napi::Error::from_reason("Node-API gave no libuv loop"));
        }
        Ok(Some(Loop { uv_loop, libuv }))
    }

    /// Starts watching `fd`; call on the loop's thread.
    pub fn watch(&self, fd: RawFd) -> io::Result<UvWatch> {
        let libuv = self.libuv;
        // SAFETY: `uv_handle_size` only reads a static table; UV_POLL is a valid `uv_handle_type`.
        let layout = Layout::from_size_align(unsafe { (libuv.handle_size)(UV_POLL) }, 16).map_err(io::Error::other)?;
        // SAFETY: a non-zero size, freed with the same layout in `closed`.
        let handle = unsafe { alloc::alloc(layout) } as *mut PollHandle;
        if handle.is_null() {
            alloc::handle_alloc_error(layout);
        }
        // SAFETY: `self.uv_loop` is this thread's live loop (from `napi_get_uv_event_loop`) and we are on
        // its thread (see above); `handle` is a fresh allocation of `uv_handle_size(UV_POLL)` bytes.
        let status = unsafe { (libuv.poll_init_socket)(self.uv_loop, handle, fd) };
        if status != 0 {
            // SAFETY: `handle` was allocated above with `layout`, and a failed `uv_poll_init_socket` has
            // not registered it with the loop, so nothing else refers to it.
            unsafe { alloc::dealloc(handle as *mut u8, layout) };
            return Err(uv_error(libuv, status));
        }
        let interest = Box::into_raw(Box::new(Interest { libuv, layout, readable: None, writable: None, watched: 0, may_read: true }));
        // SAFETY: `handle` was initialised by `uv_poll_init_socket` above, on the loop's thread; its
        // data is the leaked `interest`, reclaimed in `closed`.
        unsafe {
            (libuv.handle_set_data)(handle, interest as *mut c_void);
            (libuv.unref)(handle);
        }
        Ok(UvWatch { handle, interest })
    }
}

/// Who waits for what, owned by the handle (freed when it has closed).
struct Interest {
    libuv: &'static Libuv,
    layout: Layout,
    readable: Option<Waker>,
    writable: Option<Waker>,
    /// The events the handle is started for.
    watched: c_int,
    /// No read found the socket drained since the loop last reported it
    /// readable.
    may_read: bool,
}

impl Interest {
    /// Watches `events` from now on (a no-op when they already are).
    fn watch(&mut self, handle: *mut PollHandle, events: c_int) {
        if events == self.watched {
            return;
        }
        self.watched = events;
        // A failed start leaves the task unwoken; the command's timeout then
        // ends it (and drops this connection).
        // SAFETY: callers pass the handle of a live `UvWatch` (not yet closed) or the handle of the
        // running `ready` callback, on the loop's thread; `on_ready` has the signature libuv expects.
        unsafe {
            match events {
                0 => (self.libuv.poll_stop)(handle),
                _ => (self.libuv.poll_start)(handle, events, on_ready),
            }
        };
    }
}

/// One socket's `uv_poll_t`; dropping it closes the handle.
pub struct UvWatch {
    handle: *mut PollHandle,
    interest: *mut Interest,
}

impl UvWatch {
    fn interest(&mut self) -> &mut Interest {
        // SAFETY: the interest lives until the handle's close callback,
        // which runs after this watch is dropped.
        unsafe { &mut *self.interest }
    }
}

impl Watch for UvWatch {
    fn poll_readable(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let handle = self.handle;
        let interest = self.interest();
        if interest.may_read {
            return Poll::Ready(());
        }
        interest.readable = Some(cx.waker().clone());
        interest.watch(handle, interest.watched | UV_READABLE);
        Poll::Pending
    }

    fn clear_readable(&mut self) {
        self.interest().may_read = false;
    }

    fn wake_when_writable(&mut self, cx: &mut Context<'_>) {
        let handle = self.handle;
        let interest = self.interest();
        interest.writable = Some(cx.waker().clone());
        interest.watch(handle, interest.watched | UV_WRITABLE);
    }
}

impl Drop for UvWatch {
    fn drop(&mut self) {
        // Closing stops the polling now; libuv frees nothing of ours, so the
        // memory goes in the close callback.
        // SAFETY: `self.handle` was initialised in `watch` and is closed only here, once, on the loop's
        // thread (`UvWatch` is not Send); `closed` frees its memory after libuv is done with it.
        unsafe { ((*self.interest).libuv.close)(self.handle, closed) };
    }
}

unsafe extern "C" fn on_ready(handle: *mut PollHandle, status: c_int, events: c_int) {
    // SAFETY: libuv calls this for a live handle that `watch` started.
    crate::guard::or_log("a socket's readiness callback", || unsafe { ready(handle, status, events) });
}

/// # Safety
/// `handle` is a live handle made by [`Loop::watch`], on its loop's thread.
unsafe fn ready(handle: *mut PollHandle, status: c_int, events: c_int) {
    // SAFETY: the handle's data is its interest until the close callback,
    // which cannot run during this one. This borrow's last use comes before
    // the wakers run (they reach the interest through the watch).
    let interest = unsafe { &mut *(handle_data(handle) as *mut Interest) };
    let events = if status < 0 {
        // libuv reports an error (POLLERR) after it stopped the handle: it
        // watches nothing now, whatever `watched` said (which would make the
        // next ask a no-op and leave the socket unwatched for good). Both
        // sides count as ready: the next read or write meets the error, or
        // the socket's real state. The side that asks again restarts the
        // handle; restarting it here would report a lasting error every
        // loop turn to nobody.
        interest.watched = 0;
        UV_READABLE | UV_WRITABLE
    } else {
        events
    };
    if events & UV_READABLE != 0 {
        interest.may_read = true;
    }
    let readable = if events & UV_READABLE != 0 { interest.readable.take() } else { None };
    let writable = if events & UV_WRITABLE != 0 { interest.writable.take() } else { None };
    // Readable with nobody asking (a reader busy elsewhere) would fire
    // every turn: stop watching it until the reader finds the socket
    // drained and asks again.
    let mut watched = interest.watched & !UV_WRITABLE;
    if events & UV_READABLE != 0 && readable.is_none() {
        watched &= !UV_READABLE;
    }
    interest.watch(handle, watched);
    crate::executor::run_from_loop(|| readable.into_iter().chain(writable).for_each(Waker::wake));
}

unsafe extern "C" fn closed(handle: *mut PollHandle) {
    // SAFETY: the data is the interest `watch` leaked for this handle, and
    // libuv calls this once, after which it never touches the handle.
    let interest = unsafe { Box::from_raw(handle_data(handle) as *mut Interest) };
    let layout = interest.layout;
    crate::guard::or_log("dropping a socket's wakers", || drop(interest));
    // SAFETY: allocated with this layout in `watch`.
    unsafe { alloc::dealloc(handle as *mut u8, layout) };
}

/// The data of a live handle made by [`Loop::watch`] (which found libuv).
///
/// # Safety
/// `handle` is such a handle, on its loop's thread.
unsafe fn handle_data(handle: *mut PollHandle) -> *mut c_void {
    let libuv = libuv().expect("a handle exists only where libuv was found");
    // SAFETY: the caller's promise.
    unsafe { (libuv.handle_get_data)(handle) }
}

fn uv_error(libuv: &Libuv, status: c_int) -> io::Error {
    // SAFETY: `uv_strerror` returns a NUL-terminated string that is never freed, for any code.
    let message = unsafe { CStr::from_ptr((libuv.strerror)(status)) }.to_string_lossy().into_owned();
    io::Error::other(format!("libuv: {message}"))
}

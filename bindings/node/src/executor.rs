//! Polls the core's redis futures on the JS thread.
//!
//! The core runs the operations started here on this thread (this module is
//! its [`Host`], see `dokebi_lock::host`), over a command connection
//! whose socket libuv watches ([`crate::uv`]): a command crosses no thread.
//! A wake-up on the JS thread only queues its task, and the queue is
//! drained before control returns to libuv (a socket's readiness drains it
//! right in its libuv callback, see [`run_from_loop`]); one from another
//! thread (a timer, a notification) goes through one threadsafe function. Each promise
//! is settled on the thread that created it.
//!
//! The threadsafe function is weak and referenced only while operations are
//! in flight: an idle addon (or one whose provider is closed) never keeps
//! Node alive, while a pending acquire does, as any pending I/O would.
//! Watchers ([`spawn_weak`]) never keep it alive: they may wait as long as a
//! section runs, and a section keeps Node alive only through its own work.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::future::Future;
#[cfg(unix)]
use std::io;
use std::pin::Pin;
use std::ptr;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

use dokebi_lock::host::Host;
#[cfg(unix)]
use dokebi_lock::host::{RawSocket, Watch};

use napi::bindgen_prelude::{FunctionCallContext, ToNapiValue};
use napi::threadsafe_function::{ThreadsafeFunction, ThreadsafeFunctionCallMode};
use napi::{sys, Env, Status};
use slab::Slab;

use crate::error::{info, ErrorInfo};
use crate::guard;
use crate::raw::check;
#[cfg(unix)]
use crate::raw::create;

/// Wakes task `slot` on the JS thread ([`DRAIN`]: drains the run queue).
type WakeFn = ThreadsafeFunction<u32, (), u32, Status, false, true>;

/// An operation in flight: polls to the JS value that settles its promise.
trait Job {
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>, env: sys::napi_env) -> Poll<napi::Result<sys::napi_value>>;
}

/// The future lives inline, in the one allocation of the pinned job: boxed
/// apart, it cost every operation a second `malloc` and `free`.
struct Operation<F, C> {
    future: F,
    convert: Option<C>,
}

impl<F, C, T, D> Job for Operation<F, C>
where
    F: Future<Output = dokebi_lock::Result<T>>,
    C: FnOnce(T) -> D,
    D: ToNapiValue,
{
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>, env: sys::napi_env) -> Poll<napi::Result<sys::napi_value>> {
        // SAFETY: `future` is pinned with the operation (structural pinning): it is never moved
        // out of it nor given out unpinned, and `Operation` has no `Drop` of its own. `convert`
        // is not pinned: it is only taken by value, never polled.
        let this = unsafe { self.get_unchecked_mut() };
        // SAFETY: as above.
        let future = unsafe { Pin::new_unchecked(&mut this.future) };
        let outcome = match future.poll(cx) {
            Poll::Pending => return Poll::Pending,
            Poll::Ready(outcome) => outcome,
        };
        Poll::Ready(match outcome {
            Ok(value) => {
                let convert = this.convert.take().expect("an operation completes once");
                // SAFETY: `Executor::poll`, the only caller, passes its executor's env on that env's JS
                // thread, with a handle scope open (a JS call or `run_from_loop`).
                unsafe { D::to_napi_value(env, convert(value)) }
            }
            // SAFETY: as above.
            Err(error) => unsafe { ErrorInfo::to_napi_value(env, info(error)) },
        })
    }
}

/// The threadsafe-function argument that only drains the run queue.
const DRAIN: u32 = u32::MAX;

/// Operations polled between two polls of the connection readers.
const FLUSH_EVERY: usize = 16;

enum Work {
    /// An operation whose promise JS awaits.
    Operation { job: Pin<Box<dyn Job>>, deferred: sys::napi_deferred, keeps_alive: bool },
    /// A connection's reader: no promise, never keeps Node alive.
    // Only the host lane's connection readers, which Windows does not run.
    #[cfg_attr(windows, allow(dead_code))]
    Plain(Pin<Box<dyn Future<Output = ()>>>),
}

struct Task {
    /// `None` while the task is being polled.
    work: Option<Work>,
    /// `work` is a connection's reader (kept here: it is known also while
    /// the task is being polled, and wakes itself).
    reader: bool,
    waker: Waker,
    /// In the run queue: a task woken many times is polled once.
    queued: bool,
}

struct TaskWaker {
    wake: Arc<WakeFn>,
    slot: u32,
}

impl Wake for TaskWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        // A stale wake (task done, slot reused) only polls another task once
        // more, which futures allow.
        match current() {
            Local::Here(executor) if Arc::ptr_eq(&executor.wake, &self.wake) => executor.schedule(self.slot),
            Local::Here(_) | Local::None => {
                self.wake.call(self.slot, ThreadsafeFunctionCallMode::NonBlocking);
            }
            // This thread is exiting (its locals are being destroyed). On
            // the JS thread that is the process's exit: no loop will run the
            // task again, and its threadsafe function may be gone with the
            // environment. (The driver's threads wake while they run, not
            // while they end.)
            Local::Exiting => {}
        }
    }
}

struct Executor {
    env: sys::napi_env,
    /// The async context of polls run straight from libuv callbacks, made
    /// with the host ([`host`]): only Node's loop runs such callbacks.
    loop_scope: std::cell::OnceCell<LoopScope>,
    wake: Arc<WakeFn>,
    tasks: RefCell<Slab<Task>>,
    /// Operations woken on this thread, polled by the next [`Executor::drain`].
    ready: RefCell<VecDeque<u32>>,
    /// Connection readers woken on this thread: polled after every
    /// [`FLUSH_EVERY`] operations, so that a reader writes the commands of
    /// many operations at once, yet Redis starts on the first ones while
    /// the rest are being prepared.
    readers: RefCell<VecDeque<u32>>,
    /// A drain is running, or one was asked of the threadsafe function.
    draining: Cell<bool>,
    /// While JS reacts to what a drain from libuv settled (its microtasks):
    /// how many operations it has started so far (see [`start`]).
    reactions: Cell<Option<usize>>,
    /// Operations in flight that keep Node alive; the wake function is
    /// referenced while there is one.
    keeping_alive: Cell<usize>,
}

thread_local! {
    /// One executor per JS thread (main thread, each worker).
    static EXECUTOR: Slot = const { Slot(RefCell::new(None)) };
}

/// The executor of a JS thread, as a thread-local.
struct Slot(RefCell<Option<Rc<Executor>>>);

impl Drop for Slot {
    fn drop(&mut self) {
        // The executor is normally gone by now (taken by `drop_tasks`, the
        // environment's cleanup hook). It is still here when the process
        // exits without that cleanup (`process.exit`, an uncaught
        // exception): libc then destroys the thread's locals after Node's
        // loop and environment. Dropping the tasks there would close libuv
        // handles of a loop that is gone and run futures' destructors that
        // wake tasks through this very local, which panics (an abort).
        // The process is ending: the OS takes the memory back.
        if let Some(executor) = self.0.get_mut().take() {
            std::mem::forget(executor);
        }
    }
}

/// What the calling thread has as its executor.
enum Local {
    Here(Rc<Executor>),
    /// Not a JS thread (or no redis backend opened on it yet).
    None,
    /// The thread's locals are being destroyed: the thread is exiting.
    Exiting,
}

/// The calling thread's executor; never panics, even while the thread's
/// locals are being destroyed.
fn current() -> Local {
    match EXECUTOR.try_with(|slot| slot.0.borrow().clone()) {
        Ok(Some(executor)) => Local::Here(executor),
        Ok(None) => Local::None,
        Err(_) => Local::Exiting,
    }
}

/// The calling thread's executor, if it has a live one.
fn here() -> Option<Rc<Executor>> {
    match current() {
        Local::Here(executor) => Some(executor),
        Local::None | Local::Exiting => None,
    }
}

fn executor(env: &Env) -> napi::Result<Rc<Executor>> {
    if let Some(executor) = here() {
        return Ok(executor);
    }
    let poll = env.create_function_from_closure::<u32, (), _>("dokebiLockPoll", |ctx: FunctionCallContext| {
        let slot: u32 = ctx.get(0)?;
        if let Some(executor) = here() {
            if slot != DRAIN {
                executor.enqueue(slot);
            }
            executor.drain();
        }
        Ok(())
    })?;
    let wake: WakeFn = poll.build_threadsafe_function::<u32>().weak::<true>().callee_handled::<false>().build()?;
    let executor = Rc::new(Executor {
        env: env.raw(),
        loop_scope: std::cell::OnceCell::new(),
        wake: Arc::new(wake),
        tasks: RefCell::new(Slab::new()),
        ready: RefCell::new(VecDeque::new()),
        readers: RefCell::new(VecDeque::new()),
        draining: Cell::new(false),
        reactions: Cell::new(None),
        keeping_alive: Cell::new(0),
    });
    EXECUTOR.with(|slot| *slot.0.borrow_mut() = Some(executor.clone()));
    // Drop every task (and so every socket watch) while libuv's loop is
    // still there, not when the thread's locals go.
    // SAFETY: `env` is the current call's live env; `drop_tasks` ignores its argument.
    check(unsafe { sys::napi_add_env_cleanup_hook(env.raw(), Some(drop_tasks), ptr::null_mut()) })?;
    Ok(executor)
}

unsafe extern "C" fn drop_tasks(_arg: *mut std::ffi::c_void) {
    let Some(executor) = EXECUTOR.try_with(|slot| slot.0.borrow_mut().take()).ok().flatten() else { return };
    guard::or_log("dropping the pending operations", || drop(std::mem::take(&mut *executor.tasks.borrow_mut())));
    if let Some(scope) = executor.loop_scope.get() {
        // SAFETY: Node runs cleanup hooks on the env's JS thread while the env is still usable;
        // `context` and `resource` were made for this env in `LoopScope::new` and are freed only
        // here, once (the executor was taken out of its slot above).
        unsafe {
            sys::napi_async_destroy(executor.env, scope.context);
            sys::napi_delete_reference(executor.env, scope.resource);
        }
    }
}

/// The async context (and its resource object) that libuv callbacks poll in.
struct LoopScope {
    resource: sys::napi_ref,
    context: sys::napi_async_context,
}

#[cfg(unix)]
impl LoopScope {
    fn new(env: &Env) -> napi::Result<LoopScope> {
        let raw = env.raw();
        // SAFETY: `raw` is the env of the current N-API call on this JS thread; every out-pointer
        // is a local, and the name is a static NUL-terminated string of 10 bytes.
        unsafe {
            let object = create(|out| sys::napi_create_object(raw, out))?;
            let name = create(|out| sys::napi_create_string_utf8(raw, c"dokebiLock".as_ptr(), 10, out))?;
            let mut resource = ptr::null_mut();
            check(sys::napi_create_reference(raw, object, 1, &mut resource))?;
            let mut context = ptr::null_mut();
            check(sys::napi_async_init(raw, object, name, &mut context))?;
            Ok(LoopScope { resource, context })
        }
    }
}

/// Runs `wake` (waking tasks) in a libuv callback of this thread, then polls
/// the woken tasks at once, in a callback scope: promises settled there run
/// their reactions before control returns to libuv, as after any I/O
/// callback of Node's own. Operations those reactions start are polled in
/// growing batches as they start (see [`start`]), the rest after them, and
/// so on until nothing is left to poll.
#[cfg(unix)]
pub fn run_from_loop(wake: impl FnOnce()) {
    let Some(executor) = here() else { return wake() };
    if executor.draining.replace(true) {
        // A drain is already due (asked of the threadsafe function).
        return wake();
    }
    wake();
    let env = executor.env;
    let loop_scope = executor.loop_scope.get().expect("libuv callbacks come from a host, which made the loop scope");
    while executor.has_ready() {
        // SAFETY: we are in a libuv callback of this JS thread (the only caller is `uv::ready`),
        // outside any JS scope; `env`, `resource` and `context` belong to this thread's executor,
        // live until `drop_tasks` takes it out of the slot `here()` read. Scopes are closed in order.
        unsafe {
            let mut handles = ptr::null_mut();
            sys::napi_open_handle_scope(env, &mut handles);
            let mut resource = ptr::null_mut();
            sys::napi_get_reference_value(env, loop_scope.resource, &mut resource);
            let mut scope = ptr::null_mut();
            sys::napi_open_callback_scope(env, resource, loop_scope.context, &mut scope);
            guard::or_log("polling", || executor.run_queue());
            // Closing runs the microtasks: JS reacts to what just settled.
            executor.reactions.set(Some(0));
            sys::napi_close_callback_scope(env, scope);
            executor.reactions.set(None);
            sys::napi_close_handle_scope(env, handles);
        }
    }
    executor.draining.set(false);
}

/// A promise created by [`spawn`], returned to JS as is.
pub struct Promise(sys::napi_value);

impl Promise {
    /// The promise, for a raw Node-API callback to return.
    pub fn into_raw(self) -> sys::napi_value {
        self.0
    }
}

impl ToNapiValue for Promise {
    unsafe fn to_napi_value(_env: sys::napi_env, value: Self) -> napi::Result<sys::napi_value> {
        Ok(value.0)
    }
}

/// Starts `work` and returns a promise that resolves to `convert(value)`, or
/// to the `ErrorInfo` of its error. Node stays alive until it settles.
pub fn spawn<T, D>(
    env: &Env,
    work: impl Future<Output = dokebi_lock::Result<T>> + 'static,
    convert: impl FnOnce(T) -> D + 'static,
) -> napi::Result<Promise>
where
    D: ToNapiValue + 'static,
    T: 'static,
{
    start(env, Box::pin(Operation { future: work, convert: Some(convert) }), true)
}

/// Like [`spawn`], but the pending promise never keeps Node alive.
pub fn spawn_weak<T, D>(
    env: &Env,
    work: impl Future<Output = dokebi_lock::Result<T>> + 'static,
    convert: impl FnOnce(T) -> D + 'static,
) -> napi::Result<Promise>
where
    D: ToNapiValue + 'static,
    T: 'static,
{
    start(env, Box::pin(Operation { future: work, convert: Some(convert) }), false)
}

fn start(env: &Env, job: Pin<Box<dyn Job>>, keeps_alive: bool) -> napi::Result<Promise> {
    let executor = executor(env)?;
    let raw = env.raw();
    let mut deferred = ptr::null_mut();
    let mut promise = ptr::null_mut();
    // SAFETY: `raw` is the env of the current N-API call on this JS thread; out-pointers are locals.
    check(unsafe { sys::napi_create_promise(raw, &mut deferred, &mut promise) })?;
    if keeps_alive {
        if executor.keeping_alive.get() == 0 {
            // Work in flight keeps Node alive, like any pending I/O.
            // SAFETY: as above; the threadsafe function was made for this env and lives in `executor.wake`.
            check(unsafe { sys::napi_ref_threadsafe_function(raw, executor.wake.handle.get_raw()) })?;
        }
        executor.keeping_alive.set(executor.keeping_alive.get() + 1);
    }
    let slot = executor.insert(Work::Operation { job, deferred, keeps_alive });
    executor.enqueue(slot);
    // Outside a drain it starts now. Inside one it waits, so that the
    // commands of many operations go out together, except while JS reacts
    // to replies (see `run_from_loop`): there the 1st, 2nd, 4th, 8th, 16th
    // and every 16th after start at once with those queued before them.
    // When the replies that JS reacts to were all Redis had (a few leases
    // handed on in turn: a counted key's holders), Redis would otherwise
    // wait, idle, for the last reaction before it has a command, and the two
    // processes would take turns; this way it starts on the first while JS
    // prepares the rest, yet a burst of reactions still writes few batches.
    if !executor.draining.get() {
        executor.drain();
    } else if let Some(started) = executor.reactions.get() {
        let started = started + 1;
        executor.reactions.set(Some(started));
        if started.is_power_of_two() || started % FLUSH_EVERY == 0 {
            guard::or_log("polling", || executor.run_queue());
        }
    }
    Ok(Promise(promise))
}

impl Executor {
    fn insert(&self, work: Work) -> u32 {
        let mut tasks = self.tasks.borrow_mut();
        let entry = tasks.vacant_entry();
        let slot = entry.key() as u32;
        let waker = Waker::from(Arc::new(TaskWaker { wake: self.wake.clone(), slot }));
        let reader = matches!(work, Work::Plain(_));
        entry.insert(Task { work: Some(work), reader, waker, queued: false });
        slot
    }

    /// Puts task `slot` in the run queue (once).
    fn enqueue(&self, slot: u32) {
        if let Some(task) = self.tasks.borrow_mut().get_mut(slot as usize) {
            if !std::mem::replace(&mut task.queued, true) {
                let queue = if task.reader { &self.readers } else { &self.ready };
                queue.borrow_mut().push_back(slot);
            }
        }
    }

    /// Queues task `slot`; outside a drain, asks for one from libuv (a wake
    /// from a native callback runs in no JS scope).
    fn schedule(&self, slot: u32) {
        self.enqueue(slot);
        if !self.draining.replace(true) {
            self.wake.call(DRAIN, ThreadsafeFunctionCallMode::NonBlocking);
        }
    }

    /// Polls queued tasks until none is left; called with a JS scope open.
    fn drain(&self) {
        self.draining.set(true);
        // A panic here (a task's is caught in `poll`) must not leave
        // `draining` set: no drain would ever be asked for again.
        guard::or_log("polling", || self.run_queue());
        self.draining.set(false);
    }

    fn run_queue(&self) {
        while self.has_ready() {
            for _ in 0..FLUSH_EVERY {
                let next = self.ready.borrow_mut().pop_front();
                let Some(slot) = next else { break };
                self.poll(slot);
            }
            loop {
                let next = self.readers.borrow_mut().pop_front();
                let Some(slot) = next else { break };
                self.poll(slot);
            }
        }
    }

    fn has_ready(&self) -> bool {
        !self.ready.borrow().is_empty() || !self.readers.borrow().is_empty()
    }

    fn poll(&self, slot: u32) {
        let env = self.env;
        // The task leaves its slot while polled: polling may spawn tasks or
        // wake others, which needs the table.
        let (mut work, waker) = {
            let mut tasks = self.tasks.borrow_mut();
            let Some(task) = tasks.get_mut(slot as usize) else { return };
            task.queued = false;
            let Some(work) = task.work.take() else { return };
            (work, task.waker.clone())
        };
        let mut cx = Context::from_waker(&waker);
        let polled = guard::catch(|| match &mut work {
            Work::Plain(future) => future.as_mut().poll(&mut cx).map(|()| None),
            Work::Operation { job, .. } => job.as_mut().poll(&mut cx, env).map(Some),
        });
        let settled = match polled {
            Ok(Poll::Pending) => {
                self.tasks.borrow_mut()[slot as usize].work = Some(work);
                return;
            }
            Ok(Poll::Ready(settled)) => settled,
            // A task that panicked is done: a reader is logged (its
            // connection is dropped with it, and the next command
            // reconnects), an operation's promise settles with the error.
            Err(error) if matches!(work, Work::Plain(_)) => {
                guard::log("a connection reader", &error);
                None
            }
            // SAFETY: `env` is this executor's, and `poll` runs on its JS thread with a scope open
            // (from `drain` inside a JS call, or `run_from_loop`).
            Err(error) => Some(unsafe { ErrorInfo::to_napi_value(env, info(error)) }),
        };
        self.tasks.borrow_mut().remove(slot as usize);
        let (Work::Operation { deferred, keeps_alive, .. }, Some(settled)) = (work, settled) else { return };
        if keeps_alive {
            self.keeping_alive.set(self.keeping_alive.get() - 1);
        }
        let unref = keeps_alive && self.keeping_alive.get() == 0;
        // SAFETY: as above; `deferred` came from `napi_create_promise` in `start` and is settled
        // only here, once (the task was just removed); the threadsafe function lives in `self.wake`.
        unsafe {
            match settled {
                Ok(value) => sys::napi_resolve_deferred(env, deferred, value),
                Err(error) => {
                    let message = napi::bindgen_prelude::ToNapiValue::to_napi_value(env, error.reason.clone()).unwrap_or(ptr::null_mut());
                    let mut js_error = ptr::null_mut();
                    sys::napi_create_error(env, ptr::null_mut(), message, &mut js_error);
                    sys::napi_reject_deferred(env, deferred, js_error)
                }
            };
            if unref {
                sys::napi_unref_threadsafe_function(env, self.wake.handle.get_raw());
            }
        }
    }
}

/// This JS thread as the core's [`Host`].
#[cfg(unix)]
pub struct NodeHost {
    wake: Arc<WakeFn>,
    uv_loop: crate::uv::Loop,
}

/// The host of the calling JS thread: `None` where its event loop cannot
/// watch sockets (no libuv: see [`crate::uv`]; Windows: see `NodeHost`), and
/// then the driver's thread carries the commands.
#[cfg(unix)]
pub fn host(env: &Env) -> napi::Result<Option<Arc<dyn Host>>> {
    let executor = executor(env)?;
    let Some(uv_loop) = crate::uv::Loop::of(env)? else { return Ok(None) };
    if executor.loop_scope.get().is_none() {
        // Not set: the check just above, on this thread, found it empty.
        let _ = executor.loop_scope.set(LoopScope::new(env)?);
    }
    Ok(Some(Arc::new(NodeHost { wake: executor.wake.clone(), uv_loop })))
}

/// On Windows the commands always take the driver's thread: the host lane
/// would watch Winsock sockets through libuv's AFD polling, a path no
/// Windows Node that runs here can prove (see the platform table in docs/node.md).
#[cfg(windows)]
pub fn host(_env: &Env) -> napi::Result<Option<Arc<dyn Host>>> {
    Ok(None)
}

// SAFETY: `is_current` is true on this JS thread only (the executor is a
// thread-local of it); `spawn` queues the task in this thread's executor,
// which polls tasks only in its run loop on this thread and drops them there
// (completed, or at the environment's cleanup; at process exit it is leaked,
// never dropped elsewhere); the watches are libuv poll
// handles of this thread's loop, used and closed on it.
#[cfg(unix)]
unsafe impl Host for NodeHost {
    fn is_current(&self) -> bool {
        here().is_some_and(|executor| Arc::ptr_eq(&executor.wake, &self.wake))
    }

    fn spawn(&self, task: Pin<Box<dyn Future<Output = ()>>>) {
        // Called on this thread (the core's contract), where the executor
        // lives until the environment's cleanup.
        if let Some(executor) = here() {
            let slot = executor.insert(Work::Plain(task));
            executor.schedule(slot);
        }
    }

    fn watch(&self, socket: RawSocket) -> io::Result<Box<dyn Watch>> {
        Ok(Box::new(self.uv_loop.watch(socket)?))
    }
}

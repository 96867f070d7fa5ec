//! Polls the core's redis futures on the JS thread.
//!
//! The core's futures do their work on the core's own runtime and only wait
//! for its answer, so polling them right here costs two thread crossings per
//! operation (the spawn onto the runtime, the wake-up back through one
//! threadsafe function), and each promise is settled on the thread that
//! created it.
//!
//! The threadsafe function is weak and referenced only while operations are
//! in flight: an idle addon (or one whose provider is closed) never keeps
//! Node alive, while a pending acquire does, as any pending I/O would.
//! Watchers ([`spawn_weak`]) never keep it alive: they may wait as long as a
//! section runs, and a section keeps Node alive only through its own work.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::ptr;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

use napi::bindgen_prelude::{FunctionCallContext, ToNapiValue};
use napi::threadsafe_function::{ThreadsafeFunction, ThreadsafeFunctionCallMode};
use napi::{sys, Env, Status};
use slab::Slab;

use crate::error::{info, ErrorInfo};

/// Wakes task `slot` on the JS thread.
type WakeFn = ThreadsafeFunction<u32, (), u32, Status, false, true>;

/// An operation in flight: polls to the JS value that settles its promise.
trait Job {
    fn poll(&mut self, cx: &mut Context<'_>, env: sys::napi_env) -> Poll<napi::Result<sys::napi_value>>;
}

struct Operation<F, C> {
    future: Pin<Box<F>>,
    convert: Option<C>,
}

impl<F, C, T, D> Job for Operation<F, C>
where
    F: Future<Output = dokebi_lock::Result<T>>,
    C: FnOnce(T) -> D,
    D: ToNapiValue,
{
    fn poll(&mut self, cx: &mut Context<'_>, env: sys::napi_env) -> Poll<napi::Result<sys::napi_value>> {
        let outcome = match self.future.as_mut().poll(cx) {
            Poll::Pending => return Poll::Pending,
            Poll::Ready(outcome) => outcome,
        };
        Poll::Ready(match outcome {
            Ok(value) => {
                let convert = self.convert.take().expect("an operation completes once");
                unsafe { D::to_napi_value(env, convert(value)) }
            }
            Err(error) => unsafe { ErrorInfo::to_napi_value(env, info(error)) },
        })
    }
}

struct Task {
    job: Box<dyn Job>,
    deferred: sys::napi_deferred,
    waker: Waker,
    /// Counts in `Executor::keeping_alive`.
    keeps_alive: bool,
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
        self.wake.call(self.slot, ThreadsafeFunctionCallMode::NonBlocking);
    }
}

struct Executor {
    wake: Arc<WakeFn>,
    tasks: RefCell<Slab<Task>>,
    /// Tasks in flight that keep Node alive; the wake function is referenced
    /// while there is one.
    keeping_alive: Cell<usize>,
}

thread_local! {
    /// One executor per JS thread (main thread, each worker).
    static EXECUTOR: RefCell<Option<Rc<Executor>>> = const { RefCell::new(None) };
}

fn executor(env: &Env) -> napi::Result<Rc<Executor>> {
    if let Some(executor) = EXECUTOR.with(|slot| slot.borrow().clone()) {
        return Ok(executor);
    }
    let poll = env.create_function_from_closure::<u32, (), _>("dokebiLockPoll", |ctx: FunctionCallContext| {
        let slot: u32 = ctx.get(0)?;
        let env = ctx.env.raw();
        if let Some(executor) = EXECUTOR.with(|cell| cell.borrow().clone()) {
            executor.poll(env, slot);
        }
        Ok(())
    })?;
    let wake: WakeFn = poll.build_threadsafe_function::<u32>().weak::<true>().callee_handled::<false>().build()?;
    let executor = Rc::new(Executor { wake: Arc::new(wake), tasks: RefCell::new(Slab::new()), keeping_alive: Cell::new(0) });
    EXECUTOR.with(|slot| *slot.borrow_mut() = Some(executor.clone()));
    Ok(executor)
}

/// A promise created by [`spawn`], returned to JS as is.
pub struct Promise(sys::napi_value);

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
    start(env, Box::new(Operation { future: Box::pin(work), convert: Some(convert) }), true)
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
    start(env, Box::new(Operation { future: Box::pin(work), convert: Some(convert) }), false)
}

fn start(env: &Env, job: Box<dyn Job>, keeps_alive: bool) -> napi::Result<Promise> {
    let executor = executor(env)?;
    let raw = env.raw();
    let mut deferred = ptr::null_mut();
    let mut promise = ptr::null_mut();
    check(unsafe { sys::napi_create_promise(raw, &mut deferred, &mut promise) })?;
    let slot = {
        let mut tasks = executor.tasks.borrow_mut();
        if keeps_alive {
            if executor.keeping_alive.get() == 0 {
                // Work in flight keeps Node alive, like any pending I/O.
                check(unsafe { sys::napi_ref_threadsafe_function(raw, executor.wake.handle.get_raw()) })?;
            }
            executor.keeping_alive.set(executor.keeping_alive.get() + 1);
        }
        let entry = tasks.vacant_entry();
        let slot = entry.key() as u32;
        let waker = Waker::from(Arc::new(TaskWaker { wake: executor.wake.clone(), slot }));
        entry.insert(Task { job, deferred, waker, keeps_alive });
        slot
    };
    executor.poll(raw, slot);
    Ok(Promise(promise))
}

impl Executor {
    fn poll(&self, env: sys::napi_env, slot: u32) {
        let mut tasks = self.tasks.borrow_mut();
        let Some(task) = tasks.get_mut(slot as usize) else { return };
        let waker = task.waker.clone();
        let settled = match task.job.poll(&mut Context::from_waker(&waker), env) {
            Poll::Pending => return,
            Poll::Ready(settled) => settled,
        };
        let task = tasks.remove(slot as usize);
        drop(tasks);
        if task.keeps_alive {
            self.keeping_alive.set(self.keeping_alive.get() - 1);
        }
        let unref = task.keeps_alive && self.keeping_alive.get() == 0;
        unsafe {
            match settled {
                Ok(value) => sys::napi_resolve_deferred(env, task.deferred, value),
                Err(error) => {
                    let message = napi::bindgen_prelude::ToNapiValue::to_napi_value(env, error.reason.clone()).unwrap_or(ptr::null_mut());
                    let mut js_error = ptr::null_mut();
                    sys::napi_create_error(env, ptr::null_mut(), message, &mut js_error);
                    sys::napi_reject_deferred(env, task.deferred, js_error)
                }
            };
            if unref {
                sys::napi_unref_threadsafe_function(env, self.wake.handle.get_raw());
            }
        }
    }
}

fn check(status: sys::napi_status) -> napi::Result<()> {
    if status == sys::Status::napi_ok {
        Ok(())
    } else {
        Err(napi::Error::new(Status::GenericFailure, format!("Node-API call failed with status {status}")))
    }
}

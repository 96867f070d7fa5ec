//! Driving the async core from C: [`block_on`] for blocking calls, and the
//! completion thread that runs asynchronous acquires and calls their C
//! callbacks.
//!
//! The completion thread starts with the first asynchronous acquire of a
//! provider (a provider that never makes one starts no thread) and ends when
//! the provider and every handle taken from it are freed.

use std::cell::Cell;
use std::future::Future;
use std::pin::pin;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::task::{Context, Poll, Wake, Waker};
use std::thread::{self, Thread};

use futures_executor::ThreadPool;

use dokebi_lock::error::{ErrorCode, LockError, Result};

thread_local! {
    /// On a completion thread, the address of the [`Completions`] it runs
    /// (0 elsewhere): waiting for those to finish would wait for the
    /// running callback itself.
    static SERVING: Cell<usize> = const { Cell::new(0) };
}

/// Which completion thread waits for which other provider's callbacks (by
/// the [`Completions`]' addresses): two callbacks freeing each other's
/// providers would otherwise wait for each other for good.
static WAITS: Mutex<Vec<(usize, usize)>> = Mutex::new(Vec::new());

/// The name the core gives the store drivers' runtime thread
/// (`src/store/runtime.rs`), where telemetry callbacks of the store
/// drivers' events (redis, postgres, mysql, and a policy's over them) run.
const DRIVER_THREAD: &str = "dokebi-lock-io";

/// True on the store drivers' thread: a telemetry callback runs there.
pub(crate) fn on_driver_thread() -> bool {
    thread::current().name() == Some(DRIVER_THREAD)
}

/// `INVALID_ARGUMENT` on the store drivers' thread: a blocking call on any
/// backend but a local one, or a close, made there (from a telemetry
/// callback) would park the one thread that has to answer it, and hang the
/// driver for good.
pub(crate) fn refuse_on_driver_thread() -> Result<()> {
    if on_driver_thread() {
        return Err(LockError::new(
            ErrorCode::InvalidArgument,
            "a blocking call on a redis, postgres, mysql, file or policy backend (or closing the provider) from a telemetry \
             callback running on the store drivers' thread would wait for that thread itself; make the call from another thread",
        ));
    }
    Ok(())
}

/// Runs a future to completion on the calling thread, parking it between
/// polls. Unlike `futures::executor::block_on` it may be called from inside a
/// completion callback (C code calling a blocking function there).
pub(crate) fn block_on<F: Future>(future: F) -> F::Output {
    struct Unpark(Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let mut future = pin!(future);
    // Local operations are ready at once: try without building a waker.
    if let Poll::Ready(output) = future.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        return output;
    }
    // Each poll registers the waker it is given, so the next one replaces the no-op.
    let waker = Waker::from(Arc::new(Unpark(thread::current())));
    let mut cx = Context::from_waker(&waker);
    loop {
        if let Poll::Ready(output) = future.as_mut().poll(&mut cx) {
            return output;
        }
        // A spurious unpark only costs one more poll.
        thread::park();
    }
}

/// The asynchronous work of one provider: the completion thread, started on
/// first use, and the count of tasks whose callback has not returned yet.
#[derive(Default)]
pub(crate) struct Completions {
    pool: Mutex<Option<ThreadPool>>,
    in_flight: Mutex<usize>,
    idle: Condvar,
}

impl Completions {
    /// Runs `task` on the completion thread; it counts as in flight until it
    /// has finished (callback included).
    pub(crate) fn spawn(self: &Arc<Self>, task: impl Future<Output = ()> + Send + 'static) -> Result<()> {
        let pool = self.pool()?;
        *lock(&self.in_flight) += 1;
        let in_flight = InFlight(self.clone());
        pool.spawn_ok(async move {
            let _in_flight = in_flight;
            task.await;
        });
        Ok(())
    }

    /// Waits until every spawned task has finished. On its own completion
    /// thread (a callback closing its provider) it cannot wait for the other
    /// tasks, which run after the current callback returns, so it returns at
    /// once; on another provider's completion thread it waits, unless that
    /// provider's callbacks wait (through others, maybe) for its own: then
    /// neither could return, and this one does not wait.
    pub(crate) fn wait_idle(&self) {
        let me = self.address();
        let serving = SERVING.get();
        if serving == me {
            return;
        }
        let _waiting = match Waiting::enter(serving, me) {
            Some(waiting) => waiting,
            None => return,
        };
        let mut in_flight = lock(&self.in_flight);
        while *in_flight > 0 {
            in_flight = self.idle.wait(in_flight).unwrap_or_else(|e| e.into_inner());
        }
    }

    fn address(&self) -> usize {
        std::ptr::from_ref(self) as usize
    }

    fn pool(&self) -> Result<ThreadPool> {
        let mut pool = lock(&self.pool);
        if let Some(pool) = pool.as_ref() {
            return Ok(pool.clone());
        }
        // One thread: the callbacks of one provider never run concurrently,
        // and the waiting itself is done by the core, not by this thread.
        let me = self.address();
        let created = ThreadPool::builder()
            .pool_size(1)
            .name_prefix("dokebi-lock-completion-")
            .after_start(move |_| SERVING.set(me))
            .create()
            .map_err(|err| LockError::new(ErrorCode::ProviderFailed, "could not start the completion thread").with_cause(err))?;
        Ok(pool.insert(created).clone())
    }
}

/// A completion thread's wait for another provider's callbacks, listed in
/// [`WAITS`] until dropped.
struct Waiting(Option<(usize, usize)>);

impl Waiting {
    /// The wait of `serving`'s completion thread (none: another thread) for
    /// `awaited`; `None` when `awaited` already waits for `serving`.
    fn enter(serving: usize, awaited: usize) -> Option<Waiting> {
        if serving == 0 {
            return Some(Waiting(None));
        }
        let mut waits = lock(&WAITS);
        let mut next = awaited;
        while let Some(&(_, further)) = waits.iter().find(|&&(waiter, _)| waiter == next) {
            if further == serving {
                return None;
            }
            next = further;
        }
        waits.push((serving, awaited));
        Some(Waiting(Some((serving, awaited))))
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        if let Some(edge) = self.0 {
            let mut waits = lock(&WAITS);
            if let Some(at) = waits.iter().position(|&e| e == edge) {
                waits.swap_remove(at);
            }
        }
    }
}

/// Counts one task in flight until dropped (also when a task is dropped
/// unfinished), then wakes `wait_idle`.
struct InFlight(Arc<Completions>);

impl Drop for InFlight {
    fn drop(&mut self) {
        let mut in_flight = lock(&self.0.in_flight);
        *in_flight -= 1;
        if *in_flight == 0 {
            self.0.idle.notify_all();
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Only counters and a pool handle live behind these mutexes; a panic
    // elsewhere cannot leave them inconsistent.
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    #[test]
    fn wait_idle_returns_only_after_every_task_finished() {
        let completions = Arc::new(Completions::default());
        let done = Arc::new(AtomicUsize::new(0));
        for _ in 0..3 {
            let done = done.clone();
            completions
                .spawn(async move {
                    thread::sleep(std::time::Duration::from_millis(20));
                    done.fetch_add(1, Ordering::SeqCst);
                })
                .unwrap();
        }
        completions.wait_idle();
        assert_eq!(done.load(Ordering::SeqCst), 3);
    }

    #[test]
    fn the_refusal_on_the_drivers_thread_names_every_driver_it_refuses() {
        let refusal =
            thread::Builder::new().name(DRIVER_THREAD.into()).spawn(|| refuse_on_driver_thread().unwrap_err()).unwrap().join().unwrap();
        assert_eq!(refusal.code(), ErrorCode::InvalidArgument);
        // Every backend but a local one blocks on this thread (backend.rs, lease.rs, section.rs).
        for driver in ["redis", "postgres", "mysql", "file", "policy"] {
            assert!(refusal.message().contains(driver), "{driver}: {}", refusal.message());
        }
        assert!(refuse_on_driver_thread().is_ok(), "another thread is not refused");
    }

    #[test]
    fn block_on_works_inside_a_completion_task() {
        let completions = Arc::new(Completions::default());
        let (tx, rx) = std::sync::mpsc::channel();
        completions.spawn(async move { tx.send(block_on(async { 7 })).unwrap() }).unwrap();
        assert_eq!(rx.recv().unwrap(), 7);
    }
}

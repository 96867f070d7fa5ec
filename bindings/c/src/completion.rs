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
    /// True on a completion thread, where waiting for callbacks to finish
    /// would wait for the running callback itself.
    static ON_COMPLETION_THREAD: Cell<bool> = const { Cell::new(false) };
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

    /// Waits until every spawned task has finished. On the completion thread
    /// itself (a callback closing its provider) it cannot wait for the other
    /// tasks, which run after the current callback returns, so it returns at
    /// once.
    pub(crate) fn wait_idle(&self) {
        if ON_COMPLETION_THREAD.get() {
            return;
        }
        let mut in_flight = lock(&self.in_flight);
        while *in_flight > 0 {
            in_flight = self.idle.wait(in_flight).unwrap_or_else(|e| e.into_inner());
        }
    }

    fn pool(&self) -> Result<ThreadPool> {
        let mut pool = lock(&self.pool);
        if let Some(pool) = pool.as_ref() {
            return Ok(pool.clone());
        }
        // One thread: the callbacks of one provider never run concurrently,
        // and the waiting itself is done by the core, not by this thread.
        let created = ThreadPool::builder()
            .pool_size(1)
            .name_prefix("dokebi-lock-completion-")
            .after_start(|_| ON_COMPLETION_THREAD.set(true))
            .create()
            .map_err(|err| LockError::new(ErrorCode::ProviderFailed, "could not start the completion thread").with_cause(err))?;
        Ok(pool.insert(created).clone())
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
    fn block_on_works_inside_a_completion_task() {
        let completions = Arc::new(Completions::default());
        let (tx, rx) = std::sync::mpsc::channel();
        completions.spawn(async move { tx.send(block_on(async { 7 })).unwrap() }).unwrap();
        assert_eq!(rx.recv().unwrap(), 7);
    }
}

//! Cross-process wake-ups: inotify watches on the lock files that waiters
//! of this process wait for (Linux), with polling as the safety net.
//!
//! Releasing a key closes its lock file (or removes it), and a process that
//! dies has its files closed by the kernel: either way the file's inode
//! reports `IN_CLOSE_WRITE` (or `IN_ATTRIB` for the removal) to every
//! inotify watch on it. A release that keeps the file open for reuse (see
//! `idle`) reports nothing, and is made only when no waiter of another
//! process has marked the file. So each key
//! whose head waiter waits on a lock file held elsewhere has a watch on
//! that file (a kernel object, no thread). The process has one inotify
//! instance, whatever its number of backends, and one thread reading its
//! events while any watch is set; one thread per backend, started while
//! anyone waits (or a kept file is due), sleeps until that reader has read
//! events and has the heads retry. The wait also ends
//! every `pollIntervalMs` so the heads retry anyway: the safety net for an
//! event missed (an inotify queue overflow, a watch that could not be
//! added: the per-user watch limit) and the only wake-up on systems
//! without inotify.

use std::time::Duration;

#[cfg(any(target_os = "linux", target_os = "android"))]
mod inotify {
    use std::collections::HashMap;
    use std::path::Path;
    use std::sync::{Arc, Condvar, Mutex, MutexGuard};
    use std::time::Duration;

    use rustix::event::{poll, PollFd, PollFlags, Timespec};
    use rustix::fd::OwnedFd;
    use rustix::fs::inotify::{self, CreateFlags, WatchFlags};

    /// How long the reader thread waits for an event before it looks
    /// whether any watch is left (and ends if none is).
    const READER_IDLE: Duration = Duration::from_secs(1);

    /// The process's inotify instance, shared by every file backend: one
    /// per backend would spend the user's `max_user_instances` (128 by
    /// default) on 128 backends, after which waiters fell back to polling.
    /// One reader thread, running while any watch is set, reads its events
    /// and counts them in `events`; each backend's wake-up thread waits for
    /// that count to move past the one it saw.
    pub(crate) struct Watch {
        /// The process that made it: a child forked from it makes its own.
        pid: u32,
        fd: Option<OwnedFd>,
        state: Mutex<State>,
        moved: Condvar,
    }

    #[derive(Default)]
    struct State {
        /// How many waiters use each watch: the kernel gives one file's
        /// watches one descriptor, and removes it at the first removal.
        users: HashMap<i32, usize>,
        /// Batches of events read so far.
        events: u64,
        /// The reader thread runs.
        reading: bool,
    }

    impl Watch {
        /// The process's instance (made at the first call).
        pub fn shared() -> Arc<Watch> {
            static SHARED: Mutex<Option<Arc<Watch>>> = Mutex::new(None);
            let mut shared = SHARED.lock().unwrap_or_else(|e| e.into_inner());
            let pid = std::process::id();
            match &*shared {
                Some(watch) if watch.pid == pid => watch.clone(),
                _ => {
                    let watch = Arc::new(Watch {
                        pid,
                        fd: inotify::init(CreateFlags::CLOEXEC | CreateFlags::NONBLOCK).ok(),
                        state: Mutex::default(),
                        moved: Condvar::new(),
                    });
                    *shared = Some(watch.clone());
                    watch
                }
            }
        }

        fn state(&self) -> MutexGuard<'_, State> {
            self.state.lock().unwrap_or_else(|e| e.into_inner())
        }

        /// Watches the lock file at `path` for its release or removal;
        /// `None` when it cannot (polling then covers it).
        pub fn add(self: &Arc<Self>, path: &Path) -> Option<i32> {
            let flags =
                WatchFlags::CLOSE_WRITE | WatchFlags::ATTRIB | WatchFlags::DELETE_SELF | WatchFlags::MOVE_SELF | WatchFlags::DONT_FOLLOW;
            let wd = inotify::add_watch(self.fd.as_ref()?, path, flags).ok()?;
            let mut state = self.state();
            *state.users.entry(wd).or_default() += 1;
            if !state.reading {
                let watch = self.clone();
                let started = std::thread::Builder::new().name("dokebi-lock-inotify".into()).spawn(move || watch.read());
                // Without the reader the waiters poll, as without inotify.
                state.reading = started.is_ok();
            }
            Some(wd)
        }

        /// Stops watch `wd` once its last user stops (gone already when its
        /// file was deleted).
        pub fn remove(&self, wd: i32) {
            let mut state = self.state();
            let Some(count) = state.users.get_mut(&wd) else { return };
            *count -= 1;
            if *count > 0 {
                return;
            }
            state.users.remove(&wd);
            if let Some(fd) = &self.fd {
                let _ = inotify::remove_watch(fd, wd);
            }
        }

        /// Sleeps until events were read since `seen` (the count this
        /// waiter last saw, updated) or `timeout` passes.
        pub fn wait(&self, timeout: Duration, seen: &mut u64) {
            if self.fd.is_none() {
                std::thread::sleep(timeout);
                return;
            }
            let state = self.state();
            let (state, _) =
                self.moved.wait_timeout_while(state, timeout, |state| state.events == *seen).unwrap_or_else(|e| e.into_inner());
            *seen = state.events;
        }

        /// The reader thread: reads every event, counts it and wakes the
        /// waiters; ends once no watch is left.
        fn read(self: Arc<Self>) {
            let Some(fd) = &self.fd else { return };
            loop {
                let timeout = Timespec { tv_sec: READER_IDLE.as_secs() as _, tv_nsec: READER_IDLE.subsec_nanos() as _ };
                let mut fds = [PollFd::new(fd, PollFlags::IN)];
                let _ = poll(&mut fds, Some(&timeout));
                let mut events = [0u8; 4096];
                let mut read = false;
                while matches!(rustix::io::read(fd, &mut events), Ok(n) if n > 0) {
                    read = true;
                }
                let mut state = self.state();
                if read {
                    state.events += 1;
                    self.moved.notify_all();
                }
                if state.users.is_empty() {
                    state.reading = false;
                    return;
                }
            }
        }
    }
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
mod inotify {
    use std::path::Path;
    use std::sync::Arc;
    use std::time::Duration;

    /// No inotify: waiters poll.
    pub(crate) struct Watch;

    impl Watch {
        pub fn shared() -> Arc<Watch> {
            Arc::new(Watch)
        }

        pub fn add(self: &Arc<Self>, _path: &Path) -> Option<i32> {
            None
        }

        pub fn remove(&self, _wd: i32) {}

        pub fn wait(&self, timeout: Duration, _seen: &mut u64) {
            std::thread::sleep(timeout);
        }
    }
}

pub(crate) use inotify::Watch;

/// The longest a waiter waits between two tries when no event wakes it.
pub(crate) fn safety_net(poll_interval_ms: u32) -> Duration {
    Duration::from_millis(poll_interval_ms.into())
}

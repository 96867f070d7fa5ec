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
//! that file (a kernel object, no thread), and one thread per backend,
//! started while anyone waits (or a kept file is due), sleeps in `poll` on the inotify descriptor
//! and has the heads retry when something happened. `poll` also returns
//! every `pollIntervalMs` so the heads retry anyway: the safety net for an
//! event missed (an inotify queue overflow, a watch that could not be
//! added: the per-user watch limit) and the only wake-up on systems
//! without inotify.

use std::time::Duration;

#[cfg(any(target_os = "linux", target_os = "android"))]
mod inotify {
    use std::collections::HashMap;
    use std::path::Path;
    use std::sync::Mutex;
    use std::time::Duration;

    use rustix::event::{poll, PollFd, PollFlags, Timespec};
    use rustix::fd::OwnedFd;
    use rustix::fs::inotify::{self, CreateFlags, WatchFlags};

    /// One inotify instance.
    pub(crate) struct Watch {
        fd: Option<OwnedFd>,
        /// How many waiters use each watch: the kernel gives one file's
        /// watches one descriptor, and removes it at the first removal.
        users: Mutex<HashMap<i32, usize>>,
    }

    impl Watch {
        pub fn new() -> Watch {
            Watch { fd: inotify::init(CreateFlags::CLOEXEC | CreateFlags::NONBLOCK).ok(), users: Mutex::default() }
        }

        /// Watches the lock file at `path` for its release or removal;
        /// `None` when it cannot (polling then covers it).
        pub fn add(&self, path: &Path) -> Option<i32> {
            let flags =
                WatchFlags::CLOSE_WRITE | WatchFlags::ATTRIB | WatchFlags::DELETE_SELF | WatchFlags::MOVE_SELF | WatchFlags::DONT_FOLLOW;
            let wd = inotify::add_watch(self.fd.as_ref()?, path, flags).ok()?;
            *self.users.lock().unwrap_or_else(|e| e.into_inner()).entry(wd).or_default() += 1;
            Some(wd)
        }

        /// Stops watch `wd` once its last user stops (gone already when its
        /// file was deleted).
        pub fn remove(&self, wd: i32) {
            let mut users = self.users.lock().unwrap_or_else(|e| e.into_inner());
            let Some(count) = users.get_mut(&wd) else { return };
            *count -= 1;
            if *count > 0 {
                return;
            }
            users.remove(&wd);
            if let Some(fd) = &self.fd {
                let _ = inotify::remove_watch(fd, wd);
            }
        }

        /// Sleeps until a watched file reports something or `timeout`
        /// passes, then empties the event queue.
        pub fn wait(&self, timeout: Duration) {
            let Some(fd) = &self.fd else {
                std::thread::sleep(timeout);
                return;
            };
            let timeout = Timespec { tv_sec: timeout.as_secs() as _, tv_nsec: timeout.subsec_nanos() as _ };
            let mut fds = [PollFd::new(fd, PollFlags::IN)];
            let _ = poll(&mut fds, Some(&timeout));
            let mut events = [0u8; 4096];
            while matches!(rustix::io::read(fd, &mut events), Ok(n) if n > 0) {}
        }
    }
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
mod inotify {
    use std::path::Path;
    use std::time::Duration;

    /// No inotify: waiters poll.
    pub(crate) struct Watch;

    impl Watch {
        pub fn new() -> Watch {
            Watch
        }

        pub fn add(&self, _path: &Path) -> Option<i32> {
            None
        }

        pub fn remove(&self, _wd: i32) {}

        pub fn wait(&self, timeout: Duration) {
            std::thread::sleep(timeout);
        }
    }
}

pub(crate) use inotify::Watch;

/// The longest a waiter waits between two tries when no event wakes it.
pub(crate) fn safety_net(poll_interval_ms: u32) -> Duration {
    Duration::from_millis(poll_interval_ms.into())
}

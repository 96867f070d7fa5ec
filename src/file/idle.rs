//! Lock files of free keys, kept open for a moment so that the next acquire
//! of the key in this process reuses them: no `open`, `unlink` and `close`
//! per acquire and release, which were most of a pair's system calls.
//!
//! A kept file is unlocked (the key is free for every process) but not
//! closed, so its release raises no inotify event. That is safe because of
//! the order of the release: unlock first, then read the waiting mark. A
//! waiter of another process writes its mark before its last try; if that
//! try was refused, the mark was written before the unlock and is seen
//! after it, and the file is closed (waking the waiter) instead of kept. If
//! the try came after the unlock, it took the key.
//!
//! Kept files are removed (as a release of the key would have removed
//! them: locked, checked to be the path's file, the clock past their fence)
//! once [`KEEP_FOR`] passes without reuse, by the backend's wake-up thread,
//! and all of them when the backend closes. A process that ends without
//! closing leaves its kept files; the next release of such a key removes
//! its file.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use super::directory::LockDirectory;
use super::lock_file::LockFile;
use super::name::LockName;
use super::take::{self, Held};
use crate::acquire::LockMode;

/// How long a free key's lock file is kept for reuse.
pub(crate) const KEEP_FOR: Duration = Duration::from_millis(500);

/// At most this many files are kept (each is an open descriptor).
const MOST_KEPT: usize = 64;

/// The kept files of one backend.
#[derive(Default)]
pub(crate) struct IdleFiles {
    files: HashMap<LockName, (LockFile, Instant)>,
    /// When the last file kept is due, taken for reuse or not: the wake-up
    /// thread stays until then rather than end and start again at every
    /// release of a busy key.
    last_due: Option<Instant>,
}

impl IdleFiles {
    /// The kept file of `name`, taken for reuse.
    pub fn take(&mut self, name: &LockName) -> Option<LockFile> {
        self.files.remove(name).map(|(file, _)| file)
    }

    /// Releases `file`, the exclusively locked lock file of `name` (fence
    /// `fence`), keeping it open when nobody of another process waits for
    /// it and there is room; else releases it as [`take::release`] does.
    pub fn keep(&mut self, directory: &LockDirectory, name: LockName, file: LockFile, fence: u64, pid: u32) {
        if self.files.len() >= MOST_KEPT || self.files.contains_key(&name) {
            take::release(directory, &name, Held::File(file, LockMode::Exclusive), fence, true, pid);
            return;
        }
        // Unlock, then look for a mark (see the module's documentation).
        file.unlock();
        if file.marked_by_other(pid) || !directory.names(&name, &file) {
            return; // closed: the waiter is woken
        }
        let due = Instant::now() + KEEP_FOR;
        self.files.insert(name, (file, due));
        self.last_due = Some(due);
    }

    /// When the next kept file is due for removal, or, with none kept,
    /// the last one kept would have been.
    pub fn next_due(&self) -> Option<Instant> {
        self.files.values().map(|(_, due)| *due).min().or(self.last_due)
    }

    /// True when no file is kept and none was within [`KEEP_FOR`].
    pub fn is_done(&mut self, now: Instant) -> bool {
        if self.last_due.is_some_and(|due| due <= now) {
            self.last_due = None;
        }
        self.files.is_empty() && self.last_due.is_none()
    }

    /// Removes the kept files due by `now` (all of them when `now` is
    /// `None`), each if its key is still free.
    pub fn remove_due(&mut self, directory: &LockDirectory, now: Option<Instant>, pid: u32) {
        let due: Vec<LockName> =
            self.files.iter().filter(|(_, (_, due))| now.is_none_or(|now| *due <= now)).map(|(name, _)| *name).collect();
        for name in due {
            let (file, _) = self.files.remove(&name).expect("listed");
            // A key another process has used as a counted one since keeps
            // its file: its limit record guards the units.
            if file.try_lock().unwrap_or(false) && file.limit().is_ok_and(|limit| limit <= 1) {
                let fence = file.fence().unwrap_or(u64::MAX);
                take::release(directory, &name, Held::File(file, LockMode::Exclusive), fence, true, pid);
            }
        }
    }
}

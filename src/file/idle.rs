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
use super::holders;
use super::lock_file::{LockFile, Marker};
use super::name::LockName;
use super::take::{self, Held, Untidy};

/// How long a free key's lock file is kept for reuse.
pub(crate) const KEEP_FOR: Duration = Duration::from_millis(500);

/// At most this many files are kept (each is an open descriptor).
const MOST_KEPT: usize = 64;

/// The first retry of an untidy key's removal comes this long after its
/// release (another process's take or release holds the lock file for
/// about that long), each later one twice as long after the one before.
const TIDY_FIRST: Duration = Duration::from_millis(5);

/// Tries of an untidy key's removal before its files are left to the next
/// release of the key (the last one about 0.6 s after the release).
const TIDY_TRIES: u32 = 8;

/// The kept files of one backend.
#[derive(Default)]
pub(crate) struct IdleFiles {
    files: HashMap<LockName, (LockFile, Instant)>,
    /// When the last file kept is due, taken for reuse or not: the wake-up
    /// thread stays until then rather than end and start again at every
    /// release of a busy key.
    last_due: Option<Instant>,
    /// Keys left untidy: the next try and how many were made.
    untidy: HashMap<LockName, (Instant, u32)>,
}

impl IdleFiles {
    /// The kept file of `name`, taken for reuse.
    pub fn take(&mut self, name: &LockName) -> Option<LockFile> {
        self.files.remove(name).map(|(file, _)| file)
    }

    /// Releases `file`, the exclusively locked lock file of `name` (fence
    /// `fence`), keeping it open when nobody of another process waits for
    /// it and there is room; else releases it as [`take::release`] does.
    pub fn keep(&mut self, directory: &LockDirectory, name: LockName, file: LockFile, fence: u64, me: Marker) {
        if self.files.len() >= MOST_KEPT || self.files.contains_key(&name) {
            self.tidy_later(take::release(directory, &name, Held::Exclusive(file), fence, me));
            return;
        }
        // Unlock, then look for a mark (see the module's documentation).
        holders::clear_writer(&file, fence);
        file.unlock();
        if file.marked_by_other(me) || !directory.names(&name, &file) {
            return; // closed: the waiter is woken
        }
        let due = Instant::now() + KEEP_FOR;
        self.files.insert(name, (file, due));
        self.last_due = Some(due);
    }

    /// Has the files of `untidy` removed later.
    pub fn tidy_later(&mut self, untidy: Option<Untidy>) {
        if let Some(Untidy(name)) = untidy {
            self.untidy.entry(name).or_insert((Instant::now() + TIDY_FIRST, 0));
        }
    }

    /// When the next kept file or untidy key is due, or, with none, the
    /// last file kept would have been.
    pub fn next_due(&self) -> Option<Instant> {
        let files = self.files.values().map(|(_, due)| *due);
        files.chain(self.untidy.values().map(|(due, _)| *due)).min().or(self.last_due)
    }

    /// True when no file is kept and none was within [`KEEP_FOR`].
    pub fn is_done(&mut self, now: Instant) -> bool {
        if self.last_due.is_some_and(|due| due <= now) {
            self.last_due = None;
        }
        self.files.is_empty() && self.untidy.is_empty() && self.last_due.is_none()
    }

    /// Removes the kept files due by `now` (all of them when `now` is
    /// `None`), each if its key is still free, and tries the untidy keys
    /// due (all of them when `None`: those still untidy then stay for their
    /// later tries).
    pub fn remove_due(&mut self, directory: &LockDirectory, now: Option<Instant>, me: Marker) {
        if now.is_none() {
            // Nothing is kept any more: nothing is due later.
            self.last_due = None;
        }
        self.untidy.retain(|name, (due, tries)| {
            // Once more at a close, and left to the later tries if still
            // untidy: the close may come just after the release.
            let Some(now) = now else { return !take::tidy(directory, name, me) };
            if *due > now {
                return true;
            }
            if take::tidy(directory, name, me) {
                return false;
            }
            *tries += 1;
            *due = now + TIDY_FIRST * 2u32.pow(*tries);
            *tries < TIDY_TRIES
        });
        let due: Vec<LockName> =
            self.files.iter().filter(|(_, (_, due))| now.is_none_or(|now| *due <= now)).map(|(name, _)| *name).collect();
        for name in due {
            let (file, _) = self.files.remove(&name).expect("listed");
            // A key another process has used as a counted one since keeps
            // its file: its limit record guards the units.
            if file.try_lock().unwrap_or(false) && file.limit().is_ok_and(|limit| limit <= 1) {
                let fence = file.fence().unwrap_or(u64::MAX);
                self.tidy_later(take::release(directory, &name, Held::Exclusive(file), fence, me));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::file::take::tests::{entries, fresh_directory, take_a_unit, ME};

    /// An idle list with `name` (one unit of which `directory` holds) left
    /// untidy, and the other open file that locks its lock file.
    fn untidy(directory: &LockDirectory, name: &LockName) -> (IdleFiles, LockFile) {
        let (held, fence) = take_a_unit(directory, name);
        let other = directory.open_file(name).unwrap();
        assert!(other.try_lock().unwrap());
        let mut idle = IdleFiles::default();
        idle.tidy_later(take::release(directory, name, held, fence, ME));
        (idle, other)
    }

    #[test]
    fn an_untidy_key_is_tried_again_when_due_until_its_files_are_removed() {
        let directory = fresh_directory("idle-untidy");
        let name = LockName::new("ns", "k");
        let (mut idle, other) = untidy(&directory, &name);
        let due = idle.next_due().expect("a try is due");
        assert!(!idle.is_done(due));
        idle.remove_due(&directory, Some(due - Duration::from_millis(1)), ME);
        assert_eq!(idle.next_due(), Some(due), "not tried before it is due");
        idle.remove_due(&directory, Some(due), ME);
        let again = idle.next_due().expect("tried again later: the lock file is locked");
        assert!(again >= due + TIDY_FIRST * 2);
        assert_eq!(entries(&directory), 2);
        drop(other);
        idle.remove_due(&directory, Some(again), ME);
        assert_eq!(entries(&directory), 0);
        assert!(idle.is_done(again));
    }

    #[test]
    fn an_untidy_key_is_left_after_its_last_try() {
        let directory = fresh_directory("idle-gives-up");
        let name = LockName::new("ns", "k");
        let (mut idle, _other) = untidy(&directory, &name);
        for _ in 0..TIDY_TRIES {
            let due = idle.next_due().expect("another try is due");
            idle.remove_due(&directory, Some(due), ME);
        }
        assert!(idle.is_done(Instant::now() + Duration::from_secs(60)), "no more tries");
        assert_eq!(entries(&directory), 2, "left for the next release of the key");
    }

    #[test]
    fn closing_tries_every_untidy_key_once_more() {
        let directory = fresh_directory("idle-close");
        let name = LockName::new("ns", "k");
        let (mut idle, other) = untidy(&directory, &name);
        drop(other);
        idle.remove_due(&directory, None, ME);
        assert_eq!(entries(&directory), 0);
        assert!(idle.is_done(Instant::now()));
    }

    #[test]
    fn an_untidy_key_a_close_cannot_tidy_yet_stays_for_its_later_tries() {
        let directory = fresh_directory("idle-close-busy");
        let name = LockName::new("ns", "k");
        let (mut idle, other) = untidy(&directory, &name);
        idle.remove_due(&directory, None, ME);
        assert_eq!(entries(&directory), 2, "the lock file is locked");
        let due = idle.next_due().expect("tried again later");
        drop(other);
        idle.remove_due(&directory, Some(due), ME);
        assert_eq!(entries(&directory), 0);
        assert!(idle.is_done(due));
    }
}

//! The directory's fence floor: at least the counter of every lock file the
//! driver removed from the directory, so that fences do not go back when
//! the host's clock does.
//!
//! A key's counter lives in its lock file, which the driver removes once
//! the key is free; the path's next file starts at 0, and its first fence
//! would be the clock alone. Had the clock gone back meanwhile (an NTP
//! step, a virtual machine's clock corrected, its CPUs disagreeing), that
//! fence would be below the removed file's. So:
//!
//! - every removal of a key's lock file ([`LockDirectory::remove`]) first
//!   raises the floor, one fence record in the file [`FLOOR_FILE`], to at
//!   least that file's counter ([`raise`]), under the floor file's lock
//!   held exclusive for one read and one write; if that lock is not had
//!   within [`super::lock_file::BRIEF_HOLD`], the key's file is not removed (a file left
//!   keeps its counter: always safe). The raise's write is made before the
//!   unlink, so a taker that creates the path's new file after the unlink
//!   reads it;
//! - a lock file whose counter is 0 (new, or never granted) grants
//!   `max(1, clock_us, floor + 1)` ([`advance`]), the floor read under its
//!   lock held shared (a raise rewrites the record in place: read without
//!   the lock, a torn record could read as a smaller number). A file with
//!   a counter does not read it: its first grant was above the floor, which
//!   was above every earlier file's counter of its path.
//!
//! Not synced, as the counters are not (see [`super::fence`]): a crash of
//! the host that loses a raise also takes a reboot. The driver never
//! removes the floor file; whoever else does (a tmp cleaner, logout
//! emptying `/run/user/<uid>`) loses the floor, and the next grants start
//! from the clock (`tests/review_r14.rs`). A backend keeps it open, and opens the path's
//! file again when the one it holds is no longer named by it (removed by
//! hand or by a tmp cleaner).

use std::io;
use std::sync::{Mutex, PoisonError};

use super::directory::LockDirectory;
use super::lock_file::LockFile;
use super::name::FLOOR_FILE;
use crate::acquire::LockMode;
use crate::error::Result;
use crate::holder::HolderLabel;

/// A backend's open floor file, opened at its first use.
#[derive(Default)]
pub(crate) struct Floor(Mutex<Option<LockFile>>);

impl Floor {
    /// Runs `use_it` on the floor file of `directory` locked in `mode`, then
    /// unlocks it: `None` when the lock was held by others for
    /// [`super::lock_file::BRIEF_HOLD`]. The mutex keeps this backend's threads apart: they
    /// share the one open file, whose lock does not exclude itself.
    pub fn locked<T>(
        &self,
        directory: &LockDirectory,
        mode: LockMode,
        use_it: impl FnOnce(&LockFile) -> io::Result<T>,
    ) -> Result<Option<T>> {
        let io = |err: io::Error| directory.failure(err.into());
        let mut kept = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let file = match kept.take().filter(|file| directory.entry_names(FLOOR_FILE, file)) {
            Some(file) => kept.insert(file),
            None => kept.insert(directory.open_entry(FLOOR_FILE, true)?.expect("created")),
        };
        if !file.try_lock_briefly(mode).map_err(io)? {
            return Ok(None);
        }
        let used = use_it(file);
        file.unlock();
        used.map(Some).map_err(io)
    }
}

/// Raises the floor of `directory` to at least `counter`, the counter of a
/// lock file about to be removed: false when it could not (the floor lock
/// held too long, or a failure), and the file must stay.
pub(crate) fn raise(directory: &LockDirectory, counter: u64) -> bool {
    let raised =
        directory.floor().locked(
            directory,
            LockMode::Exclusive,
            |file| if file.fence()? < counter { file.set_fence(counter) } else { Ok(()) },
        );
    matches!(raised, Ok(Some(())))
}

/// Writes the fence of a grant through `file`, whose counter the caller
/// read as `last`, above the floor when `last` is 0, and answers it (see
/// [`LockFile::advance_fence_from`]; a writer's record first when
/// `writer` labels it, see [`LockFile::advance_fence_recorded`]): `None`
/// when the floor lock was held too long (the caller lets the key go and
/// tries again shortly).
pub(crate) fn advance(directory: &LockDirectory, file: &LockFile, last: u64, writer: Option<&HolderLabel>) -> Result<Option<u64>> {
    let io = |err: io::Error| directory.failure(err.into());
    let last = match last {
        0 => match directory.floor().locked(directory, LockMode::Shared, LockFile::fence)? {
            Some(floor) => floor,
            None => return Ok(None),
        },
        counter => counter,
    };
    match writer {
        Some(label) => file.advance_fence_recorded(last, label),
        None => file.advance_fence_from(last),
    }
    .map(Some)
    .map_err(io)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::acquire::LockKind;
    use crate::file::fence;
    use crate::file::name::LockName;
    use crate::file::take::tests::{fresh_directory, label, ME};
    use crate::file::take::{self, Took};

    /// The directory's floor file, opened apart from the backend's (as
    /// another process's).
    fn floor_file(directory: &LockDirectory) -> LockFile {
        directory.open_entry(FLOOR_FILE, true).unwrap().unwrap()
    }

    /// Takes and releases `name` in `kind` once: the grant's fence, or
    /// `None` when the take stalled.
    fn take_and_release(directory: &LockDirectory, name: &LockName, kind: LockKind) -> Option<u64> {
        match take::take(directory, name, kind, directory.open_file(name).unwrap(), ME, false, &label()).unwrap() {
            Took::Held(held, fence) => {
                take::release(directory, name, held, fence, ME);
                Some(fence)
            }
            Took::Stalled(_) => None,
            _ => panic!("the key was free"),
        }
    }

    const KINDS: [LockKind; 3] = [
        LockKind { mode: LockMode::Exclusive, limit: 1, weight: 1 },
        LockKind { mode: LockMode::Shared, limit: 1, weight: 1 },
        LockKind { mode: LockMode::Exclusive, limit: 2, weight: 1 },
    ];

    /// A floor ahead of the clock (as a clock stepped back leaves the
    /// counters of removed files; here by less than the millisecond a
    /// removal waits for the clock to pass the counter): a new file of every
    /// kind grants above it, and its removal raises the floor to its
    /// counter.
    #[test]
    fn a_new_file_of_every_kind_grants_above_the_floor_and_its_removal_raises_it() {
        let directory = fresh_directory("floor-ahead");
        for (n, kind) in KINDS.into_iter().enumerate() {
            let ahead = fence::clock_us() + 500;
            floor_file(&directory).set_fence(ahead).unwrap();
            let name = LockName::new("ns", &format!("k{n}"));
            let fence = take_and_release(&directory, &name, kind).expect("the floor is free");
            assert!(fence > ahead, "{kind:?}: {fence} above the floor {ahead}");
            assert!(!directory.exists(&name), "{kind:?}: the file was removed, its counter kept in the floor");
            assert_eq!(floor_file(&directory).fence().unwrap(), fence, "{kind:?}");
        }
    }

    /// A floor held by another (a raise stopped in its moment): a new
    /// file's take stalls, and a removal leaves the key's file; once let
    /// go, both go on.
    #[test]
    fn a_floor_held_too_long_stalls_new_files_and_keeps_removed_ones() {
        let directory = fresh_directory("floor-held");
        let name = LockName::new("ns", "k");
        let other = floor_file(&directory);
        assert!(other.try_lock().unwrap());
        for kind in KINDS {
            assert_eq!(take_and_release(&directory, &name, kind), None, "{kind:?} stalls");
        }
        // A file with a counter does not read the floor, and its release
        // leaves it.
        directory.open_file(&name).unwrap().set_fence(fence::clock_us()).unwrap();
        let fence = take_and_release(&directory, &name, KINDS[0]).expect("no floor read");
        assert!(directory.exists(&name), "not removed without raising the floor");
        drop(other);
        let next = take_and_release(&directory, &name, KINDS[0]).expect("the floor is free");
        assert!(next > fence);
        assert!(!directory.exists(&name));
        assert_eq!(floor_file(&directory).fence().unwrap(), next);
    }

    /// The floor file removed by hand: the backend opens the path's new one
    /// rather than raise a file nobody else reads.
    #[test]
    fn a_floor_file_removed_by_hand_is_opened_again() {
        let directory = fresh_directory("floor-removed");
        let name = LockName::new("ns", "k");
        take_and_release(&directory, &name, KINDS[0]).unwrap();
        std::fs::remove_file(directory.path().join(FLOOR_FILE)).unwrap();
        let fence = take_and_release(&directory, &name, KINDS[0]).unwrap();
        assert_eq!(floor_file(&directory).fence().unwrap(), fence);
    }
}

//! The raise lock of a shared key: readers of a key hold its lock file
//! shared together, so its counter is read and rewritten by each of them
//! under a lock of its own, the key's raise file (`<digest>.raise.lock`)
//! locked exclusive, and two readers never read the same counter.
//!
//! The raise file is opened (created if missing) by a reader once it holds
//! the key's lock file shared and has checked that the lock file's name
//! names it, locked exclusive with a try, held only for one read and one
//! write of the counter, then unlocked and closed, all before the grant is
//! handed out: no handle of it outlives the raise. Its lock belongs to the
//! open file, as the lock file's does, so the death of a process in a raise
//! frees it at once, and whatever write the process made is a fence never
//! handed out (the next raise starts above it).
//!
//! It changes only under the key's lock file: a reader creates it holding
//! that file shared, and [`super::directory::LockDirectory::remove`]
//! removes it (before the lock file) holding that file exclusive, so no
//! raise is under way then, and every reader of the key, holding the lock
//! file the name names, opens the raise file the name names. Two readers
//! never lock two different raise files at once; its name is therefore not
//! checked after locking.
//!
//! Writers and takers of units hold the lock file exclusive when they
//! write the counter: no raise runs then, and they take no raise lock.

use super::directory::LockDirectory;
use super::floor;
use super::lock_file::LockFile;
use super::name::LockName;
use crate::acquire::LockMode;
use crate::error::Result;

/// Raises the counter of `file`, the lock file of `name` that this reader
/// holds shared, under the key's raise lock, and answers the fence of the
/// grant: `None` when another reader's raise held the lock for
/// [`super::lock_file::BRIEF_HOLD`], or a raise of the directory's floor
/// held the floor that long when the counter is 0 (see [`floor::advance`]):
/// the caller releases the key and tries again later.
pub(crate) fn raise(directory: &LockDirectory, name: &LockName, file: &LockFile) -> Result<Option<u64>> {
    let io = |err: std::io::Error| directory.failure(err.into());
    let raise_file = directory.open_raise_file(name)?;
    if !raise_file.try_lock_briefly(LockMode::Exclusive).map_err(io)? {
        return Ok(None);
    }
    let fence = floor::advance(directory, file, file.fence().map_err(io)?)?;
    // Dropping the raise file unlocks it, then closes it.
    drop(raise_file);
    Ok(fence)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::file::take::tests::fresh_directory;

    /// A raise lock held by another open file (another reader's raise, in
    /// this process or another) holds the raise up: given up after
    /// [`super::lock_file::BRIEF_HOLD`], the counter untouched; once it is let go, the
    /// raise goes above the counter.
    #[test]
    fn a_raise_waits_for_another_s_and_gives_up_on_one_held_too_long() {
        let directory = fresh_directory("raise");
        let name = LockName::new("ns", "k");
        let reader = directory.open_file(&name).unwrap();
        assert!(reader.try_lock_in(LockMode::Shared).unwrap());
        let first = raise(&directory, &name, &reader).unwrap().expect("no other raise");
        let other = directory.open_raise_file(&name).unwrap();
        assert!(other.try_lock().unwrap());
        assert_eq!(raise(&directory, &name, &reader).unwrap(), None, "given up while another raise holds the lock");
        assert_eq!(reader.fence().unwrap(), first, "the counter is untouched");
        drop(other);
        let second = raise(&directory, &name, &reader).unwrap().expect("the lock was let go");
        assert!(second > first);
    }
}

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
//! The raise lock also keeps the reader slots of the lock file (see
//! [`holders`]): a reader chooses its slot and writes it under the lock,
//! so two readers never choose one slot.
//!
//! Writers and takers of units hold the lock file exclusive when they
//! write the counter: no raise runs then, and they take no raise lock.

use super::directory::LockDirectory;
use super::floor;
use super::holders;
use super::lock_file::LockFile;
use super::name::LockName;
use crate::acquire::LockMode;
use crate::error::Result;
use crate::holder::HolderLabel;

/// Raises the counter of `file`, the lock file of `name` that this reader
/// holds shared, under the key's raise lock, and records the reader
/// (labelled `label`) in a reader slot under the same lock: the fence of
/// the grant and the slot (none when every slot was taken; see
/// [`holders::record_reader`]). `None` when another reader's raise held
/// the lock for [`super::lock_file::BRIEF_HOLD`], or a raise of the
/// directory's floor held the floor that long when the counter is 0 (see
/// [`floor::advance`]): the caller releases the key and tries again later.
pub(crate) fn raise(
    directory: &LockDirectory,
    name: &LockName,
    file: &LockFile,
    label: &HolderLabel,
) -> Result<Option<(u64, Option<usize>)>> {
    let io = |err: std::io::Error| directory.failure(err.into());
    let raise_file = directory.open_raise_file(name)?;
    if !raise_file.try_lock_briefly(LockMode::Exclusive).map_err(io)? {
        return Ok(None);
    }
    let raised =
        floor::advance(directory, file, file.fence().map_err(io)?, None)?.map(|fence| (fence, holders::record_reader(file, fence, label)));
    // Dropping the raise file unlocks it, then closes it.
    drop(raise_file);
    Ok(raised)
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
        let label = HolderLabel::new("r").unwrap();
        let (first, _) = raise(&directory, &name, &reader, &label).unwrap().expect("no other raise");
        let other = directory.open_raise_file(&name).unwrap();
        assert!(other.try_lock().unwrap());
        assert_eq!(raise(&directory, &name, &reader, &label).unwrap(), None, "given up while another raise holds the lock");
        assert_eq!(reader.fence().unwrap(), first, "the counter is untouched");
        drop(other);
        let (second, _) = raise(&directory, &name, &reader, &label).unwrap().expect("the lock was let go");
        assert!(second > first);
    }
}

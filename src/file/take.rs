//! One key's kernel locks for one grant, by kind, and their release.
//!
//! - Exclusive (limit 1): the key's lock file, `flock`ed exclusive for the
//!   whole hold.
//! - Shared: the same file `flock`ed shared, so readers of every process
//!   hold it together and a writer (exclusive) alone; each reader raises
//!   the counter under the key's raise lock (see [`raise`]).
//! - Counted (`limit` n > 1): `weight` unit files of the key (`.u0` to
//!   `.u<n-1>`), each `flock`ed exclusive for the hold; the key's lock file
//!   is locked exclusive only for the moment of taking them, so takers of
//!   units go one at a time and a unit file only ever changes (created,
//!   locked, removed) under it. Its limit record holds the limit of the
//!   key's holders: a taker that finds another limit while units of it are
//!   held is refused (`INVALID_ARGUMENT`), as is an exclusive or shared
//!   taker (limit 1) of a key whose units are held.
//!
//! Each grant records its holder (see [`holders`]): a writer in the lock
//! file's writer slot, a reader in a reader slot (under the raise lock), a
//! taker of units in each unit file.
//!
//! Every lock is tried without blocking. After locking a file, the taker
//! checks that its path still names it: a file removed by its last holder
//! (see [`release`]) is locked by nobody who checks, so a waiter holding the
//! old inode and a newcomer holding a new one never both hold the key.

use super::directory::LockDirectory;
use super::floor;
use super::holders;
use super::lock_file::{LockFile, Marker};
use super::name::LockName;
use super::raise;
use crate::acquire::{LockKind, LockMode};
use crate::error::{ErrorCode, LockError, Result};
use crate::holder::HolderLabel;

/// Tries of one take whose lock file was replaced under it before it gives
/// up with `PROVIDER_FAILED` (a replacement takes a release, so more than a
/// few in a row mean something else is renaming files).
const REPLACED_TRIES: u32 = 64;

/// The kernel locks one grant holds on one key.
pub(crate) enum Held {
    /// The key's lock file, locked exclusive.
    Exclusive(LockFile),
    /// The key's lock file, locked shared, and the reader slot its record
    /// went to (none when every slot was taken).
    Shared(LockFile, Option<usize>),
    /// Unit files of a counted key, each locked exclusive.
    Units(Vec<(u32, LockFile)>),
}

/// A key whose files its release could not remove although it left the key
/// free: a waiting mark it saw went before it let the lock file go (see
/// [`remove_if_free`]), or, for a counted key, the key's lock file was
/// locked by another process at that moment (whose check of the units may
/// have come before this release freed its own), or was gone with unit
/// files left beside it
/// (Wine, and Windows without POSIX delete semantics, keep a removed
/// file's name while another process holds it open, so a taker may lock it
/// and make units under it). [`tidy`] tries again later.
pub(crate) struct Untidy(pub LockName);

/// What a try of one key came to.
pub(crate) enum Took {
    /// Held, with the grant's fence.
    Held(Held, u64),
    /// Held by others now: the key's lock file, to watch (and mark) until
    /// they release.
    Busy(LockFile),
    /// Free, but a waiter of another process is marked on it, and this take
    /// was to give way to one: the key's lock file, unlocked.
    GiveWay(LockFile),
    /// Free, but a lock held only for a moment was held too long: another
    /// reader's raise of the counter (see [`raise`]), or, for a new lock
    /// file, the directory's floor (see [`floor`]). The key's lock file,
    /// unlocked, to try again shortly.
    Stalled(LockFile),
}

/// Tries to take `name` in `kind` through `file`, its lock file opened by
/// the caller (a waiter keeps it between tries), for a holder labelled
/// `label`. Backend `me` takes it; with `give_way`, not when another
/// backend's waiter is marked on it. A mark of `me`'s own is cleared.
pub(crate) fn take(
    directory: &LockDirectory,
    name: &LockName,
    kind: LockKind,
    file: LockFile,
    me: Marker,
    give_way: bool,
    label: &HolderLabel,
) -> Result<Took> {
    let lock_mode = if kind.limit > 1 { LockMode::Exclusive } else { kind.mode };
    let file = match lock_named(directory, name, lock_mode, file)? {
        Ok(file) => file,
        Err(busy) => return Ok(Took::Busy(busy)),
    };
    let io = |err: std::io::Error| directory.failure(err.into());
    // One read for every record: most pairs make no other.
    let header = file.header().map_err(io)?;
    if give_way && header.marked_by_other(me) {
        file.unlock();
        return Ok(Took::GiveWay(file));
    }
    let clear_own_mark = |file: &LockFile| {
        if header.mark.1 == me {
            let _ = file.clear_mark();
        }
    };
    if kind.limit > 1 {
        clear_own_mark(&file);
    }
    check_limit(directory, name, &file, header.limit, kind.limit, lock_mode == LockMode::Exclusive)
        .inspect_err(|_| clear_own_mark(&file))?;
    if kind.limit == 1 {
        let taken = match kind.mode {
            LockMode::Exclusive => floor::advance(directory, &file, header.fence, Some(label))?.map(|fence| (fence, None)),
            LockMode::Shared => raise::raise(directory, name, &file, label)?.map(|(fence, slot)| (fence, Some(slot))),
        };
        // After the grant's record (see `holders`): from its lock to its
        // record a holder is named nowhere, so nothing else comes between.
        clear_own_mark(&file);
        let Some((fence, reader_slot)) = taken else {
            file.unlock();
            return Ok(Took::Stalled(file));
        };
        let held = match reader_slot {
            Some(slot) => Held::Shared(file, slot),
            None => Held::Exclusive(file),
        };
        return Ok(Took::Held(held, fence));
    }
    let mut units = Vec::with_capacity(kind.weight as usize);
    for unit in 0..kind.limit {
        if units.len() == kind.weight as usize {
            break;
        }
        let unit_file = directory.open_unit(name, unit)?;
        // A unit file changes only under the key's lock file, which this
        // take holds: its name names the file it opened.
        if unit_file.try_lock().map_err(io)? && directory.unit_names(name, unit, &unit_file) {
            units.push((unit, unit_file));
        }
    }
    if units.len() < kind.weight as usize {
        drop(units);
        file.unlock();
        return Ok(Took::Busy(file));
    }
    let Some(fence) = floor::advance(directory, &file, header.fence, None)? else {
        drop(units);
        file.unlock();
        return Ok(Took::Stalled(file));
    };
    let record = holders::encode(fence, label);
    for (_, unit_file) in &units {
        let _ = unit_file.write_at(&record, 0);
    }
    // Closing the lock file unlocks it; its watchers are woken by the
    // close and find the units taken.
    Ok(Took::Held(Held::Units(units), fence))
}

/// Locks `file` in `mode` if it is free and still the key's lock file (else
/// opens the path's new file and tries that): `Err(file)` when held by
/// others.
fn lock_named(
    directory: &LockDirectory,
    name: &LockName,
    mode: LockMode,
    mut file: LockFile,
) -> Result<std::result::Result<LockFile, LockFile>> {
    for _ in 0..REPLACED_TRIES {
        if !file.try_lock_in(mode).map_err(|err| directory.failure(err.into()))? {
            return Ok(Err(file));
        }
        if directory.names(name, &file) {
            return Ok(Ok(file));
        }
        // Removed by its last holder (or replaced) before we locked it: the
        // key's lock is the path's file now.
        file = directory.open_file(name)?;
    }
    Err(LockError::new(
        ErrorCode::ProviderFailed,
        format!("the lock files in {} keep being replaced; only this driver may write there", directory.path().display()),
    ))
}

/// Checks the limit record of `file` (locked), `recorded`, against `limit`:
/// refused when units of another limit are held; a stale record (its units
/// free) is replaced when `may_write` (the file is locked exclusive).
fn check_limit(directory: &LockDirectory, name: &LockName, file: &LockFile, recorded: u32, limit: u32, may_write: bool) -> Result<()> {
    let io = |err: std::io::Error| directory.failure(err.into());
    let recorded = recorded.max(1);
    if recorded == limit {
        return Ok(());
    }
    // Readers hold the lock file shared, so several look at the units at
    // once: they look with a shared try, which a unit's holder (exclusive)
    // still refuses but another reader's look does not.
    let look = if may_write { LockMode::Exclusive } else { LockMode::Shared };
    if recorded > 1 && units_held(directory, name, recorded, look)? {
        return Err(LockError::new(
            ErrorCode::InvalidArgument,
            format!(
                "the key is held by another process with limit {recorded}, and this acquire asks for limit {limit}: every caller of a key gives the same limit"
            ),
        )
        .with_details(serde_json::json!({ "driver": "file", "heldLimit": recorded, "limit": limit })));
    }
    if may_write {
        file.set_limit(if limit > 1 { limit } else { 0 }).map_err(io)?;
    }
    Ok(())
}

/// True when a unit file of `name` among the first `limit` is locked, as
/// a try to lock it in `look` tells. The unit files that exist are always
/// `.u0` up to some `.u<m>` (see [`remove_units`]): the look-ups stop at
/// the first one missing.
fn units_held(directory: &LockDirectory, name: &LockName, limit: u32, look: LockMode) -> Result<bool> {
    for unit in 0..limit {
        let Some(file) = directory.open_existing_unit(name, unit)? else { break };
        if !file.try_lock_in(look).map_err(|err| directory.failure(err.into()))? {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Releases `held` (of key `name`, granted `fence`). When no mark of
/// another backend's waiter wants the key and the grant was the key's last
/// holder, removes the key's files first, while still holding their locks:
/// see the module's documentation for why that is safe, and
/// [`super::floor`] for why the next file's fences stay above the removed
/// counter. Waiters of this backend are no reason to
/// keep them: one queued behind several keys, or leaving, may never come
/// back for this one, and one that does opens the path's new file. A key
/// whose files could not be removed yet comes back as [`Untidy`].
pub(crate) fn release(directory: &LockDirectory, name: &LockName, held: Held, fence: u64, me: Marker) -> Option<Untidy> {
    let (file, mode) = match held {
        Held::Exclusive(file) => {
            holders::clear_writer(&file, fence);
            (file, LockMode::Exclusive)
        }
        Held::Shared(file, slot) => {
            if let Some(slot) = slot {
                holders::clear_reader_slot(&file, slot, fence);
            }
            (file, LockMode::Shared)
        }
        Held::Units(units) => {
            for (_, unit_file) in &units {
                let _ = unit_file.write_at(&holders::CLEARED, 0);
            }
            let mine: Vec<u32> = units.iter().map(|(unit, _)| *unit).collect();
            drop(units);
            // Open (and close) the key's lock file even when not removing:
            // the close wakes the waiters watching it.
            let later = match directory.open_existing(name) {
                Ok(Some(file)) => !remove_if_free(directory, name, &file, me),
                Ok(None) => mine.iter().any(|unit| directory.unit_exists(name, *unit)),
                _ => false,
            };
            return later.then_some(Untidy(*name));
        }
    };
    // A shared holder is the last one if it can lock exclusive (a refusal
    // leaves it holding nothing, which is what it wants).
    let last = mode == LockMode::Exclusive || file.try_lock().unwrap_or(false);
    if !last || !directory.names(name, &file) {
        return None;
    }
    if file.marked_by_other(me) {
        // Read again once let go, as in `remove_if_free`.
        file.unlock();
        return (!file.marked_by_other(me)).then_some(Untidy(*name));
    }
    // A reader's own fence may be below the counter: readers granted after
    // it raised it further.
    let counter = if mode == LockMode::Exclusive { Ok(fence) } else { file.fence() };
    if let Ok(counter) = counter {
        directory.remove(name, counter);
    }
    None
}

/// Removes the files of counted key `name` if none of its
/// units is held and no waiter of another process is marked on it: what
/// the release that left [`Untidy`] could not do. False when that is still
/// not known (its lock file is locked or replaced now): try again later.
pub(crate) fn tidy(directory: &LockDirectory, name: &LockName, me: Marker) -> bool {
    let file = match directory.open_existing(name) {
        Ok(Some(file)) => file,
        // Unit files without a lock file: lock a new one to remove them
        // under (and then it).
        Ok(None) if directory.unit_exists(name, 0) => match directory.open_file(name) {
            Ok(file) => file,
            Err(_) => return true,
        },
        _ => return true,
    };
    remove_if_free(directory, name, &file, me)
}

/// Locks `file`, the lock file of key `name`, and removes the key's files
/// (see [`remove_units`]; a plain key has no unit files) unless a waiter of
/// another process is marked on it. False when that cannot be done now:
/// another process holds the lock file, or it is no longer the path's file,
/// or the mark that kept the files went meanwhile.
///
/// A marked waiter that leaves without a grant clears its mark and then
/// removes the files itself if it can lock the lock file (see the backend's
/// `stop_waiting`). Its lock is refused while this holds the file, so a mark
/// seen here is read again once this has let the file go: gone then, the
/// waiter may have found the file locked by this, and the removal is tried
/// again later.
pub(crate) fn remove_if_free(directory: &LockDirectory, name: &LockName, file: &LockFile, me: Marker) -> bool {
    match file.try_lock() {
        Ok(true) if directory.names(name, file) => {
            if !file.marked_by_other(me) {
                remove_units(directory, name, file);
                return true;
            }
            file.unlock();
            file.marked_by_other(me)
        }
        Ok(_) => false,
        Err(_) => true,
    }
}

/// Removes the unit files of a counted key and then its lock file, whose
/// lock the caller holds, if no unit is held.
///
/// What it costs follows the units that exist, not the key's limit (a
/// limit of a million would be a million look-ups): a taker creates unit
/// files in order from `.u0` (see [`take`]), under the key's lock file, so
/// the units that exist are `.u0` up to some `.u<m>`; the look-ups stop at
/// the first one missing, and the removal goes from the highest down, and
/// stops at a failure, so that what a crash or a failure leaves is such a
/// prefix still.
fn remove_units(directory: &LockDirectory, name: &LockName, file: &LockFile) {
    let mut free: Vec<(u32, LockFile)> = Vec::new();
    for unit in 0..u32::MAX {
        match directory.open_existing_unit(name, unit) {
            Ok(Some(unit_file)) if unit_file.try_lock().unwrap_or(false) => free.push((unit, unit_file)),
            Ok(None) => break,
            _ => return,
        }
    }
    for (unit, unit_file) in free.iter().rev() {
        if !directory.unit_names(name, *unit, unit_file) || !directory.remove_unit(name, *unit) {
            return;
        }
    }
    if let Ok(counter) = file.fence() {
        directory.remove(name, counter);
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::file::fence;

    /// The backend the tests take keys as.
    pub(crate) const ME: Marker = Marker { pid: 1, backend: 1 };

    /// The holder label of the tests' grants.
    pub(crate) fn label() -> HolderLabel {
        HolderLabel::new("test").unwrap()
    }

    /// A fresh lock directory of this test process.
    pub(crate) fn fresh_directory(test: &str) -> LockDirectory {
        let path = std::env::temp_dir().join(format!("dokebi-lock-take-{test}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        LockDirectory::open("test", path.to_str().unwrap()).unwrap()
    }

    /// The files of `directory` but its fence floor, which stays.
    pub(crate) fn entries(directory: &LockDirectory) -> usize {
        let floor = std::ffi::OsStr::new(crate::file::name::FLOOR_FILE);
        std::fs::read_dir(directory.path()).unwrap().filter(|entry| entry.as_ref().unwrap().file_name() != floor).count()
    }

    /// Takes one unit of `name`, counted to 2, as process 1.
    pub(crate) fn take_a_unit(directory: &LockDirectory, name: &LockName) -> (Held, u64) {
        let kind = LockKind { mode: LockMode::Exclusive, limit: 2, weight: 1 };
        match take(directory, name, kind, directory.open_file(name).unwrap(), ME, false, &label()).unwrap() {
            Took::Held(held, fence) => (held, fence),
            _ => panic!("the key was free"),
        }
    }

    #[test]
    fn the_last_release_of_a_counted_key_removes_its_files() {
        let directory = fresh_directory("last");
        let name = LockName::new("ns", "k");
        let (held, fence) = take_a_unit(&directory, &name);
        assert_eq!(entries(&directory), 2, "the lock file and unit 0");
        assert!(release(&directory, &name, held, fence, ME).is_none());
        assert_eq!(entries(&directory), 0);
    }

    #[test]
    fn a_release_that_finds_the_lock_file_locked_leaves_the_key_untidy_until_tidied() {
        let directory = fresh_directory("busy");
        let name = LockName::new("ns", "k");
        let (held, fence) = take_a_unit(&directory, &name);
        // Another process's take or release, holding the key's lock file
        // (a second open file: its lock conflicts with ours, as another
        // process's would).
        let other = directory.open_file(&name).unwrap();
        assert!(other.try_lock().unwrap());
        let Untidy(untidy) = release(&directory, &name, held, fence, ME).expect("its files were not removed");
        assert_eq!(untidy, name);
        assert_eq!(entries(&directory), 2);
        assert!(!tidy(&directory, &name, ME), "not known while the lock file is locked");
        drop(other);
        assert!(tidy(&directory, &name, ME));
        assert_eq!(entries(&directory), 0, "nothing is left");
    }

    #[test]
    fn unit_files_left_without_their_lock_file_are_tidied() {
        let directory = fresh_directory("orphans");
        let name = LockName::new("ns", "k");
        let (held, fence) = take_a_unit(&directory, &name);
        // What Windows leaves when it keeps a removed lock file's name while
        // another process holds it open: units made under it outlive it.
        std::fs::remove_file(directory.file_path(&name)).unwrap();
        release(&directory, &name, held, fence, ME).expect("its unit file was left");
        assert_eq!(entries(&directory), 1);
        assert!(tidy(&directory, &name, ME));
        assert_eq!(entries(&directory), 0, "the unit file and the lock file made to remove it under are gone");
    }

    /// Entries of `directory` probed by `operation`.
    fn probes<T>(directory: &LockDirectory, operation: impl FnOnce() -> T) -> (T, usize) {
        use std::sync::atomic::Ordering;
        let before = directory.probes.load(Ordering::Relaxed);
        let result = operation();
        (result, directory.probes.load(Ordering::Relaxed) - before)
    }

    /// A counted key of a million units costs what its units held cost, not
    /// a look-up per unit of its limit: its take, its release (which removes
    /// its files), another limit's refusal, and a tidy of it.
    #[test]
    fn a_counted_key_costs_the_units_that_exist_not_its_limit() {
        let directory = fresh_directory("million");
        let name = LockName::new("ns", "k");
        let million = LockKind { mode: LockMode::Exclusive, limit: 1_000_000, weight: 2 };
        let take_million = || match take(&directory, &name, million, directory.open_file(&name).unwrap(), ME, false, &label()).unwrap() {
            Took::Held(held, fence) => (held, fence),
            _ => panic!("the key has room"),
        };
        let ((first, first_fence), cost) = probes(&directory, take_million);
        assert!(cost <= 10, "a take probed {cost} entries");
        let (second, second_fence) = take_million();
        let other_limit = LockKind { mode: LockMode::Exclusive, limit: 3, weight: 1 };
        let (refused, cost) =
            probes(&directory, || take(&directory, &name, other_limit, directory.open_file(&name).unwrap(), ME, false, &label()));
        assert_eq!(refused.err().map(|err| err.code()), Some(ErrorCode::InvalidArgument));
        assert!(cost <= 20, "checking another limit against the units held probed {cost} entries");
        let (untidy, cost) = probes(&directory, || release(&directory, &name, first, first_fence, ME));
        assert!(untidy.is_none());
        assert!(cost <= 20, "a release with units left probed {cost} entries");
        let (untidy, cost) = probes(&directory, || release(&directory, &name, second, second_fence, ME));
        assert!(untidy.is_none());
        assert!(cost <= 20, "the last release probed {cost} entries");
        assert_eq!(entries(&directory), 0, "its files are removed");
        let (_, cost) = probes(&directory, || tidy(&directory, &name, ME));
        assert!(cost <= 10, "a tidy probed {cost} entries");
    }

    /// A marked waiter that leaves clears its mark, then removes the key's
    /// files if it can lock the key's lock file (the backend's
    /// `stop_waiting`); the key's last release, holding that file, leaves the
    /// files to a mark it sees. Raced: one of the two removes them, or the
    /// release comes back untidy, for a later try that does. Answers the
    /// rounds that left them.
    fn race_a_leaving_waiter(test: &str, kind: LockKind) -> usize {
        let directory = fresh_directory(test);
        let name = LockName::new("ns", "k");
        let waiter = Marker { pid: std::process::id(), backend: 2 };
        let mut left = 0;
        for _ in 0..3_000 {
            let Took::Held(held, fence) = take(&directory, &name, kind, directory.open_file(&name).unwrap(), ME, false, &label()).unwrap()
            else {
                panic!("the key was free")
            };
            let waits_on = directory.open_file(&name).unwrap();
            waits_on.mark_waiting(fence::clock_us() + 10_000_000, waiter).unwrap();
            let barrier = std::sync::Barrier::new(2);
            let untidy = std::thread::scope(|scope| {
                let (directory, name, barrier) = (&directory, &name, &barrier);
                scope.spawn(move || {
                    barrier.wait();
                    waits_on.clear_mark().unwrap();
                    remove_if_free(directory, name, &waits_on, waiter);
                });
                barrier.wait();
                release(directory, name, held, fence, ME)
            });
            if let Some(Untidy(untidy)) = untidy {
                assert!(tidy(&directory, &untidy, ME));
            }
            if entries(&directory) > 0 {
                left += 1;
                assert!(tidy(&directory, &name, ME) && entries(&directory) == 0);
            }
        }
        left
    }

    #[test]
    fn a_leaving_waiter_racing_the_last_release_never_leaves_a_counted_key_s_files() {
        let counted = LockKind { mode: LockMode::Exclusive, limit: 2, weight: 1 };
        assert_eq!(race_a_leaving_waiter("leaving-counted", counted), 0, "rounds that left the key's files");
    }

    #[test]
    fn a_leaving_waiter_racing_the_last_release_never_leaves_a_plain_key_s_file() {
        for (label, mode) in [("leaving-writer", LockMode::Exclusive), ("leaving-reader", LockMode::Shared)] {
            let kind = LockKind { mode, limit: 1, weight: 1 };
            assert_eq!(race_a_leaving_waiter(label, kind), 0, "{mode:?}: rounds that left the key's file");
        }
    }

    #[test]
    fn a_unit_held_keeps_the_key_s_files() {
        let directory = fresh_directory("held");
        let name = LockName::new("ns", "k");
        let (first, first_fence) = take_a_unit(&directory, &name);
        let (second, _) = take_a_unit(&directory, &name);
        assert!(release(&directory, &name, first, first_fence, ME).is_none());
        assert_eq!(entries(&directory), 3, "the lock file and both units: one is held");
        assert!(tidy(&directory, &name, ME), "a holder's release will remove them");
        assert_eq!(entries(&directory), 3);
        drop(second);
    }
}

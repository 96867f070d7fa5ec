//! One open lock file: opened without following symbolic links, checked to
//! be a regular file of ours, locked with the kernel's lock (`flock`,
//! `LockFileEx`: see [`super::sys`]) and never with a blocking call.

use std::fs::File;
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::directory::LockFileError;
use super::fence;
use super::holders;
use super::sys::{self, FileId, Opened, User};
use crate::acquire::LockMode;
use crate::holder::HolderLabel;

/// Where the waiting mark starts in a lock file, after the fence record:
/// three records, its deadline, its process and its backend (see
/// [`Marker`]).
const MARK_AT: u64 = 32;

/// The bytes of a waiting mark.
const MARK_LEN: usize = 3 * fence::RECORD_LEN;

/// Where the limit record of a counted key starts, after the waiting mark:
/// the limit its holders agreed on (0 or 1 for a plain or shared key).
const LIMIT_AT: u64 = 96;

const _: () = assert!(MARK_AT as usize + MARK_LEN <= LIMIT_AT as usize);

/// How long [`LockFile::try_lock_briefly`] tries a lock held only for one
/// read and one write (a key's raise lock, the directory's floor): such a
/// hold takes microseconds; one not over within this is held by a process
/// descheduled or stopped in it.
pub(crate) const BRIEF_HOLD: Duration = Duration::from_millis(2);

/// Who writes a waiting mark: one backend of one process. The process
/// alone is not enough: two backends of one process on one directory each
/// took the other's mark for their own. `backend` is 0 in a mark of an
/// older version (pid only), which no backend of this one takes for its
/// own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Marker {
    pub pid: u32,
    pub backend: u64,
}

impl Marker {
    /// The identity of a backend opened now in this process: the process id
    /// and a number above every earlier backend's of this process, taken
    /// from the microsecond clock so that two copies of the library in one
    /// process (two addons) do not hand out the same numbers.
    pub fn new_backend() -> Marker {
        static LAST: AtomicU64 = AtomicU64::new(0);
        let now = fence::clock_us();
        let next = |last: u64| last.saturating_add(1).max(now);
        let (Ok(previous) | Err(previous)) = LAST.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |last| Some(next(last)));
        Marker { pid: std::process::id(), backend: next(previous) }
    }

    /// No mark.
    const NONE: Marker = Marker { pid: 0, backend: 0 };
}

/// An open lock file. Closing it (dropping it) releases its kernel lock,
/// as the death of the process does.
pub(crate) struct LockFile {
    file: File,
    id: FileId,
    /// The process that opened it.
    pid: u32,
}

impl Drop for LockFile {
    /// Unlocks before closing, in the process that opened the file: a lock
    /// lasts while any copy of its open file does, and a child forked
    /// without `exec` holds copies of every file open at the fork, so a
    /// close alone would leave the key locked for the life of the child. A
    /// child's copies only close: the lock is its parent's.
    fn drop(&mut self) {
        if std::process::id() == self.pid {
            self.unlock();
        }
    }
}

impl LockFile {
    /// Opens `name` of the directory `dir` (at `dir_path`) read-write,
    /// creating it (`0600` on Unix) if missing when `create` (else `None`
    /// when missing); refuses a symbolic link (never followed), anything
    /// but a regular file and a file `user` does not own.
    pub fn open(
        dir: &File,
        dir_path: &Path,
        name: &str,
        user: &User,
        create: bool,
    ) -> std::result::Result<Option<LockFile>, LockFileError> {
        let file = match sys::open_no_follow_at(dir, dir_path, name, create)? {
            Opened::File(file) => file,
            Opened::Missing if create => return Err(LockFileError::Io(io::ErrorKind::NotFound.into())),
            Opened::Missing => return Ok(None),
            Opened::Link => {
                return Err(LockFileError::Refused("a lock file is a symbolic link; remove it (someone or something planted it)".into()))
            }
        };
        let metadata = file.metadata()?;
        if !metadata.file_type().is_file() {
            return Err(LockFileError::Refused("a lock file is not a regular file; remove it".into()));
        }
        if let Some(owner) = sys::foreign_owner(&file, &metadata, user)? {
            return Err(LockFileError::Refused(format!(
                "a lock file is owned by user {owner}, not by this process's user {user}; remove it"
            )));
        }
        let id = sys::file_id(&file, &metadata)?;
        Ok(Some(LockFile { file, id, pid: std::process::id() }))
    }

    /// Takes the kernel lock if it is free now: `Ok(false)` when another
    /// open file (of this process or another) holds it. Never blocks.
    pub fn try_lock(&self) -> io::Result<bool> {
        self.try_lock_in(LockMode::Exclusive)
    }

    /// [`LockFile::try_lock`] in `mode`: a shared lock is taken together
    /// with other shared ones. Changing the mode of a lock this file holds
    /// is not atomic (the old lock is dropped first): refused, it leaves
    /// the file holding nothing.
    pub fn try_lock_in(&self, mode: LockMode) -> io::Result<bool> {
        sys::try_lock(&self.file, mode)
    }

    /// [`LockFile::try_lock_in`] `mode` again and again for at most
    /// [`BRIEF_HOLD`], for a lock others hold only for a moment: `Ok(false)`
    /// when it was held all that time.
    pub fn try_lock_briefly(&self, mode: LockMode) -> io::Result<bool> {
        let give_up = Instant::now() + BRIEF_HOLD;
        while !self.try_lock_in(mode)? {
            if Instant::now() >= give_up {
                return Ok(false);
            }
            std::thread::yield_now();
        }
        Ok(true)
    }

    /// Releases the kernel lock and keeps the file open.
    pub fn unlock(&self) {
        sys::unlock(&self.file);
    }

    /// True when `id` (of the lock file's path) is this open file.
    pub fn is(&self, id: FileId) -> bool {
        id == self.id
    }

    /// Writes the waiting mark: a waiter of backend `marker` was refused
    /// the lock and counts on having it before `until_us` (the wall clock,
    /// in microseconds). Written without the lock (the fence record is not
    /// touched); the last writer wins, which is enough: see
    /// [`super::core`] on fairness.
    pub fn mark_waiting(&self, until_us: u64, marker: Marker) -> io::Result<()> {
        let mut mark = [0u8; MARK_LEN];
        let records = [until_us, marker.pid.into(), marker.backend];
        for (record, value) in mark.chunks_exact_mut(fence::RECORD_LEN).zip(records) {
            record.copy_from_slice(&fence::encode(value));
        }
        sys::write_all_at(&self.file, &mark, MARK_AT)
    }

    /// The waiting mark: `(until_us, marker)`, zeros when none (or torn).
    pub fn waiting_mark(&self) -> (u64, Marker) {
        let mut mark = [0u8; MARK_LEN];
        match sys::read_at(&self.file, &mut mark, MARK_AT) {
            Ok(n) if n == mark.len() => decode_mark(&mark),
            _ => (0, Marker::NONE),
        }
    }

    /// Clears the waiting mark (while holding the lock: a mark of this
    /// backend once its waiter is granted).
    pub fn clear_mark(&self) -> io::Result<()> {
        sys::write_all_at(&self.file, &[0u8; MARK_LEN], MARK_AT)
    }

    /// True when a fresh waiting mark of another backend than `marker` (of
    /// this process or another) is in the file: a waiter there was refused
    /// the lock and is to have it first.
    pub fn marked_by_other(&self, marker: Marker) -> bool {
        marked_by_other(self.waiting_mark(), marker)
    }

    /// The fence, waiting mark and limit records, in one read (a holder's
    /// view of the file).
    pub fn header(&self) -> io::Result<Header> {
        let mut bytes = [0u8; LIMIT_AT as usize + fence::RECORD_LEN];
        let read = self.read_at(&mut bytes, 0)?;
        let record = |at: u64| {
            let at = at as usize;
            if read >= at + fence::RECORD_LEN {
                fence::decode(&bytes[at..at + fence::RECORD_LEN])
            } else {
                fence::decode(&bytes[at.min(read)..read])
            }
        };
        let at = MARK_AT as usize;
        let mark = if read >= at + MARK_LEN { decode_mark(&bytes[at..at + MARK_LEN]) } else { (0, Marker::NONE) };
        Ok(Header { fence: record(0), mark, limit: u32::try_from(record(LIMIT_AT)).unwrap_or(u32::MAX) })
    }

    /// Writes the fence after `last` (the counter read by the caller, or
    /// the directory's floor: see [`super::floor::advance`]) and answers it;
    /// called while holding the kernel lock exclusive, or shared and the
    /// key's raise lock (see [`super::raise`]). Not synced (see
    /// [`super::fence`]).
    pub fn advance_fence_from(&self, last: u64) -> io::Result<u64> {
        let next = fence::next(last, fence::clock_us());
        self.set_fence(next)?;
        Ok(next)
    }

    /// [`LockFile::advance_fence_from`] for a writer labelled `label`,
    /// whose record (see [`super::holders`]) is written first: a reader of
    /// the file between the two writes finds the writer's record ahead of
    /// the counter, not a gap. Not written (a hint), it costs the grant
    /// nothing; the fence not written, the record is cleared.
    pub fn advance_fence_recorded(&self, last: u64, label: &HolderLabel) -> io::Result<u64> {
        let next = fence::next(last, fence::clock_us());
        let _ = self.write_at(&holders::encode(next, label), holders::WRITER_AT);
        if let Err(err) = self.set_fence(next) {
            holders::clear_writer(self, last);
            return Err(err);
        }
        Ok(next)
    }

    /// Writes `fence` as the file's fence record (not synced).
    pub fn set_fence(&self, fence: u64) -> io::Result<()> {
        sys::write_all_at(&self.file, &fence::encode(fence), 0)
    }

    /// The last fence granted through this file (0 for a fresh one).
    pub fn fence(&self) -> io::Result<u64> {
        self.read_record(0)
    }

    /// The limit recorded by the holders of a counted key (0 or 1: none).
    pub fn limit(&self) -> io::Result<u32> {
        Ok(u32::try_from(self.read_record(LIMIT_AT)?).unwrap_or(u32::MAX))
    }

    /// Records the limit of the key's holders; called while holding the
    /// kernel lock exclusive.
    pub fn set_limit(&self, limit: u32) -> io::Result<()> {
        sys::write_all_at(&self.file, &fence::encode(limit.into()), LIMIT_AT)
    }

    fn read_record(&self, at: u64) -> io::Result<u64> {
        let mut record = [0u8; fence::RECORD_LEN];
        let read = self.read_at(&mut record, at)?;
        Ok(fence::decode(&record[..read]))
    }

    /// Reads `bytes` from `at`, as many as the file has there: how many.
    pub fn read_at(&self, bytes: &mut [u8], at: u64) -> io::Result<usize> {
        let mut read = 0;
        while read < bytes.len() {
            match sys::read_at(&self.file, &mut bytes[read..], at + read as u64)? {
                0 => break,
                n => read += n,
            }
        }
        Ok(read)
    }

    /// Writes `bytes` at `at` (a holder's record: see [`super::holders`]).
    pub fn write_at(&self, bytes: &[u8], at: u64) -> io::Result<()> {
        sys::write_all_at(&self.file, bytes, at)
    }
}

/// What a lock file records: the last fence, the waiting mark
/// `(until_us, marker)` and the limit of a counted key's holders.
pub(crate) struct Header {
    pub fence: u64,
    pub mark: (u64, Marker),
    pub limit: u32,
}

/// The waiting mark of its [`MARK_LEN`] bytes.
fn decode_mark(mark: &[u8]) -> (u64, Marker) {
    let record = |index: usize| fence::decode(&mark[index * fence::RECORD_LEN..(index + 1) * fence::RECORD_LEN]);
    (record(0), Marker { pid: u32::try_from(record(1)).unwrap_or(0), backend: record(2) })
}

/// True when `mark` is a fresh mark of a live process's backend other than
/// `me`. A mark of a process that has ended (its waiter killed, say) is
/// stale whatever its deadline.
fn marked_by_other((until, marker): (u64, Marker), me: Marker) -> bool {
    marker.pid != 0 && marker != me && until > fence::clock_us() && sys::process_lives(marker.pid)
}

impl Header {
    /// [`LockFile::marked_by_other`] of the header's mark.
    pub fn marked_by_other(&self, me: Marker) -> bool {
        marked_by_other(self.mark, me)
    }
}

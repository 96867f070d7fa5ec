//! One open lock file: opened without following symbolic links, checked to
//! be a regular file of ours, locked with the kernel's `flock` and never
//! with a blocking call.

use std::fs::{File, Metadata, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::Path;

use super::directory::LockFileError;
use super::fence;

/// Where the waiting mark starts in a lock file, after the fence record.
const MARK_AT: u64 = 32;

/// An open lock file. Closing it (dropping it) releases its kernel lock,
/// as the death of the process does.
pub(crate) struct LockFile {
    file: File,
    device: u64,
    inode: u64,
}

impl LockFile {
    /// Opens `path` read-write, creating it `0600` if missing; refuses a
    /// symbolic link (`O_NOFOLLOW`), anything but a regular file and a file
    /// `user` does not own.
    pub fn open(path: &Path, user: u32) -> std::result::Result<LockFile, LockFileError> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .mode(0o600)
            .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
            .open(path)
            .map_err(|err| {
                if err.raw_os_error() == Some(rustix::io::Errno::LOOP.raw_os_error()) {
                    LockFileError::Refused("a lock file is a symbolic link; remove it (someone or something planted it)".into())
                } else {
                    LockFileError::Io(err)
                }
            })?;
        let metadata = file.metadata()?;
        if !metadata.file_type().is_file() {
            return Err(LockFileError::Refused("a lock file is not a regular file; remove it".into()));
        }
        if metadata.uid() != user {
            return Err(LockFileError::Refused(format!(
                "a lock file is owned by user {}, not by this process's user {user}; remove it",
                metadata.uid()
            )));
        }
        Ok(LockFile { file, device: metadata.dev(), inode: metadata.ino() })
    }

    /// Takes the kernel lock if it is free now: `Ok(false)` when another
    /// open file (of this process or another) holds it. Never blocks.
    pub fn try_lock(&self) -> io::Result<bool> {
        // rustix's safe `flock` rather than `File::try_lock`, which needs
        // Rust 1.89 (the crate's floor is 1.85); the same system call.
        match rustix::fs::flock(&self.file, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => Ok(true),
            Err(rustix::io::Errno::WOULDBLOCK) => Ok(false),
            Err(err) => Err(err.into()),
        }
    }

    /// True when `metadata` (of the lock file's path) is this open file.
    pub fn is(&self, metadata: &Metadata) -> bool {
        metadata.dev() == self.device && metadata.ino() == self.inode
    }

    /// Writes the waiting mark: a waiter of process `pid` was refused the
    /// lock and counts on having it before `until_us` (the wall clock, in
    /// microseconds). Written without the lock (the fence record is not
    /// touched); the last writer wins, which is enough: see
    /// [`super::core`] on fairness.
    pub fn mark_waiting(&self, until_us: u64, pid: u32) -> io::Result<()> {
        let mut mark = [0u8; 2 * fence::RECORD_LEN];
        mark[..fence::RECORD_LEN].copy_from_slice(&fence::encode(until_us));
        mark[fence::RECORD_LEN..].copy_from_slice(&fence::encode(pid.into()));
        self.file.write_all_at(&mark, MARK_AT)
    }

    /// The waiting mark: `(until_us, pid)`, zeros when none (or torn).
    pub fn waiting_mark(&self) -> (u64, u32) {
        let mut mark = [0u8; 2 * fence::RECORD_LEN];
        match self.file.read_at(&mut mark, MARK_AT) {
            Ok(n) if n == mark.len() => {
                let (until, pid) = mark.split_at(fence::RECORD_LEN);
                (fence::decode(until), u32::try_from(fence::decode(pid)).unwrap_or(0))
            }
            _ => (0, 0),
        }
    }

    /// Clears the waiting mark (while holding the lock: a mark of this
    /// process once its waiter is granted).
    pub fn clear_mark(&self) -> io::Result<()> {
        self.file.write_all_at(&[0u8; 2 * fence::RECORD_LEN], MARK_AT)
    }

    /// Reads the last fence, writes and answers the next one; called while
    /// holding the kernel lock. Not synced (see [`super::fence`]).
    pub fn advance_fence(&self) -> io::Result<u64> {
        let mut record = [0u8; fence::RECORD_LEN];
        let mut read = 0;
        while read < record.len() {
            match self.file.read_at(&mut record[read..], read as u64)? {
                0 => break,
                n => read += n,
            }
        }
        let next = fence::next(fence::decode(&record[..read]), fence::clock_us());
        self.file.write_all_at(&fence::encode(next), 0)?;
        Ok(next)
    }
}

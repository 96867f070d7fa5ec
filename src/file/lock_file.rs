//! One open lock file: opened without following symbolic links, checked to
//! be a regular file of ours, locked with the kernel's `flock` and never
//! with a blocking call.

use std::fs::{File, Metadata, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::Path;

use super::directory::LockFileError;
use super::fence;

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

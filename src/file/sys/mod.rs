//! What the file driver asks of the operating system, one interface with a
//! Unix half (`unix.rs`, through rustix) and a Windows half (`windows.rs`,
//! through windows-sys):
//!
//! - [`open_no_follow`]: a lock file opened read-write without following a
//!   symbolic link (Unix `O_NOFOLLOW`; Windows
//!   `FILE_FLAG_OPEN_REPARSE_POINT`, a reparse point refused);
//!   [`User`], [`current_user`] and [`foreign_owner`]: who owns it;
//! - [`try_lock`] and [`unlock`]: its kernel lock, never blocking (Unix
//!   `flock`; Windows `LockFileEx` on one byte far past the records, see
//!   `windows.rs`); [`read_at`] and [`write_all_at`]: its records;
//! - [`FileId`], [`file_id`] and [`path_id`]: which file an open file and a
//!   path are (device and inode; volume serial number and file index);
//! - [`process_lives`]: whether a waiting mark's process still exists;
//! - [`create_private_dir`], [`open_dir`], [`check_private`] and
//!   [`network_file_system`]: the lock directory ([`PRIVATE_DIR`] and
//!   [`LOCAL_DIR_EXAMPLE`]: the platform's advice in its refusals).

#[cfg(unix)]
#[path = "unix.rs"]
mod imp;
#[cfg(windows)]
#[path = "windows.rs"]
mod imp;

pub(crate) use imp::{
    check_private, create_private_dir, current_user, file_id, foreign_owner, network_file_system, open_dir, open_no_follow, path_id,
    process_lives, read_at, try_lock, unlock, write_all_at, FileId, User, LOCAL_DIR_EXAMPLE, PRIVATE_DIR,
};

/// What opening a lock file's path found.
pub(crate) enum Opened {
    /// The file, open read-write.
    File(std::fs::File),
    /// Nothing (only when not creating).
    Missing,
    /// A symbolic link (or, on Windows, another reparse point), not
    /// followed.
    Link,
}

//! What the file driver asks of the operating system, one interface with a
//! Unix half (`unix.rs`, through rustix) and a Windows half (`windows.rs`,
//! through windows-sys):
//!
//! - [`open_no_follow_at`]: a lock file of the directory opened read-write
//!   without following a symbolic link (Unix `openat` with `O_NOFOLLOW`,
//!   relative to the directory's handle; Windows, by path,
//!   `FILE_FLAG_OPEN_REPARSE_POINT`, a reparse point refused); [`remove_at`]:
//!   its removal (`unlinkat`);
//!   [`User`], [`current_user`] and [`foreign_owner`]: who owns it;
//! - [`try_lock`] and [`unlock`]: its kernel lock, never blocking (Unix
//!   `flock`; Windows `LockFileEx` on one byte far past the records, see
//!   `windows.rs`); [`read_at`] and [`write_all_at`]: its records;
//! - [`FileId`], [`file_id`] and [`id_at`]: which file an open file and a
//!   name of the directory are (device and inode, `fstatat` without
//!   following; volume serial number and file index);
//! - [`process_lives`]: whether a waiting mark's process still exists;
//!   [`too_many_open_files`]: an open refused for want of descriptors;
//! - [`create_private_dir`], [`open_dir`], [`dir_named`] (the path still
//!   names the directory opened), [`check_private`] and
//!   [`network_file_system`]: the lock directory ([`PRIVATE_DIR`] and
//!   [`LOCAL_DIR_EXAMPLE`]: the platform's advice in its refusals).

#[cfg(unix)]
#[path = "unix.rs"]
mod imp;
#[cfg(windows)]
#[path = "windows.rs"]
mod imp;

pub(crate) use imp::{
    check_private, create_private_dir, current_user, dir_named, file_id, foreign_owner, id_at, network_file_system, open_dir,
    open_no_follow_at, process_lives, read_at, remove_at, too_many_open_files, try_lock, unlock, write_all_at, FileId, User,
    LOCAL_DIR_EXAMPLE, PRIVATE_DIR,
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

//! The Unix half of [`super`]: `O_NOFOLLOW`, `flock`, device and inode,
//! `kill(pid, 0)`, mode bits and `fstatfs`.

use std::fs::{DirBuilder, File, Metadata};
use std::io;
use std::os::unix::fs::{DirBuilderExt, FileExt, MetadataExt};
use std::path::Path;

use super::Opened;
use crate::acquire::LockMode;

/// A user: the effective user id.
pub(crate) type User = u32;

/// This process's effective user, who must own the directory and its lock
/// files.
pub(crate) fn current_user() -> io::Result<User> {
    Ok(rustix::process::geteuid().as_raw())
}

/// Opens `name` in the directory `dir` (whose path is `_dir_path`)
/// read-write, creating it `0600` if missing when `create`; a symbolic
/// link is not followed (`O_NOFOLLOW`). Relative to the directory's handle
/// (`openat`): a directory swapped under its path since it was opened
/// cannot send the open elsewhere.
pub(crate) fn open_no_follow_at(dir: &File, _dir_path: &Path, name: &str, create: bool) -> io::Result<Opened> {
    use rustix::fs::{Mode, OFlags};
    let mut flags = OFlags::RDWR | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    if create {
        flags |= OFlags::CREATE;
    }
    match rustix::fs::openat(dir, name, flags, Mode::from_raw_mode(0o600)) {
        Ok(fd) => Ok(Opened::File(File::from(fd))),
        Err(rustix::io::Errno::NOENT) if !create => Ok(Opened::Missing),
        Err(rustix::io::Errno::LOOP) => Ok(Opened::Link),
        Err(err) => Err(err.into()),
    }
}

/// The owner of `file` (whose metadata is `metadata`) when it is not
/// `user`.
pub(crate) fn foreign_owner(_file: &File, metadata: &Metadata, user: &User) -> io::Result<Option<User>> {
    Ok((metadata.uid() != *user).then_some(metadata.uid()))
}

/// Takes `file`'s `flock` in `mode` if it is free now: `Ok(false)` when
/// another open file holds it. Never blocks. Changing the mode of a lock
/// the file holds is not atomic (`flock` drops the old lock first):
/// refused, it leaves the file holding nothing.
pub(crate) fn try_lock(file: &File, mode: LockMode) -> io::Result<bool> {
    use rustix::fs::FlockOperation;
    let operation = match mode {
        LockMode::Exclusive => FlockOperation::NonBlockingLockExclusive,
        LockMode::Shared => FlockOperation::NonBlockingLockShared,
    };
    // rustix's safe `flock` rather than `File::try_lock`, which needs
    // Rust 1.89 (the crate's floor is 1.85); the same system call.
    match rustix::fs::flock(file, operation) {
        Ok(()) => Ok(true),
        Err(rustix::io::Errno::WOULDBLOCK) => Ok(false),
        Err(err) => Err(err.into()),
    }
}

/// Releases `file`'s lock, keeping the file open.
pub(crate) fn unlock(file: &File) {
    let _ = rustix::fs::flock(file, rustix::fs::FlockOperation::Unlock);
}

/// Reads into `buf` from `offset`: the bytes read.
pub(crate) fn read_at(file: &File, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    file.read_at(buf, offset)
}

/// Writes all of `buf` at `offset`.
pub(crate) fn write_all_at(file: &File, buf: &[u8], offset: u64) -> io::Result<()> {
    file.write_all_at(buf, offset)
}

/// Which file a file is: its device and inode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FileId(u64, u64);

/// The identity of `file`, whose metadata is `metadata`.
pub(crate) fn file_id(_file: &File, metadata: &Metadata) -> io::Result<FileId> {
    Ok(FileId(metadata.dev(), metadata.ino()))
}

/// The identity of the file `name` names in the directory `dir` (a link
/// itself, not followed: `fstatat` relative to the handle); `None` when it
/// names nothing.
pub(crate) fn id_at(dir: &File, _dir_path: &Path, name: &str) -> Option<FileId> {
    let stat = rustix::fs::statat(dir, name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW).ok()?;
    // `st_dev` and `st_ino` are signed or unsigned words depending on the
    // platform.
    #[allow(clippy::unnecessary_cast, clippy::useless_conversion)]
    Some(FileId(stat.st_dev as u64, stat.st_ino as u64))
}

/// Removes `name` from the directory `dir` (`unlinkat`, relative to the
/// handle).
pub(crate) fn remove_at(dir: &File, _dir_path: &Path, name: &str) -> io::Result<()> {
    Ok(rustix::fs::unlinkat(dir, name, rustix::fs::AtFlags::empty())?)
}

/// True while `path` (not followed at its last component) names the
/// directory `dir` was opened as: false once the directory was removed and
/// made again, or a symbolic link on the path was pointed elsewhere.
pub(crate) fn dir_named(dir: &File, path: &Path) -> bool {
    match (std::fs::symlink_metadata(path), dir.metadata()) {
        (Ok(named), Ok(held)) => named.dev() == held.dev() && named.ino() == held.ino(),
        _ => false,
    }
}

/// True when `err` says the process (`EMFILE`) or the system (`ENFILE`) has
/// no file descriptor left.
pub(crate) fn too_many_open_files(err: &io::Error) -> bool {
    [rustix::io::Errno::MFILE, rustix::io::Errno::NFILE].iter().any(|errno| err.raw_os_error() == Some(errno.raw_os_error()))
}

/// True unless process `pid` surely does not exist (`kill(pid, 0)` says so).
pub(crate) fn process_lives(pid: u32) -> bool {
    let Some(pid) = i32::try_from(pid).ok().and_then(rustix::process::Pid::from_raw) else { return false };
    !matches!(rustix::process::test_kill_process(pid), Err(rustix::io::Errno::SRCH))
}

/// How to make a lock directory private, for the error that refuses one.
pub(crate) const PRIVATE_DIR: &str = "owned by this user with mode 0700";

/// Where a local lock directory can go, for the error that refuses a
/// network file system.
pub(crate) const LOCAL_DIR_EXAMPLE: &str = "under /var/lib/<app> for a service, ~/.local/state/<app> for a user";

/// Creates the directory `path` `0700`, with any missing parents; one
/// already there is kept as it is (and checked by [`check_private`]).
pub(crate) fn create_private_dir(path: &Path) -> io::Result<()> {
    DirBuilder::new().recursive(true).mode(0o700).create(path)
}

/// Opens the directory `path`, held open to re-check it cheaply and to
/// open its files relative to it: `O_DIRECTORY | O_NOFOLLOW`, a symbolic
/// link at its last component refused (one higher up is followed here, and
/// [`dir_named`] notices when it is pointed elsewhere later).
pub(crate) fn open_dir(path: &Path) -> io::Result<File> {
    use rustix::fs::{Mode, OFlags};
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    match rustix::fs::open(path, flags, Mode::empty()) {
        Ok(fd) => Ok(File::from(fd)),
        // `O_NOFOLLOW` on a link is `ELOOP`; with `O_DIRECTORY` some
        // systems answer `ENOTDIR`.
        Err(rustix::io::Errno::LOOP | rustix::io::Errno::NOTDIR) if std::fs::symlink_metadata(path).is_ok_and(|m| m.is_symlink()) => {
            Err(io::Error::other("it is a symbolic link; give the directory it points to"))
        }
        Err(err) => Err(err.into()),
    }
}

/// Permission bits that let users other than the owner add or remove
/// entries: group- and world-writable.
const WRITABLE_BY_OTHERS: u32 = 0o022;

/// Refuses (saying why, and how to fix it) a directory that is not one, is
/// owned by another user than `user` or root, or that the group or others
/// may write into.
pub(crate) fn check_private(directory: &File, user: &User) -> std::result::Result<(), String> {
    let metadata = directory.metadata().map_err(|err| format!("could not be inspected ({err})"))?;
    if !metadata.is_dir() {
        return Err("is not a directory".into());
    }
    if metadata.uid() != *user && metadata.uid() != 0 {
        return Err(format!("is owned by user {}, not by this process's user {user}; use a directory of this user's own", metadata.uid()));
    }
    if metadata.mode() & WRITABLE_BY_OTHERS != 0 {
        return Err(format!(
            "is writable by other users (mode {:o}); make it private (chmod 700) or use a directory only this user can write into",
            metadata.mode() & 0o7777
        ));
    }
    Ok(())
}

/// The name of the network file system `directory` (at `_path`) lies on,
/// if it does: Linux's magic numbers of `fstatfs`.
#[cfg(any(target_os = "linux", target_os = "android"))]
pub(crate) fn network_file_system(_path: &Path, directory: &File) -> Option<&'static str> {
    let stat = rustix::fs::fstatfs(directory).ok()?;
    // `f_type` is a signed or unsigned word depending on the platform.
    #[allow(clippy::unnecessary_cast, clippy::useless_conversion)]
    let kind = i64::from(stat.f_type as i64) & 0xFFFF_FFFF;
    network_kind(kind)
}

/// The network file system of `fstatfs` magic number `magic`, if it is one.
#[cfg(any(target_os = "linux", target_os = "android"))]
fn network_kind(magic: i64) -> Option<&'static str> {
    // Magic numbers of linux/magic.h and the file systems' own headers.
    // FUSE is refused whole: virtiofs, sshfs, gcsfuse and GlusterFS's
    // client are FUSE, and nothing tells them from a local FUSE file system;
    // vboxsf shares a host's directory with a VM.
    const NETWORK: [(i64, &str); 15] = [
        (0x6969, "NFS"),
        (0x517B, "SMB"),
        (0xFF53_4D42, "CIFS"),
        (0xFE53_4D42, "SMB2"),
        (0x0102_1997, "9P"),
        (0x5346_414F, "AFS"),
        (0x6B41_4653, "kAFS"),
        (0x00C3_6400, "Ceph"),
        (0x7375_7245, "Coda"),
        (0x0BD0_0BD0, "Lustre"),
        (0x6573_5546, "FUSE"),
        (0x786F_4256, "vboxsf"),
        (0x4750_4653, "GPFS"),
        (0x1983_0326, "BeeGFS"),
        (0x2003_0528, "OrangeFS"),
    ];
    NETWORK.iter().find(|(known, _)| *known == magic).map(|(_, name)| *name)
}

#[cfg(all(test, any(target_os = "linux", target_os = "android")))]
mod tests {
    use super::network_kind;

    /// Every file system whose locks processes on two sides of it do not
    /// share, by its magic number (linux/magic.h, and the file systems'
    /// sources for those outside the kernel).
    #[test]
    fn network_and_user_space_file_systems_are_refused_by_their_magic_number() {
        let refused: [(i64, &str); 13] = [
            (0x6969, "NFS"),
            (0x517B, "SMB"),
            (0xFF53_4D42, "CIFS"),
            (0xFE53_4D42, "SMB2"),
            (0x0102_1997, "9P"),
            (0x5346_414F, "AFS"),
            (0x00C3_6400, "Ceph"),
            (0x0BD0_0BD0, "Lustre"),
            // FUSE_SUPER_MAGIC: virtiofs, sshfs, gcsfuse, GlusterFS, s3fs...
            (0x6573_5546, "FUSE"),
            (0x786F_4256, "vboxsf"),
            (0x4750_4653, "GPFS"),
            (0x1983_0326, "BeeGFS"),
            (0x2003_0528, "OrangeFS"),
        ];
        for (magic, name) in refused {
            assert_eq!(network_kind(magic), Some(name), "{magic:#x} is {name}");
        }
        // Local file systems: ext4, tmpfs, xfs, btrfs.
        for magic in [0xEF53, 0x0102_1994, 0x5846_5342, 0x9123_683E] {
            assert_eq!(network_kind(magic), None, "{magic:#x} is local");
        }
    }
}

/// Other Unix systems are not checked (docs/file.md says so).
#[cfg(not(any(target_os = "linux", target_os = "android")))]
pub(crate) fn network_file_system(_path: &Path, _directory: &File) -> Option<&'static str> {
    None
}

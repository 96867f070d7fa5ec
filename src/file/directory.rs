//! The lock directory: created private (`0700`; on Windows an access
//! control list of its own letting only this user, SYSTEM and
//! Administrators in), refused when other users can write into it or when
//! it lies on a file system whose locks the kernel of this host does not
//! alone enforce.
//!
//! Why both refusals: a user who can write into the directory can plant a
//! symlink or a lock file of their own under a key's name, and a directory
//! shared over the network (NFS, SMB, ...) may be locked by another host
//! whose locks ours never see, or whose lock server forgets them. The
//! network check reads the file system's magic number (`fstatfs`'s
//! `f_type`) on Linux, and the path (UNC) and drive type on Windows; other
//! systems are not checked (docs/file.md says so). See [`super::sys`].

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};

use super::fence;
use super::floor::{self, Floor};
use super::lock_file::LockFile;
use super::name::LockName;
use super::sys::{self, User};
use crate::error::{ErrorCode, Issue, LockError, Result};

/// An open, checked lock directory.
pub(crate) struct LockDirectory {
    path: PathBuf,
    /// The directory itself, held open to re-check its mode cheaply.
    handle: File,
    /// This process's effective user, who must own the directory and its
    /// lock files.
    user: User,
    /// The directory's fence floor (see [`super::floor`]).
    floor: Floor,
    /// Entries opened or looked up, for the tests of what an operation
    /// costs.
    #[cfg(test)]
    pub probes: std::sync::atomic::AtomicUsize,
}

impl LockDirectory {
    /// Opens (and creates, private, with any missing parents) the directory
    /// of backend `backend`. A refusal is `INVALID_OPTIONS` whose issue
    /// names `backends.<backend>.directory` and says how to fix it.
    pub fn open(backend: &str, path: &str) -> Result<LockDirectory> {
        let refuse = |message: String| LockError::invalid_options(vec![Issue::new(format!("backends.{backend}.directory"), message)]);
        let path = PathBuf::from(path);
        if !path.is_absolute() {
            return Err(refuse("must be an absolute path".into()));
        }
        if let Err(err) = sys::create_private_dir(&path) {
            return Err(refuse(format!("could not be created ({err}); create it, {}", sys::PRIVATE_DIR)));
        }
        let handle = sys::open_dir(&path).map_err(|err| refuse(format!("could not be opened ({err})")))?;
        let user = sys::current_user().map_err(|err| refuse(format!("could not be checked: this process's user is unknown ({err})")))?;
        let directory = LockDirectory {
            path,
            handle,
            user,
            floor: Floor::default(),
            #[cfg(test)]
            probes: Default::default(),
        };
        directory.check_owner_and_mode().map_err(refuse)?;
        sys::network_file_system(&directory.path, &directory.handle).map_or(Ok(()), |kind| {
            Err(refuse(format!(
                "is on {kind}, a network or user-space file system whose locks other hosts (or the other side of a virtual machine's share) may not see; use a directory on a local file system of this host (for example {})",
                sys::LOCAL_DIR_EXAMPLE
            )))
        })?;
        Ok(directory)
    }

    /// The directory's path (a configuration value, never a key).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Checks again, before a lock file is opened, that nobody else has
    /// been let write into the directory since it was opened, and that its
    /// path still names it: `PROVIDER_FAILED` if not. A directory removed
    /// and made again (a tmp cleaner, logind at logout for
    /// `/run/user/<uid>`) or a symbolic link on its path pointed elsewhere
    /// would split this backend, working in the directory it opened, from
    /// processes that open the path now: it grants nothing more, and its
    /// holders' releases are `LEASE_LOST` ([`LockDirectory::still_named`]).
    pub fn check(&self) -> Result<()> {
        let failed = |message: String| {
            LockError::new(ErrorCode::ProviderFailed, format!("the lock directory {} {message}", self.path.display()))
                .with_details(serde_json::json!({ "directory": self.path }))
        };
        self.check_owner_and_mode().map_err(failed)?;
        if !self.still_named() {
            return Err(failed(
                "was replaced (removed and made again, or a symbolic link on its path pointed elsewhere) since this backend opened it: its locks no longer exclude those of processes that open it now; open the provider again, and keep tmp cleaners off the directory".into(),
            ));
        }
        Ok(())
    }

    /// True while the directory's path names the directory this backend
    /// opened.
    pub fn still_named(&self) -> bool {
        sys::dir_named(&self.handle, &self.path)
    }

    fn check_owner_and_mode(&self) -> std::result::Result<(), String> {
        sys::check_private(&self.handle, &self.user)
    }

    /// The path of `name`'s lock file, for its inotify watch (which takes a
    /// path: [`LockDirectory::check`] notices when it leads elsewhere).
    pub fn file_path(&self, name: &LockName) -> PathBuf {
        self.path.join(name.file_name())
    }

    /// Opens (creating it if missing) the lock file of `name`, refusing a
    /// symbolic link, anything but a regular file, and a file of another
    /// owner (`PROVIDER_FAILED`, which also reports a full disk or a
    /// read-only directory). Every operation on the directory's entries is
    /// relative to its handle (`openat`, `fstatat`, `unlinkat`; by path on
    /// Windows).
    pub fn open_file(&self, name: &LockName) -> Result<LockFile> {
        self.open_entry(&name.file_name(), true).map(|file| file.expect("created"))
    }

    /// [`LockDirectory::open_file`] without creating: `None` when missing.
    pub fn open_existing(&self, name: &LockName) -> Result<Option<LockFile>> {
        self.open_entry(&name.file_name(), false)
    }

    /// [`LockDirectory::open_file`] of unit `unit` of `name`, a counted key.
    pub fn open_unit(&self, name: &LockName, unit: u32) -> Result<LockFile> {
        self.open_entry(&name.unit_file_name(unit), true).map(|file| file.expect("created"))
    }

    /// [`LockDirectory::open_unit`] without creating: `None` when missing.
    pub fn open_existing_unit(&self, name: &LockName, unit: u32) -> Result<Option<LockFile>> {
        self.open_entry(&name.unit_file_name(unit), false)
    }

    /// [`LockDirectory::open_file`] of the raise file of `name` (see
    /// [`super::raise`]).
    pub fn open_raise_file(&self, name: &LockName) -> Result<LockFile> {
        self.open_entry(&name.raise_file_name(), true).map(|file| file.expect("created"))
    }

    /// The directory's fence floor.
    pub fn floor(&self) -> &Floor {
        &self.floor
    }

    /// [`LockDirectory::open_file`] of the entry `entry`, any file of the
    /// directory.
    pub fn open_entry(&self, entry: &str, create: bool) -> Result<Option<LockFile>> {
        self.check()?;
        self.probed();
        LockFile::open(&self.handle, &self.path, entry, &self.user, create).map_err(|err| self.failure(err))
    }

    /// True while the lock file name of `name` still names `file` (the same
    /// device and inode): false once it was removed or replaced.
    pub fn names(&self, name: &LockName, file: &LockFile) -> bool {
        self.entry_names(&name.file_name(), file)
    }

    /// [`LockDirectory::names`] of unit `unit` of `name`.
    pub fn unit_names(&self, name: &LockName, unit: u32, file: &LockFile) -> bool {
        self.entry_names(&name.unit_file_name(unit), file)
    }

    /// [`LockDirectory::names`] of the entry `entry`.
    pub fn entry_names(&self, entry: &str, file: &LockFile) -> bool {
        self.probed();
        sys::id_at(&self.handle, &self.path, entry).is_some_and(|id| file.is(id))
    }

    /// True when `name` has a lock file.
    pub fn exists(&self, name: &LockName) -> bool {
        self.probed();
        sys::id_at(&self.handle, &self.path, &name.file_name()).is_some()
    }

    /// True when unit `unit` of `name` has a file.
    pub fn unit_exists(&self, name: &LockName, unit: u32) -> bool {
        self.probed();
        sys::id_at(&self.handle, &self.path, &name.unit_file_name(unit)).is_some()
    }

    /// Counts a probe of an entry (in tests).
    fn probed(&self) {
        #[cfg(test)]
        self.probes.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// Removes the lock file of `name`, whose counter is `counter`, and first
    /// its raise file if it has one; the caller holds the lock file's kernel
    /// lock exclusive and has checked that the name still names it. Nothing
    /// is removed unless the clock passes the counter within a millisecond
    /// ([`fence::clock_passes`]) and the directory's floor is raised to it
    /// (see [`super::floor`]): a file left keeps its counter. The raise
    /// file goes before the lock file, so that it only ever goes under the
    /// lock file (see [`super::raise`]): once the lock file is gone,
    /// readers of a new one may create and lock a new raise file. A failure
    /// leaves the files for a later release to remove.
    pub fn remove(&self, name: &LockName, counter: u64) {
        if !fence::clock_passes(counter) || !floor::raise(self, counter) {
            return;
        }
        let _ = sys::remove_at(&self.handle, &self.path, &name.raise_file_name());
        let _ = sys::remove_at(&self.handle, &self.path, &name.file_name());
    }

    /// [`LockDirectory::remove`] of unit `unit` of `name`: false when it
    /// failed.
    pub fn remove_unit(&self, name: &LockName, unit: u32) -> bool {
        sys::remove_at(&self.handle, &self.path, &name.unit_file_name(unit)).is_ok()
    }

    /// `PROVIDER_FAILED` for an I/O failure on a lock file of this
    /// directory.
    pub fn failure(&self, err: LockFileError) -> LockError {
        let message = match &err {
            LockFileError::Refused(why) => format!("refused a lock file in {}: {why}", self.path.display()),
            LockFileError::Io(io) if io.kind() == io::ErrorKind::StorageFull => {
                format!("no space left for a lock file in {}; free space on its file system", self.path.display())
            }
            LockFileError::Io(io) if io.kind() == io::ErrorKind::ReadOnlyFilesystem => {
                format!("the lock directory {} is on a read-only file system; use a writable directory", self.path.display())
            }
            LockFileError::Io(io) if sys::too_many_open_files(io) => format!(
                "a lock file in {} could not be opened: this process has too many open files ({io}); each lease keeps one open per key and per unit of a counted key, each acquire trying a key one, and each backend up to 64 of free keys: raise the process's limit (ulimit -n, LimitNOFILE= under systemd) or lower maxKeys and maxWaiters",
                self.path.display()
            ),
            LockFileError::Io(io) => format!("a lock file in {} could not be used: {io}", self.path.display()),
        };
        let error = LockError::new(ErrorCode::ProviderFailed, message).with_details(serde_json::json!({ "directory": self.path }));
        match err {
            LockFileError::Io(io) => error.with_cause(io),
            LockFileError::Refused(_) => error,
        }
    }
}

/// Why a lock file could not be used.
#[derive(Debug)]
pub(crate) enum LockFileError {
    /// The file is not one this driver may trust.
    Refused(String),
    /// The system refused an operation.
    Io(io::Error),
}

impl From<io::Error> for LockFileError {
    fn from(err: io::Error) -> Self {
        LockFileError::Io(err)
    }
}

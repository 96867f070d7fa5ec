//! The Windows half of [`super`]: `LockFileEx`, reparse points refused,
//! volume serial number and file index, `OpenProcess`, owners and access
//! control lists, drive types.
//!
//! Byte-range locks from `LockFileEx` are mandatory: while one handle
//! holds a range, reads and writes of it through other handles fail. The
//! records other processes read (the fence, the waiting mark, the limit,
//! at offsets below 128) must stay readable, so the lock is one byte at
//! [`LOCK_AT`], far past anything written: the file never grows there.
//! Unlike `flock`, a handle holding that byte shared cannot take it
//! exclusive; [`try_lock`] unlocks first, which gives the non-atomic change
//! of mode `flock` has (a refusal leaves the handle holding nothing).
//!
//! The one place of the core with foreign calls: the standard library
//! wraps none of these, and no safe crate does for the 1.85 floor (rustix
//! is Unix only). Each `unsafe` block is one call of the Win32 API, or a
//! read of what one wrote, with its SAFETY note.

#![allow(unsafe_code)]

use std::ffi::c_void;
use std::fs::{File, Metadata, OpenOptions};
use std::io;
use std::os::windows::ffi::OsStrExt;
use std::os::windows::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::os::windows::io::AsRawHandle;
use std::path::{Component, Path, Prefix};

use windows_sys::Win32::Foundation::{
    CloseHandle, LocalFree, ERROR_INVALID_PARAMETER, ERROR_LOCK_VIOLATION, ERROR_SUCCESS, HANDLE, STILL_ACTIVE,
};
use windows_sys::Win32::Security::Authorization::{
    ConvertStringSecurityDescriptorToSecurityDescriptorW, GetSecurityInfo, SDDL_REVISION_1, SE_FILE_OBJECT,
};
use windows_sys::Win32::Security::{
    GetLengthSid, GetTokenInformation, TokenUser, ACL, DACL_SECURITY_INFORMATION, OWNER_SECURITY_INFORMATION, PSECURITY_DESCRIPTOR, PSID,
    SECURITY_ATTRIBUTES, TOKEN_QUERY, TOKEN_USER,
};
use windows_sys::Win32::Storage::FileSystem::{
    CreateDirectoryW, GetDriveTypeW, GetFileInformationByHandle, GetVolumePathNameW, LockFileEx, UnlockFileEx, BY_HANDLE_FILE_INFORMATION,
    FILE_ATTRIBUTE_REPARSE_POINT, FILE_FLAG_BACKUP_SEMANTICS, FILE_FLAG_OPEN_REPARSE_POINT, LOCKFILE_EXCLUSIVE_LOCK,
    LOCKFILE_FAIL_IMMEDIATELY,
};
use windows_sys::Win32::System::Threading::{
    GetCurrentProcess, GetExitCodeProcess, OpenProcess, OpenProcessToken, PROCESS_QUERY_LIMITED_INFORMATION,
};
use windows_sys::Win32::System::IO::OVERLAPPED;

use super::Opened;
use crate::acquire::LockMode;

/// The byte the kernel lock is on: far past the records (see the module's
/// documentation), below 2^63 for file systems that take offsets as signed.
const LOCK_AT: u64 = (i64::MAX - 1) as u64;

/// `GetDriveTypeW`'s answer for a network drive (WinBase.h).
const DRIVE_REMOTE: u32 = 4;

/// A security identifier, as its bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct User(Box<[u8]>);

/// NT AUTHORITY\SYSTEM (S-1-5-18).
const SYSTEM: &[u8] = &[1, 1, 0, 0, 0, 0, 0, 5, 18, 0, 0, 0];
/// BUILTIN\Administrators (S-1-5-32-544): the default owner of what an
/// elevated administrator creates.
const ADMINISTRATORS: &[u8] = &[1, 2, 0, 0, 0, 0, 0, 5, 32, 0, 0, 0, 0x20, 2, 0, 0];

impl User {
    /// The SID at `sid`.
    ///
    /// # Safety
    /// `sid` points to a valid SID.
    unsafe fn copy(sid: PSID) -> User {
        // SAFETY: the caller's contract: a valid SID, `GetLengthSid` bytes long.
        let bytes = unsafe { std::slice::from_raw_parts(sid as *const u8, GetLengthSid(sid) as usize) };
        User(bytes.into())
    }

    /// True for this process's user and for the accounts that may do
    /// anything anyway (SYSTEM, Administrators), as root on Unix.
    fn trusted_by(&self, user: &User) -> bool {
        *self == *user || &*self.0 == SYSTEM || &*self.0 == ADMINISTRATORS
    }
}

impl std::fmt::Display for User {
    /// The SID's string form, `S-1-5-21-...`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let bytes = &self.0;
        let authority = bytes.get(2..8).map_or(0, |a| a.iter().fold(0u64, |value, byte| value << 8 | u64::from(*byte)));
        write!(f, "S-{}-{authority}", bytes.first().copied().unwrap_or(0))?;
        for sub in bytes.get(8..).unwrap_or_default().chunks_exact(4) {
            write!(f, "-{}", u32::from_le_bytes([sub[0], sub[1], sub[2], sub[3]]))?;
        }
        Ok(())
    }
}

/// A handle closed when dropped.
struct Owned(HANDLE);

impl Drop for Owned {
    fn drop(&mut self) {
        // SAFETY: an open handle this value owns, closed once.
        unsafe { CloseHandle(self.0) };
    }
}

/// Memory `LocalAlloc`ed by a call for us, freed when dropped.
struct Local(*mut c_void);

impl Drop for Local {
    fn drop(&mut self) {
        // SAFETY: null or memory the system allocated for us, freed once.
        unsafe { LocalFree(self.0) };
    }
}

/// This process's user: its token's user SID.
pub(crate) fn current_user() -> io::Result<User> {
    let mut token = std::ptr::null_mut();
    // SAFETY: the pseudo handle of this process; `token` receives a handle.
    if unsafe { OpenProcessToken(GetCurrentProcess(), TOKEN_QUERY, &mut token) } == 0 {
        return Err(io::Error::last_os_error());
    }
    let token = Owned(token);
    // A TOKEN_USER and the SID it points to; u64s for its alignment.
    let mut buffer = [0u64; 64];
    let mut length = 0;
    // SAFETY: `buffer` is writable for the size given, `length` receives a size.
    let ok =
        unsafe { GetTokenInformation(token.0, TokenUser, buffer.as_mut_ptr().cast(), std::mem::size_of_val(&buffer) as u32, &mut length) };
    if ok == 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: filled by the call with a TOKEN_USER whose SID lies in `buffer`.
    Ok(unsafe { User::copy((*buffer.as_ptr().cast::<TOKEN_USER>()).User.Sid) })
}

/// [`open_no_follow`] of `name` in the directory `dir_path`. By path:
/// Windows has no `openat` in its Win32 API (`NtCreateFile` relative to a
/// handle would be one); [`dir_named`], checked before every open, notices
/// a directory replaced under its path.
pub(crate) fn open_no_follow_at(_dir: &File, dir_path: &Path, name: &str, create: bool) -> io::Result<Opened> {
    open_no_follow(&dir_path.join(name), create)
}

/// [`path_id`] of `name` in the directory `dir_path` (by path, as
/// [`open_no_follow_at`]).
pub(crate) fn id_at(_dir: &File, dir_path: &Path, name: &str) -> Option<FileId> {
    path_id(&dir_path.join(name))
}

/// Removes `name` from the directory `dir_path` (by path, as
/// [`open_no_follow_at`]).
pub(crate) fn remove_at(_dir: &File, dir_path: &Path, name: &str) -> io::Result<()> {
    std::fs::remove_file(dir_path.join(name))
}

/// True while `path` (a reparse point at its end not followed) names the
/// directory `dir` was opened as.
pub(crate) fn dir_named(dir: &File, path: &Path) -> bool {
    match (path_id(path), dir.metadata().and_then(|metadata| file_id(dir, &metadata))) {
        (Some(named), Ok(held)) => named == held,
        _ => false,
    }
}

/// Opens `path` read-write, creating it if missing when `create`; a
/// reparse point (a symbolic link, a junction) is opened itself, never
/// followed (`FILE_FLAG_OPEN_REPARSE_POINT`), and reported as a link.
/// Opened as std opens files, sharing read, write and delete: the driver
/// removes files others hold open.
fn open_no_follow(path: &Path, create: bool) -> io::Result<Opened> {
    let opened = OpenOptions::new().read(true).write(true).create(create).custom_flags(FILE_FLAG_OPEN_REPARSE_POINT).open(path);
    match opened {
        Ok(file) if file.metadata()?.file_attributes() & FILE_ATTRIBUTE_REPARSE_POINT != 0 => Ok(Opened::Link),
        Ok(file) => Ok(Opened::File(file)),
        Err(err) if !create && err.kind() == io::ErrorKind::NotFound => Ok(Opened::Missing),
        Err(err) => Err(err),
    }
}

/// A security descriptor read from `handle`: its owner and DACL.
struct Security {
    owner: PSID,
    dacl: *const ACL,
    _descriptor: Local,
}

fn security(handle: &File) -> io::Result<Security> {
    let (mut owner, mut dacl, mut descriptor): (PSID, *mut ACL, PSECURITY_DESCRIPTOR) =
        (std::ptr::null_mut(), std::ptr::null_mut(), std::ptr::null_mut());
    // SAFETY: an open handle with READ_CONTROL (std opens for reading); the
    // out-pointers receive pointers into `descriptor`, which we free.
    let status = unsafe {
        GetSecurityInfo(
            handle.as_raw_handle(),
            SE_FILE_OBJECT,
            OWNER_SECURITY_INFORMATION | DACL_SECURITY_INFORMATION,
            &mut owner,
            std::ptr::null_mut(),
            &mut dacl,
            std::ptr::null_mut(),
            &mut descriptor,
        )
    };
    if status != ERROR_SUCCESS {
        return Err(io::Error::from_raw_os_error(status as i32));
    }
    Ok(Security { owner, dacl, _descriptor: Local(descriptor) })
}

impl Security {
    /// The owner's SID.
    fn owner(&self) -> io::Result<User> {
        if self.owner.is_null() {
            return Err(io::Error::other("no owner in the security descriptor"));
        }
        // SAFETY: the descriptor's owner SID, alive while `self` is.
        Ok(unsafe { User::copy(self.owner) })
    }
}

/// The owner of `file` (from its security descriptor) when it is not one
/// `user` trusts: `user` itself, SYSTEM or Administrators (the default
/// owner of what an elevated administrator creates).
pub(crate) fn foreign_owner(file: &File, _metadata: &Metadata, user: &User) -> io::Result<Option<User>> {
    let owner = security(file)?.owner()?;
    Ok((!owner.trusted_by(user)).then_some(owner))
}

/// Takes the lock byte of `file` in `mode` if it is free now: `Ok(false)`
/// when another handle holds it. Never blocks (`LOCKFILE_FAIL_IMMEDIATELY`).
/// Whatever `file` held is released first (see the module's documentation).
pub(crate) fn try_lock(file: &File, mode: LockMode) -> io::Result<bool> {
    unlock(file);
    let flags = match mode {
        LockMode::Exclusive => LOCKFILE_FAIL_IMMEDIATELY | LOCKFILE_EXCLUSIVE_LOCK,
        LockMode::Shared => LOCKFILE_FAIL_IMMEDIATELY,
    };
    let mut at = overlapped_at(LOCK_AT);
    // SAFETY: an open handle of ours, a valid OVERLAPPED naming the range.
    if unsafe { LockFileEx(file.as_raw_handle(), flags, 0, 1, 0, &mut at) } != 0 {
        return Ok(true);
    }
    let err = io::Error::last_os_error();
    match err.raw_os_error() {
        Some(code) if code == ERROR_LOCK_VIOLATION as i32 => Ok(false),
        _ => Err(err),
    }
}

/// Releases `file`'s lock byte (an error when it held none, ignored).
pub(crate) fn unlock(file: &File) {
    let mut at = overlapped_at(LOCK_AT);
    // SAFETY: an open handle of ours, a valid OVERLAPPED naming the range.
    unsafe { UnlockFileEx(file.as_raw_handle(), 0, 1, 0, &mut at) };
}

fn overlapped_at(offset: u64) -> OVERLAPPED {
    // SAFETY: OVERLAPPED is plain data, all zeros valid.
    let mut overlapped: OVERLAPPED = unsafe { std::mem::zeroed() };
    overlapped.Anonymous.Anonymous.Offset = offset as u32;
    overlapped.Anonymous.Anonymous.OffsetHigh = (offset >> 32) as u32;
    overlapped
}

/// Reads into `buf` from `offset`: the bytes read (0 at the end).
pub(crate) fn read_at(file: &File, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    file.seek_read(buf, offset)
}

/// Writes all of `buf` at `offset`.
pub(crate) fn write_all_at(file: &File, mut buf: &[u8], mut offset: u64) -> io::Result<()> {
    while !buf.is_empty() {
        match file.seek_write(buf, offset)? {
            0 => return Err(io::ErrorKind::WriteZero.into()),
            n => {
                buf = &buf[n..];
                offset += n as u64;
            }
        }
    }
    Ok(())
}

/// Which file a file is: its volume's serial number and its file index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FileId(u32, u64);

/// The identity of `file`.
pub(crate) fn file_id(file: &File, _metadata: &Metadata) -> io::Result<FileId> {
    // SAFETY: plain data, all zeros valid.
    let mut info: BY_HANDLE_FILE_INFORMATION = unsafe { std::mem::zeroed() };
    // SAFETY: an open handle of ours; `info` is writable.
    if unsafe { GetFileInformationByHandle(file.as_raw_handle(), &mut info) } == 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(FileId(info.dwVolumeSerialNumber, u64::from(info.nFileIndexHigh) << 32 | u64::from(info.nFileIndexLow)))
}

/// The identity of the file `path` names (a reparse point itself, not
/// followed); `None` when it names nothing, or nothing that can be opened
/// (a file pending deletion, on file systems that keep its name meanwhile).
fn path_id(path: &Path) -> Option<FileId> {
    let file = OpenOptions::new().access_mode(0).custom_flags(FILE_FLAG_OPEN_REPARSE_POINT | FILE_FLAG_BACKUP_SEMANTICS).open(path).ok()?;
    let metadata = file.metadata().ok()?;
    file_id(&file, &metadata).ok()
}

/// True when `err` says the process has no handle left
/// (`ERROR_TOO_MANY_OPEN_FILES`).
pub(crate) fn too_many_open_files(err: &io::Error) -> bool {
    // winerror.h: ERROR_TOO_MANY_OPEN_FILES.
    err.raw_os_error() == Some(4)
}

/// True unless process `pid` surely does not exist: `OpenProcess` finds
/// no such process, or it has exited (`GetExitCodeProcess`).
pub(crate) fn process_lives(pid: u32) -> bool {
    // SAFETY: no pointers; a null handle on failure.
    let process = unsafe { OpenProcess(PROCESS_QUERY_LIMITED_INFORMATION, 0, pid) };
    if process.is_null() {
        // No such process; any other refusal (access denied) is a process.
        return io::Error::last_os_error().raw_os_error() != Some(ERROR_INVALID_PARAMETER as i32);
    }
    let process = Owned(process);
    let mut code = 0;
    // SAFETY: an open process handle; `code` is writable.
    let ok = unsafe { GetExitCodeProcess(process.0, &mut code) };
    ok == 0 || code == STILL_ACTIVE as u32
}

/// Access rights that let their holder add, remove or rename entries of a
/// directory, or change who may: `FILE_ADD_FILE`, `FILE_ADD_SUBDIRECTORY`,
/// `FILE_DELETE_CHILD`, `DELETE`, `WRITE_DAC`, `WRITE_OWNER`, `GENERIC_ALL`,
/// `GENERIC_WRITE`.
const WRITES_INTO: u32 = 0x2 | 0x4 | 0x40 | 0x1_0000 | 0x4_0000 | 0x8_0000 | 0x1000_0000 | 0x4000_0000;

/// How to make a lock directory private, for the error that refuses one.
pub(crate) const PRIVATE_DIR: &str = "owned by this user, with only this user, SYSTEM and Administrators allowed to write into it";

/// Where a local lock directory can go, for the error that refuses a
/// network drive.
pub(crate) const LOCAL_DIR_EXAMPLE: &str = "under %LOCALAPPDATA%";

/// Creates the directory `path`, with any missing parents (as their own
/// parents let them be); the directory itself gets an access control list
/// of its own, not inherited, that lets only this process's user, SYSTEM
/// and Administrators in. One already there is kept as it is (and checked
/// by [`check_private`]).
pub(crate) fn create_private_dir(path: &Path) -> io::Result<()> {
    if path.is_dir() {
        return Ok(());
    }
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    let user = current_user()?;
    let sddl = wide(format!("D:P(A;OICI;FA;;;{user})(A;OICI;FA;;;SY)(A;OICI;FA;;;BA)").as_ref());
    let mut descriptor: PSECURITY_DESCRIPTOR = std::ptr::null_mut();
    // SAFETY: a NUL-terminated string; `descriptor` receives memory we free.
    if unsafe {
        ConvertStringSecurityDescriptorToSecurityDescriptorW(sddl.as_ptr(), SDDL_REVISION_1, &mut descriptor, std::ptr::null_mut())
    } == 0
    {
        return Err(io::Error::last_os_error());
    }
    let descriptor = Local(descriptor);
    let attributes = SECURITY_ATTRIBUTES {
        nLength: std::mem::size_of::<SECURITY_ATTRIBUTES>() as u32,
        lpSecurityDescriptor: descriptor.0,
        bInheritHandle: 0,
    };
    let wide_path = wide(path.as_os_str());
    // SAFETY: a NUL-terminated path and valid attributes, alive for the call.
    if unsafe { CreateDirectoryW(wide_path.as_ptr(), &attributes) } == 0 {
        let err = io::Error::last_os_error();
        // Created meanwhile by another process: checked as any existing one.
        if err.kind() != io::ErrorKind::AlreadyExists {
            return Err(err);
        }
    }
    Ok(())
}

/// `text` as a NUL-terminated UTF-16 string.
fn wide(text: &std::ffi::OsStr) -> Vec<u16> {
    text.encode_wide().chain(Some(0)).collect()
}

/// Opens the directory `path` (which takes `FILE_FLAG_BACKUP_SEMANTICS`),
/// held open to re-check it cheaply; a reparse point (a junction, a
/// symbolic link) at its end is opened itself and refused, as Unix refuses
/// a symbolic link there.
pub(crate) fn open_dir(path: &Path) -> io::Result<File> {
    let dir = OpenOptions::new().read(true).custom_flags(FILE_FLAG_BACKUP_SEMANTICS | FILE_FLAG_OPEN_REPARSE_POINT).open(path)?;
    if dir.metadata()?.file_attributes() & FILE_ATTRIBUTE_REPARSE_POINT != 0 {
        return Err(io::Error::other("it is a junction or symbolic link; give the directory it points to"));
    }
    Ok(dir)
}

/// Refuses (saying why, and how to fix it) a directory that is not one, is
/// owned by another account than `user`, SYSTEM or Administrators, or whose
/// access control list lets any other account add or remove entries. Deny
/// entries are not weighed (a denied right still counts as granted: the
/// check may refuse more than it must, never less); an entry of a kind it
/// cannot read is refused.
pub(crate) fn check_private(directory: &File, user: &User) -> std::result::Result<(), String> {
    let metadata = directory.metadata().map_err(|err| format!("could not be inspected ({err})"))?;
    if !metadata.is_dir() {
        return Err("is not a directory".into());
    }
    let security = security(directory).map_err(|err| format!("could not be inspected ({err})"))?;
    let owner = security.owner().map_err(|err| format!("could not be inspected ({err})"))?;
    if !owner.trusted_by(user) {
        return Err(format!("is owned by {owner}, not by this process's user {user}; use a directory of this user's own"));
    }
    let fix = "make it private (only this user, SYSTEM and Administrators may write into it) or use a directory of this user's own";
    if security.dacl.is_null() {
        return Err(format!("lets everyone in (it has no access control list); {fix}"));
    }
    // SAFETY: the descriptor's DACL, `AclSize` bytes long, alive while
    // `security` is.
    let acl = unsafe { std::slice::from_raw_parts(security.dacl.cast::<u8>(), usize::from((*security.dacl).AclSize)) };
    for entry in entries(acl) {
        let Some((kind, flags, mask, sid)) = entry else {
            return Err(format!("has an access control list this driver cannot read; {fix}"));
        };
        const ALLOWED: u8 = 0;
        const DENIED: u8 = 1;
        const INHERIT_ONLY: u8 = 0x08;
        if kind == DENIED || flags & INHERIT_ONLY != 0 || mask & WRITES_INTO == 0 {
            continue;
        }
        let sid = User(sid.into());
        if kind != ALLOWED {
            return Err(format!("has an access rule of a kind this driver cannot check (type {kind}); {fix}"));
        }
        if !sid.trusted_by(user) && sid != owner {
            return Err(format!("lets {sid} add or remove files (its access control list); {fix}"));
        }
    }
    Ok(())
}

/// The entries of the access control list `acl` (its bytes): type, flags,
/// access mask and SID of each, `None` for one cut short.
fn entries(acl: &[u8]) -> impl Iterator<Item = Option<(u8, u8, u32, &[u8])>> {
    let count = acl.get(4..6).map_or(0, |count| u16::from_le_bytes([count[0], count[1]]));
    let mut rest = acl.get(8..).unwrap_or_default();
    (0..count).map(move |_| {
        let size = usize::from(u16::from_le_bytes([*rest.get(2)?, *rest.get(3)?]));
        let (entry, after) = (rest.get(..size)?, rest.get(size..)?);
        rest = after;
        let mask = u32::from_le_bytes(entry.get(4..8)?.try_into().ok()?);
        Some((entry[0], entry[1], mask, entry.get(8..)?))
    })
}

/// The kind of network share `path` (the directory) lies on, if it does:
/// a UNC path (`\\server\share\...`), or a drive Windows reports as a
/// network drive (`GetDriveTypeW`, of the path's volume).
pub(crate) fn network_file_system(path: &Path, _directory: &File) -> Option<&'static str> {
    if let Some(Component::Prefix(prefix)) = path.components().next() {
        if matches!(prefix.kind(), Prefix::UNC(..) | Prefix::VerbatimUNC(..)) {
            return Some("a network share (a UNC path)");
        }
    }
    let mut volume = [0u16; 1024];
    let wide_path = wide(path.as_os_str());
    // SAFETY: a NUL-terminated path; `volume` is writable for its length.
    if unsafe { GetVolumePathNameW(wide_path.as_ptr(), volume.as_mut_ptr(), volume.len() as u32) } == 0 {
        return None;
    }
    // SAFETY: `volume` holds a NUL-terminated path.
    (unsafe { GetDriveTypeW(volume.as_ptr()) } == DRIVE_REMOTE).then_some("a network drive")
}

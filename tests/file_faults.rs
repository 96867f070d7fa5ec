//! The file driver on a file system that refuses writes: a full disk
//! (`ENOSPC` from a small tmpfs this test mounts) and a read-only one (the
//! tmpfs remounted read-only). Each gives a clear `LockError`, and nothing
//! is granted twice meanwhile. Mounting takes root (these tests run as root
//! here); without it they fail rather than pass unchecked. Unix only: on
//! Windows there is no tmpfs to mount.

#![cfg(unix)]

mod file;

use std::path::{Path, PathBuf};
use std::process::Command;

use dokebi_lock::ErrorCode;
use file::{fresh_directory, open, wait, Directory};
use futures::executor::block_on;

/// A tmpfs of `size` mounted on a fresh directory, unmounted (and the
/// directory removed) when dropped, also when a test fails.
struct Tmpfs {
    at: Directory,
}

impl Tmpfs {
    fn mount(label: &str, size: &str) -> Tmpfs {
        let at = fresh_directory(label);
        std::fs::create_dir_all(&at).unwrap();
        let mounted =
            Command::new("mount").args(["-t", "tmpfs", "-o", &format!("size={size},mode=700"), "tmpfs"]).arg(at.as_path()).status();
        assert!(mounted.is_ok_and(|status| status.success()), "could not mount a tmpfs on {} (these tests need root)", at.display());
        Tmpfs { at }
    }

    fn remount(&self, option: &str) {
        let status = Command::new("mount").args(["-o", &format!("remount,{option}")]).arg(self.at.as_path()).status().unwrap();
        assert!(status.success(), "remount {option}");
    }

    fn path(&self) -> &Path {
        &self.at
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        // The directory itself goes with `at`, once unmounted.
        let _ = Command::new("umount").arg(self.at.as_path()).status();
    }
}

/// Fills the file system of `dir` with one file until a write fails.
fn fill(dir: &Path) -> PathBuf {
    use std::io::Write;
    let path = dir.join("filler");
    let mut filler = std::fs::File::create(&path).unwrap();
    let block = [7u8; 4096];
    while filler.write_all(&block).is_ok() {}
    let _ = filler.sync_all();
    path
}

#[test]
fn a_full_disk_is_provider_failed_no_space_and_a_held_key_is_not_granted_again() {
    let disk = Tmpfs::mount("enospc", "256k");
    let dir = disk.path().join("locks");
    let (provider, locks) = open(&dir, "");
    let (_other_provider, other) = open(&dir, "");
    let held = block_on(locks.acquire("held", wait(0))).unwrap();
    let filler = fill(disk.path());

    let err = block_on(locks.acquire("new", wait(0))).unwrap_err();
    assert_eq!(err.code(), ErrorCode::ProviderFailed, "{err:?}");
    assert!(err.message().contains("no space left"), "{err:?}");
    assert_eq!(block_on(other.acquire("new", wait(0))).unwrap_err().code(), ErrorCode::ProviderFailed, "nothing granted");
    let busy = block_on(other.acquire("held", wait(0))).unwrap_err();
    assert_eq!(busy.code(), ErrorCode::LockBusy, "a held key stays held on a full disk: {busy:?}");

    std::fs::remove_file(filler).unwrap();
    // Tried for up to a second: a CI run under load saw the first try after
    // the removal still refused for space (not reproduced since).
    let mut tries = 0;
    let lease = loop {
        match block_on(locks.acquire("new", wait(0))) {
            Err(err) if err.code() == ErrorCode::ProviderFailed && tries < 20 => tries += 1,
            granted => break granted.expect("granted once there is space again"),
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert_eq!(block_on(other.acquire("new", wait(0))).unwrap_err().code(), ErrorCode::LockBusy);
    drop((lease, held));
    block_on(provider.close());
}

#[test]
fn a_read_only_file_system_is_provider_failed_and_grants_nothing() {
    let disk = Tmpfs::mount("erofs", "256k");
    let dir = disk.path().join("locks");
    let (provider, locks) = open(&dir, "");
    disk.remount("ro");

    let err = block_on(locks.acquire("k", wait(0))).unwrap_err();
    assert_eq!(err.code(), ErrorCode::ProviderFailed, "{err:?}");
    assert!(err.message().contains("read-only"), "{err:?}");
    let err = block_on(locks.acquire("k", wait(200))).unwrap_err();
    assert_eq!(err.code(), ErrorCode::ProviderFailed, "a wait fails at once, it does not spin or grant: {err:?}");
    assert_eq!(locks.status().held, 0);

    disk.remount("rw");
    let lease = block_on(locks.acquire("k", wait(0))).expect("granted once writable again");
    drop(lease);
    block_on(provider.close());
}

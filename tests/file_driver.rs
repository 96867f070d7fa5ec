//! The file driver in one process: its configuration and refusals, the
//! codes of its waits, FIFO order, fences, and its lock files (named by a
//! digest, never piling up, never a symlink followed).

mod file;

#[cfg(unix)]
use std::os::unix::fs::PermissionsExt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dokebi_lock::{AbortController, AcquireOptions, ErrorCode, LockMode, Provider};
use file::{entries, entries_after_keep, fresh_directory, open, wait, yaml};
use futures::executor::block_on;

#[test]
fn the_directory_is_created_private_and_a_key_is_held_alone() {
    let dir = fresh_directory("basic");
    let (provider, locks) = open(&dir, "");
    #[cfg(unix)]
    assert_eq!(std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777, 0o700);
    let lease = block_on(locks.acquire("order:42", wait(0))).unwrap();
    assert!(lease.is_valid());
    assert_eq!(lease.remaining(), None, "a file lease never expires while held");
    assert_eq!(block_on(locks.acquire("order:42", wait(0))).unwrap_err().code(), ErrorCode::LockBusy);
    let other = block_on(locks.acquire("order:43", wait(0))).expect("another key is free");
    assert!(block_on(lease.release()).unwrap());
    assert!(!block_on(lease.release()).unwrap(), "a second release is false");
    assert!(!lease.is_valid());
    assert_eq!(lease.remaining(), Some(Duration::ZERO));
    block_on(locks.acquire("order:42", wait(0))).expect("released, the key is free again");
    drop(other);
    block_on(provider.close());
}

#[test]
fn the_directory_option_is_required_and_must_be_absolute() {
    let err =
        Provider::from_yaml("schemaVersion: 1\noptions:\n  dokebi-lock:\n    backends:\n      locks: { driver: file }\n").err().unwrap();
    assert_eq!(err.code(), ErrorCode::InvalidOptions);
    assert_eq!(err.issues()[0].path, "backends.locks.directory");
    let err = Provider::from_yaml(
        "schemaVersion: 1\noptions:\n  dokebi-lock:\n    backends:\n      locks: { driver: file, directory: relative/dir }\n",
    )
    .err()
    .unwrap();
    assert_eq!(err.code(), ErrorCode::InvalidOptions);
    assert!(err.issues()[0].message.contains("absolute"), "{err:?}");
}

#[test]
#[cfg(unix)]
fn a_directory_other_users_can_write_into_is_refused_at_open_and_later() {
    let dir = fresh_directory("writable");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let err = Provider::from_yaml(&yaml(&dir, "")).err().unwrap();
    assert_eq!(err.code(), ErrorCode::InvalidOptions);
    assert_eq!(err.issues()[0].path, "backends.locks.directory");
    assert!(err.issues()[0].message.contains("chmod 700"), "the issue says how to fix it: {err:?}");

    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    let (provider, locks) = open(&dir, "");
    block_on(locks.acquire("k", wait(0))).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o775)).unwrap();
    let err = block_on(locks.acquire("j", wait(0))).unwrap_err();
    assert_eq!(err.code(), ErrorCode::ProviderFailed, "made group-writable after opening: refused");
    assert!(err.message().contains("writable by other users"), "{err:?}");
    block_on(provider.close());
}

/// Windows: the directory's access control list is what lets others in.
/// Everyone (S-1-1-0) is given full control of it, before the backend
/// opens and after.
#[test]
#[cfg(windows)]
fn a_directory_whose_access_control_list_lets_others_write_is_refused_at_open_and_later() {
    let dir = fresh_directory("writable");
    std::fs::create_dir_all(&dir).unwrap();
    let_everyone_in(&dir);
    let err = Provider::from_yaml(&yaml(&dir, "")).err().unwrap();
    assert_eq!(err.code(), ErrorCode::InvalidOptions);
    assert_eq!(err.issues()[0].path, "backends.locks.directory");
    assert!(err.issues()[0].message.contains("lets S-1-1-0 add or remove files"), "the issue says who and how to fix it: {err:?}");

    let dir = fresh_directory("writable-later");
    let (provider, locks) = open(&dir, "");
    block_on(locks.acquire("k", wait(0))).expect("a directory the driver created is private");
    let_everyone_in(&dir);
    let err = block_on(locks.acquire("j", wait(0))).unwrap_err();
    assert_eq!(err.code(), ErrorCode::ProviderFailed, "made writable by everyone after opening: refused");
    assert!(err.message().contains("lets S-1-1-0"), "{err:?}");
    block_on(provider.close());
}

/// Replaces the access control list of `dir` with one that gives Everyone
/// full control (what `icacls /grant *S-1-1-0:F` does on Windows; Wine's
/// `icacls` is a stub).
#[cfg(windows)]
#[allow(unsafe_code)]
fn let_everyone_in(dir: &std::path::Path) {
    use std::os::windows::ffi::OsStrExt;
    use windows_sys::Win32::Foundation::LocalFree;
    use windows_sys::Win32::Security::Authorization::{ConvertStringSecurityDescriptorToSecurityDescriptorW, SDDL_REVISION_1};
    use windows_sys::Win32::Security::{SetFileSecurityW, DACL_SECURITY_INFORMATION};
    let wide = |text: &std::ffi::OsStr| text.encode_wide().chain(Some(0)).collect::<Vec<u16>>();
    let (sddl, path) = (wide("D:P(A;OICI;FA;;;WD)".as_ref()), wide(dir.as_os_str()));
    let mut descriptor = std::ptr::null_mut();
    // SAFETY: a NUL-terminated string; `descriptor` receives memory freed below.
    let made = unsafe {
        ConvertStringSecurityDescriptorToSecurityDescriptorW(sddl.as_ptr(), SDDL_REVISION_1, &mut descriptor, std::ptr::null_mut())
    };
    assert_ne!(made, 0, "{}", std::io::Error::last_os_error());
    // SAFETY: a NUL-terminated path and the descriptor just made.
    let set = unsafe { SetFileSecurityW(path.as_ptr(), DACL_SECURITY_INFORMATION, descriptor) };
    let error = std::io::Error::last_os_error();
    // SAFETY: memory the conversion allocated, freed once.
    unsafe { LocalFree(descriptor) };
    assert_ne!(set, 0, "{error}");
}

#[test]
fn a_key_never_appears_in_a_file_name_and_lock_files_of_free_keys_do_not_pile_up() {
    let dir = fresh_directory("names");
    let (provider, locks) = open(&dir, "");
    let secret = "user@example.com/invoice-7";
    let lease = block_on(locks.acquire(secret, wait(0))).unwrap();
    let names = entries(&dir);
    assert_eq!(names.len(), 1);
    let name = &names[0];
    assert!(name.ends_with(".lock") && name.len() == 37, "{name}");
    assert!(name[..32].bytes().all(|b| b.is_ascii_hexdigit()), "{name}");
    assert!(!name.contains("user") && !name.contains("invoice"));
    drop(lease);
    for n in 0..200 {
        let lease = block_on(locks.acquire(&format!("job:{n}"), wait(0))).unwrap();
        assert!(block_on(lease.release()).unwrap());
    }
    assert!(entries(&dir).len() <= 64, "at most 64 free keys' files are kept for reuse");
    assert_eq!(entries_after_keep(&dir), Vec::<String>::new(), "no lock file is left for a free key");
    block_on(provider.close());
}

#[test]
fn fences_rise_with_every_grant_of_a_key_also_when_its_lock_file_is_removed_between_grants() {
    let dir = fresh_directory("fences");
    let mut last = 0;
    for _ in 0..20 {
        // Each round's provider closes with its released key's file removed
        // (not kept for reuse): the next grant starts a new counter, and
        // the clock keeps the fences rising.
        let (provider, locks) = open(&dir, "");
        let lease = block_on(locks.acquire("hot", wait(0))).unwrap();
        assert!(lease.fence() > last, "{} after {last}", lease.fence());
        last = lease.fence();
        drop(lease);
        block_on(provider.close());
        assert_eq!(entries(&dir), Vec::<String>::new(), "the key's lock file was removed between grants");
    }
    let (provider, locks) = open(&dir, "");
    // Kept while someone of this process waits, the file's counter carries on.
    let held = block_on(locks.acquire("hot", wait(0))).unwrap();
    assert!(held.fence() > last);
    last = held.fence();
    let waiter = std::thread::spawn({
        let locks = locks.clone();
        move || block_on(locks.acquire("hot", wait(5_000))).unwrap()
    });
    std::thread::sleep(Duration::from_millis(50));
    drop(held);
    let next = waiter.join().unwrap();
    assert!(next.fence() > last);
    block_on(provider.close());
}

/// Where a removed file's name goes at once (Unix, Windows with POSIX
/// deletion: NTFS on Windows 10 and later), a newcomer could create a new
/// file under it and hold the key too: the holder's release says so. Where
/// the name stays, pending deletion, until the last handle closes (Wine,
/// older Windows), a newcomer opens the held file itself and waits:
/// nothing overlapped, and the release is an ordinary one.
#[test]
fn a_lock_file_removed_while_held_makes_release_lease_lost_and_later_fences_still_rise() {
    let dir = fresh_directory("removed");
    let (provider, locks) = open(&dir, "");
    let lease = block_on(locks.acquire("k", wait(0))).unwrap();
    let fence = lease.fence();
    let name = entries(&dir).remove(0);
    std::fs::remove_file(dir.join(&name)).unwrap();
    let name_stays = dir.join(&name).exists();
    assert!(cfg!(windows) || !name_stays, "on Unix a removed file's name is gone at once");
    if name_stays {
        let (_newcomer_provider, newcomer) = open(&dir, "");
        let busy = block_on(newcomer.acquire("k", wait(0))).unwrap_err();
        assert_eq!(busy.code(), ErrorCode::LockBusy, "the name still leads to the held file: {busy:?}");
        assert!(block_on(lease.release()).unwrap(), "nothing overlapped the section");
    } else {
        let err = block_on(lease.release()).unwrap_err();
        assert_eq!(err.code(), ErrorCode::LeaseLost, "the holder learns that its section may have overlapped another");
        assert_eq!(locks.status().lost, 1);
    }
    assert!(!lease.is_valid());
    assert_eq!(locks.status().held, 0, "released all the same");
    let next = block_on(locks.acquire("k", wait(0))).unwrap();
    assert!(next.fence() > fence, "the counter went with the file; the clock keeps the fence rising");
    assert!(block_on(next.release()).unwrap());
    block_on(provider.close());
}

/// A waiter of another backend waits on the holder's lock file; the file is
/// removed and another process takes the path's new file (done at once
/// here, a file locked beforehand renamed over the old one, so that the
/// waiter cannot take the new file first); the holder then releases,
/// leaving the removed file's lock free. The waiter, retrying, takes the
/// path's file, is refused, marks it and waits: it is never granted the key
/// through the removed file while the new one is held, and once granted its
/// release finds its file under the key's name. Unix: where a removed
/// file's name stays while it is open (Wine, older Windows), no new file
/// can take it.
#[test]
#[cfg(unix)]
fn a_waiter_whose_lock_file_was_removed_takes_the_new_one_and_never_holds_the_old() {
    use std::os::fd::AsRawFd;
    let dir = fresh_directory("waiter-removed");
    let (provider, holder) = open(&dir, "");
    let (waiter_provider, waiter) = open(&dir, "");
    let old = block_on(holder.acquire("k", wait(0))).unwrap();
    let (granted, outcome) = std::sync::mpsc::channel();
    std::thread::spawn({
        let waiter = waiter.clone();
        move || granted.send(block_on(waiter.acquire("k", wait(30_000))).map(|lease| block_on(lease.release())))
    });
    let path = dir.join(entries(&dir).remove(0));
    while file::waiting_mark(&path).is_none() {
        std::thread::sleep(Duration::from_millis(1));
    }
    let new = std::fs::File::create(dir.join("new")).unwrap();
    // SAFETY: an open file of ours.
    assert_eq!(unsafe { libc::flock(new.as_raw_fd(), libc::LOCK_EX) }, 0);
    std::fs::rename(dir.join("new"), &path).unwrap();
    let _ = block_on(old.release());
    // A mark written after this one (a later deadline) is a retry made
    // after the release.
    let before = file::waiting_mark(&path).map_or(0, |(until, _)| until);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while file::waiting_mark(&path).is_none_or(|(until, _)| until <= before) {
        if let Ok(released) = outcome.try_recv() {
            panic!("the waiter was granted the key through its removed lock file while the new one is held (its release: {released:?})");
        }
        assert!(std::time::Instant::now() < deadline, "the waiter never tried the new file");
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(outcome.try_recv().is_err(), "the waiter was granted while the new file is held");
    drop(new);
    let released = outcome.recv_timeout(Duration::from_secs(10)).unwrap().expect("granted once the new file is free");
    assert!(released.expect("its release finds its file under the key's name"), "a release of a held lease is true");
    block_on(waiter_provider.close());
    block_on(provider.close());
}

/// Unix only: Wine 8's `CreateSymbolicLinkW` makes a plain empty file, not
/// a link (real Windows needs a privilege or developer mode to make one).
#[test]
#[cfg(unix)]
fn a_planted_symlink_is_refused_and_never_followed() {
    let dir = fresh_directory("symlink");
    let (provider, locks) = open(&dir, "");
    let lease = block_on(locks.acquire("k", wait(0))).unwrap();
    let name = entries(&dir).remove(0);
    drop(lease);
    assert_eq!(entries_after_keep(&dir), Vec::<String>::new());
    let target = fresh_directory("symlink-target");
    std::os::unix::fs::symlink(&target, dir.join(&name)).unwrap();
    let err = block_on(locks.acquire("k", wait(0))).unwrap_err();
    assert_eq!(err.code(), ErrorCode::ProviderFailed);
    assert!(err.message().contains("symbolic link"), "{err:?}");
    assert!(!target.exists(), "the link's target was not created");
    block_on(provider.close());
}

#[test]
#[cfg(unix)]
fn a_lock_file_of_another_user_is_refused() {
    if rustix_like_euid() != 0 {
        // Giving a file away takes root; this machine's tests (and CI) run as root.
        panic!("this test needs root, to give a file to another user");
    }
    let dir = fresh_directory("owner");
    let (provider, locks) = open(&dir, "");
    let lease = block_on(locks.acquire("k", wait(0))).unwrap();
    let name = entries(&dir).remove(0);
    drop(lease);
    assert_eq!(entries_after_keep(&dir), Vec::<String>::new());
    let path = dir.join(&name);
    std::fs::write(&path, b"").unwrap();
    std::os::unix::fs::chown(&path, Some(65534), Some(65534)).unwrap();
    let err = block_on(locks.acquire("k", wait(0))).unwrap_err();
    assert_eq!(err.code(), ErrorCode::ProviderFailed);
    assert!(err.message().contains("owned by user 65534"), "{err:?}");
    block_on(provider.close());
}

#[cfg(unix)]
fn rustix_like_euid() -> u32 {
    use std::os::unix::fs::MetadataExt;
    // The owner of a file this process creates is its effective user.
    let probe = fresh_directory("euid");
    std::fs::create_dir_all(&probe).unwrap();
    let uid = std::fs::metadata(&probe).unwrap().uid();
    let _ = std::fs::remove_dir(&probe);
    uid
}

#[test]
fn waiters_of_one_process_are_served_in_fifo_order() {
    let dir = fresh_directory("fifo");
    let (provider, locks) = open(&dir, "");
    let first = block_on(locks.acquire("k", wait(0))).unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut threads = Vec::new();
    for n in 0..6 {
        let (queued, order) = (locks.clone(), order.clone());
        threads.push(std::thread::spawn(move || {
            let lease = block_on(queued.acquire("k", wait(10_000))).unwrap();
            order.lock().unwrap().push(n);
            std::thread::sleep(Duration::from_millis(2));
            drop(lease);
        }));
        // Each joins the queue before the next starts.
        while locks.status().waiting < n + 1 {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    drop(first);
    threads.into_iter().for_each(|t| t.join().unwrap());
    assert_eq!(*order.lock().unwrap(), vec![0, 1, 2, 3, 4, 5]);
    assert_eq!(entries_after_keep(&dir), Vec::<String>::new());
    block_on(provider.close());
}

#[test]
fn a_wait_ends_with_wait_timeout_aborted_or_closed_and_leaves_nothing_held() {
    let dir = fresh_directory("codes");
    let (provider, locks) = open(&dir, "");
    let held = block_on(locks.acquire("k", wait(0))).unwrap();

    let started = std::time::Instant::now();
    let err = block_on(locks.acquire("k", wait(80))).unwrap_err();
    assert_eq!(err.code(), ErrorCode::WaitTimeout);
    assert!(started.elapsed() >= Duration::from_millis(80));
    assert_eq!(locks.status().timed_out, 1);

    let controller = AbortController::new();
    let options = AcquireOptions { signal: Some(controller.signal()), ..wait(10_000) };
    let aborter = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(30));
        controller.abort();
    });
    assert_eq!(block_on(locks.acquire("k", options)).unwrap_err().code(), ErrorCode::Aborted);
    aborter.join().unwrap();
    let controller = AbortController::new();
    controller.abort();
    let options = AcquireOptions { signal: Some(controller.signal()), ..wait(10_000) };
    assert_eq!(block_on(locks.acquire("free", options)).unwrap_err().code(), ErrorCode::Aborted, "aborted before");
    assert_eq!(locks.status().waiting, 0);

    let waiter = std::thread::spawn({
        let locks = locks.clone();
        move || block_on(locks.acquire("k", wait(10_000))).unwrap_err().code()
    });
    while locks.status().waiting == 0 {
        std::thread::sleep(Duration::from_millis(1));
    }
    block_on(provider.close());
    assert_eq!(waiter.join().unwrap(), ErrorCode::Closed);
    assert!(!held.is_valid(), "close releases held leases");
    assert_eq!(block_on(locks.acquire("k", wait(0))).unwrap_err().code(), ErrorCode::Closed);
    assert_eq!(entries(&dir), Vec::<String>::new());
}

#[test]
fn a_dropped_acquire_leaves_the_queue_and_the_next_waiter_is_served() {
    let dir = fresh_directory("dropped");
    let (provider, locks) = open(&dir, "");
    let held = block_on(locks.acquire("k", wait(0))).unwrap();
    let mut dropped = Box::pin(locks.acquire("k", wait(10_000)));
    let waker = futures::task::noop_waker();
    assert!(std::future::Future::poll(dropped.as_mut(), &mut std::task::Context::from_waker(&waker)).is_pending());
    assert_eq!(locks.status().waiting, 1);
    drop(dropped);
    assert_eq!(locks.status().waiting, 0);
    drop(held);
    block_on(locks.acquire("k", wait(0))).expect("nothing holds the key");
    block_on(provider.close());
}

#[test]
fn max_waiters_is_queue_full_and_max_keys_is_key_limit() {
    let dir = fresh_directory("limits");
    let (provider, locks) = open(&dir, "maxWaiters: 1, maxKeys: 2");
    let a = block_on(locks.acquire("a", wait(0))).unwrap();
    let _b = block_on(locks.acquire("b", wait(0))).unwrap();
    assert_eq!(block_on(locks.acquire("c", wait(0))).unwrap_err().code(), ErrorCode::KeyLimit);
    let waiter = std::thread::spawn({
        let locks = locks.clone();
        move || block_on(locks.acquire("a", wait(10_000))).map(|_| ())
    });
    while locks.status().waiting == 0 {
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(block_on(locks.acquire("a", wait(1_000))).unwrap_err().code(), ErrorCode::QueueFull);
    drop(a);
    waiter.join().unwrap().unwrap();
    block_on(provider.close());
}

#[test]
fn inside_a_process_readers_share_a_key_and_a_queued_writer_goes_before_later_readers() {
    let dir = fresh_directory("kinds-shared");
    let (provider, locks) = open(&dir, "");
    let shared = |ms| AcquireOptions { mode: LockMode::Shared, ..wait(ms) };
    let first = block_on(locks.acquire("k", shared(0))).unwrap();
    let second = block_on(locks.acquire("k", shared(0))).expect("readers hold a key together");
    assert_eq!(locks.status().held_shared, 2);
    let order = Arc::new(Mutex::new(Vec::new()));
    let writer = std::thread::spawn({
        let (locks, order) = (locks.clone(), order.clone());
        move || {
            let lease = block_on(locks.acquire("k", wait(10_000))).unwrap();
            order.lock().unwrap().push("writer");
            std::thread::sleep(Duration::from_millis(20));
            drop(lease);
        }
    });
    while locks.status().waiting == 0 {
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(block_on(locks.acquire("k", shared(0))).unwrap_err().code(), ErrorCode::LockBusy, "a later reader waits behind the writer");
    let reader = std::thread::spawn({
        let (locks, order) = (locks.clone(), order.clone());
        move || {
            let _lease = block_on(locks.acquire("k", shared(10_000))).unwrap();
            order.lock().unwrap().push("reader");
        }
    });
    while locks.status().waiting < 2 {
        std::thread::sleep(Duration::from_millis(1));
    }
    drop((first, second));
    writer.join().unwrap();
    reader.join().unwrap();
    assert_eq!(*order.lock().unwrap(), ["writer", "reader"]);
    assert_eq!(entries_after_keep(&dir), Vec::<String>::new(), "nothing is left behind");
    block_on(provider.close());
}

#[test]
fn inside_a_process_a_counted_key_holds_up_to_its_limit_and_one_limit_per_key() {
    let dir = fresh_directory("kinds-counted");
    let (provider, locks) = open(&dir, "");
    let counted = |limit, weight| AcquireOptions { limit: Some(limit), weight: Some(weight), ..wait(0) };
    let two = block_on(locks.acquire("k", counted(3, 2))).unwrap();
    let one = block_on(locks.acquire("k", counted(3, 1))).unwrap();
    assert!(one.fence() > two.fence());
    assert_eq!(block_on(locks.acquire("k", counted(3, 1))).unwrap_err().code(), ErrorCode::LockBusy);
    assert_eq!(block_on(locks.acquire("k", counted(4, 1))).unwrap_err().code(), ErrorCode::InvalidArgument);
    assert_eq!(block_on(locks.acquire("k", wait(0))).unwrap_err().code(), ErrorCode::InvalidArgument, "a plain acquire is limit 1");
    drop(two);
    let again = block_on(locks.acquire("k", counted(3, 2))).expect("released units are free again");
    drop((one, again));
    assert_eq!(entries_after_keep(&dir), Vec::<String>::new(), "no lock or unit file is left behind");
    block_on(provider.close());
}

#[test]
fn several_keys_are_held_all_or_none_with_a_fence_per_key() {
    let dir = fresh_directory("kinds-many");
    let (provider, locks) = open(&dir, "");
    let b = block_on(locks.acquire("b", wait(0))).unwrap();
    let b_fence = b.fence();
    assert_eq!(block_on(locks.acquire_many(&["a", "b"], wait(0))).unwrap_err().code(), ErrorCode::LockBusy);
    let a_fence = block_on(locks.acquire("a", wait(0))).expect("a refused set holds none of its keys").fence();
    drop(b);
    let both = block_on(locks.acquire_many(&["b", "a"], wait(0))).unwrap();
    assert_eq!(both.keys(), ["b", "a"]);
    let fences = both.fences();
    assert_eq!(fences.iter().map(|(key, _)| *key).collect::<Vec<_>>(), ["b", "a"]);
    assert!(fences[0].1 > b_fence && fences[1].1 > a_fence, "each key's fence above its own earlier grant: {fences:?}");
    assert_eq!(block_on(locks.acquire("a", wait(0))).unwrap_err().code(), ErrorCode::LockBusy);
    drop(both);
    assert_eq!(entries_after_keep(&dir), Vec::<String>::new(), "nothing is left behind");
    block_on(provider.close());
}

#[test]
fn status_counts_held_and_waiting_leases_of_the_file_driver() {
    let dir = fresh_directory("status");
    let (provider, locks) = open(&dir, "");
    let lease = block_on(locks.acquire("k", wait(0))).unwrap();
    let status = locks.status();
    assert_eq!((status.driver, status.held, status.waiting, status.acquired), ("file", 1, 0, 1));
    drop(lease);
    assert_eq!(locks.status().held, 0);
    block_on(provider.close());
}

/// Two providers over one lock directory, reached through `link`, with
/// `k` held through the first (and `j`'s file kept by the second); then
/// `swap` replaces the directory under them: the second must not be granted `k` in the new directory while the
/// first holds it in the old one (two holders), and the first learns at
/// release that its section may have overlapped.
#[cfg(unix)]
fn a_replaced_directory_is_refused_and_its_holders_are_told(label: &str, swap: impl FnOnce(&std::path::Path)) {
    let base = fresh_directory(label);
    std::fs::create_dir_all(base.join("one")).unwrap();
    std::os::unix::fs::symlink(base.join("one"), base.join("link")).unwrap();
    let dir = base.join("link").join("locks");
    let (first_provider, first) = open(&dir, "");
    let (second_provider, second) = open(&dir, "");
    let lease = block_on(first.acquire("k", wait(0))).unwrap();
    // `j`'s lock file is kept open for reuse by the second provider: a
    // grant through it opens nothing, and is refused all the same.
    assert!(block_on(block_on(second.acquire("j", wait(0))).unwrap().release()).unwrap());
    swap(&base);
    let err = block_on(second.acquire("j", wait(0))).expect_err("no grant through a kept file of the old directory");
    assert_eq!(err.code(), ErrorCode::ProviderFailed, "{err:?}");
    match block_on(second.acquire("k", wait(0))) {
        Ok(_) => panic!("granted k in the new directory while the first provider holds it in the old one"),
        Err(err) => {
            assert_eq!(err.code(), ErrorCode::ProviderFailed, "{err:?}");
            assert!(err.message().contains("replaced"), "the error says what happened: {err:?}");
        }
    }
    let err = block_on(lease.release()).unwrap_err();
    assert_eq!(err.code(), ErrorCode::LeaseLost, "the holder is told: {err:?}");
    // A provider opened now works in the directory the path names now.
    let (third_provider, third) = open(&dir, "");
    assert!(block_on(block_on(third.acquire("k", wait(0))).unwrap().release()).unwrap());
    for provider in [first_provider, second_provider, third_provider] {
        block_on(provider.close());
    }
}

#[test]
#[cfg(unix)]
fn a_lock_directory_behind_a_repointed_symlink_is_refused_and_its_holders_are_told() {
    a_replaced_directory_is_refused_and_its_holders_are_told("repointed", |base| {
        std::fs::create_dir_all(base.join("two").join("locks")).unwrap();
        std::fs::set_permissions(base.join("two").join("locks"), std::fs::Permissions::from_mode(0o700)).unwrap();
        std::os::unix::fs::symlink(base.join("two"), base.join("link.new")).unwrap();
        std::fs::rename(base.join("link.new"), base.join("link")).unwrap();
    });
}

#[test]
#[cfg(unix)]
fn a_lock_directory_removed_and_made_again_is_refused_and_its_holders_are_told() {
    a_replaced_directory_is_refused_and_its_holders_are_told("remade", |base| {
        let dir = base.join("one").join("locks");
        std::fs::remove_dir_all(&dir).unwrap();
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    });
}

#[test]
#[cfg(unix)]
fn a_lock_directory_that_is_a_symbolic_link_itself_is_refused_at_open() {
    let base = fresh_directory("dir-link");
    std::fs::create_dir_all(base.join("real")).unwrap();
    std::fs::set_permissions(base.join("real"), std::fs::Permissions::from_mode(0o700)).unwrap();
    std::os::unix::fs::symlink(base.join("real"), base.join("link")).unwrap();
    let err = Provider::from_yaml(&yaml(&base.join("link"), "")).err().unwrap();
    assert_eq!(err.code(), ErrorCode::InvalidOptions);
    assert!(err.issues()[0].message.contains("symbolic link"), "{err:?}");
}

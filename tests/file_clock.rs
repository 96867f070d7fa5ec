//! Fences of the file driver when the host's clock goes back: a process
//! whose clock is 10 s behind (libfaketime, as an NTP step back or a VM's
//! corrected clock would leave it) takes a key whose lock file another
//! process removed, and its fence must still be above that process's. The
//! removed file's counter is gone with it, and a new file's first fence
//! was the clock (10 s below) before the directory kept a floor of removed
//! counters. Every kind: exclusive, shared, counted.
//!
//! This test binary runs itself as the child (`child_behind`, ignored in a
//! plain run, is its entry point) under `faketime` (the Debian package,
//! scripts/setup base).

#![cfg(unix)]

mod file;

use std::process::{Command, Stdio};

use dokebi_lock::AcquireOptions;
use file::{counted, entries, fresh_directory, open, shared, wait, WAKE_UP};
use futures::executor::block_on;

/// How far behind the child's clock is.
const BEHIND: &str = "-10s";

/// The acquire options of `kind`: `exclusive`, `shared` or `counted`.
fn options(kind: &str) -> AcquireOptions {
    match kind {
        "exclusive" => wait(5_000),
        "shared" => shared(5_000),
        "counted" => counted(2, 1, 5_000),
        _ => panic!("unknown kind {kind}"),
    }
}

/// The child's entry point: takes "k" in the kind `DOKEBI_FILE_CHILD` names
/// in the directory `DOKEBI_FILE_DIR` and prints its clock and the grant's fence.
#[test]
#[ignore = "the child process of the tests below, which run it"]
fn child_behind() {
    let Ok(kind) = std::env::var("DOKEBI_FILE_CHILD") else { return };
    let (provider, locks) = open(std::path::Path::new(&std::env::var("DOKEBI_FILE_DIR").unwrap()), WAKE_UP);
    let lease = block_on(locks.acquire("k", options(&kind))).unwrap();
    println!("clock {} fence {}", file::clock_us(), lease.fence());
    block_on(lease.release()).unwrap();
    block_on(provider.close());
}

/// Takes "k" in `kind` here, releases it and closes the backend (which
/// removes the key's files), then in a child whose clock is [`BEHIND`]:
/// the child's fence must be above this process's.
fn a_grant_behind_the_clock_is_above_a_removed_file_s(kind: &str) {
    let dir = fresh_directory(&format!("clock-{kind}"));
    let (provider, locks) = open(&dir, WAKE_UP);
    let lease = block_on(locks.acquire("k", options(kind))).unwrap();
    let before = lease.fence();
    block_on(lease.release()).unwrap();
    block_on(provider.close());
    assert_eq!(entries(&dir), Vec::<String>::new(), "the key's lock file was removed");
    let output = Command::new("faketime")
        .args(["-f", BEHIND])
        .arg(std::env::current_exe().unwrap())
        .args(["--exact", "child_behind", "--ignored", "--nocapture", "--test-threads=1"])
        .env("FAKETIME_DONT_FAKE_MONOTONIC", "1")
        .env("DOKEBI_FILE_CHILD", kind)
        .env("DOKEBI_FILE_DIR", &*dir)
        .stderr(Stdio::inherit())
        .output()
        .expect("faketime runs (the Debian package faketime: scripts/setup base)");
    assert!(output.status.success(), "the child failed: {}", String::from_utf8_lossy(&output.stdout));
    let stdout = String::from_utf8_lossy(&output.stdout);
    let line = stdout.lines().find_map(|line| line.split_once("clock ").map(|(_, rest)| rest)).expect("the child printed its grant");
    let (clock, fence) = line.split_once(" fence ").unwrap();
    let (clock, fence): (u64, u64) = (clock.parse().unwrap(), fence.trim().parse().unwrap());
    assert!(clock + 5_000_000 < before, "the child's clock ({clock}) is behind the fence of the grant before ({before})");
    assert!(fence > before, "{kind}: the fence went back: {fence} after {before} ({} ms below)", before.saturating_sub(fence) / 1_000);
}

#[test]
fn an_exclusive_grant_behind_the_clock_is_above_a_removed_file_s() {
    a_grant_behind_the_clock_is_above_a_removed_file_s("exclusive");
}

#[test]
fn a_shared_grant_behind_the_clock_is_above_a_removed_file_s() {
    a_grant_behind_the_clock_is_above_a_removed_file_s("shared");
}

#[test]
fn a_counted_grant_behind_the_clock_is_above_a_removed_file_s() {
    a_grant_behind_the_clock_is_above_a_removed_file_s("counted");
}

//! Review r14: probes of the file driver's directory-wide fence floor
//! (`floor.lock`, 08cd66b) with processes whose clock is 10 s behind
//! (libfaketime, as tests/file_clock.rs runs them).
//!
//! Finding: the floor keeps fences from going back with the clock only
//! while `floor.lock` lasts, and it does not last until a reboot, as the
//! docs say: logind removes `/run/user/<uid>` (the docs' own example
//! directory) when the user's last session ends, and a tmp cleaner or a
//! hand removes a file the docs call "the one file that stays". Then a
//! process whose clock is behind grants about 10 s below the fence granted
//! before.
//!
//! Held: a child 10 s behind taking a counted or shared key in turns with
//! this process, which removes its files at every release: no fence of
//! either goes back or repeats (about 600 of its grants in 1.5 s are of a
//! new file, right after a removal); and a file kept for reuse, removed by
//! the wake-up thread, leaves its counter in the floor.

#![cfg(unix)]

mod file;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use dokebi_lock::{AcquireOptions, Backend};
use file::{counted, entries, fresh_directory, open, shared, wait, FLOOR_FILE, WAKE_UP};
use futures::executor::block_on;

/// How far behind the child's clock is.
const BEHIND: &str = "-10s";

/// How long each process of the race takes and releases the key.
const RACE_FOR: Duration = Duration::from_millis(1_500);

/// The acquire options of `kind`: `exclusive`, `shared` or `counted` (two
/// units of two: one holder at a time, and its files removed at once by
/// its release).
fn options(kind: &str) -> AcquireOptions {
    match kind {
        "exclusive" => wait(10_000),
        "shared" => shared(10_000),
        "counted" => counted(2, 2, 10_000),
        _ => panic!("unknown kind {kind}"),
    }
}

/// Takes and releases "k" in `kind` until `until`, appending each grant's
/// fence to the log `log` while holding it (appends are ordered by the
/// kernel, and a counted key's holds by its units, so the log's order is
/// the holds' order).
fn take_in_turns(locks: &Backend, kind: &str, log: &Path, until: Instant) {
    // The log is in the lock directory's work directory (`<dir>-work`).
    let dir = PathBuf::from(log.parent().unwrap().to_str().unwrap().strip_suffix("-work").unwrap());
    let mut log = std::fs::OpenOptions::new().append(true).create(true).open(log).unwrap();
    while Instant::now() < until {
        // Whether the key's files were gone just before (a glimpse: a hint
        // that this grant came from a new file, above the floor).
        let fresh = entries(&dir).is_empty();
        let lease = block_on(locks.acquire("k", options(kind))).unwrap();
        log.write_all(format!("{} {} {fresh}\n", std::process::id(), lease.fence()).as_bytes()).unwrap();
        block_on(lease.release()).unwrap();
        // Free, unmarked, for the other process's next try now and then.
        std::thread::sleep(Duration::from_micros(500));
    }
}

/// The child's entry point: `DOKEBI_R14_CHILD` is `once:<kind>` (takes
/// "k" once and prints its clock and the grant's fence) or
/// `race:<kind>:<log>` (see [`take_in_turns`]), in the directory
/// `DOKEBI_R14_DIR`.
#[test]
#[ignore = "the child process of the tests below, which run it"]
fn child_r14() {
    let Ok(role) = std::env::var("DOKEBI_R14_CHILD") else { return };
    let (provider, locks) = open(Path::new(&std::env::var("DOKEBI_R14_DIR").unwrap()), WAKE_UP);
    let mut parts = role.split(':');
    match (parts.next().unwrap(), parts.next().unwrap()) {
        ("once", kind) => {
            let lease = block_on(locks.acquire("k", options(kind))).unwrap();
            println!("clock {} fence {}", file::clock_us(), lease.fence());
            block_on(lease.release()).unwrap();
        }
        ("race", kind) => take_in_turns(&locks, kind, Path::new(parts.next().unwrap()), Instant::now() + RACE_FOR),
        _ => panic!("unknown role {role}"),
    }
    block_on(provider.close());
}

/// Runs this binary's [`child_r14`] as `role` over `dir` under `faketime`,
/// its clock [`BEHIND`].
fn behind(role: &str, dir: &Path) -> Command {
    let mut command = Command::new("faketime");
    command
        .args(["-f", BEHIND])
        .arg(std::env::current_exe().unwrap())
        .args(["--exact", "child_r14", "--ignored", "--nocapture", "--test-threads=1"])
        .env("FAKETIME_DONT_FAKE_MONOTONIC", "1")
        .env("DOKEBI_R14_CHILD", role)
        .env("DOKEBI_R14_DIR", dir)
        .stderr(Stdio::inherit());
    command
}

/// The child's clock and fence, from what [`child_r14`] printed.
fn clock_and_fence(output: &Output) -> (u64, u64) {
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "the child failed: {stdout}");
    let line = stdout.lines().find_map(|line| line.split_once("clock ").map(|(_, rest)| rest)).expect("the child printed its grant");
    let (clock, fence) = line.split_once(" fence ").unwrap();
    (clock.parse().unwrap(), fence.trim().parse().unwrap())
}

/// Takes "k" exclusive here and releases it (its file removed, the floor
/// raised to its fence: at the backend's close, or, `keep_open`, by its
/// wake-up thread once the file kept for reuse is due), then
/// `lose_the_floor` on the directory, then in a child whose clock is
/// [`BEHIND`]: the child's fence must be above this process's.
fn a_grant_behind_the_clock_after(label: &str, keep_open: bool, lose_the_floor: impl FnOnce(&Path)) {
    let dir = fresh_directory(&format!("r14-{label}"));
    let (provider, locks) = open(&dir, WAKE_UP);
    let lease = block_on(locks.acquire("k", options("exclusive"))).unwrap();
    let before = lease.fence();
    block_on(lease.release()).unwrap();
    if !keep_open {
        block_on(provider.close());
    }
    assert_eq!(file::entries_after_keep(&dir), Vec::<String>::new(), "the key's lock file was removed");
    assert!(dir.join(FLOOR_FILE).exists(), "its counter is in the floor");
    lose_the_floor(&dir);
    let (clock, fence) = clock_and_fence(&behind("once:exclusive", &dir).output().expect("faketime runs"));
    assert!(clock + 5_000_000 < before, "the child's clock ({clock}) is behind the fence before ({before})");
    assert!(fence > before, "{label}: the fence went back: {fence} after {before} ({} ms below)", before.saturating_sub(fence) / 1_000);
    if keep_open {
        block_on(provider.close());
    }
}

/// Held: the file a backend keeps for reuse after a release, removed by
/// its wake-up thread half a second later (not at a close, as
/// tests/file_clock.rs has it), raises the floor first.
#[test]
fn a_kept_file_removed_by_the_wake_up_thread_keeps_its_counter_in_the_floor() {
    a_grant_behind_the_clock_after("kept", true, |_| {});
}

/// Finding: logind removes `/run/user/<uid>` (and the lock directory in
/// it, floor and all) when the user's last session ends; no reboot
/// follows, and a process whose clock is behind (an NTP step back after
/// the next login) then grants from its clock alone. Failed on main:
/// "the fence went back: … (about 9990 ms below)".
#[test]
#[ignore = "open (docs/file.md says so now): a lock directory emptied while the host runs (logind at logout for /run/user/<uid>) loses the floor, and a fence goes back with the clock"]
fn a_fence_goes_back_behind_the_clock_after_logout_empties_the_directory() {
    a_grant_behind_the_clock_after("logout", false, |dir| std::fs::remove_dir_all(dir).unwrap());
}

/// Finding: the same for `floor.lock` alone removed, by a tmp cleaner or
/// by hand ("the one file that stays when every key is free"); the driver
/// makes a new floor at 0. Failed on main: "the fence went back: … (about
/// 9990 ms below)".
#[test]
#[ignore = "open (docs/file.md says so now): floor.lock removed (a tmp cleaner, by hand) loses the floor, and a fence goes back with the clock"]
fn a_fence_goes_back_behind_the_clock_after_floor_lock_is_removed() {
    a_grant_behind_the_clock_after("floor-removed", false, |dir| std::fs::remove_file(dir.join(FLOOR_FILE)).unwrap());
}

/// This process (its clock right) and a child 10 s behind take "k" in
/// `kind` in turns for [`RACE_FOR`]: this process's releases remove the
/// key's files (its clock is past their counters), the child's do not (it
/// waits for its clock to pass them), so the child keeps making the key's
/// new file right after a removal and granting above the floor. Answers
/// the log: each grant's process and fence, in order.
fn race(kind: &str) -> Vec<(u32, u64, bool)> {
    let dir = fresh_directory(&format!("r14-race-{kind}"));
    let log: PathBuf = file::work(&dir).join("log");
    std::fs::create_dir_all(file::work(&dir)).unwrap();
    let (provider, locks) = open(&dir, WAKE_UP);
    // The directory exists (0700) before the child opens it.
    drop(block_on(locks.acquire("warm-up", AcquireOptions::default())).unwrap());
    let mut child = behind(&format!("race:{kind}:{}", log.display()), &dir).stdout(Stdio::null()).spawn().expect("faketime runs");
    take_in_turns(&locks, kind, &log, Instant::now() + RACE_FOR);
    assert!(child.wait().unwrap().success(), "the child failed");
    block_on(provider.close());
    let grants: Vec<(u32, u64, bool)> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(|line| {
            let mut words = line.split(' ');
            let (pid, fence, fresh) = (words.next().unwrap(), words.next().unwrap(), words.next().unwrap());
            (pid.parse().unwrap(), fence.parse().unwrap(), fresh == "true")
        })
        .collect();
    let pids: std::collections::HashSet<u32> = grants.iter().map(|(pid, _, _)| *pid).collect();
    assert_eq!(pids.len(), 2, "both processes were granted {kind}: {} grants", grants.len());
    // The child's grants right after one of this process's, the key's files
    // gone just before: from a new file, above the floor (about 600 of 2,500).
    let here = std::process::id();
    let fresh = grants.windows(2).filter(|pair| pair[0].0 == here && pair[1].0 != here && pair[1].2).count();
    assert!(fresh > 10, "{kind}: the child took a removed key's new file {fresh} times of {} grants", grants.len());
    grants
}

/// Held: a counted key (one holder at a time) taken in turns by a process
/// and a child 10 s behind: every fence is above the one before it.
#[test]
fn a_child_behind_the_clock_racing_removals_of_a_counted_key_never_goes_back() {
    let grants = race("counted");
    for pair in grants.windows(2) {
        assert!(pair[1].1 > pair[0].1, "a counted fence went back: {:?} after {:?} (of {} grants)", pair[1], pair[0], grants.len());
    }
}

/// Held: a shared key taken in turns (and at times together) by a process
/// and a child 10 s behind: no two grants get one fence.
#[test]
fn a_child_behind_the_clock_racing_removals_of_a_shared_key_never_repeats() {
    let grants = race("shared");
    let mut fences: Vec<u64> = grants.iter().map(|(_, fence, _)| *fence).collect();
    fences.sort_unstable();
    let count = fences.len();
    fences.dedup();
    assert_eq!(fences.len(), count, "a shared fence repeated");
}

//! Who holds a key of the file driver (issue 53): `inspect` and a refused
//! acquire's `details` name the holders of other processes (writers,
//! readers, takers of units) by the records they write, with their fences
//! and how long they have held; a holder released, or killed, is gone from
//! them. This test binary runs itself as the holders (`child_process`).

mod file;

use std::io::Write;
use std::process::Child;
use std::time::Duration;

use dokebi_lock::{AcquireOptions, Backend, ErrorCode, HolderLabel, Inspection, LockMode, Provider};
use file::{as_child, expect_line, fresh_directory, hold_until_told, open, spawn, wait};
use futures::executor::block_on;

/// The children's entry point: does nothing unless run as a child.
#[test]
#[ignore = "the child process of the tests below, which run it"]
fn child_process() {
    let Some((role, _provider, locks)) = as_child() else { return };
    // `<kind> <label>`: takes `k` so, labelled, until told (a line on stdin).
    let (kind, label) = role.split_once(' ').unwrap();
    let lease = block_on(locks.acquire("k", of_kind(kind, label, 10_000))).unwrap();
    hold_until_told(lease);
}

/// An acquire of `kind` (`writer`, `reader`, `units<w>` of a key counted
/// to 3) labelled `label`, waiting `ms`.
fn of_kind(kind: &str, label: &str, ms: u64) -> AcquireOptions {
    let options = AcquireOptions { holder: Some(HolderLabel::new(label).unwrap()), ..wait(ms) };
    match kind {
        "writer" => options,
        "reader" => AcquireOptions { mode: LockMode::Shared, ..options },
        units => AcquireOptions { limit: Some(3), weight: Some(units.trim_start_matches("units").parse().unwrap()), ..options },
    }
}

/// A child holding `k` as `kind`, labelled `label`: it and its fence.
struct Holder {
    child: Child,
    out: std::io::BufReader<std::process::ChildStdout>,
    fence: u64,
}

impl Holder {
    fn start(dir: &std::path::Path, kind: &str, label: &str) -> Holder {
        let (child, mut out) = spawn(&format!("{kind} {label}"), dir, "");
        let fence = expect_line(&mut out, "held ").parse().unwrap();
        Holder { child, out, fence }
    }

    fn release(mut self) {
        writeln!(self.child.stdin.as_mut().unwrap()).unwrap();
        expect_line(&mut self.out, "released");
        self.child.wait().unwrap();
    }

    fn kill(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }
}

fn inspect(backend: &Backend) -> Inspection {
    block_on(backend.inspect("k")).unwrap()
}

/// The holders' labels and fences, in the order listed.
fn named(found: &Inspection) -> Vec<(Option<String>, Option<u64>)> {
    found.holders.iter().map(|holder| (holder.label.clone(), holder.fence)).collect()
}

#[test]
fn a_writer_of_another_process_is_named_with_its_fence_and_time() {
    let dir = fresh_directory("holders-writer");
    let (provider, locks) = open(&dir, "");
    let untouched = inspect(&locks);
    assert_eq!((untouched.held, untouched.mode, untouched.fence, untouched.waiting), (0, None, None, 0), "{untouched:?}");
    let holder = Holder::start(&dir, "writer", "job-7");
    std::thread::sleep(Duration::from_millis(30));
    let found = inspect(&locks);
    assert_eq!((found.held, found.mode, found.limit, found.fence), (1, Some(LockMode::Exclusive), 1, Some(holder.fence)), "{found:?}");
    assert_eq!(named(&found), [(Some("job-7".into()), Some(holder.fence))]);
    let held_for = found.holders[0].held_for.expect("the record's time");
    assert!(held_for >= Duration::from_millis(30) && held_for < Duration::from_secs(30), "{held_for:?}");
    assert_eq!(found.holders[0].remaining, None, "a file lease does not expire");
    for ms in [0, 50] {
        let refused = block_on(locks.acquire("k", wait(ms))).unwrap_err();
        let code = if ms == 0 { ErrorCode::LockBusy } else { ErrorCode::WaitTimeout };
        assert_eq!(refused.code(), code, "{refused}");
        let details = refused.details().expect("the holder is named");
        assert_eq!(details["held"], 1, "{details}");
        assert_eq!(details["holders"][0]["label"], "job-7", "{details}");
        assert_eq!(details["holders"][0]["fence"], holder.fence.to_string(), "{details}");
        assert!(details["holders"][0]["heldForMs"].as_u64().unwrap() >= 30, "{details}");
        assert_eq!(details["holders"][0]["remainingMs"], serde_json::Value::Null, "{details}");
    }
    holder.release();
    let free = inspect(&locks);
    assert_eq!((free.held, free.mode), (0, None), "released: {free:?}");
    // A release by a process that lives on (its file kept open for reuse)
    // clears its record too.
    let mine = block_on(locks.acquire("k", wait(0))).unwrap();
    assert_eq!(inspect(&locks).held, 1);
    assert!(block_on(mine.release()).unwrap());
    let after_mine = inspect(&locks);
    assert_eq!((after_mine.held, after_mine.fence.is_some()), (0, true), "{after_mine:?}");
    // Killed in its section: the kernel frees the key, and inspect says so.
    let killed = Holder::start(&dir, "writer", "doomed");
    assert_eq!(inspect(&locks).held, 1);
    killed.kill();
    let after = inspect(&locks);
    assert_eq!((after.held, after.mode), (0, None), "{after:?}");
    block_on(provider.close());
}

#[test]
fn readers_of_several_processes_are_each_named_until_they_go() {
    let dir = fresh_directory("holders-readers");
    let (provider, locks) = open(&dir, "");
    let first = Holder::start(&dir, "reader", "reader-a");
    let second = Holder::start(&dir, "reader", "reader-b");
    let mine = block_on(locks.acquire("k", of_kind("reader", "reader-c", 0))).unwrap();
    let found = inspect(&locks);
    assert_eq!((found.held, found.mode, found.fence), (3, Some(LockMode::Shared), Some(mine.fence())), "{found:?}");
    let mut seen = named(&found);
    seen.sort();
    assert_eq!(
        seen,
        [
            (Some("reader-a".into()), Some(first.fence)),
            (Some("reader-b".into()), Some(second.fence)),
            (Some("reader-c".into()), Some(mine.fence()))
        ]
    );
    // A writer refused names the readers.
    let refused = block_on(locks.acquire("k", wait(0))).unwrap_err();
    assert_eq!(refused.code(), ErrorCode::LockBusy);
    assert_eq!(refused.details().unwrap()["held"], 3, "{refused:?}");
    first.release();
    assert_eq!(named(&inspect(&locks)).len(), 2, "a reader that let go cleared its record");
    second.kill();
    let left = inspect(&locks);
    assert_eq!(named(&left), [(Some("reader-c".into()), Some(mine.fence()))], "a killed reader's record goes with its process");
    assert!(block_on(mine.release()).unwrap());
    assert_eq!(inspect(&locks).held, 0);
    block_on(provider.close());
}

/// More readers than the lock file has slots: each grant still holds; the
/// records name as many as there are slots, and a slot is taken again
/// once its reader lets go.
#[test]
fn readers_past_the_slots_hold_unrecorded() {
    let dir = fresh_directory("holders-many-readers");
    let (provider, locks) = open(&dir, "");
    let leases: Vec<_> =
        (0..20).map(|i| block_on(locks.acquire("k", of_kind("reader", &format!("r{i}"), 0))).expect("every reader holds")).collect();
    let found = inspect(&locks);
    assert_eq!((found.held, found.mode), (16, Some(LockMode::Shared)), "as many as the slots: {found:?}");
    let mut leases = leases.into_iter();
    assert!(block_on(leases.next().unwrap().release()).unwrap());
    let late = block_on(locks.acquire("k", of_kind("reader", "late", 0))).unwrap();
    let found = inspect(&locks);
    assert!(found.holders.iter().any(|holder| holder.label.as_deref() == Some("late")), "the freed slot is taken: {found:?}");
    drop(late);
    drop(leases);
    block_on(provider.close());
}

#[test]
fn units_of_a_counted_key_name_each_grant_with_its_units() {
    let dir = fresh_directory("holders-units");
    let (provider, locks) = open(&dir, "");
    let two = Holder::start(&dir, "units2", "batch");
    let one = block_on(locks.acquire("k", of_kind("units1", "mine", 0))).unwrap();
    let found = inspect(&locks);
    assert_eq!((found.held, found.limit, found.mode), (2, 3, Some(LockMode::Exclusive)), "{found:?}");
    let units: Vec<(Option<String>, u32, Option<u64>)> =
        found.holders.iter().map(|holder| (holder.label.clone(), holder.units, holder.fence)).collect();
    assert_eq!(units, [(Some("batch".into()), 2, Some(two.fence)), (Some("mine".into()), 1, Some(one.fence()))]);
    let refused = block_on(locks.acquire("k", of_kind("units1", "third", 0))).unwrap_err();
    assert_eq!(refused.code(), ErrorCode::LockBusy);
    assert_eq!(refused.details().unwrap()["holders"][0]["units"], 2, "{refused:?}");
    two.release();
    let left = inspect(&locks);
    assert_eq!(named(&left), [(Some("mine".into()), Some(one.fence()))], "{left:?}");
    let killed = Holder::start(&dir, "units1", "doomed");
    assert_eq!(inspect(&locks).held, 2);
    killed.kill();
    assert_eq!(inspect(&locks).held, 1, "a killed taker's units are free, and its records read as none");
    drop(one);
    block_on(provider.close());
}

/// The provider's `holder` labels a lease whose acquire gives none; this
/// backend's waiter and another process's marked one are counted.
#[test]
fn the_provider_s_label_and_the_waiters() {
    let dir = fresh_directory("holders-waiters");
    let yaml = format!(
        "schemaVersion: 1\noptions:\n  dokebi-lock:\n    holder: api-1\n    backends:\n      locks: {{ driver: file, directory: '{}' }}\n",
        dir.display()
    );
    let provider = Provider::from_yaml(&yaml).unwrap();
    let locks = provider.backend("locks").unwrap();
    let lease = block_on(locks.acquire("k", wait(0))).unwrap();
    assert_eq!(named(&inspect(&locks)), [(Some("api-1".into()), Some(lease.fence()))]);
    let queued = {
        let locks = locks.clone();
        std::thread::spawn(move || block_on(locks.acquire("k", wait(10_000))).map(drop))
    };
    let (mut child, _out) = spawn("writer elsewhere", &dir, "");
    let both = (0..500).any(|_| {
        std::thread::sleep(Duration::from_millis(10));
        inspect(&locks).waiting == 2
    });
    assert!(both, "this backend's waiter and the other process's: {:?}", inspect(&locks));
    child.kill().unwrap();
    child.wait().unwrap();
    drop(lease);
    queued.join().unwrap().unwrap();
    block_on(provider.close());
}

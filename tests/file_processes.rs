//! The file driver between real processes: this test binary runs itself as
//! the children (`child_process`, ignored in a plain run, is their entry
//! point), which lock a key of one directory while the parent watches.

mod file;

use std::io::Write;
use std::time::{Duration, Instant};

use dokebi_lock::{ErrorCode, Provider};
use file::{as_child, expect_line, fresh_directory, hold_until_told, open, spawn, wait, WAKE_UP};
use futures::executor::block_on;

/// The children's entry point: does nothing unless run as a child.
#[test]
#[ignore = "the child process of the tests below, which run it"]
fn child_process() {
    let Some((role, _provider, locks)) = as_child() else { return };
    let dir = std::path::PathBuf::from(std::env::var("DOKEBI_FILE_DIR").unwrap());
    let mut stdout = std::io::stdout();
    match role.as_str() {
        // Holds the key until told (a line on stdin), then releases it.
        "hold" => {
            let lease = block_on(locks.acquire("shared-key", wait(10_000))).unwrap();
            hold_until_told(lease);
        }
        // Waits for the key (a minute at most), marking its lock file.
        "wait" => {
            let outcome = block_on(locks.acquire("shared-key", wait(60_000)));
            writeln!(stdout, "granted {}", outcome.is_ok()).unwrap();
        }
        // Takes the key 200 times; inside, checks and updates a store that
        // only the holder may touch (a read-modify-write of a count and the
        // last fence, which must rise).
        "hammer" => {
            let store = dir.join("store.txt");
            for _ in 0..200 {
                let lease = block_on(locks.acquire("shared-key", wait(30_000))).unwrap();
                let text = std::fs::read_to_string(&store).unwrap_or_else(|_| "0 0".into());
                let mut parts = text.split_whitespace().map(|n| n.parse::<u64>().unwrap());
                let (count, last) = (parts.next().unwrap(), parts.next().unwrap());
                assert!(lease.fence() > last, "fence {} not above the store's {last}", lease.fence());
                // 1 ms between the read and the write: two holders at once lose a count.
                std::thread::sleep(std::time::Duration::from_millis(1));
                std::fs::write(&store, format!("{} {}", count + 1, lease.fence())).unwrap();
                assert!(block_on(lease.release()).unwrap());
            }
            writeln!(stdout, "done").unwrap();
        }
        // Takes and releases the key in a loop (with `threads` tasks) for
        // two seconds, counting its grants.
        "loop" | "loop2" => {
            let threads = if role == "loop" { 1 } else { 2 };
            let started = std::time::Instant::now();
            let workers: Vec<_> = (0..threads)
                .map(|_| {
                    let locks = locks.clone();
                    std::thread::spawn(move || {
                        let mut grants = 0u64;
                        while started.elapsed() < Duration::from_secs(2) {
                            let lease = block_on(locks.acquire("shared-key", wait(30_000))).unwrap();
                            grants += 1;
                            // A section, then at once the next acquire.
                            std::thread::sleep(Duration::from_millis(1));
                            drop(lease);
                        }
                        grants
                    })
                })
                .collect();
            writeln!(stdout, "looping").unwrap();
            stdout.flush().unwrap();
            let grants: u64 = workers.into_iter().map(|w| w.join().unwrap()).sum();
            writeln!(stdout, "grants {grants}").unwrap();
        }
        // Opens four more backends, each over a directory of its own, with
        // an acquire waiting on each, and counts this process's inotify
        // instances.
        #[cfg(any(target_os = "linux", target_os = "android"))]
        "inotify" => {
            let _held = block_on(locks.acquire("shared-key", wait(0))).unwrap();
            let mut others = Vec::new();
            for n in 0..4 {
                let (provider, backend) = file::open(&dir.join(format!("more-{n}")), "");
                let _held = block_on(backend.acquire("shared-key", wait(0))).unwrap();
                // A second provider over the same directory waits on the key.
                let (waiting_provider, waiting) = file::open(&dir.join(format!("more-{n}")), "");
                let waiter = std::thread::spawn(move || block_on(waiting.acquire("shared-key", wait(300))).map(drop));
                others.push((provider, waiting_provider, waiter, _held));
            }
            std::thread::sleep(Duration::from_millis(100));
            let instances = std::fs::read_dir("/proc/self/fd")
                .unwrap()
                .filter_map(|entry| std::fs::read_link(entry.unwrap().path()).ok())
                .filter(|target| target.as_os_str() == "anon_inode:inotify")
                .count();
            writeln!(stdout, "inotify {instances}").unwrap();
            for (_, _, waiter, _) in others {
                let _ = waiter.join();
            }
        }
        // Lowers its limit of open files to 64, then takes keys until an
        // acquire fails, and prints that failure.
        #[cfg(unix)]
        "few-files" => {
            use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
            let hard = getrlimit(Resource::Nofile).maximum;
            setrlimit(Resource::Nofile, Rlimit { current: Some(64), maximum: hard }).unwrap();
            let mut held = Vec::new();
            let error = loop {
                match block_on(locks.acquire(&format!("key-{}", held.len()), wait(0))) {
                    Ok(lease) => held.push(lease),
                    Err(error) => break error,
                }
            };
            writeln!(stdout, "failed {:?} {}", error.code(), error.message()).unwrap();
        }
        other => panic!("unknown role {other}"),
    }
}

#[test]
fn processes_take_a_key_one_at_a_time_and_fences_rise_in_a_fenced_store() {
    let dir = fresh_directory("hammer");
    let (provider, _locks) = open(&dir, "");
    let children: Vec<_> = (0..3).map(|_| spawn("hammer", &dir, "")).collect();
    for (mut child, mut out) in children {
        expect_line(&mut out, "done");
        assert!(child.wait().unwrap().success());
    }
    let text = std::fs::read_to_string(dir.join("store.txt")).unwrap();
    assert_eq!(text.split_whitespace().next().unwrap(), "600", "every section saw the count of the one before it");
    assert_eq!(file::entries_after_keep(&dir), vec!["store.txt".to_owned()], "no lock file is left behind");
    block_on(provider.close());
}

/// How long after a release in another process (the child holding
/// "shared-key" is told to release) a waiter of this process, over a
/// backend with `extra` settings, is granted the key.
fn hand_off_after_a_release_in_another_process(extra: &str) -> Duration {
    let dir = fresh_directory("wake");
    let (provider, locks) = open(&dir, extra);
    let (mut child, mut out) = spawn("hold", &dir, "");
    let fence: u64 = expect_line(&mut out, "held").parse().unwrap();
    let waiter = std::thread::spawn({
        let locks = locks.clone();
        move || {
            let lease = block_on(locks.acquire("shared-key", wait(10_000))).unwrap();
            (Instant::now(), lease.fence())
        }
    });
    while locks.status().waiting == 0 {
        std::thread::sleep(Duration::from_millis(1));
    }
    std::thread::sleep(Duration::from_millis(20));
    let released = Instant::now();
    writeln!(child.stdin.as_mut().unwrap()).unwrap();
    child.stdin.as_mut().unwrap().flush().unwrap();
    let (granted, next) = waiter.join().unwrap();
    let hand_off = granted.duration_since(released);
    assert!(next > fence);
    eprintln!("hand-off after a release in another process ({extra}): {hand_off:?}");
    assert!(child.wait().unwrap().success());
    block_on(provider.close());
    hand_off
}

#[test]
#[cfg(any(target_os = "linux", target_os = "android"))]
fn a_release_in_another_process_wakes_a_waiter_at_once_not_at_the_next_poll() {
    // A minute between polls: only the release's wake-up can be in time.
    let hand_off = hand_off_after_a_release_in_another_process("pollIntervalMs: 60000");
    assert!(hand_off < Duration::from_secs(1), "woken after {hand_off:?}");
}

/// Without inotify (Windows, macOS) the wake-up is the next poll.
#[test]
#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn a_release_in_another_process_wakes_a_waiter_at_its_next_poll() {
    let hand_off = hand_off_after_a_release_in_another_process("pollIntervalMs: 10");
    assert!(hand_off < Duration::from_millis(500), "woken after {hand_off:?}");
}

#[test]
fn a_killed_holder_frees_the_key_for_a_waiting_process_within_milliseconds() {
    let dir = fresh_directory("kill");
    let (provider, locks) = open(&dir, WAKE_UP);
    let (mut child, mut out) = spawn("hold", &dir, "");
    let fence: u64 = expect_line(&mut out, "held").parse().unwrap();
    assert_eq!(block_on(locks.acquire("shared-key", wait(0))).unwrap_err().code(), ErrorCode::LockBusy);
    let waiter = std::thread::spawn({
        let locks = locks.clone();
        move || {
            let lease = block_on(locks.acquire("shared-key", wait(10_000))).unwrap();
            (Instant::now(), lease.fence())
        }
    });
    while locks.status().waiting == 0 {
        std::thread::sleep(Duration::from_millis(1));
    }
    let killed = Instant::now();
    // SIGKILL (TerminateProcess on Windows): no release, no cleanup of its own.
    child.kill().unwrap();
    let (granted, next) = waiter.join().unwrap();
    let hand_off = granted.duration_since(killed);
    eprintln!("hand-off after the holder was killed: {hand_off:?}");
    assert!(hand_off < Duration::from_secs(1), "woken after {hand_off:?}");
    assert!(next > fence, "the fence rises past the dead holder's");
    let _ = child.wait();
    block_on(provider.close());
}

#[test]
#[cfg(unix)]
fn a_stopped_holder_keeps_its_key_nothing_is_stolen() {
    use std::process::Command;
    let dir = fresh_directory("stop");
    let (provider, locks) = open(&dir, "");
    let (mut child, mut out) = spawn("hold", &dir, "");
    expect_line(&mut out, "held");
    let pid = child.id().to_string();
    assert!(Command::new("kill").args(["-STOP", &pid]).status().unwrap().success());
    let err = block_on(locks.acquire("shared-key", wait(300))).unwrap_err();
    assert_eq!(err.code(), ErrorCode::WaitTimeout, "a paused holder is not judged stale");
    assert!(Command::new("kill").args(["-CONT", &pid]).status().unwrap().success());
    writeln!(child.stdin.as_mut().unwrap()).unwrap();
    expect_line(&mut out, "released");
    assert!(child.wait().unwrap().success());
    block_on(locks.acquire("shared-key", wait(1_000))).expect("free after its release");
    block_on(provider.close());
}

/// A child killed (`SIGKILL`) when dropped, also when its test fails: a
/// stopped child would keep the test harness's output open.
#[cfg(unix)]
struct Killed(std::process::Child);

#[cfg(unix)]
impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A child waiting for "shared-key", which this process holds, with
/// `pollIntervalMs` of 2 s: the child and the key's lock file, once the
/// child's mark is in it.
#[cfg(unix)]
fn a_child_marked_on_a_held_key(dir: &std::path::Path) -> (Killed, std::path::PathBuf) {
    let path = dir.join(file::entries(dir).remove(0));
    let (child, _out) = spawn("wait", dir, "pollIntervalMs: 2000");
    let child = Killed(child);
    while file::waiting_mark(&path).is_none_or(|(_, pid)| pid != child.0.id()) {
        std::thread::sleep(Duration::from_millis(1));
    }
    (child, path)
}

/// Stops `child` (`SIGSTOP`) and returns once every thread of it has
/// stopped. `kill` returning is not that: the signal is taken by one thread
/// of the child, which stops the others only when it next runs, so on a busy
/// host the child's other threads can run on meanwhile (in CI's run its
/// wake-up thread, woken by the parent's release, took the key and the child
/// then stopped holding it: a stopped holder, which keeps the key).
/// `waitpid` with `WUNTRACED` reports the stop once the last thread stopped.
#[cfg(unix)]
fn stop(child: &Killed) {
    let pid = child.0.id() as libc::pid_t;
    // SAFETY: a signal to our child, which is not reaped before it is dropped.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGSTOP) }, 0);
    let mut status = 0;
    // SAFETY: our child; `status` is writable.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, libc::WUNTRACED) }, pid);
    assert!(libc::WIFSTOPPED(status), "the child ended instead of stopping: {status}");
}

/// A waiting mark whose process has ended (its waiter killed) is ignored
/// at once, though its deadline is seconds ahead: a reader that may not
/// wait, which gives way to a fresh mark of a live process (see the next
/// test), is granted.
#[test]
#[cfg(unix)]
fn a_waiting_mark_of_a_dead_process_is_ignored() {
    let dir = fresh_directory("dead-mark");
    let (provider, locks) = open(&dir, WAKE_UP);
    let held = block_on(locks.acquire("shared-key", wait(0))).unwrap();
    let (child, path) = a_child_marked_on_a_held_key(&dir);
    drop(child);
    let (until, _) = file::waiting_mark(&path).expect("a killed waiter leaves its mark");
    drop(held);
    let (other_provider, other) = open(&dir, WAKE_UP);
    let reader = block_on(other.acquire("shared-key", file::shared(0)));
    assert!(file::clock_us() < until, "the mark was past its deadline before the test could use it");
    reader.expect("a reader is granted: the mark's process is dead");
    block_on(other_provider.close());
    block_on(provider.close());
}

/// A waiting mark nobody acts on (its waiter's process stopped) delays
/// others at most as the README says: its deadline is at most
/// `2 × pollIntervalMs + 100 ms` past its writing; until then a writer gives
/// way once (20 ms) and a reader up to 10 times (about 200 ms), each
/// granted long before the deadline; past it the mark is ignored, its
/// process alive or not.
#[test]
#[cfg(unix)]
fn a_stale_waiting_mark_delays_acquires_at_most_its_stated_bound() {
    let dir = fresh_directory("stale-mark");
    let (provider, locks) = open(&dir, WAKE_UP);
    let held = block_on(locks.acquire("shared-key", wait(0))).unwrap();
    let (child, path) = a_child_marked_on_a_held_key(&dir);
    // Stopped while this process holds the key: a waiter then, holding
    // nothing (a try of its own holds the key's file for an instant, and
    // every try of its fails while the key is held here).
    stop(&child);
    let (until, _) = file::waiting_mark(&path).unwrap();
    assert!(until <= file::clock_us() + 2 * 2_000_000 + 100_000, "a mark's deadline is more than 2 × pollIntervalMs + 100 ms ahead");
    drop(held);
    let (other_provider, other) = open(&dir, WAKE_UP);
    let refused = block_on(other.acquire("shared-key", file::shared(0))).err().map(|err| err.code());
    assert!(file::clock_us() < until, "the mark was past its deadline before the test could use it");
    assert_eq!(refused, Some(ErrorCode::LockBusy), "a reader that may not wait gives way to a fresh mark of a live process");
    let writer = block_on(other.acquire("shared-key", wait(10_000))).unwrap();
    assert!(file::clock_us() < until, "a writer waited for the stale mark's deadline");
    drop(writer);
    let reader = block_on(other.acquire("shared-key", file::shared(10_000))).unwrap();
    assert!(file::clock_us() < until, "a reader waited for the stale mark's deadline");
    drop(reader);
    while file::clock_us() <= until {
        std::thread::sleep(Duration::from_millis(10));
    }
    block_on(other.acquire("shared-key", file::shared(0))).expect("a reader that may not wait is granted past the mark's deadline");
    drop(child);
    block_on(other_provider.close());
    block_on(provider.close());
}

/// A process that takes a key again and again lets a waiting process in.
/// Where inotify wakes waiters, the waiter polls once a minute, so its
/// turns come from the waiting mark alone: without the mark the looping
/// process would keep the key's file open and unlock it without an event,
/// and take it again at once (this test fails with the mark switched off).
/// Where polling wakes them ([`WAKE_UP`]), the mark makes the looping
/// process give way long enough for the next poll.
fn a_looping_process_lets_a_waiting_one_in(role: &str) {
    let dir = fresh_directory(role);
    let (provider, locks) = open(&dir, WAKE_UP);
    let (mut child, mut out) = spawn(role, &dir, "");
    expect_line(&mut out, "looping");
    for _ in 0..5 {
        let started = Instant::now();
        let lease = block_on(locks.acquire("shared-key", wait(1_000))).expect("a waiter gets its turn while the other process loops");
        eprintln!("{role}: waited {:?}", started.elapsed());
        std::thread::sleep(Duration::from_millis(5));
        drop(lease);
        std::thread::sleep(Duration::from_millis(20));
    }
    let grants: u64 = expect_line(&mut out, "grants").parse().unwrap();
    assert!(grants > 10, "the looping process was not stopped either ({grants} grants)");
    assert!(child.wait().unwrap().success());
    block_on(provider.close());
}

#[test]
fn a_process_releasing_and_acquiring_a_key_in_a_loop_lets_a_waiting_process_in() {
    a_looping_process_lets_a_waiting_one_in("loop");
}

#[test]
fn a_process_whose_own_tasks_hand_a_key_around_lets_a_waiting_process_in() {
    a_looping_process_lets_a_waiting_one_in("loop2");
}

/// Two backends of one process on one directory are two waiters' worth of
/// identity: a waiter of backend `b` behind a task taking the key again
/// and again on backend `a` gets its turn as a waiter of another process
/// does (the looping tests above), within a few of the holder's cycles.
/// Measured in cycles, not time: with one mark per process, `a` took `b`'s
/// mark for its own, cleared it and kept the key for hundreds of cycles.
#[test]
fn a_waiter_of_another_backend_of_this_process_gets_its_turn_within_a_few_holder_cycles() {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::Arc;
    let dir = fresh_directory("two-backends");
    let yaml = format!(
        "schemaVersion: 1\noptions:\n  dokebi-lock:\n    backends:\n      a: {{ driver: file, directory: '{0}' }}\n      b: {{ driver: file, directory: '{0}' }}\n",
        dir.display()
    );
    let provider = Provider::from_yaml(&yaml).unwrap();
    let (a, b) = (provider.backend("a").unwrap(), provider.backend("b").unwrap());
    let cycles = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let holder = std::thread::spawn({
        let (cycles, stop) = (cycles.clone(), stop.clone());
        move || {
            while !stop.load(Ordering::SeqCst) {
                let lease = block_on(a.acquire("shared-key", wait(30_000))).unwrap();
                cycles.fetch_add(1, Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(1));
                drop(lease);
            }
        }
    });
    while cycles.load(Ordering::SeqCst) < 5 {
        std::thread::sleep(Duration::from_millis(1));
    }
    let mut most = 0;
    for _ in 0..5 {
        let before = cycles.load(Ordering::SeqCst);
        let lease = block_on(b.acquire("shared-key", wait(30_000))).expect("the waiter of b is granted");
        most = most.max(cycles.load(Ordering::SeqCst) - before);
        std::thread::sleep(Duration::from_millis(5));
        drop(lease);
        std::thread::sleep(Duration::from_millis(20));
    }
    stop.store(true, Ordering::SeqCst);
    holder.join().unwrap();
    eprintln!("the most holder cycles a waiter of b waited through: {most}");
    assert!(most <= 20, "a waiter of b waited through {most} grants of a");
    block_on(provider.close());
}

/// What a child forked from a process with a file backend does with it,
/// as its exit status: 0 when every use is refused (the child's copy of the
/// backend shares its parent's open lock files, and with them their
/// locks); else the number of the first use that went through.
#[cfg(unix)]
fn use_the_parent_s_backend_in_a_forked_child(provider: &Provider, locks: &dokebi_lock::Backend, held: dokebi_lock::Lease) -> i32 {
    let refused = |result: Result<bool, dokebi_lock::LockError>| match result {
        Err(err) => err.code() == ErrorCode::ProviderFailed && err.message().contains("fork"),
        Ok(_) => false,
    };
    // A key whose lock file the parent keeps open for reuse.
    if !refused(block_on(locks.acquire("kept", wait(0))).map(|_| true)) {
        return 1;
    }
    // The parent's lease: its release would unlock the parent's lock.
    if !refused(block_on(held.release())) {
        return 2;
    }
    // Closing would release and remove the parent's files.
    block_on(provider.close());
    0
}

/// fork(): the child's copy of a file backend shares its parent's open
/// lock files, so the child could be granted a key through a file its
/// parent keeps for reuse, and a release or close in the child would unlock
/// or remove its parent's files. The child is refused every use (a clear
/// error, never a hang), and its parent's lease and files stay as they were.
#[test]
#[cfg(unix)]
fn a_forked_child_is_refused_its_parent_s_file_backend_and_leaves_the_parent_s_locks_alone() {
    let dir = fresh_directory("fork");
    let (provider, locks) = open(&dir, "");
    let held = block_on(locks.acquire("held", wait(0))).unwrap();
    assert!(block_on(block_on(locks.acquire("kept", wait(0))).unwrap().release()).unwrap());
    let files = file::entries(&dir);
    // SAFETY: the child uses the allocator and the library's own code, then
    // leaves with `_exit` (no test harness, no destructors of the parent's).
    let child = unsafe { libc::fork() };
    assert!(child >= 0, "fork failed");
    if child == 0 {
        let code = use_the_parent_s_backend_in_a_forked_child(&provider, &locks, held);
        // SAFETY: ends the child at once.
        unsafe { libc::_exit(code) };
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut status = 0;
    loop {
        // SAFETY: our child; `status` is writable.
        let done = unsafe { libc::waitpid(child, &mut status, libc::WNOHANG) };
        if done == child {
            break;
        }
        if Instant::now() > deadline {
            // SAFETY: our child.
            unsafe { libc::kill(child, libc::SIGKILL) };
            panic!("the forked child hung using its parent's backend");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(libc::WIFEXITED(status), "the child ended by a signal: {status}");
    assert_eq!(libc::WEXITSTATUS(status), 0, "a use of the parent's backend in the child went through (see the child's steps)");
    assert_eq!(file::entries(&dir), files, "the child removed none of the parent's lock files");
    let (other_provider, other) = open(&dir, "");
    let busy = block_on(other.acquire("held", wait(0))).expect_err("the parent still holds its key");
    assert_eq!(busy.code(), ErrorCode::LockBusy);
    assert!(block_on(held.release()).unwrap(), "the parent's lease is intact");
    block_on(other_provider.close());
    block_on(provider.close());
}

/// Every file backend of a process shares one inotify instance: the
/// user's `max_user_instances` (128 by default) would otherwise be spent
/// by 128 backends, after which waiters fell back to polling silently.
#[test]
#[cfg(any(target_os = "linux", target_os = "android"))]
fn the_file_backends_of_a_process_share_one_inotify_instance() {
    let dir = fresh_directory("inotify");
    let (mut child, mut out) = spawn("inotify", &dir, "");
    let instances: usize = expect_line(&mut out, "inotify").parse().unwrap();
    assert_eq!(instances, 1, "nine backends, four of them with a waiter, use one inotify instance");
    assert!(child.wait().unwrap().success());
}

/// A process out of file descriptors is told which limit to raise.
#[test]
#[cfg(unix)]
fn running_out_of_file_descriptors_says_which_limit_to_raise() {
    let dir = fresh_directory("few-files");
    let (mut child, mut out) = spawn("few-files", &dir, "");
    let failed = expect_line(&mut out, "failed");
    assert!(failed.starts_with("ProviderFailed"), "{failed}");
    assert!(failed.contains("ulimit -n") && failed.contains("LimitNOFILE"), "the error names the limit to raise: {failed}");
    assert!(child.wait().unwrap().success());
}

/// A child forked without `exec` keeps copies of the lock files its parent
/// had open, and a kernel lock lasts while any copy of its open file does:
/// a key the parent releases must not stay locked by the child's copies.
/// Here the units of a counted key, whose release closes their files.
#[test]
#[cfg(unix)]
fn a_key_released_by_a_parent_is_free_while_a_forked_child_lives_on() {
    let dir = fresh_directory("fork-lives");
    let (provider, locks) = open(&dir, "");
    let units = |ms| dokebi_lock::AcquireOptions { limit: Some(2), weight: Some(2), ..wait(ms) };
    let held = block_on(locks.acquire("counted", units(0))).unwrap();
    // SAFETY: the child only sleeps, then leaves with `_exit`.
    let child = unsafe { libc::fork() };
    assert!(child >= 0, "fork failed");
    if child == 0 {
        std::thread::sleep(Duration::from_secs(30));
        // SAFETY: ends the child at once.
        unsafe { libc::_exit(0) };
    }
    assert!(block_on(held.release()).unwrap());
    let (other_provider, other) = open(&dir, "");
    let granted = block_on(other.acquire("counted", units(0)));
    // SAFETY: our child.
    unsafe {
        libc::kill(child, libc::SIGKILL);
        libc::waitpid(child, std::ptr::null_mut(), 0);
    }
    let lease = granted.expect("the parent's release freed the key, though the child still has its files open");
    drop(lease);
    block_on(other_provider.close());
    block_on(provider.close());
}

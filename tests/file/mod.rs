//! What the file driver's tests share: a fresh private directory per test
//! and a provider over it.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use dokebi_lock::{AcquireOptions, Backend, Lease, LockMode, Provider};

/// A directory under the system's temporary directory, unique to this
/// process and call, not yet created (the driver creates it `0700`);
/// removed on drop with its work directory (see [`work`]), so a test's
/// checks of what is left in it run before, and a run leaves nothing in
/// the temporary directory.
pub fn fresh_directory(label: &str) -> Directory {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, Ordering::SeqCst);
    let dir = std::env::temp_dir().join(format!("dokebi-file-{label}-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    Directory(dir)
}

/// A test's lock directory (see [`fresh_directory`]): its path, removed
/// when dropped.
pub struct Directory(PathBuf);

impl std::ops::Deref for Directory {
    type Target = PathBuf;

    fn deref(&self) -> &PathBuf {
        &self.0
    }
}

impl AsRef<Path> for Directory {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

impl Drop for Directory {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
        let _ = std::fs::remove_dir_all(work(&self.0));
    }
}

/// The YAML of one file backend `locks` over `dir`, with `extra` settings
/// (`key: value, ...`).
pub fn yaml(dir: &Path, extra: &str) -> String {
    let extra = if extra.is_empty() { String::new() } else { format!(", {extra}") };
    format!(
        "schemaVersion: 1\noptions:\n  dokebi-lock:\n    backends:\n      locks: {{ driver: file, directory: '{}'{extra} }}\n",
        dir.display()
    )
}

/// A provider with the backend `locks` over `dir`.
pub fn open(dir: &Path, extra: &str) -> (Provider, Backend) {
    let provider = Provider::from_yaml(&yaml(dir, extra)).expect("the file backend opens");
    let backend = provider.backend("locks").unwrap();
    (provider, backend)
}

/// The setting of a backend whose waits on other processes must end by
/// the release (or the death) itself: a minute between safety-net polls
/// where inotify wakes the waiters (Linux). Elsewhere (Windows, macOS)
/// polling is the wake-up: every 10 ms, which the tests' bounds allow for.
pub const WAKE_UP: &str =
    if cfg!(any(target_os = "linux", target_os = "android")) { "pollIntervalMs: 60000" } else { "pollIntervalMs: 10" };

/// Acquire options that wait `ms`.
pub fn wait(ms: u64) -> AcquireOptions {
    AcquireOptions { wait_timeout: Some(Duration::from_millis(ms)), ..AcquireOptions::default() }
}

/// The file the driver keeps in a lock directory once it has removed a
/// lock file from it: the directory's fence floor (the counters of the lock
/// files it removed).
pub const FLOOR_FILE: &str = "floor.lock";

/// The names of the entries of `dir` but [`FLOOR_FILE`].
pub fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name != FLOOR_FILE)
        .collect();
    names.sort();
    names
}

/// Starts this test binary as a child running `role` over `dir`: the
/// binary's test `child_process` (ignored in a plain run) is the entry
/// point, and reads `DOKEBI_FILE_CHILD`, `DOKEBI_FILE_YAML` and
/// `DOKEBI_FILE_DIR`.
///
/// With `DOKEBI_FILE_CHILD_WRAPPER` set (a command and its arguments,
/// separated by spaces), every other child (the first, the third, ...) runs
/// under it: `strace -f -e inject=...:delay_exit=...` widens the windows
/// between its system calls (an open and its lock, a check and an unlink)
/// while the others run at full speed. Not for tests that kill their
/// children: a kill ends the wrapper, and the child runs on untraced.
pub fn spawn(role: &str, dir: &Path, extra: &str) -> (Child, BufReader<ChildStdout>) {
    static SPAWNED: AtomicUsize = AtomicUsize::new(0);
    let exe = std::env::current_exe().unwrap();
    let wrapped = SPAWNED.fetch_add(1, Ordering::SeqCst) % 2 == 0;
    let wrapper = std::env::var("DOKEBI_FILE_CHILD_WRAPPER").ok().filter(|_| wrapped).unwrap_or_default();
    let mut words = wrapper.split_whitespace();
    let command = match words.next() {
        Some(program) => {
            let mut command = Command::new(program);
            command.args(words).arg(&exe);
            command
        }
        None => Command::new(&exe),
    };
    spawn_with(command, role, dir, extra)
}

/// [`spawn`] through `command`, which runs a test binary with the same
/// roles (this one, another build's, or this one under a wrapper that
/// passes on the arguments added here): the child `role` over `dir`.
pub fn spawn_with(mut command: Command, role: &str, dir: &Path, extra: &str) -> (Child, BufReader<ChildStdout>) {
    let mut child = command
        .args(["--exact", "child_process", "--ignored", "--nocapture", "--test-threads=1"])
        .env("DOKEBI_FILE_CHILD", role)
        .env("DOKEBI_FILE_YAML", yaml(dir, extra))
        .env("DOKEBI_FILE_DIR", dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = BufReader::new(child.stdout.take().unwrap());
    (child, stdout)
}

/// [`spawn`] under strace, each of the child's `pwrite`s numbered `when`
/// (strace's `when=`: `2` the second, `2+` the second and later) held
/// back 1.5 s before it runs: a writer descheduled between two of its
/// writes, made reproducible.
pub fn spawn_delaying_pwrite(when: &str, role: &str, dir: &Path) -> (Child, BufReader<ChildStdout>) {
    assert!(Command::new("strace").arg("-V").output().is_ok(), "strace is installed (scripts/setup)");
    let mut strace = Command::new("strace");
    strace
        .args(["-f", "-qq", "-o", "/dev/null", "-e", "trace=pwrite64", "-e"])
        .arg(format!("inject=pwrite64:delay_enter=1500000:when={when}"))
        .arg(std::env::current_exe().unwrap());
    spawn_with(strace, role, dir, "")
}

/// The fence counter (the first 20 bytes) of the one plain lock file in
/// `dir`, read directly: 0 when none.
pub fn counter_of(dir: &Path) -> u64 {
    let name = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .find(|name| name.len() == 32 + 5 && name.ends_with(".lock"));
    let Some(name) = name else { return 0 };
    let bytes = std::fs::read(dir.join(name)).unwrap_or_default();
    std::str::from_utf8(&bytes[..bytes.len().min(20)]).ok().and_then(|digits| digits.parse().ok()).unwrap_or(0)
}

/// In a child [`spawn`] started: its role, and the provider and backend
/// `locks` of its YAML; `None` in a plain run of the test binary.
pub fn as_child() -> Option<(String, Provider, Backend)> {
    let role = std::env::var("DOKEBI_FILE_CHILD").ok()?;
    let provider = Provider::from_yaml(&std::env::var("DOKEBI_FILE_YAML").unwrap()).unwrap();
    let locks = provider.backend("locks").unwrap();
    Some((role, provider, locks))
}

/// In a child: says `held <fence>`, holds `lease` until told (a line on
/// stdin), releases it and says `released`.
pub fn hold_until_told(lease: Lease) {
    let mut stdout = std::io::stdout();
    writeln!(stdout, "held {}", lease.fence()).unwrap();
    stdout.flush().unwrap();
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).unwrap();
    assert!(futures::executor::block_on(lease.release()).unwrap());
    writeln!(stdout, "released").unwrap();
}

/// What follows `prefix` on the next line the child printed with it.
pub fn expect_line(out: &mut BufReader<ChildStdout>, prefix: &str) -> String {
    let mut line = String::new();
    loop {
        line.clear();
        assert!(out.read_line(&mut line).unwrap() > 0, "the child ended before printing {prefix}");
        // The test harness may print its own words before ours on a line.
        if let Some(at) = line.find(prefix) {
            return line[at + prefix.len()..].trim().to_owned();
        }
    }
}

/// The waiting mark in the lock file at `path` (see the driver's
/// `lock_file`: three records of 21 bytes from byte 32): its deadline in
/// microseconds of the wall clock and its process; `None` when there is
/// none.
pub fn waiting_mark(path: &Path) -> Option<(u64, u32)> {
    let bytes = std::fs::read(path).ok()?;
    let record = |at: usize| std::str::from_utf8(bytes.get(at..at + 20)?).ok()?.parse::<u64>().ok();
    Some((record(32)?, u32::try_from(record(53)?).ok()?)).filter(|(_, pid)| *pid != 0)
}

/// The wall clock in microseconds, as the driver's marks count it.
pub fn clock_us() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_micros() as u64
}

/// The names of the entries of `dir` once the lock files a backend keeps
/// for reuse after a release (half a second) are gone: waits up to two
/// seconds for `dir` to empty.
pub fn entries_after_keep(dir: &Path) -> Vec<String> {
    let deadline = std::time::Instant::now() + Duration::from_secs(2);
    loop {
        let names = entries(dir);
        if names.is_empty() || std::time::Instant::now() > deadline {
            return names;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The work directory of the lock directory `dir`.
pub fn work(dir: &Path) -> PathBuf {
    PathBuf::from(format!("{}-work", dir.display()))
}

pub fn shared(ms: u64) -> AcquireOptions {
    AcquireOptions { mode: LockMode::Shared, ..wait(ms) }
}

pub fn counted(limit: u32, weight: u32, ms: u64) -> AcquireOptions {
    AcquireOptions { limit: Some(limit), weight: Some(weight), ..wait(ms) }
}

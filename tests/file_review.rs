//! What the adversarial review of the file driver tried between real
//! processes (issue 49): two holders of a key at once, a fence that is not
//! above an earlier grant's, or more units held than a counted key's limit.
//! The two tests of readers' fences failed before readers raised the
//! counter under the key's raise lock (readers of two processes granted in
//! one microsecond read one counter and got one fence). The ordering tests
//! (`grants_...`) check every grant, readers' too, against every grant
//! returned before its acquire was called, with threads of backends of
//! their own in each process (and children forked, stopped, killed).
//! This test binary runs itself as the children (`child_process`, ignored
//! in a plain run, is their entry point); they record what they saw in a
//! work directory beside the lock directory, and the parent checks it.

mod file;

use std::future::Future;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use dokebi_lock::{AcquireOptions, ErrorCode, Lease, Provider};
use file::{counted, expect_line, fresh_directory, open, shared, spawn, wait, work, WAKE_UP};
use futures::executor::block_on;

/// The wall clock in nanoseconds, for seeds and the clock probe (see
/// [`tick`] for the moments the checks order).
fn now_ns() -> u128 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos()
}

/// A moment of a child, in the order of every child's moments: the end of
/// one byte it appends to a file they all share (the kernel orders the
/// appends to one file), not the wall clock, which the CPUs of a virtual
/// machine may read seconds apart. Each thread appends through a file of
/// its own, whose position is the end of its own last append.
fn tick() -> u128 {
    use std::io::Seek;
    thread_local! {
        static TICKS: std::fs::File = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(work(&PathBuf::from(std::env::var("DOKEBI_FILE_DIR").unwrap())).join("ticks"))
            .unwrap();
    }
    TICKS.with(|mut file| {
        file.write_all(b".").unwrap();
        u128::from(file.stream_position().unwrap())
    })
}

/// The children's entry point: does nothing unless run as a child.
#[test]
#[ignore = "the child process of the tests below, which run it"]
fn child_process() {
    let Ok(role) = std::env::var("DOKEBI_FILE_CHILD") else { return };
    let dir = PathBuf::from(std::env::var("DOKEBI_FILE_DIR").unwrap());
    let provider = Provider::from_yaml(&std::env::var("DOKEBI_FILE_YAML").unwrap()).unwrap();
    let locks = provider.backend("locks").unwrap();
    // A second backend of this process on the same directory, with other
    // options.
    let second = Provider::from_yaml(&file::yaml(&dir, "pollIntervalMs: 7")).unwrap();
    let other = second.backend("locks").unwrap();
    let work = work(&dir);
    let pid = std::process::id();
    let mut stdout = std::io::stdout();
    let (role, argument) = role.split_once(':').unwrap_or((&role, ""));
    match role {
        // Takes "k" `argument` times, shared or exclusive in turn as the
        // pattern says (`r` reader, `w` writer), through either backend, and
        // records each grant's fence and when its section began and ended.
        "fences" => {
            let (pattern, rounds) = argument.split_once('/').unwrap();
            let pattern: Vec<char> = pattern.chars().collect();
            let rounds: usize = rounds.parse().unwrap();
            let mut records = String::new();
            for round in 0..rounds {
                let kind = pattern[round % pattern.len()];
                let options = if kind == 'r' { shared(30_000) } else { wait(30_000) };
                let backend = if round % 2 == 0 { &locks } else { &other };
                let lease = block_on(backend.acquire("k", options)).unwrap();
                let start = tick();
                let fence = lease.fence();
                let end = tick();
                drop(lease);
                records.push_str(&format!("{kind} {fence} {start} {end}\n"));
            }
            std::fs::write(work.join(format!("rec-{pid}")), records).unwrap();
            writeln!(stdout, "done").unwrap();
        }
        // Takes "c" `argument` times, as one unit of limit 3 (`units`) or
        // exclusive (`plain`, which is refused while units are held), through
        // either backend; inside, leaves a presence file and counts those of
        // the others: a writer with anyone, or four units, is a fault.
        "units" | "plain" => {
            let rounds: usize = argument.parse().unwrap();
            let (mut grants, mut faults) = (0, Vec::new());
            for round in 0..rounds {
                let backend = if round % 2 == 0 { &locks } else { &other };
                let options = if role == "units" { counted(3, 1, 30_000) } else { wait(30_000) };
                let lease = match block_on(backend.acquire("c", options)) {
                    Ok(lease) => lease,
                    Err(error) if error.code() == ErrorCode::InvalidArgument => continue,
                    Err(error) => panic!("{error}"),
                };
                grants += 1;
                let mine = work.join(format!("in-{role}-{pid}-{round}"));
                std::fs::write(&mine, "").unwrap();
                let (mut units, mut plain) = (0, 0);
                for entry in std::fs::read_dir(&work).unwrap() {
                    let name = entry.unwrap().file_name().into_string().unwrap();
                    if name.starts_with("in-units-") {
                        units += 1;
                    } else if name.starts_with("in-plain-") {
                        plain += 1;
                    }
                }
                if units > 3 || (plain > 0 && units + plain > 1) {
                    faults.push(format!("{units} units and {plain} writers at once"));
                }
                std::thread::yield_now();
                std::fs::remove_file(&mine).unwrap();
                drop(lease);
            }
            writeln!(stdout, "done {grants} grants, {} faults {:?}", faults.len(), &faults[..faults.len().min(3)]).unwrap();
        }
        // Until killed: takes "k" exclusive (`chaos-w`) or shared
        // (`chaos-r`), or 1 or 2 units of "c", limit 3 (`chaos-u`), through
        // either backend, and appends each grant's record (and any fault it
        // saw) at once, so that what a killed child did is kept.
        // `chaos-x`, `chaos-y`, `chaos-l`: as `chaos-w`, `chaos-r`,
        // `chaos-u`, but every other acquire leaves (times out, dropped,
        // aborted) after a random moment if not granted by then.
        "chaos-w" | "chaos-r" | "chaos-u" | "chaos-x" | "chaos-y" | "chaos-l" => {
            let leaves = matches!(role, "chaos-x" | "chaos-y" | "chaos-l");
            let role = match role {
                "chaos-x" => "chaos-w",
                "chaos-y" => "chaos-r",
                "chaos-l" => "chaos-u",
                role => role,
            };
            let writer = role == "chaos-w";
            let reader = role == "chaos-r";
            let key = if writer || reader { "k" } else { "c" };
            let mut log = std::fs::OpenOptions::new().create(true).append(true).open(work.join(format!("rec-{key}-{pid}"))).unwrap();
            writeln!(stdout, "started").unwrap();
            stdout.flush().unwrap();
            for round in 0u64.. {
                let backend = if round % 2 == 0 { &locks } else { &other };
                let weight = 1 + (round % 2) as u32;
                let options = if writer {
                    wait(30_000)
                } else if reader {
                    shared(30_000)
                } else {
                    counted(3, weight, 30_000)
                };
                // The record's kind: `w`, `r`, or the units held.
                let kind = if writer {
                    'w'
                } else if reader {
                    'r'
                } else {
                    char::from_digit(weight, 10).unwrap()
                };
                let lease = if leaves && round % 2 == 1 {
                    let how = [Leave::TimesOut, Leave::Dropped, Leave::Aborted][(round / 2 % 3) as usize];
                    match leaving(backend, &[key], options, how, now_ns() as u64 % 3_000) {
                        Ok(lease) => lease,
                        Err(error) if error.code() == ErrorCode::WaitTimeout => continue,
                        Err(error) => panic!("{error}"),
                    }
                } else {
                    block_on(backend.acquire(key, options)).unwrap()
                };
                let start = tick();
                if !writer && !reader {
                    // A section long enough for others to overlap it.
                    std::thread::sleep(std::time::Duration::from_micros(200));
                }
                let fence = lease.fence();
                let end = tick();
                drop(lease);
                // One write, so that a kill leaves whole lines.
                log.write_all(format!("{kind} {fence} {start} {end}\n").as_bytes()).unwrap();
            }
        }
        // A reader stopped in its raise of "k"'s counter: locks the key's
        // raise file `argument` (its name in the lock directory), writes a
        // counter into the key's lock file as a raise would, and stays until
        // killed (or its parent is gone: its stdin closes).
        #[cfg(unix)]
        "in-raise" => {
            let (raise_name, counter) = argument.split_once('/').unwrap();
            let raise_file = std::fs::OpenOptions::new().read(true).write(true).open(dir.join(raise_name)).unwrap();
            // SAFETY: an open file of ours.
            assert_eq!(unsafe { libc::flock(std::os::fd::AsRawFd::as_raw_fd(&raise_file), libc::LOCK_EX) }, 0);
            let lock_name = raise_name.replace(".raise.lock", ".lock");
            let record = format!("{counter:0>20}\n");
            std::os::unix::fs::FileExt::write_all_at(
                &std::fs::OpenOptions::new().write(true).open(dir.join(lock_name)).unwrap(),
                record.as_bytes(),
                0,
            )
            .unwrap();
            writeln!(stdout, "held").unwrap();
            stdout.flush().unwrap();
            let _ = std::io::Read::read_to_end(&mut std::io::stdin(), &mut Vec::new());
            return;
        }
        // Threads of this process, each through a backend of its own (two
        // on the same directory as `locks`, which they do not use), take
        // "k" `rounds` times each in kinds drawn from `mix` (`r` a waiting
        // reader, `t` a reader that may not wait, `w` a writer, `m` a
        // reader of "j" and "k" at once, `n` a writer of "k" and "z" at
        // once), holding it a random moment, and record each grant's fence
        // of "k" with the moments its acquire was called and returned and
        // its release was called.
        "order" => {
            let mut parts = argument.split('/');
            let rounds: usize = parts.next().unwrap().parse().unwrap();
            let threads: usize = parts.next().unwrap().parse().unwrap();
            let mix: Vec<char> = parts.next().unwrap().chars().collect();
            let yaml = std::env::var("DOKEBI_FILE_YAML").unwrap();
            // With a fourth part `fork`: a thread forks children (no exec)
            // all along, each keeping copies of every lock file and raise
            // file open at that moment for a random moment.
            // Further parts: `fork` (below) and `close`: a thread opens a
            // provider of its own, has another thread acquire "k" through it,
            // and closes it at a random moment of that acquire (before its
            // grant, at it, or after), all along.
            let flags: Vec<&str> = parts.collect();
            let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
            let closer = flags.contains(&"close").then(|| {
                let (yaml, work, done) = (yaml.clone(), work.clone(), done.clone());
                std::thread::spawn(move || close_racing_acquires(&yaml, &work, pid, &done))
            });
            #[cfg(unix)]
            if flags.contains(&"fork") {
                std::thread::spawn(|| {
                    let mut seed = now_ns() as u64 | 1;
                    loop {
                        seed ^= seed << 13;
                        seed ^= seed >> 7;
                        seed ^= seed << 17;
                        let sleep = (seed % 20_000) as libc::c_uint;
                        // SAFETY: the child only sleeps and leaves with `_exit`.
                        let child = unsafe { libc::fork() };
                        if child == 0 {
                            // SAFETY: async-signal-safe calls only.
                            unsafe {
                                libc::usleep(sleep);
                                libc::_exit(0);
                            }
                        }
                        // SAFETY: reaps the children that ended.
                        while unsafe { libc::waitpid(-1, std::ptr::null_mut(), libc::WNOHANG) } > 0 {}
                        std::thread::sleep(std::time::Duration::from_micros(seed % 2_000));
                    }
                });
            }
            let workers: Vec<_> = (0..threads)
                .map(|thread| {
                    let (yaml, mix, work) = (yaml.clone(), mix.clone(), work.clone());
                    std::thread::spawn(move || {
                        let provider = Provider::from_yaml(&yaml).unwrap();
                        let backend = provider.backend("locks").unwrap();
                        let mut seed = (now_ns() as u64) ^ (u64::from(pid) << 20) ^ (thread as u64 + 1) | 1;
                        let mut random = move |below: u64| {
                            seed ^= seed << 13;
                            seed ^= seed >> 7;
                            seed ^= seed << 17;
                            seed % below
                        };
                        // Appended at each grant in one write, so that a kill
                        // leaves whole lines.
                        let mut log =
                            std::fs::OpenOptions::new().create(true).append(true).open(work.join(format!("ord-{pid}-{thread}"))).unwrap();
                        for _ in 0..rounds {
                            let kind = mix[random(mix.len() as u64) as usize];
                            let call = tick();
                            let outcome = match kind {
                                'r' => block_on(backend.acquire("k", shared(30_000))),
                                't' => block_on(backend.acquire("k", shared(0))),
                                'w' => block_on(backend.acquire("k", wait(30_000))),
                                'm' => block_on(backend.acquire_many(&["j", "k"], shared(30_000))),
                                'n' => block_on(backend.acquire_many(&["k", "z"], wait(30_000))),
                                // Waiters that leave without the key: timed
                                // out, dropped, aborted (see `leaving`).
                                'x' => leaving(&backend, &["k"], wait(30_000), Leave::TimesOut, random(3_000)),
                                'y' => leaving(&backend, &["k"], shared(30_000), Leave::TimesOut, random(3_000)),
                                'd' => leaving(&backend, &["k"], wait(30_000), Leave::Dropped, random(3_000)),
                                'e' => leaving(&backend, &["k"], shared(30_000), Leave::Dropped, random(3_000)),
                                'a' => leaving(&backend, &["k"], wait(30_000), Leave::Aborted, random(3_000)),
                                'q' => leaving(&backend, &["k", "z"], wait(30_000), Leave::TimesOut, random(3_000)),
                                'p' => leaving(&backend, &["j", "k"], shared(30_000), Leave::Dropped, random(3_000)),
                                other => panic!("unknown kind {other}"),
                            };
                            let lease = match outcome {
                                Ok(lease) => lease,
                                Err(error) if error.code() == ErrorCode::LockBusy && kind == 't' => continue,
                                Err(error) if error.code() == ErrorCode::WaitTimeout && "xyadepq".contains(kind) => continue,
                                Err(error) => panic!("{error}"),
                            };
                            let returned = tick();
                            let fence = lease.fences().into_iter().find(|(key, _)| *key == "k").unwrap().1;
                            let pause = random(4);
                            if pause > 0 {
                                std::thread::sleep(std::time::Duration::from_micros(random(100 * pause)));
                            }
                            let release = tick();
                            assert!(block_on(lease.release()).unwrap(), "a lease lost");
                            let kind = if matches!(kind, 'w' | 'n' | 'x' | 'd' | 'a' | 'q') { 'w' } else { 'r' };
                            log.write_all(format!("{kind} {fence} {call} {returned} {release}\n").as_bytes()).unwrap();
                            if random(3) == 0 {
                                std::thread::sleep(std::time::Duration::from_micros(random(300)));
                            }
                        }
                        block_on(provider.close());
                    })
                })
                .collect();
            for worker in workers {
                worker.join().unwrap();
            }
            done.store(true, std::sync::atomic::Ordering::SeqCst);
            if let Some(closer) = closer {
                closer.join().unwrap();
            }
            writeln!(stdout, "done").unwrap();
        }
        // Threads of this process, each through a backend of its own, take
        // counted key "c" (limit 3) `rounds` times each in kinds drawn from
        // `mix` (`1`, `2` units waiting, `u` one unit leaving, `v` two units
        // leaving, `w` a writer waiting a moment, `l` a writer leaving, `r`
        // a reader waiting a moment, `s` a reader leaving; see `leaving`),
        // and inside leave a presence file and count the others': a writer
        // with anyone, a reader with a writer or units, or more than three
        // units are faults. Records each grant's fence.
        "units-leave" => {
            let mut parts = argument.split('/');
            let rounds: usize = parts.next().unwrap().parse().unwrap();
            let threads: usize = parts.next().unwrap().parse().unwrap();
            let mix: Vec<char> = parts.next().unwrap().chars().collect();
            let yaml = std::env::var("DOKEBI_FILE_YAML").unwrap();
            let workers: Vec<_> = (0..threads)
                .map(|thread| {
                    let (yaml, mix, work) = (yaml.clone(), mix.clone(), work.clone());
                    std::thread::spawn(move || {
                        let provider = Provider::from_yaml(&yaml).unwrap();
                        let backend = provider.backend("locks").unwrap();
                        let mut seed = (now_ns() as u64) ^ (u64::from(pid) << 20) ^ (thread as u64 + 1) | 1;
                        let mut random = move |below: u64| {
                            seed ^= seed << 13;
                            seed ^= seed >> 7;
                            seed ^= seed << 17;
                            seed % below
                        };
                        let ways = [Leave::TimesOut, Leave::Dropped, Leave::Aborted];
                        let mut log =
                            std::fs::OpenOptions::new().create(true).append(true).open(work.join(format!("fence-{pid}-{thread}"))).unwrap();
                        let (mut grants, mut faults) = (0, Vec::new());
                        for round in 0..rounds {
                            let kind = mix[random(mix.len() as u64) as usize];
                            let how = ways[random(3) as usize];
                            let pause = random(3_000);
                            let outcome = match kind {
                                '1' => block_on(backend.acquire("c", counted(3, 1, 30_000))),
                                '2' => block_on(backend.acquire("c", counted(3, 2, 30_000))),
                                'u' => leaving(&backend, &["c"], counted(3, 1, 30_000), how, pause),
                                'v' => leaving(&backend, &["c"], counted(3, 2, 30_000), how, pause),
                                'w' => block_on(backend.acquire("c", wait(1 + random(20)))),
                                'l' => leaving(&backend, &["c"], wait(30_000), how, pause),
                                'r' => block_on(backend.acquire("c", shared(1 + random(20)))),
                                's' => leaving(&backend, &["c"], shared(30_000), how, pause),
                                other => panic!("unknown kind {other}"),
                            };
                            let lease = match outcome {
                                Ok(lease) => lease,
                                Err(error) if matches!(error.code(), ErrorCode::WaitTimeout | ErrorCode::InvalidArgument) => continue,
                                Err(error) => panic!("{error}"),
                            };
                            grants += 1;
                            let tag = match kind {
                                '1' | 'u' => "u1",
                                '2' | 'v' => "u2",
                                'w' | 'l' => "w",
                                _ => "r",
                            };
                            let mine = work.join(format!("in-{tag}-{pid}-{thread}-{round}"));
                            std::fs::write(&mine, "").unwrap();
                            let (mut units, mut writers, mut readers) = (0, 0, 0);
                            for entry in std::fs::read_dir(&work).unwrap() {
                                let name = entry.unwrap().file_name().into_string().unwrap();
                                if name.starts_with("in-u1-") {
                                    units += 1;
                                } else if name.starts_with("in-u2-") {
                                    units += 2;
                                } else if name.starts_with("in-w-") {
                                    writers += 1;
                                } else if name.starts_with("in-r-") {
                                    readers += 1;
                                }
                            }
                            if units > 3 || (writers > 0 && units + writers + readers > 1) || (readers > 0 && units > 0) {
                                faults.push(format!("{units} units, {writers} writers and {readers} readers at once"));
                            }
                            if random(2) == 0 {
                                std::thread::sleep(std::time::Duration::from_micros(random(300)));
                            }
                            std::fs::remove_file(&mine).unwrap();
                            log.write_all(format!("{tag} {}\n", lease.fence()).as_bytes()).unwrap();
                            assert!(block_on(lease.release()).unwrap(), "a lease lost");
                        }
                        block_on(provider.close());
                        (grants, faults)
                    })
                })
                .collect();
            let (mut grants, mut faults) = (0, Vec::new());
            for worker in workers {
                let (more, found) = worker.join().unwrap();
                grants += more;
                faults.extend(found);
            }
            writeln!(stdout, "done {grants} grants, {} faults {:?}", faults.len(), &faults[..faults.len().min(3)]).unwrap();
        }
        // Holds a unit of counted key "c" (limit 3) until killed.
        "unit-held" => {
            let lease = block_on(locks.acquire("c", counted(3, 1, 0))).unwrap();
            writeln!(stdout, "held").unwrap();
            stdout.flush().unwrap();
            let _ = std::io::Read::read_to_end(&mut std::io::stdin(), &mut Vec::new());
            drop(lease);
        }
        other => panic!("unknown role {other}"),
    }
    block_on(second.close());
    block_on(provider.close());
}

/// How a waiter of `leaving` leaves.
#[derive(Clone, Copy)]
enum Leave {
    /// Its wait times out.
    TimesOut,
    /// Its acquire's future is dropped.
    Dropped,
    /// Its signal aborts.
    Aborted,
}

/// Acquires `keys` in `options`' kind, waiting at most `pause_us` µs and
/// then leaving as `how` says: the lease if granted before, else the
/// error (`WAIT_TIMEOUT` stands for every way of leaving). Exercises the
/// waiter's leaving (its mark cleared, the key's files removed if free).
fn leaving(
    backend: &dokebi_lock::Backend,
    keys: &[&str],
    mut options: AcquireOptions,
    how: Leave,
    pause_us: u64,
) -> dokebi_lock::Result<Lease> {
    let pause = std::time::Duration::from_micros(pause_us + 1);
    let controller = dokebi_lock::AbortController::new();
    match how {
        Leave::TimesOut => options.wait_timeout = Some(pause),
        Leave::Aborted => options.signal = Some(controller.signal()),
        Leave::Dropped => {}
    }
    let mut acquire = Box::pin(backend.acquire_many(keys, options));
    if matches!(how, Leave::TimesOut) {
        return block_on(acquire);
    }
    let waker = futures::task::noop_waker();
    let mut context = std::task::Context::from_waker(&waker);
    if let std::task::Poll::Ready(outcome) = acquire.as_mut().poll(&mut context) {
        return outcome;
    }
    std::thread::sleep(pause);
    if matches!(how, Leave::Aborted) {
        controller.abort();
    }
    match acquire.as_mut().poll(&mut context) {
        std::task::Poll::Ready(Err(error)) if error.code() == ErrorCode::Aborted => Err(dokebi_lock::LockError::wait_timeout(pause)),
        std::task::Poll::Ready(outcome) => outcome,
        std::task::Poll::Pending => Err(dokebi_lock::LockError::wait_timeout(pause)),
    }
}

/// The `close` part of the `order` role: until `done`, opens a provider,
/// has a thread acquire "k" through it (a writer or a reader in turn) and
/// closes the provider at a random moment of that acquire. A grant's hold
/// is recorded from its return to a moment at which it was seen still
/// valid (the close ends it, at some moment after).
fn close_racing_acquires(yaml: &str, work: &Path, pid: u32, done: &std::sync::atomic::AtomicBool) {
    let mut log = std::fs::OpenOptions::new().create(true).append(true).open(work.join(format!("ord-{pid}-closer"))).unwrap();
    let mut seed = (now_ns() as u64) ^ (u64::from(pid) << 24) | 1;
    let mut random = move |below: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % below
    };
    let mut round = 0u64;
    while !done.load(std::sync::atomic::Ordering::SeqCst) {
        round += 1;
        let provider = Provider::from_yaml(yaml).unwrap();
        let writer = round % 2 == 0;
        let acquiring = {
            let backend = provider.backend("locks").unwrap();
            std::thread::spawn(move || {
                let call = tick();
                let options = if writer { wait(30_000) } else { shared(30_000) };
                let lease = match block_on(backend.acquire("k", options)) {
                    Ok(lease) => lease,
                    Err(error) if error.code() == ErrorCode::Closed => return None::<Option<String>>,
                    Err(error) => panic!("{error}"),
                };
                let returned = tick();
                let fence = lease.fence();
                std::thread::sleep(std::time::Duration::from_micros(50));
                let seen = tick();
                // Valid after `seen`: held from `returned` to `seen`. One
                // that the close ended before is left out: it may have ended
                // before it returned.
                let valid = lease.is_valid();
                drop(lease);
                Some(valid.then(|| format!("{} {fence} {call} {returned} {seen}\n", if writer { 'w' } else { 'r' })))
            })
        };
        std::thread::sleep(std::time::Duration::from_micros(random(3_000)));
        block_on(provider.close());
        if let Some(line) = acquiring.join().unwrap().flatten() {
            log.write_all(line.as_bytes()).unwrap();
        }
    }
}

/// The most units held at once by the counted grants of `records` (whose
/// kind is the units each held): sections are within their holds, so this
/// is never above the units truly held at some moment.
fn most_units(records: &[Record]) -> u32 {
    let mut events: Vec<(u128, i64)> = Vec::new();
    for record in records {
        let units = i64::from(record.kind.to_digit(10).unwrap());
        events.push((record.start, units));
        events.push((record.end, -units));
    }
    // At one instant, ends before starts: only a true overlap counts.
    events.sort_by_key(|&(at, change)| (at, change));
    let (mut held, mut most) = (0i64, 0i64);
    for (_, change) in events {
        held += change;
        most = most.max(held);
    }
    most as u32
}

/// One grant of "k" a child recorded.
struct Record {
    kind: char,
    fence: u64,
    start: u128,
    end: u128,
    /// The child that recorded it (its records file's name).
    child: String,
}

/// The records of every child in `work` (in its files named from `prefix`).
fn records(work: &Path, prefix: &str) -> Vec<Record> {
    let mut all = Vec::new();
    for entry in std::fs::read_dir(work).unwrap() {
        let path = entry.unwrap().path();
        if !path.file_name().unwrap().to_string_lossy().starts_with(prefix) {
            continue;
        }
        let child = path.file_name().unwrap().to_string_lossy().into_owned();
        // A line a kill cut short is left out.
        for line in std::fs::read_to_string(&path).unwrap().lines() {
            let parts: Vec<&str> = line.split_whitespace().collect();
            let [kind, fence, start, end] = parts[..] else { continue };
            let (Ok(fence), Ok(start), Ok(end)) = (fence.parse(), start.parse(), end.parse()) else { continue };
            all.push(Record { kind: kind.chars().next().unwrap(), fence, start, end, child: child.clone() });
        }
    }
    all
}

/// Fences repeated among `records`, and grants whose fence is not above
/// that of a grant whose section ended before theirs began.
fn fence_faults(records: &[Record]) -> (Vec<String>, Vec<String>) {
    let mut by_fence: Vec<&Record> = records.iter().collect();
    by_fence.sort_by_key(|record| record.fence);
    let repeated: Vec<String> = by_fence
        .windows(2)
        .filter(|pair| pair[0].fence == pair[1].fence)
        .map(|pair| format!("{} ({} and {})", pair[0].fence, pair[0].kind, pair[1].kind))
        .collect();
    let mut by_end: Vec<&Record> = records.iter().collect();
    by_end.sort_by_key(|record| record.end);
    let mut by_start: Vec<&Record> = records.iter().collect();
    by_start.sort_by_key(|record| record.start);
    // Only an exclusive grant orders itself against the others: two
    // readers' sections may overlap, and a reader may be granted before
    // another one whose section ends before the first one's begins.
    let (mut ended, mut highest, mut highest_writer, mut below) = (0, None::<&Record>, None::<&Record>, Vec::new());
    for record in by_start {
        while ended < by_end.len() && by_end[ended].end < record.start {
            let done = by_end[ended];
            if highest.is_none_or(|high| done.fence > high.fence) {
                highest = Some(done);
            }
            if done.kind == 'w' && highest_writer.is_none_or(|high| done.fence > high.fence) {
                highest_writer = Some(done);
            }
            ended += 1;
        }
        let before = if record.kind == 'w' { highest } else { highest_writer };
        if let Some(high) = before.filter(|high| record.fence <= high.fence) {
            below.push(format!(
                "{} {} [{}..{} {}] after {} {} [{}..{} {}]",
                record.kind, record.fence, record.start, record.end, record.child, high.kind, high.fence, high.start, high.end, high.child
            ));
        }
    }
    (repeated, below)
}

/// How far back the wall clock went between two readings taken on
/// different CPUs in turn, in nanoseconds: the checks of fences against
/// sections read the clock in many processes, and a machine whose CPUs
/// disagree on it (a virtual machine's TSC offsets) orders them wrongly.
#[cfg(target_os = "linux")]
fn clock_disagreement_across_cpus() -> u128 {
    let cpus = std::thread::available_parallelism().map_or(1, |cpus| cpus.get());
    let mut previous = now_ns();
    let mut worst = 0;
    for round in 0..20_000 {
        // SAFETY: a zeroed set filled with one CPU, for this thread.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(round % cpus, &mut set);
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
        }
        let now = now_ns();
        worst = worst.max(previous.saturating_sub(now));
        previous = now;
    }
    // SAFETY: as above, every CPU again.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        (0..cpus).for_each(|cpu| libc::CPU_SET(cpu, &mut set));
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
    worst
}

/// Pairs of `records` whose sections overlap although one of them is a
/// writer's: two holders of the key at once.
fn writer_overlaps(records: &[Record]) -> Vec<String> {
    let mut by_start: Vec<&Record> = records.iter().collect();
    by_start.sort_by_key(|record| record.start);
    let mut overlaps = Vec::new();
    for (index, record) in by_start.iter().enumerate() {
        for later in by_start[index + 1..].iter().take_while(|later| later.start < record.end) {
            if record.kind == 'w' || later.kind == 'w' {
                overlaps.push(format!(
                    "{} {} ({}) and {} {} ({})",
                    record.kind, record.fence, record.child, later.kind, later.fence, later.child
                ));
            }
        }
    }
    overlaps
}

/// Runs `children` children taking "k" with `pattern` for `rounds` each and
/// checks the fences they were granted.
fn fences_of_processes(label: &str, children: usize, pattern: &str, rounds: usize) {
    let dir = fresh_directory(label);
    let _ = std::fs::remove_dir_all(work(&dir));
    std::fs::create_dir_all(work(&dir)).unwrap();
    let (provider, _locks) = open(&dir, WAKE_UP);
    let children: Vec<_> = (0..children).map(|_| spawn(&format!("fences:{pattern}/{rounds}"), &dir, WAKE_UP)).collect();
    for (mut child, mut out) in children {
        expect_line(&mut out, "done");
        assert!(child.wait().unwrap().success());
    }
    let records = records(&work(&dir), "rec-");
    let (repeated, below) = fence_faults(&records);
    eprintln!("{} grants, {} fences repeated, {} not above an earlier grant", records.len(), repeated.len(), below.len());
    assert!(repeated.is_empty(), "fences granted twice: {:?}", &repeated[..repeated.len().min(5)]);
    assert!(below.is_empty(), "fences not above an earlier grant's: {:?}", &below[..below.len().min(5)]);
    block_on(provider.close());
}

#[test]
fn readers_of_several_processes_are_never_granted_the_same_fence() {
    fences_of_processes("review-readers", 3, "r", 3_000);
}

#[test]
fn readers_and_writers_of_several_processes_get_rising_fences() {
    fences_of_processes("review-mixed", 3, "rrw", 3_000);
}

/// A reader stopped in its raise of a key's counter (holding the key's
/// raise lock, the counter written) and then killed: meanwhile other
/// readers of the key wait (a reader that may not wait is `LOCK_BUSY`),
/// since the counter they would raise is not settled; once it is dead the
/// next reader is granted a fence above the counter it left, and the key
/// works on.
#[test]
#[cfg(unix)]
fn a_reader_killed_in_its_raise_holds_readers_up_only_until_it_dies_and_repeats_no_fence() {
    let dir = fresh_directory("review-raise");
    let (provider, locks) = open(&dir, WAKE_UP);
    let first = block_on(locks.acquire("k", shared(0))).unwrap();
    let raise_name = file::entries(&dir).into_iter().find(|name| name.ends_with(".raise.lock")).expect("a reader's raise file");
    // What the stopped reader's raise wrote: a fence never handed out.
    let left = first.fence() + 1_000_000_000;
    let (mut child, mut out) = spawn(&format!("in-raise:{raise_name}/{left}"), &dir, WAKE_UP);
    expect_line(&mut out, "held");
    let refused = block_on(locks.acquire("k", shared(0))).err().map(|error| error.code());
    assert_eq!(refused, Some(ErrorCode::LockBusy), "a reader was granted while another's raise held the counter");
    let (granted, outcome) = std::sync::mpsc::channel();
    let waiter = {
        let locks = locks.clone();
        std::thread::spawn(move || granted.send(block_on(locks.acquire("k", shared(30_000))).map(|lease| lease.fence())).unwrap())
    };
    assert!(
        outcome.recv_timeout(std::time::Duration::from_millis(300)).is_err(),
        "a reader was granted while another's raise held the counter"
    );
    child.kill().unwrap();
    child.wait().unwrap();
    let fence = outcome.recv().unwrap().expect("granted once the stopped reader died");
    assert!(fence > left, "fence {fence} is not above the counter {left} the dead reader left");
    waiter.join().unwrap();
    drop(first);
    let writer = block_on(locks.acquire("k", wait(5_000))).unwrap();
    assert!(writer.fence() > fence, "a writer's fence {} is not above the readers' {fence}", writer.fence());
    drop(writer);
    block_on(provider.close());
}

#[test]
fn a_writer_never_holds_a_counted_key_with_its_units_nor_more_units_than_the_limit() {
    let dir = fresh_directory("review-units");
    let _ = std::fs::remove_dir_all(work(&dir));
    std::fs::create_dir_all(work(&dir)).unwrap();
    let (provider, _locks) = open(&dir, WAKE_UP);
    let children: Vec<_> =
        ["units", "units", "units", "plain", "plain"].iter().map(|role| spawn(&format!("{role}:1500"), &dir, WAKE_UP)).collect();
    let mut faults = Vec::new();
    for (mut child, mut out) in children {
        let line = expect_line(&mut out, "done");
        eprintln!("{line}");
        if !line.contains(" 0 faults") {
            faults.push(line);
        }
        assert!(child.wait().unwrap().success());
    }
    assert!(faults.is_empty(), "holders at once beyond the key's kind: {faults:?}");
    block_on(provider.close());
}

/// Children taking a key exclusive or shared, and others units of a counted
/// key, are killed (`SIGKILL`) at random moments, mid-take, mid-raise of a
/// reader's counter, mid-release, mid-removal, and replaced, for a few
/// seconds: the key's fences never repeat and a writer's rise above every
/// earlier grant's, the counted key's fences never repeat, and no more than
/// its limit of units are held.
#[test]
#[cfg(target_os = "linux")]
fn holders_killed_at_random_moments_leave_nothing_that_breaks_exclusion_or_fences() {
    let dir = fresh_directory("review-chaos");
    let _ = std::fs::remove_dir_all(work(&dir));
    std::fs::create_dir_all(work(&dir)).unwrap();
    let (provider, _locks) = open(&dir, WAKE_UP);
    let roles = if std::env::var("DOKEBI_CHAOS_LEAVE").is_ok() {
        ["chaos-x", "chaos-w", "chaos-y", "chaos-r", "chaos-l", "chaos-l", "chaos-u"]
    } else {
        ["chaos-w", "chaos-w", "chaos-r", "chaos-r", "chaos-u", "chaos-u", "chaos-u"]
    };
    let seconds = std::env::var("DOKEBI_CHAOS_SECONDS").map_or(8, |seconds| seconds.parse().unwrap());
    let start = |role: &str| {
        let (child, mut out) = spawn(role, &dir, "pollIntervalMs: 50");
        expect_line(&mut out, "started");
        (child, out)
    };
    let mut children: Vec<_> = roles.iter().map(|role| start(role)).collect();
    let mut seed = now_ns() as u64 | 1;
    let mut random = move |below: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % below
    };
    let until = std::time::Instant::now() + std::time::Duration::from_secs(seconds);
    let mut kills = 0;
    while std::time::Instant::now() < until {
        std::thread::sleep(std::time::Duration::from_millis(20 + random(150)));
        let victim = random(roles.len() as u64) as usize;
        let (child, _) = &mut children[victim];
        child.kill().unwrap();
        child.wait().unwrap();
        kills += 1;
        children[victim] = start(roles[victim]);
    }
    for (child, _) in &mut children {
        child.kill().unwrap();
        child.wait().unwrap();
    }
    let grants_of_k = records(&work(&dir), "rec-k-");
    let units = records(&work(&dir), "rec-c-");
    let (repeated, below) = fence_faults(&grants_of_k);
    let (repeated_units, _) = fence_faults(&units);
    let most = most_units(&units);
    let readers = grants_of_k.iter().filter(|record| record.kind == 'r').count();
    eprintln!(
        "{kills} kills, {} exclusive and {readers} shared grants, {} counted grants, at most {most} units at once",
        grants_of_k.len() - readers,
        units.len()
    );
    assert!(most <= 3, "{most} units held at once, limit 3");
    assert!(repeated.is_empty() && repeated_units.is_empty(), "fences granted twice: {repeated:?} {repeated_units:?}");
    let overlaps = writer_overlaps(&grants_of_k);
    assert!(overlaps.is_empty(), "a writer's section overlaps another grant's: {:?}", &overlaps[..overlaps.len().min(5)]);
    assert!(
        below.is_empty(),
        "fences not above an earlier grant's: {:?} (the clock went back by {} ns between readings on different CPUs)",
        &below[..below.len().min(5)],
        clock_disagreement_across_cpus()
    );
    block_on(provider.close());
}

/// fork() without exec: the child keeps copies of its parent's open lock
/// files (it never uses them: see the README's fork()). A lease the parent
/// then releases must leave the key free for others while the child lives
/// on; a counted key's units are only closed by a release (no unlock), and
/// a lock belongs to the open file the child's copy shares, so they stay
/// taken until the child ends. Not two holders: a key nobody holds, taken.
#[test]
#[cfg(unix)]
fn units_a_parent_released_are_free_while_a_child_forked_before_lives_on() {
    let dir = fresh_directory("review-fork");
    let (provider, locks) = open(&dir, "");
    let held = block_on(locks.acquire("c", counted(2, 2, 0))).unwrap();
    // SAFETY: the child only sleeps and leaves with `_exit`.
    let child = unsafe { libc::fork() };
    assert!(child >= 0, "fork failed");
    if child == 0 {
        std::thread::sleep(std::time::Duration::from_secs(3));
        // SAFETY: ends the child at once.
        unsafe { libc::_exit(0) };
    }
    assert!(block_on(held.release()).unwrap());
    let (other_provider, other) = open(&dir, "");
    let outcome = block_on(other.acquire("c", counted(2, 1, 0))).map(|lease| lease.fence());
    // SAFETY: our child.
    unsafe {
        libc::kill(child, libc::SIGKILL);
        libc::waitpid(child, std::ptr::null_mut(), 0);
    }
    assert!(outcome.is_ok(), "a unit of the released key was refused while the forked child lives: {:?}", outcome.err());
    block_on(other_provider.close());
    block_on(provider.close());
}

/// One grant of "k" an `order` child recorded: when its acquire was called
/// and returned, and when its release was called.
struct Timed {
    kind: char,
    fence: u64,
    call: u128,
    returned: u128,
    release: u128,
}

fn timed_records(work: &Path) -> Vec<Timed> {
    let mut all = Vec::new();
    for entry in std::fs::read_dir(work).unwrap() {
        let path = entry.unwrap().path();
        if !path.file_name().unwrap().to_string_lossy().starts_with("ord-") {
            continue;
        }
        for line in std::fs::read_to_string(&path).unwrap().lines() {
            let parts: Vec<&str> = line.split_whitespace().collect();
            let [kind, fence, call, returned, release] = parts[..] else { continue };
            let (Ok(fence), Ok(call), Ok(returned), Ok(release)) = (fence.parse(), call.parse(), returned.parse(), release.parse()) else {
                continue;
            };
            all.push(Timed { kind: kind.chars().next().unwrap(), fence, call, returned, release });
        }
    }
    all
}

/// Grants of several processes, each with threads of backends of their
/// own, of every kind (waiting and non-waiting readers, writers, and leases
/// over several keys), held for random moments so that the key's files are
/// removed and made again all along: no fence repeats, a grant whose
/// acquire was called after another's returned has a higher fence, readers
/// included, and no writer's hold overlaps another hold.
#[test]
fn grants_of_every_kind_are_ordered_by_their_fences_across_processes_and_backends() {
    let dir = fresh_directory("review-order");
    let _ = std::fs::remove_dir_all(work(&dir));
    std::fs::create_dir_all(work(&dir)).unwrap();
    let (provider, _locks) = open(&dir, WAKE_UP);
    let rounds = std::env::var("DOKEBI_ORDER_ROUNDS").map_or(1_500, |rounds| rounds.parse().unwrap());
    let mix = std::env::var("DOKEBI_ORDER_MIX").unwrap_or_else(|_| "rrrttwmn".into());
    let fork = if std::env::var("DOKEBI_ORDER_FORK").is_ok() { "/fork" } else { "" };
    let close = if std::env::var("DOKEBI_ORDER_CLOSE").is_ok() { "/close" } else { "" };
    let children: Vec<_> = (0..3).map(|_| spawn(&format!("order:{rounds}/2/{mix}{fork}{close}"), &dir, WAKE_UP)).collect();
    for (mut child, mut out) in children {
        expect_line(&mut out, "done");
        assert!(child.wait().unwrap().success());
    }
    check_order(&timed_records(&work(&dir)));
    block_on(provider.close());
}

/// Checks the grants of `records`: no fence repeated, none not above a
/// grant returned before its acquire was called, no writer's hold
/// overlapping another hold.
fn check_order(records: &[Timed]) {
    let mut by_fence: Vec<&Timed> = records.iter().collect();
    by_fence.sort_by_key(|record| record.fence);
    let repeated: Vec<String> = by_fence
        .windows(2)
        .filter(|pair| pair[0].fence == pair[1].fence)
        .map(|pair| format!("{} ({} and {})", pair[0].fence, pair[0].kind, pair[1].kind))
        .collect();
    // Each grant against the highest fence of the grants returned before
    // its acquire was called.
    let mut by_return: Vec<&Timed> = records.iter().collect();
    by_return.sort_by_key(|record| record.returned);
    let mut by_call: Vec<&Timed> = records.iter().collect();
    by_call.sort_by_key(|record| record.call);
    let (mut returned, mut highest, mut below) = (0, None::<&Timed>, Vec::new());
    for record in &by_call {
        while returned < by_return.len() && by_return[returned].returned < record.call {
            let done = by_return[returned];
            if highest.is_none_or(|high| done.fence > high.fence) {
                highest = Some(done);
            }
            returned += 1;
        }
        if let Some(high) = highest.filter(|high| record.fence <= high.fence) {
            below.push(format!(
                "{} {} called {} ns after {} {} returned",
                record.kind,
                record.fence,
                record.call - high.returned,
                high.kind,
                high.fence
            ));
        }
    }
    // Holds: a writer's overlaps none.
    let mut by_hold: Vec<&Timed> = records.iter().collect();
    by_hold.sort_by_key(|record| record.returned);
    let mut overlaps = Vec::new();
    for (at, record) in by_hold.iter().enumerate() {
        for later in &by_hold[at + 1..] {
            if later.returned >= record.release {
                break;
            }
            if record.kind == 'w' || later.kind == 'w' {
                overlaps.push(format!("{} {} and {} {}", record.kind, record.fence, later.kind, later.fence));
            }
        }
    }
    let readers = records.iter().filter(|record| record.kind == 'r').count();
    eprintln!(
        "{} grants ({readers} shared), {} fences repeated, {} not above an earlier grant's, {} holds overlapping a writer's",
        records.len(),
        repeated.len(),
        below.len(),
        overlaps.len()
    );
    assert!(overlaps.is_empty(), "a writer held the key with another: {:?}", &overlaps[..overlaps.len().min(5)]);
    assert!(repeated.is_empty(), "fences granted twice: {:?}", &repeated[..repeated.len().min(5)]);
    assert!(below.is_empty(), "fences not above a grant returned before: {:?}", &below[..below.len().min(5)]);
}

/// [`grants_of_every_kind_are_ordered_by_their_fences_across_processes_and_backends`]
/// while the children are stopped (`SIGSTOP`) for random moments, in a
/// raise, a release or a removal, and resumed, or killed and replaced.
#[test]
#[ignore = "long: run with --ignored"]
#[cfg(target_os = "linux")]
fn grants_stay_ordered_while_their_processes_are_stopped_resumed_and_killed() {
    let dir = fresh_directory("review-stops");
    let _ = std::fs::remove_dir_all(work(&dir));
    std::fs::create_dir_all(work(&dir)).unwrap();
    let (provider, _locks) = open(&dir, WAKE_UP);
    let mix = std::env::var("DOKEBI_ORDER_MIX").unwrap_or_else(|_| "rrrttwmn".into());
    let seconds = std::env::var("DOKEBI_ORDER_SECONDS").map_or(8, |seconds| seconds.parse().unwrap());
    let close = if std::env::var("DOKEBI_ORDER_CLOSE").is_ok() { "/close" } else { "" };
    let start = || spawn(&format!("order:1000000000/2/{mix}{close}"), &dir, "pollIntervalMs: 50");
    let mut children: Vec<_> = (0..4).map(|_| start()).collect();
    let mut seed = now_ns() as u64 | 1;
    let mut random = move |below: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % below
    };
    let until = std::time::Instant::now() + std::time::Duration::from_secs(seconds);
    let (mut stops, mut kills) = (0, 0);
    while std::time::Instant::now() < until {
        std::thread::sleep(std::time::Duration::from_millis(5 + random(40)));
        let victim = random(children.len() as u64) as usize;
        let pid = children[victim].0.id() as i32;
        if random(6) == 0 {
            let (child, _) = &mut children[victim];
            child.kill().unwrap();
            child.wait().unwrap();
            kills += 1;
            children[victim] = start();
        } else {
            // SAFETY: signals to our own child.
            unsafe { libc::kill(pid, libc::SIGSTOP) };
            std::thread::sleep(std::time::Duration::from_micros(random(30_000)));
            // SAFETY: as above.
            unsafe { libc::kill(pid, libc::SIGCONT) };
            stops += 1;
        }
    }
    for (child, _) in &mut children {
        child.kill().unwrap();
        child.wait().unwrap();
    }
    eprintln!("{stops} stops, {kills} kills");
    check_order(&timed_records(&work(&dir)));
    block_on(provider.close());
}

/// A reader granted a fence ahead of the clock (readers granted within one
/// microsecond run the counter ahead of it; here its counter is put 700 µs
/// ahead, as a burst of raises would) and released before an earlier
/// reader, whose own fence is behind the clock: that last release removes
/// the key's file only once the clock has passed the counter, so the next
/// grant, which restarts from the clock, is above the ahead reader's.
#[test]
#[cfg(unix)]
fn the_last_reader_removes_the_file_only_once_the_clock_passes_a_later_reader_s_fence() {
    let dir = fresh_directory("review-ahead");
    let (provider, locks) = open(&dir, WAKE_UP);
    let early = block_on(locks.acquire("k", shared(0))).unwrap();
    // `<32 hex digits>.lock`, not its raise file.
    let lock_file = file::entries(&dir).into_iter().find(|name| name.len() == 37).expect("the key's lock file");
    let ahead = file::clock_us() + 700;
    std::os::unix::fs::FileExt::write_all_at(
        &std::fs::OpenOptions::new().write(true).open(dir.join(&lock_file)).unwrap(),
        format!("{ahead:0>20}\n").as_bytes(),
        0,
    )
    .unwrap();
    let later = block_on(locks.acquire("k", shared(0))).unwrap();
    assert!(later.fence() > ahead);
    let later_fence = later.fence();
    drop(later);
    drop(early);
    let next = block_on(locks.acquire("k", wait(0))).unwrap();
    assert!(next.fence() > later_fence, "fence {} after a reader's {later_fence}", next.fence());
    drop(next);
    block_on(provider.close());
}

/// Processes whose threads take a counted key's units, waiting or leaving
/// (timed out, dropped, aborted), and take it as writers and readers,
/// waiting or leaving: never more than the limit of units, a writer never
/// with anyone, a reader never with units; no fence twice; and once every
/// process has closed its backends, none of the key's files is left.
#[test]
fn leaving_waiters_of_a_counted_key_keep_its_units_and_fences_and_leave_no_files() {
    let dir = fresh_directory("review-units-leave");
    let _ = std::fs::remove_dir_all(work(&dir));
    std::fs::create_dir_all(work(&dir)).unwrap();
    let (provider, _locks) = open(&dir, WAKE_UP);
    let rounds = std::env::var("DOKEBI_UNITS_ROUNDS").map_or(1_000, |rounds| rounds.parse().unwrap());
    let mix = std::env::var("DOKEBI_UNITS_MIX").unwrap_or_else(|_| "12uv12uvwlrs".into());
    let children: Vec<_> = (0..3).map(|_| spawn(&format!("units-leave:{rounds}/2/{mix}"), &dir, WAKE_UP)).collect();
    let mut faults = Vec::new();
    for (mut child, mut out) in children {
        let line = expect_line(&mut out, "done");
        eprintln!("{line}");
        if !line.contains(" 0 faults") {
            faults.push(line);
        }
        assert!(child.wait().unwrap().success());
    }
    let mut fences: Vec<(u64, String)> = Vec::new();
    for entry in std::fs::read_dir(work(&dir)).unwrap() {
        let path = entry.unwrap().path();
        if path.file_name().unwrap().to_string_lossy().starts_with("fence-") {
            for line in std::fs::read_to_string(&path).unwrap().lines() {
                let (tag, fence) = line.split_once(' ').unwrap();
                fences.push((fence.parse().unwrap(), tag.to_owned()));
            }
        }
    }
    fences.sort();
    let repeated: Vec<_> =
        fences.windows(2).filter(|pair| pair[0].0 == pair[1].0).map(|pair| format!("{:?} {:?}", pair[0], pair[1])).collect();
    let left = file::entries_after_keep(&dir);
    block_on(provider.close());
    assert!(faults.is_empty(), "holders at once beyond the key's kind: {faults:?}");
    assert!(repeated.is_empty(), "fences granted twice: {:?}", &repeated[..repeated.len().min(5)]);
    assert_eq!(left, Vec::<String>::new(), "files left once every backend closed");
}

/// Readers of a key whose lock file still records a counted key's limit
/// (its unit files free: left by a counted release that could not remove
/// them, or, here, by a holder of a unit killed) each look whether a unit
/// is held by locking the unit files for a moment, holding the key's lock
/// file only shared, so two readers looking at once each find the other's
/// look: one is refused `INVALID_ARGUMENT` though no unit is held. Not two
/// holders; a reader refused for nothing.
#[test]
#[cfg(unix)]
fn readers_of_a_key_with_a_stale_limit_record_are_not_refused_for_each_other_s_look_at_its_units() {
    let dir = fresh_directory("review-stale-limit");
    let (provider, locks) = open(&dir, WAKE_UP);
    // What a holder of a unit killed leaves: the lock file with limit 3,
    // and unit 0, free.
    let (mut child, mut out) = spawn("unit-held", &dir, WAKE_UP);
    expect_line(&mut out, "held");
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(file::entries(&dir).len(), 2, "the key's lock file and unit 0");
    // A reader holds the key all along, so no release is the last one.
    let holder = block_on(locks.acquire("c", shared(0))).expect("no unit is held");
    let refused = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|scope| {
        for _ in 0..4 {
            scope.spawn(|| {
                let (provider, backend) = open(&dir, WAKE_UP);
                for _ in 0..3_000 {
                    match block_on(backend.acquire("c", shared(5_000))) {
                        Ok(lease) => drop(lease),
                        Err(error) if error.code() == ErrorCode::InvalidArgument => {
                            refused.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        }
                        Err(error) => panic!("{error}"),
                    }
                }
                block_on(provider.close());
            });
        }
    });
    drop(holder);
    block_on(provider.close());
    assert_eq!(refused.into_inner(), 0, "readers refused INVALID_ARGUMENT while no unit was held");
}

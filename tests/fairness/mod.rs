//! The race of the fairness suites (tests/redis_fairness.rs,
//! tests/postgres_fairness.rs), whatever the store: two processes (two
//! providers, each with its own connections) each run two tasks that loop on
//! the same keys, releasing and acquiring again at once, and the checks that
//! no process starves.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use dokebi_lock::{AcquireOptions, Backend};
use futures::executor::block_on;

/// One grant of the race: its fence, who got it, and when its acquire was
/// called and answered.
#[derive(Clone, Copy)]
pub struct Grant {
    fence: u64,
    who: usize,
    asked: Instant,
    granted: Instant,
}

/// Loops acquire and release of `keys` until `stop`, recording every grant.
fn hammer(
    backend: Backend,
    keys: Vec<String>,
    who: usize,
    stop: Arc<AtomicBool>,
    grants: Arc<Mutex<Vec<Grant>>>,
) -> thread::JoinHandle<()> {
    thread::spawn(move || {
        let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
        let wait = AcquireOptions { wait_timeout: Some(Duration::from_secs(10)), ..AcquireOptions::default() };
        while !stop.load(Ordering::Relaxed) {
            let asked = Instant::now();
            let lease = block_on(backend.acquire_many(&keys, wait.clone())).expect("granted");
            let granted = Instant::now();
            grants.lock().unwrap().push(Grant { fence: lease.fences()[0].1, who, asked, granted });
            assert!(block_on(lease.release()).unwrap());
        }
    })
}

/// The backends of two processes (ready: connected and woken by releases)
/// looping on `keys` for `run`, two tasks each: the grants, in fence order.
pub fn race(name: &str, a: &Backend, b: &Backend, keys: &[&str], run: Duration) -> Vec<Grant> {
    let (stop, grants) = (Arc::new(AtomicBool::new(false)), Arc::new(Mutex::new(Vec::new())));
    let keys: Vec<String> = keys.iter().map(|k| (*k).to_owned()).collect();
    let threads: Vec<_> = [(a, 0), (b, 1), (a, 0), (b, 1)]
        .into_iter()
        .map(|(backend, who)| hammer(backend.clone(), keys.clone(), who, stop.clone(), grants.clone()))
        .collect();
    let started = Instant::now();
    thread::sleep(run);
    stop.store(true, Ordering::Relaxed);
    for thread in threads {
        thread.join().unwrap();
    }
    let elapsed = started.elapsed();
    let mut grants = grants.lock().unwrap().clone();
    grants.sort_unstable_by_key(|grant| grant.fence);
    let order: Vec<usize> = grants.iter().map(|grant| grant.who).collect();
    let of = |who| order.iter().filter(|&&w| w == who).count();
    eprintln!("{name}: {} : {} grants in {elapsed:?}, longest run {}", of(0), of(1), longest_run(&order));
    grants
}

/// The longest run of grants one process took in a row.
fn longest_run(order: &[usize]) -> usize {
    order.chunk_by(|a, b| a == b).map(<[usize]>::len).max().unwrap_or(0)
}

/// Fair: each process gets at least 40% of the grants, and while an acquire
/// waits the other process is granted a few times at most. Its wait includes
/// its turn behind its own process's other task, so the other process's two
/// tasks may each be granted once or twice meanwhile: 2-4 seen on a quiet
/// machine. Its wait is timed from when the task asked, not from when its
/// request reached the server, so a task the host does not run for a moment
/// right after asking sees more: 12 in a CI run whose builds ran beside the
/// tests (stop 43). 20 are allowed; without the waiting marks, a waiting
/// acquire sees the other process granted hundreds of times. Runs of one process's grants in a row
/// prove less: a process whose threads the host does not run for a moment
/// asks for nothing meanwhile, and the other may take the free key many
/// times without overtaking anyone.
pub fn assert_fair(name: &str, grants: &[Grant]) {
    let of = |who| grants.iter().filter(|grant| grant.who == who).count();
    let (first, second) = (of(0), of(1));
    let total = first + second;
    assert!(total >= 20, "{name}: the loop ran ({total} grants)");
    assert!(first.min(second) * 10 >= total * 4, "{name}: a fair share: {first} : {second}");
    let overtaken = |waiter: &Grant| {
        grants.iter().filter(|other| other.who != waiter.who && other.granted > waiter.asked && other.granted < waiter.granted).count()
    };
    let most = grants.iter().map(overtaken).max().unwrap_or(0);
    // FIFO across processes among waiters that reached the server: an
    // acquire of the other process asked well after a waiter's (its mark
    // long in place) is never granted first, but for each of the other
    // process's two tasks already on its way (a grant each).
    let overtaken_late = |waiter: &Grant| {
        grants
            .iter()
            .filter(|other| other.who != waiter.who && other.asked > waiter.asked + REACHED && other.granted < waiter.granted)
            .count()
    };
    let late = grants.iter().map(overtaken_late).max().unwrap_or(0);
    eprintln!("{name}: an acquire waited through at most {most} grants of the other process, {late} asked {REACHED:?} after it");
    assert!(most <= 20, "{name}: an acquire waited while the other process was granted {most} times");
    assert!(late <= 2, "{name}: an acquire was overtaken by {late} acquires of the other process asked {REACHED:?} after it");
}

/// Time enough for an acquire to reach the server and leave its waiting
/// mark, on a loaded host: an acquire asked this long after another's is
/// behind it.
const REACHED: Duration = Duration::from_millis(100);

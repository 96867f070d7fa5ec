//! No process starves on a hot key: two providers (each with its own
//! connections, as two processes) each run two tasks that loop on one key,
//! releasing and acquiring again at once, so each always has a waiter with
//! a mark in the table. A try is granted only when no older mark of another
//! owner waits, so the process that just released cannot take the key back
//! ahead of the other's waiter: the grants alternate. (A waiter keeps its
//! place by its token's oldest mark: when it passed a fresh ticket instead,
//! one process took runs of 22 grants here.)

mod postgres;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use dokebi_lock::{Backend, Provider};
use futures::executor::block_on;
use postgres::{backend, wait, Schema};

/// Loops acquire and release of `keys` until `stop`, recording every
/// grant's fence and who got it.
fn hammer(
    backend: Backend,
    keys: Vec<String>,
    who: usize,
    stop: Arc<AtomicBool>,
    grants: Arc<Mutex<Vec<(u64, usize)>>>,
) -> thread::JoinHandle<()> {
    thread::spawn(move || {
        let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
        while !stop.load(Ordering::Relaxed) {
            let lease = block_on(backend.acquire_many(&keys, wait(10_000))).expect("granted");
            grants.lock().unwrap().push((lease.fences()[0].1, who));
            assert!(block_on(lease.release()).unwrap());
        }
    })
}

/// The longest run of grants one process took while the other waited.
fn longest_run(order: &[usize]) -> usize {
    order.chunk_by(|a, b| a == b).map(<[usize]>::len).max().unwrap_or(0)
}

/// Races two processes on `keys`: each gets a fair share, and neither
/// takes more than `most_in_a_row` grants while the other waits.
fn race(a: Provider, b: Provider, keys: &[&str], most_in_a_row: usize) {
    // Both connected and listening before the race begins.
    for provider in [&a, &b] {
        let lease = block_on(backend(provider).acquire_many(keys, wait(5_000))).unwrap();
        assert!(block_on(lease.release()).unwrap());
        postgres::eventually("listening", || backend(provider).status().postgres.unwrap().listening);
    }
    let (stop, grants) = (Arc::new(AtomicBool::new(false)), Arc::new(Mutex::new(Vec::new())));
    let keys: Vec<String> = keys.iter().map(|k| (*k).to_owned()).collect();
    let threads: Vec<_> = [(&a, 0), (&b, 1), (&a, 0), (&b, 1)]
        .into_iter()
        .map(|(provider, who)| hammer(backend(provider), keys.clone(), who, stop.clone(), grants.clone()))
        .collect();
    thread::sleep(Duration::from_millis(1_500));
    stop.store(true, Ordering::Relaxed);
    for thread in threads {
        thread.join().unwrap();
    }
    let mut grants = grants.lock().unwrap().clone();
    grants.sort_unstable();
    let order: Vec<usize> = grants.iter().map(|&(_, who)| who).collect();
    let of = |who| order.iter().filter(|&&w| w == who).count();
    let (first, second) = (of(0), of(1));
    let total = first + second;
    eprintln!("{first} : {second} grants, longest run {}", longest_run(&order));
    assert!(total >= 20, "the loop ran ({total} grants)");
    assert!(first.min(second) * 10 >= total * 4, "a fair share: {first} : {second}");
    // The ends of the race aside: the tasks start and stop one after another.
    let run = longest_run(&order[2..order.len() - 2]);
    assert!(run <= most_in_a_row, "turns alternate (a run of {run}): {order:?}");
    block_on(a.close());
    block_on(b.close());
}

#[test]
fn a_process_that_waits_gets_its_turn_against_one_that_loops() {
    let schema = Schema::fresh();
    race(schema.open(""), schema.open(""), &["hot"], 4);
}

#[test]
fn a_process_waiting_for_several_keys_gets_its_turn_too() {
    let schema = Schema::fresh();
    race(schema.open(""), schema.open(""), &["hot", "cold"], 4);
}

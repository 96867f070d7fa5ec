//! The postgres driver between real processes: this test binary runs
//! itself as the children (`child_process`, ignored in a plain run, is
//! their entry point), which lock a key of one schema while the parent
//! watches.

mod postgres;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use dokebi_lock::{ErrorCode, Provider};
use futures::executor::block_on;
use postgres::{backend, code, wait, Schema};

/// Starts this test binary as a child running `role` with `yaml`.
fn spawn(role: &str, yaml: &str, store: &Path) -> (Child, BufReader<ChildStdout>) {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_process", "--ignored", "--nocapture", "--test-threads=1"])
        .env("DOKEBI_PG_CHILD", role)
        .env("DOKEBI_PG_YAML", yaml)
        .env("DOKEBI_PG_STORE", store)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = BufReader::new(child.stdout.take().unwrap());
    (child, stdout)
}

/// What follows `prefix` on the next line the child printed with it.
fn expect_line(out: &mut BufReader<ChildStdout>, prefix: &str) -> String {
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

/// A file only the holder of the key may touch: `<count> <last fence>`.
fn fresh_store(name: &str) -> PathBuf {
    let path = std::env::temp_dir().join(format!("dokebi-pg-{name}-{}", std::process::id()));
    let _ = std::fs::remove_file(&path);
    path
}

/// The children's entry point: does nothing unless run as a child.
#[test]
#[ignore = "the child process of the tests below, which run it"]
fn child_process() {
    let Ok(role) = std::env::var("DOKEBI_PG_CHILD") else { return };
    let provider = Provider::from_yaml(&std::env::var("DOKEBI_PG_YAML").unwrap()).unwrap();
    let locks = backend(&provider);
    let store = PathBuf::from(std::env::var("DOKEBI_PG_STORE").unwrap());
    let mut stdout = std::io::stdout();
    match role.as_str() {
        // Holds the key and never releases it (the parent kills it).
        "hold" => {
            let lease = block_on(locks.acquire("shared-key", wait(10_000))).unwrap();
            writeln!(stdout, "held {}", lease.fence()).unwrap();
            stdout.flush().unwrap();
            let mut line = String::new();
            std::io::stdin().read_line(&mut line).unwrap();
            std::mem::forget(lease);
        }
        // Takes the key 50 times; inside, a read-modify-write of the store
        // (a count and the last fence, which must rise), with 3 ms between
        // the read and the write: two holders at once lose a count.
        "hammer" => {
            for _ in 0..50 {
                let lease = block_on(locks.acquire("shared-key", wait(30_000))).unwrap();
                let text = std::fs::read_to_string(&store).unwrap_or_else(|_| "0 0".into());
                let mut parts = text.split_whitespace().map(|n| n.parse::<u64>().unwrap());
                let (count, last) = (parts.next().unwrap(), parts.next().unwrap());
                assert!(lease.fence() > last, "fence {} not above the store's {last}", lease.fence());
                std::thread::sleep(std::time::Duration::from_millis(3));
                std::fs::write(&store, format!("{} {}", count + 1, lease.fence())).unwrap();
                assert!(block_on(lease.release()).unwrap());
            }
            writeln!(stdout, "done").unwrap();
        }
        // Waits for the key (the parent holds it) until killed.
        "wait" => {
            let granted = block_on(locks.acquire("shared-key", wait(60_000)));
            panic!("the waiter was to be killed while waiting, not: {:?}", granted.map(|lease| lease.fence()));
        }
        other => panic!("unknown role {other}"),
    }
    block_on(provider.close());
}

#[test]
fn processes_take_a_key_one_at_a_time_and_fences_rise_in_a_fenced_store() {
    let schema = Schema::fresh();
    let store = fresh_store("hammer");
    let yaml = schema.yaml("", "");
    let children: Vec<_> = (0..3).map(|_| spawn("hammer", &yaml, &store)).collect();
    for (mut child, mut out) in children {
        expect_line(&mut out, "done");
        assert!(child.wait().unwrap().success());
    }
    let text = std::fs::read_to_string(&store).unwrap();
    assert_eq!(text.split_whitespace().next().unwrap(), "150", "every section saw the count of the one before it");
    let _ = std::fs::remove_file(&store);
}

#[test]
fn a_process_killed_while_holding_keeps_the_key_only_until_its_lease_ends() {
    let schema = Schema::fresh();
    let store = fresh_store("killed");
    let (mut child, mut out) = spawn("hold", &schema.yaml("        leaseMs: 3000\n", ""), &store);
    let fence: u64 = expect_line(&mut out, "held").parse().unwrap();
    let held = Instant::now();
    let provider = schema.open("");
    assert_eq!(code(block_on(backend(&provider).acquire("shared-key", wait(0)))), ErrorCode::LockBusy);
    child.kill().unwrap();
    child.wait().unwrap();
    let lease = block_on(backend(&provider).acquire("shared-key", wait(20_000))).expect("granted once the dead holder's lease ended");
    // Not before the lease (3 s from the grant, which came before "held"),
    // and soon after it: a waiter polls every `pollIntervalMs` (25 ms) and
    // `notifyPollIntervalMs` (250 ms); 1.5 s of slack for a loaded host.
    let waited = held.elapsed();
    assert!(waited >= Duration::from_millis(2_500), "granted {waited:?} after the holder's grant, within its 3 s lease");
    assert!(waited <= Duration::from_millis(4_500), "granted only {waited:?} after the holder's grant: its 3 s lease was kept longer");
    assert!(lease.fence() > fence);
    assert!(block_on(lease.release()).unwrap());
    block_on(provider.close());
}

/// A waiter killed while waiting leaves its mark: the next waiter, behind
/// it, is granted only once the mark lapses (2 x max(poll intervals) + 1 s
/// after its last try: 1.5 s here), and then at its next poll. Both on the
/// server's clock: the mark's `lapses_at`, and the grant's fence, which is
/// the clock in µs when the grant's try looked at the marks (above the
/// key's counter, last raised at the holder's grant).
#[test]
fn a_dead_waiter_s_mark_delays_the_next_waiter_only_until_it_lapses() {
    let schema = Schema::fresh();
    let store = fresh_store("dead-waiter");
    let holder = schema.open("");
    let held = block_on(backend(&holder).acquire("shared-key", wait(0))).unwrap();
    let (mut child, _out) = spawn("wait", &schema.yaml("", ""), &store);
    let marks = format!("SELECT count(*) FROM {} WHERE lapses_at > now()", schema.table("_waiting"));
    postgres::eventually("the child waits, with a mark", || postgres::count(&marks) == 1);
    child.kill().unwrap();
    child.wait().unwrap();
    let killed = Instant::now();
    let micros = |at: &str| format!("floor(extract(epoch FROM {at}) * 1000000)::bigint");
    let killed_us = postgres::count(&format!("SELECT {}", micros("clock_timestamp()")));
    let lapses_us = postgres::count(&format!("SELECT {} FROM {}", micros("max(lapses_at)"), schema.table("_waiting")));
    // Its last try was at most a notify poll (250 ms) before the kill.
    let left = Duration::from_micros(u64::try_from(lapses_us - killed_us).expect("the dead waiter's mark is live at the kill"));
    assert!(left <= Duration::from_millis(1_500), "the dead waiter's mark lapses {left:?} after the kill: past its 1.5 s bound");
    let next_provider = schema.open("");
    let waiter = backend(&next_provider);
    let next = std::thread::spawn(move || block_on(waiter.acquire("shared-key", wait(10_000))));
    postgres::eventually("the next waiter waits behind the dead one's mark", || postgres::count(&marks) == 2);
    assert!(block_on(held.release()).unwrap());
    let lease = next.join().unwrap().expect("granted once the dead waiter's mark lapsed");
    let waited = killed.elapsed();
    let granted_us = lease.fence() as i64;
    assert!(granted_us >= lapses_us, "granted {} µs before the dead waiter's mark lapsed", lapses_us - granted_us);
    // At its next poll (250 ms), with slack for a loaded host.
    let late = Duration::from_micros((granted_us - lapses_us) as u64);
    assert!(late <= Duration::from_millis(1_500), "granted only {late:?} after the dead waiter's mark lapsed");
    assert!(waited <= Duration::from_millis(3_000), "granted only {waited:?} after the kill: the mark outlived its 1.5 s bound");
    assert!(lease.fence() > held.fence());
    assert!(block_on(lease.release()).unwrap());
    block_on(holder.close());
    block_on(next_provider.close());
}

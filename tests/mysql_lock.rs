//! The mysql driver against the machine's MariaDB, between two providers
//! (each with its own connections, as two processes): fences that rise,
//! every kind, several keys all or nothing, names longer than a column and
//! hostile ones, and the failures a caller sees.

mod mysql;
#[path = "support/renewals.rs"]
mod renewals;
mod support;

use std::time::Duration;

use dokebi_lock::{AcquireOptions, Backend, ErrorCode, LockMode, Provider};
use futures::executor::block_on;
use mysql::{count, rows, url, yaml, Table};

fn wait(ms: u64) -> AcquireOptions {
    AcquireOptions { wait_timeout: Some(Duration::from_millis(ms)), ..AcquireOptions::default() }
}

fn open(table: &Table) -> (Provider, Backend) {
    let provider = Provider::from_yaml(&yaml(&table.0, "")).unwrap();
    let backend = provider.backend("shared").unwrap();
    (provider, backend)
}

fn code<T: std::fmt::Debug>(outcome: dokebi_lock::Result<T>) -> ErrorCode {
    outcome.expect_err("refused").code()
}

#[test]
fn a_key_is_held_by_one_process_at_a_time_with_rising_fences() {
    let table = Table::fresh();
    let ((_one, a), (_other, b)) = (open(&table), open(&table));
    let first = block_on(a.acquire("order:1", wait(0))).unwrap();
    assert_eq!(code(block_on(b.acquire("order:1", wait(0)))), ErrorCode::LockBusy);
    let fence = first.fence();
    assert!(block_on(first.release()).unwrap());
    let second = block_on(b.acquire("order:1", wait(0))).unwrap();
    assert!(second.fence() > fence, "{} after {fence}", second.fence());
    // A waiter in the other process is served once the key is released.
    let waiter = std::thread::spawn({
        let a = a.clone();
        move || block_on(a.acquire("order:1", wait(3000))).map(|lease| lease.fence())
    });
    std::thread::sleep(Duration::from_millis(100));
    let last = second.fence();
    assert!(block_on(second.release()).unwrap());
    assert!(waiter.join().unwrap().unwrap() > last);
}

#[test]
fn readers_share_counted_keys_hold_their_limit_and_several_keys_are_all_or_nothing() {
    let table = Table::fresh();
    let ((_one, a), (_other, b)) = (open(&table), open(&table));
    let shared = AcquireOptions { mode: LockMode::Shared, ..wait(0) };
    let r1 = block_on(a.acquire("doc", shared.clone())).unwrap();
    let r2 = block_on(b.acquire("doc", shared.clone())).unwrap();
    assert_eq!(code(block_on(b.acquire("doc", wait(0)))), ErrorCode::LockBusy, "a writer waits for the readers");
    assert!(block_on(r1.release()).unwrap() && block_on(r2.release()).unwrap());

    let counted = |weight| AcquireOptions { limit: Some(3), weight: Some(weight), ..wait(0) };
    let c1 = block_on(a.acquire("pool", counted(2))).unwrap();
    assert_eq!(code(block_on(b.acquire("pool", counted(2)))), ErrorCode::LockBusy);
    let c2 = block_on(b.acquire("pool", counted(1))).unwrap();
    let other_limit = AcquireOptions { limit: Some(4), ..wait(0) };
    assert_eq!(code(block_on(b.acquire("pool", other_limit))), ErrorCode::InvalidArgument);
    assert!(block_on(c1.release()).unwrap() && block_on(c2.release()).unwrap());

    let held = block_on(a.acquire("k2", wait(0))).unwrap();
    assert_eq!(code(block_on(b.acquire_many(&["k3", "k1", "k2"], wait(0)))), ErrorCode::LockBusy);
    assert!(block_on(b.acquire("k1", wait(0))).is_ok_and(|lease| block_on(lease.release()).unwrap()), "nothing of the refused set is held");
    assert!(block_on(held.release()).unwrap());
    let many = block_on(b.acquire_many(&["k3", "k1", "k2"], wait(0))).unwrap();
    let fences = many.fences();
    assert_eq!(fences.len(), 3);
    assert!(block_on(many.release()).unwrap());
}

#[test]
fn long_and_hostile_keys_and_namespaces_are_only_data() {
    let table = Table::fresh();
    let provider = Provider::from_yaml(&yaml(&table.0, ", namespace: \"x'); DROP TABLE t; --\", maxKeyBytes: 4000")).unwrap();
    let backend = provider.backend("shared").unwrap();
    let long = "é".repeat(1000);
    let (a, b) = (format!("{long}a"), format!("{long}b"));
    for key in ["'); DROP TABLE x; --", "\\", "a,b", "a;b", a.as_str(), b.as_str()] {
        let lease = block_on(backend.acquire(key, wait(0))).unwrap_or_else(|err| panic!("{key:?}: {err}"));
        if key == a {
            // Digests of two long keys are two keys.
            let other = block_on(backend.acquire(&b, wait(0))).unwrap();
            assert!(block_on(other.release()).unwrap());
        }
        assert!(block_on(lease.release()).unwrap());
    }
    // Six keys, the long ones as 0xFF and their SHA-256.
    assert_eq!(count(&format!("SELECT COUNT(*) FROM `{}`", table.0)), 6);
    assert_eq!(count(&format!("SELECT MAX(LENGTH(k)) FROM `{}`", table.0)), 33);
}

#[test]
fn refused_credentials_name_the_user_never_the_password_and_an_unreachable_server_says_so() {
    let table = Table::fresh();
    let wrong = url().replacen("mysql://root@", "mysql://dokebi_nobody:hunter2secret@", 1);
    let yaml = mysql::yaml(&table.0, "").replace(&url(), &wrong);
    let provider = Provider::from_yaml(&yaml).unwrap();
    let err = block_on(provider.backend("shared").unwrap().acquire("k", wait(0))).unwrap_err();
    assert_eq!(err.code(), ErrorCode::ProviderFailed);
    let text = format!("{err} {}", err.fix());
    assert!(text.contains("dokebi_nobody") && !text.contains("hunter2secret"), "{text}");

    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let yaml = mysql::yaml(&table.0, "").replace(&url(), &format!("mysql://root@127.0.0.1:{port}/test"));
    let provider = Provider::from_yaml(&yaml).unwrap();
    let err = block_on(provider.backend("shared").unwrap().acquire("k", wait(0))).unwrap_err();
    assert_eq!(err.code(), ErrorCode::ProviderFailed);
    assert!(err.to_string().contains("unreachable"), "{err}");
}

#[test]
fn without_auto_create_the_fix_is_the_sql_to_run_and_it_works() {
    let table = Table::fresh();
    let provider = Provider::from_yaml(&yaml(&table.0, ", autoCreate: false")).unwrap();
    let err = block_on(provider.backend("shared").unwrap().acquire("k", wait(0))).unwrap_err();
    assert_eq!(err.code(), ErrorCode::ProviderFailed);
    let fix = err.fix().to_owned();
    assert!(fix.contains(&format!("CREATE PROCEDURE `{}_take`", table.0)), "{fix}");
    // What autoCreate installs is what the fix says.
    let (_auto, backend) = open(&table);
    assert!(block_on(block_on(backend.acquire("k", wait(0))).unwrap().release()).unwrap());
    let lease = block_on(provider.backend("shared").unwrap().acquire("k", wait(0))).unwrap();
    assert!(block_on(lease.release()).unwrap());
    assert_eq!(
        rows(&format!(
            "SELECT COUNT(*) FROM information_schema.ROUTINES WHERE ROUTINE_SCHEMA = 'test' AND ROUTINE_NAME LIKE '{}\\_%'",
            table.0
        ))[0][0]
            .as_deref(),
        Some("10")
    );
}

#[test]
fn a_release_wakes_a_waiter_of_another_process_long_before_its_next_poll() {
    let table = Table::fresh();
    // Polls 5 s apart: a waiter served sooner was woken by the release log.
    let slow = ", pollIntervalMs: 5000, notifyPollIntervalMs: 5000";
    let open = || {
        let provider = Provider::from_yaml(&yaml(&table.0, slow)).unwrap();
        let backend = provider.backend("shared").unwrap();
        (provider, backend)
    };
    let ((_one, a), (_other, b)) = (open(), open());
    let mut handoffs = Vec::new();
    for round in 0..30 {
        let held = block_on(a.acquire("baton", wait(0))).unwrap();
        let waiter = std::thread::spawn({
            let b = b.clone();
            move || {
                let lease = block_on(b.acquire("baton", wait(10_000))).unwrap();
                let granted = std::time::Instant::now();
                assert!(block_on(lease.release()).unwrap());
                granted
            }
        });
        // The waiter's first try was refused and it waits (and, from the
        // second round on, the poller is live).
        std::thread::sleep(Duration::from_millis(if round == 0 { 500 } else { 50 }));
        let released = std::time::Instant::now();
        assert!(block_on(held.release()).unwrap());
        handoffs.push(waiter.join().unwrap().duration_since(released));
    }
    handoffs.sort();
    let (median, p99) = (handoffs[handoffs.len() / 2], handoffs[handoffs.len() * 99 / 100]);
    println!("hand-off between processes: median {median:?}, p99 {p99:?}");
    assert!(matches!(b.status().mysql, Some(ref mysql) if mysql.polling), "the poller reads the log");
    assert!(median < Duration::from_millis(100), "median {median:?}: woken by its poll, not the release");
}

#[test]
fn key_sets_in_opposite_orders_in_two_processes_never_deadlock_or_overlap() {
    let table = Table::fresh();
    let ((_one, a), (_other, b)) = (open(&table), open(&table));
    let inside = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let orders: [&[&str]; 4] = [&["x", "y", "z"], &["z", "y", "x"], &["y", "z"], &["z", "x"]];
    let workers: Vec<_> = (0..8)
        .map(|worker| {
            let backend = if worker % 2 == 0 { a.clone() } else { b.clone() };
            let inside = inside.clone();
            std::thread::spawn(move || {
                for round in 0..15 {
                    let keys = orders[(worker + round) % orders.len()];
                    let lease = block_on(backend.acquire_many(keys, wait(20_000))).unwrap_or_else(|err| panic!("{keys:?}: {err}"));
                    // Every set shares z: one holder at a time.
                    assert_eq!(inside.fetch_add(1, std::sync::atomic::Ordering::SeqCst), 0, "two holders of z");
                    std::thread::sleep(Duration::from_millis(2));
                    inside.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
                    assert!(block_on(lease.release()).unwrap());
                }
            })
        })
        .collect();
    for worker in workers {
        worker.join().unwrap();
    }
}

/// Waits until `table` has one live waiting mark.
fn one_mark(table: &Table) {
    let sql = format!(
        "SELECT COUNT(*) FROM `{}_waiting` WHERE lapses_at > TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6))",
        table.0
    );
    support::eventually("the waiter left its mark", || count(&sql) == 1);
}

#[test]
fn a_writer_or_a_heavy_request_waiting_in_another_process_is_not_overtaken() {
    let table = Table::fresh();
    let ((_one, r), (_other, w)) = (open(&table), open(&table));
    let shared = |ms| AcquireOptions { mode: LockMode::Shared, ..wait(ms) };
    let reader = block_on(r.acquire("doc", shared(0))).unwrap();
    let writer = std::thread::spawn({
        let w = w.clone();
        move || block_on(w.acquire("doc", wait(10_000)))
    });
    one_mark(&table);
    assert_eq!(code(block_on(r.acquire("doc", shared(0)))), ErrorCode::LockBusy, "a new reader waits behind the writer");
    assert!(block_on(reader.release()).unwrap());
    assert!(block_on(writer.join().unwrap().expect("the writer goes first").release()).unwrap());

    let counted = |weight, ms| AcquireOptions { limit: Some(2), weight: Some(weight), ..wait(ms) };
    let held = block_on(r.acquire("pool", counted(1, 0))).unwrap();
    let heavy = std::thread::spawn({
        let w = w.clone();
        move || block_on(w.acquire("pool", counted(2, 10_000)))
    });
    one_mark(&table);
    assert_eq!(code(block_on(r.acquire("pool", counted(1, 0)))), ErrorCode::LockBusy, "one unit is free, but the heavy request is first");
    assert!(block_on(held.release()).unwrap());
    assert!(block_on(heavy.join().unwrap().expect("the heavy request is granted").release()).unwrap());
}

#[test]
fn processes_that_start_together_install_the_procedures_without_failing_each_other() {
    for _ in 0..3 {
        let table = Table::fresh();
        let start = std::sync::Arc::new(std::sync::Barrier::new(6));
        let workers: Vec<_> = (0..6)
            .map(|worker| {
                let (yaml, start) = (yaml(&table.0, ""), start.clone());
                std::thread::spawn(move || {
                    let provider = Provider::from_yaml(&yaml).unwrap();
                    let backend = provider.backend("shared").unwrap();
                    start.wait();
                    for round in 0..5 {
                        let key = format!("k{worker}-{round}");
                        let lease = block_on(backend.acquire(&key, wait(5000))).unwrap_or_else(|err| panic!("{key}: {err}"));
                        assert!(block_on(lease.release()).unwrap());
                    }
                })
            })
            .collect();
        for worker in workers {
            worker.join().unwrap();
        }
    }
}

/// What a renewal finds on a server whose clock is behind the one its lease
/// expired on (a backward step, a promoted replica): its row live again
/// beside the holders granted the key meanwhile (written here as such a
/// clock shows them; `tests/review_r1.rs` steps a real clock). The row is
/// extended only where a take of its kind would have been granted beside
/// them: a renewal never makes two holders live that a take would not.
#[test]
fn a_renewal_extends_no_row_beside_holders_a_take_of_its_kind_would_not_join() {
    let table = Table::fresh();
    let (provider, backend) = open(&table);
    assert!(block_on(block_on(backend.acquire("installed", wait(0))).unwrap().release()).unwrap());
    let live = "TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)) + 10000000";
    for (i, (what, mine, others, extended)) in renewals::CASES.iter().enumerate() {
        let key = format!("k{i}");
        let row = |slot: usize, token: &str, (shared, limit, weight): renewals::Kind| {
            format!("('probe', '{key}', {slot}, '{token}', {}, {limit}, {weight}, {live})", u8::from(shared))
        };
        let holders: Vec<String> = std::iter::once(row(0, "mine", *mine))
            .chain(others.iter().enumerate().map(|(j, other)| row(j + 1, &format!("other{j}"), *other)))
            .collect();
        rows(&format!("INSERT INTO `{}` VALUES ('probe', '{key}', 1, {live})", table.0));
        rows(&format!(
            "INSERT INTO `{}_holders` (ns, k, slot, token, shared, lim, weight, expires_at) VALUES {}",
            table.0,
            holders.join(", ")
        ));
        let hex: String = key.bytes().map(|byte| format!("{byte:02x}")).collect();
        let renewed = rows(&format!("CALL `{}_renew`('probe', '{hex}', 'mine', 60000, 2)", table.0))[0][0].clone();
        assert_eq!(renewed.as_deref() == Some("1"), *extended, "{what}: renewed {renewed:?}");
    }
    block_on(provider.close());
}

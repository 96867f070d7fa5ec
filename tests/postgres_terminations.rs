//! The driver's server sessions ended under it while it works: an
//! administrator's `pg_terminate_backend` (or a pooler or failover doing the
//! same) of every connection of two providers, again and again, while four
//! threads take turns on three keys. Each call either does what it says or
//! fails with a code that says what the caller may rely on; no key is ever
//! held twice, a fenced store never sees a fence twice or out of order, and
//! the providers work again once the terminations stop. And a statement
//! stalled on a key row another session keeps locked is refused by the
//! server within `commandTimeoutMs`: the caller knows nothing was done. And
//! a release that handed its key over (`_hand_over`), whose session is ended
//! after it committed, is `OUTCOME_UNKNOWN` (on a server of its own).

mod postgres;
#[path = "postgres/server.rs"]
mod server;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dokebi_lock::{ErrorCode, Provider};
use futures::executor::block_on;
use postgres::{backend, code, count, wait, Schema};

const KEYS: [&str; 3] = ["a", "b", "c"];

/// A provider whose every session (statements and listener) carries
/// `application_name = tag`, so that the test can find and end them.
fn tagged(schema: &Schema, tag: &str) -> Provider {
    let url = format!("{}?application_name={tag}", postgres::url());
    Provider::from_yaml(&postgres::yaml_on(&url, &schema.0, "", "")).unwrap()
}

/// A store that accepts a write only with a fence above the last it
/// accepted for the key, as a fenced resource does.
#[derive(Default)]
struct FencedStore(Mutex<HashMap<&'static str, u64>>);

impl FencedStore {
    fn write(&self, key: &'static str, fence: u64) {
        let mut last = self.0.lock().unwrap();
        let previous = last.insert(key, fence).unwrap_or(0);
        assert!(fence > previous, "{key}: fence {fence} after {previous}");
    }
}

#[test]
fn sessions_ended_under_load_never_give_a_key_twice_and_the_driver_recovers() {
    let schema = Schema::fresh();
    let tag = format!("dl_terminated_{}", std::process::id());
    let providers = [tagged(&schema, &tag), tagged(&schema, &tag)];
    let store = FencedStore::default();
    let held: HashMap<&str, AtomicBool> = KEYS.iter().map(|key| (*key, AtomicBool::new(false))).collect();
    let (sections, failures) = (AtomicUsize::new(0), Mutex::new(HashMap::<ErrorCode, usize>::new()));
    let working = Arc::new(AtomicBool::new(true));
    let mut ended = 0;
    std::thread::scope(|scope| {
        for worker in 0..4 {
            let (provider, store, held, sections, failures, working) =
                (&providers[worker % 2], &store, &held, &sections, &failures, working.clone());
            scope.spawn(move || {
                let lock = backend(provider);
                let mut turn = worker;
                while working.load(Ordering::Relaxed) {
                    let key = KEYS[turn % KEYS.len()];
                    turn += 1;
                    let lease = match block_on(lock.acquire(key, wait(3000))) {
                        Ok(lease) => lease,
                        Err(err) => {
                            *failures.lock().unwrap().entry(err.code()).or_default() += 1;
                            continue;
                        }
                    };
                    assert!(!held[key].swap(true, Ordering::SeqCst), "{key} granted while another holds it");
                    store.write(key, lease.fence());
                    std::thread::sleep(Duration::from_millis(2));
                    held[key].store(false, Ordering::SeqCst);
                    sections.fetch_add(1, Ordering::Relaxed);
                    if let Err(err) = block_on(lease.release()) {
                        *failures.lock().unwrap().entry(err.code()).or_default() += 1;
                    }
                }
            });
        }
        // Work first, then end every session of both providers every 150 ms
        // for 3 s, then let them work again.
        std::thread::sleep(Duration::from_millis(500));
        let until = Instant::now() + Duration::from_secs(3);
        while Instant::now() < until {
            ended += postgres::terminate_sessions(&tag);
            std::thread::sleep(Duration::from_millis(150));
        }
        std::thread::sleep(Duration::from_millis(1500));
        working.store(false, Ordering::Relaxed);
    });
    let failures = failures.into_inner().unwrap();
    assert!(ended >= 10, "only {ended} sessions were ended");
    assert!(sections.load(Ordering::Relaxed) >= 30, "only {} sections ran", sections.load(Ordering::Relaxed));
    // What a caller may hear when its session ends under a call: the server
    // is gone (PROVIDER_FAILED), the statement may have run (OUTCOME_UNKNOWN),
    // or a key stayed held by a lease whose release was lost (WAIT_TIMEOUT).
    // Often nothing: a release, and a waiting acquire's try, whose session
    // ended under it are sent again (the acquire's after giving back what
    // the lost try may have granted).
    for failed in failures.keys() {
        assert!(
            matches!(failed, ErrorCode::ProviderFailed | ErrorCode::OutcomeUnknown | ErrorCode::WaitTimeout),
            "{failed:?} in {failures:?}"
        );
    }
    let noticed: Vec<_> = providers.iter().filter_map(|provider| backend(provider).status().postgres.unwrap().last_error).collect();
    assert!(!noticed.is_empty(), "no call noticed its session ending");
    eprintln!(
        "{ended} sessions ended, {} sections, callers heard {failures:?}, the driver saw {noticed:?}",
        sections.load(Ordering::Relaxed)
    );
    // Both providers work again: every key, once the driver's clean-up has
    // given back what lost releases left held.
    for provider in &providers {
        for key in KEYS {
            let lease = block_on(backend(provider).acquire(key, wait(20_000))).expect("the provider recovers");
            store.write(key, lease.fence());
            assert!(block_on(lease.release()).unwrap());
        }
    }
    for provider in &providers {
        block_on(provider.close());
    }
    assert_eq!(count(&format!("SELECT count(*) FROM {} WHERE expires_at > now()", schema.table("_holders"))), 0);
}

/// A take stalled on a key's row that another session locks is refused by
/// the server within the command timeout (`lock_timeout`, nothing done),
/// and that means the key is busy, not the store down: a try answers
/// `LOCK_BUSY`, and an acquire that may wait goes on waiting and is granted
/// once the row is free. Before, both were `PROVIDER_FAILED`, which a
/// policy backend with `fallBack` takes for an outage: it served the key
/// from its next member while the row's holder was granted it here (two
/// holders; the mysql review found it with 1205, `tests/mysql_review2.rs`).
#[test]
fn a_take_stalled_on_a_row_another_session_locks_is_busy_and_a_waiter_is_granted_once_the_row_is_free() {
    let schema = Schema::fresh();
    let provider = schema.open("");
    let lock = backend(&provider);
    // The key's row exists once it has been granted.
    assert!(block_on(block_on(lock.acquire("k", wait(0))).unwrap().release()).unwrap());
    let keeper = std::thread::spawn({
        let keys = schema.table("");
        move || postgres::batch(&format!("BEGIN; SELECT 1 FROM {keys} WHERE key = 'k' FOR UPDATE; SELECT pg_sleep(4); COMMIT;"))
    });
    std::thread::sleep(Duration::from_millis(300));
    let started = Instant::now();
    let stalled = block_on(lock.acquire("k", wait(0)));
    let took = started.elapsed();
    assert_eq!(code(stalled), ErrorCode::LockBusy);
    // commandTimeoutMs is 2000 in these tests, row-lock waits end at 1500
    // ms (the server refuses: nothing was done), and the row stays locked 4 s.
    assert!(took >= Duration::from_millis(1400) && took < Duration::from_millis(2000), "took {took:?}");
    // Other keys are not held up meanwhile.
    assert!(block_on(block_on(lock.acquire("other", wait(0))).unwrap().release()).unwrap());
    // A waiter's tries are refused the same way until the row is free (about
    // 4.3 s after the keeper began): it is granted then, within its wait.
    let lease = block_on(lock.acquire("k", wait(10_000))).expect("a waiter is granted the key once the other session let go of its row");
    let waited = started.elapsed();
    assert!(waited >= Duration::from_millis(3500), "granted after {waited:?}, while the row was still locked");
    assert!(block_on(lease.release()).unwrap());
    keeper.join().unwrap();
    block_on(provider.close());
}

/// A reader's release that hands the key to a writer waiting in the same
/// provider (one `_hand_over` call) commits, then waits for a synchronous
/// standby that is not there (the grant in it commits as durably as the
/// server says), and its session is ended there, as a failover tool or an
/// administrator does: the server has committed it locally, the driver
/// hears only its connection close. The release is `OUTCOME_UNKNOWN`:
/// neither released (the driver cannot know) nor `LEASE_LOST` (the key was
/// its holder's until the call). A private server: the test changes
/// `synchronous_standby_names`.
#[test]
fn a_release_handed_over_whose_session_ends_after_it_committed_is_outcome_unknown() {
    use dokebi_lock::{AcquireOptions, LockMode};
    let server = server::PrivateServer::start("handed-over-ended", &[]);
    let admin = server.url();
    let tag = "dl_handed_over";
    let url = format!("{admin}&application_name={tag}");
    let provider = Provider::from_yaml(&postgres::yaml_on(&url, "dokebi", "        leaseMs: 60000\n", "")).unwrap();
    let lock = backend(&provider);
    let reader = block_on(lock.acquire("k", AcquireOptions { mode: LockMode::Shared, ..wait(0) })).unwrap();
    let writer = {
        let lock = lock.clone();
        std::thread::spawn(move || block_on(lock.acquire("k", wait(30_000))))
    };
    let marks = "SELECT count(*) FROM dokebi.dokebi_lock_waiting WHERE lapses_at > now()";
    postgres::eventually("the writer waits", || postgres::count_on(&admin, marks) == 1);
    let standby = |names: &str| {
        postgres::batch_on(&admin, &format!("ALTER SYSTEM SET synchronous_standby_names = '{names}'"));
        postgres::batch_on(&admin, "SELECT pg_reload_conf()");
    };
    standby("nobody");
    let fence = reader.fence();
    let releasing = std::thread::spawn(move || block_on(reader.release()));
    let waiting_for_the_standby = format!("FROM pg_stat_activity WHERE application_name = '{tag}' AND wait_event = 'SyncRep'");
    postgres::eventually("the release waits for the standby", || {
        postgres::count_on(&admin, &format!("SELECT count(*) {waiting_for_the_standby}")) == 1
    });
    assert_eq!(postgres::count_on(&admin, &format!("SELECT count(pg_terminate_backend(pid)) {waiting_for_the_standby}")), 1);
    // Others see a commit once its wait for the standby ended; until the
    // standby is given up, no later grant is seen (each waits for it too).
    let fences = "SELECT max(fence) FROM dokebi.dokebi_lock WHERE key = 'k'";
    postgres::eventually("the call's grant, committed before it waited, is seen", || postgres::count_on(&admin, fences) > fence as i64);
    standby("");
    let released = releasing.join().unwrap();
    assert_eq!(code(released), ErrorCode::OutcomeUnknown);
    // The writer picks up the ended call's grant with a try of its own (or
    // that try meets a session ended too, and the driver gives its grant
    // back): either way the key is not left held.
    match writer.join().unwrap() {
        Ok(lease) => {
            assert!(lease.fence() > fence);
            assert!(block_on(lease.release()).unwrap());
        }
        Err(err) => assert!(matches!(err.code(), ErrorCode::OutcomeUnknown | ErrorCode::ProviderFailed), "{err}"),
    }
    let other = Provider::from_yaml(&postgres::yaml_on(&admin, "dokebi", "", "")).unwrap();
    let next = block_on(backend(&other).acquire("k", wait(20_000))).expect("the key is not left held");
    assert!(block_on(next.release()).unwrap());
    block_on(provider.close());
    block_on(other.close());
}

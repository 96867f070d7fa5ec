//! Review r11: probes of 5524433 (a waiter whose call was refused for a
//! row lock held elsewhere is left to its own try; a head drops the
//! wake-ups kept from before its try) against PostgreSQL and MariaDB.
//! Two findings, older than 5524433, each failed before its fix: a try
//! refused for another session's row lock paused for the safety net's
//! whole interval (the lock's end wakes nobody; now it tries again at
//! once: "k was free 3s after the waiter began … yet its acquire answered
//! WaitTimeout"), and a try lost while it waited for a row lock ended the
//! acquire `OUTCOME_UNKNOWN`, its give-back refused for the same lock
//! (now given back again while the wait lasts).

mod mysql;
mod postgres;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use dokebi_lock::{AcquireOptions, Backend, LockMode, Provider};
use futures::executor::block_on;

/// The safety net's nap, long as a deployment that trusts its release
/// notifications may set it (docs: "safety-net retry interval").
const NOTIFY_POLL_MS: u64 = 30_000;
/// How long the other session keeps `k`'s key row locked: longer than the
/// driver's lock wait for a `commandTimeoutMs` of 2000 (1 s on MariaDB,
/// 1.5 s on PostgreSQL), so the waiter's first try is refused for it.
const LOCKED: Duration = Duration::from_secs(3);

/// `k` (whose rows exist, free) is waited for up to 8 s while another
/// session keeps its key row locked for [`LOCKED`] (`lock` starts it and
/// returns once the row is locked), and nobody holds `k`: once the lock
/// ends, `k` is free, and no release will ever notify. Answers when the
/// acquire answered, since the lock began, and what it answered.
fn waited_behind_a_row_lock(backend: &Backend, lock: impl FnOnce() -> Child) -> (Duration, Result<u64, String>) {
    assert!(block_on(block_on(backend.acquire("k", AcquireOptions::default())).unwrap().release()).unwrap());
    let mut locker = lock();
    let locked = Instant::now();
    let options = AcquireOptions { wait_timeout: Some(Duration::from_secs(8)), ..AcquireOptions::default() };
    let acquired = block_on(backend.acquire("k", options)).map(|lease| lease.fence()).map_err(|err| format!("{err:?}"));
    let answered = locked.elapsed();
    let _ = locker.wait();
    (answered, acquired)
}

/// A waiter of a free key is granted within a second of the row lock's end.
fn assert_granted_soon_after_the_lock(outcome: (Duration, Result<u64, String>)) {
    let (answered, acquired) = outcome;
    assert!(
        acquired.is_ok() && answered < LOCKED + Duration::from_secs(1),
        "k was free {LOCKED:?} after the waiter began (another session's row lock on it ended, nobody held it), \
         yet its acquire answered {acquired:?} after {answered:?} (notifyPollIntervalMs {NOTIFY_POLL_MS})"
    );
}

/// Finding: a try refused for another session's row lock (`Contended`,
/// read as busy) pauses for the safety net's nap: no release notifies
/// when a row lock ends, and since 5524433 no other call of this process
/// takes the waiter along either, so only the nap tries again. With
/// `notifyPollIntervalMs` above the wait, a waiter of a free key times out.
#[test]
fn postgres_a_waiter_refused_for_a_row_lock_is_granted_once_the_lock_ends() {
    let schema = postgres::Schema::fresh();
    let backend_yaml = format!("        notifyPollIntervalMs: {NOTIFY_POLL_MS}\n");
    let one = Provider::from_yaml(&postgres::yaml_on(&postgres::url(), &schema.0, &backend_yaml, "")).unwrap();
    let backend = postgres::backend(&one);
    assert_granted_soon_after_the_lock(waited_behind_a_row_lock(&backend, || {
        let keys = schema.table("");
        let script =
            format!("BEGIN; SELECT fence FROM {keys} WHERE key = 'k' FOR UPDATE; SELECT pg_sleep({}); ROLLBACK;", LOCKED.as_secs());
        let child = Command::new("psql").arg(postgres::url()).args(["-q", "-c", &script]).stdout(Stdio::null()).spawn().unwrap();
        let sleeping = format!(
            "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' AND query LIKE 'BEGIN; SELECT fence FROM {keys}%pg_sleep%'"
        );
        postgres::eventually("k's key row is locked", || postgres::count(&sleeping) == 1);
        child
    }));
}

/// [`postgres_a_waiter_refused_for_a_row_lock_is_granted_once_the_lock_ends`]
/// on MariaDB (1205 after `innodb_lock_wait_timeout`).
#[test]
fn mysql_a_waiter_refused_for_a_row_lock_is_granted_once_the_lock_ends() {
    let table = mysql::Table::fresh();
    let one = Provider::from_yaml(&mysql::yaml(&table.0, &format!(", notifyPollIntervalMs: {NOTIFY_POLL_MS}"))).unwrap();
    let backend = one.backend("shared").unwrap();
    assert_granted_soon_after_the_lock(waited_behind_a_row_lock(&backend, || {
        let namespace = mysql::rows(&format!("SELECT HEX(ns) FROM `{}` LIMIT 1", table.0))[0][0].clone().unwrap();
        let child = Command::new("mysql")
            .args(["-uroot", "-h127.0.0.1", "-P3306", "test", "-e"])
            .arg(format!(
                "BEGIN; SELECT fence FROM `{0}` WHERE ns = X'{namespace}' AND k = 'k' FOR UPDATE; DO SLEEP({1} + 0 * LENGTH('{0}')); ROLLBACK;",
                table.0,
                LOCKED.as_secs()
            ))
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        let sleeping = format!(
            "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE INFO LIKE 'DO SLEEP({} + 0 * LENGTH(''{}''))%'",
            LOCKED.as_secs(),
            table.0
        );
        while mysql::count(&sleeping) == 0 {
            std::thread::sleep(Duration::from_millis(20));
        }
        child
    }));
}

/// Each waiter of `keys` in `mode` (in process `b`, `waiters` of them)
/// while process `a` holds `k`: how long after `a`'s release answered the
/// last was granted. The release comes a varying few milliseconds after the
/// waiters began, so that it lands before, during and after their first
/// try (and a try's dropped wake-ups, `forget_wake`); the safety net is
/// [`NOTIFY_POLL_MS`], so a lost wake-up shows as seconds.
fn slowest_grant_after_releases(a: &Backend, b: &Backend, keys: &[&str], mode: LockMode, waiters: usize) -> Duration {
    let mut slowest = Duration::ZERO;
    for round in 0..20u64 {
        let held = block_on(a.acquire("k", AcquireOptions::default())).unwrap();
        let threads: Vec<_> = (0..waiters)
            .map(|_| {
                let (b, keys): (Backend, Vec<String>) = (b.clone(), keys.iter().map(|key| (*key).to_owned()).collect());
                std::thread::spawn(move || {
                    let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
                    let options = AcquireOptions { wait_timeout: Some(Duration::from_secs(5)), mode, ..AcquireOptions::default() };
                    let lease = block_on(b.acquire_many(&keys, options)).map_err(|err| format!("{err:?}"))?;
                    let granted = Instant::now();
                    std::thread::sleep(Duration::from_millis(5));
                    block_on(lease.release()).map_err(|err| format!("{err:?}"))?;
                    Ok::<_, String>(granted)
                })
            })
            .collect();
        std::thread::sleep(Duration::from_millis(round * 7 % 40));
        assert!(block_on(held.release()).unwrap());
        let released = Instant::now();
        for thread in threads {
            let granted = thread.join().unwrap().unwrap_or_else(|err| panic!("round {round}: a waiter of {keys:?} ended with {err}"));
            slowest = slowest.max(granted.saturating_duration_since(released));
        }
    }
    slowest
}

/// Probes [`slowest_grant_after_releases`] for a writer of `k`, one of
/// `j` and `k`, and four readers of `k` (a head granting followers).
fn assert_every_release_wakes(a: &Provider, b: &Provider) {
    let (a, b) = (a.backend("shared").unwrap(), b.backend("shared").unwrap());
    for (keys, mode, waiters) in
        [(&["k"][..], LockMode::Exclusive, 1), (&["j", "k"][..], LockMode::Exclusive, 1), (&["k"][..], LockMode::Shared, 4)]
    {
        let slowest = slowest_grant_after_releases(&a, &b, keys, mode, waiters);
        assert!(
            slowest < Duration::from_secs(1),
            "{waiters} waiter(s) of {keys:?} ({mode:?}): one was granted {slowest:?} after the release"
        );
    }
}

/// Held: a release in another process wakes the waiters whatever the
/// moment it lands relative to the head's try and its `forget_wake`.
#[test]
fn postgres_a_release_in_another_process_wakes_the_waiters_whenever_it_lands() {
    let schema = postgres::Schema::fresh();
    let yaml = postgres::yaml_on(&postgres::url(), &schema.0, &format!("        notifyPollIntervalMs: {NOTIFY_POLL_MS}\n"), "");
    let (a, b) = (Provider::from_yaml(&yaml).unwrap(), Provider::from_yaml(&yaml).unwrap());
    assert_every_release_wakes(&a, &b);
}

/// [`postgres_a_release_in_another_process_wakes_the_waiters_whenever_it_lands`] on MariaDB (the release log's poller).
#[test]
fn mysql_a_release_in_another_process_wakes_the_waiters_whenever_it_lands() {
    let table = mysql::Table::fresh();
    let yaml = mysql::yaml(&table.0, &format!(", notifyPollIntervalMs: {NOTIFY_POLL_MS}"));
    let (a, b) = (Provider::from_yaml(&yaml).unwrap(), Provider::from_yaml(&yaml).unwrap());
    assert_every_release_wakes(&a, &b);
}

/// Finding (5524433 with 084f3ad): a waiting try whose session ends while
/// it waits for another session's row lock (here `pg_terminate_backend`,
/// as an administrator ends a long wait) is lost with its connection, so
/// the acquire gives back by its token before trying again; that give-back
/// locks the same key row first, waits out the same lock, and is refused
/// for it (`Contended`, nothing done). 084f3ad reads any failed give-back
/// as the end of the wait: `OUTCOME_UNKNOWN`, while 5524433 reads the same
/// refusal of a try as busy and waits on. `k` is free once the lock ends,
/// well within the wait.
#[test]
fn postgres_a_try_ended_while_it_waited_for_a_row_lock_waits_on() {
    let schema = postgres::Schema::fresh();
    let one = Provider::from_yaml(&postgres::yaml_on(&postgres::url(), &schema.0, "", "")).unwrap();
    let backend = postgres::backend(&one);
    let (answered, acquired) = waited_behind_a_row_lock(&backend, || {
        let keys = schema.table("");
        let script =
            format!("BEGIN; SELECT fence FROM {keys} WHERE key = 'k' FOR UPDATE; SELECT pg_sleep({}); ROLLBACK;", LOCKED.as_secs());
        let child = Command::new("psql").arg(postgres::url()).args(["-q", "-c", &script]).stdout(Stdio::null()).spawn().unwrap();
        let sleeping = format!(
            "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' AND query LIKE 'BEGIN; SELECT fence FROM {keys}%pg_sleep%'"
        );
        postgres::eventually("k's key row is locked", || postgres::count(&sleeping) == 1);
        // Once the acquire's try waits for that row (started by the caller
        // right after this returns), its session is ended.
        let waiting = format!(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%{}%' AND query NOT LIKE 'BEGIN;%'",
            schema.0
        );
        std::thread::spawn(move || {
            postgres::eventually("the waiter's try waits for k's row and is ended", || postgres::count(&waiting) == 1)
        });
        child
    });
    assert!(
        acquired.is_ok() && answered < LOCKED + Duration::from_secs(1),
        "k was free {LOCKED:?} after the waiter began (its try's session ended while it waited for another session's row lock), \
         yet its acquire answered {acquired:?} after {answered:?}"
    );
}

/// [`postgres_a_try_ended_while_it_waited_for_a_row_lock_waits_on`] on
/// MariaDB: the try's connection is killed (`KILL`) while its `CALL`
/// waits for the row lock.
#[test]
fn mysql_a_try_ended_while_it_waited_for_a_row_lock_waits_on() {
    let table = mysql::Table::fresh();
    let one = Provider::from_yaml(&mysql::yaml(&table.0, "")).unwrap();
    let backend = one.backend("shared").unwrap();
    let (answered, acquired) = waited_behind_a_row_lock(&backend, || {
        let namespace = mysql::rows(&format!("SELECT HEX(ns) FROM `{}` LIMIT 1", table.0))[0][0].clone().unwrap();
        let child = Command::new("mysql")
            .args(["-uroot", "-h127.0.0.1", "-P3306", "test", "-e"])
            .arg(format!(
                "BEGIN; SELECT fence FROM `{0}` WHERE ns = X'{namespace}' AND k = 'k' FOR UPDATE; DO SLEEP({1} + 0 * LENGTH('{0}')); ROLLBACK;",
                table.0,
                LOCKED.as_secs()
            ))
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        let sleeping = format!(
            "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE INFO LIKE 'DO SLEEP({} + 0 * LENGTH(''{}''))%'",
            LOCKED.as_secs(),
            table.0
        );
        while mysql::count(&sleeping) == 0 {
            std::thread::sleep(Duration::from_millis(20));
        }
        // Once the acquire's try waits for that row, its connection is killed.
        // (The procedure's statement that waits: the upsert of `k`'s key row.)
        let waiting =
            format!("SELECT ID FROM information_schema.PROCESSLIST WHERE INFO LIKE 'INSERT INTO `{}` %' AND STATE = 'Update'", table.0);
        std::thread::spawn(move || loop {
            if let Some(id) = mysql::rows(&waiting).first().and_then(|row| row[0].clone()) {
                let _ = mysql::try_rows(&format!("KILL {id}"));
                return;
            }
            std::thread::sleep(Duration::from_millis(5));
        });
        child
    });
    assert!(
        acquired.is_ok() && answered < LOCKED + Duration::from_secs(1),
        "k was free {LOCKED:?} after the waiter began (its try's connection was killed while it waited for another session's row lock), \
         yet its acquire answered {acquired:?} after {answered:?}"
    );
}

/// `units` of keys counted to 2, waiting at most 8 s.
fn counted(units: u32) -> AcquireOptions {
    AcquireOptions { wait_timeout: Some(Duration::from_secs(8)), limit: Some(2), weight: Some(units), ..AcquireOptions::default() }
}

/// Held (PostgreSQL): this process's lease of both units of `k` is
/// released while `h` (a unit of `j` and `k`) and, behind it, `g` (a unit
/// of `k`) wait, and another session keeps `j`'s holder row locked for
/// [`LOCKED`]: the release's hand-over to both is refused after its lock
/// wait, both are flagged, `h` tries by itself (refused, or granted once
/// the lock ends) and `g` behind it is taken by nobody. With a 30 s safety
/// net, both are still granted within a second of the lock's end (the
/// dropped wake-ups lose none), each with a fence of its own, and hold
/// their units together.
#[test]
fn postgres_waiters_flagged_by_a_refused_hand_over_are_granted_once_the_lock_ends() {
    let schema = postgres::Schema::fresh();
    let one = Provider::from_yaml(&postgres::yaml_on(
        &postgres::url(),
        &schema.0,
        &format!("        notifyPollIntervalMs: {NOTIFY_POLL_MS}\n"),
        "",
    ))
    .unwrap();
    let backend = postgres::backend(&one);
    assert!(block_on(block_on(backend.acquire("j", counted(1))).unwrap().release()).unwrap());
    let lease = block_on(backend.acquire("k", counted(2))).unwrap();
    let waiter = |keys: &'static [&'static str]| {
        let backend = backend.clone();
        std::thread::spawn(move || block_on(backend.acquire_many(keys, counted(1))).map(|lease| (Instant::now(), lease)))
    };
    let h = waiter(&["j", "k"]);
    std::thread::sleep(Duration::from_millis(100));
    let g = waiter(&["k"]);
    std::thread::sleep(Duration::from_millis(300));
    let script = format!(
        "BEGIN; SELECT slot FROM {} WHERE key = 'j' FOR UPDATE; SELECT pg_sleep({}); ROLLBACK;",
        schema.table("_holders"),
        LOCKED.as_secs()
    );
    let mut locker = Command::new("psql").arg(postgres::url()).args(["-q", "-c", &script]).stdout(Stdio::null()).spawn().unwrap();
    let sleeping = format!(
        "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' AND query LIKE 'BEGIN; SELECT slot FROM {}%pg_sleep%'",
        schema.table("_holders")
    );
    postgres::eventually("j's holder row is locked", || postgres::count(&sleeping) == 1);
    let locked = Instant::now();
    std::thread::sleep(Duration::from_millis(300));
    assert!(block_on(lease.release()).unwrap());
    let (h, g) = (h.join().unwrap(), g.join().unwrap());
    let _ = locker.wait();
    let granted = |waited: Result<(Instant, dokebi_lock::Lease), dokebi_lock::LockError>| {
        let k_fence = |lease: &dokebi_lock::Lease| lease.fences().into_iter().find(|(key, _)| *key == "k").map(|(_, fence)| fence);
        waited.map(|(at, lease)| (at.saturating_duration_since(locked), k_fence(&lease))).map_err(|err| format!("{err:?}"))
    };
    let (h_at, g_at) = (granted(h), granted(g));
    assert!(
        matches!((&h_at, &g_at), (Ok((h, _)), Ok((g, _))) if *h < LOCKED + Duration::from_secs(1) && *g < LOCKED + Duration::from_secs(1)),
        "after the lock on j ({LOCKED:?}): h (j, k) {h_at:?}, g (k) {g_at:?}"
    );
    let (h_k, g_k) = (h_at.unwrap().1, g_at.unwrap().1);
    assert_ne!(h_k, g_k, "h and g hold k with the same fence");
}

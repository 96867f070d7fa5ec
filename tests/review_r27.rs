//! Review R27: the postgres and mysql drivers after 8ac64d7/dfc277d (a
//! release holds a head's next try back), a9177bd/29c3bc4 (a statement
//! answered after a WARNING is unknown; functions 10 set
//! `client_min_messages` for a grant's transaction) and 14947dc, 7a8d7d8,
//! d18a742 (the connect rule), probed for a second holder of a key or a
//! repeated fence. No way to either was found.
//!
//! Found (not a second holder; on both drivers, 3 of 3 runs; fixed by
//! functions 11 and procedures 9, whose clean-up passes over a key with a
//! row of the calling token): a
//! release whose first attempt's answer was lost with its connection is
//! sent again as a retry that counts the token's rows the first attempt
//! left released (`-infinity`, 0), so that the caller hears "released"
//! (docs/postgres.md). But the first attempt's own clean-up, in the same
//! transaction, deletes the key row and its holder rows once the key's
//! retention has passed and nothing holds or waits for it, which is the
//! released key itself whenever the lease was held longer than
//! `fenceRetentionMs` (10 min by default: a long `withLock`): the retry
//! counts 0 and the caller hears `OUTCOME_UNKNOWN`
//! (`postgres_a_release_retry_after_the_first_attempt_cleaned_its_own_key_up_counts_it`,
//! `mysql_...`).
//!
//! What was probed, each against a real server, and held:
//!
//! - Sessions ended under load through PgBouncer in transaction mode
//!   (`default_pool_size = 2`, every server connection terminated every
//!   20-270 ms for 8 s) and directly: two providers, each with two backends
//!   on one connection that differ in `leaseMs` (3000/9000) and
//!   `pollIntervalMs` (5/40), eight threads taking a counted key (limit 2,
//!   weights 1 and 2), a read/write key, and sets of both (so releases hand
//!   over between the backends of one connection, and heads take their
//!   followers): no key held past its limit, no reader beside a writer, no
//!   fence twice (`stress_through_pgbouncer_with_sessions_ended`,
//!   `stress_direct_with_sessions_ended`; 5 and 4 runs, 90-450 sections,
//!   up to 461 sessions ended).
//! - The same load on a private MariaDB whose client connections are all
//!   ended every round, alternately by `KILL QUERY` and `KILL`, with a
//!   `commandTimeoutMs` (800) below the procedures' 1 s row-lock wait, so
//!   the driver's own `KILL` runs too (`stress_mysql_with_kills`; 6 runs,
//!   540-1030 sections, 620-920 kills).
//! - A private PostgreSQL crashed (immediate stop) and started again twice
//!   in a row, 150 ms apart, under the same load: releases and refused tries
//!   commit with `synchronous_commit = off` and are lost, grants are not
//!   (`stress_postgres_crashed_twice_in_a_row`, 3 runs).
//!
//! Read and held (see the report): the queue names of backends that share
//! a connection (`queue_name`: a table, a namespace and a key never name
//! another's queue, so a hand-over never grants across tables or
//! namespaces, and each request goes with its own `leaseMs` and
//! `fenceRetentionMs`); `fence_until` only grows (`greatest`), so a short
//! retention of one backend never deletes the counter of a key another
//! backend granted; the give-back's clean-up in `hand_over` deletes (and
//! `lock_keys` inserts again) a new row of a key it grants, with a fence
//! of the clock; leaked session settings through a pooler (`TimeZone`,
//! `IntervalStyle`, `standard_conforming_strings`, `plpgsql.*`,
//! `statement_timeout`) either change nothing or refuse the call; the
//! WARNING count is moved before the statement's `ReadyForQuery` batch is
//! read; a cancel that lands on the next statement of its client (or,
//! through PgBouncer, on another client's) is 57014 before commit or a
//! WARNING during the sync-rep wait, never a success; `hold_back`/`let_go`
//! make no cycle (a release waits only for a try, bounded by
//! `commandTimeoutMs`); MySQL's `UTC_TIMESTAMP(6)` in a nested `CALL` is
//! read at that `CALL`, after the row locks.
//!
//! The stress probes take 10-15 s each and prove nothing by passing: they
//! are ignored, run them with `--ignored`.

#[path = "postgres/bouncer.rs"]
mod bouncer;
mod mysql;
#[path = "mysql/server.rs"]
mod mysql_server;
#[path = "postgres/server.rs"]
mod pg_server;
mod postgres;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bouncer::Bouncer;
use dokebi_lock::{AcquireOptions, ErrorCode, LockMode, Provider};
use futures::executor::block_on;
use postgres::Schema;

/// Two backends on one connection through `url`, differing in `leaseMs`
/// only, every session tagged `tag`.
fn two_backends(url: &str, schema: &Schema, tag: &str, command_ms: u64) -> Provider {
    let sep = if url.contains('?') { '&' } else { '?' };
    let url = format!("{url}{sep}application_name={tag}");
    Provider::from_yaml(&format!(
        "schemaVersion: 1
options:
  dokebi-postgres:
    connections:
      main:
        url: '{url}'
        commandTimeoutMs: {command_ms}
        connectTimeoutMs: 1000
  dokebi-lock:
    backends:
      short:
        driver: postgres
        connection: main
        schema: {schema}
        leaseMs: 3000
        pollIntervalMs: 5
      long:
        driver: postgres
        connection: main
        schema: {schema}
        leaseMs: 9000
        pollIntervalMs: 40
",
        schema = schema.0
    ))
    .unwrap()
}

/// What the holders of each key hold now (units of a counted key,
/// readers, writers), checked at every entry.
#[derive(Default)]
struct Sections {
    units: HashMap<String, u32>,
    readers: HashMap<String, u32>,
    writers: HashMap<String, u32>,
    fences: HashMap<String, Vec<(u64, bool)>>,
}

#[derive(Clone, Copy)]
enum Kind {
    Counted(u32),
    Read,
    Write,
}

fn options(kind: Kind, wait: u64) -> AcquireOptions {
    let base = AcquireOptions { wait_timeout: Some(Duration::from_millis(wait)), ..AcquireOptions::default() };
    match kind {
        Kind::Counted(weight) => AcquireOptions { limit: Some(2), weight: Some(weight), ..base },
        Kind::Read => AcquireOptions { mode: LockMode::Shared, ..base },
        Kind::Write => base,
    }
}

fn stress(url: &str, name: &str, seconds: u64, command_ms: u64) {
    let schema = Schema::fresh();
    let tag = format!("dl_r27_{name}_{}", std::process::id());
    let providers = [two_backends(url, &schema, &tag, command_ms), two_backends(url, &schema, &tag, command_ms)];
    stress_with(providers, seconds, || postgres::terminate_sessions(&tag) as usize);
}

fn stress_with(providers: [Provider; 2], seconds: u64, mut disrupt: impl FnMut() -> usize) {
    let sections = Mutex::new(Sections::default());
    let broken = Mutex::new(Vec::<String>::new());
    let (done, failures) = (AtomicUsize::new(0), Mutex::new(HashMap::<ErrorCode, usize>::new()));
    let working = Arc::new(AtomicBool::new(true));
    let mut ended = 0;
    std::thread::scope(|scope| {
        for worker in 0..8usize {
            let (provider, sections, broken, done, failures, working) =
                (&providers[worker % 2], &sections, &broken, &done, &failures, working.clone());
            scope.spawn(move || {
                let backends = [provider.backend("short").unwrap(), provider.backend("long").unwrap()];
                let mut turn = worker * 7;
                while working.load(Ordering::Relaxed) {
                    turn += 1;
                    let backend = &backends[(turn / 3) % 2];
                    let (keys, kind): (Vec<&str>, Kind) = match turn % 6 {
                        0 => (vec!["c"], Kind::Counted(1)),
                        1 => (vec!["c"], Kind::Counted(2)),
                        2 => (vec!["rw"], Kind::Read),
                        3 => (vec!["rw"], Kind::Write),
                        4 => (vec!["c", "d"], Kind::Counted(1)),
                        _ => (vec!["p", "rw"], Kind::Write),
                    };
                    let outcome = block_on(backend.acquire_many(&keys, options(kind, 1500)));
                    let lease = match outcome {
                        Ok(lease) => lease,
                        Err(err) => {
                            *failures.lock().unwrap().entry(err.code()).or_default() += 1;
                            continue;
                        }
                    };
                    {
                        let mut s = sections.lock().unwrap();
                        for (key, fence) in lease.fences() {
                            s.fences.entry(key.to_owned()).or_default().push((fence, lease.is_valid()));
                            match kind {
                                Kind::Counted(w) => {
                                    let units = s.units.entry(key.to_owned()).or_default();
                                    *units += w;
                                    if *units > 2 && lease.is_valid() {
                                        broken.lock().unwrap().push(format!("{key}: {units} units held"));
                                    }
                                }
                                Kind::Read => {
                                    *s.readers.entry(key.to_owned()).or_default() += 1;
                                    if s.writers.get(key).copied().unwrap_or(0) > 0 && lease.is_valid() {
                                        broken.lock().unwrap().push(format!("{key}: a reader beside a writer"));
                                    }
                                }
                                Kind::Write => {
                                    let writers = s.writers.entry(key.to_owned()).or_default();
                                    *writers += 1;
                                    let writers = *writers;
                                    if (writers > 1 || s.readers.get(key).copied().unwrap_or(0) > 0) && lease.is_valid() {
                                        broken.lock().unwrap().push(format!("{key}: a writer beside another holder"));
                                    }
                                }
                            }
                        }
                    }
                    std::thread::sleep(Duration::from_millis(2));
                    {
                        let mut s = sections.lock().unwrap();
                        for key in &keys {
                            match kind {
                                Kind::Counted(w) => *s.units.get_mut(*key).unwrap() -= w,
                                Kind::Read => *s.readers.get_mut(*key).unwrap() -= 1,
                                Kind::Write => *s.writers.get_mut(*key).unwrap() -= 1,
                            }
                        }
                    }
                    done.fetch_add(1, Ordering::Relaxed);
                    if let Err(err) = block_on(lease.release()) {
                        *failures.lock().unwrap().entry(err.code()).or_default() += 1;
                    }
                }
            });
        }
        std::thread::sleep(Duration::from_millis(500));
        let until = Instant::now() + Duration::from_secs(seconds);
        let mut pause = 37;
        while Instant::now() < until {
            ended += disrupt();
            pause = (pause * 7 + 13) % 250 + 20;
            std::thread::sleep(Duration::from_millis(pause));
        }
        std::thread::sleep(Duration::from_millis(1000));
        working.store(false, Ordering::Relaxed);
    });
    for provider in &providers {
        block_on(provider.close());
    }
    let s = sections.into_inner().unwrap();
    let mut repeated = Vec::new();
    for (key, fences) in &s.fences {
        let mut seen = HashMap::new();
        for (fence, valid) in fences {
            if let Some(before) = seen.insert(*fence, *valid) {
                repeated.push(format!("{key}: fence {fence} twice (valid {before} and {valid})"));
            }
        }
    }
    eprintln!("{ended} sessions ended, {} sections, callers heard {:?}", done.load(Ordering::Relaxed), failures.into_inner().unwrap());
    let broken = broken.into_inner().unwrap();
    assert!(broken.is_empty() && repeated.is_empty(), "{broken:?} {repeated:?}");
}

#[test]
#[ignore = "stress probe (10-15 s, held): run with --ignored"]
fn stress_through_pgbouncer_with_sessions_ended() {
    let bouncer = Bouncer::start_with("r27", "default_pool_size = 2\n");
    stress(&bouncer.url(), "bouncer", 8, 600);
}

#[test]
#[ignore = "stress probe (10-15 s, held): run with --ignored"]
fn stress_direct_with_sessions_ended() {
    stress(&postgres::url(), "direct", 8, 600);
}

/// Two mysql backends on one connection to `url`, differing in `leaseMs`.
fn two_mysql_backends(url: &str, table: &str, command_ms: u64) -> Provider {
    Provider::from_yaml(&format!(
        "schemaVersion: 1
options:
  dokebi-mysql:
    connections:
      main: {{ url: '{url}', commandTimeoutMs: {command_ms}, connectTimeoutMs: 1000 }}
  dokebi-lock:
    backends:
      short: {{ driver: mysql, connection: main, table: {table}, leaseMs: 3000, pollIntervalMs: 5 }}
      long: {{ driver: mysql, connection: main, table: {table}, leaseMs: 9000, pollIntervalMs: 40 }}
"
    ))
    .unwrap()
}

/// Ends (or interrupts) the server's client connections in turn: `KILL
/// QUERY` of every other one, `KILL` of the rest.
#[test]
#[ignore = "stress probe (10-15 s, held): run with --ignored"]
fn stress_mysql_with_kills() {
    let server = mysql_server::PrivateServer::start(&[]);
    let url = server.url();
    let table = mysql::Table::fresh();
    let providers = [two_mysql_backends(&url, &table.0, 800), two_mysql_backends(&url, &table.0, 800)];
    let mut round = 0u64;
    stress_with(providers, 8, || {
        round += 1;
        let ids: Vec<Vec<String>> = server
            .rows("SELECT ID FROM information_schema.PROCESSLIST WHERE ID <> CONNECTION_ID() AND USER <> 'system user' AND COMMAND NOT IN ('Daemon', 'Binlog Dump', 'Killed')")
            .unwrap_or_default();
        let mut ended = 0;
        for (at, id) in ids.iter().enumerate() {
            let how = if (at as u64 + round) % 2 == 0 { "KILL QUERY" } else { "KILL" };
            ended += usize::from(server.run(&format!("{how} {}", id[0])).is_ok());
        }
        ended
    });
}

/// A private PostgreSQL crashed (immediate stop) and started again, twice
/// in a row each round, under the same load.
#[test]
#[ignore = "stress probe (10-15 s, held): run with --ignored"]
fn stress_postgres_crashed_twice_in_a_row() {
    let mut server = pg_server::PrivateServer::start("r27crash", &[]);
    let url = server.url();
    let schema = Schema(format!("r27_{}", std::process::id()));
    let providers = [two_backends(&url, &schema, "r27", 600), two_backends(&url, &schema, "r27", 600)];
    let mut round = 0;
    stress_with(providers, 10, || {
        round += 1;
        if round % 4 == 0 {
            server.crash();
            server.start_again();
            std::thread::sleep(Duration::from_millis(150));
            server.crash();
            server.start_again();
            1
        } else {
            0
        }
    });
    std::mem::forget(schema);
}

/// Not a second holder: a release's retry (its first attempt's answer lost
/// with its connection) counts the rows the first attempt left at
/// `-infinity`, but when the key row's retention had passed (a lease held
/// longer than `fenceRetentionMs`), the first attempt's own clean-up
/// deleted those rows in the same transaction: the retry counts 0, and the
/// caller hears `OUTCOME_UNKNOWN` where docs/postgres.md says it hears
/// that its lease was released. Shown on the functions alone: the retry
/// should count 1 (failed before functions 11: it counted 0, 3 of 3 runs).
#[test]
fn postgres_a_release_retry_after_the_first_attempt_cleaned_its_own_key_up_counts_it() {
    let schema = Schema::fresh();
    let provider = schema.open("        fenceRetentionMs: 1\n");
    let backend = postgres::backend(&provider);
    let lease = block_on(backend.acquire("k", postgres::wait(0))).unwrap();
    let holders = schema.table("_holders");
    let token: String = postgres::rows(&format!("SELECT token FROM {holders} WHERE key = 'k' AND expires_at > now()"))[0].get(0);
    let give_back = schema.table("_give_back");
    // The key row's retention (1 ms) passes while the lease is held.
    std::thread::sleep(Duration::from_millis(20));
    let first: i32 =
        postgres::rows(&format!("SELECT {give_back}('dokebi-lock', ARRAY['k'], '{token}', 'c', false, 1500::bigint)"))[0].get(0);
    let retry: i32 =
        postgres::rows(&format!("SELECT {give_back}('dokebi-lock', ARRAY['k'], '{token}', 'c', true, 1500::bigint)"))[0].get(0);
    let _ = block_on(lease.release());
    block_on(provider.close());
    eprintln!("first attempt released {first}, its retry counts {retry}");
    assert_eq!(first, 1);
    assert_eq!(retry, 1, "the retry did not count the first attempt's release");
}

/// The same on MariaDB: `_give_back`'s clean-up (`_release` with
/// `p_clean` 1) deletes the released key's holder rows, the token's
/// released row (expiry 0) with them, and the retry counts 0 (failed
/// before procedures 9: 3 of 3 runs).
#[test]
fn mysql_a_release_retry_after_the_first_attempt_cleaned_its_own_key_up_counts_it() {
    let table = mysql::Table::fresh();
    let provider = Provider::from_yaml(&mysql::yaml(&table.0, ", fenceRetentionMs: 1")).unwrap();
    let backend = provider.backend("shared").unwrap();
    let lease = block_on(backend.acquire("k", AcquireOptions { wait_timeout: Some(Duration::ZERO), ..AcquireOptions::default() })).unwrap();
    let token = mysql::rows(&format!("SELECT CAST(token AS CHAR) FROM `{}_holders` WHERE k = 'k'", table.0))[0][0].clone().unwrap();
    std::thread::sleep(Duration::from_millis(20));
    let call = |retry: u8| {
        let rows = mysql::rows(&format!("CALL `{}_give_back`(X'{}', '6b', '{token}', {retry}, 1)", table.0, hex(b"dokebi-lock")));
        rows[0][0].clone().unwrap().parse::<i64>().unwrap()
    };
    let (first, retry) = (call(0), call(1));
    let _ = block_on(lease.release());
    block_on(provider.close());
    eprintln!("first attempt released {first}, its retry counts {retry}");
    assert_eq!(first, 1);
    assert_eq!(retry, 1, "the retry did not count the first attempt's release");
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

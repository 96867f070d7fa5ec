//! Review R67 of commit 14502a6: the postgres creators' lock became a
//! per-schema exclusive advisory lock (`hashtextextended('<schema>', G)`)
//! beside the database-wide one `G` held shared (an older release takes `G`
//! alone, exclusively).
//!
//! Findings (each test failed against 14502a6; the first is a stated limit, ignored):
//! - `r67_an_older_installer_queued_lets_one_schema_hold_up_every_other`
//!   (low): while an older release's installer waits for `G` (during a
//!   rolling upgrade), an installation waiting in one schema holds up the
//!   first operation of every other schema again, past `commandTimeoutMs`
//!   (PostgreSQL queues a shared request behind a waiting exclusive one);
//!   docs/postgres.md says it "holds up no other schema's" unconditionally.
//! - `r67_a_table_named_like_anothers_holders_is_refused` (low, not
//!   introduced by 14502a6; the per-schema lock serialises the two but
//!   does not help): two backends in one schema with `table: t` and
//!   `table: t_holders` shared the relation `t_holders`; whichever installed
//!   second failed every first operation with `PROVIDER_FAILED`, unnamed.
//!   Fixed since: such a table name is `INVALID_OPTIONS`.
//!
//! The rest are attacks that held (marked "held").
//!
//! Run: `cargo test -p dokebi-lock --locked --test review_r67 -- --test-threads=2`

mod postgres;
#[path = "postgres/server.rs"]
mod server;

use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use dokebi_lock::{ErrorCode, Provider};
use futures::executor::block_on;
use postgres::{backend, count, count_on, eventually, session_on, wait, yaml_on, Schema};
use server::PrivateServer;

/// The database-wide lock (src/postgres/store.rs `CREATORS_LOCK`): what an
/// older release's installer takes alone and exclusively.
const G: i64 = 7238119025318740561;

/// The SQL a refusal with `autoCreate: false` gives as its fix.
fn create_sql(err: &dokebi_lock::LockError) -> String {
    let sql = err.fix().split_once('\n').expect("the fix carries the SQL").1;
    assert!(sql.contains("CREATE TABLE"), "{}", err.fix());
    sql.to_owned()
}

/// The DBA script of `schema` on `url` (table `dokebi_lock`, or `table:`
/// in `extra`), as a refusal of `autoCreate: false` gives it.
fn script_on(url: &str, schema: &str, extra: &str) -> String {
    let refusing = Provider::from_yaml(&yaml_on(url, schema, &format!("        autoCreate: false\n{extra}"), "")).unwrap();
    let sql = create_sql(&block_on(backend(&refusing).acquire("k", wait(0))).unwrap_err());
    block_on(refusing.close());
    sql
}

/// The script's statement that takes the creators' lock, and its DDL.
fn split_script(script: &str) -> (String, String) {
    let (lock, ddl) =
        script.strip_prefix("BEGIN;\n").and_then(|rest| rest.split_once(";\n")).expect("the script takes the creators' lock first");
    (lock.to_owned(), ddl.strip_suffix("COMMIT;\n").expect("and commits last").to_owned())
}

/// Acquires and releases a key of its own on a new provider of `yaml`, in a thread: the
/// outcome (released: true) and how long the acquire took.
fn first_operation(yaml: String) -> thread::JoinHandle<(Result<bool, ErrorCode>, Duration)> {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let key = format!("k{}", NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
    thread::spawn(move || {
        let provider = Provider::from_yaml(&yaml).unwrap();
        let started = Instant::now();
        let outcome = block_on(backend(&provider).acquire(&key, wait(0)));
        let took = started.elapsed();
        let outcome = match outcome {
            Ok(lease) => block_on(lease.release()).map_err(|e| e.code()),
            Err(err) => Err(err.code()),
        };
        block_on(provider.close());
        (outcome, took)
    })
}

/// Finding (low: availability during a rolling upgrade; no exclusion is
/// lost). The commit's point is that an installation waiting in one schema
/// holds up no other schema's first operation. It still does as soon as an
/// older release's installer asks for the database-wide lock `G`
/// exclusively meanwhile: the waiting installation (here the DBA's script
/// of schema `busy`, left open, as an installer that waits behind a long
/// transaction) holds `G` shared, the older installer queues for it, and
/// PostgreSQL queues every later shared request behind that exclusive
/// waiter; so a new process's first operation in an unrelated schema waits
/// until the installer's bound (10 s) and fails `OUTCOME_UNKNOWN`, the very
/// symptom the commit names. The older installer needs nothing of `quiet`
/// (it installs a third schema). docs/postgres.md states the property
/// without this exception. Confirmed on a private server (this test).
///
/// A limit, stated in docs/postgres.md: PostgreSQL queues a shared
/// request behind a waiting exclusive one (a try too is refused then), so
/// while an older release's installer waits, the database-wide lock held
/// shared by any installation holds up new ones until the older release is
/// gone.
#[test]
#[ignore = "a stated limit of a rolling upgrade (docs/postgres.md): shared requests queue behind the older installer's exclusive one"]
fn r67_an_older_installer_queued_lets_one_schema_hold_up_every_other() {
    let server = PrivateServer::start("r67-queued", &[]);
    let url = server.url();
    let (lock, _) = split_script(&script_on(&url, "busy", ""));
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (dba, older) = (session_on(&runtime, &url), session_on(&runtime, &url));
    runtime.block_on(dba.batch_execute(&format!("BEGIN; {lock}"))).unwrap();
    // An older release's installer of schema `other` (its first statement).
    let older_waits = runtime.spawn(async move {
        older.batch_execute(&format!("BEGIN; SELECT pg_advisory_xact_lock({G})")).await.unwrap();
        older
    });
    eventually("the older installer waits", || {
        count_on(&url, "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND wait_event = 'advisory'") == 1
    });
    let (outcome, took) = first_operation(yaml_on(&url, "quiet", "", "")).join().unwrap();
    runtime.block_on(dba.batch_execute("COMMIT")).unwrap();
    let older = runtime.block_on(older_waits).unwrap();
    runtime.block_on(older.batch_execute("COMMIT")).unwrap();
    assert!(
        outcome == Ok(true) && took < Duration::from_secs(2),
        "the first operation in schema quiet waited behind schema busy's installation (an older installer queued between): {outcome:?} after {took:?}"
    );
}

/// Finding (low; predates 14502a6, which serialises the two installs but
/// cannot help): two backends in one schema with `table: t` and `table:
/// t_holders` shared the relation `t_holders` (`t`'s holders table, the
/// other's keys table): whichever installed second failed every first
/// operation with `PROVIDER_FAILED` ("PostgreSQL refused the command",
/// nothing naming the clash), in both orders (confirmed on the machine's
/// server). Fixed: a table name ending with what the driver names the
/// tables and indexes beside a table (`_holders`, `_waiting`,
/// `_fence_until`, `_pkey`) is `INVALID_OPTIONS` (this test failed before:
/// the provider opened).
#[test]
fn r67_a_table_named_like_anothers_holders_is_refused() {
    let schema = Schema::fresh();
    for table in ["t_holders", "t_waiting", "t_fence_until", "t_pkey"] {
        let opened = Provider::from_yaml(&schema.yaml(&format!("        table: {table}\n"), ""));
        assert_eq!(opened.err().map(|e| e.code()), Some(ErrorCode::InvalidOptions), "table: {table}");
    }
}

/// Held: six processes install one fresh schema at once, three tables
/// (two processes each): every first operation is granted, every table
/// and function is there once, at the current functions.
#[test]
fn r67_held_installers_of_one_schema_with_different_tables_at_once() {
    let schema = Schema::fresh();
    let threads: Vec<_> =
        ["a", "a", "b", "b", "c", "c"].iter().map(|table| first_operation(schema.yaml(&format!("        table: {table}\n"), ""))).collect();
    for handle in threads {
        let (outcome, took) = handle.join().unwrap();
        assert_eq!(outcome, Ok(true), "after {took:?}");
    }
    for table in ["a", "b", "c"] {
        assert_eq!(
            count(&format!(
                "SELECT count(*) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = '{}' AND p.proname = '{table}_take' \
                 AND obj_description(p.oid, 'pg_proc') = 'dokebi-lock functions 14'",
                schema.0
            )),
            1
        );
    }
}

/// Held: six processes install six fresh schemas at once (now side by
/// side, no longer one after the other), plus the DBA script of a seventh
/// beside them: every first operation is granted, each schema has its
/// functions once, at 13.
#[test]
fn r67_held_installers_of_different_schemas_side_by_side() {
    let schemas: Vec<Schema> = (0..7).map(|_| Schema::fresh()).collect();
    let script = script_on(&postgres::url(), &schemas[6].0, "");
    let dba = thread::spawn(move || postgres::try_batch_on(&postgres::url(), &script).map_err(|e| format!("{e:?}")));
    let threads: Vec<_> = schemas[..6].iter().map(|schema| first_operation(schema.yaml("", ""))).collect();
    for handle in threads {
        let (outcome, took) = handle.join().unwrap();
        assert_eq!(outcome, Ok(true), "after {took:?}");
    }
    dba.join().unwrap().unwrap();
    for schema in &schemas {
        assert_eq!(
            count(&format!(
                "SELECT count(*) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = '{}' \
                 AND p.proname = 'dokebi_lock_take' AND obj_description(p.oid, 'pg_proc') = 'dokebi-lock functions 14'",
                schema.0
            )),
            1
        );
    }
}

/// Held: the per-schema key is what every session computes the same
/// (whatever its `client_encoding` or `search_path`), and differs between
/// schemas and from `G`; the DBA script of another table in the same
/// schema takes the same key.
#[test]
fn r67_held_the_schema_key_is_one_per_schema() {
    let schema = Schema::fresh();
    let url = postgres::url();
    let (lock_a, _) = split_script(&script_on(&url, &schema.0, ""));
    let (lock_b, _) = split_script(&script_on(&url, &schema.0, "        table: other\n"));
    assert_eq!(lock_a, lock_b, "one lock per schema, whatever the table");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let key = |setup: &str, name: &str| -> i64 {
        let client = session_on(&runtime, &url);
        runtime.block_on(client.batch_execute(setup)).unwrap();
        let row = runtime.block_on(client.query_one(&format!("SELECT hashtextextended('{name}', {G})"), &[])).unwrap();
        row.get(0)
    };
    let mine = key("SET client_encoding = 'LATIN1'; SET search_path = pg_temp", &schema.0);
    let again = key("SELECT 1", &schema.0);
    let other = key("SELECT 1", &format!("{}x", schema.0));
    assert_eq!(mine, again);
    assert_ne!(mine, other);
    assert_ne!(mine, G);
}

/// Held: the DBA script of this build (new lock) and an older release's
/// installer (`G` alone, exclusively, then this build's DDL as 26a7b7c ran
/// it) and two processes of this build, on one fresh schema, all at once,
/// three rounds: each ends without an error, and the functions end at 13.
/// On a private server (`G` held exclusively).
#[test]
fn r67_held_older_installer_dba_script_and_installers_at_once() {
    let server = PrivateServer::start("r67-mixed", &[]);
    let url = server.url();
    for round in 0..3 {
        let schema = format!("mixed_{round}");
        let script = script_on(&url, &schema, "");
        let (_, ddl) = split_script(&script);
        let older_sql = format!("BEGIN; SELECT pg_advisory_xact_lock({G});\n{ddl}COMMIT;");
        let (done, finished) = mpsc::channel();
        let mut handles = Vec::new();
        for sql in [older_sql, script.clone()] {
            let (url, done) = (url.clone(), done.clone());
            handles.push(thread::spawn(move || {
                let outcome = postgres::try_batch_on(&url, &sql).map_err(|e| format!("{e:?}"));
                done.send(outcome).unwrap();
            }));
        }
        let installers: Vec<_> = (0..2).map(|_| first_operation(yaml_on(&url, &schema, "", ""))).collect();
        for _ in 0..2 {
            finished.recv_timeout(Duration::from_secs(15)).unwrap().unwrap();
        }
        for handle in installers {
            let (outcome, took) = handle.join().unwrap();
            assert_eq!(outcome, Ok(true), "round {round}, after {took:?}");
        }
        for handle in handles {
            handle.join().unwrap();
        }
        assert_eq!(
            count_on(
                &url,
                &format!(
                    "SELECT count(*) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = '{schema}' \
                     AND p.proname = 'dokebi_lock_take' AND obj_description(p.oid, 'pg_proc') = 'dokebi-lock functions 14'"
                )
            ),
            1
        );
    }
}

//! What a session carries does not reach the lock functions: each pins
//! the `search_path` it runs with. Settings are given in the URL's
//! `options`, as a session would carry them (tests/postgres_pgbouncer.rs
//! has what a pooler's other client leaves behind).

mod postgres;

use std::thread;

use dokebi_lock::{ErrorCode, Provider};
use futures::executor::block_on;
use postgres::{backend, batch, code, count, eventually, rows, url, wait, yaml_on, Schema};

/// A provider whose sessions start with `options` (`-c name=value ...`).
fn open_with(schema: &Schema, options: &str) -> Provider {
    let encoded = options.replace(' ', "%20").replace('=', "%3D").replace(',', "%2C");
    Provider::from_yaml(&yaml_on(&format!("{}?options={encoded}", url()), &schema.0, "", "")).unwrap()
}

#[test]
fn a_function_of_the_session_s_search_path_never_replaces_a_built_in() {
    let schema = Schema::fresh();
    // A clock stuck in 2000, found before pg_catalog's by the session.
    batch(&format!(
        "CREATE SCHEMA {s}; CREATE FUNCTION {s}.clock_timestamp() RETURNS timestamptz LANGUAGE sql AS $$ SELECT timestamptz '2000-01-01' $$",
        s = schema.0
    ));
    let shadowed = open_with(&schema, &format!("-c search_path={},pg_catalog", schema.0));
    let plain = schema.open("");
    let lease = block_on(backend(&shadowed).acquire("k", wait(0))).unwrap();
    let expiry: Vec<bool> =
        rows(&format!("SELECT expires_at > now() FROM {}", schema.table("_holders"))).iter().map(|row| row.get(0)).collect();
    assert_eq!(expiry, [true], "the grant's expiry is on the server's clock, not the session's function");
    assert_eq!(code(block_on(backend(&plain).acquire("k", wait(0)))), ErrorCode::LockBusy);
    assert!(block_on(lease.release()).unwrap());
    block_on(shadowed.close());
    block_on(plain.close());
}

/// A server `statement_timeout` (set for a role or a database, as many
/// DBAs do) shorter than the take's `lock_timeout` (three quarters of
/// `commandTimeoutMs`) cancels a take held up by another session's lock on
/// the key's row: `57014`, nothing done. That is contention, as the
/// `lock_timeout` it beat to it is: a policy must not move the key, or the
/// key is held on two members at once (here: another holder's lease on the
/// database, and this acquire's on the host).
#[test]
fn a_take_a_server_statement_timeout_cut_while_it_waited_for_a_row_never_moves_the_key() {
    let schema = Schema::fresh();
    let holder = schema.open("");
    let lease = block_on(backend(&holder).acquire("k", wait(0))).unwrap();
    let directory = std::env::temp_dir().join(format!("dokebi-statement-timeout-host-{}", std::process::id()));
    let yaml = format!(
        "schemaVersion: 1\noptions:\n  dokebi-postgres:\n    connections:\n      main: {{ url: '{}?options=-c%20statement_timeout%3D500', commandTimeoutMs: 2000 }}\n  dokebi-lock:\n    backends:\n      db: {{ driver: postgres, connection: main, schema: {}, leaseMs: 10000 }}\n      host: {{ driver: file, directory: '{}' }}\n      locks:\n        driver: policy\n        default: {{ backends: [db, host], minTier: host, onUnavailable: fallBack }}\n",
        url(),
        schema.0,
        directory.display()
    );
    let policy = Provider::from_yaml(&yaml).unwrap();
    // Another session holds the key's row 1.2 s: past the server's 500 ms,
    // within the take's lock_timeout (1.5 s).
    let table = schema.table("");
    let locker =
        thread::spawn(move || batch(&format!("BEGIN; SELECT 1 FROM {table} WHERE key = 'k' FOR UPDATE; SELECT pg_sleep(1.2); ROLLBACK")));
    eventually("the row is locked", || {
        count("SELECT count(*) FROM pg_stat_activity WHERE query LIKE '%pg_sleep(1.2)%' AND state = 'active' AND pid <> pg_backend_pid()")
            == 1
    });
    let outcome = block_on(policy.backend("locks").unwrap().acquire("k", wait(0)));
    locker.join().unwrap();
    let served = match &outcome {
        Ok(lease) => lease.served().map_or("?".to_owned(), |served| served.member.name.clone()),
        Err(err) => format!("{:?}", err.code()),
    };
    assert_eq!(
        served,
        "LockBusy",
        "k was held on db (fence {}) and the policy's acquire was served by host: the server's statement_timeout \
         cancelled a take waiting for k's row (57014), read as PROVIDER_FAILED",
        lease.fence()
    );
    assert!(block_on(lease.release()).unwrap());
    block_on(policy.close());
    block_on(holder.close());
    let _ = std::fs::remove_dir_all(&directory);
}

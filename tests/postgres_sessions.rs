//! What a session carries does not reach the lock functions: each pins
//! the `search_path` it runs with. Settings are given in the URL's
//! `options`, as a session would carry them (tests/postgres_pgbouncer.rs
//! has what a pooler's other client leaves behind).

mod postgres;
mod support;

use std::thread;

use dokebi_lock::{ErrorCode, Provider};
use futures::executor::block_on;
use postgres::{backend, batch, code, count, eventually, rows, url, wait, yaml_on, Schema};
use support::fall_back::FallBackToHost;

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
    let policy = FallBackToHost::open(
        "postgres",
        &format!("{}?options=-c%20statement_timeout%3D500", url()),
        &format!("schema: {}, leaseMs: 10000", schema.0),
    );
    // Another session holds the key's row 1.2 s: past the server's 500 ms,
    // within the take's lock_timeout (1.5 s).
    let table = schema.table("");
    let locker =
        thread::spawn(move || batch(&format!("BEGIN; SELECT 1 FROM {table} WHERE key = 'k' FOR UPDATE; SELECT pg_sleep(1.2); ROLLBACK")));
    eventually("the row is locked", || {
        count("SELECT count(*) FROM pg_stat_activity WHERE query LIKE '%pg_sleep(1.2)%' AND state = 'active' AND pid <> pg_backend_pid()")
            == 1
    });
    let served = policy.acquire_held(
        "k",
        lease.fence(),
        "the server's statement_timeout cancelled a take waiting for k's row (57014), read as PROVIDER_FAILED",
    );
    locker.join().unwrap();
    assert_eq!(served, "LockBusy", "a take the server cancelled while it waited for k's row finds k busy");
    assert!(block_on(lease.release()).unwrap());
    block_on(holder.close());
}

/// A `statement_timeout` about as long as a take itself (1 to 3 ms) cuts
/// takes at every point of their run, their commit included: a take
/// answered busy (`57014`, read as contention since b43f385) must have left
/// nothing held. One process, one key: whenever this test holds nothing
/// (every release answered, or the lease that failed to release has run
/// out), a busy answer must find no live holder row of the key.
#[test]
fn a_take_a_statement_timeout_cut_anywhere_never_leaves_a_grant_behind_a_busy_answer() {
    let schema = Schema::fresh();
    let holders = schema.table("_holders");
    // The tables made first: a cut check or creation answers busy too.
    let setup = schema.open("");
    assert!(block_on(block_on(backend(&setup).acquire("k", wait(0))).unwrap().release()).unwrap());
    block_on(setup.close());
    let (mut busy, mut granted, mut cut_releases) = (0, 0, 0);
    for timeout_ms in [1, 1, 1, 2] {
        let options = format!("-c statement_timeout={timeout_ms}");
        let encoded = options.replace(' ', "%20").replace('=', "%3D");
        let yaml = yaml_on(&format!("{}?options={encoded}", url()), &schema.0, "        leaseMs: 2100\n", "");
        let provider = Provider::from_yaml(&yaml).unwrap();
        for _ in 0..400 {
            match block_on(backend(&provider).acquire("k", wait(0))) {
                Ok(lease) => {
                    granted += 1;
                    if !matches!(block_on(lease.release()), Ok(true)) {
                        cut_releases += 1;
                        thread::sleep(std::time::Duration::from_millis(2150));
                    }
                }
                Err(err) if err.code() == ErrorCode::LockBusy => {
                    busy += 1;
                    let live = count(&format!("SELECT count(*) FROM {holders} WHERE key = 'k' AND expires_at > clock_timestamp()"));
                    assert_eq!(live, 0, "a take answered LOCK_BUSY (statement_timeout {timeout_ms} ms) left a live grant of k");
                }
                Err(_) => {}
            }
        }
        block_on(provider.close());
    }
    eprintln!("granted {granted}, busy {busy}, releases cut {cut_releases}");
}

/// A `statement_timeout` that cancels the driver's look for its tables
/// (or their creation, `autoCreate`) is not contention for a key: no key
/// was looked at. Read as contention since b43f385, each acquire answered
/// `LOCK_BUSY` for as long as the tables could not be found or made (a
/// role whose timeout is shorter than the DDL: for ever), and a waiting
/// acquire waited out its whole wait, where the store refused the call.
#[test]
fn a_statement_timeout_that_cut_the_table_setup_is_a_refusal_not_a_busy_key() {
    let schema = Schema::fresh();
    let cut = open_with(&schema, "-c statement_timeout=1");
    let outcome = block_on(backend(&cut).acquire("k", wait(0)));
    assert_eq!(code(outcome), ErrorCode::ProviderFailed, "an acquire whose table setup a statement_timeout cancelled");
    block_on(cut.close());
}

//! What a session carries does not reach the lock functions: each pins
//! the `search_path` it runs with. Settings are given in the URL's
//! `options`, as a session would carry them (tests/postgres_pgbouncer.rs
//! has what a pooler's other client leaves behind).

mod postgres;

use dokebi_lock::{ErrorCode, Provider};
use futures::executor::block_on;
use postgres::{backend, batch, code, rows, url, wait, yaml_on, Schema};

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

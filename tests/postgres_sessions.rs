//! What a session leaves behind (its own settings, or another client's
//! through a pooler) does not reach the lock functions: each pins the
//! `search_path` it runs with and commits grants durably whatever
//! `synchronous_commit` the session has. Settings are given in the URL's
//! `options`, as a session (or a pooler) would carry them.

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

#[test]
fn a_grant_commits_durably_though_the_session_turned_synchronous_commit_off() {
    let schema = Schema::fresh();
    let provider = open_with(&schema, "-c synchronous_commit=off");
    // The tables, then a trigger that records the setting each grant
    // commits with (a deferred constraint trigger runs at the commit).
    assert!(block_on(block_on(backend(&provider).acquire("first", wait(0))).unwrap().release()).unwrap());
    batch(&format!(
        "CREATE TABLE {s}.seen (setting text);
         CREATE FUNCTION {s}.record() RETURNS trigger LANGUAGE plpgsql AS $$
           BEGIN INSERT INTO {s}.seen VALUES (current_setting('synchronous_commit')); RETURN NULL; END $$;
         CREATE CONSTRAINT TRIGGER record AFTER UPDATE OR INSERT ON {holders} DEFERRABLE INITIALLY DEFERRED
           FOR EACH ROW WHEN (NEW.expires_at > 'epoch') EXECUTE FUNCTION {s}.record();",
        s = schema.0,
        holders = schema.table("_holders"),
    ));
    let lease = block_on(backend(&provider).acquire("k", wait(0))).unwrap();
    assert!(block_on(lease.renew()).unwrap());
    let seen: Vec<String> = rows(&format!("SELECT setting FROM {}.seen", schema.0)).iter().map(|row| row.get(0)).collect();
    assert_eq!(seen, ["on", "on"], "the grant, then the renewal");
    assert!(block_on(lease.release()).unwrap());
    block_on(provider.close());
}

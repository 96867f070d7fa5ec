//! The names the postgres driver derives from `schema` and `table`: the
//! release channel and the tables' index, at every length the options allow.

mod postgres;

use std::thread;

use dokebi_lock::Provider;
use futures::executor::block_on;
use postgres::{backend, batch, count, eventually, url, wait, yaml_on, Schema};

/// A schema of the test's own named with `bytes` bytes.
fn schema_of(bytes: usize) -> Schema {
    let name = format!("dl_test_{}_", std::process::id());
    let name = format!("{name}{}", "x".repeat(bytes - name.len()));
    batch(&format!("DROP SCHEMA IF EXISTS {name} CASCADE"));
    Schema(name)
}

#[test]
fn a_release_is_announced_when_schema_and_table_make_a_channel_longer_than_an_identifier() {
    // 39 + 1 + 25 bytes: PostgreSQL's identifiers keep 63.
    let schema = schema_of(39);
    let table = "        table: dokebi_lock_with_long_name\n";
    let holder = Provider::from_yaml(&yaml_on(&url(), &schema.0, table, "")).unwrap();
    // A safety-net poll far longer than the wait: only NOTIFY can wake it.
    let waiter = Provider::from_yaml(&yaml_on(&url(), &schema.0, &format!("{table}        notifyPollIntervalMs: 600000\n"), "")).unwrap();
    let held = block_on(backend(&holder).acquire("k", wait(0))).unwrap();
    eventually("the waiter listens", || backend(&waiter).status().postgres.unwrap().listening);
    let waiting = backend(&waiter);
    let granted = thread::spawn(move || block_on(waiting.acquire("k", wait(20_000))).map(|lease| lease.fence()));
    eventually("the waiter waits in the table", || {
        count(&format!("SELECT count(*) FROM {}.dokebi_lock_with_long_name_waiting WHERE lapses_at > now()", schema.0)) == 1
    });
    assert!(block_on(held.release()).expect("the release is announced"));
    assert!(granted.join().unwrap().expect("the waiter is woken by the announcement") > held.fence());
    block_on(holder.close());
    block_on(waiter.close());
}

#[test]
fn every_table_of_a_schema_gets_its_own_index_on_the_retention() {
    let schema = Schema::fresh();
    for table in ["locks_a", "locks_b"] {
        let provider = Provider::from_yaml(&yaml_on(&url(), &schema.0, &format!("        table: {table}\n"), "")).unwrap();
        assert!(block_on(block_on(backend(&provider).acquire("k", wait(0))).unwrap().release()).unwrap());
        block_on(provider.close());
    }
    let indexed = |table: &str| {
        count(&format!(
            "SELECT count(*) FROM pg_indexes WHERE schemaname = '{}' AND tablename = '{table}' AND indexdef LIKE '%(fence_until)%'",
            schema.0
        ))
    };
    assert_eq!((indexed("locks_a"), indexed("locks_b")), (1, 1));
}

#[test]
fn a_key_with_u0000_is_invalid_key_as_on_every_driver_not_a_server_refusal() {
    // PostgreSQL's text holds no U+0000: the server refused such a key
    // (PROVIDER_FAILED, after a round trip) where every other driver took it.
    let schema = Schema::fresh();
    let provider = schema.open("");
    let err = block_on(backend(&provider).acquire("a\u{0}b", wait(0))).expect_err("no lease on a key with U+0000");
    assert_eq!(err.code(), dokebi_lock::ErrorCode::InvalidKey, "{err}");
    let err = block_on(backend(&provider).acquire_many(&["k", "\u{0}"], wait(0))).expect_err("nor on a set of keys with one");
    assert_eq!(err.code(), dokebi_lock::ErrorCode::InvalidKey, "{err}");
    block_on(provider.close());
}

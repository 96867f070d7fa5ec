//! Review R3 of the mysql driver: what could give a key two holders or
//! repeat a fence, against MariaDB 10.11 (the machine's, or a private
//! `mariadbd` started here on a free port when a test needs a server
//! setting of its own).

mod mysql;
#[path = "mysql/server.rs"]
mod mysql_server;

use std::time::Duration;

use dokebi_lock::{AcquireOptions, Provider};
use futures::executor::block_on;
use mysql::{url, yaml, Table};
use mysql_server::PrivateServer;

fn wait(ms: u64) -> AcquireOptions {
    AcquireOptions { wait_timeout: Some(Duration::from_millis(ms)), ..AcquireOptions::default() }
}

/// 200 keys of 200 bytes: as the procedures take them (hex, commas),
/// 80,199 bytes, more than a `TEXT` parameter (`p_keys`) keeps (65,535).
fn many_long_keys() -> Vec<String> {
    (0..200).map(|at| format!("k{at:03}{}", "x".repeat(196))).collect()
}

/// Finding 1. A server whose `sql_mode` is not strict (`''`, or MySQL
/// 5.6's default `NO_ENGINE_SUBSTITUTION`) cuts a `CALL`'s too long `TEXT`
/// argument with a warning: `_take` sees 164 of the 200 keys, grants
/// those, and answers 164 fences; `reply::taken` reads the missing fences
/// as none and the driver reports every key held. Another process then
/// gets the last keys too: two holders.
#[test]
fn a_key_set_longer_than_a_text_argument_is_never_granted_in_part() {
    let server = PrivateServer::start(&["--sql-mode="]);
    let table = "r3_long";
    let config = yaml(table, "").replace(&url(), &server.url());
    let (one, other) = (Provider::from_yaml(&config).unwrap(), Provider::from_yaml(&config).unwrap());
    let (a, b) = (one.backend("shared").unwrap(), other.backend("shared").unwrap());
    let keys = many_long_keys();
    let names: Vec<&str> = keys.iter().map(String::as_str).collect();
    let held = block_on(a.acquire_many(&names, wait(0)));
    // All or nothing on the server, whatever the driver answered.
    let rows = server.sql(&format!("SELECT COUNT(*) FROM test.`{table}_holders` WHERE expires_at > 0")).unwrap();
    assert!(rows == 0 || rows == 200, "{rows} of the 200 keys granted (the driver answered {:?})", held.as_ref().map(|_| "granted"));
    let last = block_on(b.acquire(&keys[199], wait(0)));
    assert!(
        last.is_err() || held.is_err(),
        "two holders of keys[199]: the first process was granted every key (fences {:?}), the second was granted keys[199] too (fence {})",
        held.as_ref().map(|lease| lease.fences()[195..].iter().map(|(_, fence)| *fence).collect::<Vec<_>>()).ok(),
        last.as_ref().map(|lease| lease.fence()).unwrap_or(0)
    );
    if let Ok(lease) = held {
        assert!(lease.fences().iter().all(|(_, fence)| *fence > 0), "a grant without a fence for some keys");
    }
}

/// 4,000 short keys: their list (43,999 bytes) fits `p_keys`, but the
/// answer, a fence of 16 digits per key, does not fit `_try`'s `TEXT`
/// (65,535 bytes).
fn many_short_keys() -> Vec<String> {
    (0..4000).map(|at| format!("k{at:04}")).collect()
}

/// Finding 3. The grant's answer is cut instead: on a server that is not
/// strict every key is held, but the answer carries some 3,850 fences, the last
/// one cut short; `reply::taken` makes that a grant with no fences, and the
/// lease's fences are all 0, below every earlier grant of those keys.
#[test]
fn a_grant_of_many_keys_answers_every_key_its_fence() {
    let server = PrivateServer::start(&["--sql-mode=", "--max-allowed-packet=64M"]);
    let config = yaml("r3_short", "")
        .replace("leaseMs: 5000", "leaseMs: 120000")
        .replace(&url(), &server.url())
        .replace("commandTimeoutMs: 2000", "commandTimeoutMs: 60000");
    let provider = Provider::from_yaml(&config).unwrap();
    let backend = provider.backend("shared").unwrap();
    let keys = many_short_keys();
    let names: Vec<&str> = keys.iter().map(String::as_str).collect();
    let earlier = block_on(backend.acquire(names[3999], wait(0))).unwrap().fence();
    let lease = block_on(backend.acquire_many(&names, wait(0))).unwrap_or_else(|err| panic!("{:?}: {err}", err.code()));
    let fences: Vec<u64> = lease.fences().iter().map(|(_, fence)| *fence).collect();
    let below = fences.iter().filter(|&&fence| fence <= earlier).count();
    assert_eq!(below, 0, "{below} of 4000 fences at or below an earlier grant's {earlier} (last ones: {:?})", &fences[3990..]);
}

/// Finding 2 (the same limits on a strict server, the default): such key
/// sets are refused, `Data too long for column 'p_keys'` (200 long keys)
/// or `'v_fences'` (4,000 short ones), where the other drivers grant them.
#[test]
fn key_sets_longer_than_a_text_are_granted_on_a_strict_server() {
    let table = Table::fresh();
    let config =
        yaml(&table.0, "").replace("leaseMs: 5000", "leaseMs: 120000").replace("commandTimeoutMs: 2000", "commandTimeoutMs: 60000");
    let provider = Provider::from_yaml(&config).unwrap();
    let backend = provider.backend("shared").unwrap();
    for keys in [many_long_keys(), many_short_keys()] {
        let names: Vec<&str> = keys.iter().map(String::as_str).collect();
        let lease =
            block_on(backend.acquire_many(&names, wait(0))).unwrap_or_else(|err| panic!("{} keys: {:?}: {err}", keys.len(), err.code()));
        assert_eq!(lease.fences().len(), keys.len());
        assert!(block_on(lease.release()).unwrap());
    }
}

/// Finding 4. A procedure keeps the `sql_mode` of the session that created
/// it (autoCreate: the server's default). Under MariaDB's
/// `EMPTY_STRING_IS_NULL`, `_try`'s `DEFAULT ''` lists are NULL: a key held
/// against the request is never seen as blocking (`NULL <> ''`), so every
/// take grants, and the answer (`CONCAT('1', NULL)`) is NULL, which the
/// driver reads as a refusal, nothing done. Two processes: two live holder
/// rows of one key, and neither knows it holds it (no clean-up follows a
/// refusal).
#[test]
fn procedures_do_not_depend_on_the_sql_mode_they_were_created_in() {
    let server = PrivateServer::start(&["--sql-mode=EMPTY_STRING_IS_NULL"]);
    let table = "r3_mode";
    let config = yaml(table, "").replace(&url(), &server.url());
    let (one, other) = (Provider::from_yaml(&config).unwrap(), Provider::from_yaml(&config).unwrap());
    let (a, b) = (one.backend("shared").unwrap(), other.backend("shared").unwrap());
    let first = block_on(a.acquire("k", wait(0)));
    let second = block_on(b.acquire("k", wait(0)));
    let live = server.sql(&format!("SELECT COUNT(*) FROM test.`{table}_holders` WHERE expires_at > 0")).unwrap();
    assert!(
        live <= 1 && first.is_ok() && second.is_err(),
        "{live} live holder rows of one key; first: {:?}, second: {:?}",
        first.as_ref().map(|lease| lease.fence()).map_err(|err| err.to_string()),
        second.as_ref().map(|lease| lease.fence()).map_err(|err| err.to_string())
    );
}

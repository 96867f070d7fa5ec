//! Row churn of the postgres driver's tables: a grant, a release and a
//! waiter's mark update one row in place (heap-only tuples, pruned within
//! the page), so a hot key leaves nothing for VACUUM. On a private server:
//! on the shared one, another suite's long transaction holds back the
//! horizon that pruning needs, and the pages fill.

mod postgres;
#[path = "postgres/server.rs"]
mod server;

use std::thread;

use dokebi_lock::Provider;
use futures::executor::block_on;
use postgres::{backend, batch_on, count_on, eventually, rows_on, wait, yaml_on};
use server::PrivateServer;

/// A private server, its URL, and the schema the tests' backend uses.
fn private(name: &str) -> (PrivateServer, String, String) {
    let server = PrivateServer::start(name, &[]);
    let url = server.url();
    (server, url, "churn".to_string())
}

fn open(url: &str) -> Provider {
    Provider::from_yaml(&yaml_on(url, "churn", "", "")).unwrap()
}

/// The qualified name of the backend's table with `suffix`.
fn table(schema: &str, suffix: &str) -> String {
    format!("{schema}.dokebi_lock{suffix}")
}

/// What the server's statistics say one table went through: rows inserted,
/// updated (HOT ones among them), deleted, and dead versions now.
fn churn(url: &str, table: &str) -> (i64, i64, i64, i64, i64) {
    let (schema, name) = table.split_once('.').unwrap();
    let row = rows_on(
        url,
        &format!(
            "SELECT n_tup_ins, n_tup_upd, n_tup_hot_upd, n_tup_del, n_dead_tup FROM pg_stat_user_tables \
         WHERE schemaname = '{}' AND relname = '{}'",
            schema.trim_matches('"'),
            name.trim_matches('"')
        ),
    )
    .remove(0);
    (row.get(0), row.get(1), row.get(2), row.get(3), row.get(4))
}

/// Updated in place: every update of `table` a heap-only tuple (no new
/// index entry), whose dead versions the page's own pruning removes as it
/// goes, with no VACUUM (autovacuum is off): the table stays one page,
/// however many rounds it went through.
fn assert_churn_is_pruned(url: &str, table: &str, rounds: i64, updated: i64, hot: i64, dead: i64) {
    assert!(updated >= rounds, "{table}: {updated} updates in {rounds} rounds");
    assert_eq!(hot, updated, "{table}: every update is HOT (no index entry added)");
    let pages = count_on(url, &format!("SELECT pg_relation_size('{table}') / current_setting('block_size')::bigint"));
    assert_eq!(pages, 1, "{table}: {pages} pages after {rounds} rounds ({dead} dead versions): not pruned in place");
}

#[test]
fn a_grant_and_its_release_update_one_holder_row_in_place_and_leave_no_rows_to_vacuum() {
    const PAIRS: i64 = 300;
    let (_server, url, schema) = private("churn-holders");
    let (holders, keys) = (table(&schema, "_holders"), table(&schema, ""));
    let provider = open(&url);
    // The first grant makes the tables, the key's row and its holder row.
    assert!(block_on(block_on(backend(&provider).acquire("k", wait(0))).unwrap().release()).unwrap());
    // No autovacuum pass may tidy up behind the counts.
    batch_on(&url, &format!("ALTER TABLE {holders} SET (autovacuum_enabled = false); ALTER TABLE {keys} SET (autovacuum_enabled = false)"));
    for _ in 1..PAIRS {
        assert!(block_on(block_on(backend(&provider).acquire("k", wait(0))).unwrap().release()).unwrap());
    }
    // A session's statistics reach the server when it ends, at the latest.
    block_on(provider.close());
    eventually("the sessions' statistics are in", || {
        let (inserted, updated, _, deleted, _) = churn(&url, &holders);
        churn(&url, &keys).1 >= PAIRS && inserted + updated + deleted >= 2 * PAIRS - 1
    });
    let (inserted, updated, hot, deleted, dead) = churn(&url, &holders);
    eprintln!("holders after {PAIRS} pairs: {inserted} inserted, {updated} updated ({hot} HOT), {deleted} deleted, {dead} dead");
    // A row inserted by a grant and deleted by its release is a dead row
    // per pair, with its index entry, until VACUUM.
    assert_eq!((inserted, deleted), (1, 0), "the key's one holder row serves every grant");
    assert_churn_is_pruned(&url, &holders, PAIRS, updated, hot, dead);
    assert_eq!(count_on(&url, &format!("SELECT count(*) FROM {holders}")), 1);
}

#[test]
fn a_waiter_s_mark_is_a_row_updated_in_place_too() {
    const ROUNDS: i64 = 40;
    let (_server, url, schema) = private("churn-marks");
    let waiting = table(&schema, "_waiting");
    let (a, b) = (open(&url), open(&url));
    assert!(block_on(block_on(backend(&a).acquire("k", wait(0))).unwrap().release()).unwrap());
    batch_on(&url, &format!("ALTER TABLE {waiting} SET (autovacuum_enabled = false)"));
    let marks = format!("SELECT count(*) FROM {waiting} WHERE lapses_at > now()");
    for round in 0..ROUNDS {
        let held = block_on(backend(&a).acquire("k", wait(0))).unwrap();
        let waiter = backend(&b);
        let next = thread::spawn(move || block_on(waiter.acquire("k", wait(10_000))));
        eventually("b waits in the table", || count_on(&url, &marks) == 1);
        assert!(block_on(held.release()).unwrap());
        let next = next.join().unwrap().unwrap_or_else(|err| panic!("round {round}: {err}"));
        assert!(next.fence() > held.fence());
        assert_eq!(count_on(&url, &marks), 0, "round {round}: the mark went with the grant");
        assert!(block_on(next.release()).unwrap());
    }
    block_on(a.close());
    block_on(b.close());
    eventually("the sessions' statistics are in", || {
        let (inserted, updated, _, deleted, _) = churn(&url, &waiting);
        inserted + updated + deleted >= 2 * ROUNDS
    });
    let (inserted, updated, hot, deleted, dead) = churn(&url, &waiting);
    eprintln!("marks after {ROUNDS} hand-offs: {inserted} inserted, {updated} updated ({hot} HOT), {deleted} deleted, {dead} dead");
    assert_eq!((inserted, deleted), (1, 0), "the key's one mark row serves every wait");
    assert_churn_is_pruned(&url, &waiting, ROUNDS, updated, hot, dead);
}

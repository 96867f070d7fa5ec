//! Review r5: probes of 810f570 (a renewal extends no holder row that a
//! live holder of another token is held against) on real servers whose
//! clock steps back. Fixed by functions 8 and procedures 7: an expired
//! holder row never comes back to life (a grant or a refused renewal marks
//! it dead).

mod mysql;
#[path = "mysql/server.rs"]
mod mysql_server;
#[path = "postgres/server.rs"]
mod pg_server;
mod postgres;
#[path = "support/stepped_clock.rs"]
mod stepped_clock;

use std::path::Path;
use std::time::Duration;

use dokebi_lock::{AcquireOptions, Lease, LockMode, Provider};
use futures::executor::block_on;
use stepped_clock::with_a_clock_to_step;

fn wait(ms: u64) -> AcquireOptions {
    AcquireOptions { wait_timeout: Some(Duration::from_millis(ms)), ..AcquireOptions::default() }
}

fn shared(ms: u64) -> AcquireOptions {
    AcquireOptions { mode: LockMode::Shared, ..wait(ms) }
}

/// The writer granted a key once a reader's lease had run out (the reader
/// paused, crashed, or gone for good: it never renews again), then the
/// server's clock steps back 5 s (an NTP step, or a failover to a replica
/// whose clock is behind, as review_r1's failover test). The reader's row
/// is live again on that clock. 810f570 refuses the reader's renewal there
/// (right), but the rule is symmetric: the writer's own renewal finds the
/// revived reader's row held against a writer and is refused too, so the
/// one legitimate holder, whose fence is the key's newest, is told
/// `LEASE_LOST` by a row whose owner cannot renew it. Before 810f570 the
/// writer's renewal was granted. Safety does not need it: refusing the
/// revived row alone keeps one holder; the server can tell the revived row
/// from the live one (the key was granted at a clock past the revived
/// row's expiry: the key's fence counter, in µs of that clock, is above
/// it).
fn the_writer_renews_beside_a_revived_reader(config: &str, offset: &Path) {
    let (_providers, a, writer) = a_writer_granted_after_a_reader_s_lease_ran_out(config);
    std::fs::write(offset, "-5\n").unwrap();
    std::thread::sleep(Duration::from_millis(100));

    let renewed = block_on(writer.renew());
    let _ = std::fs::remove_file(offset);
    assert!(
        matches!(renewed, Ok(true)),
        "the writer (fence {}, granted after the reader's lease, fence {}, ran out) lost its lease at its first renewal after the \
         server's clock stepped back: {renewed:?}; writer valid {}",
        writer.fence(),
        a.fence(),
        writer.is_valid()
    );
}

/// Reader `a`'s lease runs out unrenewed (slot 1; reader d's released
/// slot 0 is where the writer is granted, so a's expired row stays), then
/// a writer is granted the key: the providers (readers', writers'), a and
/// the writer's lease.
fn a_writer_granted_after_a_reader_s_lease_ran_out(config: &str) -> ([Provider; 2], Lease, Lease) {
    let readers = Provider::from_yaml(config).unwrap();
    let writers = Provider::from_yaml(config).unwrap();
    let (readers_backend, writers_backend) = (readers.backend("shared").unwrap(), writers.backend("shared").unwrap());
    let d = block_on(readers_backend.acquire("k", shared(0))).unwrap();
    let a = block_on(readers_backend.acquire("k", shared(0))).unwrap();
    assert!(block_on(d.release()).unwrap());
    std::thread::sleep(Duration::from_millis(2500));
    assert!(!a.is_valid());
    let writer = block_on(writers_backend.acquire("k", wait(2000))).expect("the key is free once a's lease ran out");
    ([readers, writers], a, writer)
}

/// The reader of the scenario above resumes after the writer was granted
/// the key, wrote and released it; then the server's clock steps back 5 s
/// and the reader checks `renew()` (guarantees.md, "Clocks": "check
/// renew() after a resume"; "a holder whose lease expired or was taken
/// over is told"). Its row is live again on that clock and no live holder
/// is held against it now, so 810f570's check passes and the renewal is
/// granted: the reader goes on as if it had held the key throughout, while
/// a writer held it inside its section. The check asks who holds the key
/// now, not whether the key was granted to another holder since this row
/// expired (the key's fence counter, in µs of the clock of its last grant,
/// is above the row's expiry: the server can tell).
fn the_reader_renews_after_a_writer_came_and_went(config: &str, offset: &Path) {
    let (_providers, a, writer) = a_writer_granted_after_a_reader_s_lease_ran_out(config);
    let writer_fence = writer.fence();
    assert!(block_on(writer.release()).unwrap());
    std::fs::write(offset, "-5\n").unwrap();
    std::thread::sleep(Duration::from_millis(100));

    let renewed = block_on(a.renew());
    let _ = std::fs::remove_file(offset);
    assert!(
        !matches!(renewed, Ok(true)),
        "the reader (fence {}) whose lease ran out was renewed after a writer (fence {writer_fence}) held and released the key \
         meanwhile: {renewed:?}; reader valid {}",
        a.fence(),
        a.is_valid()
    );
}

#[test]
fn postgres_a_writer_keeps_its_lease_beside_a_row_revived_by_a_backward_step() {
    let (server, offset) = with_a_clock_to_step("postgres", || pg_server::PrivateServer::start("r5-clock", &[]));
    let config = postgres::yaml_on(&server.url(), "r5_clock", "        leaseMs: 2000\n", "")
        .replace("commandTimeoutMs: 2000", "commandTimeoutMs: 1000");
    the_writer_renews_beside_a_revived_reader(&config, &offset);
}

#[test]
fn mysql_a_writer_keeps_its_lease_beside_a_row_revived_by_a_backward_step() {
    let (server, offset) = with_a_clock_to_step("mysql", || mysql_server::PrivateServer::start(&[]));
    let config = mysql::yaml("r5_clock", "")
        .replace(&mysql::url(), &server.url())
        .replace("leaseMs: 5000", "leaseMs: 2000")
        .replace("commandTimeoutMs: 2000", "commandTimeoutMs: 1000");
    the_writer_renews_beside_a_revived_reader(&config, &offset);
}

/// Held: `held_against` has no `SET search_path` (so that it is inlined)
/// and reads operators by their bare names, but it runs in its callers'
/// pinned `search_path` (`pg_catalog, pg_temp`), inlined or not: a
/// session whose path puts a schema with a `<>` for text that is never
/// true ahead of `pg_catalog` (every other token would then look like the
/// renewing one: nothing held against it) changes no renewal.
#[test]
fn postgres_a_session_s_search_path_shadows_no_operator_of_the_renewal_s_check() {
    let schema = postgres::Schema::fresh();
    let provider = schema.open("");
    assert!(block_on(block_on(provider.backend("shared").unwrap().acquire("installed", wait(0))).unwrap().release()).unwrap());
    let evil = format!("{}_evil", schema.0);
    postgres::batch(&format!(
        "CREATE SCHEMA {evil};
         CREATE FUNCTION {evil}.never(text, text) RETURNS boolean LANGUAGE sql IMMUTABLE AS 'SELECT false';
         CREATE OPERATOR {evil}.<> (LEFTARG = text, RIGHTARG = text, FUNCTION = {evil}.never);
         INSERT INTO {} VALUES ('probe', 'k', 1, clock_timestamp() + interval '1 minute');
         INSERT INTO {} (namespace, key, slot, token, shared, lim, weight, expires_at) VALUES
           ('probe', 'k', 0, 'mine', true, 1, 1, clock_timestamp() + interval '10 s'),
           ('probe', 'k', 1, 'other', false, 1, 1, clock_timestamp() + interval '10 s');",
        schema.table(""),
        schema.table("_holders"),
    ));
    let hostile = format!("{}?options=-csearch_path%3D{evil}%2Cpg_catalog", postgres::url());
    assert!(!postgres::rows_on(&hostile, "SELECT 'a'::text <> 'b'::text")[0].get::<_, bool>(0), "the session's <> is the shadowing one");
    let renewed =
        postgres::count_on(&hostile, &format!("SELECT {}('probe', ARRAY['k'], 'mine', 60000, 1000)::bigint", schema.table("_renew")));
    postgres::batch(&format!("DROP SCHEMA {evil} CASCADE"));
    block_on(provider.close());
    assert_eq!(renewed, 0, "a reader beside a writer was renewed under the session's search_path");
}

#[test]
fn postgres_a_reader_is_told_its_lease_ran_out_though_the_writer_granted_meanwhile_released() {
    let (server, offset) = with_a_clock_to_step("postgres-gone", || pg_server::PrivateServer::start("r5-gone", &[]));
    let config = postgres::yaml_on(&server.url(), "r5_gone", "        leaseMs: 2000\n", "")
        .replace("commandTimeoutMs: 2000", "commandTimeoutMs: 1000");
    the_reader_renews_after_a_writer_came_and_went(&config, &offset);
}

#[test]
fn mysql_a_reader_is_told_its_lease_ran_out_though_the_writer_granted_meanwhile_released() {
    let (server, offset) = with_a_clock_to_step("mysql-gone", || mysql_server::PrivateServer::start(&[]));
    let config = mysql::yaml("r5_gone", "")
        .replace(&mysql::url(), &server.url())
        .replace("leaseMs: 5000", "leaseMs: 2000")
        .replace("commandTimeoutMs: 2000", "commandTimeoutMs: 1000");
    the_reader_renews_after_a_writer_came_and_went(&config, &offset);
}

/// The same reader checks `renew()` at once after the step, while the
/// writer still holds the key: refused, `LEASE_LOST` (810f570). But a
/// renewal refused for a live holder leaves the row live (before
/// 810f570 a refusal meant the row had expired, for good on a clock that
/// does not step back), and the lease stays renewable after a
/// `LEASE_LOST`: once the writer releases, the reader's next renewal is
/// granted and the lease is valid again, a writer having held the key
/// inside its section.
fn the_reader_told_lost_is_renewed_once_the_writer_released(config: &str, offset: &Path) {
    let (_providers, a, writer) = a_writer_granted_after_a_reader_s_lease_ran_out(config);
    std::fs::write(offset, "-5\n").unwrap();
    std::thread::sleep(Duration::from_millis(100));
    let first = block_on(a.renew());
    assert!(matches!(first, Ok(false)), "the reader beside the writer: {first:?}");
    let writer_fence = writer.fence();
    assert!(block_on(writer.release()).unwrap());

    let again = block_on(a.renew());
    let _ = std::fs::remove_file(offset);
    assert!(
        !matches!(again, Ok(true)),
        "the reader (fence {}) told LEASE_LOST beside the writer (fence {writer_fence}) was renewed once the writer released: \
         {again:?}; reader valid {}",
        a.fence(),
        a.is_valid()
    );
}

#[test]
fn postgres_a_lease_told_lost_beside_a_holder_stays_lost_once_the_holder_released() {
    let (server, offset) = with_a_clock_to_step("postgres-again", || pg_server::PrivateServer::start("r5-again", &[]));
    let config = postgres::yaml_on(&server.url(), "r5_again", "        leaseMs: 2000\n", "")
        .replace("commandTimeoutMs: 2000", "commandTimeoutMs: 1000");
    the_reader_told_lost_is_renewed_once_the_writer_released(&config, &offset);
}

#[test]
fn mysql_a_lease_told_lost_beside_a_holder_stays_lost_once_the_holder_released() {
    let (server, offset) = with_a_clock_to_step("mysql-again", || mysql_server::PrivateServer::start(&[]));
    let config = mysql::yaml("r5_again", "")
        .replace(&mysql::url(), &server.url())
        .replace("leaseMs: 5000", "leaseMs: 2000")
        .replace("commandTimeoutMs: 2000", "commandTimeoutMs: 1000");
    the_reader_told_lost_is_renewed_once_the_writer_released(&config, &offset);
}

/// A reader whose lease ran out (no grant since: nothing marked its row
/// dead) asks `renew()` and is told `LEASE_LOST`; then the server's clock
/// steps back 5 s, and its row would be live again on that clock. The
/// refused renewal marked it dead: the next renewal is refused too, so a
/// lease told lost stays lost.
fn the_reader_told_its_lease_ran_out_stays_lost_after_a_backward_step(config: &str, offset: &Path) {
    let provider = Provider::from_yaml(config).unwrap();
    let a = block_on(provider.backend("shared").unwrap().acquire("k", shared(0))).unwrap();
    std::thread::sleep(Duration::from_millis(2500));
    let first = block_on(a.renew());
    assert!(matches!(first, Ok(false)), "the reader whose lease ran out: {first:?}");
    std::fs::write(offset, "-5\n").unwrap();
    std::thread::sleep(Duration::from_millis(100));

    let again = block_on(a.renew());
    let _ = std::fs::remove_file(offset);
    assert!(
        !matches!(again, Ok(true)),
        "the reader (fence {}) told LEASE_LOST when its lease ran out was renewed after the clock stepped back: {again:?}; reader valid {}",
        a.fence(),
        a.is_valid()
    );
}

#[test]
fn postgres_a_lease_told_it_ran_out_stays_lost_after_a_backward_step() {
    let (server, offset) = with_a_clock_to_step("postgres-ran-out", || pg_server::PrivateServer::start("r5-ran-out", &[]));
    let config = postgres::yaml_on(&server.url(), "r5_ran_out", "        leaseMs: 2000\n", "")
        .replace("commandTimeoutMs: 2000", "commandTimeoutMs: 1000");
    the_reader_told_its_lease_ran_out_stays_lost_after_a_backward_step(&config, &offset);
}

#[test]
fn mysql_a_lease_told_it_ran_out_stays_lost_after_a_backward_step() {
    let (server, offset) = with_a_clock_to_step("mysql-ran-out", || mysql_server::PrivateServer::start(&[]));
    let config = mysql::yaml("r5_ran_out", "")
        .replace(&mysql::url(), &server.url())
        .replace("leaseMs: 5000", "leaseMs: 2000")
        .replace("commandTimeoutMs: 2000", "commandTimeoutMs: 1000");
    the_reader_told_its_lease_ran_out_stays_lost_after_a_backward_step(&config, &offset);
}

/// What a give-back counts of a row marked dead: a lease that expired is
/// not released (a retry of its give-back answers 0, as before rows were
/// marked: the caller hears its lease was lost, not released), and a
/// release marked nothing dead (a retry still counts it). Key `k` as a
/// grant finds it: slot 0 released, slot 1 token `old`, expired.
#[test]
fn postgres_a_row_marked_dead_is_not_counted_as_released_and_a_release_is() {
    let schema = postgres::Schema::fresh();
    let provider = schema.open("");
    assert!(block_on(block_on(provider.backend("shared").unwrap().acquire("installed", wait(0))).unwrap().release()).unwrap());
    postgres::batch(&format!(
        "INSERT INTO {} VALUES ('probe', 'k', 1, clock_timestamp() + interval '1 minute');
         INSERT INTO {} (namespace, key, slot, token, shared, lim, weight, expires_at) VALUES
           ('probe', 'k', 0, 'gone', false, 1, 1, '-infinity'),
           ('probe', 'k', 1, 'old', false, 1, 1, clock_timestamp() - interval '1 s');",
        schema.table(""),
        schema.table("_holders"),
    ));
    let call = |function: &str, arguments: &str| {
        postgres::count(&format!("SELECT {}('probe', ARRAY['k'], {arguments})::bigint", schema.table(function)))
    };
    let granted = postgres::count(&format!(
        "SELECT ({}('probe', ARRAY['k'], 'new', false, 1, 1, 60000, 0, 0, 60000, 1000))[1]",
        schema.table("_take")
    ));
    assert_eq!(granted, 1, "the take beside the expired row");
    let old = format!("SELECT count(*) FROM {} WHERE token = 'old' AND expires_at = 'epoch'", schema.table("_holders"));
    assert_eq!(postgres::count(&old), 1, "the grant marked the expired row dead");
    assert_eq!(call("_give_back", "'old', 'c', true, 1000"), 0, "a retried give-back of the expired lease counted it released");
    assert_eq!(call("_renew", "'old', 60000, 1000"), 0, "the dead row was renewed");
    assert_eq!(call("_give_back", "'new', 'c', false, 1000"), 1, "the holder's release");
    assert_eq!(call("_give_back", "'new', 'c', true, 1000"), 1, "a retry of the holder's release");
    block_on(provider.close());
}

#[test]
fn mysql_a_row_marked_dead_is_not_counted_as_released_and_a_release_is() {
    let table = mysql::Table::fresh();
    let provider = Provider::from_yaml(&mysql::yaml(&table.0, "")).unwrap();
    assert!(block_on(block_on(provider.backend("shared").unwrap().acquire("installed", wait(0))).unwrap().release()).unwrap());
    let now = "TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6))";
    mysql::rows(&format!("INSERT INTO `{}` VALUES ('probe', 'k', 1, {now} + 60000000)", table.0));
    mysql::rows(&format!(
        "INSERT INTO `{}_holders` (ns, k, slot, token, shared, lim, weight, expires_at) VALUES ('probe', 'k', 0, 'gone', 0, 1, 1, 0), ('probe', 'k', 1, 'old', 0, 1, 1, {now} - 1000000)",
        table.0
    ));
    let hex: String = "k".bytes().map(|byte| format!("{byte:02x}")).collect();
    let call = |procedure: &str, arguments: &str| {
        mysql::rows(&format!("CALL `{}{procedure}`('probe', '{hex}', {arguments})", table.0))[0][0].clone().unwrap_or_default()
    };
    let granted = call("_take", "'new', 0, 1, 1, 60000, 0, 0, 60000, 1, 2");
    assert!(granted.starts_with("1,"), "the take beside the expired row: {granted}");
    let old = format!("SELECT COUNT(*) FROM `{}_holders` WHERE token = 'old' AND expires_at = 1", table.0);
    assert_eq!(mysql::count(&old), 1, "the grant marked the expired row dead");
    assert_eq!(call("_give_back", "'old', 1, 2"), "0", "a retried give-back of the expired lease counted it released");
    assert_eq!(call("_renew", "'old', 60000, 2"), "0", "the dead row was renewed");
    assert_eq!(call("_give_back", "'new', 0, 2"), "1", "the holder's release");
    assert_eq!(call("_give_back", "'new', 1, 2"), "1", "a retry of the holder's release");
    block_on(provider.close());
}

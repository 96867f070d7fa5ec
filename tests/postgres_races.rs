//! Races between the postgres driver's operations on one key, against the
//! machine's PostgreSQL: an operation is held between its checks and its
//! commit (a slow commit, as a synchronous standby makes one) by a trigger
//! of the test's own schema that waits for an advisory lock the test holds;
//! another operation runs meanwhile; then the first commits. No two
//! holders may come of it, and a renew that answered true was not overtaken.
//! A renew whose session is ended there is sent again, and keeps its lease.

mod postgres;

use std::thread;
use std::time::Duration;

use dokebi_lock::ErrorCode;
use futures::executor::block_on;
use postgres::{backend, count, eventually, url, wait, Schema};
use tokio_postgres::NoTls;

/// A session of the test's own that holds advisory lock `key` until dropped
/// (or [`Gate::open`]): the trigger of [`stall_renewals`] waits for it.
struct Gate {
    runtime: tokio::runtime::Runtime,
    client: tokio_postgres::Client,
    key: i64,
}

impl Gate {
    fn close(key: i64) -> Gate {
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
        let client = runtime.block_on(async {
            let (client, connection) = tokio_postgres::connect(&url(), NoTls).await.unwrap();
            tokio::spawn(connection);
            client.execute("SELECT pg_advisory_lock($1)", &[&key]).await.unwrap();
            client
        });
        Gate { runtime, client, key }
    }

    fn open(&self) {
        self.runtime.block_on(self.client.execute("SELECT pg_advisory_unlock($1)", &[&self.key])).unwrap();
    }
}

/// A key for gate `n`'s advisory lock that no other test uses.
fn gate_key(n: i64) -> i64 {
    0x646f_6b00_0000_0000 | n << 32 | i64::from(std::process::id())
}

/// Makes every renewal of the schema's holder rows (same token, later
/// expiry) wait, after its checks and before its commit, for the gate.
fn stall_renewals(schema: &Schema, gate: i64) {
    postgres::batch(&format!(
        "CREATE FUNCTION {s}.stall() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_advisory_xact_lock({gate}); RETURN NEW; END $$;
         CREATE TRIGGER stall BEFORE UPDATE ON {holders} FOR EACH ROW
           WHEN (OLD.token = NEW.token AND NEW.expires_at > OLD.expires_at) EXECUTE FUNCTION {s}.stall();",
        s = schema.0,
        holders = schema.table("_holders"),
    ));
}

/// Sessions of `application` waiting for the gate (an advisory lock).
fn stalled(application: &str) -> i64 {
    count(&format!(
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = '{application}' AND wait_event_type = 'Lock' \
         AND wait_event = 'advisory'"
    ))
}

/// True once the holder row's committed expiry has passed on the server's clock.
fn expired(schema: &Schema) -> bool {
    count(&format!("SELECT count(*) FROM {} WHERE expires_at > clock_timestamp()", schema.table("_holders"))) == 0
}

/// Sessions of `application` waiting for a row or transaction lock.
fn blocked(application: &str) -> i64 {
    count(&format!(
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = '{application}' AND wait_event_type = 'Lock' \
         AND wait_event IN ('transactionid', 'tuple')"
    ))
}

/// The YAML of a backend whose connection is named `application` on the server.
fn open(schema: &Schema, application: &str, backend: &str) -> dokebi_lock::Provider {
    let url = format!("{}?application_name={application}", url());
    let yaml =
        postgres::yaml_on(&url, &schema.0, backend, "        commandTimeoutMs: 7900\n").replace("        commandTimeoutMs: 2000\n", "");
    dokebi_lock::Provider::from_yaml(&yaml).unwrap()
}

#[test]
fn a_renew_that_commits_after_its_lease_ended_is_never_overtaken_by_a_takeover() {
    let schema = Schema::fresh();
    let application = format!("dl_taker_{}", std::process::id());
    let holder = format!("dl_holder_{}", std::process::id());
    let (a, b) = (open(&schema, &holder, "        leaseMs: 8000\n"), open(&schema, &application, "        leaseMs: 8000\n"));
    let lease = block_on(backend(&a).acquire("k", wait(0))).unwrap();
    let gate = Gate::close(gate_key(1));
    stall_renewals(&schema, gate.key);
    // Half way through the lease: the renew stalls about 4 s (more under
    // load), its command timeout is 7.9 s and its lock wait 5.9 s (with a
    // 6 s lease and a 3.75 s lock wait, a loaded CI run saw the stalled
    // renew refused).
    thread::sleep(Duration::from_secs(4));
    let renewing = thread::spawn(move || {
        let renewed = block_on(lease.renew());
        (lease, renewed)
    });
    eventually("the renew stalls before its commit", || stalled(&holder) == 1);
    eventually("the lease ends on the server's clock (as committed)", || expired(&schema));
    // Another process tries the key while the renew is in flight: it is
    // either refused or waits behind the renew.
    let taker = backend(&b);
    let taking = thread::spawn(move || block_on(taker.acquire("k", wait(0))));
    eventually("the taker is answered or waits for a row the renew holds", || taking.is_finished() || blocked(&application) == 1);
    gate.open();
    let (lease, renewed) = renewing.join().unwrap();
    let renewed = renewed.unwrap();
    let taken = taking.join().unwrap();
    assert!(
        !(renewed && taken.is_ok()),
        "the renew answered true and another process was granted the key: two holders (renewed {renewed}, taker {:?})",
        taken.as_ref().map(|lease| lease.fence())
    );
    if renewed {
        assert_eq!(taken.unwrap_err().code(), ErrorCode::LockBusy);
        assert!(block_on(lease.release()).unwrap());
    }
    block_on(a.close());
    block_on(b.close());
}

#[test]
fn the_retention_clean_up_never_deletes_a_key_whose_renew_is_committing() {
    let schema = Schema::fresh();
    let application = format!("dl_cleaner_{}", std::process::id());
    let backend_lines = "        leaseMs: 8000\n        fenceRetentionMs: 1\n";
    let holder = format!("dl_renewer_{}", std::process::id());
    let (a, b) = (open(&schema, &holder, backend_lines), open(&schema, &application, backend_lines));
    let lease = block_on(backend(&a).acquire("k", wait(0))).unwrap();
    let gate = Gate::close(gate_key(2));
    stall_renewals(&schema, gate.key);
    // Half way through the lease: the renew stalls about 4 s (more under
    // load), its command timeout is 7.9 s and its lock wait 5.9 s (with a
    // 6 s lease and a 3.75 s lock wait, a loaded CI run saw the stalled
    // renew refused).
    thread::sleep(Duration::from_secs(4));
    let renewing = thread::spawn(move || {
        let renewed = block_on(lease.renew());
        (lease, renewed)
    });
    eventually("the renew stalls before its commit", || stalled(&holder) == 1);
    eventually("the lease ends on the server's clock (as committed)", || expired(&schema));
    // Another key's release runs the clean-up, which finds k's row past its
    // retention and its holder (as committed) expired.
    let other = block_on(backend(&b).acquire("other", wait(0))).unwrap();
    let releasing = thread::spawn(move || block_on(other.release()));
    eventually("the release is answered or waits for a row the renew holds", || releasing.is_finished() || blocked(&application) == 1);
    gate.open();
    let (lease, renewed) = renewing.join().unwrap();
    let renewed = renewed.unwrap();
    assert!(releasing.join().unwrap().unwrap());
    let taken = block_on(backend(&b).acquire("k", wait(0)));
    assert!(
        !(renewed && taken.is_ok()),
        "the renew answered true, the clean-up deleted the key and another process was granted it: two holders"
    );
    if renewed {
        assert_eq!(taken.unwrap_err().code(), ErrorCode::LockBusy);
        assert!(block_on(lease.release()).unwrap());
    }
    block_on(a.close());
    block_on(b.close());
}

/// A renewal whose session is ended under it (an administrator's
/// `pg_terminate_backend`, a pooler's or a failover tool's) is sent again
/// on another connection, as a release is: the intact lease is kept, not
/// given up as `OUTCOME_UNKNOWN`. Ended here after its checks and
/// before its commit, held by the gate. The retry is safe whatever the
/// first attempt did: it extends only the live rows of the lease's token.
#[test]
fn a_renew_whose_session_ends_under_it_is_sent_again_and_keeps_the_lease() {
    let schema = Schema::fresh();
    let holder = format!("dl_ended_renewer_{}", std::process::id());
    let provider = open(&schema, &holder, "");
    let lease = block_on(backend(&provider).acquire("k", wait(0))).unwrap();
    let gate = Gate::close(gate_key(3));
    stall_renewals(&schema, gate.key);
    let renewing = thread::spawn(move || {
        let renewed = block_on(lease.renew());
        (lease, renewed)
    });
    eventually("the renew stalls before its commit", || stalled(&holder) == 1);
    let pid = count(&format!("SELECT pid::bigint FROM pg_stat_activity WHERE application_name = '{holder}' AND wait_event = 'advisory'"));
    assert_eq!(count(&format!("SELECT count(pg_terminate_backend({pid}))")), 1);
    // Gone before the gate opens: the first attempt never commits.
    eventually("the renew's session ended", || count(&format!("SELECT count(*) FROM pg_stat_activity WHERE pid = {pid}")) == 0);
    gate.open();
    let (lease, renewed) = renewing.join().unwrap();
    assert!(matches!(renewed, Ok(true)), "the renew whose session ended: {:?}", renewed.map_err(|err| (err.code(), err.to_string())));
    let other = open(&schema, &format!("dl_other_{}", std::process::id()), "");
    assert_eq!(block_on(backend(&other).acquire("k", wait(0))).unwrap_err().code(), ErrorCode::LockBusy);
    assert!(block_on(lease.release()).unwrap());
    block_on(provider.close());
    block_on(other.close());
}

/// A statement the driver stopped waiting for is cancelled on the server,
/// not left running behind the caller's OUTCOME_UNKNOWN.
#[test]
fn a_statement_that_ran_out_of_time_is_cancelled_on_the_server() {
    let schema = Schema::fresh();
    let application = format!("dl_slow_{}", std::process::id());
    let url = format!("{}?application_name={application}", url());
    let provider = dokebi_lock::Provider::from_yaml(&postgres::yaml_on(&url, &schema.0, "", "")).unwrap();
    let lease = block_on(backend(&provider).acquire("k", wait(0))).unwrap();
    // Every renewal sleeps a minute before its commit.
    postgres::batch(&format!(
        "CREATE FUNCTION {s}.slow() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_sleep(60); RETURN NEW; END $$;
         CREATE TRIGGER slow BEFORE UPDATE ON {holders} FOR EACH ROW
           WHEN (OLD.token = NEW.token AND NEW.expires_at > OLD.expires_at) EXECUTE FUNCTION {s}.slow();",
        s = schema.0,
        holders = schema.table("_holders"),
    ));
    assert_eq!(block_on(lease.renew()).unwrap_err().code(), ErrorCode::OutcomeUnknown);
    eventually("the renewal stopped running on the server", || {
        count(&format!("SELECT count(*) FROM pg_stat_activity WHERE application_name = '{application}' AND wait_event = 'PgSleep'")) == 0
    });
    postgres::batch(&format!("DROP TRIGGER slow ON {}", schema.table("_holders")));
    block_on(provider.close());
}

/// A renew or a release stuck behind another session's row lock is refused
/// by the server (`lock_timeout`, nothing done: PROVIDER_FAILED) before the
/// driver stops waiting for it, as a take is.
#[test]
fn a_renew_or_release_behind_a_row_lock_is_provider_failed_not_outcome_unknown() {
    let schema = Schema::fresh();
    let provider = schema.open("");
    let lease = block_on(backend(&provider).acquire("k", wait(0))).unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let blocker = runtime.block_on(async {
        let (client, connection) = tokio_postgres::connect(&url(), NoTls).await.unwrap();
        tokio::spawn(connection);
        client
    });
    runtime
        .block_on(blocker.batch_execute(&format!(
            "BEGIN; SELECT 1 FROM {} FOR UPDATE; SELECT 1 FROM {} FOR UPDATE;",
            schema.table(""),
            schema.table("_holders")
        )))
        .unwrap();
    assert_eq!(block_on(lease.renew()).unwrap_err().code(), ErrorCode::ProviderFailed, "renew");
    assert_eq!(block_on(lease.release()).unwrap_err().code(), ErrorCode::ProviderFailed, "release");
    runtime.block_on(blocker.batch_execute("COMMIT")).unwrap();
    // The release is tried again by the lease layer: the key comes free.
    let next = block_on(backend(&provider).acquire("k", wait(10_000))).unwrap();
    assert!(next.fence() > lease.fence());
    assert!(block_on(next.release()).unwrap());
    block_on(provider.close());
}

//! What the second adversarial review of the postgres driver (functions 6)
//! found: each test is a way it found to get two holders of a key, or a
//! fence not above an earlier one of the same key, against the machine's
//! PostgreSQL. Each failed before its fix (a take reads the clock once its
//! key rows are locked; a driver of functions 5 cannot install its own over
//! 6's) and must go on passing.
//!
//! Each provider stands for a process (its own connection).

mod postgres;

use std::thread;
use std::time::{Duration, Instant};

use futures::executor::block_on;
use postgres::wait;
use postgres::Schema;

/// A session of the test's own on the shared server, on a runtime of its own.
struct Session {
    runtime: tokio::runtime::Runtime,
    client: tokio_postgres::Client,
}

impl Session {
    fn open() -> Session {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let client = runtime.block_on(async {
            let (client, connection) = tokio_postgres::connect(&postgres::url(), tokio_postgres::NoTls).await.unwrap();
            tokio::spawn(connection);
            client
        });
        Session { runtime, client }
    }

    fn batch(&self, sql: &str) {
        self.runtime.block_on(self.client.batch_execute(sql)).unwrap();
    }
}

/// Waits until some session of the server waits for a row lock
/// (`wait_event_type = 'Lock'`) in a call of `function`.
fn until_a_call_waits_for_a_lock(function: &str) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let waiting = postgres::count(&format!(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%{function}%' AND pid <> pg_backend_pid()"
        ));
        if waiting > 0 {
            return;
        }
        assert!(Instant::now() < deadline, "no call of {function} waits for a lock");
        thread::sleep(Duration::from_millis(5));
    }
}

/// `take` reads the server's clock (its `now_ts` and the `clock_us` a
/// fence is raised to) when it starts, before it waits for its keys' row
/// locks. A request for `["a", "k"]` that waits for `a` longer than
/// `fenceRetentionMs` (here `a`'s row lock is held by another session, as
/// a grant of `a` whose commit waits for a slow WAL flush or a synchronous
/// standby holds it) meanwhile lets another process take and release `k`,
/// and a release's clean-up delete `k`'s row (its retention passed, nothing
/// holds or waits for it: the waiting request has not reached `k` yet).
/// The request then finds no row for `k`, inserts one with counter 0, and
/// is granted `k` with the fence `max(1, clock at its start)`: below the
/// fence the other process was granted after that start. The server's
/// clock never stepped back; `fenceRetentionMs` (50 ms) is within its
/// range (1 and up) and below the lock timeout (1.5 s here).
#[test]
fn postgres_a_take_waiting_for_its_first_key_is_never_granted_a_lower_fence_on_the_next() {
    let schema = Schema::fresh();
    let yaml = schema.yaml("        fenceRetentionMs: 50\n", "");
    let (waiter, other) = (dokebi_lock::Provider::from_yaml(&yaml).unwrap(), dokebi_lock::Provider::from_yaml(&yaml).unwrap());
    let on_other = postgres::backend(&other);
    // The tables, and a row for a.
    let lease = block_on(on_other.acquire("a", wait(0))).unwrap();
    block_on(lease.release()).unwrap();
    let blocker = Session::open();
    blocker.batch(&format!("BEGIN; SELECT 1 FROM {} WHERE key = 'a' FOR UPDATE", schema.table("")));
    let waiting = {
        let on_waiter = postgres::backend(&waiter);
        thread::spawn(move || {
            let lease = block_on(on_waiter.acquire_many(&["a", "k"], wait(5000))).expect("granted a and k once a's row is free");
            let fence = lease.fences().iter().find(|(key, _)| *key == "k").unwrap().1;
            (lease, fence)
        })
    };
    until_a_call_waits_for_a_lock("_take");
    // Another process takes and releases k after the request started.
    let earlier = block_on(on_other.acquire("k", wait(0))).expect("k is free");
    let earlier_fence = earlier.fence();
    block_on(earlier.release()).unwrap();
    // Past k's retention, a release's clean-up deletes k's row.
    let mut rounds = 0;
    while postgres::count(&format!("SELECT count(*) FROM {} WHERE key = 'k'", schema.table(""))) > 0 {
        rounds += 1;
        assert!(rounds < 50, "k's row is never cleaned up");
        thread::sleep(Duration::from_millis(20));
        let lease = block_on(on_other.acquire(&format!("z{rounds}"), wait(0))).unwrap();
        block_on(lease.release()).unwrap();
    }
    blocker.batch("COMMIT");
    let (lease, fence) = waiting.join().unwrap();
    eprintln!("k: granted {earlier_fence} to the other process, then {fence} to the request that waited for a");
    assert!(
        fence > earlier_fence,
        "k's fence went back: {fence} granted after {earlier_fence} (the request read its clock before it waited for a)"
    );
    block_on(lease.release()).unwrap();
    block_on(waiter.close());
    block_on(other.close());
}

/// A process of the previous release (functions 5) starting on a table
/// that functions 6 serve. Its check wants the take function's comment to
/// read `dokebi-lock functions 5`, so it finds the functions "missing" and
/// runs its own `create_sql`, which put every function of 5 over 6's of the
/// same signature, among them the 4-argument `renew` that does not lock the
/// key row (review finding). Now that install is refused (6's take names a
/// parameter differently, which `CREATE OR REPLACE` cannot change) and 6's
/// functions stay.
///
/// Then the race functions 6 closed stays closed: the old process renews,
/// through 5's signature, with 300 ms of its lease left, its commit slowed
/// (a trigger sleeping in its transaction, as a slow WAL flush or a
/// synchronous standby holds the row lock), and a process of 6 tries the
/// key once the store's expiry passed: it waits for the renewal's key row,
/// and never both hold.
#[test]
fn postgres_a_driver_of_functions_5_starting_never_reopens_the_renewal_race() {
    let schema = Schema::fresh();
    let yaml = schema.yaml("        leaseMs: 3000\n", "");
    let taker = dokebi_lock::Provider::from_yaml(&yaml).unwrap();
    let on_taker = postgres::backend(&taker);
    let lease = block_on(on_taker.acquire("x", wait(0))).unwrap();
    block_on(lease.release()).unwrap();
    let version = |schema: &Schema| {
        postgres::rows(&format!(
            "SELECT obj_description(p.oid, 'pg_proc') FROM pg_proc p WHERE p.oid = '{}'::regproc",
            schema.table("_take")
        ))[0]
            .get::<_, String>(0)
    };
    assert_eq!(version(&schema), "dokebi-lock functions 14");
    // The old process starts: what its ensure() runs, one transaction,
    // refused (6's take has a parameter name 5's cannot replace), so 6's
    // functions stay, its renew among them.
    let old = Session::open();
    let install = include_str!("postgres/functions5.sql").replace("__SCHEMA__", &schema.0);
    let refused = old.runtime.block_on(old.client.batch_execute(&install)).expect_err("the old driver's install is refused");
    assert!(refused.to_string().contains("parameter") || format!("{refused:?}").contains("parameter"), "{refused:?}");
    assert_eq!(version(&schema), "dokebi-lock functions 14", "the old install left the current functions");
    // The old process holds k, through the calls of functions 5 (6 keeps
    // their signatures).
    let granted: Vec<i64> = old
        .runtime
        .block_on(old.client.query_one(
            &format!("SELECT {}('dokebi-lock', ARRAY['k'], 'old-holder', false, 1, 1, 3000, 0, 0, 600000, 1500)", schema.table("_take")),
            &[],
        ))
        .unwrap()
        .get(0);
    assert_eq!(granted[0], 1, "the old process is granted k: {granted:?}");
    postgres::batch(&format!(
        "CREATE FUNCTION {s}.slow_commit() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_sleep(0.7); RETURN NEW; END $$;
         CREATE TRIGGER slow_commit AFTER UPDATE ON {s}.dokebi_lock_holders FOR EACH ROW
           WHEN (OLD.token = NEW.token AND NEW.expires_at > OLD.expires_at) EXECUTE FUNCTION {s}.slow_commit();",
        s = schema.0
    ));
    let store_left_ms = || {
        postgres::count(&format!(
            "SELECT (extract(epoch FROM expires_at - clock_timestamp()) * 1000)::bigint FROM {} WHERE key = 'k'",
            schema.table("_holders")
        ))
    };
    let mut left = store_left_ms();
    while left > 300 {
        thread::sleep(Duration::from_millis(5));
        left = store_left_ms();
    }
    let renew = format!("SELECT {}('dokebi-lock', ARRAY['k'], 'old-holder', 3000)", schema.table("_renew"));
    let renewing = thread::spawn(move || -> i32 { old.runtime.block_on(old.client.query_one(&renew, &[])).unwrap().get(0) });
    thread::sleep(Duration::from_millis(left as u64 + 100));
    let taken = block_on(on_taker.acquire("k", wait(0)));
    let renewed = renewing.join().unwrap();
    let tokens = postgres::count(&format!(
        "SELECT count(*) FROM {} WHERE key = 'k' AND token = 'old-holder' AND expires_at > clock_timestamp()",
        schema.table("_holders")
    ));
    eprintln!(
        "renewed {renewed}; taker {:?}; live rows of the old holder: {tokens}",
        taken.as_ref().map(|lease| lease.fence()).map_err(|err| err.code())
    );
    assert!(
        !(renewed == 1 && taken.is_ok()),
        "two holders of k: the old process's renewal answered 1 (its lease runs 3 s more) and a process of functions 6 was granted k"
    );
    drop(taken);
    block_on(taker.close());
}

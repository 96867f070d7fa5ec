//! Review R4 of the policy driver: ways its promises (docs/policy.md, issue
//! 51) break, each against a real store. Every test here failed on work/h3.

mod postgres;
mod support;

use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use dokebi_lock::{AcquireOptions, ErrorCode, Lease, Provider};
use futures::executor::block_on;
use support::redis_server::RedisServer;
use support::{eventually, wait};

fn served_by(lease: &Lease) -> String {
    lease.served().expect("a policy lease").member.name.clone()
}

fn dir(name: &str) -> String {
    let dir = std::env::temp_dir().join(format!("dokebi-policy-review-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir.display().to_string()
}

/// A private Redis (`cache`) and a file directory (`host`) under a policy
/// `locks` whose default rule falls back from Redis to the files.
fn redis_then_files(redis: &RedisServer, name: &str) -> Provider {
    let text = format!(
        "schemaVersion: 1\noptions:\n  dokebi-redis:\n    connections:\n      main: {{ url: '{}', connectTimeoutMs: 300, commandTimeoutMs: 300 }}\n  dokebi-lock:\n    backends:\n      cache: {{ driver: redis, connection: main, namespace: review, leaseMs: 30000 }}\n      host: {{ driver: file, directory: '{}' }}\n      locks:\n        driver: policy\n        waitTimeoutMs: 5000\n        default: {{ backends: [cache, host], minTier: host, onUnavailable: fallBack }}\n",
        redis.url(),
        dir(name)
    );
    Provider::from_yaml(&text).unwrap()
}

/// A counted lease of both units of a key of limit 2 (a kinds lease, which
/// hands its units to this process's next waiter when released).
fn all_units(ms: u64) -> AcquireOptions {
    AcquireOptions { limit: Some(2), weight: Some(2), ..wait(ms) }
}

/// A waiter that Redis's release hands the key to, in a call whose answer
/// is lost (Redis frozen), may hold the key on Redis: its outcome there is
/// unknown. When its own next try then cannot reach Redis
/// (`PROVIDER_FAILED`), the policy must not start it on the files: the
/// store may grant it on Redis (the frozen hand-over runs when Redis
/// thaws), and the policy has then begun on a second member an acquire
/// whose outcome on the first was unknown.
#[test]
fn a_waiter_whose_hand_over_went_unanswered_never_starts_on_the_fallback() {
    let redis = RedisServer::start();
    let provider = redis_then_files(&redis, "hand-over");
    let locks = provider.backend("locks").unwrap();
    // Once answered, so that Redis has the hand-over script (a first
    // EVALSHA is refused with NOSCRIPT, and would not grant).
    let held = block_on(locks.acquire("report:0", all_units(0))).unwrap();
    let waiting = locks.clone();
    let waiter = thread::spawn(move || block_on(waiting.acquire("report:0", all_units(5_000))));
    eventually("the first waiter waits on Redis", || provider.status()["cache"].waiting == 1);
    assert!(block_on(held.release()).unwrap());
    assert!(block_on(waiter.join().unwrap().unwrap().release()).unwrap());

    let first = block_on(locks.acquire("report:1", all_units(0))).unwrap();
    assert_eq!(served_by(&first), "cache");
    let first_fence = first.fence();
    let waiting = locks.clone();
    let waiter = thread::spawn(move || block_on(waiting.acquire("report:1", all_units(5_000))));
    // Queued in this process, behind the held units.
    eventually("the second acquire waits on Redis", || provider.status()["cache"].waiting == 1);

    redis.pause();
    // The release hands both units to the waiter in one script call, which
    // Redis never answers: the waiter's outcome on Redis is now unknown.
    let released = block_on(first.release());
    assert_eq!(released.unwrap_err().code(), ErrorCode::OutcomeUnknown);
    let outcome = waiter.join().unwrap();
    redis.resume();
    // Redis runs the frozen calls it had read.
    thread::sleep(Duration::from_millis(200));
    match outcome {
        Ok(lease) => panic!(
            "the waiter was served by {} although Redis may have granted it (the hand-over to it went unanswered); Redis after the thaw (the released lease's fence was {first_fence}): {:?}",
            served_by(&lease),
            dump(&redis)
        ),
        Err(error) => assert_eq!(error.code(), ErrorCode::OutcomeUnknown, "{error}"),
    }
    block_on(provider.close());
}

/// The same through the machine's PostgreSQL: the release's hand-over to
/// the waiter is cut off by the end of its session (an administrator's
/// `pg_terminate_backend`: `OUTCOME_UNKNOWN`), and the waiter's own next
/// try is refused (its key row is locked past `lock_timeout` by another
/// session: `PROVIDER_FAILED` then, a busy key since). The policy moved it
/// to the files.
#[test]
fn a_waiter_whose_postgres_hand_over_went_unanswered_never_starts_on_the_fallback() {
    let schema = postgres::Schema::fresh();
    let text = format!(
        "schemaVersion: 1\noptions:\n  dokebi-postgres:\n    connections:\n      main: {{ url: '{}?application_name=r4_hand_over', commandTimeoutMs: 1000 }}\n  dokebi-lock:\n    backends:\n      db: {{ driver: postgres, connection: main, schema: {}, leaseMs: 30000, pollIntervalMs: 20000, notifyPollIntervalMs: 20000 }}\n      host: {{ driver: file, directory: '{}' }}\n      locks:\n        driver: policy\n        waitTimeoutMs: 8000\n        default: {{ backends: [db, host], minTier: host, onUnavailable: fallBack }}\n",
        postgres::url(),
        schema.0,
        dir("postgres-hand-over")
    );
    let provider = Provider::from_yaml(&text).unwrap();
    let locks = provider.backend("locks").unwrap();
    let first = block_on(locks.acquire("report:1", all_units(0))).unwrap();
    assert_eq!(served_by(&first), "db");
    let waiting = locks.clone();
    let waiter = thread::spawn(move || block_on(waiting.acquire("report:1", all_units(8_000))));
    eventually("the second acquire waits on PostgreSQL", || provider.status()["db"].waiting == 1);

    // Another session holds the key's row, so the hand-over waits for it.
    let (done, hold) = mpsc::channel::<()>();
    let (has_locked, locked) = mpsc::channel::<()>();
    let table = schema.table("");
    let holder = thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let client = runtime.block_on(async {
            let (client, connection) = tokio_postgres::connect(&postgres::url(), tokio_postgres::NoTls).await.unwrap();
            tokio::spawn(connection);
            client.batch_execute(&format!("BEGIN; SELECT 1 FROM {table} WHERE key = 'report:1' FOR UPDATE")).await.unwrap();
            client
        });
        has_locked.send(()).unwrap();
        let _ = hold.recv();
        runtime.block_on(client.batch_execute("ROLLBACK")).unwrap();
    });
    locked.recv().unwrap();
    let releasing = thread::spawn(move || block_on(first.release()));
    let blocked = "FROM pg_stat_activity WHERE application_name = 'r4_hand_over' AND wait_event_type = 'Lock'";
    postgres::eventually("the hand-over waits for the row", || postgres::count(&format!("SELECT count(*) {blocked}")) == 1);
    assert_eq!(postgres::count(&format!("SELECT count(pg_terminate_backend(pid)) {blocked}")), 1);
    assert_eq!(releasing.join().unwrap().unwrap_err().code(), ErrorCode::OutcomeUnknown);
    let outcome = waiter.join().unwrap();
    done.send(()).unwrap();
    holder.join().unwrap();
    match outcome {
        Ok(lease) => panic!("the waiter was served by {} although its hand-over on PostgreSQL went unanswered", served_by(&lease)),
        // Its own tries meet the locked row: the key is busy (a row lock
        // is contention, not an outage), so the wait runs out; or the store
        // failed after the unanswered call: the outcome is unknown. Never
        // a fallback.
        Err(error) => assert!(matches!(error.code(), ErrorCode::WaitTimeout | ErrorCode::OutcomeUnknown), "{error}"),
    }
    block_on(provider.close());
}

/// Every key of `redis` with its value (strings, hashes, sorted sets).
fn dump(redis: &RedisServer) -> Vec<(String, String)> {
    let mut client = redis.client();
    redis
        .keys()
        .into_iter()
        .map(|key| {
            let kind: String = redis::cmd("TYPE").arg(&key).query(&mut client).unwrap();
            let value: redis::Value = match kind.as_str() {
                "string" => redis::cmd("GET").arg(&key).query(&mut client).unwrap(),
                "hash" => redis::cmd("HGETALL").arg(&key).query(&mut client).unwrap(),
                "zset" => redis::cmd("ZRANGE").arg(&key).arg(0).arg(-1).arg("WITHSCORES").query(&mut client).unwrap(),
                _ => redis::Value::Nil,
            };
            (key, format!("{kind} {value:?}"))
        })
        .collect()
}

/// A wait the member backends take as "as long as it takes" (the store and
/// local drivers bound `Instant + wait` with `checked_add`) panics in the
/// policy, which adds it to `Instant::now()` unchecked.
#[test]
fn a_policy_acquire_takes_any_wait_its_members_take() {
    let redis = RedisServer::start();
    let provider = redis_then_files(&redis, "long-wait");
    let cache = provider.backend("cache").unwrap();
    let forever = AcquireOptions { wait_timeout: Some(Duration::MAX), ..AcquireOptions::default() };
    assert!(block_on(cache.acquire("job:direct", forever.clone())).is_ok());
    let locks = provider.backend("locks").unwrap();
    let outcome = thread::spawn(move || block_on(locks.acquire("job:policy", forever)).map(|lease| served_by(&lease))).join();
    assert_eq!(outcome.expect("the policy's acquire panicked").unwrap(), "cache");
    block_on(provider.close());
}

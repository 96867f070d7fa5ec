//! What the adversarial review of the store layer found (issue 49): each
//! test is a way it found to get two holders of a key, or a fence not above
//! an earlier one, against a real server. Each failed before its fix
//! (renew locking its key rows; a counter expiring `fenceRetentionMs` past
//! its value) and must go on passing.
//!
//! Each provider stands for a process (its own connection).

mod postgres;
mod support;

use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use futures::executor::block_on;
use postgres::Schema;
use support::redis_server::RedisServer;
use support::{open_redis, wait};

/// PostgreSQL, with nothing injected: a renewal sent within a couple of
/// milliseconds before the lease's expiry in the store, and another
/// process's take right after that expiry. The same defect as the test
/// below (`renew` does not lock the key row; the take's snapshot shows the
/// lease expired and its write does not re-check it): here the renewal's
/// commit (its WAL flush) is all the window there is. Stops at the first
/// overlap; on this machine about 4% of the rounds overlapped (8 of 200)
/// before renew locked the key rows: [`ROUNDS`] would find it 9 times in 10
/// (the test below finds it every time).
const ROUNDS: usize = 60;

#[test]
fn postgres_a_renewal_racing_a_take_at_expiry_never_leaves_two_holders() {
    let schema = Schema::fresh();
    let yaml = schema.yaml("        leaseMs: 250\n", "").replace("commandTimeoutMs: 2000", "commandTimeoutMs: 200");
    let (holder, taker) = (dokebi_lock::Provider::from_yaml(&yaml).unwrap(), dokebi_lock::Provider::from_yaml(&yaml).unwrap());
    let (on_holder, on_taker) = (postgres::backend(&holder), postgres::backend(&taker));
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let client = runtime.block_on(async {
        let (client, connection) = tokio_postgres::connect(&postgres::url(), tokio_postgres::NoTls).await.unwrap();
        tokio::spawn(connection);
        client
    });
    let spin_until = |at: Instant| {
        while Instant::now() < at {
            std::hint::spin_loop();
        }
    };
    for round in 0..ROUNDS {
        let key = format!("k{round}");
        // A round whose own acquire fails (a busy machine) proves nothing.
        let Ok(lease) = block_on(on_holder.acquire(&key, wait(0))) else { continue };
        let held = Arc::new(lease);
        let asked = Instant::now();
        let left_us: i64 = runtime
            .block_on(client.query_one(
                &format!(
                    "SELECT (extract(epoch FROM expires_at - clock_timestamp()) * 1000000)::bigint FROM {} WHERE key = '{key}'",
                    schema.table("_holders")
                ),
                &[],
            ))
            .unwrap()
            .get(0);
        let expiry = asked + Duration::from_micros(left_us.max(0) as u64);
        spin_until(expiry - Duration::from_micros((round * 137 % 1500) as u64));
        let renewing = {
            let held = held.clone();
            thread::spawn(move || block_on(held.renew()))
        };
        spin_until(expiry + Duration::from_micros((round * 71 % 800) as u64));
        let taken = block_on(on_taker.acquire(&key, wait(0)));
        let renewed = matches!(renewing.join().unwrap(), Ok(true));
        if let Ok(taken) = &taken {
            assert!(
                !(renewed && held.is_valid() && taken.is_valid()),
                "round {round}: two holders of {key}: the holder's renewal answered true and its lease says valid ({:?} left), and another process was granted the key ({:?} left)",
                held.remaining(),
                taken.remaining()
            );
        }
    }
    block_on(holder.close());
    block_on(taker.close());
}

/// PostgreSQL: a renewal whose commit is still under way (a slow WAL flush,
/// a synchronous standby's acknowledgement) when another process's take
/// reads the holder row.
///
/// `renew` updates the holder row without locking the key row, so a take
/// does not wait for it: the take's snapshot shows the lease expired, it
/// picks that slot, and its `UPDATE ... FROM pick WHERE slot = ...` waits
/// for the renewal's row lock and then overwrites the renewed row (its
/// WHERE does not re-check `expires_at`). The renewal answers 1, so the
/// holder's lease says valid for another `leaseMs`, while the other process
/// holds the key.
///
/// The commit's delay is a trigger on the holders table that sleeps in
/// the renewal's transaction, after its row is written: what a commit
/// waiting for its WAL flush or a synchronous standby does to the row lock.
#[test]
fn postgres_a_renewal_committing_after_a_takes_check_never_leaves_two_holders() {
    let schema = Schema::fresh();
    let yaml = schema.yaml("        leaseMs: 3000\n", "");
    let (holder, taker) = (dokebi_lock::Provider::from_yaml(&yaml).unwrap(), dokebi_lock::Provider::from_yaml(&yaml).unwrap());
    let (on_holder, on_taker) = (postgres::backend(&holder), postgres::backend(&taker));
    let held = Arc::new(block_on(on_holder.acquire("k", wait(0))).expect("the holder is granted k"));
    // A renewal of the same token (only expires_at moves) commits 1.5 s
    // after its row is written.
    postgres::batch(&format!(
        "CREATE FUNCTION {s}.slow_commit() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_sleep(1.5); RETURN NEW; END $$;
         CREATE TRIGGER slow_commit AFTER UPDATE ON {s}.dokebi_lock_holders FOR EACH ROW
           WHEN (OLD.token = NEW.token AND NEW.expires_at > OLD.expires_at) EXECUTE FUNCTION {s}.slow_commit();",
        s = schema.0
    ));
    // The holder renews with at most 600 ms of its lease left in the store
    // (its own estimate, below the store's by the acquire's round trip,
    // says valid: 600 ms leaves a loaded host's polling room to overshoot).
    let store_left_ms = || {
        postgres::count(&format!(
            "SELECT (extract(epoch FROM expires_at - clock_timestamp()) * 1000)::bigint FROM {} WHERE key = 'k'",
            schema.table("_holders")
        ))
    };
    let mut left = store_left_ms();
    while left > 600 {
        thread::sleep(Duration::from_millis(5));
        left = store_left_ms();
    }
    assert!(held.is_valid());
    let renewing = {
        let held = held.clone();
        thread::spawn(move || block_on(held.renew()))
    };
    // The taker tries once the store's expiry has passed, and before the
    // renewal commits (1.5 s after it started).
    let started = Instant::now();
    thread::sleep(Duration::from_millis(left as u64 + 100));
    let taken = block_on(on_taker.acquire("k", wait(0)));
    let renewed = renewing.join().unwrap();
    let holders =
        postgres::count(&format!("SELECT count(*) FROM {} WHERE key = 'k' AND expires_at > clock_timestamp()", schema.table("_holders")));
    eprintln!(
        "renewed {renewed:?} after {:?}; taker: {:?}; live holder rows of k: {holders}",
        started.elapsed(),
        taken.as_ref().map(|lease| lease.fence()).map_err(|err| err.code())
    );
    if let Ok(taken) = &taken {
        assert!(
            !(renewed.as_ref().is_ok_and(|renewed| *renewed) && held.is_valid() && taken.is_valid()),
            "two holders of k: the holder's renewal answered true and its lease says valid ({:?} left), and another process was granted k (fence {})",
            held.remaining(),
            taken.fence()
        );
    }
    drop(taken);
    block_on(holder.close());
    block_on(taker.close());
}

/// Redis: a restart from the AOF brings a key's fence counter back as its
/// reservation (the end of the second of its last fence, kept until that
/// end plus `fenceRetentionMs`). The next grant's fence is above it, up to
/// a second ahead of the server's clock, but the grant writes the counter
/// back with `PX fenceRetentionMs` from now, not from its fence: with a
/// retention under a second the counter lapses while the clock is still
/// below that fence, and the grant after it takes the clock, a fence below
/// the one before. `fenceRetentionMs` promises no repeat while no server
/// has a clock further behind than it; here no clock is behind at all.
#[test]
fn redis_a_short_fence_retention_after_an_aof_restart_never_gives_a_lower_fence() {
    let mut server = RedisServer::start_persistent(&["--appendonly", "yes", "--appendfsync", "always"]);
    let backend_fields = [("leaseMs", "30000"), ("fenceRetentionMs", "50")];
    let grant = |provider: &dokebi_lock::Provider, key: &str| {
        let lease = block_on(provider.backend("shared").unwrap().acquire(key, wait(5_000))).expect("granted");
        assert!(block_on(lease.release()).unwrap());
        lease.fence()
    };
    let clock_us = |server: &RedisServer| {
        let (seconds, micros): (u64, u64) = redis::cmd("TIME").query(&mut server.client()).unwrap();
        seconds * 1_000_000 + micros
    };
    let mut tries = 0;
    loop {
        tries += 1;
        // Early in a second of the server's clock: its end is far ahead.
        while clock_us(&server) % 1_000_000 > 50_000 {
            thread::sleep(Duration::from_millis(2));
        }
        let before = open_redis(&server.url(), &backend_fields, &[]).0;
        let key = format!("k{tries}");
        let first = grant(&before, &key);
        drop(before);
        let reservation = (first / 1_000_000 + 1) * 1_000_000;
        server.stop();
        server.restart();
        let after = open_redis(&server.url(), &backend_fields, &[]).0;
        let second = grant(&after, &key);
        thread::sleep(Duration::from_millis(150));
        let clock = clock_us(&server);
        let third = grant(&after, &key);
        drop(after);
        eprintln!("try {tries}: fences {first}, {second} (reservation {reservation}), {third}");
        if (second <= reservation || clock >= reservation) && tries < 5 {
            // The restart did not bring the reservation back, or the clock
            // passed it first: not the situation under test.
            continue;
        }
        assert!(second > first, "the grant after the restart is above the one before it");
        assert!(third > second, "fence {third} is not above the earlier fence {second} (first {first}): the counter lapsed {}ms after a grant whose fence was ahead of the clock", 50);
        return;
    }
}

/// Redis, two backends of one connection and namespace that differ in
/// `fenceRetentionMs` only: `a` keeps the default (600000), `b` 50 ms. A
/// grant of `b` writes the key's counter with `PX 50` whatever `a`'s grants
/// wrote (Postgres keeps the longer, `greatest(fence_until, ...)`), so `b`
/// shortens `a`'s retention: after a restart from the AOF, `b`'s grant is
/// above the reservation, its counter lapses 50 ms later, and `a`'s next
/// grant takes the clock, below `b`'s fence. With `a` alone its counter
/// would have lived ten minutes.
#[test]
fn redis_a_backend_of_short_retention_on_the_connection_never_lowers_the_other_s_fences() {
    let mut server = RedisServer::start_persistent(&["--appendonly", "yes", "--appendfsync", "always"]);
    let yaml = |url: &str| {
        format!(
            "schemaVersion: 1\noptions:\n  dokebi-redis:\n    connections:\n      main:\n        url: {url}\n  dokebi-lock:\n    backends:\n      a:\n        driver: redis\n        connection: main\n        namespace: test\n        leaseMs: 30000\n      b:\n        driver: redis\n        connection: main\n        namespace: test\n        leaseMs: 30000\n        fenceRetentionMs: 50\n"
        )
    };
    let grant = |provider: &dokebi_lock::Provider, backend: &str, key: &str| {
        let lease = block_on(provider.backend(backend).unwrap().acquire(key, wait(5_000))).expect("granted");
        assert!(block_on(lease.release()).unwrap());
        lease.fence()
    };
    let clock_us = |server: &RedisServer| {
        let (seconds, micros): (u64, u64) = redis::cmd("TIME").query(&mut server.client()).unwrap();
        seconds * 1_000_000 + micros
    };
    let mut tries = 0;
    loop {
        tries += 1;
        while clock_us(&server) % 1_000_000 > 50_000 {
            thread::sleep(Duration::from_millis(2));
        }
        let before = dokebi_lock::Provider::from_yaml(&yaml(&server.url())).unwrap();
        let key = format!("k{tries}");
        let first = grant(&before, "a", &key);
        drop(before);
        let reservation = (first / 1_000_000 + 1) * 1_000_000;
        server.stop();
        server.restart();
        let after = dokebi_lock::Provider::from_yaml(&yaml(&server.url())).unwrap();
        let second = grant(&after, "b", &key);
        thread::sleep(Duration::from_millis(150));
        let clock = clock_us(&server);
        let third = grant(&after, "a", &key);
        drop(after);
        eprintln!("try {tries}: a {first}, b {second} (reservation {reservation}), a {third}");
        if (second <= reservation || clock >= reservation) && tries < 5 {
            continue;
        }
        assert!(third > second, "a's fence {third} is not above b's earlier fence {second}: b's grant cut the counter's life to 50 ms");
        return;
    }
}

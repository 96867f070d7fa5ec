//! The postgres driver through PgBouncer in transaction mode, one server
//! connection for every client (`default_pool_size = 1`): consecutive
//! statements of one client land on whatever server connection is free, so
//! anything kept in a session (a named statement, a session advisory lock,
//! a setting) would break. A private pgbouncer (Debian's, installed by
//! `scripts/setup`) runs in front of the machine's PostgreSQL on a free port.

#[path = "postgres/bouncer.rs"]
mod bouncer;
mod postgres;

use std::thread;

use bouncer::Bouncer;
use dokebi_lock::{AcquireOptions, ErrorCode, LockMode, Provider};
use futures::executor::block_on;
use postgres::{backend, batch, code, count, eventually, wait, Schema};

fn through(bouncer: &Bouncer, schema: &Schema, backend: &str, listen: Option<&str>) -> Provider {
    let connection = listen.map(|url| format!("        listenUrl: '{url}'\n")).unwrap_or_default();
    Provider::from_yaml(&postgres::yaml_on(&bouncer.url(), &schema.0, backend, &connection)).unwrap()
}

#[test]
fn leases_kinds_and_wake_ups_work_through_pgbouncer_in_transaction_mode() {
    let bouncer = Bouncer::start("leases");
    let schema = Schema::fresh();
    let direct = postgres::url();
    // A safety-net poll far longer than the waits: only NOTIFY (sent through
    // the pooler, heard on the direct listener) can wake a waiter.
    let slow = "        notifyPollIntervalMs: 600000\n";
    let (a, b) = (through(&bouncer, &schema, slow, Some(&direct)), through(&bouncer, &schema, slow, Some(&direct)));
    let (one, two) = (backend(&a), backend(&b));
    let held = block_on(one.acquire("k", wait(0))).unwrap();
    assert_eq!(code(block_on(two.acquire("k", wait(0)))), ErrorCode::LockBusy);
    assert!(block_on(held.renew()).unwrap());
    eventually("b listens", || two.status().postgres.unwrap().listening);
    let waiter = {
        let two = two.clone();
        thread::spawn(move || block_on(two.acquire("k", wait(20_000))).map(|lease| lease.fence()))
    };
    eventually("b waits in the table", || {
        count(&format!("SELECT count(*) FROM {} WHERE lapses_at > now()", schema.table("_waiting"))) == 1
    });
    assert!(block_on(held.release()).unwrap());
    let fence = waiter.join().unwrap().expect("woken by the release");
    assert!(fence > held.fence());
    // Readers together, a set of keys all or nothing.
    let shared = AcquireOptions { mode: LockMode::Shared, ..wait(0) };
    let (r1, r2) = (block_on(one.acquire("doc", shared.clone())).unwrap(), block_on(two.acquire("doc", shared)).unwrap());
    assert_eq!(code(block_on(one.acquire_many(&["x", "doc"], wait(0)))), ErrorCode::LockBusy);
    assert!(block_on(r1.release()).unwrap() && block_on(r2.release()).unwrap());
    let set = block_on(one.acquire_many(&["x", "doc"], wait(0))).unwrap();
    // Expired on the server's clock: renew false, release LEASE_LOST.
    batch(&format!("UPDATE {} SET expires_at = clock_timestamp() - interval '1 second'", schema.table("_holders")));
    assert!(!block_on(set.renew()).unwrap());
    assert_eq!(code(block_on(set.release())), ErrorCode::LeaseLost);
    block_on(a.close());
    block_on(b.close());
    let log = bouncer.log();
    assert!(log.contains("login attempt: db=test"), "the statements went through pgbouncer: {log}");
}

/// Waits long enough for `provider`'s listener to connect and probe (it
/// claimed to listen within milliseconds before it probed), or until it
/// says it listens.
fn let_the_listener_probe(provider: &Provider) {
    for _ in 0..200 {
        if backend(provider).status().postgres.unwrap().listening {
            break;
        }
        thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// Behind a pooler with no `listenUrl` a waiter learns that a key is free
/// by polling at `pollIntervalMs`: here the key is freed with no `NOTIFY`
/// at all (its holder row expired by hand, no release), and a waiter that
/// counted on notifications would try again only after its holder's 60 s
/// lease or `notifyPollIntervalMs` (600 s), past its 20 s wait.
#[test]
fn behind_a_pooler_without_a_direct_listener_waiters_are_served_by_polling() {
    let bouncer = Bouncer::start("polling");
    let schema = Schema::fresh();
    let poll = "        leaseMs: 60000\n        notifyPollIntervalMs: 600000\n        pollIntervalMs: 50\n";
    let (a, b) = (through(&bouncer, &schema, poll, None), through(&bouncer, &schema, poll, None));
    let held = block_on(backend(&a).acquire("k", wait(0))).unwrap();
    let waiter = {
        let two = backend(&b);
        thread::spawn(move || block_on(two.acquire("k", wait(20_000))).map(|lease| lease.fence()))
    };
    eventually("b waits", || postgres::counts(&backend(&b)).waiting == 1);
    // A listener that comes up after the key is freed wakes its waiters,
    // as after any reconnection.
    let_the_listener_probe(&b);
    batch(&format!("UPDATE {} SET expires_at = clock_timestamp() - interval '1 second'", schema.table("_holders")));
    assert!(waiter.join().unwrap().expect("granted by a poll") > held.fence());
    assert_eq!(code(block_on(held.release())), ErrorCode::LeaseLost);
    block_on(a.close());
    block_on(b.close());
}

/// Through a pooler with no `listenUrl`, `LISTEN` runs on a server
/// connection the pooler lends to other clients next: notifications are
/// lost. The listener hears its own probe `NOTIFY` or reports that it does
/// not listen, and waiters poll at `pollIntervalMs`.
#[test]
fn behind_a_pooler_without_a_direct_listener_status_says_not_listening_and_waiters_poll() {
    let bouncer = Bouncer::start("not-listening");
    let schema = Schema::fresh();
    // A waiter that believed it listens would retry only after 600 s.
    let lines = "        notifyPollIntervalMs: 600000\n        pollIntervalMs: 50\n";
    let provider = through(&bouncer, &schema, lines, None);
    let holder = schema.open("");
    let held = block_on(backend(&holder).acquire("k", wait(0))).unwrap();
    let_the_listener_probe(&provider);
    let waiter = {
        let waiting = backend(&provider);
        thread::spawn(move || block_on(waiting.acquire("k", wait(20_000))).map(|lease| lease.fence()))
    };
    eventually("the waiter waits", || postgres::counts(&backend(&provider)).waiting == 1);
    assert!(block_on(held.release()).unwrap());
    assert!(waiter.join().unwrap().expect("granted by a poll") > held.fence());
    assert!(!backend(&provider).status().postgres.unwrap().listening, "status says listening through the pooler");
    block_on(provider.close());
    block_on(holder.close());
}

/// Another client of the pooler turned `synchronous_commit` off on the one
/// server connection: a grant through it still commits as the server says.
#[test]
fn a_setting_another_client_of_the_pooler_left_does_not_weaken_a_grant() {
    let bouncer = Bouncer::start("leaked-settings");
    let schema = Schema::fresh();
    let provider = through(&bouncer, &schema, "", Some(&postgres::url()));
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
    postgres::batch_on(&bouncer.url(), "SET synchronous_commit = off");
    assert_eq!(
        postgres::count_on(&bouncer.url(), "SELECT count(*) FROM pg_settings WHERE name = 'synchronous_commit' AND setting = 'off'"),
        1
    );
    let lease = block_on(backend(&provider).acquire("k", wait(0))).unwrap();
    assert!(block_on(lease.renew()).unwrap());
    let seen: Vec<String> = postgres::rows(&format!("SELECT setting FROM {}.seen", schema.0)).iter().map(|row| row.get(0)).collect();
    assert_eq!(seen, ["on", "on"], "the grant, then the renewal");
    assert!(block_on(lease.release()).unwrap());
    block_on(provider.close());
}

/// Another client of the pooler left `default_transaction_isolation` at
/// REPEATABLE READ on the one server connection: the functions, which rely
/// on each statement seeing what committed before it, refuse the call with
/// the setting named rather than run on one snapshot.
#[test]
fn an_isolation_another_client_of_the_pooler_left_is_refused_by_name() {
    let bouncer = Bouncer::start("leaked-isolation");
    let schema = Schema::fresh();
    let provider = through(&bouncer, &schema, "", Some(&postgres::url()));
    assert!(block_on(block_on(backend(&provider).acquire("first", wait(0))).unwrap().release()).unwrap());
    postgres::batch_on(&bouncer.url(), "SET default_transaction_isolation = 'repeatable read'");
    let err = block_on(backend(&provider).acquire("k", wait(0))).unwrap_err();
    assert_eq!(err.code(), ErrorCode::ProviderFailed, "{err}");
    let mut chain = format!("{err}");
    let mut source: Option<&dyn std::error::Error> = std::error::Error::source(&err);
    while let Some(cause) = source {
        chain += &format!(" / {cause:?}");
        source = cause.source();
    }
    assert!(chain.contains("READ COMMITTED"), "{chain}");
    postgres::batch_on(&bouncer.url(), "RESET default_transaction_isolation");
    block_on(provider.close());
}

/// A pooler that gives up on a statement (`query_timeout`; "server conn
/// crashed?" is the same case) answers `FATAL 08P01` and closes both
/// connections, but the server runs the statement on: here a take behind
/// another session's row lock commits its grant a second later. The
/// driver read that FATAL as "refused, nothing done" (`PROVIDER_FAILED`),
/// so a policy moved the key to its next member while the first member's
/// grant to the same acquire stood: the key held on two members at once.
#[test]
fn a_take_the_pooler_gave_up_on_never_moves_the_key_while_its_grant_stands() {
    let bouncer = Bouncer::start_with("query-timeout", "query_timeout = 1\n");
    let schema = Schema::fresh();
    let directory = std::env::temp_dir().join(format!("dokebi-pgbouncer-host-{}", std::process::id()));
    let yaml = format!(
        "schemaVersion: 1\noptions:\n  dokebi-postgres:\n    connections:\n      main: {{ url: '{}', commandTimeoutMs: 5000 }}\n  dokebi-lock:\n    backends:\n      db: {{ driver: postgres, connection: main, schema: {}, leaseMs: 30000 }}\n      host: {{ driver: file, directory: '{}' }}\n      locks:\n        driver: policy\n        default: {{ backends: [db, host], minTier: host, onUnavailable: fallBack }}\n",
        bouncer.url(),
        schema.0,
        directory.display()
    );
    let provider = Provider::from_yaml(&yaml).unwrap();
    // Installed, and the key's row made, before the race.
    assert!(block_on(block_on(provider.backend("db").unwrap().acquire("k", wait(0))).unwrap().release()).unwrap());
    // Another session holds the key's row 2.5 s: past the pooler's 1 s,
    // within the take's lock_timeout (3.75 s).
    let table = schema.table("");
    let holder = thread::spawn(move || {
        postgres::batch(&format!("BEGIN; SELECT 1 FROM {table} WHERE key = 'k' FOR UPDATE; SELECT pg_sleep(2.5); ROLLBACK"))
    });
    eventually("the row is locked", || {
        count("SELECT count(*) FROM pg_stat_activity WHERE query LIKE '%pg_sleep(2.5)%' AND state = 'active' AND pid <> pg_backend_pid()")
            == 1
    });
    let outcome = block_on(provider.backend("locks").unwrap().acquire("k", wait(0)));
    holder.join().unwrap();
    thread::sleep(std::time::Duration::from_millis(500));
    let standing = count(&format!("SELECT count(*) FROM {} WHERE key = 'k' AND expires_at > clock_timestamp()", schema.table("_holders")));
    let served = match &outcome {
        Ok(lease) => lease.served().map_or("?".to_owned(), |served| served.member.name.clone()),
        Err(err) => format!("{:?}", err.code()),
    };
    assert!(
        !(served == "host" && standing > 0),
        "the acquire was served by host while db granted k to it ({standing} live holder row after the pooler's FATAL \
         08P01 was read as PROVIDER_FAILED): the key is held on two members"
    );
    block_on(provider.close());
    let _ = std::fs::remove_dir_all(&directory);
}

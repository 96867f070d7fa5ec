//! Review R49 of `Backend::inspect` after its fixes (870145e), against the
//! real stores: where the read still misreports what the store holds, and
//! what it gets right. Several providers of one store stand for several
//! processes; a child process of this test binary, stopped with SIGSTOP,
//! stands for a process that stalls (a GC pause, a swapped-out host).

mod mysql;
mod postgres;
mod support;

use std::process::{Child, Command, Stdio};
use std::thread;

use dokebi_lock::{ErrorCode, Inspection, LockMode, Provider};
use futures::executor::block_on;
use support::redis_server::RedisServer;
use support::{inspect, open_redis, release, shared, take, wait, within};

/// Polls so slow that a waiter is served by release notifications only
/// (its marks last 2 x 10 s + 1 s).
const SLOW: [(&str, &str); 3] = [("leaseMs", "10000"), ("pollIntervalMs", "10000"), ("notifyPollIntervalMs", "10000")];

fn signal(child: &Child, which: &str) {
    let status = Command::new("kill").arg(format!("-{which}")).arg(child.id().to_string()).status().unwrap();
    assert!(status.success(), "kill -{which}");
}

/// Stops the waiter `child` and lets the server serve what it had sent: a
/// try on the wire when the signal landed would otherwise be served after
/// the next step (a release), and take the key (seen on a loaded host).
/// `kill` returns before the child stops, so this waits for its state to
/// read stopped; the bytes it wrote are then in the server's socket, and
/// the server reads every ready socket before it answers a later `PING`.
fn stop(child: &Child, server: &RedisServer) {
    signal(child, "STOP");
    let stat = format!("/proc/{}/stat", child.id());
    let stopped = || std::fs::read_to_string(&stat).is_ok_and(|s| s.rsplit_once(") ").is_some_and(|(_, rest)| rest.starts_with('T')));
    assert!(within(5000, stopped), "the waiter stops");
    let _: String = redis::cmd("PING").query(&mut server.client()).unwrap();
}

fn get(server: &RedisServer, name: &str) -> Option<String> {
    redis::cmd("GET").arg(name).query(&mut server.client()).unwrap_or(None)
}

// --- The waiter process ----------------------------------------------------

/// Run as a child of a test below (R49_CHILD_URL set): one plain acquire
/// of `k`, waiting, as another process's would; nothing otherwise.
#[test]
fn r49_child_waiter() {
    let Ok(url) = std::env::var("R49_CHILD_URL") else { return };
    let provider = open_redis(&url, &SLOW, &[]).0;
    let lease = take(&provider.backend("shared").unwrap(), "k", wait(60_000));
    eprintln!("child: granted {}", lease.fence());
    release(lease);
}

fn child_waiter(server: &RedisServer) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args(["r49_child_waiter", "--exact", "--nocapture", "--test-threads=1"])
        .env("R49_CHILD_URL", server.url())
        .stdout(Stdio::null())
        .spawn()
        .unwrap()
}

// --- Redis: marks of a token that holds or was handed the key --------------

/// A plain writer T waited behind a reader (its mark in the queue set),
/// then behind a plain holder X that took the key when the reader left
/// (its mark in the waiting set, same ticket): KINDS_WITHDRAW's own doc
/// says such a writer "has marks in each". X's release hands the key to T
/// (`h:T`) and takes T's waiting-set marks only; T's queue mark stays
/// until T takes the key. T's process stalls between the two (SIGSTOP):
/// inspect counts T twice, once for `h:T` and once for its queue mark
/// (`tokens` is not seeded with the handed token).
#[test]
fn redis_a_handed_waiter_with_a_queue_mark_is_one_waiter() {
    let server = RedisServer::start();
    let a = open_redis(&server.url(), &SLOW, &[]).0.backend("shared").unwrap();
    let (lock, waiting, queue) = support::marks::names("k");
    let reader = take(&a, "k", shared(0));
    let mut child = child_waiter(&server);
    assert!(within(10_000, || support::marks::zmembers(&server, &queue).len() == 1), "T queues behind the reader");
    let mark = support::marks::zmembers(&server, &queue).remove(0);
    let token = mark.split_once(':').unwrap().1.to_owned();
    // T stalls; the reader leaves and X takes the key before T's next try.
    stop(&child, &server);
    release(reader);
    let x = take(&a, "k", wait(0));
    signal(&child, "CONT");
    let suffix = format!(":{token}");
    assert!(within(15_000, || support::marks::zmembers(&server, &waiting).iter().any(|m| m.ends_with(&suffix))), "T waits behind X now");
    let before = inspect(&a, "k");
    // T stalls again; X's release hands it the key.
    stop(&child, &server);
    release(x);
    let handed = get(&server, &lock);
    let queued = support::marks::zmembers(&server, &queue);
    let seen = inspect(&a, "k");
    signal(&child, "KILL");
    let _ = child.wait();
    eprintln!("lock = {handed:?}, queue = {queued:?}\nbefore the hand-off: {before:?}\nafter: {seen:?}");
    assert_eq!((before.held, before.waiting), (1, 1), "X holds, T waits: {before:?}");
    assert_eq!(handed.as_deref(), Some(format!("h:{token}").as_str()));
    assert_eq!((seen.held, seen.waiting), (0, 1), "free, handed to its one waiter T; inspect counts T twice: {seen:?}");
}

/// A first try sent twice (its answer lost) leaves a mark under a ticket
/// the waiter never learned (RELEASE's doc); granted on a free key (the
/// holder's lease ran out), the waiter takes back only the mark of the
/// ticket it knows. Written here as that lost try left it: while X holds
/// the key and nobody waits, inspect counts X's own leftover mark as one
/// waiting acquire.
#[test]
fn redis_a_holder_s_own_leftover_mark_is_no_waiter() {
    let server = RedisServer::start();
    let a = open_redis(&server.url(), &SLOW, &[]).0.backend("shared").unwrap();
    let (lock, waiting, _) = support::marks::names("k");
    let x = take(&a, "k", wait(0));
    let token = support::marks::holder_token(&server, &lock);
    support::marks::stale_mark(&server, &waiting, &token, 5000, 20_000);
    let seen = inspect(&a, "k");
    release(x);
    assert_eq!((seen.held, seen.waiting), (1, 0), "X holds, nobody waits (the mark is X's own): {seen:?}");
}

// --- Redis Cluster -----------------------------------------------------------

/// On a Cluster the five names of a key share a slot and the read goes to
/// its primary: a holder and a waiter of two processes read as such.
#[test]
fn cluster_inspect_sees_another_process_s_holder_and_waiter() {
    let cluster = support::deployment::Deployment::cluster();
    let (a, b) = (cluster.open(&SLOW).backend("shared").unwrap(), cluster.open(&SLOW).backend("shared").unwrap());
    let holder = take(&a, "k", wait(0));
    let next = {
        let b = b.clone();
        thread::spawn(move || block_on(b.acquire("k", wait(20_000))))
    };
    assert!(within(5000, || inspect(&a, "k").waiting == 1), "{:?}", inspect(&a, "k"));
    let (from_a, from_b) = (inspect(&a, "k"), inspect(&b, "k"));
    eprintln!("cluster: {from_a:?}\n{from_b:?}");
    release(holder);
    let handed = next.join().unwrap().expect("granted");
    let after = inspect(&a, "k");
    release(handed);
    assert_eq!((from_a.held, from_a.waiting, from_a.mode), (1, 1, Some(LockMode::Exclusive)), "{from_a:?}");
    assert_eq!((from_b.held, from_b.waiting), (1, 1), "{from_b:?}");
    assert_eq!((after.held, after.waiting), (1, 0), "{after:?}");
}

// --- Policy --------------------------------------------------------------------

/// docs/policy.md's own example puts a file member last in the default
/// rule (`[cache, db, host]`). R49 found such a policy answering the file
/// member's refusal for every free key, the file driver refusing inspect;
/// the file driver now reads its holders' records (issue 53), so the
/// policy answers a free key as free and finds a key held on the file
/// member after a fallback.
#[test]
fn a_policy_with_a_file_member_reads_the_file_member_too() {
    let server = RedisServer::start();
    let directory = std::env::temp_dir().join(format!("r49-files-{}", std::process::id()));
    let yaml = format!(
        "schemaVersion: 1\noptions:\n  dokebi-redis:\n    connections:\n      main:\n        url: {}\n  dokebi-lock:\n    backends:\n      \
         cache: {{ driver: redis, connection: main, namespace: test, leaseMs: 5000 }}\n      host: {{ driver: file, directory: {} }}\n      \
         locks: {{ driver: policy, default: {{ backends: [cache, host], minTier: host, onUnavailable: fallBack }} }}\n",
        server.url(),
        directory.display()
    );
    let provider = Provider::from_yaml(&yaml).unwrap();
    let locks = provider.backend("locks").unwrap();
    let held = take(&provider.backend("cache").unwrap(), "held", wait(0));
    let on_held = block_on(locks.inspect("held"));
    release(held);
    let on_file = take(&provider.backend("host").unwrap(), "fell-back", wait(0));
    let fell_back = block_on(locks.inspect("fell-back"));
    release(on_file);
    let on_free = block_on(locks.inspect("free"));
    block_on(provider.close());
    let _ = std::fs::remove_dir_all(&directory);
    eprintln!("held on cache: {on_held:?}\nheld on host: {fell_back:?}\nfree: {on_free:?}");
    assert!(on_held.is_ok_and(|seen| seen.held == 1 && seen.backend == "cache"));
    assert!(fell_back.is_ok_and(|seen| seen.held == 1 && seen.backend == "host"));
    assert!(on_free.is_ok_and(|seen| seen.held == 0));
}

// --- PostgreSQL: what missing_table catches ------------------------------------

/// A reader without the privilege to read the tables fails; it does not
/// answer "free" (42501 is not a missing table).
#[test]
fn postgres_inspect_without_privilege_fails_rather_than_free() {
    let schema = postgres::Schema::fresh();
    let holder = postgres::backend(&schema.open(""));
    let lease = take(&holder, "k", wait(0));
    let role = format!("r49_reader_{}", std::process::id());
    postgres::batch(&format!("DROP ROLE IF EXISTS {role}; CREATE ROLE {role} LOGIN"));
    let url = postgres::url().replacen("postgres@", &format!("{role}@"), 1);
    let reader = Provider::from_yaml(&postgres::yaml_on(&url, &schema.0, "        autoCreate: false\n", "")).unwrap();
    let no_schema = block_on(postgres::backend(&reader).inspect("k")).map_err(|err| (err.code(), format!("{err:#}")));
    postgres::batch(&format!("GRANT USAGE ON SCHEMA {} TO {role}", schema.0));
    let no_table = block_on(postgres::backend(&reader).inspect("k")).map_err(|err| (err.code(), format!("{err:#}")));
    drop(reader);
    release(lease);
    postgres::batch(&format!("DROP OWNED BY {role}; DROP ROLE {role}"));
    eprintln!("no usage: {no_schema:?}\nno select: {no_table:?}");
    assert_eq!(no_schema.map(|seen| seen.held).unwrap_err().0, ErrorCode::ProviderFailed);
    assert_eq!(no_table.map(|seen| seen.held).unwrap_err().0, ErrorCode::ProviderFailed);
}

/// `missing_table` takes any of the three tables missing for "nothing
/// kept": with the waiting table gone (dropped by hand, a partial restore)
/// a key held in the holders table reads as free.
#[test]
fn postgres_a_missing_waiting_table_does_not_hide_a_holder() {
    let schema = postgres::Schema::fresh();
    let holder = postgres::backend(&schema.open(""));
    let lease = take(&holder, "k", wait(0));
    postgres::batch(&format!("DROP TABLE {}", schema.table("_waiting")));
    let reader = schema.open("");
    let seen = block_on(postgres::backend(&reader).inspect("k")).map_err(|err| err.code());
    drop(lease);
    eprintln!("holders row live, waiting table gone: {seen:?}");
    assert!(seen.is_err() || seen.as_ref().is_ok_and(Inspection::is_held), "a held key read as {seen:?}");
}

/// MySQL's inspect of a held key by a user who may read the keys table
/// only: 1142 on the others, not 1146, so not "free".
#[test]
fn mysql_inspect_without_privilege_fails_rather_than_free() {
    let table = mysql::Table::fresh();
    let holder = Provider::from_yaml(&mysql::yaml(&table.0, "")).unwrap();
    let lease = take(&holder.backend("shared").unwrap(), "k", wait(0));
    let user = format!("r49_{}", std::process::id());
    mysql::rows(&format!("DROP USER IF EXISTS '{user}'@'%'; CREATE USER '{user}'@'%'; GRANT SELECT ON `{}` TO '{user}'@'%'", table.0));
    let url = mysql::url().replacen("root@", &format!("{user}@"), 1);
    let yaml = mysql::yaml(&table.0, ", autoCreate: false").replace(&mysql::url(), &url);
    let reader = Provider::from_yaml(&yaml).unwrap();
    let seen = block_on(reader.backend("shared").unwrap().inspect("k")).map_err(|err| (err.code(), format!("{err:#}")));
    drop(reader);
    release(lease);
    mysql::rows(&format!("DROP USER '{user}'@'%'"));
    eprintln!("no select: {seen:?}");
    assert!(seen.is_err(), "a held key read as {seen:?}");
}

//! Review R58: holder labels in owner tokens (commit 4c69111). Tokens now
//! differ in length (their labels do, and an older release's has none), and
//! Redis's prune of a counted key's expired holders read each member's
//! weight at the pruning token's length: it gave back none of a dead
//! holder's units, and the key refused room it had. And a label forged in a
//! store with a bidirectional override printed as another holder.

mod mysql;
mod postgres;
mod support;

use std::thread;
use std::time::Duration;

use dokebi_lock::{AcquireOptions, Backend, HolderLabel, Options, Provider};
use futures::executor::block_on;
use support::redis_server::RedisServer;
use support::{inspect, redis_yaml_at, take, wait};

/// The provider of `yaml`, its holders labelled `label`.
fn labelled(yaml: &str, label: &str) -> Provider {
    let yaml = yaml.replace("commandTimeoutMs: 2000", "commandTimeoutMs: 200");
    let mut options = Options::from_yaml(&yaml).unwrap();
    options.holder = HolderLabel::new(label).unwrap();
    Provider::open(options).unwrap()
}

fn counted(limit: u32, weight: u32, ms: u64) -> AcquireOptions {
    AcquireOptions { limit: Some(limit), weight: Some(weight), ..wait(ms) }
}

/// Two providers on one counted key whose tokens differ in length (labels
/// of different lengths; a pid of 4 digits and one of 5 are enough). A
/// holder of `short` dies (its lease expires); a request of `long` prunes
/// it and must get the dead holder's units back: 2 of 3 units then fit.
fn a_dead_holder_s_units_are_given_back(short: &Backend, long: &Backend, keeper: &Backend) {
    // 1 unit held for long, 2 held by a lease that dies in 300 ms.
    let kept = take(keeper, "c", counted(3, 1, 0));
    let dying = take(short, "c", counted(3, 2, 0));
    thread::sleep(Duration::from_millis(600));
    let found = inspect(long, "c");
    assert_eq!(found.held, 1, "the short lease expired: {found:?}");
    // 1 of 3 units is held: a request of 2 fits.
    let fits = block_on(long.acquire("c", counted(3, 2, 0)));
    let fits = fits.unwrap_or_else(|err| panic!("2 units of 3 with 1 held must be granted: {err:?} {:?}", err.details()));
    assert!(block_on(fits.release()).unwrap());
    drop(dying);
    assert!(block_on(kept.release()).unwrap());
}

fn redis_yaml(server: &RedisServer, lease_ms: u64) -> String {
    redis_yaml_at(&format!("url: {}", server.url()), &format!("        leaseMs: {lease_ms}\n"), "        commandTimeoutMs: 200\n")
}

#[test]
fn redis_prune_of_a_holder_with_a_token_of_another_length() {
    let server = RedisServer::start();
    let short = labelled(&redis_yaml(&server, 300), "a");
    let long = labelled(&redis_yaml(&server, 10_000), &"x".repeat(40));
    a_dead_holder_s_units_are_given_back(
        &short.backend("shared").unwrap(),
        &long.backend("shared").unwrap(),
        &long.backend("shared").unwrap(),
    );
}

#[test]
fn redis_prune_the_other_way_round() {
    let server = RedisServer::start();
    let short = labelled(&redis_yaml(&server, 10_000), "a");
    let long = labelled(&redis_yaml(&server, 300), &"x".repeat(40));
    // The long-token holder dies, the short-token one prunes.
    a_dead_holder_s_units_are_given_back(
        &long.backend("shared").unwrap(),
        &short.backend("shared").unwrap(),
        &short.backend("shared").unwrap(),
    );
}

#[test]
fn postgres_prune_of_a_holder_with_a_token_of_another_length() {
    let schema = postgres::Schema::fresh();
    let short = labelled(&schema.yaml("        leaseMs: 300\n", ""), "a");
    let long = labelled(&schema.yaml("        leaseMs: 3000\n", ""), &"x".repeat(40));
    a_dead_holder_s_units_are_given_back(&postgres::backend(&short), &postgres::backend(&long), &postgres::backend(&long));
}

#[test]
fn mysql_prune_of_a_holder_with_a_token_of_another_length() {
    let table = mysql::Table::fresh();
    let short = labelled(&mysql::yaml(&table.0, "").replace("leaseMs: 5000", "leaseMs: 300"), "a");
    let long = labelled(&mysql::yaml(&table.0, ""), &"x".repeat(40));
    a_dead_holder_s_units_are_given_back(
        &short.backend("shared").unwrap(),
        &long.backend("shared").unwrap(),
        &long.backend("shared").unwrap(),
    );
}

/// An older release's holder (a 32-hex-digit token) and a new one on one
/// counted key: the older holder dies, and the new one's prune gives its
/// units back.
#[test]
fn redis_prune_of_an_older_release_s_holder() {
    let server = RedisServer::start();
    let new = labelled(&redis_yaml(&server, 10_000), "web-3:4182");
    let backend = new.backend("shared").unwrap();
    let kept = take(&backend, "c", counted(3, 1, 0));
    let keys = server.keys();
    let lock = keys.iter().find(|k| k.starts_with("test:lock:{")).unwrap().clone();
    let kind = keys.iter().find(|k| k.starts_with("test:lock-kind:{")).unwrap().clone();
    // What an older release's KINDS_ACQUIRE writes for a lease of 2 units
    // and 300 ms: its member and its units.
    let _: () = redis::cmd("EVAL")
        .arg(
            "local t = redis.call('TIME') local now = t[1] * 1000 + math.floor(t[2] / 1000) \
             redis.call('ZADD', KEYS[1], now + 300, '0123456789abcdef0123456789abcdef:2') \
             redis.call('HINCRBY', KEYS[2], 'units', 2)",
        )
        .arg(2)
        .arg(&lock)
        .arg(&kind)
        .query(&mut server.client())
        .unwrap();
    assert_eq!(inspect(&backend, "c").held, 2);
    thread::sleep(Duration::from_millis(600));
    assert_eq!(inspect(&backend, "c").held, 1);
    let fits = block_on(backend.acquire("c", counted(3, 2, 0)));
    let fits = fits.unwrap_or_else(|err| panic!("2 units of 3 with 1 held must be granted: {err:?}"));
    assert!(block_on(fits.release()).unwrap());
    assert!(block_on(kept.release()).unwrap());
}

/// Units a prune failed to give back would stay lost for as long as any
/// holder is left: a wait for room that is there would time out.
#[test]
fn redis_units_lost_to_the_prune_stay_lost() {
    let server = RedisServer::start();
    let short = labelled(&redis_yaml(&server, 300), "a");
    let long = labelled(&redis_yaml(&server, 10_000), &"x".repeat(40));
    let (short, long) = (short.backend("shared").unwrap(), long.backend("shared").unwrap());
    let kept = take(&long, "c", counted(3, 1, 0));
    let _dying = take(&short, "c", counted(3, 2, 0));
    thread::sleep(Duration::from_millis(600));
    let first = block_on(long.acquire("c", counted(3, 2, 0)));
    let later = block_on(long.acquire("c", counted(3, 2, 1500)));
    assert!(first.is_ok() || later.is_ok(), "1 unit of 3 held, 2 more refused for 1.5 s: {:?}", later.err().map(|e| e.code()));
    assert!(block_on(kept.release()).unwrap());
}

/// Control: labels of one length, the same interleaving, is granted.
#[test]
fn redis_prune_with_tokens_of_one_length_control() {
    let server = RedisServer::start();
    let short = labelled(&redis_yaml(&server, 300), "a");
    let other = labelled(&redis_yaml(&server, 10_000), "b");
    a_dead_holder_s_units_are_given_back(
        &short.backend("shared").unwrap(),
        &other.backend("shared").unwrap(),
        &other.backend("shared").unwrap(),
    );
}

/// A token forged by whoever can write the store, its label with a Unicode
/// format character (a right-to-left override, U+202E) that an operator's
/// terminal would show reversed in part: no label is told.
#[test]
fn redis_a_forged_label_with_a_bidi_override_is_not_told() {
    let server = RedisServer::start();
    let provider = labelled(&redis_yaml(&server, 10_000), "web");
    let backend = provider.backend("shared").unwrap();
    let lease = take(&backend, "k", wait(0));
    let lock = server.keys().into_iter().find(|k| k.starts_with("test:lock:{")).unwrap();
    let _: () = redis::cmd("SET")
        .arg(&lock)
        .arg("AAAAAAAAAAAAAAAAAAAAAA.web-1%E2%80%AE4321.exe")
        .arg("PX")
        .arg(5000)
        .query(&mut server.client())
        .unwrap();
    let label = inspect(&backend, "k").holders[0].label.clone();
    let busy = block_on(backend.acquire("k", wait(0))).unwrap_err();
    assert!(label.as_deref().is_none_or(|l| !l.contains('\u{202E}')), "a bidi override reaches the operator: {label:?}");
    assert!(!busy.details().unwrap().to_string().contains('\u{202E}'), "{:?}", busy.details());
    drop(lease);
}

#[test]
fn the_option_takes_a_bidi_override() {
    assert!(HolderLabel::new("web\u{202E}1").is_err(), "the option takes a bidi override too");
}

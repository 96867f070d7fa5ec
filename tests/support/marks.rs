//! The Redis names of a key's waiting marks, read and written by hand: the
//! tests of the marks a waiter leaves (tests/redis_marks_review.rs,
//! tests/review_r3.rs).

use super::redis_server::RedisServer;

/// The lock, waiting and queue names of the user key `key` of the tests'
/// backend.
pub fn names(key: &str) -> (String, String, String) {
    let lock = super::topology::lock_key(key);
    let waiting = lock.replacen(":lock:", ":lock-waiting:", 1);
    let queue = lock.replacen(":lock:", ":lock-queue:", 1);
    (lock, waiting, queue)
}

/// The owner token of the plain holder of the lock `lock`, whose value is
/// `<token>:<fence>`.
pub fn holder_token(server: &RedisServer, lock: &str) -> String {
    let held: String = redis::cmd("GET").arg(lock).query(&mut server.client()).unwrap();
    held.split_once(':').unwrap_or_else(|| panic!("a plain holder's lock without its fence: {held}")).0.to_owned()
}

/// The members of the sorted set `name` (none when it is not a set).
pub fn zmembers(server: &RedisServer, name: &str) -> Vec<String> {
    redis::cmd("ZRANGE").arg(name).arg(0).arg(-1).query(&mut server.client()).unwrap_or_default()
}

/// Adds `token`'s mark to the sorted set `set`, ticketed `back_us` before
/// now, to lapse in `lapse_ms` (as a lost first try left it).
pub fn stale_mark(server: &RedisServer, set: &str, token: &str, back_us: u64, lapse_ms: u64) -> String {
    let mut raw = server.client();
    let (seconds, micros): (u64, u64) = redis::cmd("TIME").query(&mut raw).unwrap();
    let member = format!("{}:{token}", seconds * 1_000_000 + micros - back_us);
    let _: () = redis::cmd("ZADD").arg(set).arg(seconds * 1000 + micros / 1000 + lapse_ms).arg(&member).query(&mut raw).unwrap();
    member
}

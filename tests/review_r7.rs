//! Adversarial review R7 of a6c0dfc (SQL drivers: expired holder rows of
//! other tokens marked dead by a grant, a refused renewal's own row too)
//! and 93b965e (Redis `unmark`: `PTTL`, `ZREM`, then `SET '1' PX ttl`).
//!
//! No way to two holders or a repeated fence was found (see the report).
//! What is here is one liveness regression of 93b965e: `unmark` reads the
//! set's time to live as 0 when the set lives in the script's last
//! millisecond (Redis 7 freezes a script's clock, and a key whose expiry is
//! that millisecond is not expired yet, its `PTTL` 0), takes the `else`
//! branch meant for a set without expiry and writes a '1' that never
//! expires. `KEEPTTL`, which it replaced, kept that expiry. It failed so
//! ("attempt 1851: … left a '1' that never expires"); `unmark` now writes
//! `PX max(ttl, 1)` for any expiry, a plain '1' only for a set without one.

mod support;

use support::redis_server::RedisServer;

/// The `unmark` function exactly as the driver's scripts define it.
fn unmark_source() -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/redis/scripts.rs");
    let text = std::fs::read_to_string(path).unwrap();
    let start = text.find("local function unmark(").expect("unmark in scripts.rs");
    let end = start + text[start..].find("\nend\n").expect("end of unmark") + "\nend\n".len();
    text[start..end].to_string()
}

/// A waiting set with one mark whose expiry is the millisecond the script
/// runs in (the set's last) has the mark taken by `unmark`, as a withdraw
/// or a release taking the last waiter's mark does: the '1' left must
/// still expire. Each attempt is a `MULTI` (one frozen clock for all its
/// commands): `PEXPIREAT` at a guess of that millisecond, then the script;
/// a guess behind it drops the set at once, one ahead leaves time to live.
#[test]
fn a_mark_taken_in_the_set_s_last_millisecond_leaves_no_immortal_one() {
    let server = RedisServer::start();
    let mut c = server.client();
    let script = format!(
        "{}\nlocal before = redis.call('PTTL', KEYS[1])\nunmark(KEYS[1], {{ARGV[1]}})\nreturn {{before, redis.call('PTTL', KEYS[1])}}",
        unmark_source()
    );
    let mut hit = false;
    for attempt in 0..20_000 {
        let (secs, micros): (u64, u64) = redis::cmd("TIME").query(&mut c).unwrap();
        let guess = secs * 1000 + micros / 1000 + (attempt % 2);
        let name = format!("dl:review-r7:waiting:{attempt}");
        let (answer,): (Vec<i64>,) = redis::pipe()
            .atomic()
            .cmd("ZADD")
            .arg(&name)
            .arg(1)
            .arg("1:token")
            .ignore()
            .cmd("PEXPIREAT")
            .arg(&name)
            .arg(guess)
            .ignore()
            .cmd("EVAL")
            .arg(&script)
            .arg(1)
            .arg(&name)
            .arg("1:token")
            .query(&mut c)
            .unwrap();
        if answer[0] == 0 {
            hit = true;
            assert_ne!(answer[1], -1, "attempt {attempt}: the set's last mark taken in its last millisecond left a '1' that never expires");
        }
        let _: () = redis::cmd("DEL").arg(&name).query(&mut c).unwrap();
        if hit {
            return;
        }
    }
    panic!("no attempt ran in the set's last millisecond");
}

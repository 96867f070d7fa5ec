//! The fenced store the critical sections write to: a Redis hash per key on
//! a redis-server of its own (so it survives the lock server's faults),
//! changed only by Lua scripts that check the fence atomically.
//!
//! A writer's section reads with its fence (which raises the key's `seen`
//! fence, so a stale holder's later write is refused) and writes `value + 1`
//! with it. A write is accepted only if its fence is at least `seen` and
//! strictly larger than the fence of the last accepted write. Every write
//! attempt is appended to `attempts:<key>` (`A<fence>` accepted, `R<fence>`
//! refused), so the harness can re-check the store's history independently.
//!
//! A reader (a shared section, in the mixed scenarios) only reads, and what
//! we chose for it is this: its read is refused if a writer of a larger
//! fence has read the key already (`wseen`: that writer overlaps the reader,
//! so the reader is stale), and otherwise raises `seen` to its fence (the
//! maximum, since readers overlap and come in any order) and is appended as
//! `S<fence>`. So a stale writer whose lease lapsed while a reader got in
//! cannot write over what that reader read: its write, with a fence below
//! the reader's, is refused. Writers thereby need a fence above every
//! section, reader or writer, the store has seen; readers only one above
//! every writer's. Counted sections leave the store alone (their units are
//! checked from the logs).

use redis::Connection;

/// Decimal strings compared as numbers (fences can exceed 2^53).
const LESS: &str = "local function less(a, b) return #a < #b or (#a == #b and a < b) end\n";

/// A writer's read. KEYS: hash. ARGV: fence. Returns the value, or -1 for
/// a stale fence.
const READ: &str = r"
local seen = redis.call('HGET', KEYS[1], 'seen') or '0'
if less(ARGV[1], seen) then
  redis.call('HINCRBY', KEYS[1], 'refused', 1)
  return -1
end
redis.call('HSET', KEYS[1], 'seen', ARGV[1], 'wseen', ARGV[1])
return tonumber(redis.call('HGET', KEYS[1], 'value') or '0')
";

/// A reader's read. KEYS: hash, attempts. ARGV: fence. Returns the value,
/// or -1 when a writer of a larger fence read the key already.
const SHARED_READ: &str = r"
local wseen = redis.call('HGET', KEYS[1], 'wseen') or '0'
if less(ARGV[1], wseen) then
  redis.call('HINCRBY', KEYS[1], 'refused', 1)
  return -1
end
local seen = redis.call('HGET', KEYS[1], 'seen') or '0'
if less(seen, ARGV[1]) then
  redis.call('HSET', KEYS[1], 'seen', ARGV[1])
end
redis.call('RPUSH', KEYS[2], 'S' .. ARGV[1])
return tonumber(redis.call('HGET', KEYS[1], 'value') or '0')
";

/// KEYS: hash, attempts. ARGV: fence, value. Returns 1 accepted, 0 refused.
const WRITE: &str = r"
local seen = redis.call('HGET', KEYS[1], 'seen') or '0'
local last = redis.call('HGET', KEYS[1], 'fence') or '0'
if less(ARGV[1], seen) or not less(last, ARGV[1]) then
  redis.call('HINCRBY', KEYS[1], 'refused', 1)
  redis.call('RPUSH', KEYS[2], 'R' .. ARGV[1])
  return 0
end
redis.call('HSET', KEYS[1], 'value', ARGV[2], 'fence', ARGV[1])
redis.call('RPUSH', KEYS[2], 'A' .. ARGV[1])
return 1
";

/// The SHA1s of the loaded scripts, passed to the workers.
pub struct Scripts {
    pub read: String,
    pub write: String,
    pub shared_read: String,
}

pub fn load(store: &mut Connection) -> Scripts {
    let load = |store: &mut Connection, body: &str| -> String {
        redis::cmd("SCRIPT").arg("LOAD").arg(format!("{LESS}{body}")).query(store).expect("the store loads its scripts")
    };
    Scripts { read: load(store, READ), write: load(store, WRITE), shared_read: load(store, SHARED_READ) }
}

/// What the store holds for one key at the end of a scenario.
pub struct KeyHistory {
    pub value: u64,
    pub refused: u64,
    /// Every write attempt and reader's read, in the order the store saw them.
    pub attempts: Vec<Attempt>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Attempt {
    /// A write accepted with this fence.
    Accepted(u128),
    /// A write refused.
    Refused(u128),
    /// A reader's read accepted.
    Read(u128),
}

pub fn history(store: &mut Connection, key: &str) -> KeyHistory {
    let (value, refused): (Option<u64>, Option<u64>) =
        redis::cmd("HMGET").arg(format!("store:{key}")).arg("value").arg("refused").query(store).unwrap();
    let attempts: Vec<String> = redis::cmd("LRANGE").arg(format!("attempts:{key}")).arg(0).arg(-1).query(store).unwrap();
    let attempts = attempts
        .iter()
        .map(|a| {
            let fence = a[1..].parse().expect("a decimal fence");
            match a.as_bytes()[0] {
                b'A' => Attempt::Accepted(fence),
                b'R' => Attempt::Refused(fence),
                b'S' => Attempt::Read(fence),
                other => panic!("an attempt of kind {other}"),
            }
        })
        .collect();
    KeyHistory { value: value.unwrap_or(0), refused: refused.unwrap_or(0), attempts }
}

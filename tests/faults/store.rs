//! The fenced store the critical sections write to: a Redis hash per key on
//! a redis-server of its own (so it survives the lock server's faults),
//! changed only by two Lua scripts that check the fence atomically.
//!
//! A section reads with its fence (which raises the key's `seen` fence, so a
//! stale holder's later write is refused) and writes `value + 1` with it.
//! A write is accepted only if its fence is at least `seen` and strictly
//! larger than the fence of the last accepted write. Every write attempt is
//! appended to `attempts:<key>` (`A<fence>` accepted, `R<fence>` refused),
//! so the harness can re-check the store's history independently.

use redis::Connection;

/// Decimal strings compared as numbers (fences can exceed 2^53).
const LESS: &str = "local function less(a, b) return #a < #b or (#a == #b and a < b) end\n";

/// KEYS: hash. ARGV: fence. Returns the value, or -1 for a stale fence.
const READ: &str = r"
local seen = redis.call('HGET', KEYS[1], 'seen') or '0'
if less(ARGV[1], seen) then
  redis.call('HINCRBY', KEYS[1], 'refused', 1)
  return -1
end
redis.call('HSET', KEYS[1], 'seen', ARGV[1])
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
}

pub fn load(store: &mut Connection) -> Scripts {
    let load = |store: &mut Connection, body: &str| -> String {
        redis::cmd("SCRIPT").arg("LOAD").arg(format!("{LESS}{body}")).query(store).expect("the store loads its scripts")
    };
    Scripts { read: load(store, READ), write: load(store, WRITE) }
}

/// What the store holds for one key at the end of a scenario.
pub struct KeyHistory {
    pub value: u64,
    pub refused: u64,
    /// (fence, accepted) of every write attempt, in the order the store saw them.
    pub attempts: Vec<(u128, bool)>,
}

pub fn history(store: &mut Connection, key: &str) -> KeyHistory {
    let (value, refused): (Option<u64>, Option<u64>) =
        redis::cmd("HMGET").arg(format!("store:{key}")).arg("value").arg("refused").query(store).unwrap();
    let attempts: Vec<String> = redis::cmd("LRANGE").arg(format!("attempts:{key}")).arg(0).arg(-1).query(store).unwrap();
    let attempts = attempts.iter().map(|a| (a[1..].parse().expect("a decimal fence"), a.starts_with('A'))).collect();
    KeyHistory { value: value.unwrap_or(0), refused: refused.unwrap_or(0), attempts }
}

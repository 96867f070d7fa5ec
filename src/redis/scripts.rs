//! The Lua scripts: each lock operation is one atomic script and one round
//! trip (`EVALSHA`; after `SCRIPT FLUSH` or a restart the `NOSCRIPT` reply
//! makes redis-rs load the script and retry once).

use redis::Script;

/// Takes the lock when it is free (or already carries our token, which
/// makes a retry after a dropped connection idempotent) and increments the
/// fence in the same step.
///
/// KEYS: lock, fence, waiting. ARGV: token, leaseMs, waitingMs.
/// Returns `{1, fence}` when granted, `{0, pttl}` when held by another owner;
/// then, unless `waitingMs` is 0 (a single try), it marks the key as waited
/// for, for at least `waitingMs` (never shortening another waiter's mark),
/// so that its release publishes a wake-up. A waiter retries (and so renews
/// the mark) well within its `waitingMs`.
///
/// Fences never repeat, even when the counter comes back older than the
/// fences already handed out (a restart from an RDB snapshot taken a few
/// grants ago, an AOF that lost its unsynced tail, a failover to a replica
/// that lagged, eviction or deletion): every grant raises the counter to at
/// least the server's `TIME` in microseconds, `fence = max(counter + 1,
/// TIME_us)`, and stores it back. A restored counter is then overtaken by
/// the clock, as long as the clocks of the servers that can become primary
/// agree to within the time a restart or failover takes (see the README's
/// Guarantees). A fence is about 1.8e15: it fits a signed 64-bit column, and
/// as a double it is still exact (below 2^53).
///
/// The clock is written first with `GETSET` (in every Redis from 1.0; one
/// call reads and raises the counter) and only overwritten with
/// `counter + 1` when the counter is not behind the clock. The clock's
/// decimal string is joined from `TIME`'s two fields rather than formatted
/// from a double: `string.format('%.0f')` alone cost about 0.5 us per grant.
///
/// `TIME` before a write needs effects replication (Redis 5 and later,
/// checked at connect). A free key costs three calls (`SET NX`, `TIME`,
/// `GETSET`); the script's cost is most of what Redis spends per acquire.
const ACQUIRE: &str = r"
local granted = redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])
if not granted and redis.call('GET', KEYS[1]) == ARGV[1] then
  granted = redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
end
if granted then
  local now = redis.call('TIME')
  local clock = now[1] .. string.rep('0', 6 - #now[2]) .. now[2]
  local fence = tonumber(clock)
  local last = redis.call('GETSET', KEYS[2], clock)
  if last then
    local counter = tonumber(last)
    if not counter then
      redis.call('SET', KEYS[2], last)
      return redis.error_reply('ERR the fence counter ' .. KEYS[2] .. ' is not a number')
    end
    if counter >= fence then
      fence = counter + 1
      redis.call('SET', KEYS[2], string.format('%.0f', fence))
    end
  end
  return {1, fence}
end
if ARGV[3] ~= '0' and redis.call('PTTL', KEYS[3]) < tonumber(ARGV[3]) then
  redis.call('SET', KEYS[3], '1', 'PX', ARGV[3])
end
return {0, redis.call('PTTL', KEYS[1])}
";

/// Extends the lease if the lock still carries our token.
/// KEYS: lock. ARGV: token, leaseMs. Returns 1 when extended, else 0.
const RENEW: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
";

/// Deletes the lock if it still carries our token and, if some process
/// marked the key as waited for, tells waiters of every process (one message
/// on the namespace's channel). An uncontended release publishes nothing, so
/// it wakes no subscriber. One `DEL` takes both keys: 2 deleted means the
/// mark was there.
/// KEYS: lock, waiting. ARGV: token, channel. Returns 1 when released, else 0.
const RELEASE: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  if redis.call('DEL', KEYS[1], KEYS[2]) == 2 then
    redis.call('PUBLISH', ARGV[2], KEYS[1])
  end
  return 1
end
return 0
";

/// The three scripts, hashed once per connection.
pub(crate) struct Scripts {
    pub acquire: Script,
    pub renew: Script,
    pub release: Script,
}

impl Scripts {
    pub fn new() -> Scripts {
        Scripts { acquire: Script::new(ACQUIRE), renew: Script::new(RENEW), release: Script::new(RELEASE) }
    }
}

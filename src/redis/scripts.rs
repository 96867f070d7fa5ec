//! The Lua scripts: each lock operation is one atomic script and one round
//! trip (`EVALSHA`; after `SCRIPT FLUSH` or a restart the `NOSCRIPT` reply
//! makes redis-rs load the script and retry once).

use std::sync::Arc;

use redis::Script;

use super::transport::connection::RedisConnection;

/// Raises the fence counter `fence_key` to `max(counter + 1, clock)`, to
/// live `retention` ms past its value, and sets `fence` (see [`ACQUIRE`]);
/// `clock_n` is `clock` as a number. Callers write nothing before it (a
/// lock is written with its fence), so a refused grant leaves nothing
/// held. `$wait` is Lua run last
/// when the fence must wait for the clock, with `wait_ms` set: it answers
/// "not granted" (or, where the caller goes on, leaves `wait_ms` for it to
/// read; `wait_ms` is nil when the fence was set).
///
/// One call reads and raises the counter, `SET ... PX retention GET` (Redis
/// 6.2 and later, checked at connect; on an older server it is a syntax
/// error, caught by `pcall`, and the grant is refused with nothing
/// written). A counter that is not a number (or not a string) is put back
/// as it was, with that TTL, and refused.
///
/// Fences wait for the clock (see [`reserve_fences!`]): a fence more than
/// `LEAD_US` above the clock, and no more than `RESERVED_US + LEAD_US`,
/// is not granted; the counter is put back as it was (its value, and its
/// expiry `retention` past it), and the
/// answer is "not granted", to try again in `wait_ms`, when the clock has
/// passed the fence. The check costs nothing on a grant from the clock:
/// only a counter at or ahead of the clock gets to it.
///
/// The counter is written on this server only (`redis.set_repl`): what
/// replicas and the AOF get is [`reserve_fences!`]'s bound, written when
/// the fence is not below the reservation the counter implies, or lies
/// above the clock. Replication stays off after it: a script that
/// writes more turns it back on (a script's writes are replicated again at
/// its next run whatever it left: `set_repl` costs about 2,000 instructions). Putting a counter back is
/// not replicated either: replicas and the AOF never had the raise.
macro_rules! next_fence {
    ($wait:literal) => {
        concat!(
            r"
  local fence, wait_ms = clock_n, nil
  redis.set_repl(redis.REPL_NONE)
  local last = pwrite('SET', fence_key, clock, 'PX', retention, 'GET')
  local counter = 0
  if last then
    counter = type(last) == 'string' and tonumber(last)
    if not counter then
      if type(last) == 'string' then
        redis.call('SET', fence_key, last, 'KEEPTTL')
      end
      redis.set_repl(redis.REPL_ALL)
      return redis.error_reply('ERR a fence counter is not a number (or the server is older than Redis 6.2)')
    end
    if counter >= fence then
      fence = counter + 1
      local lead = fence - clock_n
      if lead > LEAD_US and lead <= RESERVED_US + LEAD_US then
        redis.call('SET', fence_key, last, 'PXAT', string.format('%.0f', math.floor(counter / 1000) + tonumber(retention)))
        redis.set_repl(redis.REPL_ALL)
        wait_ms = math.ceil(lead / 1000)
      end
    end
  end
  if wait_ms then
",
            $wait,
            r"
  elseif fence > clock_n or fence >= math.ceil(counter / RESERVED_US) * RESERVED_US then
    reserve(fence_key, fence, retention)
  end
"
        )
    };
}

/// The function `pwrite(...)`: `redis.pcall` for a write to a name that
/// may hold another type, whose `WRONGTYPE` the caller reads as an answer
/// ("not ours"). Any other refusal is no answer and ends the script, as
/// `redis.call` would end it: `READONLY` (a primary demoted under us),
/// `NOREPLICAS` (`min-replicas-to-write`), `MISCONF`, `OOM` refuse a
/// script's first write only, so nothing was written (and the driver sends
/// it again where the primary is now, or fails it). Caught, `READONLY` told
/// a shared or counted holder its lease was gone while the new primary
/// still carried it.
macro_rules! refused_writes {
    () => {
        r"
local function pwrite(...)
  local reply = redis.pcall(...)
  if type(reply) == 'table' and reply.err and not string.find(reply.err, 'WRONGTYPE', 1, true) then
    error(reply)
  end
  return reply
end
"
    };
}

/// The function `reserve(fence_key, fence, retention)`, and the length of
/// a reservation, `RESERVED_US`: what replicas and the AOF learn of a fence
/// counter. Its callers call it when a key's fence is not below the
/// reservation its counter implies, or lies above the clock (that check is
/// written out at each caller: a Lua call on every grant would cost the
/// server more than the check).
///
/// Each grant writes its key's counter on the primary alone; replicas and
/// the AOF get a reservation: the end of the fence's second (of the
/// server's clock in microseconds) as the counter, a bound above every
/// fence the primary grants the key until the next reservation. So a grant
/// replicates one write (the lock) where it replicated two in a transaction
/// (`MULTI`, the lock, the counter, `EXEC`), and a replica promoted, or a
/// server restarted from its AOF, finds a counter at least as high as the
/// one it would have found with every fence replicated.
///
/// When a reservation is due, as the model in `tests/fence_model.rs`
/// checks: a counter implies the reservation at the end of its second,
/// `ceil(counter / RESERVED_US) * RESERVED_US` (a counter that is a whole
/// second, as a reservation brought back by a restart or a promotion is,
/// implies only itself), and a fence at or past it needs a new one. A fence
/// above the clock (`counter + 1`, the counter at or ahead of the clock:
/// after such a restore, or under a clock behind) needs one too, whatever
/// its second: an exact copy of the primary's counter (an RDB snapshot, an
/// AOF rewrite, a full resync, `MIGRATE`) carries no reservation, and only
/// the clock covers the fences granted after it, which it does only for
/// fences it has passed. Only the first grant of a key in a second, and
/// grants above the clock, replicate a counter.
///
/// Fences wait for the clock (`LEAD_US`): only the clock survives every
/// restore (the writes after a reservation, or the reservation itself,
/// can be lost: an AOF's unsynced tail, a replica that lagged), so a fence
/// is safe from restores once the clock has passed it. A restore that
/// brought back a reservation puts the counter up to a second ahead of the
/// clock; its `counter + 1` granted then is persisted only by a newer
/// reservation, and a second restore within that second that lost it
/// would bring the counter back below it, with the clock not past it yet:
/// that fence would be granted again. So a fence `lead = counter + 1 -
/// clock` µs above the clock is granted only when `lead <= LEAD_US` (100
/// µs: grants of one key within a microsecond or so of each other, between
/// which no restart or failover fits, so the clock has passed them by the
/// time any restore has taken place); when `LEAD_US < lead <= RESERVED_US + LEAD_US`
/// (a reservation a restore brought back, the clocks in agreement) the
/// grant is refused with nothing written, to be tried again when the clock
/// has passed the fence (in at most a second). A counter further ahead
/// (`lead > RESERVED_US + LEAD_US`) is not a reservation of this clock: the
/// server's clock is behind by more than a second (a promoted replica with
/// a skewed clock). Waiting for it would keep the key from everyone for the
/// whole skew, so `counter + 1` is granted as before: there fences rest on
/// the reservations, not the clock (docs/guarantees.md).
///
/// Each write of a counter expires `retention` ms after its value (`PXAT`,
/// the value in ms): a counter ahead of the clock then lives until the
/// clock has passed it by `retention`, as one that follows the clock does.
/// `reserve` leaves replication off (`REPL_NONE`); the caller turns it back
/// on.
macro_rules! reserve_fences {
    () => {
        r"
local RESERVED_US, LEAD_US = 1000000, 100
local function reserve(fence_key, fence, retention)
  local bound = (math.floor(fence / RESERVED_US) + 1) * RESERVED_US
  local lapses = math.floor(bound / 1000) + tonumber(retention)
  redis.set_repl(redis.REPL_ALL)
  redis.call('SET', fence_key, string.format('%.0f', bound), 'PXAT', string.format('%.0f', lapses))
  redis.set_repl(redis.REPL_NONE)
  lapses = math.floor(fence / 1000) + tonumber(retention)
  redis.call('SET', fence_key, string.format('%.0f', fence), 'PXAT', string.format('%.0f', lapses))
end
"
    };
}

/// The function `marks_of(set, token)`: the members of the sorted set of
/// marks `set` that are `token`'s (`<ticket>:<token>`; none when `set` is
/// a string, a kinds waiter's `'1'`), and every member of the set (for
/// [`unmark!`]'s function). One `ZRANGE` over the key's waiters: run where
/// a mark's ticket is not known (a withdraw, a contended release), never on
/// a grant.
macro_rules! marks_of {
    () => {
        r"
local function marks_of(set, token)
  local found, suffix = {}, ':' .. token
  local members = redis.pcall('ZRANGE', set, 0, -1)
  if members.err then
    return found
  end
  for _, m in ipairs(members) do
    if string.sub(m, -#suffix) == suffix then
      found[#found + 1] = m
    end
  end
  return found, members
end
"
    };
}

/// The function `unmark(waiting, gone, members)`: takes the marks `gone`
/// out of the waiting set `waiting`, where `members` is every member of the
/// set as read already ([`marks_of!`]'s second answer), or nil: then the
/// set is read here, `#gone + 1` members at most (a '1' or no name: no
/// marks to take).
///
/// A removal that leaves the set empty leaves the waiting name as a '1'
/// for what was left of its time to live (read first, then the `ZREM`,
/// then `SET ... PX`: the `ZREM` first, as at `maxmemory` Redis refuses a
/// script's first write if it may grow memory, `SET` would be, and `ZREM`
/// is not; once the script wrote, the `SET` is let through), not gone: a reader or a kinds waiter behind a plain holder
/// marks the key by extending the set, with no mark of its own, so the
/// name's existence is all that stands for it, and the holder's release
/// must still find it to publish the wake-up. Nobody is told here: the key
/// is still held, and a waiter woken now would find it so. A '1' grants
/// nothing (a release that finds one frees the key and publishes; a try
/// that finds one marks or replaces it): it costs at most one wake-up for
/// nobody when the set's last mark was the only waiter.
macro_rules! unmark {
    () => {
        r"
local function unmark(waiting, gone, members)
  members = members or redis.pcall('ZRANGE', waiting, 0, #gone)
  if members.err then
    return
  end
  if #members <= #gone then
    -- The whole set was read: does `gone` take every member?
    local taken, left = {}, #members
    for _, m in ipairs(gone) do
      taken[m] = true
    end
    for _, m in ipairs(members) do
      if taken[m] then
        left = left - 1
      end
    end
    if left == 0 then
      if #members > 0 then
        local ttl = redis.call('PTTL', waiting)
        redis.call('ZREM', waiting, unpack(gone))
        -- 0 in the set's last millisecond (a script's clock stands still):
        -- still an expiry, never none.
        if ttl >= 0 then
          redis.call('SET', waiting, '1', 'PX', math.max(ttl, 1))
        else
          redis.call('SET', waiting, '1')
        end
      end
      return
    end
  end
  redis.call('ZREM', waiting, unpack(gone))
end
"
    };
}

/// Takes the lock when it is free (or already carries our token, which
/// makes a retry after a dropped connection idempotent) and increments the
/// fence in the same step.
///
/// KEYS: lock, fence, waiting, kind, queue. ARGV: token, leaseMs,
/// waitingMs, ticket (`0` for none yet), fenceRetentionMs.
/// Returns `{1, fence, 0}` when granted, `{0, ms, 0}` when the key's next
/// fence must wait `ms` for the server's clock (see `next_fence!`: within a
/// second of a restart or failover; nothing is written or marked, and a
/// waiting acquire tries again then, a single try answers `LOCK_BUSY`),
/// `{0, pttl, ticket}` when held by
/// another owner; then, unless `waitingMs` is 0 (a single try), it marks the
/// key as waited for, for at least `waitingMs` (never shortening another
/// waiter's mark), so that its release publishes a wake-up: behind a plain
/// holder its mark is a member of the waiting set (`<ticket>:<token>`, the
/// ticket the server's clock in microseconds on its first try, scored by
/// when it lapses), so that the release hands it the key in its turn (see
/// [`RELEASE`]); behind readers, of the queue set (see below), with the
/// waiting name a plain mark. A waiter retries (and so renews the marks)
/// well within its `waitingMs`.
///
/// A plain holder's lock is `<token>:<fence>`: its fence kept with it for
/// `inspect` (and the time held since, which the fence gives: it is at or
/// above the server's clock at the grant). The lock is written once the
/// fence is raised. A lock that already carries our token was granted (a
/// retry), and one that carries it as `h:<token>` was handed to us by a
/// release (see [`RELEASE`]): either way it is ours now, with a new fence.
///
/// The free key's path is unchanged by lock kinds: one `GET`. Only when
/// it finds a value does the script look further: a lock held by shared or
/// counted holders is a sorted set under the same name (see
/// [`KINDS_ACQUIRE`]), so `GET` answers `WRONGTYPE` (caught by `pcall`).
/// Then a key held with a limit other than 1 is `{-1, 0, 0}` (the caller's
/// `INVALID_ARGUMENT`); readers whose leases ended are pruned (a reader that
/// died keeps the writer out only until its own lease ends: the set's TTL is
/// that of its longest lease, and the answer's wait is until the first one
/// ends), the key is granted if none is left, and otherwise the
/// writer leaves a mark in the queue set (`<ticket>:<token>`, the ticket the server's clock
/// in microseconds on the first try), which stops new readers until the
/// writer is granted (and takes the mark back) or stops waiting.
///
/// Fences never repeat, even when the counter comes back older than the
/// fences already handed out (a restart from an RDB snapshot taken a few
/// grants ago, an AOF that lost its unsynced tail, a failover to a replica
/// that lagged, eviction or deletion): every grant raises the counter to at
/// least the server's `TIME` in microseconds, `fence = max(counter + 1,
/// TIME_us)`, and stores it back. A restored counter is then overtaken by
/// the clock, as long as the clocks of the servers that can become primary
/// agree to within the time a restart or failover takes (see
/// docs/guarantees.md); a reservation a restore brought back, ahead of the
/// clock, makes the grant wait until the clock has passed it (see
/// `next_fence!`). The counter lives `fenceRetentionMs` past its value (after
/// the key's last grant, or after the clock passed a counter ahead of it)
/// and no longer (nothing of a free key stays): once it expired, the
/// server's clock has passed every fence the key had by that much, unless
/// the clock stepped back further than that (docs/guarantees.md). A fence is about 1.8e15: it fits a signed 64-bit column, and
/// as a double it is still exact (below 2^53).
///
/// The clock is written first with `SET ... GET` (see `next_fence!`; one
/// call reads and raises the counter) and only overwritten with
/// `counter + 1` when the counter is not behind the clock. The clock's
/// decimal string is joined from `TIME`'s two fields rather than formatted
/// from a double: `string.format('%.0f')` alone cost about 0.5 us per grant.
///
/// `TIME` before a write needs effects replication, and `SET ... GET` and
/// `PXAT` Redis 6.2 (checked at connect). A free key costs four calls (`GET`, `TIME`,
/// `SET ... GET`, `SET`); the script's cost is most of what Redis spends per acquire.
const ACQUIRE: &str = concat!(
    reserve_fences!(),
    refused_writes!(),
    r"
-- The lock is written once the fence is raised (`<token>:<fence>`), so a
-- refused fence leaves it as it was. `queued`: held by readers (a writer's
-- mark goes in the queue set) or by another plain holder (a waiter's mark
-- goes in the waiting set). `again`: the lock is ours already (a retry, or
-- a hand-off).
local held = redis.pcall('GET', KEYS[1])
local granted = not held
local ticket, now, hint, queued, again = ARGV[4], nil, nil, nil, false
if not granted then
  if held == 'h:' .. ARGV[1] or (type(held) == 'string' and string.sub(held, 1, #ARGV[1] + 1) == ARGV[1] .. ':') then
    granted, again = true, true
  elseif type(held) == 'table' then
    local limit = redis.call('HGET', KEYS[4], 'limit')
    if limit and limit ~= '1' then
      return {-1, 0, 0}
    end
    now = redis.call('TIME')
    local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
    local gone = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now_ms)
    if #gone > 0 then
      redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now_ms)
      -- Their fences (fields of the kind hash named after them) go too.
      for n = 1, #gone, 1000 do
        redis.call('HDEL', KEYS[4], unpack(gone, n, math.min(n + 999, #gone)))
      end
    end
    local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
    if not first[1] then
      granted = true
    else
      hint = tonumber(first[2]) - now_ms
      queued = KEYS[5]
    end
  elseif held then
    queued = KEYS[3]
  end
end
if granted then
  now = now or redis.call('TIME')
  local clock = now[1] .. string.rep('0', 6 - #now[2]) .. now[2]
  local clock_n = tonumber(clock)
  local fence_key, retention = KEYS[2], ARGV[5]
",
    next_fence!("    return {0, wait_ms, 0}\n"),
    r"
  redis.set_repl(redis.REPL_ALL)
  redis.call('SET', KEYS[1], ARGV[1] .. ':' .. (fence == clock_n and clock or string.format('%.0f', fence)), 'PX', ARGV[2])
  -- A writer that waited takes its mark back; when it was the last in the
  -- queue set, the kind hash (kept for the marks after the readers left)
  -- goes too. A waiter that waited behind a plain holder (this try or an
  -- earlier one) takes its mark out of the waiting set (see unmark: a
  -- last mark leaves a '1'), defined here, on a waiter's grant only: at the
  -- top it would cost the free key's path a closure on every call.
  if ARGV[4] ~= '0' then
",
    unmark!(),
    r"
    local mine = ARGV[4] .. ':' .. ARGV[1]
    if redis.call('ZREM', KEYS[5], mine) == 1 and redis.call('EXISTS', KEYS[5]) == 0 then
      redis.call('DEL', KEYS[4])
    end
    unmark(KEYS[3], {mine})
  end
  return {1, fence, 0}
end
if ARGV[3] ~= '0' and queued then
  local waiting_ms = tonumber(ARGV[3])
  now = now or redis.call('TIME')
  if ticket == '0' then
    ticket = now[1] .. string.rep('0', 6 - #now[2]) .. now[2]
  end
  local lapses, mine = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000) + waiting_ms, ticket .. ':' .. ARGV[1]
  if type(pwrite('ZADD', queued, lapses, mine)) == 'table' then
    -- The waiting mark of a kinds waiter ('1'): a set of marks says as
    -- much (someone waits), and more, for as long as the '1' had left
    -- (the waiter it stood for waits that long; with the set gone sooner,
    -- the holder's release would wake nobody).
    local kept = redis.call('PTTL', queued)
    redis.call('DEL', queued)
    redis.call('ZADD', queued, lapses, mine)
    if kept > waiting_ms then
      redis.call('PEXPIRE', queued, kept)
    end
  end
  if redis.call('PTTL', queued) < waiting_ms then
    redis.call('PEXPIRE', queued, ARGV[3])
  end
  if queued == KEYS[5] then
    -- A set of plain waiters' marks says as much (someone waits): kept.
    local ttl = redis.call('PTTL', KEYS[3])
    if ttl < waiting_ms then
      if ttl ~= -2 and redis.call('TYPE', KEYS[3])['ok'] == 'zset' then
        redis.call('PEXPIRE', KEYS[3], ARGV[3])
      else
        redis.call('SET', KEYS[3], '1', 'PX', ARGV[3])
      end
    end
  end
end
return {0, hint or redis.call('PTTL', KEYS[1]), tonumber(ticket)}
"
);

/// Extends the lease if the lock still carries our token (a lock of shared
/// or counted holders, another Redis type, is not ours: `pcall` turns its
/// `WRONGTYPE` into a mismatch).
/// KEYS: lock. ARGV: token, leaseMs. Returns 1 when extended, else 0.
const RENEW: &str = r"
local held = redis.pcall('GET', KEYS[1])
if type(held) == 'string' and string.sub(held, 1, #ARGV[1] + 1) == ARGV[1] .. ':' then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
";

/// Gives the lock up if it still carries our token and, if some process
/// marked the key as waited for, tells waiters of every process (one message
/// on the namespace's channel). An uncontended release publishes nothing, so
/// it wakes no subscriber, and writes nothing but the `DEL` of the lock (a
/// `DEL` of an absent mark would still be replicated, with its name): `GET`,
/// one `EXISTS` over the waiting and queue names, `DEL`. A lock of shared or
/// counted holders is never ours (`pcall`, as in renew).
///
/// No process starves: a plain waiter's mark is a member of the waiting
/// name, a sorted set (`<ticket>:<token>` scored by when it lapses, see
/// [`ACQUIRE`]), and a release that finds live marks there does not free
/// the key but hands it to the oldest of them (lowest ticket, of any
/// process): the lock then carries that waiter's token as `h:<token>`, for
/// as long as its mark had left, so the releasing process's own next
/// acquire waits its turn instead of taking the key back before the wake-up
/// reaches the other process. Not the token itself: a holder of the same
/// token whose grant a failover lost (its waiting mark survived on the
/// replica, its grant did not) must find its release and renew refused
/// (`LEASE_LOST`), not take the hand-off for its old lease. The waiter's
/// next try finds its reservation and is granted,
/// with a new fence (a waiter that died holds the key only until its mark
/// would have lapsed). Lapsed marks are dropped. A waiting name that is a
/// kinds waiter's mark (a string) is deleted as before.
///
/// The releasing token's own marks go, in the waiting set and in the queue
/// set: a holder waits no more, but a grant takes back only the mark of the
/// ticket it knows, and a first try sent twice (its answer lost) can have
/// left one under another ticket, or under one a granted try never learned.
/// Handed to, a waiting-set mark would keep the key for nobody until it
/// lapsed; a queue-set mark (a writer that queued behind readers) would keep
/// new readers out as long. They go here rather than at the grant: the
/// release looks at the sets anyway, where a grant would need one more call
/// on every waiter's grant (a scan for marks it does not know) and one on
/// the free key's path too.
///
/// `ends` (ARGV[3], `1`) says the token is done: a lease's release, or the
/// clean-up of an acquire that ended. Then a release refused because the
/// lease was lost (its lease lapsed, the key went on to others) still takes
/// the token's marks out of both sets, telling waiters when it took some
/// from the queue set (a reader kept out by one may go now; the waiting
/// set's last mark leaves a '1', see [`unmark!`]); and a lock
/// that carries `h:<token>` (a release handed the key to such a mark before
/// this one came) is handed on as our own lock would be, and the answer is
/// still 0. Neither grants anything: a mark is a place in line, not a hold,
/// and a `h:` reservation becomes a lease only through its token's own try
/// (with a new fence), which a done token never sends. Without `ends` (the
/// give-back of what an unanswered try may have granted, while the acquire
/// still waits: its marks and a key handed to it are its place) a refused
/// release touches nothing, and one granted leaves the queue set alone.
/// KEYS: lock, waiting, queue. ARGV: token, channel, ends (`1` or `0`).
/// Returns 1 when released, else 0.
const RELEASE: &str = concat!(
    r"
local token = ARGV[1]
local held = redis.pcall('GET', KEYS[1])
local ours = type(held) == 'string' and string.sub(held, 1, #token + 1) == token .. ':'
local marked
if ours then
  marked = redis.call('EXISTS', KEYS[2], KEYS[3])
  if marked == 0 then
    redis.call('DEL', KEYS[1])
    return 1
  end
end
-- Past the uncontended release: defining marks_of there cost it about 4,000
-- instructions (a closure made on every call).
",
    marks_of!(),
    unmark!(),
    r"
local ends = ARGV[3] == '1'
if not ours and not (ends and held == 'h:' .. token) then
  if ends and redis.call('EXISTS', KEYS[2], KEYS[3]) > 0 then
    local waited, members = marks_of(KEYS[2], token)
    if #waited > 0 then
      unmark(KEYS[2], waited, members)
    end
    local queued = marks_of(KEYS[3], token)
    if #queued > 0 then
      redis.call('ZREM', KEYS[3], unpack(queued))
      redis.call('PUBLISH', ARGV[2], KEYS[1])
    end
  end
  return 0
end
local released = ours and 1 or 0
marked = marked or redis.call('EXISTS', KEYS[2], KEYS[3])
if marked == 0 then
  redis.call('DEL', KEYS[1])
  return released
end
-- A set is never empty: the waiting name exists when it is a kinds
-- waiter's mark (a string) or has members, so whether the queue name (of
-- the two EXISTS counted) does needs no call of its own.
local marks = redis.pcall('ZRANGE', KEYS[2], 0, -1, 'WITHSCORES')
local waited_for = marks.err ~= nil or #marks > 0
if ends and marked > (waited_for and 1 or 0) then
  -- A writer that queued behind readers left its marks in the queue set.
  local queued = marks_of(KEYS[3], token)
  if #queued > 0 then
    redis.call('ZREM', KEYS[3], unpack(queued))
  end
end
if not waited_for then
  -- Nobody to hand the key to or to tell.
  redis.call('DEL', KEYS[1])
  return released
end
local next, lapses, now_ms, lapsed = nil, nil, nil, false
-- The releasing token's own marks are never handed to: they go with the
-- marks of the token handed to.
local mine = ':' .. token
if not marks.err then
  local now = redis.call('TIME')
  now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
  for n = 1, #marks, 2 do
    local score = tonumber(marks[n + 1])
    if score <= now_ms then
      lapsed = true
    elseif (not next or marks[n] < next) and string.sub(marks[n], -#mine) ~= mine then
      next, lapses = marks[n], score
    end
  end
end
if next then
  if lapsed then
    redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now_ms)
  end
  local handed = string.sub(next, string.find(next, ':', 1, true) + 1)
  redis.call('SET', KEYS[1], 'h:' .. handed, 'PX', string.format('%.0f', lapses - now_ms))
  -- Every mark of that token goes, the one handed to too (a first try
  -- sent twice, its answer lost, left two, and the waiter's grant takes
  -- back only the mark of the ticket it knows): one hand-off per waiter.
  local gone, theirs = {}, ':' .. handed
  for n = 1, #marks, 2 do
    if string.sub(marks[n], -#theirs) == theirs or string.sub(marks[n], -#mine) == mine then
      gone[#gone + 1] = marks[n]
    end
  end
  redis.call('ZREM', KEYS[2], unpack(gone))
else
  redis.call('DEL', KEYS[1], KEYS[2])
end
redis.call('PUBLISH', ARGV[2], KEYS[1])
return released
"
);

/// The start of the kinds scripts: the server's clock (read when first
/// needed), and the functions
/// that grant and give back one request's keys (shared by the acquire,
/// release and hand-off scripts, so each rule is written once).
///
/// A request is the arguments of one lease: token, mode (`x` or `s`),
/// limit, weight, ticket (`0` for none), and its terms: leaseMs and
/// fenceRetentionMs. A grant reads its terms from its request only, so a
/// hand-off writes each request's own; its KEYS are five per user key
/// (lock, fence, waiting, kind, queue: see [`super::keys::RedisKeys`]),
/// `grant` and `give_back` take the range of KEYS that is the request's.
///
/// It calls [`reserve_fences!`]'s function: a script puts that first.
macro_rules! kinds_prelude {
    () => {
        concat!(
            r"
-- The server's clock, read by read_clock() when a script first needs it (a
-- release does not): a redis.call costs about 1.5 us beyond its command.
-- `clock` is its microseconds as a decimal string (the fence base), and
-- `clock_n` the same as a number.
local now, now_ms, clock, clock_n
local function read_clock()
  if not now then
    now = redis.call('TIME')
    local seconds, micros = tonumber(now[1]), tonumber(now[2])
    now_ms = seconds * 1000 + math.floor(micros / 1000)
    clock = now[1] .. string.rep('0', 6 - #now[2]) .. now[2]
    clock_n = seconds * 1000000 + micros
  end
end
-- The Redis names at `offset` (0 lock, 1 fence, 2 waiting, 3 kind, 4
-- queue) of the user keys whose lock names are KEYS[first..last].
local function names(first, last, offset)
  local list = {}
  for i = first, last, 5 do
    list[#list + 1] = KEYS[i + offset]
  end
  return list
end
-- Per lock key granted by this call: true when the grant left no room.
local full = {}
-- Per lock key: {limit, units} of its counted holders as this call left
-- them, where it gave units back or granted some and holders remain. A
-- grant later in the same call (a hand-off) reads them here instead of
-- asking Redis (ZCARD, HMGET) again; pruning forgets them.
local known = {}
-- Makes `key` live at least `ms` more (`text`: the same, as a decimal
-- string); true when it had to.
local function extend(key, ms, text)
  if redis.call('PTTL', key) < ms then
    redis.call('PEXPIRE', key, text)
    return true
  end
  return false
end
-- Drops the fields `gone` of the kind hash `kind` (the fences kept for
-- those members; a thousand to a call: unpack's limit).
local function forget_fences(kind, gone)
  for n = 1, #gone, 1000 do
    redis.call('HDEL', kind, unpack(gone, n, math.min(n + 999, #gone)))
  end
end
-- `limit_text`, `weight_text` and `lease_text` are the request's limit,
-- weight and leaseMs as given: a stored limit is compared with it as a
-- string (every writer stores the canonical decimal), and commands take
-- them without formatting (a number passed to redis.call is formatted with
-- %.17g, about 2000 instructions each). `retention` is its
-- fenceRetentionMs, as given.
local function request(token, mode, limit, weight, ticket, lease, retention)
  local r = {token = token, shared = mode == 's', limit = tonumber(limit), weight = tonumber(weight), ticket = ticket,
    limit_text = limit, weight_text = weight, lease_text = lease, lease_ms = tonumber(lease), retention = retention}
  r.plain = not r.shared and r.limit == 1
  r.member = token .. ':' .. (r.shared and 's' or weight)
  r.mine = ticket ~= '0' and (ticket .. ':' .. token) or nil
  return r
end
-- Marks the waiting name `waiting` for at least `ms` (`text`: the same, as
-- a decimal string): a '1', unless it is a set of plain waiters' marks,
-- which says as much (someone waits) and is kept, to live as long: a
-- release hands the key to the oldest of them.
local function mark_waited(waiting, ms, text)
  local ttl = redis.call('PTTL', waiting)
  if ttl < ms then
    if ttl ~= -2 and redis.call('TYPE', waiting)['ok'] == 'zset' then
      redis.call('PEXPIRE', waiting, text)
    else
      redis.call('SET', waiting, '1', 'PX', text)
    end
  end
end
-- Tells waiters in every process that the keys at KEYS indices `freed` may
-- be granted now: when some process marked any of them as waited for, it
-- takes the marks (one DEL for all) and publishes each key (one that had
-- no mark wakes nobody: a waiter in another process leaves a mark).
local function tell_waiters(freed, channel)
  local marks = {}
  for _, i in ipairs(freed) do
    marks[#marks + 1] = KEYS[i + 2]
  end
  if #marks > 0 and redis.call('DEL', unpack(marks)) > 0 then
    for _, i in ipairs(freed) do
      redis.call('PUBLISH', channel, KEYS[i])
    end
  end
end
-- Raises each fence counter of a grant as the plain script raises its one
-- (see ACQUIRE), to live `retention` ms, and answers {1, fence...}: over
-- several keys one MGET, then a SET with its TTL each (MSET sets no TTL).
-- A counter that is not a number is an error, and a fence that must wait
-- for the clock (see next_fence!) answers {0, wait_ms, 0}, not granted,
-- either before anything is written.
local function raise_fences(fence_keys, retention)
  local fences = {1}
  if #fence_keys == 1 then
    local fence_key = fence_keys[1]
",
            next_fence!("    return {0, wait_ms, 0}\n"),
            r"
    redis.set_repl(redis.REPL_ALL)
    fences[2] = fence
    return fences
  end
  local stored, counters, wait_ms = redis.call('MGET', unpack(fence_keys)), {}, nil
  for n, fence_key in ipairs(fence_keys) do
    local fence, counter = clock_n, 0
    if stored[n] then
      counter = tonumber(stored[n])
      if not counter then
        return redis.error_reply('ERR a fence counter is not a number')
      end
      if counter >= fence then
        fence = counter + 1
        local lead = fence - clock_n
        if lead > LEAD_US and lead <= RESERVED_US + LEAD_US then
          wait_ms = math.max(wait_ms or 0, math.ceil(lead / 1000))
        end
      end
    end
    fences[n + 1] = fence
    counters[n] = counter
  end
  -- A fence that waits for the clock holds up the grant of every key:
  -- nothing is written yet.
  if wait_ms then
    return {0, wait_ms, 0}
  end
  redis.set_repl(redis.REPL_NONE)
  for n, fence_key in ipairs(fence_keys) do
    local fence = fences[n + 1]
    if fence > clock_n or fence >= math.ceil(counters[n] / RESERVED_US) * RESERVED_US then
      reserve(fence_key, fence, retention)
    else
      -- The fence is the clock: `retention` from now is from its value.
      redis.call('SET', fence_key, clock, 'PX', retention)
    end
  end
  redis.set_repl(redis.REPL_ALL)
  return fences
end
-- A plain request over keys none of which has a kind hash (no shared or
-- counted holder, no waiting counted request) and none of which is held:
-- true, and `grant` writes each lock once its fence is known; else false
-- (the full check then decides). For such keys this is exactly that
-- check's answer, in two calls.
local function take_free(first, last, r)
  return redis.call('EXISTS', unpack(names(first, last, 3))) == 0 and redis.call('EXISTS', unpack(names(first, last, 0))) == 0
end
",
            unmark!(),
            kinds_grant!(),
            kinds_give_back!()
        )
    };
}

/// The function `grant(first, last, r, waiting_ms)` of the kinds
/// scripts: grants request `r` every key of KEYS[first..last], all or
/// nothing (see [`KINDS_ACQUIRE`]), and answers as that script does.
macro_rules! kinds_grant {
    () => {
        concat!(
            r"
local function grant(first, last, r, waiting_ms)
  local token, shared, plain, limit, weight, member, mine = r.token, r.shared, r.plain, r.limit, r.weight, r.member, r.mine
  local ticket, lease_ms, lease_text = r.ticket, r.lease_ms, r.lease_text
  read_clock()
  local taken = plain and take_free(first, last, r)
  local kinds = {}
  if not taken then
    local blocked, hint = {}, nil
    for i = first, last, 5 do
      local lock, kind, queue = KEYS[i], KEYS[i + 3], KEYS[i + 4]
      local at = (i - first) / 5 + 1
      local free, until_free = true, nil
      local cached = known[lock]
      -- With units left the set of holders is not empty: its size is read
      -- only if pruning needs it.
      local holders = cached and true or redis.pcall('ZCARD', lock)
      if type(holders) == 'table' then
        local held = redis.call('GET', lock)
        if held ~= 'h:' .. token and string.sub(held, 1, #token + 1) ~= token .. ':' then
          if not plain and not shared then
            return {-1, at}
          end
          free, until_free = false, redis.call('PTTL', lock)
        end
      else
        local stored, units
        if cached then
          stored, units = cached.limit, cached.units
        else
          stored = redis.call('HMGET', kind, 'limit', 'units')
          units = tonumber(stored[2] or '0')
          stored = stored[1]
        end
        if holders == true or holders > 0 then
          if stored and stored ~= r.limit_text then
            return {-1, at}
          end
          if plain or (not shared and units + weight > limit) then
            local gone = redis.call('ZRANGEBYSCORE', lock, '-inf', now_ms)
            if #gone > 0 then
              if holders == true then
                holders = redis.call('ZCARD', lock)
              end
              known[lock] = nil
              -- Each member's own weight, after its last ':' (tokens differ
              -- in length: their labels do, and an older release's has
              -- none; a reader's `s` weighs nothing). Review R58.
              local pruned = 0
              for _, m in ipairs(gone) do
                pruned = pruned + (tonumber(string.match(m, ':(%d+)$')) or 0)
              end
              redis.call('ZREMRANGEBYSCORE', lock, '-inf', now_ms)
              forget_fences(kind, gone)
              holders = holders - #gone
              if pruned > 0 then
                units = redis.call('HINCRBY', kind, 'units', -pruned)
              end
            end
            if holders == 0 then
              redis.call('HDEL', kind, 'units')
              units = 0
            elseif plain then
              free = false
            elseif units + weight > limit and not redis.call('ZSCORE', lock, member) then
              -- Refused: the units are counted again from the holders left
              -- (each member's weight after its last ':'), and the count
              -- mended where it is off. A process of the release before
              -- holder labels pruned a member at its own token's length
              -- (32) and gave back nothing of a longer token's units: the
              -- key then refused room it had, for as long as anyone held it
              -- (review R59). A count reads every member: once a second at
              -- most per key (`recounted`, the server's ms, either way from
              -- now: a clock stepped back does not stop it), on a refusal
              -- only (review R60), and where the hash is (an HSET would
              -- make one that never expires). The mark may be the try's
              -- first write, which `maxmemory`, `min-replicas-to-write` or
              -- `MISCONF` refuse: then nothing is counted, and the try is
              -- refused as it was (review R61).
              local recounted = tonumber(redis.call('HGET', kind, 'recounted') or '0') or 0
              local marked = stored and math.abs(now_ms - recounted) >= 1000
                and redis.pcall('HSET', kind, 'recounted', string.format('%.0f', now_ms))
              if marked and not (type(marked) == 'table' and marked.err) then
                local counted = 0
                for _, m in ipairs(redis.call('ZRANGE', lock, 0, -1)) do
                  counted = counted + (tonumber(string.match(m, ':(%d+)$')) or 0)
                end
                if counted ~= units then
                  units = counted
                  redis.call('HSET', kind, 'units', string.format('%.0f', units))
                end
              end
              free = units + weight <= limit
            end
            if not free then
              local first_holder = redis.call('ZRANGE', lock, 0, 0, 'WITHSCORES')
              until_free = first_holder[2] and (tonumber(first_holder[2]) - now_ms) or -1
            end
          end
        elseif stored then
          redis.call('ZREMRANGEBYSCORE', queue, '-inf', now_ms)
          if redis.call('EXISTS', queue) == 0 then
            redis.call('DEL', kind)
            stored = nil
          elseif stored ~= r.limit_text then
            return {-1, at}
          else
            -- The set went with its last lease while requests wait: its
            -- units go, and so do its holders' fences (every field named
            -- after a member, with a ':'), which no release or prune will
            -- find (review R63).
            local gone = {'units'}
            for _, field in ipairs(redis.call('HKEYS', kind)) do
              if string.find(field, ':', 1, true) then
                gone[#gone + 1] = field
              end
            end
            forget_fences(kind, gone)
          end
          units = 0
        end
        kinds[i] = {stored = stored, units = units, fresh = holders == 0}
      end
      if free and not plain and redis.call('EXISTS', queue) == 1 then
        redis.call('ZREMRANGEBYSCORE', queue, '-inf', now_ms)
        if shared then
          free = redis.call('EXISTS', queue) == 0
        else
          -- Marks of this token are its own (a try sent twice left one
          -- under a ticket it never learned): never ahead of it.
          local own = ':' .. token
          for _, m in ipairs(redis.call('ZRANGE', queue, 0, -1)) do
            if string.sub(m, -#own) ~= own and (not mine or m < mine) then
              free = false
              break
            end
          end
        end
        -- A request that holds here already is a try of its grant sent
        -- again (one that outlived its connection, come after the grant):
        -- granted again, as on a plain key, taking no more room. Refused,
        -- it would leave a mark of a token that holds, which its release
        -- does not look for: later requests would wait behind it.
        if not free then
          local score = redis.pcall('ZSCORE', lock, member)
          free = type(score) == 'string' and tonumber(score) > now_ms
        end
      end
      if not free then
        blocked[#blocked + 1] = i
        if until_free and until_free >= 0 and (not hint or until_free < hint) then
          hint = until_free
        end
      end
    end
    if #blocked > 0 then
      if waiting_ms > 0 then
        local waiting_text, mark_expiry = string.format('%.0f', waiting_ms), string.format('%.0f', now_ms + waiting_ms)
        for _, i in ipairs(blocked) do
          mark_waited(KEYS[i + 2], waiting_ms, waiting_text)
          if not shared then
            if ticket == '0' then
              ticket = clock
            end
            redis.call('ZADD', KEYS[i + 4], mark_expiry, ticket .. ':' .. token)
            extend(KEYS[i + 4], waiting_ms, waiting_text)
            if not plain then
              redis.call('HSETNX', KEYS[i + 3], 'limit', r.limit_text)
              extend(KEYS[i + 3], waiting_ms, waiting_text)
            end
          end
        end
      end
      return {0, hint or -1, tonumber(ticket)}
    end
  end
  local fences = raise_fences(names(first, last, 1), r.retention)
  if fences.err or fences[1] == 0 then
    return fences
  end
  -- Holders' expiry, formatted once for every key's ZADD.
  local expiry = not plain and string.format('%.0f', now_ms + lease_ms)
  for i = first, last, 5 do
    local lock, kind = KEYS[i], KEYS[i + 3]
    -- Each holder's fence, kept with it (a plain lock's value, `<token>:<fence>`;
    -- a member's field in the kind hash), for inspect.
    local fence = fences[(i - first) / 5 + 2]
    local fence_text = fence == clock_n and clock or string.format('%.0f', fence)
    if plain then
      redis.call('SET', lock, token .. ':' .. fence_text, 'PX', lease_text)
      full[lock] = true
    else
      local units, stored = kinds[i].units, kinds[i].stored
      -- What the AOF or a replica replays must be this set and these units,
      -- whatever it still holds of the key. An RDB load drops a key whose
      -- TTL passed with no DEL reaching the AOF (or a replica), so a replay
      -- can still hold it: a set, its holders all dead, that a ZADD making
      -- the set anew added to there (members no units counted: a prune or
      -- a late release of theirs took their weight off once more, over the
      -- limit), or a plain holder's string, where the ZADD failed and the
      -- PEXPIRE below extended it (its holder's late renewal was granted
      -- beside this one). So a set made anew starts from a key written
      -- away: SET and DEL reach the replay (a DEL of a missing key alone
      -- would not: it writes nothing) and drop whatever it holds there,
      -- of any type. The key is missing here (no holder, or pruned to
      -- none). And units that read 0 here (a hash new or reset, or one a
      -- waiter made anew with HSETNX while a replay still holds the old
      -- one) are written as a value, not added to. From then on the key and
      -- units agree with what a replay holds, and every later write (a
      -- prune, a ZREM and its HINCRBY) keeps them agreeing. Cheaper than
      -- counting the units from the members on each prune and release (a
      -- read of every member): one call more than the PTTL that extending
      -- a new set would cost.
      local fresh = kinds[i].fresh
      if fresh then
        redis.call('SET', lock, '')
        redis.call('DEL', lock)
      end
      local added = redis.call('ZADD', lock, expiry, member) == 1
      local extended
      if fresh then
        redis.call('PEXPIRE', lock, lease_text)
        extended = true
      else
        extended = extend(lock, lease_ms, lease_text)
      end
      if not shared then
        -- The hash holds `units` now (the checks above read, pruned or
        -- reset it): a new holder adds its weight, and a hash without a
        -- limit gets both fields.
        if not stored or (added and units == 0) then
          units = added and units + weight or units
          redis.call('HSET', kind, 'limit', r.limit_text, 'units', string.format('%.0f', units), member, fence_text)
        else
          if added then
            units = redis.call('HINCRBY', kind, 'units', r.weight_text)
          end
          redis.call('HSET', kind, member, fence_text)
        end
        known[lock] = units > 0 and {limit = r.limit_text, units = units} or nil
      elseif not stored then
        redis.call('HSET', kind, 'limit', r.limit_text, member, fence_text)
      else
        redis.call('HSET', kind, member, fence_text)
      end
      full[lock] = not shared and units >= limit
      -- The kind hash outlives its set of holders: every script that
      -- extends the set extends the hash as far. So a set that needs no
      -- extending has a hash that needs none, unless the hash is new.
      if extended or not stored then
        extend(kind, lease_ms, lease_text)
      end
    end
    -- A request that waited takes its mark back; a plain holder's key
    -- whose last mark that was keeps no kind hash (it stayed for the marks).
    -- A plain request that waited behind a plain holder marked the waiting
    -- set instead (see ACQUIRE): left there, a later release could hand the
    -- key to this finished request.
    if mine then
      if redis.call('ZREM', KEYS[i + 4], mine) == 1 and plain and redis.call('EXISTS', KEYS[i + 4]) == 0 then
        redis.call('DEL', kind)
      end
      if plain then
        unmark(KEYS[i + 2], {mine})
      end
    end
  end
  return fences
end
"
        )
    };
}

/// The function `give_back(first, last, r)` of the kinds scripts: gives
/// back every key of KEYS[first..last] that request `r` still holds.
/// Returns how many it gave back, and the first KEYS index of each whose
/// release may let a waiter in (a reader's only when it was the last one:
/// before that no waiter can be granted).
macro_rules! kinds_give_back {
    () => {
        r"
local function give_back(first, last, r)
  local released, freed = 0, {}
  if r.plain then
    -- One MGET and one DEL for every key, not a GET and a DEL each (MGET
    -- answers false for a key of another type: a set of holders, not ours).
    local locks = names(first, last, 0)
    local held, ours, prefix = redis.call('MGET', unpack(locks)), {}, r.token .. ':'
    for n = 1, #held do
      if held[n] and string.sub(held[n], 1, #prefix) == prefix then
        ours[#ours + 1] = locks[n]
        freed[#freed + 1] = first + (n - 1) * 5
      end
    end
    if #ours > 0 then
      redis.call('DEL', unpack(ours))
    end
    return #ours, freed
  end
  for i = first, last, 5 do
    local lock, kind, queue = KEYS[i], KEYS[i + 3], KEYS[i + 4]
    local done = false
    if pwrite('ZREM', lock, r.member) == 1 then
      done = true
      redis.call('HDEL', kind, r.member)
      -- Units left are held by members still in the set (a pruned member
      -- takes its units along): then the set is not empty.
      local left = 0
      if not r.shared then
        left = redis.call('HINCRBY', kind, 'units', '-' .. r.weight_text)
        known[lock] = left > 0 and {limit = r.limit_text, units = left} or nil
      end
      if left <= 0 and redis.call('EXISTS', lock) == 0 then
        if redis.call('EXISTS', queue) == 0 then
          redis.call('DEL', kind)
        else
          redis.call('HDEL', kind, 'units')
        end
      elseif r.shared then
        done = 'quiet'
      end
    end
    if done then
      released = released + 1
      if done ~= 'quiet' then
        freed[#freed + 1] = i
      end
    end
  end
  return released, freed
end
"
    };
}

/// Grants shared or counted holds, and plain ones over several keys, all
/// or nothing: every key of the call is checked first, and only when each
/// can be granted is any written.
///
/// The layout, chosen for the fewest Redis calls per grant:
/// - Shared and counted holders of a key live in a sorted set under the
///   key's lock name, one member per lease (`<token>:s` for a reader,
///   `<token>:<weight>` for a counted holder) scored by its expiry in the
///   server's milliseconds, and the set itself expires with its last
///   holder. Each holder thus has its own token and expiry: a request that
///   does not fit beside the holders prunes those that died (one range
///   query, `ZREMRANGEBYSCORE`) before it is refused, and a renew moves
///   only its own score. One that fits is granted without pruning: holders
///   that died can only make a key look fuller than it is. A plain lock is
///   a string under the same name, so the plain script's `GET` fails on
///   a set of holders (and a plain acquire reads one `GET` when the key
///   is free), and a kinds script's `ZCARD` (one call for the type and the
///   number of holders) answers `WRONGTYPE` on a plain holder. (A hash of
///   token -> expiry, the other common layout, must be read whole to find
///   the holders that died; the sorted set finds them with one range query.)
/// - The kind hash keeps the key's `limit` (every caller must agree) and
///   `units`, the weights counted holders hold: one `HMGET` reads both
///   instead of summing every member, and one `HSET` writes both back on a
///   grant; pruned or released members take their weights off. It also
///   keeps each holder's fence, in a field named after its member, written
///   with its grant and dropped with the member (released, pruned, broken):
///   what `inspect` shows. It lives as long as the holders or the marks of waiters;
///   found on a key neither held nor waited for, it is stale and dropped,
///   so the next caller may pick another limit.
/// - The queue set holds the marks of waiting writers and counted
///   requests, `<ticket>:<token>` scored by expiry (`waitingMs`), where the
///   ticket is the server's clock in microseconds when the request first
///   waited. A writer's mark stops new readers; a counted request is
///   granted only when no older mark waits, so a heavy request at the head
///   is not overtaken by light ones that came later (in any process). A
///   request that holds the key already (a try of its grant sent again) is
///   granted again whatever waits, and marks nothing. An empty queue (the
///   usual case) costs one `EXISTS`.
///
/// KEYS: five per user key (lock, fence, waiting, kind, queue). ARGV: token,
/// leaseMs, waitingMs, mode (`x` or `s`), limit, weight, ticket (`0` for
/// none), channel, fenceRetentionMs (the release and withdraw scripts take
/// the same, and use what they need).
///
/// Returns `{1, fence...}` (one per key, in KEYS order) when granted;
/// `{0, ms, 0}` when a key's fence must wait `ms` for the server's clock
/// (see `next_fence!`; nothing written or marked); `{0, hint, ticket}` when
/// not, where `hint` is how long (ms) until the
/// first blocking holder expires (negative: unknown), and `ticket` this
/// request's place among waiters (kept for the next try; `0` for a single
/// try, which leaves no mark); `{-1, i}` when key `i` (from 1) is held or
/// waited for with another limit.
const KINDS_ACQUIRE: &str = concat!(
    reserve_fences!(),
    refused_writes!(),
    kinds_prelude!(),
    r"
return grant(1, #KEYS, request(ARGV[1], ARGV[4], ARGV[5], ARGV[6], ARGV[7], ARGV[2], ARGV[9]), tonumber(ARGV[3]))
"
);

/// Extends every key of a kinds lease that still carries our token (a
/// plain key: the string; a shared or counted one: our member, not yet
/// expired), each to `leaseMs` from now. Returns how many keys were renewed.
/// KEYS and ARGV as for [`KINDS_ACQUIRE`].
const KINDS_RENEW: &str = concat!(
    reserve_fences!(),
    refused_writes!(),
    kinds_prelude!(),
    r"
local r = request(ARGV[1], ARGV[4], ARGV[5], ARGV[6], ARGV[7], ARGV[2], ARGV[9])
local lease_ms, lease_text = r.lease_ms, r.lease_text
read_clock()
local renewed = 0
for i = 1, #KEYS, 5 do
  local lock, kind = KEYS[i], KEYS[i + 3]
  if r.plain then
    local held = redis.pcall('GET', lock)
    if type(held) == 'string' and string.sub(held, 1, #r.token + 1) == r.token .. ':' then
      redis.call('PEXPIRE', lock, lease_text)
      renewed = renewed + 1
    end
  else
    local score = redis.pcall('ZSCORE', lock, r.member)
    if type(score) == 'string' and tonumber(score) > now_ms then
      redis.call('ZADD', lock, 'XX', string.format('%.0f', now_ms + lease_ms), r.member)
      extend(lock, lease_ms, lease_text)
      extend(kind, lease_ms, lease_text)
      renewed = renewed + 1
    end
  end
end
return renewed
"
);

/// Gives back every key of a kinds lease that still carries our token and,
/// where units were freed and some process marked one of those keys as
/// waited for, publishes a wake-up for each of them (see `give_back` and
/// `tell_waiters`). Returns how many keys were released. KEYS and ARGV as
/// for [`KINDS_ACQUIRE`].
const KINDS_RELEASE: &str = concat!(
    reserve_fences!(),
    refused_writes!(),
    kinds_prelude!(),
    r"
local released, freed = give_back(1, #KEYS, request(ARGV[1], ARGV[4], ARGV[5], ARGV[6], ARGV[7], ARGV[2], ARGV[9]))
tell_waiters(freed, ARGV[8])
return released
"
);

/// The common hand-off of [`KINDS_HANDOFF`], as a straight path run before
/// the kinds prelude (whose functions and tables the general path makes
/// anew at every call: most of a hand-off's instructions): one counted
/// lease of one key gives back its units to one request of the same key,
/// limit and weight that left no mark, and no older request is queued. The
/// answer, the writes and the wake-up are the general path's for that case:
/// the units count is unchanged (the request takes what the lease gave
/// back), the request's lease and fence counter are written on its own
/// terms, and the key's waiters are told only when it is not full. The fence
/// is raised first: a counter that is not a number fails the call before
/// anything else is written. Anything else goes on to the general path,
/// a lease no longer in the set among it (`ZREM` answers 0; the fence
/// counter was raised, which only skips a fence), and so does a fence that
/// must wait for the clock (`wait_ms`, the counter put back): there the
/// lease is given back, the request's grant refused as its own try would
/// be (`{0, ms, 0}`), and the key's waiters told.
macro_rules! handoff_straight {
    () => {
        concat!(
            r"
if #ARGV == 15 and ARGV[3] == '1' and ARGV[13] == '1' and ARGV[5] == 'x' and ARGV[9] == 'x' and ARGV[6] ~= '1'
  and ARGV[10] == ARGV[6] and ARGV[11] == ARGV[7] and ARGV[12] == '0' and KEYS[6] == KEYS[1]
  and redis.call('EXISTS', KEYS[5]) == 0 then
  local now = redis.call('TIME')
  local clock = now[1] .. string.rep('0', 6 - #now[2]) .. now[2]
  local clock_n = tonumber(clock)
  local fence_key, retention = KEYS[2], ARGV[15]
",
            next_fence!(""),
            r"
  redis.set_repl(redis.REPL_ALL)
  if not wait_ms and pwrite('ZREM', KEYS[1], ARGV[4] .. ':' .. ARGV[7]) == 1 then
    local lease_ms = tonumber(ARGV[14])
    local expiry = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000) + lease_ms
    local member = ARGV[8] .. ':' .. ARGV[11]
    -- The fences kept with members (see `grant`): the lease's goes, the request's is kept.
    redis.call('HDEL', KEYS[4], ARGV[4] .. ':' .. ARGV[7])
    redis.call('HSET', KEYS[4], member, fence == clock_n and clock or string.format('%.0f', fence))
    if redis.call('ZADD', KEYS[1], string.format('%.0f', expiry), member) == 0 then
      -- The request held already (a retry of its grant): the units given
      -- back went to nobody.
      redis.call('HINCRBY', KEYS[4], 'units', '-' .. ARGV[7])
    end
    local wake = 0
    if tonumber(redis.call('HGET', KEYS[4], 'units') or '0') < tonumber(ARGV[6]) then
      wake = 1
      if redis.call('DEL', KEYS[3]) > 0 then
        redis.call('PUBLISH', ARGV[1], KEYS[1])
      end
    end
    if redis.call('PTTL', KEYS[1]) < lease_ms then
      redis.call('PEXPIRE', KEYS[1], ARGV[14])
      if redis.call('PTTL', KEYS[4]) < lease_ms then
        redis.call('PEXPIRE', KEYS[4], ARGV[14])
      end
    end
    return {1, wake, 1, fence}
  end
end
"
        )
    };
}

/// Hands units from one process's lease to that process's next waiters in
/// one call, and grants one acquire together with the waiters queued
/// behind it in its process: optionally gives back a lease (as
/// [`KINDS_RELEASE`]), then grants each request in turn (as
/// [`KINDS_ACQUIRE`], every rule included: limits, the marks of waiters in
/// other processes, a new fence per key), stopping at the first that cannot
/// be granted. A released key whose freed units went to the requests (a
/// plain holder, or every unit of a counted key held) publishes nothing and
/// keeps its waiting mark: no other waiter could be granted. (Whether it
/// was filled is what the grants recorded in `full`; only a key no request
/// was granted is read again.)
///
/// KEYS: the released lease's five per user key, then each request's.
/// ARGV: channel, waitingMs (marks left by the first request when it is not
/// granted; 0 for none), the released lease's number of user keys (`0`: no
/// release), its token, mode, limit and weight, then per request token,
/// mode, limit, weight, ticket, its number of user keys, and its terms:
/// leaseMs and fenceRetentionMs (the requests may be of several backends,
/// each granted on its own).
/// Returns `{released, wake..., answer...}`: how many keys were given back;
/// per released key 1 when a waiter may now be granted there (the process
/// wakes its own), else 0; then for each request tried the answer
/// [`KINDS_ACQUIRE`] would give (`{1, fence...}`, `{0, hint, ticket}` or
/// `{-1, i}`), flattened, up to the first that is not a grant.
const KINDS_HANDOFF: &str = concat!(
    reserve_fences!(),
    refused_writes!(),
    handoff_straight!(),
    kinds_prelude!(),
    r"
local channel, waiting_ms = ARGV[1], tonumber(ARGV[2])
local last = tonumber(ARGV[3]) * 5
local released, freed, gave = 0, {}, request(ARGV[4], ARGV[5], ARGV[6], ARGV[7], '0', '0', '0')
if last > 0 then
  released, freed = give_back(1, last, gave)
end
local answers, first = {}, last + 1
for a = 8, #ARGV, 8 do
  local upto = first + tonumber(ARGV[a + 5]) * 5 - 1
  local answer = grant(first, upto, request(ARGV[a], ARGV[a + 1], ARGV[a + 2], ARGV[a + 3], ARGV[a + 4], ARGV[a + 6], ARGV[a + 7]),
    waiting_ms)
  if answer.err then
    return answer
  end
  for _, v in ipairs(answer) do
    answers[#answers + 1] = v
  end
  if answer[1] ~= 1 then
    break
  end
  first, waiting_ms = upto + 1, 0
end
local reply, open, opened = {released}, {}, {}
for _, i in ipairs(freed) do
  local filled = full[KEYS[i]]
  -- A plain key given back is gone, unless a request here took it again.
  if filled == nil and not gave.plain then
    local type_of = redis.call('TYPE', KEYS[i])['ok']
    if type_of == 'string' then
      filled = true
    elseif type_of == 'zset' then
      local kind = redis.call('HMGET', KEYS[i + 3], 'limit', 'units')
      local limit = tonumber(kind[1] or '1')
      filled = limit > 1 and tonumber(kind[2] or '0') >= limit
    end
  end
  if not filled then
    open[i] = true
    opened[#opened + 1] = i
  end
end
tell_waiters(opened, channel)
for i = 1, last, 5 do
  reply[#reply + 1] = open[i] and 1 or 0
end
for _, v in ipairs(answers) do
  reply[#reply + 1] = v
end
return reply
"
);

/// Takes back the waiting marks of a request that stopped waiting
/// (`WAIT_TIMEOUT`, `ABORTED`, closed), so that it stops no reader and no
/// counted request for the rest of its `waitingMs`; when it was the last
/// mark of the queue set, those waiting are told at once (as by a
/// release). A plain waiter's mark is in the waiting set (see [`RELEASE`]):
/// a key a release handed to it (the lock carries `h:<token>`) is given up,
/// and waiters told, whatever the waiting name holds now. Every mark of the
/// token goes, whatever its ticket (ARGV[7] is not needed): a first try
/// sent twice, or one whose answer was lost, left marks under tickets the
/// caller may not know. And both sets are looked at: a plain writer that
/// waited behind readers, then behind a plain holder, has marks in each,
/// and its mark left in the waiting set would have the holder's release
/// hand the key to it, for nobody, until the mark lapsed. Returns 0.
///
/// The waiting name is deleted only when it is a kinds waiter's `'1'`
/// (those waiters mark it again at their next try): a set of plain
/// waiters' marks is theirs, and stays for the holder's release to hand the
/// key to the oldest (the withdrawn marks the last of it: a '1', see
/// [`unmark!`]). Whoever waited is told whichever it is; the queue set
/// is looked at first, while the waiting name still says someone waits
/// (the withdrawn marks may be the last of the set of marks).
const KINDS_WITHDRAW: &str = concat!(
    marks_of!(),
    unmark!(),
    r"
for i = 1, #KEYS, 5 do
  local lock, waiting, queue = KEYS[i], KEYS[i + 2], KEYS[i + 4]
  local queued = marks_of(queue, ARGV[1])
  if #queued > 0 then
    redis.call('ZREM', queue, unpack(queued))
    if redis.call('EXISTS', queue) == 0 then
      local waited_for = redis.call('TYPE', waiting)['ok']
      if waited_for ~= 'none' then
        if waited_for ~= 'zset' then
          redis.call('DEL', waiting)
        end
        redis.call('PUBLISH', ARGV[8], lock)
      end
    else
      -- A request queued behind it may be first now (a counted one the
      -- key has room for): told, not left to its next poll.
      redis.call('PUBLISH', ARGV[8], lock)
    end
  end
  local waited, members = marks_of(waiting, ARGV[1])
  if #waited > 0 then
    unmark(waiting, waited, members)
  end
  if redis.pcall('GET', lock) == 'h:' .. ARGV[1] then
    redis.call('DEL', lock)
    redis.call('PUBLISH', ARGV[8], lock)
  end
end
return 0
"
);

/// What a key holds now (see `Store::inspect`): a read, writing nothing.
/// KEYS: lock, fence, waiting, kind, queue. ARGV: how many holders to
/// list. Returns the mode (`x`, `s`, or empty when free), the limit, the
/// fence counter (empty when expired or never set), the waiting acquires,
/// the live holders, then the listed ones' remaining lease in ms, units,
/// token (the driver keeps only the holder label it carries), fence and
/// ms held since it (both empty where not known), soonest expiry first.
///
/// A plain holder's lock is a string, `<token>:<fence>` (an older
/// release's: the token alone); `h:<token>` is a key a
/// release handed to a waiter that has not taken it yet: no holder, one
/// waiter. Shared and counted holders are members `<token>:s` and
/// `<token>:<weight>` of a sorted set scored by expiry (see
/// [`KINDS_ACQUIRE`]), each one's fence the field of the kind hash named
/// after it; a counted key's holders are exclusive. A waiting
/// acquire is a live mark `<ticket>:<token>` in the waiting or the queue
/// set, counted once per token (a try sent twice leaves two), and not at
/// all for a token that holds the key or was handed it; a plain `1`
/// says only that someone may wait (readers behind a writer leave nothing
/// else, and it outlives the last mark), so it counts none.
const INSPECT: &str = r"
local now = redis.call('TIME')
local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local now_us = tonumber(now[1]) * 1000000 + tonumber(now[2])
local mode, limit, held, holders, waiting = '', '1', 0, {}, 0
-- A holder's fence as kept (empty: none, an older release's holder) and
-- the ms since it, by this clock (empty when the fence is above it).
local function since(fence)
  local held_us = fence and tonumber(fence) and now_us - tonumber(fence)
  return fence or '', held_us and held_us >= 0 and string.format('%.0f', math.floor(held_us / 1000)) or ''
end
-- The tokens that hold the key or were handed it: their own marks (a
-- try sent twice leaves one under a ticket it never learned, and a writer
-- handed the key keeps its queue mark until it takes it) are no waiters.
local tokens = {}
local kind = redis.call('TYPE', KEYS[1])['ok']
if kind == 'string' then
  local token = redis.call('GET', KEYS[1])
  if string.sub(token, 1, 2) == 'h:' then
    tokens[string.sub(token, 3)], waiting = true, 1
  else
    local owner, fence = string.match(token, '^([^:]*):(%d+)$')
    owner = owner or token
    tokens[owner] = true
    mode, held = 'x', 1
    local fence_text, held_ms = since(fence)
    holders = {redis.call('PTTL', KEYS[1]), '1', owner, fence_text, held_ms}
  end
elseif kind == 'zset' then
  limit = redis.call('HGET', KEYS[4], 'limit') or '1'
  held = redis.call('ZCOUNT', KEYS[1], '(' .. now_ms, '+inf')
  for _, member in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. now_ms, '+inf')) do
    tokens[string.match(member, '^(.*):[^:]*$') or member] = true
  end
  local members = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. now_ms, '+inf', 'WITHSCORES', 'LIMIT', 0, ARGV[1])
  local named = {}
  for n = 1, #members, 2 do
    named[#named + 1] = members[n]
  end
  local fences = #named > 0 and redis.call('HMGET', KEYS[4], unpack(named)) or {}
  for n = 1, #members, 2 do
    local units = string.match(members[n], ':([^:]*)$')
    if units == 's' then
      mode, units = 's', '1'
    elseif mode == '' then
      mode = 'x'
    end
    local fence_text, held_ms = since(fences[(n + 1) / 2] or nil)
    holders[#holders + 1] = tonumber(members[n + 1]) - now_ms
    holders[#holders + 1] = units
    holders[#holders + 1] = string.match(members[n], '^(.*):[^:]*$') or members[n]
    holders[#holders + 1] = fence_text
    holders[#holders + 1] = held_ms
  end
end
for _, marks in ipairs({KEYS[3], KEYS[5]}) do
  if redis.call('TYPE', marks)['ok'] == 'zset' then
    for _, mark in ipairs(redis.call('ZRANGEBYSCORE', marks, '(' .. now_ms, '+inf')) do
      local token = string.sub(mark, (string.find(mark, ':', 1, true) or 0) + 1)
      if not tokens[token] then
        tokens[token], waiting = true, waiting + 1
      end
    end
  end
end
local reply = {mode, limit, redis.call('GET', KEYS[2]) or '', waiting, held}
for _, field in ipairs(holders) do
  reply[#reply + 1] = field
end
return reply
";

/// The function `holders_seen(lock)`: a digest of what the key's lock holds
/// (a plain holder's token, a handed key's `h:<token>`, every member of a
/// set of shared or counted holders, in order), which every grant changes
/// (each has a fresh token): what [`FORCE_RELEASE`] compares besides the
/// counter, which a restore can bring back exactly beside a grant it kept
/// (an exact copy of the counter, then a grant in its second that
/// replicated only its lock: review R55).
macro_rules! holders_seen {
    () => {
        r"
local function holders_seen(lock)
  local held = redis.call('TYPE', lock)['ok']
  if held == 'string' then
    return redis.sha1hex('s' .. redis.call('GET', lock))
  elseif held == 'zset' then
    local members = redis.call('ZRANGE', lock, 0, -1)
    table.sort(members)
    return redis.sha1hex('z' .. table.concat(members, '\n'))
  end
  return held
end
"
    };
}

/// Breaks a key (`Backend::force_release`): raises its fence counter as a
/// grant would (see `next_fence!`), then removes every holder: a plain
/// holder's lock, or the whole set of shared or counted holders with the
/// units they held (the kind hash stays, without units, while a queue set
/// keeps waiters' marks; else it goes, as at a last holder's release). A
/// removed holder's renewal and release then find no token (`LEASE_LOST`).
/// A key a release handed to a waiter (`h:<token>`) has no holder: it stays
/// the waiter's. When it removed a holder and some process marked the key
/// as waited for, waiters are told on the channel (the marks stay: the key
/// is free as at a lease's end, and each waiter's next try takes it or
/// queues again).
///
/// Only while the fence counter and the holders are still what the driver
/// read (ARGV[3] and ARGV[4], see [`OBSERVE`], which makes a counter where
/// there was none): every grant and every break
/// moves it, so a break sent again after a lost connection, or delivered
/// late by a proxy, changes nothing once anyone was granted or broke the
/// key since its read (reviews R50, R52, R53: each removed a holder granted
/// after the first run). Not a read of the holders and a break of those: a
/// grant between the two would outlive the break below its fence (review
/// R51); here it moves the counter, and the driver reads again.
///
/// The counter is raised before anything is removed, so that a fence that
/// must wait for the clock leaves the holders as they were, and its
/// reservation is always replicated (a grant replicates one only once a
/// second): an exact copy of the counter (an AOF rewrite, a full sync) that
/// a restart or failover brings back could otherwise hold the very value a
/// break read, beside a holder granted after the break, and a repeated
/// break would match it (review R54). The removal is replicated too
/// (`next_fence!` leaves replication off), or a promoted replica would
/// bring the holders back.
/// KEYS: lock, fence, waiting, kind, queue. ARGV: channel,
/// fenceRetentionMs, the counter and the holders read. Returns
/// `{1, removed, fence}`;
/// `{0, ms}` when the fence must wait `ms` for the server's clock; `{2}`
/// when the counter moved (the last two with nothing written).
const FORCE_RELEASE: &str = concat!(
    reserve_fences!(),
    refused_writes!(),
    holders_seen!(),
    r"
if redis.call('GET', KEYS[2]) ~= ARGV[3] or holders_seen(KEYS[1]) ~= ARGV[4] then
  return {2}
end
local now = redis.call('TIME')
local clock = now[1] .. string.rep('0', 6 - #now[2]) .. now[2]
local clock_n = tonumber(clock)
local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local fence_key, retention = KEYS[2], ARGV[2]
",
    next_fence!("    return {0, wait_ms}\n"),
    r"
-- Always a reservation, replicated before the removal: a copy of the
-- counter a restart or failover brings back with the removal (an AOF, a
-- replica) then carries a value above every counter read before the break,
-- which a repeated break compares with (review R54).
reserve(fence_key, fence, retention)
redis.set_repl(redis.REPL_ALL)
local removed = 0
local held = redis.call('TYPE', KEYS[1])['ok']
if held == 'string' then
  if string.sub(redis.call('GET', KEYS[1]), 1, 2) ~= 'h:' then
    removed = 1
    redis.call('DEL', KEYS[1])
  end
elseif held == 'zset' then
  removed = redis.call('ZCOUNT', KEYS[1], '(' .. now_ms, '+inf')
  if redis.call('EXISTS', KEYS[5]) == 0 then
    redis.call('DEL', KEYS[4])
  else
    -- The units and the removed holders' fences (fields named after them).
    local members = redis.call('ZRANGE', KEYS[1], 0, -1)
    members[#members + 1] = 'units'
    for n = 1, #members, 1000 do
      redis.call('HDEL', KEYS[4], unpack(members, n, math.min(n + 999, #members)))
    end
  end
  redis.call('DEL', KEYS[1])
end
if removed > 0 and redis.call('EXISTS', KEYS[3], KEYS[5]) > 0 then
  redis.call('PUBLISH', ARGV[1], KEYS[1])
end
return {1, removed, fence}
"
);

/// What [`FORCE_RELEASE`] compares with: the key's fence counter and its
/// holders (`holders_seen!`), the counter first raised to the end of its
/// second (or of the clock's, when it is behind the clock or missing), the
/// exact value replicated: a reservation, as a restore would bring one
/// back. So every grant after this read waits for the clock to pass that
/// second (as after a restore: `next_fence!`'s `LEAD_US`) and then writes a
/// new reservation, replicated with its lock; no copy of the counter a
/// restart or failover brings back can hold the value read beside a holder
/// granted since, not even one whose token is the one read (a claim given
/// back and granted again under its token, review R56; an exact copy of
/// the counter, then a grant in its second, reviews R54 and R55). A break
/// therefore waits up to a second for the clock, and a single try of the
/// key in that second is refused (`LOCK_BUSY`). A counter made or raised
/// here is kept at least a minute (ARGV[1]), so that a `fenceRetentionMs`
/// shorter than a round trip does not take it before the break comes
/// (review R54); a key without one gets one, so the break never compares
/// with "none" (a counter can expire while its key is held: R53).
/// KEYS: lock, fence. ARGV: how long the counter is kept (ms). Returns
/// `{counter, holders}` (strings).
const OBSERVE: &str = concat!(
    reserve_fences!(),
    holders_seen!(),
    r"
local counter = redis.pcall('GET', KEYS[2])
if type(counter) == 'table' and counter.err then
  return redis.error_reply('ERR a fence counter is not a string')
end
local now = redis.call('TIME')
local clock = tonumber(now[1] .. string.rep('0', 6 - #now[2]) .. now[2])
local value = counter and tonumber(counter)
-- A whole second ahead of the clock (a reservation: an earlier read's, or
-- a restore's) already holds every grant until the clock passes it: moved
-- again, each read would put the counter another second ahead, and past a
-- second ahead `next_fence!` grants above the clock on reservations alone.
-- More than a second ahead (a server whose clock is behind) the counter is
-- left too: raised, every break would add a second (review R57). Either
-- way it is kept at least as long as a counter made here.
if value and value >= clock and (value % RESERVED_US == 0 or value > clock + RESERVED_US) then
  local keep = math.floor(value / 1000) + tonumber(ARGV[1])
  local now_ms = math.floor(clock / 1000)
  if redis.call('PTTL', KEYS[2]) < keep - now_ms then
    redis.call('PEXPIREAT', KEYS[2], string.format('%.0f', keep))
  end
  return {counter, holders_seen(KEYS[1])}
end
local base = math.max(clock, value or clock)
local reserved = string.format('%.0f', (math.floor(base / RESERVED_US) + 1) * RESERVED_US)
redis.call('SET', KEYS[2], reserved, 'PXAT', string.format('%.0f', math.floor(tonumber(reserved) / 1000) + tonumber(ARGV[1])))
return {reserved, holders_seen(KEYS[1])}
"
);

/// The scripts, hashed once per connection.
pub(crate) struct Scripts {
    pub acquire: Script,
    pub renew: Script,
    pub release: Script,
    pub kinds_acquire: Script,
    pub kinds_renew: Script,
    pub kinds_release: Script,
    pub kinds_handoff: Script,
    pub kinds_withdraw: Script,
    pub inspect: Script,
    pub observe: Script,
    pub force_release: Script,
}

impl Scripts {
    pub fn new() -> Scripts {
        Scripts {
            acquire: Script::new(ACQUIRE),
            renew: Script::new(RENEW),
            release: Script::new(RELEASE),
            kinds_acquire: Script::new(KINDS_ACQUIRE),
            kinds_renew: Script::new(KINDS_RENEW),
            kinds_release: Script::new(KINDS_RELEASE),
            kinds_handoff: Script::new(KINDS_HANDOFF),
            kinds_withdraw: Script::new(KINDS_WITHDRAW),
            inspect: Script::new(INSPECT),
            observe: Script::new(OBSERVE),
            force_release: Script::new(FORCE_RELEASE),
        }
    }
}

/// The scripts and the connection that runs them: what a claim's operations
/// go through.
pub(crate) struct Scripted {
    pub connection: Arc<RedisConnection>,
    pub scripts: Scripts,
}

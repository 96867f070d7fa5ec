#!/usr/bin/env python3
"""What the Redis server spends on our Lua scripts, in instructions.

Counts redis-server's instructions per lock pair under valgrind's callgrind:
each case runs twice (PAIRS and 3 x PAIRS pairs, pipelined), and the
difference divided by the pairs between the two runs is the cost of one
pair, whatever the start-up costs. Instruction counts do not move with the load of the machine,
so two builds of the scripts compare exactly where timings on this VM move by
a third. The scripts are read from src/redis/scripts.rs (the Rust source that
the driver sends), so the figures are of this checkout.

    python3 benches/redis-script-cost.py [CASE ...]   (default: every case)

Cases:
  plain          ACQUIRE + RELEASE of one free key (five names and three, as the driver sends)
  four-keys      KINDS_ACQUIRE + KINDS_RELEASE of 4 free keys (20 names)
  counted        KINDS_HANDOFF on a counted key (limit 8): one holder's unit
                 given back and granted to the next request in one call, as
                 64 tasks on one counted key do
  redlock        redlock's multi-resource lock and unlock scripts on 4 keys
                 (redlock 5's text), for comparison
  redlock-one    redlock's lock and unlock scripts on one key (its plain lock)
  semaphore      redis-semaphore's Semaphore (limit 8, its 5.x text): one
                 holder's ZREM, then an acquire script granting the freed unit,
                 as 64 tasks on one counted key do (the peer of `counted`)
  least-counted  semaphore with a fence per grant (TIME, SET fence PX GET):
                 the cheapest fenced counted lock found
  least-1        least-4 on one key (the peer of `plain`)
  least-4        the cheapest fenced, owner-checked lock of 4 keys found:
                 SET NX each, TIME, SET fence PX GET each; MGET + DEL (no
                 waiting marks, wake-ups, kinds or fairness)
  least-4-unfenced  least-4 without the fences (TIME and the 4 SETs)
  floor          SET key token PX NX + DEL: the least any Redis lock costs,
                 with no owner check on release
  empty-scripts  two EVALSHA calls of `return 0` with one key each: what any
                 owner-checked release by script costs before its script does
                 anything (Redis 7.0 has no compare-and-delete command)
  empty-scripts-wide  the same with the 20 names and 9 arguments each that
                 four-keys passes: what passing them costs
  kinds-prelude  two calls of the kinds scripts' prelude followed by
                 `return 0`, passed as empty-scripts-wide: what defining its
                 functions on every call costs
  four-keys-flat four-keys' 14 calls (its free keys' path) written as two flat
                 scripts, passed the same: what the kinds scripts' shape costs

Needs redis-server and valgrind (scripts/setup installs both). Python 3 only,
no packages: it speaks RESP itself. A case takes a few seconds.
"""

import base64
import hashlib
import os
import re
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAIRS = 640
DEPTH = 64
RETENTION = 600000  # fenceRetentionMs, its default

REDLOCK_LOCK = """
for i, key in ipairs(KEYS) do
  if redis.call("exists", key) == 1 then
    return 0
  end
end
for i, key in ipairs(KEYS) do
  redis.call("set", key, ARGV[1], "PX", ARGV[2])
end
return #KEYS
"""
# redis-semaphore 5.x's acquire script (lib/semaphore/acquire/lua.js); its
# release is a plain ZREM.
SEMAPHORE_ACQUIRE = """
local key = KEYS[1]
local limit = tonumber(ARGV[1])
local identifier = ARGV[2]
local lockTimeout = tonumber(ARGV[3])
local now = tonumber(ARGV[4])
local expiredTimestamp = now - lockTimeout
redis.call('zremrangebyscore', key, '-inf', expiredTimestamp)
if redis.call('zcard', key) < limit then
  redis.call('zadd', key, now, identifier)
  redis.call('pexpire', key, lockTimeout)
  return 1
else
  return 0
end
"""
# The least-counted case: redis-semaphore's acquire with a fence (as
# LEAST_ACQUIRE raises one) on a granted unit.
LEAST_COUNTED_ACQUIRE = SEMAPHORE_ACQUIRE.replace(
    "  return 1\n",
    """  local now = redis.call('TIME')
  local clock = now[1] .. string.rep('0', 6 - #now[2]) .. now[2]
  local last = tonumber(redis.call('SET', KEYS[2], clock, 'PX', ARGV[5], 'GET'))
  return {1, math.max(tonumber(clock), (last or 0) + 1)}
""",
)
# The least-4 case: every user key passes its lock and fence names.
LEAST_ACQUIRE = """
for i = 1, #KEYS, 2 do
  if not redis.call('SET', KEYS[i], ARGV[1], 'NX', 'PX', ARGV[2]) then
    for j = 1, i - 2, 2 do
      redis.call('DEL', KEYS[j])
    end
    return 0
  end
end
if ARGV[3] == '0' then
  return 1
end
local now = redis.call('TIME')
local clock = now[1] .. string.rep('0', 6 - #now[2]) .. now[2]
local fences = {1}
for i = 2, #KEYS, 2 do
  local last = tonumber(redis.call('SET', KEYS[i], clock, 'PX', ARGV[3], 'GET'))
  fences[#fences + 1] = math.max(tonumber(clock), (last or 0) + 1)
end
return fences
"""
LEAST_RELEASE = """
local held, ours = redis.call('MGET', unpack(KEYS)), {}
for n = 1, #held do
  if held[n] == ARGV[1] then
    ours[#ours + 1] = KEYS[n]
  end
end
return redis.call('DEL', unpack(ours))
"""
# The four-keys case's 14 calls written flat (the free-key path only, with
# the same names and arguments): what the kinds scripts' shape costs beyond
# its calls.
FLAT_ACQUIRE = """
if redis.call('EXISTS', KEYS[4], KEYS[9], KEYS[14], KEYS[19]) > 0 then
  return 0
end
for i = 1, 20, 5 do
  redis.call('SET', KEYS[i], ARGV[1], 'NX', 'PX', ARGV[2])
end
local now = redis.call('TIME')
local clock = now[1] .. string.rep('0', 6 - #now[2]) .. now[2]
redis.call('MGET', KEYS[2], KEYS[7], KEYS[12], KEYS[17])
for i = 2, 20, 5 do
  redis.call('SET', KEYS[i], clock, 'PX', ARGV[9])
end
return {1, tonumber(clock), tonumber(clock), tonumber(clock), tonumber(clock)}
"""
FLAT_RELEASE = """
redis.call('MGET', KEYS[1], KEYS[6], KEYS[11], KEYS[16])
redis.call('DEL', KEYS[1], KEYS[6], KEYS[11], KEYS[16])
redis.call('DEL', KEYS[3], KEYS[8], KEYS[13], KEYS[18])
return 4
"""
REDLOCK_UNLOCK = """
local count = 0
for i, key in ipairs(KEYS) do
  if redis.call("get", key) == ARGV[1] then
    redis.pcall("del", key)
    count = count + 1
  end
end
return count
"""


def scripts_of_source():
    """The scripts' texts, expanding the concat!() of raw strings and macros
    (with no parameter, or string literals: `$name` in the body)."""
    source = open(os.path.join(ROOT, "src", "redis", "scripts.rs")).read()
    macros = {
        name: (re.findall(r"\$(\w+):literal", params), body)
        for name, params, body in re.findall(r"macro_rules! (\w+) \{\s*\(([^)]*)\) => \{\s*(.*?)\n    \};\n\}", source, re.S)
    }

    def expand(expr, bound=None):
        bound = bound or {}
        # The longest name first: one may begin another.
        names = sorted(bound, key=len, reverse=True)
        out, i = [], 0
        while i < len(expr):
            if expr.startswith('r"', i):
                end = expr.index('"', i + 2)
                out.append(expr[i + 2 : end])
                i = end + 1
            elif m := re.match(r'(\w+)!\(((?:\s*"(?:[^"\\]|\\.)*"\s*,?)*)\)', expr[i:]):
                params, body = macros[m.group(1)]
                arguments = [a.encode().decode("unicode_escape") for a in re.findall(r'"((?:[^"\\]|\\.)*)"', m.group(2))]
                out.append(expand(body, dict(zip(params, arguments))))
                i += m.end()
            elif name := next((n for n in names if expr.startswith("$" + n, i)), None):
                out.append(bound[name])
                i += 1 + len(name)
            else:
                i += 1  # concat!( , ) and whitespace: the raw strings carry the text
        return "".join(out)

    found = re.findall(r"const (\w+): &str = (concat!\(.*?\n\);|r\".*?\";)\n", source, re.S)
    return {name: expand(body) for name, body in found}


class Redis:
    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    def send(self, commands):
        out = []
        for args in commands:
            out.append(b"*%d\r\n" % len(args))
            for a in args:
                a = a if isinstance(a, bytes) else str(a).encode()
                out.append(b"$%d\r\n%s\r\n" % (len(a), a))
        self.sock.sendall(b"".join(out))

    def _line(self):
        while b"\r\n" not in self.buf:
            self.buf += self.sock.recv(1 << 20)
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def read(self):
        line = self._line()
        kind, rest = line[:1], line[1:]
        if kind == b"-":
            raise RuntimeError(rest.decode())
        if kind in (b"+", b":"):
            return int(rest) if kind == b":" else rest.decode()
        if kind == b"$":
            n = int(rest)
            if n < 0:
                return None
            while len(self.buf) < n + 2:
                self.buf += self.sock.recv(1 << 20)
            value, self.buf = self.buf[:n], self.buf[n + 2 :]
            return value
        if kind == b"*":
            n = int(rest)
            return None if n < 0 else [self.read() for _ in range(n)]
        raise RuntimeError(f"unexpected reply {line!r}")

    def call(self, *args):
        self.send([args])
        return self.read()

    def run(self, commands):
        self.send(commands)
        return [self.read() for _ in commands]


def names(key):
    """The five Redis names of a user key (src/redis/keys.rs), namespace 'bench'."""
    digest = base64.urlsafe_b64encode(hashlib.sha256(key.encode()).digest())[:22].decode()
    return [f"bench:{infix}:{{{digest}}}" for infix in ("lock", "lock-fence", "lock-waiting", "lock-kind", "lock-queue")]


def token():
    return os.urandom(16).hex()


# Each case: given a connection and the scripts' SHAs, a function that returns
# the next batch of commands and how many pairs it makes.


def pairs(pair_of):
    """A batch of DEPTH independent pairs: pair_of(j) gives pair j's two commands."""

    def batch():
        return [command for j in range(DEPTH) for command in pair_of(j)], DEPTH

    return batch


def plain(redis, sha):
    def pair(j):
        k, t = names(f"k{j}"), token()
        return [["EVALSHA", sha["ACQUIRE"], 5, *k, t, 10000, 30000, 0, RETENTION], ["EVALSHA", sha["RELEASE"], 3, k[0], k[2], k[4], t, "bench:wake", 1]]

    return pairs(pair)


def four_keys(redis, sha):
    def pair(j):
        keys = [n for k in range(4) for n in names(f"k{j}-{k}")]
        args = [token(), 10000, 30000, "x", 1, 1, 0, "bench:wake", RETENTION]
        return [["EVALSHA", sha[script], len(keys), *keys, *args] for script in ("KINDS_ACQUIRE", "KINDS_RELEASE")]

    return pairs(pair)


def redlock(redis, sha):
    def pair(j):
        keys, t = [f"redlock:k{j}-{k}" for k in range(4)], token()
        return [["EVALSHA", sha["REDLOCK_LOCK"], 4, *keys, t, 10000], ["EVALSHA", sha["REDLOCK_UNLOCK"], 4, *keys, t]]

    return pairs(pair)


def redlock_one(redis, sha):
    def pair(j):
        key, t = f"redlock:k{j}", token()
        return [["EVALSHA", sha["REDLOCK_LOCK"], 1, key, t, 10000], ["EVALSHA", sha["REDLOCK_UNLOCK"], 1, key, t]]

    return pairs(pair)


def semaphore(fenced):
    """redis-semaphore's Semaphore on one key of limit 8 (`fenced`: with a
    fence per grant, the least-counted case)."""

    def case(redis, sha):
        script, keys = ("LEAST_COUNTED_ACQUIRE", ["semaphore:counted", "semaphore:fence"]) if fenced else ("SEMAPHORE_ACQUIRE", ["semaphore:counted"])
        holders = [token() for _ in range(8)]

        def acquire(t):
            return ["EVALSHA", sha[script], len(keys), *keys, 8, t, 10000, int(time.time() * 1000), RETENTION]

        for reply in redis.run([acquire(t) for t in holders]):
            if reply in (0, None):
                raise RuntimeError("a first holder was not granted")

        def batch():
            out = []
            for n, held in enumerate(holders):
                holders[n] = token()
                out += [["ZREM", keys[0], held], acquire(holders[n])]
            return out, len(holders)

        return batch

    return case


def least(keys, fenced):
    """The least fenced (or unfenced), owner-checked lock of `keys` keys."""

    def case(redis, sha):
        def pair(j):
            locks, t = [names(f"k{j}-{k}")[:2] for k in range(keys)], token()
            return [
                ["EVALSHA", sha["LEAST_ACQUIRE"], 2 * keys, *[n for pair in locks for n in pair], t, 10000, RETENTION if fenced else 0],
                ["EVALSHA", sha["LEAST_RELEASE"], keys, *[pair[0] for pair in locks], t],
            ]

        return pairs(pair)

    return case


def floor(redis, sha):
    def pair(j):
        key = f"raw:k{j}"
        return [["SET", key, token(), "PX", 10000, "NX"], ["DEL", key]]

    return pairs(pair)


def empty_scripts(redis, sha):
    def pair(j):
        key = f"empty:k{j}"
        return [["EVALSHA", sha["EMPTY"], 1, key, token()], ["EVALSHA", sha["EMPTY"], 1, key, token()]]

    return pairs(pair)


def four_keys_as(acquire, release):
    """Two scripts given what four-keys passes: 20 names and 9 arguments each."""

    def case(redis, sha):
        def pair(j):
            keys = [n for k in range(4) for n in names(f"k{j}-{k}")]
            args = [token(), 10000, 30000, "x", 1, 1, 0, "bench:wake", RETENTION]
            return [["EVALSHA", sha[script], len(keys), *keys, *args] for script in (acquire, release)]

        return pairs(pair)

    return case


def counted(redis, sha):
    key = names("counted")
    holders = [token() for _ in range(8)]
    for reply in redis.run([["EVALSHA", sha["KINDS_ACQUIRE"], 5, *key, t, 10000, 30000, "x", 8, 1, 0, "bench:wake", RETENTION] for t in holders]):
        if reply[0] != 1:
            raise RuntimeError(f"a first holder was not granted: {reply}")

    def batch():
        # ARGV: channel, waitingMs, the released lease's keys, token, mode,
        # limit and weight, then the request's token, mode, limit, weight,
        # ticket, keys, leaseMs and fenceRetentionMs. Each call is a release
        # and a grant: a pair.
        out = []
        for n, held in enumerate(holders):
            holders[n] = token()
            out.append(["EVALSHA", sha["KINDS_HANDOFF"], 10, *key, *key, "bench:wake", 30000, 1, held, "x", 8, 1, holders[n], "x", 8, 1, 0, 1, 10000, RETENTION])
        return out, len(out)

    return batch


CASES = {
    "plain": plain,
    "four-keys": four_keys,
    "counted": counted,
    "redlock": redlock,
    "redlock-one": redlock_one,
    "semaphore": semaphore(False),
    "least-counted": semaphore(True),
    "least-1": least(1, True),
    "least-4": least(4, True),
    "least-4-unfenced": least(4, False),
    "floor": floor,
    "empty-scripts": empty_scripts,
    "empty-scripts-wide": four_keys_as("EMPTY", "EMPTY"),
    "kinds-prelude": four_keys_as("PRELUDE", "PRELUDE"),
    "four-keys-flat": four_keys_as("FLAT_ACQUIRE", "FLAT_RELEASE"),
}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def instructions(case, pairs, scripts, out_dir):
    port, out = free_port(), os.path.join(out_dir, f"{case}.{pairs}")
    server = subprocess.Popen(
        # --hz 1: serverCron's work grows with the run's wall time, which a
        # loaded machine stretches under valgrind (2-5% of a pair at the
        # default 10 Hz); at 1 Hz two builds compare within about 1%.
        ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", "redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--hz", "1"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        for _ in range(300):
            try:
                redis = Redis(port)
                redis.call("PING")
                break
            except OSError:
                time.sleep(0.1)
        else:
            raise RuntimeError("redis-server under valgrind did not start")
        sha = {name: redis.call("SCRIPT", "LOAD", text).decode() for name, text in scripts.items()}
        batch, done = CASES[case](redis, sha), 0
        while done < pairs:
            commands, made = batch()
            for reply in redis.run(commands):
                # A hand-off answers {released, wake, 1, fence}: granted.
                if case == "counted" and (reply[0] != 1 or reply[2] != 1):
                    raise RuntimeError(f"a hand-off was not granted: {reply}")
                if case.startswith(("least", "semaphore")) and reply in (0, [0], None):
                    raise RuntimeError(f"a {case} acquire was refused")
            done += made
        redis.send([["SHUTDOWN", "NOSAVE"]])
    finally:
        server.wait(timeout=60)
    text = subprocess.run(["callgrind_annotate", out], capture_output=True, text=True, check=True).stdout
    return int(re.search(r"([\d,]+) \S* *PROGRAM TOTALS", text).group(1).replace(",", "")), done


def main():
    cases = sys.argv[1:] or list(CASES)
    unknown = [c for c in cases if c not in CASES]
    if unknown:
        sys.exit(f"unknown case {unknown[0]}: {', '.join(CASES)}")
    scripts = scripts_of_source()
    scripts.update(
        REDLOCK_LOCK=REDLOCK_LOCK,
        REDLOCK_UNLOCK=REDLOCK_UNLOCK,
        SEMAPHORE_ACQUIRE=SEMAPHORE_ACQUIRE,
        LEAST_ACQUIRE=LEAST_ACQUIRE,
        LEAST_RELEASE=LEAST_RELEASE,
        LEAST_COUNTED_ACQUIRE=LEAST_COUNTED_ACQUIRE,
        FLAT_ACQUIRE=FLAT_ACQUIRE,
        FLAT_RELEASE=FLAT_RELEASE,
        EMPTY="return 0",
    )
    kinds = scripts["KINDS_ACQUIRE"]
    scripts["PRELUDE"] = kinds[: kinds.rindex("return grant(")] + "\nreturn 0\n"
    with tempfile.TemporaryDirectory() as out_dir:
        for case in cases:
            short, n_short = instructions(case, PAIRS, scripts, out_dir)
            long, n_long = instructions(case, 3 * PAIRS, scripts, out_dir)
            print(f"{case:13} {round((long - short) / (n_long - n_short)):>8} server instructions per pair", flush=True)


if __name__ == "__main__":
    main()

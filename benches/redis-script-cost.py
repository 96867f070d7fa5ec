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
  plain          ACQUIRE + RELEASE of one free key (five names and two, as the driver sends)
  four-keys      KINDS_ACQUIRE + KINDS_RELEASE of 4 free keys (20 names)
  counted        KINDS_HANDOFF on a counted key (limit 8): one holder's unit
                 given back and granted to the next request in one call, as
                 64 tasks on one counted key do
  redlock        redlock's multi-resource lock and unlock scripts on 4 keys
                 (redlock 5's text), for comparison
  redlock-one    redlock's lock and unlock scripts on one key (its plain lock)
  floor          SET key token PX NX + DEL: the least any Redis lock costs,
                 with no owner check on release
  empty-scripts  two EVALSHA calls of `return 0` with one key each: what any
                 owner-checked release by script costs before its script does
                 anything (Redis 7.0 has no compare-and-delete command)

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
    """The scripts' texts, expanding the concat!() of raw strings and macros."""
    source = open(os.path.join(ROOT, "src", "redis", "scripts.rs")).read()
    macros = dict(re.findall(r"macro_rules! (\w+) \{\s*\(\) => \{\s*(.*?)\n    \};\n\}", source, re.S))

    def expand(expr):
        out, i = [], 0
        while i < len(expr):
            if expr.startswith('r"', i):
                end = expr.index('"', i + 2)
                out.append(expr[i + 2 : end])
                i = end + 1
            elif m := re.match(r"(\w+)!\(\)", expr[i:]):
                out.append(expand(macros[m.group(1)]))
                i += m.end()
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
        return [["EVALSHA", sha["ACQUIRE"], 5, *k, t, 10000, 30000, 0, RETENTION], ["EVALSHA", sha["RELEASE"], 2, k[0], k[2], t, "bench:wake"]]

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


def counted(redis, sha):
    key = names("counted")
    holders = [token() for _ in range(8)]
    for reply in redis.run([["EVALSHA", sha["KINDS_ACQUIRE"], 5, *key, t, 10000, 30000, "x", 8, 1, 0, "bench:wake", RETENTION] for t in holders]):
        if reply[0] != 1:
            raise RuntimeError(f"a first holder was not granted: {reply}")

    def batch():
        # ARGV: channel, leaseMs, waitingMs, fenceRetentionMs, the released lease's keys, token,
        # mode, limit and weight, then the request's token, mode, limit,
        # weight, ticket and keys. Each call is a release and a grant: a pair.
        out = []
        for n, held in enumerate(holders):
            holders[n] = token()
            out.append(["EVALSHA", sha["KINDS_HANDOFF"], 10, *key, *key, "bench:wake", 10000, 30000, RETENTION, 1, held, "x", 8, 1, holders[n], "x", 8, 1, 0, 1])
        return out, len(out)

    return batch


CASES = {
    "plain": plain,
    "four-keys": four_keys,
    "counted": counted,
    "redlock": redlock,
    "redlock-one": redlock_one,
    "floor": floor,
    "empty-scripts": empty_scripts,
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
    scripts.update(REDLOCK_LOCK=REDLOCK_LOCK, REDLOCK_UNLOCK=REDLOCK_UNLOCK, EMPTY="return 0")
    with tempfile.TemporaryDirectory() as out_dir:
        for case in cases:
            short, n_short = instructions(case, PAIRS, scripts, out_dir)
            long, n_long = instructions(case, 3 * PAIRS, scripts, out_dir)
            print(f"{case:13} {round((long - short) / (n_long - n_short)):>8} server instructions per pair", flush=True)


if __name__ == "__main__":
    main()

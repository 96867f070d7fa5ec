// driver: policy through openLock: rules per key over the provider's other
// backends, the lease saying which member served it, every kind and
// withLock passing through to the member; a private redis-server killed
// mid-run: fail-closed names refused with NO_ELIGIBLE_BACKEND, fallback
// names on the file member, back on Redis after the cooldown, no lease
// moving, contention never falling back.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { subscribe, unsubscribe } from 'node:diagnostics_channel';
import { mkdtempSync } from 'node:fs';
import { createServer } from 'node:net';
import { once } from 'node:events';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { openLock, LockError } from '../index.js';
import { rejectsWith } from './helpers.js';
import { startRedis } from './redis-server.js';
import { overUnreachable } from './unreachable.js';

const COOLDOWN_MS = 1500;

function directory() {
  return join(mkdtempSync(join(tmpdir(), 'dokebi-policy-node-')), 'locks');
}

/** Options with a local member `mem`, a file member `host`, and `extra` backends. */
function config(backends, connections) {
  return {
    'dokebi-lock': { backends: { mem: {}, host: { driver: 'file', directory: directory() }, ...backends } },
    ...(connections === undefined ? {} : { 'dokebi-redis': { connections } }),
  };
}

/** Collects the policy telemetry events until the returned function is called. */
function recordPolicyEvents() {
  const events = [];
  const names = ['policy-fallback', 'policy-skipped', 'policy-back'];
  const handlers = names.map((name) => [`dokebi-lock:${name}`, (payload) => events.push({ name, ...payload })]);
  for (const [channel, handler] of handlers) subscribe(channel, handler);
  return { events, stop: () => handlers.forEach(([channel, handler]) => unsubscribe(channel, handler)) };
}

test('a key falls under the first matching rule; the lease says which member served it; kinds, several keys, withLock and await using pass through', async () => {
  const provider = await openLock({
    config: config({
      locks: {
        driver: 'policy',
        rules: [{ glob: 'job:*:run', backends: ['host'] }, { prefix: 'job:', backends: ['mem'] }],
        default: { backends: ['host', 'mem'], minTier: 'process', onUnavailable: 'fallBack' },
      },
    }),
  });
  const locks = provider.backend('locks');
  const lease = await locks.acquire('job:7:run', { waitTimeoutMs: 0 });
  assert.deepEqual({ ...lease.served }, { backend: 'host', driver: 'file', tier: 'host', fenced: true });
  assert.ok(Object.isFrozen(lease.served));
  assert.equal(lease.key, 'job:7:run');
  assert.match(lease.fence, /^\d+$/);
  assert.equal(lease.valid, true);
  await rejectsWith(provider.backend('host').acquire('job:7:run', { waitTimeoutMs: 0 }), 'LOCK_BUSY');
  const status = locks.keyStatus('job:7:run');
  assert.equal(status.rule, 'rules[0]');
  assert.equal(status.pattern, 'glob:job:*:run');
  assert.equal(status.minTier, 'host');
  assert.equal(status.onUnavailable, 'failClosed');
  assert.equal(status.last.backend, 'host');
  assert.ok(Math.abs(status.last.servedAtMs - Date.now()) < 10_000);
  assert.equal(locks.keyStatus('never').last, null);
  assert.equal(await lease.release(), true);
  assert.equal(await lease.release(), false);

  {
    await using held = await locks.acquire('job:1:stop');
    assert.equal(held.served.backend, 'mem');
    await rejectsWith(locks.acquire('job:1:stop', { waitTimeoutMs: 0 }), 'LOCK_BUSY');
  }
  assert.equal((await locks.acquire('job:1:stop', { waitTimeoutMs: 0 })).served.backend, 'mem');

  const a = await locks.acquire('job:2:x', { mode: 'shared', waitTimeoutMs: 0 });
  const b = await locks.acquire('job:2:x', { mode: 'shared', waitTimeoutMs: 0 });
  await rejectsWith(locks.acquire('job:2:x', { waitTimeoutMs: 0 }), 'LOCK_BUSY');
  await a.release();
  await b.release();
  const many = await locks.acquire(['job:3:a', 'job:3:b'], { waitTimeoutMs: 0 });
  assert.deepEqual(many.keys, ['job:3:a', 'job:3:b']);
  assert.equal(many.served.backend, 'mem');
  const mixed = await rejectsWith(locks.acquire(['job:3:a:run', 'other'], { waitTimeoutMs: 0 }), 'INVALID_ARGUMENT');
  assert.doesNotMatch(mixed.message, /other/);

  const fence = await locks.withLock('other', async (section, signal) => {
    assert.equal(section.served.backend, 'host');
    assert.equal(signal.aborted, false);
    return section.fence;
  });
  assert.match(fence, /^\d+$/);
  await rejectsWith(locks.withLock('other', () => {}, { bogus: 1 }), 'INVALID_ARGUMENT');
  await rejectsWith(locks.acquire('other', { waitTimeoutMs: -1 }), 'INVALID_ARGUMENT');

  const counts = provider.status().locks;
  assert.equal(counts.driver, 'policy');
  const host = counts.members.find((m) => m.backend === 'host');
  assert.equal(host.tier, 'host');
  assert.ok(host.served >= 2 && host.fallbacks === 0 && host.skipped === false, JSON.stringify(host));
  await provider.close();
  await rejectsWith(locks.acquire('other'), 'CLOSED');
});

test('a policy names backends of its provider at or above the rule tier; a rule failing closed lists one', async () => {
  const error = await rejectsWith(
    openLock({ config: config({ locks: { driver: 'policy', default: { backends: ['host', 'mem'] } } }) }),
    'INVALID_OPTIONS',
  );
  const paths = error.details.issues.map((issue) => `${issue.path}: ${issue.message}`);
  assert.ok(paths.some((p) => p.startsWith('backends.locks.default.backends: names mem (tier process), below')), paths.join('\n'));
  assert.ok(paths.some((p) => p.includes('fails closed is served by its first backend only')), paths.join('\n'));
});

test('Redis killed mid-run: fail-closed names refused, fallback names on the file member, back after the cooldown; contention never falls back', async (t) => {
  let redis = await startRedis();
  t.after(() => redis.stop());
  const recorded = recordPolicyEvents();
  t.after(recorded.stop);
  const settings = config(
    {
      cache: { driver: 'redis', connection: 'main', namespace: 'policy-node', leaseMs: 3000 },
      locks: {
        driver: 'policy',
        reprobeCooldownMs: COOLDOWN_MS,
        rules: [{ prefix: 'pay:', backends: ['cache'] }],
        default: { backends: ['cache', 'host'], minTier: 'host', onUnavailable: 'fallBack' },
      },
    },
    { main: { url: redis.url, connectTimeoutMs: 1000, commandTimeoutMs: 300 } },
  );
  const [one, two] = [await openLock({ config: settings }), await openLock({ config: settings })];
  t.after(() => Promise.all([one.close(), two.close()]));
  const [locksOne, locksTwo] = [one.backend('locks'), two.backend('locks')];

  // Contention on Redis is LOCK_BUSY / WAIT_TIMEOUT, with the file member free.
  const held = await locksOne.acquire('order:held', { waitTimeoutMs: 0 });
  assert.equal(held.served.backend, 'cache');
  await rejectsWith(locksTwo.acquire('order:held', { waitTimeoutMs: 0 }), 'LOCK_BUSY');
  await rejectsWith(locksTwo.acquire('order:held', { waitTimeoutMs: 100 }), 'WAIT_TIMEOUT');
  assert.equal(recorded.events.length, 0, JSON.stringify(recorded.events));
  for (const locks of [locksOne, locksTwo]) {
    const paid = await locks.acquire('pay:1', { waitTimeoutMs: 1000 });
    assert.equal(paid.served.backend, 'cache');
    await paid.release();
  }

  await redis.stop();
  const stopped = performance.now();
  /** Acquires past the one acquire the kill may have cut off (OUTCOME_UNKNOWN). */
  const acquire = async (locks, key) => {
    try {
      return await locks.acquire(key, { waitTimeoutMs: 1000 });
    } catch (error) {
      if (error.code !== 'OUTCOME_UNKNOWN') throw error;
      return locks.acquire(key, { waitTimeoutMs: 1000 });
    }
  };
  const moved = await acquire(locksOne, 'order:1');
  assert.equal(moved.served.backend, 'host');
  for (const locks of [locksOne, locksTwo]) {
    const started = performance.now();
    const refused = await rejectsWith(acquire(locks, 'pay:secret-key'), 'NO_ELIGIBLE_BACKEND');
    assert.ok(performance.now() - started < 1000);
    assert.ok(refused instanceof LockError);
    assert.equal(refused.details.rule, 'rules[0]');
    assert.equal(refused.details.tried[0].backend, 'cache');
    assert.doesNotMatch(`${refused.message} ${refused.fix} ${JSON.stringify(refused.details)}`, /secret-key/);
  }
  // The other process falls back too: the two exclude each other on the file member.
  await rejectsWith(acquire(locksTwo, 'order:1'), 'WAIT_TIMEOUT');
  await moved.release();
  // The lease held on Redis stays there.
  assert.equal(held.served.backend, 'cache');
  assert.notEqual(await held.renew().catch(() => false), true);

  redis = await redis.restart();
  await sleep(Math.max(0, COOLDOWN_MS + 100 - (performance.now() - stopped)));
  const back = await locksOne.acquire('order:2', { waitTimeoutMs: 1000 });
  assert.equal(back.served.backend, 'cache');
  await back.release();
  const [cache, host] = one.status().locks.members;
  assert.equal(cache.backend, 'cache');
  assert.equal(cache.skipped, false);
  assert.ok(cache.refusals >= 1 && host.fallbacks >= 1, JSON.stringify([cache, host]));
  const names = new Set(recorded.events.map((e) => e.name));
  assert.deepEqual([...names].sort(), ['policy-back', 'policy-fallback', 'policy-skipped']);
  const fallback = recorded.events.find((e) => e.name === 'policy-fallback');
  assert.deepEqual({ ...fallback }, { name: 'policy-fallback', backend: 'locks', member: 'host', preferred: 'cache', code: 'PROVIDER_FAILED' });
  assert.doesNotMatch(JSON.stringify(recorded.events), /secret-key/);
});

test('withLock renews a lease on the member that granted it', async (t) => {
  const redis = await startRedis();
  t.after(() => redis.stop());
  const provider = await openLock({
    config: config(
      {
        cache: { driver: 'redis', connection: 'main', leaseMs: 400 },
        locks: { driver: 'policy', default: { backends: ['cache'] } },
      },
      { main: { url: redis.url, commandTimeoutMs: 300 } },
    ),
  });
  t.after(() => provider.close());
  const output = await provider.backend('locks').withLock('long', async (lease, signal) => {
    await sleep(1200);
    assert.equal(signal.aborted, false);
    return lease.served.backend;
  });
  assert.equal(output, 'cache');
});

test("without a logger, the policy's warnings are printed to stderr as warnings, not as errors", () => {
  // Redis where nothing listens: the first acquire skips it (LOCK_POLICY_SKIPPED)
  // and falls back to the file member (LOCK_POLICY_FALLBACK), both warnings.
  const settings = config(
    {
      cache: { driver: 'redis', connection: 'main', leaseMs: 3000 },
      locks: { driver: 'policy', default: { backends: ['cache', 'host'], minTier: 'host', onUnavailable: 'fallBack' } },
    },
    { main: { url: 'redis://127.0.0.1:1/0', connectTimeoutMs: 200, commandTimeoutMs: 300 } },
  );
  const child = `
import { openLock } from ${JSON.stringify(new URL('../index.js', import.meta.url).href)};
const provider = await openLock({ config: ${JSON.stringify(settings)} });
const lease = await provider.backend('locks').acquire('k', { waitTimeoutMs: 0 });
console.log(lease.served.backend);
await lease.release();
await provider.close();
// Log delivery from the driver thread, which does not keep the process alive.
await new Promise((resolve) => setTimeout(resolve, 200));
`;
  const result = spawnSync(process.execPath, ['--input-type=module', '-e', child], { encoding: 'utf8', timeout: 30_000 });
  assert.equal(result.status, 0, result.stderr);
  assert.equal(result.stdout.trim(), 'host');
  assert.match(result.stderr, /^dokebi-lock warn \[locks\] LOCK_POLICY_SKIPPED: /m);
  assert.match(result.stderr, /^dokebi-lock warn \[locks\] LOCK_POLICY_FALLBACK: /m);
  assert.doesNotMatch(result.stderr, /dokebi-lock error/);
});

test('a wait that ends while the preferred member still connects fails without moving the key', async () => {
  // Takes connections and never answers: every connect stays under way.
  const silent = createServer(() => {});
  silent.listen(0, '127.0.0.1');
  await once(silent, 'listening');
  const url = `redis://127.0.0.1:${silent.address().port}`;
  const lock = await openLock({
    config: config(
      {
        cache: { driver: 'redis', connection: 'main', leaseMs: 5000 },
        locks: { driver: 'policy', default: { backends: ['cache', 'host'], minTier: 'host', onUnavailable: 'fallBack' } },
      },
      { main: { url, connectTimeoutMs: 5000 } },
    ),
  });
  try {
    const locks = lock.backend('locks');
    const error = await locks.acquire('order:1', { waitTimeoutMs: 50 }).then(
      (lease) => assert.fail(`served by ${lease.served.backend} while the preferred member connects`),
      (error) => error,
    );
    assert.ok(error instanceof LockError, String(error));
    assert.equal(error.code, 'PROVIDER_FAILED', error.message);
    assert.equal(error.details?.connecting, true);
    const members = locks.status().members;
    assert.ok(members.every((m) => m.fallbacks === 0 && !m.skipped), JSON.stringify(members));
  } finally {
    // Also when it failed: the provider and the silent server would keep the test process alive.
    await lock.close();
    silent.close();
  }
});

test('acquires of a key whose tries on an unreachable member end together are all served by the fallback, none refused', async (t) => {
  const lock = await overUnreachable(t, 300, 5000);
  try {
    const locks = lock.backend('locks');
    const sections = Array.from({ length: 8 }, () =>
      locks.withLock(
        'k',
        async (lease) => {
          await sleep(10);
          return lease.served.backend;
        },
        { waitTimeoutMs: 5000 },
      ),
    );
    const outcomes = await Promise.allSettled(sections);
    assert.deepEqual(
      outcomes.filter((o) => o.status === 'rejected').map((o) => `${o.reason.code}: ${o.reason.message}`),
      [],
    );
    assert.deepEqual(
      outcomes.map((o) => o.value),
      Array(8).fill('host'),
    );
  } finally {
    await lock.close();
  }
});

test("a withLock paused for a probe of the preferred member ends ABORTED at once by its signal; the probe's acquire is served by the fallback", async (t) => {
  const lock = await overUnreachable(t, 1500, 400);
  try {
    const locks = lock.backend('locks');
    const first = await locks.acquire('other', { waitTimeoutMs: 5000 });
    assert.equal(first.served.backend, 'host');
    await first.release();
    await sleep(500);
    const probe = locks.acquire('k', { waitTimeoutMs: 5000 });
    await sleep(200);
    const abort = new AbortController();
    const paused = locks.withLock('k', () => assert.fail('the section ran'), { waitTimeoutMs: 5000, signal: abort.signal });
    await sleep(100);
    const aborted = performance.now();
    abort.abort();
    await rejectsWith(paused, 'ABORTED');
    assert.ok(performance.now() - aborted < 300, `ABORTED ${performance.now() - aborted} ms after the abort`);
    const lease = await probe;
    assert.equal(lease.served.backend, 'host');
    await lease.release();
  } finally {
    await lock.close();
  }
});

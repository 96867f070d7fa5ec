// Reviews of the policy driver through Node: ways its promises
// (docs/policy.md, issue 51) break, against a private redis-server and a
// file directory. The first test (review R4) failed on work/h3; the key that
// came back (review R8) failed on main 8223351 in tests/review_r8.rs.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { openLock } from '../index.js';
import { startRedis } from './redis-server.js';

// Both units of a key of limit 2: a kinds lease, whose release hands its
// units to this process's next waiter in the same script call.
const ALL_UNITS = { limit: 2, weight: 2 };

async function waitFor(what, condition) {
  for (let i = 0; i < 500; i++) {
    if (condition()) return;
    await sleep(10);
  }
  throw new Error(`timed out waiting until ${what}`);
}

// The release hands the key to the waiter in a call Redis never answers
// (frozen): the waiter's outcome on Redis is unknown (Redis runs the call,
// granting it, once thawed). Its own next try cannot reach Redis
// (PROVIDER_FAILED), and the policy must not start it on the files then.
test('a waiter whose Redis hand-over went unanswered never starts on the fallback member', async (t) => {
  const redis = await startRedis();
  t.after(() => redis.stop());
  const provider = await openLock({
    config: {
      'dokebi-redis': { connections: { main: { url: redis.url, connectTimeoutMs: 300, commandTimeoutMs: 300 } } },
      'dokebi-lock': {
        backends: {
          cache: { driver: 'redis', connection: 'main', namespace: 'review-node', leaseMs: 30000 },
          host: { driver: 'file', directory: join(mkdtempSync(join(tmpdir(), 'dokebi-policy-review-')), 'locks') },
          locks: { driver: 'policy', waitTimeoutMs: 5000, default: { backends: ['cache', 'host'], minTier: 'host', onUnavailable: 'fallBack' } },
        },
      },
    },
  });
  t.after(() => provider.close());
  const locks = provider.backend('locks');
  const waiting = () => provider.backend('cache').status().waiting === 1;
  // Once answered, so that Redis has the hand-over script (a first EVALSHA
  // is refused with NOSCRIPT and would grant nothing).
  const warm = await locks.acquire('report:0', { ...ALL_UNITS, waitTimeoutMs: 0 });
  const warmWaiter = locks.acquire('report:0', { ...ALL_UNITS, waitTimeoutMs: 5000 });
  await waitFor('the first waiter waits on Redis', waiting);
  assert.equal(await warm.release(), true);
  assert.equal(await (await warmWaiter).release(), true);

  const first = await locks.acquire('report:1', { ...ALL_UNITS, waitTimeoutMs: 0 });
  assert.equal(first.served.backend, 'cache');
  const waiter = locks.acquire('report:1', { ...ALL_UNITS, waitTimeoutMs: 5000 }).then(
    (lease) => ({ lease }),
    (error) => ({ error }),
  );
  await waitFor('the second acquire waits on Redis', waiting);
  redis.pause();
  await assert.rejects(first.release(), { code: 'OUTCOME_UNKNOWN' });
  const { lease, error } = await waiter;
  redis.resume();
  assert.equal(lease?.served.backend, undefined, 'served by the fallback although Redis may have granted the waiter (its hand-over went unanswered)');
  assert.equal(error.code, 'OUTCOME_UNKNOWN');
});

// Review R8 (tests/review_r8.rs, here through Node, whose layer drives the
// core's router): a key held on the fallback member while the preferred one
// was down is not granted on the preferred one once it is back, to this
// very process, through this policy or another over the same members
// (review R38); once released it goes there again.
test('a key held on the fallback is not granted again on the member that came back', async (t) => {
  const first = await startRedis();
  const port = first.port;
  await first.stop();
  let redis;
  t.after(() => redis?.stop());
  const provider = await openLock({
    config: {
      'dokebi-redis': { connections: { main: { url: `redis://127.0.0.1:${port}/0`, connectTimeoutMs: 300, commandTimeoutMs: 300 } } },
      'dokebi-lock': {
        backends: {
          cache: { driver: 'redis', connection: 'main', namespace: 'review-node-r8', leaseMs: 30000 },
          host: { driver: 'file', directory: join(mkdtempSync(join(tmpdir(), 'dokebi-policy-review-')), 'locks') },
          locks: {
            driver: 'policy',
            reprobeCooldownMs: 300,
            default: { backends: ['cache', 'host'], minTier: 'host', onUnavailable: 'fallBack' },
          },
          jobs: {
            driver: 'policy',
            reprobeCooldownMs: 300,
            default: { backends: ['cache', 'host'], minTier: 'host', onUnavailable: 'fallBack' },
          },
        },
      },
    },
  });
  t.after(() => provider.close());
  const locks = provider.backend('locks');
  const onHost = await locks.acquire('k', { waitTimeoutMs: 0 });
  assert.equal(onHost.served.backend, 'host');
  redis = await first.restart();
  await sleep(600);
  assert.equal(await onHost.renew(), true);
  await assert.rejects(locks.acquire('k', { waitTimeoutMs: 0 }), { code: 'LOCK_BUSY' }, 'k, held on host, granted again on cache');
  await assert.rejects(provider.backend('jobs').acquire('k', { waitTimeoutMs: 0 }), { code: 'LOCK_BUSY' }, 'k granted on cache by another policy');
  // Inside withLock too, and a waiter waits for the holder on host.
  const waiter = locks.withLock('k', (lease) => lease.served.backend, { waitTimeoutMs: 5000 });
  await sleep(200);
  assert.equal(await onHost.release(), true);
  assert.equal(await waiter, 'host');
  const back = await locks.acquire('k', { waitTimeoutMs: 0 });
  assert.equal(back.served.backend, 'cache', 'released, k goes to the preferred member again');
  assert.equal(await back.release(), true);
});

// A lease held on the fallback and dropped unreleased leaves its key's place
// once collected (the Rust surface: once dropped): the key is not pinned to
// the fallback for the life of the process.
test('a policy lease dropped unreleased gives its key back to the rule order once collected', () => {
  const child = `
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openLock } from ${JSON.stringify(new URL('../index.js', import.meta.url).href)};
import { startRedis } from ${JSON.stringify(new URL('./redis-server.js', import.meta.url).href)};
const first = await startRedis();
await first.stop();
const provider = await openLock({ config: {
  'dokebi-redis': { connections: { main: { url: 'redis://127.0.0.1:' + first.port + '/0', connectTimeoutMs: 300, commandTimeoutMs: 300 } } },
  'dokebi-lock': { backends: {
    cache: { driver: 'redis', connection: 'main', namespace: 'review-node-dropped', leaseMs: 30000 },
    host: { driver: 'file', directory: join(mkdtempSync(join(tmpdir(), 'dokebi-policy-review-')), 'locks') },
    locks: { driver: 'policy', reprobeCooldownMs: 300, default: { backends: ['cache', 'host'], minTier: 'host', onUnavailable: 'fallBack' } },
  } },
} });
const locks = provider.backend('locks');
const served = await (async () => (await locks.acquire('k', { waitTimeoutMs: 0 })).served.backend)();
const redis = await first.restart();
await new Promise((resolve) => setTimeout(resolve, 600));
for (let i = 0; i < 5; i++) {
  gc();
  await new Promise((resolve) => setTimeout(resolve, 20));
}
const again = await locks.acquire('k', { waitTimeoutMs: 5000 }).then((lease) => lease.served.backend, (error) => error.code);
await provider.close();
await redis.stop();
console.log(served + ' ' + again);
`;
  const result = spawnSync(process.execPath, ['--expose-gc', '--input-type=module', '-e', child], { encoding: 'utf8', timeout: 60_000 });
  assert.equal(result.status, 0, result.stderr);
  assert.equal(result.stdout.trim(), 'host cache');
});

// Lock kinds on the redis driver through the JS API, against a private
// redis-server: shared mode across two providers (two processes), counted
// keys, several keys with a fence per key, and the options of withLock.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { openLock } from '../index.js';
import { isSettled, rejectsWith } from './helpers.js';
import { useRedis } from './redis-server.js';

const redis = useRedis();

let namespaces = 0;
/** Two providers (two "processes") with a redis backend `r` sharing one namespace. */
async function pair(settings = {}) {
  const namespace = `kinds${++namespaces}`;
  const open = () =>
    openLock({
      config: {
        'dokebi-lock': { backends: { r: { driver: 'redis', connection: 'main', leaseMs: 10_000, namespace, ...settings } } },
        'dokebi-redis': { connections: { main: { url: redis.url, commandTimeoutMs: 2000 } } },
      },
    });
  return [await open(), await open()];
}

test('readers of two processes hold a redis key together; a writer waits for both and gets a higher fence', async () => {
  const [a, b] = await pair();
  const r1 = await a.backend('r').acquire('catalog', { mode: 'shared' });
  const r2 = await b.backend('r').acquire('catalog', { mode: 'shared' });
  assert.equal(a.backend('r').status().heldShared, 1);
  await rejectsWith(a.backend('r').acquire('catalog', { waitTimeoutMs: 0 }), 'LOCK_BUSY');
  const writer = b.backend('r').acquire('catalog', { waitTimeoutMs: 5000 });
  await r1.release();
  assert.equal(await isSettled(writer), false, 'one reader still holds the key');
  await r2.release();
  const w = await writer;
  assert.ok(BigInt(w.fence) > BigInt(r2.fence) && BigInt(r2.fence) > BigInt(r1.fence));
  await w.release();
  await Promise.all([a.close(), b.close()]);
});

test('a counted redis key holds at most its limit, by weight, and refuses another limit', async () => {
  const [a, b] = await pair();
  const heavy = await a.backend('r').acquire('exports', { limit: 3, weight: 2 });
  const light = await b.backend('r').acquire('exports', { limit: 3 });
  await rejectsWith(b.backend('r').acquire('exports', { limit: 3, waitTimeoutMs: 0 }), 'LOCK_BUSY');
  await rejectsWith(b.backend('r').acquire('exports', { limit: 4, waitTimeoutMs: 0 }), 'INVALID_ARGUMENT');
  await rejectsWith(b.backend('r').acquire('exports', { waitTimeoutMs: 0 }), 'INVALID_ARGUMENT');
  await heavy.release();
  const again = await b.backend('r').acquire('exports', { limit: 3, weight: 2, waitTimeoutMs: 0 });
  await Promise.all([light.release(), again.release()]);
  await Promise.all([a.close(), b.close()]);
});

test('several redis keys are one lease with a fence per key, all or nothing', async () => {
  const [a, b] = await pair();
  const lease = await a.backend('r').acquire(['from', 'to']);
  assert.deepEqual(lease.keys, ['from', 'to']);
  const fences = lease.fences;
  assert.deepEqual([...fences.keys()], ['from', 'to']);
  assert.equal(fences.get('from'), lease.fence);
  for (const fence of fences.values()) assert.match(fence, /^[1-9][0-9]*$/);
  await rejectsWith(b.backend('r').acquire(['spare', 'to'], { waitTimeoutMs: 50 }), 'WAIT_TIMEOUT');
  const spare = await b.backend('r').acquire('spare', { waitTimeoutMs: 0 });
  await spare.release();
  assert.equal(await lease.release(), true);
  const to = await b.backend('r').acquire('to', { waitTimeoutMs: 0 });
  assert.ok(BigInt(to.fence) > BigInt(fences.get('to')));
  await to.release();
  await Promise.all([a.close(), b.close()]);
});

test('withLock on redis takes kind options and key arrays', async () => {
  const [a, b] = await pair();
  let inside = 0;
  let most = 0;
  const section = async () => {
    inside++;
    most = Math.max(most, inside);
    await new Promise((resolve) => setTimeout(resolve, 20));
    inside--;
  };
  await Promise.all([a.backend('r').withLock('k', section, { mode: 'shared' }), b.backend('r').withLock('k', section, { mode: 'shared' })]);
  assert.equal(most, 2, 'shared sections of two processes ran together');
  const fence = await a.backend('r').withLock(['x', 'y'], (lease) => lease.fences.get('y'));
  assert.match(fence, /^[1-9][0-9]*$/);
  await Promise.all([a.close(), b.close()]);
});

// Lock kinds on the redis driver through the JS API, against a private
// redis-server: shared mode across two providers (two processes), counted
// keys, several keys with a fence per key, and the options of withLock.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { openLock } from '../index.js';
import { useRedis } from './redis-server.js';
import { aCountedKeyHoldsItsLimit, readersShareAKey, severalKeysAreOneLease } from './store-tests.js';

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
/** The redis backend as the scenarios every store passes take it. */
const store = { backend: 'r', pair };

test('readers of two processes hold a redis key together; a writer waits for both and gets a higher fence', () =>
  readersShareAKey(store));

test('a counted redis key holds at most its limit, by weight, and refuses another limit', () => aCountedKeyHoldsItsLimit(store));

test('several redis keys are one lease with a fence per key, all or nothing', () => severalKeysAreOneLease(store));

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

// Bad input, swept over both drivers: every malformed key and every bad
// acquire option is a LockError with the right code (never a crash, a hang
// or a key in the message), and a rejected call leaves the backend usable.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { openLock } from '../index.js';
import { rejectsWith } from './helpers.js';
import { useRedis } from './redis-server.js';

const redis = useRedis();

/** One local and one redis backend, both with maxKeyBytes 8. */
async function open() {
  const provider = await openLock({
    config: {
      'dokebi-lock': {
        backends: {
          local: { maxKeyBytes: 8 },
          redis: { driver: 'redis', connection: 'main', leaseMs: 10_000, maxKeyBytes: 8, namespace: 'bad-input' },
        },
      },
      'dokebi-redis': { connections: { main: { url: redis.url } } },
    },
  });
  return { provider, backends: [provider.backend('local'), provider.backend('redis')] };
}

const SECRET = 'secret-k';
const badKeys = [
  [undefined, 'INVALID_KEY'],
  [null, 'INVALID_KEY'],
  [42, 'INVALID_KEY'],
  [10n, 'INVALID_KEY'],
  [Symbol('k'), 'INVALID_KEY'],
  [{ toString: () => 'k' }, 'INVALID_KEY'],
  [new String('k'), 'INVALID_KEY'],
  ['', 'INVALID_KEY'],
  ['\uD800', 'INVALID_KEY'],
  ['a\uDFFFb', 'INVALID_KEY'],
  ['a\u0000b', 'INVALID_KEY'],
  ['\uDC00\uD800', 'INVALID_KEY'],
  [`${SECRET}9`, 'INVALID_KEY'], // 9 bytes
  ['1234567\u00e9', 'INVALID_KEY'], // 7 + 2 bytes
  ['x'.repeat(64 << 20), 'INVALID_KEY'],
];
const badOptions = [
  'fast',
  7,
  true,
  null,
  { waitTimeoutMs: NaN },
  { waitTimeoutMs: -1 },
  { waitTimeoutMs: -0.5 },
  { waitTimeoutMs: 1.5 },
  { waitTimeoutMs: Infinity },
  { waitTimeoutMs: -Infinity },
  { waitTimeoutMs: 2 ** 31 },
  { waitTimeoutMs: 2 ** 53 },
  { waitTimeoutMs: '5' },
  { waitTimeoutMs: 5n },
  { waitTimeoutMs: null },
  { waitTimeoutMs: {} },
  { signal: {} },
  { signal: null },
  { signal: 'abort' },
  { signal: new EventTarget() },
  { timeoutMs: 5 },
  [],
];

test('malformed keys are INVALID_KEY on both drivers, and messages never carry a key', async () => {
  const { provider, backends } = await open();
  for (const backend of backends) {
    for (const [key, code] of badKeys) {
      const error = await rejectsWith(backend.acquire(key, { waitTimeoutMs: 0 }), code);
      assert.ok(!error.message.includes(SECRET) && !JSON.stringify(error.details ?? {}).includes(SECRET));
    }
    // At the limit is fine, also with a multi-byte character.
    for (const key of ['12345678', '123456\u00e9', '\u{1F600}\u{1F600}']) {
      const lease = await backend.acquire(key, { waitTimeoutMs: 0 });
      assert.equal(await lease.release(), true);
    }
  }
  await provider.close();
});

test('bad acquire options are INVALID_ARGUMENT on both drivers, also while the key is held', async () => {
  const { provider, backends } = await open();
  for (const backend of backends) {
    const held = await backend.acquire('held');
    for (const options of badOptions) {
      await rejectsWith(backend.acquire('free', options), 'INVALID_ARGUMENT');
      await rejectsWith(backend.acquire('held', options), 'INVALID_ARGUMENT');
    }
    // The rejected calls left nothing behind: the free key is free.
    const lease = await backend.acquire('free', { waitTimeoutMs: 0 });
    assert.equal(await lease.release(), true);
    assert.equal(await held.release(), true);
    assert.equal(await held.release(), false);
  }
  await provider.close();
});

test('after close every call on both drivers is CLOSED or a settled false, never a hang', async () => {
  const { provider, backends } = await open();
  const leases = await Promise.all(backends.map((backend) => backend.acquire('k')));
  await provider.close();
  await provider.close();
  for (const [i, backend] of backends.entries()) {
    await rejectsWith(backend.acquire('k'), 'CLOSED');
    // Closed comes first, whatever the arguments.
    await rejectsWith(backend.acquire(42), 'CLOSED');
    await rejectsWith(backend.acquire('k', { waitTimeoutMs: -1 }), 'CLOSED');
    assert.equal(leases[i].valid, false);
    assert.equal(leases[i].remainingMs, 0);
    assert.equal(await leases[i].renew(), false);
    assert.equal(await leases[i].release(), false);
  }
});

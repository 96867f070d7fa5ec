// Every backend a provider hands out has the whole LockBackend API: where an
// app driver or a wrapBackend supplies only acquire, the library supplies
// withLock (built on that acquire) and status.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { DatabaseSync } from 'node:sqlite';
import { openLock, LockError, LockExtension } from '../index.js';
import { rejectsWith } from './helpers.js';
import { useRedis } from './redis-server.js';

const redis = useRedis();

/** An app driver whose view has acquire only, over a local backend of its own. */
async function acquireOnly() {
  const inner = await openLock({ config: { 'dokebi-lock': { backends: { m: {} } } } });
  const backend = inner.backend('m');
  return { view: { acquire: (key, options) => backend.acquire(key, options) }, close: () => inner.close() };
}

/** A wrapBackend that supplies acquire only, counting its calls in `calls[name]`. */
function countingExtension(calls, seen = []) {
  return class Counting extends LockExtension {
    wrapBackend({ name, backend }) {
      seen.push({ name, withLock: typeof backend.withLock, status: typeof backend.status });
      calls[name] = 0;
      return {
        acquire(key, options) {
          calls[name]++;
          return backend.acquire(key, options);
        },
      };
    }
  };
}

const config = (backends) => ({ 'dokebi-lock': { backends } });

test('an app driver that supplies only acquire gets withLock, with the built-in semantics and errors', async () => {
  const provider = await openLock({ config: config({ b: { driver: 'memory' } }), drivers: { memory: acquireOnly } });
  const backend = provider.backend('b');
  const value = await backend.withLock('k', async (lease, signal) => {
    assert.equal(lease.key, 'k');
    assert.equal(signal.aborted, false);
    await rejectsWith(backend.acquire('k', { waitTimeoutMs: 0 }), 'LOCK_BUSY');
    return 42;
  });
  assert.equal(value, 42);
  await (await backend.acquire('k', { waitTimeoutMs: 0 })).release();

  // fn's error wins, and the lease is released all the same.
  const boom = new Error('boom');
  await assert.rejects(backend.withLock('k', () => Promise.reject(boom)), (error) => error === boom);
  await (await backend.acquire('k', { waitTimeoutMs: 0 })).release();

  // A failed acquire rejects as acquire does, and never runs fn.
  const held = await backend.acquire('k');
  let ran = false;
  await rejectsWith(backend.withLock('k', () => (ran = true), { waitTimeoutMs: 0 }), 'LOCK_BUSY');
  assert.equal(ran, false);
  await held.release();

  // The caller's signal reaches fn, which decides.
  const controller = new AbortController();
  const reason = await backend.withLock('k', async (lease, signal) => {
    controller.abort('stop');
    return signal.reason;
  }, { signal: controller.signal });
  assert.equal(reason, 'stop');

  // The argument errors of the built-in withLock.
  await rejectsWith(backend.withLock('k'), 'INVALID_ARGUMENT');
  await rejectsWith(backend.withLock('k', () => {}, { autoRenew: 'yes' }), 'INVALID_ARGUMENT');
  await rejectsWith(backend.withLock('k', () => {}, { leaseMs: 5 }), 'INVALID_ARGUMENT');
  await rejectsWith(backend.withLock('k', () => {}, null), 'INVALID_ARGUMENT');
  await rejectsWith(backend.withLock(7, () => {}), 'INVALID_KEY');
  await provider.close();
});

test('an app driver without status reports its driver and the acquires the library saw; provider.status() lists every backend', async () => {
  const provider = await openLock({ config: config({ a: {}, b: { driver: 'memory' } }), drivers: { memory: acquireOnly } });
  const backend = provider.backend('b');
  assert.deepEqual(backend.status(), { driver: 'memory', held: null, waiting: 0, acquired: 0, timedOut: 0, lost: null });
  const held = await backend.acquire('k');
  await rejectsWith(backend.acquire('k', { waitTimeoutMs: 20 }), 'WAIT_TIMEOUT');
  await rejectsWith(backend.acquire('k', { waitTimeoutMs: 0 }), 'LOCK_BUSY');
  const waiting = backend.acquire('k', { waitTimeoutMs: 5000 });
  assert.equal(backend.status().waiting, 1);
  await held.release();
  await (await waiting).release();
  await backend.withLock('k', () => {});
  assert.deepEqual(backend.status(), { driver: 'memory', held: null, waiting: 0, acquired: 3, timedOut: 1, lost: null });
  const status = provider.status();
  assert.deepEqual(Object.keys(status), ['a', 'b']);
  assert.equal(status.a.driver, 'local');
  assert.deepEqual(status.b, backend.status());
  await provider.close();
});

test('a wrapBackend that supplies only acquire: withLock goes through its acquire, status is the wrapped backend\'s', async () => {
  const calls = {};
  const seen = [];
  const provider = await openLock({
    config: config({ a: {}, b: { driver: 'memory' } }),
    entry: { default: countingExtension(calls, seen), drivers: { memory: acquireOnly } },
  });
  // wrapBackend gets the whole API too, whatever the driver supplied.
  assert.deepEqual(seen, [
    { name: 'a', withLock: 'function', status: 'function' },
    { name: 'b', withLock: 'function', status: 'function' },
  ]);
  for (const name of ['a', 'b']) {
    const backend = provider.backend(name);
    assert.equal(await backend.withLock('k', (lease) => lease.fence), '1');
    assert.equal(calls[name], 1, `${name}: withLock acquired through the wrapper`);
    await rejectsWith(backend.withLock('k', () => {}, { waitTimeoutMs: -1 }), 'INVALID_ARGUMENT');
  }
  const held = await provider.backend('a').acquire('x');
  const status = provider.status();
  assert.deepEqual(status.a, { driver: 'local', held: 1, heldShared: 0, waiting: 0, acquired: 2, timedOut: 0, lost: 0 });
  assert.deepEqual(status.b, { driver: 'memory', held: null, waiting: 0, acquired: 1, timedOut: 0, lost: null });
  await held.release();
  await provider.close();
});

test('a wrapped redis backend keeps the core renewals in withLock: a section blocking the event loop past leaseMs keeps its lease', async () => {
  const redisConfig = {
    'dokebi-lock': { backends: { r: { driver: 'redis', connection: 'main', namespace: 'full-backend', leaseMs: 300 } } },
    'dokebi-redis': { connections: { main: { url: redis.url, commandTimeoutMs: 250 } } },
  };
  const calls = {};
  const wrapped = await openLock({ config: redisConfig, entry: { default: countingExtension(calls) } });
  const other = await openLock({ config: redisConfig });
  const value = await wrapped.backend('r').withLock('k', async (lease, signal) => {
    // Over three lease lengths with no JS timer able to run.
    for (const end = performance.now() + 1000; performance.now() < end; );
    assert.equal(lease.valid, true);
    assert.equal(signal.aborted, false);
    await rejectsWith(other.backend('r').acquire('k', { waitTimeoutMs: 0 }), 'LOCK_BUSY');
    return 'done';
  });
  assert.equal(value, 'done');
  assert.equal(calls.r, 1);
  assert.equal(wrapped.status().r.driver, 'redis');
  await (await other.backend('r').acquire('k', { waitTimeoutMs: 0 })).release();
  await Promise.all([wrapped.close(), other.close()]);
});

test('an app driver\'s expiring lease is renewed while withLock runs; a renewal that finds it lost aborts the signal and rejects with LEASE_LOST', async (t) => {
  const { drivers } = await import('../../examples/29-extension/src/infra/lock/extension.ts');
  const dir = await mkdtemp(join(tmpdir(), 'dokebi-lock-full-backend-'));
  t.after(() => rm(dir, { recursive: true, force: true }));
  const file = join(dir, 'locks.db');
  // A lease long enough that one renewal delayed by a loaded machine (this
  // suite runs beside builds and servers) does not lose it.
  // 400 ms lost a lease when one renewal (every leaseMs / 3) waited past
  // the rest of it behind CI's parallel builds.
  const sqlite = config({ s: { driver: 'sqlite', file, leaseMs: 1000, pollIntervalMs: 5 } });
  const [a, b] = [await openLock({ config: sqlite, drivers }), await openLock({ config: sqlite, drivers })];

  const value = await a.backend('s').withLock('k', async (lease, signal) => {
    await sleep(2500); // two and a half lease lengths
    assert.equal(lease.valid, true);
    assert.equal(signal.aborted, false);
    await rejectsWith(b.backend('s').acquire('k', { waitTimeoutMs: 0 }), 'LOCK_BUSY');
    return 'renewed';
  });
  assert.equal(value, 'renewed');

  // Another owner takes the key: the next renewal answers false.
  let reason;
  const error = await rejectsWith(
    a.backend('s').withLock('k', async (lease, signal) => {
      const db = new DatabaseSync(file);
      db.prepare("UPDATE dokebi_lock SET owner = 'another-owner'").run();
      db.close();
      await Promise.race([new Promise((resolve) => signal.addEventListener('abort', resolve)), sleep(5000)]);
      reason = signal.reason;
      return 'finished';
    }),
    'LEASE_LOST',
  );
  assert.ok(error instanceof LockError);
  assert.equal(reason?.code, 'LEASE_LOST', 'the signal aborted with LEASE_LOST');
  await Promise.all([a.close(), b.close()]);
});

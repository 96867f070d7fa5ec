// backend.forceRelease(key) through the JS API: an operator's break of a
// stuck lock. Local holders end at once and their waiters are granted as
// after a release; on redis (a private redis-server, two providers standing
// for two processes) the holder finds its lease gone at its next call, the
// fence is raised above the holder's, and a waiter of the other provider is
// granted at once; a policy breaks the key on every member its rule allows;
// the file driver and an app driver without forceRelease refuse it.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openLock } from '../index.js';
import { openLocal, rejectsWith } from './helpers.js';
import { useRedis } from './redis-server.js';

const redis = useRedis();

test('local: a plain holder is removed at once and its waiter granted', async () => {
  const { provider, backend } = await openLocal();
  const lease = await backend.acquire('k');
  const waiter = backend.acquire('k', { waitTimeoutMs: 10_000 });
  assert.deepEqual(await backend.forceRelease('k'), { backend: 'b', removed: 1, fence: null });
  assert.equal(lease.valid, false);
  assert.equal(await lease.renew(), false);
  const next = await waiter;
  assert.equal(next.valid, true);
  assert.ok(BigInt(next.fence) > BigInt(lease.fence));
  assert.equal(await lease.release(), false, 'the removed holder released nothing');
  assert.equal(next.valid, true, "the removed holder's release left the next holder alone");
  assert.equal(await next.release(), true);
  await provider.close();
});

test('local: a holder nobody waits for is removed, and the key is free', async () => {
  const { provider, backend } = await openLocal();
  const lease = await backend.acquire('k');
  assert.equal((await backend.forceRelease('k')).removed, 1);
  assert.equal(lease.valid, false);
  const next = await backend.acquire('k', { waitTimeoutMs: 0 });
  assert.equal(await lease.release(), false);
  assert.equal(next.valid, true);
  assert.equal(await next.release(), true);
  assert.equal((await backend.forceRelease('k')).removed, 0, 'a free key has nobody to remove');
  await provider.close();
});

test('local: every reader of a shared key is removed, and a lease of several keys ends whole', async () => {
  const { provider, backend } = await openLocal();
  const readers = [await backend.acquire('r', { mode: 'shared' }), await backend.acquire('r', { mode: 'shared' })];
  assert.equal((await backend.forceRelease('r')).removed, 2);
  assert.deepEqual(readers.map((reader) => reader.valid), [false, false]);
  for (const reader of readers) assert.equal(await reader.release(), false);

  const both = await backend.acquire(['a', 'b']);
  assert.equal((await backend.forceRelease('a')).removed, 1);
  assert.equal(both.valid, false);
  assert.equal((await backend.inspect('b')).held, 0, "the lease's other key is free too");
  await provider.close();
});

test('local: a withLock section whose lease was removed ends with LEASE_LOST', async () => {
  const { provider, backend } = await openLocal();
  await rejectsWith(
    backend.withLock('k', async () => {
      await backend.forceRelease('k');
      return 'done';
    }),
    'LEASE_LOST',
  );
  const failure = new Error('the section failed');
  const lost = await rejectsWith(
    backend.withLock('k', async () => {
      await backend.forceRelease('k');
      throw failure;
    }),
    'LEASE_LOST',
  );
  assert.equal(lost.cause, failure);
  assert.equal(await backend.withLock('k', () => 'free again'), 'free again');
  await provider.close();
});

test('local: a key the backend refuses is INVALID_KEY, and a closed backend CLOSED', async () => {
  const { provider, backend } = await openLocal();
  await rejectsWith(backend.forceRelease(''), 'INVALID_KEY');
  await rejectsWith(backend.forceRelease(42), 'INVALID_KEY');
  await provider.close();
  await rejectsWith(backend.forceRelease('k'), 'CLOSED');
});

test("redis: another provider's holder is removed, the fence raised past it, and the waiter granted at once", async () => {
  const config = {
    'dokebi-lock': { backends: { r: { driver: 'redis', connection: 'main', leaseMs: 5000, namespace: 'force-release' } } },
    'dokebi-redis': { connections: { main: { url: redis.url } } },
  };
  const [a, b] = [await openLock({ config }), await openLock({ config })];
  const [holder, breaker] = [a.backend('r'), b.backend('r')];
  const lease = await holder.acquire('k');
  const waiter = breaker.acquire('k', { waitTimeoutMs: 10_000 });
  for (let tries = 0; (await holder.inspect('k')).waiting !== 1; tries++) {
    assert.ok(tries < 500, 'the waiter shows');
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  const started = performance.now();
  const forced = await breaker.forceRelease('k');
  assert.equal(forced.backend, 'r');
  assert.equal(forced.removed, 1);
  assert.ok(BigInt(forced.fence) > BigInt(lease.fence), `${forced.fence} <= ${lease.fence}`);
  const next = await waiter;
  assert.ok(performance.now() - started < 3500, 'granted on the release, not at the lease end');
  assert.ok(BigInt(next.fence) > BigInt(forced.fence), `${next.fence} <= ${forced.fence}`);
  assert.equal(await lease.renew(), false);
  assert.equal(lease.valid, false);
  await rejectsWith(lease.release(), 'LEASE_LOST');
  assert.equal(await next.release(), true);

  const free = await breaker.forceRelease('k');
  assert.equal(free.removed, 0);
  assert.ok(BigInt(free.fence) > BigInt(next.fence), 'a free key has its fence raised all the same');
  await rejectsWith(breaker.forceRelease(''), 'INVALID_KEY');
  await Promise.all([a.close(), b.close()]);
  await rejectsWith(breaker.forceRelease('k'), 'CLOSED');
});

test('a policy breaks the key on every member its rule allows', async () => {
  const provider = await openLock({
    config: { 'dokebi-lock': { backends: { near: {}, far: {}, pick: { driver: 'policy', default: { backends: ['near', 'far'], minTier: 'process', onUnavailable: 'fallBack' } } } } },
  });
  const pick = provider.backend('pick');
  assert.deepEqual(await pick.forceRelease('k'), { backend: 'near', removed: 0, fence: null });
  const leases = [await provider.backend('far').acquire('k'), await provider.backend('near').acquire('k', { mode: 'shared' })];
  const extra = await provider.backend('far').acquire('other');
  assert.deepEqual(await pick.forceRelease('k'), { backend: 'near', removed: 2, fence: null });
  assert.deepEqual(leases.map((lease) => lease.valid), [false, false]);
  assert.equal(extra.valid, true, 'other keys are left alone');
  const far = await provider.backend('far').acquire('k');
  assert.deepEqual(await pick.forceRelease('k'), { backend: 'far', removed: 1, fence: null });
  assert.equal(far.valid, false);
  await rejectsWith(pick.forceRelease(''), 'INVALID_KEY');
  await provider.close();
});

test('a policy breaks the key on its other members when one refuses, and rejects with that refusal', async (t) => {
  const directory = mkdtempSync(join(tmpdir(), 'dokebi-force-release-'));
  t.after(() => rmSync(directory, { recursive: true, force: true }));
  const provider = await openLock({
    config: {
      'dokebi-lock': {
        backends: {
          files: { driver: 'file', directory: join(directory, 'locks') },
          near: {},
          pick: { driver: 'policy', default: { backends: ['files', 'near'], minTier: 'process', onUnavailable: 'fallBack' } },
        },
      },
    },
  });
  const lease = await provider.backend('near').acquire('k');
  await rejectsWith(provider.backend('pick').forceRelease('k'), 'INVALID_ARGUMENT');
  assert.equal(lease.valid, false, 'the member that could was broken');
  await provider.close();
});

test('the file driver refuses forceRelease, an app driver without inspect or forceRelease both', async (t) => {
  const directory = mkdtempSync(join(tmpdir(), 'dokebi-force-release-'));
  t.after(() => rmSync(directory, { recursive: true, force: true }));
  const memory = async () => {
    const inner = await openLock({ config: { 'dokebi-lock': { backends: { m: {} } } } });
    return { view: { acquire: (key, options) => inner.backend('m').acquire(key, options) }, close: () => inner.close() };
  };
  const provider = await openLock({
    config: { 'dokebi-lock': { backends: { files: { driver: 'file', directory: join(directory, 'locks') }, app: { driver: 'memory' } } } },
    drivers: { memory },
  });
  const files = provider.backend('files');
  const lease = await files.acquire('k');
  await rejectsWith(files.forceRelease('k'), 'INVALID_ARGUMENT');
  assert.equal(lease.valid, true, 'the file lease is still held');
  await lease.release();
  await rejectsWith(provider.backend('app').forceRelease('k'), 'INVALID_ARGUMENT');
  await rejectsWith(provider.backend('app').inspect('k'), 'INVALID_ARGUMENT');
  await provider.close();
});

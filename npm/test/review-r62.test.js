// Review R62 of per-acquire holder labels: labelled and plain leases of one
// key through every path of the local engine and of redis, and the three
// findings (each failed before its fix): a label with a lone surrogate shown
// as another label, a bad key's error hidden by a bad label's on local, and
// a `holder` getter read twice that made acquire throw.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { openLock } from '../index.js';
import { isSettled, rejectsWith } from './helpers.js';

async function openLocal(settings = {}) {
  const { holder, ...rest } = settings;
  const provider = await openLock({ config: { 'dokebi-lock': { ...(holder ? { holder } : {}), backends: { b: rest } } } });
  return { provider, backend: provider.backend('b') };
}

const labels = async (backend, key) => (await backend.inspect(key)).holders.map((h) => h.label);
const tick = () => new Promise((resolve) => setImmediate(resolve));

test('r62 local: labelled and plain leases of one key exclude each other, FIFO, through deferred releases', async () => {
  const { provider, backend } = await openLocal({ holder: 'prov' });
  // plain, released (deferred), then labelled of the same key
  const p = await backend.acquire('k');
  assert.equal(await p.release(), true);
  const l = await backend.acquire('k', { holder: 'job', waitTimeoutMs: 0 });
  assert.deepEqual(await labels(backend, 'k'), ['job']);
  await rejectsWith(backend.acquire('k', { waitTimeoutMs: 0 }), 'LOCK_BUSY');
  // labelled released (deferred), then plain fast path
  assert.equal(await l.release(), true);
  const p2 = await backend.acquire('k', { waitTimeoutMs: 0 });
  assert.deepEqual(await labels(backend, 'k'), ['prov']);
  await rejectsWith(backend.acquire('k', { holder: 'x', waitTimeoutMs: 0 }), 'LOCK_BUSY');
  // queue: labelled, plain, labelled; grants in order, each with its label
  const w1 = backend.acquire('k', { holder: 'w1' });
  const w2 = backend.acquire('k');
  const w3 = backend.acquire('k', { holder: 'w3' });
  assert.equal(backend.status().waiting, 3);
  assert.equal(await p2.release(), true);
  const g1 = await w1;
  assert.deepEqual(await labels(backend, 'k'), ['w1']);
  assert.equal(await isSettled(w2), false);
  assert.equal(await g1.release(), true);
  const g2 = await w2;
  assert.deepEqual(await labels(backend, 'k'), ['prov']);
  assert.equal(await g1.release(), false);
  assert.equal(await g2.release(), true);
  const g3 = await w3;
  assert.deepEqual(await labels(backend, 'k'), ['w3']);
  assert.ok(BigInt(g3.fence) > BigInt(g2.fence) && BigInt(g2.fence) > BigInt(g1.fence));
  assert.equal(backend.status().held, 1);
  assert.equal(await g3.release(), true);
  assert.equal(backend.status().held, 0);
  // stale release after slot reuse (holder slot reused by a new labelled lease)
  const a = await backend.acquire('s', { holder: 'a' });
  assert.equal(await a.release(), true);
  const b = await backend.acquire('s', { holder: 'b' });
  assert.equal(await a.release(), false);
  assert.equal(b.valid, true);
  assert.deepEqual(await labels(backend, 's'), ['b']);
  await b.release();
  await provider.close();
});

test('r62 local: forceRelease of labelled holders, cancel grants, close with labelled waiters', async () => {
  const { provider, backend } = await openLocal({ holder: 'prov' });
  const r1 = await backend.acquire('k', { mode: 'shared', holder: 'r1' });
  const x = backend.acquire('k', { waitTimeoutMs: 100 });
  const r2 = backend.acquire('k', { mode: 'shared', holder: 'r2' });
  await rejectsWith(x, 'WAIT_TIMEOUT');
  const g2 = await r2;
  assert.deepEqual((await labels(backend, 'k')).sort(), ['r1', 'r2']);
  const w = backend.acquire('k', { holder: 'w' });
  const forced = await backend.forceRelease('k');
  assert.equal(forced.removed, 2);
  const gw = await w;
  assert.deepEqual(await labels(backend, 'k'), ['w']);
  assert.equal(await r1.release(), false);
  assert.equal(await g2.release(), false);
  assert.equal(gw.valid, true);
  assert.equal(backend.status().held, 1);
  // forceRelease of a single labelled exclusive holder, deferred releases around it
  assert.equal(await gw.release(), true); // deferred
  const l = await backend.acquire('k', { holder: 'again' });
  assert.equal((await backend.forceRelease('k')).removed, 1);
  assert.equal(await l.release(), false);
  assert.equal(backend.status().held, 0);
  // close with labelled waiters
  const h = await backend.acquire('c', { holder: 'h' });
  const q = [backend.acquire('c', { holder: 'q1' }), backend.acquire(['c', 'd'], { holder: 'q2' })];
  await provider.close();
  for (const each of q) await rejectsWith(each, 'CLOSED');
  assert.equal(await h.release(), false);
});

test('r62 local: several keys with a label, as arguments and as an array, maxWaiters/maxKeys', async () => {
  const { provider, backend } = await openLocal({ holder: 'prov', maxWaiters: 1, maxKeys: 12 });
  const few = await backend.acquire(['a', 'b', 'c'], { holder: 'few' });
  const many = await backend.acquire(['k0', 'k1', 'k2', 'k3', 'k4', 'k5', 'k6', 'k7', 'k8'], { holder: 'many' });
  assert.deepEqual(await labels(backend, 'b'), ['few']);
  assert.deepEqual(await labels(backend, 'k8'), ['many']);
  await rejectsWith(backend.acquire('z', { holder: 'z' }), 'KEY_LIMIT');
  const q = backend.acquire('a', { holder: 'q' });
  await rejectsWith(backend.acquire('b', { holder: 'q' }), 'QUEUE_FULL');
  await few.release();
  assert.deepEqual(await labels(backend, 'a'), ['q']);
  await (await q).release();
  await many.release();
  assert.equal(backend.status().held, 0);
  await provider.close();
});

test('r62 local: a holder getter is read once: acquire returns a promise, never throws', async () => {
  const { provider, backend } = await openLocal();
  let reads = 0;
  const options = {
    get holder() {
      reads += 1;
      if (reads > 1) throw new Error('second read');
      return 'job';
    },
  };
  let outcome;
  try {
    const p = backend.acquire('k', options);
    outcome = 'returned ' + typeof p?.then;
    await p.catch(() => {});
  } catch (error) {
    outcome = 'threw ' + error.message;
  }
  assert.equal(outcome, 'returned function', 'acquire must return a promise, never throw');
  await provider.close();
});

test('r62 local: a label with a lone surrogate is refused, as a key with one is', async () => {
  const { provider, backend } = await openLocal();
  await rejectsWith(backend.acquire('k\uD800'), 'INVALID_KEY');
  await rejectsWith(backend.acquire('k', { holder: 'job\uD800', waitTimeoutMs: 0 }), 'INVALID_ARGUMENT');
  await rejectsWith(backend.acquire(['k', 'j'], { holder: 'job\uDFFF', waitTimeoutMs: 0 }), 'INVALID_ARGUMENT');
  assert.equal((await backend.inspect('k')).held, 0);
  await provider.close();
});

test('r62 redis: a label with a lone surrogate is refused', async () => {
  const provider = await openLock({
    config: {
      'dokebi-lock': { backends: { r: { driver: 'redis', connection: 'main', leaseMs: 5000, namespace: `r62-${process.pid}` } } },
      'dokebi-redis': { connections: { main: { url: 'redis://127.0.0.1:6379' } } },
    },
  });
  const backend = provider.backend('r');
  try {
    await rejectsWith(backend.acquire('k', { holder: 'job\uD800', waitTimeoutMs: 0 }), 'INVALID_ARGUMENT');
    assert.equal((await backend.inspect('k')).held, 0);
  } finally {
    await provider.close();
  }
});

test('r62 redis: labelled and plain leases of one key exclude each other; waiter label handed on', async () => {
  const config = {
    'dokebi-lock': { backends: { r: { driver: 'redis', connection: 'main', leaseMs: 5000, namespace: `r62b-${process.pid}` } } },
    'dokebi-redis': { connections: { main: { url: 'redis://127.0.0.1:6379' } } },
  };
  const one = await openLock({ config: { ...config, 'dokebi-lock': { ...config['dokebi-lock'], holder: 'one' } } });
  const two = await openLock({ config: { ...config, 'dokebi-lock': { ...config['dokebi-lock'], holder: 'two' } } });
  const [a, b] = [one.backend('r'), two.backend('r')];
  try {
    const l = await a.acquire('k', { holder: 'job.x' });
    await rejectsWith(b.acquire('k', { waitTimeoutMs: 0 }), 'LOCK_BUSY');
    await rejectsWith(a.acquire('k', { waitTimeoutMs: 0 }), 'LOCK_BUSY');
    const w1 = a.acquire('k', { holder: 'w1', waitTimeoutMs: 5000 });
    const w2 = a.acquire('k', { waitTimeoutMs: 5000 });
    await new Promise((r) => setTimeout(r, 50));
    assert.equal(await l.release(), true);
    const g1 = await w1;
    assert.deepEqual(await labels(b, 'k'), ['w1']);
    assert.equal(await isSettled(w2), false);
    assert.equal(await g1.release(), true);
    const g2 = await w2;
    assert.deepEqual(await labels(b, 'k'), ['one']);
    assert.ok(BigInt(g2.fence) > BigInt(g1.fence));
    await g2.release();
    const s = await a.withLock('k', async (lease) => (await labels(b, 'k')).concat(lease.fence), { holder: 'sec' });
    assert.equal(s[0], 'sec');
  } finally {
    await one.close();
    await two.close();
  }
  await tick();
});

test('r62: a bad key and a bad label: the same error on local and redis', async () => {
  const { provider, backend } = await openLocal();
  const store = await openLock({
    config: {
      'dokebi-lock': { backends: { r: { driver: 'redis', connection: 'main', leaseMs: 5000, namespace: `r62c-${process.pid}` } } },
      'dokebi-redis': { connections: { main: { url: 'redis://127.0.0.1:6379' } } },
    },
  });
  try {
    const local = await backend.acquire('', { holder: '' }).catch((e) => e.code);
    const redis = await store.backend('r').acquire('', { holder: '' }).catch((e) => e.code);
    assert.equal(local, redis, `local ${local}, redis ${redis}`);
  } finally {
    await provider.close();
    await store.close();
  }
});

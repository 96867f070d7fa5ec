// SPEC sections 3 and 4 through the JS API, on the local driver.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { isSettled, openLocal, rejectsWith } from './helpers.js';

test('acquire resolves a lease with key, valid, remainingMs Infinity and a decimal fence', async () => {
  const { provider, backend } = await openLocal();
  const lease = await backend.acquire('order:42');
  assert.equal(lease.key, 'order:42');
  assert.equal(lease.valid, true);
  assert.equal(lease.remainingMs, Infinity);
  assert.match(lease.fence, /^[1-9][0-9]*$/);
  assert.equal(await lease.renew(), true);
  await provider.close();
});

test('release is true once, then false; the lease is invalid afterwards', async () => {
  const { provider, backend } = await openLocal();
  const lease = await backend.acquire('k');
  assert.equal(await lease.release(), true);
  assert.equal(await lease.release(), false);
  assert.equal(lease.valid, false);
  assert.equal(lease.remainingMs, 0);
  assert.equal(await lease.renew(), false);
  await provider.close();
});

test('a release with nobody queued is seen by every later call: status, valid, limits, try, close', async () => {
  // With nothing queued a release makes no native call: the engine ends it
  // at the start of its next call, whichever call that is.
  const { provider, backend } = await openLocal({ maxKeys: 1 });
  const a = await backend.acquire('a');
  assert.equal(await a.release(), true);
  assert.equal(backend.status().held, 0);
  assert.equal(a.valid, false);
  const b = await backend.acquire('b'); // maxKeys 1: 'a' is free again
  assert.equal(await b.release(), true);
  assert.equal((await backend.acquire('b', { waitTimeoutMs: 0 })).valid, true);
  const { provider: two, backend: pair } = await openLocal();
  const [x, y] = [await pair.acquire('x'), await pair.acquire('y')];
  assert.equal(await x.release(), true); // deferred
  assert.equal(await y.release(), true); // ends x's release, then its own
  assert.equal(await x.release(), false);
  assert.equal(pair.status().held, 0);
  const [z, w] = [await pair.acquire('z'), await pair.acquire('w')];
  assert.equal(await w.release(), true); // deferred, then ended by close
  await two.close();
  assert.equal(await z.release(), false);
  await provider.close();
});

test('a release while someone is queued hands on at once, after a deferred one ends', async () => {
  const { provider, backend } = await openLocal();
  const free = await backend.acquire('free');
  const held = await backend.acquire('k');
  assert.equal(await free.release(), true); // nobody queued: deferred
  const waiter = backend.acquire('k');
  assert.equal(backend.status().waiting, 1);
  assert.equal(await held.release(), true);
  assert.equal(await isSettled(waiter), true);
  const next = await waiter;
  assert.equal(next.valid, true);
  assert.equal(backend.status().held, 1);
  await provider.close();
});

test('a stale lease never releases a later lease of the same key', async () => {
  const { provider, backend } = await openLocal();
  const first = await backend.acquire('k');
  await first.release();
  const second = await backend.acquire('k');
  assert.equal(await first.release(), false);
  assert.equal(second.valid, true);
  await rejectsWith(backend.acquire('k', { waitTimeoutMs: 0 }), 'LOCK_BUSY');
  await provider.close();
});

test('an uncontended acquire returns an already-settled promise', async () => {
  const { provider, backend } = await openLocal();
  const pending = backend.acquire('k');
  assert.equal(await isSettled(pending), true);
  await (await pending).release();
  await provider.close();
});

test('a lease is no thenable: a promise resolved with it fulfils with the lease itself', async () => {
  const { provider, backend } = await openLocal();
  const lease = await backend.acquire('k');
  assert.equal(lease.then, undefined);
  assert.equal(await Promise.resolve(lease), lease);
  await lease.release();
  await provider.close();
});

test('waiters of one key are granted in FIFO order', async () => {
  const { provider, backend } = await openLocal();
  const holder = await backend.acquire('k');
  const order = [];
  const waiters = [1, 2, 3, 4].map((n) =>
    backend.acquire('k').then(async (lease) => {
      order.push(n);
      await lease.release();
    }),
  );
  assert.equal(await isSettled(waiters[0]), false, 'waiters wait while the key is held');
  await holder.release();
  await Promise.all(waiters);
  assert.deepEqual(order, [1, 2, 3, 4]);
  await provider.close();
});

test('different keys are held at once', async () => {
  const { provider, backend } = await openLocal();
  const a = await backend.acquire('a');
  const b = await backend.acquire('b');
  assert.equal(a.valid && b.valid, true);
  await provider.close();
});

test('waitTimeoutMs 0 tries once, then LOCK_BUSY', async () => {
  const { provider, backend } = await openLocal();
  await backend.acquire('k');
  await rejectsWith(backend.acquire('k', { waitTimeoutMs: 0 }), 'LOCK_BUSY');
  const free = await backend.acquire('other', { waitTimeoutMs: 0 });
  assert.equal(free.valid, true);
  await provider.close();
});

test('a wait past its timeout is WAIT_TIMEOUT and leaves the queue', async () => {
  const { provider, backend } = await openLocal({ maxWaiters: 1 });
  const holder = await backend.acquire('k');
  await rejectsWith(backend.acquire('k', { waitTimeoutMs: 20 }), 'WAIT_TIMEOUT');
  // The timed-out waiter freed its place (maxWaiters 1) and is not granted later.
  const next = backend.acquire('k');
  await holder.release();
  const lease = await next;
  assert.equal(lease.valid, true);
  await provider.close();
});

test('the backend waitTimeoutMs is the default wait', async () => {
  const { provider, backend } = await openLocal({ waitTimeoutMs: 15 });
  await backend.acquire('k');
  const error = await rejectsWith(backend.acquire('k'), 'WAIT_TIMEOUT');
  assert.match(error.message, /15 ms/);
  await provider.close();
});

test('an already aborted signal is ABORTED, even for a free key', async () => {
  const { provider, backend } = await openLocal();
  await rejectsWith(backend.acquire('k', { signal: AbortSignal.abort() }), 'ABORTED');
  const lease = await backend.acquire('k', { waitTimeoutMs: 0 });
  assert.equal(lease.valid, true, 'the aborted acquire holds nothing');
  await provider.close();
});

test('aborting while waiting is ABORTED and the next waiter still gets the key', async () => {
  const { provider, backend } = await openLocal();
  const holder = await backend.acquire('k');
  const controller = new AbortController();
  const aborted = backend.acquire('k', { signal: controller.signal });
  const next = backend.acquire('k');
  controller.abort();
  await rejectsWith(aborted, 'ABORTED');
  await holder.release();
  assert.equal((await next).valid, true);
  await provider.close();
});

test('a signal does nothing once the lease is granted', async () => {
  const { provider, backend } = await openLocal();
  const controller = new AbortController();
  const holder = await backend.acquire('k');
  const waiting = backend.acquire('k', { signal: controller.signal });
  await holder.release();
  const lease = await waiting;
  controller.abort();
  const direct = await backend.acquire('free', { signal: controller.signal }).catch((e) => e);
  assert.equal(direct.code, 'ABORTED', 'the signal is aborted now');
  assert.equal(lease.valid, true);
  assert.equal(await lease.release(), true);
  await provider.close();
});

test('maxKeys held keys at once, then KEY_LIMIT (a 503 for web hosts)', async () => {
  const { provider, backend } = await openLocal({ maxKeys: 2 });
  await backend.acquire('a');
  const b = await backend.acquire('b');
  const error = await rejectsWith(backend.acquire('c'), 'KEY_LIMIT');
  assert.deepEqual(error.http, { status: 503, code: 'LOCK_OVERLOADED', headers: { 'retry-after': '1' } });
  await b.release();
  assert.equal((await backend.acquire('c')).valid, true);
  await provider.close();
});

test('maxWaiters across the backend, then QUEUE_FULL', async () => {
  const { provider, backend } = await openLocal({ maxWaiters: 2 });
  await backend.acquire('a');
  await backend.acquire('b');
  const waiting = [backend.acquire('a'), backend.acquire('b')];
  const error = await rejectsWith(backend.acquire('a'), 'QUEUE_FULL');
  assert.equal(error.http.code, 'LOCK_OVERLOADED');
  await provider.close();
  await Promise.allSettled(waiting);
});

test('with maxWaiters 0 a free key is granted and a held one is QUEUE_FULL', async () => {
  const { provider, backend } = await openLocal({ maxWaiters: 0 });
  const lease = await backend.acquire('k');
  assert.equal(lease.valid, true);
  await rejectsWith(backend.acquire('k'), 'QUEUE_FULL');
  await provider.close();
});

test('the fence grows with every acquire of the backend, across keys and hand-offs', async () => {
  const { provider, backend } = await openLocal();
  const fences = [];
  const first = await backend.acquire('k');
  fences.push(first.fence);
  const handedOn = backend.acquire('k');
  await first.release();
  const second = await handedOn;
  fences.push(second.fence);
  fences.push((await backend.acquire('other')).fence);
  await second.release();
  fences.push((await backend.acquire('k')).fence);
  const numbers = fences.map(BigInt);
  for (let i = 1; i < numbers.length; i++) assert.ok(numbers[i] > numbers[i - 1], `${fences}`);
  await provider.close();
});

test('close rejects waiters with CLOSED, invalidates leases, and later calls are CLOSED', async () => {
  const { provider, backend } = await openLocal();
  const lease = await backend.acquire('k');
  const waiters = [backend.acquire('k'), backend.acquire('k', { waitTimeoutMs: 60_000 })];
  await provider.close();
  for (const waiter of waiters) {
    const error = await rejectsWith(waiter, 'CLOSED');
    assert.deepEqual(error.http, { status: 503, code: 'LOCK_UNAVAILABLE', headers: { 'retry-after': '1' } });
  }
  assert.equal(lease.valid, false);
  assert.equal(lease.remainingMs, 0);
  assert.equal(await lease.release(), false);
  await rejectsWith(backend.acquire('k'), 'CLOSED');
  await rejectsWith(() => provider.backend('b'), 'CLOSED');
  await provider.close(); // idempotent
});

test('await using releases the lease at the end of the block', async () => {
  const { provider, backend } = await openLocal();
  let kept;
  {
    await using lease = await backend.acquire('k');
    kept = lease;
    assert.equal(lease.valid, true);
  }
  assert.equal(kept.valid, false);
  {
    await using lock = provider;
    assert.deepEqual(lock.names(), ['b']);
  }
  await rejectsWith(() => provider.backend('b'), 'CLOSED');
});

test('bad keys are INVALID_KEY and never echoed', async () => {
  const { provider, backend } = await openLocal({ maxKeyBytes: 8 });
  for (const key of ['', 'secret\uD800', '\uDC00x', 'secret-order', 'ééééé', 42, null, undefined, { toString: () => 'k' }]) {
    const error = await rejectsWith(backend.acquire(key), 'INVALID_KEY');
    assert.ok(!error.message.includes('secret'), error.message);
  }
  assert.equal((await backend.acquire('éééé')).valid, true, '8 bytes of UTF-8 fit');
  assert.equal((await backend.acquire('\u{1F600}')).valid, true, 'a surrogate pair is fine');
  await provider.close();
});

test('a too long key reports its UTF-8 length', async () => {
  const { provider, backend } = await openLocal({ maxKeyBytes: 4 });
  const error = await rejectsWith(backend.acquire('x'.repeat(100)), 'INVALID_KEY');
  assert.deepEqual(error.details, { bytes: 100, maxKeyBytes: 4 });
  await provider.close();
});

test('bad acquire options are INVALID_ARGUMENT, never a crash or a hang', async () => {
  const { provider, backend } = await openLocal();
  await backend.acquire('k');
  const bad = [
    'fast',
    null,
    { waitTimeoutMs: NaN },
    { waitTimeoutMs: -1 },
    { waitTimeoutMs: 1.5 },
    { waitTimeoutMs: Infinity },
    { waitTimeoutMs: 2 ** 31 },
    { waitTimeoutMs: '5' },
    { signal: {} },
    { signal: 'abort' },
    { timeoutMs: 5 },
  ];
  for (const options of bad) await rejectsWith(backend.acquire('k', options), 'INVALID_ARGUMENT');
  await provider.close();
});

test('many waiters on one key all get it in turn, and the key ends free', async () => {
  const { provider, backend } = await openLocal({ maxWaiters: 1000 });
  const holder = await backend.acquire('k');
  let inside = 0;
  let most = 0;
  const order = [];
  const tasks = Array.from({ length: 1000 }, (_, n) =>
    backend.acquire('k').then(async (lease) => {
      inside++;
      most = Math.max(most, inside);
      order.push(n);
      await null;
      inside--;
      await lease.release();
    }),
  );
  await holder.release();
  await Promise.all(tasks);
  assert.equal(most, 1, 'mutual exclusion');
  assert.deepEqual(order, [...order].sort((a, b) => a - b));
  assert.equal((await backend.acquire('k', { waitTimeoutMs: 0 })).valid, true);
  await provider.close();
});

test('waits of different lengths time out independently, and the rest keep their order', async () => {
  const { provider, backend } = await openLocal();
  const holder = await backend.acquire('k');
  const order = [];
  const outcome = (name, options) =>
    backend.acquire('k', options).then(
      async (lease) => {
        order.push(name);
        await lease.release();
      },
      (error) => order.push(`${name}:${error.code}`),
    );
  const waits = [
    outcome('a', { waitTimeoutMs: 2000 }),
    outcome('short', { waitTimeoutMs: 20 }),
    outcome('b', { waitTimeoutMs: 1000 }),
    outcome('medium', { waitTimeoutMs: 60 }),
    outcome('c', { waitTimeoutMs: 2000 }),
  ];
  await new Promise((resolve) => setTimeout(resolve, 150));
  assert.deepEqual(order, ['short:WAIT_TIMEOUT', 'medium:WAIT_TIMEOUT']);
  await holder.release();
  await Promise.all(waits);
  assert.deepEqual(order.slice(2), ['a', 'b', 'c']);
  await provider.close();
});

test('waits read the clock of performance as it was when the first of the current waiters started', async () => {
  // A fake clock that replaces performance between waits (as fake timers
  // do) decides the next waits; one installed while some wait does not, so
  // the deadlines of one queue never mix two clocks.
  const { provider, backend } = await openLocal();
  const real = Object.getOwnPropertyDescriptor(globalThis, 'performance');
  const fake = (reads) => ({ now: () => (reads.push(1), real.get.call(globalThis).now()) });
  const replace = (value) => Object.defineProperty(globalThis, 'performance', { value, configurable: true, writable: true });
  try {
    const holder = await backend.acquire('k');
    const first = backend.acquire('k');
    const during = [];
    replace(fake(during));
    const second = backend.acquire('k');
    assert.equal(during.length, 0);
    await holder.release();
    await (await first).release();
    await (await second).release();
    const after = [];
    replace(fake(after));
    const again = await backend.acquire('k');
    const waiting = backend.acquire('k');
    assert.ok(after.length > 0);
    await again.release();
    await (await waiting).release();
  } finally {
    Object.defineProperty(globalThis, 'performance', real);
    await provider.close();
  }
});

test('the local driver is per provider: a worker thread opening the same options holds the same key at once', async () => {
  const { Worker } = await import('node:worker_threads');
  const config = { 'dokebi-lock': { backends: { b: {} } } };
  const { provider, backend } = await openLocal();
  const held = await backend.acquire('order:42');
  const source = `
import { parentPort } from 'node:worker_threads';
import { openLock } from ${JSON.stringify(new URL('../index.js', import.meta.url).href)};
const provider = await openLock({ config: ${JSON.stringify(config)} });
const lease = await provider.backend('b').acquire('order:42', { waitTimeoutMs: 0 });
parentPort.postMessage({ valid: lease.valid, released: await lease.release() });
await provider.close();
`;
  const worker = new Worker(source, { eval: true });
  const answer = await new Promise((resolve, reject) => {
    worker.once('message', resolve);
    worker.once('error', reject);
  });
  // Granted in the worker while the main thread holds the key: nothing is shared.
  assert.deepEqual(answer, { valid: true, released: true });
  assert.equal(held.valid, true);
  await rejectsWith(backend.acquire('order:42', { waitTimeoutMs: 0 }), 'LOCK_BUSY');
  await held.release();
  await provider.close();
});

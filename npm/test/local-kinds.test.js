// Lock kinds on the local driver through the JS API: shared mode, counted
// locks (limit, weight) and several keys at once (issue 21, SPEC section 8).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { isSettled, openLocal, rejectsWith } from './helpers.js';

test('shared leases of a key hold it together; an exclusive acquire waits for all of them', async () => {
  const { provider, backend } = await openLocal();
  const r1 = await backend.acquire('cache', { mode: 'shared' });
  const r2 = await backend.acquire('cache', { mode: 'shared' });
  assert.deepEqual(backend.status().heldShared, 2);
  const writer = backend.acquire('cache');
  await r1.release();
  assert.equal(await isSettled(writer), false, 'one reader still holds the key');
  await r2.release();
  const w = await writer;
  assert.ok(BigInt(w.fence) > BigInt(r2.fence), "a writer's fence is above every reader's before it");
  await rejectsWith(backend.acquire('cache', { mode: 'shared', waitTimeoutMs: 0 }), 'LOCK_BUSY');
  await w.release();
  await provider.close();
});

test('a reader behind a queued writer waits for it (FIFO across modes), and a writer release lets the readers at the head in together', async () => {
  const { provider, backend } = await openLocal();
  const first = await backend.acquire('k', { mode: 'shared' });
  const order = [];
  const writer = backend.acquire('k').then((lease) => (order.push('writer'), lease));
  const readers = [1, 2].map((n) => backend.acquire('k', { mode: 'shared' }).then((lease) => (order.push(`reader${n}`), lease)));
  await first.release();
  const w = await writer;
  assert.deepEqual(order, ['writer']);
  assert.equal(backend.status().waiting, 2);
  await w.release();
  const [a, b] = await Promise.all(readers);
  assert.deepEqual(order, ['writer', 'reader1', 'reader2']);
  assert.equal(backend.status().heldShared, 2);
  await Promise.all([a.release(), b.release()]);
  await provider.close();
});

test('a writer release lets in every reader queued behind it, more than one report of the engine holds, in order', async () => {
  // The engine reports up to 16 grants per call; the rest follow in the next.
  const { provider, backend } = await openLocal();
  const writer = await backend.acquire('k');
  const order = [];
  const readers = Array.from({ length: 40 }, (_, n) => backend.acquire('k', { mode: 'shared' }).then((lease) => (order.push(n), lease)));
  const last = backend.acquire('k');
  await writer.release();
  const leases = await Promise.all(readers);
  assert.deepEqual(order, Array.from({ length: 40 }, (_, n) => n));
  const fences = leases.map((lease) => BigInt(lease.fence));
  assert.ok(fences.every((fence, n) => n === 0 || fence > fences[n - 1]), 'fences grow in queue order');
  assert.deepEqual([backend.status().heldShared, backend.status().waiting], [40, 1]);
  await Promise.all(leases.map((lease) => lease.release()));
  await (await last).release();
  await provider.close();
});

test('a slow-acquire subscriber that hands on another key while readers are let in leaves every grant to its own waiter', async () => {
  // The subscriber runs while the first reader is settled; its release
  // reports its own grants through the same out-array.
  const { subscribe, unsubscribe } = await import('node:diagnostics_channel');
  const { provider, backend } = await openLocal({ slowAcquireMs: 1 });
  const writer = await backend.acquire('k');
  const other = await backend.acquire('other');
  const otherReaders = Array.from({ length: 3 }, () => backend.acquire('other', { mode: 'shared' }));
  const readers = Array.from({ length: 3 }, () => backend.acquire('k', { mode: 'shared' }));
  await new Promise((resolve) => setTimeout(resolve, 5));
  let handedOn = false;
  const onSlow = () => {
    if (handedOn) return;
    handedOn = true;
    other.release();
  };
  subscribe('dokebi-lock:slow-acquire', onSlow);
  try {
    await writer.release();
    const leases = await Promise.all(readers);
    const others = await Promise.all(otherReaders);
    assert.deepEqual(
      [...leases, ...others].map((lease) => [lease.key, lease.valid]),
      [['k', true], ['k', true], ['k', true], ['other', true], ['other', true], ['other', true]],
    );
    assert.deepEqual([backend.status().held, backend.status().heldShared, backend.status().waiting], [6, 6, 0]);
    await Promise.all([...leases, ...others].map((lease) => lease.release()));
  } finally {
    unsubscribe('dokebi-lock:slow-acquire', onSlow);
    await provider.close();
  }
});

test('a writer that times out lets the readers queued behind it in', async () => {
  const { provider, backend } = await openLocal();
  const reader = await backend.acquire('k', { mode: 'shared' });
  const writer = backend.acquire('k', { waitTimeoutMs: 20 });
  const late = backend.acquire('k', { mode: 'shared' });
  await rejectsWith(writer, 'WAIT_TIMEOUT');
  const second = await late;
  assert.equal(backend.status().heldShared, 2);
  await Promise.all([reader.release(), second.release()]);
  await provider.close();
});

test('waiters sharing one aborted signal are all ABORTED: the first one leaving lets none of the others in', async () => {
  // Abort listeners run one at a time: the writer's cancel lets the reader
  // behind it in before the reader's own listener runs.
  const { provider, backend } = await openLocal();
  const reader = await backend.acquire('k', { mode: 'shared' });
  const controller = new AbortController();
  const writer = backend.acquire('k', { signal: controller.signal });
  const behind = backend.acquire('k', { mode: 'shared', signal: controller.signal });
  controller.abort();
  const outcomes = await Promise.allSettled([writer, behind]);
  assert.deepEqual(
    outcomes.map((outcome) => outcome.reason?.code ?? `granted, signal.aborted ${controller.signal.aborted}`),
    ['ABORTED', 'ABORTED'],
  );
  assert.deepEqual([backend.status().held, backend.status().waiting], [1, 0], 'only the first reader holds the key');
  assert.equal(await reader.release(), true);
  assert.equal((await backend.acquire('k', { waitTimeoutMs: 0 })).valid, true, 'nothing is left holding the key');
  await provider.close();
});

test('waiters whose deadlines pass together all time out: the first one leaving lets none of the others in', async () => {
  const { provider, backend } = await openLocal();
  const reader = await backend.acquire('k', { mode: 'shared' });
  const writer = backend.acquire('k', { waitTimeoutMs: 20 });
  const behind = backend.acquire('k', { mode: 'shared', waitTimeoutMs: 20 });
  // Both deadlines pass before the timer runs: it finds them expired together.
  const until = performance.now() + 60;
  while (performance.now() < until);
  const outcomes = await Promise.allSettled([writer, behind]);
  assert.deepEqual(
    outcomes.map((outcome) => outcome.reason?.code ?? 'granted'),
    ['WAIT_TIMEOUT', 'WAIT_TIMEOUT'],
  );
  assert.deepEqual([backend.status().held, backend.status().waiting], [1, 0], 'only the first reader holds the key');
  assert.equal(await reader.release(), true);
  assert.equal((await backend.acquire('k', { waitTimeoutMs: 0 })).valid, true, 'nothing is left holding the key');
  await provider.close();
});

test('a slow-acquire subscriber that queues while a cancel lets readers in keeps its place in the waiter table', async () => {
  // The cancel settles the reader it let in, whose slow-acquire subscriber
  // queues two acquires: the second takes the cancelled writer's slot.
  const { subscribe, unsubscribe } = await import('node:diagnostics_channel');
  const { provider, backend } = await openLocal({ slowAcquireMs: 1 });
  const reader = await backend.acquire('k', { mode: 'shared' });
  const held = await backend.acquire('h');
  const controller = new AbortController();
  const writer = backend.acquire('k', { signal: controller.signal });
  const behind = backend.acquire('k', { mode: 'shared' });
  await new Promise((resolve) => setTimeout(resolve, 5));
  const queued = [];
  const onSlow = () => {
    if (queued.length === 0) queued.push(backend.acquire('h'), backend.acquire('h'));
  };
  subscribe('dokebi-lock:slow-acquire', onSlow);
  try {
    controller.abort();
    await rejectsWith(writer, 'ABORTED');
    const second = await behind;
    assert.equal(queued.length, 2);
    assert.equal(backend.status().waiting, 2);
    assert.equal(await held.release(), true);
    const first = await queued[0];
    assert.equal(await first.release(), true);
    const last = await queued[1];
    assert.equal(last.valid, true);
    await Promise.all([reader.release(), second.release(), last.release()]);
    assert.deepEqual([backend.status().held, backend.status().waiting], [0, 0]);
  } finally {
    unsubscribe('dokebi-lock:slow-acquire', onSlow);
    await provider.close();
  }
});

test('a counted key holds at most limit units, by weight, and a heavy request first in line is not overtaken', async () => {
  const { provider, backend } = await openLocal();
  const a = await backend.acquire('exports', { limit: 3 });
  const b = await backend.acquire('exports', { limit: 3, weight: 2 });
  await rejectsWith(backend.acquire('exports', { limit: 3, waitTimeoutMs: 0 }), 'LOCK_BUSY');
  await a.release();
  const heavy = backend.acquire('exports', { limit: 3, weight: 3 });
  const light = backend.acquire('exports', { limit: 3 });
  assert.equal(await isSettled(light), false, 'one unit is free, but the heavy request is first');
  await b.release();
  const h = await heavy;
  assert.equal(await isSettled(light), false);
  await h.release();
  await (await light).release();
  await provider.close();
});

test('every caller of a key gives the same limit: another one while it is in use is INVALID_ARGUMENT', async () => {
  const { provider, backend } = await openLocal();
  const lease = await backend.acquire('api', { limit: 3 });
  await rejectsWith(backend.acquire('api'), 'INVALID_ARGUMENT');
  await rejectsWith(backend.acquire('api', { limit: 4 }), 'INVALID_ARGUMENT');
  await rejectsWith(backend.acquire('api', { mode: 'shared' }), 'INVALID_ARGUMENT');
  await lease.release();
  await (await backend.acquire('api', { limit: 4 })).release();
  await provider.close();
});

test('bad kind options are INVALID_ARGUMENT and acquire nothing', async () => {
  const { provider, backend } = await openLocal();
  for (const options of [{ mode: 'weird' }, { limit: 0 }, { limit: 2, weight: 3 }, { mode: 'shared', limit: 2 }, { limit: 1.5 }, { weight: 2 }]) {
    await rejectsWith(backend.acquire('k', options), 'INVALID_ARGUMENT');
  }
  await rejectsWith(backend.acquire([]), 'INVALID_ARGUMENT');
  await rejectsWith(backend.acquire(['a', 'a']), 'INVALID_ARGUMENT');
  await rejectsWith(backend.acquire(['a', 7]), 'INVALID_KEY');
  await rejectsWith(backend.acquire(['a', '']), 'INVALID_KEY');
  assert.equal(backend.status().held + backend.status().waiting, 0);
  await provider.close();
});

test('several keys are one lease with keys and a fence per key, all or nothing', async () => {
  const { provider, backend } = await openLocal();
  const keys = ['from', 'to'];
  const lease = await backend.acquire(keys);
  keys.push('changed later');
  assert.deepEqual(lease.keys, ['from', 'to']);
  assert.equal(lease.key, 'from');
  assert.deepEqual([...lease.fences], [['from', lease.fence], ['to', lease.fence]]);
  await rejectsWith(backend.acquire('to', { waitTimeoutMs: 0 }), 'LOCK_BUSY');
  const single = await backend.acquire('other');
  assert.equal(single.keys, undefined, 'a lease of one key has no keys or fences');
  assert.equal(single.fences, undefined);
  assert.equal(await lease.release(), true);
  assert.equal(await lease.release(), false);
  await (await backend.acquire('to', { waitTimeoutMs: 0 })).release();
  await single.release();
  await provider.close();
});

test('a lease of up to 8 keys (passed to the engine as arguments) and of more (as an array) covers every key it names', async () => {
  const { provider, backend } = await openLocal();
  for (const count of [1, 2, 7, 8, 9, 20]) {
    const keys = Array.from({ length: count }, (_, i) => `k${count}:${i}`);
    const lease = await backend.acquire(keys);
    assert.deepEqual(lease.keys, keys);
    assert.ok(Object.isFrozen(lease.keys), 'lease.keys is frozen');
    assert.equal(lease.keys, lease.keys, 'the same array each time');
    for (const key of keys) await rejectsWith(backend.acquire(key, { waitTimeoutMs: 0 }), 'LOCK_BUSY');
    assert.equal(await lease.release(), true);
    for (const key of keys) await (await backend.acquire(key, { waitTimeoutMs: 0 })).release();
  }
  assert.equal(backend.status().held, 0);
  await provider.close();
});

test('an invalid key anywhere in a set of up to 8 keys or of more is INVALID_KEY, and nothing is held', async () => {
  const { provider, backend } = await openLocal();
  for (const count of [3, 8, 12]) {
    const keys = Array.from({ length: count }, (_, i) => `bad${count}:${i}`);
    keys[count - 1] = 'lone \ud800 surrogate';
    await rejectsWith(backend.acquire(keys), 'INVALID_KEY');
    keys[count - 1] = 'x'.repeat(2000);
    await rejectsWith(backend.acquire(keys), 'INVALID_KEY');
  }
  assert.equal(backend.status().held, 0);
  await provider.close();
});

test('a wait for several keys that times out or aborts leaves none of them held', async () => {
  const { provider, backend } = await openLocal();
  const held = await backend.acquire('b');
  await rejectsWith(backend.acquire(['a', 'b'], { waitTimeoutMs: 20 }), 'WAIT_TIMEOUT');
  const controller = new AbortController();
  const aborted = backend.acquire(['a', 'b'], { signal: controller.signal });
  controller.abort();
  await rejectsWith(aborted, 'ABORTED');
  await (await backend.acquire('a', { waitTimeoutMs: 0 })).release();
  assert.equal(backend.status().waiting, 0);
  await held.release();
  await provider.close();
});

test('callers taking overlapping key sets in opposite orders never deadlock or overlap', async () => {
  const { provider, backend } = await openLocal();
  const holders = new Map();
  let sections = 0;
  const worker = async (keys) => {
    for (let round = 0; round < 200; round++) {
      await backend.withLock(keys, async () => {
        for (const key of keys) {
          assert.equal(holders.get(key), undefined, 'no two holders of one key');
          holders.set(key, keys);
        }
        await new Promise(setImmediate);
        for (const key of keys) holders.delete(key);
        sections++;
      });
    }
  };
  await Promise.all([worker(['a', 'b', 'c']), worker(['c', 'b', 'a']), worker(['b', 'a']), worker(['c']), worker(['a', 'c'])]);
  assert.equal(sections, 1000);
  assert.equal(backend.status().held, 0);
  await provider.close();
});

test('withLock takes the kind options: shared sections of a key run together', async () => {
  const { provider, backend } = await openLocal();
  let inside = 0;
  let most = 0;
  const section = async () => {
    inside++;
    most = Math.max(most, inside);
    await new Promise(setImmediate);
    inside--;
  };
  await Promise.all([1, 2, 3].map(() => backend.withLock('k', section, { mode: 'shared' })));
  assert.equal(most, 3);
  most = 0;
  await Promise.all([1, 2, 3].map(() => backend.withLock('k', section, { limit: 2 })));
  assert.equal(most, 2);
  await provider.close();
});

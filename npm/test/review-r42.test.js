// Review R42 (53e27e7: an acquire pauses while this process's tries of its
// key are under way on a member that could not serve at its last try).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { rejectsWith } from './helpers.js';
import { overUnreachable } from './unreachable.js';

/** cache passed over once, then a probe of `k` (its connect taking `connectMs`) under way. */
async function probing(t, connectMs) {
  const lock = await overUnreachable(t, connectMs, 300);
  const locks = lock.backend('locks');
  const first = await locks.acquire('other', { waitTimeoutMs: 5000 });
  assert.equal(first.served.backend, 'host');
  await first.release();
  await sleep(400);
  const probe = locks.acquire('k', { waitTimeoutMs: 60_000 });
  probe.catch(() => {});
  await sleep(200);
  return { lock, locks, probe };
}

test('close ends an acquire paused for a probe CLOSED at once', async (t) => {
  const { lock, locks, probe } = await probing(t, 3000);
  const paused = locks.acquire('k', { waitTimeoutMs: 60_000 });
  paused.catch(() => {});
  await sleep(200);
  const closed = performance.now();
  const closing = lock.close();
  const error = await rejectsWith(paused, 'CLOSED').catch((e) => e);
  const took = performance.now() - closed;
  await closing;
  await probe.catch(() => {});
  assert.ok(took < 1000, `paused acquire ended ${took} ms after close: ${error?.code ?? error}`);
});

test('an acquire paused for a probe ends ABORTED by its signal; waiting counts it out', async (t) => {
  const { lock, locks, probe } = await probing(t, 1500);
  try {
    const abort = new AbortController();
    const paused = locks.acquire('k', { waitTimeoutMs: 5000, signal: abort.signal });
    await sleep(100);
    assert.equal(locks.status().waiting, 2);
    const at = performance.now();
    abort.abort();
    await rejectsWith(paused, 'ABORTED');
    assert.ok(performance.now() - at < 300);
    assert.equal(locks.status().waiting, 1);
    const zero = await rejectsWith(locks.acquire('k', { waitTimeoutMs: 0 }), 'NO_ELIGIBLE_BACKEND');
    assert.ok(zero.details.tried.some((t) => t.backend === 'cache' && t.code === 'LOCK_BUSY'));
    const lease = await probe;
    assert.equal(lease.served.backend, 'host');
    await lease.release();
    assert.equal(locks.status().waiting, 0);
    const again = await locks.acquire('k', { waitTimeoutMs: 1000 });
    assert.equal(again.served.backend, 'host');
    await again.release();
  } finally {
    await lock.close();
  }
});

test('an acquire of two keys, one being probed on the unreachable member, the other waited for on host, pauses instead of being refused', async (t) => {
  const { lock, locks, probe } = await probing(t, 1500);
  try {
    // probing() started a probe of `k`, whose lease (on host, once the probe failed) is released 50 ms after its grant;
    // `b` held on host outside the policy, a policy acquire of it waiting there (released 50 ms after its grant).
    const probed = probe.then(async (lease) => {
      await sleep(50);
      await lease.release();
      return lease.served.backend;
    });
    const direct = await lock.backend('host').acquire('b', { waitTimeoutMs: 1000 });
    const waiter = locks.acquire('b', { waitTimeoutMs: 5000 }).then(async (lease) => {
      await sleep(50);
      await lease.release();
      return lease.served.backend;
    });
    await sleep(100);
    setTimeout(() => direct.release(), 800);
    const started = performance.now();
    let outcome;
    try {
      const both = await locks.acquire(['k', 'b'], { waitTimeoutMs: 5000 });
      outcome = both.served.backend;
      await both.release();
    } catch (error) {
      outcome = `${error.code} after ${Math.round(performance.now() - started)} ms: ${error.message}`;
    }
    assert.equal(await waiter, 'host');
    assert.equal(await probed, 'host');
    assert.equal(outcome, 'host');
  } finally {
    await lock.close();
  }
});

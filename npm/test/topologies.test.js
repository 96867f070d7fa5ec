// A Node app on Redis Sentinel and on Redis Cluster: the same code as on one
// server, only the connection changes (SPEC section 5, Topologies).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { openLock } from '../index.js';
import { startCluster, startSentinel } from './redis-topologies.js';
import { command } from './resp.js';

/** A provider with one redis backend `r` on `connection`. */
function open(connection, namespace) {
  return openLock({
    config: {
      'dokebi-lock': {
        // The safety poll is 10 s: a hand-off well before that came by notification.
        backends: { r: { driver: 'redis', connection: 'main', namespace, leaseMs: 10_000, notifyPollIntervalMs: 10_000 } },
      },
      'dokebi-redis': { connections: { main: { ...connection, connectTimeoutMs: 500, commandTimeoutMs: 500 } } },
    },
  });
}

/** Holder releases; the waiter of the other provider gets the key. */
async function handOff(a, b, key) {
  const held = await a.backend('r').acquire(key, { waitTimeoutMs: 0 });
  const waiting = b.backend('r').acquire(key, { waitTimeoutMs: 5000 });
  // Let the waiter try once and start waiting for the notification.
  await new Promise((resolve) => setTimeout(resolve, 200));
  const released = performance.now();
  assert.equal(await held.release(), true);
  const next = await waiting;
  const tookMs = performance.now() - released;
  assert.ok(tookMs < 2000, `the waiter was served by the notification, not the 10 s poll (${tookMs} ms)`);
  assert.ok(BigInt(next.fence) > BigInt(held.fence));
  return next;
}

/** Tries `key` until it is granted; every failure on the way must be a Redis failure, not a wait. */
async function acquireOnceRedisIsBack(backend, key, boundMs) {
  const started = Date.now();
  for (;;) {
    try {
      return await backend.acquire(key, { waitTimeoutMs: 0 });
    } catch (error) {
      // LOCK_BUSY: within a second of a failover a key's fence waits for
      // the new primary's clock to pass its counter (docs/redis.md).
      assert.ok(['PROVIDER_FAILED', 'OUTCOME_UNKNOWN', 'LOCK_BUSY'].includes(error.code), `${error.code}: ${error.message}`);
      assert.ok(Date.now() - started < boundMs, `still failing after ${boundMs} ms: ${error.message}`);
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  }
}

test('an app on a Sentinel deployment locks, hands off between providers and follows a failover by itself', async () => {
  const sentinel = await startSentinel();
  const connection = { sentinel: { nodes: sentinel.nodes, primaryName: sentinel.primaryName } };
  const [a, b] = [await open(connection, 'sn'), await open(connection, 'sn')];
  try {
    const before = await handOff(a, b, 'order:1');
    assert.equal(await before.release(), true);
    await sentinel.killPrimary();
    // down-after-milliseconds (1 s) and the election are behind us; the
    // app was told nothing and reconnects to the new primary by itself.
    const after = await acquireOnceRedisIsBack(a.backend('r'), 'order:1', 10_000);
    assert.ok(BigInt(after.fence) > BigInt(before.fence), 'fences go on above every earlier one');
    assert.equal(await after.release(), true);
    const again = await handOff(b, a, 'order:1');
    assert.equal(await again.release(), true);
  } finally {
    await Promise.all([a.close(), b.close()]);
    await sentinel.stop();
  }
});

test('an app on a Redis Cluster locks keys of every slot and hands off between providers', async () => {
  const cluster = await startCluster();
  const connection = { cluster: { nodes: cluster.nodes.slice(0, 2) } };
  const [a, b] = [await open(connection, 'cl'), await open(connection, 'cl')];
  try {
    // 48 keys land on all three primaries.
    const leases = await Promise.all(Array.from({ length: 48 }, (_, i) => a.backend('r').acquire(`cart:${i}`, { waitTimeoutMs: 0 })));
    assert.equal(a.status().r.held, 48);
    // While they are held, each primary holds names of the namespace, on
    // about as many slots as keys: the names of one key share a slot, two
    // keys' digests share one of 16384 slots with a chance of 7% in all
    // (48 * 47 / 2 / 16384), three keys on a slot or a primary with none
    // of 48 keys (3 * (2/3)^48) far less.
    const slots = new Set();
    let primaries = 0;
    for (const port of cluster.nodes.map((url) => new URL(url).port)) {
      if (!(await command(port, 'ROLE')).includes('master')) continue;
      primaries++;
      const names = (await command(port, 'KEYS', 'cl:*')).split('\r\n').filter((line) => line.startsWith('cl:'));
      assert.ok(names.length > 0, `the primary on port ${port} holds no name of the 48 keys`);
      for (const name of names) slots.add(Number((await command(port, 'CLUSTER', 'KEYSLOT', name)).slice(1)));
    }
    assert.equal(primaries, 3);
    assert.ok(slots.size >= 46 && slots.size <= 48, `the 48 keys' names are on ${slots.size} slots`);
    assert.deepEqual(await Promise.all(leases.map((lease) => lease.release())), Array(48).fill(true));
    const next = await handOff(a, b, 'cart:7');
    assert.equal(await next.release(), true);
  } finally {
    await Promise.all([a.close(), b.close()]);
    await cluster.stop();
  }
});

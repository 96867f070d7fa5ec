// Telemetry on node:diagnostics_channel (dokebi-lock:*): slow acquires,
// slow holds, wait timeouts, lost leases, Redis connectivity, a server
// clock found behind, forced releases. Never keys.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { subscribe, unsubscribe } from 'node:diagnostics_channel';
import { setTimeout as sleep } from 'node:timers/promises';
import { openLock } from '../index.js';
import { openLocal, rejectsWith } from './helpers.js';
import { useRedis } from './redis-server.js';
import { command, lockKey } from './resp.js';

const NAMES = ['slow-acquire', 'slow-hold', 'wait-timeout', 'lease-lost', 'connection', 'clock-behind', 'forced-release'];
const KEY = 'customer:secret-key-7';

/** Records every event of every channel until stop(). */
function record() {
  const events = [];
  const listeners = NAMES.map((name) => [`dokebi-lock:${name}`, (payload) => events.push({ name, payload })]);
  for (const [channel, listener] of listeners) subscribe(channel, listener);
  return {
    events,
    named: (name) => events.filter((event) => event.name === name).map((event) => event.payload),
    /** Waits until an event `name` arrived (redis events come from the driver thread). */
    async next(name) {
      for (const end = Date.now() + 5000; Date.now() < end; await sleep(5)) {
        const found = events.find((event) => event.name === name);
        if (found !== undefined) return found.payload;
      }
      assert.fail(`no ${name} event`);
    },
    stop() {
      for (const [channel, listener] of listeners) unsubscribe(channel, listener);
      assert.ok(!JSON.stringify(events).includes('secret'), 'a payload carried a key');
    },
  };
}

test('local: a wait past slowAcquireMs is a slow-acquire, a hold past slowHoldMs a slow-hold', async () => {
  const recorder = record();
  const { provider, backend } = await openLocal({ slowAcquireMs: 20, slowHoldMs: 40 });
  const holder = await backend.acquire(KEY);
  const waiter = backend.acquire(KEY);
  await sleep(60);
  await holder.release();
  const next = await waiter;
  await next.release();
  assert.equal(recorder.named('slow-acquire').length, 1);
  const [slow] = recorder.named('slow-acquire');
  assert.equal(slow.backend, 'b');
  assert.equal(slow.thresholdMs, 20);
  assert.ok(slow.waitedMs >= 20, String(slow.waitedMs));
  assert.equal(slow.code, undefined, 'granted');
  const holds = recorder.named('slow-hold');
  assert.equal(holds.length, 1, 'the first lease only: the second was held briefly');
  assert.equal(holds[0].backend, 'b');
  assert.equal(holds[0].thresholdMs, 40);
  assert.ok(holds[0].heldMs >= 40, String(holds[0].heldMs));
  recorder.stop();
  await provider.close();
});

test('local: a wait timeout is a wait-timeout, and a slow-acquire with its code', async () => {
  const recorder = record();
  const { provider, backend } = await openLocal({ slowAcquireMs: 10 });
  const holder = await backend.acquire(KEY);
  await rejectsWith(backend.acquire(KEY, { waitTimeoutMs: 30 }), 'WAIT_TIMEOUT');
  await rejectsWith(backend.acquire(KEY, { waitTimeoutMs: 0 }), 'LOCK_BUSY');
  const [timeout] = recorder.named('wait-timeout');
  assert.deepEqual(Object.keys(timeout).sort(), ['backend', 'code', 'details', 'waitedMs']);
  assert.equal(timeout.code, 'WAIT_TIMEOUT');
  assert.ok(timeout.waitedMs >= 30, String(timeout.waitedMs));
  // Who held the key: this process, by its default label.
  assert.match(timeout.details.holders[0].label, new RegExp(`:${process.pid}$`));
  assert.deepEqual([timeout.details.held, timeout.details.holders[0].fence], [1, holder.fence]);
  assert.equal(recorder.named('wait-timeout').length, 1, 'LOCK_BUSY is no wait timeout');
  assert.equal(recorder.named('slow-acquire')[0].code, 'WAIT_TIMEOUT');
  assert.deepEqual(recorder.named('slow-acquire')[0].details, timeout.details);
  await holder.release();
  recorder.stop();
  await provider.close();
});

test('local: null thresholds report nothing, and short waits and holds stay quiet', async () => {
  const recorder = record();
  for (const settings of [{ slowAcquireMs: null, slowHoldMs: null }, {}]) {
    const { provider, backend } = await openLocal(settings);
    const holder = await backend.acquire(KEY);
    const waiter = backend.acquire(KEY);
    await sleep(settings.slowAcquireMs === null ? 30 : 0);
    await holder.release();
    await (await waiter).release();
    await provider.close();
  }
  assert.deepEqual(recorder.events, []);
  recorder.stop();
});

test('local: nothing is measured for a lease granted while nobody listened', async () => {
  const { provider, backend } = await openLocal({ slowHoldMs: 0 });
  const lease = await backend.acquire(KEY);
  const recorder = record();
  await lease.release();
  assert.deepEqual(recorder.events, []);
  const next = await backend.acquire(KEY);
  await next.release();
  assert.equal(recorder.named('slow-hold').length, 1);
  recorder.stop();
  await provider.close();
});

test('local: a withLock section past slowHoldMs is a slow-hold, whether fn returns a value or a promise', async () => {
  const recorder = record();
  const { provider, backend } = await openLocal({ slowHoldMs: 20 });
  await backend.withLock(KEY, () => {
    for (const end = performance.now() + 30; performance.now() < end; );
  });
  await backend.withLock(KEY, () => sleep(30));
  await backend.withLock(KEY, () => 'quick');
  const holds = recorder.named('slow-hold');
  assert.equal(holds.length, 2, 'the two slow sections, not the quick one');
  for (const hold of holds) assert.ok(hold.heldMs >= 20, String(hold.heldMs));
  recorder.stop();
  await provider.close();
});

test('local: forceRelease is a forced-release with the holders it removed, also of a free key, and no fence', async () => {
  const recorder = record();
  const { provider, backend } = await openLocal();
  const readers = [await backend.acquire(KEY, { mode: 'shared' }), await backend.acquire(KEY, { mode: 'shared' })];
  await backend.forceRelease(KEY);
  await backend.forceRelease(KEY);
  assert.deepEqual(recorder.named('forced-release'), [
    { backend: 'b', removed: 2 },
    { backend: 'b', removed: 0 },
  ]);
  for (const reader of readers) assert.equal(await reader.release(), false);
  recorder.stop();
  await provider.close();
});

const redis = useRedis();

let namespaces = 0;
function openRedis(settings, namespace) {
  return openLock({
    config: {
      'dokebi-lock': { backends: { r: { driver: 'redis', connection: 'main', namespace, leaseMs: 10_000, ...settings } } },
      // Below the lease, as the options require.
      'dokebi-redis': { connections: { main: { url: redis.url, commandTimeoutMs: Math.floor((settings.leaseMs ?? 10_000) * 0.9) } } },
    },
  });
}

test('redis: the core reports connection, wait-timeout, slow-acquire, slow-hold and lease-lost', async () => {
  const recorder = record();
  const namespace = `tm${++namespaces}`;
  const a = await openRedis({ slowAcquireMs: 10, slowHoldMs: 30, leaseMs: 300 }, namespace);
  const b = await openRedis({}, namespace);
  assert.deepEqual(await recorder.next('connection'), { connection: 'main', up: true });

  const holder = await b.backend('r').acquire(KEY);
  await rejectsWith(a.backend('r').acquire(KEY, { waitTimeoutMs: 50 }), 'WAIT_TIMEOUT');
  const timeout = await recorder.next('wait-timeout');
  assert.equal(timeout.backend, 'r');
  assert.equal(timeout.code, 'WAIT_TIMEOUT');
  assert.ok(timeout.waitedMs >= 50, String(timeout.waitedMs));
  assert.match(timeout.details.holders[0].label, new RegExp(`:${process.pid}$`), 'who held it');
  assert.equal(timeout.details.held, 1);
  const slow = await recorder.next('slow-acquire');
  assert.deepEqual([slow.backend, slow.code, slow.thresholdMs], ['r', 'WAIT_TIMEOUT', 10]);
  assert.deepEqual(slow.details, timeout.details);
  await holder.release();

  const held = await a.backend('r').acquire(KEY);
  await sleep(40);
  await held.release();
  const hold = await recorder.next('slow-hold');
  assert.deepEqual([hold.backend, hold.thresholdMs], ['r', 30]);
  assert.ok(hold.heldMs >= 30, String(hold.heldMs));

  await rejectsWith(
    a.backend('r').withLock(KEY, async (lease, signal) => {
      await command(redis.port, 'SET', lockKey(namespace, KEY), 'another-owner', 'PX', '10000');
      await Promise.race([new Promise((resolve) => signal.addEventListener('abort', resolve)), sleep(5000)]);
    }),
    'LEASE_LOST',
  );
  assert.deepEqual(await recorder.next('lease-lost'), { backend: 'r', code: 'LEASE_LOST' });
  recorder.stop();
  await Promise.all([a.close(), b.close()]);
});

test('redis: a fence below one granted before the request was sent is a clock-behind event, once', async () => {
  // A fence is max(counter + 1, the server's clock in us): a counter 60 s
  // ahead of the clock (as one kept from a primary whose clock ran ahead)
  // makes one key's fences 60 s ahead, and another key's grant, from the
  // clock, then falls 60 s below them. (tests/partitions/clock.rs promotes
  // a replica whose clock runs behind.)
  const recorder = record();
  const namespace = `tm${++namespaces}`;
  const ahead = lockKey(namespace, KEY).replace(':lock:{', ':lock-fence:{');
  // *2 $10 <seconds> $6 <microseconds>
  const [, , seconds, , micros] = (await command(redis.port, 'TIME')).split('\r\n');
  const aheadUs = (BigInt(seconds) + 60n) * 1_000_000n + BigInt(micros);
  await command(redis.port, 'SET', ahead, aheadUs.toString(), 'PX', '60000');
  const a = await openRedis({ fenceRetentionMs: 30_000 }, namespace);
  const lease = await a.backend('r').acquire(KEY);
  assert.equal(lease.fence, (aheadUs + 1n).toString(), 'the counter ahead of the clock');
  await lease.release();
  for (const other of ['other-secret-1', 'other-secret-2']) await (await a.backend('r').acquire(other)).release();
  const behind = await recorder.next('clock-behind');
  assert.deepEqual([behind.backend, behind.connection, behind.fenceRetentionMs], ['r', 'main', 30_000]);
  assert.ok(behind.behindMs > 59_000 && behind.behindMs < 60_001, String(behind.behindMs));
  assert.equal(recorder.named('clock-behind').length, 1, 'one report in 10 s');
  recorder.stop();
  await a.close();
});

test('redis: forceRelease is a forced-release with the holders it removed and the fence it raised', async () => {
  const recorder = record();
  const a = await openRedis({}, `tm${++namespaces}`);
  const lease = await a.backend('r').acquire(KEY);
  const { fence } = await a.backend('r').forceRelease(KEY);
  assert.ok(BigInt(fence) > BigInt(lease.fence));
  assert.deepEqual(await recorder.next('forced-release'), { backend: 'r', removed: 1, fence });
  await rejectsWith(lease.release(), 'LEASE_LOST');
  recorder.stop();
  await a.close();
});

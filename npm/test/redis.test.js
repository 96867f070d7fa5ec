// SPEC section 5 end to end through the JS API, against a private redis-server.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { openLock } from '../index.js';
import { rejectsWith } from './helpers.js';
import { startRedis, useRedis } from './redis-server.js';
import {
  aWaiterGetsTheKeyOnRelease,
  anAbortLeavesTheKeyToTheNext,
  closeReleasesHeldLeases,
  exitsByItself,
  unreachableIsProviderFailed,
  waitersAreServedInOrder,
} from './store-tests.js';

const redis = useRedis();

let namespaces = 0;
/** The options of one redis backend `r` in a namespace of its own test. */
function config(settings = {}, { url = redis.url, namespace, connection = {} } = {}) {
  return {
    'dokebi-lock': { backends: { r: { driver: 'redis', connection: 'main', leaseMs: 10_000, namespace: namespace ?? `t${namespaces}`, ...settings } } },
    // Commands time out below the lease, as the options require.
    'dokebi-redis': { connections: { main: { url, commandTimeoutMs: Math.min(2000, Math.floor((settings.leaseMs ?? 10_000) * 0.9)), ...connection } } },
  };
}
/** A provider with one redis backend `r` in a namespace of its own test. */
function open(settings = {}, where = {}) {
  return openLock({ config: config(settings, where) });
}
/** Two providers (two "processes") sharing one namespace. */
async function pair(settings = {}) {
  const namespace = `t${++namespaces}`;
  return [await open(settings, { namespace }), await open(settings, { namespace })];
}
/** The redis backend as the scenarios every store passes take it. */
const store = { backend: 'r', pair };

test('a redis lease has key, valid, remainingMs within leaseMs, and a decimal fence', async () => {
  const [provider] = await pair({ leaseMs: 5000 });
  const lease = await provider.backend('r').acquire('order:42');
  assert.equal(lease.key, 'order:42');
  assert.equal(lease.valid, true);
  assert.ok(lease.remainingMs > 4000 && lease.remainingMs <= 5000, String(lease.remainingMs));
  assert.match(lease.fence, /^[1-9][0-9]*$/);
  assert.equal(await lease.release(), true);
  assert.equal(await lease.release(), false);
  assert.equal(lease.valid, false);
  assert.equal(lease.remainingMs, 0);
  assert.equal(await lease.renew(), false, 'a released lease is no longer ours');
  await provider.close();
});

test('a fence first read after the release is the one granted', async () => {
  const [provider] = await pair();
  const backend = provider.backend('r');
  const first = await backend.acquire('k');
  await first.release();
  const [second, many] = [await backend.acquire('k'), await backend.acquire(['x', 'y'])];
  await Promise.all([second.release(), many.release()]);
  assert.match(first.fence, /^[1-9][0-9]*$/);
  assert.ok(BigInt(second.fence) > BigInt(first.fence), `${second.fence} after ${first.fence}`);
  assert.deepEqual([...many.fences.keys()], ['x', 'y']);
  for (const fence of many.fences.values()) assert.match(fence, /^[1-9][0-9]*$/);
  assert.equal(many.fence, many.fences.get('x'));
  await provider.close();
});

test('a redis lease dropped unreleased is given back once collected, long before it would expire', () => {
  // leaseMs 60 s, each later acquire waits at most 5 s: only the release
  // of the collected leases lets them through.
  const child = `
import { openLock } from ${JSON.stringify(new URL('../index.js', import.meta.url).href)};
const provider = await openLock({ config: {
  'dokebi-lock': { backends: { r: { driver: 'redis', connection: 'main', leaseMs: 60000, namespace: 'dropped-${process.pid}' } } },
  'dokebi-redis': { connections: { main: { url: ${JSON.stringify(redis.url)} } } },
} });
const backend = provider.backend('r');
await (async () => {
  await backend.acquire('plain');
  await backend.acquire('shared', { mode: 'shared' });
  await backend.acquire(['x', 'y']);
})();
for (let i = 0; i < 5; i++) {
  gc();
  await new Promise((resolve) => setTimeout(resolve, 20));
}
const outcomes = [];
for (const [key, options] of [['plain', {}], ['shared', {}], [['y', 'x'], {}]]) {
  outcomes.push(await backend.acquire(key, { ...options, waitTimeoutMs: 5000 }).then((lease) => lease.release(), (error) => error.code));
}
await provider.close();
console.log(outcomes.join(' '));
`;
  const result = spawnSync(process.execPath, ['--expose-gc', '--input-type=module', '-e', child], { encoding: 'utf8', timeout: 30_000 });
  assert.equal(result.status, 0, result.stderr);
  assert.equal(result.stdout.trim(), 'true true true');
});

test('a redis lease dropped unreleased stays held through minor collections: only a full one gives it back', () => {
  // V8 keeps a FinalizationRegistry's targets through scavenges (the limit
  // the README states); --trace-gc shows which collections ran.
  const child = `
import { openLock } from ${JSON.stringify(new URL('../index.js', import.meta.url).href)};
const provider = await openLock({ config: {
  'dokebi-lock': { backends: { r: { driver: 'redis', connection: 'main', leaseMs: 60000, namespace: 'scavenged-${process.pid}' } } },
  'dokebi-redis': { connections: { main: { url: ${JSON.stringify(redis.url)} } } },
} });
const backend = provider.backend('r');
await (async () => { await backend.acquire('forgotten'); })();
let junk;
for (let round = 0; round < 50; round++) {
  for (let i = 0; i < 100000; i++) junk = { i, list: [i] };
  await new Promise((resolve) => setImmediate(resolve));
}
console.log('MINOR-ONLY held ' + backend.status().held);
gc();
for (let i = 0; i < 5 && backend.status().held > 0; i++) await new Promise((resolve) => setTimeout(resolve, 20));
console.log('FULL held ' + backend.status().held);
await provider.close();
`;
  const result = spawnSync(process.execPath, ['--expose-gc', '--trace-gc', '--input-type=module', '-e', child], { encoding: 'utf8', timeout: 30_000 });
  assert.equal(result.status, 0, result.stderr);
  const [minorPhase, fullPhase] = result.stdout.split(/^MINOR-ONLY /m);
  assert.match(minorPhase, /Scavenge/, 'minor collections ran');
  assert.doesNotMatch(minorPhase, /Mark-Compact/, 'and only minor ones');
  assert.match(fullPhase, /^held 1$/m, 'a lease dropped unreleased is still held after minor collections');
  assert.match(fullPhase, /^FULL held 0$/m, 'a full collection gives it back');
});

test('exclusion across providers: LOCK_BUSY, WAIT_TIMEOUT, then a hand-off on release', () => aWaiterGetsTheKeyOnRelease(store));

test('waiters of one key in one provider are served in FIFO order', () => waitersAreServedInOrder(store));

test('an aborted signal is ABORTED before and while waiting', () => anAbortLeavesTheKeyToTheNext(store));

test('renew extends an expiring lease; an expired lease is invalid and its release is LEASE_LOST', async () => {
  const [a, b] = await pair({ leaseMs: 300 });
  const lease = await a.backend('r').acquire('k');
  await new Promise((resolve) => setTimeout(resolve, 150));
  assert.equal(await lease.renew(), true);
  assert.ok(lease.remainingMs > 200, String(lease.remainingMs));
  await new Promise((resolve) => setTimeout(resolve, 400));
  assert.equal(lease.valid, false);
  assert.equal(lease.remainingMs, 0);
  const taken = await b.backend('r').acquire('k', { waitTimeoutMs: 0 });
  assert.ok(BigInt(taken.fence) > BigInt(lease.fence));
  assert.equal(await lease.renew(), false);
  const error = await rejectsWith(lease.release(), 'LEASE_LOST');
  assert.match(error.fix, /fencing/);
  await Promise.all([a.close(), b.close()]);
});

test('maxLeases held by this process, then KEY_LIMIT (503 LOCK_OVERLOADED)', async () => {
  const [provider] = await pair({ maxLeases: 1 });
  await provider.backend('r').acquire('a');
  const limit = await rejectsWith(provider.backend('r').acquire('b'), 'KEY_LIMIT');
  assert.equal(limit.http.code, 'LOCK_OVERLOADED');
  await provider.close();
});

test('maxWaiters acquires in progress, then QUEUE_FULL (503 LOCK_OVERLOADED)', async () => {
  const [provider] = await pair({ maxWaiters: 1 });
  const backend = provider.backend('r');
  await backend.acquire('a');
  const waiting = rejectsWith(backend.acquire('a', { waitTimeoutMs: 5000 }), 'CLOSED');
  const full = await rejectsWith(backend.acquire('a'), 'QUEUE_FULL');
  assert.equal(full.http.code, 'LOCK_OVERLOADED');
  await provider.close();
  await waiting;
});

test('close releases held leases, rejects waiters with CLOSED, and later calls are CLOSED', () => closeReleasesHeldLeases(store, 'Redis'));

test('once close() begins, every redis backend of the provider is CLOSED, also those the core closes after another', async () => {
  const namespace = `t${++namespaces}`;
  const backend = { driver: 'redis', connection: 'main', leaseMs: 10_000, namespace };
  const provider = await openLock({
    config: {
      'dokebi-lock': { backends: { first: backend, second: backend } },
      'dokebi-redis': { connections: { main: { url: redis.url } } },
    },
  });
  const [first, second] = [provider.backend('first'), provider.backend('second')];
  // A held lease makes the first backend's close take a round trip (its
  // release) before the core starts closing the second.
  await first.acquire('held');
  const closing = provider.close();
  await rejectsWith(second.acquire('k'), 'CLOSED');
  await rejectsWith(first.acquire('k'), 'CLOSED');
  await rejectsWith(second.withLock('k', () => {}), 'CLOSED');
  await closing;
});

test('await using releases a redis lease at the end of the block', async () => {
  const [a, b] = await pair();
  {
    await using lease = await a.backend('r').acquire('k');
    assert.equal(lease.valid, true);
  }
  assert.equal((await b.backend('r').acquire('k', { waitTimeoutMs: 0 })).valid, true);
  await Promise.all([a.close(), b.close()]);
});

test('an unreachable Redis is PROVIDER_FAILED with the Redis error as cause (503 for web hosts)', async () => {
  const password = 'hunter2-secret';
  const provider = await open({}, { url: `redis://:${password}@127.0.0.1:1/0`, connection: { connectTimeoutMs: 200 } });
  await unreachableIsProviderFailed(provider, 'r', password);
  await provider.close();
});

test('bad keys and arguments are LockErrors on redis backends too', async () => {
  const [provider] = await pair({ maxKeyBytes: 4 });
  const backend = provider.backend('r');
  for (const key of ['', 'a\uD800', 'toolong', 7]) await rejectsWith(backend.acquire(key), 'INVALID_KEY');
  await rejectsWith(backend.acquire('k', { waitTimeoutMs: -1 }), 'INVALID_ARGUMENT');
  await rejectsWith(backend.acquire('k', { signal: 'no' }), 'INVALID_ARGUMENT');
  await provider.close();
});

test('a process that opens redis, locks, closes exits by itself', () => exitsByItself(config({}, { namespace: 'exit' }), 'r'));

test('a failed cleanup at close is logged with the fields backend and code only, never thrown', async () => {
  const doomed = await startRedis();
  const records = [];
  const record = (level) => (fields, message) => records.push({ level, fields, message });
  try {
    const provider = await openLock({
      logger: { debug: record('debug'), error: record('error') },
      config: {
        'dokebi-lock': { backends: { r: { driver: 'redis', connection: 'main', leaseMs: 10_000, shutdownTimeoutMs: 300 } } },
        'dokebi-redis': { connections: { main: { url: doomed.url, commandTimeoutMs: 100, connectTimeoutMs: 100 } } },
      },
    });
    await provider.backend('r').acquire('secret-key');
    await doomed.stop();
    await provider.close();
    await new Promise((resolve) => setTimeout(resolve, 100)); // log delivery from the driver thread
  } finally {
    await doomed.stop();
  }
  assert.deepEqual(records[0], { level: 'debug', fields: { backend: 'r', code: 'LOCK_BACKEND_READY' }, message: 'lock backend ready' });
  const errors = records.filter((r) => r.level === 'error');
  assert.ok(errors.length > 0, JSON.stringify(records));
  for (const { fields, message } of errors) {
    assert.deepEqual(Object.keys(fields).sort(), ['backend', 'code']);
    assert.equal(fields.backend, 'r');
    assert.match(fields.code, /^CLEANUP_(FAILED|TIMEOUT)$/);
    assert.ok(!message.includes('secret-key'));
  }
});

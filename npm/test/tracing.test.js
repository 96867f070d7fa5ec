// The tracing channels dokebi-lock:acquire, dokebi-lock:with-lock and
// dokebi-lock:hold (lib/tracing.js) on every kind of backend: local, redis,
// an app driver and a wrapBackend result. Never a key in a payload.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { AsyncLocalStorage } from 'node:async_hooks';
import { tracingChannel } from 'node:diagnostics_channel';
import { spawnSync } from 'node:child_process';
import { setTimeout as sleep } from 'node:timers/promises';
import { LockExtension, openLock } from '../index.js';
import { openLocal, rejectsWith } from './helpers.js';
import { useRedis } from './redis-server.js';
import { command, lockKey } from './resp.js';
import { jsDriver, KEY, recordTracing } from './tracing-support.js';

const PROMISE = ['start', 'end', 'asyncStart', 'asyncEnd'];
const REJECTED = ['start', 'end', 'error', 'asyncStart', 'asyncEnd'];

test('local acquire: start, end, asyncStart, asyncEnd; the hold from grant to release, on the same context object', async () => {
  const { provider, backend } = await openLocal();
  const recorder = recordTracing();
  const lease = await backend.acquire(KEY);
  assert.deepEqual(recorder.sequence('acquire'), PROMISE);
  assert.deepEqual(recorder.sequence('hold'), ['start', 'end'], 'the hold starts at the grant');
  const [context] = recorder.contexts('acquire');
  assert.equal(recorder.contexts('hold')[0], context, 'one context object for the acquire and its hold');
  assert.deepEqual(Object.keys(recorder.events.at(-1).fields).sort(), ['backend', 'driver', 'fence', 'waitMs']);
  assert.equal(context.backend, 'b');
  assert.equal(context.driver, 'local');
  assert.equal(context.fence, lease.fence);
  assert.ok(context.waitMs >= 0);
  await sleep(20);
  assert.equal(await lease.release(), true);
  assert.deepEqual(recorder.sequence('hold'), PROMISE);
  assert.equal(context.released, true);
  assert.ok(context.heldMs >= 15, String(context.heldMs));
  assert.equal(await lease.release(), false, 'a second release');
  assert.deepEqual(recorder.sequence('hold'), PROMISE, 'ends the hold once');
  recorder.stop();
  await provider.close();
});

test('local: a contended acquire waits as long as the holder holds; WAIT_TIMEOUT and LOCK_BUSY are errors with their code', async () => {
  const { provider, backend } = await openLocal();
  const recorder = recordTracing();
  const holder = await backend.acquire(KEY);
  const waiting = backend.acquire(KEY);
  await sleep(40);
  await holder.release();
  const next = await waiting;
  const [, waited] = recorder.contexts('acquire');
  assert.ok(waited.waitMs >= 35, String(waited.waitMs));
  assert.equal(waited.fence, next.fence);
  await rejectsWith(backend.acquire(KEY, { waitTimeoutMs: 20 }), 'WAIT_TIMEOUT');
  await rejectsWith(backend.acquire(KEY, { waitTimeoutMs: 0 }), 'LOCK_BUSY');
  const [, , timedOut, busy] = recorder.contexts('acquire');
  assert.equal(timedOut.code, 'WAIT_TIMEOUT');
  assert.equal(timedOut.error.code, 'WAIT_TIMEOUT');
  assert.ok(timedOut.waitMs >= 15, String(timedOut.waitMs));
  assert.equal(busy.code, 'LOCK_BUSY');
  assert.equal(timedOut.fence, undefined);
  const acquires = recorder.events.filter((entry) => entry.channel === 'acquire');
  assert.deepEqual(
    acquires.filter((entry) => entry.context === timedOut).map((entry) => entry.event),
    REJECTED,
  );
  assert.equal(recorder.contexts('hold').length, 2, 'no hold for a failed acquire');
  await next.release();
  recorder.stop();
  await provider.close();
});

test('local withLock, uncontended and contended: a with-lock around an acquire and a hold, with the kind fields', async () => {
  const { provider, backend } = await openLocal();
  const recorder = recordTracing();
  const seen = [];
  assert.equal(await backend.withLock(KEY, () => 'plain'), 'plain');
  const holder = await backend.acquire(KEY);
  const contended = backend.withLock(KEY, async (lease) => seen.push(lease.fence), { mode: 'shared' });
  await sleep(10);
  await holder.release();
  await contended;
  await backend.withLock([KEY, `${KEY}:2`], () => {}, { weight: 1 });
  await rejectsWith(backend.withLock(KEY, 'not a function'), 'INVALID_ARGUMENT');
  const [plain, shared, keys, invalid] = recorder.contexts('with-lock');
  assert.deepEqual(recorder.sequence('with-lock').slice(0, 4), PROMISE);
  assert.deepEqual(Object.keys(plain).sort(), ['backend', 'driver', 'fence', 'waitMs']);
  assert.equal(plain.driver, 'local');
  assert.equal(shared.mode, 'shared');
  assert.equal(shared.fence, seen[0]);
  assert.ok(shared.waitMs >= 5, String(shared.waitMs));
  assert.equal(keys.keyCount, 2);
  assert.equal(keys.weight, 1);
  assert.equal(keys.fences.length, 2);
  assert.equal(keys.fence, undefined);
  assert.equal(invalid.code, 'INVALID_ARGUMENT');
  // Three sections' acquires (the invalid one acquires nothing) and the holder's.
  assert.equal(recorder.contexts('acquire').length, 4);
  const holds = recorder.events.filter((entry) => entry.channel === 'hold');
  assert.equal(holds.filter((entry) => entry.event === 'start').length, 4);
  assert.equal(holds.filter((entry) => entry.event === 'asyncEnd').length, 4, 'every hold ended');
  recorder.stop();
  await provider.close();
});

test('a section throwing is the with-lock error (no code unless a LockError); the hold still ends', async () => {
  const { provider, backend } = await openLocal();
  const recorder = recordTracing();
  const failure = new Error('section failed');
  await assert.rejects(backend.withLock(KEY, () => Promise.reject(failure)), failure);
  const [context] = recorder.contexts('with-lock');
  assert.equal(context.error, failure);
  assert.equal(context.code, undefined);
  assert.deepEqual(recorder.sequence('with-lock'), REJECTED);
  assert.deepEqual(recorder.sequence('hold'), PROMISE);
  recorder.stop();
  await provider.close();
});

test('a lease granted while nobody listened reports no hold end, and nobody listening publishes nothing', async () => {
  const { provider, backend } = await openLocal();
  const early = await backend.acquire(KEY);
  const recorder = recordTracing();
  await early.release();
  assert.deepEqual(recorder.events, []);
  recorder.stop();
  const late = await backend.acquire(KEY);
  const again = recordTracing();
  await late.release();
  await backend.withLock(KEY, () => {});
  assert.deepEqual(again.sequence('hold'), PROMISE, 'only the section after subscribing');
  again.stop();
  await provider.close();
});

test('a call is traced while its channel\'s start has subscribers (the one check per call); a hold ends after its subscriber left', async () => {
  const { provider, backend } = await openLocal();
  const ends = [];
  const endsOnly = { asyncEnd: (context) => ends.push(context) };
  const acquire = tracingChannel('dokebi-lock:acquire');
  acquire.subscribe(endsOnly);
  await (await backend.acquire(KEY)).release();
  assert.deepEqual(ends, [], 'no start handler: not traced');
  const recorder = recordTracing(['hold']);
  const lease = await backend.acquire(KEY);
  assert.equal(ends.length, 1, 'traced for the hold subscriber, published to every acquire subscriber');
  recorder.stop();
  await lease.release();
  assert.equal(ends[0].released, true, 'the hold ended though nobody listened any more');
  acquire.unsubscribe(endsOnly);
  await provider.close();
});

test('AsyncLocalStorage: values set before withLock are seen in fn (local fast path, contended, with and without a subscriber)', async () => {
  const als = new AsyncLocalStorage();
  const { provider, backend } = await openLocal();
  const sections = async () => {
    const fast = await als.run({ request: 1 }, () => backend.withLock(KEY, () => als.getStore()));
    const holder = await backend.acquire(KEY);
    const pending = als.run({ request: 2 }, () => backend.withLock(KEY, async () => als.getStore()));
    await sleep(5);
    await holder.release();
    const acquired = await als.run({ request: 3 }, async () => {
      const lease = await backend.acquire(KEY);
      await lease.release();
      return als.getStore();
    });
    return [fast, await pending, acquired].map((store) => store?.request);
  };
  assert.deepEqual(await sections(), [1, 2, 3]);
  const recorder = recordTracing();
  assert.deepEqual(await sections(), [1, 2, 3]);
  recorder.stop();
  await provider.close();
});

test('a store bound to the with-lock start holds its context inside fn (runStores, as tracePromise)', async () => {
  const { provider, backend } = await openLocal();
  const bound = new AsyncLocalStorage();
  const channel = tracingChannel('dokebi-lock:with-lock');
  channel.start.bindStore(bound, (context) => context);
  try {
    let inside;
    await backend.withLock(KEY, () => (inside = bound.getStore()));
    assert.equal(inside?.backend, 'b');
    assert.equal(bound.getStore(), undefined, 'only inside');
  } finally {
    channel.start.unbindStore(bound);
  }
  await provider.close();
});

test('app driver: acquires traced with its driver name; holds of its leases reported inside withLock', async () => {
  const provider = await openLock({ config: { 'dokebi-lock': { backends: { j: { driver: 'tiny' } } } }, drivers: { tiny: jsDriver() } });
  const backend = provider.backend('j');
  const recorder = recordTracing();
  const lease = await backend.acquire(KEY);
  await rejectsWith(backend.acquire(KEY), 'WAIT_TIMEOUT');
  const [granted, refused] = recorder.contexts('acquire');
  assert.deepEqual([granted.backend, granted.driver, granted.fence], ['j', 'tiny', '1']);
  assert.equal(refused.code, 'WAIT_TIMEOUT');
  assert.deepEqual(recorder.sequence('hold'), [], 'the library does not see a plain acquire release an app lease');
  await lease.release();
  await backend.withLock(KEY, () => sleep(10));
  const [section] = recorder.contexts('with-lock');
  assert.deepEqual([section.backend, section.driver, section.fence], ['j', 'tiny', '2']);
  assert.deepEqual(recorder.sequence('hold'), PROMISE);
  const [hold] = recorder.contexts('hold');
  assert.equal(hold, recorder.contexts('acquire')[2], 'the section acquire\u2019s context');
  assert.equal(hold.released, true);
  assert.ok(hold.heldMs >= 5, String(hold.heldMs));
  recorder.stop();
  await provider.close();
});

test('wrapBackend result: each acquire and withLock traced once (the acquire by the backend it wraps)', async () => {
  let wrapperCalls = 0;
  class Wrapping extends LockExtension {
    wrapBackend({ backend }) {
      return {
        acquire(key, options) {
          wrapperCalls++;
          return backend.acquire(key, options);
        },
      };
    }
  }
  const provider = await openLock({ config: { 'dokebi-lock': { backends: { w: {} } } }, entry: { default: Wrapping } });
  const backend = provider.backend('w');
  const recorder = recordTracing();
  const lease = await backend.acquire(KEY);
  await lease.release();
  await backend.withLock(KEY, () => {});
  assert.equal(wrapperCalls, 2);
  assert.equal(recorder.contexts('acquire').length, 2, 'once per acquire, not per layer');
  assert.equal(recorder.contexts('with-lock').length, 1);
  assert.equal(recorder.contexts('hold').length, 2);
  for (const context of recorder.contexts('acquire')) assert.deepEqual([context.backend, context.driver], ['w', 'local']);
  assert.deepEqual([recorder.contexts('with-lock')[0].backend, recorder.contexts('with-lock')[0].driver], ['w', 'local']);
  assert.equal(recorder.events.filter((entry) => entry.event === 'asyncEnd').length, 5, 'two acquires, one section, two holds');
  recorder.stop();
  await provider.close();
});

const redis = useRedis();

let namespaces = 0;
function openRedis(namespace) {
  return openLock({
    config: {
      'dokebi-lock': { backends: { r: { driver: 'redis', connection: 'main', namespace, leaseMs: 10_000 } } },
      'dokebi-redis': { connections: { main: { url: redis.url, commandTimeoutMs: 9_000 } } },
    },
  });
}

test('redis: acquire, withLock and hold, a contended wait, WAIT_TIMEOUT, and a lost lease ending its hold with LEASE_LOST', async () => {
  const namespace = `tr${++namespaces}`;
  const provider = await openRedis(namespace);
  const backend = provider.backend('r');
  const recorder = recordTracing();
  const holder = await backend.acquire(KEY);
  const waiting = backend.acquire(KEY);
  await sleep(50);
  await holder.release();
  const next = await waiting;
  const [first, waited] = recorder.contexts('acquire');
  assert.deepEqual([first.backend, first.driver, first.fence], ['r', 'redis', holder.fence]);
  assert.ok(waited.waitMs >= 45, String(waited.waitMs));
  assert.equal(first.released, true);
  await rejectsWith(backend.acquire(KEY, { waitTimeoutMs: 30 }), 'WAIT_TIMEOUT');
  assert.equal(recorder.contexts('acquire')[2].code, 'WAIT_TIMEOUT');
  await next.release();

  const als = new AsyncLocalStorage();
  assert.equal(await als.run('request-9', () => backend.withLock(KEY, () => als.getStore())), 'request-9');
  await rejectsWith(
    backend.withLock(KEY, async (lease, signal) => {
      await command(redis.port, 'SET', lockKey(namespace, KEY), 'another-owner', 'PX', '10000');
      await Promise.race([new Promise((resolve) => signal.addEventListener('abort', resolve)), sleep(5000)]);
    }),
    'LEASE_LOST',
  );
  const lostContext = recorder.contexts('hold').at(-1);
  assert.equal(lostContext.error.code, 'LEASE_LOST');
  assert.equal(lostContext.released, false);
  const [, lostSection] = recorder.contexts('with-lock');
  assert.equal(lostSection.code, 'LEASE_LOST');
  const holdEnds = recorder.events.filter((entry) => entry.channel === 'hold' && entry.event === 'asyncEnd');
  assert.equal(holdEnds.length, recorder.contexts('hold').length, 'every hold ended once');
  recorder.stop();
  await provider.close();
});

test('redis: a second release while the first is under way answers false after it, and the hold ends once with the first one\'s result', async () => {
  const provider = await openRedis(`tr${++namespaces}`);
  const recorder = recordTracing(['hold']);
  const lease = await provider.backend('r').acquire(KEY);
  const settled = [];
  const first = lease.release().then((released) => (settled.push('first'), released));
  const second = lease.release().then((released) => (settled.push('second'), released));
  assert.deepEqual(await Promise.all([first, second]), [true, false]);
  assert.deepEqual(settled, ['first', 'second'], 'the second waits for the first');
  assert.deepEqual(recorder.sequence('hold'), PROMISE, 'the hold ended once');
  assert.equal(recorder.contexts('hold')[0].released, true, 'with the first release\'s result');
  recorder.stop();
  await provider.close();
});

test('a lease collected unreleased ends its hold (released false) once a full collection found it', () => {
  const child = `
import { tracingChannel } from 'node:diagnostics_channel';
import { openLock } from ${JSON.stringify(new URL('../index.js', import.meta.url).href)};
const ends = [];
tracingChannel('dokebi-lock:hold').subscribe({ start() {}, end() {}, asyncStart() {}, error() {}, asyncEnd: (context) => ends.push(context.released) });
const provider = await openLock({ config: { 'dokebi-lock': { backends: { b: {} } } } });
await (async () => { await provider.backend('b').acquire('forgotten'); })();
for (let round = 0; round < 5 && ends.length === 0; round++) {
  gc();
  await new Promise((resolve) => setTimeout(resolve, 20));
}
console.log(JSON.stringify(ends));
`;
  const result = spawnSync(process.execPath, ['--expose-gc', '--input-type=module', '-e', child], { encoding: 'utf8', timeout: 30_000 });
  assert.equal(result.status, 0, result.stderr);
  assert.deepEqual(JSON.parse(result.stdout), [false]);
});

test('redis: AsyncLocalStorage values reach fn without a subscriber too', async () => {
  const provider = await openRedis(`tr${++namespaces}`);
  const als = new AsyncLocalStorage();
  assert.equal(await als.run('plain', () => provider.backend('r').withLock(KEY, () => als.getStore())), 'plain');
  await provider.close();
});

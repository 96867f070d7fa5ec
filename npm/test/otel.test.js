// @dokebi/lock/otel with the real OpenTelemetry SDK (devDependencies): spans
// of contended local and redis keys with their parents, durations and
// status, and metrics that add up.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { context, SpanStatusCode } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-base';
import { MeterProvider, MetricReader } from '@opentelemetry/sdk-metrics';
import { openLock } from '../index.js';
import { instrumentLocks } from '../otel.js';
import { openLocal, rejectsWith } from './helpers.js';
import { useRedis } from './redis-server.js';
import { unreachablePort } from './unreachable.js';
import { command, lockKey } from './resp.js';
import { KEY } from './tracing-support.js';

/** A reader that collects when asked. */
class CollectingReader extends MetricReader {
  async onForceFlush() {}
  async onShutdown() {}
}

let contextManager;
before(() => {
  // Parents need a context manager that follows async calls, as an app's SDK setup installs.
  contextManager = new AsyncLocalStorageContextManager().enable();
  context.setGlobalContextManager(contextManager);
});
after(() => context.disable());

/** A tracer and meter of their own, instrumented; `finish()` stops and shuts them down. */
function instrumented(backends) {
  const exporter = new InMemorySpanExporter();
  const tracerProvider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
  const reader = new CollectingReader();
  const meterProvider = new MeterProvider({ readers: [reader] });
  const stop = instrumentLocks({ tracerProvider, meterProvider, backends });
  const tracer = tracerProvider.getTracer('test');
  return {
    tracer,
    spans: () => exporter.getFinishedSpans(),
    /** Runs `fn` in a span `name` that is active meanwhile; resolves to [fn's result, span]. */
    request: (name, fn) =>
      tracer.startActiveSpan(name, async (span) => {
        try {
          return [await fn(), span];
        } finally {
          span.end();
        }
      }),
    /** The metric `name`'s data points. */
    async points(name) {
      const { resourceMetrics } = await reader.collect();
      const metric = resourceMetrics.scopeMetrics.flatMap((scope) => scope.metrics).find((found) => found.descriptor.name === name);
      return metric?.dataPoints ?? [];
    },
    async finish() {
      stop();
      await Promise.all([tracerProvider.shutdown(), meterProvider.shutdown()]);
    },
  };
}

const parentOf = (span) => span.parentSpanContext?.spanId ?? span.parentSpanId;
const ms = ([seconds, nanos]) => seconds * 1000 + nanos / 1e6;
const endMs = (span) => ms(span.endTime);
const named = (spans, name) => spans.filter((span) => span.name === name);
const total = (points) => points.reduce((sum, point) => sum + (typeof point.value === 'number' ? point.value : point.value.count), 0);

/**
 * Two requests on one key: A holds it for `holdMs`, B waits for it; then C
 * gives up after 10 ms while B holds. Returns the spans of each request.
 */
async function contend(otel, backend, holdMs) {
  let bReady;
  const aHolds = new Promise((resolve) => (bReady = resolve));
  const a = otel.request('request A', () =>
    backend.withLock(KEY, async () => {
      bReady();
      await sleep(holdMs);
    }),
  );
  await aHolds;
  const b = otel.request('request B', async () => {
    const lease = await backend.acquire(KEY);
    const c = otel.request('request C', () => rejectsWith(backend.acquire(KEY, { waitTimeoutMs: 10 }), 'WAIT_TIMEOUT'));
    await c;
    await lease.release();
    return c;
  });
  const [, aSpan] = await a;
  const [[, cSpan], bSpan] = await b;
  return { aSpan, bSpan, cSpan };
}

/** The spans of each request by parent, and the checks every backend passes. */
function checkContended(otel, { aSpan, bSpan, cSpan }, backendName, driver, holdMs) {
  const spans = otel.spans();
  const acquires = named(spans, 'dokebi-lock acquire');
  const holds = named(spans, 'dokebi-lock hold');
  const childrenOf = (request, list) => list.filter((span) => parentOf(span) === request.spanContext().spanId);
  const [aAcquire] = childrenOf(aSpan, acquires);
  const [aHold] = childrenOf(aSpan, holds);
  const [bAcquire] = childrenOf(bSpan, acquires);
  const [bHold] = childrenOf(bSpan, holds);
  const [cAcquire] = childrenOf(cSpan, acquires);
  assert.ok(aAcquire && aHold && bAcquire && bHold && cAcquire, 'each request has its own acquire (and hold) spans');
  assert.equal(childrenOf(cSpan, holds).length, 0, 'no hold for a timed-out acquire');
  assert.equal(acquires.length, 3);
  assert.equal(holds.length, 2);
  for (const span of [aAcquire, bAcquire, cAcquire, aHold, bHold]) {
    assert.equal(span.attributes['dokebi_lock.backend'], backendName);
    assert.equal(span.attributes['dokebi_lock.driver'], driver);
    assert.ok(!JSON.stringify(span.attributes).includes('secret'), 'no key in the attributes');
  }
  // B's wait covers the rest of A's hold: it ends no earlier than A's hold does.
  assert.ok(ms(bAcquire.duration) >= holdMs - 10, `B waited ${ms(bAcquire.duration)} ms`);
  assert.ok(endMs(bAcquire) >= endMs(aHold) - 1, 'B is granted once A let go');
  assert.ok(ms(aHold.duration) >= holdMs - 1, `A held ${ms(aHold.duration)} ms`);
  assert.equal(aAcquire.status.code, SpanStatusCode.UNSET);
  assert.equal(bAcquire.attributes['dokebi_lock.fence'], bHold.attributes['dokebi_lock.fence']);
  assert.equal(typeof bAcquire.attributes['dokebi_lock.fence'], 'string');
  assert.ok(bAcquire.attributes['dokebi_lock.wait_ms'] >= holdMs - 10);
  assert.equal(bHold.attributes['dokebi_lock.released'], true);
  assert.equal(cAcquire.status.code, SpanStatusCode.ERROR);
  assert.equal(cAcquire.attributes['error.type'], 'WAIT_TIMEOUT');
  assert.ok(ms(cAcquire.duration) >= 9, `C waited ${ms(cAcquire.duration)} ms`);
  return { acquires, holds };
}

test('local: a contended key gives acquire and hold spans under each request, B waiting as long as A held, C a WAIT_TIMEOUT error', async () => {
  const { provider, backend } = await openLocal();
  const otel = instrumented(provider);
  checkContended(otel, await contend(otel, backend, 60), 'b', 'local', 60);

  const waits = await otel.points('dokebi_lock.acquire.duration');
  assert.equal(total(waits), 3, 'one wait per acquire');
  const timedOut = waits.find((point) => point.attributes['error.type'] === 'WAIT_TIMEOUT');
  assert.equal(timedOut?.value.count, 1);
  assert.ok(timedOut.value.sum >= 0.009, String(timedOut.value.sum));
  assert.equal(total(await otel.points('dokebi_lock.hold.duration')), 2);
  assert.equal(total(await otel.points('dokebi_lock.acquire.timeouts')), 1);
  assert.equal(total(await otel.points('dokebi_lock.lease.losses')), 0);
  await otel.finish();
  await provider.close();
});

test('gauges: waiting and held from the status() of the backends given', async () => {
  const { provider, backend } = await openLocal();
  const otel = instrumented({ b: backend });
  const lease = await backend.acquire(KEY);
  const waiter = backend.acquire(KEY);
  const value = async (name) => (await otel.points(name)).find((point) => point.attributes['dokebi_lock.backend'] === 'b')?.value;
  assert.equal(await value('dokebi_lock.waiting'), 1);
  assert.equal(await value('dokebi_lock.held'), 1);
  await lease.release();
  await (await waiter).release();
  assert.equal(await value('dokebi_lock.waiting'), 0);
  assert.equal(await value('dokebi_lock.held'), 0);
  await otel.finish();
  await provider.close();
});

test('stop() ends the spans: nothing after it', async () => {
  const { provider, backend } = await openLocal();
  const otel = instrumented();
  await backend.withLock(KEY, () => {});
  assert.equal(otel.spans().length, 2);
  await otel.finish();
  await backend.withLock(KEY, () => {});
  assert.equal(otel.spans().length, 0, 'the exporter was shut down and nothing new came');
  await provider.close();
});

const redis = useRedis();

test('redis: a contended key gives the same spans; a lost lease is a hold error LEASE_LOST, counted', async () => {
  const namespace = 'otel1';
  const provider = await openLock({
    config: {
      'dokebi-lock': { backends: { r: { driver: 'redis', connection: 'main', namespace, leaseMs: 10_000 } } },
      'dokebi-redis': { connections: { main: { url: redis.url, commandTimeoutMs: 9_000 } } },
    },
  });
  const backend = provider.backend('r');
  const otel = instrumented(provider);
  checkContended(otel, await contend(otel, backend, 80), 'r', 'redis', 80);

  const [, lostRequest] = await otel.request('request D', () =>
    rejectsWith(
      backend.withLock(KEY, async (lease, signal) => {
        await command(redis.port, 'SET', lockKey(namespace, KEY), 'another-owner', 'PX', '10000');
        await Promise.race([new Promise((resolve) => signal.addEventListener('abort', resolve)), sleep(5000)]);
      }),
      'LEASE_LOST',
    ),
  );
  const lostHold = named(otel.spans(), 'dokebi-lock hold').find((span) => parentOf(span) === lostRequest.spanContext().spanId);
  assert.equal(lostHold?.status.code, SpanStatusCode.ERROR);
  assert.equal(lostHold.attributes['error.type'], 'LEASE_LOST');
  assert.equal(lostHold.attributes['dokebi_lock.released'], false);
  assert.equal(total(await otel.points('dokebi_lock.lease.losses')), 1);
  assert.equal(total(await otel.points('dokebi_lock.acquire.duration')), 4);
  assert.equal(total(await otel.points('dokebi_lock.hold.duration')), 3);
  assert.equal(total(await otel.points('dokebi_lock.acquire.timeouts')), 1);
  const waiting = await otel.points('dokebi_lock.waiting');
  assert.equal(waiting.find((point) => point.attributes['dokebi_lock.backend'] === 'r')?.value, 0, 'a provider feeds the gauges');
  await command(redis.port, 'DEL', lockKey(namespace, KEY));
  await otel.finish();
  await provider.close();
});

test('store and policy metrics: a store up or not and how long since it answered, a policy falling back, refusing and passing a member over, a server clock behind', async (t) => {
  const namespace = 'otel2';
  const dead = await unreachablePort(t);
  const provider = await openLock({
    config: {
      'dokebi-lock': {
        backends: {
          r: { driver: 'redis', connection: 'main', namespace, leaseMs: 10_000, fenceRetentionMs: 30_000 },
          cache: { driver: 'redis', connection: 'dead', namespace, leaseMs: 5000 },
          mem: {},
          locks: {
            driver: 'policy',
            rules: [{ prefix: 'pay:', backends: ['cache'], onUnavailable: 'failClosed' }],
            default: { backends: ['cache', 'mem'], minTier: 'process', onUnavailable: 'fallBack' },
            reprobeCooldownMs: 60_000,
          },
        },
      },
      'dokebi-redis': {
        connections: { main: { url: redis.url }, dead: { url: `redis://127.0.0.1:${dead}`, connectTimeoutMs: 100 } },
      },
    },
  });
  const otel = instrumented(provider);
  const locks = provider.backend('locks');
  const moved = await locks.acquire('order:secret-1', { waitTimeoutMs: 1000 });
  assert.equal(moved.served.backend, 'mem');
  await moved.release();
  await rejectsWith(locks.acquire('pay:secret-2', { waitTimeoutMs: 1000 }), 'NO_ELIGIBLE_BACKEND');

  // A counter 60 s ahead of the server's clock on one key, then another
  // key's grant from the clock: 60 s below (as in telemetry.test.js).
  const ahead = lockKey(namespace, KEY).replace(':lock:{', ':lock-fence:{');
  const [, , seconds, , micros] = (await command(redis.port, 'TIME')).split('\r\n');
  await command(redis.port, 'SET', ahead, ((BigInt(seconds) + 60n) * 1_000_000n + BigInt(micros)).toString(), 'PX', '60000');
  for (const key of [KEY, 'other-secret-3']) await (await provider.backend('r').acquire(key)).release();

  const by = async (name, attribute) => Object.fromEntries((await otel.points(name)).map((point) => [point.attributes[attribute], point]));
  const up = await by('dokebi_lock.store.up', 'dokebi_lock.backend');
  assert.deepEqual([up.r?.value, up.cache?.value, up.mem, up.locks], [1, 0, undefined, undefined]);
  assert.equal(up.r.attributes['dokebi_lock.driver'], 'redis');
  const age = await by('dokebi_lock.store.answer_age', 'dokebi_lock.backend');
  assert.ok(age.r.value >= 0 && age.r.value < 5, String(age.r.value));
  assert.equal(age.cache, undefined, 'a store that never answered has no age');
  const skipped = await by('dokebi_lock.policy.skipped', 'dokebi_lock.member');
  assert.deepEqual([skipped.cache?.value, skipped.mem?.value], [1, 0]);
  const fallbacks = await otel.points('dokebi_lock.policy.fallbacks');
  assert.deepEqual(
    fallbacks.map((point) => [point.value, point.attributes]),
    [[1, { 'dokebi_lock.backend': 'locks', 'dokebi_lock.member': 'mem', 'dokebi_lock.preferred': 'cache' }]],
  );
  const refusals = await by('dokebi_lock.policy.refusals', 'dokebi_lock.member');
  assert.deepEqual([refusals.cache?.value, refusals.mem?.value], [1, 0]);
  // The event comes from the driver's thread through the event loop.
  for (let tries = 0; tries < 100 && (await otel.points('dokebi_lock.clock_behind')).length === 0; tries++) await sleep(10);
  const behind = await otel.points('dokebi_lock.clock_behind');
  assert.deepEqual(
    behind.map((point) => [point.value, point.attributes]),
    [[1, { 'dokebi_lock.backend': 'r', 'dokebi_lock.connection': 'main' }]],
  );
  const everything = JSON.stringify((await Promise.all(['store.up', 'policy.skipped', 'policy.fallbacks', 'policy.refusals', 'clock_behind'].map((name) => otel.points(`dokebi_lock.${name}`)))).flat());
  assert.doesNotMatch(everything, /secret/, 'no key in the metrics');
  await otel.finish();
  await provider.close();
});

test('forced releases: each forceRelease of a local and a redis backend is counted under its backend', async () => {
  const provider = await openLock({
    config: {
      'dokebi-lock': { backends: { mem: {}, r: { driver: 'redis', connection: 'main', namespace: 'otel3', leaseMs: 10_000 } } },
      'dokebi-redis': { connections: { main: { url: redis.url } } },
    },
  });
  const otel = instrumented();
  const [mem, r] = [provider.backend('mem'), provider.backend('r')];
  const local = await mem.acquire(KEY);
  assert.equal((await mem.forceRelease(KEY)).removed, 1);
  assert.equal((await mem.forceRelease(KEY)).removed, 0, 'a free key is counted too');
  const remote = await r.acquire(KEY);
  assert.equal((await r.forceRelease(KEY)).removed, 1);
  assert.equal(await local.release(), false);
  await rejectsWith(remote.release(), 'LEASE_LOST');

  const forced = async () => Object.fromEntries((await otel.points('dokebi_lock.forced_releases')).map((point) => [point.attributes['dokebi_lock.backend'], point]));
  // The redis event comes from the driver's thread through the event loop.
  for (let tries = 0; tries < 100 && (await forced()).r === undefined; tries++) await sleep(10);
  const points = await forced();
  assert.deepEqual(
    Object.values(points).map((point) => [point.value, point.attributes]),
    [
      [2, { 'dokebi_lock.backend': 'mem' }],
      [1, { 'dokebi_lock.backend': 'r' }],
    ],
  );
  assert.doesNotMatch(JSON.stringify(points), /secret/, 'no key in the metrics');
  await otel.finish();
  await provider.close();
});

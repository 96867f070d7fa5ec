// @dokebi/lock/otel: the tracing channels of lib/tracing.js as OpenTelemetry
// spans and metrics (README.md, "Tracing"). Needs the optional peer
// @opentelemetry/api; subscribes only while instrumented, so an app that
// never calls instrumentLocks() pays nothing for it.
//
// Spans: `dokebi-lock acquire` from an acquire's start to its settling, and
// `dokebi-lock hold` from the grant to the release or loss. Both are
// children of the context active where acquire() (or withLock()) was called:
// the channels publish both starts in that caller's async context (a hold's
// in the reaction to its acquire, not in the job that released the key).
import { subscribe, tracingChannel, unsubscribe } from 'node:diagnostics_channel';
import { createRequire } from 'node:module';
import { context, metrics, SpanKind, SpanStatusCode, trace, ValueType } from '@opentelemetry/api';

const { name: SCOPE, version: VERSION } = createRequire(import.meta.url)('./package.json');

/** Span and metric attributes of a context object of the channels (never a key: it carries none). */
function baseAttributes(lock) {
  const attributes = { 'dokebi_lock.backend': lock.backend, 'dokebi_lock.driver': lock.driver };
  if (lock.mode !== undefined) attributes['dokebi_lock.mode'] = lock.mode;
  if (lock.limit !== undefined) attributes['dokebi_lock.limit'] = lock.limit;
  if (lock.weight !== undefined) attributes['dokebi_lock.weight'] = lock.weight;
  if (lock.keyCount !== undefined) attributes['dokebi_lock.key_count'] = lock.keyCount;
  return attributes;
}

/** `error.type` of a failure: the LockError's code, else the error's class name. */
function errorType(lock) {
  return lock.code ?? lock.error?.constructor?.name ?? 'Error';
}

/** Marks `span` failed with `lock`'s error, of `error.type` `type`. */
function failed(span, lock, type) {
  span.setAttribute('error.type', type);
  span.setStatus({ code: SpanStatusCode.ERROR, message: lock.error?.message });
}

/** The name → status of `backends`: a LockProvider, or a record of backends by name. */
function statuses(backends) {
  if (typeof backends.names === 'function' && typeof backends.status === 'function') return Object.entries(backends.status());
  return Object.entries(backends).map(([name, backend]) => [name, backend.status()]);
}

/**
 * Subscribes to the tracing channels and makes spans and metrics of them;
 * returns stop(), which unsubscribes. Providers default to the global ones
 * of @opentelemetry/api; `backends` (a LockProvider or `{ name: backend }`)
 * feeds the waiting and held gauges from status().
 */
export function instrumentLocks({ tracerProvider, meterProvider, backends } = {}) {
  const tracer = (tracerProvider ?? trace.getTracerProvider()).getTracer(SCOPE, VERSION);
  const meter = (meterProvider ?? metrics.getMeterProvider()).getMeter(SCOPE, VERSION);
  const waitDuration = meter.createHistogram('dokebi_lock.acquire.duration', {
    description: 'Time an acquire took, from the call to the grant or failure',
    unit: 's',
  });
  const holdDuration = meter.createHistogram('dokebi_lock.hold.duration', {
    description: 'Time a lease was held, from the grant to the release or loss',
    unit: 's',
  });
  const timeouts = meter.createCounter('dokebi_lock.acquire.timeouts', {
    description: 'Acquires that gave up waiting (WAIT_TIMEOUT)',
    unit: '{acquire}',
    valueType: ValueType.INT,
  });
  const losses = meter.createCounter('dokebi_lock.lease.losses', {
    description: 'Leases lost while held (LEASE_LOST)',
    unit: '{lease}',
    valueType: ValueType.INT,
  });
  const waiting = meter.createObservableGauge('dokebi_lock.waiting', {
    description: 'Acquires waiting, from status()',
    unit: '{acquire}',
    valueType: ValueType.INT,
  });
  const held = meter.createObservableGauge('dokebi_lock.held', {
    description: 'Leases held, from status()',
    unit: '{lease}',
    valueType: ValueType.INT,
  });
  const storeUp = meter.createObservableGauge('dokebi_lock.store.up', {
    description: "1 while the backend's store connection answers, else 0, from status()",
    unit: '1',
    valueType: ValueType.INT,
  });
  const answerAge = meter.createObservableGauge('dokebi_lock.store.answer_age', {
    description: 'Time since the store last answered, from status()',
    unit: 's',
  });
  const skipped = meter.createObservableGauge('dokebi_lock.policy.skipped', {
    description: "1 while a policy's member is passed over as unavailable, else 0, from status()",
    unit: '1',
    valueType: ValueType.INT,
  });
  // Counted by the core per member (the policy's own refusal is no member's
  // acquire, so the tracing channels never see it).
  const refusals = meter.createObservableCounter('dokebi_lock.policy.refusals', {
    description: "A policy's acquires refused NO_ELIGIBLE_BACKEND (failClosed), by the member the rule prefers, from status()",
    unit: '{acquire}',
    valueType: ValueType.INT,
  });
  const gauges = [waiting, held, storeUp, answerAge, skipped, refusals];
  const observe = (result) => {
    let entries;
    try {
      entries = statuses(backends);
    } catch {
      return; // A closed provider: nothing to report.
    }
    const now = Date.now();
    for (const [name, status] of entries) {
      const attributes = { 'dokebi_lock.backend': name, 'dokebi_lock.driver': status.driver };
      if (typeof status.waiting === 'number') result.observe(waiting, status.waiting, attributes);
      if (typeof status.held === 'number') result.observe(held, status.held, attributes);
      const store = status.redis ?? status.postgres ?? status.mysql;
      if (store !== undefined) {
        result.observe(storeUp, store.connected ? 1 : 0, attributes);
        const answeredAt = store.lastAnswerAt ?? store.lastProbeAt;
        if (answeredAt != null) result.observe(answerAge, Math.max(0, now - answeredAt) / 1000, attributes);
      }
      for (const member of status.members ?? []) {
        const attributes = { 'dokebi_lock.backend': name, 'dokebi_lock.member': member.backend };
        result.observe(skipped, member.skipped ? 1 : 0, attributes);
        result.observe(refusals, member.refusals, attributes);
      }
    }
  };
  if (backends !== undefined) meter.addBatchObservableCallback(observe, gauges);

  // Events of the telemetry channels, counted whether or not `backends` is given.
  const clockBehind = meter.createCounter('dokebi_lock.clock_behind', {
    description: 'Grants that showed a Redis server clock at least 1 s behind (clock-behind events)',
    unit: '{event}',
    valueType: ValueType.INT,
  });
  const forcedReleases = meter.createCounter('dokebi_lock.forced_releases', {
    description: 'Keys force-released (forceRelease), whether or not they had holders (forced-release events)',
    unit: '{event}',
    valueType: ValueType.INT,
  });
  const fallbacks = meter.createCounter('dokebi_lock.policy.fallbacks', {
    description: "A policy's acquires served by a member other than the rule's preferred one",
    unit: '{acquire}',
    valueType: ValueType.INT,
  });
  const events = {
    'dokebi-lock:clock-behind': ({ backend, connection }) =>
      clockBehind.add(1, { 'dokebi_lock.backend': backend, 'dokebi_lock.connection': connection }),
    'dokebi-lock:forced-release': ({ backend }) => forcedReleases.add(1, { 'dokebi_lock.backend': backend }),
    'dokebi-lock:policy-fallback': ({ backend, member, preferred }) =>
      fallbacks.add(1, { 'dokebi_lock.backend': backend, 'dokebi_lock.member': member, 'dokebi_lock.preferred': preferred }),
  };

  // The open spans, by context object of the channels.
  const acquireSpans = new WeakMap();
  const holdSpans = new WeakMap();

  const acquire = {
    start(lock) {
      const span = tracer.startSpan('dokebi-lock acquire', { kind: SpanKind.INTERNAL, attributes: baseAttributes(lock) }, context.active());
      acquireSpans.set(lock, span);
    },
    asyncEnd(lock) {
      const span = acquireSpans.get(lock);
      if (span === undefined) return; // Started before instrumentLocks().
      acquireSpans.delete(lock);
      const attributes = baseAttributes(lock);
      span.setAttribute('dokebi_lock.wait_ms', lock.waitMs);
      if (lock.fence !== undefined) span.setAttribute('dokebi_lock.fence', lock.fence);
      if (lock.fences !== undefined) span.setAttribute('dokebi_lock.fences', lock.fences);
      if (lock.error !== undefined) {
        const type = errorType(lock);
        failed(span, lock, type);
        attributes['error.type'] = type;
        if (lock.code === 'WAIT_TIMEOUT') timeouts.add(1, baseAttributes(lock));
      }
      span.end();
      waitDuration.record(lock.waitMs / 1000, attributes);
    },
  };
  const hold = {
    start(lock) {
      const attributes = baseAttributes(lock);
      if (lock.fence !== undefined) attributes['dokebi_lock.fence'] = lock.fence;
      if (lock.fences !== undefined) attributes['dokebi_lock.fences'] = lock.fences;
      const span = tracer.startSpan('dokebi-lock hold', { kind: SpanKind.INTERNAL, attributes }, context.active());
      holdSpans.set(lock, span);
    },
    asyncEnd(lock) {
      const span = holdSpans.get(lock);
      if (span === undefined) return;
      holdSpans.delete(lock);
      const attributes = baseAttributes(lock);
      span.setAttribute('dokebi_lock.held_ms', lock.heldMs);
      span.setAttribute('dokebi_lock.released', lock.released);
      if (lock.error !== undefined) {
        // The hold's error is the loss (or the failed release), not the acquire's code.
        const type = typeof lock.error?.code === 'string' ? lock.error.code : errorType(lock);
        failed(span, lock, type);
        attributes['error.type'] = type;
        if (type === 'LEASE_LOST') losses.add(1, baseAttributes(lock));
      }
      span.end();
      holdDuration.record(lock.heldMs / 1000, attributes);
    },
  };
  const acquireChannel = tracingChannel('dokebi-lock:acquire');
  const holdChannel = tracingChannel('dokebi-lock:hold');
  acquireChannel.subscribe(acquire);
  holdChannel.subscribe(hold);
  for (const [name, onEvent] of Object.entries(events)) subscribe(name, onEvent);
  let stopped = false;
  return function stop() {
    if (stopped) return;
    stopped = true;
    acquireChannel.unsubscribe(acquire);
    holdChannel.unsubscribe(hold);
    for (const [name, onEvent] of Object.entries(events)) unsubscribe(name, onEvent);
    if (backends !== undefined) meter.removeBatchObservableCallback(observe, gauges);
  };
}

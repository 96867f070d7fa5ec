// Types of @dokebi/lock/otel: the tracing channels as OpenTelemetry spans and
// metrics (README.md, "Tracing"). Needs the optional peer @opentelemetry/api.
import type { MeterProvider, TracerProvider } from '@opentelemetry/api';
import type { LockBackend, LockProvider } from './index.js';

export interface InstrumentLocksOptions {
  /** Where the spans go; default: the global tracer provider of @opentelemetry/api. */
  readonly tracerProvider?: TracerProvider;
  /** Where the metrics go; default: the global meter provider. */
  readonly meterProvider?: MeterProvider;
  /**
   * The backends whose status() feeds the gauges dokebi_lock.waiting,
   * dokebi_lock.held, dokebi_lock.store.up, dokebi_lock.store.answer_age and
   * dokebi_lock.policy.skipped and the counter dokebi_lock.policy.refusals:
   * a provider (every backend), or backends by name. Without it, none of them.
   */
  readonly backends?: LockProvider | { readonly [name: string]: Pick<LockBackend, 'status'> };
}

/**
 * Subscribes to dokebi-lock:acquire and dokebi-lock:hold and turns them into
 * spans (`dokebi-lock acquire`, `dokebi-lock hold`, children of the context
 * active at the acquire) and metrics (dokebi_lock.acquire.duration and
 * dokebi_lock.hold.duration histograms in seconds,
 * dokebi_lock.acquire.timeouts, dokebi_lock.lease.losses,
 * dokebi_lock.clock_behind, dokebi_lock.forced_releases and
 * dokebi_lock.policy.fallbacks counters, the
 * metrics of `backends`). Call it once; returns stop(), which unsubscribes.
 */
export declare function instrumentLocks(options?: InstrumentLocksOptions): () => void;

// Telemetry on node:diagnostics_channel: channels `dokebi-lock:<name>`, the
// names of the core's TelemetryEvent. Separate from errors and the log: a
// slow acquire is a measurement, not a failure.
//
// Zero cost when nobody listens: every report first checks `hasSubscribers`,
// and the local driver reads no clock for a report nobody would receive.
// Payloads carry the backend, codes and durations, never keys; a wait that
// ended with WAIT_TIMEOUT or LOCK_BUSY carries the error's `details` too
// (the holders' labels of the key that kept it out, never the key).
import { channel } from 'node:diagnostics_channel';

export const slowAcquire = channel('dokebi-lock:slow-acquire');
export const slowHold = channel('dokebi-lock:slow-hold');
export const waitTimeout = channel('dokebi-lock:wait-timeout');
export const leaseLost = channel('dokebi-lock:lease-lost');
export const connection = channel('dokebi-lock:connection');
export const clockBehind = channel('dokebi-lock:clock-behind');
export const policyFallback = channel('dokebi-lock:policy-fallback');
export const policySkipped = channel('dokebi-lock:policy-skipped');
export const policyBack = channel('dokebi-lock:policy-back');
export const forcedRelease = channel('dokebi-lock:forced-release');

const BY_NAME = new Map([slowAcquire, slowHold, waitTimeout, leaseLost, connection, clockBehind, policyFallback, policySkipped, policyBack, forcedRelease].map((c) => [c.name.slice('dokebi-lock:'.length), c]));

/** Publishes an event of the core (store, file and policy backends): the fields it has, by name. */
export function forwardTelemetry({ name, ...fields }) {
  const target = BY_NAME.get(name);
  if (!target?.hasSubscribers) return;
  const payload = {};
  for (const field in fields) if (fields[field] != null) payload[field] = fields[field];
  if (payload.details !== undefined) payload.details = JSON.parse(payload.details);
  target.publish(payload);
}

/** True when a wait's end would be reported: read the clock only then. */
export function waitWatched() {
  return slowAcquire.hasSubscribers || waitTimeout.hasSubscribers;
}

/**
 * Reports a finished wait of `backend` that lasted `waitedMs` and ended with
 * error `code` (undefined when granted; its `details`, the holders, with a
 * WAIT_TIMEOUT or LOCK_BUSY): a wait timeout, and a slow acquire whatever
 * the outcome when `thresholdMs` (null: disabled) was reached.
 */
export function reportWait(backend, thresholdMs, waitedMs, code, details) {
  if (code === 'WAIT_TIMEOUT' && waitTimeout.hasSubscribers) {
    waitTimeout.publish(details === undefined ? { backend, code, waitedMs } : { backend, code, waitedMs, details });
  }
  if (thresholdMs !== null && waitedMs >= thresholdMs && slowAcquire.hasSubscribers) {
    const event = code === undefined ? { backend, waitedMs, thresholdMs } : { backend, code, waitedMs, thresholdMs };
    if (details !== undefined) event.details = details;
    slowAcquire.publish(event);
  }
}

/** Reports a lease of `backend` held `heldMs` when it reached `thresholdMs`. */
export function reportHold(backend, thresholdMs, heldMs) {
  if (heldMs >= thresholdMs && slowHold.hasSubscribers) slowHold.publish({ backend, heldMs, thresholdMs });
}

/** Reports a forced release of a local `backend` that removed `removed` holders (it raises no fence). */
export function reportForcedRelease(backend, removed) {
  if (forcedRelease.hasSubscribers) forcedRelease.publish({ backend, removed });
}

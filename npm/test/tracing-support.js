// What the tracing tests share: a recorder of the tracing channels and an
// app driver written in JS (no built-in backend underneath).
import assert from 'node:assert/strict';
import { tracingChannel } from 'node:diagnostics_channel';
import { LockError } from '../index.js';

export const CHANNELS = ['acquire', 'with-lock', 'hold'];
const EVENTS = ['start', 'end', 'asyncStart', 'asyncEnd', 'error'];

/** A key that must never show in a payload. */
export const KEY = 'customer:secret-key-7';

/**
 * Records every event of the three tracing channels until stop(): `{ channel,
 * event, context, fields }`, `fields` a copy of the context at that event.
 * stop() also asserts that no payload carried the key.
 */
export function recordTracing(channels = CHANNELS) {
  const events = [];
  const subscriptions = channels.map((name) => {
    const handlers = Object.fromEntries(
      EVENTS.map((event) => [event, (context) => events.push({ channel: name, event, context, fields: { ...context } })]),
    );
    tracingChannel(`dokebi-lock:${name}`).subscribe(handlers);
    return [name, handlers];
  });
  return {
    events,
    /** The events of `channel`, as `event` names. */
    sequence: (channel) => events.filter((entry) => entry.channel === channel).map((entry) => entry.event),
    /** The distinct context objects of `channel`, in order of their start. */
    contexts: (channel) => events.filter((entry) => entry.channel === channel && entry.event === 'start').map((entry) => entry.context),
    stop() {
      for (const [name, handlers] of subscriptions) tracingChannel(`dokebi-lock:${name}`).unsubscribe(handlers);
      for (const { fields } of events) {
        const text = JSON.stringify({ ...fields, error: fields.error && { message: fields.error.message, details: fields.error.details } });
        assert.ok(!text.includes('secret'), `a payload carried the key: ${text}`);
        assert.ok(!('key' in fields) && !('keys' in fields) && !('result' in fields), `a payload had a key or result field: ${text}`);
      }
    },
  };
}

/**
 * The factory of an app driver in plain JS: one holder per key, no queue (a
 * held key is WAIT_TIMEOUT at once), fences counting up.
 */
export function jsDriver() {
  return () => {
    const holders = new Map();
    let fences = 0;
    const view = {
      async acquire(key) {
        if (holders.has(key)) throw new LockError('WAIT_TIMEOUT', 'held by another');
        const fence = String(++fences);
        holders.set(key, fence);
        const lease = {
          key,
          fence,
          get valid() {
            return holders.get(key) === fence;
          },
          remainingMs: Infinity,
          renew: async () => holders.get(key) === fence,
          async release() {
            if (holders.get(key) !== fence) return false;
            holders.delete(key);
            return true;
          },
        };
        return lease;
      },
    };
    return { view, close: async () => holders.clear() };
  };
}

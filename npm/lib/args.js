// Checks per-call arguments at the JS boundary: wrong types are LockErrors,
// never crashes or hangs inside the addon.
import { invalidArgument, LockError } from './errors.js';
import { MAX_TIMER_MS } from './protocol.js';

const ACQUIRE_OPTIONS = new Set(['waitTimeoutMs', 'signal', 'mode', 'limit', 'weight', 'holder']);

/** True when the options ask for a kind beyond a plain exclusive lease (kinds.js checks it). */
export function asksKind(options) {
  return options.mode !== undefined || options.limit !== undefined || options.weight !== undefined;
}


/**
 * The acquire options, each field read once: INVALID_ARGUMENT for a field of
 * another name, else a plain object of the fields given (so an app driver
 * sees no `mode: undefined` it did not ask for). What the checks below read
 * is then what the acquire uses: a getter that answered a valid value to the
 * check cannot answer another to the addon. undefined stays undefined;
 * anything but an object is left to the checks.
 */
export function readOnce(options) {
  if (typeof options !== 'object' || options === null || Array.isArray(options)) return options;
  for (const name in options) {
    if (!ACQUIRE_OPTIONS.has(name)) throw invalidArgument('acquire options accept only waitTimeoutMs, signal, mode, limit, weight and holder');
  }
  return acquireFields(options);
}

/**
 * A plain copy of an object of options (withLock's, which a policy hands on
 * to its members), each enumerable field read once, its name kept for the
 * checks of whoever reads it. Anything but an object is left to them.
 */
export function fieldsOnce(options) {
  if (typeof options !== 'object' || options === null || Array.isArray(options)) return options;
  const once = {};
  for (const name in options) once[name] = options[name];
  return once;
}

/** The acquire fields of an object of options (withLock's too), each read once, those given only. */
export function acquireFields(options) {
  const { waitTimeoutMs, signal, mode, limit, weight, holder } = options;
  const once = {};
  if (waitTimeoutMs !== undefined) once.waitTimeoutMs = waitTimeoutMs;
  if (signal !== undefined) once.signal = signal;
  if (mode !== undefined) once.mode = mode;
  if (limit !== undefined) once.limit = limit;
  if (weight !== undefined) once.weight = weight;
  if (holder !== undefined) once.holder = holder;
  return once;
}

/**
 * The wait of an acquire: `options.waitTimeoutMs` or the backend default,
 * of options [readOnce] read. Throws INVALID_ARGUMENT for anything but an
 * object of `{ waitTimeoutMs?, signal?, mode?, limit?, weight?, holder? }` with an
 * integer 0..MAX_TIMER_MS, an AbortSignal and a string holder (the kind
 * fields are checked by kinds.js, the holder's text by the core).
 */
export function waitTimeout(options, fallbackMs) {
  if (typeof options !== 'object' || options === null || Array.isArray(options)) {
    throw invalidArgument('acquire options must be an object: { waitTimeoutMs?, signal?, mode?, limit?, weight?, holder? }');
  }
  const { waitTimeoutMs, signal, holder } = options;
  if (signal !== undefined && !(signal instanceof AbortSignal)) throw invalidArgument('signal must be an AbortSignal');
  if (holder !== undefined && typeof holder !== 'string') throw invalidArgument('holder must be a string');
  if (waitTimeoutMs === undefined) return fallbackMs;
  if (!Number.isInteger(waitTimeoutMs) || waitTimeoutMs < 0 || waitTimeoutMs > MAX_TIMER_MS) {
    throw invalidArgument(`waitTimeoutMs must be an integer from 0 to ${MAX_TIMER_MS}`);
  }
  return waitTimeoutMs;
}

/** The INVALID_KEY error of a key that is not a string (never echoes it). */
export function notAStringKey() {
  return new LockError('INVALID_KEY', 'key must be a string');
}

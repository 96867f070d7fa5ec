// LockError: the one error type of @dokebi/lock. Codes, messages and fix
// sentences come from the Rust core; this module maps them once.
import { native } from './native.js';

const CODES = new Map(native.errorCodes().map((entry) => [entry.code, entry]));

const RETRY_AFTER = Object.freeze({ 'retry-after': '1' });
const OVERLOADED = Object.freeze({ status: 503, code: 'LOCK_OVERLOADED', headers: RETRY_AFTER });
const UNAVAILABLE = Object.freeze({ status: 503, code: 'LOCK_UNAVAILABLE', headers: RETRY_AFTER });
const REDIS_UNAVAILABLE = Object.freeze({ status: 503, code: 'REDIS_UNAVAILABLE', headers: RETRY_AFTER });

/**
 * The HTTP answer a web host gives for an error with `code`, or undefined
 * when the host should treat it as its own failure (usually a 500).
 */
function httpAnswer(code) {
  switch (code) {
    case 'QUEUE_FULL':
    case 'KEY_LIMIT':
      return OVERLOADED;
    case 'CLOSED':
      return UNAVAILABLE;
    default:
      // The remaining transient codes are Redis failures (unreachable, unknown outcome).
      return CODES.get(code)?.transient ? REDIS_UNAVAILABLE : undefined;
  }
}

/**
 * The error base of dokebi plugins: `code` (stable, what other packages
 * classify by), `plugin` (the plugin that raised it), a `fix` sentence, and
 * optionally `data` (small facts for programs, e.g. `data.reason`),
 * `details` and `cause`.
 */
export class DokebiError extends Error {
  /**
   * @param {string} code
   * @param {string} message
   * @param {{ plugin: string, fix?: string, data?: object, details?: object, cause?: unknown }} fields
   */
  constructor(code, message, fields) {
    super(message, 'cause' in fields ? { cause: fields.cause } : undefined);
    this.code = code;
    this.plugin = fields.plugin;
    this.fix = fields.fix ?? '';
    if (fields.data !== undefined) this.data = fields.data;
    this.details = fields.details;
  }

  get name() {
    return 'DokebiError';
  }
}

/** Every failure of @dokebi/lock. Never carries a lock key. */
export class LockError extends DokebiError {
  /**
   * @param {string} code one of the core's codes, e.g. 'WAIT_TIMEOUT'
   * @param {string} message what happened, without keys
   * @param {{ details?: object, data?: object, cause?: unknown }} [extra]
   */
  constructor(code, message, extra = {}) {
    super(code, message, { ...extra, plugin: 'dokebi-lock', fix: CODES.get(code)?.fix ?? '' });
    this.http = httpAnswer(code);
  }

  get name() {
    return 'LockError';
  }
}

/** Builds the LockError the core described. */
export function fromInfo(info) {
  const extra = {};
  if (info.details != null) extra.details = JSON.parse(info.details);
  if (info.cause != null) extra.cause = new Error(info.cause);
  return new LockError(info.code, info.message, extra);
}

/** The error a native call left behind when it returned a failure sentinel. */
export function takeNativeError() {
  const info = native.takeError();
  if (info == null) throw new Error('@dokebi/lock: a native call failed without an error (a bug)');
  return fromInfo(info);
}

/**
 * The ABORTED error of an acquire that `signal` ended: the signal's reason is
 * its `cause`, so a caller can tell its own aborts apart.
 */
export function abortedBy(signal) {
  const info = native.abortedError();
  return new LockError(info.code, info.message, { cause: signal.reason });
}

export function invalidArgument(message) {
  return new LockError('INVALID_ARGUMENT', message);
}

/**
 * INVALID_EXTENSION: `data.reason` (also in `details`, with `extra.details`)
 * says which rule of the extension contract was broken.
 */
export function invalidExtension(reason, message, extra = {}) {
  return new LockError('INVALID_EXTENSION', message, {
    data: { reason },
    details: { reason, ...extra.details },
    ...('cause' in extra ? { cause: extra.cause } : {}),
  });
}

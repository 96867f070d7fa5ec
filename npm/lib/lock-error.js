// The LockError and DokebiError classes, apart from errors.js so that the
// addon's loader (native.js), which runs before any core code table exists,
// can throw them too.

/**
 * The core's codes (`code`, `fix`, `transient`), filled by errors.js once the
 * addon has loaded; empty while it loads, when the only LockErrors are the
 * loader's own, which bring their `fix`.
 */
export const codeTable = new Map();

const RETRY_AFTER = Object.freeze({ 'retry-after': '1' });
const OVERLOADED = Object.freeze({ status: 503, code: 'LOCK_OVERLOADED', headers: RETRY_AFTER });
const UNAVAILABLE = Object.freeze({ status: 503, code: 'LOCK_UNAVAILABLE', headers: RETRY_AFTER });
const REDIS_UNAVAILABLE = Object.freeze({ status: 503, code: 'REDIS_UNAVAILABLE', headers: RETRY_AFTER });
const STORE_UNAVAILABLE = Object.freeze({ status: 503, code: 'LOCK_STORE_UNAVAILABLE', headers: RETRY_AFTER });

/**
 * The HTTP answer a web host gives for an error with `code` raised by a
 * backend of `driver` (if known), or undefined when the host should treat
 * it as its own failure (usually a 500).
 */
function httpAnswer(code, driver) {
  switch (code) {
    case 'QUEUE_FULL':
    case 'KEY_LIMIT':
      return OVERLOADED;
    case 'CLOSED':
      return UNAVAILABLE;
    default:
      // The remaining transient codes are store failures (unreachable, unknown
      // outcome, no eligible member): a redis backend's keep the answer
      // @dokebi/redis gives for Redis's (D-0102), which hosts match on; every
      // other store's has a name of its own.
      if (!codeTable.get(code)?.transient) return undefined;
      return driver === 'redis' ? REDIS_UNAVAILABLE : STORE_UNAVAILABLE;
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
   * @param {string} code one of the core's codes, e.g. 'WAIT_TIMEOUT', or one of the loader's
   * @param {string} message what happened, without keys
   * @param {{ details?: object, data?: object, cause?: unknown, fix?: string, driver?: string }} [extra] `fix`
   *   only where the core has no sentence for the code (the loader's codes); `driver`: that of
   *   the backend that raised it (`http` answers REDIS_UNAVAILABLE for a redis outage)
   */
  constructor(code, message, extra = {}) {
    super(code, message, { ...extra, plugin: 'dokebi-lock', fix: extra.fix ?? codeTable.get(code)?.fix ?? '' });
    this.http = httpAnswer(code, extra.driver);
  }

  get name() {
    return 'LockError';
  }
}

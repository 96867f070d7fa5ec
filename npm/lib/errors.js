// LockError: the one error type of @dokebi/lock. Codes, messages and fix
// sentences come from the Rust core; this module maps them once.
import { native } from './native.js';
import { codeTable, DokebiError, LockError } from './lock-error.js';

for (const entry of native.errorCodes()) codeTable.set(entry.code, entry);

export { DokebiError, LockError };

/** Builds the LockError the core described; `driver`: that of the backend that raised it, if one did. */
export function fromInfo(info, driver) {
  const extra = {};
  if (driver !== undefined) extra.driver = driver;
  if (info.details != null) extra.details = JSON.parse(info.details);
  if (info.cause != null) extra.cause = new Error(info.cause);
  if (info.fix != null) extra.fix = info.fix;
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

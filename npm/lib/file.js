// The file driver: LockBackend views over the core's file backends (kernel
// locks on files of one directory, shared by the processes of one host).
// An acquire is a promise the addon settles on this thread; a release is
// one synchronous native call. This module only converts arguments and
// results.
import { native } from './native.js';
import { abortedBy, fromInfo, takeNativeError } from './errors.js';
import { asksKind, notAStringKey, readOnce, waitTimeout } from './args.js';
import { askedKinds } from './kinds.js';
import { inspection } from './inspect.js';
import { forcedRelease } from './force-release.js';
import { closeWatch, leaseLost, withLock } from './with-lock.js';
import { forwardTelemetry } from './telemetry.js';
import * as tracing from './tracing.js';

/** A native result is either the value or an ErrorInfo (which has a code). */
function unwrap(result) {
  if (result !== null && typeof result === 'object' && typeof result.code === 'string' && typeof result.message === 'string') {
    throw fromInfo(result);
  }
  return result;
}


/** A lease held through kernel locks on its keys' lock files, in the kind asked (exclusive, shared, or units of a counted key). */
class FileLease {
  /** The addon's lease handle (an external). */
  #native;
  #key;
  #fence;

  constructor(handle, key) {
    this.#native = handle;
    this.#key = key;
  }

  get key() {
    return this.#key;
  }

  /** True until released or the provider closed: the kernel keeps the lock while this process lives. */
  get valid() {
    return native.fileLeaseValid(this.#native);
  }

  /** Infinity while valid (nothing expires a file lease), 0 once released. */
  get remainingMs() {
    return this.valid ? Infinity : 0;
  }

  /** Decimal string (about 1.8e15: microseconds of the host clock); grows per key. Compare with BigInt. */
  get fence() {
    this.#fence ??= native.fileLeaseFence(this.#native);
    return this.#fence;
  }

  /** Nothing to extend: resolves to `valid`. */
  renew() {
    return Promise.resolve(this.valid);
  }

  /** True when released, false when already released; LEASE_LOST when its lock file was removed or replaced while held. */
  release() {
    let releasing;
    try {
      const released = native.fileLeaseRelease(this.#native);
      releasing = released === null ? Promise.reject(takeNativeError()) : Promise.resolve(released);
    } catch (error) {
      releasing = Promise.reject(error);
    }
    return tracing.holdsOpen() ? tracing.holdEnding(this, releasing) : releasing;
  }

  async [Symbol.asyncDispose]() {
    await this.release();
  }
}

/** A file lease asked for as a set of keys: one kernel lock per key, all held or none. */
class FileKeysLease extends FileLease {
  #keys;
  #handle;
  #fences;

  constructor(handle, keys) {
    super(handle, keys[0]);
    this.#keys = keys;
    this.#handle = handle;
  }

  /** Every key, in the order the acquire gave them (frozen). */
  get keys() {
    return this.#keys;
  }

  /** Each key's fence, as decimal strings. */
  get fences() {
    this.#fences ??= native.fileLeaseFences(this.#handle);
    const fences = this.#fences;
    return new Map(this.#keys.map((key, index) => [key, fences[index]]));
  }
}

/** The LockBackend of a file backend. */
class FileBackend {
  #native;
  #state;
  #waitTimeoutMs;
  #traced;

  /** No renewals (a file lease never expires while held): only close ends a lease. */
  #keepAlive;

  constructor(handle, name, state) {
    this.#native = handle;
    this.#state = state;
    this.#keepAlive = closeWatch(state.closer.signal);
    this.#waitTimeoutMs = handle.waitTimeoutMs;
    this.#traced = tracing.tracedCalls(
      { backend: name, driver: 'file', seesReleases: true },
      (key, options) => this.#take(key, options),
      (key, fn, options) => withLock(this, key, fn, options, this.#keepAlive),
    );
  }

  acquire(key, options) {
    if (tracing.acquireTraced()) return this.#traced.acquire(key, options);
    return this.#take(key, options);
  }

  /** acquire(), untraced. */
  async #take(key, options) {
    if (this.#state.closed) throw fromInfo(native.closedError());
    let waitMs = this.#waitTimeoutMs;
    let signal;
    if (options !== undefined) {
      options = readOnce(options);
      waitMs = waitTimeout(options, waitMs);
      if (asksKind(options)) askedKinds(key, options);
      signal = options.signal;
      if (signal?.aborted) throw abortedBy(signal);
    }
    const many = typeof key !== 'string';
    if (many) {
      if (!Array.isArray(key)) throw notAStringKey();
      askedKinds(key, options);
      key = Object.freeze(Array.from(key));
    }
    const { mode, limit = 1, weight = 1, holder } = options ?? {};
    const keys = many ? key : [key];
    const acquire = (abort) => this.#native.acquire(keys, many, mode === 'shared', limit, weight, waitMs, abort, holder);
    let handle;
    if (signal === undefined) {
      handle = unwrap(await acquire(undefined));
    } else {
      const abort = native.newAbort();
      const onAbort = () => native.abort(abort);
      signal.addEventListener('abort', onAbort, { once: true });
      try {
        const result = await acquire(abort);
        // The core knows nothing of the JS signal: its ABORTED gets the reason here.
        if (result?.code === 'ABORTED') throw abortedBy(signal);
        handle = unwrap(result);
      } finally {
        signal.removeEventListener('abort', onAbort);
      }
    }
    return many ? new FileKeysLease(handle, key) : new FileLease(handle, key);
  }

  /** Acquires, runs `fn(lease, signal)`, releases in all cases (nothing to renew). */
  withLock(key, fn, options) {
    if (tracing.withLockTraced()) return this.#traced.withLock(key, fn, options);
    return withLock(this, key, fn, options, this.#keepAlive);
  }

  /** What the directory holds of `key`, by the records its holders write (see docs/file.md). */
  async inspect(key) {
    if (typeof key !== 'string') throw notAStringKey();
    if (this.#state.closed) throw fromInfo(native.closedError());
    return inspection(unwrap(await this.#native.inspect(key)));
  }

  /** The core refuses it: the kernel holds another process's lock until that process lets go or ends. */
  async forceRelease(key) {
    if (typeof key !== 'string') throw notAStringKey();
    if (this.#state.closed) throw fromInfo(native.closedError());
    return forcedRelease(unwrap(await this.#native.forceRelease(key)));
  }

  /** Counts: `{ driver: 'file', held, heldShared, waiting, acquired, timedOut, lost }`. */
  status() {
    // The addon's snapshot has the store drivers' health fields, unset here.
    const { redis, postgres, mysql, ...counts } = this.#native.status();
    return counts;
  }
}

/**
 * The driver `{ view, close() }` of file backend `name`: its directory is
 * created and checked now (INVALID_OPTIONS when refused).
 */
export function openFile({ name, options }) {
  const handle = options.openFile(name, forwardTelemetry);
  if (handle === null) throw takeNativeError();
  const state = { closed: false, closer: new AbortController() };
  return {
    view: new FileBackend(handle, name, state),
    close: async () => {
      state.closed = true;
      handle.close();
      state.closer.abort(leaseLost());
    },
  };
}

// The local driver: a LockBackend view over one native local engine
// (bindings/node/src/local.rs), driven on the JS thread only.
//
// The lock state lives in the native engine. This module keeps only what
// JS must own: the pending promises of queued acquires (indexed by the
// engine's waiter slot), their deadlines and abort listeners, and the lease
// handles (slot + fence) the engine hands out.
//
// Fast path: an uncontended acquire is one native call and returns an
// already-settled promise; release is one native call by handle and returns a
// shared settled promise. No async functions, no closures per call.
import { native } from './native.js';
import { fromInfo, takeNativeError } from './errors.js';
import { notAStringKey, waitTimeout } from './args.js';
import { Deadlines } from './deadlines.js';

// Result codes of the native engine.
const GRANTED = 0;
const QUEUED = 1;
const HANDED_ON = 2;
const NOT_HELD = 0;

const TRUE = Promise.resolve(true);
const FALSE = Promise.resolve(false);

/** The shared state of one local backend: engine, out-array, waiters. */
class LocalCore {
  constructor(engine, out) {
    this.engine = engine;
    this.out = out;
    this.defaultWaitMs = engine.waitTimeoutMs;
    /** Waiter slot -> Waiter, while queued. */
    this.waiters = [];
    this.deadlines = new Deadlines((waiter) => waiter.cancel(true, fromInfo(native.waitTimeoutError(waiter.deadlineMs))));
  }

  acquire(key, options) {
    let waitMs = this.defaultWaitMs;
    let signal;
    if (options !== undefined) {
      try {
        waitMs = waitTimeout(options, waitMs);
      } catch (error) {
        return Promise.reject(error);
      }
      signal = options.signal;
      if (signal?.aborted) return Promise.reject(fromInfo(native.abortedError()));
    }
    if (typeof key !== 'string') return Promise.reject(notAStringKey());
    const status = this.engine.acquire(key, waitMs !== 0);
    const out = this.out;
    if (status === GRANTED) return Promise.resolve(new LocalLease(this, key, out[0], out[1]));
    if (status === QUEUED) return new Waiter(this, key, out[0], out[1], waitMs, signal).promise;
    return Promise.reject(takeNativeError());
  }

  /** Releases by handle, granting the key to the next waiter if any. */
  release(slot, fence) {
    const status = this.engine.release(slot, fence);
    if (status === NOT_HELD) return false;
    if (status === HANDED_ON) {
      const out = this.out;
      const waiter = this.waiters[out[2]];
      this.waiters[out[2]] = undefined;
      waiter.grant(out[0], out[1]);
    }
    return true;
  }

  close() {
    for (const slot of this.engine.close()) {
      const waiter = this.waiters[slot];
      this.waiters[slot] = undefined;
      waiter.fail(fromInfo(native.closedError()));
    }
  }
}

/** A queued acquire: its promise, deadline and abort listener. */
class Waiter {
  constructor(core, key, slot, serial, waitMs, signal) {
    this.core = core;
    this.key = key;
    this.slot = slot;
    this.serial = serial;
    this.signal = signal;
    this.promise = new Promise((resolve, reject) => {
      this.resolve = resolve;
      this.reject = reject;
    });
    core.deadlines.add(this, waitMs);
    if (signal !== undefined) {
      this.onAbort = () => this.cancel(false, fromInfo(native.abortedError()));
      signal.addEventListener('abort', this.onAbort, { once: true });
    }
    core.waiters[slot] = this;
  }

  grant(slot, fence) {
    this.settle();
    this.resolve(new LocalLease(this.core, this.key, slot, fence));
  }

  fail(error) {
    this.settle();
    this.reject(error);
  }

  /** Ends the wait (timed out or aborted) with `error` unless the engine already granted it. */
  cancel(timedOut, error) {
    // false: release() already dequeued this waiter and granted it on this
    // same thread, which also ended its deadline and listener; nothing leaks.
    if (!this.core.engine.cancel(this.slot, this.serial, timedOut)) return;
    this.core.waiters[this.slot] = undefined;
    this.fail(error);
  }

  settle() {
    this.core.deadlines.remove(this);
    this.signal?.removeEventListener('abort', this.onAbort);
  }
}

/** A held local lease. It never expires; it ends with release() or close(). */
class LocalLease {
  #core;
  #key;
  #slot;
  #fence;

  constructor(core, key, slot, fence) {
    this.#core = core;
    this.#key = key;
    this.#slot = slot;
    this.#fence = fence;
  }

  get key() {
    return this.#key;
  }

  /** True until released or the backend closed. */
  get valid() {
    return this.#core.engine.isHeld(this.#slot, this.#fence);
  }

  /** Infinity while held, 0 once invalid. */
  get remainingMs() {
    return this.valid ? Infinity : 0;
  }

  /** Decimal string; compare with BigInt. */
  get fence() {
    return String(this.#fence);
  }

  /** Local leases never expire: resolves to `valid`. */
  renew() {
    return this.valid ? TRUE : FALSE;
  }

  /** True when this call released (and handed on), false when already released. */
  release() {
    return this.#core.release(this.#slot, this.#fence) ? TRUE : FALSE;
  }

  async [Symbol.asyncDispose]() {
    await this.release();
  }
}

/** The LockBackend of a local backend. */
class LocalBackend {
  #core;

  constructor(core) {
    this.#core = core;
  }

  acquire(key, options) {
    return this.#core.acquire(key, options);
  }
}

/**
 * Opens the local backend `name` of validated native options: a driver
 * `{ view, close() }`.
 */
export function openLocal({ name, options }) {
  const out = new Float64Array(3);
  const engine = options.localEngine(name, out);
  if (engine === null) throw takeNativeError();
  const core = new LocalCore(engine, out);
  return {
    view: new LocalBackend(core),
    close: async () => core.close(),
  };
}

// The local driver: a LockBackend view over one native local engine
// (bindings/node/src/local.rs), driven on the JS thread only.
//
// The lock state lives in the native engine. This module keeps only what
// JS must own: the pending promises of queued acquires (indexed by the
// engine's waiter slot), their deadlines and abort listeners, and the lease
// handles (slot + fence) the engine hands out.
//
// Fast path: an uncontended acquire is one native call and returns an
// already-settled promise; release returns a shared settled promise and,
// while no acquire is queued, makes no native call: it can hand on to
// nobody, so it writes the lease to the out-array and the engine ends it at
// the start of its next call (bindings/node/src/local.rs, "Deferred
// release"). No async functions, no closures per call.
//
// Telemetry (slowAcquireMs, slowHoldMs) costs the fast path one
// `hasSubscribers` check per acquire and no clock read while nobody listens
// for slow holds; a wait's length comes from its deadline, so waiting reads
// no extra clock either.
// Tracing (tracing.js) adds one check per acquire, per withLock and per
// release while nobody listens.
import { native } from './native.js';
import { abortedBy, fromInfo, takeNativeError } from './errors.js';
import { asksKind, notAStringKey, readOnce, waitTimeout } from './args.js';
import { askedKinds } from './kinds.js';
import { inspection } from './inspect.js';
import { forcedRelease } from './force-release.js';
import { Deadlines } from './deadlines.js';
import { leaseLost, withLockReleasedAtOnce } from './with-lock.js';
import * as telemetry from './telemetry.js';
import * as tracing from './tracing.js';

// Result codes, flags and out-array cells of the native engine
// (bindings/node/src/protocol.rs).
import {
  ARGUMENT_KEYS,
  DEFERRED_FENCE,
  DEFERRED_SLOT,
  FAILED,
  GRANTED,
  HANDED_ON,
  HANDED_ON_MORE,
  KEYS_AS_ARGUMENTS,
  LABELLED,
  MAY_WAIT,
  MORE_AT,
  MORE_COUNT,
  NOT_HELD,
  QUEUED,
  SEVERAL_KEYS,
} from './protocol.js';
/** A lease's slot once released: no engine slot is negative. */
const RELEASED = -1;

const TRUE = Promise.resolve(true);
const FALSE = Promise.resolve(false);

/** The shared state of one local backend: engine, out-array, waiters. */
class LocalCore {
  constructor(name, engine) {
    this.name = name;
    this.engine = engine;
    /**
     * The numbers each engine call exchanges: [result code, id, id, id], in
     * memory the engine owns (out.rs). Private to this module: nothing
     * outside can detach it.
     */
    this.out = engine.out();
    this.defaultWaitMs = engine.waitTimeoutMs;
    this.slowAcquireMs = engine.slowAcquireMs;
    this.slowHoldMs = engine.slowHoldMs;
    /** The slow-hold channel, unless slow holds are disabled for this backend. */
    this.holdChannel = engine.slowHoldMs === null ? undefined : telemetry.slowHold;
    /** Waiter slot -> Waiter, while queued. */
    this.waiters = [];
    /** How many Waiters are queued: while none, releases are deferred. */
    this.queued = 0;
    this.closed = false;
    /**
     * The fences of leases forceRelease ended whose holders have not released
     * them yet (a backend's fences are unique), undefined while there are
     * none (one check per release): such a release answers false at once,
     * where it would otherwise be deferred as a held lease's.
     */
    this.forced = undefined;
    /** Aborted by close, which ends every lease: withLock sections watch it (with-lock.js). */
    this.closer = new AbortController();
    this.closing = this.closer.signal;
    this.deadlines = new Deadlines((waiter) => waiter.cancel(true));
  }

  /**
   * A promise of the lease; with `leaseNow`, the lease itself when the key
   * is granted at once (withLock's sections), else that promise.
   */
  acquire(key, options, leaseNow) {
    // Closed first: after close() every call is CLOSED, whatever its arguments
    // (the engine also refuses; this only orders the checks).
    if (this.closed) return Promise.reject(fromInfo(native.closedError()));
    let waitMs = this.defaultWaitMs;
    let signal;
    let holder;
    let kind = 0;
    if (options !== undefined) {
      try {
        // Read once, here: a getter that throws rejects the acquire.
        options = readOnce(options);
        waitMs = waitTimeout(options, waitMs);
        if (asksKind(options)) kind = askedKinds(key, options);
      } catch (error) {
        return Promise.reject(error);
      }
      holder = options.holder;
      signal = options.signal;
      if (signal?.aborted) return Promise.reject(abortedBy(signal));
      // A lease labelled by its acquire takes the kinds path, which carries the label.
      if (holder !== undefined && typeof key === 'string') return this.acquireKind(key, options, waitMs, signal, leaseNow, holder);
    }
    if (typeof key !== 'string') {
      if (!Array.isArray(key)) return Promise.reject(notAStringKey());
      // Not yet checked when the options asked for no kind.
      if (kind === 0) {
        try {
          kind = askedKinds(key, options);
        } catch (error) {
          return Promise.reject(error);
        }
      }
    }
    if (kind !== 0) return this.acquireKind(key, options, waitMs, signal, leaseNow, holder);
    if (waitMs === 0) this.engine.tryAcquire(key);
    else this.engine.acquire(key);
    const out = this.out;
    const status = out[0];
    if (status === GRANTED) {
      const lease = new LocalLease(this, key, out[1], out[2], this.holdStart());
      return leaseNow ? lease : Promise.resolve(lease);
    }
    if (status === QUEUED) return new Waiter(this, key, out[1], out[2], waitMs, signal).promise;
    return Promise.reject(takeNativeError());
  }

  /**
   * acquire() of a checked kind beyond a plain lease: shared, counted, or
   * several keys (an array, copied so later changes to the caller's array
   * change nothing; the lease freezes its copy when `keys` is first read).
   */
  acquireKind(key, options, waitMs, signal, leaseNow, holder) {
    const several = Array.isArray(key);
    const keys = several ? key.slice() : key;
    // The kind goes in the out-array: [flags, shared, limit, weight]; a
    // label of the acquire's own is the argument after the keys.
    const asArguments = several && keys.length <= ARGUMENT_KEYS && holder === undefined;
    const out = this.out;
    out[0] =
      (waitMs === 0 ? 0 : MAY_WAIT) | (several ? SEVERAL_KEYS : 0) | (asArguments ? KEYS_AS_ARGUMENTS : 0) | (holder === undefined ? 0 : LABELLED);
    out[1] = options?.mode === 'shared' ? 1 : 0;
    out[2] = options?.limit ?? 1;
    out[3] = options?.weight ?? 1;
    if (asArguments) this.engine.acquireKind(...keys);
    else if (holder === undefined) this.engine.acquireKind(keys);
    else this.engine.acquireKind(keys, holder);
    const status = out[0];
    if (status === GRANTED) {
      const lease = this.lease(keys, out[1], out[2]);
      return leaseNow ? lease : Promise.resolve(lease);
    }
    if (status === QUEUED) return new Waiter(this, keys, out[1], out[2], waitMs, signal).promise;
    return Promise.reject(takeNativeError());
  }

  /** The lease of a grant: of one key (a string) or of several (a frozen array). */
  lease(key, slot, fence) {
    const since = this.holdStart();
    return typeof key === 'string' ? new LocalLease(this, key, slot, fence, since) : new LocalKeysLease(this, key, slot, fence, since);
  }

  /**
   * Releases by handle, granting the key to the next waiter if any. The
   * caller knows the lease was not released before: on an open backend
   * with nobody queued, it is held and nobody takes it over, so the release
   * is deferred (to the engine's next call, which ends an earlier deferred
   * one first: one is deferred at a time).
   */
  release(slot, fence) {
    if (this.forced !== undefined && this.forced.delete(fence)) {
      if (this.forced.size === 0) this.forced = undefined;
      return false;
    }
    const out = this.out;
    if (this.queued === 0 && out[DEFERRED_FENCE] === 0 && !this.closed) {
      out[DEFERRED_SLOT] = slot;
      out[DEFERRED_FENCE] = fence;
      return true;
    }
    out[1] = slot;
    out[2] = fence;
    this.engine.release();
    const status = out[0];
    if (status === NOT_HELD) return false;
    this.grantAll(status);
    return true;
  }

  /**
   * Settles the waiters a release or cancel let in, as `out` reports them
   * (a shared or counted release may let in several: each call reports up
   * to 16, and HANDED_ON_MORE asks nextGrant() for the rest).
   */
  grantAll(status) {
    const out = this.out;
    while (status === HANDED_ON || status === HANDED_ON_MORE) {
      const waiter = this.waiters[out[3]];
      this.waiters[out[3]] = undefined;
      const slot = out[1];
      const fence = out[2];
      // The grants after the first are read out before any is settled:
      // settling may run a telemetry subscriber, whose calls into the
      // engine reuse the out-array.
      let more;
      for (let at = MORE_AT + 3 * (out[MORE_COUNT] - 1); at >= MORE_AT; at -= 3) {
        const next = this.waiters[out[at + 2]];
        this.waiters[out[at + 2]] = undefined;
        next.leaseSlot = out[at];
        next.leaseFence = out[at + 1];
        next.nextGranted = more;
        more = next;
      }
      waiter.grant(slot, fence);
      for (; more !== undefined; more = more.nextGranted) more.grant(more.leaseSlot, more.leaseFence);
      if (status === HANDED_ON) return;
      this.engine.nextGrant();
      status = out[0];
    }
    // Only an internal error of the addon (a caught panic) fails a release.
    if (status === FAILED) throw takeNativeError();
  }

  /** withLock's acquire: the lease when granted at once, else acquire's promise. */
  take(key, options) {
    return this.acquire(key, options, true);
  }

  /** Releases `lease` in the call: whether it released; throws on an internal error. */
  releaseNow(lease) {
    return LocalLease.releaseNow(lease);
  }

  /** When a lease granted now starts being held, if a slow hold could be reported. */
  holdStart() {
    return this.holdChannel?.hasSubscribers ? performance.now() : undefined;
  }

  /** Reports the end of `waiter`'s wait with `error` (undefined: granted). */
  waited(waiter, error) {
    if (!telemetry.waitWatched()) return;
    const waitedMs = performance.now() - (waiter.deadline - waiter.deadlineMs);
    const details = error?.code === 'WAIT_TIMEOUT' ? error.details : undefined;
    telemetry.reportWait(this.name, this.slowAcquireMs, waitedMs, error?.code, details);
  }

  /** Reports a lease held since `since` (a holdStart()) that just ended. */
  held(since) {
    telemetry.reportHold(this.name, this.slowHoldMs, performance.now() - since);
  }

  /** What the engine holds of `key` now (lib/inspect.js); CLOSED once closed. */
  inspect(key) {
    if (typeof key !== 'string') throw notAStringKey();
    const found = this.engine.inspect(key);
    if (found === null) throw takeNativeError();
    return inspection({ ...found, backend: this.name });
  }

  /**
   * Ends every lease that holds `key` by its own release, so the waiters are
   * granted as after that release; each lease is then no longer valid and
   * its holder's release answers false. `{ backend, removed, fence: null }`
   * (lib/force-release.js); CLOSED once closed.
   */
  forceRelease(key) {
    if (typeof key !== 'string') throw notAStringKey();
    const holders = this.engine.holdersOf(key);
    if (holders === null) throw takeNativeError();
    let removed = 0;
    for (let at = 0; at < holders.length; at += 2) {
      // A telemetry subscriber run by an earlier grant may have released a later holder already.
      if (!this.release(holders[at], holders[at + 1])) continue;
      (this.forced ??= new Set()).add(holders[at + 1]);
      removed++;
    }
    telemetry.reportForcedRelease(this.name, removed);
    return forcedRelease({ backend: this.name, removed });
  }

  status() {
    const { held, heldShared, waiting, acquired, timedOut } = this.engine.counts();
    return { driver: 'local', held, heldShared, waiting, acquired, timedOut, lost: 0 };
  }

  close() {
    this.closed = true;
    for (const slot of this.engine.close()) {
      const waiter = this.waiters[slot];
      this.waiters[slot] = undefined;
      waiter.fail(fromInfo(native.closedError()));
    }
    this.closer.abort(leaseLost());
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
    /** While grantAll settles a call's grants after its first: this one's lease, and the next. */
    this.leaseSlot = 0;
    this.leaseFence = 0;
    this.nextGranted = undefined;
    /** Set by the deadlines once this wait is past its deadline. */
    this.expired = false;
    this.promise = new Promise((resolve, reject) => {
      this.resolve = resolve;
      this.reject = reject;
    });
    core.deadlines.add(this, waitMs);
    core.queued++;
    if (signal !== undefined) {
      this.onAbort = () => this.cancel(false, abortedBy(signal));
      signal.addEventListener('abort', this.onAbort, { once: true });
    }
    core.waiters[slot] = this;
  }

  grant(slot, fence) {
    // A wait that is over is never granted: listeners of one signal, and
    // waiters whose deadlines passed together, leave one at a time, and the
    // first to leave can let the others in before their turn to leave. The
    // lease goes back (to the next waiter); a dropped lease would hold its
    // keys for the life of the process.
    if (this.expired || this.signal?.aborted) {
      this.fail(this.expired ? fromInfo(native.waitTimeoutError(this.deadlineMs)) : abortedBy(this.signal));
      this.core.release(slot, fence);
      return;
    }
    this.settle();
    this.core.waited(this, undefined);
    this.resolve(this.core.lease(this.key, slot, fence));
  }

  fail(error) {
    this.settle();
    this.core.waited(this, error);
    this.reject(error);
  }

  /**
   * Ends the wait (timed out, or aborted with `error`) unless the engine
   * already granted it. A timeout's WAIT_TIMEOUT names the holders of the
   * key that kept it out, read once the waiter has left.
   */
  cancel(timedOut, error) {
    // false: release() already dequeued this waiter and granted it on this
    // same thread, which also ended its deadline and listener; nothing leaks.
    const core = this.core;
    const cancelled = core.engine.cancel(this.slot, this.serial, timedOut);
    // Its table entry goes first: settling the grants below runs telemetry
    // subscribers, whose acquires may queue in the slot it freed.
    if (cancelled) core.waiters[this.slot] = undefined;
    // Leaving can let waiters behind this one in (readers queued behind a
    // writer that gave up): settle them before anything else runs JS.
    core.grantAll(core.out[0]);
    if (cancelled) this.fail(error ?? fromInfo(core.engine.timedOut(this.deadlineMs, this.key)));
  }

  settle() {
    this.core.queued--;
    this.core.deadlines.remove(this);
    this.signal?.removeEventListener('abort', this.onAbort);
  }
}

/** A held local lease. It never expires; it ends with release() or close(). */
class LocalLease {
  #core;
  #key;
  /**
   * The lease's engine slot, RELEASED once release() ran: later releases
   * answer false with no engine call (a deferred release relies on it, see
   * LocalCore.release), and isHeld() of RELEASED names no lease.
   */
  #slot;
  #fence;
  /** performance.now() at the grant, only while slow holds are reported. */
  #since;

  constructor(core, key, slot, fence, since) {
    this.#core = core;
    this.#key = key;
    this.#slot = slot;
    this.#fence = fence;
    this.#since = since;
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
    let released = false;
    try {
      const slot = this.#slot;
      if (slot !== RELEASED) {
        this.#slot = RELEASED;
        released = this.#core.release(slot, this.#fence);
      }
    } catch (error) {
      return Promise.reject(error);
    }
    if (tracing.holdsOpen()) tracing.holdEnded(this, released);
    if (!released) return FALSE;
    if (this.#since !== undefined) this.#core.held(this.#since);
    return TRUE;
  }

  /**
   * Releases `lease` in the call (withLock's sections): release() with its
   * outcome as a boolean (false: its holder released it already), and
   * thrown: LEASE_LOST when something else ended it (close, forceRelease),
   * an internal error. Written out rather than shared with release(): a
   * call through a helper inside release()'s try costs the uncontended
   * acquire + release about 2% in instructions.
   */
  static releaseNow(lease) {
    let released = false;
    const slot = lease.#slot;
    if (slot !== RELEASED) {
      lease.#slot = RELEASED;
      released = lease.#core.release(slot, lease.#fence);
    }
    if (tracing.holdsOpen()) tracing.holdEnded(lease, released);
    if (!released) {
      if (slot !== RELEASED) throw leaseLost();
      return false;
    }
    if (lease.#since !== undefined) lease.#core.held(lease.#since);
    return true;
  }

  async [Symbol.asyncDispose]() {
    await this.release();
  }
}

/** A local lease over several keys: one grant, one fence for all of them. */
class LocalKeysLease extends LocalLease {
  #keys;

  constructor(core, keys, slot, fence, since) {
    super(core, keys[0], slot, fence, since);
    this.#keys = keys;
  }

  /**
   * Every key, in the order the acquire gave them (frozen). Frozen here,
   * not at the grant: freezing costs an uncontended 4-key pair about 3%,
   * and only this getter hands the copy out.
   */
  get keys() {
    return Object.freeze(this.#keys);
  }

  /** Each key's fence, as decimal strings (one local grant takes one fence for all its keys). */
  get fences() {
    const fence = this.fence;
    return new Map(this.#keys.map((key) => [key, fence]));
  }
}

// Settling a promise with a lease first reads `lease.then` (a thenable is
// followed, not fulfilled). With no answer on the prototype, that read walks
// the lease's fields, its class and Object.prototype: about 4% of an
// uncontended acquire + release. Answering it here stops the walk; a lease is
// still no thenable (`then` is undefined).
Object.defineProperty(LocalLease.prototype, 'then', { value: undefined });

/** The LockBackend of a local backend. */
class LocalBackend {
  #core;
  /** acquire and withLock, traced (tracing.js). */
  #traced;

  constructor(core) {
    this.#core = core;
    this.#traced = tracing.tracedLocal(core.name, core, withLockReleasedAtOnce);
  }

  acquire(key, options) {
    if (tracing.acquireTraced()) return this.#traced.acquire(key, options);
    return this.#core.acquire(key, options);
  }

  /** Acquires, runs `fn(lease, signal)`, releases in all cases (see with-lock.js). */
  withLock(key, fn, options) {
    if (tracing.withLockTraced()) return this.#traced.withLock(key, fn, options);
    return withLockReleasedAtOnce(this.#core, key, fn, options);
  }

  /** What the backend holds of `key` now, read at once (lib/inspect.js). */
  async inspect(key) {
    return this.#core.inspect(key);
  }

  /** Ends every lease that holds `key` now, as their releases would (lib/force-release.js). */
  async forceRelease(key) {
    return this.#core.forceRelease(key);
  }

  /** Counts only: `{ driver, held, waiting, acquired, timedOut, lost }`. */
  status() {
    return this.#core.status();
  }
}

/**
 * Opens the local backend `name` of validated native options: a driver
 * `{ view, close() }`.
 */
export function openLocal({ name, options }) {
  const engine = options.localEngine(name);
  if (engine === null) throw takeNativeError();
  const core = new LocalCore(name, engine);
  return {
    view: new LocalBackend(core),
    close: async () => core.close(),
  };
}

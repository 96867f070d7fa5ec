// The store drivers (redis, postgres, mysql): LockBackend views over the core's backends of
// drivers whose leases live in a store, whatever the store. Every operation
// is a promise the addon settles on this thread; this module only converts
// arguments and results.
import { native } from './native.js';
import { abortedBy, fromInfo, takeNativeError } from './errors.js';
import { asksKind, notAStringKey, readOnce, waitTimeout } from './args.js';
import { askedKinds } from './kinds.js';

/** The `kind` of a plain acquire with a holder label of its own (no kinds.js flag). */
const LABELLED = 8;
import { inspection } from './inspect.js';
import { forcedRelease } from './force-release.js';
import { withLock } from './with-lock.js';
import { forwardTelemetry } from './telemetry.js';
import * as tracing from './tracing.js';
import { libuvLoop } from './platform.js';

/**
 * A native result is either the value or an ErrorInfo (which has a code),
 * raised by a backend of `driver` (which names the HTTP answer of an outage).
 */
function unwrap(result, driver) {
  if (result !== null && typeof result === 'object' && typeof result.code === 'string' && typeof result.message === 'string') {
    throw fromInfo(result, driver);
  }
  return result;
}

const FALSE = () => false;

/** A fence as the addon gives it: a number while exact (below 2^53), else its decimal string. */
function fenceString(fence) {
  return typeof fence === 'string' ? fence : String(fence);
}

/**
 * What the leases of one backend share: the backend's calls (release, drop),
 * the addon's backend (renewals, validity) and the registry that gives back a
 * lease dropped unreleased.
 */
class LeaseOwner {
  constructor(calls, native, driver) {
    this.calls = calls;
    this.native = native;
    /** A native result of this backend's, or its error. */
    this.unwrap = (result) => unwrap(result, driver);
    // A lease dropped unreleased is released when collected. release() takes
    // its entry off first, so a released lease leaves nothing for the
    // collector (the addon's table, not a native handle, holds the lease: see
    // bindings/node/src/lease.rs).
    this.unreleased = new FinalizationRegistry((id) => calls.drop(id));
    /** The id of the last lease granted: ids count up and never come back. */
    this.lastId = 0;
  }
}

/** A lease held through a store (Redis, PostgreSQL). */
class StoreLease {
  /** Its id in the addon's table of the backend's leases. */
  #id;
  /** The backend's LeaseOwner. */
  #owner;
  #key;
  /** As the addon gave it until first read, then its string. */
  #fence;
  /** The first release()'s promise, once called. */
  #releasing;

  constructor(id, fence, owner, key) {
    this.#id = id;
    this.#fence = fence;
    this.#owner = owner;
    this.#key = key;
    owner.unreleased.register(this, id, this);
  }

  get key() {
    return this.#key;
  }

  /** A conservative local estimate: false after expiry, release or an unknown outcome. */
  get valid() {
    return this.#owner.native.leaseValid(this.#id);
  }

  /** The lease time left by that estimate; 0 when invalid. */
  get remainingMs() {
    return this.#owner.native.leaseRemainingMs(this.#id);
  }

  /** Decimal string (about 1.8e15: microseconds of the server clock); grows per key, never repeats. Compare with BigInt. */
  get fence() {
    return (this.#fence = fenceString(this.#fence));
  }

  /** Extends the TTL after comparing the owner token; false when no longer ours. */
  renew() {
    return this.#owner.native.leaseRenew(this.#id).then(this.#owner.unwrap);
  }

  /**
   * True when released, false when already released; LEASE_LOST when
   * another owner had it. A call while an earlier one is under way answers
   * false once that one has settled: until then the lease may be held.
   */
  release() {
    if (this.#releasing !== undefined) return this.#releasing.then(FALSE, FALSE);
    const owner = this.#owner;
    owner.unreleased.unregister(this);
    const releasing = owner.calls.release(this.#id).then(owner.unwrap);
    this.#releasing = tracing.holdsOpen() ? tracing.holdEnding(this, releasing) : releasing;
    return this.#releasing;
  }

  async [Symbol.asyncDispose]() {
    await this.release();
  }

  /**
   * The core's renewals of `lease` (with `renew` false, its watch alone)
   * while a withLock section runs (see with-lock.js), or undefined when `lease` is no store lease or is
   * released. Found from the lease, so a section keeps them when a
   * wrapBackend hands out the store lease.
   */
  static keepAlive(lease, renew) {
    return typeof lease === 'object' && lease !== null && #id in lease ? (lease.#owner.native.keepAlive(lease.#id, renew) ?? undefined) : undefined;
  }
}

/** A store lease over several keys: a fence per key. */
class StoreKeysLease extends StoreLease {
  #keys;
  /** Each key's fence, as the addon gave them. */
  #fences;

  constructor(id, fences, owner, keys) {
    super(id, fences[0], owner, keys[0]);
    this.#keys = keys;
    this.#fences = fences;
  }

  /** Every key, in the order the acquire gave them (frozen). */
  get keys() {
    return this.#keys;
  }

  /** Each key's fence, as decimal strings; each grows per key, never repeats. */
  get fences() {
    const fences = this.#fences;
    return new Map(this.#keys.map((key, index) => [key, fenceString(fences[index])]));
  }
}

/** The core's renewals of a store lease, undefined for any other lease. */
export const storeKeepAlive = StoreLease.keepAlive;

/** The LockBackend of a store driver's backend. */
class StoreBackend {
  #native;
  /** The group's state: `closed` once its close() began. */
  #group;
  /** `{ acquire, release, drop }`: the calls of every lease, made without napi-rs' class machinery (store_calls.rs). */
  #calls;
  /** What this backend's leases share (LeaseOwner). */
  #owner;
  /** The backend's default wait (an option: it never changes). */
  #waitTimeoutMs;
  /** acquire and withLock, traced (tracing.js). */
  #traced;

  // The group's state and the default wait are read here, not asked of the
  // addon on every acquire: each such getter was a Node-API call through
  // napi-rs' class machinery, about a tenth of a pair's instructions.
  constructor(handle, name, driver, group) {
    this.#native = handle;
    this.#calls = handle.calls();
    this.#owner = new LeaseOwner(this.#calls, handle, driver);
    this.#group = group;
    this.#waitTimeoutMs = handle.waitTimeoutMs;
    this.#traced = tracing.tracedCalls(
      { backend: name, driver, seesReleases: true },
      (key, options) => this.#take(key, options),
      (key, fn, options) => withLock(this, key, fn, options, StoreLease.keepAlive),
    );
  }

  acquire(key, options) {
    if (tracing.acquireTraced()) return this.#traced.acquire(key, options);
    return this.#take(key, options);
  }

  /** acquire(), untraced. */
  async #take(key, options) {
    // Closed first: after close() every call is CLOSED, whatever its arguments
    // (the core refuses too; this only orders the checks).
    if (this.#group.closed) throw fromInfo(native.closedError());
    let waitMs = this.#waitTimeoutMs;
    let signal;
    let kind = 0;
    if (options !== undefined) {
      options = readOnce(options);
      waitMs = waitTimeout(options, waitMs);
      if (asksKind(options)) kind = askedKinds(key, options);
      signal = options.signal;
      if (signal?.aborted) throw abortedBy(signal);
    }
    if (typeof key !== 'string') {
      if (!Array.isArray(key)) throw notAStringKey();
      // Not yet checked when the options asked for no kind.
      if (kind === 0) kind = askedKinds(key, options);
    }
    // Several keys are copied, so later changes to the caller's array change nothing.
    if (kind !== 0) key = Array.isArray(key) ? Object.freeze(Array.from(key)) : key;
    // A lease labelled by its acquire takes the kinds path, which carries the label.
    else if (options?.holder !== undefined) kind = LABELLED;
    const id = ++this.#owner.lastId;
    if (signal === undefined) return this.#lease(id, this.#owner.unwrap(await this.#acquire(key, kind, options, waitMs, id)), key, kind);
    const abort = native.newAbort();
    const onAbort = () => native.abort(abort);
    signal.addEventListener('abort', onAbort, { once: true });
    try {
      const result = await this.#acquire(key, kind, options, waitMs, id, abort);
      // The core knows nothing of the JS signal: its ABORTED gets the reason here.
      if (result?.code === 'ABORTED') throw abortedBy(signal);
      return this.#lease(id, this.#owner.unwrap(result), key, kind);
    } finally {
      signal.removeEventListener('abort', onAbort);
    }
  }

  /**
   * The native acquire of lease `id`: plain (`kind` 0), whose promise carries
   * the fence, or of a checked kind or a label of its own (LABELLED), whose
   * promise carries each key's fence.
   */
  #acquire(key, kind, options, waitMs, id, abort) {
    if (kind === 0) return abort === undefined ? this.#calls.acquire(key, waitMs, id) : this.#calls.acquire(key, waitMs, id, abort);
    const many = typeof key !== 'string';
    const { mode, limit = 1, weight = 1, holder } = options ?? {};
    return this.#native.acquireKind(many ? key : [key], many, mode === 'shared', limit, weight, waitMs, id, abort, holder);
  }

  /** Lease `id`, granted with `fence` (`fences` of a kind): of one key (a string) or of several (a frozen array). */
  #lease(id, fence, key, kind) {
    if (typeof key !== 'string') return new StoreKeysLease(id, fence, this.#owner, key);
    return new StoreLease(id, kind === 0 ? fence : fence[0], this.#owner, key);
  }

  /**
   * Acquires, runs `fn(lease, signal)`, releases in all cases; the lease is
   * renewed on the driver's thread meanwhile (see with-lock.js).
   */
  withLock(key, fn, options) {
    if (tracing.withLockTraced()) return this.#traced.withLock(key, fn, options);
    return withLock(this, key, fn, options, StoreLease.keepAlive);
  }

  /** What the store holds of `key` now, read at once (lib/inspect.js). */
  async inspect(key) {
    if (typeof key !== 'string') throw notAStringKey();
    if (this.#group.closed) throw fromInfo(native.closedError());
    return inspection(this.#owner.unwrap(await this.#native.inspect(key)));
  }

  /** Removes every holder of `key` and raises its fence (lib/force-release.js). */
  async forceRelease(key) {
    if (typeof key !== 'string') throw notAStringKey();
    if (this.#group.closed) throw fromInfo(native.closedError());
    return forcedRelease(this.#owner.unwrap(await this.#native.forceRelease(key)));
  }

  /**
   * Counts and the store connection's health, under the driver's name:
   * `{ driver, held, heldShared, waiting, acquired, timedOut, lost, redis }`
   * `{ ..., postgres }` or `{ ..., mysql }`.
   */
  status() {
    const { redis, postgres, mysql, ...counts } = this.#native.status();
    if (redis != null) return { ...counts, redis: redisHealth(redis) };
    return postgres != null ? { ...counts, postgres: postgresHealth(postgres) } : { ...counts, mysql: mysqlHealth(mysql) };
  }
}

/** The redis health of the addon's status, with every field present (`null` when not known). */
function redisHealth({ connected, subscribed, lastError = null, lastProbeAt = null }) {
  return { connected, subscribed, lastError, lastProbeAt };
}

/** The postgres health of the addon's status, with every field present (`null` when not known). */
function postgresHealth({ connected, listening, lastError = null, lastAnswerAt = null }) {
  return { connected, listening, lastError, lastAnswerAt };
}

/** The mysql health of the addon's status, with every field present (`null` when not known). */
function mysqlHealth({ connected, polling, lastError = null, lastAnswerAt = null }) {
  return { connected, polling, lastError, lastAnswerAt };
}

/** Hands a native log record `{ level, backend, code, message }` to `logger`. */
export function logTo(logger, { level, backend, code, message }) {
  const log = level === 'warn' ? (logger.warn ?? logger.error) : logger.error;
  log.call(logger, { backend, code }, message);
}

/**
 * The store drivers' part of one provider: the core opens every such backend of the
 * options at once (one runtime, one connection per configured connection).
 */
export class StoreGroup {
  #native;
  #logger;
  #closing;
  /** What its backends read: `closed` is set when close() begins, as the core's backends start closing. */
  #state = { closed: false };

  constructor(options, logger) {
    this.#logger = logger;
    this.#native = options.openStores(libuvLoop, () => this.#flushLogs(), forwardTelemetry);
    if (this.#native === null) throw takeNativeError();
  }

  /** The driver `{ view, close() }` of backend `name`, of driver `driver`. */
  driver(name, driver) {
    const backend = this.#native.backend(name);
    if (backend === null) throw takeNativeError();
    return { view: new StoreBackend(backend, name, driver, this.#state), close: () => this.close() };
  }

  /**
   * Closes every backend of the group once; later calls share the first close. It
   * resolves after the close's log records (CLEANUP_FAILED, ...) reached the
   * logger, so a process may exit right after.
   */
  close() {
    this.#state.closed = true;
    this.#closing ??= this.#native.close().then((result) => this.#log(unwrap(result)));
    return this.#closing;
  }

  #flushLogs() {
    // A wake-up may come before the constructor stored the handle.
    if (this.#native) this.#log(this.#native.takeLogs());
  }

  #log(entries) {
    for (const entry of entries) logTo(this.#logger, entry);
  }
}

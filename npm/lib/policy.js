// The policy driver: one backend over the provider's other backends, a
// rule per key. The core decides (lib: NativePolicy, src/policy/router.rs):
// which rule a key falls under, which member to try next, whether a failure
// moves the acquire on (only a member's unavailability does, before a
// grant), what to count and report. This module only runs each try on the
// member's own view, so every kind, withLock's renewals and the member's
// tracing are the member's.
import { abortedBy, fromInfo, invalidArgument, LockError, takeNativeError } from './errors.js';
import { native } from './native.js';
import { fieldsOnce, notAStringKey, readOnce, waitTimeout } from './args.js';
import { forwardTelemetry } from './telemetry.js';
import { logTo } from './store.js';
import { forcedRelease } from './force-release.js';

/**
 * Ends a lease's placement (its keys tried on its member only) when the lease
 * is collected unreleased, as the Rust surface does when one is dropped.
 */
const placements = new FinalizationRegistry((leave) => leave());

/** A member's lease, with which member served it: it stays on that member for its whole life. */
class PolicyLease {
  #lease;
  #served;
  #counts;
  #leave;

  constructor(lease, served, counts, leave) {
    this.#lease = lease;
    this.#served = served;
    this.#counts = counts;
    this.#leave = leave;
    if (leave !== undefined) placements.register(this, leave, this);
  }

  /** `{ backend, driver, tier, fenced }`: the member that granted it (frozen). Its fence compares only with that member's. */
  get served() {
    return this.#served;
  }

  get key() {
    return this.#lease.key;
  }

  get keys() {
    return this.#lease.keys;
  }

  get fences() {
    return this.#lease.fences;
  }

  get valid() {
    return this.#lease.valid;
  }

  get remainingMs() {
    return this.#lease.remainingMs;
  }

  get fence() {
    return this.#lease.fence;
  }

  /** Renews it on its member. */
  renew() {
    return this.#lease.renew();
  }

  /** Releases it on its member. */
  async release() {
    let released;
    try {
      released = await this.#lease.release();
    } catch (error) {
      // Lost: held no more. After an unknown outcome it may still hold its keys until it expires.
      if (error instanceof LockError && error.code === 'LEASE_LOST') this.#left();
      throw error;
    }
    this.#left();
    if (released === true && this.#counts !== undefined) {
      this.#counts.held -= 1;
      this.#counts = undefined;
    }
    return released;
  }

  /** Its keys may go to any member again. */
  #left() {
    if (this.#leave === undefined) return;
    placements.unregister(this);
    this.#leave();
    this.#leave = undefined;
  }

  async [Symbol.asyncDispose]() {
    await this.release();
  }
}

/** `begin` answers `id * MEMBERS + member + 1` (bindings/node/src/policy.rs): one call, not two. */
const MEMBERS = 65536;
/** `nextMember`'s answer (and `begin`'s `member`) when the acquire pauses for `pauseMs`, then asks again. */
const PAUSED = -2;

/** The LockBackend of a policy backend. */
class PolicyBackend {
  #native;
  #waitTimeoutMs;
  #members;
  /** Per member, the frozen `lease.served` of its leases: `{ backend, driver, tier, fenced }`. */
  #served;
  #state;
  #counts = { held: 0, waiting: 0, acquired: 0, timedOut: 0 };

  constructor(handle, members, state) {
    this.#native = handle;
    this.#waitTimeoutMs = handle.waitTimeoutMs;
    this.#members = members;
    this.#served = handle.members().map((member) => Object.freeze(member));
    this.#state = state;
  }

  /** Acquires `key` (or an array of keys, as one lease) on the first member its rule allows that can serve. */
  acquire(key, options) {
    return this.#serve(key, options, options, (view, wait, entered) => view.acquire(key, wait).then((lease) => entered(lease, true)));
  }

  /**
   * Runs `fn(lease, signal)` under `key` on the member that serves it, with
   * that member's withLock (its renewals, its loss): a try moves on to the
   * next member only when the member could not grant, never once fn ran.
   */
  withLock(key, fn, options) {
    if (typeof fn !== 'function') return Promise.reject(invalidArgument('withLock needs a function: withLock(key, fn, options?)'));
    // Read once: each member's withLock gets what the wait was taken from.
    try {
      options = fieldsOnce(options);
    } catch (error) {
      return Promise.reject(error);
    }
    return this.#serve(key, options, waitOptions(options), (view, wait, entered) =>
      view.withLock(key, (lease, signal) => fn(entered(lease, false), signal), wait),
    );
  }

  /**
   * One acquire through the rule of `key`: `run(view, options, entered)` tries a
   * member with `options` (the caller's, its wait what is left of it);
   * `entered(lease, kept)`, called with the member's lease when it granted,
   * ends the acquire and answers the policy's lease; `kept`: the caller
   * releases it (else it ends with `run`, as withLock's does).
   */
  async #serve(key, options, acquireOptions, run) {
    if (this.#state.closed) throw fromInfo(native.closedError());
    // An acquire's options are read once: each member gets what was checked.
    if (acquireOptions === options) options = acquireOptions = readOnce(options);
    let keys;
    if (typeof key === 'string') keys = [key];
    else if (Array.isArray(key) && key.length > 0 && key.every((k) => typeof k === 'string')) keys = key;
    else throw Array.isArray(key) ? invalidArgument('keys must be a non-empty array of strings') : notAStringKey();
    const policy = this.#native;
    const waitMs = acquireOptions === undefined ? this.#waitTimeoutMs : waitTimeout(acquireOptions, this.#waitTimeoutMs);
    const begun = policy.begin(keys);
    if (begun === -1) throw takeNativeError();
    const id = Math.floor(begun / MEMBERS);
    const deadline = performance.now() + waitMs;
    const counts = this.#counts;
    counts.waiting += 1;
    // withLock's signal is in its options; its acquire options keep only the wait.
    const signal = typeof options === 'object' && options !== null ? options.signal : undefined;
    try {
      let member = (begun % MEMBERS) - 1;
      if (member === MEMBERS - 2) member = PAUSED;
      for (; member !== -1; member = policy.nextMember(id)) {
        const left = Math.max(0, Math.min(waitMs, Math.ceil(deadline - performance.now())));
        if (member === PAUSED) {
          // This process's tries of a key on a member that is down: the core looks again once they may have ended.
          if (left === 0 && !signal?.aborted) break;
          try {
            await pause(Math.min(policy.pauseMs, left), signal);
          } catch (error) {
            policy.abandon(id);
            throw error;
          }
          continue;
        }
        let granted = false;
        let placement;
        let kept = false;
        const entered = (lease, keep) => {
          granted = true;
          kept = keep;
          placement = policy.served(id, member);
          counts.acquired += 1;
          counts.held += 1;
          const leave = keep ? () => policy.left(placement) : undefined;
          return new PolicyLease(lease, this.#served[member], counts, leave);
        };
        try {
          return await run(this.#members[member], { ...options, waitTimeoutMs: left }, entered);
        } catch (error) {
          if (granted) throw error;
          const code = error instanceof LockError ? error.code : '';
          if (code === 'WAIT_TIMEOUT') counts.timedOut += 1;
          const lockError = error instanceof LockError;
          if (!policy.failed(id, member, code, lockError ? error.message : '', lockError ? error.details : undefined)) throw error;
        } finally {
          // withLock's lease ended with its section.
          if (granted && !kept) policy.left(placement);
        }
      }
      throw fromInfo(policy.refusal(id));
    } finally {
      counts.waiting -= 1;
    }
  }

  /** `{ rule, pattern, backends, minTier, onUnavailable, last }` of `key`: its rule, and which member served it last (with `servedAtMs`). */
  keyStatus(key) {
    if (typeof key !== 'string') throw notAStringKey();
    const status = this.#native.keyStatus(key);
    return { ...status, pattern: status.pattern ?? null, last: status.last ?? null };
  }

  /**
   * What the members its rule allows hold of `key`: each is read, and the
   * core chooses which answers (policy::inspection_choice): the first where
   * it is held, else the first failure, else the first where acquires wait,
   * else the first.
   */
  async inspect(key) {
    if (typeof key !== 'string') throw notAStringKey();
    const answers = await Promise.allSettled(this.#allowed(key).map((member) => member.inspect(key)));
    const chosen = answers[native.inspectionChoice(answers.map(({ status, value }) => (status === 'fulfilled' ? (value.held > 0 ? 2 : value.waiting > 0 ? 1 : 0) : null)))];
    if (chosen.status === 'rejected') throw chosen.reason;
    return chosen.value;
  }

  /**
   * Breaks `key` on every member its rule allows, each whatever the others
   * answered: the first rejection, else their answers as the core combines
   * them (policy::forced_release_of: the holders removed in all, the highest
   * fence, the first member that had a holder).
   */
  async forceRelease(key) {
    if (typeof key !== 'string') throw notAStringKey();
    const answers = await Promise.allSettled(this.#allowed(key).map((member) => member.forceRelease(key)));
    const rejected = answers.find(({ status }) => status === 'rejected');
    if (rejected !== undefined) throw rejected.reason;
    const combined = native.forcedReleaseOf(answers.map(({ value }) => value));
    if (combined === null) throw takeNativeError();
    return forcedRelease(combined);
  }

  /** The members the rule for `key` allows, preferred first. */
  #allowed(key) {
    const member = (name) => this.#members[this.#served.findIndex((served) => served.backend === name)];
    return this.#native.keyStatus(key).backends.map(({ backend }) => member(backend));
  }

  /** Counts: `{ driver: 'policy', held, heldShared, waiting, acquired, timedOut, lost, members }`; `members`: each member's served, fallbacks, refusals and whether it is skipped now. */
  status() {
    const { held, waiting, acquired, timedOut } = this.#counts;
    return { driver: 'policy', held, heldShared: 0, waiting, acquired, timedOut, lost: 0, members: this.#native.memberStatus() };
  }
}

/** Resolves after `ms`, or rejects ABORTED once `signal` aborts, if that comes first. */
function pause(ms, signal) {
  if (signal?.aborted) return Promise.reject(abortedBy(signal));
  return new Promise((resolve, reject) => {
    const onAbort = () => {
      clearTimeout(timer);
      reject(abortedBy(signal));
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

/** The acquire options among withLock's (its wait, for the policy to share out); the member checks the rest. */
function waitOptions(options) {
  if (options === undefined) return undefined;
  if (typeof options !== 'object' || options === null) return options;
  return options.waitTimeoutMs === undefined ? {} : { waitTimeoutMs: options.waitTimeoutMs };
}

/**
 * The driver `{ view, close() }` of policy backend `name`; `member(name)`
 * is the view the provider opened for each member backend.
 */
export function openPolicy({ name, options, shared, logger }) {
  const handle = options.openPolicy(name, (entry) => logTo(logger, entry), forwardTelemetry);
  if (handle === null) throw takeNativeError();
  const state = { closed: false };
  const members = handle.members().map((member) => shared.view(member.backend));
  return {
    view: new PolicyBackend(handle, members, state),
    // Its members are closed as backends of the provider.
    close: async () => {
      state.closed = true;
    },
  };
}

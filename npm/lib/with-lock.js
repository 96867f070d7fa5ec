// withLock(key, fn, options): acquire, run a section, release in all cases.
// The order of the core's Backend::with_lock, for sections written in JS.
//
// Two forms: withLock() for leases the core renews and whose release is a
// round trip (redis), and withLockReleasedAtOnce() for leases with nothing
// to renew whose release settles in the call (local). The second awaits
// nothing of its own: fn runs in the reaction to the acquire and, unless it
// returns a thenable, the release follows in the same job. The caller of an
// uncontended local section that returns a plain value resumes after two
// microtask jobs, where three awaits and an async return took four.
//
// Redis leases are renewed by the core on the redis driver's thread (not by
// JS timers, which a blocked event loop would delay). The loss of the lease
// aborts the signal the section gets at once, and the call then rejects with
// LEASE_LOST even when the section succeeded: its work may have overlapped
// another holder's.
import { native } from './native.js';
import { acquireFields } from './args.js';
import { fromInfo, invalidArgument, LockError } from './errors.js';
import { holdEnded, holdsOpen, holdsWatched, sectionHolds } from './tracing.js';

/** The signal of a section nothing can abort. */
const NEVER = new AbortController().signal;

const OPTION_NAMES = new Set(['signal', 'waitTimeoutMs', 'mode', 'limit', 'weight', 'holder', 'autoRenew']);

const NOT_A_FUNCTION = 'withLock needs a function: withLock(key, fn, options?)';

/**
 * Checks withLock's options: INVALID_ARGUMENT for anything but an object of
 * acquire options and `autoRenew` (a boolean, or undefined); answers
 * `autoRenew`, read once.
 */
function checkSectionOptions(options) {
  if (typeof options !== 'object' || options === null) {
    throw invalidArgument('withLock options must be an object: { signal?, waitTimeoutMs?, mode?, limit?, weight?, holder?, autoRenew? }');
  }
  let renewField = false;
  for (const name in options) {
    if (!OPTION_NAMES.has(name)) throw invalidArgument('withLock options accept only signal, waitTimeoutMs, mode, limit, weight, holder and autoRenew');
    if (name === 'autoRenew') renewField = true;
  }
  // Read once: what is checked is what the section uses.
  const autoRenew = renewField ? options.autoRenew : undefined;
  if (autoRenew !== undefined && typeof autoRenew !== 'boolean') throw invalidArgument('autoRenew must be a boolean');
  return autoRenew;
}

/**
 * Splits the options into acquire options (each read once, only the fields
 * given: args.js acquireFields) and `autoRenew`; INVALID_ARGUMENT for
 * anything else.
 */
function sectionOptions(options) {
  if (options === undefined) return { acquire: undefined, autoRenew: true };
  const autoRenew = checkSectionOptions(options);
  return { acquire: acquireFields(options), autoRenew: autoRenew ?? true };
}

export function leaseLost(cause) {
  const error = fromInfo(native.leaseLostError());
  if (cause !== undefined) error.cause = cause;
  return error;
}

/**
 * The keepAlive of withLock for leases that nothing but close ends (file):
 * no renewals, the lease lost once `closing` (the backend's signal, aborted
 * by close) aborts.
 */
export function closeWatch(closing) {
  return () => new CloseWatch(closing);
}

class CloseWatch {
  #closing;
  #onClose;

  constructor(closing) {
    this.#closing = closing;
  }

  watch() {
    if (this.#closing.aborted) return Promise.resolve(true);
    return new Promise((resolve) => {
      this.#onClose = () => resolve(true);
      this.#closing.addEventListener('abort', this.#onClose, { once: true });
    });
  }

  /** True when the backend closed during the section; removes the listener (the backend outlives its sections). */
  stop() {
    if (this.#onClose !== undefined) this.#closing.removeEventListener('abort', this.#onClose);
    return this.#closing.aborted;
  }
}

/**
 * Runs `fn(lease, signal)` holding `key` of `backend`. `keepAlive(lease,
 * renew)` starts watching the lease (and, with `renew`, its renewals: the
 * core's, for store leases): `{ watch(): Promise<boolean>, stop(): boolean }`,
 * both true when the lease was lost (its end without renewals, a takeover,
 * the backend closing); it returns undefined for a lease nothing can take.
 *
 * The section's signal aborts when the lease is lost (reason: LEASE_LOST)
 * and when the caller's `signal` aborts (its reason); a caller's abort after
 * the acquire does not end the section by itself: `fn` decides.
 */
export async function withLock(backend, key, fn, options, keepAlive) {
  if (typeof fn !== 'function') throw invalidArgument(NOT_A_FUNCTION);
  const { acquire, autoRenew } = sectionOptions(options);
  const lease = await backend.acquire(key, acquire);
  // An app driver's lease: the section is the hold the library sees (tracing.js).
  if (holdsWatched()) sectionHolds(lease);
  const callerSignal = acquire?.signal;
  let renewals;
  let lost;
  let output;
  let failure;
  let failed = false;
  try {
    let signal = callerSignal ?? NEVER;
    if (keepAlive !== undefined) renewals = keepAlive(lease, autoRenew);
    if (renewals !== undefined) {
      lost = new AbortController();
      // The watch never rejects; the handler only guards against a bug there
      // turning into an unhandled rejection.
      renewals.watch().then((gone) => gone && lost.abort(leaseLost()), () => {});
      signal = callerSignal === undefined ? lost.signal : AbortSignal.any([callerSignal, lost.signal]);
    }
    output = await fn(lease, signal);
  } catch (error) {
    failed = true;
    failure = error;
  }
  const wasLost = (renewals?.stop() ?? false) || (lost?.signal.aborted ?? false);
  if (wasLost) {
    // The lease is gone: the caller learns it now, not after a release that
    // may stall for commandTimeoutMs on the Redis that cost the lease. The
    // release still runs (it clears the key if it is somehow still ours);
    // its outcome changes nothing.
    const error = leaseLost(failed ? failure : undefined);
    if (holdsOpen()) holdEnded(lease, false, error);
    lease.release().catch(() => {});
    throw error;
  }
  try {
    const released = await lease.release();
    if (holdsOpen()) holdEnded(lease, released === true);
  } catch (error) {
    if (holdsOpen()) holdEnded(lease, false, error);
    // A release that finds the lease lost is LEASE_LOST either way (the
    // section's error as its cause): the caller must learn of a possible
    // overlap, whenever the loss was found. Otherwise the section's own
    // error wins over a failed release.
    if (failed && error instanceof LockError && error.code === 'LEASE_LOST') throw leaseLost(failure);
    if (!failed) throw error;
  }
  if (failed) throw failure;
  return output;
}

/** Settled: the hop before a section whose lease was granted at once. */
const NOW = Promise.resolve();

/**
 * withLock over a driver whose leases need no renewal and release at once
 * (local), with the contract of withLock above: `fn` never runs inside this
 * call, the lease is released however `fn` ends, the section's error wins
 * over a failed release, and it rejects, never throws. `source.take(key,
 * acquireOptions)` is acquire returning the lease itself when granted at
 * once (else acquire's promise); `source.releaseNow(lease)` releases in the
 * call (whether it did), throwing on failure (LEASE_LOST when something else
 * ended the lease, a forced release or close); `source.closing` is a signal
 * aborted when the backend closes, which ends every lease: the section's
 * signal aborts with it, and a section whose lease it ended rejects with
 * LEASE_LOST.
 */
export function withLockReleasedAtOnce(source, key, fn, options) {
  if (typeof fn !== 'function') return Promise.reject(invalidArgument(NOT_A_FUNCTION));
  let acquire;
  if (options !== undefined) {
    try {
      // autoRenew means nothing to a lease that is never renewed.
      checkSectionOptions(options);
      acquire = acquireFields(options);
    } catch (error) {
      return Promise.reject(error);
    }
  }
  const callerSignal = acquire?.signal;
  const signal = callerSignal === undefined ? source.closing : AbortSignal.any([callerSignal, source.closing]);
  const taken = source.take(key, acquire);
  if (taken instanceof Promise) return taken.then((lease) => runSection(source, lease, fn, signal));
  return NOW.then(() => runSection(source, taken, fn, signal));
}

/**
 * Runs `fn(lease, signal)`, then releases: right away when fn returns a
 * plain value or throws, once it settles when it returns a thenable. Called
 * in a promise reaction, so a throw here rejects the section.
 */
function runSection(source, lease, fn, signal) {
  let output;
  try {
    output = fn(lease, signal);
    // Inside the try: a `then` getter that throws fails the section, as
    // `await output` would.
    if (output !== null && (typeof output === 'object' || typeof output === 'function') && typeof output.then === 'function') {
      return finishSection(source, lease, output);
    }
  } catch (error) {
    throw releaseAfterFailure(source, lease, error);
  }
  release(source, lease);
  return output;
}

/** Waits for the section's thenable, then releases; fn's error wins over a failed release. */
async function finishSection(source, lease, pending) {
  let output;
  try {
    output = await pending;
  } catch (error) {
    throw releaseAfterFailure(source, lease, error);
  }
  release(source, lease);
  return output;
}

/** Releases after a section that succeeded: LEASE_LOST when close ended the lease meanwhile. */
function release(source, lease) {
  if (!source.releaseNow(lease) && source.closing.aborted) throw leaseLost();
}

/**
 * Releases after a failed section: what to throw, the section's error unless
 * close ended the lease meanwhile (then LEASE_LOST, with it as the cause).
 */
function releaseAfterFailure(source, lease, error) {
  let released = true;
  try {
    released = source.releaseNow(lease);
  } catch (failure) {
    // A lease something else ended is LEASE_LOST, as below; the section's
    // own error wins over any other failed release.
    if (failure instanceof LockError && failure.code === 'LEASE_LOST') return leaseLost(error);
  }
  return !released && source.closing.aborted ? leaseLost(error) : error;
}

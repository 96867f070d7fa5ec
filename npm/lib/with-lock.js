// withLock(key, fn, options): acquire, run a section, release in all cases.
// The order of the core's Backend::with_lock, for sections written in JS.
//
// Redis leases are renewed by the core on the redis driver's thread (not by
// JS timers, which a blocked event loop would delay). The loss of the lease
// aborts the signal the section gets at once, and the call then rejects with
// LEASE_LOST even when the section succeeded: its work may have overlapped
// another holder's.
import { native } from './native.js';
import { fromInfo, invalidArgument } from './errors.js';

/** The signal of a section nothing can abort. */
const NEVER = new AbortController().signal;

const OPTION_NAMES = new Set(['signal', 'waitTimeoutMs', 'autoRenew']);

/** Splits the options into acquire options and `autoRenew`; INVALID_ARGUMENT for anything else. */
function sectionOptions(options) {
  if (options === undefined) return { acquire: undefined, autoRenew: true };
  if (typeof options !== 'object' || options === null) {
    throw invalidArgument('withLock options must be an object: { signal?, waitTimeoutMs?, autoRenew? }');
  }
  for (const name in options) {
    if (!OPTION_NAMES.has(name)) throw invalidArgument('withLock options accept only signal, waitTimeoutMs and autoRenew');
  }
  const { autoRenew = true, signal, waitTimeoutMs } = options;
  if (typeof autoRenew !== 'boolean') throw invalidArgument('autoRenew must be a boolean');
  return { acquire: { signal, waitTimeoutMs }, autoRenew };
}

function leaseLost(cause) {
  const error = fromInfo(native.leaseLostError());
  if (cause !== undefined) error.cause = cause;
  return error;
}

/**
 * Runs `fn(lease, signal)` holding `key` of `backend`. `keepAlive(lease)`
 * starts the lease's renewals (the core's, for redis leases):
 * `{ watch(): Promise<boolean>, stop(): boolean }`, both true when the lease
 * was lost; it returns undefined for a lease that needs none.
 *
 * The section's signal aborts when the lease is lost (reason: LEASE_LOST)
 * and when the caller's `signal` aborts (its reason); a caller's abort after
 * the acquire does not end the section by itself: `fn` decides.
 */
export async function withLock(backend, key, fn, options, keepAlive) {
  if (typeof fn !== 'function') throw invalidArgument('withLock needs a function: withLock(key, fn, options?)');
  const { acquire, autoRenew } = sectionOptions(options);
  const lease = await backend.acquire(key, acquire);
  const callerSignal = acquire?.signal;
  let renewals;
  let lost;
  let output;
  let failure;
  let failed = false;
  try {
    let signal = callerSignal ?? NEVER;
    if (autoRenew && keepAlive !== undefined) renewals = keepAlive(lease);
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
    lease.release().catch(() => {});
    throw leaseLost(failed ? failure : undefined);
  }
  try {
    await lease.release();
  } catch (error) {
    // The section's own error wins over a failed release; a release that
    // finds the lease lost is LEASE_LOST either way.
    if (!failed) throw error;
  }
  if (failed) throw failure;
  return output;
}

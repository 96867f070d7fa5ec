// The whole LockBackend API for every backend a provider hands out. An app
// driver's view and a wrapBackend result need only acquire(key, options);
// where one lacks withLock or status, the library supplies them, so user
// code never depends on which kind of backend it got (README.md,
// "Extensions").
import { withLock } from './with-lock.js';
import { redisKeepAlive } from './redis.js';

/**
 * `view` itself when it has acquire, withLock and status (the built-in
 * backends do: nothing sits between them and their users); else a
 * FullBackend over it. `driver` is the backend's driver name; `inner`, for a
 * wrapBackend result, the (full) backend it wrapped.
 */
export function fullBackend(view, driver, inner = undefined) {
  if (typeof view.withLock === 'function' && typeof view.status === 'function') return view;
  return new FullBackend(view, driver, inner);
}

/**
 * A backend that supplies what its view lacks: withLock built on the view's
 * acquire (with-lock.js, as for the built-in backends), and status from the
 * wrapped backend or, for an app driver, from the acquires it saw.
 */
class FullBackend {
  #view;
  #driver;
  #inner;
  /** The counts of an app driver's view without status; undefined otherwise. */
  #counts;

  constructor(view, driver, inner) {
    this.#view = view;
    this.#driver = driver;
    this.#inner = inner;
    if (typeof view.status !== 'function' && inner === undefined) this.#counts = { waiting: 0, acquired: 0, timedOut: 0 };
  }

  acquire(key, options) {
    const counts = this.#counts;
    if (counts === undefined) return this.#view.acquire(key, options);
    counts.waiting++;
    let pending;
    try {
      pending = Promise.resolve(this.#view.acquire(key, options));
    } catch (error) {
      pending = Promise.reject(error);
    }
    return pending.then(
      (lease) => {
        counts.waiting--;
        counts.acquired++;
        return lease;
      },
      (error) => {
        counts.waiting--;
        if (error?.code === 'WAIT_TIMEOUT') counts.timedOut++;
        throw error;
      },
    );
  }

  /** The view's own withLock, else acquire, run, release as the built-in backends do. */
  withLock(key, fn, options) {
    if (typeof this.#view.withLock === 'function') return this.#view.withLock(key, fn, options);
    return withLock(this, key, fn, options, keepAlive);
  }

  /**
   * The view's own status, else the wrapped backend's, else what the library
   * knows of an app driver: its name and the acquires through this backend
   * (`held` and `lost` are null: the library does not see releases).
   */
  status() {
    if (typeof this.#view.status === 'function') return this.#view.status();
    if (this.#inner !== undefined) return this.#inner.status();
    const { waiting, acquired, timedOut } = this.#counts;
    return { driver: this.#driver, held: null, waiting, acquired, timedOut, lost: null };
  }
}

/**
 * The renewals of a lease during a section: the core's for a redis lease
 * (also when a wrapper hands it out), else lease.renew() on JS timers for a
 * lease that expires; none for a lease that never does.
 */
function keepAlive(lease) {
  return redisKeepAlive(lease) ?? timerRenewals(lease);
}

/**
 * Renews `lease` every third of its time left at the grant, with
 * lease.renew(); lost
 * when a renewal answers false or fails, or the lease turned invalid. The
 * timers never keep the process alive; a blocked event loop delays them
 * (the redis driver's renewals run on its own thread instead).
 */
function timerRenewals(lease) {
  const remaining = lease.remainingMs;
  if (!(remaining > 0 && Number.isFinite(remaining))) return undefined;
  const everyMs = Math.max(1, Math.floor(remaining / 3));
  let timer;
  let stopped = false;
  let lost = false;
  let settle;
  const watched = new Promise((resolve) => (settle = resolve));
  const schedule = () => {
    timer = setTimeout(renew, everyMs);
    timer.unref();
  };
  const renew = async () => {
    let renewed = false;
    try {
      renewed = lease.valid && (await lease.renew()) === true;
    } catch {}
    if (stopped) return;
    if (renewed) return schedule();
    lost = true;
    settle(true);
  };
  schedule();
  return {
    watch: () => watched,
    stop() {
      stopped = true;
      clearTimeout(timer);
      settle(false);
      return lost;
    },
  };
}

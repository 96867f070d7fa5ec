// The backend users get for every backend a provider hands out. The built-in
// backends reach users as they are: nothing sits on their acquire path. An
// app's object (a driver's view, a wrapBackend result) reaches users through
// a Proxy that keeps every member of that object and adds what the library
// promises for every backend (README.md, "Extensions"):
// - withLock and status where the object lacks them, so user code never
//   depends on which kind of backend it got;
// - the kind check: an acquire of a kind the object does not declare
//   (`kinds`) is UNSUPPORTED_KIND, never a plain exclusive lease instead,
//   and bad kind options are INVALID_ARGUMENT before the object sees them.
//
// Why a Proxy, and why over a target of its own: a frozen object cannot gain
// withLock, and an object chained to the app's by prototype would call the
// app's methods and getters on itself, where a class's #private fields are
// missing. The Proxy forwards every other member to the app's object,
// methods bound to it, and reports its prototype (instanceof holds). Its
// target is an AppBackend, not the app's object, because a Proxy must report
// a frozen target's properties exactly as they are: it could neither
// replace a frozen `acquire` nor report withLock.
import { inspect } from 'node:util';
import { withLock } from './with-lock.js';
import { storeKeepAlive } from './store.js';
import { askedKinds, declaredKinds, unsupportedKind } from './kinds.js';
import * as tracing from './tracing.js';
import { invalidArgument } from './errors.js';

/** The library's own backends: the built-in drivers' views and the Proxies below. */
const OWN = new WeakSet();

/** Marks the view of a built-in driver: handed out as it is, and never wrapped. */
export function ownBackend(view) {
  OWN.add(view);
  return view;
}

/**
 * The backend users get for `view`: `view` itself when it is one of the
 * library's own (a built-in backend, or what this returned before), else
 * the Proxy over it. `name` and `driver` name the backend; `inner`, for a
 * wrapBackend result, is the backend it wrapped. `view.kinds` is read once,
 * here; `fail(message)` builds the error of a malformed one.
 */
export function fullBackend(view, { name, driver, inner }, fail) {
  if (OWN.has(view)) return view;
  const supported = declaredKinds(view.kinds, fail);
  const backend = new Proxy(new AppBackend(view, name, driver, inner, supported), AppBackend.members);
  OWN.add(backend);
  return backend;
}

/** The members the library supplies on every app object, whatever it has. */
const API = Object.freeze(['acquire', 'withLock', 'status', 'inspect', 'forceRelease']);

/**
 * The target of the Proxy over an app's object: the library's acquire (the
 * kind check, the counts), withLock and status, and the traps that forward
 * everything else to the app's object.
 */
class AppBackend {
  #view;
  #driver;
  #inner;
  /** declaredKinds of the view. */
  #supported;
  /** Who refuses a kind, and the details of that UNSUPPORTED_KIND. */
  #who;
  #details;
  /** The counts of an app driver's view without status; undefined otherwise. */
  #counts;
  /** The API members, bound once: the same function on every read. */
  #api;
  /** The app's methods bound to it, by method, so that a member reads the same each time. */
  #bound = new WeakMap();
  /** acquire and withLock, traced (tracing.js). */
  #traced;

  constructor(view, name, driver, inner, supported) {
    this.#view = view;
    this.#driver = driver;
    this.#inner = inner;
    this.#supported = supported;
    this.#who = inner === undefined ? `backend ${name} (driver ${driver})` : `backend ${name} (its wrapBackend result)`;
    this.#details = { backend: name, driver };
    // The library does not see an app lease's release (only withLock's).
    this.#traced = tracing.tracedCalls(
      { backend: name, driver, seesReleases: false },
      (key, options) => this.#acquire(key, options),
      (key, fn, options) => this.#withLock(key, fn, options),
    );
    if (typeof view.status !== 'function' && inner === undefined) this.#counts = { waiting: 0, acquired: 0, timedOut: 0 };
    this.#api = new Map(API.map((member) => [member, this[member].bind(this)]));
    // util.inspect shows a Proxy's target, bypassing the traps: let it show
    // the app's object. Configurable, so that the traps need not report it.
    Object.defineProperty(this, inspect.custom, { value: (depth, options, show) => show(view, options), configurable: true });
  }

  /** The error refusing `key` and `options`: a bad kind option, or a kind the view does not declare. */
  #refusal(key, options) {
    let asked;
    try {
      asked = askedKinds(key, options);
    } catch (error) {
      return error;
    }
    const missing = asked & ~this.#supported;
    return missing === 0 ? undefined : unsupportedKind(missing, this.#who, this.#details);
  }

  /**
   * An app driver's acquires are traced here. A wrapBackend result's are
   * not: they are traced once, by the backend it wraps, when they reach it.
   */
  acquire(key, options) {
    if (this.#inner === undefined && tracing.acquireTraced()) return this.#traced.acquire(key, options);
    return this.#acquire(key, options);
  }

  #acquire(key, options) {
    const refused = this.#refusal(key, options);
    if (refused !== undefined) return Promise.reject(refused);
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

  /**
   * The view's own withLock (after the kind check), else acquire, run,
   * release as the built-in backends do, through this acquire. Traced
   * here unless it is a wrapBackend result's own withLock: that one is the
   * app's code, and what it calls on the backend it wraps is traced there.
   */
  withLock(key, fn, options) {
    if (tracing.withLockTraced() && (this.#inner === undefined || typeof this.#view.withLock !== 'function')) return this.#traced.withLock(key, fn, options);
    return this.#withLock(key, fn, options);
  }

  #withLock(key, fn, options) {
    const view = this.#view;
    if (typeof view.withLock !== 'function') return withLock(this, key, fn, options, keepAlive);
    const refused = this.#refusal(key, options);
    return refused === undefined ? view.withLock(key, fn, options) : Promise.reject(refused);
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

  /**
   * The view's own inspect, else the wrapped backend's; an app driver that
   * gives none cannot say who holds a key: INVALID_ARGUMENT.
   */
  async inspect(key) {
    if (typeof this.#view.inspect === 'function') return this.#view.inspect(key);
    if (this.#inner !== undefined) return this.#inner.inspect(key);
    throw invalidArgument(`${this.#who} cannot inspect a key: its driver has no inspect`);
  }

  /**
   * The view's own forceRelease, else the wrapped backend's; an app driver
   * that gives none cannot break a key: INVALID_ARGUMENT.
   */
  async forceRelease(key) {
    if (typeof this.#view.forceRelease === 'function') return this.#view.forceRelease(key);
    if (this.#inner !== undefined) return this.#inner.forceRelease(key);
    throw invalidArgument(`${this.#who} cannot force-release a key: its driver has no forceRelease`);
  }

  /** True when `member` is one the app's object lacks, which the library supplies as its own. */
  #supplies(member) {
    return this.#api.has(member) && !(member in this.#view);
  }

  /**
   * The Proxy's traps. The API members are the library's and cannot be
   * redefined through the Proxy; every other member is the app's object's:
   * read there (getters run on it), methods bound to it (#private fields
   * work), written, defined and deleted there.
   */
  static members = Object.freeze({
    get(backend, member) {
      const api = backend.#api.get(member);
      if (api !== undefined) return api;
      const view = backend.#view;
      const value = Reflect.get(view, member);
      // `constructor` is the class itself, a value rather than a method of the
      // object; Object.prototype's methods (hasOwnProperty, toString, …) are
      // generic, and called on the Proxy they see what its traps report.
      if (typeof value !== 'function' || member === 'constructor' || value === Object.prototype[member]) return value;
      let bound = backend.#bound.get(value);
      if (bound === undefined) backend.#bound.set(value, (bound = value.bind(view)));
      return bound;
    },
    has: (backend, member) => backend.#api.has(member) || Reflect.has(backend.#view, member),
    set: (backend, member, value) => !backend.#api.has(member) && Reflect.set(backend.#view, member, value),
    deleteProperty: (backend, member) => !backend.#api.has(member) && Reflect.deleteProperty(backend.#view, member),
    defineProperty(backend, member, descriptor) {
      // A non-configurable property would have to exist on the target too (a
      // Proxy invariant), where the traps could no longer forward it.
      if (backend.#api.has(member) || descriptor.configurable === false) return false;
      return Reflect.defineProperty(backend.#view, member, descriptor);
    },
    getOwnPropertyDescriptor(backend, member) {
      const own = Reflect.getOwnPropertyDescriptor(backend.#view, member);
      if (backend.#api.has(member)) {
        if (own === undefined && !backend.#supplies(member)) return undefined;
        return { value: backend.#api.get(member), writable: false, enumerable: own?.enumerable ?? false, configurable: true };
      }
      // The target holds none of the app's properties, and a Proxy may report
      // a property its target lacks only as configurable.
      if (own !== undefined) own.configurable = true;
      return own;
    },
    ownKeys: (backend) => [...Reflect.ownKeys(backend.#view), ...API.filter((member) => backend.#supplies(member))],
    getPrototypeOf: (backend) => Reflect.getPrototypeOf(backend.#view),
    // Both would have to hold for the target too, which stands in for the app's object.
    setPrototypeOf: () => false,
    preventExtensions: () => false,
  });
}

/**
 * The renewals of a lease during a section: the core's for a store lease
 * (also when a wrapper hands it out), else lease.renew() on JS timers for a
 * lease that expires; none for a lease that never does. With `renew`
 * false, a store lease is still watched (its end, close), an app lease not.
 */
function keepAlive(lease, renew) {
  return storeKeepAlive(lease, renew) ?? (renew ? timerRenewals(lease) : undefined);
}

/**
 * Renews `lease` every third of its time left at the grant, with
 * lease.renew(); lost
 * when a renewal answers false or fails, or the lease turned invalid. The
 * timers never keep the process alive; a blocked event loop delays them
 * (a store driver's renewals run on its own thread instead).
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

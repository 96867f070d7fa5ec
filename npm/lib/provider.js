// LockProvider: every configured backend by name, with one close().
import { invalidArgument, LockError, fromInfo } from './errors.js';
import { native } from './native.js';
import { openLocal } from './local.js';
import { StoreGroup } from './store.js';
import { openFile } from './file.js';
import { openPolicy } from './policy.js';
import { closeQuietly, DriverSet } from './drivers.js';

/**
 * The drivers built into this package, by the `driver` name of the options.
 * Every backend is built here and nowhere else; app drivers and extension
 * hooks join through the DriverSet (lib/drivers.js). A driver factory takes
 * `{ name, driver, options, shared }` and returns `{ view, close() }`;
 * `shared` holds what backends of one driver share in a provider. The store
 * drivers (redis, postgres, mysql) share one factory: the core opens their backends
 * together (lib/store.js), whatever the store.
 */
const openStore = ({ name, driver, shared }) => shared.stores().driver(name, driver);
const DRIVERS = new Map([
  ['local', openLocal],
  ['redis', openStore],
  ['postgres', openStore],
  ['mysql', openStore],
  ['file', openFile],
  ['policy', openPolicy],
]);

/** Warnings and errors to stderr, each under its level; debug dropped. Used when none is given. */
export const stderrLogger = Object.freeze({
  debug() {},
  warn(fields, message) {
    console.error(`dokebi-lock warn [${fields.backend}] ${fields.code}: ${message}`);
  },
  error(fields, message) {
    console.error(`dokebi-lock error [${fields.backend}] ${fields.code}: ${message}`);
  },
});

/**
 * Opens every backend of validated native options; `drivers` adds the app
 * drivers and extension hooks (lib/drivers.js).
 */
export async function openProvider(options, logger = stderrLogger, drivers = new DriverSet()) {
  const opened = new Map();
  let stores;
  // The store drivers' runtime and connections start only when such a backend exists.
  // A policy's members are views opened before it.
  const shared = { stores: () => (stores ??= new StoreGroup(options, logger)), view: (name) => opened.get(name).view };
  const backends = options.backends();
  const policiesLast = [...backends.filter(({ driver }) => driver !== 'policy'), ...backends.filter(({ driver }) => driver === 'policy')];
  try {
    for (const { name, driver } of policiesLast) {
      const factory = DRIVERS.get(driver);
      const builtIn = factory && (() => factory({ name, driver, options, shared, logger }));
      opened.set(name, await drivers.open({ name, driver, options, logger }, builtIn));
      logger.debug({ backend: name, code: 'LOCK_BACKEND_READY' }, 'lock backend ready');
    }
  } catch (error) {
    // Nothing half-open stays behind; close failures are secondary to `error`.
    for (const driver of opened.values()) closeQuietly(driver);
    stores?.close().catch(() => {});
    throw error;
  }
  // Handed out by name, sorted, as the options list them.
  return new LockProvider(new Map(backends.map(({ name }) => [name, opened.get(name)])), logger);
}

export class LockProvider {
  #drivers;
  #logger;
  #closing;

  /** @internal use openLock() or createPlugin() */
  constructor(drivers, logger) {
    this.#drivers = drivers;
    this.#logger = logger;
  }

  /** The configured backend names, sorted. */
  names() {
    return [...this.#drivers.keys()];
  }

  /** The backend `name`: UNKNOWN_BACKEND if none, CLOSED after close(). */
  backend(name) {
    if (this.#closing !== undefined) throw fromInfo(native.closedError());
    if (typeof name !== 'string') throw invalidArgument('backend name must be a string');
    const driver = this.#drivers.get(name);
    if (driver === undefined) {
      throw new LockError('UNKNOWN_BACKEND', 'no backend of that name is configured', {
        details: { backend: name, known: this.names() },
      });
    }
    return driver.view;
  }

  /** `{ [backend]: status }` of every backend; counts only. */
  status() {
    const status = {};
    for (const [name, driver] of this.#drivers) status[name] = driver.view.status();
    return status;
  }

  /**
   * Closes every backend: waiters are rejected with CLOSED, held leases
   * become invalid. A driver whose close fails is logged, never thrown.
   * Idempotent: later calls return the same promise.
   */
  close() {
    this.#closing ??= this.#closeDrivers();
    return this.#closing;
  }

  async #closeDrivers() {
    for (const [backend, driver] of this.#drivers) {
      try {
        await driver.close();
      } catch (error) {
        const code = error instanceof LockError ? error.code : 'LOCK_CLOSE_FAILED';
        this.#logger.error({ backend, code }, 'lock backend close failed');
      }
    }
  }

  [Symbol.asyncDispose]() {
    return this.close();
  }
}

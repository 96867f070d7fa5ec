// The driver registry of one provider: the built-in drivers (local, redis, postgres, mysql, file)
// plus the app's, and the two extension hooks that act on every backend
// (createDriver, wrapBackend). See README.md, "Extensions".
import { invalidArgument, invalidExtension, LockError } from './errors.js';
import { fullBackend, ownBackend } from './full-backend.js';

/** Driver names an app driver may not take. */
export const BUILT_IN_DRIVERS = Object.freeze(['local', 'redis', 'postgres', 'mysql', 'file', 'policy']);

/**
 * Checks that `drivers` is an object whose every value is a factory
 * function; `fail(message)` builds the error of the caller's input
 * (INVALID_ENTRY for an entry module, INVALID_ARGUMENT for an option).
 */
export function checkDriverMap(drivers, fail) {
  if (typeof drivers !== 'object' || drivers === null || Array.isArray(drivers)) {
    throw fail('drivers must be an object of { <name>: (input) => driver }');
  }
  for (const [name, factory] of Object.entries(drivers)) {
    if (typeof factory !== 'function') throw fail(`drivers.${name} must be a function (input) => { view, close }`);
  }
  return drivers;
}

/**
 * Merges the app driver sources `[{ source, drivers }]` (drivers may be
 * undefined) into one Map of name -> factory. DRIVER_CONFLICT when two
 * sources define one name, or one redefines a built-in driver.
 */
export function collectDrivers(sources) {
  const found = new Map();
  for (const { source, drivers } of sources) {
    for (const [name, factory] of Object.entries(drivers ?? {})) {
      const defined = BUILT_IN_DRIVERS.includes(name) ? 'built-in' : found.get(name)?.source;
      if (defined !== undefined) {
        throw new LockError('DRIVER_CONFLICT', `driver ${name} is defined twice: by ${defined} and by ${source}`, {
          details: { driver: name, sources: [defined, source] },
        });
      }
      found.set(name, { source, factory });
    }
  }
  return new Map([...found].map(([name, { factory }]) => [name, factory]));
}

/** `driver` as a LockDriver `{ view, close }`, or DRIVER_INVALID. */
export function checkDriver(driver, backend, name) {
  const isDriver =
    typeof driver === 'object' &&
    driver !== null &&
    typeof driver.close === 'function' &&
    typeof driver.view === 'object' &&
    driver.view !== null &&
    typeof driver.view.acquire === 'function';
  if (isDriver) return driver;
  throw driverInvalid(backend, name, 'did not return { view, close() } with view.acquire');
}

function driverInvalid(backend, name, message) {
  return new LockError('DRIVER_INVALID', `backend ${backend}: driver ${name} ${message}`, { details: { backend, driver: name } });
}

/**
 * Closes a driver after a failed open, ignoring how its close fails: that
 * failure is secondary to the one being reported.
 */
export function closeQuietly(driver) {
  Promise.resolve()
    .then(() => driver.close())
    .catch(() => {});
}

/** What wrapBackend returned, or INVALID_EXTENSION unless it offers acquire. */
function wrapped(view, backend) {
  if (typeof view === 'object' && view !== null && typeof view.acquire === 'function') return view;
  throw wrapInvalid(backend, 'wrapBackend must return a backend with acquire(key, options)');
}

function wrapInvalid(backend, message) {
  return invalidExtension('wrap-backend-result', `backend ${backend}: ${message}`, { details: { backend } });
}

function unknownDriver(backend, driver) {
  return new LockError('UNKNOWN_DRIVER', `backend ${backend}: no driver named ${driver}`, { details: { backend, driver } });
}

/**
 * UNKNOWN_DRIVER for the first backend whose driver is neither built in nor
 * in `registry`: lets createPlugin fail before start when no createDriver
 * hook could supply it.
 */
export function checkKnownDrivers(backends, registry) {
  for (const { name, driver } of backends) {
    if (!BUILT_IN_DRIVERS.includes(driver) && !registry.has(driver)) throw unknownDriver(name, driver);
  }
}

/**
 * How one provider opens its backends. Without hooks and app drivers it
 * returns the built-in driver as is: the backend users get is the very
 * object the driver made, with nothing in between.
 */
export class DriverSet {
  #registry;
  #extension;
  #getDependency;

  /**
   * @param {Map<string, Function>} [registry] app drivers by name
   * @param {{ createDriver?: Function, wrapBackend?: Function }} [extension] the hooks the extension overrides, bound
   * @param {(token: object) => unknown} [getDependency] the host's, for driver inputs
   */
  constructor(registry = new Map(), extension = undefined, getDependency = undefined) {
    this.#registry = registry;
    this.#extension = extension;
    this.#getDependency = getDependency;
  }

  /**
   * Opens backend `name` of driver `driver`: `builtIn` opens it when the
   * driver is built in (undefined otherwise). The view of the driver it
   * returns is what users get (lib/full-backend.js): a built-in backend as
   * it is, an app's object with every member it has and the whole
   * LockBackend API.
   */
  async open({ name, driver, options, logger }, builtIn) {
    const registered = () => this.#openRegistered(name, driver, options, logger, builtIn);
    const extension = this.#extension;
    let opened;
    if (extension?.createDriver === undefined) {
      opened = await registered();
    } else {
      const input = Object.freeze({ ...this.#input(name, driver, options, logger), open: registered });
      opened = checkDriver(await extension.createDriver(input), name, driver);
    }
    try {
      const backend = fullBackend(opened.view, { name, driver }, (message) => driverInvalid(name, driver, `has a view whose ${message}`));
      if (extension?.wrapBackend === undefined) return backend === opened.view ? opened : { view: backend, close: () => opened.close() };
      const view = wrapped(extension.wrapBackend(Object.freeze({ name, driver, backend })), name);
      return { view: fullBackend(view, { name, driver, inner: backend }, (message) => wrapInvalid(name, `wrapBackend returned a backend whose ${message}`)), close: () => opened.close() };
    } catch (error) {
      // The provider only closes what it holds; this driver it never got.
      closeQuietly(opened);
      throw error;
    }
  }

  async #openRegistered(name, driver, options, logger, builtIn) {
    if (builtIn !== undefined) {
      const opened = await builtIn();
      ownBackend(opened.view);
      return opened;
    }
    const factory = this.#registry.get(driver);
    if (factory === undefined) throw unknownDriver(name, driver);
    return checkDriver(await factory(this.#input(name, driver, options, logger)), name, driver);
  }

  /** The frozen input of a driver factory and of createDriver. */
  #input(name, driver, options, logger) {
    const text = options.appSettings(name);
    const settings = text === null ? {} : JSON.parse(text);
    const input = { name, driver, settings: Object.freeze(settings), path: `backends.${name}`, logger };
    if (this.#getDependency !== undefined) input.getDependency = this.#getDependency;
    return Object.freeze(input);
  }
}

/** The registry of openLock's `drivers` option (INVALID_ARGUMENT when malformed). */
export function optionDrivers(drivers) {
  return drivers === undefined ? undefined : checkDriverMap(drivers, invalidArgument);
}

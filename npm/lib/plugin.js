// The dokebi plugin: the contract is written down in README.md ("Plugin contract").
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { invalidArgument, LockError } from './errors.js';
import { loadSections } from './options.js';
import { openProvider } from './provider.js';
import { checkDependencies, readEntry } from './extension.js';
import { checkDriverMap, checkKnownDrivers, collectDrivers, DriverSet } from './drivers.js';

/** The token a consumer plugin names in metadata.dependencies. */
export const dependency = Object.freeze({ name: 'dokebi-lock', description: 'the LockProvider of @dokebi/lock' });

/** The package an app installs to use `driver: redis` (README.md, "Install"). */
export const REDIS_DRIVER_PACKAGE = '@dokebi/lock-redis';

/**
 * Creates the plugin. Reads `app.config['dokebi-lock']` (and
 * `['dokebi-redis']`) unless `options` (the dokebi-lock section) is given.
 * Invalid options fail here, with INVALID_PLUGIN_OPTIONS; so do a bad
 * entry module (INVALID_ENTRY, INVALID_EXTENSION), clashing driver names
 * (DRIVER_CONFLICT) and, when no createDriver hook could supply one, a
 * backend of an unknown driver (UNKNOWN_DRIVER).
 */
export function createPlugin(input) {
  return createPluginWith(input, undefined);
}

/**
 * A createPlugin that also knows the app drivers `drivers`
 * (`{ <name>: (input) => driver }`), for apps and driver packages that
 * register drivers without an entry module.
 */
export function defineLockPlugin(definition) {
  if (typeof definition !== 'object' || definition === null) throw invalidArgument('defineLockPlugin takes { drivers }');
  const drivers = checkDriverMap(definition.drivers, invalidArgument);
  return (input) => createPluginWith(input, drivers);
}

function createPluginWith(input, definedDrivers) {
  if (typeof input !== 'object' || input === null) throw invalidArgument('createPlugin takes { app, options?, entry? }');
  const { app, options, entry } = input;
  if (typeof app !== 'object' || app === null) throw invalidArgument('createPlugin needs the app: { app }');
  const { hooks, drivers: entryDrivers } = entry === undefined ? {} : readEntry(entry);
  const registry = collectDrivers([
    { source: 'defineLockPlugin', drivers: definedDrivers },
    { source: 'the entry module', drivers: entryDrivers },
  ]);
  const config = app.config ?? {};
  let validated;
  try {
    validated = loadSections(options ?? config['dokebi-lock'], config['dokebi-redis']);
  } catch (cause) {
    throw new LockError('INVALID_PLUGIN_OPTIONS', `invalid dokebi-lock plugin options: ${cause.message}`, {
      details: cause.details,
      cause,
    });
  }
  const backends = validated.backends();
  if (hooks?.createDriver === undefined) checkKnownDrivers(backends, registry);
  const dependencies = hooks?.dependencies === undefined ? [] : checkDependencies(hooks.dependencies());
  let provider;
  return Object.freeze({
    name: 'dokebi-lock',
    metadata: Object.freeze({ dependencies: Object.freeze([...dependencies]) }),
    provides: dependency,
    /** Opens the backends; the returned provider is what app.get(plugin) gives. */
    async start(context) {
      const redis = backends.find((backend) => backend.driver === 'redis');
      if (redis !== undefined) requireRedisDriverPackage(app, redis.name);
      const getDependency = context?.getDependency?.bind(context);
      provider = await openProvider(validated, context?.logger, new DriverSet(registry, hooks, getDependency));
      return provider;
    },
    /** Closes the backends (after the consumers stopped, in reverse order). */
    async stop() {
      await provider?.close();
    },
  });
}

/**
 * DRIVER_NOT_INSTALLED unless the app resolves @dokebi/lock-redis: through
 * `app.resolve(specifier)` when the host offers it, else from the working
 * directory (the app's root).
 */
function requireRedisDriverPackage(app, backend) {
  const resolve = typeof app.resolve === 'function' ? (id) => app.resolve(id) : createRequire(join(process.cwd(), 'package.json')).resolve;
  try {
    resolve(REDIS_DRIVER_PACKAGE);
  } catch (cause) {
    throw new LockError('DRIVER_NOT_INSTALLED', `backend ${backend} uses driver: redis, but ${REDIS_DRIVER_PACKAGE} is not installed`, {
      details: { backend, driver: 'redis', package: REDIS_DRIVER_PACKAGE },
      cause,
    });
  }
}

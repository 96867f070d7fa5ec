// The dokebi plugin: the contract is written down in README.md ("Plugin contract").
import { realpathSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { invalidArgument, LockError } from './errors.js';
import { loadSections } from './options.js';
import { openProvider } from './provider.js';
import { checkDependencies, readEntry } from './extension.js';
import { checkDriverMap, checkKnownDrivers, collectDrivers, DriverSet } from './drivers.js';

/** The token a consumer plugin names in metadata.dependencies. */
export const dependency = Object.freeze({ name: 'dokebi-lock', description: 'the LockProvider of @dokebi/lock' });

/**
 * The token of the dokebi-redis plugin (@dokebi/redis), in
 * metadata.dependencies when a backend has driver: redis. A token names the
 * plugin that provides it; `optional`: the app may leave dokebi-redis out,
 * and then the connections come from `options['dokebi-redis']`. When it is
 * registered, the value its start returned carries the connection options
 * used: `{ options: { connections: { <name>: { url, ... } } } }`.
 */
export const redisDependency = Object.freeze({
  name: 'dokebi-redis',
  optional: true,
  description: 'the Redis connections of @dokebi/redis (optional)',
});

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
  const section = options ?? config['dokebi-lock'];
  const validated = validate(section, config['dokebi-redis']);
  const backends = validated.backends();
  if (hooks?.createDriver === undefined) checkKnownDrivers(backends, registry);
  const redis = backends.find((backend) => backend.driver === 'redis');
  const dependencies = [
    ...(redis === undefined ? [] : [redisDependency]),
    ...(hooks?.dependencies === undefined ? [] : checkDependencies(hooks.dependencies())),
  ];
  let provider;
  return Object.freeze({
    name: 'dokebi-lock',
    metadata: Object.freeze({ dependencies: Object.freeze(dependencies) }),
    provides: dependency,
    /** Opens the backends; the returned provider is what app.get(plugin) gives. */
    async start(context) {
      let opened = validated;
      if (redis !== undefined) {
        requireRedisDriverPackage(app, redis.name);
        const redisPlugin = context?.getDependency?.(redisDependency);
        if (redisPlugin != null) opened = validate(section, registeredConnections(redisPlugin));
      }
      const getDependency = context?.getDependency?.bind(context);
      provider = await openProvider(opened, context?.logger, new DriverSet(registry, hooks, getDependency));
      return provider;
    },
    /** Closes the backends (after the consumers stopped, in reverse order). */
    async stop() {
      await provider?.close();
    },
  });
}

/**
 * The validated native options of the two plugin sections, or
 * INVALID_PLUGIN_OPTIONS whose cause is the core's error (INVALID_OPTIONS or
 * UNKNOWN_CONNECTION; every issue in details.issues carries its code).
 */
function validate(lock, redis) {
  try {
    return loadSections(lock, redis);
  } catch (cause) {
    throw new LockError('INVALID_PLUGIN_OPTIONS', `invalid dokebi-lock plugin options: ${cause.message}`, {
      details: cause.details,
      cause,
    });
  }
}

/** The `dokebi-redis` options a registered dokebi-redis plugin exposes (see redisDependency). */
function registeredConnections(redisPlugin) {
  const options = redisPlugin.options;
  if (typeof options === 'object' && options !== null) return options;
  const issue = { path: 'dokebi-redis', message: 'the registered dokebi-redis plugin exposes no options', code: 'INVALID_OPTIONS' };
  throw new LockError('INVALID_PLUGIN_OPTIONS', 'invalid dokebi-lock plugin options: the registered dokebi-redis plugin exposes no options { connections }', {
    details: { issues: [issue] },
  });
}

/**
 * Where the app resolves packages from: the host's `app.resolve(specifier)`,
 * else `app.root` (the app's directory, a path or file: URL), else the
 * process's entry module. Never the working directory: an app started from
 * another directory is still installed where it is.
 */
function appResolver(app) {
  if (typeof app.resolve === 'function') return (specifier) => app.resolve(specifier);
  if (app.root !== undefined) {
    const root = app.root instanceof URL || String(app.root).startsWith('file:') ? fileURLToPath(app.root) : String(app.root);
    return createRequire(join(root, 'package.json')).resolve;
  }
  const main = entryModule();
  if (main !== undefined) return createRequire(main).resolve;
  return () => {
    throw new Error('the app has no location to resolve from: the host offers neither app.resolve nor app.root, and the process has no entry module');
  };
}

/** The real path of the process's entry module, as Node loaded it; undefined without one (REPL, --eval). */
function entryModule() {
  const main = process.argv[1];
  if (typeof main !== 'string' || main === '') return undefined;
  try {
    return realpathSync(main);
  } catch {
    return undefined;
  }
}

/** DRIVER_NOT_INSTALLED unless the app resolves @dokebi/lock-redis (see appResolver). */
function requireRedisDriverPackage(app, backend) {
  try {
    appResolver(app)(REDIS_DRIVER_PACKAGE);
  } catch (cause) {
    throw new LockError('DRIVER_NOT_INSTALLED', `backend ${backend} uses driver: redis, but ${REDIS_DRIVER_PACKAGE} is not installed`, {
      details: { backend, driver: 'redis', package: REDIS_DRIVER_PACKAGE },
      cause,
    });
  }
}

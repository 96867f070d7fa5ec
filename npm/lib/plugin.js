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
import { STORE_PLUGINS, storePluginsOf } from './store-plugins.js';

/** The token a consumer plugin names in metadata.dependencies. */
export const dependency = Object.freeze({ name: 'dokebi-lock', description: 'the LockProvider of @dokebi/lock' });

/** The token of store plugin `store` (lib/store-plugins.js) in metadata.dependencies. */
function storeDependency(store) {
  return Object.freeze({ name: store.plugin, optional: true, description: store.description });
}

/**
 * The token of each store plugin by driver, in metadata.dependencies when a
 * backend has that driver. A token names the plugin that provides it;
 * `optional`: the app may leave the plugin out, and then the connections
 * come from `options['<plugin>']`. When it is registered, the value its
 * start returned carries the connection options used:
 * `{ options: { connections: { <name>: { url, ... } } } }`.
 */
const STORE_DEPENDENCIES = new Map(STORE_PLUGINS.map((store) => [store.driver, storeDependency(store)]));

/** The token of the dokebi-redis plugin (@dokebi/redis), with a redis backend. */
export const redisDependency = STORE_DEPENDENCIES.get('redis');

/** The token of the dokebi-postgres plugin (@dokebi/postgres), with a postgres backend. */
export const postgresDependency = STORE_DEPENDENCIES.get('postgres');

/** The token of the dokebi-mysql plugin (@dokebi/mysql), with a mysql backend. */
export const mysqlDependency = STORE_DEPENDENCIES.get('mysql');

/**
 * Creates the plugin. Reads `app.config['dokebi-lock']` (and the store
 * plugins' sections, `['dokebi-redis']`, `['dokebi-postgres']`, `['dokebi-mysql']`) unless
 * `options` (the dokebi-lock section) is given.
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
  const storeSections = Object.fromEntries(STORE_PLUGINS.map((store) => [store.plugin, config[store.plugin]]));
  const validated = validate(section, storeSections);
  const backends = validated.backends();
  if (hooks?.createDriver === undefined) checkKnownDrivers(backends, registry);
  const stores = storePluginsOf(backends);
  const dependencies = [
    ...stores.map(({ store }) => STORE_DEPENDENCIES.get(store.driver)),
    ...(hooks?.dependencies === undefined ? [] : checkDependencies(hooks.dependencies())),
  ];
  let provider;
  return Object.freeze({
    name: 'dokebi-lock',
    metadata: Object.freeze({ dependencies: Object.freeze(dependencies) }),
    provides: dependency,
    /** Opens the backends; the returned provider is what app.get(plugin) gives. */
    async start(context) {
      const sections = { ...storeSections };
      for (const { store, backend } of stores) {
        requireDriverPackage(app, store, backend);
        const plugin = context?.getDependency?.(STORE_DEPENDENCIES.get(store.driver));
        if (plugin != null) sections[store.plugin] = registeredConnections(store, plugin);
      }
      // A registered store plugin's connections replace its section: checked again, with the same errors.
      const replaced = STORE_PLUGINS.some(({ plugin }) => sections[plugin] !== storeSections[plugin]);
      const opened = replaced ? validate(section, sections) : validated;
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
 * The validated native options of the dokebi-lock section and the store
 * plugins' (`{ [plugin]: section }`), or INVALID_PLUGIN_OPTIONS whose cause
 * is the core's error (INVALID_OPTIONS or UNKNOWN_CONNECTION; every issue
 * in details.issues carries its code).
 */
function validate(lock, stores) {
  try {
    return loadSections(lock, stores);
  } catch (cause) {
    throw new LockError('INVALID_PLUGIN_OPTIONS', `invalid dokebi-lock plugin options: ${cause.message}`, {
      details: cause.details,
      cause,
    });
  }
}

/** The options a registered store plugin exposes (see STORE_DEPENDENCIES). */
function registeredConnections(store, plugin) {
  const options = plugin.options;
  if (typeof options === 'object' && options !== null) return options;
  const issue = { path: store.plugin, message: `the registered ${store.plugin} plugin exposes no options`, code: 'INVALID_OPTIONS' };
  throw new LockError('INVALID_PLUGIN_OPTIONS', `invalid dokebi-lock plugin options: the registered ${store.plugin} plugin exposes no options { connections }`, {
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

/** DRIVER_NOT_INSTALLED unless the app resolves the marker package of `store` (see appResolver). */
function requireDriverPackage(app, store, backend) {
  try {
    appResolver(app)(store.package);
  } catch (cause) {
    const { driver, package: name } = store;
    throw new LockError('DRIVER_NOT_INSTALLED', `backend ${backend} uses driver: ${driver}, but ${name} is not installed`, {
      details: { backend, driver, package: name },
      // The core's sentence names the redis package; this one names the driver's own.
      fix: `Install the driver package: npm install ${name}.`,
      cause,
    });
  }
}

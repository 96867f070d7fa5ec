// What a store driver asks of a dokebi app, by driver: the plugin whose
// section (and, when registered, whose value) holds its connections, and the
// marker package an app installs to use it. One table for the plugin
// (plugin.js) and the install module (install.js), so the drivers differ in
// data only. Plain JS without the addon: install.js runs before the
// platform package is there. dokebi.manifest.json says the same (a test
// checks that it does).

/**
 * @typedef {object} StorePlugin
 * @property {string} driver the `driver:` value of its backends
 * @property {string} plugin the plugin and options section of its connections
 * @property {string} package the marker package (npm/packages/lock-<driver>)
 * @property {string} description of the plugin's token in metadata.dependencies
 */

/** @type {readonly StorePlugin[]} */
export const STORE_PLUGINS = Object.freeze(
  [
    { driver: 'redis', plugin: 'dokebi-redis', package: '@dokebi/lock-redis', description: 'the Redis connections of @dokebi/redis (optional)' },
    {
      driver: 'postgres',
      plugin: 'dokebi-postgres',
      package: '@dokebi/lock-postgres',
      description: 'the PostgreSQL connections of @dokebi/postgres (optional)',
    },
    { driver: 'mysql', plugin: 'dokebi-mysql', package: '@dokebi/lock-mysql', description: 'the MySQL connections of @dokebi/mysql (optional)' },
  ].map((entry) => Object.freeze(entry)),
);

/** The store plugins that `backends` (`[{ name, driver }]`) use, in table order, each with its first backend. */
export function storePluginsOf(backends) {
  return STORE_PLUGINS.flatMap((store) => {
    const backend = backends.find((candidate) => candidate.driver === store.driver);
    return backend === undefined ? [] : [{ store, backend: backend.name }];
  });
}

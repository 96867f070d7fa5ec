// @dokebi/lock/install: what the dokebi CLI asks a plugin when it is added
// (`planInstall`) and when an app is checked (`check`). Plain JS without the
// native addon, so the CLI can run it before the platform package is there.
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { STORE_PLUGINS, storePluginsOf } from './lib/store-plugins.js';

/** The plugin manifest (schemaVersion 2), as shipped in dokebi.manifest.json. */
export const manifest = Object.freeze(JSON.parse(readFileSync(new URL('./dokebi.manifest.json', import.meta.url), 'utf8')));

/**
 * The backends of `config`: the dokebi-lock section (`{ backends }`, what
 * createPlugin's `options` takes) or the whole `options` map holding it.
 */
function backends(config) {
  const section = config?.['dokebi-lock'] ?? config;
  const entries = section?.backends;
  if (typeof entries !== 'object' || entries === null) return [];
  return Object.entries(entries).map(([name, settings]) => ({ name, driver: settings?.driver ?? 'local' }));
}

/** The store plugins (lib/store-plugins.js) that `config`'s backends use. */
function storesOf(config) {
  return storePluginsOf(backends(config)).map(({ store }) => store);
}

/**
 * What adding @dokebi/lock to an app does: the plugins it requires
 * (dokebi-redis, dokebi-postgres, dokebi-mysql, as its backends' drivers need), the npm
 * packages to install (their marker packages), and the user-owned entry
 * file to create from the template (once; the app owns it afterwards).
 */
export function planInstall(config) {
  const stores = storesOf(config);
  return {
    plugin: manifest.plugin,
    requires: stores.map((store) => store.plugin),
    packages: stores.map((store) => store.package),
    files: [{ path: manifest.entry.path, template: fileURLToPath(new URL(manifest.entry.template, import.meta.url)), owner: manifest.entry.owner }],
  };
}

/**
 * Checks an app: `config` as for planInstall, `pkg` the app's package.json
 * (parsed). One error diagnostic DRIVER_PACKAGE_MISSING per redis,
 * postgres or mysql backend when neither `dependencies` nor `optionalDependencies`
 * lists its driver's marker package.
 */
export function check(config, pkg) {
  const installed = (name) => [pkg?.dependencies, pkg?.optionalDependencies].some((deps) => deps != null && Object.hasOwn(deps, name));
  const diagnostics = backends(config).flatMap(({ name, driver }) => {
    const store = STORE_PLUGINS.find((candidate) => candidate.driver === driver);
    if (store === undefined || installed(store.package)) return [];
    return [
      {
        level: 'error',
        code: 'DRIVER_PACKAGE_MISSING',
        path: `backends.${name}.driver`,
        message: `backend ${name} uses driver: ${driver}, but package.json does not depend on ${store.package}`,
        fix: `npm install ${store.package}`,
      },
    ];
  });
  return { requires: storesOf(config).map((store) => store.plugin), diagnostics };
}

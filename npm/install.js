// @dokebi/lock/install: what the dokebi CLI asks a plugin when it is added
// (`planInstall`) and when an app is checked (`check`). Plain JS without the
// native addon, so the CLI can run it before the platform package is there.
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

/** The plugin manifest (schemaVersion 2), as shipped in dokebi.manifest.json. */
export const manifest = Object.freeze(JSON.parse(readFileSync(new URL('./dokebi.manifest.json', import.meta.url), 'utf8')));

const REDIS_PLUGIN = 'dokebi-redis';
const REDIS_DRIVER_PACKAGE = manifest.drivers.redis.package;

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

/** The plugins `config` needs at runtime: dokebi-redis when a redis backend exists. */
function requires(config) {
  return backends(config).some((backend) => backend.driver === 'redis') ? [REDIS_PLUGIN] : [];
}

/**
 * What adding @dokebi/lock to an app does: the plugins it requires, the
 * npm packages to install, and the user-owned entry file to create from the
 * template (once; the app owns it afterwards).
 */
export function planInstall(config) {
  const redis = requires(config).length > 0;
  return {
    plugin: manifest.plugin,
    requires: requires(config),
    packages: redis ? [REDIS_DRIVER_PACKAGE] : [],
    files: [{ path: manifest.entry.path, template: fileURLToPath(new URL(manifest.entry.template, import.meta.url)), owner: manifest.entry.owner }],
  };
}

/**
 * Checks an app: `config` as for planInstall, `pkg` the app's package.json
 * (parsed). One error diagnostic DRIVER_PACKAGE_MISSING per redis backend
 * when neither `dependencies` nor `optionalDependencies` lists
 * @dokebi/lock-redis.
 */
export function check(config, pkg) {
  const installed = [pkg?.dependencies, pkg?.optionalDependencies].some((deps) => deps != null && Object.hasOwn(deps, REDIS_DRIVER_PACKAGE));
  const diagnostics = installed
    ? []
    : backends(config)
        .filter((backend) => backend.driver === 'redis')
        .map((backend) => ({
          level: 'error',
          code: 'DRIVER_PACKAGE_MISSING',
          path: `backends.${backend.name}.driver`,
          message: `backend ${backend.name} uses driver: redis, but package.json does not depend on ${REDIS_DRIVER_PACKAGE}`,
          fix: `npm install ${REDIS_DRIVER_PACKAGE}`,
        }));
  return { requires: requires(config), diagnostics };
}

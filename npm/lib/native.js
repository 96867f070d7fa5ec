// Loads the native addon.
//
// - Installed (this package's folder lies inside a node_modules folder): only
//   the prebuilt per-platform package @dokebi/lock-<tag>, which npm installed
//   as an optional dependency. A .node file lying next to the package is never
//   loaded there, so a stale build cannot shadow the real addon.
// - Development tree (a checkout, or `npm link` to one: not inside
//   node_modules): the build that scripts/build-node puts next to package.json
//   first, then the per-platform package.
//
// Either way the addon must be of this package's version: a mismatch is an
// error naming both versions, never a silent mix.
import { createRequire } from 'node:module';
import { sep } from 'node:path';
import { fileURLToPath } from 'node:url';

const require = createRequire(import.meta.url);
const packageDir = fileURLToPath(new URL('..', import.meta.url));
const { version } = require('../package.json');

function platformTag() {
  const { platform, arch } = process;
  if (platform !== 'linux') return `${platform}-${arch}`;
  // glibc reports its version in the process report; musl does not.
  const glibc = process.report?.getReport?.().header?.glibcVersionRuntime;
  return `linux-${arch}-${glibc ? 'gnu' : 'musl'}`;
}

/** True when the package was installed by a package manager (not a checkout). */
function isInstalled() {
  return packageDir.split(sep).includes('node_modules');
}

function load() {
  const tag = platformTag();
  const platformPackage = `@dokebi/lock-${tag}`;
  const installed = isInstalled();
  const attempts = installed ? [platformPackage] : [`../dokebi-lock.${tag}.node`, platformPackage];
  const failures = [];
  for (const id of attempts) {
    let addon;
    try {
      addon = require(id);
    } catch (error) {
      if (error.code !== 'MODULE_NOT_FOUND') throw error;
      failures.push(error);
      continue;
    }
    const origin = require.resolve(id);
    checkVersion(addon, origin, id === platformPackage ? `npm install ${platformPackage}@${version}` : 'rebuild it with scripts/build-node');
    return { addon, origin };
  }
  const build = installed ? '' : ', or build it with scripts/build-node';
  throw new Error(
    `@dokebi/lock has no native addon for ${tag}: install the optional package ${platformPackage}@${version} ` +
      `(npm installs it automatically unless optional dependencies were omitted)${build}.`,
    { cause: failures.at(-1) },
  );
}

function checkVersion(addon, origin, fix) {
  const addonVersion = typeof addon.addonVersion === 'function' ? addon.addonVersion() : 'unknown (it predates addonVersion)';
  if (addonVersion === version) return;
  const error = new Error(
    `@dokebi/lock ${version} loaded a native addon of version ${addonVersion} (${origin}): ` +
      `the two must be the same version; ${fix}.`,
  );
  error.code = 'ADDON_VERSION_MISMATCH';
  error.details = { packageVersion: version, addonVersion, origin };
  throw error;
}

const loaded = load();
export const native = loaded.addon;
/** The file the addon was loaded from. */
export const nativeOrigin = loaded.origin;

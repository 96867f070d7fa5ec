// Loads the native addon.
//
// - Installed (this package's folder lies inside a node_modules folder): only
//   the prebuilt per-platform package @dokebi/lock-<tag>, which npm installed
//   as an optional dependency. A .node file lying next to the package is never
//   loaded there, so a stale build cannot shadow the real addon.
// - Development tree (a checkout, or `npm install <checkout>/npm`: not inside
//   node_modules once symlinks are resolved): the build that scripts/build-node
//   puts next to package.json first, then the per-platform package.
//
// Either way the addon must be of this package's version: a mismatch is an
// error naming both versions, never a silent mix. A platform with no package
// at all, and a supported one whose package is not installed, are errors of
// their own, each with what to do.
import { createRequire } from 'node:module';
import { sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import { LockError } from './lock-error.js';
import { platformPackagePrefix, platformTag, supportedTags } from './platform.js';

const require = createRequire(import.meta.url);
const packageDir = fileURLToPath(new URL('..', import.meta.url));
const { version } = require('../package.json');

/** True when the package was installed by a package manager (not a checkout). */
function isInstalled() {
  return packageDir.split(sep).includes('node_modules');
}

function load() {
  const tag = platformTag();
  const platformPackage = `${platformPackagePrefix}${tag}`;
  const installed = isInstalled();
  const attempts = installed ? [] : [`../dokebi-lock.${tag}.node`];
  if (supportedTags.includes(tag)) attempts.push(platformPackage);
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
  const details = { platform: tag, supported: supportedTags };
  if (!supportedTags.includes(tag)) {
    throw new LockError(
      'PLATFORM_UNSUPPORTED',
      `@dokebi/lock has no prebuilt addon for ${tag} (process.platform ${process.platform}, process.arch ${process.arch}); ` +
        `prebuilt: ${supportedTags.join(', ')}.`,
      {
        details,
        fix:
          'Build the addon from source: with the Rust toolchain (rustup) installed, run `bash scripts/build-node --host` ' +
          'in a clone of the dokebi-lock repository, then `npm install <clone>/npm` in your app.',
        cause: failures.at(-1),
      },
    );
  }
  const build = installed ? '' : ', or build it here with `bash scripts/build-node`';
  throw new LockError(
    'PLATFORM_PACKAGE_MISSING',
    `@dokebi/lock's prebuilt addon for ${tag} is the optional package ${platformPackage}@${version}, which is not installed ` +
      '(optional dependencies were omitted, e.g. with --omit=optional, or the lockfile was made on another platform).',
    { details: { ...details, package: `${platformPackage}@${version}` }, fix: `Run \`npm install ${platformPackage}@${version}\`${build}.`, cause: failures.at(-1) },
  );
}

function checkVersion(addon, origin, fix) {
  const addonVersion = typeof addon.addonVersion === 'function' ? addon.addonVersion() : 'unknown (it predates addonVersion)';
  if (addonVersion === version) return;
  throw new LockError(
    'ADDON_VERSION_MISMATCH',
    `@dokebi/lock ${version} loaded a native addon of version ${addonVersion} (${origin}): the two must be the same version; ${fix}.`,
    { details: { packageVersion: version, addonVersion, origin }, fix: `${fix[0].toUpperCase()}${fix.slice(1)}.` },
  );
}

const loaded = load();
export const native = loaded.addon;
/** The file the addon was loaded from. */
export const nativeOrigin = loaded.origin;

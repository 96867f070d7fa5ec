// Which addon @dokebi/lock loads (lib/native.js): an installed package loads
// only its per-platform package, a development tree the build next to
// package.json, and either way an addon of another version is an error.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { cp, mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import * as loaded from '../lib/native.js';

const packageDir = fileURLToPath(new URL('..', import.meta.url));
const pkg = JSON.parse(await readFile(join(packageDir, 'package.json'), 'utf8'));
const tag = 'linux-x64-gnu';
const addonFile = `dokebi-lock.${tag}.node`;
const builtAddon = join(packageDir, addonFile); // scripts/build-node
const platformName = `@dokebi/lock-${tag}`;
const linuxX64 = { skip: process.platform !== 'linux' || process.arch !== 'x64' };

/** Copies the published files of @dokebi/lock to `dir`, with `version` in its package.json. */
async function copyPackage(dir, version = pkg.version) {
  await mkdir(dir, { recursive: true });
  for (const entry of pkg.files) await cp(join(packageDir, entry), join(dir, entry), { recursive: true });
  await writeFile(join(dir, 'package.json'), JSON.stringify({ ...pkg, version }, null, 2));
}

/** An app folder whose node_modules holds @dokebi/lock and, unless told not to, its platform package. */
async function installedApp(scratch, { version, platformPackage = true } = {}) {
  const app = join(scratch, 'app');
  await mkdir(app, { recursive: true });
  await writeFile(join(app, 'package.json'), JSON.stringify({ name: 'app', private: true, type: 'module' }));
  const lockDir = join(app, 'node_modules', '@dokebi', 'lock');
  await copyPackage(lockDir, version);
  if (platformPackage) {
    const platformDir = join(app, 'node_modules', '@dokebi', `lock-${tag}`);
    await mkdir(platformDir, { recursive: true });
    await cp(join(packageDir, 'npm', tag, 'package.json'), join(platformDir, 'package.json'));
    await cp(builtAddon, join(platformDir, addonFile));
  }
  return { app, lockDir };
}

/**
 * Runs, in `cwd`, a module that imports @dokebi/lock from `entry` (a bare
 * specifier or a folder), acquires and releases a local lease, and prints
 * the file the addon came from. Returns the process result.
 */
function run(cwd, entry, lockDir) {
  const from = entry === '@dokebi/lock' ? entry : pathToFileURL(join(entry, 'index.js')).href;
  const script = `
    const { openLock } = await import(${JSON.stringify(from)});
    const { nativeOrigin } = await import(${JSON.stringify(pathToFileURL(join(lockDir, 'lib', 'native.js')).href)});
    const provider = await openLock({ config: { 'dokebi-lock': { backends: { b: {} } } } });
    const lease = await provider.backend('b').acquire('k');
    console.log('fence', lease.fence, 'released', await lease.release());
    await provider.close();
    console.log('origin', nativeOrigin);`;
  return spawnSync(process.execPath, ['--input-type=module', '-e', script], { cwd, encoding: 'utf8', timeout: 30_000 });
}

async function withScratch(fn) {
  const scratch = await mkdtemp(join(tmpdir(), 'dokebi-lock-native-'));
  try {
    await fn(scratch);
  } finally {
    await rm(scratch, { recursive: true, force: true });
  }
}

test('the addon reports the version of the package', () => {
  assert.equal(loaded.native.addonVersion(), pkg.version);
});

test('in the development tree the build next to package.json is loaded', linuxX64, () => {
  assert.equal(loaded.nativeOrigin, builtAddon);
});

test('an installed package loads its platform package, never a .node lying next to it', linuxX64, () =>
  withScratch(async (scratch) => {
    const { app, lockDir } = await installedApp(scratch);
    // A stale or broken build left beside the installed package.
    await writeFile(join(lockDir, addonFile), 'not an addon');
    const result = run(app, '@dokebi/lock', lockDir);
    assert.equal(result.status, 0, result.stderr);
    assert.match(result.stdout, /^fence 1 released true$/m);
    assert.match(result.stdout, new RegExp(`^origin .*/node_modules/@dokebi/lock-${tag}/${addonFile}$`, 'm'));
  }));

test('an installed package without its platform package fails, naming the package and version to install', linuxX64, () =>
  withScratch(async (scratch) => {
    const { app, lockDir } = await installedApp(scratch, { platformPackage: false });
    await cp(builtAddon, join(lockDir, addonFile)); // a working build beside it is not used either
    const result = run(app, '@dokebi/lock', lockDir);
    assert.notEqual(result.status, 0, result.stdout);
    assert.match(result.stderr, new RegExp(`no native addon for ${tag}: install the optional package ${platformName}@${pkg.version} `));
    assert.doesNotMatch(result.stderr, /scripts\/build-node/);
  }));

test('an installed addon of another version than the JS package is ADDON_VERSION_MISMATCH naming both and the fix', linuxX64, () =>
  withScratch(async (scratch) => {
    const { app, lockDir } = await installedApp(scratch, { version: '9.9.9' });
    const result = run(app, '@dokebi/lock', lockDir);
    assert.notEqual(result.status, 0, result.stdout);
    assert.match(result.stderr, /ADDON_VERSION_MISMATCH/);
    assert.match(
      result.stderr,
      new RegExp(`@dokebi/lock 9\\.9\\.9 loaded a native addon of version ${pkg.version.replaceAll('.', '\\.')} \\(.*/node_modules/@dokebi/lock-${tag}/${addonFile}\\)`),
    );
    assert.match(result.stderr, new RegExp(`npm install ${platformName}@9\\.9\\.9`));
  }));

test('a stale build in a development tree is ADDON_VERSION_MISMATCH that says to rebuild', linuxX64, () =>
  withScratch(async (scratch) => {
    const tree = join(scratch, 'checkout', 'npm'); // not inside node_modules
    await copyPackage(tree, '9.9.9');
    await cp(builtAddon, join(tree, addonFile));
    const result = run(scratch, tree, tree);
    assert.notEqual(result.status, 0, result.stdout);
    assert.match(result.stderr, new RegExp(`@dokebi/lock 9\\.9\\.9 loaded a native addon of version ${pkg.version.replaceAll('.', '\\.')} \\(${tree}/${addonFile}\\)`));
    assert.match(result.stderr, /rebuild it with scripts\/build-node/);
  }));

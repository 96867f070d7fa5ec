// Which addon @dokebi/lock loads (lib/native.js): an installed package loads
// only its per-platform package, a development tree the build next to
// package.json, and either way an addon of another version is an error.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import { cp, mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import * as loaded from '../lib/native.js';
import { elfInterpreter } from '../lib/platform.js';

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

test('an installed package without its platform package is PLATFORM_PACKAGE_MISSING with the exact npm install', linuxX64, () =>
  withScratch(async (scratch) => {
    const { app, lockDir } = await installedApp(scratch, { platformPackage: false });
    await cp(builtAddon, join(lockDir, addonFile)); // a working build beside it is not used either
    const result = run(app, '@dokebi/lock', lockDir);
    assert.notEqual(result.status, 0, result.stdout);
    assert.match(result.stderr, /LockError: @dokebi\/lock's prebuilt addon for linux-x64-gnu is the optional package/);
    assert.match(result.stderr, new RegExp(`code: 'PLATFORM_PACKAGE_MISSING'`));
    assert.match(result.stderr, new RegExp(`fix: 'Run \`npm install ${platformName}@${pkg.version}\`\.'`));
    assert.doesNotMatch(result.stderr, /scripts\/build-node/);
  }));

/**
 * Runs `run(...)` with `fake` (a module's source) imported first: it changes
 * what the process says of itself (process.platform, the process report).
 */
async function runFaking(scratch, fake, cwd, entry, lockDir) {
  const preload = join(scratch, 'fake.mjs');
  await writeFile(preload, fake);
  const script = `
    try {
      await import(${JSON.stringify(pathToFileURL(join(entry, 'index.js')).href)});
      console.log('loaded');
    } catch (error) {
      console.log(JSON.stringify({ name: error.name, code: error.code, plugin: error.plugin, message: error.message, fix: error.fix, details: error.details }));
    }`;
  const result = spawnSync(process.execPath, ['--import', pathToFileURL(preload).href, '--input-type=module', '-e', script], {
    cwd, encoding: 'utf8', timeout: 30_000,
  });
  assert.equal(result.status, 0, result.stderr);
  return result.stdout.trim() === 'loaded' ? 'loaded' : JSON.parse(result.stdout);
}

const platformIs = (platform, arch) =>
  `Object.defineProperty(process, 'platform', { value: ${JSON.stringify(platform)} });\n` +
  `Object.defineProperty(process, 'arch', { value: ${JSON.stringify(arch)} });\n`;

test('a platform without a package is PLATFORM_UNSUPPORTED naming it, the supported ones and how to build from source', () =>
  withScratch(async (scratch) => {
    const { app, lockDir } = await installedApp(scratch);
    for (const [platform, arch] of [['freebsd', 'x64'], ['linux', 'riscv64'], ['win32', 'arm64']]) {
      const error = await runFaking(scratch, platformIs(platform, arch), app, lockDir, lockDir);
      const tag = platform === 'linux' ? `linux-${arch}-gnu` : `${platform}-${arch}`;
      assert.equal(error.name, 'LockError');
      assert.equal(error.code, 'PLATFORM_UNSUPPORTED');
      assert.equal(error.plugin, 'dokebi-lock');
      assert.match(error.message, new RegExp(`no prebuilt addon for ${tag} \\(process\\.platform ${platform}, process\\.arch ${arch}\\)`));
      const supported = Object.keys(pkg.optionalDependencies).map((name) => name.replace('@dokebi/lock-', ''));
      assert.deepEqual(error.details, { platform: tag, supported });
      assert.match(error.message, new RegExp(`prebuilt: ${supported.join(', ')}\\.$`));
      assert.match(error.fix, /Rust toolchain .* `bash scripts\/build-node --host` .* `npm install <clone>\/npm`/);
    }
  }));

test('every supported platform is tried as its own package: one missing is PLATFORM_PACKAGE_MISSING for that one', () =>
  withScratch(async (scratch) => {
    const { app, lockDir } = await installedApp(scratch);
    for (const [platform, arch, tag] of [['darwin', 'arm64', 'darwin-arm64'], ['darwin', 'x64', 'darwin-x64'], ['win32', 'x64', 'win32-x64'], ['linux', 'arm64', 'linux-arm64-gnu']]) {
      const error = await runFaking(scratch, platformIs(platform, arch), app, lockDir, lockDir);
      assert.equal(error.code, 'PLATFORM_PACKAGE_MISSING', JSON.stringify(error));
      assert.equal(error.details.package, `@dokebi/lock-${tag}@${pkg.version}`);
      assert.equal(error.fix, `Run \`npm install @dokebi/lock-${tag}@${pkg.version}\`.`);
    }
  }));

test('a musl Linux is told apart from glibc when the process report has no glibc field', () =>
  withScratch(async (scratch) => {
    const { app, lockDir } = await installedApp(scratch);
    // As a musl Node reports itself: no glibcVersionRuntime, musl's loader among the shared objects.
    const musl = "const report = process.report.getReport; process.report.getReport = () => ({ ...report.call(process.report), header: {}, sharedObjects: ['/lib/ld-musl-x86_64.so.1'] });\n";
    const error = await runFaking(scratch, musl, app, lockDir, lockDir);
    assert.equal(error.code, 'PLATFORM_PACKAGE_MISSING', JSON.stringify(error));
    assert.equal(error.details.platform, 'linux-x64-musl');
  }));

test('a glibc Linux whose process report lacks the glibc field still loads its gnu package', linuxX64, () =>
  withScratch(async (scratch) => {
    const { app, lockDir } = await installedApp(scratch);
    const fakes = [
      // The field is gone, the shared objects tell.
      "const report = process.report.getReport; process.report.getReport = () => ({ ...report.call(process.report), header: {} });\n",
      // Nothing in the report (it fails): the Node binary's own loader tells.
      "process.report.getReport = () => { throw new Error('no report'); };\n",
    ];
    for (const fake of fakes) assert.equal(await runFaking(scratch, fake, app, lockDir, lockDir), 'loaded');
  }));

test('the ELF interpreter of a program tells its C library', linuxX64, async () => {
  assert.equal(elfInterpreter(process.execPath), '/lib64/ld-linux-x86-64.so.2');
  assert.equal(elfInterpreter(join(packageDir, 'package.json')), undefined);
  await withScratch(async (scratch) => {
    const program = join(scratch, 'hello');
    await writeFile(`${program}.c`, 'int main(void) { return 0; }\n');
    execFileSync('musl-gcc', [`${program}.c`, '-o', program]);
    assert.match(elfInterpreter(program), /^\/lib\/ld-musl-x86_64\.so\.1$/);
  });
});

test('an installed addon of another version than the JS package is ADDON_VERSION_MISMATCH naming both and the fix', linuxX64, () =>
  withScratch(async (scratch) => {
    const { app, lockDir } = await installedApp(scratch, { version: '9.9.9' });
    const result = run(app, '@dokebi/lock', lockDir);
    assert.notEqual(result.status, 0, result.stdout);
    assert.match(result.stderr, /code: 'ADDON_VERSION_MISMATCH'/);
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

// The packed packages install into a fresh app without a Rust toolchain and
// run the README's quick start on Node 24; the packed addon runs on any x64
// Linux with glibc 2.17 or later and needs no library beyond glibc's own
// (no OpenSSL).
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile, mkdir, access } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join, delimiter } from 'node:path';
import { fileURLToPath } from 'node:url';
import { compareVersions } from './helpers.js';

const packageDir = fileURLToPath(new URL('..', import.meta.url));
const platformDir = join(packageDir, 'npm', 'linux-x64-gnu');
const linuxX64 = process.platform === 'linux' && process.arch === 'x64';

// The oldest glibc the published addon runs on (scripts/build-node links
// against it; README "Install").
const GLIBC_FLOOR = '2.17';
// What the addon may load: glibc's libraries and dynamic loader (libpthread
// and libdl are separate libraries before glibc 2.34, so a 2.17 build names
// them; newer glibc keeps them as empty stubs), and libgcc_s (Rust's unwinder,
// which zig's linker replaces by a static copy). Node provides the N-API symbols.
const ALLOWED_LIBRARIES = ['libc.so.6', 'libm.so.6', 'libpthread.so.0', 'libdl.so.2', 'ld-linux-x86-64.so.2', 'libgcc_s.so.1'];

/** The code block under "## Quick start" of README.md. */
async function quickStart() {
  const readme = await readFile(join(packageDir, 'README.md'), 'utf8');
  const section = readme.slice(readme.indexOf('## Quick start'));
  return section.match(/```js\n([\s\S]*?)```/)[1];
}

/** The code block under "## Quick start: Node" of the repository's README.md. */
async function repositoryQuickStart() {
  const readme = await readFile(join(packageDir, '..', 'README.md'), 'utf8');
  const section = readme.slice(readme.indexOf('## Quick start: Node'));
  return section.match(/```js\n([\s\S]*?)```/)[1];
}

async function which(name, path) {
  for (const dir of path.split(delimiter)) {
    try {
      await access(join(dir, name));
      return join(dir, name);
    } catch {}
  }
  return null;
}

// Both tarballs, packed once and installed offline into a fresh app that
// has only Node on PATH: no cargo, no rustc, no compiler.
let scratch;
let app;
let env;
let platformTarball;

before(async () => {
  if (!linuxX64) return;
  scratch = await mkdtemp(join(tmpdir(), 'dokebi-lock-pack-'));
  const npmPath = execFileSync('sh', ['-c', 'command -v npm'], { encoding: 'utf8' }).trim();
  const npm = (args, cwd, env) => execFileSync(process.execPath, [npmPath, ...args], { cwd, env, encoding: 'utf8' });
  const [main] = npm(['pack', '--silent', '--pack-destination', scratch], packageDir).trim().split('\n');
  [platformTarball] = npm(['pack', '--silent', '--pack-destination', scratch], platformDir).trim().split('\n');
  platformTarball = join(scratch, platformTarball);

  app = join(scratch, 'app');
  await mkdir(app);
  await writeFile(join(app, 'package.json'), JSON.stringify({ name: 'app', private: true, type: 'module' }));
  env = { HOME: scratch, PATH: dirname(process.execPath) };
  npm(['install', '--offline', '--no-audit', '--no-fund', '--cache', join(scratch, 'cache'), join(scratch, main), platformTarball], app, env);
});

after(async () => {
  if (scratch) await rm(scratch, { recursive: true, force: true });
});

test('npm pack, install the tarballs offline with no Rust toolchain, run the quick start', { skip: !linuxX64 }, async () => {
  assert.equal(await which('cargo', env.PATH), null);
  assert.equal(await which('rustc', env.PATH), null);

  await writeFile(join(app, 'quickstart.js'), await quickStart());
  const run = spawnSync(process.execPath, ['quickstart.js'], { cwd: app, env, encoding: 'utf8', timeout: 30_000 });
  assert.equal(run.status, 0, run.stderr);
  assert.match(run.stdout, /holding order:42 fence 1/);
  assert.match(run.stdout, /fence grows: true/);

  const cjs = spawnSync(process.execPath, ['-e', "require('@dokebi/lock').openLock({ config: {} }).then((p) => p.close()).then(() => console.log('cjs ok'))"], { cwd: app, env, encoding: 'utf8' });
  assert.equal(cjs.stdout.trim(), 'cjs ok', cjs.stderr);

  // The install module, its manifest and the entry template are in the package.
  const installCheck = "import { planInstall, manifest } from '@dokebi/lock/install'; import { readFileSync } from 'node:fs'; " +
    "const [file] = planInstall({}).files; readFileSync(file.template); console.log('install ok', manifest.schemaVersion)";
  const install = spawnSync(process.execPath, ['--input-type=module', '-e', installCheck], { cwd: app, env, encoding: 'utf8' });
  assert.equal(install.stdout.trim(), 'install ok 2', install.stderr);

  // The command-line tool is linked where `npx dokebi-lock` finds it.
  const cli = spawnSync(join(app, 'node_modules', '.bin', 'dokebi-lock'), ['--help'], { cwd: app, env, encoding: 'utf8' });
  assert.equal(cli.status, 0, cli.stderr);
  assert.match(cli.stdout, /force-release <backend> <key>/);
});

test("the repository README's Node quick start runs as written, installed from the tarballs", { skip: !linuxX64 }, async () => {
  await writeFile(join(app, 'quickstart.mjs'), await repositoryQuickStart());
  // TMPDIR: the quick start's lock directory goes in this test's scratch folder.
  const run = spawnSync(process.execPath, ['quickstart.mjs'], { cwd: app, env: { ...env, TMPDIR: scratch }, encoding: 'utf8', timeout: 30_000 });
  assert.equal(run.status, 0, run.stderr);
  assert.match(run.stdout, /^fence \d+ wrote: true$/m);
  assert.match(run.stdout, /^the paused holder's late write: false$/m);
  assert.match(run.stdout, /^order 42: paid, fence \d+$/m);
});

test(`the packed addon needs only glibc ${GLIBC_FLOOR} or later, is stripped, and locks in Node 24`, { skip: !linuxX64 }, async () => {
  const unpacked = join(scratch, 'unpacked');
  await mkdir(unpacked);
  execFileSync('tar', ['xzf', platformTarball, '-C', unpacked]);
  const addon = join(unpacked, 'package', 'dokebi-lock.linux-x64-gnu.node');
  const tool = (command, ...args) => execFileSync(command, [...args, addon], { encoding: 'utf8' });

  // Its direct needs (DT_NEEDED), then all that ldd resolves.
  const headers = tool('objdump', '-p');
  const needed = [...headers.matchAll(/^\s*NEEDED\s+(\S+)$/gm)].map((m) => m[1]);
  assert.ok(needed.includes('libc.so.6'), headers);
  for (const library of needed) assert.ok(ALLOWED_LIBRARIES.includes(library), `the addon needs ${library}`);
  const ldd = tool('ldd');
  assert.doesNotMatch(ldd, /not found|libssl|libcrypto/, ldd);
  const resolved = ldd
    .trim()
    .split('\n')
    .map((line) => line.trim().split(/\s+/)[0].split('/').at(-1))
    .filter((name) => name !== 'linux-vdso.so.1');
  for (const library of resolved) assert.ok(ALLOWED_LIBRARIES.includes(library), `ldd lists ${library}:\n${ldd}`);

  // No glibc symbol version above the floor.
  const symbols = tool('objdump', '-T');
  const glibcOf = (line) => line.match(/\bGLIBC_(\d+(?:\.\d+)+)\b/)?.[1];
  const versions = symbols.split('\n').map(glibcOf).filter(Boolean);
  assert.ok(versions.length > 0, symbols);
  const aboveFloor = symbols.split('\n').filter((line) => glibcOf(line) && compareVersions(glibcOf(line), GLIBC_FLOOR) > 0);
  assert.deepEqual(aboveFloor, [], `the addon needs glibc above ${GLIBC_FLOOR}`);

  // Stripped: no static symbol table (the dynamic one stays).
  assert.doesNotMatch(tool('readelf', '-S', '-W'), /\.symtab\b/);

  // The same file, installed from the tarball, loads in this Node 24 and locks.
  const installed = join(app, 'node_modules', '@dokebi', 'lock-linux-x64-gnu', 'dokebi-lock.linux-x64-gnu.node');
  assert.deepEqual(await readFile(installed), await readFile(addon));
  const script =
    "import { openLock } from '@dokebi/lock'; const p = await openLock({ config: { 'dokebi-lock': { backends: { b: {} } } } }); " +
    "const lease = await p.backend('b').acquire('k'); console.log('fence', lease.fence, 'released', await lease.release()); await p.close();";
  const run = spawnSync(process.execPath, ['--input-type=module', '-e', script], { cwd: app, env, encoding: 'utf8', timeout: 30_000 });
  assert.equal(run.stdout.trim(), 'fence 1 released true', run.stderr);
});

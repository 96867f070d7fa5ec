// The packed packages install into a fresh app without a Rust toolchain and
// run the README's quick start on Node 24.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile, mkdir, access } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join, delimiter } from 'node:path';
import { fileURLToPath } from 'node:url';

const packageDir = fileURLToPath(new URL('..', import.meta.url));
const platformDir = join(packageDir, 'npm', 'linux-x64-gnu');
/** The code block under "## Quick start" of README.md. */
async function quickStart() {
  const readme = await readFile(join(packageDir, 'README.md'), 'utf8');
  const section = readme.slice(readme.indexOf('## Quick start'));
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

test('npm pack, install the tarballs offline with no Rust toolchain, run the quick start', { skip: process.platform !== 'linux' || process.arch !== 'x64' }, async () => {
  const scratch = await mkdtemp(join(tmpdir(), 'dokebi-lock-pack-'));
  try {
    const npmPath = execFileSync('sh', ['-c', 'command -v npm'], { encoding: 'utf8' }).trim();
    const npm = (args, cwd, env) => execFileSync(process.execPath, [npmPath, ...args], { cwd, env, encoding: 'utf8' });
    const [main] = npm(['pack', '--silent', '--pack-destination', scratch], packageDir).trim().split('\n');
    const [native] = npm(['pack', '--silent', '--pack-destination', scratch], platformDir).trim().split('\n');

    const app = join(scratch, 'app');
    await mkdir(app);
    await writeFile(join(app, 'package.json'), JSON.stringify({ name: 'app', private: true, type: 'module' }));
    // Only Node on PATH: no cargo, no rustc, no compiler.
    const env = { HOME: scratch, PATH: dirname(process.execPath) };
    assert.equal(await which('cargo', env.PATH), null);
    assert.equal(await which('rustc', env.PATH), null);
    npm(['install', '--offline', '--no-audit', '--no-fund', '--cache', join(scratch, 'cache'), join(scratch, main), join(scratch, native)], app, env);

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
  } finally {
    await rm(scratch, { recursive: true, force: true });
  }
});

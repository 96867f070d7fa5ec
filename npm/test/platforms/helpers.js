// What the platform tests share: where scripts/build-node --all packed the
// platform packages, the tools scripts/setup installed, and an app that
// installs packed tarballs the way a user's would.
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

export const packageDir = fileURLToPath(new URL('../..', import.meta.url));
export const root = join(packageDir, '..');
export const tools = join(root, '.tools');
export const pkg = JSON.parse(readFileSync(join(packageDir, 'package.json'), 'utf8'));
export const tags = Object.keys(pkg.optionalDependencies).map((name) => name.replace('@dokebi/lock-', ''));

/** The folder scripts/build-node --all packed into (target/npm). */
export const packs = join(
  JSON.parse(execFileSync('cargo', ['metadata', '--format-version', '1', '--no-deps'], { cwd: root, encoding: 'utf8' })).target_directory,
  'npm',
);

/** The packed platform package of `tag`; throws when it was not built. */
export function platformTarball(tag) {
  const file = join(packs, `dokebi-lock-${tag}-${pkg.version}.tgz`);
  if (!existsSync(file)) throw new Error(`${file} is missing: run scripts/build-node --all first`);
  return file;
}

/** Runs npm on this Node (the system npm script). */
export function npm(args, cwd, env = process.env) {
  const npmPath = execFileSync('sh', ['-c', 'command -v npm'], { encoding: 'utf8' }).trim();
  return execFileSync(process.execPath, [npmPath, ...args], { cwd, env, encoding: 'utf8' });
}

/**
 * A fresh app in a new folder under `scratch` with @dokebi/lock and the
 * platform package of `tag` installed offline from their tarballs (as on a
 * machine of that platform: `--force` lets npm install a package for
 * another CPU here), plus the optional peer @opentelemetry/api (packed from
 * the dev dependency npm/install put in place) for @dokebi/lock/otel, and
 * `smoke.mjs` beside them. Returns its folder.
 */
export async function appWith(scratch, tag) {
  const pack = (dir) => npm(['pack', '--silent', '--pack-destination', scratch, dir], packageDir).trim().split('\n')[0];
  const tarballs = [pack('.'), pack(join(packageDir, 'node_modules', '@opentelemetry', 'api'))].map((file) => join(scratch, file));
  const app = await mkdtemp(join(scratch, `app-${tag}-`));
  await writeFile(join(app, 'package.json'), JSON.stringify({ name: 'app', private: true, type: 'module' }));
  const env = { HOME: scratch, PATH: dirname(process.execPath) };
  npm(['install', '--offline', '--force', '--no-audit', '--no-fund', '--cache', join(scratch, 'cache'), ...tarballs, platformTarball(tag)], app, env);
  execFileSync('cp', [join(packageDir, 'test', 'platforms', 'smoke.mjs'), app]);
  return app;
}

export function scratchDir() {
  return mkdtemp(join(tmpdir(), 'dokebi-lock-platforms-'));
}

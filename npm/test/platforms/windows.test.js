// win32-x64, as far as this machine can run it. Debian 12's Wine (8.0)
// cannot start Node 24: V8 reserves its code pointer table with
// VirtualAlloc2(MEM_RESERVE | MEM_RESERVE_PLACEHOLDER), which Wine 8 refuses
// ("wrong alloc type flags (00042000)"), and Node exits with "Fatal process
// out of memory: SegmentedTable::InitializeTable". So the packed addon is
// loaded by a small Windows program under Wine, as Node loads an addon: every
// import resolved by Windows' loader, its initialisers run, its Node-API
// entry point found. Node 22 does start under Wine (NODE_SKIP_PLATFORM_CHECK
// quiets its check of the Windows version Wine reports): it runs the smoke
// test, the redis and postgres drivers included, from an app that installed
// the tarballs, the file driver (LockFileEx) included.
// Wine, like Windows before 10 version 1703, refuses TCP_KEEPCNT
// (WSAENOPROTOOPT): the connection goes on with the keepalive it takes.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import { closeSync, openSync, readFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { startRedis } from '../redis-server.js';
import { PG_URL, useSchemas } from '../postgres-server.js';
import { appWith, platformTarball, scratchDir, tools } from './helpers.js';

const here = new URL('./windows/', import.meta.url).pathname;
const zigCc = (...args) => execFileSync(join(tools, 'zigbuild', 'bin', 'python3'), ['-m', 'ziglang', 'cc', '-target', 'x86_64-windows-gnu', ...args]);

let scratch;
let redis;
const schema = useSchemas('wine');
before(async () => {
  scratch = await scratchDir();
  redis = await startRedis();
});
after(async () => {
  await redis?.stop();
  await rm(scratch, { recursive: true, force: true });
});

/** The environment of a Wine program: a private prefix, no display. */
function wineEnv() {
  return { ...process.env, WINEPREFIX: join(scratch, 'wine'), WINEDEBUG: '-all', DISPLAY: '' };
}

test('win32-x64: Windows (Wine) loads the packed addon and finds napi_register_module_v1', async () => {
  const dir = await mkdtemp(join(scratch, 'win32-'));
  execFileSync('tar', ['xzf', platformTarball('win32-x64'), '-C', dir]);
  const bin = join(dir, 'package');
  zigCc('-municode', join(here, 'loader.c'), '-o', join(bin, 'loader.exe'));
  zigCc('-shared', join(here, 'bcryptprimitives.c'), '-ladvapi32', '-o', join(bin, 'bcryptprimitives.dll'));
  const run = spawnSync('wine', [join(bin, 'loader.exe'), 'dokebi-lock.win32-x64.node'], {
    cwd: bin,
    env: wineEnv(),
    encoding: 'utf8',
    timeout: 180_000,
  });
  assert.equal(run.status, 0, `${run.stdout}\n${run.stderr}`);
  assert.equal(run.stdout.trim(), 'loaded; napi_register_module_v1 exported');
});

test('win32-x64: Node 22 under Wine runs the smoke test (local, redis, postgres, file, hand-offs) from an app installed from the tarballs', async () => {
  const app = await appWith(scratch, 'win32-x64');
  // The bcryptprimitives.dll stand-in in the app's folder, where the
  // addon's imports are looked for.
  zigCc('-shared', join(here, 'bcryptprimitives.c'), '-ladvapi32', '-o', join(app, 'bcryptprimitives.dll'));
  // Node under Wine cannot write to a pipe (process.stdout is EBADF): its
  // output goes to files.
  const [out, err] = [join(app, 'out.txt'), join(app, 'err.txt')];
  const [outFd, errFd] = [openSync(out, 'w'), openSync(err, 'w')];
  const node = join(tools, 'node22-win', 'package', 'bin', 'node.exe');
  const run = spawnSync('wine', [node, 'smoke.mjs'], {
    cwd: app,
    env: { ...wineEnv(), NODE_SKIP_PLATFORM_CHECK: '1', REDIS_URL: redis.url, PG_URL, PG_SCHEMA: schema(), FILE_LOCK_DIR: 'C:\\dokebi-locks' },
    stdio: ['ignore', outFd, errFd],
    timeout: 600_000,
  });
  closeSync(outFd);
  closeSync(errFd);
  const [stdout, stderr] = [readFileSync(out, 'utf8'), readFileSync(err, 'utf8')];
  assert.equal(run.status, 0, `${stdout}\n${stderr}`);
  assert.match(stdout, /^runtime Node\.js\/22 win32-x64$/m);
  assert.match(stdout, /^ok the waiting provider gets the key with a higher fence/m);
  assert.match(stdout, /^ok the waiting file provider gets the key with a higher fence/m);
  assert.match(stdout, /^smoke passed$/m);
  // Wine, like Windows before 10 version 1703, has no TCP_KEEPCNT: said once, and the connection works.
  assert.equal(stderr.match(/REDIS_TCP_KEEPALIVE/g)?.length ?? 0, 1, stderr);
  assert.match(stderr, /TCP_KEEPCNT/);
});

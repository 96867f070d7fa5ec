// win32-x64, as far as this machine can run it. Debian 12's Wine (8.0)
// cannot start Node 24: V8 reserves its code pointer table with
// VirtualAlloc2(MEM_RESERVE | MEM_RESERVE_PLACEHOLDER), which Wine 8 refuses
// ("wrong alloc type flags (00042000)"), and Node exits with "Fatal process
// out of memory: SegmentedTable::InitializeTable". So the packed addon is
// loaded by a small Windows program under Wine, as Node loads an addon: every
// import resolved by Windows' loader, its initialisers run, its Node-API
// entry point found.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { platformTarball, scratchDir, tools } from './helpers.js';

const here = new URL('./windows/', import.meta.url).pathname;
const zigCc = (...args) => execFileSync(join(tools, 'zigbuild', 'bin', 'python3'), ['-m', 'ziglang', 'cc', '-target', 'x86_64-windows-gnu', ...args]);

let scratch;
before(async () => {
  scratch = await scratchDir();
});
after(() => rm(scratch, { recursive: true, force: true }));

test('win32-x64: Windows (Wine) loads the packed addon and finds napi_register_module_v1', async () => {
  const dir = await mkdtemp(join(scratch, 'win32-'));
  execFileSync('tar', ['xzf', platformTarball('win32-x64'), '-C', dir]);
  const bin = join(dir, 'package');
  zigCc('-municode', join(here, 'loader.c'), '-o', join(bin, 'loader.exe'));
  zigCc('-shared', join(here, 'bcryptprimitives.c'), '-ladvapi32', '-o', join(bin, 'bcryptprimitives.dll'));
  const run = spawnSync('wine', [join(bin, 'loader.exe'), 'dokebi-lock.win32-x64.node'], {
    cwd: bin,
    env: { ...process.env, WINEPREFIX: join(scratch, 'wine'), WINEDEBUG: '-all', DISPLAY: '' },
    encoding: 'utf8',
    timeout: 180_000,
  });
  assert.equal(run.status, 0, `${run.stdout}\n${run.stderr}`);
  assert.equal(run.stdout.trim(), 'loaded; napi_register_module_v1 exported');
});

// examples/29-extension runs with one command and prints what it promises.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';

test('examples/29-extension: a sqlite app driver shared by two apps and another process, and metrics through wrapBackend; withLock and status on acquire-only backends', () => {
  const main = fileURLToPath(new URL('../../examples/29-extension/main.js', import.meta.url));
  const result = spawnSync(process.execPath, [main], { encoding: 'utf8', timeout: 60_000 });
  assert.equal(result.status, 0, `29-extension failed:\n${result.stderr}`);
  const out = result.stdout;
  assert.match(out, /web holds report:2026-11, fence 1/);
  assert.match(out, /another process: LOCK_BUSY/);
  assert.match(out, /worker: LOCK_BUSY/);
  assert.match(out, /worker got report:2026-11 after the release; fence grew: true/);
  assert.match(out, /withLock on the sqlite backend, fence 1/);
  assert.match(out, /status reports: \{"driver":"sqlite","held":null,"waiting":0,"acquired":2,"timedOut":0,"lost":null\}/);
  assert.match(out, /metrics reports: \{"acquired":3,"failed":\{"LOCK_BUSY":1\}\}/);
  assert.match(out, /metrics orders: \{"acquired":1,"failed":\{\}\}/);
  assert.match(out, /bad settings: INVALID_OPTIONS backends\.reports\.leaseMs/);
  assert.equal(result.stderr, '');
});

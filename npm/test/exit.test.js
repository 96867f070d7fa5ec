// Nothing the addon creates keeps the process alive after close().
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';

const child = `
import { openLock } from ${JSON.stringify(new URL('../index.js', import.meta.url).href)};
const provider = await openLock({ yaml: 'schemaVersion: 1\\noptions:\\n  dokebi-lock:\\n    backends:\\n      b: {}\\n' });
const backend = provider.backend('b');
const lease = await backend.acquire('k');
const waiter = backend.acquire('k', { waitTimeoutMs: 600000 }).catch((error) => error.code);
await provider.close();
console.log(await waiter, lease.valid);
`;

test('a process that opens, locks, leaves a waiter and closes exits by itself', () => {
  const result = spawnSync(process.execPath, ['--input-type=module', '-e', child], { encoding: 'utf8', timeout: 20_000 });
  assert.equal(result.signal, null, 'the child had to be killed: something kept it alive');
  assert.equal(result.status, 0, result.stderr);
  assert.equal(result.stdout.trim(), 'CLOSED false');
});

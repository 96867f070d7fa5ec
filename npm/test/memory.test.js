// Resource check: 1e6 local acquire/release cycles keep memory flat. Run in
// a child with --expose-gc, so every sample is taken after a full GC: the
// resident set may grow by at most 16 MiB over the million cycles (a leaked
// lease object or native handle per cycle would be hundreds of MB).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';

const child = `
import { openLock } from ${JSON.stringify(new URL('../index.js', import.meta.url).href)};
const provider = await openLock({ yaml: 'schemaVersion: 1\\noptions:\\n  dokebi-lock:\\n    backends:\\n      b: {}\\n' });
const backend = provider.backend('b');
const cycle = async (i) => {
  const lease = await backend.acquire('key-' + (i % 64));
  if (!(await lease.release())) throw new Error('not released');
};
for (let i = 0; i < 100_000; i++) await cycle(i);
const samples = [];
for (let round = 0; round < 10; round++) {
  for (let i = 0; i < 100_000; i++) await cycle(i);
  gc();
  samples.push(process.memoryUsage().rss);
}
await provider.close();
console.log(JSON.stringify(samples));
`;

test('1e6 local acquire/release cycles keep the resident set flat', (t) => {
  const result = spawnSync(process.execPath, ['--expose-gc', '--input-type=module', '-e', child], { encoding: 'utf8', timeout: 120_000 });
  assert.equal(result.status, 0, result.stderr);
  const samples = JSON.parse(result.stdout);
  const growth = Math.max(...samples) - samples[0];
  t.diagnostic(`resident set after each 100000 cycles (MiB): ${samples.map((b) => (b / 2 ** 20).toFixed(1)).join(' ')}`);
  assert.ok(growth <= 16 * 1024 * 1024, `resident set grew by ${growth} bytes: ${samples}`);
});

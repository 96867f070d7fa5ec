// Resource check: 1e6 local acquire/release cycles keep memory flat. Run in
// a child with --expose-gc, so every sample is taken after a full GC, one
// per 100000 cycles after 100000 of warm-up (900000 cycles measured).
//
// The bounds, from what a leak would cost: a leaked JS object per cycle (a
// Lease, a closure, a promise; 16 bytes at the very least) is 14 MiB of
// heap over the 900000 cycles, and a leaked native allocation (a malloc
// chunk is 32 bytes at least on 64-bit glibc) 27 MiB of resident set. On
// this machine, three runs: the heap stayed within 8 KiB, the resident set
// grew by 1.3-1.9 MiB (pages first touched by the allocator and V8's code
// space, slowing down as the run goes on). So: the heap may grow by 256
// KiB (0.3 bytes a cycle), the resident set by 4 MiB (4.7 bytes a cycle,
// twice what was seen): a leak of one native chunk in every 7 cycles fails.
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
  const { rss, heapUsed } = process.memoryUsage();
  samples.push({ rss, heapUsed });
}
await provider.close();
console.log(JSON.stringify(samples));
`;

const MiB = 2 ** 20;

test('1e6 local acquire/release cycles keep the resident set and the heap flat', (t) => {
  const result = spawnSync(process.execPath, ['--expose-gc', '--input-type=module', '-e', child], { encoding: 'utf8', timeout: 120_000 });
  assert.equal(result.status, 0, result.stderr);
  const samples = JSON.parse(result.stdout);
  const growth = (field) => Math.max(...samples.map((s) => s[field])) - samples[0][field];
  const show = (field) => samples.map((s) => (s[field] / MiB).toFixed(2)).join(' ');
  t.diagnostic(`resident set after each 100000 cycles (MiB): ${show('rss')}`);
  t.diagnostic(`heap used after each 100000 cycles (MiB): ${show('heapUsed')}`);
  assert.ok(growth('heapUsed') <= MiB / 4, `the heap grew by ${growth('heapUsed')} bytes: ${show('heapUsed')}`);
  assert.ok(growth('rss') <= 4 * MiB, `the resident set grew by ${growth('rss')} bytes: ${show('rss')}`);
});

// An oversized key is refused from its length alone: nothing of it is
// decoded, and the backend's key buffer keeps no more than maxKeyBytes.
const oversized = `
import { openLock } from ${JSON.stringify(new URL('../index.js', import.meta.url).href)};
const provider = await openLock({ yaml: 'schemaVersion: 1\\noptions:\\n  dokebi-lock:\\n    backends:\\n      b: {}\\n' });
const backend = provider.backend('b');
await (await backend.acquire('warm-up')).release();
gc();
const before = process.memoryUsage().rss;
let key = 'x'.repeat(200 * 2 ** 20);
const error = await backend.acquire(key).catch((error) => error);
key = undefined;
gc();
const after = process.memoryUsage().rss;
await provider.close();
console.log(JSON.stringify({ code: error.code, details: error.details, before, after }));
`;

test('a 200 MiB key is refused with its length, and the backend keeps none of it', () => {
  const result = spawnSync(process.execPath, ['--expose-gc', '--input-type=module', '-e', oversized], { encoding: 'utf8', timeout: 120_000 });
  assert.equal(result.status, 0, result.stderr);
  const { code, details, before, after } = JSON.parse(result.stdout);
  assert.equal(code, 'INVALID_KEY');
  assert.deepEqual(details, { bytes: 200 * MiB, maxKeyBytes: 1024 });
  // The decoded key was 200 MiB of UTF-8: kept, the resident set stays that much larger.
  assert.ok(after - before <= 32 * MiB, `the resident set grew by ${((after - before) / MiB).toFixed(1)} MiB`);
});

// Two builds of @dokebi/lock's JS layer in one process, their local
// acquire+release (or withLock) loops interleaved batch by batch, so that
// the machine's load falls on both alike: what a change to npm/lib costs the
// uncontended path (one key, withLock, 4 keys at once, or one key in shared
// mode), as the median of the per-round ratios.
// Usage: node ab.mjs <npm dir A> <npm dir B> [pair|section|keys|shared] [rounds] [batch]
// (each dir a package directory with its addon built, e.g. a copy of npm/ at
// another commit; A against itself in a copy shows the method's noise).
import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';

const [dirA, dirB, kind = 'pair', rounds = '150', batch = '20000'] = process.argv.slice(2);
if (!dirA || !dirB) throw new Error('usage: node ab.mjs <npm dir A> <npm dir B> [pair|section|keys|shared] [rounds] [batch]');
const noop = () => {};
const FOUR_KEYS = ['key:0', 'key:1', 'key:2', 'key:3'];
const SHARED = { mode: 'shared' };

async function open(dir) {
  const { openLock } = await import(pathToFileURL(resolve(dir, 'index.js')).href);
  const provider = await openLock({ config: { 'dokebi-lock': { backends: { b: {} } } } });
  return provider.backend('b');
}

const LOOPS = {
  pair: async (backend, n) => {
    for (let i = 0; i < n; i++) await (await backend.acquire('k')).release();
  },
  section: async (backend, n) => {
    for (let i = 0; i < n; i++) await backend.withLock('k', noop);
  },
  keys: async (backend, n) => {
    for (let i = 0; i < n; i++) await (await backend.acquire(FOUR_KEYS)).release();
  },
  shared: async (backend, n) => {
    for (let i = 0; i < n; i++) await (await backend.acquire('k', SHARED)).release();
  },
};
const loop = LOOPS[kind];
if (!loop) throw new Error(`unknown loop ${kind}: pair, section, keys or shared`);

const backends = [await open(dirA), await open(dirB)];
for (const backend of backends) await loop(backend, 100_000); // warm-up
const ratios = [];
for (let round = 0; round < Number(rounds); round++) {
  const ns = [0, 0];
  // Alternate which goes first.
  for (const side of round % 2 ? [0, 1] : [1, 0]) {
    const start = performance.now();
    await loop(backends[side], Number(batch));
    ns[side] = ((performance.now() - start) * 1e6) / Number(batch);
  }
  ratios.push(ns[1] / ns[0]);
}
ratios.sort((x, y) => x - y);
const at = (q) => ratios[Math.floor(q * (ratios.length - 1))];
console.log(`${kind}: B ÷ A time per op, median of ${ratios.length} rounds ${at(0.5).toFixed(3)} (quartiles ${at(0.25).toFixed(3)}–${at(0.75).toFixed(3)})`);
process.exit(0);

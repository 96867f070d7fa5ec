// Two builds of @dokebi/lock's JS layer in one process, their local
// acquire+release (or withLock) loops interleaved batch by batch, so that
// the machine's load falls on both alike: what a change to npm/lib costs the
// uncontended path (one key, withLock, 4 keys at once, or one key in shared
// mode), as the median of the per-round ratios. `redis`, `postgres` and
// `mysql` are the same plain pair on a store backend of each build, on the
// servers of $REDIS_URL (default redis://127.0.0.1:6379), $POSTGRES_URL
// (postgres://postgres@127.0.0.1:5432/test) and $MYSQL_URL
// (mysql://root@127.0.0.1:3306/test), each build in a namespace, schema or
// table of its own: what a change to a store's protocol or to the addon
// costs a pair (give a batch of a few hundred). `file` and `file-shared`
// are a plain and a shared pair on the file driver, each build in a lock
// directory of its own under the system's temporary directory.
// Usage: node ab.mjs <npm dir A> <npm dir B> [pair|section|keys|shared|redis|postgres|mysql|file|file-shared] [rounds] [batch]
// (each dir a package directory with its addon built, e.g. a copy of npm/ at
// another commit; A against itself in a copy shows the method's noise).
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';

const [dirA, dirB, kind = 'pair', rounds = '150', batch = '20000'] = process.argv.slice(2);
if (!dirA || !dirB) throw new Error('usage: node ab.mjs <npm dir A> <npm dir B> [pair|section|keys|shared] [rounds] [batch]');
const noop = () => {};
const FOUR_KEYS = ['key:0', 'key:1', 'key:2', 'key:3'];
const SHARED = { mode: 'shared' };

/** The lock directories made for the file driver, removed at the end. */
const made = [];

/** The backend `b` of `kind`'s driver, for build `side`. */
function config(kind, side) {
  const place = `dokebi_ab_${side}`;
  switch (kind) {
    case 'redis':
      return {
        'dokebi-lock': { backends: { b: { driver: 'redis', connection: 'main', namespace: place, leaseMs: 10000 } } },
        'dokebi-redis': { connections: { main: { url: process.env.REDIS_URL ?? 'redis://127.0.0.1:6379' } } },
      };
    case 'postgres':
      return {
        'dokebi-lock': { backends: { b: { driver: 'postgres', connection: 'main', schema: place, leaseMs: 10000 } } },
        'dokebi-postgres': { connections: { main: { url: process.env.POSTGRES_URL ?? 'postgres://postgres@127.0.0.1:5432/test' } } },
      };
    case 'mysql':
      return {
        'dokebi-lock': { backends: { b: { driver: 'mysql', connection: 'main', table: place, leaseMs: 10000 } } },
        'dokebi-mysql': { connections: { main: { url: process.env.MYSQL_URL ?? 'mysql://root@127.0.0.1:3306/test' } } },
      };
    case 'file':
    case 'file-shared':
      made.push(mkdtempSync(join(tmpdir(), `${place}-`)));
      return { 'dokebi-lock': { backends: { b: { driver: 'file', directory: join(made.at(-1), 'locks') } } } };
    default:
      return { 'dokebi-lock': { backends: { b: {} } } };
  }
}

async function open(dir, side) {
  const { openLock } = await import(pathToFileURL(resolve(dir, 'index.js')).href);
  const provider = await openLock({ config: config(kind, side) });
  return provider.backend('b');
}

const STORES = new Set(['redis', 'postgres', 'mysql']);

const pair = async (backend, n) => {
  for (let i = 0; i < n; i++) await (await backend.acquire('k')).release();
};
const LOOPS = {
  pair,
  redis: pair,
  postgres: pair,
  mysql: pair,
  file: pair,
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
LOOPS['file-shared'] = LOOPS.shared;
const loop = LOOPS[kind];
if (!loop) throw new Error(`unknown loop ${kind}: pair, section, keys or shared`);

const backends = [await open(dirA, 'a'), await open(dirB, 'b')];
for (const backend of backends) await loop(backend, STORES.has(kind) ? 2_000 : 100_000); // warm-up
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
for (const dir of made) rmSync(dir, { recursive: true, force: true });
process.exit(0);

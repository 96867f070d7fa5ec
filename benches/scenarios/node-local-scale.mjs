// Node local at scale: the cost of an uncontended pair while many other keys
// are held (it must not grow with them), the memory one held lease costs,
// and whether a million acquire/release cycles leave anything behind.
//
// The pair is measured twice per N: on one key (the lock's own cost, which
// the number of held keys must not change) and on a fresh key each time
// (which adds what inserting a new key into a table of N costs the memory
// hierarchy: a cache miss no hash table avoids once N outgrows the caches).
import { localSubjects } from './local-subjects.mjs';
import { sequential } from '../lib/measure.mjs';
import { rate, duration, bytes } from '../lib/table.mjs';

const SUBJECTS = ['dokebi-lock', 'async-lock', 'async-mutex'];
const HELD = [1, 1e3, 1e5];
// Room for 1e5 held keys; the other settings keep their defaults.
const OURS = { maxKeys: 200000 };

async function open(subject) {
  return localSubjects[subject](subject === 'dokebi-lock' ? OURS : { keyed: true });
}

async function holdKeys(s, from, to) {
  for (let i = from; i < to; i++) await s.hold('held:' + i);
}

function freshKeys(prefix) {
  let n = 0;
  return () => prefix + n++;
}

function memory() {
  globalThis.gc();
  globalThis.gc();
  const m = process.memoryUsage();
  return { rss: m.rss, js: m.heapUsed + m.external + m.arrayBuffers };
}

export const scenarios = [
  {
    id: 'node-local-scale',
    title: 'Node local: uncontended acquire+release while N other keys are held, on one key / on a fresh key each time',
    unit: 'pairs/s',
    subjects: SUBJECTS,
    target: 'flat in N',
    headline: 'opsPerSec',
    note: 'Each cell: pairs/s on one key / on fresh keys. The ratio columns compare N = 100000 with N = 1; "us ÷ peer" compares the one-key figures at N = 100000.',
    columns: [
      ...HELD.map((n) => ({ head: `N=${n}`, cell: (r) => `${rate(r.byHeld[n].opsPerSec)} / ${rate(r.freshByHeld[n].opsPerSec)}` })),
      { head: `N=${HELD.at(-1)} ÷ N=1, one key`, cell: (r) => (r.byHeld[HELD.at(-1)].opsPerSec / r.byHeld[1].opsPerSec).toFixed(2) },
      { head: 'fresh keys', cell: (r) => (r.freshByHeld[HELD.at(-1)].opsPerSec / r.freshByHeld[1].opsPerSec).toFixed(2) },
    ],
    async run(subject, ctx) {
      const s = await open(subject);
      const byHeld = {};
      const freshByHeld = {};
      const measure = (keyAt) => sequential({ loop: s.loop, keyAt, seconds: ctx.seconds / 4, batch: ctx.smoke ? 100 : 1000 });
      let held = 0;
      for (const n of HELD) {
        await holdKeys(s, held, n);
        held = n;
        byHeld[n] = await measure(() => 'probe');
        freshByHeld[n] = await measure(freshKeys(`n${n}:`));
      }
      return { version: s.version, defaults: s.defaults, byHeld, freshByHeld, ...byHeld[HELD.at(-1)] };
    },
  },
  {
    id: 'node-local-memory',
    title: 'Node local: memory per held lease (10000 held) and after acquire/release cycles',
    unit: 'bytes',
    subjects: SUBJECTS,
    nodeArgs: ['--expose-gc'],
    headline: 'rssPerLease',
    ratioHead: 'us leaner by (RSS)',
    lowerIsBetter: true,
    target: '10000 held leases under 10 MB; RSS flat after 1e6 cycles',
    note: 'After a full GC: RSS counts native (Rust) memory too, "JS" is V8 heap + external. Cycles use a fresh key each.',
    columns: [
      { head: 'RSS / held lease', cell: (r) => bytes(r.rssPerLease) },
      { head: 'JS / held lease', cell: (r) => bytes(r.jsPerLease) },
      { head: 'RSS for 10000 held', cell: (r) => bytes(r.rssPerLease * r.heldCount) },
      { head: 'cycles', cell: (r) => rate(r.cycles) },
      { head: 'RSS growth: 1st half / 2nd half of cycles', cell: (r) => `${bytes(r.rssGrowth[0])} / ${bytes(r.rssGrowth[1])}` },
    ],
    async run(subject, ctx) {
      const s = await open(subject);
      const heldCount = 10000;
      const cycles = ctx.smoke ? 2e4 : 1e6;
      // Warm the code paths first, so that compiled code is not counted.
      await s.loop(freshKeys('warm:'), 20000);
      const before = memory();
      await holdKeys(s, 0, heldCount);
      const whileHeld = memory();
      const keys = freshKeys('cycle:');
      const m0 = memory();
      await s.loop(keys, cycles / 2);
      const m1 = memory();
      await s.loop(keys, cycles / 2);
      const m2 = memory();
      return {
        version: s.version,
        defaults: s.defaults,
        heldCount,
        rssPerLease: (whileHeld.rss - before.rss) / heldCount,
        jsPerLease: (whileHeld.js - before.js) / heldCount,
        cycles,
        rss: [m0.rss, m1.rss, m2.rss],
        rssGrowth: [m1.rss - m0.rss, m2.rss - m1.rss],
        jsGrowth: [m1.js - m0.js, m2.js - m1.js],
      };
    },
  },
];

// Where the p99 of "64 tasks on 64 keys" goes (issue 35's tail): runs ours
// and the ioredis SET NX PX + DEL floor, one after the other, in this
// process, with 64 tasks each looping acquire + release on a key of its
// own, and prints per subject the pairs' p50/p99, the garbage collections
// seen meanwhile (count, total and longest pause, by kind), how many of the
// slow pairs (above 4x the median and 3 ms) overlapped a collection, and
// the event loop's delay. Run by hand against a Redis of its own:
//
//   redis-server --port 16399 --save '' --daemonize yes
//   taskset -c 0 .tools/node24/bin/node benches/gc-tail.mjs redis://127.0.0.1:16399 [seconds]
//
// With `--trace-gc-nvp` Node prints each collection's phases:
// `heap.external_weak_global_handles` is the time spent on weak handles
// (Node-API finalizers), which store leases had until stop 47 (BENCHMARKS.md,
// "where the p99 tail goes").
import { PerformanceObserver, performance, monitorEventLoopDelay } from 'node:perf_hooks';
import { openRedisBackend } from './lib/dokebi.mjs';

const [url, seconds = '4'] = process.argv.slice(2);
if (!url) {
  console.error('usage: node benches/gc-tail.mjs <redis url> [seconds]');
  process.exit(2);
}
const TASKS = 64;
const GC_KINDS = { 1: 'scavenge', 2: 'mark-compact', 4: 'incremental', 8: 'weak callbacks' };

const subjects = {
  async 'dokebi-lock'() {
    const { provider, backend } = await openRedisBackend(url, {});
    return { acquire: (key) => backend.acquire(key), close: () => provider.close() };
  },
  async 'ioredis SET NX PX + DEL'() {
    const { default: Redis } = await import('ioredis');
    const redis = new Redis(url);
    let n = 0;
    return {
      acquire: async (key) => {
        await redis.set(key, String(++n), 'PX', 10000, 'NX');
        return { release: () => redis.del(key) };
      },
      close: () => redis.quit(),
    };
  },
};

/** Every pair's [start, end] (ms) of `tasks` tasks for `ms`. */
async function run(subject, ms) {
  const pairs = [];
  let stop = false;
  const task = async (i) => {
    const key = `gc-tail:${i}`;
    while (!stop) {
      const start = performance.now();
      await (await subject.acquire(key)).release();
      pairs.push([start, performance.now()]);
    }
  };
  const tasks = Array.from({ length: TASKS }, (_, i) => task(i));
  await new Promise((resolve) => setTimeout(resolve, ms));
  stop = true;
  await Promise.all(tasks);
  return pairs;
}

const gcs = [];
new PerformanceObserver((list) => {
  for (const e of list.getEntries()) gcs.push({ start: e.startTime, ms: e.duration, kind: GC_KINDS[e.detail?.kind] ?? e.detail?.kind });
}).observe({ entryTypes: ['gc'] });

for (const [name, open] of Object.entries(subjects)) {
  const subject = await open();
  await run(subject, 500); // warm-up
  gcs.length = 0;
  const delay = monitorEventLoopDelay({ resolution: 1 });
  delay.enable();
  const pairs = await run(subject, Number(seconds) * 1000);
  delay.disable();
  await subject.close();
  const took = pairs.map(([start, end]) => end - start).sort((a, b) => a - b);
  const at = (q) => took[Math.floor(took.length * q)];
  const slow = pairs.filter(([start, end]) => end - start > Math.max(4 * at(0.5), 3));
  const inGc = slow.filter(([start, end]) => gcs.some((gc) => gc.start < end && gc.start + gc.ms > start)).length;
  const byKind = {};
  for (const gc of gcs) {
    const k = (byKind[gc.kind] ??= { count: 0, ms: 0 });
    k.count += 1;
    k.ms += gc.ms;
  }
  console.log(`${name}: ${Math.round(pairs.length / Number(seconds))} pairs/s, p50 ${at(0.5).toFixed(2)} ms, p99 ${at(0.99).toFixed(2)} ms, max ${took.at(-1).toFixed(1)} ms`);
  console.log(`  slow pairs: ${slow.length}, of which ${inGc} overlapped a collection`);
  console.log(
    `  collections: ${gcs.length}, ${gcs.reduce((s, gc) => s + gc.ms, 0).toFixed(1)} ms in all, longest ${Math.max(0, ...gcs.map((gc) => gc.ms)).toFixed(2)} ms; ` +
      Object.entries(byKind).map(([kind, k]) => `${kind} ${k.count} (${k.ms.toFixed(1)} ms)`).join(', ')
  );
  console.log(`  event loop delay: p99 ${(delay.percentile(99) / 1e6).toFixed(2)} ms, max ${(delay.max / 1e6).toFixed(2)} ms`);
}

// Redis hand-off between two processes: the holder (this process) releases
// while the waiter (a forked process) is already waiting; the latency is from
// just before release() is called to the moment the waiter has the lease,
// both read from CLOCK_MONOTONIC, which the two processes share. Then the
// waiter waits for a held key for a while, and the commands it sends to Redis
// meanwhile are counted: polling locks load the server while they wait.
import { fork } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { setTimeout as sleep } from 'node:timers/promises';
import { redisSubjects } from './redis-subjects.mjs';
import { mailbox } from '../lib/ipc.mjs';
import { nowNs, elapsedUs, quantile } from '../lib/stats.mjs';
import { commandstats, commandDelta, countClientCommands } from '../lib/redis-count.mjs';
import { duration } from '../lib/table.mjs';

const WAITER = fileURLToPath(new URL('./handoff-waiter.mjs', import.meta.url));

/** Hand-offs of `key` from `s` (this process) to the `waiter` process:
 *  the release-to-grant latencies and the waits that gave up. Also used by
 *  the file scenarios. */
export async function handOffs(s, waiter, inbox, { rounds, maxMs, key }) {
  const latenciesUs = [];
  const failures = [];
  const end = performance.now() + maxMs;
  for (let i = 0; i < rounds && performance.now() < end; i++) {
    const release = await s.acquire(key);
    waiter.send({ type: 'acquire', key });
    await inbox.next('waiting');
    // A random hold, so that a polling waiter is caught at every phase of its
    // retry period, and long enough for its first attempt to have failed.
    await sleep(5 + Math.random() * 10);
    const t0 = nowNs();
    await release();
    const msg = await inbox.nextOf(['granted', 'failed']);
    if (msg.type === 'failed') {
      failures.push(msg.message);
      continue;
    }
    latenciesUs.push(elapsedUs(t0, BigInt(msg.t1)));
    waiter.send({ type: 'release' });
    await inbox.next('released');
  }
  return { latenciesUs, failures };
}

/** Commands per second the waiting process sends while the key stays held:
 *  MONITOR on `nodes`, INFO commandstats on `primaries` (a replica's
 *  commandstats would count what its primary replicates to it). */
async function waitingLoad(s, waiter, inbox, { primaries, nodes, key, windowMs }) {
  const release = await s.acquire(key);
  waiter.send({ type: 'acquire', key });
  await inbox.next('waiting');
  await sleep(100);
  const stats = await commandstats(primaries);
  const before = await stats.snapshot();
  const { sent } = await countClientCommands(nodes, () => sleep(windowMs));
  const calls = commandDelta(before, await stats.snapshot());
  await stats.close();
  await release();
  const msg = await inbox.nextOf(['granted', 'failed']);
  if (msg.type === 'granted') {
    waiter.send({ type: 'release' });
    await inbox.next('released');
  }
  return {
    commandsPerSecWhileWaiting: sent / (windowMs / 1e3),
    serverCallsPerSecWhileWaiting: Object.fromEntries(Object.entries(calls).map(([c, n]) => [c, n / (windowMs / 1e3)])),
    waiterGaveUpDuringWindow: msg.type === 'failed' ? msg.message : undefined,
  };
}

/** Hand-offs from this process to a waiter process, both over `connection`
 *  (a URL, or a mapping for ours), then the waiting load. */
export async function measureHandoffs({ factory, connection, primaries, nodes, ctx }) {
  const s = await redisSubjects[factory](connection);
  const waiter = fork(WAITER, ['redis', factory, JSON.stringify(connection)], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
  const inbox = mailbox(waiter);
  try {
    await inbox.next('ready');
    const key = `handoff:${process.pid}`;
    await handOffs(s, waiter, inbox, { key, rounds: ctx.smoke ? 1 : 3, maxMs: Infinity }); // warm-up: connections, scripts, subscriptions
    const { latenciesUs, failures } = await handOffs(s, waiter, inbox, {
      key,
      rounds: ctx.smoke ? 2 : 150,
      maxMs: ctx.smoke ? 1000 : 6000,
    });
    const load = await waitingLoad(s, waiter, inbox, { primaries, nodes, key, windowMs: ctx.smoke ? 200 : 1000 });
    return { version: s.version, defaults: s.defaults, failures, ...handoffLatencies(latenciesUs), ...load };
  } finally {
    waiter.kill();
    await s.close();
  }
}

/** The count, median, p99 and maximum of hand-off latencies (µs). */
export function handoffLatencies(latenciesUs) {
  return {
    handOffs: latenciesUs.length,
    p50Us: quantile(latenciesUs, 0.5),
    p99Us: quantile(latenciesUs, 0.99),
    maxUs: quantile(latenciesUs, 1),
    latenciesUs,
  };
}

/** Hand-offs of `key` from `s` to a forked waiter of `family`'s `subject`
 *  over `argument` (what handoff-waiter.mjs passes to the factory): a few
 *  to warm up, then up to 150 within `maxMs`. The postgres, mysql and file
 *  scenarios' measurement; redis's measures the waiting load too. */
export async function handoffsToProcess(s, { family, subject, argument, key, ctx, maxMs }) {
  const waiter = fork(WAITER, [family, subject, JSON.stringify(argument)], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
  const inbox = mailbox(waiter);
  try {
    await inbox.next('ready');
    await handOffs(s, waiter, inbox, { key, rounds: ctx.smoke ? 1 : 3, maxMs: Infinity });
    const { latenciesUs, failures } = await handOffs(s, waiter, inbox, { key, rounds: ctx.smoke ? 2 : 150, maxMs: ctx.smoke ? 1000 : maxMs });
    return { version: s.version, defaults: s.defaults, failures, ...handoffLatencies(latenciesUs) };
  } finally {
    waiter.kill();
  }
}

/** The latency columns of every hand-off scenario. */
export const latencyColumns = [
  { head: 'median', cell: (r) => duration(r.p50Us) },
  { head: 'p99', cell: (r) => duration(r.p99Us) },
  { head: 'hand-offs', cell: (r) => String(r.handOffs) + (r.failures.length ? ` (${r.failures.length} waits gave up)` : '') },
];

export const handoffColumns = [...latencyColumns, { head: 'commands/s while waiting', cell: (r) => r.commandsPerSecWhileWaiting.toFixed(1) }];

export const scenarios = [
  {
    id: 'node-redis-handoff',
    title: 'Node redis: hand-off to a waiter in another process',
    unit: 'latency',
    subjects: ['dokebi-lock', 'redlock', 'redis-semaphore'],
    needsRedis: true,
    headline: 'p50Us',
    lowerIsBetter: true,
    target: 'median under 1 ms, p99 under 5 ms, no polling load on Redis while waiting',
    note: 'Latency: holder calls release() -> the waiting process has the lease. Commands/s: what reaches Redis from the waiting process while the key stays held (MONITOR; server calls in the JSON).',
    columns: handoffColumns,
    run: (subject, ctx) => measureHandoffs({ factory: subject, connection: ctx.redisUrl, primaries: ctx.redisUrl, nodes: ctx.redisUrl, ctx }),
  },
];

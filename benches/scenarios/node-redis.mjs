// Node, redis driver against the raw-client floor and the Redis lock peers:
// sequential pairs on one key, and 64 callers on 64 keys over one connection.
// Besides the timing, each measurement counts what reached Redis per pair.
import { redisSubjects } from './redis-subjects.mjs';
import { sequential, concurrent } from '../lib/measure.mjs';
import { commandstats, commandDelta, countClientCommands, replicationStream, serverCpu, sum, addCounts } from '../lib/redis-count.mjs';
import { rate, duration } from '../lib/table.mjs';

export const FLOOR = 'ioredis SET NX PX + DEL';
export const SUBJECTS = ['dokebi-lock', FLOOR, 'redlock', 'redis-semaphore'];
const COUNTED_PAIRS = 100;
const TASKS = 64;

/** TASKS concurrent callers of `s`, each on a key of its own. */
export function tasksOnOwnKeys(s, ctx) {
  return concurrent({
    loop: s.loop,
    keyAtFor: (i) => {
      const key = 'k' + i;
      return () => key;
    },
    tasks: TASKS,
    seconds: ctx.seconds,
    batch: 1,
  });
}

export const columns = (unit) => [
  { head: unit, cell: (r) => rate(r.opsPerSec) },
  { head: 'p50', cell: (r) => duration(r.p50Us) },
  { head: 'p99', cell: (r) => duration(r.p99Us) },
  { head: 'commands sent / pair', cell: (r) => r.clientCommandsPerPair.toFixed(2) },
  { head: 'server calls / pair (INFO commandstats)', cell: (r) => Object.entries(r.serverCallsPerPair).map(([c, n]) => `${c} ${n.toFixed(2)}`).join(', ') },
  { head: 'app CPU / pair', cell: (r) => duration(r.appCpuUsPerPair) },
  { head: 'server CPU / pair', cell: (r) => duration(r.serverCpuUsPerPair) },
];

/** The bytes a pair adds to the primaries' replication streams (blank on
 *  a server without replicas). */
export const replicatedColumn = {
  head: 'bytes replicated / pair',
  cell: (r) => (r.replicatedBytesPerPair == null ? '' : r.replicatedBytesPerPair.toFixed(0)),
};

/** Runs `timed` between two commandstats snapshots of the server at `url`
 *  (or of each of a list: a cluster's primaries), two readings of their
 *  replication streams, and two CPU readings of the app (this process,
 *  every thread) and of the servers at `cpuNodes` (by default `monitored`),
 *  then counts with MONITOR on `monitored` (every node of a cluster) the
 *  commands clients send for COUNTED_PAIRS more sequential pairs. */
export async function measureWithCounts(s, url, timed, monitored = url, cpuNodes = monitored) {
  const stats = await commandstats(url);
  const servers = await serverCpu(cpuNodes);
  const stream = await replicationStream(url);
  try {
    const before = await stats.snapshotEach();
    const serverBefore = await servers.seconds();
    const streamBefore = await stream.bytes();
    const appBefore = process.cpuUsage();
    const r = await timed();
    const app = process.cpuUsage(appBefore);
    const serverSeconds = (await servers.seconds()) - serverBefore;
    const streamAfter = await stream.bytes();
    const byNode = (await stats.snapshotEach()).map((after, i) => commandDelta(before[i], after));
    const calls = addCounts(byNode);
    let n = 0;
    const { sent } = await countClientCommands(monitored, () => s.loop(() => 'counted:' + n++, COUNTED_PAIRS));
    return {
      ...r,
      version: s.version,
      defaults: s.defaults,
      clientCommandsPerPair: sent / COUNTED_PAIRS,
      serverCallsPerPair: Object.fromEntries(Object.entries(calls).map(([c, k]) => [c, k / r.allOps])),
      serverCallsTotalPerPair: sum(calls) / r.allOps,
      serverCallsByNode: byNode.map(sum),
      appCpuUsPerPair: (app.user + app.system) / r.allOps,
      serverCpuUsPerPair: (serverSeconds * 1e6) / r.allOps,
      replicatedBytesPerPair: streamBefore == null || streamAfter == null ? null : (streamAfter - streamBefore) / r.allOps,
    };
  } finally {
    stream.close();
    servers.close();
    await stats.close();
  }
}

export const scenarios = [
  {
    id: 'node-redis-sequential-one-key',
    title: 'Node redis: sequential acquire+release of one key',
    unit: 'pairs/s',
    subjects: SUBJECTS,
    needsRedis: true,
    target: 'at least 0.9x the SET NX PX + DEL floor, above every peer, at most 2 round trips per pair',
    note: '"commands sent" are what clients sent (MONITOR, commands run inside Lua excluded), an upper bound on round trips; "server calls" include commands run by scripts, counted over the whole measurement, warm-up included.',
    columns: columns('pairs/s'),
    async run(subject, ctx) {
      const s = await redisSubjects[subject](ctx.redisUrl);
      try {
        return await measureWithCounts(s, ctx.redisUrl, () => sequential({ loop: s.loop, keyAt: () => 'k', seconds: ctx.seconds, batch: 1 }));
      } finally {
        await s.close();
      }
    },
  },
  {
    id: 'node-redis-64-tasks-64-keys',
    title: 'Node redis: 64 tasks on 64 keys over one connection',
    unit: 'pairs/s',
    subjects: SUBJECTS,
    needsRedis: true,
    target: 'at least 1.5x redlock',
    columns: columns('pairs/s'),
    async run(subject, ctx) {
      const s = await redisSubjects[subject](ctx.redisUrl);
      try {
        return await measureWithCounts(s, ctx.redisUrl, () => tasksOnOwnKeys(s, ctx));
      } finally {
        await s.close();
      }
    },
  },
];

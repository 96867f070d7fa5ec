// Node redis beyond one server: 64 callers on 64 keys over one provider, and
// the hand-off to a waiter in another process, on a Redis Cluster (3
// primaries + 3 replicas) against one server; and what replicaAcks (WAIT
// for a replica after each acquire) costs a sequential pair. Ours only:
// each table compares setups of ours, measured in the same run, each row ÷
// the first.
import { redisSubjects } from './redis-subjects.mjs';
import { ONE_SERVER, CLUSTER, placement } from './topology.mjs';
import { measureWithCounts, columns, tasksOnOwnKeys } from './node-redis.mjs';
import { measureHandoffs, handoffColumns } from './node-handoff.mjs';
import { sequential } from '../lib/measure.mjs';

const ACKS = ['replicaAcks: 0', 'replicaAcks: 1'];

/** Each primary's share of the server calls: whether the keys spread. */
export const shareColumn = {
  head: 'server calls per primary',
  cell: (r) => {
    const total = r.serverCallsByNode.reduce((a, b) => a + b, 0);
    return r.serverCallsByNode.map((n) => `${Math.round((100 * n) / total)}%`).join(' / ');
  },
};

export const scenarios = [
  {
    id: 'node-redis-cluster-64-tasks-64-keys',
    title: 'Node redis: 64 tasks on 64 keys over one provider, Redis Cluster (3 primaries + 3 replicas) vs one server',
    unit: 'pairs/s',
    subjects: [ONE_SERVER, CLUSTER],
    reference: ONE_SERVER,
    ratioHead: '÷ one server',
    needsRedis: true,
    needs: ['cluster'],
    target: 'compared with one server (no target figure)',
    note: 'dokebi-lock in both rows. "commands sent" are counted with MONITOR on every node, "server calls" with INFO commandstats on every primary.',
    columns: [...columns('pairs/s'), shareColumn],
    async run(subject, ctx) {
      const where = placement(subject, ctx);
      const s = await redisSubjects['dokebi-lock'](where.connection);
      s.defaults = { connection: where.describe, ...s.defaults };
      try {
        return await measureWithCounts(s, where.primaries, () => tasksOnOwnKeys(s, ctx), where.nodes);
      } finally {
        await s.close();
      }
    },
  },
  {
    id: 'node-redis-cluster-handoff',
    title: 'Node redis: hand-off to a waiter in another process, Redis Cluster (3 primaries + 3 replicas) vs one server',
    unit: 'latency',
    subjects: [ONE_SERVER, CLUSTER],
    reference: ONE_SERVER,
    ratioHead: 'median ÷ one server',
    needsRedis: true,
    needs: ['cluster'],
    headline: 'p50Us',
    lowerIsBetter: true,
    target: 'median under 1 ms, p99 under 5 ms, as on one server',
    note: 'dokebi-lock in both rows, measured as in the hand-off scenario (node-redis-handoff); on the cluster, commands/s are counted with MONITOR on every node.',
    columns: handoffColumns,
    async run(subject, ctx) {
      const where = placement(subject, ctx);
      const r = await measureHandoffs({ factory: 'dokebi-lock', ...where, ctx });
      return { ...r, defaults: { connection: where.describe, ...r.defaults } };
    },
  },
  {
    id: 'node-redis-replica-acks',
    title: 'Node redis: sequential acquire+release of one key on a primary with one replica, replicaAcks 0 vs 1',
    unit: 'pairs/s',
    subjects: ACKS,
    reference: ACKS[0],
    ratioHead: '÷ replicaAcks: 0',
    needs: ['replicated'],
    target: 'compared with replicaAcks: 0 (no target figure)',
    note: 'dokebi-lock in both rows, on the same private primary and replica (not the run\'s server). With replicaAcks: 1 every acquire waits (WAIT 1) until the replica has it; "replconf" is the replica\'s acknowledgement, which the primary runs as a call.',
    columns: columns('pairs/s'),
    async run(subject, ctx) {
      const replicaAcks = ACKS.indexOf(subject);
      const s = await redisSubjects['dokebi-lock'](ctx.replicated.url, { replicaAcks });
      s.defaults = { connection: 'url, a primary with one replica', ...s.defaults };
      try {
        return await measureWithCounts(s, ctx.replicated.url, () => sequential({ loop: s.loop, keyAt: () => 'k', seconds: ctx.seconds, batch: 1 }));
      } finally {
        await s.close();
      }
    },
  },
];

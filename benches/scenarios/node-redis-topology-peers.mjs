// Node redis beyond one server, against the peers: 64 tasks on 64 keys on a
// Redis Cluster (3 primaries + 3 replicas) and on a Sentinel deployment, every
// library on the same servers in the same run, each row ÷ the SET NX PX + DEL
// floor over the same topology (an ioredis Cluster client on the cluster, an
// ioredis client that asks the sentinels for the primary on Sentinel). The
// one-server figures to hold them against are node-redis-64-tasks-64-keys',
// in the same run. With --pin, the Node process runs on one core and the
// servers on the other, where a thread hop in a driver shows.
import { redisSubjects } from './redis-subjects.mjs';
import { CLUSTER, SENTINEL, SENTINEL_PRIMARY, placement } from './topology.mjs';
import { SUBJECTS, FLOOR, measureWithCounts, columns, replicatedColumn, tasksOnOwnKeys } from './node-redis.mjs';
import { shareColumn } from './node-redis-topologies.mjs';

/** The scenario of `topology` (CLUSTER, SENTINEL or SENTINEL_PRIMARY) under `id`. */
function peers({ id, topology, service, title, target, note, extraColumns = [] }) {
  return {
    id,
    title,
    unit: 'pairs/s',
    subjects: SUBJECTS,
    reference: FLOOR,
    ratioHead: '÷ floor',
    needs: [service],
    target,
    note: `Each row ÷ the ${FLOOR} floor on the same ${topology}; the line under the table is dokebi-lock ÷ each peer. ${note}`,
    columns: [...columns('pairs/s'), replicatedColumn, ...extraColumns],
    async run(subject, ctx) {
      const where = placement(topology, ctx);
      const s = await redisSubjects[subject](where.connection);
      s.defaults = { connection: where.describe, ...s.defaults };
      try {
        return await measureWithCounts(s, where.primaries, () => tasksOnOwnKeys(s, ctx), where.nodes, where.cpuNodes);
      } finally {
        await s.close();
      }
    },
  };
}

export const clusterPeers = peers({
  id: 'node-redis-cluster-peers-64-keys',
  topology: CLUSTER,
  service: 'cluster',
  title: 'Node redis: 64 tasks on 64 keys on a Redis Cluster (3 primaries + 3 replicas), every library on the same cluster',
  target: 'pinned (--pin): at least 1.0x the ioredis Cluster floor and at least 1.4x redlock; unpinned: no lower than one server\'s ratio to its floor (node-redis-64-tasks-64-keys) minus noise',
  note: '"commands sent" are counted with MONITOR on every node, "server calls" with INFO commandstats on every primary.',
  extraColumns: [shareColumn],
});

export const sentinelPeers = peers({
  id: 'node-redis-sentinel-peers-64-keys',
  topology: SENTINEL,
  service: 'sentinel',
  title: 'Node redis: 64 tasks on 64 keys on a Sentinel deployment (a primary, a replica, 3 sentinels), every library through the sentinels',
  target: 'the same ratios as on one server (node-redis-64-tasks-64-keys, same run)',
  note: 'Counted on the primary; its counts include the sentinels\' own few commands a second.',
});

// The servers of sentinelPeers by URL: with its replica and the sentinels
// running, and no sentinel asked. Its ratios beside sentinelPeers' tell the
// replica's cost from the Sentinel path's.
export const sentinelPrimaryPeers = peers({
  id: 'node-redis-sentinel-primary-peers-64-keys',
  topology: SENTINEL_PRIMARY,
  service: 'sentinel',
  title: 'Node redis: 64 tasks on 64 keys on the Sentinel deployment\'s primary by URL (its replica and sentinels running), every library by URL',
  target: 'none: it tells how much of the Sentinel scenario\'s gap to one server is the replica\'s',
  note: 'The servers of the Sentinel scenario, reached as one server is. Counted on the primary; the CPU columns count every process of the deployment. "bytes replicated" is what a pair adds to the primary\'s replication stream (master_repl_offset), which the replica receives.',
});

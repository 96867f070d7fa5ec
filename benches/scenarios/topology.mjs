// Where our redis backend runs in the scenarios that compare topologies: on
// the run's redis-server or on the private cluster (lib/redis-cluster.mjs),
// both in the same run, so that the ratio between them is not a comparison
// of two runs.
export const ONE_SERVER = 'one server';
export const CLUSTER = 'Redis Cluster';

/** For a subject of a topology scenario: the connection to open ours over,
 *  the primaries (whose INFO commandstats count what the servers did), every
 *  node (where MONITOR sees what clients send) and the connection as listed
 *  under "Settings". */
export function placement(subject, ctx) {
  if (subject === CLUSTER) {
    const { nodes, primaries } = ctx.cluster;
    return { connection: { cluster: { nodes } }, primaries, nodes, describe: `cluster, ${nodes.length} seed nodes (${primaries.length} primaries)` };
  }
  return { connection: ctx.redisUrl, primaries: ctx.redisUrl, nodes: ctx.redisUrl, describe: 'url, one server' };
}

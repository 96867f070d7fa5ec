// Where the redis scenarios that compare topologies run: on the run's
// redis-server, on the private cluster (lib/redis-cluster.mjs) or on the
// private Sentinel deployment (lib/redis-sentinel.mjs), in the same run, so
// that the ratio between them is not a comparison of two runs.
export const ONE_SERVER = 'one server';
export const CLUSTER = 'Redis Cluster';
export const SENTINEL = 'Sentinel';
/** The Sentinel deployment's primary (and so its replica) by URL, no sentinel asked. */
export const SENTINEL_PRIMARY = 'Sentinel\'s primary by URL';

/** For a topology: the connection to open a subject over (ours, and the
 *  peers' ioredis client, follow the same mapping), the primaries (whose
 *  INFO commandstats count what the servers did), every node (where MONITOR
 *  sees what clients send) and the connection as listed under "Settings". */
export function placement(topology, ctx) {
  if (topology === CLUSTER) {
    const { nodes, primaries } = ctx.cluster;
    return { connection: { cluster: { nodes } }, primaries, nodes, describe: `cluster, ${nodes.length} seed nodes (${primaries.length} primaries)` };
  }
  if (topology === SENTINEL) {
    const { nodes, primaryName, primaryUrl, serverUrls } = ctx.sentinel;
    // The replica is not monitored: it only runs what the primary sends it.
    // Its CPU (and the sentinels') is counted: it is the deployment's cost.
    return { connection: { sentinel: { nodes, primaryName } }, primaries: primaryUrl, nodes: primaryUrl, cpuNodes: serverUrls, describe: `sentinel, ${nodes.length} sentinels (a primary and its replica)` };
  }
  if (topology === SENTINEL_PRIMARY) {
    // The same servers as SENTINEL, reached as one server is: what is left
    // of SENTINEL's gap to one server here is the replica's, not the path.
    const { primaryUrl, serverUrls } = ctx.sentinel;
    return { connection: primaryUrl, primaries: primaryUrl, nodes: primaryUrl, cpuNodes: serverUrls, describe: 'url, the Sentinel deployment\'s primary (with its replica)' };
  }
  return { connection: ctx.redisUrl, primaries: ctx.redisUrl, nodes: ctx.redisUrl, describe: 'url, one server' };
}

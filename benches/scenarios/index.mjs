// Every scenario, in the order the run prints them. Those on the private
// cluster run one after another (clusterPeers, then the cluster ones of
// node-redis-topologies), so that its six nodes are stopped before the
// scenarios after them run.
import { scenarios as nodeLocal } from './node-local.mjs';
import { scenarios as nodeLocalScale } from './node-local-scale.mjs';
import { scenarios as nodeLocalKinds } from './node-local-kinds.mjs';
import { scenarios as nodeTracing } from './node-tracing.mjs';
import { scenarios as nodeRedis } from './node-redis.mjs';
import { scenarios as nodeRedisKinds } from './node-redis-kinds.mjs';
import { scenarios as nodeRedisTopologies } from './node-redis-topologies.mjs';
import { clusterPeers, sentinelPeers, sentinelPrimaryPeers } from './node-redis-topology-peers.mjs';
import { scenarios as nodeHandoff } from './node-handoff.mjs';
import { scenarios as nodePostgres } from './node-postgres.mjs';
import { scenarios as nodeMysql } from './node-mysql.mjs';
import { scenarios as nodeFile } from './node-file.mjs';
import { scenarios as nodePolicy } from './node-policy.mjs';
import { scenarios as cLocal } from './c-local.mjs';

export const scenarios = [...nodeLocal, ...nodeLocalKinds, ...nodeTracing, ...nodeLocalScale, ...nodeRedis, ...nodeRedisKinds, ...nodeHandoff, clusterPeers, ...nodeRedisTopologies, sentinelPeers, sentinelPrimaryPeers, ...nodePostgres, ...nodeMysql, ...nodeFile, ...nodePolicy, ...cLocal];

export function findScenario(id) {
  const scenario = scenarios.find((s) => s.id === id);
  if (!scenario) throw new Error(`no scenario ${id}`);
  return scenario;
}

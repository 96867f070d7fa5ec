// The Redis locks compared in the Node redis scenarios, each over one
// ioredis client (ours over its own connection, with backend settings of its
// own where a scenario says). Each factory takes the connection ours is
// given: a URL (one server) or a mapping, { cluster: { nodes } } or
// { sentinel: { nodes, primaryName } }, which the peers' ioredis client
// follows as its users would configure it. Each factory returns
// { version, defaults, loop(keyAt, n), close() }, and the locks also
// acquire(key) -> Promise<release()> for the hand-off scenario; those with
// lock kinds also counted(keyAt, n) (a key counted to COUNTED_LIMIT) or
// keys(keysAt, n) (several keys as one lock).
import { createRequire } from 'node:module';
import { randomBytes } from 'node:crypto';
import { openRedisBackend } from '../lib/dokebi.mjs';

const require = createRequire(import.meta.url);
const versionOf = (name) => require(`${name}/package.json`).version;
export const LEASE_MS = 10000;
export const COUNTED_LIMIT = 8;

/** host and port of a redis:// URL, as ioredis takes a node. */
function hostPort(url) {
  const { hostname, port } = new URL(url);
  return { host: hostname, port: Number(port) };
}

/** An ioredis client over `connection` (see above): a `Redis` for a URL or
 *  a Sentinel deployment (which it asks for the primary), a `Cluster` for
 *  seed nodes. */
function ioredis(connection) {
  const Redis = require('ioredis');
  if (typeof connection === 'string') return new Redis(connection);
  if (connection.cluster) return new Redis.Cluster(connection.cluster.nodes.map(hostPort));
  if (connection.sentinel) return new Redis({ sentinels: connection.sentinel.nodes.map(hostPort), name: connection.sentinel.primaryName });
  throw new Error(`no ioredis client for connection ${JSON.stringify(connection)}`);
}

/** The client a peer runs over, among its settings, beyond one server. */
function clientSettings(connection) {
  if (typeof connection === 'string') return {};
  return { client: connection.cluster ? 'ioredis Cluster' : 'ioredis Redis({ sentinels, name })' };
}

export const redisSubjects = {
  /** `connection`: a URL or a connection mapping (lib/dokebi.mjs yamlFor);
   *  `extra`: backend settings such as { replicaAcks: 1 }. */
  async 'dokebi-lock'(connection, extra = {}) {
    const { provider, backend, version } = await openRedisBackend(connection, extra);
    return {
      version,
      defaults: { leaseMs: LEASE_MS, ...extra, pollIntervalMs: '25 (default)', notifyPollIntervalMs: '250 (default)' },
      loop: async (keyAt, n) => {
        for (let i = 0; i < n; i++) {
          const lease = await backend.acquire(keyAt());
          await lease.release();
        }
      },
      acquire: async (key) => {
        const lease = await backend.acquire(key);
        return () => lease.release();
      },
      counted: async (keyAt, n) => {
        const counted = { limit: COUNTED_LIMIT };
        for (let i = 0; i < n; i++) await (await backend.acquire(keyAt(), counted)).release();
      },
      keys: async (keysAt, n) => {
        for (let i = 0; i < n; i++) await (await backend.acquire(keysAt())).release();
      },
      close: () => provider.close(),
    };
  },

  // The floor: what any Redis lock costs at least, one SET NX PX to take the
  // key and one DEL to free it, with none of a lock's checks.
  async 'ioredis SET NX PX + DEL'(connection) {
    const redis = ioredis(connection);
    return {
      version: `ioredis ${versionOf('ioredis')}`,
      defaults: { ...clientSettings(connection), px: LEASE_MS },
      loop: async (keyAt, n) => {
        for (let i = 0; i < n; i++) {
          const key = 'raw:' + keyAt();
          if ((await redis.set(key, randomBytes(16).toString('hex'), 'PX', LEASE_MS, 'NX')) !== 'OK') throw new Error('raw SET NX found the key taken');
          await redis.del(key);
        }
      },
      close: () => redis.quit(),
    };
  },

  async redlock(connection) {
    const Redlock = require('redlock');
    const redis = ioredis(connection);
    const redlock = new Redlock([redis]);
    redlock.on('clientError', () => {});
    return {
      version: versionOf('redlock'),
      defaults: { ...clientSettings(connection), ttl: LEASE_MS, retryCount: redlock.retryCount, retryDelay: redlock.retryDelay, retryJitter: redlock.retryJitter, driftFactor: redlock.driftFactor },
      loop: async (keyAt, n) => {
        for (let i = 0; i < n; i++) {
          const lock = await redlock.lock(keyAt(), LEASE_MS);
          await lock.unlock();
        }
      },
      acquire: async (key) => {
        const lock = await redlock.lock(key, LEASE_MS);
        return () => lock.unlock();
      },
      // Its multi-resource lock: lock([keys], ttl).
      keys: async (keysAt, n) => {
        for (let i = 0; i < n; i++) await (await redlock.lock(keysAt(), LEASE_MS)).unlock();
      },
      close: () => redis.quit(),
    };
  },

  async 'redis-semaphore'(connection) {
    const { Mutex, Semaphore, defaultTimeoutOptions } = require('redis-semaphore');
    const redis = ioredis(connection);
    // The documented use: one Mutex object per critical section.
    return {
      version: versionOf('redis-semaphore'),
      defaults: { ...clientSettings(connection), ...defaultTimeoutOptions, acquireAttemptsLimit: String(defaultTimeoutOptions.acquireAttemptsLimit), lockTimeout: LEASE_MS, refreshInterval: '0.8 x lockTimeout' },
      loop: async (keyAt, n) => {
        for (let i = 0; i < n; i++) {
          const mutex = new Mutex(redis, keyAt(), { lockTimeout: LEASE_MS });
          await mutex.acquire();
          await mutex.release();
        }
      },
      acquire: async (key) => {
        const mutex = new Mutex(redis, key, { lockTimeout: LEASE_MS });
        await mutex.acquire();
        return () => mutex.release();
      },
      // Its Semaphore, one object per critical section as for Mutex.
      counted: async (keyAt, n) => {
        for (let i = 0; i < n; i++) {
          const semaphore = new Semaphore(redis, keyAt(), COUNTED_LIMIT, { lockTimeout: LEASE_MS });
          await semaphore.acquire();
          await semaphore.release();
        }
      },
      close: () => redis.quit(),
    };
  },
};

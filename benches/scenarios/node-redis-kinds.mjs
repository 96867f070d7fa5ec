// Node, redis lock kinds against the Redis peers that offer the same job: a
// counted key against redis-semaphore's Semaphore, and four keys at once
// against redlock's multi-resource lock, each uncontended and with 64 tasks
// over one connection.
import { createRequire } from 'node:module';
import { openRedisBackend } from '../lib/dokebi.mjs';
import { sequential, concurrent } from '../lib/measure.mjs';
import { LEASE_MS } from './redis-subjects.mjs';

const require = createRequire(import.meta.url);
const versionOf = (name) => require(`${name}/package.json`).version;
const TASKS = 64;
const LIMIT = 8;
const KEYS_PER_LEASE = 4;

function ioredis(url) {
  const Redis = require('ioredis');
  return new Redis(url);
}

/** Each subject: `counted(keyAt, n)` or `keys(keysAt, n)`, n acquire+release pairs, and close(). */
const subjects = {
  async 'dokebi-lock'(url) {
    const { provider, backend, version } = await openRedisBackend(url, {});
    const counted = { limit: LIMIT };
    return {
      version,
      defaults: { leaseMs: LEASE_MS, pollIntervalMs: '25 (default)' },
      counted: async (keyAt, n) => {
        for (let i = 0; i < n; i++) await (await backend.acquire(keyAt(), counted)).release();
      },
      keys: async (keysAt, n) => {
        for (let i = 0; i < n; i++) await (await backend.acquire(keysAt())).release();
      },
      close: () => provider.close(),
    };
  },

  async 'redis-semaphore'(url) {
    const { Semaphore, defaultTimeoutOptions } = require('redis-semaphore');
    const redis = ioredis(url);
    return {
      version: versionOf('redis-semaphore'),
      defaults: { ...defaultTimeoutOptions, acquireAttemptsLimit: String(defaultTimeoutOptions.acquireAttemptsLimit), lockTimeout: LEASE_MS, limit: LIMIT },
      // The documented use: one Semaphore object per critical section.
      counted: async (keyAt, n) => {
        for (let i = 0; i < n; i++) {
          const semaphore = new Semaphore(redis, keyAt(), LIMIT, { lockTimeout: LEASE_MS });
          await semaphore.acquire();
          await semaphore.release();
        }
      },
      close: () => redis.quit(),
    };
  },

  async redlock(url) {
    const Redlock = require('redlock');
    const redis = ioredis(url);
    const redlock = new Redlock([redis]);
    redlock.on('clientError', () => {});
    return {
      version: versionOf('redlock'),
      defaults: { ttl: LEASE_MS, retryCount: redlock.retryCount, retryDelay: redlock.retryDelay, retryJitter: redlock.retryJitter, form: 'lock([keys], ttl)' },
      keys: async (keysAt, n) => {
        for (let i = 0; i < n; i++) await (await redlock.lock(keysAt(), LEASE_MS)).unlock();
      },
      close: () => redis.quit(),
    };
  },
};

/** Four keys, overlapping the neighbours': task i takes keys i..i+3, in one global order. */
const fourKeys = (i) => {
  const keys = Array.from({ length: KEYS_PER_LEASE }, (_, k) => `multi:${i + k}`);
  return () => keys;
};
const key = (name) => () => name;

function scenario(id, title, kind, subjectNames, target, measure) {
  return {
    id,
    title,
    unit: 'pairs/s',
    subjects: subjectNames,
    needsRedis: true,
    target,
    async run(subject, ctx) {
      const s = await subjects[subject](ctx.redisUrl);
      try {
        const r = await measure(s[kind], ctx);
        return { version: s.version, defaults: s.defaults, ...r };
      } finally {
        await s.close();
      }
    },
  };
}

const COUNTED = ['dokebi-lock', 'redis-semaphore'];
const KEYS = ['dokebi-lock', 'redlock'];

export const scenarios = [
  scenario('node-redis-counted-sequential', `Node redis: sequential acquire+release of a counted key (limit ${LIMIT})`, 'counted', COUNTED, "at least 1.5x redis-semaphore's Semaphore", (loop, ctx) =>
    sequential({ loop, keyAt: key('pool:seq'), seconds: ctx.seconds, batch: 1 }),
  ),
  scenario('node-redis-counted-64-tasks', `Node redis: 64 tasks on one counted key (limit ${LIMIT}) over one connection`, 'counted', COUNTED, "at least 1.5x redis-semaphore's Semaphore", (loop, ctx) =>
    concurrent({ loop, keyAtFor: () => key('pool:64'), tasks: TASKS, seconds: ctx.seconds, batch: 1 }),
  ),
  scenario('node-redis-4-keys-sequential', 'Node redis: sequential acquire+release of 4 keys at once', 'keys', KEYS, "at least 1.5x redlock's multi-resource lock", (loop, ctx) =>
    sequential({ loop, keyAt: fourKeys(0), seconds: ctx.seconds, batch: 1 }),
  ),
  scenario('node-redis-4-keys-64-tasks', 'Node redis: 64 tasks, each taking 4 of 67 keys at once (overlapping its neighbours)', 'keys', KEYS, "at least 1.5x redlock's multi-resource lock", (loop, ctx) =>
    concurrent({ loop, keyAtFor: fourKeys, tasks: TASKS, seconds: ctx.seconds, batch: 1 }),
  ),
];

// Node, redis lock kinds against the Redis peers that offer the same job: a
// counted key against redis-semaphore's Semaphore, and four keys at once
// against redlock's multi-resource lock, each uncontended and with 64 tasks
// over one connection (the subjects' `counted` and `keys` loops, in
// redis-subjects.mjs).
import { COUNTED_LIMIT, redisSubjects } from './redis-subjects.mjs';
import { sequential, concurrent } from '../lib/measure.mjs';
import { columns, measureWithCounts } from './node-redis.mjs';

const TASKS = 64;
const KEYS_PER_LEASE = 4;

/** Four keys, overlapping the neighbours': task i takes keys i..i+3, in one global order. */
const fourKeys = (i) => {
  const keys = Array.from({ length: KEYS_PER_LEASE }, (_, k) => `multi:${i + k}`);
  return () => keys;
};
const key = (name) => () => name;
/** KEYS_PER_LEASE keys named after `name`. */
const spread = (name) => Array.from({ length: KEYS_PER_LEASE }, (_, k) => `${name}:${k}`);

function scenario(id, title, kind, subjects, target, measure) {
  return {
    id,
    title,
    unit: 'pairs/s',
    subjects,
    needsRedis: true,
    target,
    columns: columns('pairs/s'),
    async run(subject, ctx) {
      const s = await redisSubjects[subject](ctx.redisUrl);
      try {
        // The commands are counted over pairs of the same kind on fresh keys
        // (KEYS_PER_LEASE of them for the keys kind).
        const loop = kind === 'keys' ? (keyAt, n) => s.keys(() => spread(keyAt()), n) : s[kind];
        return await measureWithCounts({ ...s, loop }, ctx.redisUrl, () => measure(s[kind], ctx));
      } finally {
        await s.close();
      }
    },
  };
}

const COUNTED = ['dokebi-lock', 'redis-semaphore'];
const COUNTED_TARGET = "at least 1.5x redis-semaphore's Semaphore";
const KEYS = ['dokebi-lock', 'redlock'];
const KEYS_TARGET = "at least 1.5x redlock's multi-resource lock";
// One caller at a time: every lock costs about the raw round trips, so the
// 1.5x targets (SPEC section 9) are for 64 tasks; these show the floor.
const SEQUENTIAL = (peer) => `compared with ${peer} (the 1.5x target is for 64 tasks)`;

export const scenarios = [
  scenario('node-redis-counted-sequential', `Node redis: sequential acquire+release of a counted key (limit ${COUNTED_LIMIT})`, 'counted', COUNTED, SEQUENTIAL('redis-semaphore'), (loop, ctx) =>
    sequential({ loop, keyAt: key('pool:seq'), seconds: ctx.seconds, batch: 1 }),
  ),
  scenario('node-redis-counted-64-tasks', `Node redis: 64 tasks on one counted key (limit ${COUNTED_LIMIT}) over one connection`, 'counted', COUNTED, COUNTED_TARGET, (loop, ctx) =>
    concurrent({ loop, keyAtFor: () => key('pool:64'), tasks: TASKS, seconds: ctx.seconds, batch: 1 }),
  ),
  scenario('node-redis-4-keys-sequential', 'Node redis: sequential acquire+release of 4 keys at once', 'keys', KEYS, SEQUENTIAL('redlock'), (loop, ctx) =>
    sequential({ loop, keyAt: fourKeys(0), seconds: ctx.seconds, batch: 1 }),
  ),
  scenario('node-redis-4-keys-64-tasks', 'Node redis: 64 tasks, each taking 4 of 67 keys at once (overlapping its neighbours)', 'keys', KEYS, KEYS_TARGET, (loop, ctx) =>
    concurrent({ loop, keyAtFor: fourKeys, tasks: TASKS, seconds: ctx.seconds, batch: 1 }),
  ),
];

// Node, local lock kinds against the JS peers for the same job: shared mode
// against navigator.locks' shared mode and a small plain-JS reader/writer
// lock, a counted key against async-mutex's Semaphore, and four keys at once
// against async-lock's array acquire.
import { createRequire } from 'node:module';
import { openBackend, oneNativeCall } from '../lib/dokebi.mjs';
import { sequential, concurrent } from '../lib/measure.mjs';

const require = createRequire(import.meta.url);
const versionOf = (name) => require(`${name}/package.json`).version;
const noop = () => {};
const TASKS = 64;
/** One task in WRITER_EVERY is a writer in the mixed scenario. */
const WRITER_EVERY = 8;
const LIMIT = 8;
const KEYS_PER_LEASE = 4;

/**
 * The smallest correct keyed reader/writer lock in plain JS, FIFO across
 * modes as Web Locks: a Map of per-key states, dropped when unused.
 * `acquire(key, shared)` resolves to the release function. It calls
 * `atAcquire` first (`noop`, inlined away by the JIT, for the lock itself).
 */
class PlainRwLock {
  #keys = new Map();
  #atAcquire;

  constructor(atAcquire = noop) {
    this.#atAcquire = atAcquire;
  }

  acquire(key, shared) {
    this.#atAcquire();
    let state = this.#keys.get(key);
    if (!state) this.#keys.set(key, (state = { readers: 0, writer: false, queue: [] }));
    if (state.queue.length === 0 && !state.writer && (shared || state.readers === 0)) return Promise.resolve(this.#grant(key, state, shared));
    return new Promise((resolve) => state.queue.push({ shared, resolve }));
  }

  #grant(key, state, shared) {
    if (shared) state.readers++;
    else state.writer = true;
    return () => this.#release(key, state, shared);
  }

  #release(key, state, shared) {
    if (shared) state.readers--;
    else state.writer = false;
    while (state.queue.length > 0 && !state.writer && (state.queue[0].shared || state.readers === 0)) {
      const next = state.queue.shift();
      next.resolve(this.#grant(key, state, next.shared));
    }
    if (state.queue.length === 0 && !state.writer && state.readers === 0) this.#keys.delete(key);
  }
}

/** Each subject: `lock(keyAt, shared, n)`, n acquire+release pairs of the kind the scenario asks for. */
const subjects = {
  async 'dokebi-lock'() {
    const { backend, version } = await openBackend({});
    return {
      version,
      defaults: {},
      shared: async (keyAt, shared, n) => {
        const options = shared ? { mode: 'shared' } : undefined;
        for (let i = 0; i < n; i++) await (await backend.acquire(keyAt(), options)).release();
      },
      counted: async (keyAt, n) => {
        const options = { limit: LIMIT };
        for (let i = 0; i < n; i++) await (await backend.acquire(keyAt(), options)).release();
      },
      keys: async (keysAt, n) => {
        for (let i = 0; i < n; i++) await (await backend.acquire(keysAt())).release();
      },
    };
  },

  async 'navigator.locks'() {
    const locks = globalThis.navigator?.locks;
    if (!locks) return { skipped: `navigator.locks is not available on Node ${process.version}` };
    const sharedMode = { mode: 'shared' };
    return {
      version: `Node ${process.version}`,
      defaults: { mode: 'shared for readers, exclusive for writers' },
      shared: async (keyAt, shared, n) => {
        for (let i = 0; i < n; i++) await (shared ? locks.request(keyAt(), sharedMode, noop) : locks.request(keyAt(), noop));
      },
    };
  },

  async 'plain-js-rwlock'() {
    return rwLockSubject(new PlainRwLock(), 'Map<key, { readers, writer, FIFO queue }>');
  },

  // The same lock with one call across Node-API per acquire (the addon's
  // cheapest function, which does nothing), as a lock whose state lives in
  // Rust must make (SPEC §4): how much of the gap to it that crossing alone
  // is, as 'plain-JS Map lock + 1 native call' is for the exclusive pair.
  async 'plain-js-rwlock, release awaited'() {
    return rwLockSubject(new PlainRwLock(), 'plain-js-rwlock, its release awaited as a resolved promise (as release() is in SPEC §3)', true);
  },

  async 'plain-js-rwlock + 1 native call'() {
    return rwLockSubject(new PlainRwLock(await oneNativeCall()), "plain-js-rwlock, calling the addon's takeError() (no error pending) once per acquire");
  },

  async 'async-mutex'() {
    return semaphoreSubject(false);
  },

  // The same with the release awaited, as ours must be: SPEC §3 has
  // `release()` resolve (a promise, on every driver), and the await of even
  // a settled promise costs a microtask per pair, which these peers' sync
  // release does not pay.
  async 'async-mutex, release awaited'() {
    return semaphoreSubject(true);
  },

  async 'async-lock'() {
    const AsyncLock = require('async-lock');
    const lock = new AsyncLock();
    return {
      version: versionOf('async-lock'),
      defaults: { maxPending: AsyncLock.DEFAULT_MAX_PENDING, form: 'acquire([keys], fn)' },
      keys: async (keysAt, n) => {
        for (let i = 0; i < n; i++) await lock.acquire(keysAt(), noop);
      },
    };
  },
};

/** A subject over a PlainRwLock; `awaited`: each release is awaited as a resolved promise. */
function rwLockSubject(lock, form, awaited = false) {
  return {
    version: '-',
    defaults: { form },
    shared: awaited
      ? async (keyAt, shared, n) => {
          for (let i = 0; i < n; i++) await Promise.resolve((await lock.acquire(keyAt(), shared))());
        }
      : async (keyAt, shared, n) => {
          for (let i = 0; i < n; i++) (await lock.acquire(keyAt(), shared))();
        },
  };
}

/** async-mutex's Semaphore(LIMIT); `awaited`: each release is awaited as a resolved promise. */
function semaphoreSubject(awaited) {
  const { Semaphore } = require('async-mutex');
  const semaphore = new Semaphore(LIMIT);
  return {
    version: versionOf('async-mutex'),
    defaults: { form: `one Semaphore(${LIMIT})${awaited ? ', release awaited as a resolved promise' : ''}` },
    counted: awaited
      ? async (_keyAt, n) => {
          for (let i = 0; i < n; i++) {
            const [, release] = await semaphore.acquire();
            await Promise.resolve(release());
          }
        }
      : async (_keyAt, n) => {
          for (let i = 0; i < n; i++) {
            const [, release] = await semaphore.acquire();
            release();
          }
        },
  };
}

/** A scenario of `kind` ('shared', 'counted' or 'keys') over the subjects that do it. */
function scenario(id, title, kind, subjectNames, target, measure, unit) {
  return {
    id,
    title,
    unit,
    subjects: subjectNames,
    target,
    async run(subject, ctx) {
      const s = await subjects[subject]();
      if (s.skipped) return s;
      const r = await measure(s[kind], ctx);
      return { version: s.version, defaults: s.defaults, ...r };
    },
  };
}

const SHARED_SUBJECTS = ['dokebi-lock', 'navigator.locks', 'plain-js-rwlock'];
const SHARED_TARGET = 'at least the fastest of navigator.locks and plain-js-rwlock';
const key = (name) => () => name;
/**
 * Four keys, overlapping the neighbours': task i takes keys i..i+3. Every
 * set is given in one global order (no wrap-around): async-lock takes the
 * keys of an array one by one in the order given, so sets that overlap in
 * a cycle (..., [62, 63, 0, 1], [0, 1, 2, 3], ...) deadlock it; ours would
 * take them in any order.
 */
const fourKeys = (i) => {
  const keys = Array.from({ length: KEYS_PER_LEASE }, (_, k) => `key:${i + k}`);
  return () => keys;
};

export const scenarios = [
  scenario(
    'node-local-shared-one-key',
    'Node local: uncontended shared acquire+release, one key',
    'shared',
    [...SHARED_SUBJECTS, 'plain-js-rwlock + 1 native call'],
    SHARED_TARGET,
    (loop, ctx) => sequential({ loop: (keyAt, n) => loop(keyAt, true, n), keyAt: key('k'), seconds: ctx.seconds, batch: ctx.smoke ? 100 : 1000 }),
    'pairs/s',
  ),
  scenario(
    'node-local-shared-64-tasks-mixed',
    `Node local: 64 tasks on one key, one in ${WRITER_EVERY} a writer, the rest readers`,
    'shared',
    [...SHARED_SUBJECTS, 'plain-js-rwlock, release awaited'],
    SHARED_TARGET,
    (loop, ctx) =>
      concurrent({
        // Each task's key function says whether the task reads.
        loop: (keyAt, n) => loop(keyAt, keyAt.shared, n),
        keyAtFor: (i) => Object.assign(key('k'), { shared: i % WRITER_EVERY !== 0 }),
        tasks: TASKS,
        seconds: ctx.seconds,
        batch: 16,
      }),
    'pairs/s',
  ),
  scenario(
    'node-local-counted-64-tasks',
    `Node local: 64 tasks on one counted key (limit ${LIMIT})`,
    'counted',
    ['dokebi-lock', 'async-mutex', 'async-mutex, release awaited'],
    'at least async-mutex Semaphore',
    (loop, ctx) => concurrent({ loop, keyAtFor: () => key('pool'), tasks: TASKS, seconds: ctx.seconds, batch: 16 }),
    'pairs/s',
  ),
  scenario(
    'node-local-4-keys-uncontended',
    'Node local: uncontended acquire+release of 4 keys at once',
    'keys',
    ['dokebi-lock', 'async-lock'],
    "at least async-lock's array acquire",
    (loop, ctx) => sequential({ loop, keyAt: fourKeys(0), seconds: ctx.seconds, batch: ctx.smoke ? 100 : 1000 }),
    'pairs/s',
  ),
  scenario(
    'node-local-4-keys-64-tasks',
    'Node local: 64 tasks, each taking 4 of 64 keys at once (overlapping its neighbours)',
    'keys',
    ['dokebi-lock', 'async-lock'],
    "at least async-lock's array acquire",
    (loop, ctx) => concurrent({ loop, keyAtFor: fourKeys, tasks: TASKS, seconds: ctx.seconds, batch: 16 }),
    'pairs/s',
  ),
];

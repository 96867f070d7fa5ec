// The in-process locks compared in the Node local scenarios. Each factory
// returns { version, defaults, loop(keyAt, n), section(keyAt, n) }: n
// acquire+release pairs written the way that library's users write them;
// `section` runs n empty sections through the library's run-this-locked
// call (ours withLock, async-lock acquire(key, fn), async-mutex runExclusive,
// navigator.locks request). `keyed` is false when the scenario uses one key
// only, where a single-lock library needs no key map. hold(key) takes a key
// and keeps it until the process ends (scale and memory scenarios).
import { createRequire } from 'node:module';
import { oneNativeCall, openBackend, releaseIsAsync } from '../lib/dokebi.mjs';

const require = createRequire(import.meta.url);
const versionOf = (name) => require(`${name}/package.json`).version;
const noop = () => {};

export const localSubjects = {
  async 'dokebi-lock'(settings = {}) {
    const { backend, version } = await openBackend(settings);
    const held = [];
    const asyncRelease = await releaseIsAsync(await backend.acquire('probe'));
    return {
      version,
      defaults: { ...settings, releaseReturns: asyncRelease ? 'Promise' : 'boolean' },
      loop: asyncRelease
        ? async (keyAt, n) => {
            for (let i = 0; i < n; i++) {
              const lease = await backend.acquire(keyAt());
              await lease.release();
            }
          }
        : async (keyAt, n) => {
            for (let i = 0; i < n; i++) {
              const lease = await backend.acquire(keyAt());
              lease.release();
            }
          },
      section: async (keyAt, n) => {
        for (let i = 0; i < n; i++) await backend.withLock(keyAt(), noop);
      },
      hold: async (key) => {
        held.push(await backend.acquire(key));
      },
    };
  },

  async 'async-lock'() {
    const AsyncLock = require('async-lock');
    const lock = new AsyncLock();
    return {
      version: versionOf('async-lock'),
      defaults: { maxPending: AsyncLock.DEFAULT_MAX_PENDING, timeout: AsyncLock.DEFAULT_TIMEOUT },
      loop: async (keyAt, n) => {
        for (let i = 0; i < n; i++) await lock.acquire(keyAt(), noop);
      },
      // acquire(key, fn) is both its pair and its section.
      section: async (keyAt, n) => {
        for (let i = 0; i < n; i++) await lock.acquire(keyAt(), noop);
      },
      hold: (key) => new Promise((held) => lock.acquire(key, () => (held(), new Promise(() => {})))),
    };
  },

  async 'async-mutex'({ keyed = true } = {}) {
    const { Mutex } = require('async-mutex');
    const version = versionOf('async-mutex');
    if (!keyed) {
      const mutex = new Mutex();
      return {
        version,
        defaults: { form: 'one Mutex' },
        loop: async (_keyAt, n) => {
          for (let i = 0; i < n; i++) (await mutex.acquire())();
        },
        section: async (_keyAt, n) => {
          for (let i = 0; i < n; i++) await mutex.runExclusive(noop);
        },
      };
    }
    // async-mutex has no keys: the usual keyed wrapper, a Map of mutexes
    // dropped when their last holder leaves.
    const mutexes = new Map();
    return {
      version,
      defaults: { form: 'Map<key, Mutex>, entry deleted when unlocked' },
      loop: async (keyAt, n) => {
        for (let i = 0; i < n; i++) {
          const key = keyAt();
          let mutex = mutexes.get(key);
          if (!mutex) mutexes.set(key, (mutex = new Mutex()));
          (await mutex.acquire())();
          if (!mutex.isLocked()) mutexes.delete(key);
        }
      },
      section: async (keyAt, n) => {
        for (let i = 0; i < n; i++) {
          const key = keyAt();
          let mutex = mutexes.get(key);
          if (!mutex) mutexes.set(key, (mutex = new Mutex()));
          await mutex.runExclusive(noop);
          if (!mutex.isLocked()) mutexes.delete(key);
        }
      },
      hold: async (key) => {
        const mutex = new Mutex();
        mutexes.set(key, mutex);
        await mutex.acquire();
      },
    };
  },

  // The floor of a keyed FIFO lock (issue 22): see mapLock below.
  async 'plain-JS Map lock'() {
    const acquire = mapLock(noop);
    return {
      version: 'plain JS',
      defaults: { form: 'Map<key, queue of resolvers>, entry deleted when released' },
      loop: async (keyAt, n) => {
        for (let i = 0; i < n; i++) (await acquire(keyAt()))();
      },
      section: async (keyAt, n) => {
        for (let i = 0; i < n; i++) {
          const done = await acquire(keyAt());
          try {
            noop();
          } finally {
            done();
          }
        }
      },
    };
  },

  // The same floor with one call across Node-API per pair (the addon's
  // cheapest function, which does nothing), as a lock whose state lives in
  // Rust must make: how much of the gap to the floor that crossing alone is.
  async 'plain-JS Map lock + 1 native call'() {
    const acquire = mapLock(await oneNativeCall());
    return {
      version: 'plain JS',
      defaults: { form: "the Map lock, calling the addon's takeError() (no error pending) once per acquire" },
      loop: async (keyAt, n) => {
        for (let i = 0; i < n; i++) (await acquire(keyAt()))();
      },
    };
  },

  async 'navigator.locks'() {
    const locks = globalThis.navigator?.locks;
    if (!locks) return { skipped: `navigator.locks is not available on Node ${process.version}` };
    return {
      version: `Node ${process.version}`,
      defaults: { mode: 'exclusive' },
      loop: async (keyAt, n) => {
        for (let i = 0; i < n; i++) await locks.request(keyAt(), noop);
      },
      section: async (keyAt, n) => {
        for (let i = 0; i < n; i++) await locks.request(keyAt(), noop);
      },
    };
  },
};

/**
 * The floor of a keyed FIFO lock: a dozen lines of plain JS, a queue of
 * resolvers per held key, with no fences, limits or checks, and a release
 * that returns nothing (ours returns a promise the loop awaits). Returns its
 * acquire, which calls `atAcquire` first (`noop`, inlined away by the JIT,
 * for the floor itself).
 */
function mapLock(atAcquire) {
  const queues = new Map();
  const release = (key) => {
    const queue = queues.get(key);
    if (queue.length > 0) queue.shift()();
    else queues.delete(key);
  };
  return async (key) => {
    atAcquire();
    const queue = queues.get(key);
    if (queue === undefined) queues.set(key, []);
    else await new Promise((resolve) => queue.push(resolve));
    return () => release(key);
  };
}

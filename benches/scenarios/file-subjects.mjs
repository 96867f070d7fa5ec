// The file locks compared in the Node file scenarios, each over a lock
// directory of its own under `dir`, at its documented settings: ours (driver
// file, the defaults), proper-lockfile `lock(file)` (a `<file>.lock`
// directory, an mtime refresh every stale/2 ms; it locks an existing file,
// so one is created per key), lockfile `lock(path)` (an O_EXCL file),
// fs-ext `flock(fd, 'ex')` (the kernel's lock; a blocked `flock` waits in a
// thread of libuv's pool, 4 of them, which every `fs` call shares). Each
// factory returns { version, defaults, loop(keyAt, n), acquire(key) ->
// Promise<release()>, close() }. proper-lockfile's default is not to retry a
// held lock, lockfile's not to wait: `acquire` (the hand-off scenario's
// waiter) gives each the waiting its documentation offers, named in
// `defaults.wait`.
import { createRequire } from 'node:module';
import { mkdirSync, writeFileSync, existsSync, open, closeSync } from 'node:fs';
import { promisify } from 'node:util';
import { join } from 'node:path';
import { openBackend } from '../lib/dokebi.mjs';

const require = createRequire(import.meta.url);
const versionOf = (name) => require(`${name}/package.json`).version;

/** A file name for `key` (the peers take paths). */
const fileOf = (dir, key) => join(dir, key.replace(/[^A-Za-z0-9_-]/g, '_'));

/** `acquire` and `loop` over a lock(path) -> Promise<release()> of a peer. */
function subject(version, defaults, take, close = async () => {}) {
  return {
    version,
    defaults,
    acquire: take,
    loop: async (keyAt, n) => {
      for (let i = 0; i < n; i++) await (await take(keyAt(), false))();
    },
    close,
  };
}

export const fileSubjects = {
  async 'dokebi-lock'(dir) {
    const { provider, backend, version } = await openBackend({ driver: 'file', directory: join(dir, 'dokebi') });
    const take = async (key, wait = true) => {
      const lease = await backend.acquire(key, wait ? { waitTimeoutMs: 10000 } : undefined);
      return () => lease.release();
    };
    return subject(version, { driver: 'file', wait: 'waitTimeoutMs 10000 (woken by inotify)' }, take, () => provider.close());
  },
  async 'proper-lockfile'(dir) {
    const lockfile = require('proper-lockfile');
    const base = join(dir, 'proper-lockfile');
    mkdirSync(base, { recursive: true });
    const take = async (key, wait = true) => {
      const file = fileOf(base, key);
      if (!existsSync(file)) writeFileSync(file, '');
      // The measured setting for a waiter: retries every 1-20 ms.
      return lockfile.lock(file, wait ? { retries: { retries: 10000, minTimeout: 1, maxTimeout: 20 } } : undefined);
    };
    return subject(versionOf('proper-lockfile'), { stale: 10000, update: 5000, wait: 'retries every 1-20 ms (default: no retries)' }, take);
  },
  async lockfile(dir) {
    const lockfile = require('lockfile');
    const lock = promisify(lockfile.lock);
    const unlock = promisify(lockfile.unlock);
    const base = join(dir, 'lockfile');
    mkdirSync(base, { recursive: true });
    const take = async (key, wait = true) => {
      const path = `${fileOf(base, key)}.lock`;
      // Its documented waiting: `wait` ms, polling every `pollPeriod` (100 ms).
      await lock(path, wait ? { wait: 10000 } : {});
      return () => unlock(path);
    };
    return subject(versionOf('lockfile'), { wait: 'wait 10000, pollPeriod 100 ms (default: no wait)' }, take);
  },
  async 'fs-ext'(dir) {
    const { flock, flockSync } = require('fs-ext');
    const base = join(dir, 'fs-ext');
    mkdirSync(base, { recursive: true });
    const openFile = promisify(open);
    const lock = promisify(flock);
    const take = async (key, wait = true) => {
      const fd = await openFile(fileOf(base, key), 'a');
      try {
        await lock(fd, wait ? 'ex' : 'exnb');
      } catch (error) {
        closeSync(fd);
        throw error;
      }
      // Unlocked synchronously: an async unlock would queue in libuv's pool
      // behind this process's waiters blocked in `flock` and never run.
      return async () => {
        flockSync(fd, 'un');
        closeSync(fd);
      };
    };
    return subject(versionOf('fs-ext'), { wait: "flock(fd, 'ex'), blocking a libuv pool thread (default)" }, take);
  },
};

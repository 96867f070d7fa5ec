// Shared helpers of the Node tests.
import assert from 'node:assert/strict';
import { cp, mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { dependency, openLock, LockError } from '../index.js';

/** Opens a provider with one local backend `b` of the given settings. */
export async function openLocal(settings = {}) {
  const provider = await openLock({ config: { 'dokebi-lock': { backends: { b: settings } } } });
  return { provider, backend: provider.backend('b') };
}

/** Asserts that `promise` rejects (or `fn` throws) a LockError with `code`; returns it. */
export async function rejectsWith(promiseOrFn, code) {
  let error;
  try {
    await (typeof promiseOrFn === 'function' ? promiseOrFn() : promiseOrFn);
  } catch (caught) {
    error = caught;
  }
  assert.ok(error instanceof LockError, `expected a LockError ${code}, got ${error}`);
  assert.equal(error.code, code, error.message);
  return error;
}

/** True once `promise` has settled (checked after the microtask queue drains). */
export async function isSettled(promise) {
  let settled = false;
  promise.then(
    () => (settled = true),
    () => (settled = true),
  );
  await new Promise((resolve) => setImmediate(resolve));
  return settled;
}

/** -1, 0 or 1 as dotted version `a` is below, equal to or above `b`. */
export function compareVersions(a, b) {
  const [x, y] = [a, b].map((v) => v.split('.').map(Number));
  for (let i = 0; i < Math.max(x.length, y.length); i++) {
    const d = (x[i] ?? 0) - (y[i] ?? 0);
    if (d !== 0) return Math.sign(d);
  }
  return 0;
}

/**
 * A temporary app directory (removed after test `t`); with `driver`, the
 * marker package of that store driver (packages/lock-<driver>) is installed
 * into its node_modules.
 */
export async function appDir(t, driver = undefined) {
  const root = await mkdtemp(join(tmpdir(), 'dokebi-lock-app-'));
  t.after(() => rm(root, { recursive: true, force: true }));
  await writeFile(join(root, 'package.json'), '{ "name": "app", "type": "module" }\n');
  if (driver !== undefined) {
    const marker = fileURLToPath(new URL(`../packages/lock-${driver}`, import.meta.url));
    await mkdir(join(root, 'node_modules', '@dokebi'), { recursive: true });
    await cp(marker, join(root, 'node_modules', '@dokebi', `lock-${driver}`), { recursive: true });
  }
  return root;
}

/**
 * A store's dokebi plugin as its package would register it (`name`
 * dokebi-redis, dokebi-postgres, ...): its start returns the provider whose
 * `options` are its section `{ connections }`. Its starts and stops are
 * pushed onto `events`.
 */
export function storePlugin(name, connections, events = []) {
  return {
    name,
    metadata: { dependencies: [] },
    start() {
      events.push(`start ${name}`);
      return { options: { connections } };
    },
    stop() {
      events.push(`stop ${name}`);
    },
  };
}

/** A plugin `orders` that depends on dokebi-lock and gets its provider; its start and stop are pushed onto `events`. */
export function lockConsumer(events = []) {
  return {
    name: 'orders',
    metadata: { dependencies: [dependency] },
    start: (context) => {
      events.push('start orders');
      return context.getDependency(dependency);
    },
    stop: () => events.push('stop orders'),
  };
}

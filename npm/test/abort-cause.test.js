// ABORTED carries the signal's reason as `cause`: local and redis acquires,
// and withLock, aborted before and while waiting.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { openLock } from '../index.js';
import { openLocal, rejectsWith } from './helpers.js';
import { useRedis } from './redis-server.js';

const redis = useRedis();

let namespaces = 0;
function openRedis(namespace) {
  return openLock({
    config: {
      'dokebi-lock': { backends: { r: { driver: 'redis', connection: 'main', leaseMs: 10_000, namespace } } },
      'dokebi-redis': { connections: { main: { url: redis.url } } },
    },
  });
}

/** Both ways a backend's acquire can take a signal. */
const entries = {
  acquire: (backend, key, signal) => backend.acquire(key, { signal }),
  withLock: (backend, key, signal) => backend.withLock(key, () => assert.fail('the section must not run'), { signal }),
};

/** Checks `backend` (key `k` held elsewhere) for every entry, before and while waiting. */
async function checkCauses(backend) {
  for (const [name, enter] of Object.entries(entries)) {
    const before = new Error(`${name}: aborted before`);
    const early = await rejectsWith(enter(backend, 'k', AbortSignal.abort(before)), 'ABORTED');
    assert.equal(early.cause, before, `${name} before waiting`);

    const controller = new AbortController();
    const waiting = enter(backend, 'k', controller.signal);
    const during = { reason: `${name}: aborted while waiting` };
    setImmediate(() => controller.abort(during));
    const late = await rejectsWith(waiting, 'ABORTED');
    assert.equal(late.cause, during, `${name} while waiting`);
  }
}

test('a local ABORTED has the signal reason as cause, before and while waiting', async () => {
  const { provider, backend } = await openLocal();
  const holder = await backend.acquire('k');
  await checkCauses(backend);
  await holder.release();
  await provider.close();
});

test('a redis ABORTED has the signal reason as cause, before and while waiting', async () => {
  const namespace = `abort${++namespaces}`;
  const [holderProvider, provider] = [await openRedis(namespace), await openRedis(namespace)];
  const holder = await holderProvider.backend('r').acquire('k');
  await checkCauses(provider.backend('r'));
  await holder.release();
  await Promise.all([holderProvider.close(), provider.close()]);
});

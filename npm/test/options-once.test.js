// Acquire and withLock options are read once, on every backend kind (local,
// file, a store: redis, and a policy): what the checks see is what the
// acquire uses. An options object's getters can answer differently each
// time they are read: a limit of 2 to the check and 'many' to the addon, a
// signal once and a throw after.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openLock } from '../index.js';
import { useRedis } from './redis-server.js';

const redis = useRedis();

async function open() {
  const directory = join(mkdtempSync(join(tmpdir(), 'dokebi-options-once-')), 'locks');
  return openLock({
    config: {
      'dokebi-lock': {
        backends: {
          local: {},
          host: { driver: 'file', directory },
          cache: { driver: 'redis', connection: 'main', namespace: 'options-once', leaseMs: 10_000 },
          either: { driver: 'policy', default: { backends: ['local'] } },
        },
      },
      'dokebi-redis': { connections: { main: { url: redis.url } } },
    },
  });
}

const BACKENDS = ['local', 'host', 'cache', 'either'];

/**
 * Options whose every field is a getter that counts its reads: the first
 * read answers `first[field]`, later ones `later[field]` (a function is
 * called: it may throw).
 */
function shifting(first, later) {
  const reads = {};
  const options = {};
  for (const field of Object.keys(first)) {
    reads[field] = 0;
    Object.defineProperty(options, field, {
      enumerable: true,
      get() {
        reads[field] += 1;
        if (reads[field] === 1) return first[field];
        const value = later[field];
        return typeof value === 'function' ? value() : value;
      },
    });
  }
  return { options, reads };
}

const throws = () => {
  throw new Error('read twice');
};

test('acquire reads each option once on every backend kind', async () => {
  const provider = await open();
  try {
    for (const name of BACKENDS) {
      const backend = provider.backend(name);
      const { options, reads } = shifting(
        { waitTimeoutMs: 0, limit: 2, weight: 1, holder: 'reader-once', signal: new AbortController().signal },
        { waitTimeoutMs: -1, limit: 'many', weight: 9, holder: 7, signal: throws },
      );
      const lease = await backend.acquire(`counted:${name}`, options);
      const held = await backend.inspect(`counted:${name}`);
      assert.equal(held.limit, 2, name);
      assert.equal(held.holders[0].units, 1, name);
      await lease.release();
      assert.deepEqual(reads, { waitTimeoutMs: 1, limit: 1, weight: 1, holder: 1, signal: 1 }, name);
    }
  } finally {
    await provider.close();
  }
});

test('a mode read once: shared to the check is shared to the lease', async () => {
  const provider = await open();
  try {
    for (const name of BACKENDS) {
      const backend = provider.backend(name);
      const { options, reads } = shifting({ mode: 'shared' }, { mode: 'exclusive' });
      const lease = await backend.acquire(`shared:${name}`, options);
      assert.equal((await backend.inspect(`shared:${name}`)).mode, 'shared', name);
      const other = await backend.acquire(`shared:${name}`, { mode: 'shared', waitTimeoutMs: 0 });
      await other.release();
      await lease.release();
      assert.deepEqual(reads, { mode: 1 }, name);
    }
  } finally {
    await provider.close();
  }
});

test('withLock reads each option once, autoRenew included, on every backend kind', async () => {
  const provider = await open();
  try {
    for (const name of BACKENDS) {
      const backend = provider.backend(name);
      const { options, reads } = shifting({ waitTimeoutMs: 0, limit: 3, autoRenew: false }, { waitTimeoutMs: 'soon', limit: throws, autoRenew: 'yes' });
      const limit = await backend.withLock(`section:${name}`, async () => (await backend.inspect(`section:${name}`)).limit, options);
      assert.equal(limit, 3, name);
      assert.deepEqual(reads, { waitTimeoutMs: 1, limit: 1, autoRenew: 1 }, name);
    }
  } finally {
    await provider.close();
  }
});

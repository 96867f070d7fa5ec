// provider.status() / backend.status(): counts only, never keys.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { openLock } from '../index.js';
import { openLocal, rejectsWith } from './helpers.js';
import { useRedis } from './redis-server.js';

const KEY = 'customer:secret-key-7';

test('a local backend counts held, waiting, acquired and timed out; lost is 0', async () => {
  const { provider, backend } = await openLocal();
  assert.deepEqual(backend.status(), { driver: 'local', held: 0, heldShared: 0, waiting: 0, acquired: 0, timedOut: 0, lost: 0 });
  const holder = await backend.acquire(KEY);
  const waiter = backend.acquire(KEY);
  assert.deepEqual(backend.status(), { driver: 'local', held: 1, heldShared: 0, waiting: 1, acquired: 1, timedOut: 0, lost: 0 });
  await rejectsWith(backend.acquire(KEY, { waitTimeoutMs: 10 }), 'WAIT_TIMEOUT');
  await holder.release();
  await (await waiter).release();
  assert.deepEqual(backend.status(), { driver: 'local', held: 0, heldShared: 0, waiting: 0, acquired: 2, timedOut: 1, lost: 0 });
  assert.deepEqual(provider.status(), { b: backend.status() });
  assert.ok(!JSON.stringify(provider.status()).includes('secret'));
  await provider.close();
});

const redis = useRedis();

function openRedis(url, settings = {}) {
  return openLock({
    config: {
      'dokebi-lock': { backends: { r: { driver: 'redis', connection: 'main', namespace: 'st', leaseMs: 10_000, ...settings }, l: {} } },
      'dokebi-redis': { connections: { main: { url } } },
    },
  });
}

test('a redis backend adds connected, subscribed, lastError and lastProbeAt', async () => {
  const provider = await openRedis(redis.url);
  const backend = provider.backend('r');
  const holder = await backend.acquire(KEY);
  const waiter = backend.acquire(KEY);
  await sleep(20);
  const status = backend.status();
  assert.deepEqual({ ...status, redis: undefined }, { driver: 'redis', held: 1, heldShared: 0, waiting: 1, acquired: 1, timedOut: 0, lost: 0, redis: undefined });
  assert.equal(status.redis.connected, true);
  assert.equal(status.redis.lastError, null);
  assert.ok(Math.abs(status.redis.lastProbeAt - Date.now()) < 10_000, String(status.redis.lastProbeAt));
  await holder.release();
  await (await waiter).release();
  assert.equal(backend.status().redis.subscribed, true, 'a waiter subscribed to release notifications');
  const all = provider.status();
  assert.deepEqual(Object.keys(all), ['l', 'r']);
  assert.equal(all.l.driver, 'local');
  assert.equal(all.r.acquired, 2);
  assert.ok(!JSON.stringify(all).includes('secret'));
  await provider.close();
});

test('an unreachable Redis shows as not connected with lastError PROVIDER_FAILED', async () => {
  const provider = await openRedis(`redis://127.0.0.1:${redis.port + 1}/0`, {});
  const backend = provider.backend('r');
  await rejectsWith(backend.acquire(KEY, { waitTimeoutMs: 0 }), 'PROVIDER_FAILED');
  const { redis: health } = backend.status();
  assert.equal(health.connected, false);
  assert.equal(health.lastError, 'PROVIDER_FAILED');
  assert.equal(health.lastProbeAt, null);
  await provider.close();
});

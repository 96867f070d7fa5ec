// A connection reset under the addon's libuv watch: the socket error reaches
// the connection's reader, which reconnects, and later commands work. Through
// a proxy that resets (RST) its client connections, and with CLIENT KILL.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { openLock } from '../index.js';
import { useRedis } from './redis-server.js';
import { command } from './resp.js';
import { startProxy } from './proxy.js';

const redis = useRedis();

let namespaces = 0;
function open(url) {
  return openLock({
    config: {
      'dokebi-lock': { backends: { r: { driver: 'redis', connection: 'main', leaseMs: 120_000, namespace: `reset${++namespaces}` } } },
      // Far longer than any reset takes to surface, and below leaseMs as required.
      'dokebi-redis': { connections: { main: { url, commandTimeoutMs: 60_000 } } },
    },
  });
}

/** Acquires and releases `key` once: the connection works. */
async function roundTrip(backend, key) {
  const lease = await backend.acquire(key, { waitTimeoutMs: 0 });
  assert.equal(await lease.release(), true);
}

/** Runs `fn` until it succeeds: the first command after a reset may meet it. */
async function eventually(fn) {
  for (let attempt = 1; ; attempt++) {
    try {
      return await fn();
    } catch (error) {
      if (attempt === 3) throw error;
    }
  }
}

test('after the connections are reset (RST) while idle, commands work again', async () => {
  const proxy = await startProxy(redis.port);
  const provider = await open(proxy.url);
  const backend = provider.backend('r');
  await roundTrip(backend, 'a');
  for (let round = 0; round < 3; round++) {
    proxy.reset();
    await eventually(() => roundTrip(backend, `b${round}`));
  }
  await provider.close();
  await proxy.close();
});

test('a reset (RST) while commands are in flight fails them, and later commands work', async () => {
  const proxy = await startProxy(redis.port);
  const provider = await open(proxy.url);
  const backend = provider.backend('r');
  await roundTrip(backend, 'a');
  proxy.hold();
  const inFlight = [1, 2, 3].map((n) => backend.acquire(`c${n}`, { waitTimeoutMs: 0 }).then(
    (lease) => lease.release(),
    (error) => error.code,
  ));
  // Let the commands reach the proxy, then reset.
  await new Promise((resolve) => setImmediate(resolve));
  proxy.reset();
  proxy.flow();
  for (const outcome of await Promise.all(inFlight)) assert.ok(outcome === true || outcome === 'OUTCOME_UNKNOWN' || outcome === 'PROVIDER_FAILED', String(outcome));
  await eventually(() => roundTrip(backend, 'd'));
  await provider.close();
  await proxy.close();
});

test('after CLIENT KILL of every normal connection, commands work again', async () => {
  const provider = await open(redis.url);
  const backend = provider.backend('r');
  await roundTrip(backend, 'a');
  assert.match(await command(redis.port, 'CLIENT', 'KILL', 'TYPE', 'normal', 'SKIPME', 'yes'), /^:[1-9]/);
  await eventually(() => roundTrip(backend, 'b'));
  await provider.close();
});

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

/** Waits until `count` EVALSHA commands in all have reached the (holding) proxy. */
async function untilSent(proxy, count) {
  const sent = () => proxy.heldToServer().match(/EVALSHA/gi)?.length ?? 0;
  const deadline = Date.now() + 5000;
  while (sent() < count) {
    assert.ok(Date.now() < deadline, `only ${sent()} of ${count} scripts reached the proxy`);
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}

/** Three acquires of fresh keys, each settling to `true` (granted and released) or its error code. */
function threeAcquires(backend, prefix) {
  return [1, 2, 3].map((n) => backend.acquire(`${prefix}${n}`, { waitTimeoutMs: 0 }).then(
    (lease) => lease.release(),
    (error) => error.code,
  ));
}

// A command whose connection drops is retried once on a fresh connection
// (every script compares the owner token, so a retry is harmless): one
// reset costs nothing, a second one in a row fails the command.
test('a reset (RST) while commands are in flight: each is retried once on a fresh connection, and a second reset fails them', async () => {
  const proxy = await startProxy(redis.port);
  const provider = await open(proxy.url);
  // Closed also when an assertion fails: an open provider keeps the test file running.
  try {
    const backend = provider.backend('r');
    await roundTrip(backend, 'a');

    // One reset once the three scripts are sent (held at the proxy, never
    // answered): their retries go through a fresh connection.
    proxy.hold();
    const retried = threeAcquires(backend, 'c');
    await untilSent(proxy, 3);
    proxy.reset();
    proxy.flow();
    assert.deepEqual(await Promise.all(retried), [true, true, true], 'retried once, granted');

    // Two resets: the first attempts, then their retries (on a fresh
    // connection, whose handshake goes through), sent and never answered.
    proxy.holdScripts();
    const failed = threeAcquires(backend, 'e');
    await untilSent(proxy, 3);
    proxy.reset();
    await untilSent(proxy, 6);
    proxy.reset();
    proxy.flow();
    assert.deepEqual(await Promise.all(failed), ['OUTCOME_UNKNOWN', 'OUTCOME_UNKNOWN', 'OUTCOME_UNKNOWN'], 'sent twice, never answered');

    await eventually(() => roundTrip(backend, 'd'));
  } finally {
    await provider.close();
    await proxy.close();
  }
});

test('after CLIENT KILL of every normal connection, commands work again', async () => {
  const provider = await open(redis.url);
  const backend = provider.backend('r');
  await roundTrip(backend, 'a');
  assert.match(await command(redis.port, 'CLIENT', 'KILL', 'TYPE', 'normal', 'SKIPME', 'yes'), /^:[1-9]/);
  await eventually(() => roundTrip(backend, 'b'));
  await provider.close();
});

// Commands an app sends from the JS thread run there, on every topology
// (issue 22): the driver's runtime thread is not woken once per command.
// Black-box, Linux only: the runtime thread's voluntary context switches
// (/proc/self/task/<tid>/status) barely move over 2000 acquire/release
// pairs on the JS-thread path; a command sent through that thread costs at
// least one switch (it sleeps in epoll between commands).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { openLock } from '../index.js';
import { startRedis } from './redis-server.js';
import { startCluster, startSentinel } from './redis-topologies.js';

const PAIRS = 2000;
// 4000 commands: the cross-thread path switches >= 4000 times.
const MAX_SWITCHES = PAIRS / 10;
const skip = process.platform !== 'linux' && 'reads /proc/self/task';

/** Voluntary context switches of the driver's runtime threads (named
 *  `dokebi-lock-io`), summed. */
function runtimeSwitches() {
  let switches = 0;
  let threads = 0;
  for (const tid of readdirSync('/proc/self/task')) {
    let status;
    try {
      status = readFileSync(`/proc/self/task/${tid}/status`, 'utf8');
    } catch {
      continue; // the thread ended
    }
    if (!/^Name:\s*dokebi-lock-io$/m.test(status)) continue;
    threads++;
    switches += Number(/^voluntary_ctxt_switches:\s*(\d+)/m.exec(status)[1]);
  }
  assert.ok(threads > 0, 'the driver runtime thread runs');
  return switches;
}

async function assertOnTheJsThread(t, connection) {
  const provider = await openLock({
    config: {
      'dokebi-lock': { backends: { r: { driver: 'redis', connection: 'main', namespace: 'jsthread', leaseMs: 30_000 } } },
      'dokebi-redis': { connections: { main: { ...connection, connectTimeoutMs: 2000, commandTimeoutMs: 2000 } } },
    },
  });
  try {
    const backend = provider.backend('r');
    // Connects (and, on a cluster, learns the slot map and reaches every primary).
    for (let i = 0; i < 32; i++) await (await backend.acquire(`warm:${i}`, { waitTimeoutMs: 0 })).release();
    const before = runtimeSwitches();
    for (let i = 0; i < PAIRS; i++) {
      const lease = await backend.acquire(`key:${i % 64}`, { waitTimeoutMs: 0 });
      assert.equal(await lease.release(), true);
    }
    const switches = runtimeSwitches() - before;
    t.diagnostic(`${switches} runtime thread switches over ${PAIRS} acquire/release pairs`);
    assert.ok(switches < MAX_SWITCHES, `${switches} runtime thread switches over ${PAIRS} acquire/release pairs`);
  } finally {
    await provider.close();
  }
}

test('commands to one server run on the JS thread', { skip }, async (t) => {
  const redis = await startRedis();
  try {
    await assertOnTheJsThread(t, { url: redis.url });
  } finally {
    await redis.stop();
  }
});

test('commands to the primary Sentinel names run on the JS thread', { skip }, async (t) => {
  const sentinel = await startSentinel();
  try {
    await assertOnTheJsThread(t, { sentinel: { nodes: sentinel.nodes, primaryName: sentinel.primaryName } });
  } finally {
    await sentinel.stop();
  }
});

test('commands to a Redis Cluster run on the JS thread', { skip }, async (t) => {
  const cluster = await startCluster();
  try {
    await assertOnTheJsThread(t, { cluster: { nodes: cluster.nodes.slice(0, 2) } });
  } finally {
    await cluster.stop();
  }
});

// Example 15: the redis driver. Run: node examples/15-redis/main.js
// (after scripts/build-node). Uses REDIS_URL when set, else starts its own
// redis-server on a free port. In an app, import from '@dokebi/lock'.
import { spawn } from 'node:child_process';
import { createServer, connect } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { openLock, LockError } from '../../npm/index.js';

/** A private redis-server without persistence, or REDIS_URL. */
async function redisUrl() {
  if (process.env.REDIS_URL) return { url: process.env.REDIS_URL, stop() {} };
  const probe = createServer();
  await new Promise((resolve) => probe.listen(0, '127.0.0.1', resolve));
  const { port } = probe.address();
  await new Promise((resolve) => probe.close(resolve));
  const server = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'], { stdio: 'ignore' });
  const up = () =>
    new Promise((resolve) => {
      const socket = connect(port, '127.0.0.1', () => (socket.destroy(), resolve(true)));
      socket.once('error', () => resolve(false));
    });
  while (!(await up())) await sleep(20);
  return { url: `redis://127.0.0.1:${port}/0`, stop: () => server.kill() };
}

const redis = await redisUrl();
try {
  const yaml = `
schemaVersion: 1
options:
  dokebi-lock:
    backends:
      shared:
        driver: redis
        connection: main
        namespace: example-15
        leaseMs: 10000
  dokebi-redis:
    connections:
      main:
        url: ${redis.url}
`;
  // Two providers stand for two processes (or servers) sharing the lock.
  const web = await openLock({ yaml });
  const worker = await openLock({ yaml });

  const lease = await web.backend('shared').acquire('invoice:7');
  console.log('web holds invoice:7, fence', lease.fence, 'remainingMs <=', 10000);
  try {
    await worker.backend('shared').acquire('invoice:7', { waitTimeoutMs: 0 });
  } catch (error) {
    if (!(error instanceof LockError)) throw error;
    console.log('worker:', error.code);
  }

  // The worker waits; the release notifies it at once through pub/sub.
  const waiting = worker.backend('shared').acquire('invoice:7', { waitTimeoutMs: 5000 });
  const started = performance.now();
  await lease.release();
  const next = await waiting;
  console.log(`worker got invoice:7 after the release in ${(performance.now() - started).toFixed(1)} ms`);
  console.log('fence grew:', BigInt(next.fence) > BigInt(lease.fence));

  // close() releases what is still held, so the key is free for others.
  await worker.close();
  await using again = await web.backend('shared').acquire('invoice:7', { waitTimeoutMs: 0 });
  console.log('web holds invoice:7 again:', again.valid);
  await again.release();
  await web.close();
} finally {
  redis.stop();
}

// Example 18: the policy driver, one backend over several by lock name.
// Run: node examples/18-tiers/main.js (after scripts/build-node). Starts its
// own redis-server on a free port (never REDIS_URL: it kills it halfway) and
// keeps the file member's lock files in a temporary directory. In an app,
// import from '@dokebi/lock'.
import { spawn } from 'node:child_process';
import { subscribe } from 'node:diagnostics_channel';
import { mkdtempSync } from 'node:fs';
import { createServer, connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { openLock, LockError } from '../../npm/index.js';

/** A private redis-server without persistence on `port` (a free one when omitted). */
async function startRedis(port) {
  if (port === undefined) {
    const probe = createServer();
    await new Promise((resolve) => probe.listen(0, '127.0.0.1', resolve));
    port = probe.address().port;
    await new Promise((resolve) => probe.close(resolve));
  }
  const server = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'], { stdio: 'ignore' });
  const exited = new Promise((resolve) => server.once('exit', resolve));
  const up = () =>
    new Promise((resolve) => {
      const socket = connect(port, '127.0.0.1', () => (socket.destroy(), resolve(true)));
      socket.once('error', () => resolve(false));
    });
  while (!(await up())) await sleep(20);
  return { port, url: `redis://127.0.0.1:${port}/0`, stop: () => (server.kill('SIGKILL'), exited) };
}

const COOLDOWN_MS = 1000;
let redis = await startRedis();
const config = {
  'dokebi-redis': { connections: { main: { url: redis.url, connectTimeoutMs: 1000, commandTimeoutMs: 300 } } },
  'dokebi-lock': {
    backends: {
      cache: { driver: 'redis', connection: 'main', namespace: 'example-18', leaseMs: 5000 },
      host: { driver: 'file', directory: join(mkdtempSync(join(tmpdir(), 'dokebi-example-18-')), 'locks') },
      locks: {
        driver: 'policy',
        reprobeCooldownMs: COOLDOWN_MS,
        // Payments: Redis only; while it is down, refused (the overlap would cost money).
        rules: [{ prefix: 'pay:', backends: ['cache'] }],
        // Everything else may move to this host's files while Redis is down.
        default: { backends: ['cache', 'host'], minTier: 'host', onUnavailable: 'fallBack' },
      },
    },
  },
};
subscribe('dokebi-lock:policy-fallback', ({ member, preferred, code }) => console.log(`  (telemetry: served by ${member}, not ${preferred}: ${code})`));
const lock = await openLock({ config, logger: { debug() {}, error() {} } });
const locks = lock.backend('locks');
try {
  const report = await locks.acquire('report:daily');
  console.log('report:daily served by', report.served.backend, `(tier ${report.served.tier})`);
  await report.release();

  await redis.stop();
  console.log('redis stopped');
  const moved = await locks.acquire('report:daily').catch((error) => {
    // The acquire the kill cut off may be OUTCOME_UNKNOWN: it never moves; the next one does.
    if (error.code !== 'OUTCOME_UNKNOWN') throw error;
    return locks.acquire('report:daily');
  });
  console.log('report:daily served by', moved.served.backend, `(tier ${moved.served.tier})`);
  await moved.release();
  try {
    await locks.acquire('pay:42');
  } catch (error) {
    if (!(error instanceof LockError)) throw error;
    console.log('pay:42:', error.code, '-', error.details.tried.map((t) => `${t.backend}: ${t.code}`).join(', '));
  }
  console.log('members:', locks.status().members.map((m) => `${m.backend} served ${m.served}, fallbacks ${m.fallbacks}, refusals ${m.refusals}, skipped ${m.skipped}`).join('; '));

  redis = await startRedis(redis.port);
  await sleep(COOLDOWN_MS + 100);
  await using back = await locks.acquire('report:daily');
  console.log('after the cooldown report:daily served by', back.served.backend);
  console.log('keyStatus(report:daily):', JSON.stringify({ ...locks.keyStatus('report:daily'), last: locks.keyStatus('report:daily').last.backend }));
} finally {
  await lock.close();
  await redis.stop();
}

// Example 29: an extension. Run: node examples/29-extension/main.js
// (after scripts/build-node). In an app, import from '@dokebi/lock'.
//
// src/infra/lock/extension.ts is the app's entry module: it registers the app
// driver `sqlite` (leases in a SQLite file shared by the processes of one
// machine, with fencing tokens) and wraps every backend with metrics. Two
// apps in this process and worker.js in another share one file.
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { createPlugin, LockError } from '../../npm/index.js';
import { createApp } from '../../npm/host.js';
import * as entry from './src/infra/lock/extension.ts';

const dir = await mkdtemp(join(tmpdir(), 'dokebi-lock-example-29-'));
try {
  // As in the YAML file: `driver: sqlite` plus that driver's own settings.
  const config = {
    'dokebi-lock': {
      backends: {
        reports: { driver: 'sqlite', file: join(dir, 'locks.db'), leaseMs: 10000, pollIntervalMs: 10 },
        orders: {},
      },
    },
  };

  async function startApp() {
    const app = createApp({ config });
    const lock = createPlugin({ app, entry });
    app.register(lock);
    await app.start();
    const provider = app.get(lock);
    return { app, provider, reports: provider.backend('reports'), orders: provider.backend('orders') };
  }
  const web = await startApp();
  const worker = await startApp();

  const first = await web.reports.acquire('report:2026-11');
  console.log('web holds report:2026-11, fence', first.fence);
  // Another process over the same file sees the lease.
  const other = spawnSync(process.execPath, [fileURLToPath(new URL('worker.js', import.meta.url)), config['dokebi-lock'].backends.reports.file, 'report:2026-11'], { encoding: 'utf8' });
  console.log('another process:', other.stdout.trim() || other.stderr);
  try {
    await worker.reports.acquire('report:2026-11', { waitTimeoutMs: 0 });
  } catch (error) {
    if (!(error instanceof LockError)) throw error;
    console.log('worker:', error.code);
  }
  const waiting = worker.reports.acquire('report:2026-11', { waitTimeoutMs: 5000 });
  setTimeout(() => first.release(), 50);
  const second = await waiting;
  console.log('worker got report:2026-11 after the release; fence grew:', BigInt(second.fence) > BigInt(first.fence));
  await second.release();

  // The built-in local driver is wrapped by the same hook.
  {
    await using order = await web.orders.acquire('order:42');
    console.log('orders fence', order.fence);
  }

  // withLock and status work on every backend, also where the driver and the
  // wrapper supply only acquire: the library adds them.
  const fence = await web.reports.withLock('report:2026-12', (lease) => lease.fence);
  console.log('withLock on the sqlite backend, fence', fence);
  console.log('status reports:', JSON.stringify(web.provider.status().reports));

  for (const [backend, counts] of entry.metrics) console.log(`metrics ${backend}:`, JSON.stringify(counts));
  await web.app.stop();
  await worker.app.stop();

  // The driver validates its own settings; the core passes them through.
  const broken = createApp({ config: { 'dokebi-lock': { backends: { reports: { driver: 'sqlite', file: join(dir, 'x.db') } } } } });
  broken.register(createPlugin({ app: broken, entry }));
  try {
    await broken.start();
  } catch (error) {
    if (!(error instanceof LockError)) throw error;
    console.log('bad settings:', error.code, error.details.issues.map((i) => i.path).join(', '));
  }
} finally {
  await rm(dir, { recursive: true, force: true });
}

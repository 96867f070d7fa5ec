// Example 14: the local driver. Run: node examples/14-local/main.js
// (after scripts/build-node). In an app, import from '@dokebi/lock'.
import { fileURLToPath } from 'node:url';
import { openLock, createPlugin, dependency, LockError } from '../../npm/index.js';
import { createApp } from '../../npm/host.js';

// 1. Standalone: open the backends of the YAML file.
const provider = await openLock({ file: fileURLToPath(new URL('dokebi.yaml', import.meta.url)) });
const orders = provider.backend('orders');

// A store that accepts a write only with a newer fence, like
// UPDATE orders SET ..., fence = $1 WHERE id = $2 AND fence < $1.
const store = new Map();
function write(id, value, fence) {
  const current = store.get(id);
  if (current && BigInt(current.fence) >= BigInt(fence)) return false;
  store.set(id, { value, fence });
  return true;
}

// Ten concurrent updates of one order run one at a time, in arrival order.
await Promise.all(
  Array.from({ length: 10 }, async (_, n) => {
    await using lease = await orders.acquire('order:42', { waitTimeoutMs: 5000 });
    const total = (store.get('order:42')?.value ?? 0) + n;
    await new Promise((resolve) => setTimeout(resolve, 1));
    write('order:42', total, lease.fence);
  }),
);
console.log('order:42 total', store.get('order:42').value);

// A busy key with waitTimeoutMs 0 fails at once.
const held = await orders.acquire('order:7');
try {
  await orders.acquire('order:7', { waitTimeoutMs: 0 });
} catch (error) {
  if (!(error instanceof LockError)) throw error;
  console.log('busy:', error.code, '-', error.fix);
}
await held.release();
await provider.close();

// 2. As a dokebi plugin: a consumer plugin names the dependency token.
const app = createApp({ config: { 'dokebi-lock': { backends: { jobs: {} } } } });
const lock = createPlugin({ app });
let nightly;
const worker = {
  name: 'worker',
  metadata: { dependencies: [dependency] },
  async start(context) {
    const jobs = context.getDependency(dependency).backend('jobs');
    nightly = await jobs.acquire('nightly-report');
    console.log('worker holds nightly-report with fence', nightly.fence);
  },
};
app.register(lock).register(worker);
await app.start();
await app.stop();
// Stopping closes the provider after the worker: a lease still held is invalid.
console.log('nightly-report valid after stop:', nightly.valid);

// Example 16: the postgres driver. Run: node examples/16-postgres/main.js
// (after scripts/build-node). Uses the PostgreSQL at DATABASE_URL, else
// postgres://postgres@127.0.0.1:5432/test; its tables go into a schema of
// its own (dokebi_example_16, created on first use). In an app, import from
// '@dokebi/lock'.
import { openLock, LockError } from '../../npm/index.js';

const url = process.env.DATABASE_URL || 'postgres://postgres@127.0.0.1:5432/test';
const yaml = `
schemaVersion: 1
options:
  dokebi-lock:
    backends:
      shared:
        driver: postgres
        connection: main
        schema: dokebi_example_16
        namespace: example-16
        leaseMs: 10000
  dokebi-postgres:
    connections:
      main:
        url: '${url}'
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

// The worker waits; the release wakes it at once through LISTEN/NOTIFY.
const waiting = worker.backend('shared').acquire('invoice:7', { waitTimeoutMs: 5000 });
const started = performance.now();
await lease.release();
const next = await waiting;
console.log(`worker got invoice:7 after the release in ${(performance.now() - started).toFixed(1)} ms`);
console.log('fence grew:', BigInt(next.fence) > BigInt(lease.fence));

// withLock renews the lease while the section runs; status() tells the connection's health.
await web.backend('shared').withLock('report:daily', async (held) => {
  console.log('web runs report:daily, valid:', held.valid);
});
const { postgres } = web.backend('shared').status();
console.log('web connected:', postgres.connected, 'lastError:', postgres.lastError);

// close() releases what is still held, so the key is free for others.
await worker.close();
await using again = await web.backend('shared').acquire('invoice:7', { waitTimeoutMs: 0 });
console.log('web holds invoice:7 again:', again.valid);
await again.release();
await web.close();

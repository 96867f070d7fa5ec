// Example 19: the mysql driver. Run: node examples/19-mysql/main.js
// (after scripts/build-node). Uses the MySQL or MariaDB server at MYSQL_URL,
// else mysql://root@127.0.0.1:3306/test; its tables and procedures are named
// after `table` (dokebi_example_19, created on first use). In an app, import
// from '@dokebi/lock'.
import { openLock, LockError } from '../../npm/index.js';

const url = process.env.MYSQL_URL || 'mysql://root@127.0.0.1:3306/test';
const yaml = `
schemaVersion: 1
options:
  dokebi-lock:
    backends:
      shared:
        driver: mysql
        connection: main
        table: dokebi_example_19
        namespace: example-19
        leaseMs: 10000
  dokebi-mysql:
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

// The worker waits; the release wakes it through the release log its
// process polls (MySQL has no LISTEN/NOTIFY).
const waiting = worker.backend('shared').acquire('invoice:7', { waitTimeoutMs: 5000 });
const started = performance.now();
await lease.release();
const next = await waiting;
console.log(`worker got invoice:7 after the release in ${(performance.now() - started).toFixed(1)} ms`);
// A fence is a 64-bit integer as a string: compare as BigInt (or DECIMAL(20) in SQL).
console.log('fence grew:', BigInt(next.fence) > BigInt(lease.fence));
await next.release();

// withLock renews the lease while the section runs; status() tells the connection's health.
await web.backend('shared').withLock('report:daily', async (held) => {
  console.log('web runs report:daily, valid:', held.valid);
});
const { mysql } = web.backend('shared').status();
console.log('web connected:', mysql.connected, 'lastError:', mysql.lastError);

// close() releases what is still held, so the key is free for others.
const kept = await worker.backend('shared').acquire('invoice:7');
await worker.close();
console.log('worker lease valid after close:', kept.valid);
await using again = await web.backend('shared').acquire('invoice:7', { waitTimeoutMs: 0 });
console.log('web holds invoice:7 again:', again.valid);
await again.release();
await web.close();

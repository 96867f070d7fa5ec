// Example 17: the file driver, locks shared by the processes of one host.
// Run: node examples/17-file/main.js (after scripts/build-node). In an app,
// import from '@dokebi/lock'.
//
// The example starts a second Node process (this file with the argument
// `worker`): both lock keys of one directory, and the kernel keeps the locks.
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { openLock, LockError } from '../../npm/index.js';

const directory = process.env.LOCK_DIR || join(tmpdir(), `dokebi-lock-example-17-${process.getuid?.() ?? 'user'}`);
const config = { 'dokebi-lock': { backends: { jobs: { driver: 'file', directory } } } };

if (process.argv[2] === 'worker') {
  // The second process: tries once, then waits for the key.
  const provider = await openLock({ config });
  const jobs = provider.backend('jobs');
  try {
    await jobs.acquire('invoice:7', { waitTimeoutMs: 0 });
  } catch (error) {
    if (!(error instanceof LockError)) throw error;
    console.log('worker:', error.code);
  }
  console.log('worker waits');
  const lease = await jobs.acquire('invoice:7', { waitTimeoutMs: 10_000 });
  console.log(`worker got invoice:7 after the release, fence ${lease.fence}`);
  await lease.release();
  await provider.close();
} else {
  const provider = await openLock({ config });
  const jobs = provider.backend('jobs');

  // withLock: the section runs while no other process of this host holds the key.
  const total = await jobs.withLock('nightly-report', async (lease) => {
    console.log('report runs holding nightly-report, valid:', lease.valid, 'remainingMs:', lease.remainingMs);
    return 42;
  });
  console.log('report total', total);

  // Hold invoice:7, start the worker, release once it waits.
  const lease = await jobs.acquire('invoice:7');
  console.log(`main holds invoice:7, fence ${lease.fence}`);
  const worker = spawn(process.execPath, [fileURLToPath(import.meta.url), 'worker'], {
    env: { ...process.env, LOCK_DIR: directory },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const exited = once(worker, 'exit');
  let workerFence;
  for await (const line of createInterface({ input: worker.stdout })) {
    console.log(line);
    if (line === 'worker waits') await lease.release();
    const granted = /fence ([0-9]+)$/.exec(line);
    if (granted) workerFence = granted[1];
  }
  const [code] = await exited;
  if (code !== 0) throw new Error(`the worker failed (${code})`);
  console.log('fence grew across processes:', BigInt(workerFence) > BigInt(lease.fence));
  console.log('status:', JSON.stringify(jobs.status()));
  await provider.close();
}

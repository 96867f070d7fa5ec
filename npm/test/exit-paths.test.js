// A Node process that uses the addon exits as it was told, in every exit
// path: the code the program gave (process.exit, an uncaught exception, the
// natural end), never an abort, and no panic text on stderr.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { useRedis } from './redis-server.js';

const INDEX = JSON.stringify(new URL('../index.js', import.meta.url).href);

const redis = useRedis();

let namespaces = 0;

/**
 * A child program: `holder` (one provider) holds key `k` of backend `r`,
 * `backend` (another provider) has two acquires of it waiting, then `end`
 * runs. `r` is a redis backend, `l` a local one; `stop` aborts the waiters.
 */
function program(end) {
  const yaml = [
    'schemaVersion: 1',
    'options:',
    '  dokebi-lock:',
    '    backends:',
    `      r: { driver: redis, connection: main, leaseMs: 10000, namespace: exit${++namespaces} }`,
    '      l: {}',
    '  dokebi-redis:',
    '    connections:',
    `      main: { url: "${redis.url}" }`,
  ].join('\\n');
  return `
import { openLock } from ${INDEX};
const holderProvider = await openLock({ yaml: '${yaml}' });
const provider = await openLock({ yaml: '${yaml}' });
const holder = holderProvider.backend('r');
const backend = provider.backend('r');
const local = provider.backend('l');
const lease = await holder.acquire('k');
const localLease = await local.acquire('k');
const stop = new AbortController();
const waiters = [1, 2].map(() => backend.acquire('k', { waitTimeoutMs: 60000, signal: stop.signal }).catch(() => {}));
const localWaiters = [1, 2].map(() => local.acquire('k', { waitTimeoutMs: 60000, signal: stop.signal }).catch(() => {}));
// Let the waiters reach Redis and subscribe.
await new Promise((resolve) => setTimeout(resolve, 100));
${end}
`;
}

function run(source, args = []) {
  return spawnSync(process.execPath, [...args, '--input-type=module', '-e', source], { encoding: 'utf8', timeout: 30_000 });
}

function assertExit(result, code) {
  assert.equal(result.signal, null, `killed by ${result.signal}; stderr: ${result.stderr}`);
  assert.doesNotMatch(result.stderr, /panicked|abort|fatal runtime error/i);
  assert.equal(result.status, code, result.stderr);
}

test('process.exit(0) with redis and local acquires waiting exits 0', () => {
  assertExit(run(program('process.exit(0);')), 0);
});

test('process.exit(3) with leases held and nothing waiting exits 3', () => {
  assertExit(run(program(`
stop.abort();
await Promise.all([...waiters, ...localWaiters]);
process.exit(3);`)), 3);
});

test('an uncaught exception with acquires waiting exits 1, with only the exception on stderr', () => {
  const result = run(program("setImmediate(() => { throw new Error('boom from the app'); });"));
  assertExit(result, 1);
  assert.match(result.stderr, /boom from the app/);
});

test('process.exit(0) after close exits 0', () => {
  assertExit(run(program('await provider.close(); await holderProvider.close(); process.exit(0);')), 0);
});

test('process.exit(0) inside a withLock section exits 0', () => {
  assertExit(run(program("await provider.backend('r').withLock('other', () => process.exit(0));")), 0);
});

test('the natural end, with a lease still held and the waiters gone, exits 0', () => {
  assertExit(run(program(`
await provider.close();
await Promise.all([...waiters, ...localWaiters]);`)), 0);
});

test('a worker terminated with acquires waiting leaves the process to exit 0', () => {
  // Each worker holds its key in a namespace of its own: a terminated one
  // leaves its lease in Redis.
  const workers = [1, 2, 3].map(() =>
    program("parentPort.postMessage('waiting'); await new Promise(() => {});").replace(
      'import { openLock }',
      "import { parentPort } from 'node:worker_threads';\nimport { openLock }",
    ),
  );
  const main = `
import { Worker } from 'node:worker_threads';
for (const source of ${JSON.stringify(workers)}) {
  const worker = new Worker(source, { eval: true });
  await new Promise((resolve, reject) => { worker.once('message', resolve); worker.once('error', reject); });
  await worker.terminate();
}
console.log('all terminated');
`;
  const result = run(main);
  assertExit(result, 0);
  assert.equal(result.stdout.trim(), 'all terminated');
});

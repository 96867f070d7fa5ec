// driver: mysql end to end through the JS API, against the machine's MariaDB
// (see mysql-server.js): leases, fences, waiters woken by the release
// poller, a hand-off to another process, withLock's renewals, every kind,
// status, errors and close. Two providers in one process stand for two
// processes sharing a table; one test uses a real second process.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { once } from 'node:events';
import { createInterface } from 'node:readline';
import { setTimeout as sleep } from 'node:timers/promises';
import { openLock } from '../index.js';
import { isSettled, rejectsWith } from './helpers.js';
import { MYSQL_URL, mysql, mysqlConfig, useTables } from './mysql-server.js';

const freshTable = useTables('lock');
const INDEX = JSON.stringify(new URL('../index.js', import.meta.url).href);
/** The server's clock in µs, as the driver writes expiries. */
const NOW_US = "TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6))";

/** Two providers with a mysql backend `my` on one fresh table. */
async function pair(settings = {}, connection = {}) {
  const config = mysqlConfig(freshTable(), settings, { connection });
  return [await openLock({ config }), await openLock({ config })];
}

/** Resolves once the provider's release poller reads the log (the test's own timeout bounds the wait). */
async function polling(provider) {
  while (provider.backend('my').status().mysql.polling !== true) await sleep(10);
}

test('openLock reads a YAML file with dokebi-mysql.connections and a driver: mysql backend', async () => {
  const table = freshTable();
  const yaml = `
schemaVersion: 1
options:
  dokebi-lock:
    backends:
      my:
        driver: mysql
        connection: main
        table: ${table}
        namespace: yaml
        leaseMs: 5000
  dokebi-mysql:
    connections:
      main:
        url: '${MYSQL_URL}'
`;
  const provider = await openLock({ yaml });
  const backend = provider.backend('my');
  const lease = await backend.acquire('order:42');
  assert.equal(lease.key, 'order:42');
  assert.equal(lease.valid, true);
  assert.ok(lease.remainingMs > 0 && lease.remainingMs <= 5000, String(lease.remainingMs));
  assert.match(lease.fence, /^[1-9][0-9]*$/);
  // The lease is a row of the backend's table, in its namespace.
  assert.equal(mysql(`SELECT count(*) FROM ${table}_holders WHERE expires_at > ${NOW_US}`), '1');
  assert.equal(mysql(`SELECT CAST(ns AS CHAR) FROM ${table}`), 'yaml');
  assert.equal(await lease.release(), true);
  assert.equal(await lease.release(), false);
  assert.equal(lease.valid, false);
  assert.equal(mysql(`SELECT count(*) FROM ${table}_holders WHERE expires_at > ${NOW_US}`), '0');
  await provider.close();
});

test('fences rise with every grant of a key, across providers', async () => {
  const [a, b] = await pair();
  const fences = [];
  for (const provider of [a, b, a, b]) {
    const lease = await provider.backend('my').acquire('k', { waitTimeoutMs: 0 });
    fences.push(BigInt(lease.fence));
    await lease.release();
  }
  for (let i = 1; i < fences.length; i++) assert.ok(fences[i] > fences[i - 1], `fence ${i} grew: ${fences}`);
  await Promise.all([a.close(), b.close()]);
});

test('another provider is LOCK_BUSY, WAIT_TIMEOUT, and a waiter is woken by the release through the release poller', async () => {
  // Retries far apart (60 s, 10 min) against a 30 s wait: only the poller
  // reading the release log can wake the waiter in time.
  const [a, b] = await pair({ pollIntervalMs: 60_000, notifyPollIntervalMs: 600_000 });
  const held = await a.backend('my').acquire('k');
  await rejectsWith(b.backend('my').acquire('k', { waitTimeoutMs: 0 }), 'LOCK_BUSY');
  await rejectsWith(b.backend('my').acquire('k', { waitTimeoutMs: 50 }), 'WAIT_TIMEOUT');
  const waiting = b.backend('my').acquire('k', { waitTimeoutMs: 30_000 });
  while (b.backend('my').status().waiting !== 1) await sleep(5);
  await polling(b);
  // Time for many round trips: a waiter the store granted would be settled.
  await sleep(200);
  assert.equal(await isSettled(waiting), false);
  await held.release();
  const next = await waiting;
  assert.ok(BigInt(next.fence) > BigInt(held.fence), 'the fence grows per key');
  await next.release();
  await Promise.all([a.close(), b.close()]);
});

test('a key held by another process is handed to this one when that process releases it', async () => {
  const config = mysqlConfig(freshTable(), { pollIntervalMs: 60_000, notifyPollIntervalMs: 600_000 });
  // The child holds the key, says its fence, releases when told, then exits.
  const child = spawn(
    process.execPath,
    [
      '--input-type=module',
      '-e',
      `
import { openLock } from ${INDEX};
import { once } from 'node:events';
const provider = await openLock({ config: ${JSON.stringify(config)} });
const lease = await provider.backend('my').acquire('baton');
console.log(lease.fence);
await once(process.stdin, 'data');
console.log(await lease.release());
await provider.close();
`,
    ],
    { stdio: ['pipe', 'pipe', 'inherit'] },
  );
  // Listened for from the start: the child may exit while this process
  // still waits for the hand-off (an 'exit' before a listener is missed, and
  // the test would wait for it forever, as it did in CI on 2026-12-05).
  const exited = once(child, 'exit');
  const lines = createInterface({ input: child.stdout })[Symbol.asyncIterator]();
  const held = (await lines.next()).value;
  const provider = await openLock({ config });
  const backend = provider.backend('my');
  await rejectsWith(backend.acquire('baton', { waitTimeoutMs: 0 }), 'LOCK_BUSY');
  const waiting = backend.acquire('baton', { waitTimeoutMs: 30_000 });
  while (backend.status().waiting !== 1) await sleep(5);
  await polling(provider);
  // The end of its input too, so nothing keeps the child alive once it closed.
  child.stdin.end('release\n');
  assert.equal((await lines.next()).value, 'true');
  const lease = await waiting;
  assert.ok(BigInt(lease.fence) > BigInt(held), `${lease.fence} after ${held}`);
  const [code] = await exited;
  assert.equal(code, 0);
  await lease.release();
  await provider.close();
});

test('waiters of one key in one provider are served in FIFO order', async () => {
  const [provider] = await pair();
  const backend = provider.backend('my');
  const holder = await backend.acquire('k');
  const order = [];
  const waiters = [1, 2, 3].map((n) =>
    backend.acquire('k').then(async (lease) => {
      order.push(n);
      await lease.release();
    }),
  );
  while (backend.status().waiting !== 3) await sleep(5);
  await holder.release();
  await Promise.all(waiters);
  assert.deepEqual(order, [1, 2, 3]);
  await provider.close();
});

test('withLock renews the lease while a section longer than leaseMs runs; without autoRenew it is LEASE_LOST', async () => {
  // Each renewal commits (a log flush, about 2 ms here, more while the disk
  // is busy): a lease of 2 s leaves 1.3 s for it after each pause.
  const [a, b] = await pair({ leaseMs: 2000 });
  const value = await a.backend('my').withLock('k', async (lease) => {
    // Over two leases long: only renewals keep the key.
    await sleep(4500);
    // Another process still cannot take the key: the renewals kept it ours.
    await rejectsWith(b.backend('my').acquire('k', { waitTimeoutMs: 0 }), 'LOCK_BUSY');
    assert.equal(lease.valid, true);
    return 'renewed';
  });
  assert.equal(value, 'renewed');
  const after = await b.backend('my').acquire('k', { waitTimeoutMs: 0 });
  await after.release();
  await rejectsWith(
    a.backend('my').withLock('k', () => sleep(2500), { autoRenew: false }),
    'LEASE_LOST',
  );
  await Promise.all([a.close(), b.close()]);
});

test('readers of two providers share a key; a writer waits for both and gets a higher fence', async () => {
  const [a, b] = await pair();
  const r1 = await a.backend('my').acquire('catalog', { mode: 'shared' });
  const r2 = await b.backend('my').acquire('catalog', { mode: 'shared' });
  assert.equal(a.backend('my').status().heldShared, 1);
  await rejectsWith(a.backend('my').acquire('catalog', { waitTimeoutMs: 0 }), 'LOCK_BUSY');
  const writer = b.backend('my').acquire('catalog', { waitTimeoutMs: 10_000 });
  await r1.release();
  assert.equal(await isSettled(writer), false, 'one reader still holds the key');
  await r2.release();
  const w = await writer;
  assert.ok(BigInt(w.fence) > BigInt(r2.fence) && BigInt(r2.fence) > BigInt(r1.fence));
  await w.release();
  await Promise.all([a.close(), b.close()]);
});

test('a counted key holds at most its limit, by weight, and refuses another limit', async () => {
  const [a, b] = await pair();
  const heavy = await a.backend('my').acquire('exports', { limit: 3, weight: 2 });
  const light = await b.backend('my').acquire('exports', { limit: 3 });
  await rejectsWith(b.backend('my').acquire('exports', { limit: 3, waitTimeoutMs: 0 }), 'LOCK_BUSY');
  await rejectsWith(b.backend('my').acquire('exports', { limit: 4, waitTimeoutMs: 0 }), 'INVALID_ARGUMENT');
  await heavy.release();
  const again = await b.backend('my').acquire('exports', { limit: 3, weight: 2, waitTimeoutMs: 0 });
  await Promise.all([light.release(), again.release()]);
  await Promise.all([a.close(), b.close()]);
});

test('several keys are one lease with a fence per key, all or nothing; withLock takes them too', async () => {
  const [a, b] = await pair();
  const lease = await a.backend('my').acquire(['from', 'to']);
  assert.deepEqual(lease.keys, ['from', 'to']);
  const fences = lease.fences;
  assert.deepEqual([...fences.keys()], ['from', 'to']);
  assert.equal(fences.get('from'), lease.fence);
  await rejectsWith(b.backend('my').acquire(['spare', 'to'], { waitTimeoutMs: 50 }), 'WAIT_TIMEOUT');
  const spare = await b.backend('my').acquire('spare', { waitTimeoutMs: 0 });
  await spare.release();
  assert.equal(await lease.release(), true);
  const to = await b.backend('my').acquire('to', { waitTimeoutMs: 0 });
  assert.ok(BigInt(to.fence) > BigInt(fences.get('to')));
  await to.release();
  const keys = await a.backend('my').withLock(['to', 'from'], (held) => held.keys);
  assert.deepEqual(keys, ['to', 'from']);
  await Promise.all([a.close(), b.close()]);
});

test('status() counts and reports the mysql connection: connected, polling, lastError, lastAnswerAt', async () => {
  const [a, b] = await pair();
  const backend = a.backend('my');
  const lease = await backend.acquire('secret-key');
  const waiter = backend.acquire('secret-key', { waitTimeoutMs: 10_000 });
  while (backend.status().waiting !== 1) await sleep(5);
  const status = backend.status();
  assert.deepEqual(
    { ...status, mysql: undefined },
    { driver: 'mysql', held: 1, heldShared: 0, waiting: 1, acquired: 1, timedOut: 0, lost: 0, mysql: undefined },
  );
  assert.deepEqual(Object.keys(status.mysql), ['connected', 'polling', 'lastError', 'lastAnswerAt']);
  assert.equal(status.mysql.connected, true);
  assert.equal(typeof status.mysql.polling, 'boolean');
  assert.equal(status.mysql.lastError, null);
  assert.equal(typeof status.mysql.lastAnswerAt, 'number');
  assert.equal('redis' in status, false);
  assert.equal('postgres' in status, false);
  assert.deepEqual(Object.keys(a.status()), ['my']);
  assert.ok(!JSON.stringify(a.status()).includes('secret'));
  await lease.release();
  await (await waiter).release();
  await Promise.all([a.close(), b.close()]);
});

test('an unreachable server is PROVIDER_FAILED (503) with the cause, never showing the password, and status says so', async () => {
  const password = 'hunter2-secret';
  const url = `mysql://app:${password}@127.0.0.1:1/test`;
  const provider = await openLock({ config: mysqlConfig(freshTable(), {}, { url, connection: { connectTimeoutMs: 200 } }) });
  const error = await rejectsWith(provider.backend('my').acquire('k', { waitTimeoutMs: 0 }), 'PROVIDER_FAILED');
  assert.ok(error.cause instanceof Error);
  assert.equal(error.http.status, 503);
  const seen = [];
  for (let e = error; e instanceof Error; e = e.cause) seen.push(e.message, e.fix ?? '', e.stack ?? '', JSON.stringify(e.details ?? null));
  assert.ok(!seen.join('\n').includes(password), seen.join('\n'));
  const { mysql: health } = provider.backend('my').status();
  assert.equal(health.connected, false);
  assert.equal(health.lastError, 'PROVIDER_FAILED');
  assert.equal(health.lastAnswerAt, null);
  await provider.close();
});

test('a mysql backend naming no connection is UNKNOWN_CONNECTION; a URL of another scheme is INVALID_OPTIONS', async () => {
  const noConnection = { 'dokebi-lock': { backends: { my: { driver: 'mysql', connection: 'nope', leaseMs: 10_000 } } } };
  const unknown = await rejectsWith(openLock({ config: noConnection }), 'UNKNOWN_CONNECTION');
  assert.match(unknown.message, /dokebi-mysql\.connections/);
  const config = mysqlConfig(freshTable(), {}, { url: 'postgres://127.0.0.1:5432/test' });
  await rejectsWith(openLock({ config }), 'INVALID_OPTIONS');
});

test('close releases held leases, rejects waiters with CLOSED, and later calls are CLOSED', async () => {
  const [a, b] = await pair();
  const lease = await a.backend('my').acquire('k');
  const waiter = rejectsWith(a.backend('my').acquire('k', { waitTimeoutMs: 60_000 }), 'CLOSED');
  await a.close();
  await waiter;
  assert.equal(lease.valid, false);
  await rejectsWith(() => a.backend('my'), 'CLOSED');
  const other = await b.backend('my').acquire('k', { waitTimeoutMs: 0 });
  assert.equal(other.valid, true, 'close released the lease in MySQL');
  await other.release();
  await b.close();
});

test('a process that opens mysql, locks, closes exits by itself', () => {
  const child = `
import { openLock } from ${INDEX};
const provider = await openLock({ config: ${JSON.stringify(mysqlConfig(freshTable()))} });
const lease = await provider.backend('my').acquire('k');
const waiter = provider.backend('my').acquire('k', { waitTimeoutMs: 600000 }).catch((error) => error.code);
await provider.close();
console.log(await waiter, lease.valid);
`;
  const result = spawnSync(process.execPath, ['--input-type=module', '-e', child], { encoding: 'utf8', timeout: 20_000 });
  assert.equal(result.signal, null, 'the child had to be killed: something kept it alive');
  assert.equal(result.status, 0, result.stderr);
  assert.equal(result.stdout.trim(), 'CLOSED false');
});

// driver: postgres end to end through the JS API, against the machine's
// PostgreSQL (see postgres-server.js): leases, fences, waiters woken by
// LISTEN, withLock's renewals, status, errors and close. Two providers stand
// for two processes sharing a table.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { setTimeout as sleep } from 'node:timers/promises';
import { openLock } from '../index.js';
import { isSettled, rejectsWith } from './helpers.js';
import { PG_URL, postgresConfig, psql, useSchemas } from './postgres-server.js';

const freshSchema = useSchemas('lock');

/** Two providers with a postgres backend `pg` in one fresh schema. */
async function pair(settings = {}, connection = {}) {
  const config = postgresConfig(freshSchema(), settings, { connection });
  return [await openLock({ config }), await openLock({ config })];
}

/** Resolves once the provider's LISTEN connection is up (the test's own timeout bounds the wait). */
async function listening(provider) {
  while (provider.backend('pg').status().postgres.listening !== true) await sleep(10);
}

test('openLock reads a YAML file with dokebi-postgres.connections and a driver: postgres backend', async () => {
  const schema = freshSchema();
  const yaml = `
schemaVersion: 1
options:
  dokebi-lock:
    backends:
      pg:
        driver: postgres
        connection: main
        schema: ${schema}
        namespace: yaml
        leaseMs: 5000
  dokebi-postgres:
    connections:
      main:
        url: '${PG_URL}'
`;
  const provider = await openLock({ yaml });
  const backend = provider.backend('pg');
  const lease = await backend.acquire('order:42');
  assert.equal(lease.key, 'order:42');
  assert.equal(lease.valid, true);
  assert.ok(lease.remainingMs > 0 && lease.remainingMs <= 5000, String(lease.remainingMs));
  assert.match(lease.fence, /^[1-9][0-9]*$/);
  // The lease is a row of the backend's table, in its schema and namespace.
  assert.equal(psql(`SELECT count(*) FROM ${schema}.dokebi_lock_holders WHERE expires_at > now()`), '1');
  assert.equal(psql(`SELECT namespace FROM ${schema}.dokebi_lock`), 'yaml');
  assert.equal(await lease.release(), true);
  assert.equal(await lease.release(), false);
  assert.equal(lease.valid, false);
  assert.equal(psql(`SELECT count(*) FROM ${schema}.dokebi_lock_holders WHERE expires_at > now()`), '0');
  await provider.close();
});

test('fences rise with every grant of a key, across providers', async () => {
  const [a, b] = await pair();
  const fences = [];
  for (const provider of [a, b, a, b]) {
    const lease = await provider.backend('pg').acquire('k', { waitTimeoutMs: 0 });
    fences.push(BigInt(lease.fence));
    await lease.release();
  }
  for (let i = 1; i < fences.length; i++) assert.ok(fences[i] > fences[i - 1], `fence ${i} grew: ${fences}`);
  await Promise.all([a.close(), b.close()]);
});

test('another provider is LOCK_BUSY, WAIT_TIMEOUT, and a waiter is woken by the release through LISTEN', async () => {
  // Polls far apart (60 s, 10 min) against a 30 s wait: only a NOTIFY on the
  // LISTEN connection can wake the waiter in time.
  const [a, b] = await pair({ pollIntervalMs: 60_000, notifyPollIntervalMs: 600_000 });
  const held = await a.backend('pg').acquire('k');
  await rejectsWith(b.backend('pg').acquire('k', { waitTimeoutMs: 0 }), 'LOCK_BUSY');
  await rejectsWith(b.backend('pg').acquire('k', { waitTimeoutMs: 50 }), 'WAIT_TIMEOUT');
  await listening(b);
  const waiting = b.backend('pg').acquire('k', { waitTimeoutMs: 30_000 });
  while (b.backend('pg').status().waiting !== 1) await sleep(5);
  // Time for many round trips: a waiter the store granted would be settled.
  await sleep(200);
  assert.equal(await isSettled(waiting), false);
  await held.release();
  const next = await waiting;
  assert.ok(BigInt(next.fence) > BigInt(held.fence), 'the fence grows per key');
  await next.release();
  await Promise.all([a.close(), b.close()]);
});

test('waiters of one key in one provider are served in FIFO order', async () => {
  const [provider] = await pair();
  const backend = provider.backend('pg');
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

test('an aborted signal is ABORTED before and while waiting, and the abort leaves the key to the next', async () => {
  const [a, b] = await pair();
  await rejectsWith(a.backend('pg').acquire('k', { signal: AbortSignal.abort() }), 'ABORTED');
  const held = await a.backend('pg').acquire('k');
  const controller = new AbortController();
  const waiting = b.backend('pg').acquire('k', { signal: controller.signal, waitTimeoutMs: 30_000 });
  while (b.backend('pg').status().waiting !== 1) await sleep(5);
  controller.abort();
  await rejectsWith(waiting, 'ABORTED');
  assert.equal(b.backend('pg').status().waiting, 0);
  await held.release();
  // The aborted waiter's mark is withdrawn in the background: until it is
  // gone a try is refused by the fairness rule, so the next acquire waits
  // (a mark the abort left for good would end this wait in WAIT_TIMEOUT).
  const next = await b.backend('pg').acquire('k', { waitTimeoutMs: 5_000 });
  await next.release();
  await Promise.all([a.close(), b.close()]);
});

test('withLock renews the lease while a section longer than leaseMs runs; without autoRenew it is LEASE_LOST', async () => {
  // A renewal commits durably (an fsync of the WAL) and must be answered
  // within the two thirds of the lease left after its pause: 1.3 s here.
  // On a host writing heavily to disk (a build beside the tests) a commit
  // took up to 620 ms, so a lease of 600 ms (0.39 s left per renewal) was
  // lost there about one run in two, rightly.
  const [a, b] = await pair({ leaseMs: 2000 });
  const value = await a.backend('pg').withLock('k', async (lease) => {
    // Over two leases long: only renewals keep the key.
    await sleep(4500);
    // Another process still cannot take the key: the renewals kept it ours.
    await rejectsWith(b.backend('pg').acquire('k', { waitTimeoutMs: 0 }), 'LOCK_BUSY');
    assert.equal(lease.valid, true);
    return 'renewed';
  });
  assert.equal(value, 'renewed');
  const after = await b.backend('pg').acquire('k', { waitTimeoutMs: 0 });
  await after.release();
  await rejectsWith(
    a.backend('pg').withLock('k', () => sleep(2500), { autoRenew: false }),
    'LEASE_LOST',
  );
  await Promise.all([a.close(), b.close()]);
});

test('readers of two providers share a key; a writer waits for both and gets a higher fence', async () => {
  const [a, b] = await pair();
  const r1 = await a.backend('pg').acquire('catalog', { mode: 'shared' });
  const r2 = await b.backend('pg').acquire('catalog', { mode: 'shared' });
  assert.equal(a.backend('pg').status().heldShared, 1);
  await rejectsWith(a.backend('pg').acquire('catalog', { waitTimeoutMs: 0 }), 'LOCK_BUSY');
  const writer = b.backend('pg').acquire('catalog', { waitTimeoutMs: 10_000 });
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
  const heavy = await a.backend('pg').acquire('exports', { limit: 3, weight: 2 });
  const light = await b.backend('pg').acquire('exports', { limit: 3 });
  await rejectsWith(b.backend('pg').acquire('exports', { limit: 3, waitTimeoutMs: 0 }), 'LOCK_BUSY');
  await rejectsWith(b.backend('pg').acquire('exports', { limit: 4, waitTimeoutMs: 0 }), 'INVALID_ARGUMENT');
  await heavy.release();
  const again = await b.backend('pg').acquire('exports', { limit: 3, weight: 2, waitTimeoutMs: 0 });
  await Promise.all([light.release(), again.release()]);
  await Promise.all([a.close(), b.close()]);
});

test('several keys are one lease with a fence per key, all or nothing; withLock takes them too', async () => {
  const [a, b] = await pair();
  const lease = await a.backend('pg').acquire(['from', 'to']);
  assert.deepEqual(lease.keys, ['from', 'to']);
  const fences = lease.fences;
  assert.deepEqual([...fences.keys()], ['from', 'to']);
  assert.equal(fences.get('from'), lease.fence);
  await rejectsWith(b.backend('pg').acquire(['spare', 'to'], { waitTimeoutMs: 50 }), 'WAIT_TIMEOUT');
  const spare = await b.backend('pg').acquire('spare', { waitTimeoutMs: 0 });
  await spare.release();
  assert.equal(await lease.release(), true);
  const to = await b.backend('pg').acquire('to', { waitTimeoutMs: 0 });
  assert.ok(BigInt(to.fence) > BigInt(fences.get('to')));
  await to.release();
  const keys = await a.backend('pg').withLock(['to', 'from'], (held) => held.keys);
  assert.deepEqual(keys, ['to', 'from']);
  await Promise.all([a.close(), b.close()]);
});

test('status() counts and reports the postgres connection: connected, listening, lastError, lastAnswerAt', async () => {
  const [a, b] = await pair();
  const backend = a.backend('pg');
  const lease = await backend.acquire('secret-key');
  const waiter = backend.acquire('secret-key', { waitTimeoutMs: 10_000 });
  await listening(a);
  const status = backend.status();
  assert.deepEqual(
    { ...status, postgres: undefined },
    { driver: 'postgres', held: 1, heldShared: 0, waiting: 1, acquired: 1, timedOut: 0, lost: 0, postgres: undefined },
  );
  assert.deepEqual(Object.keys(status.postgres), ['connected', 'listening', 'lastError', 'lastAnswerAt']);
  assert.equal(status.postgres.connected, true);
  assert.equal(status.postgres.listening, true);
  assert.equal(status.postgres.lastError, null);
  assert.equal(typeof status.postgres.lastAnswerAt, 'number');
  assert.equal('redis' in status, false);
  assert.deepEqual(Object.keys(a.status()), ['pg']);
  assert.ok(!JSON.stringify(a.status()).includes('secret'));
  await lease.release();
  await (await waiter).release();
  await Promise.all([a.close(), b.close()]);
});

test('an unreachable server is PROVIDER_FAILED (503) with the cause, never showing the password, and status says so', async () => {
  const password = 'hunter2-secret';
  const url = `postgres://app:${password}@127.0.0.1:1/test`;
  const provider = await openLock({ config: postgresConfig(freshSchema(), {}, { url, connection: { connectTimeoutMs: 200 } }) });
  const error = await rejectsWith(provider.backend('pg').acquire('k', { waitTimeoutMs: 0 }), 'PROVIDER_FAILED');
  assert.ok(error.cause instanceof Error);
  assert.equal(error.http.status, 503);
  const seen = [];
  for (let e = error; e instanceof Error; e = e.cause) seen.push(e.message, e.fix ?? '', e.stack ?? '', JSON.stringify(e.details ?? null));
  assert.ok(!seen.join('\n').includes(password), seen.join('\n'));
  const { postgres } = provider.backend('pg').status();
  assert.equal(postgres.connected, false);
  assert.equal(postgres.lastError, 'PROVIDER_FAILED');
  assert.equal(postgres.lastAnswerAt, null);
  await provider.close();
});

test('a postgres backend naming no connection is UNKNOWN_CONNECTION; a URL of another scheme is INVALID_OPTIONS', async () => {
  const noConnection = { 'dokebi-lock': { backends: { pg: { driver: 'postgres', connection: 'nope', leaseMs: 10_000 } } } };
  const unknown = await rejectsWith(openLock({ config: noConnection }), 'UNKNOWN_CONNECTION');
  assert.match(unknown.message, /dokebi-postgres\.connections/);
  const config = postgresConfig(freshSchema(), {}, { url: 'redis://127.0.0.1:6379/0' });
  await rejectsWith(openLock({ config }), 'INVALID_OPTIONS');
});

test('close releases held leases, rejects waiters with CLOSED, and later calls are CLOSED', async () => {
  const [a, b] = await pair();
  const lease = await a.backend('pg').acquire('k');
  const waiter = rejectsWith(a.backend('pg').acquire('k', { waitTimeoutMs: 60_000 }), 'CLOSED');
  await a.close();
  await waiter;
  assert.equal(lease.valid, false);
  await rejectsWith(() => a.backend('pg'), 'CLOSED');
  const other = await b.backend('pg').acquire('k', { waitTimeoutMs: 0 });
  assert.equal(other.valid, true, 'close released the lease in PostgreSQL');
  await other.release();
  await b.close();
});

test('a provider with a postgres and a local backend opens both, each reporting its driver', async () => {
  const config = postgresConfig(freshSchema());
  config['dokebi-lock'].backends.mem = {};
  const provider = await openLock({ config });
  assert.deepEqual(provider.names(), ['mem', 'pg']);
  const [local, shared] = await Promise.all([provider.backend('mem').acquire('k'), provider.backend('pg').acquire('k')]);
  assert.equal(provider.status().mem.driver, 'local');
  assert.equal(provider.status().pg.driver, 'postgres');
  await Promise.all([local.release(), shared.release()]);
  await provider.close();
});

test('a process that opens postgres, locks, closes exits by itself', () => {
  const child = `
import { openLock } from ${JSON.stringify(new URL('../index.js', import.meta.url).href)};
const provider = await openLock({ config: ${JSON.stringify(postgresConfig(freshSchema()))} });
const lease = await provider.backend('pg').acquire('k');
const waiter = provider.backend('pg').acquire('k', { waitTimeoutMs: 600000 }).catch((error) => error.code);
await provider.close();
console.log(await waiter, lease.valid);
`;
  const result = spawnSync(process.execPath, ['--input-type=module', '-e', child], { encoding: 'utf8', timeout: 20_000 });
  assert.equal(result.signal, null, 'the child had to be killed: something kept it alive');
  assert.equal(result.status, 0, result.stderr);
  assert.equal(result.stdout.trim(), 'CLOSED false');
});

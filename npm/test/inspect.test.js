// backend.inspect(key) through the JS API: what one provider holds and
// waits for, read by another (two providers stand for two processes), on
// every driver, against a private redis-server, the machine's PostgreSQL
// and MariaDB, a directory of lock files; a policy answers from the member
// that holds (an app driver's refusal: force-release.test.js).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openLock } from '../index.js';
import { rejectsWith } from './helpers.js';
import { useRedis } from './redis-server.js';
import { postgresConfig, useSchemas } from './postgres-server.js';
import { mysqlConfig, useTables } from './mysql-server.js';

const WEB = 'web-3:4182';
const WORKER = 'worker ü';

/** `config` whose provider labels its holders `holder`. */
function labelled(config, holder) {
  return { ...config, 'dokebi-lock': { ...config['dokebi-lock'], holder } };
}

/** The provider of `config` labelled WEB, and one labelled WORKER. */
async function webAndWorker(config) {
  return [await openLock({ config: labelled(config, WEB) }), await openLock({ config: labelled(config, WORKER) })];
}

/** The labels of a WAIT_TIMEOUT's or LOCK_BUSY's holders, sorted. */
async function heldBy(acquiring, code) {
  const error = await acquiring.then(
    () => assert.fail('granted'),
    (error) => error,
  );
  assert.equal(error.code, code, error.message);
  return error.details.holders.map((holder) => holder.label).sort();
}

const redis = useRedis();
const schema = useSchemas('inspect');
const table = useTables('inspect');

/**
 * The checks of every driver: `holder` and `reader` are two providers' backends of one store,
 * labelled WEB and `readerLabel`.
 */
async function agreesWithTheLeases(holder, reader, name, { expires, readerLabel = WORKER }) {
  const free = await reader.inspect('free');
  assert.deepEqual(free, { backend: name, mode: null, limit: 1, held: 0, holders: [], waiting: 0, fence: free.fence });

  const lease = await holder.acquire('k');
  const held = await reader.inspect('k');
  assert.equal(held.mode, 'exclusive');
  assert.equal(held.held, 1);
  assert.equal(held.holders[0].units, 1);
  assert.equal(held.holders[0].label, WEB);
  assert.deepEqual(await heldBy(reader.acquire('k', { waitTimeoutMs: 0 }), 'LOCK_BUSY'), [WEB]);
  assert.deepEqual(await heldBy(reader.acquire('k', { waitTimeoutMs: 50 }), 'WAIT_TIMEOUT'), [WEB]);
  const several = await reader.acquire(['free', 'k'], { waitTimeoutMs: 50 }).catch((error) => error);
  assert.equal(several.details?.keyIndex, 1, several.message);
  if (expires) {
    assert.ok(held.holders[0].remainingMs > 0 && held.holders[0].remainingMs <= 5000, String(held.holders[0].remainingMs));
    assert.ok(BigInt(held.fence) >= BigInt(lease.fence), `${held.fence} < ${lease.fence}`);
  } else {
    assert.equal(held.holders[0].remainingMs, null);
  }
  // Each holder's own fence, and how long it has held: taken just now.
  assert.equal(held.holders[0].fence, lease.fence);
  assert.ok(held.holders[0].heldForMs >= 0 && held.holders[0].heldForMs < 2000, String(held.holders[0].heldForMs));
  const waiter = reader.acquire('k', { waitTimeoutMs: 10_000 });
  for (let tries = 0; (await holder.inspect('k')).waiting !== 1; tries++) {
    assert.ok(tries < 500, 'the waiter shows');
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  await lease.release();
  await (await waiter).release();
  assert.equal((await reader.inspect('k')).held, 0, 'a released key is free');

  const readers = [await holder.acquire('r', { mode: 'shared' }), await reader.acquire('r', { mode: 'shared' })];
  const read = await holder.inspect('r');
  assert.equal(read.mode, 'shared');
  assert.equal(read.held, 2);
  assert.deepEqual(read.holders.map((each) => each.label).sort(), [WEB, readerLabel].sort());
  assert.deepEqual(await heldBy(holder.acquire('r', { waitTimeoutMs: 0 }), 'LOCK_BUSY'), [WEB, readerLabel].sort());
  for (const each of readers) await each.release();

  const units = [await holder.acquire('c', { limit: 3, weight: 1 }), await reader.acquire('c', { limit: 3, weight: 2 })];
  const counted = await reader.inspect('c');
  assert.equal(counted.limit, 3);
  assert.deepEqual(counted.holders.map((each) => each.units).sort(), [1, 2]);
  assert.deepEqual(
    counted.holders.map((each) => `${each.units}:${each.fence}`).sort(),
    units.map((each, at) => `${at + 1}:${each.fence}`).sort(),
    'each counted holder with its own fence',
  );
  for (const each of units) await each.release();

  // An acquire's own label: at once, after a wait, with a kind, and through withLock.
  const job = await holder.acquire('own', { holder: 'job-7' });
  assert.deepEqual((await reader.inspect('own')).holders.map((each) => each.label), ['job-7']);
  assert.deepEqual(await heldBy(reader.acquire('own', { waitTimeoutMs: 0 }), 'LOCK_BUSY'), ['job-7']);
  const queued = reader.acquire('own', { holder: 'job 8 ü', waitTimeoutMs: 10_000 });
  for (let tries = 0; (await holder.inspect('own')).waiting !== 1; tries++) {
    assert.ok(tries < 500, 'the waiter shows');
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  await job.release();
  const handed = await queued;
  assert.deepEqual((await holder.inspect('own')).holders.map((each) => each.label), ['job 8 ü']);
  await handed.release();
  const report = await holder.acquire(['own', 'other'], { mode: 'shared', holder: 'report' });
  assert.deepEqual((await reader.inspect('other')).holders.map((each) => each.label), ['report']);
  await report.release();
  await holder.withLock('own', async () => assert.deepEqual((await reader.inspect('own')).holders.map((each) => each.label), ['section']), { holder: 'section' });
  for (const bad of ['', 'x'.repeat(41), 'a\u202eb']) await rejectsWith(holder.acquire('own', { holder: bad }), 'INVALID_ARGUMENT');
  await rejectsWith(holder.acquire('own', { holder: 7 }), 'INVALID_ARGUMENT');
  assert.equal((await reader.inspect('own')).held, 0, 'a refused label takes nothing');

  await rejectsWith(reader.inspect(''), 'INVALID_KEY');
  await rejectsWith(reader.inspect(42), 'INVALID_KEY');
}

test('local: inspect reads the backend', async () => {
  const provider = await openLock({ config: { 'dokebi-lock': { holder: WEB, backends: { b: {} } } } });
  const backend = provider.backend('b');
  await agreesWithTheLeases(backend, backend, 'b', { expires: false, readerLabel: WEB });
  await provider.close();
  await rejectsWith(backend.inspect('k'), 'CLOSED');
});

test('redis: inspect reads what another provider holds and waits for', async () => {
  const config = {
    'dokebi-lock': { backends: { r: { driver: 'redis', connection: 'main', leaseMs: 5000, namespace: 'inspect' } } },
    'dokebi-redis': { connections: { main: { url: redis.url } } },
  };
  const [a, b] = await webAndWorker(config);
  await agreesWithTheLeases(a.backend('r'), b.backend('r'), 'r', { expires: true });
  const closing = b.backend('r');
  await b.close();
  await rejectsWith(closing.inspect('k'), 'CLOSED');
  await a.close();
});

test('postgres: inspect reads what another provider holds and waits for', async () => {
  const config = postgresConfig(schema(), { leaseMs: 5000 });
  const [a, b] = await webAndWorker(config);
  await agreesWithTheLeases(a.backend('pg'), b.backend('pg'), 'pg', { expires: true });
  await Promise.all([a.close(), b.close()]);
});

test('mysql: inspect reads what another provider holds and waits for', async () => {
  const config = mysqlConfig(table(), { leaseMs: 5000 });
  const [a, b] = await webAndWorker(config);
  await agreesWithTheLeases(a.backend('my'), b.backend('my'), 'my', { expires: true });
  await Promise.all([a.close(), b.close()]);
});

test('file: inspect reads what another provider holds and waits for, by its records', async (t) => {
  const directory = mkdtempSync(join(tmpdir(), 'dokebi-inspect-'));
  t.after(() => rmSync(directory, { recursive: true, force: true }));
  const config = { 'dokebi-lock': { backends: { f: { driver: 'file', directory: join(directory, 'locks') } } } };
  const [a, b] = await webAndWorker(config);
  await agreesWithTheLeases(a.backend('f'), b.backend('f'), 'f', { expires: false });
  const closing = b.backend('f');
  await b.close();
  await rejectsWith(closing.inspect('k'), 'CLOSED');
  await a.close();
});

test('a policy answers from the member that holds the key', async () => {
  const provider = await openLock({
    config: { 'dokebi-lock': { backends: { near: {}, far: {}, pick: { driver: 'policy', default: { backends: ['near', 'far'], minTier: 'process', onUnavailable: 'fallBack' } } } } },
  });
  assert.equal((await provider.backend('pick').inspect('k')).backend, 'near');
  const lease = await provider.backend('far').acquire('k');
  const held = await provider.backend('pick').inspect('k');
  assert.equal(held.backend, 'far');
  assert.equal(held.holders[0].fence, lease.fence);
  await provider.close();
});

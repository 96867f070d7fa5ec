// What every store-backed driver (redis, postgres, mysql) promises through
// the JS API, written once. A scenario takes a store `{ backend, pair }`:
// the name of the backend under test and `pair(settings)`, two providers
// (two "processes") sharing one namespace of the server, whose backend has
// `settings` added; each scenario closes what it opens. `sqlStoreTests`
// registers the whole suite of a SQL store, whose drivers promise the same
// down to their status.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { once } from 'node:events';
import { createInterface } from 'node:readline';
import { setTimeout as sleep } from 'node:timers/promises';
import { openLock } from '../index.js';
import { isSettled, rejectsWith } from './helpers.js';

const INDEX = JSON.stringify(new URL('../index.js', import.meta.url).href);
const STORE_DRIVERS = ['redis', 'postgres', 'mysql'];

/** Resolves once `backend` counts `count` acquires waiting (the test's own timeout bounds the wait). */
async function waitingIs(backend, count) {
  while (backend.status().waiting !== count) await sleep(5);
}

/** Fences rise with every grant of a key, whichever provider takes it. */
export async function fencesRise({ backend, pair }) {
  const [a, b] = await pair();
  const fences = [];
  for (const provider of [a, b, a, b]) {
    const lease = await provider.backend(backend).acquire('k', { waitTimeoutMs: 0 });
    fences.push(BigInt(lease.fence));
    await lease.release();
  }
  for (let i = 1; i < fences.length; i++) assert.ok(fences[i] > fences[i - 1], `fence ${i} grew: ${fences}`);
  await Promise.all([a.close(), b.close()]);
}

/**
 * Another provider is LOCK_BUSY, then WAIT_TIMEOUT; its waiter is not
 * granted while the key is held and gets it, with a higher fence, once it
 * is released. `settings` go to the pair; `ready(provider)` resolves once
 * the provider's wake-up on a release (LISTEN, the release poller) is armed.
 */
export async function aWaiterGetsTheKeyOnRelease({ backend, pair }, { settings = {}, ready = async () => {} } = {}) {
  const [a, b] = await pair(settings);
  const held = await a.backend(backend).acquire('k');
  await rejectsWith(b.backend(backend).acquire('k', { waitTimeoutMs: 0 }), 'LOCK_BUSY');
  await rejectsWith(b.backend(backend).acquire('k', { waitTimeoutMs: 50 }), 'WAIT_TIMEOUT');
  const waiting = b.backend(backend).acquire('k', { waitTimeoutMs: 30_000 });
  await waitingIs(b.backend(backend), 1);
  await ready(b);
  // Time for many round trips: a waiter the store granted would be settled.
  await sleep(200);
  assert.equal(await isSettled(waiting), false);
  await held.release();
  const next = await waiting;
  assert.ok(BigInt(next.fence) > BigInt(held.fence), 'the fence grows per key');
  await next.release();
  await Promise.all([a.close(), b.close()]);
}

/** Waiters of one key in one provider are served in the order they came. */
export async function waitersAreServedInOrder({ backend, pair }) {
  const [provider, other] = await pair();
  await other.close();
  const locks = provider.backend(backend);
  const holder = await locks.acquire('k');
  const order = [];
  const waiters = [1, 2, 3].map((n) =>
    locks.acquire('k').then(async (lease) => {
      order.push(n);
      await lease.release();
    }),
  );
  await waitingIs(locks, 3);
  await holder.release();
  await Promise.all(waiters);
  assert.deepEqual(order, [1, 2, 3]);
  await provider.close();
}

/** An aborted signal is ABORTED before and while waiting, and the abort leaves the key to the next. */
export async function anAbortLeavesTheKeyToTheNext({ backend, pair }) {
  const [a, b] = await pair();
  await rejectsWith(a.backend(backend).acquire('k', { signal: AbortSignal.abort() }), 'ABORTED');
  const held = await a.backend(backend).acquire('k');
  const controller = new AbortController();
  const waiting = b.backend(backend).acquire('k', { signal: controller.signal, waitTimeoutMs: 30_000 });
  await waitingIs(b.backend(backend), 1);
  controller.abort();
  await rejectsWith(waiting, 'ABORTED');
  assert.equal(b.backend(backend).status().waiting, 0);
  await held.release();
  // The aborted waiter's mark is withdrawn in the background: until it is
  // gone a try is refused by the fairness rule, so the next acquire waits
  // (a mark the abort left for good would end this wait in WAIT_TIMEOUT).
  const next = await b.backend(backend).acquire('k', { waitTimeoutMs: 5_000 });
  await next.release();
  await Promise.all([a.close(), b.close()]);
}

/** withLock renews the lease through a section longer than leaseMs; without autoRenew it is LEASE_LOST. */
export async function withLockRenews({ backend, pair }) {
  // A renewal commits durably (PostgreSQL: an fsync of the WAL, up to
  // 620 ms seen on a host writing heavily to disk; MySQL: a log flush) and
  // must be answered within the two thirds of the lease left after its
  // pause: 1.3 s with a lease of 2 s. A lease of 600 ms (0.39 s left) was
  // lost there about one run in two, rightly.
  const [a, b] = await pair({ leaseMs: 2000 });
  const value = await a.backend(backend).withLock('k', async (lease) => {
    // Over two leases long: only renewals keep the key.
    await sleep(4500);
    // Another process still cannot take the key: the renewals kept it ours.
    await rejectsWith(b.backend(backend).acquire('k', { waitTimeoutMs: 0 }), 'LOCK_BUSY');
    assert.equal(lease.valid, true);
    return 'renewed';
  });
  assert.equal(value, 'renewed');
  const after = await b.backend(backend).acquire('k', { waitTimeoutMs: 0 });
  await after.release();
  await rejectsWith(
    a.backend(backend).withLock('k', () => sleep(2500), { autoRenew: false }),
    'LEASE_LOST',
  );
  await Promise.all([a.close(), b.close()]);
}

/** Readers of two providers hold a key together; a writer waits for both and gets a higher fence. */
export async function readersShareAKey({ backend, pair }) {
  const [a, b] = await pair();
  const r1 = await a.backend(backend).acquire('catalog', { mode: 'shared' });
  const r2 = await b.backend(backend).acquire('catalog', { mode: 'shared' });
  assert.equal(a.backend(backend).status().heldShared, 1);
  await rejectsWith(a.backend(backend).acquire('catalog', { waitTimeoutMs: 0 }), 'LOCK_BUSY');
  const writer = b.backend(backend).acquire('catalog', { waitTimeoutMs: 10_000 });
  await r1.release();
  assert.equal(await isSettled(writer), false, 'one reader still holds the key');
  await r2.release();
  const w = await writer;
  assert.ok(BigInt(w.fence) > BigInt(r2.fence) && BigInt(r2.fence) > BigInt(r1.fence));
  await w.release();
  await Promise.all([a.close(), b.close()]);
}

/** A counted key holds at most its limit, by weight, and refuses another limit or none. */
export async function aCountedKeyHoldsItsLimit({ backend, pair }) {
  const [a, b] = await pair();
  const heavy = await a.backend(backend).acquire('exports', { limit: 3, weight: 2 });
  const light = await b.backend(backend).acquire('exports', { limit: 3 });
  await rejectsWith(b.backend(backend).acquire('exports', { limit: 3, waitTimeoutMs: 0 }), 'LOCK_BUSY');
  await rejectsWith(b.backend(backend).acquire('exports', { limit: 4, waitTimeoutMs: 0 }), 'INVALID_ARGUMENT');
  await rejectsWith(b.backend(backend).acquire('exports', { waitTimeoutMs: 0 }), 'INVALID_ARGUMENT');
  await heavy.release();
  const again = await b.backend(backend).acquire('exports', { limit: 3, weight: 2, waitTimeoutMs: 0 });
  await Promise.all([light.release(), again.release()]);
  await Promise.all([a.close(), b.close()]);
}

/** Several keys are one lease with a decimal fence per key, all or nothing; withLock takes them too. */
export async function severalKeysAreOneLease({ backend, pair }) {
  const [a, b] = await pair();
  const lease = await a.backend(backend).acquire(['from', 'to']);
  assert.deepEqual(lease.keys, ['from', 'to']);
  const fences = lease.fences;
  assert.deepEqual([...fences.keys()], ['from', 'to']);
  assert.equal(fences.get('from'), lease.fence);
  for (const fence of fences.values()) assert.match(fence, /^[1-9][0-9]*$/);
  await rejectsWith(b.backend(backend).acquire(['spare', 'to'], { waitTimeoutMs: 50 }), 'WAIT_TIMEOUT');
  const spare = await b.backend(backend).acquire('spare', { waitTimeoutMs: 0 });
  await spare.release();
  assert.equal(await lease.release(), true);
  const to = await b.backend(backend).acquire('to', { waitTimeoutMs: 0 });
  assert.ok(BigInt(to.fence) > BigInt(fences.get('to')));
  await to.release();
  const keys = await a.backend(backend).withLock(['to', 'from'], (held) => held.keys);
  assert.deepEqual(keys, ['to', 'from']);
  await Promise.all([a.close(), b.close()]);
}

/**
 * An acquire on `provider`'s `backend`, whose server does not answer, is
 * PROVIDER_FAILED (503, named for its store) with the cause, and no error of the chain shows
 * `password` (in the server's URL); returns the error.
 */
export async function unreachableIsProviderFailed(provider, backend, password) {
  const error = await rejectsWith(provider.backend(backend).acquire('k', { waitTimeoutMs: 0 }), 'PROVIDER_FAILED');
  assert.ok(error.cause instanceof Error);
  assert.equal(error.http.status, 503);
  // A store's outage has the store-neutral name, but Redis's keeps its own (as @dokebi/redis answers).
  const { driver } = provider.backend(backend).status();
  assert.equal(error.http.code, driver === 'redis' ? 'REDIS_UNAVAILABLE' : 'LOCK_STORE_UNAVAILABLE');
  const seen = [];
  for (let e = error; e instanceof Error; e = e.cause) seen.push(e.message, e.fix ?? '', e.stack ?? '', JSON.stringify(e.details ?? null));
  assert.ok(!seen.join('\n').includes(password), seen.join('\n'));
  return error;
}

/** close releases held leases (on `server`), rejects waiters with CLOSED, and later calls are CLOSED. */
export async function closeReleasesHeldLeases({ backend, pair }, server) {
  const [a, b] = await pair();
  const lease = await a.backend(backend).acquire('k');
  const waiter = rejectsWith(a.backend(backend).acquire('k', { waitTimeoutMs: 60_000 }), 'CLOSED');
  await a.close();
  await waiter;
  assert.equal(lease.valid, false);
  await rejectsWith(() => a.backend(backend), 'CLOSED');
  const other = await b.backend(backend).acquire('k', { waitTimeoutMs: 0 });
  assert.equal(other.valid, true, `close released the lease in ${server}`);
  await other.release();
  await b.close();
}

/** A process that opens `config`, locks on its `backend` and closes exits by itself. */
export function exitsByItself(config, backend) {
  const child = `
import { openLock } from ${INDEX};
const provider = await openLock({ config: ${JSON.stringify(config)} });
const lease = await provider.backend('${backend}').acquire('k');
const waiter = provider.backend('${backend}').acquire('k', { waitTimeoutMs: 600000 }).catch((error) => error.code);
await provider.close();
console.log(await waiter, lease.valid);
`;
  const result = spawnSync(process.execPath, ['--input-type=module', '-e', child], { encoding: 'utf8', timeout: 20_000 });
  assert.equal(result.signal, null, 'the child had to be killed: something kept it alive');
  assert.equal(result.status, 0, result.stderr);
  assert.equal(result.stdout.trim(), 'CLOSED false');
}

/**
 * Registers the tests of a SQL store. `store`:
 * - driver, backend, section: the driver, the backend's name in `config`'s
 *   options, the options section of its connections;
 * - server: the server's name in messages;
 * - url: the test server; foreignUrl: a URL of another scheme;
 * - place: the option where a backend's tables go (`schema`, `table`);
 *   fresh(): a fresh value of it, dropped after the file;
 * - config(place, settings, { url, connection }): the options of one backend;
 * - liveHolders(place), namespaces(place): the server's count of unexpired
 *   holders, and the namespaces it stores, read outside the driver;
 * - wake, wakeField: how a waiter learns of a release in another process
 *   (for the tests' names), and the field of the status of the driver's
 *   connection saying that it is armed.
 */
export function sqlStoreTests(store) {
  const { driver, backend, section } = store;
  const pair = async (settings = {}) => {
    const config = store.config(store.fresh(), settings);
    return [await openLock({ config }), await openLock({ config })];
  };
  const both = { backend, pair };
  /** Resolves once the provider's wake-up is armed (the test's own timeout bounds the wait). */
  const ready = async (provider) => {
    while (provider.backend(backend).status()[driver][store.wakeField] !== true) await sleep(10);
  };

  test(`openLock reads a YAML file with ${section}.connections and a driver: ${driver} backend`, async () => {
    const place = store.fresh();
    const yaml = `
schemaVersion: 1
options:
  dokebi-lock:
    backends:
      ${backend}:
        driver: ${driver}
        connection: main
        ${store.place}: ${place}
        namespace: yaml
        leaseMs: 5000
  ${section}:
    connections:
      main:
        url: '${store.url}'
`;
    const provider = await openLock({ yaml });
    const lease = await provider.backend(backend).acquire('order:42');
    assert.equal(lease.key, 'order:42');
    assert.equal(lease.valid, true);
    assert.ok(lease.remainingMs > 0 && lease.remainingMs <= 5000, String(lease.remainingMs));
    assert.match(lease.fence, /^[1-9][0-9]*$/);
    // The lease is a row of the backend's table, in its place and namespace.
    assert.equal(store.liveHolders(place), '1');
    assert.equal(store.namespaces(place), 'yaml');
    assert.equal(await lease.release(), true);
    assert.equal(await lease.release(), false);
    assert.equal(lease.valid, false);
    assert.equal(store.liveHolders(place), '0');
    await provider.close();
  });

  test('fences rise with every grant of a key, across providers', () => fencesRise(both));

  test(`another provider is LOCK_BUSY, WAIT_TIMEOUT, and a waiter is woken by the release through ${store.wake}`, () =>
    // Retries far apart (60 s, 10 min) against a 30 s wait: only the wake-up
    // can wake the waiter in time.
    aWaiterGetsTheKeyOnRelease(both, { settings: { pollIntervalMs: 60_000, notifyPollIntervalMs: 600_000 }, ready }));

  test('a key held by another process is handed to this one when that process releases it', async () => {
    const config = store.config(store.fresh(), { pollIntervalMs: 60_000, notifyPollIntervalMs: 600_000 });
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
const lease = await provider.backend('${backend}').acquire('baton');
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
    const locks = provider.backend(backend);
    await rejectsWith(locks.acquire('baton', { waitTimeoutMs: 0 }), 'LOCK_BUSY');
    const waiting = locks.acquire('baton', { waitTimeoutMs: 30_000 });
    await waitingIs(locks, 1);
    await ready(provider);
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

  test('waiters of one key in one provider are served in FIFO order', () => waitersAreServedInOrder(both));

  test('an aborted signal is ABORTED before and while waiting, and the abort leaves the key to the next', () =>
    anAbortLeavesTheKeyToTheNext(both));

  test('withLock renews the lease while a section longer than leaseMs runs; without autoRenew it is LEASE_LOST', () =>
    withLockRenews(both));

  test('readers of two providers share a key; a writer waits for both and gets a higher fence', () => readersShareAKey(both));

  test('a counted key holds at most its limit, by weight, and refuses another limit', () => aCountedKeyHoldsItsLimit(both));

  test('several keys are one lease with a fence per key, all or nothing; withLock takes them too', () =>
    severalKeysAreOneLease(both));

  test(`status() counts and reports the ${driver} connection: connected, ${store.wakeField}, lastError, lastAnswerAt`, async () => {
    const [a, b] = await pair();
    const locks = a.backend(backend);
    const lease = await locks.acquire('secret-key');
    const waiter = locks.acquire('secret-key', { waitTimeoutMs: 10_000 });
    await waitingIs(locks, 1);
    await ready(a);
    const status = locks.status();
    assert.deepEqual(
      { ...status, [driver]: undefined },
      { driver, held: 1, heldShared: 0, waiting: 1, acquired: 1, timedOut: 0, lost: 0, [driver]: undefined },
    );
    const health = status[driver];
    assert.deepEqual(Object.keys(health), ['connected', store.wakeField, 'lastError', 'lastAnswerAt']);
    assert.equal(health.connected, true);
    assert.equal(health[store.wakeField], true);
    assert.equal(health.lastError, null);
    assert.equal(typeof health.lastAnswerAt, 'number');
    for (const other of STORE_DRIVERS.filter((name) => name !== driver)) assert.equal(other in status, false, other);
    assert.deepEqual(Object.keys(a.status()), [backend]);
    assert.ok(!JSON.stringify(a.status()).includes('secret'));
    await lease.release();
    await (await waiter).release();
    await Promise.all([a.close(), b.close()]);
  });

  test('an unreachable server is PROVIDER_FAILED (503) with the cause, never showing the password, and status says so', async () => {
    const password = 'hunter2-secret';
    const url = `${driver}://app:${password}@127.0.0.1:1/test`;
    const provider = await openLock({ config: store.config(store.fresh(), {}, { url, connection: { connectTimeoutMs: 200 } }) });
    await unreachableIsProviderFailed(provider, backend, password);
    const health = provider.backend(backend).status()[driver];
    assert.equal(health.connected, false);
    assert.equal(health.lastError, 'PROVIDER_FAILED');
    assert.equal(health.lastAnswerAt, null);
    await provider.close();
  });

  test(`a ${driver} backend naming no connection is UNKNOWN_CONNECTION; a URL of another scheme is INVALID_OPTIONS`, async () => {
    const noConnection = { 'dokebi-lock': { backends: { [backend]: { driver, connection: 'nope', leaseMs: 10_000 } } } };
    const unknown = await rejectsWith(openLock({ config: noConnection }), 'UNKNOWN_CONNECTION');
    assert.match(unknown.message, new RegExp(`${section}\\.connections`));
    const config = store.config(store.fresh(), {}, { url: store.foreignUrl });
    await rejectsWith(openLock({ config }), 'INVALID_OPTIONS');
  });

  test('close releases held leases, rejects waiters with CLOSED, and later calls are CLOSED', () =>
    closeReleasesHeldLeases(both, store.server));

  test(`a provider with a ${driver} and a local backend opens both, each reporting its driver`, async () => {
    const config = store.config(store.fresh());
    config['dokebi-lock'].backends.mem = {};
    const provider = await openLock({ config });
    assert.deepEqual(provider.names(), ['mem', backend]);
    const [local, shared] = await Promise.all([provider.backend('mem').acquire('k'), provider.backend(backend).acquire('k')]);
    assert.equal(provider.status().mem.driver, 'local');
    assert.equal(provider.status()[backend].driver, driver);
    await Promise.all([local.release(), shared.release()]);
    await provider.close();
  });

  test(`a process that opens ${driver}, locks, closes exits by itself`, () => exitsByItself(store.config(store.fresh()), backend));
}

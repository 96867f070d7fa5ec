// LockError shape and option loading through openLock.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, writeFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { openLock, LockError } from '../index.js';
import { openLocal, rejectsWith } from './helpers.js';

const YAML = 'schemaVersion: 1\noptions:\n  dokebi-lock:\n    backends:\n      orders: {}\n      jobs:\n';

test('LockError is a real Error subclass with code, plugin, fix, details and cause', async () => {
  const { provider, backend } = await openLocal();
  await backend.acquire('k');
  const error = await rejectsWith(backend.acquire('k', { waitTimeoutMs: 0 }), 'LOCK_BUSY');
  assert.ok(error instanceof Error);
  assert.equal(error.name, 'LockError');
  assert.equal(error.plugin, 'dokebi-lock');
  assert.match(error.fix, /waitTimeoutMs/);
  assert.equal(error.http, undefined, 'LOCK_BUSY has no prescribed HTTP answer');
  assert.match(error.stack, /LockError/);
  assert.match(String(error), /^LockError: /);
  await provider.close();
});

test('openLock reads yaml, file (path or URL) and config', async () => {
  const dir = await mkdtemp(join(tmpdir(), 'dokebi-lock-'));
  try {
    const file = join(dir, 'dokebi.yaml');
    await writeFile(file, YAML);
    const config = { 'dokebi-lock': { backends: { jobs: null, orders: {} } }, 'other-plugin': { anything: 1 } };
    for (const input of [{ yaml: YAML }, { file }, { file: pathToFileURL(file) }, { config }]) {
      const provider = await openLock(input);
      assert.deepEqual(provider.names(), ['jobs', 'orders']);
      await provider.close();
    }
  } finally {
    await rm(dir, { recursive: true });
  }
});

test('INVALID_OPTIONS lists every problem in details.issues', async () => {
  const yaml = 'schemaVersion: 1\noptions:\n  dokebi-lock:\n    backends:\n      a: { maxKeys: 0, extra: 1 }\n      b: { driver: redis, connection: main }\n';
  const error = await rejectsWith(openLock({ yaml }), 'INVALID_OPTIONS');
  const paths = error.details.issues.map((issue) => issue.path).sort();
  assert.deepEqual(paths, ['backends.a.extra', 'backends.a.maxKeys', 'backends.b.leaseMs']);
  assert.match(error.fix, /details\.issues/);
});

test('invalid YAML is INVALID_OPTIONS with the parser error as cause', async () => {
  const error = await rejectsWith(openLock({ yaml: 'schemaVersion: [1' }), 'INVALID_OPTIONS');
  assert.ok(error.cause instanceof Error);
});

test('an unknown connection is UNKNOWN_CONNECTION', async () => {
  const config = { 'dokebi-lock': { backends: { shared: { driver: 'redis', connection: 'main', leaseMs: 1000 } } } };
  await rejectsWith(openLock({ config }), 'UNKNOWN_CONNECTION');
});

test('config that is not plain data is INVALID_OPTIONS', async () => {
  const error = await rejectsWith(openLock({ config: { 'dokebi-lock': { backends: { a: { maxKeys: 10n } } } } }), 'INVALID_OPTIONS');
  assert.ok(error.cause instanceof TypeError);
  await rejectsWith(openLock({ config: { 'dokebi-lock': { backends: { a: { maxKeys: NaN } } } } }), 'INVALID_OPTIONS');
});

test('a missing options file is INVALID_OPTIONS with the file error as cause', async () => {
  const error = await rejectsWith(openLock({ file: '/nonexistent/dokebi.yaml' }), 'INVALID_OPTIONS');
  assert.equal(error.cause.code, 'ENOENT');
});

test('openLock input of the wrong shape is INVALID_ARGUMENT', async () => {
  for (const input of [undefined, 'yaml', {}, { yaml: YAML, config: {} }, { yaml: 5 }, { file: 5 }]) {
    await rejectsWith(openLock(input), 'INVALID_ARGUMENT');
  }
});

test('backend(name) of an unknown name is UNKNOWN_BACKEND listing the known ones', async () => {
  const provider = await openLock({ yaml: YAML });
  const error = await rejectsWith(() => provider.backend('nope'), 'UNKNOWN_BACKEND');
  assert.deepEqual(error.details, { backend: 'nope', known: ['jobs', 'orders'] });
  await rejectsWith(() => provider.backend(1), 'INVALID_ARGUMENT');
  await provider.close();
});

test('an app driver without an extension is UNKNOWN_DRIVER', async () => {
  await rejectsWith(openLock({ config: { 'dokebi-lock': { backends: { a: { driver: 'memcached' } } } } }), 'UNKNOWN_DRIVER');
});

test('every code carries the fix sentence of the core', async () => {
  const error = new LockError('QUEUE_FULL', 'full');
  assert.match(error.fix, /maxWaiters/);
  assert.equal(error.http.code, 'LOCK_OVERLOADED');
  assert.equal(new LockError('PROVIDER_FAILED', 'down').http.status, 503);
  // A store's outage is named for no store, but a redis backend's keeps Redis's name.
  assert.equal(new LockError('PROVIDER_FAILED', 'down').http.code, 'LOCK_STORE_UNAVAILABLE');
  assert.equal(new LockError('OUTCOME_UNKNOWN', 'lost', { driver: 'postgres' }).http.code, 'LOCK_STORE_UNAVAILABLE');
  assert.equal(new LockError('NO_ELIGIBLE_BACKEND', 'none').http.code, 'LOCK_STORE_UNAVAILABLE');
  assert.equal(new LockError('PROVIDER_FAILED', 'down', { driver: 'redis' }).http.code, 'REDIS_UNAVAILABLE');
  assert.equal(new LockError('WAIT_TIMEOUT', 'late').http, undefined);
});

test('an unknown driver after a redis backend is UNKNOWN_DRIVER, and what was opened is closed', async () => {
  const config = {
    'dokebi-lock': { backends: { a: { driver: 'redis', connection: 'main', leaseMs: 10_000 }, b: { driver: 'memcached' } } },
    'dokebi-redis': { connections: { main: { url: 'redis://127.0.0.1:1/0' } } },
  };
  await rejectsWith(openLock({ config }), 'UNKNOWN_DRIVER');
});

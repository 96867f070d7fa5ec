// The dokebi host contract as the seed states it: the dokebi-redis
// dependency, where DRIVER_NOT_INSTALLED resolves from, the DokebiError base
// and the codes a classifier sees. The host is @dokebi/lock/host (the
// contract's other side); redis backends talk to a private redis-server.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { createRequire } from 'node:module';
import { writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { createPlugin, DokebiError, LockError, LockExtension, openLock, redisDependency } from '../index.js';
import { createApp } from '../host.js';
import { appDir, lockConsumer, rejectsWith, storePlugin } from './helpers.js';
import { useRedis } from './redis-server.js';

const redis = useRedis();
const require = createRequire(import.meta.url);
const DEAD = 'redis://127.0.0.1:1/0';

const lockSection = { backends: { orders: {}, shared: { driver: 'redis', connection: 'main', leaseMs: 5000 } } };

/** A dokebi-redis plugin as @dokebi/redis would register it. */
const redisPlugin = (connections, events) => storePlugin('dokebi-redis', connections, events);

test('with a redis backend the plugin names dokebi-redis in metadata.dependencies, optional; with local only, none', async () => {
  const withRedis = createPlugin({ app: { config: { 'dokebi-lock': lockSection, 'dokebi-redis': { connections: { main: { url: DEAD } } } } } });
  assert.deepEqual(
    withRedis.metadata.dependencies.map((token) => ({ name: token.name, optional: token.optional })),
    [{ name: 'dokebi-redis', optional: true }],
  );
  assert.equal(withRedis.metadata.dependencies[0], redisDependency);
  const localOnly = createPlugin({ app: { config: { 'dokebi-lock': { backends: { orders: {} } } } } });
  assert.deepEqual(localOnly.metadata.dependencies, []);
});

test('a registered dokebi-redis plugin supplies the connections, starts first and stops last', async (t) => {
  const events = [];
  // The YAML's section points at nothing: only the plugin's options reach the server.
  const app = createApp({ config: { 'dokebi-lock': lockSection, 'dokebi-redis': { connections: { main: { url: DEAD } } } }, root: await appDir(t, 'redis') });
  const lock = createPlugin({ app });
  app.register(redisPlugin({ main: { url: redis.url } }, events)).register(lock).register(lockConsumer(events));
  await app.start();
  const lease = await app.get(lock).backend('shared').acquire('order:42', { waitTimeoutMs: 1000 });
  assert.equal(await lease.release(), true);
  await app.stop();
  assert.deepEqual(events, ['start dokebi-redis', 'start orders', 'stop orders', 'stop dokebi-redis']);

  // The host keeps that order: dokebi-redis may not come after the plugin that depends on it.
  const late = createApp({ config: { 'dokebi-lock': lockSection, 'dokebi-redis': { connections: { main: { url: DEAD } } } } });
  late.register(createPlugin({ app: late }));
  assert.throws(() => late.register(redisPlugin({}, [])), /dokebi-redis must be registered before dokebi-lock/);
});

test('without a dokebi-redis plugin the connections come from options.dokebi-redis', async (t) => {
  const app = createApp({ config: { 'dokebi-lock': lockSection, 'dokebi-redis': { connections: { main: { url: redis.url } } } }, root: await appDir(t, 'redis') });
  const lock = createPlugin({ app });
  app.register(lock);
  await app.start();
  const lease = await app.get(lock).backend('shared').acquire('order:42', { waitTimeoutMs: 1000 });
  assert.equal(await lease.release(), true);
  await app.stop();
});

test('a registered dokebi-redis plugin without the named connection fails start with UNKNOWN_CONNECTION as the cause', async (t) => {
  const app = createApp({ config: { 'dokebi-lock': lockSection, 'dokebi-redis': { connections: { main: { url: redis.url } } } }, root: await appDir(t, 'redis') });
  app.register(redisPlugin({ other: { url: redis.url } }, [])).register(createPlugin({ app }));
  const error = await rejectsWith(app.start(), 'INVALID_PLUGIN_OPTIONS');
  assert.equal(error.cause.code, 'UNKNOWN_CONNECTION');
  assert.deepEqual(error.details.issues.map((issue) => issue.code), ['UNKNOWN_CONNECTION']);
  await app.stop();

  const shapeless = createApp({ config: app.config, root: app.root });
  shapeless.register({ name: 'dokebi-redis', start: () => ({}) }).register(createPlugin({ app: shapeless }));
  const noOptions = await rejectsWith(shapeless.start(), 'INVALID_PLUGIN_OPTIONS');
  assert.deepEqual(noOptions.details.issues.map((issue) => issue.path), ['dokebi-redis']);
  await shapeless.stop();
});

test('under createPlugin a redis backend naming no connection is UNKNOWN_CONNECTION in the cause and in the issue list', async () => {
  const noConnection = { backends: { shared: { driver: 'redis', leaseMs: 5000 } } };
  const error = await rejectsWith(() => createPlugin({ app: { config: { 'dokebi-lock': noConnection } } }), 'INVALID_PLUGIN_OPTIONS');
  assert.equal(error.cause.code, 'UNKNOWN_CONNECTION');
  assert.deepEqual(error.details.issues, [
    { path: 'backends.shared.connection', message: 'names no connection under dokebi-redis.connections', code: 'UNKNOWN_CONNECTION' },
  ]);
  assert.deepEqual(error.cause.details.issues, error.details.issues);

  // Beside other problems the cause is INVALID_OPTIONS, and each issue still carries its code.
  const mixed = { backends: { ...noConnection.backends, orders: { maxKeys: -1 } } };
  const both = await rejectsWith(() => createPlugin({ app: { config: { 'dokebi-lock': mixed } } }), 'INVALID_PLUGIN_OPTIONS');
  assert.equal(both.cause.code, 'INVALID_OPTIONS');
  assert.deepEqual(
    both.details.issues.map(({ path, code }) => [path, code]),
    [
      ['backends.orders.maxKeys', 'INVALID_OPTIONS'],
      ['backends.shared.connection', 'UNKNOWN_CONNECTION'],
    ],
  );
  // openLock reports the same issue codes.
  const standalone = await rejectsWith(openLock({ config: { 'dokebi-lock': noConnection } }), 'UNKNOWN_CONNECTION');
  assert.equal(standalone.details.issues[0].code, 'UNKNOWN_CONNECTION');
});

/**
 * Runs `main.mjs` of `root` (an app starting the plugin with one redis
 * backend) from the working directory `cwd`; its stdout is the outcome.
 */
async function runApp(root, cwd, hostRoot) {
  const program = `
import { createPlugin } from ${JSON.stringify(pathToFileURL(fileURLToPath(new URL('../index.js', import.meta.url))).href)};
import { createApp } from ${JSON.stringify(pathToFileURL(fileURLToPath(new URL('../host.js', import.meta.url))).href)};
const app = createApp({ config: ${JSON.stringify({ 'dokebi-lock': lockSection, 'dokebi-redis': { connections: { main: { url: redis.url } } } })}${hostRoot ? `, root: ${JSON.stringify(hostRoot)}` : ''} });
const lock = createPlugin({ app });
app.register(lock);
try {
  await app.start();
  const lease = await app.get(lock).backend('shared').acquire('k', { waitTimeoutMs: 1000 });
  await lease.release();
  console.log('started');
} catch (error) {
  console.log(error.code);
} finally {
  await app.stop();
}
`;
  await writeFile(join(root, 'main.mjs'), program);
  const result = spawnSync(process.execPath, [join(root, 'main.mjs')], { cwd, encoding: 'utf8', timeout: 30_000 });
  assert.equal(result.status, 0, result.stderr);
  return result.stdout.trim();
}

test('DRIVER_NOT_INSTALLED is decided from the app entry module, not the working directory', async (t) => {
  const installed = await appDir(t, 'redis');
  const bare = await appDir(t);
  // An installed app started from another directory starts.
  assert.equal(await runApp(installed, bare), 'started');
  // An app without the driver fails, even from a directory that has it.
  assert.equal(await runApp(bare, installed), 'DRIVER_NOT_INSTALLED');
});

test('DRIVER_NOT_INSTALLED resolves from app.root when the host gives the app directory', async (t) => {
  const installed = await appDir(t, 'redis');
  const bare = await appDir(t);
  const config = { 'dokebi-lock': lockSection, 'dokebi-redis': { connections: { main: { url: redis.url } } } };
  const fromRoot = createApp({ config, root: pathToFileURL(installed) });
  const lock = createPlugin({ app: fromRoot });
  fromRoot.register(lock);
  await fromRoot.start();
  assert.deepEqual(fromRoot.get(lock).names(), ['orders', 'shared']);
  await fromRoot.stop();

  const missing = createApp({ config, root: bare });
  missing.register(createPlugin({ app: missing }));
  const error = await rejectsWith(missing.start(), 'DRIVER_NOT_INSTALLED');
  assert.equal(error.fix, 'Install the driver package: npm install @dokebi/lock-redis.');
  // app.root wins over the entry module.
  assert.equal(await runApp(bare, tmpdir(), installed), 'started');
});

test('LockError is a DokebiError: exported base class, classified by code and plugin', async () => {
  const error = await rejectsWith(openLock({ config: { 'dokebi-lock': { backends: { a: { maxKeys: 0 } } } } }), 'INVALID_OPTIONS');
  assert.ok(error instanceof DokebiError);
  assert.ok(error instanceof Error);
  assert.equal(Object.getPrototypeOf(LockError), DokebiError);
  assert.equal(error.plugin, 'dokebi-lock');
  assert.equal(error.name, 'LockError');
  // CommonJS sees the same classes.
  const cjs = require('../index.cjs');
  assert.equal(cjs.DokebiError, DokebiError);
  assert.equal(cjs.LockError, LockError);
  // Other packages build their own errors on it.
  const other = new DokebiError('REDIS_UNAVAILABLE', 'down', { plugin: 'dokebi-redis', fix: 'Retry.' });
  assert.deepEqual([other.name, other.code, other.plugin, other.fix, other instanceof LockError], ['DokebiError', 'REDIS_UNAVAILABLE', 'dokebi-redis', 'Retry.', false]);
});

test('INVALID_EXTENSION carries its reason in data.reason (and INVALID_ENTRY likewise)', async () => {
  const config = { 'dokebi-lock': { backends: { a: {} } } };
  class WithParams extends LockExtension {
    constructor(metrics) {
      super();
      this.metrics = metrics;
    }
  }
  const error = await rejectsWith(() => createPlugin({ app: { config }, entry: { WithParams } }), 'INVALID_EXTENSION');
  assert.equal(error.data.reason, 'constructor-parameters');
  assert.equal(error.details.reason, 'constructor-parameters');
  assert.match(error.fix, /no constructor parameters/);

  class BadWrap extends LockExtension {
    wrapBackend() {
      return {};
    }
  }
  const wrap = await rejectsWith(openLock({ config, entry: { BadWrap } }), 'INVALID_EXTENSION');
  assert.deepEqual(wrap.data, { reason: 'wrap-backend-result' });
  class BadDependencies extends LockExtension {
    dependencies() {
      return 'redis';
    }
  }
  const dependencies = await rejectsWith(() => createPlugin({ app: { config }, entry: { BadDependencies } }), 'INVALID_EXTENSION');
  assert.deepEqual(dependencies.data, { reason: 'dependencies-result' });
  class NamelessToken extends LockExtension {
    dependencies() {
      return [{}];
    }
  }
  const nameless = await rejectsWith(() => createPlugin({ app: { config }, entry: { NamelessToken } }), 'INVALID_EXTENSION');
  assert.deepEqual(nameless.data, { reason: 'dependencies-result' }, 'a token names the plugin it stands for');
  const entry = await rejectsWith(() => createPlugin({ app: { config }, entry: {} }), 'INVALID_ENTRY');
  assert.deepEqual(entry.data, { reason: 'no-extension' });
});

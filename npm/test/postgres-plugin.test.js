// driver: postgres under a dokebi host, as redis is (host-contract.test.js,
// extension.test.js, install.test.js): the optional dokebi-postgres
// dependency, its section given to the core, the @dokebi/lock-postgres
// marker package (DRIVER_NOT_INSTALLED, DRIVER_PACKAGE_MISSING) and the
// install plan. Backends talk to the machine's PostgreSQL.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { check, manifest, planInstall } from '@dokebi/lock/install';
import { createPlugin, defineLockPlugin, openLock, postgresDependency, redisDependency } from '../index.js';
import { createApp } from '../host.js';
import { STORE_PLUGINS } from '../lib/store-plugins.js';
import { appDir, lockConsumer, rejectsWith, storePlugin } from './helpers.js';
import { PG_URL, useSchemas } from './postgres-server.js';

const freshSchema = useSchemas('plugin');
const DEAD = 'postgres://postgres@127.0.0.1:1/test';

/** The dokebi-lock section: a local backend and a postgres one in `schema`. */
const lockSection = (schema) => ({ backends: { orders: {}, shared: { driver: 'postgres', connection: 'main', schema, leaseMs: 5000 } } });
const postgresSection = (url) => ({ connections: { main: { url } } });

/** A dokebi-postgres plugin as @dokebi/postgres would register it. */
const postgresPlugin = (connections, events) => storePlugin('dokebi-postgres', connections, events);

test('with a postgres backend the plugin names dokebi-postgres in metadata.dependencies, optional; beside redis, both', () => {
  const config = { 'dokebi-lock': lockSection('s'), 'dokebi-postgres': postgresSection(DEAD) };
  const plugin = createPlugin({ app: { config } });
  assert.deepEqual(plugin.metadata.dependencies, [postgresDependency]);
  assert.deepEqual({ ...postgresDependency }, { name: 'dokebi-postgres', optional: true, description: postgresDependency.description });
  assert.ok(Object.isFrozen(postgresDependency));
  const both = {
    'dokebi-lock': { backends: { ...lockSection('s').backends, cache: { driver: 'redis', connection: 'main', leaseMs: 5000 } } },
    'dokebi-postgres': postgresSection(DEAD),
    'dokebi-redis': { connections: { main: { url: 'redis://127.0.0.1:1/0' } } },
  };
  assert.deepEqual(createPlugin({ app: { config: both } }).metadata.dependencies, [redisDependency, postgresDependency]);
});

test('createPlugin passes the dokebi-postgres section to the core: without it the backend names no connection', async () => {
  const error = await rejectsWith(() => createPlugin({ app: { config: { 'dokebi-lock': lockSection('s') } } }), 'INVALID_PLUGIN_OPTIONS');
  assert.equal(error.cause.code, 'UNKNOWN_CONNECTION');
  assert.deepEqual(error.details.issues, [
    { path: 'backends.shared.connection', message: 'names no connection under dokebi-postgres.connections', code: 'UNKNOWN_CONNECTION' },
  ]);
  // Its fields are checked there too.
  const bad = { 'dokebi-lock': lockSection('s'), 'dokebi-postgres': { connections: { main: { url: DEAD, poolSize: 0 } } } };
  const invalid = await rejectsWith(() => createPlugin({ app: { config: bad } }), 'INVALID_PLUGIN_OPTIONS');
  assert.equal(invalid.cause.code, 'INVALID_OPTIONS');
});

test('postgres is a built-in driver: an app driver of that name is DRIVER_CONFLICT', async () => {
  const define = defineLockPlugin({ drivers: { postgres: () => ({ view: { acquire() {} }, close() {} }) } });
  const config = { 'dokebi-lock': lockSection('s'), 'dokebi-postgres': postgresSection(DEAD) };
  await rejectsWith(() => define({ app: { config } }), 'DRIVER_CONFLICT');
  await rejectsWith(openLock({ config, drivers: { postgres: () => ({ view: { acquire() {} }, close() {} }) } }), 'DRIVER_CONFLICT');
});

test('DRIVER_NOT_INSTALLED when the app does not resolve @dokebi/lock-postgres', async (t) => {
  const app = createApp({ config: { 'dokebi-lock': lockSection('s'), 'dokebi-postgres': postgresSection(DEAD) }, root: await appDir(t) });
  app.register(createPlugin({ app }));
  const error = await rejectsWith(app.start(), 'DRIVER_NOT_INSTALLED');
  assert.equal(error.fix, 'Install the driver package: npm install @dokebi/lock-postgres.');
  assert.deepEqual(error.details, { backend: 'shared', driver: 'postgres', package: '@dokebi/lock-postgres' });
  assert.match(error.message, /backend shared uses driver: postgres, but @dokebi\/lock-postgres is not installed/);
  await app.stop();
});

test('with @dokebi/lock-postgres installed, the connections come from options.dokebi-postgres', async (t) => {
  const app = createApp({ config: { 'dokebi-lock': lockSection(freshSchema()), 'dokebi-postgres': postgresSection(PG_URL) }, root: await appDir(t, 'postgres') });
  const lock = createPlugin({ app });
  app.register(lock);
  await app.start();
  const lease = await app.get(lock).backend('shared').acquire('order:42', { waitTimeoutMs: 1000 });
  assert.equal(app.get(lock).backend('shared').status().driver, 'postgres');
  assert.equal(await lease.release(), true);
  await app.stop();
});

test('a registered dokebi-postgres plugin supplies the connections, starts first and stops last', async (t) => {
  const events = [];
  // The YAML's section points at nothing: only the plugin's options reach the server.
  const app = createApp({ config: { 'dokebi-lock': lockSection(freshSchema()), 'dokebi-postgres': postgresSection(DEAD) }, root: await appDir(t, 'postgres') });
  const lock = createPlugin({ app });
  app.register(postgresPlugin({ main: { url: PG_URL } }, events)).register(lock).register(lockConsumer(events));
  await app.start();
  const lease = await app.get(lock).backend('shared').acquire('order:42', { waitTimeoutMs: 1000 });
  assert.equal(await lease.release(), true);
  await app.stop();
  assert.deepEqual(events, ['start dokebi-postgres', 'start orders', 'stop orders', 'stop dokebi-postgres']);

  // A registered plugin without the named connection, or without options.
  const other = createApp({ config: app.config, root: app.root });
  other.register(postgresPlugin({ other: { url: PG_URL } }, [])).register(createPlugin({ app: other }));
  const unknown = await rejectsWith(other.start(), 'INVALID_PLUGIN_OPTIONS');
  assert.equal(unknown.cause.code, 'UNKNOWN_CONNECTION');
  await other.stop();
  const shapeless = createApp({ config: app.config, root: app.root });
  shapeless.register({ name: 'dokebi-postgres', start: () => ({}) }).register(createPlugin({ app: shapeless }));
  const noOptions = await rejectsWith(shapeless.start(), 'INVALID_PLUGIN_OPTIONS');
  assert.deepEqual(noOptions.details.issues.map((issue) => issue.path), ['dokebi-postgres']);
  await shapeless.stop();
});

test('planInstall and check: dokebi-postgres and @dokebi/lock-postgres with a postgres backend', () => {
  const withPostgres = { backends: { orders: {}, shared: { driver: 'postgres', leaseMs: 5000 }, jobs: { driver: 'postgres', leaseMs: 5000 } } };
  assert.deepEqual(planInstall(withPostgres).requires, ['dokebi-postgres']);
  assert.deepEqual(planInstall(withPostgres).packages, ['@dokebi/lock-postgres']);
  const both = { backends: { ...withPostgres.backends, cache: { driver: 'redis', leaseMs: 5000 } } };
  assert.deepEqual(planInstall({ 'dokebi-lock': both }).requires, ['dokebi-redis', 'dokebi-postgres']);
  assert.deepEqual(planInstall(both).packages, ['@dokebi/lock-redis', '@dokebi/lock-postgres']);

  const missing = check(withPostgres, { dependencies: { '@dokebi/lock': '0.4.1', '@dokebi/lock-redis': '0.4.1' } });
  assert.deepEqual(missing.requires, ['dokebi-postgres']);
  assert.deepEqual(
    missing.diagnostics.map(({ level, code, path, fix }) => ({ level, code, path, fix })),
    [
      { level: 'error', code: 'DRIVER_PACKAGE_MISSING', path: 'backends.shared.driver', fix: 'npm install @dokebi/lock-postgres' },
      { level: 'error', code: 'DRIVER_PACKAGE_MISSING', path: 'backends.jobs.driver', fix: 'npm install @dokebi/lock-postgres' },
    ],
  );
  assert.deepEqual(check(withPostgres, { optionalDependencies: { '@dokebi/lock-postgres': '0.4.1' } }).diagnostics, []);
  // Each store driver's package is checked on its own.
  assert.deepEqual(
    check(both, { dependencies: { '@dokebi/lock-postgres': '0.4.1' } }).diagnostics.map((d) => d.path),
    ['backends.cache.driver'],
  );
});

test('the manifest, package.json and the marker package agree with the store plugins table', async () => {
  const pkg = JSON.parse(await readFile(new URL('../package.json', import.meta.url), 'utf8'));
  for (const store of STORE_PLUGINS) {
    assert.equal(manifest.drivers[store.driver].package, store.package);
    assert.equal(manifest.drivers[store.driver].builtIn, true);
    const plugin = manifest.dependencies.find((entry) => entry.plugin === store.plugin);
    assert.equal(plugin?.optional, true, store.plugin);
    assert.equal(plugin.when, `a backend has driver: ${store.driver}`);
    assert.deepEqual(pkg.peerDependenciesMeta[plugin.package], { optional: true });
    assert.deepEqual(pkg.peerDependenciesMeta[store.package], { optional: true });
    const marker = JSON.parse(await readFile(new URL(`../packages/lock-${store.driver}/package.json`, import.meta.url), 'utf8'));
    assert.equal(marker.name, store.package);
    assert.equal(marker.version, pkg.version);
    assert.equal(pkg.peerDependencies[store.package], marker.version);
    assert.equal((await import(`../packages/lock-${store.driver}/index.js`)).driver, store.driver);
  }
});

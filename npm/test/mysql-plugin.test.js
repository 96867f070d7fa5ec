// driver: mysql under a dokebi host, as postgres is (postgres-plugin.test.js):
// the optional dokebi-mysql dependency, its section given to the core, the
// @dokebi/lock-mysql marker package (DRIVER_NOT_INSTALLED,
// DRIVER_PACKAGE_MISSING) and the install plan. Backends talk to the
// machine's MariaDB. The manifest's agreement with the store plugins table
// is checked for every store driver in postgres-plugin.test.js.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { check, planInstall } from '@dokebi/lock/install';
import { createPlugin, defineLockPlugin, mysqlDependency, openLock, postgresDependency } from '../index.js';
import { createApp } from '../host.js';
import { appDir, lockConsumer, rejectsWith, storePlugin } from './helpers.js';
import { MYSQL_URL, useTables } from './mysql-server.js';

const freshTable = useTables('plugin');
const DEAD = 'mysql://root@127.0.0.1:1/test';

/** The dokebi-lock section: a local backend and a mysql one on `table`. */
const lockSection = (table) => ({ backends: { orders: {}, shared: { driver: 'mysql', connection: 'main', table, leaseMs: 5000 } } });
const mysqlSection = (url) => ({ connections: { main: { url } } });

test('with a mysql backend the plugin names dokebi-mysql in metadata.dependencies, optional; beside postgres, both', () => {
  const config = { 'dokebi-lock': lockSection('t'), 'dokebi-mysql': mysqlSection(DEAD) };
  assert.deepEqual(createPlugin({ app: { config } }).metadata.dependencies, [mysqlDependency]);
  assert.deepEqual({ ...mysqlDependency }, { name: 'dokebi-mysql', optional: true, description: mysqlDependency.description });
  assert.ok(Object.isFrozen(mysqlDependency));
  const both = {
    'dokebi-lock': { backends: { ...lockSection('t').backends, pg: { driver: 'postgres', connection: 'main', leaseMs: 5000 } } },
    'dokebi-mysql': mysqlSection(DEAD),
    'dokebi-postgres': { connections: { main: { url: 'postgres://postgres@127.0.0.1:1/test' } } },
  };
  assert.deepEqual(createPlugin({ app: { config: both } }).metadata.dependencies, [postgresDependency, mysqlDependency]);
});

test('createPlugin passes the dokebi-mysql section to the core: without it the backend names no connection', async () => {
  const error = await rejectsWith(() => createPlugin({ app: { config: { 'dokebi-lock': lockSection('t') } } }), 'INVALID_PLUGIN_OPTIONS');
  assert.equal(error.cause.code, 'UNKNOWN_CONNECTION');
  assert.deepEqual(error.details.issues, [
    { path: 'backends.shared.connection', message: 'names no connection under dokebi-mysql.connections', code: 'UNKNOWN_CONNECTION' },
  ]);
  const bad = { 'dokebi-lock': lockSection('t'), 'dokebi-mysql': { connections: { main: { url: DEAD, poolSize: 0 } } } };
  const invalid = await rejectsWith(() => createPlugin({ app: { config: bad } }), 'INVALID_PLUGIN_OPTIONS');
  assert.equal(invalid.cause.code, 'INVALID_OPTIONS');
});

test('mysql is a built-in driver: an app driver of that name is DRIVER_CONFLICT', async () => {
  const driver = () => ({ view: { acquire() {} }, close() {} });
  const config = { 'dokebi-lock': lockSection('t'), 'dokebi-mysql': mysqlSection(DEAD) };
  await rejectsWith(() => defineLockPlugin({ drivers: { mysql: driver } })({ app: { config } }), 'DRIVER_CONFLICT');
  await rejectsWith(openLock({ config, drivers: { mysql: driver } }), 'DRIVER_CONFLICT');
});

test('DRIVER_NOT_INSTALLED when the app does not resolve @dokebi/lock-mysql', async (t) => {
  const app = createApp({ config: { 'dokebi-lock': lockSection('t'), 'dokebi-mysql': mysqlSection(DEAD) }, root: await appDir(t) });
  app.register(createPlugin({ app }));
  const error = await rejectsWith(app.start(), 'DRIVER_NOT_INSTALLED');
  assert.equal(error.fix, 'Install the driver package: npm install @dokebi/lock-mysql.');
  assert.deepEqual(error.details, { backend: 'shared', driver: 'mysql', package: '@dokebi/lock-mysql' });
  await app.stop();
});

test('with @dokebi/lock-mysql installed, the connections come from options.dokebi-mysql, or from a registered dokebi-mysql plugin', async (t) => {
  const root = await appDir(t, 'mysql');
  const app = createApp({ config: { 'dokebi-lock': lockSection(freshTable()), 'dokebi-mysql': mysqlSection(MYSQL_URL) }, root });
  const lock = createPlugin({ app });
  app.register(lock);
  await app.start();
  const lease = await app.get(lock).backend('shared').acquire('order:42', { waitTimeoutMs: 1000 });
  assert.equal(app.get(lock).backend('shared').status().driver, 'mysql');
  assert.equal(await lease.release(), true);
  await app.stop();

  // The YAML's section points at nothing: only the plugin's options reach the server.
  const events = [];
  const registered = createApp({ config: { 'dokebi-lock': lockSection(freshTable()), 'dokebi-mysql': mysqlSection(DEAD) }, root });
  const other = createPlugin({ app: registered });
  registered.register(storePlugin('dokebi-mysql', mysqlSection(MYSQL_URL).connections, events)).register(other).register(lockConsumer(events));
  await registered.start();
  const again = await registered.get(other).backend('shared').acquire('order:42', { waitTimeoutMs: 1000 });
  assert.equal(await again.release(), true);
  await registered.stop();
  assert.deepEqual(events, ['start dokebi-mysql', 'start orders', 'stop orders', 'stop dokebi-mysql']);
});

test('planInstall and check: dokebi-mysql and @dokebi/lock-mysql with a mysql backend', () => {
  const withMysql = { backends: { orders: {}, shared: { driver: 'mysql', leaseMs: 5000 } } };
  assert.deepEqual(planInstall(withMysql).requires, ['dokebi-mysql']);
  assert.deepEqual(planInstall(withMysql).packages, ['@dokebi/lock-mysql']);
  const missing = check(withMysql, { dependencies: { '@dokebi/lock': '0.4.1', '@dokebi/lock-postgres': '0.4.1' } });
  assert.deepEqual(
    missing.diagnostics.map(({ level, code, path, fix }) => ({ level, code, path, fix })),
    [{ level: 'error', code: 'DRIVER_PACKAGE_MISSING', path: 'backends.shared.driver', fix: 'npm install @dokebi/lock-mysql' }],
  );
  assert.deepEqual(check(withMysql, { optionalDependencies: { '@dokebi/lock-mysql': '0.4.1' } }).diagnostics, []);
});

// Extensions: the LockExtension hooks, the entry module, app drivers and
// their errors, through createPlugin (with the minimal host) and openLock.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { cp, mkdir, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createPlugin, defineLockPlugin, dependency, LockExtension, openLock } from '../index.js';
import { createApp } from '../host.js';
import { rejectsWith } from './helpers.js';
import { startRedis } from './redis-server.js';

const HOOKS = ['dependencies', 'createDriver', 'wrapBackend'];

/**
 * Counts the calls of the base class's hooks (the ones a subclass did not
 * override) during the test.
 */
function countBaseHookCalls(t) {
  const calls = { dependencies: 0, createDriver: 0, wrapBackend: 0 };
  for (const hook of HOOKS) {
    const original = LockExtension.prototype[hook];
    LockExtension.prototype[hook] = function (...args) {
      calls[hook]++;
      return original.apply(this, args);
    };
    t.after(() => (LockExtension.prototype[hook] = original));
  }
  return calls;
}

/** An app driver over a local backend of its own; records its inputs and closes. */
function memoryDriver(record = { inputs: [], closed: [] }) {
  const factory = async (input) => {
    record.inputs.push(input);
    const inner = await openLock({ config: { 'dokebi-lock': { backends: { m: {} } } } });
    return {
      view: inner.backend('m'),
      close: async () => {
        record.closed.push(input.name);
        await inner.close();
      },
    };
  };
  return { factory, record };
}

async function started(config, input = {}) {
  const app = createApp({ config: { 'dokebi-lock': config } });
  const plugin = createPlugin({ app, ...input });
  app.register(plugin);
  await app.start();
  return { app, plugin, provider: app.get(plugin) };
}

const twoBackends = { backends: { a: {}, b: { driver: 'memory' } } };

test('the shipped template left empty changes nothing and calls no hook', async (t) => {
  const calls = countBaseHookCalls(t);
  const entry = await import('../templates/extension.ts');
  const plain = await started({ backends: { a: {} } });
  const extended = await started({ backends: { a: {} } }, { entry });
  const backend = extended.provider.backend('a');
  assert.equal(Object.getPrototypeOf(backend), Object.getPrototypeOf(plain.provider.backend('a')));
  assert.deepEqual(extended.plugin.metadata.dependencies, []);
  const lease = await backend.acquire('k');
  assert.equal(lease.fence, '1');
  assert.equal(await lease.release(), true);
  await plain.app.stop();
  await extended.app.stop();
  assert.deepEqual(calls, { dependencies: 0, createDriver: 0, wrapBackend: 0 });
});

test('without wrapBackend, provider.backend(name) is the very object the driver made when it has the whole LockBackend API', async (t) => {
  const calls = countBaseHookCalls(t);
  const views = [];
  const memory = async (input) => {
    const driver = await memoryDriver().factory(input);
    views.push(driver.view);
    return driver;
  };
  class Empty extends LockExtension {}
  class Delegating extends LockExtension {
    createDriver(input) {
      return input.open();
    }
  }
  for (const Extension of [Empty, Delegating]) {
    const { app, provider } = await started(twoBackends, { entry: { default: Extension, drivers: { memory } } });
    assert.equal(provider.backend('b'), views.at(-1));
    await app.stop();
  }
  assert.deepEqual(calls, { dependencies: 0, createDriver: 0, wrapBackend: 0 });
});

test('overridden hooks run once per backend (createDriver, wrapBackend) and once per plugin (dependencies)', async (t) => {
  const baseCalls = countBaseHookCalls(t);
  const calls = { dependencies: 0, createDriver: [], wrapBackend: [], acquire: [] };
  const token = Object.freeze({ name: 'metrics' });
  class Counting extends LockExtension {
    dependencies() {
      calls.dependencies++;
      return [token];
    }
    createDriver(input) {
      calls.createDriver.push(`${input.name}:${input.driver}`);
      return input.open();
    }
    wrapBackend({ name, driver, backend }) {
      calls.wrapBackend.push(`${name}:${driver}`);
      return { acquire: (key, options) => (calls.acquire.push(name), backend.acquire(key, options)) };
    }
  }
  const { factory } = memoryDriver();
  const app = createApp({ config: { 'dokebi-lock': twoBackends } });
  const metrics = { name: 'metrics', metadata: { dependencies: [] }, provides: token, start: () => 'metrics' };
  const plugin = createPlugin({ app, entry: { Counting, drivers: { memory: factory } } });
  assert.deepEqual(plugin.metadata.dependencies, [token]);
  app.register(metrics).register(plugin);
  await app.start();
  const provider = app.get(plugin);
  for (const name of ['a', 'b']) {
    const lease = await provider.backend(name).acquire('k');
    assert.equal(await lease.release(), true);
  }
  await app.stop();
  assert.deepEqual(calls, { dependencies: 1, createDriver: ['a:local', 'b:memory'], wrapBackend: ['a:local', 'b:memory'], acquire: ['a', 'b'] });
  assert.deepEqual(baseCalls, { dependencies: 0, createDriver: 0, wrapBackend: 0 });
});

test('a dependency named by dependencies() must be registered before the plugin', () => {
  const token = Object.freeze({ name: 'metrics' });
  class Needy extends LockExtension {
    dependencies() {
      return [token];
    }
  }
  const app = createApp({ config: { 'dokebi-lock': { backends: {} } } });
  assert.throws(() => app.register(createPlugin({ app, entry: { default: Needy } })), /depends on metrics/);
});

test('app drivers get their settings unvalidated, the path, the logger and getDependency', async () => {
  const { factory, record } = memoryDriver();
  const yaml = 'schemaVersion: 1\noptions:\n  dokebi-lock:\n    backends:\n      b:\n        driver: memory\n        table: locks\n        size: 3\n';
  const provider = await openLock({ yaml, drivers: { memory: factory } });
  assert.deepEqual(record.inputs[0].settings, { table: 'locks', size: 3 });
  assert.equal(record.inputs[0].path, 'backends.b');
  assert.equal(record.inputs[0].getDependency, undefined);
  assert.ok(Object.isFrozen(record.inputs[0]));
  await provider.close();

  const { app } = await started({ backends: { b: { driver: 'memory', size: 4 } } }, { entry: { default: class extends LockExtension {}, drivers: { memory: factory } } });
  assert.deepEqual(record.inputs[1].settings, { size: 4 });
  assert.equal(typeof record.inputs[1].getDependency, 'function');
  assert.equal(typeof record.inputs[1].logger.error, 'function');
  await app.stop();
});

test('a driver rejecting its settings fails the open with its INVALID_OPTIONS', async () => {
  const { LockError } = await import('../index.js');
  const strict = ({ path }) => {
    throw new LockError('INVALID_OPTIONS', 'invalid options', { details: { issues: [{ path: `${path}.table`, message: 'required' }] } });
  };
  const error = await rejectsWith(openLock({ config: { 'dokebi-lock': { backends: { b: { driver: 'strict' } } } }, drivers: { strict } }), 'INVALID_OPTIONS');
  assert.deepEqual(error.details.issues, [{ path: 'backends.b.table', message: 'required' }]);
});

test('UNKNOWN_DRIVER: at createPlugin, at openLock, and at start through createDriver', async () => {
  const config = { backends: { b: { driver: 'nope' } } };
  const error = await rejectsWith(() => createPlugin({ app: { config: { 'dokebi-lock': config } } }), 'UNKNOWN_DRIVER');
  assert.deepEqual(error.details, { backend: 'b', driver: 'nope' });
  assert.match(error.fix, /drivers/);
  await rejectsWith(openLock({ config: { 'dokebi-lock': config } }), 'UNKNOWN_DRIVER');
  class Delegating extends LockExtension {
    createDriver(input) {
      return input.open();
    }
  }
  const app = createApp({ config: { 'dokebi-lock': config } });
  app.register(createPlugin({ app, entry: { Delegating } }));
  await rejectsWith(app.start(), 'UNKNOWN_DRIVER');
});

test('createDriver may supply a driver no registry knows', async () => {
  const { factory } = memoryDriver();
  class Supplying extends LockExtension {
    createDriver(input) {
      return input.driver === 'custom' ? factory(input) : input.open();
    }
  }
  const { app, provider } = await started({ backends: { a: {}, b: { driver: 'custom' } } }, { entry: { Supplying } });
  const lease = await provider.backend('b').acquire('k');
  assert.equal(await lease.release(), true);
  await app.stop();
});

test('DRIVER_CONFLICT: a built-in redefined, or one name from two sources', async () => {
  const { factory } = memoryDriver();
  const Ext = class extends LockExtension {};
  const app = { config: { 'dokebi-lock': { backends: {} } } };
  for (const name of ['local', 'redis']) {
    const error = await rejectsWith(() => createPlugin({ app, entry: { default: Ext, drivers: { [name]: factory } } }), 'DRIVER_CONFLICT');
    assert.deepEqual(error.details, { driver: name, sources: ['built-in', 'the entry module'] });
    await rejectsWith(openLock({ config: {}, drivers: { [name]: factory } }), 'DRIVER_CONFLICT');
  }
  const definedPlugin = defineLockPlugin({ drivers: { memory: factory } });
  const error = await rejectsWith(() => definedPlugin({ app, entry: { default: Ext, drivers: { memory: factory } } }), 'DRIVER_CONFLICT');
  assert.deepEqual(error.details.sources, ['defineLockPlugin', 'the entry module']);
  await rejectsWith(openLock({ config: {}, drivers: { memory: factory }, entry: { default: Ext, drivers: { memory: factory } } }), 'DRIVER_CONFLICT');
});

test('defineLockPlugin registers app drivers for createPlugin', async () => {
  const { factory } = memoryDriver();
  const app = createApp({ config: { 'dokebi-lock': { backends: { b: { driver: 'memory' } } } } });
  const plugin = defineLockPlugin({ drivers: { memory: factory } })({ app });
  app.register(plugin);
  await app.start();
  const lease = await app.get(plugin).backend('b').acquire('k');
  assert.equal(await lease.release(), true);
  await app.stop();
  await rejectsWith(() => defineLockPlugin({ drivers: { memory: 1 } }), 'INVALID_ARGUMENT');
  await rejectsWith(() => defineLockPlugin(), 'INVALID_ARGUMENT');
});

test('DRIVER_INVALID: a factory or createDriver returning something that is not { view, close }', async () => {
  const { factory } = memoryDriver();
  const view = { acquire: async () => {} };
  const bad = [undefined, {}, { view }, { view: {}, close: async () => {} }, { view: null, close: async () => {} }];
  for (const result of bad) {
    const error = await rejectsWith(openLock({ config: { 'dokebi-lock': { backends: { b: { driver: 'bad' } } } }, drivers: { bad: async () => result } }), 'DRIVER_INVALID');
    assert.deepEqual(error.details, { backend: 'b', driver: 'bad' });
  }
  class Broken extends LockExtension {
    createDriver() {
      return { view };
    }
  }
  await rejectsWith(openLock({ config: { 'dokebi-lock': { backends: { b: {} } } }, entry: { Broken, drivers: { memory: factory } } }), 'DRIVER_INVALID');
});

test('a failed open closes the backends already opened', async () => {
  const { factory, record } = memoryDriver();
  const failing = () => {
    throw new Error('cannot connect');
  };
  await assert.rejects(openLock({ config: { 'dokebi-lock': { backends: { a: { driver: 'memory' }, b: { driver: 'failing' } } } }, drivers: { memory: factory, failing } }), /cannot connect/);
  await new Promise((resolve) => setImmediate(resolve));
  assert.deepEqual(record.closed, ['a']);

  // Also the driver whose wrapBackend threw, which the provider never held.
  class ThrowingWrap extends LockExtension {
    wrapBackend({ name }) {
      if (name === 'b') throw new Error('no metrics registry');
      return { acquire: () => Promise.reject(new Error('unused')) };
    }
  }
  await assert.rejects(openLock({ config: { 'dokebi-lock': { backends: { a: { driver: 'memory' }, b: { driver: 'memory' } } } }, entry: { ThrowingWrap, drivers: { memory: factory } } }), /no metrics registry/);
  await new Promise((resolve) => setImmediate(resolve));
  assert.deepEqual(record.closed.slice(1).sort(), ['a', 'b']);
});

test('driver close errors at provider close are logged with backend and code, not thrown', async () => {
  const { LockError } = await import('../index.js');
  const records = [];
  const logger = { debug() {}, error: (fields, message) => records.push({ fields, message }) };
  const view = { acquire: async () => {} };
  const drivers = {
    plain: () => ({ view, close: async () => Promise.reject(new Error('socket gone')) }),
    coded: () => ({ view, close: async () => Promise.reject(new LockError('CLEANUP_TIMEOUT', 'too slow')) }),
  };
  const provider = await openLock({ config: { 'dokebi-lock': { backends: { a: { driver: 'plain' }, b: { driver: 'coded' }, c: {} } } }, drivers, logger });
  await provider.close();
  assert.deepEqual(
    records.map((r) => r.fields),
    [
      { backend: 'a', code: 'LOCK_CLOSE_FAILED' },
      { backend: 'b', code: 'CLEANUP_TIMEOUT' },
    ],
  );
});

test('wrapBackend wraps every backend once, built-in and app, also through openLock', async () => {
  const { factory } = memoryDriver();
  const seen = [];
  const acquired = [];
  class Wrapping extends LockExtension {
    wrapBackend({ name, backend }) {
      seen.push(name);
      return { acquire: (key, options) => (acquired.push(name), backend.acquire(key, options)) };
    }
  }
  const provider = await openLock({ config: { 'dokebi-lock': twoBackends }, entry: { default: Wrapping, drivers: { memory: factory } } });
  assert.equal(provider.backend('a'), provider.backend('a'));
  const lease = await provider.backend('a').acquire('k');
  assert.equal(await lease.release(), true);
  assert.deepEqual(acquired, ['a']);
  await provider.close();
  assert.deepEqual(seen, ['a', 'b']);
});

test('INVALID_EXTENSION: constructor parameters, shadowed members, non-function hooks, bad hook results', async () => {
  const app = { config: { 'dokebi-lock': { backends: { a: {} } } } };
  const cases = [
    [class WithParams extends LockExtension { constructor(metrics) { super(); this.metrics = metrics; } }, 'constructor-parameters'],
    [class Inherited extends (class Middle extends LockExtension { constructor(x) { super(); void x; } }) {}, 'constructor-parameters'],
    [class ShadowsToString extends LockExtension { toString() { return 'x'; } }, 'shadows-member'],
    [class ShadowsField extends LockExtension { hasOwnProperty = () => true; }, 'shadows-member'],
    [class HookField extends LockExtension { wrapBackend = 42; }, 'hook-not-a-function'],
    [class Throws extends LockExtension { constructor() { super(); throw new Error('boom'); } }, 'constructor-threw'],
    [class BadDependencies extends LockExtension { dependencies() { return 'redis'; } }, 'dependencies-result'],
  ];
  for (const [Extension, reason] of cases) {
    const error = await rejectsWith(() => createPlugin({ app, entry: { default: Extension } }), 'INVALID_EXTENSION');
    assert.equal(error.details.reason, reason, Extension.name);
    assert.match(error.fix, /no constructor parameters/);
  }
  // Helpers of its own are fine: only members of the base are protected.
  class WithHelper extends LockExtension {
    label() {
      return 'x';
    }
  }
  assert.equal(createPlugin({ app, entry: { WithHelper } }).name, 'dokebi-lock');

  class BadWrap extends LockExtension {
    wrapBackend() {
      return {};
    }
  }
  const error = await rejectsWith(openLock({ config: app.config, entry: { BadWrap } }), 'INVALID_EXTENSION');
  assert.deepEqual(error.details, { reason: 'wrap-backend-result', backend: 'a' });
});

test('INVALID_ENTRY: an entry module of the wrong shape', async () => {
  const app = { config: { 'dokebi-lock': { backends: {} } } };
  const Ext = class extends LockExtension {};
  const cases = [
    ['not a module', 'not-a-module'],
    [{}, 'no-extension'],
    [{ drivers: {} }, 'no-extension'],
    [{ default: LockExtension }, 'default-export'],
    [{ default: class NotAnExtension {} }, 'default-export'],
    [{ default: {} }, 'default-export'],
    [{ A: Ext, B: class extends LockExtension {} }, 'several-extensions'],
    [{ default: Ext, drivers: [] }, 'drivers'],
    [{ default: Ext, drivers: { memory: 'pg' } }, 'drivers'],
  ];
  for (const [entry, reason] of cases) {
    const error = await rejectsWith(() => createPlugin({ app, entry }), 'INVALID_ENTRY');
    assert.equal(error.details.reason, reason);
    await rejectsWith(openLock({ config: {}, entry }), 'INVALID_ENTRY');
  }
  // The same class as the default and a named export counts once.
  assert.equal(createPlugin({ app, entry: { default: Ext, Ext } }).name, 'dokebi-lock');
  await rejectsWith(openLock({ config: {}, drivers: 'x' }), 'INVALID_ARGUMENT');
});

test('the plugin token stays the dependency consumers name', () => {
  const plugin = createPlugin({ app: { config: {} }, entry: { default: class extends LockExtension {} } });
  assert.equal(plugin.provides, dependency);
});

const redisConfig = (url) => ({
  'dokebi-lock': { backends: { shared: { driver: 'redis', connection: 'main', leaseMs: 5000 } } },
  'dokebi-redis': { connections: { main: { url } } },
});

test('DRIVER_NOT_INSTALLED when the app does not resolve @dokebi/lock-redis', async () => {
  const missing = createApp({ config: redisConfig('redis://127.0.0.1:1/0') });
  missing.resolve = (specifier) => {
    throw Object.assign(new Error(`Cannot find module '${specifier}'`), { code: 'MODULE_NOT_FOUND' });
  };
  missing.register(createPlugin({ app: missing }));
  const error = await rejectsWith(missing.start(), 'DRIVER_NOT_INSTALLED');
  assert.equal(error.fix, 'Install the driver package: npm install @dokebi/lock-redis.');
  assert.deepEqual(error.details, { backend: 'shared', driver: 'redis', package: '@dokebi/lock-redis' });

  // Without app.resolve or app.root, from the entry module (this test file: no node_modules above it).
  const fromEntry = createApp({ config: redisConfig('redis://127.0.0.1:1/0') });
  fromEntry.register(createPlugin({ app: fromEntry }));
  await rejectsWith(fromEntry.start(), 'DRIVER_NOT_INSTALLED');
});

test('with @dokebi/lock-redis installed in the app, the redis backend starts', async (t) => {
  const redis = await startRedis();
  t.after(() => redis.stop());
  const root = await mkdtemp(join(tmpdir(), 'dokebi-lock-app-'));
  t.after(() => rm(root, { recursive: true, force: true }));
  await mkdir(join(root, 'node_modules', '@dokebi'), { recursive: true });
  await cp(fileURLToPath(new URL('../packages/lock-redis', import.meta.url)), join(root, 'node_modules', '@dokebi', 'lock-redis'), { recursive: true });
  const app = createApp({ config: redisConfig(redis.url) });
  app.resolve = createRequire(join(root, 'package.json')).resolve;
  const plugin = createPlugin({ app });
  app.register(plugin);
  await app.start();
  const lease = await app.get(plugin).backend('shared').acquire('k');
  assert.equal(await lease.release(), true);
  await app.stop();
});

test('openLock with a redis backend needs no driver package (standalone use)', async (t) => {
  const redis = await startRedis();
  t.after(() => redis.stop());
  const provider = await openLock({ config: redisConfig(redis.url) });
  const lease = await provider.backend('shared').acquire('k');
  assert.equal(await lease.release(), true);
  await provider.close();
});

test('a driver whose close() is a method is closed as that method, also when wrapped', async () => {
  const closed = [];
  class ClassDriver {
    constructor(name) {
      this.name = name;
      this.view = { acquire: async () => {} };
    }
    async close() {
      closed.push(this.name);
    }
  }
  class Wrapping extends LockExtension {
    wrapBackend({ backend }) {
      return { acquire: (key, options) => backend.acquire(key, options) };
    }
  }
  const records = [];
  const logger = { debug() {}, error: (fields) => records.push(fields) };
  const provider = await openLock({
    config: { 'dokebi-lock': { backends: { a: { driver: 'cls' } } } },
    entry: { Wrapping, drivers: { cls: ({ name }) => new ClassDriver(name) } },
    logger,
  });
  await provider.close();
  assert.deepEqual(closed, ['a']);
  assert.deepEqual(records, []);
});

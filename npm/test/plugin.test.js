// The dokebi plugin through the minimal host of @dokebi/lock/host.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createPlugin, dependency } from '../index.js';
import { createApp } from '../host.js';
import { rejectsWith } from './helpers.js';

function recordingLogger() {
  const records = [];
  const log = (level) => (fields, message) => records.push({ level, fields, message });
  return { records, logger: { debug: log('debug'), error: log('error') } };
}

const config = { 'dokebi-lock': { backends: { orders: {}, jobs: { maxWaiters: 1 } } } };

test('register, start, app.get(plugin), and a consumer through getDependency', async () => {
  const { records, logger } = recordingLogger();
  const app = createApp({ config, logger });
  const lock = createPlugin({ app });
  const seen = [];
  const consumer = {
    name: 'orders',
    metadata: { dependencies: [dependency] },
    async start(context) {
      const provider = context.getDependency(dependency);
      this.lease = await provider.backend('orders').acquire('order:1');
      return provider;
    },
    async stop() {
      // Consumers stop first, so their cleanup still reaches a live provider.
      seen.push(await this.lease.release());
    },
  };
  app.register(lock).register(consumer);
  await app.start();
  const provider = app.get(lock);
  assert.equal(app.get(consumer), provider);
  assert.deepEqual(provider.names(), ['jobs', 'orders']);
  await app.stop();
  assert.deepEqual(seen, [true]);
  await rejectsWith(() => provider.backend('orders'), 'CLOSED');
  assert.deepEqual(
    records.filter((r) => r.level === 'debug').map((r) => r.fields),
    [
      { backend: 'jobs', code: 'LOCK_BACKEND_READY' },
      { backend: 'orders', code: 'LOCK_BACKEND_READY' },
    ],
  );
});

test('the plugin declares its name, dependencies and the token it provides', () => {
  const plugin = createPlugin({ app: { config } });
  assert.equal(plugin.name, 'dokebi-lock');
  assert.deepEqual(plugin.metadata.dependencies, []);
  assert.equal(plugin.provides, dependency);
});

test('options given to createPlugin replace app.config', async () => {
  const app = createApp({ config });
  const lock = createPlugin({ app, options: { backends: { only: {} } } });
  app.register(lock);
  await app.start();
  assert.deepEqual(app.get(lock).names(), ['only']);
  await app.stop();
});

test('invalid plugin options are INVALID_PLUGIN_OPTIONS caused by INVALID_OPTIONS', async () => {
  const app = createApp({ config: { 'dokebi-lock': { backends: { a: { maxWaiters: -1 } } } } });
  const error = await rejectsWith(() => createPlugin({ app }), 'INVALID_PLUGIN_OPTIONS');
  assert.equal(error.cause.code, 'INVALID_OPTIONS');
  assert.deepEqual(error.details.issues.map((i) => i.path), ['backends.a.maxWaiters']);
  assert.deepEqual(error.cause.details.issues, error.details.issues);
});

test('createPlugin input of the wrong shape is a LockError', async () => {
  await rejectsWith(() => createPlugin(), 'INVALID_ARGUMENT');
  await rejectsWith(() => createPlugin({}), 'INVALID_ARGUMENT');
  await rejectsWith(() => createPlugin({ app: { config }, entry: {} }), 'INVALID_ENTRY');
});

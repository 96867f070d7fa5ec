// The CommonJS entry shares the ES module instance.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import * as esm from '../index.js';

const require = createRequire(import.meta.url);

test('require() gives the same API and the same LockError class', async () => {
  const cjs = require('../index.cjs');
  assert.equal(cjs.LockError, esm.LockError);
  assert.equal(cjs.dependency, esm.dependency);
  const provider = await cjs.openLock({ yaml: 'schemaVersion: 1\noptions:\n  dokebi-lock:\n    backends:\n      b: {}\n' });
  const lease = await provider.backend('b').acquire('k');
  assert.equal(await lease.release(), true);
  await provider.close();
});

test('require("@dokebi/lock/otel") gives the ES module\'s instrumentLocks', async () => {
  const otel = await import('../otel.js');
  assert.equal(require('@dokebi/lock/otel').instrumentLocks, otel.instrumentLocks);
});

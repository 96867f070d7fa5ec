// What an app's driver view or wrapBackend result has, users keep: every
// member of the app's object (fields, methods, getters, run on that object),
// `instanceof` its class, plus the whole LockBackend API the library adds.
// The built-in backends reach users as they are, never behind a Proxy.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { inspect } from 'node:util';
import { isProxy } from 'node:util/types';
import { openLock, LockExtension } from '../index.js';

/** A local backend of its own, for an app object to delegate to. */
async function innerLocal() {
  const inner = await openLock({ config: { 'dokebi-lock': { backends: { m: {} } } } });
  return { backend: inner.backend('m'), close: () => inner.close() };
}

/** A metered backend whose counts are #private: its methods only work when called on it. */
class Metered {
  #inner;
  #acquired = 0;
  label = 'metered';

  constructor(inner) {
    this.#inner = inner;
  }

  get acquired() {
    return this.#acquired;
  }

  metrics() {
    return { label: this.label, acquired: this.#acquired };
  }

  async acquire(key, options) {
    const lease = await this.#inner.acquire(key, options);
    this.#acquired++;
    return lease;
  }
}

/** A plain object over `inner` with a label and a metrics() method reading `this`. */
function plainMetered(inner) {
  return {
    label: 'plain',
    acquired: 0,
    metrics() {
      return { label: this.label, acquired: this.acquired };
    },
    async acquire(key, options) {
      const lease = await inner.acquire(key, options);
      this.acquired++;
      return lease;
    },
  };
}

/** Opens backend `b` of an app driver whose view is `makeView(inner local backend)`, with `entry` if given. */
async function viaDriver(makeView, entry = undefined) {
  let view;
  const driver = async () => {
    const inner = await innerLocal();
    view = makeView(inner.backend);
    return { view, close: inner.close };
  };
  const provider = await openLock({ config: { 'dokebi-lock': { backends: { b: { driver: 'app' } } } }, drivers: { app: driver }, entry });
  return { provider, backend: provider.backend('b'), view };
}

/** Opens local backend `b` whose wrapBackend result is `makeView(the wrapped backend)`. */
async function viaWrapper(makeView) {
  let view;
  class Wrapping extends LockExtension {
    wrapBackend({ backend }) {
      view = makeView(backend);
      return view;
    }
  }
  const provider = await openLock({ config: { 'dokebi-lock': { backends: { b: {} } } }, entry: { Wrapping } });
  return { provider, backend: provider.backend('b'), view };
}

/** The whole API works and counts through the app's own acquire. */
async function usesTheWholeApi(backend) {
  await (await backend.acquire('k')).release();
  assert.equal(await backend.withLock('k', (lease) => lease.key), 'k');
  assert.equal(typeof backend.status().waiting, 'number');
  assert.ok('withLock' in backend && 'status' in backend);
}

for (const [how, open] of [['driver view', viaDriver], ['wrapBackend result', viaWrapper]]) {
  test(`a plain-object ${how} keeps its fields and methods, run on that object, beside withLock and status`, async () => {
    const { provider, backend, view } = await open(plainMetered);
    await usesTheWholeApi(backend);
    assert.equal(backend.label, 'plain');
    assert.deepEqual(backend.metrics(), { label: 'plain', acquired: 2 });
    assert.equal(backend.metrics, backend.metrics, 'a method reads the same each time');
    assert.deepEqual(Object.keys(backend), ['label', 'acquired', 'metrics', 'acquire']);
    backend.label = 'renamed';
    assert.equal(view.label, 'renamed', 'a write reaches the app object');
    assert.equal(Object.getPrototypeOf(backend), Object.prototype);
    assert.ok(backend.hasOwnProperty('withLock') && backend.hasOwnProperty('label'), 'what the traps report');
    await provider.close();
  });

  test(`a class-instance ${how} with #private state keeps its methods and getters, and instanceof its class`, async () => {
    const { provider, backend, view } = await open((inner) => new Metered(inner));
    await usesTheWholeApi(backend);
    assert.ok(backend instanceof Metered);
    assert.equal(backend.constructor, Metered);
    assert.equal(backend.acquired, 2, 'a getter reading #private state');
    assert.deepEqual(backend.metrics(), { label: 'metered', acquired: 2 });
    assert.equal(view.acquired, 2, 'withLock acquired through the instance itself');
    assert.deepEqual(Object.keys(backend), ['label']);
    assert.equal(inspect(backend), inspect(view), 'printed as the app object');
    await provider.close();
  });

  test(`a frozen ${how} keeps every member and still gets withLock and status`, async () => {
    const { provider, backend, view } = await open((inner) => {
      let acquired = 0;
      return Object.freeze({
        label: 'frozen',
        metrics: () => ({ acquired }),
        acquire: async (key, options) => {
          const lease = await inner.acquire(key, options);
          acquired++;
          return lease;
        },
      });
    });
    await usesTheWholeApi(backend);
    assert.equal(backend.label, 'frozen');
    assert.deepEqual(backend.metrics(), { acquired: 2 });
    assert.throws(() => (backend.label = 'changed'), TypeError);
    assert.equal(view.label, 'frozen');
    assert.ok(Object.isFrozen(view), 'the app object stays as the app made it');
    await provider.close();
  });
}

test('the library supplies only what the app object lacks: its own withLock and status are the ones users reach', async () => {
  const calls = [];
  const { provider, backend } = await viaDriver((inner) => ({
    acquire: (key, options) => inner.acquire(key, options),
    withLock: (key, fn) => (calls.push('withLock'), inner.withLock(key, fn)),
    status: () => (calls.push('status'), { ...inner.status(), driver: 'app' }),
  }));
  assert.equal(await backend.withLock('k', () => 7), 7);
  assert.equal(backend.status().driver, 'app');
  assert.deepEqual(calls, ['withLock', 'status']);
  await provider.close();
});

test('the API members are the library\'s: they cannot be replaced or deleted through the backend', async () => {
  const { provider, backend } = await viaDriver(plainMetered);
  const { withLock } = backend;
  assert.throws(() => (backend.withLock = () => 'replaced'), TypeError);
  assert.throws(() => delete backend.acquire, TypeError);
  assert.equal(backend.withLock, withLock);
  await provider.close();
});

test('built-in backends reach users as they are, also through a wrapBackend that returns them; an app object is wrapped once', async () => {
  const plain = await openLock({ config: { 'dokebi-lock': { backends: { b: {} } } } });
  assert.equal(isProxy(plain.backend('b')), false);
  const { provider, backend } = await viaWrapper((wrapped) => wrapped);
  assert.equal(isProxy(backend), false);
  assert.equal(Object.getPrototypeOf(backend), Object.getPrototypeOf(plain.backend('b')));
  await Promise.all([plain.close(), provider.close()]);

  // A wrapBackend returning the backend it got from an app driver hands out that very backend.
  let given;
  class Identity extends LockExtension {
    wrapBackend({ backend: inner }) {
      given = inner;
      return inner;
    }
  }
  const wrapped = await viaDriver(plainMetered, { Identity });
  assert.equal(wrapped.backend, given);
  assert.equal(wrapped.backend.label, 'plain');
  await wrapped.provider.close();
});

// Lock kinds through app drivers and wrappers: a kind the app object does
// not declare (`kinds`) is UNSUPPORTED_KIND and never reaches it, so it
// cannot grant a plain exclusive lease instead; a declared kind reaches it
// with the caller's very arguments; bad kind options are INVALID_ARGUMENT
// before any driver sees them (lib/kinds.js, shared with the built-in path).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { openLock, LockExtension } from '../index.js';
import { askedKinds, KEYS, LIMIT, SHARED } from '../lib/kinds.js';
import { rejectsWith } from './helpers.js';

/** A view recording every acquire (the very key and options it got) and granting a stand-in lease. */
function recordingView(extra = {}) {
  const calls = [];
  const view = {
    ...extra,
    acquire(key, options) {
      calls.push({ key, options });
      return Promise.resolve({ key, valid: true, remainingMs: Infinity, fence: '1', renew: async () => true, release: async () => true });
    },
  };
  return { view, calls };
}

/** Opens backend `b` of an app driver whose view is `view`, with `entry` if given. */
function openDriver(view, entry = undefined) {
  return openLock({ config: { 'dokebi-lock': { backends: { b: { driver: 'app' } } } }, drivers: { app: () => ({ view, close: async () => {} }) }, entry });
}

const ALL = Object.freeze({ shared: true, limit: true, keys: true });

/** [key, options, the kinds it asks for, the words the refusal uses] */
const BEYOND_PLAIN = [
  ['k', { mode: 'shared' }, ['shared'], /mode 'shared'/],
  ['k', { limit: 3 }, ['limit'], /limit\/weight/],
  ['k', { limit: 2, weight: 2, waitTimeoutMs: 0 }, ['limit'], /limit\/weight/],
  [['a', 'b'], undefined, ['keys'], /several keys/],
  [['a'], {}, ['keys'], /several keys/],
  [['a', 'b'], { mode: 'shared' }, ['shared', 'keys'], /mode 'shared', several keys/],
];

test('an app driver declaring no kinds refuses shared, counted and several-key acquires with UNSUPPORTED_KIND, and its acquire is never called', async () => {
  const { view, calls } = recordingView();
  const provider = await openDriver(view);
  const backend = provider.backend('b');
  for (const [key, options, kinds, words] of BEYOND_PLAIN) {
    const error = await rejectsWith(backend.acquire(key, options), 'UNSUPPORTED_KIND');
    assert.match(error.message, words);
    assert.match(error.message, /backend b \(driver app\)/);
    assert.deepEqual(error.details, { backend: 'b', driver: 'app', kinds });
    assert.match(error.fix, /plain exclusive/);
  }
  // Sections too, and fn never runs.
  let ran = false;
  await rejectsWith(backend.withLock(['a', 'b'], () => (ran = true)), 'UNSUPPORTED_KIND');
  assert.equal(ran, false);
  assert.deepEqual(calls, []);
  assert.equal(backend.status().acquired, 0);

  // What is a plain lease in other words still is one.
  for (const options of [undefined, {}, { mode: 'exclusive' }, { limit: 1 }, { limit: 1, weight: 1 }]) await backend.acquire('k', options);
  assert.equal(calls.length, 5);
  await provider.close();
});

test('an app driver declaring kinds gets the caller\'s key and options unchanged, an array of keys included', async () => {
  const { view, calls } = recordingView({ kinds: ALL });
  const provider = await openDriver(view);
  const backend = provider.backend('b');
  for (const [key, options] of BEYOND_PLAIN) {
    await backend.acquire(key, options);
    const { key: got, options: gotOptions } = calls.at(-1);
    assert.equal(got, key);
    assert.equal(gotOptions, options);
  }
  assert.equal(await backend.withLock(['a', 'b'], (lease) => lease.key.join()), 'a,b');
  assert.equal(backend.kinds, ALL, 'the declaration stays a member of the backend');
  await provider.close();
});

test('a partial declaration grants what it names: the refusal names only the kinds missing', async () => {
  const { view, calls } = recordingView({ kinds: { shared: true, limit: false } });
  const provider = await openDriver(view);
  const backend = provider.backend('b');
  await backend.acquire('k', { mode: 'shared' });
  const counted = await rejectsWith(backend.acquire('k', { limit: 2 }), 'UNSUPPORTED_KIND');
  assert.deepEqual(counted.details.kinds, ['limit']);
  const sharedOnKeys = await rejectsWith(backend.acquire(['a', 'b'], { mode: 'shared' }), 'UNSUPPORTED_KIND');
  assert.deepEqual(sharedOnKeys.details.kinds, ['keys']);
  assert.equal(calls.length, 1);
  await provider.close();
});

test('the library\'s withLock passes kind options on as acquire does: refused without kinds, through with them', async () => {
  const plain = recordingView();
  const refusing = await openDriver(plain.view);
  let ran = false;
  for (const options of [{ mode: 'shared' }, { limit: 3 }]) {
    await rejectsWith(refusing.backend('b').withLock('k', () => (ran = true), options), 'UNSUPPORTED_KIND');
  }
  assert.equal(ran, false);
  assert.deepEqual(plain.calls, []);
  await refusing.close();

  const declared = recordingView({ kinds: ALL });
  const granting = await openDriver(declared.view);
  await granting.backend('b').withLock(['a', 'b'], () => {}, { limit: 4, weight: 2, waitTimeoutMs: 10 });
  const [{ key, options }] = declared.calls;
  assert.deepEqual(key, ['a', 'b']);
  assert.deepEqual([options.limit, options.weight, options.waitTimeoutMs], [4, 2, 10]);
  await granting.close();
});

test('an app object\'s own withLock is refused a kind it does not declare before it runs', async () => {
  let sections = 0;
  const { view } = recordingView({ withLock: async (key, fn) => (sections++, fn()) });
  const provider = await openDriver(view);
  await rejectsWith(provider.backend('b').withLock(['a', 'b'], () => {}), 'UNSUPPORTED_KIND');
  await rejectsWith(provider.backend('b').withLock('k', () => {}, { limit: 0 }), 'INVALID_ARGUMENT');
  assert.equal(sections, 0);
  assert.equal(await provider.backend('b').withLock('k', () => 'ran'), 'ran');
  await provider.close();
});

test('a wrapBackend result declares its own kinds: without, it is refused; with, the wrapped backend answers for its driver', async () => {
  const { view, calls } = recordingView();
  const passThrough = (kinds) =>
    class Wrapping extends LockExtension {
      wrapBackend({ backend }) {
        return { kinds, acquire: (key, options) => backend.acquire(key, options) };
      }
    };
  const undeclared = await openDriver(view, { Wrapping: passThrough(undefined) });
  const byWrapper = await rejectsWith(undeclared.backend('b').acquire('k', { mode: 'shared' }), 'UNSUPPORTED_KIND');
  assert.match(byWrapper.message, /backend b \(its wrapBackend result\)/);
  await undeclared.close();

  // The wrapper passes the options on; the driver behind it declares none.
  const declared = await openDriver(view, { Wrapping: passThrough(ALL) });
  const byDriver = await rejectsWith(declared.backend('b').acquire('k', { mode: 'shared' }), 'UNSUPPORTED_KIND');
  assert.match(byDriver.message, /backend b \(driver app\)/);
  assert.deepEqual(calls, []);
  await declared.close();
});

test('a pass-through wrapper of a local backend declaring every kind gets what the local driver grants: shared leases held together', async () => {
  class Metered extends LockExtension {
    wrapBackend({ backend }) {
      return { kinds: ALL, acquire: (key, options) => backend.acquire(key, options) };
    }
  }
  const provider = await openLock({ config: { 'dokebi-lock': { backends: { b: {} } } }, entry: { Metered } });
  const backend = provider.backend('b');
  const readers = [await backend.acquire('k', { mode: 'shared' }), await backend.acquire('k', { mode: 'shared', waitTimeoutMs: 0 })];
  await rejectsWith(backend.acquire('k', { waitTimeoutMs: 0 }), 'LOCK_BUSY');
  const both = await backend.acquire(['x', 'y']);
  assert.deepEqual(both.keys, ['x', 'y']);
  await Promise.all([...readers, both].map((lease) => lease.release()));
  await provider.close();
});

test('bad kind options are INVALID_ARGUMENT naming the option, before a driver declaring every kind sees them', async () => {
  const { view, calls } = recordingView({ kinds: ALL });
  const provider = await openDriver(view);
  const backend = provider.backend('b');
  const cases = [
    ['k', { mode: 'weird' }, /^mode must be 'exclusive' or 'shared'/],
    ['k', { mode: 'shared', limit: 2 }, /^mode 'shared' does not combine with limit or weight/],
    ['k', { mode: 'shared', weight: 1 }, /^mode 'shared' does not combine with limit or weight/],
    ['k', { limit: 0 }, /^limit must be an integer from 1/],
    ['k', { limit: 1.5 }, /^limit must be an integer from 1/],
    ['k', { limit: 2 ** 32 }, /^limit must be an integer from 1 to 4294967295/],
    ['k', { limit: '3' }, /^limit must be an integer/],
    ['k', { limit: 3, weight: 0 }, /^weight must be an integer from 1/],
    ['k', { limit: 2, weight: 3 }, /^weight \(3\) is above limit \(2\)/],
    ['k', { weight: 2 }, /^weight \(2\) is above limit \(1, the default\)/],
    [[], undefined, /^an acquire of several keys needs at least one key/],
    [['secret', 'other', 'secret'], undefined, /^keys\[2\] repeats an earlier key/],
  ];
  for (const [key, options, message] of cases) {
    const error = await rejectsWith(backend.acquire(key, options), 'INVALID_ARGUMENT');
    assert.match(error.message, message);
    assert.doesNotMatch(error.message, /secret/, 'a key never appears in an error');
  }
  const notAString = await rejectsWith(backend.acquire(['a', 5]), 'INVALID_KEY');
  assert.equal(notAString.message, 'keys[1] must be a string');
  assert.deepEqual(calls, []);
  await provider.close();
});

test('a malformed kinds declaration fails the open: DRIVER_INVALID for a driver\'s view, INVALID_EXTENSION for a wrapBackend result; the driver is closed', async () => {
  for (const kinds of [null, 'all', ['shared'], { readers: true }, { shared: 'yes' }]) {
    let closed = 0;
    const drivers = { app: () => ({ view: { kinds, acquire: async () => {} }, close: async () => void closed++ }) };
    const error = await rejectsWith(openLock({ config: { 'dokebi-lock': { backends: { b: { driver: 'app' } } } }, drivers }), 'DRIVER_INVALID');
    assert.match(error.message, /^backend b: driver app has a view whose kinds/);
    assert.deepEqual(error.details, { backend: 'b', driver: 'app' });
    await new Promise((resolve) => setImmediate(resolve));
    assert.equal(closed, 1, JSON.stringify(kinds));
  }
  class BadKinds extends LockExtension {
    wrapBackend({ backend }) {
      return { kinds: { keys: 1 }, acquire: (key, options) => backend.acquire(key, options) };
    }
  }
  const error = await rejectsWith(openLock({ config: { 'dokebi-lock': { backends: { b: {} } } }, entry: { BadKinds } }), 'INVALID_EXTENSION');
  assert.equal(error.message, 'backend b: wrapBackend returned a backend whose kinds.keys must be a boolean');
  assert.deepEqual(error.details, { reason: 'wrap-backend-result', backend: 'b' });
});

test('askedKinds: one flag per kind beyond a plain lease on one key, for the built-in path too', () => {
  assert.equal(askedKinds('k', undefined), 0);
  assert.equal(askedKinds('k', { waitTimeoutMs: 5, mode: 'exclusive', limit: 1 }), 0);
  assert.equal(askedKinds('k', { mode: 'shared' }), SHARED);
  assert.equal(askedKinds('k', { limit: 5, weight: 5 }), LIMIT);
  assert.equal(askedKinds(['a', 'b'], { limit: 2 }), KEYS | LIMIT);
  assert.equal(askedKinds(['a'], { mode: 'shared' }), KEYS | SHARED);
  // Not its business: the acquire that follows checks these.
  assert.equal(askedKinds(7, null), 0);
  assert.equal(askedKinds('k', 'fast'), 0);
});

// Shared helpers of the Node tests.
import assert from 'node:assert/strict';
import { openLock, LockError } from '../index.js';

/** Opens a provider with one local backend `b` of the given settings. */
export async function openLocal(settings = {}) {
  const provider = await openLock({ config: { 'dokebi-lock': { backends: { b: settings } } } });
  return { provider, backend: provider.backend('b') };
}

/** Asserts that `promise` rejects (or `fn` throws) a LockError with `code`; returns it. */
export async function rejectsWith(promiseOrFn, code) {
  let error;
  try {
    await (typeof promiseOrFn === 'function' ? promiseOrFn() : promiseOrFn);
  } catch (caught) {
    error = caught;
  }
  assert.ok(error instanceof LockError, `expected a LockError ${code}, got ${error}`);
  assert.equal(error.code, code, error.message);
  return error;
}

/** True once `promise` has settled (checked after the microtask queue drains). */
export async function isSettled(promise) {
  let settled = false;
  promise.then(
    () => (settled = true),
    () => (settled = true),
  );
  await new Promise((resolve) => setImmediate(resolve));
  return settled;
}

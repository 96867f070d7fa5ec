// driver: file through openLock: acquire, release, withLock, status, the
// codes of a wait, and two Node processes sharing a key of one directory.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, readdirSync, statSync, chmodSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { openLock } from '../index.js';
import { rejectsWith } from './helpers.js';

/** A fresh directory path under the system's temporary directory (the driver creates it). */
function freshDirectory() {
  return join(mkdtempSync(join(tmpdir(), 'dokebi-file-node-')), 'locks');
}

async function openFile(directory, settings = {}) {
  const provider = await openLock({ config: { 'dokebi-lock': { backends: { files: { driver: 'file', directory, ...settings } } } } });
  return { provider, backend: provider.backend('files') };
}

test('a file lease: key, valid, remainingMs Infinity, a decimal fence; release true once, then false', async () => {
  const directory = freshDirectory();
  const { provider, backend } = await openFile(directory);
  assert.equal(statSync(directory).mode & 0o777, 0o700, 'the directory is created private');
  const lease = await backend.acquire('order:42');
  assert.equal(lease.key, 'order:42');
  assert.equal(lease.valid, true);
  assert.equal(lease.remainingMs, Infinity);
  assert.match(lease.fence, /^[1-9][0-9]*$/);
  assert.equal(await lease.renew(), true);
  const [name] = readdirSync(directory);
  assert.match(name, /^[0-9a-f]{32}\.lock$/, 'the lock file is named by a digest, never the key');
  await rejectsWith(backend.acquire('order:42', { waitTimeoutMs: 0 }), 'LOCK_BUSY');
  assert.equal(await lease.release(), true);
  assert.equal(await lease.release(), false);
  assert.equal(lease.valid, false);
  assert.equal(lease.remainingMs, 0);
  assert.deepEqual(readdirSync(directory), [], 'the lock file of a free key is removed');
  const next = await backend.acquire('order:42');
  assert.ok(BigInt(next.fence) > BigInt(lease.fence), 'fences rise');
  await provider.close();
  assert.equal(next.valid, false, 'close releases held leases');
  await rejectsWith(backend.acquire('order:42'), 'CLOSED');
});

test('waiters of one process are served in order; a wait ends with WAIT_TIMEOUT or ABORTED', async () => {
  const { provider, backend } = await openFile(freshDirectory());
  const first = await backend.acquire('k');
  const order = [];
  const waiters = [1, 2, 3].map((n) => backend.acquire('k', { waitTimeoutMs: 5_000 }).then(async (lease) => {
    order.push(n);
    await lease.release();
  }));
  assert.equal(backend.status().waiting, 3);
  const other = await backend.acquire('other');
  await rejectsWith(backend.acquire('other', { waitTimeoutMs: 30 }), 'WAIT_TIMEOUT');
  await other.release();
  const controller = new AbortController();
  const aborted = backend.acquire('k', { waitTimeoutMs: 5_000, signal: controller.signal });
  controller.abort(new Error('stop'));
  await rejectsWith(aborted, 'ABORTED');
  await first.release();
  await Promise.all(waiters);
  assert.deepEqual(order, [1, 2, 3]);
  const status = backend.status();
  assert.equal(status.driver, 'file');
  assert.equal(status.waiting, 0);
  assert.equal(status.timedOut, 1);
  await provider.close();
});

test('withLock holds the key for the section and releases it after', async () => {
  const { provider, backend } = await openFile(freshDirectory());
  const result = await backend.withLock('job', async (lease) => {
    assert.equal(lease.valid, true);
    await rejectsWith(backend.acquire('job', { waitTimeoutMs: 0 }), 'LOCK_BUSY');
    assert.equal(backend.status().held, 1);
    return 42;
  });
  assert.equal(result, 42);
  assert.equal(backend.status().held, 0);
  await provider.close();
});

test('kinds the driver cannot grant are UNSUPPORTED_KIND, and a shared directory is INVALID_OPTIONS', async () => {
  const directory = freshDirectory();
  const { provider, backend } = await openFile(directory);
  await rejectsWith(backend.acquire('k', { mode: 'shared' }), 'UNSUPPORTED_KIND');
  await rejectsWith(backend.acquire(['a', 'b']), 'UNSUPPORTED_KIND');
  await provider.close();
  chmodSync(directory, 0o777);
  const error = await rejectsWith(openFile(directory), 'INVALID_OPTIONS');
  assert.equal(error.details.issues[0].path, 'backends.files.directory');
});

/** A second Node process that takes `key` of `directory`, says "held <fence>", and releases when its stdin ends. */
function holder(directory, key) {
  const script = `
    import { openLock } from ${JSON.stringify(new URL('../index.js', import.meta.url).href)};
    const provider = await openLock({ config: { 'dokebi-lock': { backends: { files: { driver: 'file', directory: ${JSON.stringify(directory)} } } } } });
    const lease = await provider.backend('files').acquire(${JSON.stringify(key)});
    console.log('held ' + lease.fence);
    process.stdin.resume();
    process.stdin.on('end', async () => { await lease.release(); console.log('released'); await provider.close(); });
  `;
  const child = spawn(process.execPath, ['--input-type=module', '-e', script], { stdio: ['pipe', 'pipe', 'inherit'] });
  const lines = createInterface({ input: child.stdout });
  const next = async () => {
    const [line] = await once(lines, 'line');
    return line;
  };
  return { child, next };
}

test('two Node processes: a key held in one makes the other wait, and its release wakes the waiter at once', async () => {
  const directory = freshDirectory();
  // A minute between polls: only the release's wake-up can be in time.
  const { provider, backend } = await openFile(directory, { pollIntervalMs: 60_000 });
  const { child, next } = holder(directory, 'shared-key');
  const held = await next();
  assert.match(held, /^held [0-9]+$/);
  await rejectsWith(backend.acquire('shared-key', { waitTimeoutMs: 0 }), 'LOCK_BUSY');
  const waiting = backend.acquire('shared-key', { waitTimeoutMs: 10_000 });
  const started = performance.now();
  child.stdin.end();
  const lease = await waiting;
  const waitedMs = performance.now() - started;
  assert.ok(waitedMs < 2_000, `woken after ${waitedMs} ms`);
  assert.ok(BigInt(lease.fence) > BigInt(held.slice('held '.length)), 'the fence rises across processes');
  await lease.release();
  await once(child, 'exit');
  await provider.close();
});

test('two Node processes: SIGKILL of the holder frees the key for the other at once', async () => {
  const directory = freshDirectory();
  const { provider, backend } = await openFile(directory, { pollIntervalMs: 60_000 });
  const { child, next } = holder(directory, 'shared-key');
  await next();
  const waiting = backend.acquire('shared-key', { waitTimeoutMs: 10_000 });
  const started = performance.now();
  child.kill('SIGKILL');
  const lease = await waiting;
  const waitedMs = performance.now() - started;
  assert.ok(waitedMs < 2_000, `woken after ${waitedMs} ms`);
  await lease.release();
  await provider.close();
});

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

/** The entries of `directory` once the lock files kept for reuse after a release (half a second) are gone: waits up to 2 s for it to empty. The directory's fence floor, `floor.lock` (the counters of removed lock files), stays and is not listed. */
async function entriesAfterKeep(directory) {
  const deadline = performance.now() + 2_000;
  for (;;) {
    const names = readdirSync(directory).filter((name) => name !== 'floor.lock');
    if (names.length === 0 || performance.now() > deadline) return names;
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
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
  assert.deepEqual(await entriesAfterKeep(directory), [], 'the lock file of a free key is removed (after half a second kept for reuse)');
  const next = await backend.acquire('order:42');
  assert.ok(BigInt(next.fence) > BigInt(lease.fence), 'fences rise');
  await provider.close();
  assert.equal(next.valid, false, 'close releases held leases');
  await rejectsWith(backend.acquire('order:42'), 'CLOSED');
});

test("an acquire's own holder label is checked as on every driver and names its lease", async () => {
  const { provider, backend } = await openFile(freshDirectory());
  const lease = await backend.acquire('order:42', { holder: 'job-7' });
  const busy = await rejectsWith(backend.acquire('order:42', { holder: 'job-8', waitTimeoutMs: 0 }), 'LOCK_BUSY');
  assert.deepEqual(busy.details.holders.map((holder) => [holder.label, holder.fence]), [['job-7', lease.fence]]);
  assert.equal(await lease.release(), true);
  await rejectsWith(backend.acquire('order:42', { holder: '' }), 'INVALID_ARGUMENT');
  await rejectsWith(backend.acquire(['a', 'b'], { holder: 'x'.repeat(41) }), 'INVALID_ARGUMENT');
  await backend.withLock('order:42', () => {}, { holder: 'section' });
  await provider.close();
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

test('close during a file section gives its key away: the signal aborts and withLock rejects with LEASE_LOST', async () => {
  const directory = freshDirectory();
  const { provider, backend } = await openFile(directory);
  const { provider: other } = await openFile(directory);
  let taken;
  let signal;
  await rejectsWith(
    backend.withLock('job', async (lease, sectionSignal) => {
      signal = sectionSignal;
      await provider.close();
      taken = await other.backend('files').acquire('job', { waitTimeoutMs: 0 });
      return 'finished while another backend held the key';
    }),
    'LEASE_LOST',
  );
  assert.equal(taken.valid, true, 'close gave the key away during the section');
  assert.equal(signal.aborted, true);
  assert.equal(signal.reason.code, 'LEASE_LOST');
  await other.close();
});

test('every kind in one process: readers together, units up to the limit, one limit per key, several keys with a fence each', async () => {
  const directory = freshDirectory();
  const { provider, backend } = await openFile(directory);
  const r1 = await backend.acquire('doc', { mode: 'shared' });
  const r2 = await backend.acquire('doc', { mode: 'shared', waitTimeoutMs: 0 });
  await rejectsWith(backend.acquire('doc', { waitTimeoutMs: 0 }), 'LOCK_BUSY');
  assert.equal(backend.status().heldShared, 2);
  await r1.release();
  await r2.release();
  const u2 = await backend.acquire('pool', { limit: 3, weight: 2 });
  const u1 = await backend.acquire('pool', { limit: 3, waitTimeoutMs: 0 });
  await rejectsWith(backend.acquire('pool', { limit: 3, waitTimeoutMs: 0 }), 'LOCK_BUSY');
  await rejectsWith(backend.acquire('pool', { limit: 2, waitTimeoutMs: 0 }), 'INVALID_ARGUMENT');
  await u2.release();
  await u1.release();
  const both = await backend.acquire(['to', 'from']);
  assert.deepEqual(both.keys, ['to', 'from']);
  assert.deepEqual([...both.fences.keys()], ['to', 'from']);
  for (const fence of both.fences.values()) assert.match(fence, /^[1-9][0-9]*$/);
  await rejectsWith(backend.acquire('from', { waitTimeoutMs: 0 }), 'LOCK_BUSY');
  await both.release();
  assert.deepEqual(await entriesAfterKeep(directory), [], 'no lock or unit file is left behind');
  await provider.close();
});

test('a directory other users can write into is INVALID_OPTIONS', async () => {
  const directory = freshDirectory();
  const { provider } = await openFile(directory);
  await provider.close();
  chmodSync(directory, 0o777);
  const error = await rejectsWith(openFile(directory), 'INVALID_OPTIONS');
  assert.equal(error.details.issues[0].path, 'backends.files.directory');
});

/**
 * A second Node process that takes `key` of `directory` (with acquire
 * `options`), says "held <fence>" (or "refused <code>"), and releases when
 * its stdin ends.
 */
function holder(directory, key, options = {}) {
  const script = `
    import { openLock } from ${JSON.stringify(new URL('../index.js', import.meta.url).href)};
    const provider = await openLock({ config: { 'dokebi-lock': { backends: { files: { driver: 'file', directory: ${JSON.stringify(directory)} } } } } });
    let lease;
    try {
      lease = await provider.backend('files').acquire(${JSON.stringify(key)}, ${JSON.stringify(options)});
    } catch (error) {
      console.log('refused ' + error.code);
      await provider.close();
      process.exit(0);
    }
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
  // Listened for from the start: the child may exit before the test awaits it.
  const exited = once(child, 'exit');
  return { child, next, exited };
}

test('two Node processes: a key held in one makes the other wait, and its release wakes the waiter at once', async () => {
  const directory = freshDirectory();
  // A minute between polls: only the release's wake-up can be in time.
  const { provider, backend } = await openFile(directory, { pollIntervalMs: 60_000 });
  const { child, next, exited } = holder(directory, 'shared-key');
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
  await exited;
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

test('two Node processes: readers share a key, a writer waits for them, units stop at the limit and another limit is refused', async () => {
  const directory = freshDirectory();
  const { provider, backend } = await openFile(directory, { pollIntervalMs: 60_000 });
  const reader = holder(directory, 'doc', { mode: 'shared' });
  assert.match(await reader.next(), /^held /);
  const mine = await backend.acquire('doc', { mode: 'shared', waitTimeoutMs: 0 });
  await rejectsWith(backend.acquire('doc', { waitTimeoutMs: 0 }), 'LOCK_BUSY');
  await mine.release();
  const writer = backend.acquire('doc', { waitTimeoutMs: 10_000 });
  reader.child.stdin.end();
  await (await writer).release();

  const units = holder(directory, 'pool', { limit: 3, weight: 2 });
  assert.match(await units.next(), /^held /);
  const last = await backend.acquire('pool', { limit: 3, waitTimeoutMs: 0 });
  await rejectsWith(backend.acquire('pool', { limit: 3, waitTimeoutMs: 0 }), 'LOCK_BUSY');
  await last.release();
  const other = holder(directory, 'pool', { limit: 5 });
  assert.equal(await other.next(), 'refused INVALID_ARGUMENT');
  units.child.stdin.end();
  await units.exited;
  assert.deepEqual(await entriesAfterKeep(directory), [], 'no lock or unit file is left behind');
  await provider.close();
});

test('two Node processes taking the same keys in opposite orders both finish', async () => {
  const directory = freshDirectory();
  const loop = (keys) => {
    const script = `
      import { openLock } from ${JSON.stringify(new URL('../index.js', import.meta.url).href)};
      const provider = await openLock({ config: { 'dokebi-lock': { backends: { files: { driver: 'file', directory: ${JSON.stringify(directory)}, pollIntervalMs: 60000 } } } } });
      const files = provider.backend('files');
      for (let round = 0; round < 200; round++) await (await files.acquire(${JSON.stringify(keys)}, { waitTimeoutMs: 10000 })).release();
      await provider.close();
    `;
    const child = spawn(process.execPath, ['--input-type=module', '-e', script], { stdio: ['ignore', 'ignore', 'inherit'] });
    return once(child, 'exit');
  };
  const [[one], [two]] = await Promise.all([loop(['left', 'right']), loop(['right', 'left'])]);
  assert.deepEqual([one, two], [0, 0]);
  assert.deepEqual(await entriesAfterKeep(directory), [], 'no lock file is left behind');
});

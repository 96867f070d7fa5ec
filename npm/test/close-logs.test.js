// Close loses nothing: the CLEANUP_FAILED / CLEANUP_TIMEOUT records of a
// redis close reach the logger before close() (and the plugin's stop())
// resolves, so a process that exits right after still has them.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { startRedis } from './redis-server.js';

const INDEX = JSON.stringify(new URL('../index.js', import.meta.url).href);
const HOST = JSON.stringify(new URL('../host.js', import.meta.url).href);

const logger = `{
  debug() {},
  error(fields, message) { console.log('logged', fields.code); },
}`;

/** A child that holds a lease, prints "holding", and on a line of stdin closes through `close` and exits 0 at once. */
function child(url, { open, close }) {
  return `
const config = {
  'dokebi-lock': { backends: { r: { driver: 'redis', connection: 'main', leaseMs: 10000, shutdownTimeoutMs: 300 } } },
  'dokebi-redis': { connections: { main: { url: '${url}', commandTimeoutMs: 5000 } } },
};
const logger = ${logger};
${open}
await provider.backend('r').acquire('k');
console.log('holding');
process.stdin.once('data', async () => {
  ${close}
  process.exit(0);
});
`;
}

const viaOpenLock = {
  open: `const { openLock } = await import(${INDEX}); const provider = await openLock({ config, logger });`,
  close: 'await provider.close();',
};

const viaPlugin = {
  open: `
const { createPlugin } = await import(${INDEX});
const { createApp } = await import(${HOST});
const app = createApp({ config, logger });
// The host resolves the redis driver package for the app.
app.resolve = (id) => id;
const plugin = createPlugin({ app });
const provider = await plugin.start({ logger });`,
  close: 'await plugin.stop();',
};

/** Runs the child until it holds, breaks Redis with `fault`, lets it close and exit. */
async function closeAfter(fault, via) {
  const redis = await startRedis();
  try {
    const proc = spawn(process.execPath, ['--input-type=module', '-e', child(redis.url, via)], { stdio: ['pipe', 'pipe', 'pipe'] });
    const exited = once(proc, 'exit');
    let stdout = '';
    let stderr = '';
    proc.stdout.setEncoding('utf8').on('data', (chunk) => (stdout += chunk));
    proc.stderr.setEncoding('utf8').on('data', (chunk) => (stderr += chunk));
    while (!stdout.includes('holding')) await Promise.race([once(proc.stdout, 'data'), exited]);
    await fault(redis);
    proc.stdin.write('close\n');
    const [code, signal] = await exited;
    assert.equal(signal, null, stderr);
    assert.equal(code, 0, stderr);
    return stdout;
  } finally {
    await redis.stop();
  }
}

test('close() with Redis gone: CLEANUP_FAILED is logged before close() resolves', async () => {
  const stdout = await closeAfter((redis) => redis.stop(), viaOpenLock);
  assert.match(stdout, /logged CLEANUP_FAILED/);
});

test('close() with Redis frozen: CLEANUP_TIMEOUT is logged before close() resolves', async () => {
  const stdout = await closeAfter((redis) => redis.pause(), viaOpenLock);
  assert.match(stdout, /logged CLEANUP_TIMEOUT/);
});

test("the plugin's stop() with Redis gone: CLEANUP_FAILED is logged before stop() resolves", async () => {
  const stdout = await closeAfter((redis) => redis.stop(), viaPlugin);
  assert.match(stdout, /logged CLEANUP_FAILED/);
});

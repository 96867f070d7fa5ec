// The command-line tool (bin/dokebi-lock.js) run as an operator runs it: a
// child process opening the app's options file, against a private
// redis-server that asks for a password, while this process (the app)
// holds a key. It reads the holder, breaks it only when confirmed, reports
// a store that refuses it, and never prints the password.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { openLock } from '../index.js';
import { startRedis } from './redis-server.js';

const PASSWORD = 'cli-s3cret-pw';
const bin = fileURLToPath(new URL('../bin/dokebi-lock.js', import.meta.url));
const scratch = mkdtempSync(join(tmpdir(), 'dokebi-lock-cli-'));
let redis;
before(async () => {
  redis = await startRedis(['--requirepass', PASSWORD]);
});
after(async () => {
  await redis?.stop();
  rmSync(scratch, { recursive: true, force: true });
});

function yaml(password) {
  return `schemaVersion: 1
options:
  dokebi-redis:
    connections:
      main: { url: 'redis://:${password}@127.0.0.1:${redis.port}/0', connectTimeoutMs: 1000, commandTimeoutMs: 1000 }
  dokebi-lock:
    backends:
      orders: { driver: redis, connection: main, leaseMs: 10000 }
      here: {}
`;
}

function configFile(name, text) {
  const file = join(scratch, name);
  writeFileSync(file, text);
  return file;
}

/** `{ code, stdout, stderr }` of the tool run with `args` (stdin not a terminal). */
function cli(args, env = {}) {
  return new Promise((resolve) => {
    const child = execFile(process.execPath, [bin, ...args], { env: { ...process.env, ...env }, cwd: scratch }, (error, stdout, stderr) =>
      resolve({ code: error?.code ?? 0, stdout, stderr }),
    );
    child.stdin.end();
  });
}

function hidesThePassword(...outputs) {
  for (const output of outputs) assert.ok(!output.includes(PASSWORD), `the password was printed: ${output}`);
}

test('usage errors exit 2 with the usage; --help exits 0', async () => {
  for (const args of [[], ['frobnicate'], ['inspect', 'orders'], ['--config']]) {
    const { code, stderr } = await cli(args);
    assert.equal(code, 2, `${args}: ${stderr}`);
    assert.match(stderr, /usage: dokebi-lock/);
  }
  const help = await cli(['--help']);
  assert.equal(help.code, 0);
  assert.match(help.stdout, /force-release <backend> <key>/);
});

test('an options file that cannot be read is INVALID_OPTIONS; an unknown backend is named', async () => {
  const missing = await cli(['--config', 'nowhere.yaml', 'status']);
  assert.equal(missing.code, 1);
  assert.match(missing.stderr, /INVALID_OPTIONS/);
  const config = configFile('app.yaml', yaml(PASSWORD));
  const unknown = await cli(['--config', config, 'inspect', 'billing', 'k']);
  assert.equal(unknown.code, 1);
  assert.match(unknown.stderr, /UNKNOWN_BACKEND/);
  // A local backend's locks are in the app's memory, out of the tool's reach.
  for (const command of ['inspect', 'force-release']) {
    const local = await cli(['--config', config, '--yes', command, 'here', 'k']);
    assert.equal(local.code, 2, local.stderr);
    assert.match(local.stderr, /here is a local backend/);
  }
});

test('inspect shows the app\'s holder; force-release asks first, then breaks it and raises the fence', async () => {
  const config = configFile('dokebi.yaml', yaml(PASSWORD));
  const app = await openLock({ file: config });
  try {
    const lease = await app.backend('orders').acquire('order:42');

    // The default options file: ./dokebi.yaml (the tool runs in `scratch`).
    const shown = await cli(['inspect', 'orders', 'order:42']);
    assert.equal(shown.code, 0, shown.stderr);
    assert.match(shown.stdout, /state\s+held exclusive/);
    assert.match(shown.stdout, /holders\s+1/);
    // The holder's row: how long it has held, its lease left and its own fence.
    assert.match(shown.stdout, /#\s+holder\s+units\s+held for\s+lease left\s+fence/);
    assert.match(shown.stdout, new RegExp(`\\n1\\s+\\S+\\s+1\\s+\\d+ ms\\s+[\\d.]+ s\\s+${lease.fence}\\n?`));
    const json = JSON.parse((await cli(['--json', 'inspect', 'orders', 'order:42'])).stdout);
    assert.equal(json.held, 1);
    assert.ok(BigInt(json.fence) >= BigInt(lease.fence));

    // Not a terminal and no --yes: nothing is broken.
    const unconfirmed = await cli(['force-release', 'orders', 'order:42']);
    assert.equal(unconfirmed.code, 2);
    assert.match(unconfirmed.stderr, /not confirmed/);
    assert.equal(await lease.renew(), true, 'the holder still holds the key');

    const broken = await cli(['--json', '--yes', 'force-release', 'orders', 'order:42'], { DOKEBI_LOCK_CONFIG: config });
    assert.equal(broken.code, 0, broken.stderr);
    const forced = JSON.parse(broken.stdout);
    assert.equal(forced.removed, 1);
    assert.ok(BigInt(forced.fence) > BigInt(lease.fence), `${forced.fence} > ${lease.fence}`);
    assert.equal(await lease.renew(), false, 'the removed holder learns it at its next renewal');
    const next = await app.backend('orders').acquire('order:42');
    assert.ok(BigInt(next.fence) > BigInt(forced.fence));
    await next.release();

    const text = await cli(['--yes', 'force-release', 'orders', 'order:42']);
    assert.match(text.stdout, /removed 0 holders on orders\nfence raised to \d+/);
    hidesThePassword(shown.stdout, shown.stderr, broken.stdout, broken.stderr, text.stdout, text.stderr);
  } finally {
    await app.close();
  }
});

test('status says which stores answer, and a refused password is PROVIDER_FAILED without the password', async () => {
  const good = await cli(['--config', configFile('good.yaml', yaml(PASSWORD)), 'status']);
  assert.equal(good.code, 0, good.stderr);
  assert.match(good.stdout, /orders\s+redis\s+answers/);
  assert.match(good.stdout, /here\s+local\s+in process/);

  const wrong = `${PASSWORD}-wrong`;
  const refused = await cli(['--config', configFile('wrong.yaml', yaml(wrong)), '--json', 'status', 'orders']);
  assert.equal(refused.code, 0, refused.stderr);
  const [row] = JSON.parse(refused.stdout);
  assert.equal(row.store, 'fails');
  assert.equal(row.error.code, 'PROVIDER_FAILED');
  for (const output of [refused.stdout, refused.stderr]) assert.ok(!output.includes(wrong), output);
  hidesThePassword(good.stdout, good.stderr);
});

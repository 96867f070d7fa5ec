// The ways to reach Redis (SPEC section 5, connection URLs) through the JS
// API. Plain TCP and unix sockets carry the commands started on the JS
// thread over a connection that libuv drives; TLS goes through the driver's
// runtime thread. Each kind must authenticate, select its database and take
// a lock that another provider then sees.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openLock } from '../index.js';
import { rejectsWith } from './helpers.js';
import { startRedis } from './redis-server.js';

function open(url, namespace = 'conn') {
  return openLock({
    config: {
      'dokebi-lock': { backends: { r: { driver: 'redis', connection: 'main', leaseMs: 10_000, namespace } } },
      'dokebi-redis': { connections: { main: { url } } },
    },
  });
}

/** Takes `k` through `url`, checks a second provider is refused, releases. */
async function lockWorksThrough(url) {
  const [a, b] = [await open(url), await open(url)];
  const lease = await a.backend('r').acquire('k');
  await rejectsWith(b.backend('r').acquire('k', { waitTimeoutMs: 0 }), 'LOCK_BUSY');
  assert.equal(await lease.release(), true);
  const next = await b.backend('r').acquire('k', { waitTimeoutMs: 0 });
  assert.ok(BigInt(next.fence) > BigInt(lease.fence));
  assert.equal(await next.release(), true);
  await Promise.all([a.close(), b.close()]);
}

test('a password and a database number in the URL are used; a wrong password is PROVIDER_FAILED', async () => {
  const server = await startRedis(['--requirepass', 's3cret-pw']);
  try {
    await lockWorksThrough(`redis://:s3cret-pw@127.0.0.1:${server.port}/3`);
    const keys = (db) =>
      spawnSync('redis-cli', ['-p', String(server.port), '-a', 's3cret-pw', '--no-auth-warning', '-n', String(db), 'KEYS', 'conn:*'], { encoding: 'utf8' }).stdout;
    assert.match(keys(3), /conn:lock-fence:/, 'the fence counter lives in database 3');
    assert.doesNotMatch(keys(0), /conn:/);
    const wrong = await open(`redis://:wrong-pw@127.0.0.1:${server.port}/0`);
    const error = await rejectsWith(wrong.backend('r').acquire('k'), 'PROVIDER_FAILED');
    assert.doesNotMatch(`${error.message} ${error.cause} ${error.fix}`, /wrong-pw/, 'no password in the error');
    // An authentication failure, not "unreachable", with a fix of its own naming the user.
    assert.match(error.message, /refused the credentials of user "default"/);
    assert.match(error.fix, /user "default".*connections\.main\.url/);
    await wrong.close();
  } finally {
    await server.stop();
  }
});

test('a unix socket URL works', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'dokebi-lock-'));
  const socket = join(dir, 'redis.sock');
  const server = await startRedis(['--unixsocket', socket, '--unixsocketperm', '700']);
  try {
    await lockWorksThrough(`unix://${socket}`);
  } finally {
    await server.stop();
    rmSync(dir, { recursive: true, force: true });
  }
});

test('a rediss URL connects over TLS', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'dokebi-lock-tls-'));
  const [cert, key] = [join(dir, 'cert.pem'), join(dir, 'key.pem')];
  const made = spawnSync('openssl', ['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-days', '1', '-subj', '/CN=localhost', '-keyout', key, '-out', cert], {
    stdio: 'ignore',
  });
  assert.equal(made.status, 0, 'openssl made a self-signed certificate');
  const probe = createServer();
  await new Promise((resolve) => probe.listen(0, '127.0.0.1', resolve));
  const tlsPort = probe.address().port;
  await new Promise((resolve) => probe.close(resolve));
  const server = await startRedis(['--tls-port', String(tlsPort), '--tls-cert-file', cert, '--tls-key-file', key, '--tls-ca-cert-file', cert, '--tls-auth-clients', 'no']);
  try {
    // A self-signed certificate: `#insecure` skips its verification.
    await lockWorksThrough(`rediss://127.0.0.1:${tlsPort}/#insecure`);
  } finally {
    await server.stop();
    rmSync(dir, { recursive: true, force: true });
  }
});

/** A private authority and a certificate it signed for localhost, in a temp dir. */
function privateAuthority() {
  const dir = mkdtempSync(join(tmpdir(), 'dokebi-lock-ca-'));
  const run = (args) => assert.equal(spawnSync('openssl', args, { cwd: dir, stdio: 'ignore' }).status, 0, `openssl ${args.join(' ')}`);
  const ec = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];
  run(['req', '-x509', ...ec, '-days', '1', '-subj', '/CN=dokebi test CA', '-keyout', 'ca.key', '-out', 'ca.pem']);
  run(['req', ...ec, '-subj', '/CN=localhost', '-keyout', 'server.key', '-out', 'server.csr']);
  writeFileSync(join(dir, 'san.ext'), 'subjectAltName=DNS:localhost,IP:127.0.0.1\n');
  run(['x509', '-req', '-in', 'server.csr', '-CA', 'ca.pem', '-CAkey', 'ca.key', '-CAcreateserial', '-days', '1', '-out', 'server.pem', '-extfile', 'san.ext']);
  return { dir, ca: join(dir, 'ca.pem'), cert: join(dir, 'server.pem'), key: join(dir, 'server.key') };
}

test('a private CA is trusted through tls.caFile, or NODE_EXTRA_CA_CERTS; without either the certificate is refused as such', async () => {
  const pki = privateAuthority();
  const probe = createServer();
  await new Promise((resolve) => probe.listen(0, '127.0.0.1', resolve));
  const tlsPort = probe.address().port;
  await new Promise((resolve) => probe.close(resolve));
  const server = await startRedis(['--tls-port', String(tlsPort), '--tls-cert-file', pki.cert, '--tls-key-file', pki.key, '--tls-ca-cert-file', pki.ca, '--tls-auth-clients', 'no']);
  const url = `rediss://localhost:${tlsPort}/0`;
  const openWith = (connection) =>
    openLock({
      config: {
        'dokebi-lock': { backends: { r: { driver: 'redis', connection: 'main', leaseMs: 10_000, namespace: 'tls' } } },
        'dokebi-redis': { connections: { main: { url, ...connection } } },
      },
    });
  try {
    const untrusting = await openWith({});
    const error = await rejectsWith(untrusting.backend('r').acquire('k', { waitTimeoutMs: 0 }), 'PROVIDER_FAILED');
    assert.match(error.message, /TLS certificate of Redis at localhost:\d+ was refused: .*unknown issuer/);
    assert.match(error.fix, /connections\.main\.tls\.caFile.*NODE_EXTRA_CA_CERTS/);
    await untrusting.close();

    const trusting = await openWith({ tls: { caFile: pki.ca } });
    const lease = await trusting.backend('r').acquire('k', { waitTimeoutMs: 0 });
    assert.equal(await lease.release(), true);
    await trusting.close();

    // Node's own way for the whole process: a fresh process reads the variable.
    const child = `
import { openLock } from ${JSON.stringify(new URL('../index.js', import.meta.url).href)};
const provider = await openLock({ config: {
  'dokebi-lock': { backends: { r: { driver: 'redis', connection: 'main', leaseMs: 10000, namespace: 'tls' } } },
  'dokebi-redis': { connections: { main: { url: ${JSON.stringify(url)} } } },
} });
const lease = await provider.backend('r').acquire('k', { waitTimeoutMs: 0 });
console.log(await lease.release());
await provider.close();
`;
    const result = spawnSync(process.execPath, ['--input-type=module', '-e', child], {
      encoding: 'utf8',
      timeout: 20_000,
      env: { ...process.env, NODE_EXTRA_CA_CERTS: pki.ca },
    });
    assert.equal(result.status, 0, result.stderr);
    assert.equal(result.stdout.trim(), 'true');
  } finally {
    await server.stop();
    rmSync(pki.dir, { recursive: true, force: true });
  }
});

test('a process that locks and releases but never closes still exits (an idle connection keeps nothing alive)', async () => {
  const server = await startRedis();
  try {
    const child = `
import { openLock } from ${JSON.stringify(new URL('../index.js', import.meta.url).href)};
const provider = await openLock({ config: {
  'dokebi-lock': { backends: { r: { driver: 'redis', connection: 'main', leaseMs: 10000, namespace: 'idle' } } },
  'dokebi-redis': { connections: { main: { url: ${JSON.stringify(server.url)} } } },
} });
const lease = await provider.backend('r').acquire('k');
console.log(await lease.release());
`;
    const result = spawnSync(process.execPath, ['--input-type=module', '-e', child], { encoding: 'utf8', timeout: 20_000 });
    assert.equal(result.signal, null, 'the child had to be killed: something kept it alive');
    assert.equal(result.status, 0, result.stderr);
    assert.equal(result.stdout.trim(), 'true');
  } finally {
    await server.stop();
  }
});

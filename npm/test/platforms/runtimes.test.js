// Each platform build, installed from its packed tarballs into a fresh app,
// runs the smoke test (smoke.mjs) on a real runtime: the arm64 Linux build on
// the real Node 24 for arm64 under qemu user-mode emulation (on an arm64
// Debian sysroot), the x64 Linux build on Bun and on Deno, which load
// Node-API addons but have no libuv (the redis driver then runs its commands
// on its own thread). Against a private redis-server, the machine's
// PostgreSQL (a schema of its own), its MariaDB (tables of its own) and a
// private lock directory.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { rm } from 'node:fs/promises';
import { join } from 'node:path';
import { startRedis } from '../redis-server.js';
import { PG_URL, useSchemas } from '../postgres-server.js';
import { MYSQL_URL, useTables } from '../mysql-server.js';
import { appWith, scratchDir, tools } from './helpers.js';

let redis;
let scratch;
const schema = useSchemas('smoke');
const table = useTables('smoke');
before(async () => {
  redis = await startRedis();
  scratch = await scratchDir();
});
after(async () => {
  await redis?.stop();
  if (scratch) await rm(scratch, { recursive: true, force: true });
});

let smokes = 0;
/** Runs smoke.mjs in `app` with `command`; returns its output after checking it passed. */
function smoke(app, command, args) {
  const run = spawnSync(command, [...args, 'smoke.mjs'], {
    cwd: app,
    env: { HOME: scratch, PATH: process.env.PATH, REDIS_URL: redis.url, PG_URL, PG_SCHEMA: schema(), MYSQL_URL, MYSQL_TABLE: table(), FILE_LOCK_DIR: join(scratch, `locks-${smokes++}`) },
    encoding: 'utf8',
    timeout: 120_000,
  });
  assert.equal(run.status, 0, `${run.stdout}\n${run.stderr}`);
  assert.match(run.stdout, /^smoke passed$/m);
  assert.match(run.stdout, /^ok the waiting mysql provider gets the key/m);
  return run.stdout;
}

test('linux-arm64-gnu: the real Node 24 for arm64 runs the smoke test under qemu', async () => {
  const app = await appWith(scratch, 'linux-arm64-gnu');
  const node = join(tools, 'node24-arm64', 'package', 'bin', 'node');
  const out = smoke(app, 'qemu-aarch64', ['-L', join(tools, 'arm64-sysroot'), node]);
  assert.match(out, /^runtime Node\.js\/24 linux-arm64$/m);
});

/**
 * The bytes the store drivers' thread (`dokebi-lock-io` in /proc) passed to write(2) and writev(2) while smoke.mjs ran its redis
 * steps, from the `thread writes` line smoke.mjs prints.
 */
function redisThreadWrites(out) {
  const line = /^thread writes (.*)$/m.exec(out);
  assert.ok(line, `smoke.mjs printed no thread writes:\n${out}`);
  const entry = line[1].split(' ').find((pair) => pair.startsWith('dokebi-lock-io='));
  assert.ok(entry, `no thread of the redis driver: ${line[1]}`);
  return Number(entry.split('=')[1]);
}

/**
 * Without libuv the driver runs its commands on its own thread: that thread
 * writes them (tokio sends with writev(2), which wchar counts: some 40
 * scripts and the scripts' first loads, each over 100 bytes) and wakes the
 * JS thread with each result (an eventfd). Seen here: 44-58 kB on Bun, 12 kB
 * on Deno; on Node, whose JS thread sends the commands itself, the driver's
 * thread wrote 273 bytes (wakeups for its timers).
 */
const REDIS_THREAD_BYTES = 2000;

test('linux-x64-gnu on Bun: every driver, the store drivers on their own thread', async (t) => {
  const app = await appWith(scratch, 'linux-x64-gnu');
  const out = smoke(app, join(tools, 'bun', 'package', 'bin', 'bun'), []);
  assert.match(out, /^runtime Bun\/1\.\S+ linux-x64$/m);
  const wrote = redisThreadWrites(out);
  t.diagnostic(/^thread writes .*$/m.exec(out)[0]);
  assert.ok(wrote >= REDIS_THREAD_BYTES, `the redis driver's thread wrote only ${wrote} bytes: the commands went another way`);
});

test('linux-x64-gnu on Deno: every driver, the store drivers on their own thread', async (t) => {
  const app = await appWith(scratch, 'linux-x64-gnu');
  const out = smoke(app, join(tools, 'deno', 'package', 'deno'), ['run', '--allow-all']);
  assert.match(out, /^runtime Deno\/2\.\S+ linux-x64$/m);
  const wrote = redisThreadWrites(out);
  t.diagnostic(/^thread writes .*$/m.exec(out)[0]);
  assert.ok(wrote >= REDIS_THREAD_BYTES, `the redis driver's thread wrote only ${wrote} bytes: the commands went another way`);
});

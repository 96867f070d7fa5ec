// The examples run with one command each and print what they promise.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { PG_URL, psql } from './postgres-server.js';
import { MYSQL_URL, dropTables } from './mysql-server.js';

function run(example, env = {}) {
  const main = fileURLToPath(new URL(`../../examples/${example}/main.js`, import.meta.url));
  const result = spawnSync(process.execPath, [main], { encoding: 'utf8', timeout: 60_000, env: { ...process.env, ...env } });
  assert.equal(result.status, 0, `${example} failed:\n${result.stderr}`);
  return result.stdout;
}

test('examples/14-local serializes updates, reports LOCK_BUSY and runs as a plugin', () => {
  const out = run('14-local');
  assert.match(out, /order:42 total 45/);
  assert.match(out, /busy: LOCK_BUSY/);
  assert.match(out, /nightly-report valid after stop: false/);
});

test('examples/15-redis starts its own redis-server and shows exclusion, hand-off and fences', () => {
  const out = run('15-redis', { REDIS_URL: '' });
  assert.match(out, /worker: LOCK_BUSY/);
  assert.match(out, /worker got invoice:7 after the release/);
  assert.match(out, /fence grew: true/);
  assert.match(out, /web holds invoice:7 again: true/);
});

test('examples/18-tiers moves report:daily to the file member while its Redis is down, refuses pay:42, and comes back after the cooldown', () => {
  const out = run('18-tiers');
  assert.match(out, /report:daily served by cache \(tier shared\)/);
  assert.match(out, /report:daily served by host \(tier host\)/);
  assert.match(out, /pay:42: NO_ELIGIBLE_BACKEND - cache: PROVIDER_FAILED/);
  assert.match(out, /after the cooldown report:daily served by cache/);
});

test('examples/16-postgres shows exclusion, a LISTEN wake-up, fences and status on the machine\'s PostgreSQL', (t) => {
  // The example keeps its tables in a schema of its own; the test leaves none behind.
  t.after(() => psql('DROP SCHEMA IF EXISTS dokebi_example_16 CASCADE'));
  const out = run('16-postgres', { DATABASE_URL: PG_URL });
  assert.match(out, /worker: LOCK_BUSY/);
  assert.match(out, /worker got invoice:7 after the release/);
  assert.match(out, /fence grew: true/);
  assert.match(out, /web runs report:daily, valid: true/);
  assert.match(out, /web connected: true lastError: null/);
  assert.match(out, /web holds invoice:7 again: true/);
});

test('examples/19-mysql shows exclusion, a wake-up through the release log, fences, status and close on the machine\'s MariaDB', (t) => {
  // The example names its tables and procedures after dokebi_example_19; the test leaves none behind.
  t.after(() => dropTables('dokebi_example_19'));
  const out = run('19-mysql', { MYSQL_URL });
  assert.match(out, /worker: LOCK_BUSY/);
  assert.match(out, /worker got invoice:7 after the release/);
  assert.match(out, /fence grew: true/);
  assert.match(out, /web runs report:daily, valid: true/);
  assert.match(out, /web connected: true lastError: null/);
  assert.match(out, /worker lease valid after close: false/);
  assert.match(out, /web holds invoice:7 again: true/);
});

test('examples/17-file shows a key shared by two processes of one host, with fences', () => {
  const out = run('17-file', { LOCK_DIR: '' });
  assert.match(out, /report total 42/);
  assert.match(out, /worker: LOCK_BUSY/);
  assert.match(out, /worker got invoice:7 after the release/);
  assert.match(out, /fence grew across processes: true/);
});

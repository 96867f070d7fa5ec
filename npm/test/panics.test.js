// No Rust panic crosses into Node as an abort: through a test build of the
// addon (scripts/test-node builds it with the `panic-probe` feature; the
// published addon has no probe) that panics at each kind of entry from Node.
// Each probe runs in a child process, so an abort would show as a signal.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';

const PROBE = JSON.stringify(new URL('./panic-probe.node', import.meta.url).pathname);

/** Runs `body` in a child with the probe addon as `probe`; returns its printed JSON. */
function run(body) {
  const source = `
import { createRequire } from 'node:module';
const probe = createRequire(import.meta.url)(${PROBE});
${body}
// The addon still works after the panic.
const engine = probe.loadConfig(JSON.stringify({ 'dokebi-lock': { backends: { b: {} } } })).localEngine('b');
const out = engine.out();
engine.acquire('k');
console.log(JSON.stringify({ result, after: out[0] }));
`;
  const child = spawnSync(process.execPath, ['--input-type=module', '-e', source], { encoding: 'utf8', timeout: 20_000 });
  assert.equal(child.signal, null, child.stderr);
  assert.equal(child.status, 0, child.stderr);
  assert.doesNotMatch(child.stderr, /fatal runtime error|aborting/);
  const printed = JSON.parse(child.stdout);
  assert.equal(printed.after, 0, 'a later acquire is granted');
  return { result: printed.result, stderr: child.stderr };
}

const PROVIDER_FAILED = { code: 'PROVIDER_FAILED', internal: true };
const described = (info) => ({ code: info?.code, internal: /internal error in the lock addon/.test(info?.message) });

test('a panic in a #[napi] function is a thrown error', () => {
  const { result } = run(`
let result;
try { probe.panicProbe('sync'); result = 'returned'; } catch (error) { result = /probe: sync/.test(error.message) ? 'threw' : error.message; }
`);
  assert.equal(result, 'threw');
});

test('a panic in a function with a failure sentinel is PROVIDER_FAILED in takeError', () => {
  const { result } = run(`
probe.panicProbe('sentinel');
const result = (${described})(probe.takeError());
`);
  assert.deepEqual(result, PROVIDER_FAILED);
});

for (const place of ['promise', 'poll', 'woken']) {
  test(`a panic in an operation (${place}) settles its promise with PROVIDER_FAILED`, () => {
    const { result } = run(`
const result = (${described})(await probe.panicProbe('${place}'));
`);
    assert.deepEqual(result, PROVIDER_FAILED);
  });
}

test('a panic in a task without a caller (a connection reader) is logged, and the process goes on', () => {
  const { result, stderr } = run(`
probe.panicProbe('reader');
await new Promise((resolve) => setTimeout(resolve, 50));
const result = 'alive';
`);
  assert.equal(result, 'alive');
  assert.match(stderr, /dokebi-lock: a connection reader failed: internal error in the lock addon \(a bug\): probe: reader/);
});

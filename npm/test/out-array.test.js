// The numbers a local engine exchanges with JS live in memory the engine
// owns. Whatever JS does to the ArrayBuffer of its view (transfer it away,
// let the moved buffer be collected), the engine never writes to freed
// memory, and a detached view is replaced by a new one. Through the addon's
// own API, the only place such a view is reachable.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { native } from '../lib/native.js';
import { GRANTED, OUT_LEN } from '../lib/protocol.js';

const NATIVE = JSON.stringify(new URL('../lib/native.js', import.meta.url).href);
/** The block's size: OUT_LEN f64 cells (bindings/node/src/protocol.rs). */
const BLOCK_BYTES = OUT_LEN * 8;

function engine() {
  const options = native.loadConfig(JSON.stringify({ 'dokebi-lock': { backends: { b: {} } } }));
  return options.localEngine('b');
}

test('a view whose buffer was transferred away is replaced, and the engine goes on', () => {
  const local = engine();
  const out = local.out();
  const moved = out.buffer.transfer();
  assert.equal(out.length, 0, 'detached');
  local.acquire('k');
  // The engine wrote its answer to memory it owns; a new view shows it.
  const fresh = local.out();
  assert.deepEqual([fresh[0], fresh[2]], [GRANTED, 1]);
  fresh.set([0, fresh[1], fresh[2], 0]);
  local.release();
  assert.equal(fresh[0], 1, 'released, key freed');
  local.acquire('k');
  assert.deepEqual([fresh[0], fresh[2]], [GRANTED, 2]);
  assert.equal(moved.byteLength, BLOCK_BYTES, 'the moved buffer is still whole');
});

test('the view cannot be transferred by structuredClone or postMessage', () => {
  const local = engine();
  const out = local.out();
  assert.throws(() => structuredClone(out.buffer, { transfer: [out.buffer] }), { name: 'DataCloneError' });
  const { port1 } = new MessageChannel();
  assert.throws(() => port1.postMessage(out.buffer, [out.buffer]), { name: 'DataCloneError' });
  port1.close();
  local.acquire('k');
  assert.equal(out[0], GRANTED, 'the view still works');
});

// A moved buffer that JS drops is freed by V8; if the engine still wrote
// there, its writes would land in whatever malloc hands out next, such as
// the backing store of a new Buffer of the same size.
const afterFree = `
import { native } from ${NATIVE};
const options = native.loadConfig(JSON.stringify({ 'dokebi-lock': { backends: { b: { maxKeys: 100000 } } } }));
const local = options.localEngine('b');
let moved = local.out().buffer.transfer();
moved = undefined;
for (let i = 0; i < 5; i++) globalThis.gc();
await new Promise((resolve) => setTimeout(resolve, 50));
globalThis.gc();
const probes = Array.from({ length: 2000 }, () => Buffer.allocUnsafeSlow(${BLOCK_BYTES}).fill(0xab));
for (let i = 0; i < 1000; i++) local.acquire('k' + i);
const damaged = probes.filter((probe) => probe.some((byte) => byte !== 0xab)).length;
const out = local.out();
console.log(JSON.stringify({ damaged, last: [out[0], out[2]] }));
`;

test('after the moved buffer is collected, the engine writes only its own memory', () => {
  const result = spawnSync(process.execPath, ['--expose-gc', '--input-type=module', '-e', afterFree], { encoding: 'utf8', timeout: 30_000 });
  assert.equal(result.signal, null, result.stderr);
  assert.equal(result.status, 0, result.stderr);
  assert.deepEqual(JSON.parse(result.stdout), { damaged: 0, last: [GRANTED, 1000] });
});

// The Node worker of the fault suite: the same loop, arguments, options
// (YAML in FAULTS_LOCK_YAML) and log lines as worker.rs, through
// @dokebi/lock (the lock) and a minimal RESP client (the fenced store).
// Usage: node worker.mjs <store_port> <keys> <hold_ms> <run_ms> <log> <seed> <read_sha> <write_sha>
import { appendFileSync } from 'node:fs';
import { connect } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { openLock } from '../../npm/index.js';

const [storePort, keys, holdMs, runMs, logPath, seed, readSha, writeSha] = process.argv.slice(2);

/** Microseconds on CLOCK_MONOTONIC (libuv's clock), like the other workers. */
const monoUs = () => process.hrtime.bigint() / 1000n;
const line = (text) => appendFileSync(logPath, `${text}\n`);

/** One store connection; one command at a time, integer replies only. */
function openStore(port) {
  const socket = connect(Number(port), '127.0.0.1');
  let buffer = '';
  let waiting = null;
  socket.setEncoding('latin1');
  socket.on('data', (chunk) => {
    buffer += chunk;
    const end = buffer.indexOf('\r\n');
    if (end < 0 || !waiting) return;
    const reply = buffer.slice(0, end);
    buffer = buffer.slice(end + 2);
    const { resolve, reject } = waiting;
    waiting = null;
    if (reply[0] === ':') resolve(Number(reply.slice(1)));
    else reject(new Error(`store replied ${reply}`));
  });
  socket.on('error', (error) => waiting?.reject(error));
  return {
    call(...args) {
      const command = `*${args.length}\r\n` + args.map((a) => `$${Buffer.byteLength(String(a))}\r\n${a}\r\n`).join('');
      return new Promise((resolve, reject) => {
        waiting = { resolve, reject };
        socket.write(command);
      });
    },
    close: () => socket.end(),
  };
}

let state = BigInt(seed) | 1n;
function below(n) {
  const mask = (1n << 64n) - 1n;
  state ^= (state << 13n) & mask;
  state ^= state >> 7n;
  state ^= (state << 17n) & mask;
  return Number(state % BigInt(Math.max(n, 1)));
}

const provider = await openLock({ yaml: process.env.FAULTS_LOCK_YAML });
const backend = provider.backend('faults');
const store = openStore(storePort);
const end = Date.now() + Number(runMs);
while (Date.now() < end) {
  const key = `k${below(Number(keys))}`;
  let lease;
  try {
    lease = await backend.acquire(key);
  } catch (error) {
    line(`F ${error.code}`);
    await sleep(20);
    continue;
  }
  const start = monoUs();
  line(`A ${key} ${lease.fence} ${start}`);
  const read = await store.call('EVALSHA', readSha, 1, `store:${key}`, lease.fence);
  await sleep(below(Number(holdMs) + 1));
  let outcome = 'R';
  if (read >= 0) {
    const written = await store.call('EVALSHA', writeSha, 2, `store:${key}`, `attempts:${key}`, lease.fence, read + 1);
    outcome = written === 1 ? 'W' : 'X';
  }
  const sectionEnd = monoUs();
  let released;
  try {
    released = (await lease.release()) ? 'OK' : 'FALSE';
  } catch (error) {
    released = error.code;
  }
  line(`E ${key} ${lease.fence} ${start} ${sectionEnd} ${outcome} ${released}`);
}
store.close();
await provider.close();

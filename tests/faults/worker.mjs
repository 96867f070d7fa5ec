// The Node worker of the fault suite: the same loop, arguments, options
// (YAML in FAULTS_LOCK_YAML), draws and log lines as worker.rs, through
// @dokebi/lock (the lock; in a mixed run, with limit above 0, readers with
// { mode: 'shared' } and counted sections with { limit, weight }) and a
// minimal RESP client (the fenced store).
// Usage: node worker.mjs <store_port> <keys> <hold_ms> <run_ms> <log> <seed> <read_sha> <write_sha> <shared_read_sha> <limit>
import { appendFileSync } from 'node:fs';
import { connect } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { openLock } from '../../npm/index.js';

const [storePort, keys, holdMs, runMs, logPath, seed, readSha, writeSha, sharedReadSha, limitArg] = process.argv.slice(2);
const limit = Number(limitArg);

/** Microseconds on CLOCK_MONOTONIC (libuv's clock), like the other workers. */
const monoUs = () => process.hrtime.bigint() / 1000n;
const line = (text) => appendFileSync(logPath, `${text}\n`);
// The code a failed acquire is logged with: log.rs's PLACED for a policy's
// refusal of a key this process had on the member that could not serve.
const failureCode = (error) =>
  error.code === 'NO_ELIGIBLE_BACKEND' && error.details?.tried?.some((t) => t.code === 'LOCK_BUSY')
    ? 'NO_ELIGIBLE_BACKEND:placed'
    : error.code;

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
  const index = below(Number(keys));
  const key = `k${index}`;
  // The kind, drawn as worker.rs's pick does.
  let kind = 'x';
  let options;
  if (limit > 0 && index === Number(keys) - 1) {
    const weight = 1 + below(2);
    kind = `c${limit}w${weight}`;
    options = { limit, weight };
  } else if (limit > 0 && below(3) !== 0) {
    kind = 's';
    options = { mode: 'shared' };
  }
  let lease;
  const asked = monoUs();
  try {
    lease = options ? await backend.acquire(key, options) : await backend.acquire(key);
  } catch (error) {
    line(`F ${failureCode(error)} ${monoUs()} ${key}`);
    await sleep(20);
    continue;
  }
  const start = monoUs();
  // The policy member that served the lease, asked again at its end: it must not have moved.
  const member = () => lease.served?.backend ?? '-';
  line(`A ${key} ${lease.fence} ${start} ${kind} ${asked} ${member()}`);
  let read = 0;
  if (kind === 'x') read = await store.call('EVALSHA', readSha, 1, `store:${key}`, lease.fence);
  else if (kind === 's') read = await store.call('EVALSHA', sharedReadSha, 2, `store:${key}`, `attempts:${key}`, lease.fence);
  await sleep(below(Number(holdMs) + 1));
  let outcome = 'R';
  if (read >= 0 && kind === 's') outcome = 'S';
  else if (read >= 0 && kind !== 'x') outcome = '-';
  else if (read >= 0) {
    const written = await store.call('EVALSHA', writeSha, 2, `store:${key}`, `attempts:${key}`, lease.fence, read + 1);
    outcome = written === 1 ? 'W' : 'X';
  }
  const sectionEnd = monoUs();
  line(`Q ${sectionEnd}`);
  const served = member();
  let released;
  try {
    released = (await lease.release()) ? 'OK' : 'FALSE';
  } catch (error) {
    released = error.code;
  }
  line(`E ${key} ${lease.fence} ${start} ${sectionEnd} ${outcome} ${released} ${kind} ${asked} ${served}`);
}
store.close();
await provider.close();

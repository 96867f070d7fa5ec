// The smoke test each platform build runs on its real runtime (an emulated
// arm64 Node, Bun, Deno), from an app that installed the packed tarballs:
// local acquire, release, fence and FIFO; redis acquire and release, and a
// hand-off between two providers (as two processes would), against the
// redis-server at REDIS_URL. Prints one line per step; exits non-zero on the
// first failure.
import { openLock } from '@dokebi/lock';
import process from 'node:process';

function check(condition, what) {
  if (!condition) throw new Error(`smoke: ${what}`);
  console.log(`ok ${what}`);
}

console.log(`runtime ${navigator.userAgent} ${process.platform}-${process.arch}`);

const local = await openLock({ config: { 'dokebi-lock': { backends: { local: {} } } } });
const backend = local.backend('local');
const first = await backend.acquire('k');
check(first.valid && first.remainingMs === Infinity, 'a local lease is held');
const order = [];
const waiters = [1, 2, 3].map((n) => backend.acquire('k').then(async (lease) => {
  order.push(n);
  await lease.release();
  return lease.fence;
}));
check((await first.release()) === true, 'a local release hands the key on');
const fences = await Promise.all(waiters);
check(order.join() === '1,2,3', 'local waiters are served in FIFO order');
check(fences.every((fence, i) => BigInt(fence) > BigInt(i === 0 ? first.fence : fences[i - 1])), 'local fences grow');
await local.close();

const config = (namespace) => ({
  'dokebi-lock': { backends: { shared: { driver: 'redis', connection: 'main', namespace, leaseMs: 5000 } } },
  'dokebi-redis': { connections: { main: { url: process.env.REDIS_URL } } },
});
const namespace = `smoke-${process.pid}-${Date.now()}`;
const [a, b] = [await openLock({ config: config(namespace) }), await openLock({ config: config(namespace) })];
const held = await a.backend('shared').acquire('order:42');
check(held.valid && held.remainingMs > 0 && held.remainingMs <= 5000, 'a redis lease is held');
let handedAt = 0;
const next = b.backend('shared').acquire('order:42', { waitTimeoutMs: 5000 }).then((lease) => ((handedAt = Date.now()), lease));
await new Promise((resolve) => setTimeout(resolve, 50));
check(handedAt === 0, 'the other provider waits while the key is held');
const releasedAt = Date.now();
check((await held.release()) === true, 'a redis release succeeds');
const taken = await next;
check(BigInt(taken.fence) > BigInt(held.fence), `the waiting provider gets the key with a higher fence (hand-off ${handedAt - releasedAt} ms)`);
check((await taken.release()) === true && (await taken.release()) === false, 'a second release resolves false');
await Promise.all([a.close(), b.close()]);
console.log('smoke passed');

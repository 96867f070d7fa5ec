// The smoke test each platform build runs on its real runtime (an emulated
// arm64 Node, Bun, Deno), from an app that installed the packed tarballs:
// local acquire, release, fence and FIFO; the lock kinds (readers, a counted
// key, several keys) on both drivers; redis acquire and release, and a
// hand-off between two providers (as two processes would), against the
// redis-server at REDIS_URL; the same hand-off on the postgres driver (PG_URL),
// the mysql driver (MYSQL_URL, where given) and the file driver (FILE_LOCK_DIR); the acquire tracing channel, and
// @dokebi/lock/otel loaded through the package's exports. Prints one line per
// step; exits non-zero on the first failure.
import { openLock } from '@dokebi/lock';
import { tracingChannel } from 'node:diagnostics_channel';
import { readdirSync, readFileSync } from 'node:fs';
import process from 'node:process';

function check(condition, what) {
  if (!condition) throw new Error(`smoke: ${what}`);
  console.log(`ok ${what}`);
}

/** A key of backend `name` held through provider `a` (`held` checks the
 *  lease) is refused to `b`, then handed to `b`'s waiting acquire when `a`
 *  releases, with a higher fence. */
async function handOff(driver, [a, b], name, held) {
  const lease = await a.backend(name).acquire('order:42');
  check(held(lease), `a ${driver} lease is held`);
  const refused = await b.backend(name).acquire('order:42', { waitTimeoutMs: 0 }).catch((err) => err.code);
  check(refused === 'LOCK_BUSY', `the other ${driver} provider is refused while the key is held`);
  const next = b.backend(name).acquire('order:42', { waitTimeoutMs: 5000 });
  check((await lease.release()) === true, `a ${driver} release succeeds`);
  const taken = await next;
  check(BigInt(taken.fence) > BigInt(lease.fence), `the waiting ${driver} provider gets the key with a higher fence`);
  await taken.release();
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

const readers = await Promise.all([1, 2].map(() => backend.acquire('doc', { mode: 'shared' })));
let writerIn = false;
const writer = backend.acquire('doc').then((lease) => ((writerIn = true), lease));
await new Promise((resolve) => setTimeout(resolve, 20));
check(!writerIn && backend.status().heldShared === 2, 'local readers hold a key together and a writer waits');
await Promise.all(readers.map((lease) => lease.release()));
const written = await writer;
check(BigInt(written.fence) > BigInt(readers[1].fence), 'the writer gets the key after the readers, with a higher fence');
await written.release();
const units = [await backend.acquire('api', { limit: 2 }), await backend.acquire('api', { limit: 2 })];
const third = await backend.acquire('api', { limit: 2, waitTimeoutMs: 0 }).catch((err) => err.code);
check(third === 'LOCK_BUSY', 'a local counted key grants at most its limit');
await Promise.all(units.map((lease) => lease.release()));
const accounts = await backend.acquire(['acct:1', 'acct:2']);
check(accounts.keys.join() === 'acct:1,acct:2' && accounts.fences.size === 2, 'one local lease holds two keys, with a fence per key');
await accounts.release();

const traced = [];
const acquires = tracingChannel('dokebi-lock:acquire');
const handlers = { start() {}, end() {}, asyncStart() {}, asyncEnd: (lock) => traced.push(lock), error() {} };
acquires.subscribe(handlers);
const seen = await backend.acquire('secret-key');
await seen.release();
acquires.unsubscribe(handlers);
const [lock] = traced;
check(
  traced.length === 1 && lock.backend === 'local' && lock.fence === seen.fence && !JSON.stringify(lock).includes('secret-key'),
  'the acquire tracing channel reports an acquire, without its key',
);
await local.close();

const config = (namespace) => ({
  'dokebi-lock': { backends: { shared: { driver: 'redis', connection: 'main', namespace, leaseMs: 5000 } } },
  'dokebi-redis': { connections: { main: { url: process.env.REDIS_URL } } },
});
const namespace = `smoke-${process.pid}-${Date.now()}`;
const [a, b] = [await openLock({ config: config(namespace) }), await openLock({ config: config(namespace) })];
const writesBefore = threadWrites();
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

const [sharedA, sharedB] = [a.backend('shared'), b.backend('shared')];
const both = [await sharedA.acquire('doc', { mode: 'shared' }), await sharedB.acquire('doc', { mode: 'shared', waitTimeoutMs: 0 })];
const refused = await sharedB.acquire('doc', { waitTimeoutMs: 0 }).catch((err) => err.code);
check(refused === 'LOCK_BUSY', 'redis readers of two providers hold a key together; a writer is refused');
await Promise.all(both.map((lease) => lease.release()));
const unit = await sharedA.acquire('api', { limit: 1 });
const otherLimit = await sharedB.acquire('api', { limit: 2, waitTimeoutMs: 0 }).catch((err) => err.code);
check(otherLimit === 'INVALID_ARGUMENT', 'a redis counted key refuses another limit');
await unit.release();
const pair = await sharedA.acquire(['acct:1', 'acct:2']);
check(pair.keys.join() === 'acct:1,acct:2' && pair.fences.size === 2, 'one redis lease holds two keys, with a fence per key');
const overlap = await sharedB.acquire(['acct:2', 'acct:3'], { waitTimeoutMs: 0 }).catch((err) => err.code);
check(overlap === 'LOCK_BUSY', 'an overlapping set of keys is refused while held');
await pair.release();
// Which threads did the redis driver's work above: the bytes each passed to
// write(2) and writev(2) meanwhile (the commands, where tokio sends them,
// and the wakeups of another thread through an eventfd).
const writesAfter = threadWrites();
const wrote = new Map();
for (const [tid, { name, bytes }] of writesAfter) {
  wrote.set(name, (wrote.get(name) ?? 0) + bytes - (writesBefore.get(tid)?.bytes ?? 0));
}
console.log(`thread writes ${[...wrote].map(([name, bytes]) => `${name.replaceAll(' ', '_')}=${bytes}`).join(' ')}`);
await Promise.all([a.close(), b.close()]);

// The postgres driver (PG_URL, its tables in PG_SCHEMA): a lease, and the
// hand-off between two providers woken by NOTIFY.
const pgConfig = {
  'dokebi-lock': { backends: { rows: { driver: 'postgres', connection: 'main', namespace, schema: process.env.PG_SCHEMA, leaseMs: 5000 } } },
  'dokebi-postgres': { connections: { main: { url: process.env.PG_URL } } },
};
const [pgA, pgB] = [await openLock({ config: pgConfig }), await openLock({ config: pgConfig })];
await handOff('postgres', [pgA, pgB], 'rows', (lease) => lease.valid && lease.remainingMs > 0 && lease.remainingMs <= 5000);
await Promise.all([pgA.close(), pgB.close()]);

// The mysql driver (MYSQL_URL, its tables and procedures named MYSQL_TABLE;
// the runs under Wine give none): the hand-off between two providers, woken
// by the driver's release log.
if (process.env.MYSQL_URL) {
  const myConfig = {
    'dokebi-lock': { backends: { rows: { driver: 'mysql', connection: 'main', namespace, table: process.env.MYSQL_TABLE, leaseMs: 5000 } } },
    'dokebi-mysql': { connections: { main: { url: process.env.MYSQL_URL } } },
  };
  const [myA, myB] = [await openLock({ config: myConfig }), await openLock({ config: myConfig })];
  await handOff('mysql', [myA, myB], 'rows', (lease) => lease.valid && lease.remainingMs > 0 && lease.remainingMs <= 5000);
  await Promise.all([myA.close(), myB.close()]);
}

// The file driver (FILE_LOCK_DIR): the kernel's lock (flock; LockFileEx on
// Windows), handed between two providers as between two processes.
const fileConfig = { 'dokebi-lock': { backends: { files: { driver: 'file', directory: process.env.FILE_LOCK_DIR, namespace } } } };
const [fileA, fileB] = [await openLock({ config: fileConfig }), await openLock({ config: fileConfig })];
await handOff('file', [fileA, fileB], 'files', (lease) => lease.valid && lease.remainingMs === Infinity);
await Promise.all([fileA.close(), fileB.close()]);

// The optional OpenTelemetry module, with the app's @opentelemetry/api.
const { instrumentLocks } = await import('@dokebi/lock/otel');
const stop = instrumentLocks();
check(typeof stop === 'function', '@dokebi/lock/otel loads and instruments the locks');
stop();
console.log('smoke passed');

/**
 * Linux: the bytes each thread of this process has passed to write(2) and
 * writev(2) so far (wchar of /proc/self/task/<tid>/io), by thread id, with
 * its name.
 * Empty where /proc has no such files.
 */
function threadWrites() {
  const writes = new Map();
  let tids = [];
  try {
    tids = readdirSync('/proc/self/task');
  } catch {
    return writes;
  }
  for (const tid of tids) {
    try {
      const name = readFileSync(`/proc/self/task/${tid}/comm`, 'utf8').trim();
      const bytes = Number(/^wchar: (\d+)$/m.exec(readFileSync(`/proc/self/task/${tid}/io`, 'utf8'))[1]);
      writes.set(tid, { name, bytes });
    } catch {
      // The thread ended meanwhile.
    }
  }
  return writes;
}

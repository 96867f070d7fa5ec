// A private primary with one replica, for what `replicaAcks` (WAIT) costs.
// Its own pair, not a replica of the run's server: replicating every other
// redis scenario's commands would change their figures. Ready once the
// replica is in sync, so that its first sync does not run during a
// measurement; stopped (and its temp dir removed) when the run ends, also
// on failure.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import Redis from 'ioredis';
import { spawnRedis, freePort } from './redis-server.mjs';

/** Resolves to { url, replicaUrl, stop() }. */
export async function startReplicated() {
  // The replica writes the primary's snapshot to disk before loading it:
  // into a temp dir, not the working directory.
  const dir = mkdtempSync(join(tmpdir(), 'dokebi-bench-replicated-'));
  const removeDir = () => rmSync(dir, { recursive: true, force: true });
  process.once('exit', removeDir);
  const stop = async (servers) => {
    await Promise.all(servers.map((s) => s?.stop()));
    removeDir();
    process.off('exit', removeDir);
  };
  let primary;
  let replica;
  let admin;
  try {
    // A replica syncs at once, not after the default 5 s wait for more.
    primary = await spawnRedis(await freePort(), ['--dir', dir, '--repl-diskless-sync-delay', '0']);
    replica = await spawnRedis(await freePort(), ['--dir', dir, '--replicaof', '127.0.0.1', String(primary.port)]);
    admin = new Redis(primary.url, { lazyConnect: true, maxRetriesPerRequest: 0 });
    await admin.connect();
    const end = performance.now() + 20_000;
    // The primary's view: the replica is online (synced, streaming).
    while (!/^slave0:.*state=online/m.test(await admin.info('replication'))) {
      if (performance.now() > end) throw new Error(`redis replica did not sync:\n${await admin.info('replication')}`);
      await sleep(20);
    }
  } catch (error) {
    await stop([primary, replica]);
    throw error;
  } finally {
    admin?.disconnect();
  }
  return {
    url: primary.url,
    replicaUrl: replica.url,
    stop: () => stop([primary, replica]),
  };
}

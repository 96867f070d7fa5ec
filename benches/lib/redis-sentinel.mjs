// A private Sentinel deployment for one benchmark run: a primary, its replica
// and three sentinels (quorum 2) on loopback, as a user would deploy it.
// Ready once the replica is in sync and every sentinel knows the replica and
// the other sentinels, so that neither the first sync nor the sentinels'
// discovery runs during a measurement; stopped (and its temp dir, where the
// sentinels rewrite their config files, removed) when the run ends, also on
// failure.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import Redis from 'ioredis';
import { spawnRedis, freePort } from './redis-server.mjs';

const PRIMARY_NAME = 'benchprimary';
const SENTINELS = 3;

/** Polls `check` every 50 ms until it is true; throws `what` after 20 s. */
async function waitFor(check, what) {
  const end = performance.now() + 20_000;
  while (!(await check())) {
    if (performance.now() > end) throw new Error(`redis sentinel: ${what} after 20 s`);
    await sleep(50);
  }
}

/** Resolves to { nodes: [sentinel url], primaryName, primaryUrl, stop() }. */
export async function startSentinel() {
  const dir = mkdtempSync(join(tmpdir(), 'dokebi-bench-sentinel-'));
  const removeDir = () => rmSync(dir, { recursive: true, force: true });
  process.once('exit', removeDir);
  const servers = [];
  const stop = async () => {
    await Promise.all(servers.map((s) => s.stop()));
    removeDir();
    process.off('exit', removeDir);
  };
  const admins = [];
  const admin = async (url) => {
    const a = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 0 });
    admins.push(a);
    await a.connect();
    return a;
  };
  try {
    // A replica syncs at once, not after the default 5 s wait for more.
    const primary = await spawnRedis(await freePort(), ['--dir', dir, '--repl-diskless-sync-delay', '0']);
    servers.push(primary);
    servers.push(await spawnRedis(await freePort(), ['--dir', dir, '--replicaof', '127.0.0.1', String(primary.port)]));
    for (let i = 0; i < SENTINELS; i++) {
      const config = join(dir, `sentinel-${i}.conf`);
      writeFileSync(config, `sentinel monitor ${PRIMARY_NAME} 127.0.0.1 ${primary.port} 2\n`);
      servers.push(await spawnRedis(await freePort(), ['--sentinel', '--dir', dir], { config }));
    }
    const primaryAdmin = await admin(primary.url);
    await waitFor(async () => /^slave0:.*state=online/m.test(await primaryAdmin.info('replication')), 'the replica did not sync');
    const sentinelAdmins = await Promise.all(servers.slice(2).map((s) => admin(`redis://127.0.0.1:${s.port}`)));
    await waitFor(async () => {
      const views = await Promise.all(sentinelAdmins.map((a) => a.call('SENTINEL', 'MASTER', PRIMARY_NAME)));
      return views.every((fields) => {
        const view = Object.fromEntries(fields.flatMap((f, i) => (i % 2 ? [] : [[f, fields[i + 1]]])));
        return view['num-slaves'] === '1' && view['num-other-sentinels'] === String(SENTINELS - 1);
      });
    }, 'not every sentinel knows the replica and the other sentinels');
    return {
      nodes: servers.slice(2).map((s) => `redis://127.0.0.1:${s.port}`),
      primaryName: PRIMARY_NAME,
      primaryUrl: primary.url,
      /** Every process of the deployment: primary, replica, sentinels. */
      serverUrls: servers.map((s) => `redis://127.0.0.1:${s.port}`),
      stop,
    };
  } catch (error) {
    await stop();
    throw error;
  } finally {
    for (const a of admins) a.disconnect();
  }
}

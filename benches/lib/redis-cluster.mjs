// A private Redis Cluster for one benchmark run: 3 primaries and 3 replicas
// on loopback, joined by `redis-cli --cluster create`, no persistence, their
// config files in a temp dir; stopped (and the dir removed) when the run ends,
// also on failure. Ready once every node says cluster_state:ok and every
// replica is in sync: a replica's first sync would
// otherwise run during the first measurement.
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import net from 'node:net';
import { once } from 'node:events';
import { promisify } from 'node:util';
import { setTimeout as sleep } from 'node:timers/promises';
import Redis from 'ioredis';
import { spawnRedis, PortTaken } from './redis-server.mjs';

const NODES = 6;
// A node's cluster bus listens on its port + 10000. Ports are drawn below the
// kernel's ephemeral range (32768 up), bus ports included, so that no
// outgoing connection (nor a test's port 0 server) takes one between our
// check and redis-server's listen.
const PORT_FROM = 20000;
const PORT_TO = 22700;
const BUS_OFFSET = 10000;

async function canListen(port) {
  const server = net.createServer();
  server.listen(port, '127.0.0.1');
  try {
    await once(server, 'listening');
  } catch {
    return false;
  }
  server.close();
  await once(server, 'close');
  return true;
}

/** n ports whose bus ports are free too, from a random start. */
async function freePortsWithBus(n) {
  const ports = [];
  const span = PORT_TO - PORT_FROM;
  const start = Math.floor(Math.random() * span);
  for (let i = 0; i < span && ports.length < n; i++) {
    const port = PORT_FROM + ((start + i) % span);
    if ((await canListen(port)) && (await canListen(port + BUS_OFFSET))) ports.push(port);
  }
  if (ports.length < n) throw new Error(`no ${n} free port pairs (port, port + ${BUS_OFFSET}) in ${PORT_FROM}-${PORT_TO}`);
  return ports;
}

/** Polls `check` every 50 ms until it is true; throws `what` after `ms`. */
async function waitFor(check, ms, what) {
  const end = performance.now() + ms;
  for (;;) {
    try {
      if (await check()) return;
    } catch {
      // A node not answering yet counts as not ready.
    }
    if (performance.now() > end) throw new Error(`redis cluster: ${what} after ${ms} ms`);
    await sleep(50);
  }
}

const field = (info, name) => new RegExp(`^${name}:(.*)$`, 'm').exec(info)?.[1]?.trim();

async function start(dir) {
  const ports = await freePortsWithBus(NODES);
  const started = await Promise.allSettled(
    ports.map((port) =>
      spawnRedis(port, [
        '--cluster-enabled', 'yes',
        '--cluster-config-file', join(dir, `nodes-${port}.conf`),
        '--dir', dir,
        // A replica syncs at once, not after the default 5 s wait for more.
        '--repl-diskless-sync-delay', '0',
      ]),
    ),
  );
  const nodes = started.filter((s) => s.status === 'fulfilled').map((s) => s.value);
  const stopNodes = () => Promise.all(nodes.map((n) => n.stop()));
  const admins = [];
  try {
    const failed = started.find((s) => s.status === 'rejected');
    if (failed) throw failed.reason;
    const addresses = ports.map((p) => `127.0.0.1:${p}`);
    try {
      await promisify(execFile)('redis-cli', ['--cluster', 'create', ...addresses, '--cluster-replicas', '1', '--cluster-yes'], { timeout: 30_000 });
    } catch (error) {
      throw new Error(`redis-cli --cluster create failed (${error.code ?? error.signal}): ${(error.stdout || error.stderr || error.message).trim().split('\n').slice(-3).join(' / ')}`);
    }
    for (const n of nodes) admins.push(new Redis(n.url, { lazyConnect: true, maxRetriesPerRequest: 0 }));
    await Promise.all(admins.map((a) => a.connect()));
    await waitFor(
      async () => {
        const infos = await Promise.all(admins.map((a) => a.cluster('INFO')));
        // Not also cluster_known_nodes: a replica may learn of another
        // replica by gossip seconds later, and a node that did not know a
        // primary would miss its slots, so would not be ok.
        return infos.every((i) => field(i, 'cluster_state') === 'ok');
      },
      20_000,
      'not every node has cluster_state:ok',
    );
    const roles = await Promise.all(admins.map((a) => a.info('replication')));
    await waitFor(
      async () => {
        const now = await Promise.all(admins.map((a) => a.info('replication')));
        return now.every((i) => field(i, 'role') === 'master' || field(i, 'master_link_status') === 'up');
      },
      20_000,
      'a replica is not in sync with its primary',
    );
    const primaries = nodes.filter((_, i) => field(roles[i], 'role') === 'master');
    if (primaries.length !== NODES / 2) throw new Error(`redis cluster: ${primaries.length} primaries, expected ${NODES / 2}`);
    return { nodes, primaries };
  } catch (error) {
    await stopNodes();
    throw error;
  } finally {
    for (const a of admins) a.disconnect();
  }
}

/** Starts the cluster; resolves to { nodes: [url], primaries: [url], stop() }. */
export async function startCluster() {
  const dir = mkdtempSync(join(tmpdir(), 'dokebi-bench-cluster-'));
  const removeDir = () => rmSync(dir, { recursive: true, force: true });
  process.once('exit', removeDir);
  for (let attempt = 1; ; attempt++) {
    try {
      const { nodes, primaries } = await start(dir);
      return {
        // Seeds without a database number: a cluster has only database 0.
        nodes: nodes.map((n) => `redis://127.0.0.1:${n.port}`),
        primaries: primaries.map((n) => `redis://127.0.0.1:${n.port}`),
        async stop() {
          await Promise.all(nodes.map((n) => n.stop()));
          removeDir();
          process.off('exit', removeDir);
        },
      };
    } catch (error) {
      // Another process took a port between our check and the listen.
      if (error instanceof PortTaken && attempt < 3) continue;
      removeDir();
      process.off('exit', removeDir);
      throw error;
    }
  }
}

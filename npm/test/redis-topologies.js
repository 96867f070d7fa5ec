// Private Redis deployments for the topology tests: a Sentinel deployment
// (a primary, a replica, three sentinels) and a Redis Cluster (three
// primaries, three replicas), on free loopback ports, stopped at the end.
import { spawn, execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';

/** True when `port` can be bound on loopback now. */
async function free(port) {
  const server = createServer();
  const ok = await new Promise((resolve) => {
    server.once('error', () => resolve(false));
    server.listen(port, '127.0.0.1', () => resolve(true));
  });
  if (ok) await new Promise((resolve) => server.close(resolve));
  return ok;
}

/**
 * `count` free ports whose cluster bus port (port + 10000) is free too, both
 * below the ephemeral range (from 32768 on Linux), where no outgoing
 * connection takes one between this check and the server's bind.
 */
async function freePorts(count, { bus = false } = {}) {
  const ports = [];
  while (ports.length < count) {
    const port = 10000 + Math.floor(Math.random() * 12000);
    if (ports.includes(port) || !(await free(port)) || (bus && !(await free(port + 10000)))) continue;
    ports.push(port);
  }
  return ports;
}

function cli(port, ...args) {
  return execFileSync('redis-cli', ['-p', String(port), ...args], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim();
}

function tryCli(port, ...args) {
  try {
    return cli(port, ...args);
  } catch {
    return '';
  }
}

async function until(what, condition, ms = 20_000) {
  const deadline = Date.now() + ms;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting until ${what}`);
    await sleep(50);
  }
}

/** Starts redis-server with `args`; the process, killed by `stop()`. */
function server(args) {
  const child = spawn('redis-server', args, { stdio: 'ignore' });
  const exited = new Promise((resolve) => child.once('exit', resolve));
  return {
    child,
    async stop() {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
      await exited;
    },
  };
}

/**
 * A primary, a replica and three sentinels (quorum 2, down after 1 s).
 * `{ nodes, primaryName, primaryPort(), killPrimary(), stop() }`.
 */
export async function startSentinel() {
  const dir = mkdtempSync(join(tmpdir(), 'dokebi-sentinel-'));
  const [primary, replica, ...sentinelPorts] = await freePorts(5);
  // A replica writes the primary's snapshot to its working directory.
  const common = ['--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', dir];
  const data = new Map([
    [primary, server(['--port', String(primary), ...common])],
    [replica, server(['--port', String(replica), ...common, '--replicaof', '127.0.0.1', String(primary)])],
  ]);
  const sentinels = sentinelPorts.map((port) => {
    const conf = join(dir, `sentinel-${port}.conf`);
    writeFileSync(
      conf,
      [
        `port ${port}`,
        'bind 127.0.0.1',
        `dir ${dir}`,
        `sentinel monitor mymaster 127.0.0.1 ${primary} 2`,
        'sentinel down-after-milliseconds mymaster 1000',
        'sentinel failover-timeout mymaster 5000',
        '',
      ].join('\n'),
    );
    return server([conf, '--sentinel']);
  });
  const deployment = {
    nodes: sentinelPorts.map((port) => `redis://127.0.0.1:${port}`),
    primaryName: 'mymaster',
    /** The port the sentinels name as primary now. */
    primaryPort() {
      return Number(tryCli(sentinelPorts[0], 'SENTINEL', 'get-master-addr-by-name', 'mymaster').split('\n')[1]);
    },
    /** Kills the primary (SIGKILL) and waits until the sentinels name another. */
    async killPrimary() {
      const old = deployment.primaryPort();
      await data.get(old).stop();
      await until('the sentinels promote the replica', () => {
        const now = deployment.primaryPort();
        return now && now !== old && /role:master/.test(tryCli(now, 'INFO', 'replication'));
      });
    },
    async stop() {
      await Promise.all([...data.values(), ...sentinels].map((process) => process.stop()));
      rmSync(dir, { recursive: true, force: true });
    },
  };
  try {
    await until('the replica is in sync', () => /master_link_status:up/.test(tryCli(replica, 'INFO', 'replication')));
    await until('every sentinel sees the replica and the other sentinels', () =>
      sentinelPorts.every((port) => {
        const master = tryCli(port, 'SENTINEL', 'master', 'mymaster');
        return /num-slaves\n1/.test(master) && /num-other-sentinels\n2/.test(master);
      }),
    );
  } catch (error) {
    await deployment.stop();
    throw error;
  }
  return deployment;
}

/**
 * Three primaries and three replicas (cluster-node-timeout 1 s).
 * `{ nodes, stop() }`.
 */
export async function startCluster() {
  const dir = mkdtempSync(join(tmpdir(), 'dokebi-cluster-'));
  const ports = await freePorts(6, { bus: true });
  const nodes = ports.map((port) =>
    server([
      '--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', dir,
      '--cluster-enabled', 'yes', '--cluster-config-file', join(dir, `nodes-${port}.conf`), '--cluster-node-timeout', '1000',
    ]),
  );
  const cluster = {
    nodes: ports.map((port) => `redis://127.0.0.1:${port}`),
    async stop() {
      await Promise.all(nodes.map((node) => node.stop()));
      rmSync(dir, { recursive: true, force: true });
    },
  };
  try {
    await until('every node answers', () => ports.every((port) => tryCli(port, 'PING') === 'PONG'));
    execFileSync('redis-cli', ['--cluster', 'create', ...ports.map((port) => `127.0.0.1:${port}`), '--cluster-replicas', '1', '--cluster-yes'], {
      stdio: 'ignore',
    });
    await until('the cluster is ok on every node', () => ports.every((port) => /cluster_state:ok/.test(tryCli(port, 'CLUSTER', 'INFO'))));
  } catch (error) {
    await cluster.stop();
    throw error;
  }
  return cluster;
}

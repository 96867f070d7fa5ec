// A private redis-server for one benchmark run: a free port, no persistence,
// stopped when the run ends (also on failure or Ctrl-C). The cluster and the
// replicated pair (redis-cluster.mjs, redis-replicated.mjs) start theirs
// through spawnRedis too, and so do the Sentinel deployment's
// (redis-sentinel.mjs); in the pinned mode all of them on the servers' core.
import { spawn } from 'node:child_process';
import net from 'node:net';
import { once } from 'node:events';
import { redisServerCommand, checkPinned, SERVER_CORE } from './pin.mjs';

/** Options every private server runs with: loopback only, nothing on disk. */
export const PRIVATE = ['--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'];

export async function freePort() {
  const server = net.createServer();
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address();
  server.close();
  await once(server, 'close');
  return port;
}

/** Thrown when a server could not listen on its port (or its cluster bus
 *  port): another process took it after we saw it free, so try other ports. */
export class PortTaken extends Error {}

// What a server prints once it accepts connections; a sentinel prints no
// such line, its ID once it runs.
const READY = /Ready to accept connections|Sentinel ID is/;

/** Starts redis-server on `port` with PRIVATE and `args`, after `config` (a
 *  config file, which a sentinel needs to rewrite) when given; resolves to
 *  { port, url, stop() } once it accepts connections. */
export async function spawnRedis(port, args = [], { config } = {}) {
  const [command, argv] = redisServerCommand([...(config ? [config] : []), '--port', String(port), ...PRIVATE, ...args]);
  const child = spawn(command, argv, {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const kill = () => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
  };
  process.once('exit', kill);
  let log = '';
  try {
    await new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`redis-server on port ${port} did not start:\n${log}`)), 10_000);
      child.once('error', (error) => {
        clearTimeout(timer);
        reject(error);
      });
      child.stdout.on('data', (chunk) => {
        log += chunk;
        if (READY.test(log)) {
          clearTimeout(timer);
          resolve();
        }
      });
      child.once('exit', (code) => {
        clearTimeout(timer);
        const Err = /Address already in use/.test(log) ? PortTaken : Error;
        reject(new Err(`redis-server on port ${port} exited with ${code}:\n${log}`));
      });
    });
    checkPinned('redis-server', child.pid, SERVER_CORE);
  } catch (error) {
    kill();
    process.off('exit', kill);
    throw error;
  }
  child.stdout.resume();
  return {
    port,
    url: `redis://127.0.0.1:${port}/0`,
    async stop() {
      kill();
      if (child.exitCode === null && child.signalCode === null) await once(child, 'exit');
      process.off('exit', kill);
    },
  };
}

/** Starts the run's redis-server on a free port. */
export async function startRedis() {
  return spawnRedis(await freePort());
}
